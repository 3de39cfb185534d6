//! Typed limits of audio (speech) models.

use serde::Deserialize;

use super::types::{IntRange, LimitsError, PromptLimits, one_of};

/// An audio model's limits, mirroring its catalog `limits` object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioLimits {
    /// `text_prompt` length in characters.
    pub text_prompt: PromptLimits,
    /// `references`.
    pub references: AudioReferenceLimits,
    /// Accepted `audio_config.format` values.
    pub formats: Vec<String>,
    /// `audio_config.format` when the request has none.
    pub default_format: String,
    /// Accepted `audio_config.sample_rate` values.
    pub sample_rates: Vec<u64>,
    /// `audio_config.speech_rate`.
    pub speech_rate: IntRange,
    /// `audio_config.loudness_rate`.
    pub loudness_rate: IntRange,
    /// `audio_config.pitch_rate`.
    pub pitch_rate: IntRange,
    /// `audio_config.enable_subtitle` when the request has none.
    pub enable_subtitle_default: bool,
    /// Most seconds billed per call (`original_duration` is capped here).
    pub max_billed_seconds: u64,
    /// Seconds reserved up front.
    pub reserve_seconds: u64,
}

/// Limits of audio `references`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioReferenceLimits {
    /// Fewest references when `references` is given.
    pub min_items: u64,
    /// Most references.
    pub max_items: u64,
    /// Most audio and speaker references.
    pub max_audio_items: u64,
    /// Most image references.
    pub max_image_items: u64,
    /// Whether an image may be mixed with audio or speaker references.
    pub mix_image_and_audio: bool,
    /// The reference fields, exactly one of which each reference carries.
    pub fields: Vec<String>,
    /// Largest decoded size of one Base64 item, bytes.
    pub max_base64_bytes: u64,
    /// The only URL scheme accepted (`https`).
    pub url_scheme: String,
}

impl AudioLimits {
    /// What the types cannot say: defaults among the values, https only.
    pub(super) fn check(&self) -> Result<(), LimitsError> {
        one_of("default_format", &self.default_format, &self.formats)?;
        if self.references.url_scheme != "https" {
            return Err(LimitsError::new("references.url_scheme", "only https is implemented"));
        }
        Ok(())
    }
}
