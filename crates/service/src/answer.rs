//! A complete call's JSON answer, and the one pass that writes it for the client.
//!
//! A chat answer is the upstream's own JSON object with two changes: its `model` becomes the
//! public name and the edge adds the call's task id and billing. Parsing it into a
//! `serde_json::Value` tree and serialising the tree again allocated every key and string of the
//! answer twice per call; here the upstream bytes are checked once (a JSON object, whose `usage`
//! is read), and written out member by member, each value copied as its raw JSON text.

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
    /// The member `name` of an answer built by the gateway (`None` for an upstream answer).
    pub fn member(&self, name: &str) -> Option<&Value> {
        match self {
            Answer::Value(v) => v.get(name),
            Answer::Upstream { .. } => None,
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

/// Checks that `bytes` is one JSON object and returns its member `name` (the last one, as a
/// `Value` would keep), without building the rest of it.
pub(crate) fn object_member(bytes: &[u8], name: &str) -> Result<Option<Value>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let found = de.deserialize_map(FindMember { name })?;
    de.end()?;
    Ok(found)
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

/// Writes the object `bytes` with its `model` member set to `model` (at the place of its first
/// `model`, or after the others when it has none) and the `extra` members set after the rest.
fn write_object(bytes: &[u8], model: Option<&str>, extra: &[(&str, &RawValue)]) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(bytes.len() + 64 + extra.iter().map(|(_, v)| v.get().len() + 16).sum::<usize>());
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.deserialize_map(Rewrite { out: &mut out, model, extra })?;
    de.end()?;
    Ok(out)
}

struct Rewrite<'o, 'm> {
    out: &'o mut Vec<u8>,
    model: Option<&'m str>,
    extra: &'m [(&'m str, &'m RawValue)],
}

impl Rewrite<'_, '_> {
    fn member(&mut self, first: &mut bool, key: &str, value: &str) -> Result<(), serde_json::Error> {
        if !std::mem::take(first) {
            self.out.push(b',');
        }
        serde_json::to_writer(&mut *self.out, key)?;
        self.out.push(b':');
        self.out.extend_from_slice(value.as_bytes());
        Ok(())
    }

    fn model_member(&mut self, first: &mut bool, model: &str) -> Result<(), serde_json::Error> {
        let value = serde_json::to_string(model)?;
        self.member(first, "model", &value)
    }
}

impl<'de> Visitor<'de> for Rewrite<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        use serde::de::Error as _;
        self.out.push(b'{');
        let mut first = true;
        let mut model_written = false;
        let mut key = String::new();
        while map.next_key_seed(KeyText { into: &mut key })?.is_some() {
            let value: &'de RawValue = map.next_value()?;
            if let (Some(model), "model") = (self.model, key.as_str()) {
                if !std::mem::replace(&mut model_written, true) {
                    self.model_member(&mut first, model).map_err(A::Error::custom)?;
                }
            } else if !self.extra.iter().any(|(name, _)| *name == key) {
                self.member(&mut first, &key, value.get()).map_err(A::Error::custom)?;
            }
        }
        if let (Some(model), false) = (self.model, model_written) {
            self.model_member(&mut first, model).map_err(A::Error::custom)?;
        }
        for (name, value) in self.extra {
            self.member(&mut first, name, value.get()).map_err(A::Error::custom)?;
        }
        self.out.push(b'}');
        Ok(())
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
            "usage":{"prompt_tokens":3},"svc":"theirs","model":"again"}"#;
        let answer = Answer::Upstream { body: body.to_vec(), model: "LangA \"pub\"".into() };
        let svc = raw(r#"{"task_id":"task_1"}"#);
        let out = answer.to_json_with(&[("svc", &svc)]).expect("written");
        let text = String::from_utf8(out.clone()).expect("utf-8");
        assert_eq!(text.matches("\"model\"").count(), 1, "{text}");
        assert_eq!(text.matches("\"svc\"").count(), 1, "{text}");
        let value: Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(
            value,
            json!({"id": "c1", "model": "LangA \"pub\"", "choices": [{"message": {"content": "hé \"q\""}}],
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
    fn only_one_json_object_is_an_answer() {
        for bad in [&b"[1]"[..], b"\"x\"", b"{\"a\":1} {}", b"{\"a\":", b"", b"null"] {
            assert!(object_member(bad, "usage").is_err(), "{:?}", String::from_utf8_lossy(bad));
            let answer = Answer::Upstream { body: bad.to_vec(), model: "m".into() };
            assert!(answer.to_json_with(&[]).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        let usage = object_member(br#"{"usage":{"a":1},"x":{"usage":2},"usage":{"a":2}}"#, "usage").expect("object");
        assert_eq!(usage, Some(json!({"a": 2})));
        assert_eq!(object_member(b"{}", "usage").expect("object"), None);
    }
}
