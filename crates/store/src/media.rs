//! Stored media and its quota, and users' webhook secrets (part of `VideoStore`).
//!
//! The quota is one conditional `UPDATE users SET media_used_bytes = media_used_bytes + n WHERE
//! media_used_bytes <= media_quota_bytes - n` in the transaction that inserts the object, so no
//! concurrency passes a quota; removing an object deletes its row and gives its bytes back in one
//! transaction, so bytes come back once. Each write transaction starts with its write, so that on
//! SQLite it takes the write lock first and never has to upgrade a stale read snapshot.

use domain::ports::StoreError;
use domain::{MediaObject, MediaRecordError, TaskId, Timestamp, UserId};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    TransactionTrait,
};

use crate::entities::{media_objects, users};
use crate::video::{to_i64, to_u64};
use crate::{Store, backend_err, is_unique_violation};

fn media_from_row(row: media_objects::Model) -> Result<MediaObject, StoreError> {
    Ok(MediaObject {
        kind: row.kind.parse().map_err(|e| StoreError::corrupt(format!("media kind of {}", row.key), e))?,
        position: u32::try_from(row.position)
            .map_err(|e| StoreError::corrupt(format!("media position {}", row.position), e))?,
        bytes: to_u64("media size", row.bytes)?,
        key: row.key,
        user: UserId(row.user_id),
        task: TaskId(row.task_id),
        mime: row.mime,
        source_url: row.source_url,
        asset_id: row.asset_id,
        created_at: Timestamp(row.created_at),
    })
}

fn row_from_media(object: &MediaObject) -> Result<media_objects::ActiveModel, StoreError> {
    Ok(media_objects::ActiveModel {
        key: Set(object.key.clone()),
        user_id: Set(object.user.0.clone()),
        task_id: Set(object.task.0.clone()),
        position: Set(i64::from(object.position)),
        kind: Set(object.kind.as_str().to_owned()),
        mime: Set(object.mime.clone()),
        bytes: Set(to_i64("media size", object.bytes)?),
        source_url: Set(object.source_url.clone()),
        asset_id: Set(object.asset_id.clone()),
        created_at: Set(object.created_at.millis()),
    })
}

impl Store {
    pub(crate) async fn insert_media(&self, object: MediaObject) -> Result<(), MediaRecordError> {
        let row = row_from_media(&object)?;
        let wanted = to_i64("media size", object.bytes)?;
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let counted = users::Entity::update_many()
            .col_expr(users::Column::MediaUsedBytes, Expr::col(users::Column::MediaUsedBytes).add(wanted))
            .filter(users::Column::Id.eq(object.user.as_str()))
            .filter(Expr::col(users::Column::MediaUsedBytes).lte(Expr::col(users::Column::MediaQuotaBytes).sub(wanted)))
            .exec(&txn)
            .await
            .map_err(backend_err)?;
        if counted.rows_affected != 1 {
            let user = users::Entity::find_by_id(object.user.0.clone()).one(&txn).await.map_err(backend_err)?;
            let user = user.ok_or_else(|| StoreError::NotFound(format!("user {}", object.user)))?;
            return Err(MediaRecordError::QuotaExceeded {
                quota: to_u64("media quota", user.media_quota_bytes)?,
                used: to_u64("media bytes", user.media_used_bytes)?,
                wanted: object.bytes,
            });
        }
        row.insert(&txn).await.map_err(|e| {
            if is_unique_violation(&e) {
                StoreError::Conflict(format!("media {} is stored already", object.key))
            } else {
                backend_err(e)
            }
        })?;
        txn.commit().await.map_err(backend_err)?;
        Ok(())
    }

    pub(crate) async fn delete_media(&self, key: &str) -> Result<(), StoreError> {
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let gone = txn
            .query_one_raw(
                self.statement(
                    "DELETE FROM media_objects WHERE \"key\" = $1 RETURNING user_id, bytes",
                    vec![key.into()],
                ),
            )
            .await
            .map_err(backend_err)?;
        if let Some(row) = gone {
            let user: String = row.try_get("", "user_id").map_err(backend_err)?;
            let bytes: i64 = row.try_get("", "bytes").map_err(backend_err)?;
            users::Entity::update_many()
                .col_expr(users::Column::MediaUsedBytes, Expr::col(users::Column::MediaUsedBytes).sub(bytes))
                .filter(users::Column::Id.eq(user))
                .exec(&txn)
                .await
                .map_err(backend_err)?;
        }
        txn.commit().await.map_err(backend_err)
    }

    pub(crate) async fn media_expired(
        &self,
        ended_before: Timestamp,
        orphaned_before: Timestamp,
        limit: u64,
    ) -> Result<Vec<String>, StoreError> {
        let sql = "SELECT m.\"key\" AS media_key FROM media_objects m LEFT JOIN tasks t ON t.id = m.task_id \
                   WHERE (t.id IS NULL AND m.created_at < $1) OR (t.completed_at IS NOT NULL AND t.completed_at < $2) \
                   ORDER BY m.created_at, m.\"key\" LIMIT $3";
        let values = vec![
            orphaned_before.millis().into(),
            ended_before.millis().into(),
            to_i64("media sweep batch", limit)?.into(),
        ];
        let rows = self.db.reads().query_all_raw(self.statement(sql, values)).await.map_err(backend_err)?;
        rows.iter().map(|row| row.try_get::<String>("", "media_key").map_err(backend_err)).collect()
    }

    pub(crate) async fn take_lease_row(
        &self,
        name: &str,
        holder: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        let values = vec![name.into(), holder.into(), until.millis().into(), now.millis().into()];
        let done = self
            .db
            .writes()
            .execute_raw(self.statement(&crate::lease::SWEEP.take_row(), values))
            .await
            .map_err(backend_err)?;
        Ok(done.rows_affected() == 1)
    }

    pub(crate) async fn media_of(&self, task: &TaskId) -> Result<Vec<MediaObject>, StoreError> {
        media_objects::Entity::find()
            .filter(media_objects::Column::TaskId.eq(task.as_str()))
            .order_by_asc(media_objects::Column::Position)
            .order_by_asc(media_objects::Column::Key)
            .all(self.db.reads())
            .await
            .map_err(backend_err)?
            .into_iter()
            .map(media_from_row)
            .collect()
    }

    pub(crate) async fn record_asset(&self, key: &str, asset_id: &str) -> Result<(), StoreError> {
        let done = media_objects::Entity::update_many()
            .col_expr(media_objects::Column::AssetId, Expr::value(asset_id))
            .filter(media_objects::Column::Key.eq(key))
            .exec(self.db.writes())
            .await
            .map_err(backend_err)?;
        if done.rows_affected == 1 { Ok(()) } else { Err(StoreError::NotFound(format!("media {key}"))) }
    }

    async fn user_row(&self, user: &UserId) -> Result<users::Model, StoreError> {
        let row = users::Entity::find_by_id(user.0.clone()).one(self.db.reads()).await.map_err(backend_err)?;
        row.ok_or_else(|| StoreError::NotFound(format!("user {user}")))
    }

    pub(crate) async fn used_media_bytes(&self, user: &UserId) -> Result<u64, StoreError> {
        to_u64("media bytes", self.user_row(user).await?.media_used_bytes)
    }

    pub(crate) async fn secret_of(&self, user: &UserId) -> Result<Option<String>, StoreError> {
        Ok(self.user_row(user).await?.webhook_secret)
    }

    pub(crate) async fn replace_secret(&self, user: &UserId, secret: &str) -> Result<(), StoreError> {
        if secret.is_empty() {
            return Err(StoreError::Invalid("a webhook secret must not be empty".into()));
        }
        let done = users::Entity::update_many()
            .col_expr(users::Column::WebhookSecret, Expr::value(secret))
            .filter(users::Column::Id.eq(user.as_str()))
            .exec(self.db.writes())
            .await
            .map_err(backend_err)?;
        if done.rows_affected == 1 { Ok(()) } else { Err(StoreError::NotFound(format!("user {user}"))) }
    }
}
