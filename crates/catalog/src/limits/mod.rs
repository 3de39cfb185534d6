//! Typed per-kind model limits, parsed from each model's raw `limits` object when the catalog loads.
//!
//! Every struct denies unknown fields and names every field the fixture has, so a misspelt or missing
//! limit is a load error ([`crate::CatalogError::Limits`]) instead of a silent default read through a
//! JSON pointer. A field that some models of a kind lack is an `Option`; a field every model of the kind
//! carries but that may be `null` is an `Option` that must still be present (see [`nullable`]).

mod audio;
mod image;
mod language;
mod video;

use std::str::FromStr;

use domain::ModelKind;
use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer};
use serde_json::{Number, Value};

pub use audio::{AudioLimits, AudioReferenceLimits};
pub use image::{
    ImageLimits, OptimizePromptLimits, OutputFormatLimits, ReferenceImageLimits, SIZE_PATTERN, SeedLimits,
    SequentialLimits, SizeLimits,
};
pub use language::{
    AudioInputLimits, ImageInputLimits, LanguageLimits, LanguageMedia, ReasoningEffortLimits, SamplingLimits,
    SamplingRange, StopLimits, ThinkingLimits, VideoInputLimits,
};
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

/// Why a limits object could not be read: the field path inside `limits` and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsError {
    /// Dotted path inside `limits` (`sizes.named_pixels`, `references[0]`); empty for the object itself.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl LimitsError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> LimitsError {
        LimitsError { field: field.into(), message: message.into() }
    }
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

/// An inclusive range of counts (`{"min": 1, "max": 15}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountRange {
    /// Smallest allowed value.
    pub min: u64,
    /// Largest allowed value.
    pub max: u64,
}

impl CountRange {
    /// Whether `n` lies in the range.
    pub fn contains(&self, n: u64) -> bool {
        (self.min..=self.max).contains(&n)
    }
}

/// An inclusive range of signed integers (`{"min": -50, "max": 100}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntRange {
    /// Smallest allowed value.
    pub min: i64,
    /// Largest allowed value.
    pub max: i64,
}

/// An inclusive range of aspect ratios, width / height (`{"min": 0.0625, "max": 16}`), kept exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatioRange {
    /// Smallest allowed width / height.
    #[serde(deserialize_with = "decimal")]
    pub min: Decimal,
    /// Largest allowed width / height.
    #[serde(deserialize_with = "decimal")]
    pub max: Decimal,
}

impl RatioRange {
    /// Whether `width / height` lies in the range, computed without division or floating point.
    pub fn contains(&self, width: u64, height: u64) -> bool {
        let (w, h) = (Decimal::from(width), Decimal::from(height));
        match (self.min.checked_mul(h), self.max.checked_mul(h)) {
            (Some(low), Some(high)) => w >= low && w <= high,
            _ => false,
        }
    }
}

/// A prompt's length bounds in characters (Unicode scalar values), with an optional recommendation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptLimits {
    /// Fewest characters.
    pub min_chars: u64,
    /// Most characters.
    pub max_chars: u64,
    /// Advisory lengths by language; not enforced.
    #[serde(default)]
    pub recommended_max_chars: Option<RecommendedChars>,
}

/// Advisory prompt lengths by language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecommendedChars {
    /// Chinese prompts.
    pub chinese: u64,
    /// English prompts.
    pub english: u64,
}

/// Reads a JSON number as an exact decimal (`0.0625`, `16`, `1e-2`).
fn decimal<'de, D: Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
    let number = Number::deserialize(d)?;
    let text = number.to_string();
    Decimal::from_str(&text)
        .or_else(|_| Decimal::from_scientific(&text))
        .map_err(|e| serde::de::Error::custom(format!("{text} is not an exact decimal: {e}")))
}

/// For `#[serde(deserialize_with = "nullable")]`: an `Option` field that must be present, `null` or a value.
fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(d)
}

/// Whether `value` is one of `allowed`, as an error naming `field` otherwise.
fn one_of(field: &str, value: &str, allowed: &[String]) -> Result<(), LimitsError> {
    if allowed.iter().any(|a| a == value) {
        Ok(())
    } else {
        Err(LimitsError::new(field, format!("{value:?} is not one of {}", allowed.join(", "))))
    }
}

/// That `range.min <= range.max`, as an error naming `field` otherwise.
fn ordered(field: &str, range: CountRange) -> Result<(), LimitsError> {
    if range.min <= range.max {
        Ok(())
    } else {
        Err(LimitsError::new(field, format!("min {} is above max {}", range.min, range.max)))
    }
}

#[cfg(test)]
mod tests;
