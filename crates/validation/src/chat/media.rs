//! Media content parts of chat messages (image, video, audio): modality, item counts, inline sizes and formats.

use std::borrow::Cow;

use catalog::{LanguageLimits, ModelDef};
use serde_json::value::RawValue;

use crate::ValidationError;
use crate::media::{self as shared, Base64Rules, DataUrl, DataUrlError};
use crate::raw::{self, Field};
use crate::shape::{count, invalid};

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

/// The limits of one media kind of a model, whatever the kind.
struct KindRules<'a> {
    /// Most items of the kind per request, when bounded.
    max_items: Option<u64>,
    /// Largest inline item, decoded bytes.
    max_bytes: u64,
    /// Accepted formats, when listed.
    formats: Option<&'a [String]>,
}

/// The model's limits for media of `kind`, if it states any.
fn kind_rules(limits: &LanguageLimits, kind: MediaKind) -> Option<KindRules<'_>> {
    let media = limits.media.as_ref()?;
    match kind {
        MediaKind::Image => {
            media.image.as_ref().map(|l| KindRules { max_items: None, max_bytes: l.max_bytes, formats: None })
        }
        MediaKind::Video => media.video.as_ref().map(|l| KindRules {
            max_items: Some(l.max_items),
            max_bytes: l.max_bytes,
            formats: Some(&l.formats),
        }),
        MediaKind::Audio => media.audio.as_ref().map(|l| KindRules {
            max_items: Some(l.max_items),
            max_bytes: l.max_bytes,
            formats: Some(&l.formats),
        }),
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

/// Checks one media part at `path` (`part_type` is its `type`, `part` its members) and returns its
/// prompt-token bound.
pub(super) fn check_part(
    def: &ModelDef,
    limits: &LanguageLimits,
    path: &str,
    kind: MediaKind,
    part_type: &str,
    part: &[(Cow<'_, str>, &RawValue)],
    tally: &mut MediaTally,
) -> Result<u64, ValidationError> {
    let name = kind.name();
    let modalities: Vec<&str> =
        limits.input_modalities.as_ref().map_or_else(|| vec!["text"], |list| list.iter().map(String::as_str).collect());
    if !modalities.contains(&name) {
        return Err(invalid(format!(
            "{path}: {name} input is not supported by model {}, which accepts {}",
            def.name,
            modalities.join(", ")
        )));
    }
    let rules = kind_rules(limits, kind);
    let seen = tally.add(kind);
    if let Some(max) = rules.as_ref().and_then(|r| r.max_items)
        && seen > max
    {
        return Err(invalid(format!("{path}: messages may carry at most {max} {name} items for model {}", def.name)));
    }
    let (source, format) = locate(path, part_type, part)?;
    let payload = payload(path, part_type, &source)?;
    if let Some(rules) = &rules {
        check_payload(path, kind, rules, &payload)?;
        check_format(path, kind, rules, &payload, format.as_deref())?;
    }
    Ok(item_tokens(limits, kind))
}

/// Finds the source (a URL, a data URL or bare base64; borrowed from the body unless it has
/// escapes) and the declared `format` of a media part.
fn locate<'a>(
    path: &str,
    part_type: &str,
    part: &[(Cow<'a, str>, &'a RawValue)],
) -> Result<(Cow<'a, str>, Option<Cow<'a, str>>), ValidationError> {
    let inner_key = if part_type == "input_audio" { "data" } else { "url" };
    let value = raw::last(part, part_type);
    // An object is read for its members only; anything else once, as a string or not.
    let (text, inner) = match value.and_then(raw::members) {
        Some(inner) => (Field::Missing, Some(inner)),
        None => (raw::field(value), None),
    };
    let (source, format) = match (text, inner) {
        (Field::Str(s), _) if part_type != "input_audio" => (s, None),
        (_, Some(inner)) => {
            let Field::Str(source) = raw::field(raw::last(&inner, inner_key)) else {
                return Err(invalid(format!("{path}.{part_type}.{inner_key} must be a string")));
            };
            let format = match raw::field(raw::last(&inner, "format")) {
                Field::Missing => None,
                Field::Str(f) => Some(f),
                other => {
                    return Err(invalid(format!(
                        "{path}.{part_type}.format must be a string, got {}",
                        other.describe()
                    )));
                }
            };
            (source, format)
        }
        _ => return Err(invalid(format!("{path}.{part_type} must be an object with a string {inner_key}"))),
    };
    if source.is_empty() {
        return Err(invalid(format!("{path}.{part_type}.{inner_key} must not be empty")));
    }
    Ok((source, format))
}

/// Where the bytes of `source` are.
fn payload<'a>(path: &str, part_type: &str, source: &'a str) -> Result<Payload<'a>, ValidationError> {
    Ok(match shared::strip_data_scheme(source) {
        Some(rest) => match shared::parse_data_url(rest) {
            Ok(DataUrl { mime, base64, data }) => Payload::DataUrl { mime, base64, data },
            Err(DataUrlError::NoComma) => {
                return Err(invalid(format!("{path}: the data URL has no comma before its data")));
            }
        },
        None if part_type == "input_audio" => Payload::Base64(source),
        None => Payload::Url,
    })
}

/// Checks the decoded size of inline data against `max_bytes`, and a data URL's MIME type against the kind.
fn check_payload(
    path: &str,
    kind: MediaKind,
    rules: &KindRules<'_>,
    payload: &Payload<'_>,
) -> Result<(), ValidationError> {
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
    let max = rules.max_bytes;
    if size > max {
        return Err(ValidationError::TooLarge(format!(
            "{path}: inline {name} data is {size} bytes decoded, above the limit of {max} bytes"
        )));
    }
    Ok(())
}

/// The decoded size of base64 `data` (chat reads it leniently: both alphabets, padding and whitespace
/// anywhere, not counted).
fn decoded_len(path: &str, data: &str) -> Result<u64, ValidationError> {
    shared::decoded_len(data, Base64Rules::Lenient)
        .ok_or_else(|| invalid(format!("{path}: the inline data is not valid base64")))
}

/// Checks the format named by a data URL's MIME type and by a `format` field against the model's formats.
fn check_format(
    path: &str,
    kind: MediaKind,
    rules: &KindRules<'_>,
    payload: &Payload<'_>,
    format: Option<&str>,
) -> Result<(), ValidationError> {
    let Some(formats) = rules.formats else { return Ok(()) };
    let formats: Vec<&str> = formats.iter().map(String::as_str).collect();
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
fn item_tokens(limits: &LanguageLimits, kind: MediaKind) -> u64 {
    match kind {
        MediaKind::Image => limits
            .media
            .as_ref()
            .and_then(|m| m.image.as_ref())
            .map_or(DEFAULT_MAX_PIXELS, |image| image.max_pixels)
            .div_ceil(PIXELS_PER_IMAGE_TOKEN),
        MediaKind::Video | MediaKind::Audio => limits.input_window().unwrap_or(DEFAULT_TIMED_ITEM_TOKENS),
    }
}
