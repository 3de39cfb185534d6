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
    /// already terminal is left unchanged (`Conflict`).
    async fn finish_task(&self, id: &TaskId, outcome: TaskOutcome) -> Result<(), StoreError>;
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

/// The model catalog as configured by operators, and their switches.
#[async_trait]
pub trait ModelStore: Send + Sync {
    /// Adds the models the store does not know yet; known models keep operator changes.
    /// Returns how many were added.
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

/// `Idempotency-Key` records, per user and key.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Claims `key` for a request whose body hashes to `request_hash`. A claim still unanswered
    /// after `stale_after_ms` is considered abandoned (its process died) and is taken over.
    async fn claim(
        &self,
        user: &UserId,
        key: &str,
        request_hash: &str,
        stale_after_ms: i64,
    ) -> Result<IdempotencyClaim, StoreError>;
    /// Stores the answer of a claimed request.
    async fn complete(&self, user: &UserId, key: &str, status: u16, body: &[u8]) -> Result<(), StoreError>;
    /// Forgets a claim whose request ended without billing, so that a retry runs again.
    async fn release(&self, user: &UserId, key: &str) -> Result<(), StoreError>;
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
}

impl UpstreamError {
    /// Whether retrying the same call later may succeed (connection trouble, timeouts, 429, 5xx).
    pub fn retryable(&self) -> bool {
        match self {
            UpstreamError::Connect(_) | UpstreamError::Timeout | UpstreamError::Stream(_) => true,
            UpstreamError::Status { status, .. } => *status == 429 || *status >= 500,
            UpstreamError::Malformed(_) => false,
        }
    }
}

/// The `data:` payloads of an upstream server-sent event stream, in order.
#[async_trait]
pub trait EventStream: Send {
    /// The next event's data (without the `data: ` prefix); `None` after `[DONE]` or the end.
    async fn next_event(&mut self) -> Option<Result<Vec<u8>, UpstreamError>>;
}

/// The upstream platform's chat-completions endpoint (`POST <base>/chat/completions`).
#[async_trait]
pub trait ChatUpstream: Send + Sync {
    /// Sends a non-streaming request body (JSON, `model` already the upstream id); returns the 2xx body.
    async fn complete(&self, body: Vec<u8>) -> Result<Vec<u8>, UpstreamError>;
    /// Sends a streaming request body; returns the event stream once the upstream answered 2xx.
    async fn stream(&self, body: Vec<u8>) -> Result<Box<dyn EventStream>, UpstreamError>;
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
