//! `ModelKind`: which generation endpoint a model is used with.

use std::fmt;
use std::str::FromStr;

/// The kind of a model; it decides the endpoint, the scope and the billing rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelKind {
    /// Asynchronous video generation (`POST /api/v1/tasks`).
    Video,
    /// Synchronous image generation.
    Image,
    /// Synchronous chat completions.
    Language,
    /// Synchronous speech generation.
    Audio,
}

impl ModelKind {
    /// Every kind, in the spec's order.
    pub const ALL: [ModelKind; 4] = [ModelKind::Video, ModelKind::Image, ModelKind::Language, ModelKind::Audio];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ModelKind::Video => "video",
            ModelKind::Image => "image",
            ModelKind::Language => "language",
            ModelKind::Audio => "audio",
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of the enumeration's values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}")]
pub struct UnknownName {
    /// What was being parsed.
    pub what: &'static str,
    /// The rejected text.
    pub value: String,
}

impl FromStr for ModelKind {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ModelKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownName { what: "model kind", value: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in ModelKind::ALL {
            assert_eq!(kind.as_str().parse::<ModelKind>(), Ok(kind));
        }
        assert!("Video".parse::<ModelKind>().is_err());
    }
}
