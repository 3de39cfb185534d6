//! `Idempotency-Key`: a retry with the same key and body gets the first answer and is not billed
//! again; the same key with another body is a conflict.

use domain::ports::IdempotencyClaim;

use crate::{Gateway, Principal, ServiceError, hash_secret};

/// The default age after which an unanswered claim is taken to be abandoned by a crashed process:
/// the default upstream timeout (10 minutes) plus five. `Gateway::with_call_timeout` derives it
/// from the configured upstream timeout instead.
pub const IDEMPOTENCY_STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Longest accepted key.
pub const IDEMPOTENCY_KEY_MAX: usize = 255;

impl Gateway {
    /// Claims `key` for this request. `Ok(None)`: run it, then call `idempotency_complete` or
    /// `idempotency_release`. `Ok(Some((status, body)))`: answer with the stored first response.
    pub async fn idempotency_claim(
        &self,
        who: &Principal,
        key: &str,
        body: &[u8],
    ) -> Result<Option<(u16, Vec<u8>)>, ServiceError> {
        if key.is_empty() || key.len() > IDEMPOTENCY_KEY_MAX || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ServiceError::InvalidRequest(format!(
                "Idempotency-Key must be 1..{IDEMPOTENCY_KEY_MAX} visible ASCII characters"
            )));
        }
        // The same SHA-256 hex used for keys identifies the body.
        let hash = hash_secret(&String::from_utf8_lossy(body));
        let claim = self.ports.idempotency.claim(&who.user_id, key, &hash, self.idempotency_stale_ms()).await?;
        match claim {
            IdempotencyClaim::Claimed => Ok(None),
            IdempotencyClaim::Replay { status, body } => Ok(Some((status, body))),
            IdempotencyClaim::InProgress => Err(ServiceError::IdempotencyConflict(
                "a request with this Idempotency-Key is still being processed".into(),
            )),
            IdempotencyClaim::Mismatch => Err(ServiceError::IdempotencyConflict(
                "this Idempotency-Key was already used with a different request body".into(),
            )),
        }
    }

    /// Stores the answer to replay for `key`. A failure is logged: the call itself succeeded.
    pub async fn idempotency_complete(&self, who: &Principal, key: &str, status: u16, body: &[u8]) {
        if let Err(e) = self.ports.idempotency.complete(&who.user_id, key, status, body).await {
            tracing::error!(error = %e, "storing the idempotent answer failed");
        }
    }

    /// Forgets `key` after a request that billed nothing, so that a retry runs again.
    pub async fn idempotency_release(&self, who: &Principal, key: &str) {
        if let Err(e) = self.ports.idempotency.release(&who.user_id, key).await {
            tracing::error!(error = %e, "releasing the idempotency key failed");
        }
    }
}
