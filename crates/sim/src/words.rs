//! The simulated text shared by the chat-like formats: vocabularies, word lists, token counts.

use serde_json::{Map, Value};

/// Completion length when neither a limit nor `sim_completion_tokens` says otherwise.
pub(crate) const NATURAL_COMPLETION_TOKENS: u64 = 16;
/// Upper bound on any simulated completion, to keep answers small.
pub(crate) const MAX_SIM_COMPLETION_TOKENS: u64 = 65_536;

/// Upper bound on `sim_reasoning_tokens` (the largest published reasoning length is 262,144).
pub(crate) const MAX_SIM_REASONING_TOKENS: u64 = 1_048_576;

/// The answer's words, cycled.
pub(crate) const CONTENT_WORDS: [&str; 12] =
    ["This", "is", "a", "simulated", "answer", "with", "one", "token", "per", "word", "for", "testing"];
/// The reasoning's words, cycled.
pub(crate) const REASONING_WORDS: [&str; 10] =
    ["First", "consider", "the", "question", "then", "think", "it", "through", "step", "carefully"];

/// `req[key]` as an unsigned integer.
pub(crate) fn u64_field(req: &Map<String, Value>, key: &str) -> Option<u64> {
    req.get(key).and_then(Value::as_u64)
}

/// The natural completion length: `sim_completion_tokens` or 16, at most 65,536.
pub(crate) fn natural_tokens(req: &Map<String, Value>) -> u64 {
    u64_field(req, "sim_completion_tokens").unwrap_or(NATURAL_COMPLETION_TOKENS).min(MAX_SIM_COMPLETION_TOKENS)
}

/// The reasoning length asked for with `sim_reasoning_tokens` (at most 1,048,576), if any.
pub(crate) fn reasoning_tokens(req: &Map<String, Value>) -> Option<u64> {
    u64_field(req, "sim_reasoning_tokens").map(|n| n.min(MAX_SIM_REASONING_TOKENS))
}

/// Whether the request asks for the `over_bounds` fault: output that ignores the request's caps.
pub(crate) fn over_bounds(req: &Map<String, Value>) -> bool {
    req.get("sim_fault").and_then(Value::as_str) == Some("over_bounds")
}

/// Whether a native-format request turns thinking off: `thinking.type = disabled` (messages) or
/// `reasoning.effort = minimal` / `none` (responses).
pub(crate) fn native_thinking_off(req: &Map<String, Value>) -> bool {
    let thinking = req.get("thinking").and_then(|t| t.get("type")).and_then(Value::as_str);
    let effort = req.get("reasoning").and_then(|r| r.get("effort")).and_then(Value::as_str);
    thinking == Some("disabled") || matches!(effort, Some("minimal" | "none"))
}

/// UTF-8 bytes of a text field: a string, or the `text` of each part of an array.
pub(crate) fn text_bytes(content: Option<&Value>) -> u64 {
    let bytes = match content {
        Some(Value::String(s)) => s.len(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).map(str::len).sum()
        }
        _ => 0,
    };
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// `ceil(extra_bytes + content bytes of every message) / 4) + 4` per message.
pub(crate) fn prompt_tokens(extra_bytes: u64, messages: &[Value]) -> u64 {
    let bytes: u64 = messages.iter().map(|m| text_bytes(m.get("content"))).fold(extra_bytes, u64::saturating_add);
    let count = u64::try_from(messages.len()).unwrap_or(u64::MAX);
    bytes.div_ceil(4).saturating_add(count.saturating_mul(4))
}

/// `n` words from `vocabulary`, cycling, joined by single spaces.
pub(crate) fn words(vocabulary: &[&str], n: u64) -> String {
    (0..n).map(|i| vocabulary[index(vocabulary, i)]).collect::<Vec<_>>().join(" ")
}

/// Word `i` as a stream delta: a space before every word but the first.
pub(crate) fn delta_word(vocabulary: &[&str], i: u64) -> String {
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
    use serde_json::json;

    #[test]
    fn prompt_tokens_from_content() {
        let m = json!([{"role": "user", "content": "abcde"}, {"role": "user", "content": [{"type": "text", "text": "abc"}, {"type": "image_url"}]}]);
        let m = m.as_array().map(Vec::as_slice).unwrap_or_default();
        assert_eq!(prompt_tokens(0, m), 2 + 8);
        assert_eq!(prompt_tokens(4, m), 3 + 8);
        assert_eq!(prompt_tokens(0, &[]), 0);
    }

    #[test]
    fn words_and_deltas_agree() {
        let text = words(&CONTENT_WORDS, 14);
        let deltas: String = (0..14).map(|i| delta_word(&CONTENT_WORDS, i)).collect();
        assert_eq!(text, deltas);
        assert_eq!(text.split_whitespace().count(), 14);
        assert_eq!(words(&CONTENT_WORDS, 0), "");
    }
}
