//! What video tasks keep besides the task row: the worker's leases, the media the gateway stores for
//! its users, and the webhook deliveries waiting to be made. The port [`VideoStore`] is implemented
//! by the `store` crate on both databases.

use async_trait::async_trait;

use crate::ports::{AssetKind, StoreError};
use crate::records::{Task, TaskId, UserId};
use crate::task::TaskStatus;
use crate::time::Timestamp;

/// A video task claimed by one worker until its lease ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoJob {
    /// The task as stored (its request fields, state and billing).
    pub task: Task,
    /// The upstream's id, once the upstream accepted the task.
    pub upstream_id: Option<String>,
    /// The configured upstream endpoint the task was created on (`None` before routing recorded it).
    pub upstream_endpoint: Option<String>,
    /// Polls (or submissions) that failed in a row, for the back-off.
    pub poll_failures: u32,
}

/// A media object stored for a user: an uploaded file or an imported link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaObject {
    /// The media store's key.
    pub key: String,
    /// Whose quota it counts against.
    pub user: UserId,
    /// The task it was stored for.
    pub task: TaskId,
    /// Its place among the task's media (0-based).
    pub position: u32,
    /// Image, video or audio.
    pub kind: AssetKind,
    /// Its MIME type (sniffed from its first bytes).
    pub mime: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// The link it was imported from; `None` for an uploaded file.
    pub source_url: Option<String>,
    /// The upstream asset registered for it, once registered.
    pub asset_id: Option<String>,
    /// When it was stored.
    pub created_at: Timestamp,
}

/// A webhook delivery to make (or being retried).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookDelivery {
    /// Its id.
    pub id: i64,
    /// The task whose status changed; `None` for an event of no task (`balance.low`).
    pub task_id: Option<TaskId>,
    /// The task's owner (whose secret signs it).
    pub user_id: UserId,
    /// Where it goes (https).
    pub url: String,
    /// `task.<status>`.
    pub event: String,
    /// The JSON body, fixed when the status changed.
    pub payload: String,
    /// Attempts made so far.
    pub attempts: u32,
    /// When it was enqueued.
    pub created_at: Timestamp,
}

/// How one delivery attempt went (every attempt is recorded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryAttempt {
    /// The receiver's HTTP status, if it answered.
    pub status: Option<u16>,
    /// How long the attempt took, in milliseconds.
    pub latency_ms: u64,
    /// Why it failed, if it did (network error, refused address, non-2xx).
    pub error: Option<String>,
    /// When it was made.
    pub at: Timestamp,
}

/// Why media could not be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaRecordError {
    /// Storing it would pass the user's `media_quota_bytes`; nothing was recorded.
    #[error("the media quota of {quota} bytes would be exceeded ({used} used, {wanted} more)")]
    QuotaExceeded {
        /// The user's quota.
        quota: u64,
        /// Bytes already used.
        used: u64,
        /// Bytes asked for.
        wanted: u64,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How one claim shares the worker's slots between users: at most `limit` rows in all, and at most
/// `per_user` rows of one user counting the `busy` ones (work of that user this worker already runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimShare {
    /// Most rows claimed.
    pub limit: u64,
    /// Most rows one user may hold in this worker, the `busy` ones included.
    pub per_user: u64,
    /// Users with work in flight in this worker, and how much.
    pub busy: Vec<(UserId, u64)>,
}

impl ClaimShare {
    /// Up to `limit` rows, however they fall between users.
    pub fn up_to(limit: u64) -> ClaimShare {
        ClaimShare { limit, per_user: limit, busy: Vec::new() }
    }
}

/// Leases, media and webhook deliveries of video tasks.
#[async_trait]
pub trait VideoStore: Send + Sync {
    /// Claims video tasks that are not terminal, whose next poll is due (at or before `now`) and
    /// whose lease is free or expired, for `owner` until `lease_until`, oldest due first, within
    /// `share` (a user at its share is skipped, so its backlog never hides another user's tasks).
    /// With several replicas each task is claimed by one of them at a time.
    async fn claim_video_tasks(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        share: &ClaimShare,
    ) -> Result<Vec<VideoJob>, StoreError>;

    /// Ends `owner`'s claim on `task` and schedules its next poll at `next_poll_at`, with
    /// `poll_failures` failures in a row so far. A claim `owner` no longer holds is `Conflict`.
    async fn release_video_task(
        &self,
        task: &TaskId,
        owner: &str,
        next_poll_at: Timestamp,
        poll_failures: u32,
    ) -> Result<(), StoreError>;

    /// Extends `owner`'s claim on `task` to `lease_until` (a long step keeps its claim); false when
    /// `owner` no longer holds it.
    async fn renew_video_lease(&self, task: &TaskId, owner: &str, lease_until: Timestamp) -> Result<bool, StoreError>;

    /// How many video tasks of `user`, and of `model` (all users), are not terminal.
    async fn active_video_tasks(&self, user: &UserId, model: &str) -> Result<(u64, u64), StoreError>;

    /// Records a stored object and adds its size to its user's used media bytes in one step,
    /// refusing it (`QuotaExceeded`, nothing recorded) when that would pass the user's quota.
    async fn add_media(&self, object: MediaObject) -> Result<(), MediaRecordError>;

    /// Forgets a stored object and gives its bytes back to its user's quota.
    async fn remove_media(&self, key: &str) -> Result<(), StoreError>;

    /// Keys of up to `limit` stored objects whose time is up: those of tasks that ended (terminal)
    /// before `ended_before`, and those stored before `orphaned_before` for a task that does not
    /// exist (a request that stopped between storing its uploads and creating its task). Oldest
    /// first.
    async fn expired_media(
        &self,
        ended_before: Timestamp,
        orphaned_before: Timestamp,
        limit: u64,
    ) -> Result<Vec<String>, StoreError>;

    /// Takes or renews the lease named `name` for `holder` until `until`, if it is free at `now`
    /// (never taken, expired) or `holder`'s already: whether `holder` holds it now. A periodic
    /// sweep that must run on one replica at a time runs while it holds its lease.
    async fn take_sweep_lease(
        &self,
        name: &str,
        holder: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<bool, StoreError>;

    /// The media of `task`, by position.
    async fn task_media(&self, task: &TaskId) -> Result<Vec<MediaObject>, StoreError>;

    /// Records the upstream asset registered for the object `key`.
    async fn set_media_asset(&self, key: &str, asset_id: &str) -> Result<(), StoreError>;

    /// Bytes of media `user` stores now.
    async fn media_used(&self, user: &UserId) -> Result<u64, StoreError>;

    /// The secret `user`'s webhooks are signed with, if one was set.
    async fn webhook_secret(&self, user: &UserId) -> Result<Option<String>, StoreError>;

    /// Sets (or replaces) `user`'s webhook secret.
    async fn set_webhook_secret(&self, user: &UserId, secret: &str) -> Result<(), StoreError>;

    /// Enqueues the delivery of `event` with `payload` to `url` for `task` in `status`, unless that
    /// status was already announced: one compare-and-set on the task's last announced status (a task
    /// never announced counts as announced in its first state, `submitting`), so each status change
    /// is enqueued exactly once whoever tries. Returns whether it enqueued.
    async fn enqueue_webhook(
        &self,
        task: &TaskId,
        status: TaskStatus,
        url: &str,
        event: &str,
        payload: &str,
    ) -> Result<bool, StoreError>;

    /// Up to `limit` tasks with a webhook URL whose current status is not announced yet (a change
    /// whose enqueue a crash prevented).
    async fn unannounced_tasks(&self, limit: u64) -> Result<Vec<Task>, StoreError>;

    /// Claims deliveries not yet delivered nor given up, due at or before `now`, whose lease is free
    /// or expired, for `owner` until `lease_until`, oldest due first, within `share`. At most one
    /// delivery of a task is claimed at a time, and none while an earlier delivery of its task is
    /// leased (being attempted), so a receiver that answers sees one task's statuses in order.
    async fn claim_deliveries(
        &self,
        owner: &str,
        now: Timestamp,
        lease_until: Timestamp,
        share: &ClaimShare,
    ) -> Result<Vec<WebhookDelivery>, StoreError>;

    /// Extends `owner`'s claim on delivery `id` to `lease_until`; false when `owner` no longer
    /// holds it.
    async fn renew_delivery_lease(&self, id: i64, owner: &str, lease_until: Timestamp) -> Result<bool, StoreError>;

    /// Records one attempt of delivery `id` and releases its claim: `delivered` ends it; otherwise
    /// the next attempt is due at `retry_at`, or it is given up when `retry_at` is `None`.
    async fn record_delivery(
        &self,
        id: i64,
        attempt: DeliveryAttempt,
        delivered: bool,
        retry_at: Option<Timestamp>,
    ) -> Result<(), StoreError>;

    /// The recorded attempts of the deliveries of `task`, oldest first: `(event, attempt)`.
    async fn delivery_attempts(&self, task: &TaskId) -> Result<Vec<(String, DeliveryAttempt)>, StoreError>;
}
