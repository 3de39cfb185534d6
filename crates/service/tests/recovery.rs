//! Calls abandoned by a crash are refunded by the recovery sweep; fresh calls are left alone.

use std::sync::Arc;
use std::time::Duration;

use billing::Ledger;
use domain::ports::{AccountStore, TaskStore};
use domain::{BillingStatus, NewUser, SystemClock, Task, TaskId, TaskStatus, Timestamp, UsdAmount, UserId};
use service::{Gateway, Ports};

/// A running call's task created at `at` (the ledger suite's task with this test's names).
fn task(id: &TaskId, user: &UserId, at: Timestamp) -> Task {
    Task {
        model: "LangA-V4-flash".into(),
        provider: "ark".into(),
        input_mode: None,
        created_at: at,
        updated_at: at,
        ..billing::conformance::running_task(user, id, UsdAmount::ZERO, TaskStatus::Processing)
    }
}

/// The database of one test: a private schema on PostgreSQL when `TEST_DATABASE_URL` is set (like
/// every other test), else a fresh SQLite file; and its URL.
async fn database(name: &str) -> (Option<testkit::pg::Schema>, String) {
    let schema = testkit::pg::Schema::from_env(name).await;
    let url = match &schema {
        Some(schema) => schema.url.clone(),
        None => {
            let dir = std::env::temp_dir().join(format!("{name}-{}", uuid::Uuid::new_v4().simple()));
            format!("sqlite://{}/gw.db?mode=rwc", dir.display())
        }
    };
    (schema, url)
}

#[tokio::test]
async fn interrupted_calls_are_refunded_and_fresh_ones_kept() {
    let (schema, url) = database("gw_recovery").await;
    let store = store::Store::open(&url).await.expect("store");
    let user = testkit::user_id();
    let new_user = NewUser {
        name: "r".into(),
        concurrency_limit: 4,
        ..testkit::new_user(&user, UsdAmount::from_micros(10_000_000))
    };
    store.create_user(new_user).await.expect("user");
    let now = domain::Clock::now(&SystemClock);
    let (old, fresh) = (TaskId(format!("task_old_{}", user)), TaskId(format!("task_new_{}", user)));
    for (id, at) in [(&old, Timestamp(now.millis() - 3_600_000)), (&fresh, now)] {
        store.reserve(&user, id, UsdAmount::from_micros(1_000_000)).await.expect("reserve");
        store.insert_task(task(id, &user, at)).await.expect("task");
    }
    // A third, hour-old call that is still alive (a long stream) touches its task: it is kept.
    let alive = TaskId(format!("task_alive_{}", user));
    store.reserve(&user, &alive, UsdAmount::from_micros(1_000_000)).await.expect("reserve");
    store.insert_task(task(&alive, &user, Timestamp(now.millis() - 3_600_000))).await.expect("task");
    store.touch_task(&alive, now).await.expect("touch");
    let gateway = Gateway::new(Ports::from_store(store.clone(), Arc::new(SystemClock)));
    let ended = gateway.recover_interrupted_calls(Duration::from_secs(600)).await.expect("sweep");
    assert!(ended >= 1, "the hour-old call is ended");
    let old_task = store.task(&user, &old).await.expect("read").expect("exists");
    assert_eq!((old_task.status, old_task.billing.status), (TaskStatus::Failed, BillingStatus::Refunded));
    assert_eq!(old_task.error_code.as_deref(), Some("interrupted"));
    let fresh_task = store.task(&user, &fresh).await.expect("read").expect("exists");
    assert_eq!((fresh_task.status, fresh_task.billing.status), (TaskStatus::Processing, BillingStatus::Reserved));
    let alive_task = store.task(&user, &alive).await.expect("read").expect("exists");
    assert_eq!(alive_task.billing.status, BillingStatus::Reserved, "a touched call is alive");
    assert_eq!(store.balance(&user).await.expect("balance"), UsdAmount::from_micros(8_000_000));
    // A second sweep changes nothing for this user.
    gateway.recover_interrupted_calls(Duration::from_secs(600)).await.expect("sweep");
    assert_eq!(store.balance(&user).await.expect("balance"), UsdAmount::from_micros(8_000_000));
    store.close().await.expect("close");
    if let Some(schema) = schema {
        schema.drop_now().await;
    }
}

/// The sweep of dead replicas' calls never ends a call of the replica that sweeps, even when that
/// replica's own lease ran out (a renewal that load delayed): it renews first. Another replica's
/// call, whose runner holds no lease, is refunded.
#[tokio::test]
async fn the_sweep_of_dead_replicas_spares_its_own_calls() {
    let (schema, url) = database("gw_orphans").await;
    let store = store::Store::open(&url).await.expect("store");
    let user = testkit::user_id();
    store.create_user(testkit::new_user(&user, UsdAmount::from_micros(10_000_000))).await.expect("user");
    let gateway = Gateway::new(Ports::from_store(store.clone(), Arc::new(SystemClock)));
    let hour_ago = Timestamp(domain::Clock::now(&SystemClock).millis() - 3_600_000);
    let (own, dead) = (TaskId(format!("task_own_{user}")), TaskId(format!("task_dead_{user}")));
    for (id, runner) in [(&own, gateway.replica_id().to_owned()), (&dead, "replica-that-died".to_owned())] {
        store.reserve(&user, id, UsdAmount::from_micros(1_000_000)).await.expect("reserve");
        store.insert_task(Task { runner: Some(runner), ..task(id, &user, hour_ago) }).await.expect("task");
    }
    // Neither replica holds a liveness lease now: this one's renewal has not run yet.
    let ended = gateway.recover_orphaned_calls(Duration::from_secs(30)).await.expect("sweep");
    assert_eq!(ended, 1, "only the dead replica's call");
    let own_task = store.task(&user, &own).await.expect("read").expect("exists");
    assert_eq!((own_task.status, own_task.billing.status), (TaskStatus::Processing, BillingStatus::Reserved));
    let dead_task = store.task(&user, &dead).await.expect("read").expect("exists");
    assert_eq!((dead_task.status, dead_task.billing.status), (TaskStatus::Failed, BillingStatus::Refunded));
    assert_eq!(store.balance(&user).await.expect("balance"), UsdAmount::from_micros(9_000_000));
    store.close().await.expect("close");
    if let Some(schema) = schema {
        schema.drop_now().await;
    }
}
