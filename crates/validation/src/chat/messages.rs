//! The `messages` array of a chat request: count, roles, content shapes, and the prompt size they imply.

use catalog::{LanguageLimits, ModelDef};
use serde_json::{Map, Value};

use super::media::{self, MediaKind, MediaTally};
use super::{ROLES, count, describe, entry_size, invalid, json_size};
use crate::ValidationError;

/// What the messages contribute to the plan.
pub(super) struct Messages {
    /// Upper bound of the tokens the messages count as (text bytes plus per-media-item bounds).
    pub prompt_tokens: u64,
    /// Whether any content part is audio.
    pub has_audio: bool,
}

/// Checks `body["messages"]`: an array of `limits.messages.min..=max` message objects.
pub(super) fn check(
    def: &ModelDef,
    limits: &LanguageLimits,
    body: &Map<String, Value>,
) -> Result<Messages, ValidationError> {
    let Some(value) = body.get("messages") else {
        return Err(invalid("messages is required".to_owned()));
    };
    let Value::Array(items) = value else {
        return Err(invalid(format!("messages must be an array, got {}", describe(value))));
    };
    let (min, max) = (limits.messages.min, limits.messages.max);
    let n = count(items.len());
    if !(min..=max).contains(&n) {
        return Err(invalid(format!("messages must have {min} to {max} items, got {n}")));
    }
    let mut tally = MediaTally::default();
    let mut prompt_tokens = 2u64;
    for (i, item) in items.iter().enumerate() {
        let size = check_message(def, limits, i, item, &mut tally)?;
        prompt_tokens = prompt_tokens.saturating_add(size).saturating_add(1);
    }
    Ok(Messages { prompt_tokens, has_audio: tally.has_audio() })
}

/// Checks one message and returns its size bound in tokens.
fn check_message(
    def: &ModelDef,
    limits: &LanguageLimits,
    i: usize,
    item: &Value,
    tally: &mut MediaTally,
) -> Result<u64, ValidationError> {
    let Value::Object(message) = item else {
        return Err(invalid(format!("messages[{i}] must be an object, got {}", describe(item))));
    };
    let role = match message.get("role") {
        Some(Value::String(role)) if ROLES.contains(&role.as_str()) => role.as_str(),
        other => {
            return Err(invalid(format!(
                "messages[{i}].role must be one of {}, got {}",
                ROLES.join(", "),
                other.map_or_else(|| "nothing".to_owned(), describe)
            )));
        }
    };
    let has_tool_calls = match message.get("tool_calls") {
        None => false,
        Some(Value::Array(calls)) => {
            if let Some(j) = calls.iter().position(|c| !c.is_object()) {
                return Err(invalid(format!("messages[{i}].tool_calls[{j}] must be an object")));
            }
            !calls.is_empty()
        }
        Some(other) => {
            return Err(invalid(format!("messages[{i}].tool_calls must be an array, got {}", describe(other))));
        }
    };
    match message.get("tool_call_id") {
        None | Some(Value::String(_)) => {}
        Some(other) => {
            return Err(invalid(format!("messages[{i}].tool_call_id must be a string, got {}", describe(other))));
        }
    }
    let mut size = 2u64;
    for (key, value) in message {
        let entry = match (key.as_str(), value) {
            ("content", Value::Array(parts)) => {
                count(key.len()).saturating_add(4).saturating_add(check_parts(def, limits, i, parts, tally)?)
            }
            ("content", Value::String(_)) => entry_size(key, value),
            ("content", Value::Null) if role == "assistant" && has_tool_calls => entry_size(key, value),
            ("content", other) => return Err(content_error(i, other)),
            _ => entry_size(key, value),
        };
        size = size.saturating_add(entry);
    }
    if !message.contains_key("content") {
        return Err(invalid(format!("messages[{i}].content is required")));
    }
    Ok(size)
}

fn content_error(i: usize, value: &Value) -> ValidationError {
    invalid(format!(
        "messages[{i}].content must be a string or an array of content parts \
         (null only in an assistant message with tool_calls), got {}",
        describe(value)
    ))
}

/// Checks the content parts of message `i` and returns their size bound in tokens.
fn check_parts(
    def: &ModelDef,
    limits: &LanguageLimits,
    i: usize,
    parts: &[Value],
    tally: &mut MediaTally,
) -> Result<u64, ValidationError> {
    let mut size = 2u64;
    for (j, part) in parts.iter().enumerate() {
        let path = format!("messages[{i}].content[{j}]");
        let Value::Object(object) = part else {
            return Err(invalid(format!("{path} must be an object, got {}", describe(part))));
        };
        let Some(Value::String(kind)) = object.get("type") else {
            return Err(invalid(format!("{path}.type must be a string")));
        };
        let part_size = match MediaKind::of_part_type(kind) {
            Some(media_kind) => media::check_part(def, limits, &path, media_kind, kind, object, tally)?,
            None => json_size(part),
        };
        size = size.saturating_add(part_size).saturating_add(1);
    }
    Ok(size)
}
