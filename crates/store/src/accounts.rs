//! `AccountStore`: users and hashed API keys.

use std::num::NonZeroU32;

use async_trait::async_trait;
use domain::ports::{AccountStore, BadValue, KeyTotal, StoreError};
use domain::{
    ApiKey, ApiKeyId, BudgetPeriod, IpAllowList, KeyBudget, KeyLimitsChange, KeyRates, KeySpend, LedgerKind,
    ModelAllowList, NewUser, Scope, Timestamp, UsdAmount, User, UserId,
};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::{NotSet, Set},
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, TransactionTrait,
};

use crate::entities::{api_keys, ledger_entries, users};
use crate::{Store, backend_err, is_unique_violation};

pub(crate) fn user_from_row(row: users::Model) -> Result<User, StoreError> {
    let role = row.role.parse().map_err(|e| StoreError::corrupt(format!("role of user {}", row.id), e))?;
    Ok(User {
        id: UserId(row.id),
        name: row.name,
        email: row.email,
        role,
        balance: UsdAmount::from_micros(row.balance_micros),
        concurrency_limit: row.concurrency_limit,
        media_quota_bytes: row.media_quota_bytes,
        media_used_bytes: row.media_used_bytes,
        created_at: Timestamp(row.created_at),
        disabled_at: row.disabled_at.map(Timestamp),
    })
}

pub(crate) fn key_from_row(row: api_keys::Model) -> Result<ApiKey, StoreError> {
    let models = row
        .models
        .as_deref()
        .map(ModelAllowList::parse)
        .transpose()
        .map_err(|e| StoreError::corrupt(format!("models of key {}", row.id), e))?;
    let scopes =
        Scope::parse_list(&row.scopes).map_err(|e| StoreError::corrupt(format!("scopes of key {}", row.id), e))?;
    let budget = budget_of(&row.id, row.budget_micros, row.budget_period.as_deref())?;
    let allow_ips = row
        .allow_ips
        .as_deref()
        .map(IpAllowList::parse)
        .transpose()
        .map_err(|e| StoreError::corrupt(format!("address list of key {}", row.id), e))?;
    let rates = KeyRates { rpm: rate_limit(&row.id, "rpm", row.rpm)?, tpm: rate_limit(&row.id, "tpm", row.tpm)? };
    Ok(ApiKey {
        id: ApiKeyId(row.id),
        user_id: UserId(row.user_id),
        name: row.name,
        hash: row.key_hash,
        prefix: row.prefix,
        scopes,
        revoked_at: row.revoked_at.map(Timestamp),
        created_at: Timestamp(row.created_at),
        expires_at: row.expires_at.map(Timestamp),
        models,
        budget,
        spend: KeySpend {
            period_start: Timestamp(row.budget_period_start),
            spent: UsdAmount::from_micros(row.budget_spent_micros),
            held: UsdAmount::from_micros(row.budget_held_micros),
        },
        rates,
        allow_ips,
        parent_id: row.parent_id.map(ApiKeyId),
    })
}

/// A key's budget from its two columns: both or neither (one without the other is corrupt).
pub(crate) fn budget_of(key: &str, micros: Option<i64>, period: Option<&str>) -> Result<Option<KeyBudget>, StoreError> {
    match (micros, period) {
        (None, None) => Ok(None),
        (Some(limit), Some(period)) => {
            let period: BudgetPeriod =
                period.parse().map_err(|e| StoreError::corrupt(format!("budget period of key {key}"), e))?;
            Ok(Some(KeyBudget { limit: UsdAmount::from_micros(limit), period }))
        }
        _ => Err(StoreError::corrupt(
            format!("budget of key {key}"),
            std::io::Error::other("a limit without a period, or a period without a limit"),
        )),
    }
}

/// A stored rate limit: NULL, or a positive count that fits its type.
fn rate_limit(key: &str, column: &str, value: Option<i64>) -> Result<Option<NonZeroU32>, StoreError> {
    value
        .map(|n| {
            u32::try_from(n)
                .ok()
                .and_then(NonZeroU32::new)
                .ok_or_else(|| StoreError::corrupt(format!("{column} of key {key}"), BadValue(n.to_string())))
        })
        .transpose()
}

/// A rate limit as stored.
fn rate_column(limit: Option<NonZeroU32>) -> Option<i64> {
    limit.map(|n| i64::from(n.get()))
}

fn scopes_text(scopes: &[Scope]) -> String {
    scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")
}

#[async_trait]
impl AccountStore for Store {
    async fn create_user(&self, user: NewUser) -> Result<User, StoreError> {
        if user.balance.is_negative() {
            return Err(StoreError::Invalid("opening balance must not be negative".into()));
        }
        let now = self.now();
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let row = users::ActiveModel {
            id: Set(user.id.0.clone()),
            name: Set(user.name),
            email: Set(user.email),
            role: Set(user.role.as_str().to_owned()),
            balance_micros: Set(user.balance.micros()),
            concurrency_limit: Set(user.concurrency_limit),
            media_quota_bytes: Set(user.media_quota_bytes),
            created_at: Set(now),
            webhook_secret: NotSet,
            media_used_bytes: NotSet,
            spent_micros: NotSet,
            disabled_at: NotSet,
        };
        let row = row.insert(&txn).await.map_err(|e| {
            if is_unique_violation(&e) {
                StoreError::Conflict(format!("user {} already exists", user.id))
            } else {
                backend_err(e)
            }
        })?;
        if user.balance.micros() > 0 {
            ledger_entries::ActiveModel {
                user_id: Set(row.id.clone()),
                task_id: Set(None),
                kind: Set(LedgerKind::Topup.as_str().to_owned()),
                amount_micros: Set(user.balance.micros()),
                balance_after_micros: Set(user.balance.micros()),
                description: Set("opening balance".to_owned()),
                created_at: Set(now),
                ..Default::default()
            }
            .insert(&txn)
            .await
            .map_err(backend_err)?;
        }
        txn.commit().await.map_err(backend_err)?;
        user_from_row(row)
    }

    async fn user(&self, id: &UserId) -> Result<Option<User>, StoreError> {
        let row = users::Entity::find_by_id(id.0.clone()).one(self.db.reads()).await.map_err(backend_err)?;
        row.map(user_from_row).transpose()
    }

    async fn count_users(&self) -> Result<u64, StoreError> {
        users::Entity::find().count(self.db.reads()).await.map_err(backend_err)
    }

    async fn create_key(&self, key: ApiKey) -> Result<ApiKey, StoreError> {
        if self.user(&key.user_id).await?.is_none() {
            return Err(StoreError::NotFound(format!("user {}", key.user_id)));
        }
        let row = api_keys::ActiveModel {
            id: Set(key.id.0.clone()),
            user_id: Set(key.user_id.0.clone()),
            name: Set(key.name.clone()),
            key_hash: Set(key.hash.clone()),
            prefix: Set(key.prefix.clone()),
            scopes: Set(scopes_text(&key.scopes)),
            revoked_at: Set(key.revoked_at.map(|t| t.millis())),
            created_at: Set(key.created_at.millis()),
            expires_at: Set(key.expires_at.map(|t| t.millis())),
            models: Set(key.models.as_ref().map(ToString::to_string)),
            budget_micros: Set(key.budget.map(|b| b.limit.micros())),
            budget_period: Set(key.budget.map(|b| b.period.as_str().to_owned())),
            budget_period_start: NotSet,
            budget_spent_micros: NotSet,
            budget_held_micros: NotSet,
            rpm: Set(rate_column(key.rates.rpm)),
            tpm: Set(rate_column(key.rates.tpm)),
            allow_ips: Set(key.allow_ips.as_ref().map(ToString::to_string)),
            parent_id: Set(key.parent_id.as_ref().map(|p| p.0.clone())),
        };
        let row = row.insert(self.db.writes()).await.map_err(|e| {
            if is_unique_violation(&e) { StoreError::Conflict("key already exists".into()) } else { backend_err(e) }
        })?;
        key_from_row(row)
    }

    async fn revoke_key(&self, id: &ApiKeyId) -> Result<ApiKey, StoreError> {
        api_keys::Entity::update_many()
            .col_expr(api_keys::Column::RevokedAt, sea_orm::sea_query::Expr::value(self.now()))
            .filter(api_keys::Column::Id.eq(id.0.clone()))
            .filter(api_keys::Column::RevokedAt.is_null())
            .exec(self.db.writes())
            .await
            .map_err(backend_err)?;
        let row = api_keys::Entity::find_by_id(id.0.clone()).one(self.db.reads()).await.map_err(backend_err)?;
        row.map(key_from_row).unwrap_or_else(|| Err(StoreError::NotFound(format!("key {id}"))))
    }

    async fn set_key_limits(&self, id: &ApiKeyId, change: KeyLimitsChange) -> Result<ApiKey, StoreError> {
        if change == KeyLimitsChange::default() {
            return Err(StoreError::Invalid("nothing to change on the key".into()));
        }
        let mut update = api_keys::Entity::update_many().filter(api_keys::Column::Id.eq(id.0.clone()));
        if let Some(expires_at) = change.expires_at {
            update = update
                .col_expr(api_keys::Column::ExpiresAt, sea_orm::sea_query::Expr::value(expires_at.map(|t| t.millis())));
        }
        if let Some(models) = change.models {
            update = update
                .col_expr(api_keys::Column::Models, sea_orm::sea_query::Expr::value(models.map(|m| m.to_string())));
        }
        if let Some(budget) = change.budget {
            // Only the limit and its period: the counters belong to the ledger writer, whose
            // batches check that the limit they decided on is still the stored one.
            update = update
                .col_expr(
                    api_keys::Column::BudgetMicros,
                    sea_orm::sea_query::Expr::value(budget.map(|b| b.limit.micros())),
                )
                .col_expr(
                    api_keys::Column::BudgetPeriod,
                    sea_orm::sea_query::Expr::value(budget.map(|b| b.period.as_str().to_owned())),
                );
        }
        if let Some(ips) = change.allow_ips {
            update = update
                .col_expr(api_keys::Column::AllowIps, sea_orm::sea_query::Expr::value(ips.map(|l| l.to_string())));
        }
        if let Some(rpm) = change.rpm {
            update = update.col_expr(api_keys::Column::Rpm, sea_orm::sea_query::Expr::value(rate_column(rpm)));
        }
        if let Some(tpm) = change.tpm {
            update = update.col_expr(api_keys::Column::Tpm, sea_orm::sea_query::Expr::value(rate_column(tpm)));
        }
        let changed = update.exec(self.db.writes()).await.map_err(backend_err)?;
        if changed.rows_affected == 0 {
            return Err(StoreError::NotFound(format!("key {id}")));
        }
        let row = api_keys::Entity::find_by_id(id.0.clone()).one(self.db.writes()).await.map_err(backend_err)?;
        row.map(key_from_row).unwrap_or_else(|| Err(StoreError::NotFound(format!("key {id}"))))
    }

    async fn keys_of_user(&self, user: &UserId) -> Result<Vec<ApiKey>, StoreError> {
        let rows = api_keys::Entity::find()
            .filter(api_keys::Column::UserId.eq(user.0.clone()))
            .order_by_asc(api_keys::Column::CreatedAt)
            .order_by_asc(api_keys::Column::Id)
            .all(self.db.reads())
            .await
            .map_err(backend_err)?;
        rows.into_iter().map(key_from_row).collect()
    }

    async fn spend_by_key(&self, user: &UserId) -> Result<Vec<KeyTotal>, StoreError> {
        // Not expressible through the query builder without a relation between the two
        // entities; a raw statement on the read connection, like the other aggregates. A settled
        // call has one `settle` entry: the user's entries come through a per-user ledger index,
        // each settled call's charge from its reservation and its key from its task.
        let sql = format!(
            "SELECT t.key_id AS key_id, CAST(SUM(COALESCE(r.actual_micros, 0)) AS BIGINT) AS spent, COUNT(*) AS calls \
             FROM ledger_entries e JOIN reservations r ON r.task_id = e.task_id JOIN tasks t ON t.id = e.task_id \
             WHERE e.user_id = $1 AND e.kind = '{}' AND t.key_id IS NOT NULL \
             GROUP BY t.key_id ORDER BY t.key_id",
            LedgerKind::Settle.as_str()
        );
        let rows = self
            .db
            .reads()
            .query_all_raw(self.statement(&sql, vec![user.as_str().into()]))
            .await
            .map_err(backend_err)?;
        rows.iter()
            .map(|row| {
                Ok(KeyTotal {
                    key: ApiKeyId(row.try_get("", "key_id").map_err(backend_err)?),
                    spent: UsdAmount::from_micros(row.try_get("", "spent").map_err(backend_err)?),
                    calls: row.try_get("", "calls").map_err(backend_err)?,
                })
            })
            .collect()
    }

    async fn key_by_hash(&self, hash: &str) -> Result<Option<(ApiKey, User)>, StoreError> {
        let Some(key) = api_keys::Entity::find()
            .filter(api_keys::Column::KeyHash.eq(hash))
            .one(self.db.reads())
            .await
            .map_err(backend_err)?
        else {
            return Ok(None);
        };
        let key = key_from_row(key)?;
        let user =
            self.user(&key.user_id).await?.ok_or_else(|| StoreError::NotFound(format!("user {}", key.user_id)))?;
        Ok(Some((key, user)))
    }
}
