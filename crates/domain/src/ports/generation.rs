//! What the gateway asks the upstream to generate, and what a video task upstream is doing, in the
//! gateway's own terms: the upstream adapter writes these as the platform's request bodies and reads
//! the platform's answers into them, so no caller sees the platform's wire format.

use super::AssetKind;
use crate::{Ratio, Resolution};

/// An image generation the upstream is asked for: a checked client request, with the defaults
/// applied, borrowed from the body it was read from (a Base64 reference is never copied before
/// the adapter writes it into the upstream body).
///
/// The enumerated settings are the values the client request was checked against (`url`, `png`,
/// …), passed on as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageGeneration<'a> {
    /// The model id the upstream expects (the catalog's `upstream.model_id`).
    pub model: &'a str,
    /// The prompt.
    pub prompt: &'a str,
    /// How the images come back: `url` or `b64_json`.
    pub response_format: Option<&'a str>,
    /// Whether the output carries a watermark.
    pub watermark: Option<bool>,
    /// Whether the answer streams (only `false` is accepted today).
    pub stream: Option<bool>,
    /// Reference images, in the form the client sent them.
    pub references: Option<ImageReferences<'a>>,
    /// A named size of the model, or `<W>x<H>`.
    pub size: Option<&'a str>,
    /// Sequential generation: `auto` or `disabled`.
    pub sequential: Option<&'a str>,
    /// Sequential generation's options (present when the client or a default gave them).
    pub sequential_options: Option<SequentialImages>,
    /// `png` or `jpeg`.
    pub output_format: Option<&'a str>,
    /// The prompt-optimisation switch.
    pub optimize_prompt: Option<bool>,
    /// Prompt-optimisation options.
    pub prompt_options: Option<PromptOptimisation<'a>>,
    /// The seed (models with one).
    pub seed: Option<i64>,
}

/// Reference images: one, or a list (kept apart so that the upstream gets the client's form).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageReferences<'a> {
    /// A single reference (an https URL or a `data:` URI).
    One(&'a str),
    /// A list of references.
    Many(Vec<&'a str>),
}

impl ImageReferences<'_> {
    /// The references' total length in bytes (what the upstream body needs room for).
    pub fn total_len(&self) -> usize {
        match self {
            ImageReferences::One(one) => one.len(),
            ImageReferences::Many(many) => many.iter().map(|r| r.len()).sum(),
        }
    }
}

/// Sequential generation's options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequentialImages {
    /// Most images generated.
    pub max_images: Option<i64>,
}

/// Prompt-optimisation options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptOptimisation<'a> {
    /// `standard` or `fast`.
    pub mode: Option<&'a str>,
    /// `auto`, `enabled` or `disabled`.
    pub thinking: Option<&'a str>,
}

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

/// A 2xx image generation answer, read by the adapter: the client's answer and what it bills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageAnswer {
    /// The answer as the members of the public ImageGenerationResponse (one JSON object's text):
    /// the upstream's members, with `usage` stating what is billed (`generated_images`,
    /// `input_images`, and the token counts the upstream gave, else 0).
    pub body: Vec<u8>,
    /// The pixel count of each generated image, in order; failed items are not in it.
    pub pixels: Vec<u64>,
    /// Why nothing was generated (the first failed item's code and message, or the adapter's
    /// own); `Some` exactly when `pixels` is empty.
    pub refusal: Option<(String, String)>,
    /// The `usage` object of `body`, as JSON text (recorded on the task).
    pub usage: String,
}

/// A 2xx speech answer, read by the adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeechAnswer {
    /// The answer as the members of the public AudioGenerationResponse (one JSON object's text):
    /// `audio` as raw Base64, `code` and `message` present, the upstream's other members as they
    /// came.
    pub body: Vec<u8>,
    /// The seconds of speech the call is billed on (`original_duration`), as the number's exact
    /// JSON text (`0.6` stays 0.6; never negative).
    pub seconds: String,
}
