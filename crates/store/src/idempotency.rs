//! `IdempotencyStore`: one row per (user, key) holding the request hash and, once known, the answer.

use async_trait::async_trait;
use domain::UserId;
use domain::ports::{IdempotencyClaim, IdempotencyStore, StoreError};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter};

use crate::entities::idempotency_keys as keys;
use crate::{Store, backend_err};

#[async_trait]
impl IdempotencyStore for Store {
    async fn claim(
        &self,
        user: &UserId,
        key: &str,
        request_hash: &str,
        stale_after_ms: i64,
    ) -> Result<IdempotencyClaim, StoreError> {
        let now = self.now();
        let inserted = keys::Entity::insert(keys::ActiveModel {
            user_id: Set(user.0.clone()),
            idem_key: Set(key.to_owned()),
            request_hash: Set(request_hash.to_owned()),
            task_id: Set(None),
            response_status: Set(None),
            response_body: Set(None),
            created_at: Set(now),
        })
        .on_conflict(OnConflict::columns([keys::Column::UserId, keys::Column::IdemKey]).do_nothing().to_owned())
        .exec_without_returning(&self.db)
        .await
        .map_err(backend_err)?;
        if inserted == 1 {
            return Ok(IdempotencyClaim::Claimed);
        }
        let row = keys::Entity::find_by_id((user.0.clone(), key.to_owned()))
            .one(&self.db)
            .await
            .map_err(backend_err)?
            .ok_or_else(|| StoreError::Conflict("idempotency key vanished; retry".into()))?;
        if row.request_hash != request_hash {
            return Ok(IdempotencyClaim::Mismatch);
        }
        if let (Some(status), Some(body)) = (row.response_status, row.response_body) {
            return Ok(IdempotencyClaim::Replay {
                status: u16::try_from(status).unwrap_or(500),
                body: body.into_bytes(),
            });
        }
        // Unanswered: take it over only if its claimant must have died, and only once.
        let taken = keys::Entity::update_many()
            .col_expr(keys::Column::CreatedAt, Expr::value(now))
            .filter(keys::Column::UserId.eq(user.as_str()))
            .filter(keys::Column::IdemKey.eq(key))
            .filter(keys::Column::ResponseStatus.is_null())
            .filter(keys::Column::CreatedAt.lt(now.saturating_sub(stale_after_ms)))
            .exec(&self.db)
            .await
            .map_err(backend_err)?;
        Ok(if taken.rows_affected == 1 { IdempotencyClaim::Claimed } else { IdempotencyClaim::InProgress })
    }

    async fn complete(&self, user: &UserId, key: &str, status: u16, body: &[u8]) -> Result<(), StoreError> {
        let body = String::from_utf8_lossy(body).into_owned();
        keys::Entity::update_many()
            .col_expr(keys::Column::ResponseStatus, Expr::value(i64::from(status)))
            .col_expr(keys::Column::ResponseBody, Expr::value(body))
            .filter(keys::Column::UserId.eq(user.as_str()))
            .filter(keys::Column::IdemKey.eq(key))
            .exec(&self.db)
            .await
            .map_err(backend_err)?;
        Ok(())
    }

    async fn release(&self, user: &UserId, key: &str) -> Result<(), StoreError> {
        keys::Entity::delete_many()
            .filter(keys::Column::UserId.eq(user.as_str()))
            .filter(keys::Column::IdemKey.eq(key))
            .filter(keys::Column::ResponseStatus.is_null())
            .exec(&self.db)
            .await
            .map_err(backend_err)?;
        Ok(())
    }
}
