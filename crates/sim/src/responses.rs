//! Response-style chat, `POST /api/v3/responses` (upstream-wire §7, §8).
//!
//! A request needs `Authorization: Bearer <non-empty>` (else 401 `AuthenticationError`) and a
//! JSON object body with a string `model` and an `input` that is a string or an array (else
//! 400 `InvalidParameter`); `max_output_tokens`, when present, is an integer ≥ 1; errors use
//! the platform body `{"error":{"code","message","param","type"}}`.
//!
//! # Chaining
//!
//! The simulator remembers the ids it issued (`resp_<hex>`, the newest 100,000) with their
//! `total_tokens`. A `previous_response_id` it does not know is 400 `InvalidParameter` (param
//! `previous_response_id`); a known one adds that response's `total_tokens` to `input_tokens`
//! and to `input_tokens_details.cached_tokens` (the chained context). Answers cut by a
//! mid-stream fault are not remembered.
//!
//! # Token counts
//!
//! - base = ceil(UTF-8 bytes of `instructions` and of the input text / 4) + 4 per input message;
//!   a string `input` is one message; an array item counts its `content` (a string, or the
//!   `text` of its parts); `"sim_prompt_tokens": N` overrides the base.
//! - `input_tokens` = base + the previous response's `total_tokens` (0 without one);
//!   `cached_tokens` = that previous `total_tokens`.
//! - `output_tokens` = min(`max_output_tokens`, natural), natural = 16 or
//!   `"sim_completion_tokens": N` (at most 65,536), one word per token;
//!   `output_tokens_details.reasoning_tokens` = 0 (but see below); `total_tokens` = input + output.
//!   `"sim_reasoning_tokens": R` adds R to the natural length (reasoning counts in
//!   `max_output_tokens`, as the format documents) and reports min(R, output) as
//!   `reasoning_tokens`, unless `reasoning.effort` is `minimal` or `none`.
//! - The `over_bounds` fault ignores `max_output_tokens`: the output is the whole natural length.
//! - `status` = `incomplete` (with `incomplete_details.reason` = `max_output_tokens`) when the
//!   limit cut the natural length, else `completed`.
//!
//! # Streaming (`"stream": true`)
//!
//! Named events whose data carry `type` (= the event name) and `sequence_number` (0, 1, …):
//! `response.created`, `response.in_progress` (the response with `status: in_progress`, no
//! output, `usage: null`), `response.output_item.added`, `response.content_part.added`, one
//! `response.output_text.delta` per word, `response.output_text.done`,
//! `response.content_part.done`, `response.output_item.done`, `response.completed` (the full
//! response with usage; also when its `status` is `incomplete`). No `[DONE]`.
//!
//! # Faults (body fields, see [`super`])
//!
//! - `midstream_error`: after two deltas, `event: error` with
//!   `{"type":"error","code":"server_error","message":…,"param":null,"sequence_number":n}`, then the end.
//! - `midstream_drop`: after two deltas, the connection is aborted.
//! - `empty_usage`: no `usage` in the answer or in `response.completed`.

use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use serde_json::{Map, Value, json};

use super::MAX_TEXT_REQUEST_BYTES;
use super::body::SimBody;
use super::fault::{self, Fault, Switches, error_response};
use super::request::{BodyError, has_bearer, json_object, now_secs, read_body};
use super::state::SimState;
use super::stream::{self, Ending, named_frame};
use super::words::{
    CONTENT_WORDS, delta_word, native_thinking_off, natural_tokens, over_bounds, reasoning_tokens, text_bytes,
    u64_field, words,
};

/// Events before the first delta.
const HEAD_EVENTS: u64 = 4;
/// Deltas the `midstream_*` faults send before failing.
const MIDSTREAM_DELTAS: u64 = 2;

/// Answers `POST /api/v3/responses`; an `Err` closes the connection without a response.
pub(crate) async fn handle(
    state: &SimState,
    req: Request<Incoming>,
    rid: String,
) -> Result<Response<SimBody>, std::io::Error> {
    if !has_bearer(req.headers()) {
        return Ok(error_response(401, "AuthenticationError", "The API key is missing or malformed.", "", &rid));
    }
    let invalid = |message: &str, param: &str| Ok(error_response(400, "InvalidParameter", message, param, &rid));
    let request = match read_body(req, MAX_TEXT_REQUEST_BYTES).await.map(|b| json_object(&b)) {
        Ok(Some(request)) => request,
        Ok(None) => return invalid("The request body is not a valid JSON object.", ""),
        Err(BodyError::TooLarge) => {
            return Ok(error_response(413, "RequestTooLarge", "The request body is too large.", "", &rid));
        }
        Err(BodyError::Unreadable) => return invalid("The request body could not be read.", ""),
    };
    if let Err((param, message)) = check(&request) {
        return invalid(message, param);
    }
    let previous = match request.get("previous_response_id").and_then(Value::as_str) {
        None => None,
        Some(id) => match state.response_total(id) {
            Some(total) => Some((id.to_owned(), total)),
            None => return invalid("The previous response was not found.", "previous_response_id"),
        },
    };
    let switches = match Switches::from_body(&request) {
        Ok(switches) => switches,
        Err(message) => return invalid(&message, "sim_fault"),
    };
    if let Some(done) = fault::shared(&switches, |status| fault::status_response(status, &rid)).await {
        return done;
    }
    let plan = ResponsePlan::new(state, &request, previous);
    if !Fault::forces_stream(switches.fault) {
        state.remember_response(&plan.id, plan.total_tokens());
    }
    let with_usage = switches.fault != Some(Fault::EmptyUsage);
    if !(request.get("stream").and_then(Value::as_bool).unwrap_or(false) || Fault::forces_stream(switches.fault)) {
        return Ok(fault::json_response(200, plan.response(true, with_usage).to_string()));
    }
    Ok(plan.stream(&switches))
}

/// The offending parameter and a message, if the request lacks what the simulator needs.
fn check(request: &Map<String, Value>) -> Result<(), (&'static str, &'static str)> {
    if !request.get("model").is_some_and(Value::is_string) {
        return Err(("model", "The parameter `model` is required and must be a string."));
    }
    if !request.get("input").is_some_and(|i| i.is_string() || i.is_array()) {
        return Err(("input", "The parameter `input` is required and must be a string or an array."));
    }
    match request.get("max_output_tokens") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_u64().is_some_and(|n| n >= 1) => {}
        Some(_) => return Err(("max_output_tokens", "The parameter `max_output_tokens` must be an integer >= 1.")),
    }
    match request.get("previous_response_id") {
        None | Some(Value::Null | Value::String(_)) => Ok(()),
        Some(_) => Err(("previous_response_id", "The parameter `previous_response_id` must be a string.")),
    }
}

/// Base input tokens: instructions and input text, 4 per input message.
fn base_tokens(request: &Map<String, Value>) -> u64 {
    let (bytes, count) = match request.get("input") {
        Some(Value::Array(items)) => {
            let bytes = items.iter().map(|item| text_bytes(item.get("content"))).fold(0, u64::saturating_add);
            (bytes, u64::try_from(items.len()).unwrap_or(u64::MAX))
        }
        input => (text_bytes(input), 1),
    };
    let bytes = bytes.saturating_add(text_bytes(request.get("instructions")));
    bytes.div_ceil(4).saturating_add(count.saturating_mul(4))
}

/// Everything the answer contains, fixed before answering.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ResponsePlan {
    id: String,
    item_id: String,
    created_at: u64,
    model: String,
    instructions: Value,
    max_output_tokens: Value,
    previous_response_id: Option<String>,
    input_tokens: u64,
    cached_tokens: u64,
    output_tokens: u64,
    reasoning_tokens: u64,
    incomplete: bool,
}

impl ResponsePlan {
    /// Plans the answer to a checked request; `previous` is the chained response and its total.
    pub(crate) fn new(state: &SimState, request: &Map<String, Value>, previous: Option<(String, u64)>) -> Self {
        let base = u64_field(request, "sim_prompt_tokens").unwrap_or_else(|| base_tokens(request));
        let cached = previous.as_ref().map_or(0, |(_, total)| *total);
        let reasoning = reasoning_tokens(request).filter(|_| !native_thinking_off(request)).unwrap_or(0);
        let natural = natural_tokens(request).saturating_add(reasoning);
        let limit =
            if over_bounds(request) { u64::MAX } else { u64_field(request, "max_output_tokens").unwrap_or(u64::MAX) };
        let output_tokens = natural.min(limit);
        let hex = state.next_hex();
        ResponsePlan {
            id: format!("resp_{hex}"),
            item_id: format!("msg_{hex}"),
            created_at: now_secs(),
            model: request.get("model").and_then(Value::as_str).unwrap_or_default().to_owned(),
            instructions: request.get("instructions").cloned().unwrap_or(Value::Null),
            max_output_tokens: request.get("max_output_tokens").cloned().unwrap_or(Value::Null),
            previous_response_id: previous.map(|(id, _)| id),
            input_tokens: base.saturating_add(cached),
            cached_tokens: cached,
            output_tokens,
            reasoning_tokens: reasoning.min(output_tokens),
            incomplete: natural > limit,
        }
    }

    fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    fn status(&self) -> &'static str {
        if self.incomplete { "incomplete" } else { "completed" }
    }

    fn text(&self) -> String {
        words(&CONTENT_WORDS, self.output_tokens)
    }

    fn part(&self, text: String) -> Value {
        json!({"type": "output_text", "text": text, "annotations": []})
    }

    fn item(&self, done: bool) -> Value {
        let (status, content) =
            if done { (self.status(), json!([self.part(self.text())])) } else { ("in_progress", json!([])) };
        json!({"type": "message", "id": self.item_id, "status": status, "role": "assistant", "content": content})
    }

    /// The response object: final (`done`) or the in-progress snapshot of the stream's start.
    pub(crate) fn response(&self, done: bool, with_usage: bool) -> Value {
        let usage = json!({
            "input_tokens": self.input_tokens,
            "input_tokens_details": {"cached_tokens": self.cached_tokens},
            "output_tokens": self.output_tokens,
            "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
            "total_tokens": self.total_tokens(),
        });
        let incomplete = (done && self.incomplete).then(|| json!({"reason": "max_output_tokens"}));
        let mut response = json!({
            "id": self.id, "object": "response", "created_at": self.created_at,
            "status": if done { self.status() } else { "in_progress" },
            "model": self.model,
            "output": if done { json!([self.item(true)]) } else { json!([]) },
            "previous_response_id": self.previous_response_id,
            "instructions": self.instructions, "max_output_tokens": self.max_output_tokens,
            "error": null, "incomplete_details": incomplete,
            "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
            "temperature": null, "top_p": null, "truncation": "disabled", "metadata": {},
            "text": {"format": {"type": "text"}},
            "usage": if done { usage } else { Value::Null },
        });
        if let (false, Some(r)) = (with_usage, response.as_object_mut()) {
            r.remove("usage");
        }
        response
    }

    /// The `i`-th stream event as `(name, data)` without `type`/`sequence_number`; `None` past the end.
    pub(crate) fn event(&self, i: u64, with_usage: bool) -> Option<(&'static str, Value)> {
        let deltas_end = HEAD_EVENTS + self.output_tokens;
        let at = json!({"item_id": self.item_id, "output_index": 0, "content_index": 0});
        let with = |mut base: Value, extra: Value| {
            if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
                b.extend(e);
            }
            base
        };
        let event = match i {
            0 => ("response.created", json!({"response": self.response(false, true)})),
            1 => ("response.in_progress", json!({"response": self.response(false, true)})),
            2 => ("response.output_item.added", json!({"output_index": 0, "item": self.item(false)})),
            3 => ("response.content_part.added", with(at, json!({"part": self.part(String::new())}))),
            i if i < deltas_end => {
                let delta = delta_word(&CONTENT_WORDS, i - HEAD_EVENTS);
                ("response.output_text.delta", with(at, json!({"delta": delta, "logprobs": []})))
            }
            i if i == deltas_end => {
                ("response.output_text.done", with(at, json!({"text": self.text(), "logprobs": []})))
            }
            i if i == deltas_end + 1 => {
                ("response.content_part.done", with(at, json!({"part": self.part(self.text())})))
            }
            i if i == deltas_end + 2 => {
                ("response.output_item.done", json!({"output_index": 0, "item": self.item(true)}))
            }
            i if i == deltas_end + 3 => ("response.completed", json!({"response": self.response(true, with_usage)})),
            _ => return None,
        };
        let (name, data) = event;
        Some((name, with(json!({"type": name, "sequence_number": i}), data)))
    }

    fn stream(self, switches: &Switches) -> Response<SimBody> {
        let with_usage = switches.fault != Some(Fault::EmptyUsage);
        let cut = HEAD_EVENTS + MIDSTREAM_DELTAS.min(self.output_tokens);
        let (cut, ending) = match switches.fault {
            Some(Fault::MidstreamError) => {
                let data = json!({"type": "error", "code": "server_error", "message": "The server had an error while processing your request.", "param": null, "sequence_number": cut});
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

    fn state() -> SimState {
        SimState::new(([127, 0, 0, 1], 1).into(), crate::SimOptions::default())
    }

    fn plan(state: &SimState, req: Value, previous: Option<(String, u64)>) -> ResponsePlan {
        ResponsePlan::new(state, req.as_object().unwrap_or(&Map::new()), previous)
    }

    #[test]
    fn base_tokens_of_string_and_array_input() {
        let req = json!({"model": "m", "input": "abcde", "instructions": "abc"});
        assert_eq!(base_tokens(req.as_object().unwrap_or(&Map::new())), 2 + 4);
        let req = json!({"model": "m", "input": [{"role": "user", "content": "abcd"}, {"role": "user", "content": [{"type": "input_text", "text": "abcd"}]}]});
        assert_eq!(base_tokens(req.as_object().unwrap_or(&Map::new())), 2 + 8);
    }

    #[test]
    fn chained_and_cut() {
        let s = state();
        let p = plan(&s, json!({"model": "m", "input": "abcd", "max_output_tokens": 5}), Some(("resp_x".into(), 100)));
        assert_eq!((p.input_tokens, p.cached_tokens, p.output_tokens, p.incomplete), (105, 100, 5, true));
        let r = p.response(true, true);
        assert_eq!(r["status"], "incomplete");
        assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(r["usage"]["total_tokens"], 110);
        assert_eq!(r["previous_response_id"], "resp_x");
        assert!(p.response(true, false).get("usage").is_none());
    }

    #[test]
    fn event_sequence_numbers_and_types() {
        let s = state();
        let p = plan(&s, json!({"model": "m", "input": "hi", "sim_completion_tokens": 2}), None);
        let events: Vec<(&str, Value)> = (0..).map_while(|i| p.event(i, true)).collect();
        assert_eq!(events.len(), 4 + 2 + 4);
        for (n, (name, data)) in events.iter().enumerate() {
            assert_eq!(data["type"], *name);
            assert_eq!(data["sequence_number"], n);
        }
        assert_eq!(events[9].0, "response.completed");
        assert_eq!(events[9].1["response"]["usage"]["output_tokens"], 2);
        assert!(events[0].1["response"]["usage"].is_null());
    }
}
