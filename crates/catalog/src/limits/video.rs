//! Typed limits of video models.

use domain::{Ratio, Resolution};
use serde::Deserialize;

use super::types::PromptLimits;

/// A video model's limits, mirroring its catalog `limits` object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VideoLimits {
    /// Prompt length in characters.
    pub prompt: PromptLimits,
    /// `duration` in seconds.
    pub duration: DurationLimits,
    /// Accepted resolutions (`480p`, `720p`, …): each one billing has a rate key for, so a catalog
    /// naming another does not load.
    pub resolutions: Vec<Resolution>,
    /// Resolution when the request has none.
    pub default_resolution: Resolution,
    /// Accepted aspect ratios (`adaptive`, `16:9`, …).
    pub ratios: Vec<Ratio>,
    /// Ratio when the request has none.
    pub default_ratio: Ratio,
    /// `generate_audio` when the request has none.
    pub generate_audio_default: bool,
    /// Media items of a task.
    pub media: VideoMediaLimits,
    /// Default per-file upload sizes, bytes.
    pub upload_max_bytes: UploadMaxBytes,
    /// The only webhook URL scheme accepted.
    pub webhook_url_scheme: String,
}

/// `duration` bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DurationLimits {
    /// Shortest, seconds.
    pub min: i64,
    /// Longest, seconds.
    pub max: i64,
    /// The value that lets the model choose (−1).
    pub auto: i64,
    /// Duration when the request has none.
    pub default: i64,
}

/// Media items of a video task.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VideoMediaLimits {
    /// Most items in all.
    pub max_items: u64,
    /// Most images.
    pub max_images: u64,
    /// Most videos.
    pub max_videos: u64,
    /// Most audios.
    pub max_audios: u64,
    /// Accepted item types.
    pub types: Vec<String>,
    /// The only URL scheme accepted.
    pub url_scheme: String,
}

/// Default per-file upload sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadMaxBytes {
    /// Images, bytes.
    pub image: u64,
    /// Videos, bytes.
    pub video: u64,
    /// Audios, bytes.
    pub audio: u64,
}
