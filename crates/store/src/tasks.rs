//! `TaskStore`: task rows joined with their reservation to give each task its billing view.

use std::collections::HashMap;

use async_trait::async_trait;
use billing::LedgerError;
use billing::book::{BookAnswer, BookOp};
use domain::ports::{OpenWork, PageRequest, StoreError, TaskFilter, TaskOutcome, TaskStore, UpstreamRecord};
use domain::{
    ApiKeyId, BillingStatus, Task, TaskBilling, TaskId, TaskMedia, TaskStats, TaskStatus, TaskTransition, Timestamp,
    UsdAmount, UserId,
};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait, IsolationLevel,
    PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, TransactionTrait,
};

use crate::entities::{reservations, tasks, users};
use crate::{Store, backend_err, is_unique_violation};

fn corrupt(what: &str, id: &str, e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::corrupt(format!("{what} of task {id}"), e)
}

fn billing_of(task: &tasks::Model, hold: Option<&reservations::Model>) -> Result<TaskBilling, StoreError> {
    let pricing_version_id = parsed(task.pricing_version_id.as_deref(), "pricing version id", &task.id)?;
    let Some(hold) = hold else {
        return Ok(TaskBilling {
            status: BillingStatus::Unbilled,
            pricing_version_id,
            estimated: UsdAmount::ZERO,
            actual: None,
            balance_after: None,
            usage_json: task.usage.clone(),
            budget_keys: domain::BudgetKeys::NONE,
            max_cost: task.max_cost_micros.map(UsdAmount::from_micros),
        });
    };
    Ok(TaskBilling {
        status: hold.status.parse().map_err(|e| corrupt("billing status", &task.id, e))?,
        pricing_version_id,
        estimated: UsdAmount::from_micros(hold.amount_micros),
        actual: hold.actual_micros.map(UsdAmount::from_micros),
        balance_after: Some(UsdAmount::from_micros(hold.balance_after_micros)),
        usage_json: task.usage.clone(),
        budget_keys: domain::BudgetKeys::from_column(hold.budget_key.as_deref()),
        max_cost: task.max_cost_micros.map(UsdAmount::from_micros),
    })
}

/// An optional text column read as `T`; text `T` does not accept is corrupt (never `None`).
fn parsed<T: std::str::FromStr>(text: Option<&str>, what: &str, id: &str) -> Result<Option<T>, StoreError>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    text.map(|t| t.parse().map_err(|e| corrupt(what, id, e))).transpose()
}

fn task_from_row(row: tasks::Model, hold: Option<&reservations::Model>) -> Result<Task, StoreError> {
    let billing = billing_of(&row, hold)?;
    let input_mode = parsed(row.input_mode.as_deref(), "input mode", &row.id)?;
    let media_type = parsed(row.media_type.as_deref(), "media type", &row.id)?;
    let ratio = parsed(row.ratio.as_deref(), "ratio", &row.id)?;
    let resolution = parsed(row.resolution.as_deref(), "resolution", &row.id)?;
    let kind = row.kind.parse().map_err(|e| corrupt("kind", &row.id, e))?;
    let status = row.status.parse().map_err(|e| corrupt("status", &row.id, e))?;
    let media = media_from_column(row.media_url.as_deref(), &row.id)?;
    Ok(Task {
        id: TaskId(row.id),
        user_id: UserId(row.user_id),
        key_id: row.key_id.map(ApiKeyId),
        model: row.model,
        kind,
        status,
        prompt: row.prompt,
        provider: row.provider,
        input_mode,
        media_type,
        media,
        duration: row.duration,
        resolution,
        ratio,
        generate_audio: row.generate_audio,
        billing,
        output_url: row.output_url,
        last_frame_url: row.last_frame_url,
        error_code: row.error_code,
        error_message: row.error_message,
        webhook_url: row.webhook_url,
        created_at: Timestamp(row.created_at),
        updated_at: Timestamp(row.updated_at),
        completed_at: row.completed_at.map(Timestamp),
        runner: row.runner,
        requested: row.requested_model,
    })
}

/// A task's media as its `media_url` column holds it: the JSON array, or NULL without media.
pub(crate) fn media_column(media: &[TaskMedia]) -> Option<String> {
    if media.is_empty() {
        return None;
    }
    // Cannot fail: the items have string keys and plain values only (`domain::media`).
    serde_json::to_string(media).ok()
}

/// The `media_url` column read back; a record that does not parse is corrupt (never "no media").
fn media_from_column(text: Option<&str>, id: &str) -> Result<Vec<TaskMedia>, StoreError> {
    match text {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(text).map_err(|e| corrupt("media record", id, e)),
    }
}

pub(crate) fn row_from_task(task: Task) -> tasks::ActiveModel {
    tasks::ActiveModel {
        id: Set(task.id.0),
        user_id: Set(task.user_id.0),
        model: Set(task.model),
        kind: Set(task.kind.as_str().to_owned()),
        status: Set(task.status.as_str().to_owned()),
        prompt: Set(task.prompt),
        provider: Set(task.provider),
        input_mode: Set(task.input_mode.map(|m| m.as_str().to_owned())),
        media_type: Set(task.media_type.map(|m| m.as_str().to_owned())),
        media_url: Set(media_column(&task.media)),
        duration: Set(task.duration),
        resolution: Set(task.resolution.map(|r| r.as_str().to_owned())),
        ratio: Set(task.ratio.map(|r| r.as_str().to_owned())),
        generate_audio: Set(task.generate_audio),
        pricing_version_id: Set(task.billing.pricing_version_id.map(|id| id.to_string())),
        max_cost_micros: Set(task.billing.max_cost.map(UsdAmount::micros)),
        usage: Set(task.billing.usage_json),
        output_url: Set(task.output_url),
        last_frame_url: Set(task.last_frame_url),
        error_code: Set(task.error_code),
        error_message: Set(task.error_message),
        webhook_url: Set(task.webhook_url),
        created_at: Set(task.created_at.millis()),
        updated_at: Set(task.updated_at.millis()),
        completed_at: Set(task.completed_at.map(|t| t.millis())),
        runner: Set(task.runner),
        requested_model: Set(task.requested),
        key_id: Set(task.key_id.map(|k| k.0)),
        upstream_id: sea_orm::ActiveValue::NotSet,
        upstream_endpoint: sea_orm::ActiveValue::NotSet,
        upstream_attempts: sea_orm::ActiveValue::NotSet,
    }
}

/// The port's error for a refused or failed task change.
fn task_change_err(id: &TaskId, e: LedgerError) -> StoreError {
    match e {
        LedgerError::TaskConflict { status: None, .. } => StoreError::NotFound(format!("task {id}")),
        LedgerError::NotTerminal(_) => StoreError::Invalid(e.to_string()),
        LedgerError::Backend(text) => StoreError::Backend(text),
        // Every other refusal moved nothing: the task's stored state does not allow the change.
        LedgerError::TaskConflict { status: Some(_), .. }
        | LedgerError::ReservationOpen(_)
        | LedgerError::AlreadyFinished { .. }
        | LedgerError::UnknownUser(_)
        | LedgerError::InsufficientBalance { .. }
        | LedgerError::KeyBudgetExceeded { .. }
        | LedgerError::UnknownReservation(_)
        | LedgerError::DuplicateReservation(_)
        | LedgerError::InvalidAmount(_)
        | LedgerError::VoucherNotFound
        | LedgerError::VoucherRedeemed
        | LedgerError::VoucherExpired(_)
        | LedgerError::PaymentCredited(_)
        | LedgerError::Overflow => StoreError::Conflict(e.to_string()),
    }
}

impl Store {
    /// A read-only transaction with one snapshot for all its reads (repeatable read on
    /// PostgreSQL; on SQLite every transaction reads one snapshot).
    pub(crate) async fn read_snapshot(&self) -> Result<DatabaseTransaction, StoreError> {
        let isolation = match self.backend() {
            crate::Backend::Postgres => Some(IsolationLevel::RepeatableRead),
            crate::Backend::Sqlite => None,
        };
        self.db.reads().begin_with_config(isolation, None).await.map_err(backend_err)
    }

    /// Joins task rows with their reservations, read on `conn` (the caller's read transaction, so
    /// that a task and its billing come from one snapshot).
    pub(crate) async fn with_billing<C: ConnectionTrait>(
        &self,
        conn: &C,
        rows: Vec<tasks::Model>,
    ) -> Result<Vec<Task>, StoreError> {
        self.each_with_billing(conn, rows).await?.into_iter().collect()
    }

    /// [`Store::with_billing`], with each row's own result: a corrupt row fails alone.
    pub(crate) async fn each_with_billing<C: ConnectionTrait>(
        &self,
        conn: &C,
        rows: Vec<tasks::Model>,
    ) -> Result<Vec<Result<Task, StoreError>>, StoreError> {
        let ids: Vec<String> = rows.iter().map(|t| t.id.clone()).collect();
        let holds: HashMap<String, reservations::Model> = if ids.is_empty() {
            HashMap::new()
        } else {
            reservations::Entity::find()
                .filter(reservations::Column::TaskId.is_in(ids))
                .all(conn)
                .await
                .map_err(backend_err)?
                .into_iter()
                .map(|r| (r.task_id.clone(), r))
                .collect()
        };
        Ok(rows.into_iter().map(|row| task_from_row(row.clone(), holds.get(&row.id))).collect())
    }
}

#[async_trait]
impl TaskStore for Store {
    async fn insert_task(&self, task: Task) -> Result<(), StoreError> {
        let id = task.id.clone();
        row_from_task(task).insert(self.db.writes()).await.map_err(|e| {
            if is_unique_violation(&e) { StoreError::Conflict(format!("task {id} exists")) } else { backend_err(e) }
        })?;
        Ok(())
    }

    async fn task(&self, user: &UserId, id: &TaskId) -> Result<Option<Task>, StoreError> {
        let txn = self.read_snapshot().await?;
        let row = tasks::Entity::find_by_id(id.as_str())
            .filter(tasks::Column::UserId.eq(user.as_str()))
            .one(&txn)
            .await
            .map_err(backend_err)?;
        let task = match row {
            None => None,
            Some(row) => self.with_billing(&txn, vec![row]).await?.pop(),
        };
        txn.commit().await.map_err(backend_err)?;
        Ok(task)
    }

    async fn list_tasks(
        &self,
        user: &UserId,
        filter: TaskFilter,
        page: PageRequest,
    ) -> Result<(Vec<Task>, u64), StoreError> {
        let mut query = tasks::Entity::find().filter(tasks::Column::UserId.eq(user.as_str()));
        if let Some(status) = filter.status {
            query = query.filter(tasks::Column::Status.is_in(status.statuses().iter().map(|s| s.as_str())));
        }
        if let Some(kind) = filter.kind {
            query = query.filter(tasks::Column::Kind.eq(kind.as_str()));
        }
        let txn = self.read_snapshot().await?;
        let total = query.clone().count(&txn).await.map_err(backend_err)?;
        if page.offset() >= total {
            // Past the last task: nothing to read (and an offset beyond i64 cannot be bound).
            txn.commit().await.map_err(backend_err)?;
            return Ok((Vec::new(), total));
        }
        let rows = query
            .order_by_desc(tasks::Column::CreatedAt)
            .order_by_desc(tasks::Column::Id)
            .offset(page.offset())
            .limit(page.page_size)
            .all(&txn)
            .await
            .map_err(backend_err)?;
        let tasks = self.with_billing(&txn, rows).await?;
        txn.commit().await.map_err(backend_err)?;
        Ok((tasks, total))
    }

    async fn task_stats(&self, user: &UserId) -> Result<TaskStats, StoreError> {
        let counts: Vec<(String, i64)> = tasks::Entity::find()
            .select_only()
            .column(tasks::Column::Status)
            .column_as(Expr::cust("COUNT(*)"), "n")
            .filter(tasks::Column::UserId.eq(user.as_str()))
            .group_by(tasks::Column::Status)
            .into_tuple()
            .all(self.db.reads())
            .await
            .map_err(backend_err)?;
        let mut stats = TaskStats::default();
        for (status, n) in counts {
            let status: TaskStatus =
                status.parse().map_err(|e| StoreError::corrupt(format!("task status of user {user}"), e))?;
            stats.total += n;
            if status == TaskStatus::Succeeded {
                stats.succeeded += n;
            }
            if !status.is_terminal() {
                stats.active += n;
            }
        }
        // The running total the write path keeps with the balance (migration 0009).
        let spent: Option<i64> = users::Entity::find_by_id(user.as_str())
            .select_only()
            .column(users::Column::SpentMicros)
            .into_tuple()
            .one(self.db.reads())
            .await
            .map_err(backend_err)?;
        stats.spent = UsdAmount::from_micros(spent.unwrap_or(0));
        Ok(stats)
    }

    async fn finish_task(&self, id: &TaskId, outcome: TaskOutcome) -> Result<(), StoreError> {
        let change = outcome.transition().ok_or(LedgerError::NotTerminal(outcome.status));
        self.transition_task(id, change.map_err(|e| task_change_err(id, e))?).await.map(drop)
    }

    async fn transition_task(&self, id: &TaskId, change: TaskTransition) -> Result<TaskStatus, StoreError> {
        match self.book(BookOp::Move { task: id.clone(), change }).await.map_err(|e| task_change_err(id, e))? {
            BookAnswer::Moved(status) => Ok(status),
            other => Err(StoreError::Backend(format!("unexpected answer to a task change: {other:?}"))),
        }
    }

    async fn touch_task(&self, id: &TaskId, now: Timestamp) -> Result<(), StoreError> {
        let running: Vec<&str> = TaskStatus::RUNNING.iter().map(|s| s.as_str()).collect();
        tasks::Entity::update_many()
            .col_expr(tasks::Column::UpdatedAt, Expr::value(now.millis()))
            .filter(tasks::Column::Id.eq(id.as_str()))
            .filter(tasks::Column::Status.is_in(running))
            .exec(self.db.writes())
            .await
            .map_err(backend_err)?;
        Ok(())
    }

    async fn stale_tasks(
        &self,
        kinds: &[domain::ModelKind],
        before: Timestamp,
        limit: u64,
    ) -> Result<Vec<TaskId>, StoreError> {
        if kinds.is_empty() {
            return Ok(Vec::new());
        }
        // The running statuses are written literally so that both databases read the partial
        // index of running tasks (`tasks_running_updated`): with bound statuses SQLite scanned
        // and sorted the whole task table at every sweep. Placeholders are numbered in order of
        // appearance, as SQLite numbers them.
        let kind_slots: Vec<String> = (1..=kinds.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            concat!(
                "SELECT id FROM tasks WHERE kind IN ({}) AND ",
                is_running!("status"),
                " AND updated_at < ${} ORDER BY updated_at LIMIT ${}"
            ),
            kind_slots.join(", "),
            kinds.len() + 1,
            kinds.len() + 2
        );
        let mut values: Vec<sea_orm::Value> = kinds.iter().map(|k| k.as_str().into()).collect();
        values.push(before.millis().into());
        values.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
        let rows = self.db.reads().query_all_raw(self.statement(&sql, values)).await.map_err(backend_err)?;
        rows.iter().map(|row| row.try_get::<String>("", "id").map(TaskId).map_err(backend_err)).collect()
    }

    async fn open_work(&self) -> Result<OpenWork, StoreError> {
        // Literal predicates, so that both databases use the partial indexes on open
        // reservations and active video tasks (a bound parameter cannot prove a partial index's
        // condition): a scrape never reads the whole table.
        let sql = concat!(
            "SELECT (SELECT COUNT(*) FROM reservations WHERE status = 'reserved') AS open_reservations, \
             (SELECT MIN(created_at) FROM tasks WHERE kind = 'video' AND ",
            is_running!("status"),
            ") AS oldest"
        );
        let row = self.db.reads().query_one_raw(self.statement(sql, Vec::new())).await.map_err(backend_err)?;
        let row = row.ok_or_else(|| StoreError::Backend("open work: no row".into()))?;
        let open_reservations: i64 = row.try_get("", "open_reservations").map_err(backend_err)?;
        let open_reservations = crate::video::to_u64("open reservations", open_reservations)?;
        let oldest: Option<i64> = row.try_get("", "oldest").map_err(backend_err)?;
        Ok(OpenWork { open_reservations, oldest_active_video: oldest.map(Timestamp) })
    }

    async fn upstream_record(&self, id: &TaskId) -> Result<Option<UpstreamRecord>, StoreError> {
        let row = tasks::Entity::find_by_id(id.as_str()).one(self.db.reads()).await.map_err(backend_err)?;
        Ok(row.map(|t| upstream_record(&t)))
    }
}

/// What `row` recorded of its upstream side.
pub(crate) fn upstream_record(row: &tasks::Model) -> UpstreamRecord {
    let via = row.upstream_endpoint.as_ref().map(|endpoint| domain::ports::Via {
        endpoint: endpoint.clone(),
        attempts: row.upstream_attempts.and_then(|n| u32::try_from(n).ok()).unwrap_or(1),
    });
    UpstreamRecord { owner: UserId(row.user_id.clone()), upstream_id: row.upstream_id.clone(), via }
}
