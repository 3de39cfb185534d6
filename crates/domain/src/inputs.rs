//! What a task was asked with, as the Task schema names it: how its media arrived
//! ([`InputMode`]), what kind of media it carries ([`MediaType`]), and a video's aspect ratio
//! ([`Ratio`]) and resolution ([`Resolution`]), and the kind of a media file or upstream asset
//! ([`AssetKind`]).
//!
//! Each has one spelling (`as_str`) and one reading (`FromStr`); the store converts at its row
//! boundary, so stored text that does not read back is corrupt data, never a default.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::kind::UnknownName;

macro_rules! named_enum {
    ($name:ident, $what:literal, [$($variant:ident),+ $(,)?]) => {
        impl $name {
            /// Every value, in the interface's order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| UnknownName { what: $what, value: s.to_owned() })
            }
        }
    };
}

/// How a task's input media arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InputMode {
    /// No media: text only.
    Text,
    /// Links only.
    Url,
    /// Inline (base64) data only.
    Base64,
    /// More than one of the ways.
    Mixed,
    /// Files uploaded with the request (multipart) only.
    Stream,
}

impl InputMode {
    /// The stored and wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            InputMode::Text => "text",
            InputMode::Url => "url",
            InputMode::Base64 => "base64",
            InputMode::Mixed => "mixed",
            InputMode::Stream => "stream",
        }
    }
}

named_enum!(InputMode, "input mode", [Text, Url, Base64, Mixed, Stream]);

/// What kind of media a task carries as its inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MediaType {
    /// Images only.
    Image,
    /// Videos only.
    Video,
    /// Audio only.
    Audio,
    /// More than one kind.
    Multiple,
}

impl MediaType {
    /// The stored and wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            MediaType::Image => "image",
            MediaType::Video => "video",
            MediaType::Audio => "audio",
            MediaType::Multiple => "multiple",
        }
    }

    /// The media type of inputs of `kinds`: their one kind, `multiple` when they differ, `None`
    /// without media.
    pub fn of(kinds: impl IntoIterator<Item = AssetKind>) -> Option<MediaType> {
        let mut kinds = kinds.into_iter();
        let first = kinds.next()?;
        if kinds.all(|k| k == first) { Some(MediaType::from(first)) } else { Some(MediaType::Multiple) }
    }
}

impl From<AssetKind> for MediaType {
    fn from(kind: AssetKind) -> MediaType {
        match kind {
            AssetKind::Image => MediaType::Image,
            AssetKind::Video => MediaType::Video,
            AssetKind::Audio => MediaType::Audio,
        }
    }
}

named_enum!(MediaType, "media type", [Image, Video, Audio, Multiple]);

/// The aspect ratios a video task may ask for (serde: the wire names, for requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Ratio {
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

impl Ratio {
    /// The stored and wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Ratio::Adaptive => "adaptive",
            Ratio::Wide => "16:9",
            Ratio::Standard => "4:3",
            Ratio::Square => "1:1",
            Ratio::Portrait => "3:4",
            Ratio::Tall => "9:16",
            Ratio::UltraWide => "21:9",
        }
    }
}

named_enum!(Ratio, "ratio", [Adaptive, Wide, Standard, Square, Portrait, Tall, UltraWide]);

/// A video's resolution: the set billing has a rate for (`output_tokens_<resolution>`), closed,
/// so a task can only carry one it can be priced at. Each model offers a subset (catalog data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Resolution {
    /// 480p.
    #[serde(rename = "480p")]
    P480,
    /// 720p.
    #[serde(rename = "720p")]
    P720,
    /// 1080p.
    #[serde(rename = "1080p")]
    P1080,
    /// 4K.
    #[serde(rename = "4k")]
    K4,
}

impl Resolution {
    /// The stored and wire name (also the rate key's part).
    pub const fn as_str(self) -> &'static str {
        match self {
            Resolution::P480 => "480p",
            Resolution::P720 => "720p",
            Resolution::P1080 => "1080p",
            Resolution::K4 => "4k",
        }
    }
}

named_enum!(Resolution, "resolution", [P480, P720, P1080, K4]);

/// What kind of media an asset (or a stored file, or a request's media item) is (serde: the
/// item `type` of the gateway's own API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssetKind {
    /// A still image.
    Image,
    /// A video clip.
    Video,
    /// An audio clip.
    Audio,
}

impl AssetKind {
    /// Every kind, in the interface's order.
    pub const ALL: [AssetKind; 3] = [AssetKind::Image, AssetKind::Video, AssetKind::Audio];

    /// `image`, `video` or `audio` (the media item `type` of the gateway's own API).
    pub const fn as_str(self) -> &'static str {
        match self {
            AssetKind::Image => "image",
            AssetKind::Video => "video",
            AssetKind::Audio => "audio",
        }
    }
}

/// The one reading of a media kind's name (stored media rows, a task's media record, requests).
impl FromStr for AssetKind {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AssetKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownName { what: "media kind", value: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<T: FromStr<Err = UnknownName> + fmt::Display + fmt::Debug + PartialEq + Copy>(all: &[T]) {
        for v in all {
            assert_eq!(v.to_string().parse::<T>(), Ok(*v));
        }
    }

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        round_trips(InputMode::ALL);
        round_trips(MediaType::ALL);
        round_trips(Ratio::ALL);
        round_trips(Resolution::ALL);
        assert_eq!(Resolution::ALL.len(), 4);
        assert!("4K".parse::<Resolution>().is_err());
        assert!("720".parse::<Resolution>().is_err());
        assert_eq!(InputMode::ALL.len(), 5);
        assert_eq!(MediaType::ALL.len(), 4);
        assert_eq!(Ratio::ALL.len(), 7);
        assert_eq!("file".parse::<InputMode>(), Err(UnknownName { what: "input mode", value: "file".into() }));
        assert!("Text".parse::<InputMode>().is_err());
        assert!("images".parse::<MediaType>().is_err());
        assert!("16/9".parse::<Ratio>().is_err());
        assert!("".parse::<Ratio>().is_err());
    }

    #[test]
    fn ratio_serde_names_are_its_wire_names() {
        for r in Ratio::ALL {
            assert_eq!(serde_json::to_string(r).ok(), Some(format!("\"{}\"", r.as_str())));
        }
        for r in Resolution::ALL {
            assert_eq!(serde_json::to_string(r).ok(), Some(format!("\"{}\"", r.as_str())));
        }
    }

    #[test]
    fn media_type_of_kinds() {
        use AssetKind as K;
        assert_eq!(MediaType::of([]), None);
        assert_eq!(MediaType::of([K::Video]), Some(MediaType::Video));
        assert_eq!(MediaType::of([K::Image, K::Image]), Some(MediaType::Image));
        assert_eq!(MediaType::of([K::Image, K::Audio]), Some(MediaType::Multiple));
    }

    #[test]
    fn asset_kind_names_round_trip() {
        for kind in AssetKind::ALL {
            assert_eq!(kind.as_str().parse::<AssetKind>(), Ok(kind));
        }
        assert!("Image".parse::<AssetKind>().is_err());
        assert!("multiple".parse::<AssetKind>().is_err());
    }
}
