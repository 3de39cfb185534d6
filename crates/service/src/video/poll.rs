//! What the upstream says about a content-generation task (`GET …/tasks/{id}`), read leniently: the
//! status, the result links, the usage and the error (`error`, or `failure_reason` in list items).

use domain::ports::UpstreamError;
use serde_json::Value;

/// An upstream task's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpstreamState {
    /// Waiting to run.
    Queued,
    /// Running.
    Running,
    /// Done: the result and the tokens to bill.
    Succeeded {
        /// The video.
        video_url: Option<String>,
        /// Its last frame.
        last_frame_url: Option<String>,
        /// `usage.completion_tokens`.
        completion_tokens: u64,
        /// The `usage` object, as JSON text.
        usage: String,
    },
    /// Failed, with the upstream's code and message.
    Failed {
        /// Error code.
        code: String,
        /// Error text.
        message: String,
    },
    /// Cancelled at the upstream.
    Cancelled,
    /// Expired at the upstream.
    Expired,
}

/// Reads a task object.
pub(crate) fn parse_task(bytes: &[u8]) -> Result<UpstreamState, UpstreamError> {
    let task: Value = serde_json::from_slice(bytes)
        .map_err(|e| UpstreamError::Malformed(format!("the task answer is not JSON: {e}")))?;
    let status = task
        .get("status")
        .and_then(Value::as_str)
        .ok_or_else(|| UpstreamError::Malformed("the task answer has no status".into()))?;
    let text = |pointer: &str| task.pointer(pointer).and_then(Value::as_str).map(str::to_owned);
    Ok(match status {
        "queued" => UpstreamState::Queued,
        "running" => UpstreamState::Running,
        "succeeded" => {
            let usage = task.get("usage").filter(|u| u.is_object());
            let tokens = usage
                .and_then(|u| u.get("completion_tokens").or_else(|| u.get("total_tokens")))
                .and_then(Value::as_u64)
                .ok_or_else(|| UpstreamError::Malformed("a succeeded task without usage.completion_tokens".into()))?;
            UpstreamState::Succeeded {
                video_url: text("/content/video_url"),
                last_frame_url: text("/content/last_frame_url"),
                completion_tokens: tokens,
                usage: usage.map(Value::to_string).unwrap_or_default(),
            }
        }
        "failed" => {
            let error = task.get("error").filter(|e| e.is_object()).or_else(|| task.get("failure_reason"));
            let field = |k: &str| error.and_then(|e| e.get(k)).and_then(Value::as_str).map(str::to_owned);
            UpstreamState::Failed {
                code: field("code").unwrap_or_else(|| "upstream_task_failed".into()),
                message: field("message").unwrap_or_else(|| "the upstream task failed".into()),
            }
        }
        "cancelled" => UpstreamState::Cancelled,
        "expired" => UpstreamState::Expired,
        other => return Err(UpstreamError::Malformed(format!("unknown task status {other:?}"))),
    })
}

/// The upstream id in a create answer (`{"id": "cgt-…"}`).
pub(crate) fn parse_created(bytes: &[u8]) -> Result<String, UpstreamError> {
    let answer: Value = serde_json::from_slice(bytes)
        .map_err(|e| UpstreamError::Malformed(format!("the create answer is not JSON: {e}")))?;
    answer
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| UpstreamError::Malformed("the create answer has no id".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<UpstreamState, UpstreamError> {
        parse_task(v.to_string().as_bytes())
    }

    #[test]
    fn states() {
        assert_eq!(parse(json!({"status": "queued"})), Ok(UpstreamState::Queued));
        assert_eq!(parse(json!({"status": "running"})), Ok(UpstreamState::Running));
        let done =
            parse(json!({"status": "succeeded", "content": {"video_url": "https://v", "last_frame_url": "https://f"},
            "usage": {"completion_tokens": 108900, "total_tokens": 108900}}));
        assert!(matches!(done, Ok(UpstreamState::Succeeded { completion_tokens: 108_900, ref video_url, .. })
            if video_url.as_deref() == Some("https://v")));
        let failed = parse(
            json!({"status": "failed", "error": {"code": "OutputVideoSensitiveContentDetected", "message": "m"}}),
        );
        assert!(
            matches!(failed, Ok(UpstreamState::Failed { ref code, .. }) if code == "OutputVideoSensitiveContentDetected")
        );
        let listed = parse(json!({"status": "failed", "failure_reason": {"code": "X", "message": "y"}}));
        assert!(matches!(listed, Ok(UpstreamState::Failed { ref code, .. }) if code == "X"));
        assert_eq!(parse(json!({"status": "cancelled"})), Ok(UpstreamState::Cancelled));
        assert_eq!(parse(json!({"status": "expired"})), Ok(UpstreamState::Expired));
        assert!(parse(json!({"status": "succeeded"})).is_err(), "no usage: cannot be billed");
        assert!(parse(json!({"status": "weird"})).is_err());
        assert!(parse_task(b"nope").is_err());
        assert_eq!(parse_created(br#"{"id":"cgt-1"}"#), Ok("cgt-1".into()));
        assert!(parse_created(br#"{"id":""}"#).is_err());
    }
}
