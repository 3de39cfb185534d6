//! Message-style chat, `POST /api/compatible/v1/messages` (upstream-wire §6, §8).
//!
//! A request needs a key (`Authorization: Bearer <non-empty>` or `x-api-key: <non-empty>`, else
//! 401 `authentication_error`), an `anthropic-version` header (else 400), and a JSON object
//! body with a string `model`, an array `messages` and an integer `max_tokens` ≥ 1 (else 400).
//! Errors use the message-style body
//! `{"type":"error","error":{"type":"invalid_request_error","message":…},"request_id":…}`;
//! the simulated statuses map to `invalid_request_error` (400), `rate_limit_error` (429),
//! `api_error` (500) and `overloaded_error` (503).
//!
//! # Token counts
//!
//! - base = ceil(UTF-8 bytes of `system` (a string, or the `text` of its blocks) and of every
//!   message `content` (a string, or the `text` of its blocks) / 4) + 4 per message;
//!   `"sim_prompt_tokens": N` overrides it.
//! - The first message's `content` seen before on this path: `cache_read_input_tokens` =
//!   base / 2 (rounded down). Not seen before and at least 1,024 bytes of text:
//!   `cache_creation_input_tokens` = base − base / 2. Otherwise both are 0.
//! - `input_tokens` = base − cache_read − cache_creation (message-style counts cached input
//!   apart, so the three add up to the base).
//! - `output_tokens` = min(`max_tokens`, natural), natural = 16 or `"sim_completion_tokens": N`
//!   (at most 65,536), one word per token; `stop_reason` = `max_tokens` when the limit cut the
//!   natural length, else `end_turn`. `"sim_reasoning_tokens": R` adds R to the natural length
//!   (thinking counts in `max_tokens`, as the format documents) unless `thinking.type` is
//!   `disabled`; the words stand for the thinking too.
//! - The `over_bounds` fault ignores `max_tokens`: the output is the whole natural length.
//!
//! # Streaming (`"stream": true`)
//!
//! Named events, each `event: <name>\ndata: <json with the same "type">\n\n`: `message_start`
//! (the message with empty `content`, `stop_reason: null` and usage with `output_tokens: 0`),
//! `content_block_start`, `ping`, one `content_block_delta` (`text_delta`) per output word,
//! `content_block_stop`, `message_delta` (`stop_reason`, and the final cumulative usage:
//! `input_tokens`, `output_tokens`, both cache fields), `message_stop`. No `[DONE]`.
//!
//! # Faults (body fields, see [`super`])
//!
//! - `midstream_error`: after two deltas, `event: error` with
//!   `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, then the end.
//! - `midstream_drop`: after two deltas, the connection is aborted.
//! - `empty_usage`: no usage anywhere (answer, `message_start`, `message_delta`).

use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::{Map, Value, json};

use super::MAX_TEXT_REQUEST_BYTES;
use super::body::SimBody;
use super::fault::{self, Fault, Switches};
use super::request::{BodyError, has_bearer, has_header, json_object, read_body};
use super::state::SimState;
use super::stream::{self, Ending, named_frame};
use super::words::{
    CONTENT_WORDS, delta_word, native_thinking_off, natural_tokens, over_bounds, prompt_tokens, reasoning_tokens,
    text_bytes, u64_field, words,
};

/// First-message size from which a first sighting creates cache.
pub const CACHE_CREATION_MIN_BYTES: u64 = 1024;
/// Events before the first delta.
const HEAD_EVENTS: u64 = 3;
/// Deltas the `midstream_*` faults send before failing.
const MIDSTREAM_DELTAS: u64 = 2;

/// A message-style error answer.
fn error(status: u16, message: &str, rid: &str) -> Response<SimBody> {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        _ => "api_error",
    };
    let body = json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": rid});
    fault::json_response(status, body.to_string())
}

/// Answers `POST /api/compatible/v1/messages`; an `Err` closes the connection without a response.
pub(crate) async fn handle(
    state: &SimState,
    req: Request<Incoming>,
    rid: String,
) -> Result<Response<SimBody>, std::io::Error> {
    if !has_bearer(req.headers()) && !has_header(req.headers(), "x-api-key") {
        return Ok(error(401, "invalid x-api-key", &rid));
    }
    if !has_header(req.headers(), "anthropic-version") {
        return Ok(error(400, "anthropic-version: header is required", &rid));
    }
    let request = match read_body(req, MAX_TEXT_REQUEST_BYTES).await.map(|b| json_object(&b)) {
        Ok(Some(request)) => request,
        Ok(None) => return Ok(error(400, "The request body is not a valid JSON object.", &rid)),
        Err(BodyError::TooLarge) => return Ok(error(413, "Request exceeds the maximum allowed size.", &rid)),
        Err(BodyError::Unreadable) => return Ok(error(400, "The request body could not be read.", &rid)),
    };
    if let Err(message) = check(&request) {
        return Ok(error(400, message, &rid));
    }
    let switches = match Switches::from_body(&request) {
        Ok(switches) => switches,
        Err(message) => return Ok(error(400, &message, &rid)),
    };
    if let Some(done) =
        fault::shared(&switches, |status| error(status, &format!("Simulated {status} error."), &rid)).await
    {
        return done;
    }
    let plan = MessagePlan::new(state, &request);
    if !(request.get("stream").and_then(Value::as_bool).unwrap_or(false) || Fault::forces_stream(switches.fault)) {
        return Ok(fault::json_response(200, plan.message(switches.fault != Some(Fault::EmptyUsage)).to_string()));
    }
    Ok(plan.stream(&switches))
}

fn check(request: &Map<String, Value>) -> Result<(), &'static str> {
    if !request.get("model").is_some_and(Value::is_string) {
        return Err("model: Field required (a string)");
    }
    if !request.get("messages").is_some_and(Value::is_array) {
        return Err("messages: Field required (an array)");
    }
    if u64_field(request, "max_tokens").is_none_or(|n| n < 1) {
        return Err("max_tokens: Field required (an integer >= 1)");
    }
    Ok(())
}

/// Everything the answer contains, fixed before answering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MessagePlan {
    id: String,
    model: String,
    input_tokens: u64,
    cache_read: u64,
    cache_creation: u64,
    output_tokens: u64,
    stop_reason: &'static str,
}

impl MessagePlan {
    /// Plans the answer to a checked request.
    pub(crate) fn new(state: &SimState, request: &Map<String, Value>) -> MessagePlan {
        let messages = request.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let base = u64_field(request, "sim_prompt_tokens")
            .unwrap_or_else(|| prompt_tokens(text_bytes(request.get("system")), messages));
        let first = messages.first().and_then(|m| m.get("content"));
        let seen = first.is_some_and(|c| state.seen_before("messages", &c.to_string()));
        let (cache_read, cache_creation) = if seen {
            (base / 2, 0)
        } else if text_bytes(first) >= CACHE_CREATION_MIN_BYTES {
            (0, base - base / 2)
        } else {
            (0, 0)
        };
        let reasoning = reasoning_tokens(request).filter(|_| !native_thinking_off(request)).unwrap_or(0);
        let natural = natural_tokens(request).saturating_add(reasoning);
        let limit = if over_bounds(request) { u64::MAX } else { u64_field(request, "max_tokens").unwrap_or(1) };
        MessagePlan {
            id: format!("msg_{}", state.next_hex()),
            model: request.get("model").and_then(Value::as_str).unwrap_or_default().to_owned(),
            input_tokens: base - cache_read - cache_creation,
            cache_read,
            cache_creation,
            output_tokens: natural.min(limit),
            stop_reason: if natural > limit { "max_tokens" } else { "end_turn" },
        }
    }

    fn usage(&self, output_tokens: u64) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": self.cache_creation,
            "cache_read_input_tokens": self.cache_read,
        })
    }

    /// The non-stream answer (and, with `done` false, the `message_start` snapshot).
    fn snapshot(&self, done: bool, with_usage: bool) -> Value {
        let content =
            if done { json!([{"type": "text", "text": words(&CONTENT_WORDS, self.output_tokens)}]) } else { json!([]) };
        let mut message = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": if done { json!(self.stop_reason) } else { Value::Null },
            "stop_sequence": null,
        });
        if let (true, Some(m)) = (with_usage, message.as_object_mut()) {
            m.insert("usage".to_owned(), self.usage(if done { self.output_tokens } else { 0 }));
        }
        message
    }

    /// The non-stream answer.
    pub(crate) fn message(&self, with_usage: bool) -> Value {
        self.snapshot(true, with_usage)
    }

    /// The `i`-th stream event as `(name, data)`; `None` past the end.
    pub(crate) fn event(&self, i: u64, with_usage: bool) -> Option<(&'static str, Value)> {
        let deltas_end = HEAD_EVENTS + self.output_tokens;
        let event = match i {
            0 => ("message_start", json!({"type": "message_start", "message": self.snapshot(false, with_usage)})),
            1 => (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            2 => ("ping", json!({"type": "ping"})),
            i if i < deltas_end => {
                let delta = json!({"type": "text_delta", "text": delta_word(&CONTENT_WORDS, i - HEAD_EVENTS)});
                ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": delta}))
            }
            i if i == deltas_end => ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            i if i == deltas_end + 1 => {
                let mut data =
                    json!({"type": "message_delta", "delta": {"stop_reason": self.stop_reason, "stop_sequence": null}});
                if let (true, Some(d)) = (with_usage, data.as_object_mut()) {
                    d.insert("usage".to_owned(), self.usage(self.output_tokens));
                }
                ("message_delta", data)
            }
            i if i == deltas_end + 2 => ("message_stop", json!({"type": "message_stop"})),
            _ => return None,
        };
        Some(event)
    }

    fn stream(self, switches: &Switches) -> Response<SimBody> {
        let with_usage = switches.fault != Some(Fault::EmptyUsage);
        let cut = HEAD_EVENTS + MIDSTREAM_DELTAS.min(self.output_tokens);
        let (cut, ending) = match switches.fault {
            Some(Fault::MidstreamError) => {
                let data = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
                (Some(cut), Ending::Tail(named_frame("error", &data.to_string())))
            }
            Some(Fault::MidstreamDrop) => (Some(cut), Ending::Abort),
            _ => (None, Ending::End),
        };
        let frames = (0..)
            .map_while(move |i| self.event(i, with_usage))
            .map(|(name, data)| named_frame(name, &data.to_string()));
        stream::response(stream::Plan {
            frames: Box::new(frames),
            delay: Duration::from_millis(switches.chunk_delay_ms),
            cut: cut.and_then(|c| usize::try_from(c).ok()),
            ending,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(state: &SimState, req: Value) -> MessagePlan {
        MessagePlan::new(state, req.as_object().unwrap_or(&Map::new()))
    }

    fn state() -> SimState {
        SimState::new(([127, 0, 0, 1], 1).into(), crate::SimOptions::default())
    }

    #[test]
    fn cache_counts_apart_from_input() {
        let s = state();
        let long = "x".repeat(1024);
        let req =
            json!({"model": "m", "max_tokens": 100, "system": "abcd", "messages": [{"role": "user", "content": long}]});
        // base = ceil((4 + 1024) / 4) + 4 = 261.
        let first = plan(&s, req.clone());
        assert_eq!((first.input_tokens, first.cache_read, first.cache_creation), (130, 0, 131));
        let again = plan(&s, req);
        assert_eq!((again.input_tokens, again.cache_read, again.cache_creation), (131, 130, 0));
        let short =
            json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "x".repeat(1023)}]});
        let p = plan(&s, short);
        assert_eq!((p.input_tokens, p.cache_read, p.cache_creation), (256 + 4, 0, 0));
    }

    #[test]
    fn output_and_stop_reason() {
        let s = state();
        let p = plan(&s, json!({"model": "m", "max_tokens": 16, "messages": []}));
        assert_eq!((p.output_tokens, p.stop_reason), (16, "end_turn"));
        let p = plan(&s, json!({"model": "m", "max_tokens": 15, "messages": []}));
        assert_eq!((p.output_tokens, p.stop_reason), (15, "max_tokens"));
        let p = plan(&s, json!({"model": "m", "max_tokens": 100, "messages": [], "sim_completion_tokens": 40}));
        assert_eq!(p.output_tokens, 40);
    }

    #[test]
    fn event_sequence() {
        let s = state();
        let p = plan(&s, json!({"model": "m", "max_tokens": 3, "messages": []}));
        let names: Vec<&str> = (0..).map_while(|i| p.event(i, true)).map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for (name, data) in (0..).map_while(|i| p.event(i, true)) {
            assert_eq!(data["type"], name);
        }
        assert!(
            (0..)
                .map_while(|i| p.event(i, false))
                .all(|(_, d)| d.get("usage").is_none() && d.get("message").is_none_or(|m| m.get("usage").is_none()))
        );
    }
}
