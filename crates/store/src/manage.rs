//! `ManageStore`: the management API's reads (spend by day and model, ledger pages, users) and
//! writes (user switches, the audit trail).

use async_trait::async_trait;
use domain::ports::{ManageStore, PageRequest, StoreError};
use domain::{
    ApiKey, ApiKeyId, AuditEntry, DailyModelSpend, LedgerEntry, LedgerKind, NewAuditEntry, UsdAmount, User, UserChange,
    UserId,
};
use sea_orm::sea_query::{Expr, ExprTrait, Func, LikeExpr};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, EntityTrait, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect, Select, TransactionTrait,
};

use crate::accounts::{key_from_row, user_from_row};
use crate::entities::{admin_audit, api_keys, ledger_entries, users};
use crate::{Store, backend_err};

fn audit_from_row(row: admin_audit::Model) -> AuditEntry {
    AuditEntry {
        id: row.id,
        at: domain::Timestamp(row.at),
        actor: row.actor,
        actor_key: row.actor_key,
        action: row.action,
        target: row.target,
        before: row.before_state,
        after: row.after_state,
    }
}

/// `LIKE` pattern for "contains `text`", with the pattern's own wildcards escaped.
fn contains_pattern(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len() + 2);
    pattern.push('%');
    for c in text.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

impl Store {
    /// One page of `query` in the order `order` gives it, and how many rows match in all, read in
    /// one snapshot (a page past the end reads no rows).
    async fn page_of<E>(
        &self,
        query: Select<E>,
        order: impl FnOnce(Select<E>) -> Select<E>,
        page: PageRequest,
    ) -> Result<(Vec<E::Model>, u64), StoreError>
    where
        E: EntityTrait,
        E::Model: Send + Sync,
    {
        let txn = self.read_snapshot().await?;
        let total = query.clone().count(&txn).await.map_err(backend_err)?;
        let rows = if page.offset() >= total {
            Vec::new()
        } else {
            order(query).offset(page.offset()).limit(page.page_size).all(&txn).await.map_err(backend_err)?
        };
        txn.commit().await.map_err(backend_err)?;
        Ok((rows, total))
    }
}

#[async_trait]
impl ManageStore for Store {
    async fn daily_spend(&self, user: &UserId, from_ms: i64, to_ms: i64) -> Result<Vec<DailyModelSpend>, StoreError> {
        // A call is settled when its `settle` entry is written, in the same commit and with the
        // same time as its reservation's end (`updated_at`): the user's entries of the range come
        // through `ledger_entries_user_time`, each settled call's charge from its reservation.
        let sql = format!(
            "SELECT e.created_at / 86400000 AS day, t.model AS model, \
             CAST(SUM(COALESCE(r.actual_micros, 0)) AS BIGINT) AS spent, COUNT(*) AS calls \
             FROM ledger_entries e JOIN reservations r ON r.task_id = e.task_id JOIN tasks t ON t.id = e.task_id \
             WHERE e.user_id = $1 AND e.kind = '{}' AND e.created_at >= $2 AND e.created_at < $3 \
             GROUP BY e.created_at / 86400000, t.model ORDER BY 1, 2",
            LedgerKind::Settle.as_str()
        );
        let rows = self
            .db
            .reads()
            .query_all_raw(self.statement(&sql, vec![user.as_str().into(), from_ms.into(), to_ms.into()]))
            .await
            .map_err(backend_err)?;
        rows.iter()
            .map(|row| {
                let day: i64 = row.try_get("", "day").map_err(backend_err)?;
                Ok(DailyModelSpend {
                    day,
                    model: row.try_get("", "model").map_err(backend_err)?,
                    spent: UsdAmount::from_micros(row.try_get("", "spent").map_err(backend_err)?),
                    calls: row.try_get("", "calls").map_err(backend_err)?,
                })
            })
            .collect()
    }

    async fn ledger_page(&self, user: &UserId, page: PageRequest) -> Result<(Vec<LedgerEntry>, u64), StoreError> {
        let query = ledger_entries::Entity::find().filter(ledger_entries::Column::UserId.eq(user.as_str()));
        let (rows, total) = self.page_of(query, |q| q.order_by_desc(ledger_entries::Column::Id), page).await?;
        let entries = rows
            .into_iter()
            .map(|row| crate::ledger::entry_from_row(row).map_err(|e| StoreError::Backend(e.to_string())))
            .collect::<Result<_, _>>()?;
        Ok((entries, total))
    }

    async fn list_users(&self, search: Option<&str>, page: PageRequest) -> Result<(Vec<User>, u64), StoreError> {
        let mut query = users::Entity::find();
        if let Some(text) = search.map(str::trim).filter(|t| !t.is_empty()) {
            let pattern = contains_pattern(text);
            let like = |column: users::Column| {
                Expr::expr(Func::lower(Expr::col(column))).like(LikeExpr::new(pattern.clone()).escape('\\'))
            };
            query = query.filter(
                Condition::any()
                    .add(like(users::Column::Id))
                    .add(like(users::Column::Name))
                    .add(like(users::Column::Email)),
            );
        }
        let newest =
            |q: Select<users::Entity>| q.order_by_desc(users::Column::CreatedAt).order_by_desc(users::Column::Id);
        let (rows, total) = self.page_of(query, newest, page).await?;
        Ok((rows.into_iter().map(user_from_row).collect::<Result<_, _>>()?, total))
    }

    async fn key(&self, id: &ApiKeyId) -> Result<Option<ApiKey>, StoreError> {
        let row = api_keys::Entity::find_by_id(id.as_str()).one(self.db.reads()).await.map_err(backend_err)?;
        row.map(key_from_row).transpose()
    }

    async fn change_user(&self, user: &UserId, change: UserChange) -> Result<User, StoreError> {
        if change.is_empty() {
            return Err(StoreError::Invalid("nothing to change on the user".into()));
        }
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        if change.disabled == Some(true) {
            // Disabling twice keeps the first time.
            users::Entity::update_many()
                .col_expr(users::Column::DisabledAt, Expr::value(self.now()))
                .filter(users::Column::Id.eq(user.as_str()))
                .filter(users::Column::DisabledAt.is_null())
                .exec(&txn)
                .await
                .map_err(backend_err)?;
        }
        let mut update = users::Entity::update_many().filter(users::Column::Id.eq(user.as_str()));
        let mut changes = false;
        if change.disabled == Some(false) {
            update = update.col_expr(users::Column::DisabledAt, Expr::value(Option::<i64>::None));
            changes = true;
        }
        if let Some(limit) = change.concurrency_limit {
            update = update.col_expr(users::Column::ConcurrencyLimit, Expr::value(limit));
            changes = true;
        }
        if let Some(quota) = change.media_quota_bytes {
            update = update.col_expr(users::Column::MediaQuotaBytes, Expr::value(quota));
            changes = true;
        }
        if changes {
            update.exec(&txn).await.map_err(backend_err)?;
        }
        let row = users::Entity::find_by_id(user.as_str()).one(&txn).await.map_err(backend_err)?;
        txn.commit().await.map_err(backend_err)?;
        row.map(user_from_row).unwrap_or_else(|| Err(StoreError::NotFound(format!("user {user}"))))
    }

    async fn record_audit(&self, entry: NewAuditEntry) -> Result<AuditEntry, StoreError> {
        let row = admin_audit::ActiveModel {
            id: sea_orm::ActiveValue::NotSet,
            at: Set(self.now()),
            actor: Set(entry.actor.who().to_owned()),
            actor_key: Set(entry.actor.key().map(str::to_owned)),
            action: Set(entry.action),
            target: Set(entry.target),
            before_state: Set(entry.before),
            after_state: Set(entry.after),
        };
        Ok(audit_from_row(row.insert(self.db.writes()).await.map_err(backend_err)?))
    }

    async fn audit_page(&self, page: PageRequest) -> Result<(Vec<AuditEntry>, u64), StoreError> {
        let query = admin_audit::Entity::find();
        let (rows, total) = self.page_of(query, |q| q.order_by_desc(admin_audit::Column::Id), page).await?;
        Ok((rows.into_iter().map(audit_from_row).collect(), total))
    }
}

#[cfg(test)]
mod tests {
    use super::contains_pattern;

    #[test]
    fn search_patterns_escape_wildcards() {
        assert_eq!(contains_pattern("Ann"), "%ann%");
        assert_eq!(contains_pattern("50%_a\\b"), "%50\\%\\_a\\\\b%");
    }
}
