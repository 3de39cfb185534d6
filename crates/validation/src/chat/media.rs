//! Media content parts of chat messages (image, video, audio): modality, item counts, inline sizes and formats.

use catalog::ModelDef;
use serde_json::{Map, Value};

use super::{count, describe, invalid};
use crate::ValidationError;

/// The largest image the interface allows, in pixels, when the model's limits state none.
const DEFAULT_MAX_PIXELS: u64 = 36_000_000;
/// Pixels per image token in the prompt bound: one token per 14×14 patch, finer than any known vision encoder.
const PIXELS_PER_IMAGE_TOKEN: u64 = 14 * 14;
/// The per-item bound of a video or audio item when the model states no input window.
const DEFAULT_TIMED_ITEM_TOKENS: u64 = 1_048_576;

/// The kind of a media content part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MediaKind {
    /// `image_url` parts.
    Image,
    /// `video_url` parts.
    Video,
    /// `input_audio` and `audio_url` parts.
    Audio,
}

impl MediaKind {
    /// The media kind of a content part `type`, or `None` for text and other parts.
    pub(super) fn of_part_type(part_type: &str) -> Option<MediaKind> {
        match part_type {
            "image_url" => Some(MediaKind::Image),
            "video_url" => Some(MediaKind::Video),
            "input_audio" | "audio_url" => Some(MediaKind::Audio),
            _ => None,
        }
    }

    /// The name used in `input_modalities`, `media` and MIME types.
    const fn name(self) -> &'static str {
        match self {
            MediaKind::Image => "image",
            MediaKind::Video => "video",
            MediaKind::Audio => "audio",
        }
    }

    const fn index(self) -> usize {
        match self {
            MediaKind::Image => 0,
            MediaKind::Video => 1,
            MediaKind::Audio => 2,
        }
    }
}

/// Media items seen so far in one request, by kind.
#[derive(Debug, Default)]
pub(super) struct MediaTally {
    counts: [u64; 3],
}

impl MediaTally {
    /// Whether any audio item was seen.
    pub(super) fn has_audio(&self) -> bool {
        self.counts[MediaKind::Audio.index()] > 0
    }

    fn add(&mut self, kind: MediaKind) -> u64 {
        let slot = &mut self.counts[kind.index()];
        *slot = slot.saturating_add(1);
        *slot
    }
}

/// Where a media item's bytes are.
enum Payload<'a> {
    /// A link the upstream fetches; its size is not known here.
    Url,
    /// A `data:` URL: its MIME type, whether it is base64, and the data after the comma.
    DataUrl { mime: &'a str, base64: bool, data: &'a str },
    /// Bare base64 (`input_audio.data` without a `data:` prefix).
    Base64(&'a str),
}

/// Checks one media part at `path` (`part_type` is its `type`) and returns its prompt-token bound.
pub(super) fn check_part(
    def: &ModelDef,
    path: &str,
    kind: MediaKind,
    part_type: &str,
    part: &Map<String, Value>,
    tally: &mut MediaTally,
) -> Result<u64, ValidationError> {
    let name = kind.name();
    let modalities: Vec<&str> = def
        .limits
        .get("input_modalities")
        .and_then(Value::as_array)
        .map_or_else(|| vec!["text"], |list| list.iter().filter_map(Value::as_str).collect());
    if !modalities.contains(&name) {
        return Err(invalid(format!(
            "{path}: {name} input is not supported by model {}, which accepts {}",
            def.name,
            modalities.join(", ")
        )));
    }
    let limits = def.limits.pointer(&format!("/media/{name}"));
    let seen = tally.add(kind);
    if let Some(max) = limits.and_then(|l| l.get("max_items")).and_then(Value::as_u64)
        && seen > max
    {
        return Err(invalid(format!("{path}: messages may carry at most {max} {name} items for model {}", def.name)));
    }
    let (payload, format) = locate(path, part_type, part)?;
    if let Some(limits) = limits {
        check_payload(path, kind, limits, &payload)?;
        check_format(path, kind, limits, &payload, format)?;
    }
    Ok(item_tokens(def, kind))
}

/// Finds the payload and the declared `format` of a media part.
fn locate<'a>(
    path: &str,
    part_type: &str,
    part: &'a Map<String, Value>,
) -> Result<(Payload<'a>, Option<&'a str>), ValidationError> {
    let inner_key = if part_type == "input_audio" { "data" } else { "url" };
    let (source, format) = match part.get(part_type) {
        Some(Value::String(s)) if part_type != "input_audio" => (s.as_str(), None),
        Some(Value::Object(inner)) => {
            let Some(Value::String(source)) = inner.get(inner_key) else {
                return Err(invalid(format!("{path}.{part_type}.{inner_key} must be a string")));
            };
            let format = match inner.get("format") {
                None => None,
                Some(Value::String(f)) => Some(f.as_str()),
                Some(other) => {
                    return Err(invalid(format!(
                        "{path}.{part_type}.format must be a string, got {}",
                        describe(other)
                    )));
                }
            };
            (source.as_str(), format)
        }
        _ => return Err(invalid(format!("{path}.{part_type} must be an object with a string {inner_key}"))),
    };
    if source.is_empty() {
        return Err(invalid(format!("{path}.{part_type}.{inner_key} must not be empty")));
    }
    let payload = match source.get(..5) {
        Some(prefix) if prefix.eq_ignore_ascii_case("data:") => parse_data_url(path, &source[5..])?,
        _ if part_type == "input_audio" => Payload::Base64(source),
        _ => Payload::Url,
    };
    Ok((payload, format))
}

/// Parses the part of a `data:` URL after the scheme: `<mime>[;param…][;base64],<data>`.
fn parse_data_url<'a>(path: &str, rest: &'a str) -> Result<Payload<'a>, ValidationError> {
    let Some((header, data)) = rest.split_once(',') else {
        return Err(invalid(format!("{path}: the data URL has no comma before its data")));
    };
    let mut params = header.split(';');
    let mime = params.next().unwrap_or_default().trim();
    let base64 = params.next_back().is_some_and(|p| p.trim().eq_ignore_ascii_case("base64"));
    Ok(Payload::DataUrl { mime, base64, data })
}

/// Checks the decoded size of inline data against `limits.max_bytes`, and a data URL's MIME type against the kind.
fn check_payload(path: &str, kind: MediaKind, limits: &Value, payload: &Payload<'_>) -> Result<(), ValidationError> {
    let name = kind.name();
    let size = match payload {
        Payload::Url => return Ok(()),
        Payload::DataUrl { mime, base64, data } => {
            let top = mime.split('/').next().unwrap_or_default();
            if !mime.is_empty() && !top.eq_ignore_ascii_case(name) {
                return Err(invalid(format!("{path}: data URL type {mime:?} is not of type {name}/*")));
            }
            if *base64 { decoded_len(path, data)? } else { count(data.len()) }
        }
        Payload::Base64(data) => decoded_len(path, data)?,
    };
    match limits.get("max_bytes").and_then(Value::as_u64) {
        Some(max) if size > max => Err(ValidationError::TooLarge(format!(
            "{path}: inline {name} data is {size} bytes decoded, above the limit of {max} bytes"
        ))),
        _ => Ok(()),
    }
}

/// The decoded size of base64 `data`, from its length: three bytes per four symbols; padding and
/// whitespace do not count. Any other character makes the data invalid.
fn decoded_len(path: &str, data: &str) -> Result<u64, ValidationError> {
    let mut symbols = 0u64;
    for b in data.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'-' | b'_') {
            symbols += 1;
        } else if b != b'=' && !b.is_ascii_whitespace() {
            return Err(invalid(format!("{path}: the inline data is not valid base64")));
        }
    }
    Ok(symbols / 4 * 3 + (symbols % 4) * 3 / 4)
}

/// Checks the format named by a data URL's MIME type and by a `format` field against `limits.formats`.
fn check_format(
    path: &str,
    kind: MediaKind,
    limits: &Value,
    payload: &Payload<'_>,
    format: Option<&str>,
) -> Result<(), ValidationError> {
    let Some(formats) = limits.get("formats").and_then(Value::as_array) else { return Ok(()) };
    let formats: Vec<&str> = formats.iter().filter_map(Value::as_str).collect();
    let from_mime = match payload {
        Payload::DataUrl { mime, .. } => mime.split_once('/').map(|(_, sub)| format_of_subtype(kind, sub)),
        _ => None,
    };
    for named in [from_mime, format].into_iter().flatten() {
        if !formats.iter().any(|f| f.eq_ignore_ascii_case(named)) {
            return Err(invalid(format!(
                "{path}: {} format {named:?} is not supported; use one of {}",
                kind.name(),
                formats.join(", ")
            )));
        }
    }
    Ok(())
}

/// The format name of a MIME subtype (`quicktime` is `mov`, `mpeg` audio is `mp3`, …).
fn format_of_subtype(kind: MediaKind, subtype: &str) -> &str {
    let lower = subtype.trim().to_ascii_lowercase();
    let known = match (kind, lower.as_str()) {
        (MediaKind::Video, "quicktime") => "mov",
        (MediaKind::Video, "x-msvideo" | "msvideo" | "x-avi" | "avi") => "avi",
        (MediaKind::Audio, "mpeg" | "mpeg3" | "x-mpeg" | "x-mp3" | "mp3") => "mp3",
        (MediaKind::Audio, "x-wav" | "wave" | "vnd.wave" | "wav") => "wav",
        (MediaKind::Audio, "x-aac" | "aac") => "aac",
        (MediaKind::Audio, "x-flac" | "flac") => "flac",
        (MediaKind::Audio, "mp4" | "x-m4a" | "m4a") => "m4a",
        _ => "",
    };
    if known.is_empty() { subtype.trim() } else { known }
}

/// The prompt-token bound of one item: an image counts one token per 14×14 patch of the model's largest
/// image; a video or audio item counts the whole input window, since its duration is not read here.
fn item_tokens(def: &ModelDef, kind: MediaKind) -> u64 {
    match kind {
        MediaKind::Image => def
            .limits
            .pointer("/media/image/max_pixels")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_MAX_PIXELS)
            .div_ceil(PIXELS_PER_IMAGE_TOKEN),
        MediaKind::Video | MediaKind::Audio => ["max_input_tokens", "context_window"]
            .iter()
            .find_map(|key| def.limits.get(*key).and_then(Value::as_u64))
            .unwrap_or(DEFAULT_TIMED_ITEM_TOKENS),
    }
}
