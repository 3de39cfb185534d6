//! The platform's error bodies: the reason a refusal gives, in each of the forms its services
//! answer with (`{"error":{"message"}}`, the message format's `{"type":"error","error":{"message"}}`,
//! the speech service's `{"code","message"}`), so that no caller reads the platform's error JSON.

use domain::ports::UpstreamError;
use serde::Deserialize;

/// Most characters of a refusal's reason kept.
pub const REASON_CHARS: usize = 500;

/// The members of an error body that carry its reason.
#[derive(Deserialize)]
struct ErrorBody<'a> {
    #[serde(borrow, default)]
    error: Option<Inner<'a>>,
    #[serde(borrow, default)]
    message: Option<std::borrow::Cow<'a, str>>,
}

/// `error` as an object with a `message`; any other `error` value gives no reason.
#[derive(Deserialize)]
#[serde(untagged)]
enum Inner<'a> {
    Object {
        #[serde(borrow, default)]
        message: Option<std::borrow::Cow<'a, str>>,
    },
    Other(serde::de::IgnoredAny),
}

/// The reason an error body gives, trimmed and shortened to [`REASON_CHARS`] characters (with
/// `…` when cut); empty when the body is not one of the platform's error forms or gives none.
pub fn reason(body: &str) -> String {
    let Ok(parsed) = serde_json::from_str::<ErrorBody<'_>>(body) else { return String::new() };
    let nested = match parsed.error {
        Some(Inner::Object { message }) => message,
        _ => None,
    };
    let Some(message) = nested.or(parsed.message) else { return String::new() };
    let message = message.trim();
    if message.chars().count() > REASON_CHARS {
        format!("{}…", message.chars().take(REASON_CHARS).collect::<String>())
    } else {
        message.to_owned()
    }
}

/// A non-2xx answer as [`UpstreamError::Status`]: its text (already cut to what is kept) and the
/// reason read from it.
pub fn status(status: u16, body: String) -> UpstreamError {
    let reason = reason(&body);
    UpstreamError::Status { status, body, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_form_gives_its_reason_and_anything_else_none() {
        let platform =
            r#"{"error":{"code":"InvalidParameter","message":"The parameter `input` is required.","param":"input"}}"#;
        assert_eq!(reason(platform), "The parameter `input` is required.");
        let messages = r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}"#;
        assert_eq!(reason(messages), "max_tokens: too large");
        assert_eq!(reason(r#"{"code":45000001,"message":"  bad voice "}"#), "bad voice");
        assert_eq!(reason(r#"{"error":"flat","message":"outer"}"#), "outer");
        assert_eq!(reason(r#"{"error":{"message":"inner"},"message":"outer"}"#), "inner");
        for none in ["<html>nope</html>", "", "[]", r#"{"error":{"code":1}}"#, r#"{"message":7}"#] {
            assert_eq!(reason(none), "", "{none:?}");
        }
        let long = reason(&format!(r#"{{"message":"{}"}}"#, "é".repeat(900)));
        assert_eq!(long.chars().count(), REASON_CHARS + 1);
        assert!(long.ends_with('…'));
        let escaped = reason(r#"{"message":"line\nnext \u00e9"}"#);
        assert_eq!(escaped, "line\nnext é");
    }
}
