//! The two native chat formats: the fields the gateway checks in a message-style (`/v1/messages`) or
//! response-style (`/v1/responses`) body. Everything else passes through to the upstream unchanged.
//!
//! The result, [`NativePlan`], is what the reservation needs: the output cap and an upper bound on
//! prompt tokens. The prompt bound is the body's size in bytes (one token per byte at most) plus the
//! template overhead, or the model's whole input window when the prompt cannot be bounded from the body:
//! media parts (an image's tokens do not follow its bytes) or a `previous_response_id` (the earlier
//! turns are stored upstream).

use catalog::ModelDef;
use serde_json::{Map, Value};

use crate::ValidationError;
use crate::chat::{MAX_OUTPUT_TOKENS, TEMPLATE_OVERHEAD_TOKENS};

/// What the gateway needs to know about a valid native-format request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativePlan {
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// The output cap to reserve for.
    pub max_output_tokens: u64,
    /// Upper bound of prompt tokens for the reservation.
    pub prompt_bound_tokens: u64,
    /// The earlier response this one continues (response-style only).
    pub previous_response_id: Option<String>,
}

fn invalid(message: String) -> ValidationError {
    ValidationError::Invalid(message)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The model's largest output, and its input window.
fn model_bounds(def: &ModelDef) -> (u64, u64) {
    let max_output = def.max_completion_tokens().unwrap_or(MAX_OUTPUT_TOKENS);
    let limits = def.language_limits();
    let window = limits.and_then(|l| l.max_input_tokens.or(l.context_window)).unwrap_or(u64::MAX);
    (max_output, window)
}

/// An optional integer field in `1..=max`.
fn output_cap(
    def: &ModelDef,
    body: &Map<String, Value>,
    field: &str,
    max: u64,
) -> Result<Option<u64>, ValidationError> {
    match body.get(field) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=max).contains(&n) => Ok(Some(n)),
            _ => Err(invalid(format!(
                "{field} must be an integer from 1 to {max} for model {}, got {}",
                def.name,
                show(v)
            ))),
        },
    }
}

fn show(value: &Value) -> String {
    match value {
        Value::Number(n) => n.to_string(),
        other => kind(other).to_owned(),
    }
}

/// An optional number field within `min..=max`.
fn number_in(body: &Map<String, Value>, field: &str, min: f64, max: f64) -> Result<(), ValidationError> {
    match body.get(field) {
        None => Ok(()),
        Some(v) => match v.as_f64() {
            Some(x) if (min..=max).contains(&x) => Ok(()),
            _ => Err(invalid(format!("{field} must be a number from {min} to {max}, got {}", show(v)))),
        },
    }
}

/// An optional field that must have one of the given JSON types.
fn typed(body: &Map<String, Value>, field: &str, ok: fn(&Value) -> bool, what: &str) -> Result<(), ValidationError> {
    match body.get(field) {
        Some(v) if !ok(v) => Err(invalid(format!("{field} must be {what}, got {}", kind(v)))),
        _ => Ok(()),
    }
}

fn stream_flag(body: &Map<String, Value>) -> Result<bool, ValidationError> {
    typed(body, "stream", Value::is_boolean, "a boolean")?;
    Ok(body.get("stream").and_then(Value::as_bool).unwrap_or(false))
}

/// Whether any part of `value` is a media part whose tokens do not follow its bytes.
fn has_media(value: &Value) -> bool {
    match value {
        Value::Object(o) => {
            let media = o.get("type").and_then(Value::as_str).is_some_and(|t| {
                matches!(t, "image" | "document" | "input_image" | "input_file" | "input_audio" | "image_url")
            });
            media || o.values().any(has_media)
        }
        Value::Array(items) => items.iter().any(has_media),
        _ => false,
    }
}

fn prompt_bound(body: &Map<String, Value>, body_bytes: usize, window: u64, unbounded: bool) -> u64 {
    if unbounded || body.values().any(has_media) {
        return window;
    }
    let bytes = u64::try_from(body_bytes).unwrap_or(u64::MAX);
    bytes.saturating_add(TEMPLATE_OVERHEAD_TOKENS).min(window)
}

/// Checks a message-style body for `def` (the caller matched `model`): `messages` a non-empty array,
/// `max_tokens` required in `1..=` the model's bound, `temperature` 0..1, and the types of `top_p`,
/// `top_k`, `stream`, `stop_sequences` and `system`. `body_bytes` is the body's size.
pub fn messages_request(
    def: &ModelDef,
    body: &Map<String, Value>,
    body_bytes: usize,
) -> Result<NativePlan, ValidationError> {
    let (max_output, window) = model_bounds(def);
    match body.get("messages") {
        Some(Value::Array(items)) if !items.is_empty() => {}
        Some(Value::Array(_)) => return Err(invalid("messages must have at least one message".into())),
        Some(v) => return Err(invalid(format!("messages must be an array, got {}", kind(v)))),
        None => return Err(invalid("messages is required".into())),
    }
    let max_tokens = output_cap(def, body, "max_tokens", max_output)?
        .ok_or_else(|| invalid(format!("max_tokens is required: an integer from 1 to {max_output}")))?;
    number_in(body, "temperature", 0.0, 1.0)?;
    number_in(body, "top_p", 0.0, 1.0)?;
    typed(body, "top_k", |v| v.as_u64().is_some(), "a non-negative integer")?;
    typed(
        body,
        "stop_sequences",
        |v| v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
        "an array of strings",
    )?;
    typed(body, "system", |v| v.is_string() || v.is_array(), "a string or an array of content blocks")?;
    let stream = stream_flag(body)?;
    Ok(NativePlan {
        stream,
        max_output_tokens: max_tokens,
        prompt_bound_tokens: prompt_bound(body, body_bytes, window, false),
        previous_response_id: None,
    })
}

/// Checks a response-style body for `def` (the caller matched `model`): `input` a string or an array,
/// `instructions` a string, `max_output_tokens` in `1..=` the model's bound, `temperature` 0..2, `top_p`
/// 0..1, `truncation` `auto` or `disabled`, `previous_response_id` a non-empty string, `tool_choice` a
/// string or an object. `body_bytes` is the body's size.
pub fn responses_request(
    def: &ModelDef,
    body: &Map<String, Value>,
    body_bytes: usize,
) -> Result<NativePlan, ValidationError> {
    let (max_output, window) = model_bounds(def);
    typed(body, "input", |v| v.is_string() || v.is_array(), "a string or an array of messages")?;
    typed(body, "instructions", Value::is_string, "a string")?;
    let max_output_tokens = output_cap(def, body, "max_output_tokens", max_output)?.unwrap_or(max_output);
    number_in(body, "temperature", 0.0, 2.0)?;
    number_in(body, "top_p", 0.0, 1.0)?;
    typed(body, "tool_choice", |v| v.is_string() || v.is_object(), "a string or an object")?;
    match body.get("truncation") {
        None => {}
        Some(Value::String(t)) if t == "auto" || t == "disabled" => {}
        Some(v) => return Err(invalid(format!("truncation must be \"auto\" or \"disabled\", got {}", show_text(v)))),
    }
    let previous_response_id = match body.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
        Some(v) => return Err(invalid(format!("previous_response_id must be a non-empty string, got {}", kind(v)))),
    };
    let stream = stream_flag(body)?;
    let prompt_bound_tokens = prompt_bound(body, body_bytes, window, previous_response_id.is_some());
    Ok(NativePlan { stream, max_output_tokens, prompt_bound_tokens, previous_response_id })
}

fn show_text(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => kind(other).to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(name: &str) -> ModelDef {
        catalog::Catalog::builtin().expect("catalog").get(name).cloned().expect("model")
    }

    fn body(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(o) => o,
            _ => Map::new(),
        }
    }

    fn messages(extra: Value) -> Result<NativePlan, ValidationError> {
        let mut b =
            body(json!({"model": "LangB-2.0-pro", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}));
        b.extend(body(extra));
        messages_request(&def("LangB-2.0-pro"), &b, 100)
    }

    fn responses(extra: Value) -> Result<NativePlan, ValidationError> {
        let mut b = body(json!({"model": "LangB-2.0-pro", "input": "hi"}));
        b.extend(body(extra));
        responses_request(&def("LangB-2.0-pro"), &b, 100)
    }

    #[test]
    fn message_style_rules_and_edges() {
        let plan = messages(json!({})).expect("valid");
        assert_eq!(
            (plan.stream, plan.max_output_tokens, plan.prompt_bound_tokens),
            (false, 100, 100 + TEMPLATE_OVERHEAD_TOKENS)
        );
        assert_eq!(messages(json!({"max_tokens": 1})).map(|p| p.max_output_tokens), Ok(1));
        assert_eq!(messages(json!({"max_tokens": 131_072})).map(|p| p.max_output_tokens), Ok(131_072));
        for bad in [
            json!({"max_tokens": 0}),
            json!({"max_tokens": 131_073}),
            json!({"max_tokens": 1.5}),
            json!({"max_tokens": "9"}),
        ] {
            assert!(messages(bad.clone()).is_err(), "{bad}");
        }
        let mut missing = body(json!({"model": "LangB-2.0-pro", "messages": [{"role": "user", "content": "hi"}]}));
        assert!(messages_request(&def("LangB-2.0-pro"), &missing, 10).is_err(), "max_tokens is required");
        missing.insert("max_tokens".into(), json!(5));
        missing.remove("messages");
        assert!(messages_request(&def("LangB-2.0-pro"), &missing, 10).is_err(), "messages is required");
        assert!(messages(json!({"messages": []})).is_err());
        assert!(messages(json!({"messages": "hi"})).is_err());
        assert!(messages(json!({"temperature": 0})).is_ok());
        assert!(messages(json!({"temperature": 1})).is_ok());
        assert!(messages(json!({"temperature": 1.01})).is_err());
        assert!(messages(json!({"temperature": -0.01})).is_err());
        assert!(messages(json!({"stream": "yes"})).is_err());
        assert!(messages(json!({"stop_sequences": ["a", 1]})).is_err());
        assert_eq!(
            messages(json!({"stream": true, "metadata": {"user_id": "u"}, "whatever": 1})).map(|p| p.stream),
            Ok(true)
        );
    }

    #[test]
    fn response_style_rules_and_edges() {
        let plan = responses(json!({})).expect("valid");
        assert_eq!(plan.max_output_tokens, 131_072, "the model's bound when absent");
        assert_eq!(responses(json!({"max_output_tokens": 131_072})).map(|p| p.max_output_tokens), Ok(131_072));
        assert!(responses(json!({"max_output_tokens": 131_073})).is_err());
        assert!(responses(json!({"max_output_tokens": 0})).is_err());
        assert!(responses(json!({"truncation": "auto"})).is_ok());
        assert!(responses(json!({"truncation": "disabled"})).is_ok());
        assert!(responses(json!({"truncation": "off"})).is_err());
        assert!(responses(json!({"input": [{"role": "user", "content": "hi"}]})).is_ok());
        assert!(responses(json!({"input": 5})).is_err());
        assert!(responses(json!({"temperature": 2})).is_ok());
        assert!(responses(json!({"temperature": 2.1})).is_err());
        assert!(responses(json!({"previous_response_id": ""})).is_err());
        let chained = responses(json!({"previous_response_id": "resp_1"})).expect("valid");
        assert_eq!(chained.previous_response_id.as_deref(), Some("resp_1"));
        assert_eq!(chained.prompt_bound_tokens, 229_376, "a chained prompt is bounded by the input window");
        let image = responses(
            json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x"}]}]}),
        );
        assert_eq!(image.map(|p| p.prompt_bound_tokens), Ok(229_376));
    }
}
