//! The two native chat formats: the fields the gateway checks in a message-style (`/v1/messages`) or
//! response-style (`/v1/responses`) body. Everything else passes through to the upstream unchanged.
//!
//! The result, [`NativePlan`], is what the reservation needs: the output cap and an upper bound on
//! prompt tokens. The prompt bound is the body's size in bytes (one token per byte at most) plus the
//! template overhead, or the model's whole input window when the prompt cannot be bounded from the body:
//! media parts (an image's tokens do not follow its bytes) or a `previous_response_id` (the earlier
//! turns are stored upstream).

use catalog::ModelDef;
use schemars::JsonSchema;
use serde::Deserialize;
use validator::Validate;

use crate::ValidationError;
use crate::chat::{MAX_OUTPUT_TOKENS, Object, TEMPLATE_OVERHEAD_TOKENS, ToolChoice};
use crate::raw::RawBody;
use crate::shape::invalid;
use crate::shape::{present, present_plain, validator_message};

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

/// A `POST /v1/messages` body as the gateway reads it; other fields pass through.
#[derive(Debug, Clone, Deserialize, Validate, JsonSchema)]
pub struct MessagesRequest {
    /// The conversation, at least one message.
    #[validate(length(min = 1))]
    pub messages: Vec<Object>,
    /// The public model name.
    pub model: String,
    /// Most output tokens (required; the model's limits bound it).
    pub max_tokens: u64,
    /// 0..1.
    #[serde(default, deserialize_with = "present")]
    #[validate(range(min = 0.0, max = 1.0))]
    pub temperature: Option<f64>,
    /// 0..1.
    #[serde(default, deserialize_with = "present")]
    #[validate(range(min = 0.0, max = 1.0))]
    pub top_p: Option<f64>,
    /// Sample from the k most likely tokens.
    #[serde(default, deserialize_with = "present")]
    pub top_k: Option<u64>,
    /// Stop sequences.
    #[serde(default, deserialize_with = "present")]
    pub stop_sequences: Option<Vec<String>>,
    /// A system prompt: text or content blocks.
    #[serde(default, deserialize_with = "present")]
    pub system: Option<TextOrBlocks>,
    /// Answer as server-sent events.
    #[serde(default, deserialize_with = "present")]
    pub stream: Option<bool>,
}

/// A `POST /v1/responses` body as the gateway reads it; other fields pass through.
#[derive(Debug, Clone, Deserialize, Validate, JsonSchema)]
pub struct ResponsesRequest {
    /// The public model name.
    pub model: String,
    /// Text, or an array of input items.
    #[serde(default, deserialize_with = "present")]
    pub input: Option<TextOrBlocks>,
    /// System instructions.
    #[serde(default, deserialize_with = "present")]
    pub instructions: Option<String>,
    /// Most output tokens (the model's limits bound it; their maximum when absent).
    #[serde(default, deserialize_with = "present")]
    pub max_output_tokens: Option<u64>,
    /// 0..2.
    #[serde(default, deserialize_with = "present")]
    #[validate(range(min = 0.0, max = 2.0))]
    pub temperature: Option<f64>,
    /// 0..1.
    #[serde(default, deserialize_with = "present")]
    #[validate(range(min = 0.0, max = 1.0))]
    pub top_p: Option<f64>,
    /// `auto`, `none`, `required`, or an object naming a tool.
    #[serde(default, deserialize_with = "present")]
    pub tool_choice: Option<ToolChoice>,
    /// `auto` or `disabled`.
    #[serde(default, deserialize_with = "present_plain")]
    pub truncation: Option<Truncation>,
    /// The earlier response of yours this one continues (`null`: none).
    #[serde(default)]
    #[validate(length(min = 1))]
    pub previous_response_id: Option<String>,
    /// Answer as server-sent events.
    #[serde(default, deserialize_with = "present")]
    pub stream: Option<bool>,
}

/// `truncation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Truncation {
    /// Drop the oldest input when it does not fit.
    Auto,
    /// Fail when the input does not fit.
    Disabled,
}

/// A string, or an array (of content blocks or input items, the model's business). Neither is
/// kept: the prompt bound is counted from the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextOrBlocks {
    /// Text.
    Text,
    /// Blocks or items.
    Blocks,
}

impl<'de> Deserialize<'de> for TextOrBlocks {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<TextOrBlocks, D::Error> {
        struct TextOrBlocksVisitor;
        impl<'de> serde::de::Visitor<'de> for TextOrBlocksVisitor {
            type Value = TextOrBlocks;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array")
            }

            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<TextOrBlocks, E> {
                Ok(TextOrBlocks::Text)
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<TextOrBlocks, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(TextOrBlocks::Blocks)
            }
        }
        d.deserialize_any(TextOrBlocksVisitor)
    }
}

impl JsonSchema for TextOrBlocks {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TextOrBlocks".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"anyOf": [{"type": "string"}, {"type": "array"}]})
    }
}

/// A `POST /v1/messages/count_tokens` body as the gateway reads it: the prompt parts of a
/// message-style call (no `max_tokens`); other fields are ignored.
#[derive(Debug, Clone, Deserialize, Validate, JsonSchema)]
pub struct CountTokensRequest {
    /// The public model name.
    pub model: String,
    /// The conversation, at least one message.
    #[validate(length(min = 1))]
    pub messages: Vec<Object>,
    /// A system prompt: text or content blocks.
    #[serde(default, deserialize_with = "present")]
    pub system: Option<TextOrBlocks>,
    /// Tool definitions.
    #[serde(default, deserialize_with = "present")]
    pub tools: Option<Vec<Object>>,
}

/// Bytes per token of the count estimate.
const BYTES_PER_TOKEN: u64 = 4;

/// Tokens each message adds to the estimate for its framing.
const TOKENS_PER_MESSAGE: u64 = 4;

/// The prompt tokens of a message-style body, estimated (the upstream models' tokenizers are not
/// public): the compact JSON size of `system`, `messages` and `tools` over four bytes per token,
/// rounded up, plus four per message. Never above the bound a call's hold takes (one token per
/// byte); the bill always uses the upstream's own count.
pub fn count_tokens_estimate(body: &RawBody<'_>) -> Result<u64, ValidationError> {
    let request: CountTokensRequest = body.read()?;
    request.validate().map_err(|e| invalid(validator_message(&e)))?;
    let bytes: u64 =
        ["system", "messages", "tools"].iter().filter_map(|k| body.get(k)).map(crate::raw::json_size).sum();
    let messages = u64::try_from(request.messages.len()).unwrap_or(u64::MAX);
    Ok(bytes.div_ceil(BYTES_PER_TOKEN).saturating_add(messages.saturating_mul(TOKENS_PER_MESSAGE)))
}

/// The model's largest output, and its input window.
fn model_bounds(def: &ModelDef) -> (u64, u64) {
    let max_output = def.max_completion_tokens().unwrap_or(MAX_OUTPUT_TOKENS);
    let limits = def.language_limits();
    let window = limits.and_then(|l| l.max_input_tokens.or(l.context_window)).unwrap_or(u64::MAX);
    (max_output, window)
}

/// An output cap within `1..=max` for model `def`.
fn output_cap(def: &ModelDef, field: &str, value: u64, max: u64) -> Result<u64, ValidationError> {
    if (1..=max).contains(&value) {
        Ok(value)
    } else {
        Err(invalid(format!("{field} must be an integer from 1 to {max} for model {}, got {value}", def.name)))
    }
}

fn prompt_bound(body: &RawBody<'_>, body_bytes: usize, window: u64, unbounded: bool) -> u64 {
    if unbounded || body.has_media() {
        return window;
    }
    let bytes = u64::try_from(body_bytes).unwrap_or(u64::MAX);
    bytes.saturating_add(TEMPLATE_OVERHEAD_TOKENS).min(window)
}

/// Checks a message-style body for `def` (the caller matched `model`): read as a
/// [`MessagesRequest`] (types, at least one message, `max_tokens` present, `temperature` and
/// `top_p` 0..1), then `max_tokens` against the model's bound. `body_bytes` is the body's size.
pub fn messages_request(def: &ModelDef, body: &RawBody<'_>, body_bytes: usize) -> Result<NativePlan, ValidationError> {
    let (max_output, window) = model_bounds(def);
    let request: MessagesRequest = body.read()?;
    request.validate().map_err(|e| invalid(validator_message(&e)))?;
    let max_tokens = output_cap(def, "max_tokens", request.max_tokens, max_output)?;
    Ok(NativePlan {
        stream: request.stream.unwrap_or(false),
        max_output_tokens: max_tokens,
        prompt_bound_tokens: prompt_bound(body, body_bytes, window, false),
        previous_response_id: None,
    })
}

/// Checks a response-style body for `def` (the caller matched `model`): read as a
/// [`ResponsesRequest`] (types, `temperature` 0..2, `top_p` 0..1, `truncation`, a non-empty
/// `previous_response_id`), then `max_output_tokens` against the model's bound. `body_bytes` is
/// the body's size.
pub fn responses_request(def: &ModelDef, body: &RawBody<'_>, body_bytes: usize) -> Result<NativePlan, ValidationError> {
    let (max_output, window) = model_bounds(def);
    let request: ResponsesRequest = body.read()?;
    request.validate().map_err(|e| invalid(validator_message(&e)))?;
    let max_output_tokens = match request.max_output_tokens {
        Some(n) => output_cap(def, "max_output_tokens", n, max_output)?,
        None => max_output,
    };
    let previous_response_id = request.previous_response_id;
    let prompt_bound_tokens = prompt_bound(body, body_bytes, window, previous_response_id.is_some());
    Ok(NativePlan {
        stream: request.stream.unwrap_or(false),
        max_output_tokens,
        prompt_bound_tokens,
        previous_response_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value, json};

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
        with_raw(&b, |raw| messages_request(&def("LangB-2.0-pro"), raw, 100))
    }

    /// `f` of `b` read as a raw body.
    fn with_raw<T>(b: &Map<String, Value>, f: impl FnOnce(&RawBody<'_>) -> T) -> T {
        let bytes = serde_json::to_vec(b).expect("json");
        f(&RawBody::parse_body(&bytes).expect("object"))
    }

    fn responses(extra: Value) -> Result<NativePlan, ValidationError> {
        let mut b = body(json!({"model": "LangB-2.0-pro", "input": "hi"}));
        b.extend(body(extra));
        with_raw(&b, |raw| responses_request(&def("LangB-2.0-pro"), raw, 100))
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
        assert!(
            with_raw(&missing, |raw| messages_request(&def("LangB-2.0-pro"), raw, 10)).is_err(),
            "max_tokens is required"
        );
        missing.insert("max_tokens".into(), json!(5));
        missing.remove("messages");
        assert!(
            with_raw(&missing, |raw| messages_request(&def("LangB-2.0-pro"), raw, 10)).is_err(),
            "messages is required"
        );
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
        assert!(responses(json!({"truncation": {"auto": null}})).is_err(), "a plain string only");
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
