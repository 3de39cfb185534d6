//! A complete call's JSON answer, and the one pass that writes it for the client.
//!
//! A chat answer is the upstream's own JSON object with two changes: its `model` becomes the
//! public name and the edge adds the call's task id and billing. Parsing it into a
//! `serde_json::Value` tree and serialising the tree again allocated every key and string of the
//! answer twice per call; here the upstream bytes are checked once (UTF-8 text holding one JSON
//! object, whose `usage` is read), and written out member by member, each value copied as its raw
//! JSON text. Both passes read the text with the same parser, so an answer the check accepts is
//! always written: the call is settled only after the check.
//!
//! A member named twice is written once, with its last value (the one the check read `usage`
//! from, as a `Value` would keep). Values pass through as the upstream wrote them, so a number
//! beyond `f64` or a lone surrogate escape reaches the client as it came.

use std::fmt;

use serde::Deserializer as _;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// A complete call's JSON answer object, before the edge adds the call's task id and billing.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// An object the gateway built or rewrote.
    Value(Value),
    /// The upstream's JSON object (checked to be one), kept as its bytes; its `model` member is
    /// replaced by `model` when it is written out.
    Upstream {
        /// The upstream's answer.
        body: Vec<u8>,
        /// The public model name.
        model: String,
    },
}

impl Answer {
    /// The answer's member `name` as the client gets it (an upstream answer's `model` is the
    /// public name); `None` when it has none. Reads an upstream answer's bytes again, building only
    /// that member.
    pub fn member(&self, name: &str) -> Option<Value> {
        match self {
            Answer::Value(v) => v.get(name).cloned(),
            Answer::Upstream { model, .. } if name == "model" => Some(Value::String(model.clone())),
            Answer::Upstream { body, .. } => object_member(body, name).ok().flatten(),
        }
    }

    /// The answer as JSON, with the `extra` members (name, JSON text) set: each replaces a member
    /// of that name and is written after the others, in order. Errors only on an answer that is
    /// not a JSON object or on extra text that is not JSON.
    pub fn to_json_with(&self, extra: &[(&str, &RawValue)]) -> Result<Vec<u8>, serde_json::Error> {
        match self {
            Answer::Value(v) => write_object(&serde_json::to_vec(v)?, None, extra),
            Answer::Upstream { body, model } => write_object(body, Some(model), extra),
        }
    }
}

/// Checks that `bytes` is UTF-8 text holding one JSON object and returns its member `name` (the
/// last one, as a `Value` would keep), without building the rest of it.
pub(crate) fn object_member(bytes: &[u8], name: &str) -> Result<Option<Value>, serde_json::Error> {
    read_object(bytes, FindMember { name })
}

struct FindMember<'n> {
    name: &'n str,
}

impl<'de> Visitor<'de> for FindMember<'_> {
    type Value = Option<Value>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        let mut key = String::new();
        while map.next_key_seed(KeyText { into: &mut key })?.is_some() {
            if key == self.name {
                found = Some(map.next_value::<Value>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// `bytes` (one JSON object) with its `model` member set to `model`, written in one pass: the
/// chunks of a chat stream.
pub(crate) fn with_model(bytes: &[u8], model: &str) -> Result<Vec<u8>, serde_json::Error> {
    write_object(bytes, Some(model), &[])
}

/// What a chat stream chunk says for billing: its `usage` member and the bytes of text its
/// choices' deltas carry (`content` and `reasoning_content` strings; any other shape counts 0).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct ChunkFacts {
    /// The chunk's `usage` (the last one), if any.
    pub usage: Option<Value>,
    /// UTF-8 bytes of delta text.
    pub text_bytes: u64,
}

/// Reads a chat stream chunk (UTF-8 text holding one JSON object) for [`ChunkFacts`], building
/// nothing but the `usage` value.
pub(crate) fn chunk_facts(bytes: &[u8]) -> Result<ChunkFacts, serde_json::Error> {
    read_object(bytes, ChunkVisitor)
}

struct ChunkVisitor;

impl<'de> Visitor<'de> for ChunkVisitor {
    type Value = ChunkFacts;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ChunkFacts, A::Error> {
        let mut facts = ChunkFacts::default();
        let mut key = String::new();
        while map.next_key_seed(KeyText { into: &mut key })?.is_some() {
            match key.as_str() {
                "usage" => facts.usage = Some(map.next_value::<Value>()?),
                // The last `choices`, like the last `usage`: the one the client's parser keeps.
                "choices" => facts.text_bytes = map.next_value_seed(TextBytes(Level::Choices))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(facts)
    }
}

/// Where [`TextBytes`] is in a chunk: the `choices` array, one choice, its `delta`, or a text.
#[derive(Clone, Copy, PartialEq)]
enum Level {
    Choices,
    Choice,
    Delta,
    Text,
}

/// Counts the delta text bytes under one value at a [`Level`]; a value of another shape than
/// the level expects counts 0 (as the old tree-walking count did), never an error.
#[derive(Clone, Copy)]
struct TextBytes(Level);

impl<'de> DeserializeSeed<'de> for TextBytes {
    type Value = u64;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<u64, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TextBytes {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_i64<E>(self, _: i64) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_u64<E>(self, _: u64) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_f64<E>(self, _: f64) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_str<E>(self, v: &str) -> Result<u64, E> {
        Ok(if self.0 == Level::Text { v.len() as u64 } else { 0 })
    }

    fn visit_unit<E>(self) -> Result<u64, E> {
        Ok(0)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut total = 0;
        if self.0 == Level::Choices {
            while let Some(n) = seq.next_element_seed(TextBytes(Level::Choice))? {
                total += n;
            }
        } else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
        }
        Ok(total)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut total = 0;
        let mut key = String::new();
        while map.next_key_seed(KeyText { into: &mut key })?.is_some() {
            let inner = match (self.0, key.as_str()) {
                (Level::Choice, "delta") => Some(Level::Delta),
                (Level::Delta, "content" | "reasoning_content") => Some(Level::Text),
                _ => None,
            };
            match inner {
                Some(level) => total += map.next_value_seed(TextBytes(level))?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(total)
    }
}

/// Runs `visitor` over `bytes`, which must be UTF-8 text holding one JSON object and nothing
/// after it. Every reader of an answer or chunk goes through here, so they all accept the same
/// inputs.
fn read_object<'de, V: Visitor<'de>>(bytes: &'de [u8], visitor: V) -> Result<V::Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text(bytes)?);
    let value = de.deserialize_map(visitor)?;
    de.end()?;
    Ok(value)
}

/// `bytes` as text: the check and the writer both read the answer as `str`, so they accept the
/// same answers (reading bytes, serde_json checks UTF-8 in values it keeps but not in those it
/// skips).
fn text(bytes: &[u8]) -> Result<&str, serde_json::Error> {
    std::str::from_utf8(bytes).map_err(|e| serde::de::Error::custom(format!("the answer is not UTF-8: {e}")))
}

/// Writes the object `bytes` with its `model` member set to `model` (added when it has none) and
/// the `extra` members set after the rest; a member named twice is written once, where it last
/// appears, with its last value.
fn write_object(bytes: &[u8], model: Option<&str>, extra: &[(&str, &RawValue)]) -> Result<Vec<u8>, serde_json::Error> {
    let members = read_object(bytes, Members)?;
    let mut keep = vec![true; members.len()];
    let mut seen = std::collections::HashSet::with_capacity(members.len());
    for (i, (key, _)) in members.iter().enumerate().rev() {
        keep[i] = seen.insert(key.as_str()) && !extra.iter().any(|(name, _)| name == key);
    }
    let model = model.map(serde_json::to_string).transpose()?;
    let mut out = Vec::with_capacity(bytes.len() + 64 + extra.iter().map(|(_, v)| v.get().len() + 16).sum::<usize>());
    out.push(b'{');
    let mut first = true;
    let mut model_written = false;
    for ((key, value), _) in members.iter().zip(&keep).filter(|(_, keep)| **keep) {
        let value = match (&model, key.as_str()) {
            (Some(model), "model") => {
                model_written = true;
                model.as_str()
            }
            _ => value.get(),
        };
        member(&mut out, &mut first, key, value)?;
    }
    if let (Some(model), false) = (&model, model_written) {
        member(&mut out, &mut first, "model", model)?;
    }
    for (name, value) in extra {
        member(&mut out, &mut first, name, value.get())?;
    }
    out.push(b'}');
    Ok(out)
}

/// Writes `"key":value` (`value` is JSON text), after a comma unless it is the first member.
fn member(out: &mut Vec<u8>, first: &mut bool, key: &str, value: &str) -> Result<(), serde_json::Error> {
    if !std::mem::take(first) {
        out.push(b',');
    }
    serde_json::to_writer(&mut *out, key)?;
    out.push(b':');
    out.extend_from_slice(value.as_bytes());
    Ok(())
}

/// The members of an object, in order: each key decoded, each value as its raw text.
struct Members;

impl<'de> Visitor<'de> for Members {
    type Value = Vec<(String, &'de RawValue)>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
        while let Some(key) = map.next_key::<String>()? {
            members.push((key, map.next_value()?));
        }
        Ok(members)
    }
}

/// Reads an object key into a reused buffer (no allocation per key once it is large enough).
struct KeyText<'k> {
    into: &'k mut String,
}

impl<'de> DeserializeSeed<'de> for KeyText<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyText<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<(), E> {
        self.into.clear();
        self.into.push_str(v);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).expect("raw")
    }

    fn written(answer: &Answer, extra: &[(&str, &RawValue)]) -> Value {
        serde_json::from_slice(&answer.to_json_with(extra).expect("written")).expect("JSON")
    }

    #[test]
    fn an_upstream_answer_keeps_its_members_and_gets_the_public_model_and_extras() {
        let body = br#"{"id":"c1","model":"upstream-id","choices":[{"message":{"content":"h\u00e9 \"q\""}}],
            "usage":{"prompt_tokens":3},"svc":"theirs","model":"again","id":"c2"}"#;
        let answer = Answer::Upstream { body: body.to_vec(), model: "LangA \"pub\"".into() };
        let svc = raw(r#"{"task_id":"task_1"}"#);
        let out = answer.to_json_with(&[("svc", &svc)]).expect("written");
        let text = String::from_utf8(out.clone()).expect("utf-8");
        for key in ["\"model\"", "\"svc\"", "\"id\""] {
            assert_eq!(text.matches(key).count(), 1, "{text}");
        }
        let value: Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(
            value,
            json!({"id": "c2", "model": "LangA \"pub\"", "choices": [{"message": {"content": "hé \"q\""}}],
                "usage": {"prompt_tokens": 3}, "svc": {"task_id": "task_1"}})
        );
    }

    #[test]
    fn a_model_is_added_when_the_answer_has_none_and_values_pass_through() {
        let answer = Answer::Upstream { body: b" { } ".to_vec(), model: "m".into() };
        assert_eq!(written(&answer, &[]), json!({"model": "m"}));
        let answer = Answer::Value(json!({"model": "kept", "b": [1, 2], "task_id": "old"}));
        let billing = raw(r#"{"status":"settled"}"#);
        let id = raw(r#""task_9""#);
        assert_eq!(
            written(&answer, &[("task_id", &id), ("billing", &billing)]),
            json!({"model": "kept", "b": [1, 2], "task_id": "task_9", "billing": {"status": "settled"}})
        );
    }

    #[test]
    fn chunk_facts_match_the_tree_walk() {
        let chunk = br#"{"choices":[{"delta":{"content":"h\u00e9llo","reasoning_content":"ab","role":"x"}},
            {"delta":{"content":null}},{"delta":"text"},7,{"nodelta":{"content":"zz"}}],
            "usage":{"prompt_tokens":1},"content":"top-level text is not delta text"}"#;
        let facts = chunk_facts(chunk).expect("chunk");
        assert_eq!(facts, ChunkFacts { usage: Some(json!({"prompt_tokens": 1})), text_bytes: 8 });
        let odd = chunk_facts(br#"{"choices":{"delta":{"content":"x"}},"usage":null}"#).expect("chunk");
        assert_eq!(odd, ChunkFacts { usage: Some(Value::Null), text_bytes: 0 });
        assert_eq!(chunk_facts(b"{}").expect("chunk"), ChunkFacts::default());
        for bad in [&b"[1]"[..], b"\"x\"", b"{\"choices\":[}", b"{} 1"] {
            assert!(chunk_facts(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let out = with_model(br#"{"model":"up","choices":[]}"#, "Pub").expect("chunk");
        assert_eq!(serde_json::from_slice::<Value>(&out).expect("JSON"), json!({"model": "Pub", "choices": []}));
    }

    #[test]
    fn only_one_json_object_is_an_answer() {
        // Not UTF-8 inside a value the check skips: refused by both passes alike.
        let not_utf8 = b"{\"choices\":[\"\xff\"],\"usage\":{}}";
        for bad in [&b"[1]"[..], b"\"x\"", b"{\"a\":1} {}", b"{\"a\":", b"", b"null", not_utf8] {
            assert!(object_member(bad, "usage").is_err(), "{:?}", String::from_utf8_lossy(bad));
            let answer = Answer::Upstream { body: bad.to_vec(), model: "m".into() };
            assert!(answer.to_json_with(&[]).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let usage = object_member(br#"{"usage":{"a":1},"x":{"usage":2},"usage":{"a":2}}"#, "usage").expect("object");
        assert_eq!(usage, Some(json!({"a": 2})));
        assert_eq!(object_member(b"{}", "usage").expect("object"), None);
    }
}
