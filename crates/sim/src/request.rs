//! Reading simulator requests: bounded bodies, JSON objects, credentials, the simulator's origin,
//! and whether a URL a request names is one the simulator may call (loopback only).

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, Request, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{Map, Value};

use super::state::SimState;

/// Why a request body could not be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// Larger than the path's limit (announced or read).
    TooLarge,
    /// The connection failed while reading.
    Unreadable,
}

/// The whole body, at most `limit` bytes; a larger announced `Content-Length` is refused unread.
pub(crate) async fn read_body(req: Request<Incoming>, limit: usize) -> Result<Bytes, BodyError> {
    let announced =
        req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > u64::try_from(limit).unwrap_or(u64::MAX)) {
        return Err(BodyError::TooLarge);
    }
    match Limited::new(req.into_body(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge),
        Err(_) => Err(BodyError::Unreadable),
    }
}

/// The body as a JSON object, if it is one.
pub(crate) fn json_object(bytes: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// Whether `Authorization: Bearer <non-empty>` is present.
pub(crate) fn has_bearer(headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|token| !token.trim().is_empty())
}

/// Whether header `name` is present and not blank.
pub(crate) fn has_header(headers: &HeaderMap, name: &str) -> bool {
    headers.get(name).and_then(|v| v.to_str().ok()).is_some_and(|v| !v.trim().is_empty())
}

/// `http://<host>` for links back to this simulator: the request's `Host`, else the listening address.
pub(crate) fn origin(state: &SimState, headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b)));
    match host {
        Some(host) => format!("http://{host}"),
        None => format!("http://{}", state.addr),
    }
}

/// Unix seconds now.
pub(crate) fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

/// Whether `url` is http(s) to a loopback host.
pub(crate) fn is_loopback_url(url: &str) -> bool {
    match url::Url::parse(url) {
        Ok(u) => {
            matches!(u.scheme(), "http" | "https") && matches!(u.host_str(), Some("127.0.0.1" | "[::1]" | "localhost"))
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_urls() {
        for ok in ["http://127.0.0.1:9/x", "https://localhost/x", "http://[::1]:80/"] {
            assert!(is_loopback_url(ok), "{ok}");
        }
        for bad in ["http://10.0.0.1/", "https://example.com/", "ftp://127.0.0.1/", "127.0.0.1"] {
            assert!(!is_loopback_url(bad), "{bad}");
        }
    }
}
