//! `ServiceError`: what a use case can fail with, in terms the edge maps to status codes.

use billing::LedgerError;
use domain::UsdAmount;
use domain::ports::StoreError;

/// A use-case failure. `api` maps each variant to one status and error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// Missing, unknown, revoked or under-scoped key.
    #[error("invalid or missing API key, or the key lacks the required scope")]
    InvalidApiKey,
    /// A valid key that may not make this request: it has expired, or the model is not on its
    /// allow-list (401 `invalid_api_key`, the message says which).
    #[error("{0}")]
    KeyRefused(String),
    /// The request breaks a rule of the interface.
    #[error("{0}")]
    InvalidRequest(String),
    /// Inline data above its size limit.
    #[error("{0}")]
    TooLarge(String),
    /// The thing does not exist or is not the caller's.
    #[error("{0} not found")]
    NotFound(String),
    /// The balance does not cover the reservation.
    #[error("insufficient balance: {hold} needs {needed} USD reserved, the available balance is {available} USD")]
    InsufficientBalance {
        /// What the reservation is for, such as `this call` or `the 120-second audio reservation`.
        hold: String,
        /// The reservation asked for.
        needed: UsdAmount,
        /// What the balance held.
        available: UsdAmount,
    },
    /// The call's hold is above the caller's `X-Max-Cost` (402 `max_cost_exceeded`); nothing was
    /// held or sent.
    #[error("this call holds {hold} USD, above the X-Max-Cost of {cap} USD; nothing was held or sent")]
    MaxCostExceeded {
        /// The hold the call needs.
        hold: UsdAmount,
        /// The caller's cap.
        cap: UsdAmount,
    },
    /// The API key's spend budget does not cover the reservation (402 `key_budget_exceeded`; the
    /// message names the key's limit).
    #[error("{0}")]
    KeyBudgetExceeded(String),
    /// Maintenance mode, or the model has no provider or price.
    #[error("{0}")]
    ProviderNotConfigured(String),
    /// An `Idempotency-Key` reused with another body, or while its first request runs.
    #[error("{0}")]
    IdempotencyConflict(String),
    /// The change conflicts with the task's or another record's stored state (409 `task_state_conflict`).
    #[error("{0}")]
    Conflict(String),
    /// The task is not in a state that can be cancelled (409 `not_cancellable`).
    #[error("{0}")]
    NotCancellable(String),
    /// A per-user or per-model concurrency cap is reached (429 `concurrency_limit_exceeded`).
    #[error("{message}")]
    ConcurrencyLimitExceeded {
        /// Which cap, and its value.
        message: String,
        /// Seconds after which a retry may find room (the `Retry-After` header).
        retry_after_secs: u64,
    },
    /// A key's requests- or tokens-per-minute limit is reached (429 `rate_limit_exceeded`).
    #[error("{message}")]
    RateLimitExceeded {
        /// Which limit of the key, and its value.
        message: String,
        /// Seconds until the key's current minute ends (the `Retry-After` header).
        retry_after_secs: u64,
    },
    /// Storing the media would pass the user's `media_quota_bytes` (413 `media_quota_exceeded`).
    #[error("{0}")]
    MediaQuotaExceeded(String),
    /// The media store failed or cannot be reached while storing or reading media (503
    /// `media_store_unavailable`); the text is for the log, not for clients.
    #[error("media store unavailable: {0}")]
    MediaUnavailable(String),
    /// The gateway is too busy to take this request now (503 `server_busy`, with `Retry-After`).
    #[error("{message}")]
    Busy {
        /// What is exhausted.
        message: String,
        /// Seconds after which a retry may succeed.
        retry_after_secs: u64,
    },
    /// The upstream failed (connection, timeout, status, malformed answer); the hold was refunded.
    #[error("{message}")]
    Upstream {
        /// Text for the client, saying whether a retry may help.
        message: String,
        /// Whether a retry may succeed.
        retryable: bool,
    },
    /// The database failed or could not be reached (503 `server_busy` with `Retry-After`: a
    /// database restarting is not the caller's fault, and a retry soon may succeed); the text is
    /// for the log, not for clients.
    #[error("database unavailable: {0}")]
    StoreUnavailable(String),
    /// Self-serve top-ups are not configured (503 `payments_not_configured`).
    #[error("payments are not configured on this gateway; ask its operator to add funds")]
    PaymentsNotConfigured,
    /// A voucher was not redeemed (404 `voucher_not_found`, 409 `voucher_redeemed`, 410
    /// `voucher_expired`, 429 `voucher_attempts_exceeded`); nothing moved.
    #[error("{0}")]
    Voucher(VoucherRefusal),
    /// A fault of the gateway itself; the text is for logs.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Why a voucher was not redeemed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VoucherRefusal {
    /// No voucher has the code, or its batch was revoked.
    #[error("no voucher has this code (check it for typos; codes look like GV-XXXX-XXXX-…)")]
    NotFound,
    /// It was redeemed already.
    #[error("this voucher was redeemed already")]
    Redeemed,
    /// Its batch expired at this time.
    #[error("this voucher expired at {0}")]
    Expired(domain::Timestamp),
    /// Too many failed attempts by this user lately.
    #[error("too many failed voucher attempts: {failures} in the last hour; try again in {retry_after_secs} s")]
    TooManyFailures {
        /// Failed attempts in the window.
        failures: u64,
        /// Seconds until the window lets one more in.
        retry_after_secs: u64,
    },
}

impl ServiceError {
    /// The same error, with a 402's reservation described as `hold` (what the amount covers);
    /// any other error unchanged.
    pub(crate) fn for_hold(self, hold: String) -> ServiceError {
        match self {
            ServiceError::InsufficientBalance { needed, available, .. } => {
                ServiceError::InsufficientBalance { hold, needed, available }
            }
            other => other,
        }
    }
}

impl From<StoreError> for ServiceError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => ServiceError::NotFound(what),
            StoreError::Conflict(what) => ServiceError::Conflict(what),
            StoreError::Invalid(what) => ServiceError::InvalidRequest(what),
            // Never the caller's fault: a 500 whose text (the cause included) only reaches the log.
            StoreError::Corrupt { .. } => ServiceError::Internal(e.chain()),
            StoreError::Backend(what) => ServiceError::StoreUnavailable(what),
        }
    }
}

impl From<LedgerError> for ServiceError {
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::InsufficientBalance { needed, available } => {
                ServiceError::InsufficientBalance { hold: "this call".into(), needed, available }
            }
            LedgerError::KeyBudgetExceeded { .. } => ServiceError::KeyBudgetExceeded(e.to_string()),
            LedgerError::UnknownUser(user) => ServiceError::NotFound(format!("user {user}")),
            LedgerError::InvalidAmount(what) => ServiceError::InvalidRequest(what),
            LedgerError::UnknownReservation(_)
            | LedgerError::DuplicateReservation(_)
            | LedgerError::AlreadyFinished { .. }
            | LedgerError::Overflow
            | LedgerError::NotTerminal(_)
            | LedgerError::TaskConflict { .. }
            | LedgerError::ReservationOpen(_) => ServiceError::Internal(e.to_string()),
            LedgerError::VoucherNotFound => ServiceError::Voucher(VoucherRefusal::NotFound),
            LedgerError::VoucherRedeemed => ServiceError::Voucher(VoucherRefusal::Redeemed),
            LedgerError::VoucherExpired(at) => ServiceError::Voucher(VoucherRefusal::Expired(at)),
            LedgerError::PaymentCredited(_) => ServiceError::Conflict(e.to_string()),
            LedgerError::Backend(what) => ServiceError::StoreUnavailable(what),
        }
    }
}

impl From<domain::StatementError> for ServiceError {
    /// Figures that make no statement are the gateway's fault (data that contradicts itself, or a
    /// sum past `i64`), never the caller's.
    fn from(e: domain::StatementError) -> Self {
        ServiceError::Internal(e.to_string())
    }
}

impl From<validation::ValidationError> for ServiceError {
    fn from(e: validation::ValidationError) -> Self {
        match e {
            validation::ValidationError::Invalid(m) => ServiceError::InvalidRequest(m),
            validation::ValidationError::TooLarge(m) => ServiceError::TooLarge(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_row_is_internal_and_a_bad_input_is_the_caller_s() {
        let corrupt = StoreError::corrupt("media record of task t", domain::ports::BadValue("not a list".into()));
        assert_eq!(
            ServiceError::from(corrupt),
            ServiceError::Internal("corrupt stored media record of task t: not a list".into())
        );
        assert_eq!(ServiceError::from(StoreError::Invalid("x".into())), ServiceError::InvalidRequest("x".into()));
    }
}
