//! `POST /api/v1/tasks`: the typed CreateTaskRequest (the single place its shape lives), its checks and
//! the plan the service reserves with and the worker submits from.
//!
//! Fixed bounds of the interface sit on the types through `validator` (prompt 1..4000 characters, at
//! most 15 media items); the rest is checked by hand: duration 4..15 or −1 (an either-or a range
//! attribute cannot say), per-model resolutions, per-kind media counts (URL items and uploaded files
//! together), https links, and "prompt or media".

use catalog::{ModelDef, VideoLimits};
use domain::ports::AssetKind;
use domain::{InputMode, MediaType, Ratio, Resolution};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use validator::Validate;

use crate::ValidationError;
use crate::media::is_https_url;
use crate::shape::invalid;
use crate::shape::{self, plain, present, present_objects, present_plain};

/// Most characters of `prompt`.
pub const VIDEO_PROMPT_MAX_CHARS: u64 = 4000;
/// Most media items (URLs and uploaded files together).
pub const VIDEO_MAX_MEDIA: u64 = 15;

// The request's media item kind is `domain::ports::AssetKind` and its ratio `domain::Ratio` (one
// definition each, with their serde names). The domain crate derives no JSON Schema, so the two
// schema-only mirrors below give `/openapi.json` and the models' request schemas the same `MediaType`
// and `Ratio` definitions as before; they are never read or written, and a test checks that they
// list the same names as the domain types.

/// The kind of one media input.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "MediaType")]
#[allow(dead_code)]
enum MediaTypeSchema {
    /// A reference image.
    Image,
    /// A reference video.
    Video,
    /// A reference audio track.
    Audio,
}

/// The aspect ratios a task may ask for.
#[derive(JsonSchema)]
#[schemars(rename = "Ratio")]
#[allow(dead_code)]
enum RatioSchema {
    /// The upstream picks it from the inputs.
    #[serde(rename = "adaptive")]
    Adaptive,
    /// 16:9.
    #[serde(rename = "16:9")]
    Wide,
    /// 4:3.
    #[serde(rename = "4:3")]
    Standard,
    /// 1:1.
    #[serde(rename = "1:1")]
    Square,
    /// 3:4.
    #[serde(rename = "3:4")]
    Portrait,
    /// 9:16.
    #[serde(rename = "9:16")]
    Tall,
    /// 21:9.
    #[serde(rename = "21:9")]
    UltraWide,
}

/// One `media` item: a link the gateway imports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MediaInput {
    /// Image, video or audio.
    #[serde(rename = "type", deserialize_with = "plain")]
    #[schemars(with = "MediaTypeSchema")]
    pub kind: AssetKind,
    /// An https link.
    pub url: String,
}

/// A CreateTaskRequest. No additional properties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Validate, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VideoRequest {
    /// The public model name.
    pub model: String,
    /// The prompt, 1..4000 characters.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[validate(length(min = 1, max = VIDEO_PROMPT_MAX_CHARS))]
    pub prompt: Option<String>,
    /// Seconds, 4..15, or −1 (the model picks); default 5.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub duration: Option<i64>,
    /// A resolution the model offers; default `720p`.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub resolution: Option<String>,
    /// Aspect ratio; default `adaptive`.
    #[serde(default, deserialize_with = "present_plain", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<RatioSchema>")]
    pub ratio: Option<Ratio>,
    /// Whether the video has sound; default true.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub generate_audio: Option<bool>,
    /// Reference media links, at most 15 (together with uploaded files).
    #[serde(default, deserialize_with = "present_objects", skip_serializing_if = "Option::is_none")]
    #[validate(length(max = VIDEO_MAX_MEDIA))]
    pub media: Option<Vec<MediaInput>>,
    /// Where status changes are posted (https).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
}

/// A checked task: the request with its defaults applied, and what the reservation needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoPlan {
    /// The request, defaults applied (`duration`, `resolution`, `ratio`, `generate_audio` always set).
    pub request: VideoRequest,
    /// The resolution (the request's, one the model offers, or the model's default).
    pub resolution: Resolution,
    /// The media of the task in order: the request's links, then the uploaded files.
    pub media: Vec<AssetKind>,
    /// Whether a video is among the inputs (it changes the rate).
    pub has_video_input: bool,
    /// `text`, `url`, `stream` (uploaded files) or `mixed`.
    pub input_mode: InputMode,
    /// `image`, `video`, `audio`, `multiple`, or `None` without media.
    pub media_type: Option<MediaType>,
}

impl VideoPlan {
    /// The duration in seconds (−1: the model picks).
    pub fn duration(&self) -> i64 {
        self.request.duration.unwrap_or_default()
    }

    /// The ratio.
    pub fn ratio(&self) -> Ratio {
        self.request.ratio.unwrap_or(Ratio::Adaptive)
    }
}

/// Reads a CreateTaskRequest (a JSON body, or the `request` field of a multipart body): JSON, types,
/// unknown fields and enumerations.
pub fn parse_video_request(body: &[u8]) -> Result<VideoRequest, ValidationError> {
    shape::parse_body(body)
}

/// Checks `req` for the video model `def`, with `uploads` the kinds of the files uploaded beside it
/// (multipart), and applies the defaults.
pub fn check_video_request(
    def: &ModelDef,
    mut req: VideoRequest,
    uploads: &[AssetKind],
) -> Result<VideoPlan, ValidationError> {
    let Some(limits) = def.video_limits() else {
        return Err(invalid(format!("model {} is not a video model", def.name)));
    };
    if req.model != def.name {
        return Err(invalid(format!("model must be {}, got {}", def.name, shape::quote(&req.model))));
    }
    req.validate().map_err(|e| invalid(shape::validator_message(&e)))?;
    let links = req.media.as_deref().unwrap_or_default();
    if req.prompt.is_none() && links.is_empty() && uploads.is_empty() {
        return Err(invalid("a task needs a prompt or media".into()));
    }
    let duration = req.duration.unwrap_or(limits.duration.default);
    if duration != limits.duration.auto && !(limits.duration.min..=limits.duration.max).contains(&duration) {
        let d = &limits.duration;
        return Err(invalid(format!(
            "duration must be an integer from {} to {} or {}, got {duration}",
            d.min, d.max, d.auto
        )));
    }
    let resolution = match req.resolution.as_deref() {
        None => limits.default_resolution,
        Some(asked) => match limits.resolutions.iter().find(|r| r.as_str() == asked) {
            Some(offered) => *offered,
            None => {
                let offered: Vec<&str> = limits.resolutions.iter().map(|r| r.as_str()).collect();
                return Err(invalid(format!(
                    "resolution must be one of {} for model {}, got {}",
                    offered.join(", "),
                    def.name,
                    shape::quote(asked)
                )));
            }
        },
    };
    let ratio = req.ratio.unwrap_or(limits.default_ratio);
    for (i, item) in links.iter().enumerate() {
        if !is_https_url(&item.url) {
            return Err(invalid(format!("media[{i}].url must be an https URL")));
        }
    }
    if let Some(url) = &req.webhook_url
        && !is_https_url(url)
    {
        return Err(invalid("webhook_url must be an https URL".into()));
    }
    let media: Vec<AssetKind> = links.iter().map(|m| m.kind).chain(uploads.iter().copied()).collect();
    check_counts(limits, &media)?;
    req.duration = Some(duration);
    req.resolution = Some(resolution.as_str().to_owned());
    req.ratio = Some(ratio);
    req.generate_audio = Some(req.generate_audio.unwrap_or(limits.generate_audio_default));
    let input_mode = match (links.is_empty(), uploads.is_empty()) {
        (true, true) => InputMode::Text,
        (false, true) => InputMode::Url,
        (true, false) => InputMode::Stream,
        (false, false) => InputMode::Mixed,
    };
    let media_type = MediaType::of(media.iter().copied());
    let has_video_input = media.contains(&AssetKind::Video);
    Ok(VideoPlan { request: req, resolution, media, has_video_input, input_mode, media_type })
}

/// At most `max_items` media in all and the per-kind maxima, links and uploads together.
fn check_counts(limits: &VideoLimits, media: &[AssetKind]) -> Result<(), ValidationError> {
    let m = &limits.media;
    let count = |kind: AssetKind| media.iter().filter(|k| **k == kind).count() as u64;
    let total = media.len() as u64;
    if total > m.max_items {
        return Err(invalid(format!("a task may carry at most {} media items, got {total}", m.max_items)));
    }
    for (kind, max) in
        [(AssetKind::Image, m.max_images), (AssetKind::Video, m.max_videos), (AssetKind::Audio, m.max_audios)]
    {
        let n = count(kind);
        if n > max {
            return Err(invalid(format!("a task may carry at most {max} {} items, got {n}", kind.as_str())));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
