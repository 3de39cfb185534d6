//! The simulator's fault switches and its platform-format error answers.

use http::{Response, StatusCode, header};
use serde_json::json;

use super::body::SimBody;

/// A fault requested with the `sim_fault` body field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Answer with this status and the matching platform error body.
    Status(u16),
    /// Accept and never answer (closes after [`TIMEOUT_FAULT_SECS`]).
    Timeout,
    /// 200 with a body that is not JSON.
    Malformed,
    /// Close the connection without any response.
    Drop,
    /// Stream a few chunks, then a `data: {"error":…}` event, then end without `[DONE]`.
    MidstreamError,
    /// Stream a few chunks, then close the connection abruptly.
    MidstreamDrop,
    /// A normal answer without `usage` (and no usage chunk when streaming).
    EmptyUsage,
}

/// How long the `timeout` fault holds a request before closing the connection.
pub(crate) const TIMEOUT_FAULT_SECS: u64 = 60;

impl Fault {
    /// The fault named `name`, if it is one of the documented switches.
    pub(crate) fn parse(name: &str) -> Option<Fault> {
        Some(match name {
            "status_400" => Fault::Status(400),
            "status_429" => Fault::Status(429),
            "status_500" => Fault::Status(500),
            "status_503" => Fault::Status(503),
            "timeout" => Fault::Timeout,
            "malformed" => Fault::Malformed,
            "drop" => Fault::Drop,
            "midstream_error" => Fault::MidstreamError,
            "midstream_drop" => Fault::MidstreamDrop,
            "empty_usage" => Fault::EmptyUsage,
            _ => return None,
        })
    }
}

/// The platform `code` used for a simulated error status.
pub(crate) fn status_code_name(status: u16) -> &'static str {
    match status {
        400 => "InvalidParameter",
        401 => "AuthenticationError",
        404 => "NotFound",
        429 => "RateLimitExceeded.EndpointRPMExceeded",
        503 => "ServiceUnavailable",
        _ => "InternalServiceError",
    }
}

/// The platform `type` (HTTP class) of a status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        _ => "InternalServerError",
    }
}

/// A platform error answer: `{"error":{"code","message","param","type"}}`.
pub(crate) fn error_response(
    status: u16,
    code: &str,
    message: &str,
    param: &str,
    request_id: &str,
) -> Response<SimBody> {
    let body = json!({"error": {
        "code": code,
        "message": format!("{message} Request id: {request_id}"),
        "param": param,
        "type": error_type(status),
    }});
    let mut response = Response::new(SimBody::full(body.to_string()));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

/// The `data:` line of a mid-stream error event.
pub(crate) fn midstream_error_event(request_id: &str) -> String {
    let body = json!({"error": {
        "code": "InternalServiceError",
        "message": format!("The service encountered an unexpected internal error. Request id: {request_id}"),
        "type": "InternalServerError",
    }});
    format!("data: {body}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_switch_parses() {
        for name in [
            "status_400",
            "status_429",
            "status_500",
            "status_503",
            "timeout",
            "malformed",
            "drop",
            "midstream_error",
            "midstream_drop",
            "empty_usage",
        ] {
            assert!(Fault::parse(name).is_some(), "{name}");
        }
        assert_eq!(Fault::parse("status_418"), None);
    }
}
