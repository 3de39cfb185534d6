//! Embedded SQL migrations from `migrations/`, applied in order and recorded in `schema_migrations`.

use domain::ports::StoreError;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait};

use crate::backend_err;
use crate::db::advisory_lock;

/// `(version, SQLite text, PostgreSQL text)`, in order.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        include_str!("../../../migrations/sqlite/0001_init.sql"),
        include_str!("../../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        include_str!("../../../migrations/sqlite/0002_scoped_idempotency.sql"),
        include_str!("../../../migrations/postgres/0002_scoped_idempotency.sql"),
    ),
    (
        3,
        include_str!("../../../migrations/sqlite/0003_task_upstream_id.sql"),
        include_str!("../../../migrations/postgres/0003_task_upstream_id.sql"),
    ),
    (
        4,
        include_str!("../../../migrations/sqlite/0004_video_work.sql"),
        include_str!("../../../migrations/postgres/0004_video_work.sql"),
    ),
    (
        5,
        include_str!("../../../migrations/sqlite/0005_running_calls.sql"),
        include_str!("../../../migrations/postgres/0005_running_calls.sql"),
    ),
    (
        6,
        include_str!("../../../migrations/sqlite/0006_cap_leases.sql"),
        include_str!("../../../migrations/postgres/0006_cap_leases.sql"),
    ),
    (
        7,
        include_str!("../../../migrations/sqlite/0007_call_runners.sql"),
        include_str!("../../../migrations/postgres/0007_call_runners.sql"),
    ),
    (
        8,
        include_str!("../../../migrations/sqlite/0008_fewer_indexes.sql"),
        include_str!("../../../migrations/postgres/0008_fewer_indexes.sql"),
    ),
    (
        9,
        include_str!("../../../migrations/sqlite/0009_spent_total.sql"),
        include_str!("../../../migrations/postgres/0009_spent_total.sql"),
    ),
    (
        10,
        include_str!("../../../migrations/sqlite/0010_prune_indexes.sql"),
        include_str!("../../../migrations/postgres/0010_prune_indexes.sql"),
    ),
    (
        11,
        include_str!("../../../migrations/sqlite/0011_key_limits.sql"),
        include_str!("../../../migrations/postgres/0011_key_limits.sql"),
    ),
    (
        12,
        include_str!("../../../migrations/sqlite/0012_key_budgets.sql"),
        include_str!("../../../migrations/postgres/0012_key_budgets.sql"),
    ),
    (
        13,
        include_str!("../../../migrations/sqlite/0013_key_rates.sql"),
        include_str!("../../../migrations/postgres/0013_key_rates.sql"),
    ),
    (
        14,
        include_str!("../../../migrations/sqlite/0014_key_ips.sql"),
        include_str!("../../../migrations/postgres/0014_key_ips.sql"),
    ),
    (
        15,
        include_str!("../../../migrations/sqlite/0015_sweep_leases.sql"),
        include_str!("../../../migrations/postgres/0015_sweep_leases.sql"),
    ),
    (
        16,
        include_str!("../../../migrations/sqlite/0016_replica_upstream_health.sql"),
        include_str!("../../../migrations/postgres/0016_replica_upstream_health.sql"),
    ),
    (
        17,
        include_str!("../../../migrations/sqlite/0017_task_upstream_route.sql"),
        include_str!("../../../migrations/postgres/0017_task_upstream_route.sql"),
    ),
    (
        18,
        include_str!("../../../migrations/sqlite/0018_management.sql"),
        include_str!("../../../migrations/postgres/0018_management.sql"),
    ),
    (
        19,
        include_str!("../../../migrations/sqlite/0019_key_parents.sql"),
        include_str!("../../../migrations/postgres/0019_key_parents.sql"),
    ),
    (
        20,
        include_str!("../../../migrations/sqlite/0020_task_max_cost.sql"),
        include_str!("../../../migrations/postgres/0020_task_max_cost.sql"),
    ),
    (
        21,
        include_str!("../../../migrations/sqlite/0021_model_aliases.sql"),
        include_str!("../../../migrations/postgres/0021_model_aliases.sql"),
    ),
    (
        22,
        include_str!("../../../migrations/sqlite/0022_vouchers.sql"),
        include_str!("../../../migrations/postgres/0022_vouchers.sql"),
    ),
    (
        23,
        include_str!("../../../migrations/sqlite/0023_ledger_time.sql"),
        include_str!("../../../migrations/postgres/0023_ledger_time.sql"),
    ),
    (
        24,
        include_str!("../../../migrations/sqlite/0024_balance_alerts.sql"),
        include_str!("../../../migrations/postgres/0024_balance_alerts.sql"),
    ),
    (
        25,
        include_str!("../../../migrations/sqlite/0025_writer_indexes.sql"),
        include_str!("../../../migrations/postgres/0025_writer_indexes.sql"),
    ),
    (
        26,
        include_str!("../../../migrations/sqlite/0026_no_settled_index.sql"),
        include_str!("../../../migrations/postgres/0026_no_settled_index.sql"),
    ),
];

/// The advisory lock's key that serialises migrating replicas on one PostgreSQL (no cap's key:
/// those are `user:…` and `model:…`).
const PG_MIGRATION_LOCK: &str = "gateway migrations";

/// Applies every migration not yet recorded; returns how many ran.
pub(crate) async fn run(db: &DatabaseConnection) -> Result<u64, StoreError> {
    let backend = db.get_database_backend();
    let txn = db.begin().await.map_err(backend_err)?;
    if backend == DbBackend::Postgres {
        // Replicas starting together take turns; the lock ends with the transaction.
        txn.execute_raw(advisory_lock(PG_MIGRATION_LOCK)).await.map_err(backend_err)?;
    }
    txn.execute_unprepared(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY NOT NULL, applied_at BIGINT NOT NULL)",
    )
    .await
    .map_err(backend_err)?;
    let mut applied = 0;
    for &(version, sqlite_sql, pg_sql) in MIGRATIONS {
        let done = txn
            .query_one_raw(Statement::from_sql_and_values(
                backend,
                match backend {
                    DbBackend::Postgres => "SELECT version FROM schema_migrations WHERE version = $1",
                    _ => "SELECT version FROM schema_migrations WHERE version = ?",
                },
                [version.into()],
            ))
            .await
            .map_err(backend_err)?;
        if done.is_some() {
            continue;
        }
        let sql = if backend == DbBackend::Postgres { pg_sql } else { sqlite_sql };
        txn.execute_unprepared(sql).await.map_err(backend_err)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(domain::duration_millis)
            .unwrap_or(0);
        txn.execute_raw(Statement::from_string(
            backend,
            format!("INSERT INTO schema_migrations (version, applied_at) VALUES ({version}, {now})"),
        ))
        .await
        .map_err(backend_err)?;
        applied += 1;
    }
    txn.commit().await.map_err(backend_err)?;
    Ok(applied)
}

/// Migrations this build knows that the database has not recorded (0 when it is up to date); an
/// error when the database cannot be reached or was never migrated.
pub(crate) async fn pending(db: &DatabaseConnection) -> Result<u64, StoreError> {
    let backend = db.get_database_backend();
    let rows = db
        .query_all_raw(Statement::from_string(backend, "SELECT version FROM schema_migrations"))
        .await
        .map_err(backend_err)?;
    let mut recorded = Vec::with_capacity(rows.len());
    for row in &rows {
        recorded.push(row.try_get::<i64>("", "version").map_err(backend_err)?);
    }
    let missing = MIGRATIONS.iter().filter(|(v, _, _)| !recorded.contains(v)).count();
    Ok(u64::try_from(missing).unwrap_or(u64::MAX))
}
