//! The webhook outbox (part of `VideoStore`): status changes enqueued exactly once, deliveries
//! claimed with a lease like video tasks, and every attempt recorded.
//!
//! `tasks.webhook_status` holds the last status announced (NULL: `submitting`, the state a task
//! is created in). Enqueuing is a compare-and-set on it, guarded by the task's current status, in
//! the transaction that inserts the delivery: whoever tries, each status is enqueued once, and
//! only while the task is in it.

use domain::ports::StoreError;
use domain::{ClaimShare, DeliveryAttempt, Task, TaskId, TaskStatus, Timestamp, UserId, WebhookDelivery};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, FromQueryResult, QueryFilter,
    QueryOrder, QuerySelect, TransactionTrait,
};

use crate::entities::{tasks, webhook_attempts, webhook_deliveries};
use crate::lease;
use crate::video::{ClaimQuery, claim_sql, to_u64};
use crate::{Store, backend_err};

/// Deliveries to claim (`$3`: now): the predicate of the partial index `webhook_deliveries_due`,
/// the delivery's lease free, and no earlier delivery of the same task under a live lease (being
/// attempted), so one task's deliveries go one at a time, in order (index `webhook_deliveries_task`).
const DUE_DELIVERIES: ClaimQuery = ClaimQuery {
    lease: lease::DELIVERY,
    from: "webhook_deliveries AS d",
    columns: "d.id, d.user_id, d.task_id, d.next_attempt_at",
    due: || {
        format!(
            "d.delivered_at IS NULL AND d.given_up_at IS NULL AND d.next_attempt_at <= $3 AND {} \
             AND NOT EXISTS (SELECT 1 FROM webhook_deliveries AS e WHERE e.task_id = d.task_id AND e.id < d.id \
             AND e.delivered_at IS NULL AND e.given_up_at IS NULL AND {})",
            lease::DELIVERY.free("d.", "$3"),
            lease::DELIVERY.live("e.", "$3")
        )
    },
    order: "next_attempt_at, id",
    one_per_task: true,
};

/// One attempt: count it, keep its outcome, end or reschedule the delivery, free the lease.
/// `$3`: delivered; `$4`: when it was made; `$5`: the next attempt's time (NULL: give up).
const RECORD: &str = "UPDATE webhook_deliveries SET attempts = attempts + 1, last_status = $1, last_error = $2, \
    delivered_at = CASE WHEN $3 THEN COALESCE(delivered_at, $4) ELSE delivered_at END, \
    given_up_at = CASE WHEN NOT $3 AND $5 IS NULL AND delivered_at IS NULL THEN COALESCE(given_up_at, $4) \
    ELSE given_up_at END, \
    next_attempt_at = COALESCE($5, next_attempt_at), lease_owner = NULL, lease_until = NULL \
    WHERE id = $6 RETURNING attempts";

/// The announcement's compare-and-set: `$1` the status, `$2` the task.
const ANNOUNCE: &str = "UPDATE tasks SET webhook_status = $1 \
    WHERE id = $2 AND status = $1 AND COALESCE(webhook_status, 'submitting') <> $1 RETURNING user_id";

fn attempt_from_row(row: webhook_attempts::Model) -> Result<DeliveryAttempt, StoreError> {
    let status = match row.status {
        None => None,
        Some(s) => Some(u16::try_from(s).map_err(|e| StoreError::corrupt(format!("HTTP status {s}"), e))?),
    };
    Ok(DeliveryAttempt {
        status,
        latency_ms: to_u64("latency", row.latency_ms)?,
        error: row.error,
        at: Timestamp(row.at),
    })
}

fn delivery_from_row(row: webhook_deliveries::Model) -> Result<WebhookDelivery, StoreError> {
    Ok(WebhookDelivery {
        id: row.id,
        task_id: row.task_id.map(TaskId),
        user_id: UserId(row.user_id),
        url: row.url,
        event: row.event,
        payload: row.payload,
        attempts: u32::try_from(row.attempts)
            .map_err(|e| StoreError::corrupt(format!("attempts {}", row.attempts), e))?,
        created_at: Timestamp(row.created_at),
    })
}

impl Store {
    pub(crate) async fn announce(
        &self,
        task: &TaskId,
        status: TaskStatus,
        url: &str,
        event: &str,
        payload: &str,
    ) -> Result<bool, StoreError> {
        let now = self.now();
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let values = vec![status.as_str().into(), task.as_str().into()];
        let Some(row) = txn.query_one_raw(self.statement(ANNOUNCE, values)).await.map_err(backend_err)? else {
            return Ok(false);
        };
        let user: String = row.try_get("", "user_id").map_err(backend_err)?;
        webhook_deliveries::ActiveModel {
            task_id: Set(Some(task.0.clone())),
            user_id: Set(user),
            url: Set(url.to_owned()),
            event: Set(event.to_owned()),
            payload: Set(payload.to_owned()),
            attempts: Set(0),
            next_attempt_at: Set(now),
            lease_owner: Set(None),
            lease_until: Set(None),
            delivered_at: Set(None),
            given_up_at: Set(None),
            last_status: Set(None),
            last_error: Set(None),
            created_at: Set(now),
            ..Default::default()
        }
        .insert(&txn)
        .await
        .map_err(backend_err)?;
        txn.commit().await.map_err(backend_err)?;
        Ok(true)
    }

    pub(crate) async fn unannounced(&self, limit: u64) -> Result<Vec<Task>, StoreError> {
        let txn = self.read_snapshot().await?;
        let rows = tasks::Entity::find()
            .filter(tasks::Column::WebhookUrl.is_not_null())
            .filter(Expr::cust("status <> COALESCE(webhook_status, 'submitting')"))
            .order_by_asc(tasks::Column::UpdatedAt)
            .order_by_asc(tasks::Column::Id)
            .limit(limit)
            .all(&txn)
            .await
            .map_err(backend_err)?;
        let tasks = self.with_billing(&txn, rows).await?;
        txn.commit().await.map_err(backend_err)?;
        Ok(tasks)
    }

    pub(crate) async fn claim_outbox(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        share: &ClaimShare,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        if share.limit == 0 || share.per_user == 0 {
            return Ok(Vec::new());
        }
        let (sql, values) = claim_sql(self.backend(), &DUE_DELIVERIES, owner, now, lease_until, share)?;
        let rows = self.db.writes().query_all_raw(self.statement(&sql, values)).await.map_err(backend_err)?;
        let mut rows = rows
            .iter()
            .map(|r| webhook_deliveries::Model::from_query_result(r, ""))
            .collect::<Result<Vec<_>, _>>()
            .map_err(backend_err)?;
        rows.sort_by_key(|r| (r.next_attempt_at, r.id));
        rows.into_iter().map(delivery_from_row).collect()
    }

    pub(crate) async fn renew_outbox_lease(
        &self,
        id: i64,
        owner: &str,
        lease_until: Timestamp,
    ) -> Result<bool, StoreError> {
        let values = vec![lease_until.millis().into(), id.into(), owner.into()];
        let sql = lease::DELIVERY.renew(" AND delivered_at IS NULL AND given_up_at IS NULL");
        let done = self.db.writes().execute_raw(self.statement(&sql, values)).await.map_err(backend_err)?;
        Ok(done.rows_affected() == 1)
    }

    pub(crate) async fn record_attempt(
        &self,
        id: i64,
        attempt: DeliveryAttempt,
        delivered: bool,
        retry_at: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        let values = vec![
            attempt.status.map(i64::from).into(),
            attempt.error.clone().into(),
            delivered.into(),
            attempt.at.millis().into(),
            retry_at.map(|t| t.millis()).into(),
            id.into(),
        ];
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let row = txn.query_one_raw(self.statement(RECORD, values)).await.map_err(backend_err)?;
        let row = row.ok_or_else(|| StoreError::NotFound(format!("webhook delivery {id}")))?;
        let number: i64 = row.try_get("", "attempts").map_err(backend_err)?;
        webhook_attempts::ActiveModel {
            delivery_id: Set(id),
            attempt: Set(number),
            status: Set(attempt.status.map(i64::from)),
            latency_ms: Set(i64::try_from(attempt.latency_ms).unwrap_or(i64::MAX)),
            error: Set(attempt.error),
            at: Set(attempt.at.millis()),
        }
        .insert(&txn)
        .await
        .map_err(backend_err)?;
        txn.commit().await.map_err(backend_err)
    }

    pub(crate) async fn attempts_of(&self, task: &TaskId) -> Result<Vec<(String, DeliveryAttempt)>, StoreError> {
        let txn = self.read_snapshot().await?;
        let deliveries = webhook_deliveries::Entity::find()
            .filter(webhook_deliveries::Column::TaskId.eq(task.as_str()))
            .all(&txn)
            .await
            .map_err(backend_err)?;
        let events: std::collections::HashMap<i64, String> = deliveries.into_iter().map(|d| (d.id, d.event)).collect();
        let rows = if events.is_empty() {
            Vec::new()
        } else {
            webhook_attempts::Entity::find()
                .filter(webhook_attempts::Column::DeliveryId.is_in(events.keys().copied()))
                .order_by_asc(webhook_attempts::Column::At)
                .order_by_asc(webhook_attempts::Column::DeliveryId)
                .order_by_asc(webhook_attempts::Column::Attempt)
                .all(&txn)
                .await
                .map_err(backend_err)?
        };
        txn.commit().await.map_err(backend_err)?;
        rows.into_iter()
            .map(|row| {
                let event = events.get(&row.delivery_id).cloned().unwrap_or_default();
                Ok((event, attempt_from_row(row)?))
            })
            .collect()
    }
}
