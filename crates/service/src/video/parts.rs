//! What the video use cases share: their ports ([`VideoPorts`]), their pacing ([`VideoSettings`]),
//! the task's wire shape for webhooks ([`TaskWire`]) and the hold a task record describes.

use std::sync::Arc;
use std::time::Duration;

use domain::ports::{AssetUpstream, MediaStore, TaskUpstream};
use domain::{MediaLinks, Outbound, Task};

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

/// The hold of `task` as its record describes it (owner, estimate, budget key), for ending it.
pub(crate) fn held_of(task: &domain::Task) -> billing::Expect {
    billing::Expect {
        user: task.user_id.clone(),
        amount: task.billing.estimated,
        budget: task.billing.budget_keys.clone(),
    }
}
