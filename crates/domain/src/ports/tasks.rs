//! The tasks port: tasks and their billing view, pages of lists, open work and outcomes.

use async_trait::async_trait;

use super::StoreError;
use crate::records::{Task, TaskId, TaskStats, UserId};
use crate::task::StatusFilter;

/// One page of a list: `page` counts from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// 1-based page number.
    pub page: u64,
    /// Items per page.
    pub page_size: u64,
}

impl PageRequest {
    /// Items to skip before this page.
    pub fn offset(&self) -> u64 {
        self.page.saturating_sub(1).saturating_mul(self.page_size)
    }

    /// How many pages `total` items fill.
    pub fn total_pages(&self, total: u64) -> u64 {
        total.div_ceil(self.page_size.max(1))
    }
}

/// Which of a user's tasks a list shows; the default shows all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// A state or group of states.
    pub status: Option<StatusFilter>,
    /// A kind of model.
    pub kind: Option<crate::ModelKind>,
}

/// Tasks and their billing view.
#[async_trait]
pub trait TaskStore: Send + Sync {
    /// Stores a new task.
    async fn insert_task(&self, task: Task) -> Result<(), StoreError>;
    /// The task if it exists and belongs to `user`.
    async fn task(&self, user: &UserId, id: &TaskId) -> Result<Option<Task>, StoreError>;
    /// One page of the user's tasks, newest first, and the total matching the filter.
    async fn list_tasks(
        &self,
        user: &UserId,
        filter: TaskFilter,
        page: PageRequest,
    ) -> Result<(Vec<Task>, u64), StoreError>;
    /// Counts for the overview.
    async fn task_stats(&self, user: &UserId) -> Result<TaskStats, StoreError>;
    /// Moves a task to a terminal `status` with its usage (JSON text) or error; a task that is
    /// already terminal is left unchanged (`Conflict`). Same rules as `transition_task` with
    /// [`TaskOutcome::transition`]: a non-terminal `status` is `Invalid`, an unknown task `NotFound`,
    /// and a task whose reservation is still open is refused (`Conflict`): end both together with
    /// `billing::CallBook::close_call`.
    async fn finish_task(&self, id: &TaskId, outcome: TaskOutcome) -> Result<(), StoreError>;
    /// Moves a task by `change`, one compare-and-set on its current state (`UPDATE … WHERE status =
    /// <from>`), through the transition table of [`crate::TaskStatus::apply`]; returns the new state.
    /// `NotFound` when there is no such task; `Conflict` when it is not in `change.from`, when the
    /// table refuses the event, or when the new state is terminal while the task's reservation is
    /// still open (money-moving ends go through `billing::CallBook::close_task`).
    async fn transition_task(
        &self,
        id: &TaskId,
        change: crate::TaskTransition,
    ) -> Result<crate::TaskStatus, StoreError>;
    /// Marks a running task as alive (`updated_at = now`); long streams call it periodically.
    async fn touch_task(&self, id: &TaskId, now: crate::time::Timestamp) -> Result<(), StoreError>;
    /// Up to `limit` tasks of `kinds` still running whose last change is older than `before`:
    /// synchronous calls abandoned by a crash or restart.
    async fn stale_tasks(
        &self,
        kinds: &[crate::kind::ModelKind],
        before: crate::time::Timestamp,
        limit: u64,
    ) -> Result<Vec<TaskId>, StoreError>;
    /// What is open across the whole store right now (for metrics): reservations not yet ended,
    /// and when the oldest video task that is not terminal was created.
    async fn open_work(&self) -> Result<OpenWork, StoreError>;

    /// What task `id` recorded of its upstream side (whoever owns it), if it exists.
    async fn upstream_record(&self, id: &TaskId) -> Result<Option<UpstreamRecord>, StoreError>;
}

/// Work not yet finished, over every user and replica.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenWork {
    /// Reservations still holding money.
    pub open_reservations: u64,
    /// Creation time of the oldest video task that is not terminal (`None` when there is none).
    pub oldest_active_video: Option<crate::time::Timestamp>,
}

/// What a task recorded of its upstream side: for operators, and for polling a video task where
/// it was created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamRecord {
    /// The task's owner.
    pub owner: UserId,
    /// The upstream's id for the task (video tasks, once accepted).
    pub upstream_id: Option<String>,
    /// The configured endpoint that served it (or was tried last) and the attempts made; `None`
    /// when no call was made or it was recorded before routing.
    pub via: Option<crate::ports::Via>,
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskOutcome {
    /// The terminal state.
    pub status: crate::task::TaskStatus,
    /// Usage reported by the upstream, as JSON text.
    pub usage_json: Option<String>,
    /// Failure code.
    pub error_code: Option<String>,
    /// Failure text.
    pub error_message: Option<String>,
    /// The upstream endpoint the call went to and its attempts (`None`: no router, or nothing sent).
    pub via: Option<crate::ports::Via>,
    /// The model that served the call and its price version, when a fallback served it (`None`:
    /// the task's own model).
    pub served_by: Option<(String, crate::pricing::PricingVersionId)>,
}

impl TaskOutcome {
    /// The change that ends a task in this outcome from whatever running state it is in, recording
    /// its usage and error; `None` when `status` is not terminal.
    pub fn transition(&self) -> Option<crate::TaskTransition> {
        let event = crate::TaskEvent::ending_in(self.status)?;
        Some(crate::TaskTransition {
            from: None,
            event,
            update: crate::TaskUpdate {
                usage_json: self.usage_json.clone(),
                error_code: self.error_code.clone(),
                error_message: self.error_message.clone(),
                via: self.via.clone(),
                served_by: self.served_by.clone(),
                ..crate::TaskUpdate::default()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_arithmetic() {
        let p = PageRequest { page: 3, page_size: 20 };
        assert_eq!(p.offset(), 40);
        assert_eq!(p.total_pages(0), 0);
        assert_eq!(p.total_pages(20), 1);
        assert_eq!(p.total_pages(21), 2);
        assert_eq!(PageRequest { page: u64::MAX, page_size: 100 }.offset(), u64::MAX);
    }
}
