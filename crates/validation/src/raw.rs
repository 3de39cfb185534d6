//! JSON bodies read without a tree. A chat-family body (chat, message-style, response-style) is
//! checked once as JSON, exactly as a parse into `serde_json::Value` would check it (same parser,
//! same recursion limit, same messages), but nothing is built; then its top-level members are kept
//! as raw JSON text borrowed from the body ([`RawBody`]), the typed request is read from them, and
//! the upstream body is written by concatenating the raw members with the replaced ones.
//!
//! A parsed map keeps the last of duplicate keys, so [`RawBody`] does too at the top level (the
//! earlier ones are neither read nor forwarded). Inside members nothing is deduplicated: the text
//! is forwarded as sent, sizes count it as sent, and a typed field named twice inside an object
//! (a message's `content`, say) is refused as serde refuses it.
//!
//! The sizes the prompt bound needs ([`json_size`], [`entry_size`]) are visitors over the raw
//! text: they allocate nothing but serde_json's scratch buffer for an escaped string, and give the
//! numbers the `Value` versions gave (compact JSON without escapes: strings by their unescaped
//! bytes, numbers as `serde_json::Number` writes them).

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::shape::count;

use crate::ValidationError;

/// A JSON object body: its top-level members as raw JSON text borrowed from the body, sorted by key
/// (as a parsed map iterates them), the last of duplicate keys kept.
#[derive(Debug, Clone)]
pub struct RawBody<'a> {
    members: Vec<(Cow<'a, str>, &'a RawValue)>,
    /// What the checking pass found in each member (same order as `members`), when it ran.
    summaries: Vec<Summary>,
}

/// What one visit of a JSON value finds: its compact size (see [`json_size`]) and whether an object
/// in it has a `type` that names a media part of the native formats (see [`has_media`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    /// The compact size.
    pub(crate) size: u64,
    /// A media part somewhere in the value.
    pub(crate) media: bool,
    /// The value is a string that names a media part type.
    media_name: bool,
}

impl<'a> RawBody<'a> {
    /// Reads `body` as a JSON object: `the body is not valid JSON: …` (serde_json's message, as a
    /// parse into a `Value` gives it) or `the body must be a JSON object`.
    pub fn parse_body(body: &'a [u8]) -> Result<RawBody<'a>, ValidationError> {
        let not_json = |e: serde_json::Error| ValidationError::Invalid(format!("the body is not valid JSON: {e}"));
        let mut checker = serde_json::Deserializer::from_slice(body);
        let summaries = Top.deserialize(&mut checker).map_err(not_json)?;
        checker.end().map_err(not_json)?;
        let Some(summaries) = summaries else {
            return Err(ValidationError::Invalid("the body must be a JSON object".into()));
        };
        let members: Members<'a> = serde_json::from_slice(body).map_err(not_json)?;
        if members.0.len() != summaries.len() {
            return Err(ValidationError::Invalid("the body must be a JSON object".into()));
        }
        Ok(RawBody::from_members(members.0, summaries))
    }

    /// The members of the raw object `raw` (already checked to be a JSON object).
    pub fn of(raw: &'a RawValue) -> Result<RawBody<'a>, ValidationError> {
        let members: Members<'a> = serde_json::from_str(raw.get())
            .map_err(|e| ValidationError::Invalid(format!("the body is not valid JSON: {e}")))?;
        Ok(RawBody::from_members(members.0, Vec::new()))
    }

    /// `members` (in document order, with `summaries` in the same order or none) sorted by key, the
    /// last of each key kept.
    fn from_members(members: Vec<(Cow<'a, str>, &'a RawValue)>, summaries: Vec<Summary>) -> RawBody<'a> {
        let with_summaries = summaries.len() == members.len();
        let mut all: Vec<((Cow<'a, str>, &'a RawValue), Summary)> = if with_summaries {
            members.into_iter().zip(summaries).collect()
        } else {
            members.into_iter().map(|m| (m, Summary::default())).collect()
        };
        // A stable sort keeps duplicates in document order; the last of each run wins.
        all.sort_by(|a, b| a.0.0.cmp(&b.0.0));
        let mut kept: Vec<((Cow<'a, str>, &'a RawValue), Summary)> = Vec::with_capacity(all.len());
        for member in all {
            match kept.last_mut() {
                Some(last) if last.0.0 == member.0.0 => *last = member,
                _ => kept.push(member),
            }
        }
        let (members, summaries): (Vec<_>, Vec<_>) = kept.into_iter().unzip();
        RawBody { members, summaries: if with_summaries { summaries } else { Vec::new() } }
    }

    /// The size of each member's `"key": value,` entry (see [`entry_size`]), from the checking pass
    /// when it ran, members sorted by key.
    pub(crate) fn entry_sizes(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.members.iter().enumerate().map(|(i, (key, raw))| {
            let size = match self.summaries.get(i) {
                Some(summary) => count(key.len()).saturating_add(4).saturating_add(summary.size),
                None => entry_size(key, raw),
            };
            (key.as_ref(), size)
        })
    }

    /// Whether any member holds an object whose `type` names a media part of the native formats
    /// (see [`has_media`]), from the checking pass when it ran.
    pub(crate) fn has_media(&self) -> bool {
        if self.summaries.len() == self.members.len() {
            return self.summaries.iter().any(|s| s.media);
        }
        self.members.iter().any(|(_, raw)| has_media(raw))
    }

    /// The raw value of member `key`.
    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.members.binary_search_by(|(k, _)| k.as_ref().cmp(key)).ok().map(|i| self.members[i].1)
    }

    /// Member `key` as a string, when it is one.
    pub fn str(&self, key: &str) -> Option<Cow<'a, str>> {
        self.get(key).and_then(|raw| serde_json::from_str::<Cow<'a, str>>(raw.get()).ok())
    }

    /// The members, sorted by key.
    pub fn members(&self) -> impl Iterator<Item = (&str, &'a RawValue)> + '_ {
        self.members.iter().map(|(k, v)| (k.as_ref(), *v))
    }

    /// Reads the object as `T` with the interface's path-aware messages (the same as a read from a
    /// parsed map: members in key order, each value read from its raw text).
    pub fn read<T: de::Deserialize<'a>>(&self) -> Result<T, ValidationError> {
        let entries = self.members.iter().map(|(k, v)| (k.clone(), *v));
        let map = de::value::MapDeserializer::<_, serde_json::Error>::new(entries);
        serde_path_to_error::deserialize(map)
            .map_err(|e| ValidationError::Invalid(crate::shape::shape_message(e.path(), &without_position(e.inner()))))
    }

    /// The object written as compact JSON, members in key order: each member's raw text, except
    /// those named in `replace` (a JSON text each; `None` drops the member), whose values are put
    /// in their place, or at the end when the object lacks them.
    pub fn write(&self, replace: &[(&str, Option<&str>)]) -> Vec<u8> {
        let extra: usize = replace.iter().map(|(k, v)| k.len() + v.map_or(0, str::len) + 4).sum();
        let size: usize = self.members.iter().map(|(k, v)| k.len() + v.get().len() + 4).sum();
        let mut out = Vec::with_capacity(size + extra + 2);
        out.push(b'{');
        let mut first = true;
        let mut put = |out: &mut Vec<u8>, key: &str, value: &str| {
            if !first {
                out.push(b',');
            }
            first = false;
            write_key(out, key);
            out.push(b':');
            out.extend_from_slice(value.as_bytes());
        };
        for (key, value) in &self.members {
            match replace.iter().find(|(k, _)| k == key) {
                Some((_, Some(new))) => put(&mut out, key, new),
                Some((_, None)) => {}
                None => put(&mut out, key, value.get()),
            }
        }
        for (key, value) in replace {
            if let (Some(new), None) = (value, self.get(key)) {
                put(&mut out, key, new);
            }
        }
        out.push(b'}');
        out
    }
}

/// `key` as a JSON string.
fn write_key(out: &mut Vec<u8>, key: &str) {
    if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(key.as_bytes());
        out.push(b'"');
    } else if serde_json::to_writer(&mut *out, key).is_err() {
        // Writing a string into a Vec cannot fail; keep the JSON well formed if it ever did.
        out.extend_from_slice(b"\"\"");
    }
}

/// serde_json's message without its ` at line L column C` (a position inside a member means
/// nothing to the client, and a read from a parsed map has none).
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if e.line() == 0 {
        return text;
    }
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    text.strip_suffix(&suffix).map_or_else(|| text.clone(), str::to_owned)
}

/// The members of an object, in document order.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de> de::Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Members<'de>, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    members.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(MembersVisitor)
    }
}

/// The top level of a body: the summary of each member (document order) when it is an object,
/// `None` when it is another JSON value; every value visited as a parse into `Value` visits it
/// (strings, numbers, nesting, the recursion limit), nothing built.
struct Top;

impl<'de> DeserializeSeed<'de> for Top {
    type Value = Option<Vec<Summary>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<Vec<Summary>>, D::Error> {
        d.deserialize_any(TopVisitor)
    }
}

struct TopVisitor;

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Option<Vec<Summary>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element_seed(Summarize)?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut summaries = Vec::new();
        while map.next_key_seed(Key)?.is_some() {
            summaries.push(map.next_value_seed(Summarize)?);
        }
        Ok(Some(summaries))
    }
}

/// A key: its unescaped length in bytes, and whether it is `type`.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = (u64, bool);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(u64, bool), D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = (u64, bool);

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string key")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<(u64, bool), E> {
                Ok((count(v.len()), v == "type"))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Decimal digits of `n`.
fn digits(n: u64) -> u64 {
    n.checked_ilog10().map_or(1, |d| u64::from(d) + 1)
}

/// Counts the bytes written through it.
struct Counter(u64);

impl fmt::Write for Counter {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 = self.0.saturating_add(count(s.len()));
        Ok(())
    }
}

/// The content part `type`s of the native formats whose tokens do not follow their bytes.
pub(crate) fn is_native_media_type(kind: &str) -> bool {
    matches!(kind, "image" | "document" | "input_image" | "input_file" | "input_audio" | "image_url")
}

/// The size of the raw JSON value `raw` written as compact JSON, without escapes: an upper bound of
/// its text's UTF-8 bytes, the same number the `json_size` of its parsed `Value` gave (objects with a
/// key named twice excepted: both members count here, as both are forwarded).
pub(crate) fn json_size(raw: &RawValue) -> u64 {
    Summarize.deserialize(raw).map_or_else(|_| count(raw.get().len()), |s| s.size)
}

/// The size of one `"key": value,` entry of an object (see [`json_size`]).
pub(crate) fn entry_size(key: &str, raw: &RawValue) -> u64 {
    count(key.len()).saturating_add(4).saturating_add(json_size(raw))
}

/// Whether any object in `raw` (itself included) has a string `type` that names a media part of
/// the native formats ([`is_native_media_type`]; the last `type` of an object counts).
pub(crate) fn has_media(raw: &RawValue) -> bool {
    Summarize.deserialize(raw).is_ok_and(|s| s.media)
}

/// Visits a JSON value and returns its [`Summary`].
struct Summarize;

impl<'de> DeserializeSeed<'de> for Summarize {
    type Value = Summary;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Summary, D::Error> {
        d.deserialize_any(SummaryVisitor)
    }
}

struct SummaryVisitor;

/// A summary of a scalar of `size` bytes.
const fn scalar(size: u64) -> Summary {
    Summary { size, media: false, media_name: false }
}

impl<'de> Visitor<'de> for SummaryVisitor {
    type Value = Summary;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Summary, E> {
        Ok(scalar(if v { 4 } else { 5 }))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Summary, E> {
        Ok(scalar(digits(v.unsigned_abs()) + u64::from(v < 0)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Summary, E> {
        Ok(scalar(digits(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Summary, E> {
        // As a `Value` holds it: a finite float is a `Number` (what it writes); no JSON text parses
        // to a non-finite one.
        let size = serde_json::Number::from_f64(v).map_or(4, |n| {
            let mut counter = Counter(0);
            // Writing into a counter cannot fail.
            let _ = fmt::write(&mut counter, format_args!("{n}"));
            counter.0
        });
        Ok(scalar(size))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Summary, E> {
        Ok(Summary { size: count(v.len()).saturating_add(2), media: false, media_name: is_native_media_type(v) })
    }

    fn visit_unit<E: de::Error>(self) -> Result<Summary, E> {
        Ok(scalar(4))
    }

    fn visit_none<E: de::Error>(self) -> Result<Summary, E> {
        Ok(scalar(4))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Summary, A::Error> {
        let mut all = scalar(2);
        while let Some(item) = seq.next_element_seed(Summarize)? {
            all.size = all.size.saturating_add(item.size).saturating_add(1);
            all.media |= item.media;
        }
        Ok(all)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Summary, A::Error> {
        let (mut all, mut typed) = (scalar(2), false);
        while let Some((key, is_type)) = map.next_key_seed(Key)? {
            let value = map.next_value_seed(Summarize)?;
            all.size = all.size.saturating_add(key).saturating_add(4).saturating_add(value.size);
            all.media |= value.media;
            if is_type {
                typed = value.media_name;
            }
        }
        all.media |= typed;
        Ok(all)
    }
}

/// A string member read without copying it when it has no escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Field<'a> {
    /// Absent.
    Missing,
    /// A string.
    Str(Cow<'a, str>),
    /// Another JSON value, described for messages (`null`, `5`, `an array`, …).
    Other(String),
}

/// A short description of a JSON value for error messages: scalars as written (long strings cut),
/// containers by kind.
struct Describe;

impl<'de> DeserializeSeed<'de> for Describe {
    type Value = Field<'de>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Field<'de>, D::Error> {
        d.deserialize_any(DescribeVisitor)
    }
}

struct DescribeVisitor;

impl<'de> Visitor<'de> for DescribeVisitor {
    type Value = Field<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Field<'de>, E> {
        Ok(Field::Other(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Field<'de>, E> {
        Ok(Field::Other(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Field<'de>, E> {
        Ok(Field::Other(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Field<'de>, E> {
        Ok(Field::Other(serde_json::Number::from_f64(v).map_or_else(|| "null".to_owned(), |n| n.to_string())))
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Field<'de>, E> {
        Ok(Field::Str(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Field<'de>, E> {
        Ok(Field::Str(Cow::Owned(v.to_owned())))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Field<'de>, E> {
        Ok(Field::Other("null".to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Field<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Field::Other("an array".to_owned()))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Field<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Field::Other("an object".to_owned()))
    }
}

impl Field<'_> {
    /// How a message names the value: a string quoted (cut after 40 characters), else its description.
    pub(crate) fn describe(&self) -> String {
        match self {
            Field::Missing => "nothing".to_owned(),
            Field::Str(s) if s.chars().count() <= 40 => format!("{s:?}"),
            Field::Str(s) => format!("{:?}…", s.chars().take(40).collect::<String>()),
            Field::Other(text) => text.clone(),
        }
    }
}

/// Reads `raw` as a [`Field`].
pub(crate) fn field(raw: Option<&RawValue>) -> Field<'_> {
    match raw {
        None => Field::Missing,
        Some(raw) => Describe.deserialize(raw).unwrap_or_else(|_| Field::Other("a value".to_owned())),
    }
}

/// The items of the raw JSON array `raw`, each as raw text; `None` when it is not an array.
pub(crate) fn items(raw: &RawValue) -> Option<Vec<&RawValue>> {
    if !raw.get().starts_with('[') {
        return None;
    }
    serde_json::from_str(raw.get()).ok()
}

/// Whether the raw JSON value is an object.
pub(crate) fn is_object(raw: &RawValue) -> bool {
    raw.get().starts_with('{')
}

/// The members of the raw JSON object `raw` in document order, duplicates kept; `None` when it is
/// not an object.
pub(crate) fn members(raw: &RawValue) -> Option<Vec<(Cow<'_, str>, &RawValue)>> {
    if !is_object(raw) {
        return None;
    }
    serde_json::from_str::<Members<'_>>(raw.get()).ok().map(|m| m.0)
}

/// The last member named `key` of `members` (a parsed map keeps the last).
pub(crate) fn last<'a>(members: &[(Cow<'a, str>, &'a RawValue)], key: &str) -> Option<&'a RawValue> {
    members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// The sizes the `Value` versions gave (the reference the raw visitor must match).
    fn value_size(value: &Value) -> u64 {
        match value {
            Value::Null | Value::Bool(true) => 4,
            Value::Bool(false) => 5,
            Value::Number(n) => count(n.to_string().len()),
            Value::String(s) => count(s.len()).saturating_add(2),
            Value::Array(items) => items.iter().fold(2u64, |sum, item| sum + value_size(item) + 1),
            Value::Object(map) => {
                map.iter().fold(2u64, |sum, (key, item)| sum + count(key.len()) + 4 + value_size(item))
            }
        }
    }

    #[test]
    fn sizes_match_the_parsed_values() {
        let texts = [
            r#"{"a": [1, -2, 3.5, 1e3, 1.0e-7, 18446744073709551615, -9223372036854775808, 1e300], "b": "x\u00e9\n\"y\ud83d\ude00"}"#,
            r#"[true, false, null, "", {}, [], {"k\u00e9y": {"n": [0.1, 2.50, -0.0]}}]"#,
            r#""plain""#,
            "12345678901234567890123",
            "  [ 1 , 2 ]  ",
        ];
        for text in texts {
            let raw: Box<RawValue> = serde_json::from_str(text).expect("raw");
            let value: Value = serde_json::from_str(text).expect("value");
            assert_eq!(json_size(&raw), value_size(&value), "{text}");
        }
    }

    #[test]
    fn the_checking_pass_gives_the_same_sizes_and_media() {
        let body = br#"{"b": [1.5, {"type": "image"}], "a": {"x\n": "y"}, "a": "last", "c": null}"#;
        let raw = RawBody::parse_body(body).expect("object");
        let sizes: Vec<(&str, u64)> = raw.entry_sizes().collect();
        let direct: Vec<(&str, u64)> = raw.members().map(|(k, v)| (k, entry_size(k, v))).collect();
        assert_eq!(sizes, direct);
        assert!(raw.has_media());
        let plain = RawBody::parse_body(br#"{"type": "image"}"#).expect("object");
        assert!(!plain.has_media(), "a top-level type is not a part");
    }

    #[test]
    fn bodies_parse_like_values() {
        let err = |body: &str| RawBody::parse_body(body.as_bytes()).expect_err(body).message().to_owned();
        for body in ["{", "{\"a\":1,}", "[1] x", "{\"a\": 1e400}", "{\"a\": \"\\ud800\"}", "nul"] {
            let value = serde_json::from_str::<Value>(body).expect_err(body);
            assert_eq!(err(body), format!("the body is not valid JSON: {value}"), "{body}");
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        let value = serde_json::from_str::<Value>(&deep).expect_err("too deep");
        assert_eq!(err(&deep), format!("the body is not valid JSON: {value}"));
        assert_eq!(err("[1]"), "the body must be a JSON object");
        assert_eq!(err("\"x\""), "the body must be a JSON object");
    }

    #[test]
    fn last_key_wins_and_writes_replace_in_place() {
        let body = br#"{"z": 1, "model": "a", "m\u00e9": [1, 2], "z": {"k": 2}, "drop": true}"#;
        let raw = RawBody::parse_body(body).expect("object");
        let keys: Vec<&str> = raw.members().map(|(k, _)| k).collect();
        assert_eq!(keys, ["drop", "model", "mé", "z"]);
        assert_eq!(raw.get("z").map(RawValue::get), Some(r#"{"k": 2}"#));
        assert_eq!(raw.str("model").as_deref(), Some("a"));
        let out = raw.write(&[("model", Some("\"up\"")), ("drop", None), ("new", Some("7"))]);
        let written: Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(written, json!({"model": "up", "mé": [1, 2], "z": {"k": 2}, "new": 7}));
    }

    #[test]
    fn reads_give_the_map_messages() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct T {
            n: u64,
            s: Option<String>,
        }
        let raw = |body: &str| RawBody::parse_body(body.as_bytes()).expect("object").read::<T>();
        assert_eq!(raw(r#"{"n": "7"}"#).expect_err("type").message(), r#"n must be a non-negative integer, got "7""#);
        assert_eq!(raw(r#"{"s": "x"}"#).expect_err("missing").message(), "n is required");
        assert!(raw(r#"{"n": 1, "n": 2, "other": [1]}"#).is_ok(), "the last n is read");
    }

    #[test]
    fn media_scan_finds_typed_objects() {
        let scan = |text: &str| has_media(&serde_json::from_str::<Box<RawValue>>(text).expect("raw"));
        assert!(scan(r#"[{"content": [{"type": "image", "source": {}}]}]"#));
        assert!(!scan(r#"[{"content": [{"type": "text", "text": "image"}]}]"#));
        assert!(!scan(r#"{"type": ["image"]}"#));
        assert!(scan(r#"{"type": {"type": "image"}}"#));
    }
}
