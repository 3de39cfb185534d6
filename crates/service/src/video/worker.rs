//! The video worker: a loop in every `serve` process. Each pass claims due tasks with a lease (so with
//! several replicas each task is handled by one at a time), advances them concurrently, and delivers
//! due webhooks. After a crash or restart every task that is not terminal is due again once its lease
//! runs out, so it is picked up where it was.
//!
//! Advancing a task: past the deadline → `expired` (refunded, cancelled upstream when queued);
//! `submitting` → submit ([`super::submit`]) → `queued`; `queued` / `processing` → poll: `running` →
//! `processing`; `succeeded` → settled at the reserved price version on the upstream's
//! `usage.completion_tokens`; `failed`, `cancelled`, `expired` → refunded. An upstream that cannot be
//! reached keeps the reservation and the task is polled again after a back-off (the poll interval
//! doubled per failure in a row, up to a maximum). Every state change goes through the store's
//! compare-and-set, so a cancel racing a poll ends the task once.

use std::future::Future;

use catalog::ModelDef;
use domain::ports::UpstreamError;
use domain::{TaskEvent, TaskStatus, TaskTransition, TaskUpdate, Timestamp, UsdAmount, VideoJob};
use tokio::task::JoinSet;

use super::millis;
use super::poll::{UpstreamState, parse_task};
use super::submit::{Submission, media_items};
use crate::{Gateway, ServiceError};

/// What one worker pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TickReport {
    /// Tasks claimed and advanced.
    pub tasks: usize,
    /// Webhook deliveries attempted.
    pub deliveries: usize,
}

/// What to do with a claimed task after this pass.
enum Next {
    /// It ended (or moved past this worker): nothing to schedule.
    Done,
    /// Poll it again after the regular interval.
    Poll,
    /// Check again soon (waiting for assets), keeping the failure count.
    Soon,
    /// A failure: back off.
    Backoff,
}

impl Gateway {
    /// Runs the worker as `owner` (a name unique to this process) until `shutdown` completes.
    pub async fn run_video_worker(self, owner: String, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            match self.video_tick(&owner).await {
                Ok(report) if report.tasks + report.deliveries > 0 => tracing::debug!(?report, "video worker pass"),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "video worker pass failed"),
            }
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(self.video_settings.poll_interval) => {}
                () = self.video_wake.notified() => {}
            }
        }
    }

    /// Wakes the worker of this process (a task was just created).
    pub(crate) fn wake_video_worker(&self) {
        self.video_wake.notify_one();
    }

    /// One pass: announces unannounced changes, advances the due tasks and delivers the due webhooks.
    pub async fn video_tick(&self, owner: &str) -> Result<TickReport, ServiceError> {
        self.video()?;
        self.announce_missing().await?;
        let now = self.ports.clock.now();
        let lease_until = Timestamp(now.millis().saturating_add(millis(self.video_settings.lease)));
        let batch = self.video_settings.batch;
        let jobs = self.ports.videos.claim_video_tasks(owner, now, lease_until, batch).await?;
        let tasks = jobs.len();
        let mut running = JoinSet::new();
        for job in jobs {
            let (gateway, owner) = (self.clone(), owner.to_owned());
            running.spawn(async move { gateway.advance(&owner, job).await });
        }
        while let Some(done) = running.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "advancing a video task failed"),
                Err(e) => tracing::error!(error = %e, "a video task's advance panicked"),
            }
        }
        let deliveries = self.ports.videos.claim_deliveries(owner, now, lease_until, batch).await?;
        let count = deliveries.len();
        // One task's deliveries go one after another in the order they were enqueued, so a receiver
        // that answers sees its statuses in order; different tasks' go concurrently.
        let mut by_task: std::collections::BTreeMap<String, Vec<domain::WebhookDelivery>> =
            std::collections::BTreeMap::new();
        for delivery in deliveries {
            by_task.entry(delivery.task_id.0.clone()).or_default().push(delivery);
        }
        for (_, mut queue) in by_task {
            queue.sort_by_key(|d| d.id);
            let gateway = self.clone();
            running.spawn(async move {
                for delivery in queue {
                    gateway.deliver(delivery).await?;
                }
                Ok(())
            });
        }
        while let Some(done) = running.join_next().await {
            if let Ok(Err(e)) | Err(e) = done.map_err(|e| ServiceError::Internal(e.to_string())) {
                tracing::error!(error = %e, "a webhook delivery failed to run");
            }
        }
        Ok(TickReport { tasks, deliveries: count })
    }

    /// Runs `step` while renewing `owner`'s lease on the task every third of a lease, so that a step
    /// longer than a lease (large imports, slow asset checks) is never taken over by another replica.
    async fn renewing<T>(&self, owner: &str, job: &VideoJob, step: impl Future<Output = T>) -> T {
        let lease = self.video_settings.lease;
        let mut step = std::pin::pin!(step);
        loop {
            tokio::select! {
                out = &mut step => return out,
                () = tokio::time::sleep(lease / 3) => {
                    let until = Timestamp(self.ports.clock.now().millis().saturating_add(millis(lease)));
                    match self.ports.videos.renew_video_lease(&job.task.id, owner, until).await {
                        Ok(true) => {}
                        Ok(false) => tracing::warn!(task = %job.task.id, "the lease on a task in progress was lost"),
                        Err(e) => tracing::warn!(task = %job.task.id, error = %e, "renewing a task lease failed"),
                    }
                }
            }
        }
    }

    /// Advances one claimed task and schedules (or drops) its next pass.
    async fn advance(&self, owner: &str, job: VideoJob) -> Result<(), ServiceError> {
        let next = match self.renewing(owner, &job, self.step(&job)).await {
            Ok(next) => next,
            Err(e) => {
                tracing::error!(task = %job.task.id, error = %e, "video task step failed; backing off");
                Next::Backoff
            }
        };
        let now = self.ports.clock.now().millis();
        let settings = &self.video_settings;
        let (delay, failures) = match next {
            Next::Done => return Ok(()),
            Next::Poll => (millis(settings.poll_interval), 0),
            Next::Soon => (millis(settings.poll_interval.min(settings.asset_poll)), job.poll_failures),
            Next::Backoff => {
                let failures = job.poll_failures.saturating_add(1);
                let factor = 1_i64.checked_shl(failures.min(30)).unwrap_or(i64::MAX);
                (
                    millis(settings.poll_interval).saturating_mul(factor).min(millis(settings.max_poll_interval)),
                    failures,
                )
            }
        };
        let at = Timestamp(now.saturating_add(delay));
        self.ports.videos.release_video_task(&job.task.id, owner, at, failures).await.or_else(|e| match e {
            // The task ended meanwhile (cancelled, or its lease ran out and another worker finished it).
            domain::ports::StoreError::Conflict(_) => Ok(()),
            other => Err(other.into()),
        })
    }

    async fn step(&self, job: &VideoJob) -> Result<Next, ServiceError> {
        let task = &job.task;
        if task.status.is_terminal() {
            return Ok(Next::Done);
        }
        let age = self.ports.clock.now().millis().saturating_sub(task.created_at.millis());
        if age > millis(self.video_settings.deadline) {
            return self.expire(job).await;
        }
        let def = self.video_model(&task.model).await?;
        match task.status {
            TaskStatus::Submitting => self.submit_step(&def, job).await,
            _ => self.poll_step(job).await,
        }
    }

    async fn submit_step(&self, def: &ModelDef, job: &VideoJob) -> Result<Next, ServiceError> {
        let task = &job.task;
        match self.submit_video(def, job).await? {
            Submission::Accepted(upstream_id) => {
                let update = TaskUpdate { upstream_id: Some(upstream_id), ..TaskUpdate::default() };
                let change = TaskTransition { from: Some(TaskStatus::Submitting), event: TaskEvent::Accepted, update };
                self.ports.tasks.transition_task(&task.id, change).await?;
                self.announce(&task.user_id, &task.id).await;
                Ok(Next::Poll)
            }
            Submission::Waiting => Ok(Next::Soon),
            Submission::Failed { code, message } => {
                self.end(job, None, TaskEvent::Failed, error_update(code, message)).await
            }
            Submission::Retry(why) => {
                tracing::warn!(task = %task.id, why, "submitting a video task failed; will retry");
                Ok(Next::Backoff)
            }
        }
    }

    async fn poll_step(&self, job: &VideoJob) -> Result<Next, ServiceError> {
        let task = &job.task;
        let Some(upstream_id) = &job.upstream_id else {
            return Err(ServiceError::Internal(format!("task {} is {} without an upstream id", task.id, task.status)));
        };
        let started = std::time::Instant::now();
        let answer = self.video()?.upstream.get_task(upstream_id).await;
        self.metrics.upstream(&task.model, started.elapsed(), answer.as_ref().err());
        let state = match answer.and_then(|b| parse_task(&b)) {
            Ok(state) => state,
            Err(UpstreamError::Status { status: 404, .. }) => UpstreamState::Failed {
                code: "upstream_task_missing".into(),
                message: format!("the upstream no longer knows task {upstream_id}"),
            },
            Err(e) => {
                // Unknown outcome: keep the reservation and look again later.
                tracing::warn!(task = %task.id, error = %e, "polling a video task failed");
                return Ok(Next::Backoff);
            }
        };
        match state {
            UpstreamState::Queued => Ok(Next::Poll),
            UpstreamState::Running if task.status == TaskStatus::Queued => {
                let change = TaskTransition::new(TaskStatus::Queued, TaskEvent::Started);
                self.ports.tasks.transition_task(&task.id, change).await?;
                self.announce(&task.user_id, &task.id).await;
                Ok(Next::Poll)
            }
            UpstreamState::Running => Ok(Next::Poll),
            UpstreamState::Succeeded { video_url, last_frame_url, completion_tokens, usage } => {
                let charge = self.video_charge(job, completion_tokens).await?;
                let update = TaskUpdate {
                    output_url: video_url,
                    last_frame_url,
                    usage_json: Some(usage),
                    ..TaskUpdate::default()
                };
                self.end(job, Some(charge), TaskEvent::Succeeded, update).await
            }
            UpstreamState::Failed { code, message } => {
                self.end(
                    job,
                    None,
                    TaskEvent::Failed,
                    TaskUpdate { error_code: Some(code), error_message: Some(message), ..TaskUpdate::default() },
                )
                .await
            }
            UpstreamState::Cancelled if task.status == TaskStatus::Queued => {
                self.end(job, None, TaskEvent::Cancel, TaskUpdate::default()).await
            }
            UpstreamState::Cancelled => {
                let update = error_update("upstream_cancelled", "the upstream cancelled the task".into());
                self.end(job, None, TaskEvent::Failed, update).await
            }
            UpstreamState::Expired => {
                let update = error_update("expired", "the upstream expired the task".into());
                self.end(job, None, TaskEvent::Expire, update).await
            }
        }
    }

    /// The deadline passed: cancel upstream when still queued (best effort), then expire and refund.
    async fn expire(&self, job: &VideoJob) -> Result<Next, ServiceError> {
        if let (TaskStatus::Queued, Some(id)) = (job.task.status, &job.upstream_id)
            && let Err(e) = self.video()?.upstream.cancel_task(id).await
        {
            tracing::warn!(task = %job.task.id, error = %e, "cancelling an expired task upstream failed");
        }
        let secs = self.video_settings.deadline.as_secs();
        let update = error_update("deadline_exceeded", format!("the task did not finish within {secs} seconds"));
        self.end(job, None, TaskEvent::Expire, update).await
    }

    /// Ends the task by `event` with its hold charged `charge` (or refunded), in one commit from the
    /// state the job saw; a task that moved meanwhile is left to whoever moved it.
    async fn end(
        &self,
        job: &VideoJob,
        charge: Option<UsdAmount>,
        event: TaskEvent,
        update: TaskUpdate,
    ) -> Result<Next, ServiceError> {
        let task = &job.task;
        let change = TaskTransition { from: Some(task.status), event, update };
        let ended = self.ports.calls.close_task(&task.id, &task.user_id, task.billing.estimated, charge, change).await;
        match ended {
            Ok(ended) => self.metrics.call_ended(&task.model, ended.status, ended.actual, ended.reserved),
            Err(billing::LedgerError::TaskConflict { .. } | billing::LedgerError::AlreadyFinished { .. }) => {
                tracing::info!(task = %task.id, "the task changed meanwhile; leaving it");
            }
            Err(e) => return Err(e.into()),
        }
        self.announce(&task.user_id, &task.id).await;
        Ok(Next::Done)
    }

    /// The charge for `tokens` at the price version the task was reserved at.
    async fn video_charge(&self, job: &VideoJob, tokens: u64) -> Result<UsdAmount, ServiceError> {
        let task = &job.task;
        let id = task.billing.pricing_version_id.as_deref().unwrap_or_default();
        let version = id.rsplit_once("@v").and_then(|(_, v)| v.parse::<i64>().ok());
        let pricing = match version {
            Some(v) => self.ports.models.pricing_version(&task.model, v).await?,
            None => None,
        };
        let pricing =
            pricing.ok_or_else(|| ServiceError::Internal(format!("task {} has no price version {id:?}", task.id)))?;
        let with_video = media_items(task).iter().any(|m| m.kind == domain::ports::AssetKind::Video);
        let resolution = task.resolution.as_deref().unwrap_or_default();
        billing::video_charge(&pricing.sheet, resolution, with_video, tokens)
            .map(|c| c.total)
            .map_err(|e| ServiceError::Internal(format!("pricing task {}: {e}", task.id)))
    }

    /// The catalog entry of video model `name`, enabled or not (a task outlives operator switches).
    async fn video_model(&self, name: &str) -> Result<ModelDef, ServiceError> {
        let records = self.ports.models.models().await?;
        let record = records
            .iter()
            .find(|r| r.name == name)
            .ok_or_else(|| ServiceError::Internal(format!("model {name} vanished")))?;
        ModelDef::from_definition(&record.definition).map_err(|e| ServiceError::Internal(format!("model {name}: {e}")))
    }
}

fn error_update(code: &str, message: String) -> TaskUpdate {
    TaskUpdate { error_code: Some(code.to_owned()), error_message: Some(message), ..TaskUpdate::default() }
}
