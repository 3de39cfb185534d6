//! Video tasks (DESIGN §5): created at once (`submitting`, the estimate held), then advanced by a
//! background worker in every `serve` process until they end.
//!
//! - [`create`]: `POST /api/v1/tasks` — validate, store uploaded files (sniffed, bounded, counted
//!   against the media quota), check media links against the egress policy, hold the estimate and
//!   record the task; nothing is sent upstream yet.
//! - [`worker`]: keeps due work in flight within bounds (overall and per user), claiming each task
//!   with a lease (one replica each) as a slot frees; submits them (imports the media
//!   links, registers every stored file as an upstream asset reached through a signed link, creates
//!   the upstream task), polls them with back-off, and ends them through the domain state machine:
//!   settle on `succeeded` from the output tokens the upstream reported, refund on `failed`,
//!   `cancelled`, `expired` or the deadline. A poll that cannot reach the upstream keeps the hold.
//! - [`cancel`]: `DELETE /api/v1/tasks/{id}` — only while `queued`: upstream first, then the task
//!   and its refund in one commit.
//! - [`webhook`]: every status change after creation enqueues one signed delivery (exactly once per
//!   status, recovered after a crash); the worker delivers them (one at a time per task, each in a
//!   delivery slot of its user) with exponential back-off and records every attempt.

pub(crate) mod cancel;
pub(crate) mod create;
mod lifecycle;
mod media;
mod poll;
mod submit;
pub(crate) mod webhook;
pub(crate) mod worker;

use std::sync::Arc;
use std::time::Duration;

use domain::ports::{AssetUpstream, MediaStore, TaskUpstream};
use domain::{MediaLinks, Outbound, Task};

use crate::{Gateway, ServiceError};

pub use create::{StoredUpload, Upload};
pub use lifecycle::{MEDIA_SWEEP_LEASE, MediaSweep};
pub use worker::TickReport;

/// Renders a task as the interface's `Task` object (the edge owns the wire shapes), for webhook bodies.
pub trait TaskWire: Send + Sync {
    /// The task's JSON object.
    fn task_json(&self, task: &Task) -> serde_json::Value;
}

/// What video tasks need besides the store: the upstream, the media store, egress and links.
#[derive(Clone)]
pub struct VideoPorts {
    /// The platform's content-generation tasks.
    pub upstream: Arc<dyn TaskUpstream>,
    /// The asset control plane.
    pub assets: Arc<dyn AssetUpstream>,
    /// Where uploaded and imported media is kept.
    pub media: Arc<dyn MediaStore>,
    /// Requests to user-named URLs (imports, webhooks).
    pub outbound: Arc<dyn Outbound>,
    /// Signed links to stored media, for the upstream.
    pub links: Arc<dyn MediaLinks>,
    /// The `Task` wire shape, for webhooks.
    pub wire: Arc<dyn TaskWire>,
}

/// How the worker paces itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VideoSettings {
    /// Time between polls of one task (the back-off multiplies it after failures).
    pub poll_interval: Duration,
    /// Longest back-off between polls.
    pub max_poll_interval: Duration,
    /// A task not terminal this long after its creation is `expired`.
    pub deadline: Duration,
    /// First webhook retry delay; later ones double, up to [`VideoSettings::max_webhook_delay`].
    pub webhook_retry_base: Duration,
    /// Longest delay between webhook attempts.
    pub max_webhook_delay: Duration,
    /// Attempts after which a webhook delivery is given up.
    pub webhook_attempts: u32,
    /// How long a claim on a task or a delivery lasts.
    pub lease: Duration,
    /// Most tasks (and deliveries) one claim takes.
    pub batch: u64,
    /// Most task steps (media import, asset registration, submission, poll) in flight at once.
    pub task_slots: usize,
    /// Most webhook deliveries in flight at once.
    pub delivery_slots: usize,
    /// Most task steps, and most deliveries, of one user in flight at once.
    pub user_slots: usize,
    /// How long a signed media link stays valid.
    pub link_ttl: Duration,
    /// How long submission waits for an upstream asset to become active.
    pub asset_wait: Duration,
    /// Time between asset status checks.
    pub asset_poll: Duration,
    /// Whether the upstream is given the media store's own pre-signed links (when the store has
    /// them) instead of the gateway's signed `/media/` links.
    pub presigned_links: bool,
    /// How long media is kept after its task ended.
    pub media_retention: Duration,
    /// How long media stored for a task that was never created is kept (longer than any request
    /// body may take to arrive).
    pub orphan_media_age: Duration,
}

impl VideoSettings {
    /// The defaults, the one place they are written (`gateway`'s settings name them).
    pub const DEFAULT: VideoSettings = VideoSettings {
        poll_interval: Duration::from_secs(5),
        max_poll_interval: Duration::from_secs(300),
        deadline: Duration::from_secs(48 * 3600),
        webhook_retry_base: Duration::from_secs(10),
        max_webhook_delay: Duration::from_secs(3600),
        webhook_attempts: 20,
        lease: Duration::from_secs(120),
        batch: 64,
        task_slots: 64,
        delivery_slots: 64,
        user_slots: 4,
        link_ttl: Duration::from_secs(6 * 3600),
        asset_wait: Duration::from_secs(600),
        asset_poll: Duration::from_secs(3),
        presigned_links: false,
        media_retention: Duration::from_secs(24 * 3600),
        orphan_media_age: Duration::from_secs(24 * 3600),
    };
}

impl Default for VideoSettings {
    fn default() -> VideoSettings {
        VideoSettings::DEFAULT
    }
}

impl Gateway {
    /// The video ports, or 503 when video tasks are not configured.
    pub(crate) fn video(&self) -> Result<&VideoPorts, ServiceError> {
        self.ports
            .video
            .as_ref()
            .ok_or_else(|| ServiceError::ProviderNotConfigured("video tasks are not configured".into()))
    }

    /// The worker's pacing.
    pub fn video_settings(&self) -> &VideoSettings {
        &self.video_settings
    }

    /// The same use cases with other worker pacing (tests poll every few milliseconds).
    pub fn with_video_settings(mut self, settings: VideoSettings) -> Gateway {
        self.video_settings = settings;
        self
    }
}

impl Gateway {
    /// The stored media object `key`, for a signed link: `expires` (Unix seconds) not past and `sig`
    /// signing both. A bad, expired or unknown link is `NotFound` (nothing is revealed).
    pub async fn open_signed_media(
        &self,
        key: &str,
        expires: u64,
        sig: &str,
    ) -> Result<Box<dyn domain::ports::MediaSource>, ServiceError> {
        let video = self.video()?;
        let now = u64::try_from(self.ports.clock.now().millis() / 1000).unwrap_or(0);
        let not_found = || ServiceError::NotFound(format!("media {key}"));
        if !video.links.verify(key, expires, sig, now) {
            return Err(not_found());
        }
        video.media.open(key).await.map_err(|e| ServiceError::MediaUnavailable(e.to_string()))?.ok_or_else(not_found)
    }
}

/// The hold of `task` as its record describes it (owner, estimate, budget key), for ending it.
pub(crate) fn held_of(task: &domain::Task) -> billing::Expect {
    billing::Expect {
        user: task.user_id.clone(),
        amount: task.billing.estimated,
        budget: task.billing.budget_keys.clone(),
    }
}
