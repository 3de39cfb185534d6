//! The simulated completion: token counts derived from the request, the answer and its stream chunks.

use serde_json::{Map, Value, json};

/// Completion length when neither a limit nor `sim_completion_tokens` says otherwise.
pub(crate) const NATURAL_COMPLETION_TOKENS: u64 = 16;
/// Completion limit when the request sets neither `max_completion_tokens` nor `max_tokens`.
pub(crate) const DEFAULT_MAX_TOKENS: u64 = 64;
/// Upper bound on any simulated completion, to keep answers small.
pub(crate) const MAX_SIM_COMPLETION_TOKENS: u64 = 65_536;

const CONTENT_WORDS: [&str; 12] =
    ["This", "is", "a", "simulated", "answer", "with", "one", "token", "per", "word", "for", "testing"];
const REASONING_WORDS: [&str; 10] =
    ["First", "consider", "the", "question", "then", "think", "it", "through", "step", "carefully"];

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

fn u64_field(req: &Map<String, Value>, key: &str) -> Option<u64> {
    req.get(key).and_then(Value::as_u64)
}

/// UTF-8 bytes of a message `content`: a string, or the `text` of each part of an array.
fn content_bytes(content: Option<&Value>) -> u64 {
    let bytes = match content {
        Some(Value::String(s)) => s.len(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).map(str::len).sum()
        }
        _ => 0,
    };
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// `ceil(content bytes / 4) + 4` per message.
pub(crate) fn prompt_tokens(messages: &[Value]) -> u64 {
    let bytes: u64 = messages.iter().map(|m| content_bytes(m.get("content"))).fold(0, u64::saturating_add);
    let count = u64::try_from(messages.len()).unwrap_or(u64::MAX);
    bytes.div_ceil(4).saturating_add(count.saturating_mul(4))
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
        let prompt_tokens = u64_field(req, "sim_prompt_tokens").unwrap_or_else(|| prompt_tokens(messages));
        let natural =
            u64_field(req, "sim_completion_tokens").unwrap_or(NATURAL_COMPLETION_TOKENS).min(MAX_SIM_COMPLETION_TOKENS);
        let limit = u64_field(req, "max_completion_tokens")
            .or_else(|| u64_field(req, "max_tokens"))
            .unwrap_or(DEFAULT_MAX_TOKENS);
        let total = natural.min(limit);
        let thinking = match req.get("thinking").and_then(|t| t.get("type")).and_then(Value::as_str) {
            Some(kind) => kind == "enabled",
            None => model.starts_with("seed-"),
        };
        let reasoning_tokens = if thinking { total / 2 } else { 0 };
        Plan {
            id,
            created,
            model: model.to_owned(),
            prompt_tokens,
            cached_tokens: if seen_before { prompt_tokens / 2 } else { 0 },
            audio_tokens: u64_field(req, "sim_audio_tokens"),
            thinking,
            reasoning_tokens,
            content_tokens: total - reasoning_tokens,
            finish_reason: if natural > limit { "length" } else { "stop" },
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

/// `n` words from `vocabulary`, cycling, joined by single spaces.
fn words(vocabulary: &[&str], n: u64) -> String {
    (0..n).map(|i| vocabulary[index(vocabulary, i)]).collect::<Vec<_>>().join(" ")
}

/// Word `i` as a stream delta: a space before every word but the first.
fn delta_word(vocabulary: &[&str], i: u64) -> String {
    let word = vocabulary[index(vocabulary, i)];
    if i == 0 { word.to_owned() } else { format!(" {word}") }
}

fn index(vocabulary: &[&str], i: u64) -> usize {
    let len = u64::try_from(vocabulary.len()).unwrap_or(1).max(1);
    usize::try_from(i % len).unwrap_or(0)
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
    fn prompt_tokens_from_content() {
        let m = json!([{"role": "user", "content": "abcde"}, {"role": "user", "content": [{"type": "text", "text": "abc"}, {"type": "image_url"}]}]);
        assert_eq!(prompt_tokens(m.as_array().map(Vec::as_slice).unwrap_or_default()), 2 + 8);
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
