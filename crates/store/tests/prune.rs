//! The prune of the tables that only grow: old rows go and recent ones stay (expired
//! `Idempotency-Key` claims, ended webhook deliveries with their attempts, response owners), pending
//! deliveries and claims whose request may still run are never deleted, batches are bounded, two
//! stores pruning at once share the work, and an expired key is a fresh key again. SQLite always;
//! PostgreSQL (a private schema) when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use billing::CallBook;
use common::{TestDb, name, new_task, usd, user_with};
use domain::ports::{IdempotencyClaim, IdempotencyScope, IdempotencyStore, ResponseOwners};
use domain::{Clock, TaskId, Timestamp, UserId};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement, Value};
use store::{Backend, PrunePolicy, Store};

/// The tests' "now".
const NOW: i64 = 1_795_300_000_000;
const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;
/// The stale age callers pass to `claim` (the default upstream timeout plus five minutes).
const STALE: i64 = 15 * 60_000;

/// A clock the test moves.
#[derive(Debug)]
struct Manual(AtomicI64);

impl Clock for Manual {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

impl Manual {
    fn set(&self, millis: i64) {
        self.0.store(millis, Ordering::SeqCst);
    }
}

async fn open(db: &TestDb) -> (Store, Arc<Manual>) {
    let clock = Arc::new(Manual(AtomicI64::new(NOW)));
    (db.open().await.with_clock(clock.clone()), clock)
}

/// A second connection for writing rows as they would be after days of traffic.
async fn raw(db: &TestDb) -> DatabaseConnection {
    Database::connect(db.url.as_str()).await.unwrap_or_else(|e| panic!("connect {}: {e}", db.url))
}

async fn exec(conn: &DatabaseConnection, sql: &str, values: Vec<Value>) -> u64 {
    let statement = Statement::from_sql_and_values(conn.get_database_backend(), sql, values);
    conn.execute_raw(statement).await.unwrap_or_else(|e| panic!("{sql}: {e}")).rows_affected()
}

async fn count(conn: &DatabaseConnection, sql: &str) -> i64 {
    let statement = Statement::from_string(conn.get_database_backend(), sql.to_owned());
    let row = conn.query_one_raw(statement).await.unwrap_or_else(|e| panic!("{sql}: {e}")).expect("a row");
    row.try_get_by_index::<i64>(0).expect("a count")
}

/// A claim made at `at`, answered or not.
async fn claim_at(conn: &DatabaseConnection, user: &UserId, key: &str, at: i64, answered: bool) {
    let (status, body) = if answered { (Some(200i64), Some("{}".to_owned())) } else { (None, None) };
    exec(
        conn,
        "INSERT INTO idempotency_claims (user_id, route, idem_key, request_hash, task_id, response_status, \
         response_body, created_at) VALUES ($1, 'chat.completions', $2, 'h', NULL, $3, $4, $5)",
        vec![user.as_str().into(), key.into(), status.into(), body.into(), at.into()],
    )
    .await;
}

/// A webhook delivery of `task` created at `at` with `attempts` attempts: delivered, given up, or
/// pending (`None`).
async fn delivery_at(
    conn: &DatabaseConnection,
    task: &TaskId,
    user: &UserId,
    at: i64,
    ended: Option<&str>,
    attempts: i64,
) -> i64 {
    let (delivered, given_up) = match ended {
        Some("delivered") => (Some(at + 1_000), None),
        Some(_) => (None, Some(at + 1_000)),
        None => (None, None),
    };
    let sql = "INSERT INTO webhook_deliveries (task_id, user_id, url, event, payload, attempts, next_attempt_at, \
               delivered_at, given_up_at, created_at) VALUES ($1, $2, 'https://hooks.example.com/in', 'task.queued', \
               '{}', $3, $4, $5, $6, $7) RETURNING id";
    let values: Vec<Value> = vec![
        task.as_str().into(),
        user.as_str().into(),
        attempts.into(),
        at.into(),
        delivered.into(),
        given_up.into(),
        at.into(),
    ];
    let statement = Statement::from_sql_and_values(conn.get_database_backend(), sql, values);
    let row = conn.query_one_raw(statement).await.expect("insert a delivery").expect("its id");
    let id: i64 = row.try_get("", "id").expect("id");
    for n in 1..=attempts {
        exec(
            conn,
            "INSERT INTO webhook_attempts (delivery_id, attempt, status, latency_ms, error, at) \
             VALUES ($1, $2, 500, 10, NULL, $3)",
            vec![id.into(), n.into(), (at + n).into()],
        )
        .await;
    }
    id
}

async fn response_at(conn: &DatabaseConnection, id: &str, user: &UserId, task: &TaskId, at: i64) {
    exec(
        conn,
        "INSERT INTO native_responses (response_id, user_id, task_id, created_at) VALUES ($1, $2, $3, $4)",
        vec![id.into(), user.as_str().into(), task.as_str().into(), at.into()],
    )
    .await;
}

async fn keys_left(conn: &DatabaseConnection) -> Vec<String> {
    let statement = Statement::from_string(
        conn.get_database_backend(),
        "SELECT idem_key FROM idempotency_claims ORDER BY idem_key".to_owned(),
    );
    let rows = conn.query_all_raw(statement).await.expect("claims");
    rows.iter().map(|r| r.try_get::<String>("", "idem_key").expect("key")).collect()
}

/// A task for the deliveries to belong to.
async fn a_task(store: &Store, user: &UserId) -> TaskId {
    let id = new_task();
    store.open_call(common::call_task(user, &id), usd(1)).await.unwrap_or_else(|e| panic!("open: {e}"));
    id
}

fn policy(batch: u64) -> PrunePolicy {
    PrunePolicy {
        idempotency_ttl: Duration::from_secs(24 * 3600),
        claim_running: Duration::from_secs(3600),
        webhook_retention: Duration::from_secs(30 * 86_400),
        response_retention: Duration::from_secs(30 * 86_400),
        batch,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_rows_go_and_recent_ones_stay() {
    for db in TestDb::all("prune_ages").await {
        let (store, _clock) = open(&db).await;
        let conn = raw(&db).await;
        let db_name = name(&store);
        let alice = user_with(&store, usd(1_000_000)).await;
        let task = a_task(&store, &alice).await;

        // Claims: answered or abandoned past the TTL go; younger ones, answered or not, stay.
        claim_at(&conn, &alice, "old-answered", NOW - DAY - 1, true).await;
        claim_at(&conn, &alice, "old-abandoned", NOW - DAY - 1, false).await;
        for i in 0..5 {
            claim_at(&conn, &alice, &format!("old-{i}"), NOW - 2 * DAY - i, true).await;
        }
        claim_at(&conn, &alice, "young-answered", NOW - DAY + 60_000, true).await;
        claim_at(&conn, &alice, "young-running", NOW - 60_000, false).await;

        // Deliveries: ended ones past the retention go with their attempts; pending ones and
        // recent ones stay.
        let old_delivered = delivery_at(&conn, &task, &alice, NOW - 31 * DAY, Some("delivered"), 2).await;
        let old_given_up = delivery_at(&conn, &task, &alice, NOW - 31 * DAY, Some("given_up"), 3).await;
        let old_pending = delivery_at(&conn, &task, &alice, NOW - 40 * DAY, None, 1).await;
        let recent = delivery_at(&conn, &task, &alice, NOW - 29 * DAY, Some("delivered"), 1).await;

        // Response owners: past the retention they go.
        response_at(&conn, "resp_old", &alice, &task, NOW - 31 * DAY).await;
        response_at(&conn, "resp_recent", &alice, &task, NOW - DAY).await;

        let started = Instant::now();
        let pruned = store.prune(&policy(2)).await.unwrap_or_else(|e| panic!("{db_name}: prune: {e}"));
        println!("{db_name}: one pass deleted {pruned:?} in {:.1} ms", started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(pruned.idempotency_claims, 7, "{db_name}: {pruned:?}");
        assert_eq!((pruned.webhook_deliveries, pruned.webhook_attempts), (2, 5), "{db_name}: {pruned:?}");
        assert_eq!(pruned.response_owners, 1, "{db_name}: {pruned:?}");
        // Seven claims two at a time: four batches; one for the deliveries' two and the empty
        // one after it; one for the responses.
        assert_eq!(pruned.batches, 4 + 2 + 1, "{db_name}: batches of at most two rows: {pruned:?}");

        assert_eq!(keys_left(&conn).await, ["young-answered", "young-running"], "{db_name}");
        let left = |id: i64| format!("SELECT COUNT(*) FROM webhook_deliveries WHERE id = {id}");
        assert_eq!(count(&conn, &left(old_delivered)).await, 0, "{db_name}: old delivered");
        assert_eq!(count(&conn, &left(old_given_up)).await, 0, "{db_name}: old given up");
        assert_eq!(count(&conn, &left(old_pending)).await, 1, "{db_name}: a pending delivery is never pruned");
        assert_eq!(count(&conn, &left(recent)).await, 1, "{db_name}: recent");
        let attempts = count(&conn, "SELECT COUNT(*) FROM webhook_attempts").await;
        assert_eq!(attempts, 2, "{db_name}: the attempts of the two kept deliveries");
        assert_eq!(store.response_owner("resp_old").await, Ok(None), "{db_name}");
        assert_eq!(store.response_owner("resp_recent").await, Ok(Some(alice.clone())), "{db_name}");

        let again = store.prune(&policy(2)).await.expect("second pass");
        assert_eq!(again.total(), 0, "{db_name}: nothing left to prune: {again:?}");

        // A short TTL never deletes a claim whose request may still run.
        let short = PrunePolicy { idempotency_ttl: Duration::from_secs(60), ..policy(100) };
        let pruned = store.prune(&short).await.expect("short TTL");
        assert_eq!(pruned.idempotency_claims, 1, "{db_name}: {pruned:?}");
        assert_eq!(keys_left(&conn).await, ["young-running"], "{db_name}: the running claim stays");

        if store.backend() == Backend::Sqlite {
            index_serves_each_batch(&conn, db_name).await;
        }
        conn.close().await.ok();
        store.close().await.expect("close");
        db.cleanup().await;
    }
}

/// SQLite's plan for each batch's search uses the age index, not a scan of the table.
async fn index_serves_each_batch(conn: &DatabaseConnection, db_name: &str) {
    for (sql, index) in [
        (
            "SELECT rowid FROM idempotency_claims WHERE created_at < 1 AND (response_status IS NOT NULL OR \
             created_at < 1) ORDER BY created_at LIMIT 10",
            "idempotency_claims_created",
        ),
        (
            "SELECT rowid FROM native_responses WHERE created_at < 1 ORDER BY created_at LIMIT 10",
            "native_responses_created",
        ),
        (
            "SELECT id FROM webhook_deliveries WHERE (delivered_at IS NOT NULL OR given_up_at IS NOT NULL) AND \
             created_at < 1 ORDER BY created_at, id LIMIT 10",
            "webhook_deliveries_ended",
        ),
    ] {
        let statement = Statement::from_string(conn.get_database_backend(), format!("EXPLAIN QUERY PLAN {sql}"));
        let rows = conn.query_all_raw(statement).await.expect("plan");
        let plan: Vec<String> = rows.iter().filter_map(|r| r.try_get::<String>("", "detail").ok()).collect();
        assert!(plan.iter().any(|d| d.contains(index)), "{db_name}: {sql}: {plan:?}");
        assert!(!plan.iter().any(|d| d.contains("TEMP B-TREE")), "{db_name}: no sort: {plan:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_pruning_at_once_share_the_work() {
    const ROWS: i64 = 60;
    for db in TestDb::all("prune_replicas").await {
        let (a, _) = open(&db).await;
        let (b, _) = open(&db).await;
        let conn = raw(&db).await;
        let db_name = name(&a);
        let alice = user_with(&a, usd(1_000_000)).await;
        let task = a_task(&a, &alice).await;
        for i in 0..ROWS {
            response_at(&conn, &format!("resp_{i}"), &alice, &task, NOW - 40 * DAY + i).await;
            claim_at(&conn, &alice, &format!("k{i}"), NOW - 2 * DAY + i, true).await;
            delivery_at(&conn, &task, &alice, NOW - 40 * DAY + i, Some("delivered"), 1).await;
        }
        let seven = policy(7);
        let (left, right) = tokio::join!(a.prune(&seven), b.prune(&seven));
        let (left, right) = (left.expect("first store"), right.expect("second store"));
        println!("{db_name}: two stores at once deleted {left:?} and {right:?}");
        assert_eq!(left.response_owners + right.response_owners, 60, "{db_name}");
        assert_eq!(left.idempotency_claims + right.idempotency_claims, 60, "{db_name}");
        assert_eq!(left.webhook_deliveries + right.webhook_deliveries, 60, "{db_name}");
        assert_eq!(left.webhook_attempts + right.webhook_attempts, 60, "{db_name}");
        for table in ["native_responses", "idempotency_claims", "webhook_deliveries", "webhook_attempts"] {
            assert_eq!(count(&conn, &format!("SELECT COUNT(*) FROM {table}")).await, 0, "{db_name}: {table}");
        }
        conn.close().await.ok();
        a.close().await.expect("close");
        b.close().await.expect("close");
        db.cleanup().await;
    }
}

#[tokio::test]
async fn an_expired_key_is_a_fresh_key() {
    for db in TestDb::all("idem_expiry").await {
        let (store, clock) = open(&db).await;
        let db_name = name(&store);
        let alice = user_with(&store, usd(1_000_000)).await;
        let scope = |key: &'static str| IdempotencyScope { user: &alice, route: "chat.completions", key };

        // Answered: replayed for a day, then the key runs again (even with another body).
        assert_eq!(store.claim(scope("a"), "h1", STALE).await, Ok(IdempotencyClaim::Claimed), "{db_name}");
        store.complete(scope("a"), 200, b"{\"n\":1}").await.expect("complete");
        clock.set(NOW + DAY - 1);
        let replay = IdempotencyClaim::Replay { status: 200, body: b"{\"n\":1}".to_vec() };
        assert_eq!(store.claim(scope("a"), "h1", STALE).await, Ok(replay), "{db_name}: within the day");
        assert_eq!(store.claim(scope("a"), "h2", STALE).await, Ok(IdempotencyClaim::Mismatch), "{db_name}");
        clock.set(NOW + DAY + 1);
        assert_eq!(store.claim(scope("a"), "h2", STALE).await, Ok(IdempotencyClaim::Claimed), "{db_name}: expired");
        assert_eq!(store.claim(scope("a"), "h2", STALE).await, Ok(IdempotencyClaim::InProgress), "{db_name}");
        store.complete(scope("a"), 201, b"{\"n\":2}").await.expect("complete");
        let replay = IdempotencyClaim::Replay { status: 201, body: b"{\"n\":2}".to_vec() };
        assert_eq!(store.claim(scope("a"), "h2", STALE).await, Ok(replay), "{db_name}: the new answer");

        // A short TTL: an unanswered claim whose request may still run is not forgotten.
        let (short, clock) = open(&db).await;
        let short = short.with_idempotency_ttl(Duration::from_secs(60));
        clock.set(NOW);
        assert_eq!(short.claim(scope("b"), "h", STALE).await, Ok(IdempotencyClaim::Claimed), "{db_name}");
        clock.set(NOW + 120_000);
        assert_eq!(short.claim(scope("b"), "h", STALE).await, Ok(IdempotencyClaim::InProgress), "{db_name}: running");
        clock.set(NOW + STALE + 1);
        assert_eq!(short.claim(scope("b"), "h", STALE).await, Ok(IdempotencyClaim::Claimed), "{db_name}: abandoned");
        short.complete(scope("b"), 200, b"{}").await.expect("complete");
        clock.set(NOW + STALE + 60_002);
        assert_eq!(
            short.claim(scope("b"), "x", STALE).await,
            Ok(IdempotencyClaim::Claimed),
            "{db_name}: answered, expired"
        );
        short.close().await.expect("close");
        store.close().await.expect("close");
        db.cleanup().await;
    }
}

#[tokio::test]
async fn a_batch_is_one_short_transaction() {
    const ROWS: i64 = 2_000;
    for db in TestDb::all("prune_batch").await {
        let (store, _) = open(&db).await;
        let conn = raw(&db).await;
        let db_name = name(&store);
        let alice = user_with(&store, usd(1_000_000)).await;
        // Answered claims with a 4 KiB stored answer each, as a chat answer might be.
        let body = format!("{{\"text\":\"{}\"}}", "x".repeat(4096));
        let txn = sea_orm::TransactionTrait::begin(&conn).await.expect("begin");
        for i in 0..ROWS {
            let statement = Statement::from_sql_and_values(
                conn.get_database_backend(),
                "INSERT INTO idempotency_claims (user_id, route, idem_key, request_hash, task_id, response_status, \
                 response_body, created_at) VALUES ($1, 'chat.completions', $2, 'h', NULL, 200, $3, $4)",
                vec![alice.as_str().into(), format!("k{i}").into(), body.clone().into(), (NOW - 2 * DAY + i).into()],
            );
            txn.execute_raw(statement).await.expect("insert");
        }
        txn.commit().await.expect("commit");
        let started = Instant::now();
        let pruned = store.prune(&policy(500)).await.expect("prune");
        let elapsed = started.elapsed();
        assert_eq!((pruned.idempotency_claims, pruned.batches), (2_000, 5 + 1 + 1), "{db_name}: {pruned:?}");
        // Four full batches and the empty one that ends the table, less the 20-ms pauses between them.
        let work = elapsed.saturating_sub(Duration::from_millis(20 * 4));
        println!(
            "{db_name}: 2,000 claims of 4 KiB pruned in batches of 500: {:.1} ms in all, about {:.1} ms per batch",
            elapsed.as_secs_f64() * 1000.0,
            work.as_secs_f64() * 1000.0 / 4.0
        );
        conn.close().await.ok();
        store.close().await.expect("close");
        db.cleanup().await;
    }
}
