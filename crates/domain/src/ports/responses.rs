//! Who owns the response ids of the response-style endpoint.

use async_trait::async_trait;

use super::StoreError;
use crate::records::{TaskId, UserId};

/// Who owns the response ids the response-style endpoint returned, so that `previous_response_id` can
/// only continue the caller's own conversations.
#[async_trait]
pub trait ResponseOwners: Send + Sync {
    /// Records that `response_id` was returned to `user` by the call `task`; recording it again is allowed.
    async fn record_response(&self, response_id: &str, user: &UserId, task: &TaskId) -> Result<(), StoreError>;
    /// The user a response id was returned to, if it was returned by this gateway.
    async fn response_owner(&self, response_id: &str) -> Result<Option<UserId>, StoreError>;
}
