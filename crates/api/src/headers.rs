//! What the handlers read from request headers (the `Authorization: Bearer` key, `Idempotency-Key`,
//! `X-Max-Cost`),
//! the digest a presented token is compared by, and the stored first answer they replay under a key.

use http::{HeaderMap, HeaderValue, StatusCode, header};

use crate::error::ApiError;
use crate::response::Response;

/// The key presented as `Authorization: Bearer <key>` (scheme case-insensitive).
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
}

/// The SHA-256 of `bytes`.
pub(crate) fn digest(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// The `Idempotency-Key` header, if present; a value that is not text is 400.
pub(crate) fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match headers.get("idempotency-key") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|s| Some(s.trim().to_owned()))
            .map_err(|_| ApiError::invalid("Idempotency-Key must be visible ASCII")),
    }
}

/// The `X-Max-Cost` header: the most the request's call may cost, in USD (`0.05`, at most six
/// decimals, not negative); absent: no cap. Anything else is 400.
pub(crate) fn max_cost(headers: &HeaderMap) -> Result<Option<domain::UsdAmount>, ApiError> {
    let Some(value) = headers.get("x-max-cost") else { return Ok(None) };
    let refused =
        || ApiError::invalid("X-Max-Cost must be a USD amount such as 0.50 (at most six decimals, not negative)");
    let text = value.to_str().map_err(|_| refused())?.trim();
    match domain::UsdAmount::parse_decimal(text) {
        Ok(cap) if !cap.is_negative() && !text.starts_with('-') => Ok(Some(cap)),
        _ => Err(refused()),
    }
}

/// The stored first answer, marked as a replay.
pub(crate) fn replay(status: u16, body: Vec<u8>) -> Response {
    let mut response = http::Response::new(crate::response::full(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer sk-gw-abc"));
        assert_eq!(bearer(&h), Some("sk-gw-abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer   sk-gw-abc "));
        assert_eq!(bearer(&h), Some("sk-gw-abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic dXNlcjpwYXNz"));
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer"));
        assert_eq!(bearer(&h), None);
    }
}
