//! Port traits: what the use cases need from storage and identity, implemented elsewhere.
//!
//! All traits are object-safe and used as `Arc<dyn …>`. The ledger port lives in the
//! `billing` crate, beside the rules it enforces.

use async_trait::async_trait;

use crate::pricing::{PriceSheet, PricingVersion};
use crate::records::{ApiKey, ApiKeyId, ModelRecord, ModelSeed, NewUser, Task, TaskId, TaskStats, User, UserId};
use crate::task::StatusFilter;

/// A storage failure, reduced to what callers can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The named thing does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The change conflicts with what is stored (duplicate, wrong state).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The stored data or the request is not acceptable.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The database failed; the text is for the log, not for clients.
    #[error("database error: {0}")]
    Backend(String),
}

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

/// Users and their API keys.
#[async_trait]
pub trait AccountStore: Send + Sync {
    /// Creates a user; a positive opening balance is booked as a `topup` ledger entry.
    async fn create_user(&self, user: NewUser) -> Result<User, StoreError>;
    /// The user, if it exists.
    async fn user(&self, id: &UserId) -> Result<Option<User>, StoreError>;
    /// How many users exist.
    async fn count_users(&self) -> Result<u64, StoreError>;
    /// Stores a new key (its hash only).
    async fn create_key(&self, key: ApiKey) -> Result<ApiKey, StoreError>;
    /// Marks a key revoked; revoking twice is allowed and keeps the first time.
    async fn revoke_key(&self, id: &ApiKeyId) -> Result<ApiKey, StoreError>;
    /// The key whose secret hashes to `hash`, with its owner, revoked or not.
    async fn key_by_hash(&self, hash: &str) -> Result<Option<(ApiKey, User)>, StoreError>;
}

/// Whether the store can serve: reachable, and migrated to the schema this build expects.
#[async_trait]
pub trait Readiness: Send + Sync {
    /// Migrations this build knows that the database lacks (0 when ready); an error when the
    /// database cannot be reached or has never been migrated.
    async fn pending_migrations(&self) -> Result<u64, StoreError>;
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
        filter: Option<StatusFilter>,
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
}

/// Work not yet finished, over every user and replica.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenWork {
    /// Reservations still holding money.
    pub open_reservations: u64,
    /// Creation time of the oldest video task that is not terminal (`None` when there is none).
    pub oldest_active_video: Option<crate::time::Timestamp>,
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
                ..crate::TaskUpdate::default()
            },
        })
    }
}

/// The model catalog as configured by operators, and their switches.
#[async_trait]
pub trait ModelStore: Send + Sync {
    /// Adds the models the store does not know yet, and refreshes the definition (limits,
    /// capabilities, upstream profile) of known ones; their switches, caps and prices (operator
    /// changes) are kept. Returns how many were added.
    async fn seed_models(&self, seeds: Vec<ModelSeed>) -> Result<u64, StoreError>;
    /// Every model, enabled or not, by name.
    async fn models(&self) -> Result<Vec<ModelRecord>, StoreError>;
    /// Changes a model's switch and/or cap.
    async fn set_model(
        &self,
        name: &str,
        enabled: Option<bool>,
        concurrency_limit: Option<i64>,
    ) -> Result<ModelRecord, StoreError>;
    /// Adds a new price version and makes it active.
    async fn set_price(&self, name: &str, sheet: PriceSheet) -> Result<PricingVersion, StoreError>;
    /// The price version `version` of model `name`, active or not (a task is settled at the version
    /// it was reserved at).
    async fn pricing_version(&self, name: &str, version: i64) -> Result<Option<PricingVersion>, StoreError>;
    /// Whether maintenance mode is on.
    async fn maintenance(&self) -> Result<bool, StoreError>;
    /// Turns maintenance mode on or off.
    async fn set_maintenance(&self, on: bool) -> Result<(), StoreError>;
}

/// Where new ids come from.
pub trait IdSource: Send + Sync {
    /// A fresh, unique id starting with `prefix` (such as `task_`).
    fn new_id(&self, prefix: &str) -> String;
}

/// What the store says about an `Idempotency-Key` presented with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyClaim {
    /// First use (or an abandoned claim taken over): run the request, then complete or release.
    Claimed,
    /// Done before with the same body: answer with the stored response.
    Replay {
        /// HTTP status of the first answer.
        status: u16,
        /// Body of the first answer.
        body: Vec<u8>,
    },
    /// The first request with this key is still running.
    InProgress,
    /// The key was used with a different body.
    Mismatch,
}

/// What one `Idempotency-Key` claim belongs to: the caller, the route, and the key itself. The same
/// key on two routes names two different requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdempotencyScope<'a> {
    /// The caller.
    pub user: &'a UserId,
    /// The route's stable name, such as `chat.completions`.
    pub route: &'a str,
    /// The client's key.
    pub key: &'a str,
}

/// `Idempotency-Key` records, per user, route and key.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Claims the key for a request whose body hashes to `request_hash`. A claim still unanswered
    /// after `stale_after_ms` is considered abandoned (its process died) and is taken over.
    async fn claim(
        &self,
        scope: IdempotencyScope<'_>,
        request_hash: &str,
        stale_after_ms: i64,
    ) -> Result<IdempotencyClaim, StoreError>;
    /// Stores the answer (a UTF-8 JSON body) of a claimed request.
    async fn complete(&self, scope: IdempotencyScope<'_>, status: u16, body: &[u8]) -> Result<(), StoreError>;
    /// Forgets a claim whose request ended without billing, so that a retry runs again.
    async fn release(&self, scope: IdempotencyScope<'_>) -> Result<(), StoreError>;
}

/// Who owns the response ids the response-style endpoint returned, so that `previous_response_id` can
/// only continue the caller's own conversations.
#[async_trait]
pub trait ResponseOwners: Send + Sync {
    /// Records that `response_id` was returned to `user` by the call `task`; recording it again is allowed.
    async fn record_response(&self, response_id: &str, user: &UserId, task: &TaskId) -> Result<(), StoreError>;
    /// The user a response id was returned to, if it was returned by this gateway.
    async fn response_owner(&self, response_id: &str) -> Result<Option<UserId>, StoreError>;
}

/// Why an upstream call produced no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// The connection could not be made or broke before an answer.
    #[error("upstream connection failed: {0}")]
    Connect(String),
    /// No (complete) answer within the configured time.
    #[error("upstream timed out")]
    Timeout,
    /// The upstream answered with a non-2xx status; `body` is its (possibly truncated) text.
    #[error("upstream answered {status}")]
    Status {
        /// HTTP status.
        status: u16,
        /// Response text, for logs.
        body: String,
    },
    /// The answer was not in the expected format.
    #[error("malformed upstream answer: {0}")]
    Malformed(String),
    /// The stream carried an error event or broke off.
    #[error("upstream stream failed: {0}")]
    Stream(String),
    /// The upstream answered 2xx but refused the request inside the answer (the speech service's
    /// non-zero `code`, an image call's top-level `error`).
    #[error("the upstream refused the request ({code}: {message})")]
    Rejected {
        /// The upstream's error code.
        code: String,
        /// The upstream's message.
        message: String,
    },
    /// No upstream is configured for this endpoint (no base URL or key); nothing was sent.
    #[error("no upstream is configured for {0}")]
    NotConfigured(String),
}

impl UpstreamError {
    /// A short fixed name of the failure's kind (a metrics label; no upstream text in it).
    pub const fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Connect(_) => "connect",
            UpstreamError::Timeout => "timeout",
            UpstreamError::Status { .. } => "status",
            UpstreamError::Malformed(_) => "malformed",
            UpstreamError::Stream(_) => "stream",
            UpstreamError::Rejected { .. } => "rejected",
            UpstreamError::NotConfigured(_) => "not_configured",
        }
    }

    /// Whether retrying the same call later may succeed (connection trouble, timeouts, 429, 5xx).
    pub fn retryable(&self) -> bool {
        match self {
            UpstreamError::Connect(_) | UpstreamError::Timeout | UpstreamError::Stream(_) => true,
            UpstreamError::Status { status, .. } => *status == 429 || *status >= 500,
            UpstreamError::Malformed(_) | UpstreamError::NotConfigured(_) | UpstreamError::Rejected { .. } => false,
        }
    }
}

/// One server-sent event of an upstream stream: its `event:` name, if any, and its `data:` payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field (named-event formats: message-style and response-style streams).
    pub event: Option<String>,
    /// The `data:` payload (several `data:` lines joined with `\n`).
    pub data: Vec<u8>,
}

/// The events of an upstream server-sent event stream, in order.
#[async_trait]
pub trait EventStream: Send {
    /// The next event; `None` after `[DONE]` (chat framing) or the end of the stream.
    async fn next_event(&mut self) -> Option<Result<SseEvent, UpstreamError>>;
}

/// The synchronous upstream endpoints the gateway calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST <platform base>/chat/completions` (data-only SSE ending with `data: [DONE]`).
    ChatCompletions,
    /// `POST <platform base>/images/generations` (non-streaming only).
    ImageGenerations,
    /// `POST <speech origin>/api/v3/tts/create`, with the speech service's own key.
    Speech,
    /// `POST <platform base>/responses` (response-style; named SSE events).
    Responses,
    /// `POST <message-compatible base>/v1/messages` (message-style; named SSE events).
    Messages,
}

impl Endpoint {
    /// Every endpoint.
    pub const ALL: [Endpoint; 5] = [
        Endpoint::ChatCompletions,
        Endpoint::ImageGenerations,
        Endpoint::Speech,
        Endpoint::Responses,
        Endpoint::Messages,
    ];

    /// A short name for logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat_completions",
            Endpoint::ImageGenerations => "image_generations",
            Endpoint::Speech => "speech",
            Endpoint::Responses => "responses",
            Endpoint::Messages => "messages",
        }
    }
}

/// The upstream platform's synchronous endpoints. Bodies are JSON bytes whose `model` is already
/// the upstream id; the adapter moves bytes and never interprets usage or prices.
#[async_trait]
pub trait Upstream: Send + Sync {
    /// Sends a non-streaming request body to `endpoint`; returns the 2xx body.
    async fn complete(&self, endpoint: Endpoint, body: Vec<u8>) -> Result<Vec<u8>, UpstreamError>;
    /// Sends a streaming request body to `endpoint`; returns the event stream once the upstream answered 2xx.
    async fn stream(&self, endpoint: Endpoint, body: Vec<u8>) -> Result<Box<dyn EventStream>, UpstreamError>;
}

/// The platform's content-generation tasks (video). Bodies are JSON bytes; the adapter moves them
/// and does not interpret them.
#[async_trait]
pub trait TaskUpstream: Send + Sync {
    /// `POST <platform base>/contents/generations/tasks`; the 2xx body (`{"id":…}`).
    async fn create_task(&self, body: Vec<u8>) -> Result<Vec<u8>, UpstreamError>;
    /// `GET <platform base>/contents/generations/tasks/{id}`; the 2xx body (the task object).
    async fn get_task(&self, upstream_id: &str) -> Result<Vec<u8>, UpstreamError>;
    /// `DELETE <platform base>/contents/generations/tasks/{id}`: cancels a queued task.
    async fn cancel_task(&self, upstream_id: &str) -> Result<(), UpstreamError>;
}

/// What kind of media an asset (or a stored file) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AssetKind {
    /// A still image.
    Image,
    /// A video clip.
    Video,
    /// An audio clip.
    Audio,
}

impl AssetKind {
    /// `image`, `video` or `audio` (the media item `type` of the gateway's own API).
    pub const fn as_str(self) -> &'static str {
        match self {
            AssetKind::Image => "image",
            AssetKind::Video => "video",
            AssetKind::Audio => "audio",
        }
    }
}

/// Where an upstream asset stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssetStatus {
    /// The upstream is still fetching or checking it.
    Processing,
    /// Usable as `asset://<id>`.
    Active,
    /// Refused by the upstream, with its reason.
    Failed(String),
}

/// The upstream's asset control plane (requests signed with an access key pair).
#[async_trait]
pub trait AssetUpstream: Send + Sync {
    /// The id of the asset group called `name` (one per user), created on first use. Ids are
    /// cached in memory, so repeated calls for one name cost one lookup per process.
    async fn asset_group(&self, name: &str) -> Result<String, UpstreamError>;
    /// Registers the media at `url` (which the upstream fetches) in group `group_id`; the new
    /// asset's id. The asset starts [`AssetStatus::Processing`].
    async fn create_asset(&self, group_id: &str, url: &str, kind: AssetKind) -> Result<String, UpstreamError>;
    /// Where the asset stands.
    async fn asset_status(&self, asset_id: &str) -> Result<AssetStatus, UpstreamError>;
}

/// Why a media store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaError {
    /// The key is not a valid media key (empty, too long, a character or segment not allowed).
    #[error("invalid media key: {0}")]
    InvalidKey(String),
    /// The storage failed; the text is for the log, not for clients.
    #[error("media storage failed: {0}")]
    Io(String),
}

/// Where uploaded and imported media is kept (a local directory by default; an object store can
/// replace it). Keys are `/`-separated segments of ASCII letters, digits, `-`, `_` and `.`.
#[async_trait]
pub trait MediaStore: Send + Sync {
    /// Starts writing a new object under `key`; it becomes visible (replacing any object with
    /// that key) only when the sink is finished.
    async fn create(&self, key: &str) -> Result<Box<dyn MediaSink>, MediaError>;
    /// Reads the object back chunk by chunk; `None` when there is none.
    async fn open(&self, key: &str) -> Result<Option<Box<dyn MediaSource>>, MediaError>;
    /// Removes the object; removing a missing object is not an error.
    async fn delete(&self, key: &str) -> Result<(), MediaError>;
}

/// A new object being written. Dropping it without [`MediaSink::finish`] discards it.
#[async_trait]
pub trait MediaSink: Send {
    /// Appends `chunk`.
    async fn write(&mut self, chunk: &[u8]) -> Result<(), MediaError>;
    /// Makes the object visible under its key; the number of bytes written.
    async fn finish(self: Box<Self>) -> Result<u64, MediaError>;
    /// Discards what was written.
    async fn abort(self: Box<Self>);
}

/// A stored object being read.
#[async_trait]
pub trait MediaSource: Send {
    /// The object's length in bytes.
    fn len(&self) -> u64;
    /// Whether the object has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The next chunk; `None` at the end.
    async fn next_chunk(&mut self) -> Option<Result<Vec<u8>, MediaError>>;
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
