//! Chat completions, `POST /api/v3/chat/completions` (upstream-wire §1): the planned answer,
//! its stream chunks, and the handler.
//!
//! A request needs `Authorization: Bearer <non-empty>` (else 401 `AuthenticationError`) and a
//! JSON object body with a string `model` and an array `messages` (else 400 `InvalidParameter`).
//!
//! # Token counts
//!
//! - `prompt_tokens` = ceil(UTF-8 bytes of all message `content` text (strings, or the `text`
//!   of array parts) / 4) + 4 per message; the body field `"sim_prompt_tokens": N` overrides it.
//! - `completion_tokens` = min(`max_completion_tokens`, else `max_tokens`, else 64; the natural
//!   length, 16 or `"sim_completion_tokens": N`, at most 65,536). `finish_reason` is `length`
//!   when the limit cut the natural length, else `stop`.
//! - Thinking is on when `thinking.type` is `enabled`, or when `thinking` is absent and the
//!   model id starts with `seed-` or `"sim_reasoning_tokens"` is given (and `reasoning_effort`
//!   is not `minimal`); then half the completion tokens (rounded down) are `reasoning_tokens`,
//!   sent as `reasoning_content`.
//! - `"sim_reasoning_tokens": R` (at most 1,048,576), with thinking on: the reasoning is R tokens,
//!   bounded as the upstream bounds it (upstream-wire §1): with `max_completion_tokens` C the
//!   reasoning is min(R, C) and the answer min(natural, C − reasoning); with only `max_tokens`
//!   (or neither) the answer is bounded by it (or 64) and the reasoning is R whatever it says.
//! - The answer has exactly one word per token (content and reasoning separately).
//! - `prompt_tokens_details.cached_tokens` = prompt_tokens / 2 (rounded down) when this server
//!   has seen the same first-message `content` on this path before, else 0.
//! - `"sim_audio_tokens": N` adds `prompt_tokens_details.audio_tokens` = N.
//!
//! # Streaming
//!
//! With `"stream": true` the answer is `text/event-stream`: one `data: {chunk}` event per
//! reasoning word, then per content word (every delta carries `"role":"assistant"`), a final
//! chunk with `"content":""` and `finish_reason`, a usage chunk with `"choices":[]` when
//! `stream_options.include_usage` is true, then `data: [DONE]`.
//!
//! # Faults
//!
//! The shared body-field switches (see [`super`]), and mid-stream:
//! - `midstream_error`: two chunks, then `data: {"error":{"code":"InternalServiceError",…}}`,
//!   and the end without `[DONE]`.
//! - `midstream_drop`: two chunks, then the connection is aborted.
//! - `empty_usage`: no `usage` (and no usage chunk when streaming).
//! - `over_bounds`: a normal answer whose counts ignore `max_tokens` and `max_completion_tokens`
//!   (the natural length, plus R reasoning tokens when given): an upstream breaking its bounds.

use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::{Map, Value, json};

use super::MAX_TEXT_REQUEST_BYTES;
use super::body::SimBody;
use super::fault::{self, Fault, Switches, error_response};
use super::request::{BodyError, has_bearer, json_object, now_secs, read_body};
use super::state::SimState;
use super::stream::{self, Ending, data_frame};
use super::words::{
    CONTENT_WORDS, REASONING_WORDS, delta_word, natural_tokens, over_bounds, prompt_tokens, reasoning_tokens,
    u64_field, words,
};

/// Completion limit when the request sets neither `max_completion_tokens` nor `max_tokens`.
pub(crate) const DEFAULT_MAX_TOKENS: u64 = 64;
/// How many chunks the `midstream_*` faults send before failing.
const MIDSTREAM_CHUNKS: usize = 2;

/// Everything the answer to one request contains, fixed before answering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Response id (`sim-…`).
    pub(crate) id: String,
    /// Unix seconds.
    pub(crate) created: u64,
    /// The request's `model`, echoed.
    pub(crate) model: String,
    /// Input tokens.
    pub(crate) prompt_tokens: u64,
    /// Input tokens served from the prefix cache.
    pub(crate) cached_tokens: u64,
    /// Audio input tokens, when `sim_audio_tokens` was given.
    pub(crate) audio_tokens: Option<u64>,
    /// Whether thinking is on (then `reasoning_content` is present).
    pub(crate) thinking: bool,
    /// Reasoning words (part of the completion tokens).
    pub(crate) reasoning_tokens: u64,
    /// Answer words.
    pub(crate) content_tokens: u64,
    /// `stop` or `length`.
    pub(crate) finish_reason: &'static str,
}

impl Plan {
    /// Plans the answer to `req` (already checked to have `model` and `messages`).
    /// `seen_before` says whether its first message was seen earlier (prefix cache hit).
    pub(crate) fn new(
        req: &Map<String, Value>,
        model: &str,
        messages: &[Value],
        id: String,
        created: u64,
        seen_before: bool,
    ) -> Plan {
        let prompt_tokens = u64_field(req, "sim_prompt_tokens").unwrap_or_else(|| prompt_tokens(0, messages));
        let natural = natural_tokens(req);
        let asked_reasoning = reasoning_tokens(req);
        let over = over_bounds(req);
        let completion_cap = u64_field(req, "max_completion_tokens");
        let limit = if over {
            u64::MAX
        } else {
            completion_cap.or_else(|| u64_field(req, "max_tokens")).unwrap_or(DEFAULT_MAX_TOKENS)
        };
        let minimal = req.get("reasoning_effort").and_then(Value::as_str) == Some("minimal");
        let thinking = match req.get("thinking").and_then(|t| t.get("type")).and_then(Value::as_str) {
            Some(kind) => kind == "enabled",
            None => (asked_reasoning.is_some() && !minimal) || model.starts_with("seed-"),
        };
        let (reasoning_tokens, content_tokens) = match asked_reasoning {
            // The upstream's rule: max_completion_tokens counts reasoning and answer, max_tokens only the answer.
            Some(reasoning) if thinking => match completion_cap.filter(|_| !over) {
                Some(cap) => {
                    let reasoning = reasoning.min(cap);
                    (reasoning, natural.min(cap - reasoning))
                }
                None => (reasoning, natural.min(limit)),
            },
            _ => {
                let total = natural.min(limit);
                let reasoning = if thinking { total / 2 } else { 0 };
                (reasoning, total - reasoning)
            }
        };
        let cut = match asked_reasoning {
            Some(_) if thinking => content_tokens < natural,
            _ => natural > limit,
        };
        Plan {
            id,
            created,
            model: model.to_owned(),
            prompt_tokens,
            cached_tokens: if seen_before { prompt_tokens / 2 } else { 0 },
            audio_tokens: u64_field(req, "sim_audio_tokens"),
            thinking,
            reasoning_tokens,
            content_tokens,
            finish_reason: if cut { "length" } else { "stop" },
        }
    }

    /// The `usage` object.
    pub(crate) fn usage(&self) -> Value {
        let mut prompt_details = json!({"cached_tokens": self.cached_tokens});
        if let (Some(audio), Some(details)) = (self.audio_tokens, prompt_details.as_object_mut()) {
            details.insert("audio_tokens".to_owned(), json!(audio));
        }
        let completion = self.reasoning_tokens + self.content_tokens;
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens.saturating_add(completion),
            "prompt_tokens_details": prompt_details,
            "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
        })
    }

    /// The non-stream answer (`chat.completion`), with or without `usage`.
    pub(crate) fn answer(&self, with_usage: bool) -> Value {
        let mut message = json!({"role": "assistant", "content": words(&CONTENT_WORDS, self.content_tokens)});
        if let (true, Some(m)) = (self.thinking, message.as_object_mut()) {
            m.insert("reasoning_content".to_owned(), json!(words(&REASONING_WORDS, self.reasoning_tokens)));
        }
        let mut answer = json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "service_tier": "default",
            "choices": [{"index": 0, "finish_reason": self.finish_reason, "logprobs": null, "message": message}],
        });
        if let (true, Some(a)) = (with_usage, answer.as_object_mut()) {
            a.insert("usage".to_owned(), self.usage());
        }
        answer
    }

    /// The `i`-th stream payload (the JSON after `data: `): reasoning deltas, content deltas,
    /// the finishing chunk, then the usage chunk when `include_usage`; `None` past the end.
    pub(crate) fn stream_payload(&self, i: u64, include_usage: bool) -> Option<String> {
        let reasoning_end = self.reasoning_tokens;
        let content_end = reasoning_end + self.content_tokens;
        let chunk = if i < reasoning_end {
            self.chunk(json!([{"index": 0, "delta": {"role": "assistant", "reasoning_content": delta_word(&REASONING_WORDS, i)}}]), false)
        } else if i < content_end {
            let j = i - reasoning_end;
            self.chunk(
                json!([{"index": 0, "delta": {"role": "assistant", "content": delta_word(&CONTENT_WORDS, j)}}]),
                false,
            )
        } else if i == content_end {
            let choice =
                json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": self.finish_reason});
            self.chunk(json!([choice]), false)
        } else if i == content_end + 1 && include_usage {
            self.chunk(json!([]), true)
        } else {
            return None;
        };
        Some(chunk.to_string())
    }

    fn chunk(&self, choices: Value, with_usage: bool) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "service_tier": "default",
            "choices": choices,
            "usage": if with_usage { self.usage() } else { Value::Null },
        })
    }
}

/// Answers `POST /api/v3/chat/completions`; an `Err` closes the connection without a response.
pub(crate) async fn handle(
    state: &SimState,
    req: Request<Incoming>,
    rid: String,
) -> Result<Response<SimBody>, std::io::Error> {
    if !has_bearer(req.headers()) {
        return Ok(error_response(401, "AuthenticationError", "The API key is missing or malformed.", "", &rid));
    }
    let request = match read_body(req, MAX_TEXT_REQUEST_BYTES).await.map(|b| json_object(&b)) {
        Ok(Some(request)) => request,
        Ok(None) => {
            return Ok(error_response(
                400,
                "InvalidParameter",
                "The request body is not a valid JSON object.",
                "",
                &rid,
            ));
        }
        Err(BodyError::TooLarge) => {
            return Ok(error_response(413, "RequestTooLarge", "The request body is too large.", "", &rid));
        }
        Err(BodyError::Unreadable) => {
            return Ok(error_response(400, "InvalidParameter", "The request body could not be read.", "", &rid));
        }
    };
    if !request.get("model").is_some_and(Value::is_string) {
        let message = "The parameter `model` is required and must be a string.";
        return Ok(error_response(400, "InvalidParameter", message, "model", &rid));
    }
    if !request.get("messages").is_some_and(Value::is_array) {
        let message = "The parameter `messages` is required and must be an array.";
        return Ok(error_response(400, "InvalidParameter", message, "messages", &rid));
    }
    let switches = match Switches::from_body(&request) {
        Ok(switches) => switches,
        Err(message) => return Ok(error_response(400, "InvalidParameter", &message, "sim_fault", &rid)),
    };
    if let Some(done) = fault::shared(&switches, |status| fault::status_response(status, &rid)).await {
        return done;
    }
    Ok(answer(state, &request, rid, &switches))
}

/// A normal answer (possibly streamed), shaped by the fault (`None`, `EmptyUsage` or `Midstream*`).
fn answer(state: &SimState, request: &Map<String, Value>, rid: String, switches: &Switches) -> Response<SimBody> {
    let model = request.get("model").and_then(Value::as_str).unwrap_or_default();
    let messages = request.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let seen_before =
        messages.first().and_then(|m| m.get("content")).is_some_and(|c| state.seen_before("chat", &c.to_string()));
    let plan = Plan::new(request, model, messages, rid, now_secs(), seen_before);
    let fault = switches.fault;
    let with_usage = fault != Some(Fault::EmptyUsage);
    if !(request.get("stream").and_then(Value::as_bool).unwrap_or(false) || Fault::forces_stream(fault)) {
        return fault::json_response(200, plan.answer(with_usage).to_string());
    }
    let include_usage = with_usage
        && request.get("stream_options").and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
    let ending = match fault {
        Some(Fault::MidstreamError) => Ending::Tail(midstream_error_event(&plan.id)),
        Some(Fault::MidstreamDrop) => Ending::Abort,
        _ => Ending::Tail(data_frame("[DONE]")),
    };
    let cut = Fault::forces_stream(fault).then_some(MIDSTREAM_CHUNKS);
    let frames = (0..).map_while(move |i| plan.stream_payload(i, include_usage)).map(|p| data_frame(&p));
    stream::response(stream::Plan {
        frames: Box::new(frames),
        delay: Duration::from_millis(switches.chunk_delay_ms),
        cut,
        ending,
    })
}

/// The `data:` frame of a mid-stream error event.
fn midstream_error_event(request_id: &str) -> String {
    let body = json!({"error": {
        "code": "InternalServiceError",
        "message": format!("The service encountered an unexpected internal error. Request id: {request_id}"),
        "type": "InternalServerError",
    }});
    data_frame(&body.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(req: Value, seen: bool) -> Plan {
        let req = req.as_object().cloned().unwrap_or_default();
        let model = req.get("model").and_then(Value::as_str).unwrap_or("m").to_owned();
        let messages = req.get("messages").and_then(Value::as_array).cloned().unwrap_or_default();
        Plan::new(&req, &model, &messages, "sim-1".to_owned(), 0, seen)
    }

    #[test]
    fn limits_and_thinking() {
        let p = plan(json!({"model": "m", "messages": [], "max_tokens": 5}), false);
        assert_eq!((p.content_tokens, p.reasoning_tokens, p.finish_reason), (5, 0, "length"));
        let p = plan(json!({"model": "seed-x", "messages": []}), false);
        assert_eq!((p.content_tokens, p.reasoning_tokens, p.finish_reason), (8, 8, "stop"));
        let p = plan(json!({"model": "seed-x", "messages": [], "thinking": {"type": "disabled"}}), true);
        assert_eq!((p.content_tokens, p.reasoning_tokens), (16, 0));
        assert_eq!(p.cached_tokens, 0);
        let p = plan(json!({"model": "m", "messages": [], "sim_prompt_tokens": 130_000, "sim_audio_tokens": 7}), true);
        assert_eq!((p.prompt_tokens, p.cached_tokens, p.audio_tokens), (130_000, 65_000, Some(7)));
    }

    #[test]
    fn reasoning_is_bounded_by_max_completion_tokens_only() {
        let base = json!({"model": "m", "messages": [], "sim_reasoning_tokens": 1000});
        let with = |extra: Value| {
            let mut req = base.clone();
            if let (Some(r), Some(e)) = (req.as_object_mut(), extra.as_object()) {
                r.extend(e.clone());
            }
            let p = plan(req, false);
            (p.reasoning_tokens, p.content_tokens, p.finish_reason)
        };
        assert_eq!(with(json!({"max_tokens": 1})), (1000, 1, "length"), "max_tokens does not count reasoning");
        assert_eq!(with(json!({"max_completion_tokens": 1})), (1, 0, "length"));
        assert_eq!(with(json!({"max_completion_tokens": 1010})), (1000, 10, "length"));
        assert_eq!(with(json!({"max_completion_tokens": 5000})), (1000, 16, "stop"));
        assert_eq!(with(json!({"max_tokens": 1, "thinking": {"type": "disabled"}})), (0, 1, "length"));
        assert_eq!(with(json!({"max_tokens": 1, "reasoning_effort": "minimal"})), (0, 1, "length"));
        assert_eq!(with(json!({"max_completion_tokens": 1, "sim_fault": "over_bounds"})), (1000, 16, "stop"));
        assert_eq!(
            plan(json!({"model": "m", "messages": [], "max_tokens": 2, "sim_fault": "over_bounds"}), false)
                .content_tokens,
            16
        );
    }

    #[test]
    fn answer_words_match_tokens() {
        let p = plan(
            json!({"model": "m", "messages": [], "thinking": {"type": "enabled"}, "sim_completion_tokens": 7}),
            false,
        );
        let a = p.answer(true);
        let content = a["choices"][0]["message"]["content"].as_str().unwrap_or_default();
        let reasoning = a["choices"][0]["message"]["reasoning_content"].as_str().unwrap_or_default();
        assert_eq!(content.split_whitespace().count(), 4);
        assert_eq!(reasoning.split_whitespace().count(), 3);
        assert_eq!(a["usage"]["completion_tokens"], 7);
        assert!(p.answer(false).get("usage").is_none());
    }

    #[test]
    fn stream_payload_sequence() {
        let p = plan(
            json!({"model": "m", "messages": [], "thinking": {"type": "enabled"}, "sim_completion_tokens": 4}),
            false,
        );
        let all: Vec<String> = (0..10).map_while(|i| p.stream_payload(i, true)).collect();
        assert_eq!(all.len(), 2 + 2 + 1 + 1);
        assert!(all[0].contains("reasoning_content"));
        assert!(all[2].contains("\"content\":\"This\""));
        assert!(all[4].contains("finish_reason"));
        assert!(all[5].contains("\"choices\":[]"));
        assert_eq!((0..10).map_while(|i| p.stream_payload(i, false)).count(), 5);
    }
}
