//! Migrations 0025 and 0026 on a database written before them (SQLite; PostgreSQL's 0025 changes
//! nothing): the indexes 0025 makes again serve the listings and sweeps as before (no scan, no
//! sort), the settled spend 0026 reads through the ledger finds its rows through an index, the
//! ledger lists as it did, and an open reservation still settles.

#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use billing::{Ledger, LedgerError};
use common::{TestDb, usd};
use domain::{LedgerKind, TaskId, UserId};
use rusqlite::Connection;

/// The SQLite migrations before 0025, as released: `(version, text)` in order.
fn migrations_before_0025() -> Vec<(i64, String)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/sqlite");
    let mut files: Vec<_> = std::fs::read_dir(&dir).expect("migrations").map(|e| e.expect("entry").path()).collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?.to_owned();
            let version: i64 = name.get(..4)?.parse().ok()?;
            (version < 25).then(|| (version, std::fs::read_to_string(&path).expect("migration text")))
        })
        .collect()
}

/// The lines of SQLite's `EXPLAIN QUERY PLAN` for `sql`.
fn query_plan(conn: &Connection, sql: &str) -> Vec<String> {
    conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
        .expect("plan")
        .query_map([], |r| r.get::<_, String>(3))
        .expect("plan rows")
        .collect::<Result<_, _>>()
        .expect("plan text")
}

#[tokio::test]
async fn migrations_0025_and_0026_keep_the_ledger_and_the_plans() {
    let db = TestDb::sqlite("writer_indexes");
    let path = db.url.trim_start_matches("sqlite://").trim_end_matches("?mode=rwc").to_owned();
    std::fs::create_dir_all(std::path::Path::new(&path).parent().expect("dir")).expect("dir");
    let old = migrations_before_0025();
    assert_eq!(old.len(), 24, "migrations 0001-0024");
    {
        let conn = Connection::open(&path).expect("old database");
        conn.execute_batch(
            "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY NOT NULL, applied_at BIGINT NOT NULL)",
        )
        .expect("schema_migrations");
        for (version, sql) in &old {
            conn.execute_batch(sql).unwrap_or_else(|e| panic!("migration {version}: {e}"));
            conn.execute("INSERT INTO schema_migrations VALUES (?1, 0)", [version]).expect("record");
        }
        // A user with a settled call and an open one, as the writer of 0024 left them: ids 1-5.
        conn.execute_batch(
            "INSERT INTO users (id, name, email, role, balance_micros, concurrency_limit, media_quota_bytes, created_at, \
             spent_micros) VALUES ('usr_old', 'Old', 'old@example.com', 'user', 996700, 4, 0, 1, 3000);
             INSERT INTO reservations (task_id, user_id, amount_micros, status, actual_micros, balance_after_micros, \
             created_at, updated_at) VALUES
               ('task_settled', 'usr_old', 5000, 'settled', 3000, 997000, 2, 3),
               ('task_open', 'usr_old', 300, 'reserved', NULL, 996700, 4, 4);
             INSERT INTO ledger_entries (user_id, task_id, kind, amount_micros, balance_after_micros, description, \
             created_at) VALUES
               ('usr_old', NULL, 'topup', 1000000, 1000000, 'opening', 1),
               ('usr_old', 'task_settled', 'reserve', -5000, 995000, 'hold', 2),
               ('usr_old', 'task_settled', 'settle', 2000, 997000, 'settle', 3),
               ('usr_old', 'task_open', 'reserve', -300, 996700, 'hold', 4);",
        )
        .expect("old rows");
    }

    let store = db.open().await;
    let user = UserId("usr_old".into());
    let entries = store.entries(&user, 10).await.expect("entries");
    let listed: Vec<(i64, LedgerKind, i64, i64)> =
        entries.iter().map(|e| (e.id, e.kind, e.amount.micros(), e.balance_after.micros())).collect();
    assert_eq!(
        listed,
        [
            (4, LedgerKind::Reserve, -300, 996_700),
            (3, LedgerKind::Settle, 2_000, 997_000),
            (2, LedgerKind::Reserve, -5_000, 995_000),
            (1, LedgerKind::Topup, 1_000_000, 1_000_000),
        ],
        "the ledger, newest first, as it was"
    );
    // The open reservation settles; the settled one does not settle twice.
    let settled = store.settle(&TaskId("task_open".into()), usd(100)).await.expect("settle the open call");
    assert_eq!(settled.reserved, usd(300));
    let again = store.settle(&TaskId("task_settled".into()), usd(1)).await;
    assert!(matches!(again, Err(LedgerError::AlreadyFinished { .. })), "{again:?}");
    store.credit(&user, usd(7), LedgerKind::Adjustment, "after").await.expect("credit");
    let newest: Vec<i64> = store.entries(&user, 2).await.expect("entries").iter().map(|e| e.id).collect();
    assert_eq!(newest, [6, 5], "new entries follow the old ids");
    assert_eq!(common::balance_is_ledger_sum(&store, &user).await, usd(996_907));
    store.close().await.expect("close");

    let conn = Connection::open(&path).expect("migrated database");
    let schema = |name: &str| -> String {
        conn.query_row("SELECT sql FROM sqlite_master WHERE name = ?1", [name], |r| r.get(0)).expect(name)
    };
    assert!(schema("ledger_entries_user").ends_with("(user_id, id)"));
    assert!(schema("tasks_user_created").ends_with("(user_id, created_at, id)"));
    assert!(!schema("tasks_running_updated").contains(" IN "));
    let gone: i64 = conn
        .query_row("SELECT COUNT(*) FROM sqlite_master WHERE name = 'reservations_settled_user'", [], |r| r.get(0))
        .expect("index count");
    assert_eq!(gone, 0, "0026 drops the settled reservations' index");
    // The statements' conditions as the store writes them (`is_running!`), and the index each needs.
    let running = "(status = 'submitting' OR status = 'queued' OR status = 'processing')";
    for (sql, index) in [
        (
            "SELECT id FROM ledger_entries WHERE user_id = 'u' AND id < 9 ORDER BY id DESC LIMIT 20",
            "ledger_entries_user",
        ),
        ("SELECT id FROM tasks WHERE user_id = 'u' ORDER BY created_at DESC, id DESC LIMIT 20", "tasks_user_created"),
        (
            &format!(
                "SELECT id FROM tasks WHERE kind IN ('chat') AND {running} AND updated_at < 9 ORDER BY updated_at LIMIT 5"
            ),
            "tasks_running_updated",
        ),
        (
            &format!(
                "SELECT id FROM tasks WHERE kind = 'video' AND {running} AND (next_poll_at IS NULL OR next_poll_at <= 9) \
                 ORDER BY next_poll_at NULLS FIRST, created_at, id LIMIT 5"
            ),
            "tasks_video_due",
        ),
        (
            &format!("SELECT COUNT(*) FROM tasks WHERE model = 'm' AND kind = 'video' AND {running}"),
            "tasks_video_active_model",
        ),
        (
            &format!("SELECT COUNT(*) FROM tasks WHERE user_id = 'u' AND kind = 'video' AND {running}"),
            "tasks_user_status (user_id=? AND status=?)",
        ),
    ] {
        let plan = query_plan(&conn, sql);
        assert!(plan.iter().any(|d| d.contains(index)), "{sql}: {plan:?}");
        assert!(!plan.iter().any(|d| d.contains("TEMP B-TREE")), "{sql}: no sort: {plan:?}");
    }
    // The settled spend by day and model, and by key (the store's statements, `$n` bound): the
    // user's `settle` entries through one of the ledger's per-user indexes (by time for a range),
    // each call's reservation and task by its key; only the grouping sorts.
    let joined = "FROM ledger_entries e JOIN reservations r ON r.task_id = e.task_id JOIN tasks t ON t.id = e.task_id \
                  WHERE e.user_id = 'u' AND e.kind = 'settle'";
    for sql in [
        format!(
            "SELECT e.created_at / 86400000, t.model, SUM(r.actual_micros), COUNT(*) {joined} \
             AND e.created_at >= 0 AND e.created_at < 9 GROUP BY e.created_at / 86400000, t.model ORDER BY 1, 2"
        ),
        format!("SELECT t.key_id, SUM(r.actual_micros), COUNT(*) {joined} AND t.key_id IS NOT NULL GROUP BY t.key_id"),
    ] {
        let plan = query_plan(&conn, &sql);
        assert!(plan.iter().any(|d| d.starts_with("SEARCH e USING INDEX ledger_entries_user")), "{sql}: {plan:?}");
        assert!(plan.iter().any(|d| d.starts_with("SEARCH r USING INDEX")), "{sql}: {plan:?}");
        assert!(plan.iter().any(|d| d.starts_with("SEARCH t USING INDEX")), "{sql}: {plan:?}");
        assert!(!plan.iter().any(|d| d.starts_with("SCAN")), "{sql}: no scan: {plan:?}");
    }
    let check: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0)).expect("integrity");
    assert_eq!(check, "ok");
    db.cleanup().await;
}
