//! `VideoStore`: the video worker's leases on tasks (here), stored media (`media.rs`) and the
//! webhook outbox (`webhooks.rs`).
//!
//! A claim is one statement that both picks and leases ([`claim_sql`]): a scan of the oldest due
//! rows (skipping the users already at their share), ranked per user (and, for deliveries, per
//! task) so that no user gets more than its share, feeding the `UPDATE`. On PostgreSQL the scan
//! locks `FOR NO KEY UPDATE SKIP LOCKED`, so replicas claiming together skip each other's rows
//! instead of waiting or taking them twice; on SQLite the single writer makes the statement atomic.

use async_trait::async_trait;
use domain::ports::StoreError;
use domain::{
    ClaimShare, DeliveryAttempt, MediaObject, MediaRecordError, Task, TaskId, TaskStatus, Timestamp, UserId, VideoJob,
    VideoStore, WebhookDelivery,
};
use sea_orm::{ConnectionTrait, FromQueryResult, Value};

use crate::entities::tasks;
use crate::lease::{self, Lease};
use crate::{Backend, Store, backend_err};

/// Claimable video tasks (`$3`: now): the predicate of the partial index `tasks_video_due` (so
/// that both databases can use it), and the task's lease free.
const DUE_TASKS: ClaimQuery = ClaimQuery {
    lease: lease::TASK,
    from: "tasks",
    columns: "id, user_id, next_poll_at, created_at",
    due: || {
        format!(
            concat!(
                "kind = 'video' AND ",
                is_running!("status"),
                " AND (next_poll_at IS NULL OR next_poll_at <= $3) AND {}"
            ),
            lease::TASK.free("", "$3")
        )
    },
    order: "next_poll_at NULLS FIRST, created_at, id",
    one_per_task: false,
};

/// What a claim statement is made of, for one table.
pub(crate) struct ClaimQuery {
    /// The lease the claim takes (its table is the one whose rows are leased).
    pub lease: Lease,
    /// The scan's `FROM` (the table, perhaps aliased).
    pub from: &'static str,
    /// The scan's columns: `id`, `user_id`, the `order` columns (and `task_id` for one per task).
    pub columns: &'static str,
    /// The due rows, their lease free included (`$3`: now).
    pub due: fn() -> String,
    /// Oldest due first, ending with `id`.
    pub order: &'static str,
    /// At most one row per `task_id` (the lowest id among the due ones).
    pub one_per_task: bool,
}

/// The claim statement of `query` within `share`, and its values: `$1` owner, `$2` the lease's end,
/// `$3` now, `$4` rows scanned, `$5` the per-user share, `$6` rows claimed, then the users skipped
/// (at their share already), then `(user, rows in flight)` of the users partly busy. The scan takes
/// the oldest due rows of the users not skipped (four times the rows wanted, so that one user's
/// backlog rarely fills it); each row is ranked within its user, counting what that user already
/// runs, and the oldest rows within every user's share are leased.
pub(crate) fn claim_sql(
    backend: Backend,
    query: &ClaimQuery,
    owner: &str,
    now: Timestamp,
    lease_until: Timestamp,
    share: &ClaimShare,
) -> Result<(String, Vec<Value>), StoreError> {
    let per_user = to_i64("per-user share", share.per_user)?;
    let limit = to_i64("limit", share.limit)?;
    let mut values: Vec<Value> = vec![
        owner.into(),
        lease_until.millis().into(),
        now.millis().into(),
        limit.saturating_mul(4).into(),
        per_user.into(),
        limit.into(),
    ];
    let mut skipped = Vec::new();
    let mut partly = Vec::new();
    for (user, used) in &share.busy {
        let used = to_i64("rows in flight", *used)?;
        if used >= per_user {
            values.push(user.as_str().into());
            skipped.push(format!("${}", values.len()));
        } else if used > 0 {
            values.push(user.as_str().into());
            values.push(used.into());
            partly.push(format!("(${}, ${})", values.len() - 1, values.len()));
        }
    }
    let (table, from, columns, due, order) = (query.lease.table, query.from, query.columns, (query.due)(), query.order);
    let take = query.lease.take();
    let skip = if skipped.is_empty() { String::new() } else { format!(" AND user_id NOT IN ({})", skipped.join(", ")) };
    let lock = match backend {
        Backend::Postgres => " FOR NO KEY UPDATE SKIP LOCKED",
        Backend::Sqlite => "",
    };
    let mut sql =
        format!("WITH candidates AS (SELECT {columns} FROM {from} WHERE {due}{skip} ORDER BY {order} LIMIT $4{lock})");
    let mut source = "candidates";
    if query.one_per_task {
        sql.push_str(
            ", firsts AS (SELECT * FROM (SELECT candidates.*, ROW_NUMBER() OVER (PARTITION BY task_id ORDER BY id) AS k \
             FROM candidates) AS f WHERE k = 1)",
        );
        source = "firsts";
    }
    let rank = format!("ROW_NUMBER() OVER (PARTITION BY r.user_id ORDER BY {order})");
    if partly.is_empty() {
        sql.push_str(&format!(", ranked AS (SELECT r.*, {rank} AS n FROM {source} AS r)"));
    } else {
        sql.push_str(&format!(
            ", busy (busy_user, used) AS (VALUES {}), ranked AS (SELECT r.*, {rank} + COALESCE(b.used, 0) AS n \
             FROM {source} AS r LEFT JOIN busy AS b ON b.busy_user = r.user_id)",
            partly.join(", ")
        ));
    }
    sql.push_str(&format!(", picked AS (SELECT id FROM ranked WHERE n <= $5 ORDER BY {order} LIMIT $6) "));
    sql.push_str(&match backend {
        Backend::Postgres => format!("UPDATE {table} AS t SET {take} FROM picked WHERE t.id = picked.id RETURNING t.*"),
        Backend::Sqlite => format!("UPDATE {table} SET {take} WHERE id IN (SELECT id FROM picked) RETURNING *"),
    });
    Ok((sql, values))
}

/// Converts a count or size the port gives as unsigned to the databases' `BIGINT`.
pub(crate) fn to_i64(what: &str, n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Invalid(format!("{what} {n} is too large")))
}

/// Reads a stored non-negative `BIGINT` back as unsigned.
pub(crate) fn to_u64(what: &str, n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|e| StoreError::corrupt(format!("{what} {n}"), e))
}

impl Store {
    async fn claim_tasks(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        share: &ClaimShare,
    ) -> Result<Vec<VideoJob>, StoreError> {
        if share.limit == 0 || share.per_user == 0 {
            return Ok(Vec::new());
        }
        let (sql, values) = claim_sql(self.backend(), &DUE_TASKS, owner, now, lease_until, share)?;
        let rows = self.db.writes().query_all_raw(self.statement(&sql, values)).await.map_err(backend_err)?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            let task = tasks::Model::from_query_result(row, "").map_err(backend_err)?;
            let next_poll_at: Option<i64> = row.try_get("", "next_poll_at").map_err(backend_err)?;
            let failures: i64 = row.try_get("", "poll_failures").map_err(backend_err)?;
            let failures = u32::try_from(failures)
                .map_err(|e| StoreError::corrupt(format!("poll_failures {failures} of task {}", task.id), e))?;
            claimed.push((next_poll_at, failures, task));
        }
        // RETURNING gives no order: oldest due first, never polled before all.
        claimed.sort_by(|a, b| {
            (a.0.is_some(), a.0, a.2.created_at, &a.2.id).cmp(&(b.0.is_some(), b.0, b.2.created_at, &b.2.id))
        });
        let failures: Vec<u32> = claimed.iter().map(|c| c.1).collect();
        let upstream: Vec<(Option<String>, Option<String>)> =
            claimed.iter().map(|c| (c.2.upstream_id.clone(), c.2.upstream_endpoint.clone())).collect();
        let tasks = self.each_with_billing(self.db.reads(), claimed.into_iter().map(|c| c.2).collect()).await?;
        let mut jobs = Vec::with_capacity(tasks.len());
        for ((task, (upstream_id, upstream_endpoint)), poll_failures) in tasks.into_iter().zip(upstream).zip(failures) {
            match task {
                Ok(task) => jobs.push(VideoJob { task, upstream_id, upstream_endpoint, poll_failures }),
                // A row that does not read back is not run on a guess (a corrupt media record must
                // not price the task as text-only): it keeps its hold and its state, is logged at
                // every claim, and is claimed again when this lease runs out. The others run.
                Err(e) => tracing::error!(error = %e.chain(), "a claimed video task does not read back; left unrun"),
            }
        }
        Ok(jobs)
    }

    async fn release_task(
        &self,
        task: &TaskId,
        owner: &str,
        next_poll_at: Timestamp,
        poll_failures: u32,
    ) -> Result<(), StoreError> {
        let values =
            vec![next_poll_at.millis().into(), i64::from(poll_failures).into(), task.as_str().into(), owner.into()];
        let sql = lease::TASK.release(&["next_poll_at", "poll_failures"]);
        let done = self.db.writes().execute_raw(self.statement(&sql, values)).await.map_err(backend_err)?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(StoreError::Conflict(format!("task {task} is not claimed by {owner}")))
        }
    }

    async fn active_tasks(&self, user: &UserId, model: &str) -> Result<(u64, u64), StoreError> {
        // Kind and statuses written literally, so that both databases can read the partial
        // indexes of active video tasks (a bound value cannot prove a partial index's condition:
        // SQLite scanned the whole task table for the model's count).
        let sql = concat!(
            "SELECT (SELECT COUNT(*) FROM tasks WHERE user_id = $1 AND kind = 'video' AND ",
            is_running!("status"),
            ") AS of_user, (SELECT COUNT(*) FROM tasks WHERE model = $2 AND kind = 'video' AND ",
            is_running!("status"),
            ") AS of_model"
        );
        let values = vec![user.as_str().into(), model.into()];
        let row = self.db.reads().query_one_raw(self.statement(sql, values)).await.map_err(backend_err)?;
        let row = row.ok_or_else(|| StoreError::Backend("active video tasks: no row".into()))?;
        let count = |name: &str| -> Result<u64, StoreError> {
            let n: i64 = row.try_get("", name).map_err(backend_err)?;
            to_u64("active video tasks", n)
        };
        Ok((count("of_user")?, count("of_model")?))
    }
}

#[async_trait]
impl VideoStore for Store {
    async fn claim_video_tasks(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        share: &ClaimShare,
    ) -> Result<Vec<VideoJob>, StoreError> {
        self.claim_tasks(owner, now, lease_until, share).await
    }

    async fn release_video_task(
        &self,
        task: &TaskId,
        owner: &str,
        next_poll_at: Timestamp,
        poll_failures: u32,
    ) -> Result<(), StoreError> {
        self.release_task(task, owner, next_poll_at, poll_failures).await
    }

    async fn renew_video_lease(&self, task: &TaskId, owner: &str, lease_until: Timestamp) -> Result<bool, StoreError> {
        let values = vec![lease_until.millis().into(), task.as_str().into(), owner.into()];
        let done =
            self.db.writes().execute_raw(self.statement(&lease::TASK.renew(""), values)).await.map_err(backend_err)?;
        Ok(done.rows_affected() == 1)
    }

    async fn active_video_tasks(&self, user: &UserId, model: &str) -> Result<(u64, u64), StoreError> {
        self.active_tasks(user, model).await
    }

    async fn add_media(&self, object: MediaObject) -> Result<(), MediaRecordError> {
        self.insert_media(object).await
    }

    async fn remove_media(&self, key: &str) -> Result<(), StoreError> {
        self.delete_media(key).await
    }

    async fn expired_media(
        &self,
        ended_before: Timestamp,
        orphaned_before: Timestamp,
        limit: u64,
    ) -> Result<Vec<String>, StoreError> {
        self.media_expired(ended_before, orphaned_before, limit).await
    }

    async fn take_sweep_lease(
        &self,
        name: &str,
        holder: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError> {
        self.take_lease_row(name, holder, now, until).await
    }

    async fn task_media(&self, task: &TaskId) -> Result<Vec<MediaObject>, StoreError> {
        self.media_of(task).await
    }

    async fn set_media_asset(&self, key: &str, asset_id: &str) -> Result<(), StoreError> {
        self.record_asset(key, asset_id).await
    }

    async fn media_used(&self, user: &UserId) -> Result<u64, StoreError> {
        self.used_media_bytes(user).await
    }

    async fn webhook_secret(&self, user: &UserId) -> Result<Option<String>, StoreError> {
        self.secret_of(user).await
    }

    async fn set_webhook_secret(&self, user: &UserId, secret: &str) -> Result<(), StoreError> {
        self.replace_secret(user, secret).await
    }

    async fn enqueue_webhook(
        &self,
        task: &TaskId,
        status: TaskStatus,
        url: &str,
        event: &str,
        payload: &str,
    ) -> Result<bool, StoreError> {
        self.announce(task, status, url, event, payload).await
    }

    async fn unannounced_tasks(&self, limit: u64) -> Result<Vec<Task>, StoreError> {
        self.unannounced(limit).await
    }

    async fn claim_deliveries(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        share: &ClaimShare,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        self.claim_outbox(owner, now, lease_until, share).await
    }

    async fn renew_delivery_lease(&self, id: i64, owner: &str, lease_until: Timestamp) -> Result<bool, StoreError> {
        self.renew_outbox_lease(id, owner, lease_until).await
    }

    async fn record_delivery(
        &self,
        id: i64,
        attempt: DeliveryAttempt,
        delivered: bool,
        retry_at: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        self.record_attempt(id, attempt, delivered, retry_at).await
    }

    async fn delivery_attempts(&self, task: &TaskId) -> Result<Vec<(String, DeliveryAttempt)>, StoreError> {
        self.attempts_of(task).await
    }
}
