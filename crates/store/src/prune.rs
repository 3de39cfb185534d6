//! The prune: the tables that would otherwise only grow lose their old rows, in bounded batches.
//!
//! | table | a row goes when | never while |
//! | --- | --- | --- |
//! | `idempotency_claims` | claimed longer ago than the idempotency TTL | unanswered and younger than [`PrunePolicy::claim_running`] (its request may still run) |
//! | `webhook_deliveries` and their `webhook_attempts` | created longer ago than [`PrunePolicy::webhook_retention`] | pending (neither delivered nor given up) |
//! | `native_responses` (response owners) | recorded longer ago than [`PrunePolicy::response_retention`] | |
//!
//! Each batch deletes at most [`PrunePolicy::batch`] rows of one table, oldest first, in a
//! transaction of its own, found through an index on the age (migration 10), so that it reads
//! only what it deletes. On SQLite a batch holds the process's one write connection (`db.rs`: the
//! other SeaORM writes queue behind it, the batched writer meets it through the busy timeout) for
//! one short transaction, and the pass pauses between batches so that queued writers go first. On
//! PostgreSQL a batch locks its rows with `FOR UPDATE SKIP LOCKED`: replicas pruning at the same
//! time delete disjoint rows and never wait for each other or for a row being written.

use std::time::Duration;

use domain::duration_millis;
use domain::ports::StoreError;
use sea_orm::{ConnectionTrait, TransactionTrait, Value};

use crate::{Backend, Store, backend_err};

/// How long an `Idempotency-Key` claim lives by default: 24 hours, as the large payment APIs keep
/// their keys; a retry a day later is a new request.
pub const DEFAULT_IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 3600);

/// Most batches of one table in one pass: a backlog larger than this many batches is left for the
/// next pass, so that one pass always ends.
const MAX_BATCHES: u32 = 1000;

/// Largest accepted batch.
const MAX_BATCH_ROWS: u64 = 10_000;

/// Pause between two batches of a pass, so that writers that queued behind one go first.
const PAUSE: Duration = Duration::from_millis(20);

/// What the prune deletes, and how much at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunePolicy {
    /// Age after which an `Idempotency-Key` claim is deleted (use the store's TTL,
    /// [`Store::with_idempotency_ttl`], so that the prune deletes what claims already ignore).
    pub idempotency_ttl: Duration,
    /// An unanswered claim younger than this is kept whatever the TTL: its request may still be
    /// running (at least the longest upstream call plus the idempotency stale window).
    pub claim_running: Duration,
    /// Age after which an ended webhook delivery and its attempts are deleted.
    pub webhook_retention: Duration,
    /// Age after which a response owner (`previous_response_id` check) is deleted.
    pub response_retention: Duration,
    /// Most rows one batch deletes (1 to 10,000).
    pub batch: u64,
}

impl PrunePolicy {
    /// The defaults, the one place they are written (`gateway`'s settings name them).
    pub const DEFAULT: PrunePolicy = PrunePolicy {
        idempotency_ttl: DEFAULT_IDEMPOTENCY_TTL,
        claim_running: Duration::from_secs(3600),
        webhook_retention: Duration::from_secs(30 * 86_400),
        response_retention: Duration::from_secs(30 * 86_400),
        batch: 500,
    };
}

impl Default for PrunePolicy {
    fn default() -> PrunePolicy {
        PrunePolicy::DEFAULT
    }
}

/// Rows one pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// `Idempotency-Key` claims.
    pub idempotency_claims: u64,
    /// Ended webhook deliveries.
    pub webhook_deliveries: u64,
    /// Their recorded attempts.
    pub webhook_attempts: u64,
    /// Response owners.
    pub response_owners: u64,
    /// Batches run (each one transaction).
    pub batches: u64,
}

impl Pruned {
    /// Every row deleted.
    pub fn total(&self) -> u64 {
        self.idempotency_claims + self.webhook_deliveries + self.webhook_attempts + self.response_owners
    }
}

/// The tables a pass goes through, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Claims,
    Deliveries,
    Responses,
}

/// The expired claims of one batch (`$1`: expired before; `$2`: abandoned before, for unanswered
/// ones; `$3`: how many), by the row's identity (SQLite's rowid, PostgreSQL's primary key).
fn claims_sql(backend: Backend) -> String {
    let (key, columns, lock) = match backend {
        Backend::Sqlite => ("rowid", "rowid", ""),
        Backend::Postgres => ("(user_id, route, idem_key)", "user_id, route, idem_key", " FOR UPDATE SKIP LOCKED"),
    };
    format!(
        "DELETE FROM idempotency_claims WHERE {key} IN (SELECT {columns} FROM idempotency_claims \
         WHERE created_at < $1 AND (response_status IS NOT NULL OR created_at < $2) \
         ORDER BY created_at LIMIT $3{lock})"
    )
}

/// The old response owners of one batch (`$1`: recorded before; `$2`: how many).
fn responses_sql(backend: Backend) -> String {
    let (key, lock) = match backend {
        Backend::Sqlite => ("rowid", ""),
        Backend::Postgres => ("response_id", " FOR UPDATE SKIP LOCKED"),
    };
    format!(
        "DELETE FROM native_responses WHERE {key} IN (SELECT {key} FROM native_responses \
         WHERE created_at < $1 ORDER BY created_at LIMIT $2{lock})"
    )
}

/// The ended deliveries of one batch (`$1`: created before; `$2`: how many); repeats the predicate
/// of the partial index `webhook_deliveries_ended`.
const ENDED_DELIVERIES: &str = "SELECT id FROM webhook_deliveries \
    WHERE (delivered_at IS NOT NULL OR given_up_at IS NOT NULL) AND created_at < $1 \
    ORDER BY created_at, id LIMIT $2";

impl Store {
    /// One pass of the prune at the store's clock: every table in turn, batch after batch until a
    /// batch finds fewer rows than [`PrunePolicy::batch`] (or after 1,000 batches of a table: the
    /// rest waits for the next pass). Safe to run from several processes at once.
    pub async fn prune(&self, policy: &PrunePolicy) -> Result<Pruned, StoreError> {
        let batch = policy.batch.clamp(1, MAX_BATCH_ROWS);
        let mut pruned = Pruned::default();
        for table in [Table::Claims, Table::Deliveries, Table::Responses] {
            for round in 0..MAX_BATCHES {
                if round > 0 {
                    tokio::time::sleep(PAUSE).await;
                }
                let now = self.now();
                let (rows, attempts) = match table {
                    Table::Claims => {
                        let expired = now.saturating_sub(duration_millis(policy.idempotency_ttl));
                        let abandoned = now.saturating_sub(duration_millis(policy.claim_running));
                        let values = vec![expired.into(), abandoned.into(), to_i64(batch).into()];
                        (self.delete_batch(&claims_sql(self.backend()), values).await?, 0)
                    }
                    Table::Deliveries => {
                        self.delete_deliveries(now.saturating_sub(duration_millis(policy.webhook_retention)), batch)
                            .await?
                    }
                    Table::Responses => {
                        let before = now.saturating_sub(duration_millis(policy.response_retention));
                        let values = vec![before.into(), to_i64(batch).into()];
                        (self.delete_batch(&responses_sql(self.backend()), values).await?, 0)
                    }
                };
                pruned.batches += 1;
                match table {
                    Table::Claims => pruned.idempotency_claims += rows,
                    Table::Deliveries => {
                        pruned.webhook_deliveries += rows;
                        pruned.webhook_attempts += attempts;
                    }
                    Table::Responses => pruned.response_owners += rows,
                }
                if rows < batch {
                    break;
                }
            }
        }
        Ok(pruned)
    }

    /// Runs one single-statement batch; the rows it deleted.
    async fn delete_batch(&self, sql: &str, values: Vec<Value>) -> Result<u64, StoreError> {
        let done = self.db.writes().execute_raw(self.statement(sql, values)).await.map_err(backend_err)?;
        Ok(done.rows_affected())
    }

    /// Deletes up to `batch` ended deliveries created before `before`, their attempts first, in one
    /// transaction; (deliveries, attempts) deleted.
    async fn delete_deliveries(&self, before: i64, batch: u64) -> Result<(u64, u64), StoreError> {
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let limit = to_i64(batch);
        let (deliveries, attempts) = match self.backend() {
            // The first statement writes, so the transaction takes SQLite's write lock at once (a
            // read first could not be upgraded after another connection's commit), and the second
            // one, under the same lock, picks the same rows.
            Backend::Sqlite => {
                let attempts = txn
                    .execute_raw(self.statement(
                        &format!("DELETE FROM webhook_attempts WHERE delivery_id IN ({ENDED_DELIVERIES})"),
                        vec![before.into(), limit.into()],
                    ))
                    .await
                    .map_err(backend_err)?
                    .rows_affected();
                let deliveries = txn
                    .execute_raw(self.statement(
                        &format!("DELETE FROM webhook_deliveries WHERE id IN ({ENDED_DELIVERIES})"),
                        vec![before.into(), limit.into()],
                    ))
                    .await
                    .map_err(backend_err)?
                    .rows_affected();
                (deliveries, attempts)
            }
            // The rows are locked first (skipping any another replica holds), then deleted by id.
            Backend::Postgres => {
                let rows = txn
                    .query_all_raw(self.statement(
                        &format!("{ENDED_DELIVERIES} FOR UPDATE SKIP LOCKED"),
                        vec![before.into(), limit.into()],
                    ))
                    .await
                    .map_err(backend_err)?;
                let ids = rows.iter().map(|r| r.try_get::<i64>("", "id")).collect::<Result<Vec<_>, _>>();
                let ids: Vec<Value> = ids.map_err(backend_err)?.into_iter().map(Value::from).collect();
                if ids.is_empty() {
                    (0, 0)
                } else {
                    let list = (1..=ids.len()).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
                    let attempts = txn
                        .execute_raw(self.statement(
                            &format!("DELETE FROM webhook_attempts WHERE delivery_id IN ({list})"),
                            ids.clone(),
                        ))
                        .await
                        .map_err(backend_err)?
                        .rows_affected();
                    let deliveries = txn
                        .execute_raw(
                            self.statement(&format!("DELETE FROM webhook_deliveries WHERE id IN ({list})"), ids),
                        )
                        .await
                        .map_err(backend_err)?
                        .rows_affected();
                    (deliveries, attempts)
                }
            }
        };
        txn.commit().await.map_err(backend_err)?;
        Ok((deliveries, attempts))
    }
}

/// A batch size as a bound value (at most [`MAX_BATCH_ROWS`], so it always fits).
fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_batches_go_by_rowid_and_postgres_batches_skip_locked_rows() {
        assert!(claims_sql(Backend::Sqlite).contains("rowid IN (SELECT rowid"));
        assert!(!claims_sql(Backend::Sqlite).contains("FOR UPDATE"));
        assert!(claims_sql(Backend::Postgres).ends_with("FOR UPDATE SKIP LOCKED)"));
        assert!(responses_sql(Backend::Postgres).ends_with("FOR UPDATE SKIP LOCKED)"));
        // Unanswered claims need the running guard as well as the TTL.
        assert!(claims_sql(Backend::Sqlite).contains("response_status IS NOT NULL OR created_at < $2"));
    }

    #[test]
    fn defaults() {
        let p = PrunePolicy::default();
        assert_eq!(p.idempotency_ttl, Duration::from_secs(86_400));
        assert!(p.claim_running < p.idempotency_ttl);
    }
}
