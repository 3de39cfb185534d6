//! The typed shape of a chat completion body: every field the gateway reads, with its JSON type.
//! It is the first step of the checks (a wrong type, a missing `model`, `messages` or `content`,
//! an unknown role is refused here, with the field's path) and the source of the body's JSON
//! Schema. Fields it does not list are allowed and reach the model untouched; the values that
//! matter to the checks (bounds from the model's limits, media, sizes) are checked afterwards.

use std::fmt;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::shape::{ObjectOnly, objects, plain, present, present_object};

/// A `POST /api/v1/chat/completions` body. Additional properties are allowed (passed through).
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ChatRequest {
    /// The conversation, oldest first.
    #[serde(deserialize_with = "objects")]
    pub messages: Vec<ChatMessage>,
    /// The public model name.
    pub model: String,
    /// Answer as server-sent events.
    #[serde(default, deserialize_with = "present")]
    pub stream: Option<bool>,
    /// Stream options.
    #[serde(default, deserialize_with = "present_object")]
    pub stream_options: Option<StreamOptions>,
    /// Most output tokens (the model's limits bound it).
    #[serde(default, deserialize_with = "present")]
    pub max_tokens: Option<u64>,
    /// Most output tokens, reasoning included (the model's limits bound it); wins over `max_tokens`.
    #[serde(default, deserialize_with = "present")]
    pub max_completion_tokens: Option<u64>,
    /// Sampling temperature (the model's limits bound it; 0..2 when they do not say).
    #[serde(default, deserialize_with = "present")]
    pub temperature: Option<f64>,
    /// Nucleus sampling (the model's limits bound it; 0..1 when they do not say).
    #[serde(default, deserialize_with = "present")]
    pub top_p: Option<f64>,
    /// −2..2.
    #[serde(default, deserialize_with = "present")]
    #[schemars(range(min = -2.0, max = 2.0))]
    pub frequency_penalty: Option<f64>,
    /// −2..2.
    #[serde(default, deserialize_with = "present")]
    #[schemars(range(min = -2.0, max = 2.0))]
    pub presence_penalty: Option<f64>,
    /// Stop sequences: one string or an array of them (the model's limits bound how many).
    #[serde(default, deserialize_with = "present")]
    pub stop: Option<Stop>,
    /// Deep thinking switch (models that support it).
    #[serde(default, deserialize_with = "present_object")]
    pub thinking: Option<Thinking>,
    /// Reasoning effort (models that support it; the values are the model's).
    #[serde(default, deserialize_with = "present")]
    pub reasoning_effort: Option<String>,
    /// Tool definitions.
    #[serde(default, deserialize_with = "present")]
    pub tools: Option<Vec<Object>>,
    /// `auto`, `none`, `required`, or an object naming a tool.
    #[serde(default, deserialize_with = "present")]
    pub tool_choice: Option<ToolChoice>,
    /// Output format options.
    #[serde(default, deserialize_with = "present")]
    pub response_format: Option<Object>,
    /// How many choices to generate (1..128; each is billed, so the hold multiplies by it).
    #[serde(default, deserialize_with = "present")]
    #[schemars(range(min = 1, max = 128))]
    pub n: Option<u64>,
}

/// `stream_options`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct StreamOptions {
    /// Send a last chunk with the usage.
    #[serde(default, deserialize_with = "present")]
    pub include_usage: Option<bool>,
}

/// `thinking`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct Thinking {
    /// `enabled` or `disabled` (the model's values).
    #[serde(rename = "type")]
    pub kind: String,
}

/// A message's author.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Instructions.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// One message.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct ChatMessage {
    /// Who wrote it.
    #[serde(deserialize_with = "plain")]
    pub role: Role,
    /// Its text or content parts; `null` only in an assistant message with `tool_calls`.
    pub content: MessageContent,
    /// Tool calls the assistant made.
    #[serde(default, deserialize_with = "present")]
    pub tool_calls: Option<Vec<Object>>,
    /// The call a tool message answers.
    #[serde(default, deserialize_with = "present")]
    pub tool_call_id: Option<String>,
}

/// A message's `content` (required): text, content parts, or `null` (which the checks allow only
/// in an assistant message with `tool_calls`). The text is not kept: its size is counted from the
/// body, and the parts' fields are checked against the model's media limits afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageContent {
    /// Plain text.
    Text,
    /// Content parts.
    Parts(Vec<ContentPart>),
    /// `null`.
    Null,
}

impl<'de> Deserialize<'de> for MessageContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MessageContent, D::Error> {
        struct ContentVisitor;
        impl<'de> Visitor<'de> for ContentVisitor {
            type Value = MessageContent;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of content parts")
            }

            fn visit_str<E: de::Error>(self, _: &str) -> Result<MessageContent, E> {
                Ok(MessageContent::Text)
            }

            fn visit_unit<E: de::Error>(self) -> Result<MessageContent, E> {
                Ok(MessageContent::Null)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MessageContent, A::Error> {
                let mut parts = Vec::new();
                while let Some(part) = seq.next_element::<ObjectOnly<ContentPart>>()? {
                    parts.push(part.0);
                }
                Ok(MessageContent::Parts(parts))
            }
        }
        d.deserialize_any(ContentVisitor)
    }
}

impl JsonSchema for MessageContent {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "MessageContent".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let part = generator.subschema_for::<ContentPart>();
        schemars::json_schema!({
            "description": "Text, content parts, or null (only in an assistant message with tool_calls)",
            "anyOf": [{"type": "string"}, {"type": "array", "items": part}, {"type": "null"}],
        })
    }
}

/// One content part: an object with a `type` (`text`, `image_url`, `video_url`, `input_audio`, …);
/// its other fields are the part type's.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
pub struct ContentPart {
    /// The part's type.
    #[serde(rename = "type")]
    pub kind: String,
}

/// Stop sequences.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(untagged)]
pub enum Stop {
    /// One sequence.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl Stop {
    /// How many sequences.
    pub fn len(&self) -> usize {
        match self {
            Stop::One(_) => 1,
            Stop::Many(items) => items.len(),
        }
    }

    /// Whether there is none (an empty array).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'de> Deserialize<'de> for Stop {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Stop, D::Error> {
        struct StopVisitor;
        impl<'de> Visitor<'de> for StopVisitor {
            type Value = Stop;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of strings")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Stop, E> {
                Ok(Stop::One(v.to_owned()))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Stop, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    items.push(item);
                }
                Ok(Stop::Many(items))
            }
        }
        d.deserialize_any(StopVisitor)
    }
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(untagged)]
pub enum ToolChoice {
    /// `auto`, `none` or `required`.
    Mode(String),
    /// A tool to call.
    Named(Object),
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ToolChoice, D::Error> {
        struct ChoiceVisitor;
        impl<'de> Visitor<'de> for ChoiceVisitor {
            type Value = ToolChoice;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an object")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolChoice, E> {
                Ok(ToolChoice::Mode(v.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ToolChoice, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(ToolChoice::Named(Object))
            }
        }
        d.deserialize_any(ChoiceVisitor)
    }
}

/// A JSON object whose fields are the model's business (passed through, not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Object;

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Object, D::Error> {
        struct ObjectVisitor;
        impl<'de> Visitor<'de> for ObjectVisitor {
            type Value = Object;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Object)
            }
        }
        d.deserialize_map(ObjectVisitor)
    }
}

impl serde::Serialize for Object {
    /// An empty object: the fields were not kept (only messages name this, and they show counts).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        s.serialize_map(Some(0))?.end()
    }
}

impl JsonSchema for Object {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Object".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "object"})
    }
}
