//! The webhook outbox of `VideoStore`: each status change enqueued exactly once (whoever tries,
//! and only while the task is in it), unannounced changes found again, deliveries claimed with a
//! lease, retried, given up, and every attempt recorded in order. SQLite always; PostgreSQL (a
//! private schema) when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use std::sync::Arc;

use common::{TestDb, name, new_task, usd, user_with};
use domain::ports::StoreError;
use domain::{
    ClaimShare, Clock, DeliveryAttempt, TaskEvent, TaskId, TaskStatus, Timestamp, UserId, VideoStore, WebhookDelivery,
};
use store::Store;

/// The stores' fixed "now".
const T: i64 = 1_795_300_000_000;
/// The hold of every test task, in micro-USD.
const HOLD: i64 = common::VIDEO_HOLD;
const HOOK: &str = "https://hooks.example.com/in";

#[derive(Debug)]
struct Fixed;

impl Clock for Fixed {
    fn now(&self) -> Timestamp {
        Timestamp(T)
    }
}

async fn open(db: &TestDb) -> Store {
    db.open().await.with_clock(Arc::new(Fixed))
}

async fn enqueue(store: &Store, task: &TaskId, status: TaskStatus) -> bool {
    let event = format!("task.{status}");
    let payload = format!(r#"{{"type":"{event}","task":{{"id":"{}"}}}}"#, task.as_str());
    store.enqueue_webhook(task, status, HOOK, &event, &payload).await.expect("enqueue")
}

async fn unannounced(store: &Store) -> Vec<TaskId> {
    store.unannounced_tasks(100).await.expect("unannounced").into_iter().map(|t| t.id).collect()
}

async fn claim(store: &Store, owner: &str, now: i64) -> Vec<WebhookDelivery> {
    store
        .claim_deliveries(owner, Timestamp(now), Timestamp(now + 60_000), &ClaimShare::up_to(10))
        .await
        .expect("claim deliveries")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_status_is_enqueued_once_and_only_while_current() {
    for db in TestDb::all("webhook_once").await {
        let stores = [open(&db).await, open(&db).await];
        let store = &stores[0];
        let db_name = name(store);
        let alice = user_with(store, usd(1_000_000)).await;
        let t = common::open_video_task(store, &alice, 1, Some(HOOK)).await;
        let quiet = common::open_video_task(store, &alice, 1, None).await;
        assert!(!enqueue(store, &t, TaskStatus::Submitting).await, "{db_name}: creation is not announced");
        assert!(!enqueue(store, &t, TaskStatus::Queued).await, "{db_name}: not the task's status");
        assert!(unannounced(store).await.is_empty(), "{db_name}: nothing to announce yet");

        common::video_step(store, &alice, &t, TaskStatus::Submitting, TaskEvent::Accepted).await;
        common::video_step(store, &alice, &quiet, TaskStatus::Submitting, TaskEvent::Accepted).await;
        assert_eq!(unannounced(store).await, std::slice::from_ref(&t), "{db_name}: only tasks with a webhook URL");
        let mut tries = tokio::task::JoinSet::new();
        for i in 0..16 {
            let (store, t) = (stores[i % 2].clone(), t.clone());
            tries.spawn(async move { enqueue(&store, &t, TaskStatus::Queued).await });
        }
        let mut enqueued = 0;
        while let Some(done) = tries.join_next().await {
            enqueued += usize::from(done.expect("join"));
        }
        assert_eq!(enqueued, 1, "{db_name}: one of sixteen tries enqueues");
        assert!(unannounced(store).await.is_empty(), "{db_name}: announced");
        assert!(!enqueue(store, &t, TaskStatus::Processing).await, "{db_name}: the task is queued");

        // Two changes before anyone announced: only the current status is announced.
        common::video_step(store, &alice, &t, TaskStatus::Queued, TaskEvent::Started).await;
        common::video_step(store, &alice, &t, TaskStatus::Processing, TaskEvent::Succeeded).await;
        let found = store.unannounced_tasks(100).await.expect("unannounced");
        assert_eq!(found.len(), 1, "{db_name}");
        assert_eq!((&found[0].id, found[0].status), (&t, TaskStatus::Succeeded), "{db_name}: the full task");
        assert_eq!(found[0].billing.estimated, usd(HOLD), "{db_name}: with its billing");
        assert_eq!(store.unannounced_tasks(0).await.map(|v| v.len()), Ok(0), "{db_name}: limit 0");
        assert!(!enqueue(store, &t, TaskStatus::Processing).await, "{db_name}: a status already left");
        assert!(enqueue(store, &t, TaskStatus::Succeeded).await, "{db_name}");
        assert!(!enqueue(store, &t, TaskStatus::Succeeded).await, "{db_name}: once");
        assert!(unannounced(store).await.is_empty(), "{db_name}");
        let missing = store.enqueue_webhook(&new_task(), TaskStatus::Queued, HOOK, "task.queued", "{}").await;
        assert_eq!(missing, Ok(false), "{db_name}: an unknown task enqueues nothing");

        // One delivery of a task at a time, in the order enqueued: the later one waits while the
        // earlier one is being attempted.
        let due = claim(store, "w", T).await;
        let events: Vec<&str> = due.iter().map(|d| d.event.as_str()).collect();
        assert_eq!(events, ["task.queued"], "{db_name}: the first enqueued, alone");
        let first = &due[0];
        assert_eq!((first.task_id.as_ref(), &first.user_id, first.url.as_str()), (Some(&t), &alice, HOOK), "{db_name}");
        assert_eq!((first.attempts, first.created_at), (0, Timestamp(T)), "{db_name}");
        assert!(first.payload.contains(r#""type":"task.queued""#), "{db_name}: {}", first.payload);
        assert!(claim(&stores[1], "w2", T).await.is_empty(), "{db_name}: the next waits for the first's attempt");
        store.record_delivery(first.id, attempt(Some(204), T, None), true, None).await.expect("delivered");
        let next = claim(&stores[1], "w2", T).await;
        let events: Vec<&str> = next.iter().map(|d| d.event.as_str()).collect();
        assert_eq!(events, ["task.succeeded"], "{db_name}: then the next");
        for store in stores {
            store.close().await.expect("close");
        }
        db.cleanup().await;
    }
}

fn attempt(status: Option<u16>, at: i64, error: Option<&str>) -> DeliveryAttempt {
    DeliveryAttempt { status, latency_ms: 25, error: error.map(str::to_owned), at: Timestamp(at) }
}

#[tokio::test]
async fn deliveries_are_leased_retried_given_up_and_logged() {
    for db in TestDb::all("webhook_retry").await {
        let store = open(&db).await;
        let db_name = name(&store);
        let alice = user_with(&store, usd(1_000_000)).await;
        let t = common::open_video_task(&store, &alice, 1, Some(HOOK)).await;
        common::video_step(&store, &alice, &t, TaskStatus::Submitting, TaskEvent::Accepted).await;
        assert!(enqueue(&store, &t, TaskStatus::Queued).await);

        assert!(claim(&store, "w1", T - 1).await.is_empty(), "{db_name}: due at its enqueue time");
        let claimed = claim(&store, "w1", T).await;
        assert_eq!(claimed.len(), 1, "{db_name}");
        let id = claimed[0].id;
        assert!(claim(&store, "w2", T + 59_999).await.is_empty(), "{db_name}: leased");
        // The holder renews its lease while the attempt runs; nobody else can.
        assert_eq!(store.renew_delivery_lease(id, "w2", Timestamp(T + 90_000)).await, Ok(false), "{db_name}");
        assert_eq!(store.renew_delivery_lease(id, "w1", Timestamp(T + 70_000)).await, Ok(true), "{db_name}");
        assert!(claim(&store, "w2", T + 69_999).await.is_empty(), "{db_name}: renewed");
        assert_eq!(store.renew_delivery_lease(id, "w1", Timestamp(T + 60_000)).await, Ok(true), "{db_name}");

        // A 500: retried at the given time, lease released.
        let failed = attempt(Some(500), T + 10, Some("HTTP 500"));
        store.record_delivery(id, failed.clone(), false, Some(Timestamp(T + 1_000))).await.expect("record");
        assert!(claim(&store, "w2", T + 999).await.is_empty(), "{db_name}: not due yet");
        let again = claim(&store, "w2", T + 1_000).await;
        assert_eq!(again.iter().map(|d| (d.id, d.attempts)).collect::<Vec<_>>(), [(id, 1)], "{db_name}");

        // w2 stops answering: its lease expires and w3 takes the delivery over.
        assert!(claim(&store, "w3", T + 60_999).await.is_empty(), "{db_name}: w2's lease holds");
        assert_eq!(claim(&store, "w3", T + 61_000).await.len(), 1, "{db_name}: lease expired");
        let refused = attempt(None, T + 61_010, Some("connection refused"));
        store.record_delivery(id, refused.clone(), false, None).await.expect("give up");
        assert!(claim(&store, "w4", T + 86_400_000).await.is_empty(), "{db_name}: given up");

        // The next status: delivered on the first attempt, never claimed again.
        common::video_step(&store, &alice, &t, TaskStatus::Queued, TaskEvent::Cancel).await;
        assert!(enqueue(&store, &t, TaskStatus::Cancelled).await);
        let next = claim(&store, "w1", T + 100_000).await;
        assert_eq!(next.iter().map(|d| d.event.as_str()).collect::<Vec<_>>(), ["task.cancelled"], "{db_name}");
        let ok = attempt(Some(204), T + 100_010, None);
        store.record_delivery(next[0].id, ok.clone(), true, None).await.expect("delivered");
        assert!(claim(&store, "w1", T + 86_400_000).await.is_empty(), "{db_name}: delivered");

        let log = store.delivery_attempts(&t).await.expect("attempts");
        let expected =
            vec![("task.queued".to_owned(), failed), ("task.queued".into(), refused), ("task.cancelled".into(), ok)];
        assert_eq!(log, expected, "{db_name}: every attempt, oldest first");
        assert_eq!(store.delivery_attempts(&new_task()).await, Ok(vec![]), "{db_name}");
        let unknown = store.record_delivery(id + 1_000, attempt(Some(200), T, None), true, None).await;
        assert!(matches!(unknown, Err(StoreError::NotFound(_))), "{db_name}: {unknown:?}");
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_delivery_claim_takes_one_per_task_within_each_users_share() {
    for db in TestDb::all("webhook_share").await {
        let store = open(&db).await;
        let db_name = name(&store);
        let (busy, quiet) = (user_with(&store, usd(1_000_000)).await, user_with(&store, usd(1_000_000)).await);
        let mut busy_tasks = Vec::new();
        for _ in 0..4 {
            let t = common::open_video_task(&store, &busy, 1, Some(HOOK)).await;
            common::video_step(&store, &busy, &t, TaskStatus::Submitting, TaskEvent::Accepted).await;
            assert!(enqueue(&store, &t, TaskStatus::Queued).await);
            common::video_step(&store, &busy, &t, TaskStatus::Queued, TaskEvent::Started).await;
            assert!(enqueue(&store, &t, TaskStatus::Processing).await);
            busy_tasks.push(t);
        }
        let t = common::open_video_task(&store, &quiet, 1, Some(HOOK)).await;
        common::video_step(&store, &quiet, &t, TaskStatus::Submitting, TaskEvent::Accepted).await;
        assert!(enqueue(&store, &t, TaskStatus::Queued).await);
        let claim_with = |owner: &'static str, limit, per_user, busy_now: Vec<(UserId, u64)>| {
            let store = store.clone();
            async move {
                let share = ClaimShare { limit, per_user, busy: busy_now };
                store.claim_deliveries(owner, Timestamp(T), Timestamp(T + 60_000), &share).await.expect("claim")
            }
        };
        // The busy user is at its share: only the quiet user's delivery.
        let got = claim_with("w1", 10, 2, vec![(busy.clone(), 2)]).await;
        assert_eq!(got.iter().map(|d| d.task_id.as_ref()).collect::<Vec<_>>(), [Some(&t)], "{db_name}");
        // Then two of the busy user's, the first of two tasks each.
        let got = claim_with("w1", 10, 2, vec![(quiet.clone(), 1)]).await;
        assert_eq!(got.len(), 2, "{db_name}: {got:?}");
        assert!(got.iter().all(|d| d.user_id == busy && d.event == "task.queued"), "{db_name}: {got:?}");
        assert_ne!(got[0].task_id, got[1].task_id, "{db_name}: one per task");
        // The other two tasks' first deliveries; none of a task whose first is being attempted.
        let rest = claim_with("w2", 10, 10, vec![]).await;
        assert_eq!(rest.len(), 2, "{db_name}: {rest:?}");
        assert!(rest.iter().all(|d| d.event == "task.queued" && got.iter().all(|g| g.task_id != d.task_id)));
        assert!(claim_with("w2", 10, 10, vec![]).await.is_empty(), "{db_name}: the rest wait");
        store.close().await.expect("close");
        db.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_claimers_share_the_outbox_without_overlap() {
    const TASKS: usize = 30;
    for db in TestDb::all("webhook_race").await {
        let stores = [open(&db).await, open(&db).await];
        let db_name = name(&stores[0]);
        let alice = user_with(&stores[0], usd(1_000_000)).await;
        for _ in 0..TASKS {
            let t = common::open_video_task(&stores[0], &alice, 1, Some(HOOK)).await;
            common::video_step(&stores[0], &alice, &t, TaskStatus::Submitting, TaskEvent::Accepted).await;
            assert!(enqueue(&stores[0], &t, TaskStatus::Queued).await);
        }
        let mut claimers = tokio::task::JoinSet::new();
        for (store, owner) in stores.iter().cloned().zip(["left", "right"]) {
            claimers.spawn(async move {
                let mut mine = Vec::new();
                for _ in 0..1_000 {
                    let share = ClaimShare::up_to(3);
                    let batch = store.claim_deliveries(owner, Timestamp(T), Timestamp(T + 60_000), &share).await;
                    let batch = batch.unwrap_or_else(|e| panic!("{owner}: {e}"));
                    if batch.is_empty() {
                        break;
                    }
                    mine.extend(batch.into_iter().map(|d| d.id));
                    tokio::task::yield_now().await;
                }
                mine
            });
        }
        let mut all = Vec::new();
        while let Some(mine) = claimers.join_next().await {
            all.extend(mine.expect("a claimer panicked"));
        }
        all.sort_unstable();
        let total = all.len();
        all.dedup();
        assert_eq!((total, all.len()), (TASKS, TASKS), "{db_name}: every delivery claimed once");
        for store in stores {
            store.close().await.expect("close");
        }
        db.cleanup().await;
    }
}
