//! What the per-kind limits share: the error a limit fails with, the ranges and prompt bounds several
//! kinds carry, and the field readers and checks their parsing uses.

use std::str::FromStr;

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer};
use serde_json::Number;

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
pub(super) fn nullable<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    Option::<T>::deserialize(d)
}

/// Whether `value` is one of `allowed`, as an error naming `field` otherwise.
pub(super) fn one_of(field: &str, value: &str, allowed: &[String]) -> Result<(), LimitsError> {
    if allowed.iter().any(|a| a == value) {
        Ok(())
    } else {
        Err(LimitsError::new(field, format!("{value:?} is not one of {}", allowed.join(", "))))
    }
}

/// That `range.min <= range.max`, as an error naming `field` otherwise.
pub(super) fn ordered(field: &str, range: CountRange) -> Result<(), LimitsError> {
    if range.min <= range.max {
        Ok(())
    } else {
        Err(LimitsError::new(field, format!("min {} is above max {}", range.min, range.max)))
    }
}
