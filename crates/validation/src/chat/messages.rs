//! The `messages` array of a chat request: count, roles, content shapes, and the prompt size they imply.

use std::borrow::Cow;

use catalog::{LanguageLimits, ModelDef};
use serde_json::value::RawValue;

use super::media::{self, MediaKind, MediaTally};
use super::request::{ChatMessage, MessageContent, Role};
use crate::ValidationError;
use crate::raw::{self, RawBody, entry_size, json_size};
use crate::shape::{count, invalid};

/// What the messages contribute to the plan.
pub(super) struct Messages {
    /// Upper bound of the tokens the messages count as (text bytes plus per-media-item bounds).
    pub prompt_tokens: u64,
    /// Whether any content part is audio.
    pub has_audio: bool,
}

/// Checks the messages (already read as `typed`, the same array as `body["messages"]`): their count
/// against `limits.messages.min..=max`, the `null` content rule, and each content part against the
/// model's media limits; returns their size bound. The raw messages are read one at a time.
pub(super) fn check(
    def: &ModelDef,
    limits: &LanguageLimits,
    typed: &[ChatMessage],
    body: &RawBody<'_>,
) -> Result<Messages, ValidationError> {
    let (min, max) = (limits.messages.min, limits.messages.max);
    let n = count(typed.len());
    if !(min..=max).contains(&n) {
        return Err(invalid(format!("messages must have {min} to {max} items, got {n}")));
    }
    let items = body.get("messages").and_then(raw::items).unwrap_or_default();
    let mut tally = MediaTally::default();
    let mut prompt_tokens = 2u64;
    for (i, (message, item)) in typed.iter().zip(items).enumerate() {
        // The typed read already refused a message that is not an object.
        let Some(object) = raw::members(item) else { continue };
        let size = check_message(def, limits, i, message, &object, &mut tally)?;
        prompt_tokens = prompt_tokens.saturating_add(size).saturating_add(1);
    }
    Ok(Messages { prompt_tokens, has_audio: tally.has_audio() })
}

/// Checks one message (typed as `message`, raw as its members `object`) and returns its size bound
/// in tokens.
fn check_message(
    def: &ModelDef,
    limits: &LanguageLimits,
    i: usize,
    message: &ChatMessage,
    object: &[(Cow<'_, str>, &RawValue)],
    tally: &mut MediaTally,
) -> Result<u64, ValidationError> {
    let has_tool_calls = message.tool_calls.as_ref().is_some_and(|calls| !calls.is_empty());
    if message.content == MessageContent::Null && !(message.role == Role::Assistant && has_tool_calls) {
        return Err(invalid(format!(
            "messages[{i}].content must be a string or an array of content parts \
             (null only in an assistant message with tool_calls), got null"
        )));
    }
    let mut size = 2u64;
    for (key, value) in object {
        let parts = if key == "content" { raw::items(value) } else { None };
        let entry = match parts {
            Some(parts) => {
                count(key.len()).saturating_add(4).saturating_add(check_parts(def, limits, i, &parts, tally)?)
            }
            None => entry_size(key, value),
        };
        size = size.saturating_add(entry);
    }
    Ok(size)
}

/// Checks the content parts of message `i` (objects with a string `type`, as read already) and
/// returns their size bound in tokens.
fn check_parts(
    def: &ModelDef,
    limits: &LanguageLimits,
    i: usize,
    parts: &[&RawValue],
    tally: &mut MediaTally,
) -> Result<u64, ValidationError> {
    let mut size = 2u64;
    for (j, part) in parts.iter().enumerate() {
        // The typed read already refused a part that is not an object with a string `type`.
        let Some(object) = raw::members(part) else { continue };
        let raw::Field::Str(kind) = raw::field(raw::last(&object, "type")) else { continue };
        let part_size = match MediaKind::of_part_type(&kind) {
            Some(media_kind) => {
                let path = format!("messages[{i}].content[{j}]");
                media::check_part(def, limits, &path, media_kind, &kind, &object, tally)?
            }
            None => json_size(part),
        };
        size = size.saturating_add(part_size).saturating_add(1);
    }
    Ok(size)
}
