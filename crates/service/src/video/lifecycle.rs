//! The media lifecycle: uploaded and imported media is deleted a while after its task ended, and
//! media whose task was never created a while after it was stored; its bytes go back to the
//! user's quota.
//!
//! The sweep runs on one replica at a time: each batch first takes the sweep's lease in the
//! database for [`MEDIA_SWEEP_LEASE_TTL`] and gives it back when done, and a replica that finds
//! it held skips its turn. A replica that dies mid-batch holds it at most that long. Each object is deleted
//! from the media store first and forgotten (its quota given back) after, so a failure between the
//! two leaves a row whose next sweep deletes the missing object again (not an error) and forgets
//! it then: no object is ever left in the store without its row, nor quota given back twice.

use std::time::Duration;

use domain::Timestamp;

use crate::{Gateway, ServiceError};

/// The name of the media sweep's lease.
pub const MEDIA_SWEEP_LEASE: &str = "media";
/// How long one batch holds the sweep's lease at most (it is given back when the batch ends).
pub const MEDIA_SWEEP_LEASE_TTL: Duration = Duration::from_secs(60);

/// What one round of the media sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MediaSweep {
    /// Whether this replica held the sweep's lease (and so ran the round).
    pub ran: bool,
    /// Objects deleted and forgotten.
    pub deleted: u64,
    /// Objects the media store could not delete (kept for the next round).
    pub failed: u64,
}

impl Gateway {
    /// One batch of the media sweep for `holder` (a name unique among replicas), holding the
    /// sweep's lease while it runs: deletes up to `batch` objects whose time is up
    /// ([`crate::VideoSettings::media_retention`] after their task ended, or
    /// [`crate::VideoSettings::orphan_media_age`] after they were stored for a task that does not
    /// exist).
    pub async fn sweep_media(&self, holder: &str, batch: u64) -> Result<MediaSweep, ServiceError> {
        let video = self.video()?;
        let now = self.ports.clock.now();
        let until = Timestamp(now.millis().saturating_add(domain::duration_millis(MEDIA_SWEEP_LEASE_TTL)));
        if !self.ports.videos.take_sweep_lease(MEDIA_SWEEP_LEASE, holder, now, until).await? {
            return Ok(MediaSweep::default());
        }
        let round = self.sweep_media_batch(video, now, batch).await;
        // Given back (its end moved to now) whatever the batch did, so the next turn is anyone's.
        let done = self.ports.clock.now();
        if let Err(e) = self.ports.videos.take_sweep_lease(MEDIA_SWEEP_LEASE, holder, done, done).await {
            tracing::warn!(error = %e, "giving back the media sweep's lease failed; it runs out on its own");
        }
        round
    }

    async fn sweep_media_batch(
        &self,
        video: &crate::VideoPorts,
        now: Timestamp,
        batch: u64,
    ) -> Result<MediaSweep, ServiceError> {
        let before = |age: Duration| Timestamp(now.millis().saturating_sub(domain::duration_millis(age)));
        let settings = &self.video_settings;
        let keys = self
            .ports
            .videos
            .expired_media(before(settings.media_retention), before(settings.orphan_media_age), batch)
            .await?;
        let mut round = MediaSweep { ran: true, ..MediaSweep::default() };
        for key in keys {
            if let Err(e) = video.media.delete(&key).await {
                tracing::warn!(key, error = %e, "deleting expired media failed; the next sweep tries again");
                round.failed += 1;
                continue;
            }
            self.ports.videos.remove_media(&key).await?;
            round.deleted += 1;
        }
        Ok(round)
    }
}
