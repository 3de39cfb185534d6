//! The error envelope `{"error":{"code","message"}}` and the one mapping from use-case errors to HTTP.

use http::{HeaderValue, StatusCode, header};
use service::{ServiceError, VoucherRefusal};

use crate::response::{Response, json_response};

/// The error envelope every non-2xx answer carries: `{"error":{"code","message"}}`.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct ErrorEnvelope<'a> {
    /// The error.
    pub error: ErrorBody<'a>,
}

/// The inside of [`ErrorEnvelope`].
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct ErrorBody<'a> {
    /// Stable snake_case code (`invalid_request`, `insufficient_balance`, …).
    pub code: &'a str,
    /// Human-readable text naming the field and the rule.
    pub message: &'a str,
}

/// An error on its way to the client: status, stable code, human message and optional headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable snake_case code.
    pub code: &'static str,
    /// Human-readable text.
    pub message: String,
    /// `Allow` header value for 405.
    pub allow: Option<String>,
    /// `Retry-After` seconds for 429 and 503.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError { status, code, message: message.into(), allow: None, retry_after: None }
    }

    /// 400 `invalid_request`.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 404 `not_found`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 405 `method_not_allowed` with the methods the path takes.
    pub fn method_not_allowed(allow: impl Into<String>) -> ApiError {
        let allow = allow.into();
        let mut error =
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", format!("this path accepts {allow}"));
        error.allow = Some(allow);
        error
    }

    /// 413 `request_too_large`.
    pub fn too_large(limit: u64) -> ApiError {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request_too_large",
            format!("the request body exceeds {limit} bytes"),
        )
    }

    /// 415 `unsupported_content_type`.
    pub fn unsupported_content_type() -> ApiError {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_content_type",
            "this endpoint accepts only application/json",
        )
    }

    /// The response carrying this error.
    /// The error itself rides along in the response's extensions, so that the `/v1` base URL can
    /// write it in its dialect (`crate::v1::dialect`).
    pub fn into_response(self) -> Response {
        let body = ErrorEnvelope { error: ErrorBody { code: self.code, message: &self.message } };
        let mut response = json_response(self.status, &body);
        if let Some(allow) = self.allow.as_deref().and_then(|a| HeaderValue::from_str(a).ok()) {
            response.headers_mut().insert(header::ALLOW, allow);
        }
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response.extensions_mut().insert(self);
        response
    }
}

/// `Retry-After` of a 503 `media_store_unavailable`, seconds.
const MEDIA_RETRY_AFTER_SECS: u64 = 5;

/// `Retry-After` of a 503 while the database is not answering, in seconds (a restarting database
/// takes about that long to accept connections again).
const STORE_RETRY_AFTER_SECS: u64 = 2;

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> ApiError {
        match e {
            ServiceError::InvalidApiKey => ApiError::new(StatusCode::UNAUTHORIZED, "invalid_api_key", e.to_string()),
            ServiceError::KeyRefused(m) => ApiError::new(StatusCode::UNAUTHORIZED, "invalid_api_key", m),
            ServiceError::InvalidRequest(m) => ApiError::invalid(m),
            ServiceError::TooLarge(m) => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large", m),
            ServiceError::NotFound(_) => ApiError::not_found(e.to_string()),
            ServiceError::InsufficientBalance { .. } => {
                ApiError::new(StatusCode::PAYMENT_REQUIRED, "insufficient_balance", e.to_string())
            }
            ServiceError::KeyBudgetExceeded(m) => ApiError::new(StatusCode::PAYMENT_REQUIRED, "key_budget_exceeded", m),
            ServiceError::MaxCostExceeded { .. } => {
                ApiError::new(StatusCode::PAYMENT_REQUIRED, "max_cost_exceeded", e.to_string())
            }
            ServiceError::ProviderNotConfigured(m) => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "provider_not_configured", m)
            }
            ServiceError::IdempotencyConflict(m) => ApiError::new(StatusCode::CONFLICT, "idempotency_conflict", m),
            ServiceError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "task_state_conflict", m),
            ServiceError::NotCancellable(m) => ApiError::new(StatusCode::CONFLICT, "not_cancellable", m),
            ServiceError::ConcurrencyLimitExceeded { message, retry_after_secs } => ApiError {
                retry_after: Some(retry_after_secs),
                ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "concurrency_limit_exceeded", message)
            },
            ServiceError::RateLimitExceeded { message, retry_after_secs } => ApiError {
                retry_after: Some(retry_after_secs),
                ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate_limit_exceeded", message)
            },
            ServiceError::MediaQuotaExceeded(m) => {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "media_quota_exceeded", m)
            }
            ServiceError::MediaUnavailable(detail) => {
                tracing::warn!(error = %detail, "media store unavailable");
                ApiError {
                    retry_after: Some(MEDIA_RETRY_AFTER_SECS),
                    ..ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "media_store_unavailable",
                        "the media store is unavailable; nothing was charged, try again later",
                    )
                }
            }
            ServiceError::Busy { message, retry_after_secs } => ApiError {
                retry_after: Some(retry_after_secs),
                ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_busy", message)
            },
            ServiceError::Upstream { message, .. } => {
                ApiError::new(StatusCode::BAD_GATEWAY, "upstream_request_failed", message)
            }
            ServiceError::StoreUnavailable(detail) => {
                tracing::warn!(error = %detail, "database unavailable");
                ApiError {
                    retry_after: Some(STORE_RETRY_AFTER_SECS),
                    ..ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "server_busy",
                        "the gateway's database is not answering; nothing was charged for a call not answered, try again shortly",
                    )
                }
            }
            ServiceError::PaymentsNotConfigured => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "payments_not_configured", e.to_string())
            }
            ServiceError::Voucher(refusal) => {
                let text = refusal.to_string();
                match refusal {
                    VoucherRefusal::NotFound => ApiError::new(StatusCode::NOT_FOUND, "voucher_not_found", text),
                    VoucherRefusal::Redeemed => ApiError::new(StatusCode::CONFLICT, "voucher_redeemed", text),
                    VoucherRefusal::Expired(_) => ApiError::new(StatusCode::GONE, "voucher_expired", text),
                    VoucherRefusal::TooManyFailures { retry_after_secs, .. } => ApiError {
                        retry_after: Some(retry_after_secs),
                        ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "voucher_attempts_exceeded", text)
                    },
                }
            }
            ServiceError::Internal(detail) => {
                tracing::error!(error = %detail, "internal error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal_error",
                    "the gateway failed; try again later",
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::UsdAmount;

    #[test]
    fn service_errors_map_to_spec_codes() {
        let cases = [
            (ServiceError::InvalidApiKey, 401, "invalid_api_key"),
            (ServiceError::KeyRefused("this API key expired".into()), 401, "invalid_api_key"),
            (ServiceError::InvalidRequest("x".into()), 400, "invalid_request"),
            (ServiceError::NotFound("task t".into()), 404, "not_found"),
            (
                ServiceError::InsufficientBalance {
                    hold: "this call".into(),
                    needed: UsdAmount::from_micros(5),
                    available: UsdAmount::ZERO,
                },
                402,
                "insufficient_balance",
            ),
            (ServiceError::KeyBudgetExceeded("k".into()), 402, "key_budget_exceeded"),
            (ServiceError::ProviderNotConfigured("m".into()), 503, "provider_not_configured"),
            (ServiceError::NotCancellable("t".into()), 409, "not_cancellable"),
            (ServiceError::Conflict("t".into()), 409, "task_state_conflict"),
            (ServiceError::IdempotencyConflict("k".into()), 409, "idempotency_conflict"),
            (ServiceError::TooLarge("b".into()), 413, "request_too_large"),
            (ServiceError::MediaQuotaExceeded("q".into()), 413, "media_quota_exceeded"),
            (
                ServiceError::ConcurrencyLimitExceeded { message: "c".into(), retry_after_secs: 1 },
                429,
                "concurrency_limit_exceeded",
            ),
            (ServiceError::RateLimitExceeded { message: "r".into(), retry_after_secs: 7 }, 429, "rate_limit_exceeded"),
            (ServiceError::Busy { message: "b".into(), retry_after_secs: 1 }, 503, "server_busy"),
            (ServiceError::MediaUnavailable("connection refused".into()), 503, "media_store_unavailable"),
            (ServiceError::Upstream { message: "u".into(), retryable: true }, 502, "upstream_request_failed"),
            (ServiceError::StoreUnavailable("connection refused at 10.0.0.1".into()), 503, "server_busy"),
            (ServiceError::Internal("db down at 10.0.0.1".into()), 500, "internal_error"),
        ];
        for (e, status, code) in cases {
            let api = ApiError::from(e);
            assert_eq!((api.status.as_u16(), api.code), (status, code));
            assert!(!api.message.contains("10.0.0.1"), "internal detail leaked");
        }
    }
}
