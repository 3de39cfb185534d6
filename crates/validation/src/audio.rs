//! `POST /api/v1/audio/generations`: the typed request (the single place its shape lives), its checks and
//! the plan the service reserves and calls upstream with.
//!
//! Fixed bounds of the interface sit on the types through `validator` (`text_prompt` 1..3000 characters,
//! `references` 1..3 items, the `audio_config` ranges); the reference rules (exactly one field per
//! reference, the audio/image composition, Base64 sizes, https links) are checked by hand against the
//! model's typed catalog limits.

use std::borrow::Cow;

use catalog::{AudioLimits, ModelDef};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize, Serializer};
use validator::Validate;

use crate::ValidationError;
use crate::media::{self, Base64Rules};
use crate::shape::{self, RawObject, present, present_object, present_objects, present_plain, present_text};

/// Fewest characters of `text_prompt`.
pub const TEXT_PROMPT_MIN_CHARS: u64 = 1;
/// Most characters of `text_prompt`.
pub const TEXT_PROMPT_MAX_CHARS: u64 = 3000;
/// Most `references`.
pub const MAX_REFERENCES: u64 = 3;
/// `speech_rate` and `loudness_rate` range.
pub const RATE_RANGE: (i64, i64) = (-50, 100);
/// `pitch_rate` range.
pub const PITCH_RANGE: (i64, i64) = (-12, 12);

// The ranges as the field type, for `validator`.
const RATE_MIN: f64 = RATE_RANGE.0 as f64;
const RATE_MAX: f64 = RATE_RANGE.1 as f64;
const PITCH_MIN: f64 = PITCH_RANGE.0 as f64;
const PITCH_MAX: f64 = PITCH_RANGE.1 as f64;

/// The reference fields, exactly one of which each reference carries, in the interface's order.
pub const REFERENCE_FIELDS: [&str; 5] = ["speaker", "audio_data", "audio_url", "image_data", "image_url"];

/// A `POST /api/v1/audio/generations` body. No additional properties anywhere except inside `watermark`.
///
/// Base64 references and the watermark object borrow from the body they were read from, so a large
/// request costs its body and the upstream body written from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Validate, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AudioRequest<'a> {
    /// The public model name; not sent upstream (see [`AudioPlan::upstream_body`]).
    #[serde(skip_serializing)]
    pub model: String,
    /// The text to speak, 1..3000 characters.
    #[validate(length(min = TEXT_PROMPT_MIN_CHARS, max = TEXT_PROMPT_MAX_CHARS))]
    pub text_prompt: String,
    /// Voice, audio or image references, 1..3 items.
    #[serde(default, deserialize_with = "present_objects", skip_serializing_if = "Option::is_none")]
    #[validate(length(min = 1, max = MAX_REFERENCES))]
    #[serde(borrow)]
    pub references: Option<Vec<AudioReference<'a>>>,
    /// Output settings.
    #[serde(default, deserialize_with = "present_object", skip_serializing_if = "Option::is_none")]
    #[validate(nested)]
    pub audio_config: Option<AudioConfig>,
    /// Watermark settings, an open object passed through as it was written.
    #[serde(default, borrow, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub watermark: Option<RawObject<'a>>,
}

/// One reference: exactly one field is set (checked by [`check_audio_request`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Validate, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AudioReference<'a> {
    /// An upstream speaker id.
    #[serde(default, borrow, deserialize_with = "present_text", skip_serializing_if = "Option::is_none")]
    pub speaker: Option<Cow<'a, str>>,
    /// Raw Base64 audio or a `data:audio/…;base64,` URI (sent upstream as raw Base64).
    #[serde(default, borrow, deserialize_with = "present_text", skip_serializing_if = "Option::is_none")]
    pub audio_data: Option<Cow<'a, str>>,
    /// An https link to audio.
    #[serde(default, borrow, deserialize_with = "present_text", skip_serializing_if = "Option::is_none")]
    pub audio_url: Option<Cow<'a, str>>,
    /// Raw Base64 image or a `data:image/…;base64,` URI (sent upstream as raw Base64).
    #[serde(default, borrow, deserialize_with = "present_text", skip_serializing_if = "Option::is_none")]
    pub image_data: Option<Cow<'a, str>>,
    /// An https link to an image.
    #[serde(default, borrow, deserialize_with = "present_text", skip_serializing_if = "Option::is_none")]
    pub image_url: Option<Cow<'a, str>>,
}

impl AudioReference<'_> {
    /// Bytes of text the reference carries.
    fn text_len(&self) -> usize {
        [&self.speaker, &self.audio_data, &self.audio_url, &self.image_data, &self.image_url]
            .into_iter()
            .flatten()
            .map(|t| t.len())
            .sum()
    }

    /// The same reference, owning its text.
    pub fn into_owned(self) -> AudioReference<'static> {
        let own = |v: Option<Cow<'_, str>>| v.map(|v| Cow::Owned(v.into_owned()));
        AudioReference {
            speaker: own(self.speaker),
            audio_data: own(self.audio_data),
            audio_url: own(self.audio_url),
            image_data: own(self.image_data),
            image_url: own(self.image_url),
        }
    }
}

impl AudioRequest<'_> {
    /// The same request, owning its text (no longer tied to the body it was read from).
    pub fn into_owned(self) -> AudioRequest<'static> {
        AudioRequest {
            model: self.model,
            text_prompt: self.text_prompt,
            references: self.references.map(|r| r.into_iter().map(AudioReference::into_owned).collect()),
            audio_config: self.audio_config,
            watermark: self.watermark.map(RawObject::into_owned),
        }
    }
}

/// `audio_config`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, Validate, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AudioConfig {
    /// Container and codec; default `wav`.
    #[serde(default, deserialize_with = "present_plain", skip_serializing_if = "Option::is_none")]
    pub format: Option<AudioFormat>,
    /// Sample rate in Hz.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub sample_rate: Option<SampleRate>,
    /// Speaking speed, −50..100.
    #[serde(default, deserialize_with = "present", serialize_with = "whole", skip_serializing_if = "Option::is_none")]
    #[validate(range(min = RATE_MIN, max = RATE_MAX))]
    pub speech_rate: Option<f64>,
    /// Loudness, −50..100.
    #[serde(default, deserialize_with = "present", serialize_with = "whole", skip_serializing_if = "Option::is_none")]
    #[validate(range(min = RATE_MIN, max = RATE_MAX))]
    pub loudness_rate: Option<f64>,
    /// Pitch, −12..12.
    #[serde(default, deserialize_with = "present", serialize_with = "whole", skip_serializing_if = "Option::is_none")]
    #[validate(range(min = PITCH_MIN, max = PITCH_MAX))]
    pub pitch_rate: Option<f64>,
    /// Whether upstream returns subtitles; default false.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub enable_subtitle: Option<bool>,
}

/// `audio_config.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AudioFormat {
    /// WAV.
    Wav,
    /// MP3.
    Mp3,
    /// Raw PCM samples.
    Pcm,
    /// Opus in Ogg.
    OggOpus,
}

impl AudioFormat {
    /// Every value, in the interface's order.
    pub const ALL: [AudioFormat; 4] = [AudioFormat::Wav, AudioFormat::Mp3, AudioFormat::Pcm, AudioFormat::OggOpus];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            AudioFormat::Wav => "wav",
            AudioFormat::Mp3 => "mp3",
            AudioFormat::Pcm => "pcm",
            AudioFormat::OggOpus => "ogg_opus",
        }
    }

    /// The media type of audio in this format; `None` for raw PCM, which has no container.
    pub const fn media_type(self) -> Option<&'static str> {
        match self {
            AudioFormat::Wav => Some("audio/wav"),
            AudioFormat::Mp3 => Some("audio/mpeg"),
            AudioFormat::Pcm => None,
            AudioFormat::OggOpus => Some("audio/ogg"),
        }
    }
}

/// `audio_config.sample_rate`: one of the interface's rates, written as a JSON integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct SampleRate(u64);

impl SampleRate {
    /// The accepted rates in Hz.
    pub const ALL: [u64; 6] = [8000, 16000, 24000, 32000, 44100, 48000];

    /// The rate in Hz.
    pub const fn hz(self) -> u64 {
        self.0
    }
}

impl JsonSchema for SampleRate {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SampleRate".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "integer", "enum": SampleRate::ALL})
    }
}

impl TryFrom<u64> for SampleRate {
    type Error = String;

    fn try_from(hz: u64) -> Result<SampleRate, String> {
        if SampleRate::ALL.contains(&hz) {
            Ok(SampleRate(hz))
        } else {
            let all: Vec<String> = SampleRate::ALL.iter().map(ToString::to_string).collect();
            Err(format!("must be one of {}, got {hz}", all.join(", ")))
        }
    }
}

impl From<SampleRate> for u64 {
    fn from(rate: SampleRate) -> u64 {
        rate.0
    }
}

/// Writes a whole number without a fraction (`0`, not `0.0`), as clients and the upstream write rates.
fn whole<S: Serializer>(value: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => s.serialize_i64(*x as i64),
        Some(x) => s.serialize_f64(*x),
        None => s.serialize_none(),
    }
}

/// What the service needs for a valid audio request.
#[derive(Debug, Clone, PartialEq)]
pub struct AudioPlan<'a> {
    /// The request with defaults applied (`audio_config.format`, `enable_subtitle`) and `data:` prefixes
    /// removed from Base64 references.
    pub request: AudioRequest<'a>,
    /// Seconds to reserve up front (the model's `reserve_seconds`).
    pub reserve_seconds: u64,
    /// Most seconds a call is billed (the model's `max_billed_seconds`).
    pub max_billed_seconds: u64,
    /// How the reference media arrives, in the Task schema's words: `url` (links only), `base64`
    /// (inline data only), `mixed`, or `text` (no references, or only speaker ids, which are not media).
    pub input_mode: domain::InputMode,
    /// The kind of the reference media, in the Task schema's words: `audio` (`audio_data` / `audio_url`),
    /// `image` (one image reference), `None` without media references (text only, or speakers only).
    pub media_type: Option<domain::MediaType>,
}

impl AudioPlan<'_> {
    /// The same plan, owning its text.
    pub fn into_owned(self) -> AudioPlan<'static> {
        AudioPlan {
            request: self.request.into_owned(),
            reserve_seconds: self.reserve_seconds,
            max_billed_seconds: self.max_billed_seconds,
            input_mode: self.input_mode,
            media_type: self.media_type,
        }
    }

    /// The body sent upstream: the normalised request with `model` set to `upstream_model_id`.
    pub fn upstream_body(&self, upstream_model_id: &str) -> Result<Vec<u8>, ValidationError> {
        let request = &self.request;
        let references: usize = request.references.iter().flatten().map(AudioReference::text_len).sum();
        let watermark = request.watermark.as_ref().map_or(0, |w| w.get().len());
        shape::with_model(upstream_model_id, request, references + watermark + request.text_prompt.len())
    }
}

/// Reads an audio request body: JSON syntax, types, unknown fields and enum values. Bounds and
/// reference rules are [`check_audio_request`]'s.
pub fn parse_audio_request(body: &[u8]) -> Result<AudioRequest<'_>, ValidationError> {
    shape::parse_body(body)
}

/// Checks `req` against the interface's fixed bounds and model `def`'s limits, applies the defaults and
/// returns the plan. Base64 items above the model's `max_base64_bytes` are `TooLarge` (413).
pub fn check_audio_request<'a>(def: &ModelDef, mut req: AudioRequest<'a>) -> Result<AudioPlan<'a>, ValidationError> {
    let Some(limits) = def.audio_limits() else {
        return Err(ValidationError::Invalid(format!("model {} is not an audio model", def.name)));
    };
    if req.model != def.name {
        return Err(ValidationError::Invalid(format!("model must be {}, got {}", def.name, shape::quote(&req.model))));
    }
    req.validate().map_err(|e| ValidationError::Invalid(shape::validator_message(&e)))?;
    let media = match req.references.as_mut() {
        Some(references) => check_references(limits, references)?,
        None => ReferenceMedia::default(),
    };
    let config = req.audio_config.get_or_insert_with(AudioConfig::default);
    let format = match config.format {
        Some(format) => format,
        None => find(&AudioFormat::ALL, |f| f.as_str() == limits.default_format, "default_format", def)?,
    };
    check_listed("audio_config.format", format.as_str(), &limits.formats, def)?;
    if let Some(rate) = config.sample_rate
        && !limits.sample_rates.contains(&rate.hz())
    {
        return Err(ValidationError::Invalid(format!("audio_config.sample_rate {} is not offered", rate.hz())));
    }
    config.format = Some(format);
    config.enable_subtitle.get_or_insert(limits.enable_subtitle_default);
    Ok(AudioPlan {
        reserve_seconds: limits.reserve_seconds,
        max_billed_seconds: limits.max_billed_seconds,
        input_mode: media.input_mode(),
        media_type: media.media_type(),
        request: req,
    })
}

/// The reference's one field: its name and value.
fn only_field<'r, 'a>(
    i: usize,
    reference: &'r mut AudioReference<'a>,
) -> Result<(&'static str, &'r mut Cow<'a, str>), ValidationError> {
    let AudioReference { speaker, audio_data, audio_url, image_data, image_url } = reference;
    let mut set: Vec<(&'static str, &mut Cow<'a, str>)> = REFERENCE_FIELDS
        .into_iter()
        .zip([speaker, audio_data, audio_url, image_data, image_url])
        .filter_map(|(name, slot)| slot.as_mut().map(|value| (name, value)))
        .collect();
    if set.len() == 1
        && let Some(only) = set.pop()
    {
        return Ok(only);
    }
    let names: Vec<&str> = set.iter().map(|(name, _)| *name).collect();
    Err(ValidationError::Invalid(format!(
        "references[{i}] must have exactly one of {}; got {}",
        REFERENCE_FIELDS.join(", "),
        if names.is_empty() { "none".to_owned() } else { names.join(", ") }
    )))
}

/// What the references carry, counted for the task row.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct ReferenceMedia {
    /// `audio_url` and `image_url` references.
    links: u64,
    /// `audio_data` and `image_data` references.
    inline: u64,
    /// Image references (links or inline).
    images: u64,
}

impl ReferenceMedia {
    /// The Task schema's `input_mode`: speaker ids are not media, so speakers alone are `text`.
    fn input_mode(self) -> domain::InputMode {
        match (self.links, self.inline) {
            (0, 0) => domain::InputMode::Text,
            (_, 0) => domain::InputMode::Url,
            (0, _) => domain::InputMode::Base64,
            _ => domain::InputMode::Mixed,
        }
    }

    /// The Task schema's `media_type` of the reference media (images and audio never mix).
    fn media_type(self) -> Option<domain::MediaType> {
        match (self.links + self.inline, self.images) {
            (0, _) => None,
            (_, 0) => Some(domain::MediaType::Audio),
            _ => Some(domain::MediaType::Image),
        }
    }
}

/// Checks every reference and their composition; returns what media they carry.
fn check_references(
    limits: &AudioLimits,
    references: &mut [AudioReference<'_>],
) -> Result<ReferenceMedia, ValidationError> {
    let rules = &limits.references;
    let (mut audio, mut images) = (0u64, 0u64);
    let mut media = ReferenceMedia::default();
    for (i, reference) in references.iter_mut().enumerate() {
        let (field, value) = only_field(i, reference)?;
        let path = format!("references[{i}].{field}");
        match field {
            "speaker" if value.is_empty() => return Err(ValidationError::Invalid(format!("{path} must not be empty"))),
            "audio_data" => to_raw_base64(&path, value, "audio", rules.max_base64_bytes)?,
            "image_data" => to_raw_base64(&path, value, "image", rules.max_base64_bytes)?,
            "audio_url" | "image_url" if !media::is_https_url(value) => {
                return Err(ValidationError::Invalid(format!(
                    "{path} must be an https URL, got {}",
                    shape::quote(value)
                )));
            }
            _ => {}
        }
        if field.starts_with("image") {
            images += 1;
        } else {
            audio += 1;
        }
        match field {
            "audio_url" | "image_url" => media.links += 1,
            "audio_data" | "image_data" => media.inline += 1,
            _ => {}
        }
    }
    media.images = images;
    if images > 0 && audio > 0 && !rules.mix_image_and_audio {
        return Err(ValidationError::Invalid(
            "references cannot mix an image reference with audio or speaker references".to_owned(),
        ));
    }
    if images > rules.max_image_items {
        return Err(ValidationError::Invalid(format!(
            "references may hold at most {} image reference, got {images}",
            rules.max_image_items
        )));
    }
    if audio > rules.max_audio_items {
        return Err(ValidationError::Invalid(format!(
            "references may hold at most {} audio or speaker references, got {audio}",
            rules.max_audio_items
        )));
    }
    Ok(media)
}

/// Checks a Base64 item (raw, or a `data:<kind>/…;base64,` URI) and leaves it as raw Base64, in place.
fn to_raw_base64(path: &str, value: &mut Cow<'_, str>, kind: &str, max: u64) -> Result<(), ValidationError> {
    let wrong = || ValidationError::Invalid(format!("{path} must be raw Base64 or a data:{kind}/<type>;base64, URI"));
    let data = match media::strip_data_scheme(value) {
        Some(rest) => {
            let url = media::parse_data_url(rest).map_err(|_| wrong())?;
            let top = url.mime.split_once('/').map(|(top, sub)| (top, sub.is_empty()));
            if !url.base64 || top.is_none_or(|(top, empty)| empty || !top.eq_ignore_ascii_case(kind)) {
                return Err(wrong());
            }
            url.data
        }
        None => value,
    };
    let size = media::decoded_len(data, Base64Rules::Strict).ok_or_else(wrong)?;
    if size == 0 {
        return Err(ValidationError::Invalid(format!("{path} must not be empty")));
    }
    if size > max {
        return Err(ValidationError::TooLarge(format!(
            "{path} is {size} bytes decoded, above the limit of {max} bytes"
        )));
    }
    let prefix = value.len().saturating_sub(data.len());
    match value {
        Cow::Borrowed(text) => *text = text.get(prefix..).unwrap_or_default(),
        Cow::Owned(text) => text.replace_range(..prefix, ""),
    }
    Ok(())
}

/// The value of `all` the catalog's `field` names; an error if the catalog names none.
fn find<T: Copy>(all: &[T], pick: impl Fn(&T) -> bool, field: &str, def: &ModelDef) -> Result<T, ValidationError> {
    all.iter().copied().find(pick).ok_or_else(|| {
        ValidationError::Invalid(format!("model {}: the catalog's {field} is not a value this gateway knows", def.name))
    })
}

/// That `value` is one of the model's `allowed` values.
fn check_listed(field: &str, value: &str, allowed: &[String], def: &ModelDef) -> Result<(), ValidationError> {
    if allowed.iter().any(|a| a == value) {
        Ok(())
    } else {
        Err(ValidationError::Invalid(format!(
            "{field} must be one of {} for model {}, got {value:?}",
            allowed.join(", "),
            def.name
        )))
    }
}

#[cfg(test)]
mod tests;
