//! The simulator's fault switches (body fields or `[sim:…]` prompt directives), the faults
//! every format shares, and the platform-format error answers.

use std::time::Duration;

use http::{Response, StatusCode, header};
use serde_json::{Map, Value, json};

use super::body::SimBody;

/// Upper bound on `sim_latency_ms` / `[sim:latency_ms=N]`.
pub const MAX_LATENCY_MS: u64 = 10_000;
/// Upper bound on `sim_chunk_delay_ms`.
pub const MAX_CHUNK_DELAY_MS: u64 = 1_000;
/// How long the `timeout` fault holds a request before closing the connection.
pub(crate) const TIMEOUT_FAULT_SECS: u64 = 60;

/// A fault requested with `sim_fault` or `[sim:fault=…]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Answer with this status and the format's error body.
    Status(u16),
    /// Accept and never answer (closes after [`TIMEOUT_FAULT_SECS`]).
    Timeout,
    /// 200 with a body that is not JSON.
    Malformed,
    /// Close the connection without any response.
    Drop,
    /// Stream a few events, then the format's error event, then end.
    MidstreamError,
    /// Stream a few events, then close the connection abruptly.
    MidstreamDrop,
    /// A normal answer without usage.
    EmptyUsage,
    /// Images: 200 with every item an error.
    FailAll,
    /// Chat, messages, responses: a normal answer whose output ignores the request's caps
    /// (`max_tokens`, `max_completion_tokens`, `max_output_tokens`): an upstream breaking its
    /// own bounds.
    OverBounds,
}

/// Which switches a format takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    /// Chat, messages and responses: body fields, every fault but `fail_all`.
    Text,
    /// Images: prompt directives; status, timeout, malformed, drop, `empty_usage`, `fail_all`,
    /// and `fail_image`.
    Images,
    /// Speech: prompt directives; status, timeout, malformed, drop, and `code`.
    Speech,
}

impl Fault {
    /// The fault named `name`, if `family` takes it.
    pub(crate) fn parse(name: &str, family: Family) -> Option<Fault> {
        let fault = match name {
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
            "fail_all" => Fault::FailAll,
            "over_bounds" => Fault::OverBounds,
            _ => return None,
        };
        let allowed = match fault {
            Fault::Status(_) | Fault::Timeout | Fault::Malformed | Fault::Drop => true,
            Fault::MidstreamError | Fault::MidstreamDrop | Fault::OverBounds => family == Family::Text,
            Fault::EmptyUsage => family != Family::Speech,
            Fault::FailAll => family == Family::Images,
        };
        allowed.then_some(fault)
    }

    /// Whether the answer is streamed whatever the request's `stream` says.
    pub(crate) fn forces_stream(fault: Option<Fault>) -> bool {
        matches!(fault, Some(Fault::MidstreamError | Fault::MidstreamDrop))
    }
}

/// The switches of one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Switches {
    /// The requested fault.
    pub(crate) fault: Option<Fault>,
    /// Wait before answering, ms (capped at [`MAX_LATENCY_MS`]).
    pub(crate) latency_ms: u64,
    /// Wait before each stream event, ms (capped at [`MAX_CHUNK_DELAY_MS`]).
    pub(crate) chunk_delay_ms: u64,
    /// Images: the 0-based items that fail.
    pub(crate) fail_images: Vec<u64>,
    /// Speech: the non-zero `code` to answer with inside HTTP 200.
    pub(crate) code: Option<i64>,
}

impl Switches {
    /// The switches in body fields `sim_fault`, `sim_fault_model`, `sim_latency_ms`,
    /// `sim_chunk_delay_ms` (chat, messages, responses); an unknown fault name is an error. With
    /// `sim_fault_model`, the fault is only for a request whose `model` is that one.
    pub(crate) fn from_body(request: &Map<String, Value>) -> Result<Switches, String> {
        let for_this_model = match request.get("sim_fault_model").and_then(Value::as_str) {
            Some(only) => request.get("model").and_then(Value::as_str) == Some(only),
            None => true,
        };
        let fault = match request.get("sim_fault") {
            None | Some(Value::Null) => None,
            Some(_) if !for_this_model => None,
            Some(value) => match value.as_str().and_then(|name| Fault::parse(name, Family::Text)) {
                Some(fault) => Some(fault),
                None => return Err("Unknown sim_fault.".to_owned()),
            },
        };
        let number = |key: &str| request.get(key).and_then(Value::as_u64).unwrap_or(0);
        Ok(Switches {
            fault,
            latency_ms: number("sim_latency_ms").min(MAX_LATENCY_MS),
            chunk_delay_ms: number("sim_chunk_delay_ms").min(MAX_CHUNK_DELAY_MS),
            ..Switches::default()
        })
    }

    /// The `[sim:key=value]` directives anywhere in `text` (images, speech); an unknown key,
    /// a key the family does not take, or a bad value is an error.
    pub(crate) fn from_directives(text: &str, family: Family) -> Result<Switches, String> {
        let mut switches = Switches::default();
        let mut rest = text;
        while let Some(start) = rest.find("[sim:") {
            let after = &rest[start + 5..];
            let Some(end) = after.find(']') else {
                return Err("Unterminated [sim:…] directive.".to_owned());
            };
            let directive = &after[..end];
            rest = &after[end + 1..];
            let (key, value) = directive.split_once('=').unwrap_or((directive, ""));
            let bad = || format!("Bad simulator directive [sim:{directive}].");
            match (key.trim(), family) {
                ("fault", _) => switches.fault = Some(Fault::parse(value.trim(), family).ok_or_else(bad)?),
                ("latency_ms", _) => {
                    switches.latency_ms = value.trim().parse::<u64>().map_err(|_| bad())?.min(MAX_LATENCY_MS);
                }
                ("fail_image", Family::Images) => {
                    switches.fail_images.push(value.trim().parse::<u64>().map_err(|_| bad())?);
                }
                ("code", Family::Speech) => {
                    let code = value.trim().parse::<i64>().map_err(|_| bad())?;
                    switches.code = (code != 0).then_some(code);
                }
                _ => return Err(bad()),
            }
        }
        Ok(switches)
    }
}

/// Waits the requested latency, then applies the faults every format shares: a status (the
/// answer `status` renders), `timeout`, `drop`, `malformed`. `None` when the request goes on.
pub(crate) async fn shared(
    switches: &Switches,
    status: impl FnOnce(u16) -> Response<SimBody>,
) -> Option<Result<Response<SimBody>, std::io::Error>> {
    if switches.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(switches.latency_ms)).await;
    }
    match switches.fault? {
        Fault::Status(code) => Some(Ok(status(code))),
        Fault::Timeout => {
            tokio::time::sleep(Duration::from_secs(TIMEOUT_FAULT_SECS)).await;
            Some(Err(std::io::Error::other("simulated timeout: closing without an answer")))
        }
        Fault::Drop => Some(Err(std::io::Error::other("simulated drop: closing without an answer"))),
        Fault::Malformed => Some(Ok(json_response(200, "<html>this is not json"))),
        _ => None,
    }
}

/// A response with `status` and a JSON content type.
pub(crate) fn json_response(status: u16, body: impl Into<bytes::Bytes>) -> Response<SimBody> {
    let mut response = Response::new(SimBody::full(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

/// The platform `code` used for a simulated error status.
pub(crate) fn status_code_name(status: u16) -> &'static str {
    match status {
        400 => "InvalidParameter",
        401 => "AuthenticationError",
        404 => "NotFound",
        413 => "RequestTooLarge",
        429 => "RateLimitExceeded.EndpointRPMExceeded",
        503 => "ServiceUnavailable",
        _ => "InternalServiceError",
    }
}

/// The platform `type` (HTTP class) of a status.
fn error_type(status: u16) -> &'static str {
    match status {
        400 | 413 => "BadRequest",
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
    json_response(status, body.to_string())
}

/// A platform error answer for a simulated status fault.
pub(crate) fn status_response(status: u16, request_id: &str) -> Response<SimBody> {
    error_response(status, status_code_name(status), &format!("Simulated {status} error."), "", request_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_switch_parses_in_its_family() {
        for name in ["status_400", "status_429", "status_500", "status_503", "timeout", "malformed", "drop"] {
            for family in [Family::Text, Family::Images, Family::Speech] {
                assert!(Fault::parse(name, family).is_some(), "{name} {family:?}");
            }
        }
        for name in ["midstream_error", "midstream_drop", "empty_usage"] {
            assert!(Fault::parse(name, Family::Text).is_some(), "{name}");
            assert!(Fault::parse(name, Family::Speech).is_none(), "{name}");
        }
        assert_eq!(Fault::parse("empty_usage", Family::Images), Some(Fault::EmptyUsage));
        assert_eq!(Fault::parse("fail_all", Family::Images), Some(Fault::FailAll));
        assert_eq!(Fault::parse("fail_all", Family::Text), None);
        assert_eq!(Fault::parse("status_418", Family::Text), None);
    }

    #[test]
    fn body_switches() {
        let req = json!({"sim_fault": "drop", "sim_latency_ms": 99_999, "sim_chunk_delay_ms": 5});
        let s = Switches::from_body(req.as_object().unwrap_or(&Map::new()));
        assert_eq!(
            s,
            Ok(Switches {
                fault: Some(Fault::Drop),
                latency_ms: MAX_LATENCY_MS,
                chunk_delay_ms: 5,
                ..Switches::default()
            })
        );
        let only = json!({"model": "a", "sim_fault": "status_503", "sim_fault_model": "b"});
        assert_eq!(Switches::from_body(only.as_object().expect("object")).expect("ok").fault, None);
        let this = json!({"model": "b", "sim_fault": "status_503", "sim_fault_model": "b"});
        assert_eq!(Switches::from_body(this.as_object().expect("object")).expect("ok").fault, Some(Fault::Status(503)));
        let req = json!({"sim_fault": "fail_all"});
        assert!(Switches::from_body(req.as_object().unwrap_or(&Map::new())).is_err());
    }

    #[test]
    fn directives() {
        let s = Switches::from_directives(
            "a cat [sim:fail_image=1] on [sim:fail_image=3][sim:latency_ms=20]",
            Family::Images,
        );
        assert_eq!(s, Ok(Switches { latency_ms: 20, fail_images: vec![1, 3], ..Switches::default() }));
        let s = Switches::from_directives("hi [sim:code=45000002] [sim:fault=status_503]", Family::Speech);
        assert_eq!(s, Ok(Switches { fault: Some(Fault::Status(503)), code: Some(45_000_002), ..Switches::default() }));
        assert_eq!(Switches::from_directives("plain [text] only", Family::Speech), Ok(Switches::default()));
        for bad in ["[sim:fault=nope]", "[sim:fail_image=x]", "[sim:code=1]", "[sim:what=1]", "[sim:fault=drop"] {
            assert!(Switches::from_directives(bad, Family::Images).is_err(), "{bad}");
        }
        assert!(Switches::from_directives("[sim:fail_image=1]", Family::Speech).is_err());
        assert!(Switches::from_directives("[sim:fault=midstream_error]", Family::Images).is_err());
    }
}
