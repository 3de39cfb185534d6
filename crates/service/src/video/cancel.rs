//! `DELETE /api/v1/tasks/{id}`: a `queued` video task is cancelled upstream, then moved to `cancelled`
//! with its hold refunded in one commit (a compare-and-set from `queued`, so a poll that moved it
//! meanwhile wins and the cancel is 409). Any other state is 409 `not_cancellable`; another user's
//! task is 404.

use domain::ports::UpstreamError;
use domain::{ModelKind, Task, TaskEvent, TaskStatus, TaskTransition};

use crate::{Gateway, Principal, ServiceError};

fn not_cancellable(task: &Task) -> ServiceError {
    ServiceError::NotCancellable(format!(
        "task {} is {}; only a queued video task can be cancelled",
        task.id, task.status
    ))
}

impl Gateway {
    /// Cancels the caller's queued task `id` and returns it.
    pub async fn cancel_task(&self, who: &Principal, id: &str) -> Result<Task, ServiceError> {
        let task = self.task(who, id).await?;
        if task.kind != ModelKind::Video || task.status != TaskStatus::Queued {
            return Err(not_cancellable(&task));
        }
        let video = self.video()?;
        let record = self.ports.tasks.upstream_record(&task.id).await?;
        let (upstream_id, via) = record.map(|r| (r.upstream_id, r.via)).unwrap_or_default();
        let upstream_id =
            upstream_id.ok_or_else(|| ServiceError::Internal(format!("queued task {} has no upstream id", task.id)))?;
        let at = via.map(|v| v.endpoint);
        match video.upstream.cancel_task(at.as_deref(), &upstream_id).await {
            Ok(()) => {}
            // The upstream refuses the cancel: the task is no longer queued there (it started or ended).
            Err(e) if e.is_callers_fault() => return Err(not_cancellable(&task)),
            // The upstream no longer has it (it ended and was deleted).
            Err(UpstreamError::Status { status: 404, .. }) => return Err(not_cancellable(&task)),
            Err(e) => return Err(crate::call::upstream_error(&e)),
        }
        let change = TaskTransition::new(TaskStatus::Queued, TaskEvent::Cancel);
        let ended = self.ports.calls.close_task(&task.id, &super::held_of(&task), None, change).await;
        match ended {
            Ok(ended) => self.metrics.call_ended(&task.id, &task.model, ended.status, ended.actual, ended.reserved),
            Err(billing::LedgerError::TaskConflict { .. } | billing::LedgerError::AlreadyFinished { .. }) => {
                let now = self.task(who, id).await?;
                return Err(not_cancellable(&now));
            }
            Err(e) => return Err(e.into()),
        }
        self.announce(&task.user_id, &task.id).await;
        self.task(who, id).await
    }
}
