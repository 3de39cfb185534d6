//! The `Idempotency-Key` port: claims per user, route and key, and what a claim finds.

use async_trait::async_trait;

use super::StoreError;
use crate::records::UserId;

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
