//! The store's batched writer beyond the shared conformance suite: batches that mix refused and
//! accepted operations, duplicate task ids inside one batch, two pools on one database, and
//! migrations. SQLite always; PostgreSQL (a private schema) when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use billing::{CallBook, Ledger, LedgerError};
use common::{TestDb, new_task, usd, user_with};
use domain::{LedgerKind, UsdAmount, UserId};
use store::Store;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_operations_do_not_fail_their_batch() {
    for db in TestDb::all("neighbours").await {
        let store = db.open().await;
        let alice = user_with(&store, usd(1_000)).await;
        let taken = new_task();
        store.reserve(&alice, &taken, usd(1)).await.expect("first hold");
        let ghost = UserId("usr_missing".into());
        // 60 operations at once: every third is refused for its own reason, the rest must pass.
        let mut handles = Vec::new();
        for n in 0..60 {
            let (store, alice, ghost, taken) = (store.clone(), alice.clone(), ghost.clone(), taken.clone());
            handles.push(tokio::spawn(async move {
                let ok = match n % 6 {
                    0 => store.reserve(&ghost, &new_task(), usd(1)).await.is_ok(),
                    1 => store.reserve(&alice, &new_task(), usd(10)).await.is_ok(),
                    2 => store.reserve(&alice, &taken, usd(1)).await.is_ok(),
                    3 => store.credit(&alice, usd(5), LedgerKind::Topup, "top").await.is_ok(),
                    4 => store.settle(&new_task(), usd(1)).await.is_ok(),
                    _ => store.credit(&alice, usd(-2), LedgerKind::Adjustment, "adj").await.is_ok(),
                };
                (n % 6, ok)
            }));
        }
        for h in handles {
            let (kind, ok) = h.await.expect("join");
            assert_eq!(ok, matches!(kind, 1 | 3 | 5), "{}: operation kind {kind}", common::name(&store));
        }
        // 1000 − 1 − 10×10 + 5×10 − 2×10
        assert_eq!(common::balance_is_ledger_sum(&store, &alice).await, usd(929));
        db.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_task_id_opened_many_times_at_once_opens_once() {
    for db in TestDb::all("dupes").await {
        let store = db.open().await;
        let alice = user_with(&store, usd(1_000)).await;
        let same = new_task();
        let mut handles = Vec::new();
        for n in 0..20 {
            let (store, alice) = (store.clone(), alice.clone());
            let id = if n % 2 == 0 { same.clone() } else { new_task() };
            handles.push(tokio::spawn(async move {
                let task = common::call_task(&alice, &id);
                (n % 2 == 0, store.open_call(task, usd(7)).await)
            }));
        }
        let (mut same_ok, mut others_ok) = (0, 0);
        for h in handles {
            match h.await.expect("join") {
                (true, Ok(_)) => same_ok += 1,
                (true, Err(LedgerError::DuplicateReservation(t))) => assert_eq!(t, same),
                (false, Ok(_)) => others_ok += 1,
                (is_same, Err(e)) => panic!("{}: same={is_same}: {e}", common::name(&store)),
            }
        }
        assert_eq!((same_ok, others_ok), (1, 10), "{}", common::name(&store));
        assert_eq!(common::balance_is_ledger_sum(&store, &alice).await, usd(1_000 - 7 * 11));
        db.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pools_on_one_database_cannot_overdraw() {
    // Two stores (two pools, two writers) stand in for two replicas sharing one database.
    for db in TestDb::all("pools").await {
        let a = db.open().await;
        let b = Store::open(&db.url).await.expect("second store");
        let user = user_with(&a, usd(10_000_000)).await;
        let mut handles = Vec::new();
        for i in 0..100 {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            let user = user.clone();
            handles.push(tokio::spawn(async move { store.reserve(&user, &new_task(), usd(250_000)).await.is_ok() }));
        }
        let mut ok = 0;
        for h in handles {
            ok += usize::from(h.await.expect("join"));
        }
        assert_eq!(ok, 40, "{}", common::name(&a));
        assert_eq!(common::balance_is_ledger_sum(&b, &user).await, UsdAmount::ZERO);
        // Two users on two pools open calls with one task id: the pools do not share a user
        // lock, so on PostgreSQL the loser meets the unique key, retries, and is refused.
        let (carol, dave) = (user_with(&a, usd(100)).await, user_with(&b, usd(100)).await);
        for _ in 0..5 {
            let same = new_task();
            let (x, y) = tokio::join!(
                a.open_call(common::call_task(&carol, &same), usd(1)),
                b.open_call(common::call_task(&dave, &same), usd(1))
            );
            assert!(x.is_ok() != y.is_ok(), "{}: exactly one opens: {x:?} {y:?}", common::name(&a));
            for r in [x, y] {
                assert!(matches!(r, Ok(_) | Err(LedgerError::DuplicateReservation(_))), "{r:?}");
            }
        }
        let spent = common::balance_is_ledger_sum(&a, &carol).await.micros()
            + common::balance_is_ledger_sum(&a, &dave).await.micros();
        assert_eq!(spent, 200 - 5);
        db.cleanup().await;
    }
}

/// Settlements that charge exactly their hold leave the balance as it was, yet each reports the
/// balance after it and appends an entry with it: while another pool (another replica) credits
/// the same account, that balance must still be the one at the settlement's commit, so the
/// ledger's running balance never skips a credit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exact_settlements_racing_another_pools_credits_keep_the_running_balance() {
    use std::sync::atomic::{AtomicBool, Ordering};
    for db in TestDb::all("exact").await {
        let a = db.open().await;
        let b = Store::open(&db.url).await.expect("second store");
        let user = user_with(&a, usd(10_000_000)).await;
        let tasks: Vec<_> = (0..600).map(|_| new_task()).collect();
        for t in &tasks {
            a.reserve(&user, t, usd(100)).await.expect("hold");
        }
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let mut crediters = Vec::new();
        for _ in 0..4 {
            let (b, user, stop) = (b.clone(), user.clone(), stop.clone());
            crediters.push(tokio::spawn(async move {
                let mut n = 0_i64;
                // Bounded: stops with the settlements, or after 5,000 credits.
                while !stop.load(Ordering::Relaxed) && n < 5_000 {
                    b.credit(&user, usd(1), LedgerKind::Topup, "meanwhile").await.expect("credit");
                    n += 1;
                }
                n
            }));
        }
        let mut settles = Vec::new();
        for t in tasks {
            let a = a.clone();
            settles.push(tokio::spawn(async move { a.settle(&t, usd(100)).await }));
        }
        for s in settles {
            s.await.expect("join").expect("exact settlement");
        }
        stop.store(true, Ordering::Relaxed);
        let mut credits = 0;
        for c in crediters {
            credits += c.await.expect("join");
        }
        // 10 USD − 600 × 100 µ held and charged + the credits; every entry's running balance checked.
        assert_eq!(common::balance_is_ledger_sum(&a, &user).await, usd(10_000_000 - 60_000 + credits));
        db.cleanup().await;
    }
}

#[tokio::test]
async fn migrations_are_idempotent() {
    for db in TestDb::all("migrate").await {
        let store = db.open().await;
        assert_eq!(store.migrate().await.expect("second run"), 0);
        db.cleanup().await;
    }
}

#[tokio::test]
async fn in_memory_sqlite_is_refused() {
    let err = Store::connect("sqlite::memory:").await.map(drop);
    assert!(matches!(err, Err(domain::ports::StoreError::Invalid(_))), "{err:?}");
}

/// The PostgreSQL writer keeps its connection from batch to batch. When the server ends that
/// connection (a restart, an operator's `pg_terminate_backend`), the batch that finds out fails
/// like any batch on a broken connection, and the writer's next batch runs on a fresh one.
/// Runs in a database of its own: ending its connections must not touch other tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_writer_reconnects_after_its_connection_is_ended() {
    use sea_orm::ConnectionTrait;
    let Some(base) = testkit::pg::required_url("the_postgres_writer_reconnects_after_its_connection_is_ended") else {
        return;
    };
    let name = format!("gw_reconnect_{}", uuid::Uuid::new_v4().simple());
    let admin = sea_orm::Database::connect(base.as_str()).await.expect("admin connection");
    admin.execute_unprepared(&format!("CREATE DATABASE {name}")).await.expect("create database");
    let (server, query) = base.split_once('?').map_or((base.as_str(), ""), |(s, q)| (s, q));
    let server = server.rsplit_once('/').map_or(server, |(s, _)| s);
    let url = if query.is_empty() { format!("{server}/{name}") } else { format!("{server}/{name}?{query}") };

    // Run on a task of its own so that the database is dropped even when the check fails.
    let body = tokio::spawn(ended_writer_connection(url, name.clone()));
    let outcome = body.await;
    let _ = admin.execute_unprepared(&format!("DROP DATABASE {name} WITH (FORCE)")).await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

async fn ended_writer_connection(url: String, name: String) {
    use sea_orm::ConnectionTrait;
    let admin = sea_orm::Database::connect(url.as_str()).await.expect("second connection");
    let store = Store::open(&url).await.expect("store");
    let alice = user_with(&store, usd(1_000)).await;
    store.credit(&alice, usd(1), LedgerKind::Topup, "before").await.expect("first batch");
    admin
        .execute_unprepared(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' \
             AND application_name = '{}'",
            store::WRITER_APPLICATION_NAME
        ))
        .await
        .expect("end the writer's connection");

    // The batch that meets the ended connection may fail; the writer then reconnects.
    let mut failed = 0;
    while store.credit(&alice, usd(1), LedgerKind::Topup, "after").await.is_err() {
        failed += 1;
        assert!(failed < 3, "the writer did not reconnect");
    }
    for _ in 0..10 {
        store.credit(&alice, usd(1), LedgerKind::Topup, "after").await.expect("later batches");
    }
    assert_eq!(common::balance_is_ledger_sum(&store, &alice).await, usd(1_012));
    drop(store);
    admin.close().await.ok();
}

/// The overview's `spent` is a running total the write path keeps with the balance: it counts what
/// settlements charged (also a settlement that charged exactly its hold, which leaves the balance
/// as it was, and one that charged nothing), never a refund; concurrent settlements all count. A
/// database from before the total (migration 0009) starts it from its settled reservations.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spent_is_a_running_total_of_settled_charges() {
    use domain::ports::TaskStore;
    use sea_orm::ConnectionTrait;
    for db in TestDb::all("spent").await {
        let store = db.open().await;
        let alice = user_with(&store, usd(100_000)).await;
        let bob = user_with(&store, usd(100_000)).await;
        let spent = |store: Store, user: UserId| async move { store.task_stats(&user).await.expect("stats").spent };
        assert_eq!(spent(store.clone(), alice.clone()).await, UsdAmount::ZERO);
        let (partial, exact, refunded, free) = (new_task(), new_task(), new_task(), new_task());
        for (task, hold) in [(&partial, 1_000), (&exact, 500), (&refunded, 300), (&free, 200)] {
            store.open_call(common::call_task(&alice, task), usd(hold)).await.expect("open");
        }
        store.settle(&partial, usd(400)).await.expect("partial");
        store.settle(&exact, usd(500)).await.expect("exact");
        store.refund(&refunded).await.expect("refund");
        store.settle(&free, UsdAmount::ZERO).await.expect("free");
        assert_eq!(spent(store.clone(), alice.clone()).await, usd(900), "{}", common::name(&store));
        // 40 calls of Bob's settled at once, in whatever batches they fall into.
        let mut handles = Vec::new();
        for n in 0..40_i64 {
            let (store, bob) = (store.clone(), bob.clone());
            handles.push(tokio::spawn(async move {
                let task = new_task();
                store.open_call(common::call_task(&bob, &task), usd(100)).await.expect("open");
                store.settle(&task, usd(n)).await.expect("settle");
            }));
        }
        for h in handles {
            h.await.expect("task");
        }
        assert_eq!(spent(store.clone(), bob.clone()).await, usd((0..40).sum()), "{}", common::name(&store));
        assert_eq!(spent(store.clone(), alice.clone()).await, usd(900), "another user's calls do not count");
        common::balance_is_ledger_sum(&store, &alice).await;
        common::balance_is_ledger_sum(&store, &bob).await;

        // Back to the schema before the running total, then forward again.
        store.close().await.expect("close");
        let raw = sea_orm::Database::connect(db.url.as_str()).await.expect("raw connection");
        for sql in ["ALTER TABLE users DROP COLUMN spent_micros", "DELETE FROM schema_migrations WHERE version = 9"] {
            raw.execute_unprepared(sql).await.expect(sql);
        }
        raw.close().await.expect("close raw");
        let store = db.open().await;
        assert_eq!(spent(store.clone(), alice.clone()).await, usd(900), "backfilled");
        assert_eq!(spent(store.clone(), bob.clone()).await, usd((0..40).sum()), "backfilled");
        store.close().await.expect("close");
        db.cleanup().await;
    }
}

/// The spend by day and model and the spend by key count settled calls only (a free one too),
/// never a refunded or an open one, nor another user's (migration 0026 reads them from the
/// ledger's `settle` entries).
#[tokio::test]
async fn settled_spend_by_day_model_and_key_counts_settled_calls_only() {
    use domain::ports::{AccountStore, ManageStore};
    use domain::{ApiKeyId, TaskId};
    for db in TestDb::all("settled_spend").await {
        let store = db.open().await;
        let alice = user_with(&store, usd(100_000)).await;
        let bob = user_with(&store, usd(100_000)).await;
        let task = |user: &UserId, id: &TaskId, model: &str, key: Option<&str>| domain::Task {
            model: model.into(),
            key_id: key.map(|k| ApiKeyId(k.into())),
            ..common::call_task(user, id)
        };
        let [partial, exact, free, refunded, open, other_key, bobs] = std::array::from_fn(|_| new_task());
        for (user, id, model, key, hold) in [
            (&alice, &partial, "m1", Some("key_a"), 1_000),
            (&alice, &exact, "m1", Some("key_a"), 500),
            (&alice, &free, "m2", None, 200),
            (&alice, &refunded, "m1", Some("key_a"), 300),
            (&alice, &open, "m1", Some("key_a"), 700),
            (&alice, &other_key, "m2", Some("key_b"), 90),
            (&bob, &bobs, "m1", Some("key_a"), 100),
        ] {
            store.open_call(task(user, id, model, key), usd(hold)).await.expect("open");
        }
        store.settle(&partial, usd(400)).await.expect("partial");
        store.settle(&exact, usd(500)).await.expect("exact");
        store.settle(&free, UsdAmount::ZERO).await.expect("free");
        store.settle(&other_key, usd(90)).await.expect("other key");
        store.refund(&refunded).await.expect("refund");
        store.settle(&bobs, usd(100)).await.expect("bob's");

        let name = common::name(&store);
        let days = store.daily_spend(&alice, 0, i64::MAX / 2).await.expect("daily spend");
        let by_model: Vec<(String, i64, i64)> =
            days.iter().map(|d| (d.model.clone(), d.spent.micros(), d.calls)).collect();
        assert_eq!(by_model, [("m1".into(), 900, 2), ("m2".into(), 90, 2)], "{name}: {days:?}");
        assert!(days.windows(2).all(|w| w[0].day == w[1].day), "{name}: one day");
        let none = store.daily_spend(&alice, 0, 1).await.expect("an empty range");
        assert!(none.is_empty(), "{name}: {none:?}");

        let keys = store.spend_by_key(&alice).await.expect("spend by key");
        let keys: Vec<(String, i64, i64)> = keys.iter().map(|k| (k.key.0.clone(), k.spent.micros(), k.calls)).collect();
        assert_eq!(keys, [("key_a".into(), 900, 2), ("key_b".into(), 90, 1)], "{name}");
        common::balance_is_ledger_sum(&store, &alice).await;
        db.cleanup().await;
    }
}
