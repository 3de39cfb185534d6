//! `Idempotency-Key`: a retry with the same key and body on the same route gets the first answer and is
//! not billed again; the same key with another body is a conflict. Claims are scoped by user, route and
//! key, and the body is identified by the SHA-256 of its bytes.

use domain::UserId;
use domain::ports::{IdempotencyClaim, IdempotencyScope};
use sha2::{Digest, Sha256};

use crate::keys::hex;
use crate::{Gateway, Principal, ServiceError};

/// The default age after which an unanswered claim is taken to be abandoned by a crashed process:
/// the default upstream timeout (10 minutes) plus five. `Gateway::with_call_timeout` derives it
/// from the configured upstream timeout instead.
pub const IDEMPOTENCY_STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Longest accepted key.
pub const IDEMPOTENCY_KEY_MAX: usize = 255;

/// A key this request holds: complete it with the answer, or release it when nothing was billed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedKey {
    user: UserId,
    route: &'static str,
    key: String,
}

impl ClaimedKey {
    fn scope(&self) -> IdempotencyScope<'_> {
        IdempotencyScope { user: &self.user, route: self.route, key: &self.key }
    }
}

/// What to do with a request that carries an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// First use: run it, then `idempotency_complete` or `idempotency_release` the key.
    Run(ClaimedKey),
    /// Answered before with the same body: send this stored answer.
    Replay {
        /// HTTP status of the first answer.
        status: u16,
        /// Its JSON body.
        body: Vec<u8>,
    },
}

impl Gateway {
    /// Claims `key` on `route` (a stable route name such as `chat.completions`) for a request with
    /// these body bytes.
    pub async fn idempotency_claim(
        &self,
        who: &Principal,
        route: &'static str,
        key: &str,
        body: &[u8],
    ) -> Result<Claim, ServiceError> {
        self.idempotency_claim_digest(who, route, key, &hex(&Sha256::digest(body))).await
    }

    /// [`Gateway::idempotency_claim`] for a body already hashed (lowercase hex SHA-256 of its bytes),
    /// such as a multipart body hashed while it streamed.
    pub async fn idempotency_claim_digest(
        &self,
        who: &Principal,
        route: &'static str,
        key: &str,
        hash: &str,
    ) -> Result<Claim, ServiceError> {
        if key.is_empty() || key.len() > IDEMPOTENCY_KEY_MAX || !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(ServiceError::InvalidRequest(format!(
                "Idempotency-Key must be 1..{IDEMPOTENCY_KEY_MAX} visible ASCII characters"
            )));
        }
        let claimed = ClaimedKey { user: who.user_id.clone(), route, key: key.to_owned() };
        match self.ports.idempotency.claim(claimed.scope(), hash, self.idempotency_stale_ms()).await? {
            IdempotencyClaim::Claimed => Ok(Claim::Run(claimed)),
            IdempotencyClaim::Replay { status, body } => Ok(Claim::Replay { status, body }),
            IdempotencyClaim::InProgress => Err(ServiceError::IdempotencyConflict(
                "a request with this Idempotency-Key is still being processed".into(),
            )),
            IdempotencyClaim::Mismatch => Err(ServiceError::IdempotencyConflict(
                "this Idempotency-Key was already used with a different request body".into(),
            )),
        }
    }

    /// Stores the answer to replay for `claim`. A failure is logged: the call itself succeeded.
    pub async fn idempotency_complete(&self, claim: &ClaimedKey, status: u16, body: &[u8]) {
        if let Err(e) = self.ports.idempotency.complete(claim.scope(), status, body).await {
            tracing::error!(route = claim.route, error = %e, "storing the idempotent answer failed");
        }
    }

    /// Forgets `claim` after a request that billed nothing, so that a retry runs again.
    pub async fn idempotency_release(&self, claim: &ClaimedKey) {
        if let Err(e) = self.ports.idempotency.release(claim.scope()).await {
            tracing::error!(route = claim.route, error = %e, "releasing the idempotency key failed");
        }
    }
}
