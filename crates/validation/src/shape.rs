//! Request shapes: reads a JSON body into a typed request with a path-aware deserialiser, and maps
//! serde's and validator's raw messages, once, into the interface's `invalid_request` text, which names
//! the field path and the bound (`text_prompt must be 1..3000 characters, got 3001`,
//! `unknown field "foo" at audio_config`). Raw library messages are not a client contract.

use serde::de::{Deserializer, IgnoredAny};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_path_to_error::{Path, Segment};
use validator::{ValidationErrors, ValidationErrorsKind};

use crate::ValidationError;

/// Longest quoted string echoed back in a message, in characters.
const ECHO_CHARS: usize = 40;

/// Reads `body` as a JSON object of type `T`. Syntax errors, a non-object body, unknown fields, wrong
/// types and unknown enum values are `Invalid` with the field's path.
///
/// The body is read straight into `T`, never into a `serde_json::Value` tree (whose nodes cost 16–32
/// times the bytes of a large array): first a pass that only checks the syntax and builds nothing
/// (so a syntax error anywhere is reported as such, before any field's type), then the typed read.
pub(crate) fn parse_body<'de, T: Deserialize<'de>>(body: &'de [u8]) -> Result<T, ValidationError> {
    serde_json::from_slice::<IgnoredAny>(body)
        .map_err(|e| ValidationError::Invalid(format!("request body is not valid JSON: {e}")))?;
    let first = body.iter().find(|b| !b.is_ascii_whitespace()).copied().unwrap_or(b'n');
    if first != b'{' {
        return Err(ValidationError::Invalid(format!(
            "request body must be a JSON object, got {}",
            kind_of_byte(first)
        )));
    }
    let mut reader = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut reader)
        .map_err(|e| ValidationError::Invalid(shape_message(e.path(), &e.inner().to_string())))
}

/// A string read from a JSON body, borrowed from the body when it holds no escape (serde's own `Cow`
/// always copies).
pub(crate) struct Text<'de>(pub std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Text<'de>, D::Error> {
        struct TextVisitor;
        impl<'de> serde::de::Visitor<'de> for TextVisitor {
            type Value = Text<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(std::borrow::Cow::Borrowed(v)))
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(std::borrow::Cow::Owned(v.to_owned())))
            }

            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(std::borrow::Cow::Owned(v)))
            }
        }
        d.deserialize_str(TextVisitor)
    }
}

/// [`Text`] for an optional string field (`#[serde(default, borrow, deserialize_with = "present_text")]`):
/// borrowed from the body when it can be, and an explicit `null` is a wrong type.
pub(crate) fn present_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<std::borrow::Cow<'de, str>>, D::Error> {
    Text::deserialize(d).map(|t| Some(t.0))
}

/// A JSON object passed through as it was written: borrowed from the body (a large member costs its
/// bytes, not a tree of values), checked only to be an object.
#[derive(Debug, Clone)]
pub struct RawObject<'a>(std::borrow::Cow<'a, serde_json::value::RawValue>);

impl PartialEq for RawObject<'_> {
    /// The same text (not the same object written another way).
    fn eq(&self, other: &RawObject<'_>) -> bool {
        self.get() == other.get()
    }
}

impl Eq for RawObject<'_> {}

impl RawObject<'_> {
    /// The object's JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The same object, owning its text.
    pub fn into_owned(self) -> RawObject<'static> {
        RawObject(std::borrow::Cow::Owned(self.0.into_owned()))
    }
}

impl<'de> Deserialize<'de> for RawObject<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RawObject<'de>, D::Error> {
        use serde::de::{Error, Unexpected};
        let raw = <&'de serde_json::value::RawValue>::deserialize(d)?;
        let text = raw.get();
        let unexpected = match text.as_bytes().first() {
            Some(b'{') => return Ok(RawObject(std::borrow::Cow::Borrowed(raw))),
            Some(b'[') => Unexpected::Seq,
            Some(b't') => Unexpected::Bool(true),
            Some(b'f') => Unexpected::Bool(false),
            Some(b'n') => Unexpected::Unit,
            Some(b'"') => {
                let s: String = serde_json::from_str(text).map_err(D::Error::custom)?;
                return Err(D::Error::invalid_type(Unexpected::Str(&s), &"a map"));
            }
            _ => match serde_json::from_str::<serde_json::Number>(text).map_err(D::Error::custom)? {
                n if n.is_u64() => Unexpected::Unsigned(n.as_u64().unwrap_or(0)),
                n if n.is_i64() => Unexpected::Signed(n.as_i64().unwrap_or(0)),
                n => Unexpected::Float(n.as_f64().unwrap_or(0.0)),
            },
        };
        Err(D::Error::invalid_type(unexpected, &"a map"))
    }
}

impl Serialize for RawObject<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl schemars::JsonSchema for RawObject<'_> {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Object".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "object", "additionalProperties": true})
    }
}

/// `raw` without the ` at line L column C` that serde_json adds when it reads from bytes (the field's
/// path says where; a position in the body is noise to a client).
fn without_position(raw: &str) -> &str {
    let Some(at) = raw.rfind(" at line ") else { return raw };
    let rest = &raw[at + " at line ".len()..];
    let position = rest.split_once(" column ").is_some_and(|(line, column)| {
        !line.is_empty()
            && !column.is_empty()
            && line.bytes().all(|b| b.is_ascii_digit())
            && column.bytes().all(|b| b.is_ascii_digit())
    });
    if position { &raw[..at] } else { raw }
}

/// What JSON value starts with `first` (a valid document's first byte), as [`kind_of`] names it.
fn kind_of_byte(first: u8) -> &'static str {
    match first {
        b'n' => "null",
        b't' | b'f' => "a boolean",
        b'"' => "a string",
        b'[' => "an array",
        b'{' => "an object",
        _ => "a number",
    }
}

/// `request` as JSON with `model` first, set to `model` (the request types skip their own `model` when
/// serialized, so the public name never reaches the upstream). `size_hint` is about how many bytes the
/// request's large strings take: the buffer is sized once for them, so a large body is never copied
/// as its buffer doubles.
pub(crate) fn with_model<T: Serialize>(model: &str, request: &T, size_hint: usize) -> Result<Vec<u8>, ValidationError> {
    #[derive(Serialize)]
    struct WithModel<'a, T> {
        model: &'a str,
        #[serde(flatten)]
        request: &'a T,
    }
    let mut out = Vec::with_capacity(size_hint.saturating_add(4096));
    serde_json::to_writer(&mut out, &WithModel { model, request })
        .map_err(|e| ValidationError::Invalid(format!("the upstream body cannot be written: {e}")))?;
    Ok(out)
}

/// For `#[serde(default, deserialize_with = "present")]` on an optional field: absent is `None`, a value
/// is `Some`, and an explicit `null` is a wrong type (the interface's optional fields are not nullable).
pub(crate) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// `T` read only from a JSON object: serde fills a derived struct from an array too (its fields in
/// order), which the interface does not allow.
pub(crate) struct ObjectOnly<T>(pub T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ObjectOnly<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ObjectOnly<T>, D::Error> {
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for ObjectVisitor<T> {
            type Value = ObjectOnly<T>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<ObjectOnly<T>, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(ObjectOnly)
            }
        }
        d.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}

/// For `#[serde(default, deserialize_with = "present_object")]`: an optional field that, when
/// present, is an object (not `null`, not an array).
pub(crate) fn present_object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    ObjectOnly::<T>::deserialize(d).map(|o| Some(o.0))
}

/// For `#[serde(deserialize_with = "objects")]`: an array whose items are objects.
pub(crate) fn objects<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    Vec::<ObjectOnly<T>>::deserialize(d).map(|items| items.into_iter().map(|o| o.0).collect())
}

/// For `#[serde(default, deserialize_with = "present_objects")]`: an optional array of objects.
pub(crate) fn present_objects<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Vec<T>>, D::Error> {
    objects(d).map(Some)
}

/// For enums written as a plain string: serde would also take `{"<variant>": …}`.
pub(crate) fn plain<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    let text = String::deserialize(d)?;
    T::deserialize(serde::de::value::StringDeserializer::<D::Error>::new(text))
}

/// [`plain`] for an optional field (`#[serde(default, deserialize_with = "present_plain")]`).
pub(crate) fn present_plain<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    plain(d).map(Some)
}

/// The field path as the interface writes it: `audio_config.format`, `references[1].speaker`.
fn dotted(segments: &[&Segment]) -> String {
    let mut out = String::new();
    for segment in segments {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Unknown => {}
        }
    }
    out
}

/// The one mapping from a serde message at `path` to the interface's text.
pub(crate) fn shape_message(path: &Path, raw: &str) -> String {
    let raw = without_position(raw);
    let segments: Vec<&Segment> = path.iter().collect();
    let field = dotted(&segments);
    if let Some(rest) = raw.strip_prefix("unknown field `") {
        let name = rest.split('`').next().unwrap_or_default();
        let parent = dotted(segments.split_last().map_or(&[][..], |(_, parent)| parent));
        return if parent.is_empty() {
            format!("unknown field {name:?}")
        } else {
            format!("unknown field {name:?} at {parent}")
        };
    }
    if let Some(rest) = raw.strip_prefix("duplicate field `") {
        let name = rest.split('`').next().unwrap_or_default();
        let parent = dotted(segments.split_last().map_or(&[][..], |(_, parent)| parent));
        let at = if parent.is_empty() { String::new() } else { format!(" at {parent}") };
        return format!("field {name:?}{at} is given more than once");
    }
    if let Some(rest) = raw.strip_prefix("missing field `") {
        let name = rest.split('`').next().unwrap_or_default();
        return if field.is_empty() { format!("{name} is required") } else { format!("{field}.{name} is required") };
    }
    if let Some(rest) = raw.strip_prefix("unknown variant `") {
        let (given, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let names: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
        return format!("{field} must be one of {}, got {}", names.join(", "), quote(given));
    }
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = raw.strip_prefix(prefix)
            && let Some((unexpected, expected)) = rest.rsplit_once(", expected ")
        {
            return format!("{field} must be {}, got {}", expected_text(expected), unexpected_text(unexpected));
        }
    }
    match (field.is_empty(), raw.starts_with("must ")) {
        (true, _) => raw.to_owned(),
        (false, true) => format!("{field} {raw}"),
        (false, false) => format!("{field}: {raw}"),
    }
}

/// serde's name of an expected type, in the interface's words.
fn expected_text(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a non-negative integer".to_owned(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "an integer".to_owned(),
        "f32" | "f64" => "a number".to_owned(),
        "a sequence" => "an array".to_owned(),
        "a map" => "an object".to_owned(),
        other if other.starts_with("struct ") => "an object".to_owned(),
        other => other.to_owned(),
    }
}

/// serde_json's description of an unexpected value (`string "x"`, ``integer `5` ``), shortened.
fn unexpected_text(unexpected: &str) -> String {
    if let Some(text) = unexpected.strip_prefix("string ") {
        return shorten(text);
    }
    for prefix in ["integer `", "floating point `", "boolean `"] {
        if let Some(rest) = unexpected.strip_prefix(prefix) {
            return rest.trim_end_matches('`').to_owned();
        }
    }
    match unexpected {
        "map" => "an object".to_owned(),
        "sequence" => "an array".to_owned(),
        "unit value" | "null" => "null".to_owned(),
        other => other.to_owned(),
    }
}

/// `text` quoted, cut to [`ECHO_CHARS`] characters.
pub(crate) fn quote(text: &str) -> String {
    if text.chars().count() <= ECHO_CHARS {
        format!("{text:?}")
    } else {
        format!("{:?}…", text.chars().take(ECHO_CHARS).collect::<String>())
    }
}

/// An already quoted text, cut to about [`ECHO_CHARS`] characters.
fn shorten(quoted: &str) -> String {
    if quoted.chars().count() <= ECHO_CHARS + 2 {
        quoted.to_owned()
    } else {
        format!("{}\"…", quoted.chars().take(ECHO_CHARS + 1).collect::<String>())
    }
}

/// A JSON value's kind, for messages.
pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The one mapping from validator's errors to the interface's text: the first failing field (in path
/// order, so the message is stable) with its bound.
pub(crate) fn validator_message(errors: &ValidationErrors) -> String {
    let mut found = Vec::new();
    collect(errors, String::new(), &mut found);
    found.sort_by(|a, b| a.0.cmp(&b.0));
    match found.into_iter().next() {
        Some((field, error)) => field_message(&field, error),
        None => "the request is invalid".to_owned(),
    }
}

fn collect<'a>(errors: &'a ValidationErrors, prefix: String, out: &mut Vec<(String, &'a validator::ValidationError)>) {
    for (name, kind) in errors.errors() {
        let path = if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") };
        match kind {
            ValidationErrorsKind::Field(list) => out.extend(list.iter().map(|e| (path.clone(), e))),
            ValidationErrorsKind::Struct(inner) => collect(inner, path, out),
            ValidationErrorsKind::List(items) => {
                for (i, inner) in items {
                    collect(inner, format!("{path}[{i}]"), out);
                }
            }
        }
    }
}

/// A bound or value for a message: JSON numbers as written, whole floats without `.0`.
fn number_text(value: Option<&Value>) -> String {
    match value {
        Some(Value::Number(n)) => {
            let text = n.to_string();
            text.strip_suffix(".0").map_or_else(|| text.clone(), str::to_owned)
        }
        Some(other) => kind_of(other).to_owned(),
        None => "?".to_owned(),
    }
}

fn field_message(field: &str, error: &validator::ValidationError) -> String {
    let param = |name: &str| number_text(error.params.get(name));
    let value = error.params.get("value");
    match error.code.as_ref() {
        "length" => {
            let (unit, got) = match value {
                Some(Value::String(s)) => ("characters", s.chars().count()),
                Some(Value::Array(items)) => ("items", items.len()),
                _ => ("items", 0),
            };
            let verb = if unit == "items" { "have" } else { "be" };
            format!("{field} must {verb} {}..{} {unit}, got {got}", param("min"), param("max"))
        }
        "range" => format!("{field} must be from {} to {}, got {}", param("min"), param("max"), number_text(value)),
        code => format!("{field} is invalid ({code})"),
    }
}

/// A length as `u64`.
pub(crate) fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// A 400 `invalid_request` with `message`.
pub(crate) fn invalid(message: String) -> ValidationError {
    ValidationError::Invalid(message)
}
