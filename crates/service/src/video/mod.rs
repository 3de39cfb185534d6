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
mod parts;
mod poll;
mod submit;
pub(crate) mod webhook;
pub(crate) mod worker;

use crate::{Gateway, ServiceError};

pub use create::{StoredUpload, Upload};
pub use lifecycle::{MEDIA_SWEEP_LEASE, MediaSweep};
pub(crate) use parts::held_of;
pub use parts::{TaskWire, VideoPorts, VideoSettings};
pub use worker::TickReport;

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
