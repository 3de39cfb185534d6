//! Port traits: what the use cases need from storage and identity, implemented elsewhere.
//!
//! All traits are object-safe and used as `Arc<dyn …>`. The ledger port lives in the
//! `billing` crate, beside the rules it enforces.

mod accounts;
mod assets;
mod error;
mod generation;
mod idempotency;
mod ids;
mod manage;
mod media;
mod models;
mod responses;
mod statements;
mod tasks;
mod upstream;

pub use crate::inputs::AssetKind;
pub use accounts::{AccountStore, KeyTotal, Readiness};
pub use assets::{AssetStatus, AssetUpstream};
pub use error::{BadValue, Cause, StoreError};
pub use generation::{
    ImageAnswer, ImageGeneration, ImageReferences, PromptOptimisation, SequentialImages, SpeechAnswer,
    VideoTaskRequest, VideoTaskState,
};
pub use idempotency::{IdempotencyClaim, IdempotencyScope, IdempotencyStore};
pub use ids::IdSource;
pub use manage::ManageStore;
pub use media::{MediaError, MediaSink, MediaSource, MediaStore};
pub use models::ModelStore;
pub use responses::ResponseOwners;
pub use statements::StatementStore;
pub use tasks::{OpenWork, PageRequest, TaskFilter, TaskOutcome, TaskStore, UpstreamRecord};
pub use upstream::{
    Attempted, Endpoint, EndpointHealth, EventStream, SseEvent, TaskUpstream, Upstream, UpstreamCall, UpstreamError,
    UpstreamHealth, Via,
};
