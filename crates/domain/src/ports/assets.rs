//! The upstream's asset control plane and the kinds of media it registers.

use std::str::FromStr;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::UpstreamError;
use crate::kind::UnknownName;

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

/// Where an upstream asset stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssetStatus {
    /// The upstream is still fetching or checking it.
    Processing,
    /// Usable in a task.
    Active,
    /// Refused by the upstream, with its reason.
    Failed(String),
}

/// The upstream's asset control plane (requests signed with an access key pair).
#[async_trait]
pub trait AssetUpstream: Send + Sync {
    /// The id of the asset group called `name` (one per user), created on first use. Ids are
    /// cached in memory, so repeated calls for one name cost one lookup per process.
    async fn asset_group(&self, name: &str) -> Result<String, UpstreamError>;
    /// Registers the media at `url` (which the upstream fetches) in group `group_id`; the new
    /// asset's id. The asset starts [`AssetStatus::Processing`].
    async fn create_asset(&self, group_id: &str, url: &str, kind: AssetKind) -> Result<String, UpstreamError>;
    /// Where the asset stands.
    async fn asset_status(&self, asset_id: &str) -> Result<AssetStatus, UpstreamError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in AssetKind::ALL {
            assert_eq!(kind.as_str().parse::<AssetKind>(), Ok(kind));
        }
        assert!("Image".parse::<AssetKind>().is_err());
        assert!("multiple".parse::<AssetKind>().is_err());
    }
}
