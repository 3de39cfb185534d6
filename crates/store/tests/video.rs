//! `VideoStore` through the store: the worker's claims (due time, leases, terminal states, two
//! claimers on one database), stored media against the quota (at its edges and under
//! concurrency), and webhook secrets. SQLite always; PostgreSQL (a private schema) when
//! `TEST_DATABASE_URL` is set. Tasks are created through the ports, as the gateway creates them.

#![allow(clippy::panic)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use billing::CallBook;
use common::{TestDb, name, new_task, usd, user_with};
use domain::ports::{AssetKind, StoreError};
use domain::{
    ClaimShare, MediaObject, MediaRecordError, NewUser, TaskEvent, TaskId, TaskStatus, Timestamp, UserId, VideoStore,
};
use store::Store;

/// The tests' "now".
const T: i64 = 1_795_300_000_000;
/// The hold every test task reserves, in micro-USD.
const HOLD: i64 = common::VIDEO_HOLD;

async fn claim(store: &Store, owner: &str, now: i64, limit: u64) -> Vec<TaskId> {
    let jobs = store.claim_video_tasks(owner, Timestamp(now), Timestamp(now + 30_000), &ClaimShare::up_to(limit)).await;
    jobs.unwrap_or_else(|e| panic!("{}: claim: {e}", name(store))).into_iter().map(|j| j.task.id).collect()
}

/// Claims `share` at `T` for `owner`: the claimed tasks' owners, in claim order.
async fn claim_shared(store: &Store, owner: &str, share: &ClaimShare) -> Vec<UserId> {
    let jobs = store.claim_video_tasks(owner, Timestamp(T), Timestamp(T + 30_000), share).await;
    jobs.unwrap_or_else(|e| panic!("{}: claim: {e}", name(store))).into_iter().map(|j| j.task.user_id).collect()
}

#[tokio::test]
async fn a_claim_gives_no_user_more_than_its_share_and_skips_users_at_it() {
    for db in TestDb::all("video_share").await {
        let store = db.open().await;
        let db_name = name(&store);
        let (busy, quiet) = (user_with(&store, usd(1_000_000)).await, user_with(&store, usd(1_000_000)).await);
        // The busy user's backlog is older than the quiet user's one task.
        for i in 0..12 {
            common::open_video_task(&store, &busy, T - 1_000 + i, None).await;
        }
        common::open_video_task(&store, &quiet, T - 10, None).await;
        let share = |limit, per_user, busy_now: &[(&UserId, u64)]| ClaimShare {
            limit,
            per_user,
            busy: busy_now.iter().map(|(u, n)| ((*u).clone(), *n)).collect(),
        };
        // A user at its share is skipped: its backlog does not hide the quiet user's task.
        assert_eq!(
            claim_shared(&store, "w", &share(5, 3, &[(&busy, 3)])).await,
            std::slice::from_ref(&quiet),
            "{db_name}"
        );
        // A user partly busy gets what is left of its share; the limit holds over all users.
        assert_eq!(
            claim_shared(&store, "w", &share(5, 3, &[(&busy, 1)])).await,
            [busy.clone(), busy.clone()],
            "{db_name}"
        );
        assert_eq!(claim_shared(&store, "w", &share(5, 3, &[])).await.len(), 3, "{db_name}: a fresh share");
        assert_eq!(claim_shared(&store, "w", &share(2, 3, &[])).await.len(), 2, "{db_name}: the limit");
        assert_eq!(claim_shared(&store, "w", &share(5, 0, &[])).await.len(), 0, "{db_name}: no share");
        // Several busy users at once, one of them above its share (counts may lag a release).
        let other = user_with(&store, usd(1_000_000)).await;
        common::open_video_task(&store, &other, T - 5, None).await;
        common::open_video_task(&store, &other, T - 4, None).await;
        let got = claim_shared(&store, "w", &share(10, 2, &[(&busy, 7), (&other, 1), (&quiet, 1)])).await;
        assert_eq!(got, std::slice::from_ref(&other), "{db_name}: one left of other's share, none of busy's");
        store.close().await.expect("close");
        db.cleanup().await;
    }
}

#[tokio::test]
async fn claims_honour_due_time_leases_and_terminal_states() {
    for db in TestDb::all("video_claims").await {
        let store = db.open().await;
        let db_name = name(&store);
        let alice = user_with(&store, usd(1_000_000)).await;
        let [a, b, c] = [T - 3, T - 2, T - 1];
        let (a, b, c) = (
            common::open_video_task(&store, &alice, a, None).await,
            common::open_video_task(&store, &alice, b, None).await,
            common::open_video_task(&store, &alice, c, None).await,
        );
        // A synchronous call's task is never a video job.
        store.open_call(common::call_task(&alice, &new_task()), usd(HOLD)).await.expect("open a chat call");
        common::video_step(&store, &alice, &b, TaskStatus::Submitting, TaskEvent::Accepted).await;

        assert_eq!(claim(&store, "w1", T, 0).await, Vec::<TaskId>::new(), "{db_name}: limit 0");
        let jobs = store
            .claim_video_tasks("w1", Timestamp(T), Timestamp(T + 30_000), &ClaimShare::up_to(2))
            .await
            .expect("claim");
        let ids: Vec<&TaskId> = jobs.iter().map(|j| &j.task.id).collect();
        assert_eq!(ids, [&a, &b], "{db_name}: never polled, oldest first, up to the limit");
        assert_eq!(jobs[0].task.status, TaskStatus::Submitting);
        assert_eq!(jobs[0].task.billing.estimated, usd(HOLD), "{db_name}: the task comes with its billing");
        assert_eq!(jobs[0].task.prompt.as_deref(), Some("a cat"));
        assert_eq!((jobs[0].upstream_id.as_deref(), jobs[0].poll_failures), (None, 0));
        assert_eq!(jobs[1].upstream_id, Some(format!("cgt-{}", b.as_str())), "{db_name}: upstream id");
        assert_eq!(claim(&store, "w2", T, 10).await, std::slice::from_ref(&c), "{db_name}: leased tasks are skipped");
        assert!(claim(&store, "w2", T + 29_999, 10).await.is_empty(), "{db_name}: leases last until lease_until");

        // Release: only by the lease's owner, and only once.
        let release = |task: TaskId, owner: &'static str, at: i64, failures: u32| {
            let store = store.clone();
            async move { store.release_video_task(&task, owner, Timestamp(at), failures).await }
        };
        assert!(matches!(release(a.clone(), "w2", T, 0).await, Err(StoreError::Conflict(_))), "{db_name}");
        assert_eq!(release(a.clone(), "w1", T + 10_000, 2).await, Ok(()), "{db_name}");
        assert!(matches!(release(a.clone(), "w1", T, 0).await, Err(StoreError::Conflict(_))), "{db_name}: twice");
        assert!(
            matches!(release(new_task(), "w1", T, 0).await, Err(StoreError::Conflict(_))),
            "{db_name}: unknown task"
        );
        assert!(claim(&store, "w2", T + 9_999, 10).await.is_empty(), "{db_name}: not due yet");
        let share = ClaimShare::up_to(10);
        let jobs = store.claim_video_tasks("w2", Timestamp(T + 10_000), Timestamp(T + 40_000), &share).await;
        let jobs = jobs.expect("claim at the due time");
        assert_eq!(jobs.len(), 1, "{db_name}: due at next_poll_at exactly");
        assert_eq!((&jobs[0].task.id, jobs[0].poll_failures), (&a, 2), "{db_name}: failures kept");

        // Expired leases are claimed again; terminal tasks never are.
        common::video_step(&store, &alice, &c, TaskStatus::Submitting, TaskEvent::Failed).await;
        assert_eq!(
            claim(&store, "w3", T + 30_000, 10).await,
            std::slice::from_ref(&b),
            "{db_name}: b's lease expired; c failed"
        );
        common::video_step(&store, &alice, &b, TaskStatus::Queued, TaskEvent::Cancel).await;
        release(b.clone(), "w3", T + 30_001, 0).await.expect("a terminal task's lease is released too");
        assert_eq!(claim(&store, "w4", T + 40_000, 10).await, std::slice::from_ref(&a), "{db_name}: only a is left");
        common::video_step(&store, &alice, &a, TaskStatus::Submitting, TaskEvent::Expire).await;
        assert!(claim(&store, "w5", T + 1_000_000, 10).await.is_empty(), "{db_name}: all terminal");
        db.cleanup().await;
    }
}

#[tokio::test]
async fn only_the_lease_holder_renews_and_a_renewed_lease_is_not_taken_over() {
    for db in TestDb::all("video_renew").await {
        let store = db.open().await;
        let db_name = name(&store);
        let alice = user_with(&store, usd(1_000_000)).await;
        let task = common::open_video_task(&store, &alice, T - 1, None).await;
        assert_eq!(claim(&store, "w1", T, 10).await, std::slice::from_ref(&task), "{db_name}");
        let renew = |owner: &'static str, until: i64| {
            let (store, task) = (store.clone(), task.clone());
            async move { store.renew_video_lease(&task, owner, Timestamp(until)).await.expect("renew") }
        };
        assert!(!renew("w2", T + 90_000).await, "{db_name}: another worker cannot renew");
        assert!(renew("w1", T + 90_000).await, "{db_name}: the holder renews");
        assert!(claim(&store, "w2", T + 89_999, 10).await.is_empty(), "{db_name}: the renewed lease holds");
        assert_eq!(claim(&store, "w2", T + 90_000, 10).await, std::slice::from_ref(&task), "{db_name}: then ends");
        assert!(!renew("w1", T + 200_000).await, "{db_name}: a lease taken over is not renewed by the old holder");
        db.cleanup().await;
    }
}

#[tokio::test]
async fn active_video_tasks_count_per_user_and_per_model() {
    for db in TestDb::all("video_active").await {
        let store = db.open().await;
        let (alice, bob) = (user_with(&store, usd(1_000_000)).await, user_with(&store, usd(1_000_000)).await);
        let a1 = common::open_video_task(&store, &alice, T, None).await;
        let a2 = common::open_video_task(&store, &alice, T, None).await;
        common::open_video_task(&store, &bob, T, None).await;
        store.open_call(common::call_task(&alice, &new_task()), usd(HOLD)).await.expect("a chat call");
        assert_eq!(store.active_video_tasks(&alice, "Videogen-2.0").await, Ok((2, 3)), "{}", name(&store));
        assert_eq!(store.active_video_tasks(&alice, "Other").await, Ok((2, 0)));
        common::video_step(&store, &alice, &a1, TaskStatus::Submitting, TaskEvent::Accepted).await;
        common::video_step(&store, &alice, &a2, TaskStatus::Submitting, TaskEvent::Succeeded).await;
        assert_eq!(store.active_video_tasks(&alice, "Videogen-2.0").await, Ok((1, 2)), "queued counts, done not");
        db.cleanup().await;
    }
}

/// Polls each task `ROUNDS` times from two stores on one database, in parallel: no task is ever
/// held by both, no release is lost, and together they do every poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_claimers_never_hold_one_task_together() {
    const TASKS: u32 = 40;
    const ROUNDS: u32 = 3;
    for db in TestDb::all("video_race").await {
        let stores = [db.open().await, db.open().await];
        let db_name = name(&stores[0]);
        let alice = user_with(&stores[0], usd(1_000_000)).await;
        let mut all = HashSet::new();
        for i in 0..TASKS {
            all.insert(common::open_video_task(&stores[0], &alice, T + i64::from(i), None).await);
        }
        let held: Arc<Mutex<HashMap<TaskId, &'static str>>> = Arc::default();
        let polls: Arc<Mutex<HashMap<TaskId, u32>>> = Arc::default();
        let mut workers = tokio::task::JoinSet::new();
        for (store, owner) in stores.iter().cloned().zip(["left", "right"]) {
            let (held, polls) = (Arc::clone(&held), Arc::clone(&polls));
            workers.spawn(async move {
                for _ in 0..2_000 {
                    let share = ClaimShare::up_to(4);
                    let jobs = store.claim_video_tasks(owner, Timestamp(T), Timestamp(T + 3_600_000), &share).await;
                    let jobs = jobs.unwrap_or_else(|e| panic!("{owner}: claim: {e}"));
                    if jobs.is_empty() && polls.lock().map(|p| p.values().sum::<u32>()).unwrap_or(0) >= TASKS * ROUNDS {
                        break;
                    }
                    for job in jobs {
                        let id = job.task.id.clone();
                        if let Some(other) = held.lock().expect("held").insert(id.clone(), owner) {
                            panic!("{id} claimed by {owner} while {other} holds it");
                        }
                        let done = {
                            let mut polls = polls.lock().expect("polls");
                            let n = polls.entry(id.clone()).or_default();
                            assert_eq!(job.poll_failures, *n, "{id}: a release was lost");
                            *n += 1;
                            *n
                        };
                        held.lock().expect("held").remove(&id);
                        // Due again at once until its last round, then never.
                        let next = if done < ROUNDS { T } else { T + 86_400_000 };
                        store.release_video_task(&id, owner, Timestamp(next), done).await.expect("release");
                    }
                    tokio::task::yield_now().await;
                }
            });
        }
        while let Some(done) = workers.join_next().await {
            done.expect("a claimer panicked");
        }
        let polls = polls.lock().expect("polls").clone();
        assert_eq!(polls.keys().cloned().collect::<HashSet<_>>(), all, "{db_name}: every task was claimed");
        assert!(polls.values().all(|&n| n == ROUNDS), "{db_name}: each task {ROUNDS} times: {polls:?}");
        for store in stores {
            store.close().await.expect("close");
        }
        db.cleanup().await;
    }
}

async fn user_with_quota(store: &Store, quota: i64) -> UserId {
    let user = testkit::new_user(&testkit::user_id(), usd(1_000_000));
    common::create_user(store, NewUser { media_quota_bytes: quota, ..user }).await
}

fn media(user: &UserId, task: &TaskId, position: u32, bytes: u64) -> MediaObject {
    MediaObject {
        key: format!("{}/{}/{position}", user.as_str(), uuid::Uuid::now_v7().simple()),
        user: user.clone(),
        task: task.clone(),
        position,
        kind: AssetKind::Image,
        mime: "image/png".into(),
        bytes,
        source_url: None,
        asset_id: None,
        created_at: Timestamp(T),
    }
}

const QUOTA: u64 = 10_000;

#[tokio::test]
async fn media_quota_is_exact_at_its_edge() {
    for db in TestDb::all("video_media").await {
        let store = db.open().await;
        let db_name = name(&store);
        let task = new_task();
        for (bytes, fits) in [(QUOTA - 1, true), (QUOTA, true), (QUOTA + 1, false)] {
            let user = user_with_quota(&store, 10_000).await;
            let object = media(&user, &task, 0, bytes);
            let added = store.add_media(object.clone()).await;
            if fits {
                assert_eq!(added, Ok(()), "{db_name}: {bytes} bytes fit");
                assert_eq!(store.media_used(&user).await, Ok(bytes));
            } else {
                let refused = MediaRecordError::QuotaExceeded { quota: QUOTA, used: 0, wanted: bytes };
                assert_eq!(added, Err(refused), "{db_name}: {bytes} bytes do not fit");
                assert_eq!(store.media_used(&user).await, Ok(0), "{db_name}: nothing counted");
            }
        }
        // Filling up to the quota one object at a time: the last byte fits, one more does not.
        let user = user_with_quota(&store, 10_000).await;
        let big = media(&user, &task, 1, QUOTA - 1);
        store.add_media(big.clone()).await.expect("quota - 1");
        let last = media(&user, &task, 0, 1);
        store.add_media(last.clone()).await.expect("the last byte");
        let refused = store.add_media(media(&user, &task, 2, 1)).await;
        assert_eq!(refused, Err(MediaRecordError::QuotaExceeded { quota: QUOTA, used: QUOTA, wanted: 1 }), "{db_name}");
        store.add_media(media(&user, &task, 3, 0)).await.expect("an empty object fits a full quota");
        let again = store.add_media(media(&user, &task, 4, 0)).await;
        assert_eq!(again, Ok(()), "{db_name}");
        let duplicate = store.add_media(MediaObject { bytes: 0, ..last.clone() }).await;
        assert!(matches!(duplicate, Err(MediaRecordError::Store(StoreError::Conflict(_)))), "{db_name}: {duplicate:?}");

        // Listed by position; assets recorded; removal gives the bytes back once.
        let listed = store.task_media(&task).await.expect("task media");
        let own: Vec<&MediaObject> = listed.iter().filter(|m| m.user == user).collect();
        assert_eq!(own.iter().map(|m| m.position).collect::<Vec<_>>(), [0, 1, 3, 4], "{db_name}");
        assert_eq!(own[0], &last, "{db_name}: stored as given");
        store.set_media_asset(&big.key, "asset-1").await.expect("set asset");
        let listed = store.task_media(&task).await.expect("task media");
        let stored = listed.iter().find(|m| m.key == big.key).expect("big");
        assert_eq!(stored.asset_id.as_deref(), Some("asset-1"), "{db_name}");
        assert!(matches!(store.set_media_asset("no/such/key", "a").await, Err(StoreError::NotFound(_))));
        store.remove_media(&big.key).await.expect("remove");
        assert_eq!(store.media_used(&user).await, Ok(1), "{db_name}: bytes back");
        store.remove_media(&big.key).await.expect("removing again is no error");
        assert_eq!(store.media_used(&user).await, Ok(1), "{db_name}: bytes back once");
        assert!(store.task_media(&task).await.expect("media").iter().all(|m| m.key != big.key));
        store.add_media(media(&user, &task, 5, QUOTA - 1)).await.expect("the freed bytes can be used again");

        let nobody = UserId("usr_nobody".into());
        let orphan = store.add_media(media(&nobody, &task, 0, 1)).await;
        assert!(matches!(orphan, Err(MediaRecordError::Store(StoreError::NotFound(_)))), "{db_name}: {orphan:?}");
        assert!(matches!(store.media_used(&nobody).await, Err(StoreError::NotFound(_))), "{db_name}");
        db.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_media_never_passes_the_quota() {
    const OBJECTS: u64 = 40;
    for db in TestDb::all("video_media_race").await {
        let stores = [db.open().await, db.open().await];
        let db_name = name(&stores[0]);
        let user = user_with_quota(&stores[0], 10_000).await;
        let task = new_task();
        let mut adds = tokio::task::JoinSet::new();
        for i in 0..OBJECTS {
            let store = stores[usize::from(i % 2 == 1)].clone();
            let object = media(&user, &task, u32::try_from(i).unwrap_or(0), 1_000);
            adds.spawn(async move { store.add_media(object).await });
        }
        let (mut stored, mut refused) = (0, 0);
        while let Some(added) = adds.join_next().await {
            match added.expect("join") {
                Ok(()) => stored += 1,
                Err(MediaRecordError::QuotaExceeded { quota: QUOTA, used, wanted: 1_000 }) if used > 9_000 => {
                    refused += 1
                }
                Err(e) => panic!("{db_name}: {e:?}"),
            }
        }
        assert_eq!((stored, refused), (10, OBJECTS - 10), "{db_name}: exactly the quota is stored");
        assert_eq!(stores[0].media_used(&user).await, Ok(QUOTA), "{db_name}");
        let objects = stores[1].task_media(&task).await.expect("media");
        assert_eq!(objects.len(), 10, "{db_name}: only stored objects are recorded");

        // Removing one object from many tasks at once gives its bytes back once.
        let key = objects[0].key.clone();
        let mut removes = tokio::task::JoinSet::new();
        for i in 0..8 {
            let (store, key) = (stores[i % 2].clone(), key.clone());
            removes.spawn(async move { store.remove_media(&key).await });
        }
        while let Some(removed) = removes.join_next().await {
            assert_eq!(removed.expect("join"), Ok(()), "{db_name}");
        }
        assert_eq!(stores[0].media_used(&user).await, Ok(QUOTA - 1_000), "{db_name}: given back once");
        for store in stores {
            store.close().await.expect("close");
        }
        db.cleanup().await;
    }
}

#[tokio::test]
async fn webhook_secrets_are_set_and_replaced() {
    for db in TestDb::all("video_secret").await {
        let store = db.open().await;
        let user = user_with(&store, usd(0)).await;
        assert_eq!(store.webhook_secret(&user).await, Ok(None), "{}: none until set", name(&store));
        store.set_webhook_secret(&user, "whsec_one").await.expect("set");
        assert_eq!(store.webhook_secret(&user).await, Ok(Some("whsec_one".into())));
        store.set_webhook_secret(&user, "whsec_two").await.expect("replace");
        assert_eq!(store.webhook_secret(&user).await, Ok(Some("whsec_two".into())));
        assert!(matches!(store.set_webhook_secret(&user, "").await, Err(StoreError::Invalid(_))));
        let nobody = UserId("usr_nobody".into());
        assert!(matches!(store.set_webhook_secret(&nobody, "whsec_x").await, Err(StoreError::NotFound(_))));
        assert!(matches!(store.webhook_secret(&nobody).await, Err(StoreError::NotFound(_))));
        db.cleanup().await;
    }
}

#[tokio::test]
async fn expired_media_is_that_of_ended_tasks_and_of_tasks_never_created() {
    for db in TestDb::all("video_media_expiry").await {
        let store = db.open().await;
        let db_name = name(&store);
        let alice = user_with_quota(&store, 1_000_000).await;
        let running = common::open_video_task(&store, &alice, T, None).await;
        let ended = common::open_video_task(&store, &alice, T, None).await;
        common::video_step(&store, &alice, &ended, TaskStatus::Submitting, TaskEvent::Failed).await;
        let (of_running, of_ended, orphan) =
            (media(&alice, &running, 0, 10), media(&alice, &ended, 0, 20), media(&alice, &new_task(), 0, 40));
        for object in [&of_running, &of_ended, &orphan] {
            store.add_media(object.clone()).await.expect("add media");
        }
        let expired = |ended_before: i64, orphaned_before: i64, limit: u64| {
            let store = store.clone();
            async move {
                let keys = store.expired_media(Timestamp(ended_before), Timestamp(orphaned_before), limit).await;
                let mut keys = keys.expect("expired media");
                keys.sort();
                keys
            }
        };
        let far = i64::MAX / 2;
        assert!(expired(0, T, 10).await.is_empty(), "{db_name}: nothing old enough (stored at T, not before)");
        assert_eq!(expired(0, T + 1, 10).await, std::slice::from_ref(&orphan.key), "{db_name}: a task never created");
        assert_eq!(
            expired(far, 0, 10).await,
            std::slice::from_ref(&of_ended.key),
            "{db_name}: an ended task; never a running one"
        );
        let mut both = vec![of_ended.key.clone(), orphan.key.clone()];
        both.sort();
        assert_eq!(expired(far, far, 10).await, both, "{db_name}");
        assert_eq!(expired(far, far, 1).await.len(), 1, "{db_name}: up to the limit");
        // Forgetting an object gives its bytes back.
        assert_eq!(store.media_used(&alice).await, Ok(70), "{db_name}");
        store.remove_media(&of_ended.key).await.expect("remove");
        store.remove_media(&of_ended.key).await.expect("remove twice is no error");
        assert_eq!(store.media_used(&alice).await, Ok(50), "{db_name}: once");
        assert_eq!(expired(far, 0, 10).await, Vec::<String>::new(), "{db_name}");
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_sweep_lease_is_held_by_one_holder_until_it_runs_out() {
    for db in TestDb::all("video_sweep_lease").await {
        let store = db.open().await;
        let db_name = name(&store);
        let take = |holder: &'static str, name: &'static str, now: i64, until: i64| {
            let store = store.clone();
            async move { store.take_sweep_lease(name, holder, Timestamp(now), Timestamp(until)).await.expect("lease") }
        };
        assert!(take("r1", "media", T, T + 1_000).await, "{db_name}: free: taken");
        assert!(!take("r2", "media", T + 500, T + 1_500).await, "{db_name}: held by r1");
        assert!(take("r1", "media", T + 600, T + 2_000).await, "{db_name}: renewed by its holder");
        assert!(!take("r2", "media", T + 1_999, T + 3_000).await, "{db_name}: renewed until T+2000");
        assert!(take("r2", "media", T + 2_000, T + 3_000).await, "{db_name}: ran out at its end: taken over");
        assert!(!take("r1", "media", T + 2_001, T + 4_000).await, "{db_name}: r2's now");
        assert!(take("r1", "other", T + 2_001, T + 4_000).await, "{db_name}: each sweep its own lease");
        db.cleanup().await;
    }
}
