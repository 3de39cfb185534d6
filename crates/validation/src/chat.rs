//! Chat request validation: checks a `POST /api/v1/chat/completions` body against the model's catalog limits.
//!
//! The rules come from the model's typed limits ([`LanguageLimits`]: `messages`, `max_tokens`, `max_completion_tokens`,
//! `max_input_tokens`, `stop`, `thinking`, `reasoning_effort`, `sampling`, `input_modalities`, `media`);
//! unknown parameters are passed through untouched. The result, [`ChatPlan`], is what the gateway needs
//! to reserve and forward the call: stream or not, the output cap and an upper bound on prompt tokens.

mod media;
mod messages;
mod request;

use crate::ValidationError;
use crate::raw::RawBody;
use crate::shape::{count, invalid};
use catalog::{LanguageLimits, ModelDef};
pub use request::{
    ChatMessage, ChatRequest, ContentPart, MessageContent, Object, Role, Stop, StreamOptions, Thinking, ToolChoice,
};

/// The largest output cap the interface allows (its Limits table); every language model's typed
/// `max_tokens.max` is at most this (checked by a test).
pub const MAX_OUTPUT_TOKENS: u64 = 393_216;

/// Tokens added to every prompt bound for the chat template's fixed text (system preamble,
/// tool-use instructions) that the request itself does not carry.
pub const TEMPLATE_OVERHEAD_TOKENS: u64 = 512;

/// The message roles a chat request may use.
pub const ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// The most choices (`n`) a chat request may ask for (OpenAI's documented maximum).
pub const MAX_CHOICES: u64 = 128;

/// The range of `frequency_penalty` and `presence_penalty` (inclusive).
const PENALTY_RANGE: (f64, f64) = (-2.0, 2.0);

/// What the gateway needs to know about a valid chat request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatPlan {
    /// Whether the client asked for a streamed response (`stream: true`).
    pub stream: bool,
    /// Effective output cap of one choice: max_completion_tokens, else max_tokens, else the model's
    /// max completion tokens. When [`ChatPlan::bounds_reasoning`], the upstream is sent this as
    /// `max_completion_tokens`, which counts reasoning and answer, so it bounds both.
    pub max_output_tokens: u64,
    /// How many choices the upstream generates (`n`, 1 when absent); each is billed.
    pub choices: u64,
    /// Whether the model can think and the request does not turn thinking off
    /// (`thinking.type = disabled`): the upstream's `max_tokens` does not count reasoning, so the
    /// upstream body must carry the cap as `max_completion_tokens` (and no `max_tokens`).
    pub bounds_reasoning: bool,
    /// Upper bound of prompt tokens for the reservation: an estimate that is never below what the upstream can
    /// count (UTF-8 bytes of all text in the request's messages, tools and other fields count as at most one
    /// token per byte, plus [`TEMPLATE_OVERHEAD_TOKENS`]; each media item adds a per-item bound: an image
    /// `ceil(max_pixels / 196)`, one token per 14×14 patch at the model's largest image, and a video or audio
    /// item the whole input window, since its duration is not read), capped at the model's `max_input_tokens` (else `context_window`).
    pub prompt_bound_tokens: u64,
    /// Whether any message carries audio input.
    pub has_audio: bool,
}

/// Checks a chat completion body for model `def` (the caller has already matched `body["model"]` to `def`
/// and bounded the body's size). First the body is read as a [`ChatRequest`] (every field the
/// gateway reads, typed; a JSON `null` is a wrong type for every optional field), then the model's
/// limits are applied to those values. Every rule names the field and the bound in its message;
/// parameters the interface does not list are allowed and left alone.
pub fn chat_request(def: &ModelDef, body: &RawBody<'_>) -> Result<ChatPlan, ValidationError> {
    let Some(limits) = def.language_limits() else {
        return Err(invalid(format!("model {} is not a language model", def.name)));
    };
    let request: ChatRequest = body.read()?;
    let input = messages::check(def, limits, &request.messages, body)?;
    let max_output_tokens = check_output_tokens(def, limits, &request)?;
    check_sampling(limits, &request)?;
    check_stop(limits, &request)?;
    check_thinking(def, limits, &request)?;
    check_reasoning_effort(def, limits, &request)?;
    let choices = check_choices(&request)?;

    let other_fields =
        body.entry_sizes().filter(|(key, _)| *key != "messages").fold(0u64, |sum, (_, size)| sum.saturating_add(size));
    let estimate = TEMPLATE_OVERHEAD_TOKENS.saturating_add(input.prompt_tokens).saturating_add(other_fields);
    let cap = limits.input_window().unwrap_or(u64::MAX);
    Ok(ChatPlan {
        stream: request.stream.unwrap_or(false),
        max_output_tokens,
        choices,
        bounds_reasoning: limits.can_think() && !thinking_off(&request),
        prompt_bound_tokens: estimate.min(cap),
        has_audio: input.has_audio,
    })
}

impl ChatPlan {
    /// The output tokens to hold for: the cap of one choice (reasoning included, see
    /// [`ChatPlan::bounds_reasoning`]) times the number of choices.
    pub fn output_hold_tokens(&self) -> u64 {
        self.max_output_tokens.saturating_mul(self.choices)
    }
}

/// Whether the request turns thinking off with the chat format's switch, `thinking.type = disabled`
/// (the upstream then writes no chain of thought, and accepts only `reasoning_effort = minimal`).
/// `reasoning_effort = minimal` alone is not taken as off: the cap is sent as
/// `max_completion_tokens` then too, which bounds the call whatever the upstream makes of it.
fn thinking_off(request: &ChatRequest) -> bool {
    request.thinking.as_ref().is_some_and(|t| t.kind == "disabled")
}

/// Checks `n` (1..=[`MAX_CHOICES`]) and returns the number of choices.
fn check_choices(request: &ChatRequest) -> Result<u64, ValidationError> {
    match request.n {
        None => Ok(1),
        Some(n) if (1..=MAX_CHOICES).contains(&n) => Ok(n),
        Some(n) => Err(invalid(format!("n must be an integer from 1 to {MAX_CHOICES}, got {n}"))),
    }
}

/// Checks `max_tokens` and `max_completion_tokens` (both, when both are given) against the model's
/// `limits.max_tokens` range and returns the effective output cap.
fn check_output_tokens(def: &ModelDef, limits: &LanguageLimits, request: &ChatRequest) -> Result<u64, ValidationError> {
    let model_max = limits.max_completion_tokens();
    let (min, max) = (limits.max_tokens.min, limits.max_tokens.max);
    let mut chosen = None;
    for (field, value) in [("max_tokens", request.max_tokens), ("max_completion_tokens", request.max_completion_tokens)]
    {
        let Some(n) = value else { continue };
        if !(min..=max).contains(&n) {
            return Err(invalid(format!(
                "{field} must be an integer from {min} to {max} for model {}, got {n}",
                def.name
            )));
        }
        chosen = Some(n);
    }
    Ok(chosen.unwrap_or(model_max))
}

fn check_sampling(limits: &LanguageLimits, request: &ChatRequest) -> Result<(), ValidationError> {
    let sampling = limits.sampling.as_ref();
    let bound =
        |n: Option<&serde_json::Number>, default: f64| n.and_then(serde_json::Number::as_f64).unwrap_or(default);
    let temperature = sampling.map(|s| &s.temperature);
    let top_p = sampling.map(|s| &s.top_p);
    let ranges = [
        (
            "temperature",
            request.temperature,
            bound(temperature.map(|r| &r.min), 0.0),
            bound(temperature.map(|r| &r.max), 2.0),
        ),
        ("top_p", request.top_p, bound(top_p.map(|r| &r.min), 0.0), bound(top_p.map(|r| &r.max), 1.0)),
        ("frequency_penalty", request.frequency_penalty, PENALTY_RANGE.0, PENALTY_RANGE.1),
        ("presence_penalty", request.presence_penalty, PENALTY_RANGE.0, PENALTY_RANGE.1),
    ];
    for (field, value, min, max) in ranges {
        if let Some(x) = value
            && !(x >= min && x <= max)
        {
            return Err(invalid(format!("{field} must be a number from {min} to {max}, got {x}")));
        }
    }
    Ok(())
}

fn check_stop(limits: &LanguageLimits, request: &ChatRequest) -> Result<(), ValidationError> {
    let max = limits.stop.max_items;
    match &request.stop {
        Some(stop) if count(stop.len()) > max => {
            Err(invalid(format!("stop must be a string or an array of at most {max} strings, got {}", stop.len())))
        }
        _ => Ok(()),
    }
}

fn check_thinking(def: &ModelDef, limits: &LanguageLimits, request: &ChatRequest) -> Result<(), ValidationError> {
    let Some(asked) = &request.thinking else { return Ok(()) };
    let Some(thinking) = &limits.thinking else {
        return Err(invalid(format!("thinking is not supported by model {}", def.name)));
    };
    if thinking.types.contains(&asked.kind) {
        return Ok(());
    }
    Err(invalid(format!(
        "thinking.type must be one of {} for model {}, got {:?}",
        thinking.types.join(", "),
        def.name,
        asked.kind
    )))
}

fn check_reasoning_effort(
    def: &ModelDef,
    limits: &LanguageLimits,
    request: &ChatRequest,
) -> Result<(), ValidationError> {
    let Some(value) = &request.reasoning_effort else { return Ok(()) };
    let Some(effort) = &limits.reasoning_effort else {
        return Err(invalid(format!("reasoning_effort is not supported by model {}", def.name)));
    };
    if effort.values.contains(value) {
        return Ok(());
    }
    Err(invalid(format!(
        "reasoning_effort must be one of {} for model {}, got {value:?}",
        effort.values.join(", "),
        def.name
    )))
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use catalog::Catalog;
    use serde_json::{Map, Value, json};

    use super::*;

    static CATALOG: LazyLock<Catalog> = LazyLock::new(|| Catalog::builtin().expect("builtin catalog"));

    /// Validates `extra` merged over a minimal valid request (`model` + one user message) for `model`.
    fn check(model: &str, extra: Value) -> Result<ChatPlan, ValidationError> {
        let def = CATALOG.get(model).expect("model in catalog");
        let mut body = Map::new();
        body.insert("model".into(), json!(model));
        body.insert("messages".into(), json!([{"role": "user", "content": "hi"}]));
        let Value::Object(extra) = extra else { panic!("extra must be an object") };
        body.extend(extra);
        let bytes = serde_json::to_vec(&body).expect("json");
        chat_request(def, &RawBody::parse_body(&bytes).expect("object"))
    }

    /// Runs `(model, extra, ok?)` rows and reports every row whose outcome differs.
    fn table(rows: &[(&str, Value, bool)]) {
        let wrong: Vec<String> = rows
            .iter()
            .filter_map(|(model, extra, ok)| {
                let got = check(model, extra.clone());
                (got.is_ok() != *ok).then(|| format!("{model} {extra}: expected ok={ok}, got {got:?}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    fn user_messages(n: usize) -> Value {
        Value::Array(vec![json!({"role": "user", "content": "hi"}); n])
    }

    fn with_parts(parts: Vec<Value>) -> Value {
        json!({"messages": [{"role": "user", "content": parts}]})
    }

    fn image_part(url: &str) -> Value {
        json!({"type": "image_url", "image_url": {"url": url}})
    }

    fn video_part(url: &str) -> Value {
        json!({"type": "video_url", "video_url": {"url": url}})
    }

    fn audio_part(data: &str, format: &str) -> Value {
        json!({"type": "input_audio", "input_audio": {"data": data, "format": format}})
    }

    /// A base64 data URL whose payload decodes to exactly `bytes` bytes.
    fn data_url(mime: &str, bytes: usize) -> String {
        let tail = match bytes % 3 {
            0 => "",
            1 => "AA==",
            _ => "AAA=",
        };
        format!("data:{mime};base64,{}{tail}", "A".repeat(bytes / 3 * 4))
    }

    #[test]
    fn message_count_edges() {
        table(&[
            ("LangA-V4-flash", json!({"messages": user_messages(1)}), true),
            ("LangA-V4-flash", json!({"messages": user_messages(1000)}), true),
            ("LangA-V4-flash", json!({"messages": user_messages(0)}), false),
            ("LangA-V4-flash", json!({"messages": user_messages(1001)}), false),
            ("LangC-5.2", json!({"messages": user_messages(1001)}), false),
            ("LangA-V4-flash", json!({"messages": {"role": "user", "content": "hi"}}), false),
            ("LangA-V4-flash", json!({"messages": null}), false),
        ]);
        let def = CATALOG.get("LangA-V4-flash").expect("model");
        let missing =
            chat_request(def, &RawBody::parse_body(b"{}").expect("object")).expect_err("messages is required");
        assert!(missing.message().contains("messages"), "{missing}");
    }

    #[test]
    fn message_shapes() {
        let m = |message: Value| json!({"messages": [message]});
        let call = json!([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]);
        table(&[
            ("LangA-V4-flash", m(json!({"role": "system", "content": "be brief"})), true),
            ("LangA-V4-flash", m(json!({"role": "assistant", "content": "ok"})), true),
            ("LangA-V4-flash", m(json!({"role": "tool", "content": "42", "tool_call_id": "c1"})), true),
            ("LangA-V4-flash", m(json!({"role": "user", "content": [{"type": "text", "text": "hi"}]})), true),
            ("LangA-V4-flash", m(json!({"role": "assistant", "content": null, "tool_calls": call})), true),
            ("LangA-V4-flash", m(json!({"role": "user", "content": "hi", "name": "x", "extra": 1})), true),
            ("LangA-V4-flash", m(json!({"role": "developer", "content": "hi"})), false),
            ("LangA-V4-flash", m(json!({"content": "hi"})), false),
            ("LangA-V4-flash", m(json!({"role": "user"})), false),
            ("LangA-V4-flash", m(json!({"role": "user", "content": 5})), false),
            ("LangA-V4-flash", m(json!({"role": "user", "content": null})), false),
            ("LangA-V4-flash", m(json!({"role": "assistant", "content": null})), false),
            ("LangA-V4-flash", m(json!({"role": "assistant", "content": null, "tool_calls": []})), false),
            ("LangA-V4-flash", m(json!({"role": "user", "content": null, "tool_calls": call})), false),
            ("LangA-V4-flash", m(json!({"role": "user", "content": ["hi"]})), false),
            ("LangA-V4-flash", m(json!({"role": "user", "content": [{"text": "hi"}]})), false),
            ("LangA-V4-flash", m(json!({"role": "user", "content": [{"type": 1}]})), false),
            ("LangA-V4-flash", m(json!({"role": "assistant", "content": "", "tool_calls": {}})), false),
            ("LangA-V4-flash", m(json!({"role": "assistant", "content": "", "tool_calls": ["x"]})), false),
            ("LangA-V4-flash", m(json!({"role": "tool", "content": "42", "tool_call_id": 7})), false),
            ("LangA-V4-flash", json!({"messages": ["hi"]}), false),
            // Objects only: serde would fill a struct from an array, and an enum from a one-key map.
            ("LangA-V4-flash", json!({"messages": [["user", "hi"]]}), false),
            ("LangA-V4-flash", m(json!({"role": "user", "content": [["text", "hi"]]})), false),
            ("LangA-V4-flash", m(json!({"role": {"user": null}, "content": "hi"})), false),
        ]);
    }

    #[test]
    fn stream_flags() {
        assert_eq!(check("LangA-V4-flash", json!({})).map(|p| p.stream), Ok(false));
        assert_eq!(check("LangA-V4-flash", json!({"stream": true})).map(|p| p.stream), Ok(true));
        table(&[
            ("LangA-V4-flash", json!({"stream": false, "stream_options": {"include_usage": true}}), true),
            ("LangA-V4-flash", json!({"stream_options": {"other": 1}}), true),
            ("LangA-V4-flash", json!({"stream": "true"}), false),
            ("LangA-V4-flash", json!({"stream": 1}), false),
            ("LangA-V4-flash", json!({"stream": null}), false),
            ("LangA-V4-flash", json!({"stream_options": true}), false),
            ("LangA-V4-flash", json!({"stream_options": {"include_usage": "yes"}}), false),
            ("LangA-V4-flash", json!({"stream_options": [true]}), false),
            ("LangA-V4-flash", json!({"stream_options": []}), false),
        ]);
    }

    #[test]
    fn output_token_edges() {
        let mut rows = Vec::new();
        for (model, max) in [("LangA-V4-flash", 393_216u64), ("LangB-2.0-pro", 131_072), ("LangB-2.1-turbo", 262_144)] {
            for field in ["max_tokens", "max_completion_tokens"] {
                rows.push((model, json!({ field: 1 }), true));
                rows.push((model, json!({ field: max }), true));
                rows.push((model, json!({ field: 0 }), false));
                rows.push((model, json!({ field: max + 1 }), false));
                rows.push((model, json!({ field: -1 }), false));
                rows.push((model, json!({ field: 10.5 }), false));
                rows.push((model, json!({ field: "10" }), false));
                rows.push((model, json!({ field: null }), false));
            }
        }
        table(&rows);
        let err = check("LangB-2.0-pro", json!({"max_tokens": 131_073})).expect_err("over the bound");
        assert!(err.message().contains("max_tokens") && err.message().contains("131072"), "{err}");
    }

    #[test]
    fn output_token_choice() {
        let cap = |model: &str, extra: Value| check(model, extra).map(|p| p.max_output_tokens);
        assert_eq!(cap("LangA-V4-flash", json!({"max_tokens": 100, "max_completion_tokens": 200})), Ok(200));
        assert_eq!(cap("LangA-V4-flash", json!({"max_completion_tokens": 200, "max_tokens": 300})), Ok(200));
        assert_eq!(cap("LangA-V4-flash", json!({"max_tokens": 100})), Ok(100));
        assert_eq!(cap("LangA-V4-flash", json!({})), Ok(393_216));
        assert_eq!(cap("LangB-2.0-pro", json!({})), Ok(131_072));
        assert_eq!(cap("LangB-2.1-turbo", json!({})), Ok(262_144));
        assert_eq!(cap("LangC-5.2", json!({})), Ok(393_216));
        assert!(cap("LangA-V4-flash", json!({"max_tokens": 0, "max_completion_tokens": 10})).is_err());
        assert!(cap("LangA-V4-flash", json!({"max_tokens": 10, "max_completion_tokens": 393_217})).is_err());
    }

    #[test]
    fn sampling_edges() {
        let rows: Vec<(&str, Value, bool)> = [
            ("temperature", json!(0), true),
            ("temperature", json!(2), true),
            ("temperature", json!(2.0), true),
            ("temperature", json!(0.7), true),
            ("temperature", json!(-0.01), false),
            ("temperature", json!(2.01), false),
            ("temperature", json!("1"), false),
            ("temperature", json!(null), false),
            ("top_p", json!(0), true),
            ("top_p", json!(1), true),
            ("top_p", json!(1.01), false),
            ("top_p", json!(-0.01), false),
            ("top_p", json!(true), false),
            ("frequency_penalty", json!(-2), true),
            ("frequency_penalty", json!(2), true),
            ("frequency_penalty", json!(-2.01), false),
            ("frequency_penalty", json!(2.01), false),
            ("presence_penalty", json!(-2), true),
            ("presence_penalty", json!(2), true),
            ("presence_penalty", json!(-2.01), false),
            ("presence_penalty", json!(2.01), false),
            ("presence_penalty", json!([0]), false),
        ]
        .into_iter()
        .flat_map(|(field, value, ok)| {
            ["LangA-V4-flash", "LangB-2.0-pro", "LangC-5.2"].map(|model| (model, json!({ field: value.clone() }), ok))
        })
        .collect();
        table(&rows);
    }

    #[test]
    fn stop_edges() {
        table(&[
            ("LangA-V4-flash", json!({"stop": "END"}), true),
            ("LangA-V4-flash", json!({"stop": []}), true),
            ("LangA-V4-flash", json!({"stop": ["a", "b", "c", "d"]}), true),
            ("LangA-V4-flash", json!({"stop": ["a", "b", "c", "d", "e"]}), false),
            ("LangA-V4-flash", json!({"stop": [1]}), false),
            ("LangA-V4-flash", json!({"stop": 1}), false),
            ("LangA-V4-flash", json!({"stop": null}), false),
        ]);
    }

    #[test]
    fn thinking_values() {
        table(&[
            ("LangA-V4-flash", json!({"thinking": {"type": "enabled"}}), true),
            ("LangA-V4-flash", json!({"thinking": {"type": "disabled"}}), true),
            ("LangB-2.0-pro", json!({"thinking": {"type": "enabled", "budget_tokens": 100}}), true),
            ("LangB-2.1-turbo", json!({"thinking": {"type": "disabled"}}), true),
            ("LangB-2.0-pro", json!({"thinking": {"type": "auto"}}), false),
            ("LangB-2.0-pro", json!({"thinking": {}}), false),
            ("LangB-2.0-pro", json!({"thinking": "enabled"}), false),
            ("LangB-2.0-pro", json!({"thinking": true}), false),
            ("LangB-2.0-pro", json!({"thinking": ["enabled"]}), false),
            ("LangC-5.2", json!({"thinking": {"type": "enabled"}}), false),
        ]);
    }

    #[test]
    fn reasoning_effort_values() {
        table(&[
            ("LangA-V4-flash", json!({"reasoning_effort": "max"}), true),
            ("LangA-V4-flash", json!({"reasoning_effort": "minimal"}), true),
            ("LangA-V4-flash", json!({"reasoning_effort": "high"}), true),
            ("LangA-V4-flash", json!({"reasoning_effort": "low"}), false),
            ("LangA-V4-flash", json!({"reasoning_effort": "medium"}), false),
            ("LangB-2.0-pro", json!({"reasoning_effort": "low"}), true),
            ("LangB-2.0-pro", json!({"reasoning_effort": "medium"}), true),
            ("LangB-2.0-pro", json!({"reasoning_effort": "max"}), false),
            ("LangB-2.1-turbo", json!({"reasoning_effort": "high"}), true),
            ("LangC-5.2", json!({"reasoning_effort": "max"}), true),
            ("LangC-5.2", json!({"reasoning_effort": "low"}), false),
            ("LangA-V4-flash", json!({"reasoning_effort": "MAX"}), false),
            ("LangA-V4-flash", json!({"reasoning_effort": 3}), false),
        ]);
    }

    #[test]
    fn tool_fields() {
        let tool = json!({"type": "function", "function": {"name": "f", "parameters": {}}});
        table(&[
            ("LangA-V4-flash", json!({"tools": [tool.clone()], "tool_choice": "auto"}), true),
            ("LangA-V4-flash", json!({"tools": [], "tool_choice": {"type": "function"}}), true),
            ("LangA-V4-flash", json!({"response_format": {"type": "json_object"}}), true),
            ("LangA-V4-flash", json!({"tools": tool}), false),
            ("LangA-V4-flash", json!({"tools": ["f"]}), false),
            ("LangA-V4-flash", json!({"tool_choice": 1}), false),
            ("LangA-V4-flash", json!({"tool_choice": null}), false),
            ("LangA-V4-flash", json!({"response_format": "json"}), false),
        ]);
    }

    #[test]
    fn input_modalities() {
        let image = image_part("https://example.com/a.png");
        let video = video_part("https://example.com/a.mp4");
        let audio = audio_part("AAAA", "wav");
        let audio_url = json!({"type": "audio_url", "audio_url": {"url": "https://example.com/a.mp3"}});
        table(&[
            ("LangA-V4-flash", with_parts(vec![image.clone()]), false),
            ("LangA-V4-flash", with_parts(vec![video.clone()]), false),
            ("LangC-5.2", with_parts(vec![image.clone()]), false),
            ("LangB-2.0-pro", with_parts(vec![image.clone()]), true),
            ("LangB-2.0-pro", with_parts(vec![video.clone()]), true),
            ("LangB-2.0-Code", with_parts(vec![image.clone(), video.clone()]), true),
            ("LangB-2.1-turbo", with_parts(vec![image.clone()]), true),
            ("LangB-2.0-mini", with_parts(vec![audio.clone()]), true),
            ("LangB-2.0-lite", with_parts(vec![audio_url.clone()]), true),
            ("LangB-2.0-pro", with_parts(vec![audio.clone()]), false),
            ("LangB-2.0-pro", with_parts(vec![audio_url]), false),
            ("LangB-2.1-turbo", with_parts(vec![audio]), false),
            ("LangB-2.0-pro", with_parts(vec![json!({"type": "image_url", "image_url": "https://e.com/a.png"})]), true),
            ("LangB-2.0-pro", with_parts(vec![json!({"type": "image_url"})]), false),
            ("LangB-2.0-pro", with_parts(vec![json!({"type": "image_url", "image_url": {"url": 1}})]), false),
            ("LangB-2.0-pro", with_parts(vec![image_part("")]), false),
            ("LangA-V4-flash", with_parts(vec![json!({"type": "file", "file": {"id": "x"}})]), true),
        ]);
        let err = check("LangA-V4-flash", with_parts(vec![image])).expect_err("text only");
        assert!(err.message().contains("image") && err.message().contains("messages[0].content[0]"), "{err}");
        assert_eq!(check("LangB-2.0-mini", with_parts(vec![audio_part("AAAA", "mp3")])).map(|p| p.has_audio), Ok(true));
        assert_eq!(check("LangB-2.0-mini", with_parts(vec![video])).map(|p| p.has_audio), Ok(false));
    }

    #[test]
    fn media_item_counts() {
        let videos = |n: usize| with_parts(vec![video_part("https://example.com/v.mp4"); n]);
        let audios = |n: usize| with_parts(vec![audio_part("AAAA", "wav"); n]);
        table(&[
            ("LangB-2.0-pro", videos(10), true),
            ("LangB-2.0-pro", videos(11), false),
            ("LangB-2.0-mini", videos(200), true),
            ("LangB-2.0-mini", videos(201), false),
            ("LangB-2.0-lite", audios(600), true),
            ("LangB-2.0-lite", audios(601), false),
        ]);
        // The count spans messages.
        let part = video_part("https://example.com/v.mp4");
        let message = json!({"role": "user", "content": vec![part; 6]});
        assert!(check("LangB-2.0-pro", json!({"messages": [message.clone(), message]})).is_err());
    }

    #[test]
    fn inline_sizes() {
        let limit = 10_485_760;
        let at = data_url("image/png", limit);
        let over = data_url("image/png", limit + 1);
        table(&[
            ("LangB-2.0-pro", with_parts(vec![image_part(&at)]), true),
            ("LangB-2.0-pro", with_parts(vec![image_part(&over)]), false),
            ("LangB-2.0-pro", with_parts(vec![image_part(&data_url("image/png", 4))]), true),
            ("LangB-2.0-pro", with_parts(vec![image_part("data:image/png;base64,AA*A")]), false),
            ("LangB-2.0-pro", with_parts(vec![image_part("data:image/png;base64")]), false),
            ("LangB-2.0-pro", with_parts(vec![image_part(&data_url("video/mp4", 4))]), false),
            ("LangB-2.0-pro", with_parts(vec![video_part(&data_url("video/mp4", 52_428_800))]), true),
            ("LangB-2.0-pro", with_parts(vec![video_part(&data_url("video/mp4", 52_428_801))]), false),
            ("LangB-2.0-lite", with_parts(vec![audio_part(&"A".repeat(26_214_400 / 3 * 4 + 2), "wav")]), true),
            ("LangB-2.0-lite", with_parts(vec![audio_part(&"A".repeat(26_214_400 / 3 * 4 + 3), "wav")]), false),
        ]);
        let err = check("LangB-2.0-pro", with_parts(vec![image_part(&over)])).expect_err("over");
        assert!(err.message().contains("10485760") && err.message().contains("10485761"), "{err}");
        assert!(matches!(err, ValidationError::TooLarge(_)), "oversized inline data is a 413 error: {err:?}");
    }

    #[test]
    fn media_formats() {
        let video_with =
            |format: &str| json!({"type": "video_url", "video_url": {"url": "https://e.com/v", "format": format}});
        table(&[
            ("LangB-2.0-pro", with_parts(vec![video_part(&data_url("video/mp4", 3))]), true),
            ("LangB-2.0-pro", with_parts(vec![video_part(&data_url("video/quicktime", 3))]), true),
            ("LangB-2.0-pro", with_parts(vec![video_part(&data_url("video/x-msvideo", 3))]), true),
            ("LangB-2.0-pro", with_parts(vec![video_part(&data_url("video/webm", 3))]), false),
            ("LangB-2.0-pro", with_parts(vec![video_with("mov")]), true),
            ("LangB-2.0-pro", with_parts(vec![video_with("mkv")]), false),
            ("LangB-2.0-mini", with_parts(vec![audio_part("AAAA", "flac")]), true),
            ("LangB-2.0-mini", with_parts(vec![audio_part("AAAA", "ogg")]), false),
            ("LangB-2.0-mini", with_parts(vec![audio_part(&data_url("audio/mpeg", 3), "mp3")]), true),
            ("LangB-2.0-mini", with_parts(vec![audio_part(&data_url("audio/ogg", 3), "mp3")]), false),
            ("LangB-2.0-mini", with_parts(vec![audio_part(&data_url("image/png", 3), "mp3")]), false),
        ]);
    }

    #[test]
    fn prompt_bound() {
        let bound = |model: &str, extra: Value| check(model, extra).map(|p| p.prompt_bound_tokens).expect("valid");
        let text = |n: usize| json!({"messages": [{"role": "user", "content": "é".repeat(n)}]});
        let small = bound("LangB-2.0-pro", text(10));
        let large = bound("LangB-2.0-pro", text(10_000));
        assert!(small > TEMPLATE_OVERHEAD_TOKENS && small < large, "{small} {large}");
        assert!(large >= 20_000 + TEMPLATE_OVERHEAD_TOKENS, "two bytes per é: {large}");
        let tools = json!({"tools": [{"type": "function", "function": {"name": "x".repeat(5_000)}}]});
        assert!(bound("LangB-2.0-pro", tools) > bound("LangB-2.0-pro", json!({})) + 5_000);
        assert_eq!(bound("LangB-2.0-pro", text(200_000)), 229_376);
        assert_eq!(bound("LangB-2.1-turbo", text(200_000)), 262_144);
        assert_eq!(bound("LangA-V4-flash", text(600_000)), 1_048_576);
        let image = bound("LangB-2.0-pro", with_parts(vec![image_part("https://e.com/a.png")]));
        assert!(image >= 36_000_000 / 196, "{image}");
        assert_eq!(bound("LangB-2.0-pro", with_parts(vec![video_part("https://e.com/a.mp4")])), 229_376);
        // Inline data is a media item, not text: a 3 MB image does not count 4 million tokens.
        let inline = bound("LangB-2.1-turbo", with_parts(vec![image_part(&data_url("image/png", 3_000_000))]));
        assert!(inline < 200_000, "{inline}");
    }

    #[test]
    fn choices_multiply_the_output_hold() {
        let plan = |extra: Value| check("LangA-V4-flash", extra);
        assert_eq!(plan(json!({"max_tokens": 10})).map(|p| (p.choices, p.output_hold_tokens())), Ok((1, 10)));
        assert_eq!(plan(json!({"max_tokens": 10, "n": 3})).map(|p| (p.choices, p.output_hold_tokens())), Ok((3, 30)));
        assert_eq!(plan(json!({"n": 128})).map(|p| p.output_hold_tokens()), Ok(128 * 393_216));
        table(&[
            ("LangA-V4-flash", json!({"n": 1}), true),
            ("LangA-V4-flash", json!({"n": 0}), false),
            ("LangA-V4-flash", json!({"n": 129}), false),
            ("LangA-V4-flash", json!({"n": 2.5}), false),
            ("LangA-V4-flash", json!({"n": "2"}), false),
            ("LangA-V4-flash", json!({"n": null}), false),
        ]);
        let err = plan(json!({"n": 129})).expect_err("over");
        assert_eq!(err.message(), "n must be an integer from 1 to 128, got 129");
    }

    #[test]
    fn thinking_is_bounded_unless_turned_off() {
        let bounds = |model: &str, extra: Value| check(model, extra).map(|p| p.bounds_reasoning);
        for model in ["LangA-V4-pro", "LangB-2.0-pro", "LangB-2.1-turbo", "LangC-5.2"] {
            assert_eq!(bounds(model, json!({"max_tokens": 1})), Ok(true), "{model}");
            assert_eq!(bounds(model, json!({"reasoning_effort": "minimal"})), Ok(true), "{model}: still bounded");
        }
        for model in ["LangA-V4-pro", "LangB-2.0-pro", "LangB-2.1-turbo"] {
            assert_eq!(bounds(model, json!({"thinking": {"type": "enabled"}})), Ok(true), "{model}");
            assert_eq!(bounds(model, json!({"thinking": {"type": "disabled"}})), Ok(false), "{model}");
        }
    }

    #[test]
    fn unknown_fields_pass() {
        let extra =
            json!({"n": 1, "seed": 7, "logprobs": true, "user": "u1", "vendor_flag": {"x": [1, 2]}, "top_k": 5});
        for model in ["LangA-V4-flash", "LangB-2.0-pro", "LangC-5.2"] {
            assert!(check(model, extra.clone()).is_ok(), "{model}");
        }
    }
}
