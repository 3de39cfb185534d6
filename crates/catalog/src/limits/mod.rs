//! Typed per-kind model limits, parsed from each model's raw `limits` object when the catalog loads.
//!
//! Every struct denies unknown fields and names every field the fixture has, so a misspelt or missing
//! limit is a load error ([`crate::CatalogError::Limits`]) instead of a silent default read through a
//! JSON pointer. A field that some models of a kind lack is an `Option`; a field every model of the kind
//! carries but that may be `null` is an `Option` that must still be present (see [`types::nullable`]).

mod audio;
mod image;
mod language;
mod types;
mod video;

use domain::ModelKind;
use serde::Deserialize;
use serde_json::Value;

pub use audio::{AudioLimits, AudioReferenceLimits};
pub use image::{
    ImageLimits, OptimizePromptLimits, OutputFormatLimits, ReferenceImageLimits, SIZE_PATTERN, SeedLimits,
    SequentialLimits, SizeLimits,
};
pub use language::{
    AudioInputLimits, ImageInputLimits, LanguageLimits, LanguageMedia, ReasoningEffortLimits, SamplingLimits,
    SamplingRange, StopLimits, ThinkingLimits, VideoInputLimits,
};
pub use types::{CountRange, IntRange, LimitsError, PromptLimits, RatioRange, RecommendedChars};
pub use video::{DurationLimits, UploadMaxBytes, VideoLimits, VideoMediaLimits};

/// A model's limits, typed by its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KindLimits {
    /// A language (chat) model's limits.
    Language(LanguageLimits),
    /// An image model's limits.
    Image(ImageLimits),
    /// A video model's limits.
    Video(VideoLimits),
    /// An audio model's limits.
    Audio(AudioLimits),
}

impl KindLimits {
    /// The model kind these limits belong to.
    pub fn kind(&self) -> ModelKind {
        match self {
            KindLimits::Language(_) => ModelKind::Language,
            KindLimits::Image(_) => ModelKind::Image,
            KindLimits::Video(_) => ModelKind::Video,
            KindLimits::Audio(_) => ModelKind::Audio,
        }
    }

    /// Parses `limits` as the limits of a model of `kind`, then checks what the types cannot say
    /// (defaults among the allowed values, ranges in order, a size for every named size, …).
    pub fn parse(kind: ModelKind, limits: &Value) -> Result<KindLimits, LimitsError> {
        match kind {
            ModelKind::Language => deserialize(limits).map(KindLimits::Language),
            ModelKind::Image => {
                let typed: ImageLimits = deserialize(limits)?;
                typed.check()?;
                Ok(KindLimits::Image(typed))
            }
            ModelKind::Video => deserialize(limits).map(KindLimits::Video),
            ModelKind::Audio => {
                let typed: AudioLimits = deserialize(limits)?;
                typed.check()?;
                Ok(KindLimits::Audio(typed))
            }
        }
    }
}

/// Deserializes `T` from `value`, naming the field path on failure.
fn deserialize<'de, T: Deserialize<'de>>(value: &'de Value) -> Result<T, LimitsError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { String::new() } else { field };
        LimitsError::new(field, e.into_inner().to_string())
    })
}

#[cfg(test)]
mod tests;
