//! The upstream's asset control plane (the kinds of media it registers are
//! [`crate::inputs::AssetKind`]).

use async_trait::async_trait;

use super::UpstreamError;
use crate::inputs::AssetKind;

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
