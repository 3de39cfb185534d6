//! The video worker: a loop in every `serve` process that keeps up to `task_slots` task steps and
//! `delivery_slots` webhook deliveries in flight, at most `user_slots` of each per user, and claims
//! more due work (with a lease, so with several replicas each task or delivery is handled by one at a
//! time) as soon as a slot frees: a step never waits for another one to end, and a slow tenant (a
//! drip-fed media link, a webhook receiver that never answers) fills its own share, nobody else's.
//! A lease starts when its row is claimed and is renewed while its step runs. After a crash or
//! restart every task that is not terminal is due again once its lease runs out, so it is picked up
//! where it was. [`Gateway::video_tick`] is one pass of the same steps (claim what is due, run it all,
//! then the deliveries), for tests.
//!
//! Advancing a task: past the deadline → `expired` (refunded, cancelled upstream when queued);
//! `submitting` → submit ([`super::submit`]) → `queued`; `queued` / `processing` → poll: `running` →
//! `processing`; `succeeded` → settled at the reserved price version on the output tokens the
//! upstream reported; `failed`, `cancelled`, `expired` → refunded. An upstream that cannot be
//! reached keeps the reservation and the task is polled again after a back-off (the poll interval
//! doubled per failure in a row, up to a maximum). Every state change goes through the store's
//! compare-and-set, so a cancel racing a poll ends the task once.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use catalog::ModelDef;
use domain::duration_millis;
use domain::ports::{StoreError, VideoTaskState};
use domain::{
    ClaimShare, TaskEvent, TaskStatus, TaskTransition, TaskUpdate, Timestamp, UsdAmount, UserId, VideoJob,
    WebhookDelivery,
};
use tokio::task::{JoinError, JoinSet};

use super::poll::polled;
use super::submit::Submission;
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

/// How long a stopping worker lets its steps in flight finish before it drops them (their claims
/// then expire and another replica, or the next start, takes them over).
const DRAIN_LIMIT: Duration = Duration::from_secs(20);

/// Task steps or deliveries in flight: how many in all and per user, against their bounds.
#[derive(Debug)]
struct Slots {
    limit: usize,
    per_user: usize,
    used: usize,
    by_user: HashMap<UserId, usize>,
}

impl Slots {
    fn new(limit: usize, per_user: usize) -> Slots {
        Slots { limit, per_user, used: 0, by_user: HashMap::new() }
    }

    fn free(&self) -> usize {
        self.limit.saturating_sub(self.used)
    }

    /// What the next claim may take: the free slots (at most `batch`), each user within its share.
    fn share(&self, batch: u64) -> ClaimShare {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        ClaimShare {
            limit: count(self.free()).min(batch),
            per_user: count(self.per_user),
            busy: self.by_user.iter().map(|(user, n)| (user.clone(), count(*n))).collect(),
        }
    }

    fn take(&mut self, user: &UserId) {
        self.used = self.used.saturating_add(1);
        *self.by_user.entry(user.clone()).or_default() += 1;
    }

    fn give(&mut self, user: &UserId) {
        self.used = self.used.saturating_sub(1);
        if let Some(n) = self.by_user.get_mut(user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.by_user.remove(user);
            }
        }
    }
}

/// The kind of a piece of work in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Task,
    Delivery,
}

/// The worker's work in flight and the slots it holds.
struct InFlight {
    running: JoinSet<()>,
    holders: HashMap<tokio::task::Id, (Kind, UserId)>,
    tasks: Slots,
    deliveries: Slots,
}

impl InFlight {
    fn slots(&mut self, kind: Kind) -> &mut Slots {
        match kind {
            Kind::Task => &mut self.tasks,
            Kind::Delivery => &mut self.deliveries,
        }
    }

    /// Runs `work` for `user` in one of its `kind` slots.
    fn spawn(&mut self, kind: Kind, user: UserId, work: impl Future<Output = ()> + Send + 'static) {
        let handle = self.running.spawn(work);
        self.slots(kind).take(&user);
        self.holders.insert(handle.id(), (kind, user));
    }

    /// Frees the slot of a piece of work that ended.
    fn ended(&mut self, done: Result<(tokio::task::Id, ()), JoinError>) {
        let id = match done {
            Ok((id, ())) => id,
            Err(e) => {
                if e.is_panic() {
                    tracing::error!(error = %e, "a video worker step panicked");
                }
                e.id()
            }
        };
        if let Some((kind, user)) = self.holders.remove(&id) {
            self.slots(kind).give(&user);
        }
    }

    /// Frees the slots of every piece of work that has ended by now.
    fn reap(&mut self) {
        while let Some(done) = self.running.try_join_next_with_id() {
            self.ended(done);
        }
    }
}

impl Gateway {
    /// Runs the worker as `owner` (a name unique to this process) until `shutdown` completes: claims
    /// due work whenever a slot is free, waits for a slot to free, the poll interval or a new task,
    /// and at shutdown lets the steps in flight finish (at most [`DRAIN_LIMIT`]).
    pub async fn run_video_worker(self, owner: String, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let settings = self.video_settings;
        let mut work = InFlight {
            running: JoinSet::new(),
            holders: HashMap::new(),
            tasks: Slots::new(settings.task_slots.max(1), settings.user_slots.max(1)),
            deliveries: Slots::new(settings.delivery_slots.max(1), settings.user_slots.max(1)),
        };
        let mut announced: Option<Instant> = None;
        loop {
            if announced.is_none_or(|at| at.elapsed() >= settings.poll_interval) {
                if let Err(e) = self.announce_missing().await {
                    tracing::error!(error = %e, "announcing unannounced task changes failed");
                }
                if let Err(e) = self.sweep_alerts().await {
                    tracing::error!(error = %e, "bringing low-balance alerts in step failed");
                }
                announced = Some(Instant::now());
            }
            if let Err(e) = self.fill(&owner, &mut work).await {
                tracing::error!(error = %e, "claiming video work failed");
            }
            tokio::select! {
                () = &mut shutdown => break,
                Some(done) = work.running.join_next_with_id(), if !work.running.is_empty() => {
                    work.ended(done);
                    work.reap();
                }
                () = tokio::time::sleep(settings.poll_interval) => work.reap(),
                () = self.video_wake.notified() => work.reap(),
            }
        }
        let drain = async {
            while let Some(done) = work.running.join_next_with_id().await {
                work.ended(done);
            }
        };
        if tokio::time::timeout(DRAIN_LIMIT, drain).await.is_err() {
            tracing::warn!(
                left = work.running.len(),
                "video work still running at exit; its claims expire on their own"
            );
            work.running.abort_all();
        }
    }

    /// Claims due tasks and deliveries into the free slots, each user within its share, and starts
    /// them.
    async fn fill(&self, owner: &str, work: &mut InFlight) -> Result<(), ServiceError> {
        let batch = self.video_settings.batch;
        if work.tasks.free() > 0 {
            for job in self.claim_tasks(owner, &work.tasks.share(batch)).await? {
                let (gateway, owner, user) = (self.clone(), owner.to_owned(), job.task.user_id.clone());
                work.spawn(Kind::Task, user, async move {
                    if let Err(e) = gateway.advance(&owner, job).await {
                        tracing::error!(error = %e, "advancing a video task failed");
                    }
                });
            }
        }
        if work.deliveries.free() > 0 {
            for delivery in self.claim_deliveries(owner, &work.deliveries.share(batch)).await? {
                let (gateway, owner, user) = (self.clone(), owner.to_owned(), delivery.user_id.clone());
                work.spawn(Kind::Delivery, user, async move {
                    if let Err(e) = gateway.deliver_claimed(&owner, delivery).await {
                        tracing::error!(error = %e, "a webhook delivery failed to run");
                    }
                });
            }
        }
        Ok(())
    }

    /// Claims due tasks within `share`, leased from now.
    async fn claim_tasks(&self, owner: &str, share: &ClaimShare) -> Result<Vec<VideoJob>, ServiceError> {
        let (now, until) = self.lease_from_now();
        Ok(self.ports.videos.claim_video_tasks(owner, now, until, share).await?)
    }

    /// Claims due deliveries within `share` (one per task), leased from now.
    async fn claim_deliveries(&self, owner: &str, share: &ClaimShare) -> Result<Vec<WebhookDelivery>, ServiceError> {
        let (now, until) = self.lease_from_now();
        Ok(self.ports.videos.claim_deliveries(owner, now, until, share).await?)
    }

    /// Now, and the end of a lease taken now.
    fn lease_from_now(&self) -> (Timestamp, Timestamp) {
        let now = self.ports.clock.now();
        (now, Timestamp(now.millis().saturating_add(duration_millis(self.video_settings.lease))))
    }

    /// Wakes the worker of this process (a task was just created).
    pub(crate) fn wake_video_worker(&self) {
        self.video_wake.notify_one();
    }

    /// One pass, for tests: announces unannounced changes, brings low-balance alerts in step, advances the due tasks (up to `batch`,
    /// whoever owns them) and then delivers the due webhooks (one per task), each claimed when it
    /// starts.
    pub async fn video_tick(&self, owner: &str) -> Result<TickReport, ServiceError> {
        self.video()?;
        self.announce_missing().await?;
        self.sweep_alerts().await?;
        let share = ClaimShare::up_to(self.video_settings.batch);
        let jobs = self.claim_tasks(owner, &share).await?;
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
        // One delivery per task is claimed at a time, so a task's deliveries go in order.
        let deliveries = self.claim_deliveries(owner, &share).await?;
        let count = deliveries.len();
        let mut sending = JoinSet::new();
        for delivery in deliveries {
            let (gateway, owner) = (self.clone(), owner.to_owned());
            sending.spawn(async move { gateway.deliver_claimed(&owner, delivery).await });
        }
        while let Some(done) = sending.join_next().await {
            if let Ok(Err(e)) | Err(e) = done.map_err(|e| ServiceError::Internal(e.to_string())) {
                tracing::error!(error = %e, "a webhook delivery failed to run");
            }
        }
        Ok(TickReport { tasks, deliveries: count })
    }

    /// Runs `step` while renewing a lease (by `renew`, with the lease's new end) every third of a
    /// lease, so that a step longer than a lease (large imports, slow asset checks, a slow receiver
    /// under a short lease) is never taken over by another replica.
    async fn renewing<T, R, F>(&self, what: &str, step: impl Future<Output = T>, renew: R) -> T
    where
        R: Fn(Timestamp) -> F,
        F: Future<Output = Result<bool, StoreError>>,
    {
        let lease = self.video_settings.lease;
        let mut step = std::pin::pin!(step);
        loop {
            tokio::select! {
                out = &mut step => return out,
                () = tokio::time::sleep(lease / 3) => {
                    let until = Timestamp(self.ports.clock.now().millis().saturating_add(duration_millis(lease)));
                    match renew(until).await {
                        Ok(true) => {}
                        Ok(false) => tracing::warn!(what, "the lease on work in progress was lost"),
                        Err(e) => tracing::warn!(what, error = %e, "renewing a lease failed"),
                    }
                }
            }
        }
    }

    /// Makes one attempt of a claimed delivery, renewing its lease while it runs.
    async fn deliver_claimed(&self, owner: &str, delivery: WebhookDelivery) -> Result<bool, ServiceError> {
        let (videos, id) = (Arc::clone(&self.ports.videos), delivery.id);
        let what = match &delivery.task_id {
            Some(task) => format!("webhook delivery {id} of task {task}"),
            None => format!("webhook delivery {id} ({})", delivery.event),
        };
        let renew = |until| {
            let (videos, owner) = (Arc::clone(&videos), owner.to_owned());
            async move { videos.renew_delivery_lease(id, &owner, until).await }
        };
        self.renewing(&what, self.deliver(delivery), renew).await
    }

    /// Advances one claimed task and schedules (or drops) its next pass.
    async fn advance(&self, owner: &str, job: VideoJob) -> Result<(), ServiceError> {
        let videos = Arc::clone(&self.ports.videos);
        let what = format!("task {}", job.task.id);
        let renew = |until| {
            let (videos, task, owner) = (Arc::clone(&videos), job.task.id.clone(), owner.to_owned());
            async move { videos.renew_video_lease(&task, &owner, until).await }
        };
        let next = match self.renewing(&what, self.step(&job), renew).await {
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
            Next::Poll => (duration_millis(settings.poll_interval), 0),
            Next::Soon => (duration_millis(settings.poll_interval.min(settings.asset_poll)), job.poll_failures),
            Next::Backoff => {
                let failures = job.poll_failures.saturating_add(1);
                let factor = 1_i64.checked_shl(failures.min(30)).unwrap_or(i64::MAX);
                (
                    duration_millis(settings.poll_interval)
                        .saturating_mul(factor)
                        .min(duration_millis(settings.max_poll_interval)),
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
        if age > duration_millis(self.video_settings.deadline) {
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
            Submission::Accepted { id, via } => {
                // The endpoint that created it is where it is polled and cancelled from now on.
                let update = TaskUpdate { upstream_id: Some(id), via, ..TaskUpdate::default() };
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
        let answer = self.video()?.upstream.get_task(job.upstream_endpoint.as_deref(), upstream_id).await;
        self.metrics.upstream(&task.model, started.elapsed(), answer.as_ref().err());
        let state = match polled(answer, upstream_id) {
            Ok(state) => state,
            Err(e) => {
                // Unknown outcome: keep the reservation and look again later.
                tracing::warn!(task = %task.id, error = %e, "polling a video task failed");
                return Ok(Next::Backoff);
            }
        };
        match state {
            VideoTaskState::Queued => Ok(Next::Poll),
            VideoTaskState::Running if task.status == TaskStatus::Queued => {
                let change = TaskTransition::new(TaskStatus::Queued, TaskEvent::Started);
                self.ports.tasks.transition_task(&task.id, change).await?;
                self.announce(&task.user_id, &task.id).await;
                Ok(Next::Poll)
            }
            VideoTaskState::Running => Ok(Next::Poll),
            VideoTaskState::Succeeded { output_url, last_frame_url, tokens, usage } => {
                let charge = self.video_charge(job, tokens).await?;
                let update =
                    TaskUpdate { output_url, last_frame_url, usage_json: Some(usage), ..TaskUpdate::default() };
                self.end(job, Some(charge), TaskEvent::Succeeded, update).await
            }
            VideoTaskState::Failed { code, message } => {
                self.end(
                    job,
                    None,
                    TaskEvent::Failed,
                    TaskUpdate { error_code: Some(code), error_message: Some(message), ..TaskUpdate::default() },
                )
                .await
            }
            VideoTaskState::Cancelled if task.status == TaskStatus::Queued => {
                self.end(job, None, TaskEvent::Cancel, TaskUpdate::default()).await
            }
            VideoTaskState::Cancelled => {
                let update = error_update("upstream_cancelled", "the upstream cancelled the task".into());
                self.end(job, None, TaskEvent::Failed, update).await
            }
            VideoTaskState::Expired => {
                let update = error_update("expired", "the upstream expired the task".into());
                self.end(job, None, TaskEvent::Expire, update).await
            }
        }
    }

    /// The deadline passed: cancel upstream when still queued (best effort), then expire and refund.
    async fn expire(&self, job: &VideoJob) -> Result<Next, ServiceError> {
        if let (TaskStatus::Queued, Some(id)) = (job.task.status, &job.upstream_id)
            && let Err(e) = self.video()?.upstream.cancel_task(job.upstream_endpoint.as_deref(), id).await
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
        let ended = self.ports.calls.close_task(&task.id, &super::held_of(task), charge, change).await;
        match ended {
            Ok(ended) => self.metrics.call_ended(&task.id, &task.model, ended.status, ended.actual, ended.reserved),
            Err(billing::LedgerError::TaskConflict { .. } | billing::LedgerError::AlreadyFinished { .. }) => {
                tracing::info!(task = %task.id, "the task changed meanwhile; leaving it");
            }
            Err(e) => return Err(e.into()),
        }
        self.announce(&task.user_id, &task.id).await;
        Ok(Next::Done)
    }

    /// The charge for `tokens` at the price version the task was reserved at, at most the caller's
    /// cap.
    async fn video_charge(&self, job: &VideoJob, tokens: u64) -> Result<UsdAmount, ServiceError> {
        let task = &job.task;
        let id = task
            .billing
            .pricing_version_id
            .as_ref()
            .ok_or_else(|| ServiceError::Internal(format!("task {} has no pricing version id", task.id)))?;
        let pricing = self.ports.models.pricing_version(&id.model, id.version).await?;
        let pricing =
            pricing.ok_or_else(|| ServiceError::Internal(format!("task {} has no price version {id}", task.id)))?;
        let with_video = task.media.iter().any(|m| m.kind == domain::ports::AssetKind::Video);
        let resolution = task
            .resolution
            .ok_or_else(|| ServiceError::Internal(format!("video task {} has no resolution", task.id)))?;
        let charge = billing::video_charge(&pricing.sheet, resolution, with_video, tokens)
            .map_err(|e| ServiceError::Internal(format!("pricing task {}: {e}", task.id)))?;
        // The caller's X-Max-Cost, kept on the task, holds at settlement too.
        Ok(self.capped(&task.id, &task.model, charge.total, task.billing.max_cost))
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
