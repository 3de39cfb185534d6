//! `StatementStore`: statements, the gateway's revenue and the CSV exports, read from the ledger.
//!
//! A month's figures are a few sums over the entries of the range and of the time before it, read
//! in one snapshot through the index on `(user_id, created_at)` (migration 23); the gateway's
//! revenue walks each user's entries of the range through the same index. Exports read pages in
//! `(created_at, id)` order, each after the last row of the one before, so a page is one index
//! range however long the export.

use async_trait::async_trait;
use domain::ports::{StatementStore, StoreError};
use domain::statement::{CALL_KINDS, ChargeSum, EndedCall, Keyset, KindSum, RevenueFigures, StatementFigures};
use domain::{BillingStatus, LedgerEntry, LedgerKind, TaskId, Timestamp, UsdAmount, UserId};
use sea_orm::{ConnectionTrait, EntityTrait, QueryResult, Value};

use crate::entities::ledger_entries;
use crate::{Store, backend_err};

/// The call kinds as an SQL list: `'reserve', 'settle', …`.
fn call_kinds() -> String {
    CALL_KINDS.iter().map(|k| format!("'{}'", k.as_str())).collect::<Vec<_>>().join(", ")
}

/// Whose entries a query reads: one user's (`$3`), or every user's, each through its index range.
#[derive(Clone, Copy)]
enum Whose<'a> {
    User(&'a UserId),
    Everyone,
}

impl Whose<'_> {
    /// The `FROM` of the entries `e`. Every user's are walked user by user, each through its range
    /// of the `(user_id, created_at)` index: SQLite keeps a `CROSS JOIN`'s order (left to right),
    /// where it otherwise scanned the whole ledger; PostgreSQL plans it as any join.
    fn from(self) -> &'static str {
        match self {
            Whose::User(_) => "ledger_entries e",
            Whose::Everyone => "users u CROSS JOIN ledger_entries e",
        }
    }

    /// The condition on `e.user_id`.
    fn filter(self) -> &'static str {
        match self {
            Whose::User(_) => "e.user_id = $3",
            Whose::Everyone => "e.user_id = u.id",
        }
    }

    /// The values `$1` (from), `$2` (to) and, for one user, `$3`.
    fn values(self, from_ms: i64, to_ms: i64) -> Vec<Value> {
        match self {
            Whose::User(user) => vec![from_ms.into(), to_ms.into(), user.as_str().into()],
            Whose::Everyone => vec![from_ms.into(), to_ms.into()],
        }
    }
}

fn get<T: sea_orm::TryGetable>(row: &QueryResult, column: &str) -> Result<T, StoreError> {
    row.try_get("", column).map_err(backend_err)
}

impl Store {
    /// The entries written in `[from_ms, to_ms)`, summed by kind.
    async fn kind_sums<C: ConnectionTrait>(
        &self,
        conn: &C,
        whose: Whose<'_>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<KindSum>, StoreError> {
        let sql = format!(
            "SELECT e.kind AS kind, COUNT(*) AS entries, CAST(SUM(e.amount_micros) AS BIGINT) AS amount FROM {} \
             WHERE {} AND e.created_at >= $1 AND e.created_at < $2 GROUP BY e.kind ORDER BY e.kind",
            whose.from(),
            whose.filter()
        );
        let rows = conn.query_all_raw(self.statement(&sql, whose.values(from_ms, to_ms))).await.map_err(backend_err)?;
        rows.iter()
            .map(|row| {
                Ok(KindSum {
                    kind: get(row, "kind")?,
                    entries: get(row, "entries")?,
                    amount: UsdAmount::from_micros(get(row, "amount")?),
                })
            })
            .collect()
    }

    /// The charges of the calls whose `settle` entry was written in `[from_ms, to_ms)`, by user and
    /// the model that served them.
    async fn charge_sums<C: ConnectionTrait>(
        &self,
        conn: &C,
        whose: Whose<'_>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<ChargeSum>, StoreError> {
        let sql = format!(
            "SELECT e.user_id AS user_id, t.model AS model, COUNT(*) AS calls, \
             CAST(SUM(COALESCE(r.actual_micros, 0)) AS BIGINT) AS amount \
             FROM {} JOIN reservations r ON r.task_id = e.task_id JOIN tasks t ON t.id = e.task_id \
             WHERE {} AND e.kind = '{}' AND e.created_at >= $1 AND e.created_at < $2 \
             GROUP BY e.user_id, t.model ORDER BY 1, 2",
            whose.from(),
            whose.filter(),
            LedgerKind::Settle.as_str()
        );
        let rows = conn.query_all_raw(self.statement(&sql, whose.values(from_ms, to_ms))).await.map_err(backend_err)?;
        rows.iter()
            .map(|row| {
                Ok(ChargeSum {
                    user: UserId(get(row, "user_id")?),
                    model: get(row, "model")?,
                    calls: get(row, "calls")?,
                    amount: UsdAmount::from_micros(get(row, "amount")?),
                })
            })
            .collect()
    }

    /// What `user`'s calls open at `from_ms` held then, and those open at `to_ms` then: a call is
    /// open at `t` when its hold was written before `t` and it had not ended before `t` (its
    /// reservation is still `reserved`, or ended at `t` or later); it holds −(its entries before `t`).
    async fn held<C: ConnectionTrait>(
        &self,
        conn: &C,
        user: &UserId,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<(UsdAmount, UsdAmount), StoreError> {
        let reserved = BillingStatus::Reserved.as_str();
        let sql = format!(
            "SELECT CAST(COALESCE(SUM(CASE WHEN e.created_at < $1 AND (r.status = '{reserved}' OR r.updated_at >= $1) \
             THEN -e.amount_micros ELSE 0 END), 0) AS BIGINT) AS held_start, \
             CAST(COALESCE(SUM(CASE WHEN r.status = '{reserved}' OR r.updated_at >= $2 \
             THEN -e.amount_micros ELSE 0 END), 0) AS BIGINT) AS held_end \
             FROM ledger_entries e JOIN reservations r ON r.task_id = e.task_id \
             WHERE e.user_id = $3 AND e.created_at < $2 AND e.kind IN ({})",
            call_kinds()
        );
        let values = Whose::User(user).values(from_ms, to_ms);
        let row = conn.query_one_raw(self.statement(&sql, values)).await.map_err(backend_err)?;
        let Some(row) = row else { return Ok((UsdAmount::ZERO, UsdAmount::ZERO)) };
        Ok((UsdAmount::from_micros(get(&row, "held_start")?), UsdAmount::from_micros(get(&row, "held_end")?)))
    }
}

/// The values of a page query: `$1` the user, `$2` the range's end, `$3` and `$4` the row to
/// start after (never before the range's start), `$5` the page's size. The page's one lower bound
/// is `$3`: with the range's start as a second one, SQLite's planner took that one and walked the
/// index from the range's start on every page (each page then cost all the pages before it).
fn page_values(user: &UserId, from_ms: i64, to_ms: i64, after: Keyset, limit: u64) -> Vec<Value> {
    let after = if after.at < from_ms { Keyset::start(from_ms) } else { after };
    vec![
        user.as_str().into(),
        to_ms.into(),
        after.at.into(),
        after.id.into(),
        i64::try_from(limit).unwrap_or(i64::MAX).into(),
    ]
}

fn ended_call(row: &QueryResult) -> Result<EndedCall, StoreError> {
    let task_id: String = get(row, "task_id")?;
    let kind: String = get(row, "kind")?;
    let status: String = get(row, "status")?;
    let billing: String = get(row, "billing")?;
    let corrupt = |what: &str, e: domain::UnknownName| StoreError::corrupt(format!("{what} of task {task_id}"), e);
    Ok(EndedCall {
        entry_id: get(row, "entry_id")?,
        ended_at: Timestamp(get(row, "ended_at")?),
        created_at: Timestamp(get(row, "created_at")?),
        model: get(row, "model")?,
        kind: kind.parse().map_err(|e| corrupt("kind", e))?,
        status: status.parse().map_err(|e| corrupt("status", e))?,
        billing: billing.parse().map_err(|e| corrupt("billing status", e))?,
        held: UsdAmount::from_micros(get(row, "held")?),
        charged: UsdAmount::from_micros(get(row, "charged")?),
        usage_json: get(row, "usage_json")?,
        task_id: TaskId(task_id),
    })
}

#[async_trait]
impl StatementStore for Store {
    async fn statement_figures(&self, user: &UserId, from_ms: i64, to_ms: i64) -> Result<StatementFigures, StoreError> {
        let txn = self.read_snapshot().await?;
        let whose = Whose::User(user);
        let before = self.kind_sums(&txn, whose, i64::MIN, from_ms).await?;
        let during = self.kind_sums(&txn, whose, from_ms, to_ms).await?;
        let charges = self.charge_sums(&txn, whose, from_ms, to_ms).await?;
        let (held_at_start, held_at_end) = self.held(&txn, user, from_ms, to_ms).await?;
        txn.commit().await.map_err(backend_err)?;
        Ok(StatementFigures { before, during, charges, held_at_start, held_at_end })
    }

    async fn revenue_figures(&self, from_ms: i64, to_ms: i64) -> Result<RevenueFigures, StoreError> {
        let txn = self.read_snapshot().await?;
        let during = self.kind_sums(&txn, Whose::Everyone, from_ms, to_ms).await?;
        let charges = self.charge_sums(&txn, Whose::Everyone, from_ms, to_ms).await?;
        txn.commit().await.map_err(backend_err)?;
        Ok(RevenueFigures { during, charges })
    }

    async fn ledger_rows(
        &self,
        user: &UserId,
        from_ms: i64,
        to_ms: i64,
        after: Keyset,
        limit: u64,
    ) -> Result<Vec<LedgerEntry>, StoreError> {
        let sql = "SELECT * FROM ledger_entries WHERE user_id = $1 AND created_at < $2 \
                   AND created_at >= $3 AND (created_at, id) > ($3, $4) ORDER BY created_at, id LIMIT $5";
        let rows = ledger_entries::Entity::find()
            .from_raw_sql(self.statement(sql, page_values(user, from_ms, to_ms, after, limit)))
            .all(self.db.reads())
            .await
            .map_err(backend_err)?;
        rows.into_iter()
            .map(|row| crate::ledger::entry_from_row(row).map_err(|e| StoreError::Backend(e.to_string())))
            .collect()
    }

    async fn ended_calls(
        &self,
        user: &UserId,
        from_ms: i64,
        to_ms: i64,
        after: Keyset,
        limit: u64,
    ) -> Result<Vec<EndedCall>, StoreError> {
        let sql = format!(
            "SELECT e.id AS entry_id, e.created_at AS ended_at, t.id AS task_id, t.created_at AS created_at, \
             t.model AS model, t.kind AS kind, t.status AS status, r.status AS billing, r.amount_micros AS held, \
             COALESCE(r.actual_micros, 0) AS charged, t.usage AS usage_json \
             FROM ledger_entries e JOIN tasks t ON t.id = e.task_id JOIN reservations r ON r.task_id = e.task_id \
             WHERE e.user_id = $1 AND e.kind IN ('{}', '{}') AND e.created_at < $2 \
             AND e.created_at >= $3 AND (e.created_at, e.id) > ($3, $4) ORDER BY e.created_at, e.id LIMIT $5",
            LedgerKind::Settle.as_str(),
            LedgerKind::Refund.as_str()
        );
        let values = page_values(user, from_ms, to_ms, after, limit);
        let rows = self.db.reads().query_all_raw(self.statement(&sql, values)).await.map_err(backend_err)?;
        rows.iter().map(ended_call).collect()
    }
}
