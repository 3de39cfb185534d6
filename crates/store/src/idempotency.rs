//! `IdempotencyStore`: one row per (user, route, key) holding the request hash and, once known, the answer.
//!
//! A claim lives for the store's idempotency TTL (24 h by default, [`crate::Store::with_idempotency_ttl`])
//! from the time it was claimed: after that its key is fresh again (the next use runs the request, whatever
//! body the key had), except that an unanswered claim is never forgotten while its request may still
//! be running (younger than the stale age the caller passes). The periodic prune (`prune.rs`) deletes
//! expired claims by the same rule.

use async_trait::async_trait;
use domain::ports::{IdempotencyClaim, IdempotencyScope, IdempotencyStore, StoreError};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, Select, UpdateMany};

use crate::entities::idempotency_claims as claims;
use crate::{Store, backend_err};

/// Rows of this scope, for reads.
fn find(scope: IdempotencyScope<'_>) -> Select<claims::Entity> {
    claims::Entity::find_by_id((scope.user.0.clone(), scope.route.to_owned(), scope.key.to_owned()))
}

/// An update of this scope's row.
fn update(scope: IdempotencyScope<'_>) -> UpdateMany<claims::Entity> {
    claims::Entity::update_many()
        .filter(claims::Column::UserId.eq(scope.user.as_str()))
        .filter(claims::Column::Route.eq(scope.route))
        .filter(claims::Column::IdemKey.eq(scope.key))
}

#[async_trait]
impl IdempotencyStore for Store {
    async fn claim(
        &self,
        scope: IdempotencyScope<'_>,
        request_hash: &str,
        stale_after_ms: i64,
    ) -> Result<IdempotencyClaim, StoreError> {
        // Twice at most: the second round follows an expired claim's deletion (or a row that
        // vanished between the insert and the read, released or pruned meanwhile).
        for _ in 0..2 {
            let now = self.now();
            let inserted = claims::Entity::insert(claims::ActiveModel {
                user_id: Set(scope.user.0.clone()),
                route: Set(scope.route.to_owned()),
                idem_key: Set(scope.key.to_owned()),
                request_hash: Set(request_hash.to_owned()),
                task_id: Set(None),
                response_status: Set(None),
                response_body: Set(None),
                created_at: Set(now),
            })
            .on_conflict(
                OnConflict::columns([claims::Column::UserId, claims::Column::Route, claims::Column::IdemKey])
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(self.db.writes())
            .await
            .map_err(backend_err)?;
            if inserted == 1 {
                return Ok(IdempotencyClaim::Claimed);
            }
            let Some(row) = find(scope).one(self.db.reads()).await.map_err(backend_err)? else { continue };
            if self.expired(&row, now, stale_after_ms) {
                // Forgotten: the key is fresh again, whatever body it had. Only this row goes (a
                // concurrent retry that replaced it first has a newer `created_at`).
                claims::Entity::delete_many()
                    .filter(claims::Column::UserId.eq(scope.user.as_str()))
                    .filter(claims::Column::Route.eq(scope.route))
                    .filter(claims::Column::IdemKey.eq(scope.key))
                    .filter(claims::Column::CreatedAt.eq(row.created_at))
                    .exec(self.db.writes())
                    .await
                    .map_err(backend_err)?;
                continue;
            }
            if row.request_hash != request_hash {
                return Ok(IdempotencyClaim::Mismatch);
            }
            if let (Some(status), Some(body)) = (row.response_status, row.response_body) {
                let status = u16::try_from(status)
                    .map_err(|e| StoreError::corrupt(format!("idempotent answer status {status}"), e))?;
                return Ok(IdempotencyClaim::Replay { status, body: body.into_bytes() });
            }
            // Unanswered: take it over only if its claimant must have died, and only once.
            let taken = update(scope)
                .col_expr(claims::Column::CreatedAt, Expr::value(now))
                .filter(claims::Column::ResponseStatus.is_null())
                .filter(claims::Column::CreatedAt.lt(now.saturating_sub(stale_after_ms)))
                .exec(self.db.writes())
                .await
                .map_err(backend_err)?;
            return Ok(if taken.rows_affected == 1 { IdempotencyClaim::Claimed } else { IdempotencyClaim::InProgress });
        }
        Err(StoreError::Conflict("idempotency key vanished; retry".into()))
    }

    async fn complete(&self, scope: IdempotencyScope<'_>, status: u16, body: &[u8]) -> Result<(), StoreError> {
        let body = std::str::from_utf8(body)
            .map_err(|e| StoreError::Invalid(format!("an idempotent answer must be UTF-8 text: {e}")))?;
        update(scope)
            .col_expr(claims::Column::ResponseStatus, Expr::value(i64::from(status)))
            .col_expr(claims::Column::ResponseBody, Expr::value(body))
            .exec(self.db.writes())
            .await
            .map_err(backend_err)?;
        Ok(())
    }

    async fn release(&self, scope: IdempotencyScope<'_>) -> Result<(), StoreError> {
        claims::Entity::delete_many()
            .filter(claims::Column::UserId.eq(scope.user.as_str()))
            .filter(claims::Column::Route.eq(scope.route))
            .filter(claims::Column::IdemKey.eq(scope.key))
            .filter(claims::Column::ResponseStatus.is_null())
            .exec(self.db.writes())
            .await
            .map_err(backend_err)?;
        Ok(())
    }
}

impl Store {
    /// Whether `row` has expired at `now`: older than the TTL, and answered or abandoned.
    fn expired(&self, row: &claims::Model, now: i64, stale_after_ms: i64) -> bool {
        row.created_at < now.saturating_sub(self.idempotency_ttl_ms)
            && (row.response_status.is_some() || row.created_at < now.saturating_sub(stale_after_ms))
    }
}
