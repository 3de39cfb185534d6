//! What the gateway asks the upstream to generate, and what a video task upstream is doing, in the
//! gateway's own terms: the upstream adapter writes these as the platform's request bodies and reads
//! the platform's answers into them, so no caller sees the platform's wire format.

use super::AssetKind;
use crate::{Ratio, Resolution};

/// A video task to create upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VideoTaskRequest {
    /// The model id the upstream expects (the catalog's `upstream.model_id`).
    pub model: String,
    /// The prompt.
    pub prompt: Option<String>,
    /// The media, in order: each an asset id of the upstream's asset library and its kind.
    pub references: Vec<(AssetKind, String)>,
    /// Output resolution.
    pub resolution: Option<Resolution>,
    /// Output aspect ratio.
    pub ratio: Option<Ratio>,
    /// Seconds of output.
    pub duration: Option<i64>,
    /// Whether the video has sound.
    pub generate_audio: Option<bool>,
    /// Seconds the upstream may take before it gives the task up (the adapter keeps it within
    /// the range the upstream accepts).
    pub deadline_secs: u64,
}

/// What a video task is doing upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VideoTaskState {
    /// Waiting to run.
    Queued,
    /// Running.
    Running,
    /// Done: the result and the tokens to bill.
    Succeeded {
        /// The video's address.
        output_url: Option<String>,
        /// Its last frame.
        last_frame_url: Option<String>,
        /// The output tokens the task is billed on.
        tokens: u64,
        /// The upstream's usage report, as JSON text (recorded on the task as it came).
        usage: String,
    },
    /// Failed, with the upstream's code and message.
    Failed {
        /// Error code.
        code: String,
        /// Error text.
        message: String,
    },
    /// Cancelled upstream.
    Cancelled,
    /// Expired upstream.
    Expired,
}
