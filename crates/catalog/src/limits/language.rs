//! Typed limits of language (chat) models.

use serde::Deserialize;
use serde_json::Number;

use super::types::{CountRange, nullable};

/// A language model's limits, mirroring its catalog `limits` object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanguageLimits {
    /// Allowed `max_tokens` / `max_completion_tokens` values.
    pub max_tokens: CountRange,
    /// Allowed number of messages.
    pub messages: CountRange,
    /// The largest request body, in bytes.
    pub max_request_bytes: u64,
    /// Stop sequences.
    pub stop: StopLimits,
    /// Whether `stream: true` is offered.
    pub streaming: bool,
    /// Wire formats the model is served in (`chat_completions`).
    pub wire_formats: Vec<String>,
    /// Whether parameters the interface does not list are passed upstream.
    pub passthrough_extra_parameters: bool,
    /// The whole context window in tokens, when published.
    #[serde(default)]
    pub context_window: Option<u64>,
    /// The largest prompt in tokens, when published.
    #[serde(default)]
    pub max_input_tokens: Option<u64>,
    /// The largest completion in tokens, when it differs from `max_tokens.max` or is published.
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    /// The largest reasoning part of a completion, when published.
    #[serde(default)]
    pub max_reasoning_tokens: Option<u64>,
    /// Input modalities (`text`, `image`, `video`, `audio`); absent means text only.
    #[serde(default)]
    pub input_modalities: Option<Vec<String>>,
    /// Per-modality media limits.
    #[serde(default)]
    pub media: Option<LanguageMedia>,
    /// The `thinking` switch, when the model has one.
    #[serde(default)]
    pub thinking: Option<ThinkingLimits>,
    /// `reasoning_effort` values, when the model has the parameter.
    #[serde(default)]
    pub reasoning_effort: Option<ReasoningEffortLimits>,
    /// Sampling ranges and enforced values.
    #[serde(default)]
    pub sampling: Option<SamplingLimits>,
    /// Whether `reasoning_content` of earlier turns is kept.
    #[serde(default)]
    pub preserves_reasoning_content: Option<bool>,
}

impl LanguageLimits {
    /// The largest completion: `max_completion_tokens`, else `max_tokens.max`.
    pub fn max_completion_tokens(&self) -> u64 {
        self.max_completion_tokens.unwrap_or(self.max_tokens.max)
    }

    /// The cap of a prompt bound: `max_input_tokens`, else `context_window`.
    pub fn input_window(&self) -> Option<u64> {
        self.max_input_tokens.or(self.context_window)
    }

    /// Whether the model can think (write reasoning tokens that the upstream bills as output): it
    /// publishes a reasoning length, a `thinking` switch with a value other than `disabled`, or a
    /// `reasoning_effort` value other than `minimal` (which means no thinking).
    pub fn can_think(&self) -> bool {
        self.max_reasoning_tokens.is_some_and(|n| n > 0)
            || self.thinking.as_ref().is_some_and(|t| t.types.iter().any(|v| v != "disabled"))
            || self.reasoning_effort.as_ref().is_some_and(|e| e.values.iter().any(|v| v != "minimal"))
    }
}

/// Stop sequence limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StopLimits {
    /// Most stop sequences.
    pub max_items: u64,
}

/// Media limits of a language model, per modality.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LanguageMedia {
    /// Image parts.
    #[serde(default)]
    pub image: Option<ImageInputLimits>,
    /// Video parts.
    #[serde(default)]
    pub video: Option<VideoInputLimits>,
    /// Audio parts.
    #[serde(default)]
    pub audio: Option<AudioInputLimits>,
}

/// Limits of image parts in chat messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageInputLimits {
    /// Largest inline image, decoded bytes.
    pub max_bytes: u64,
    /// Largest image, in pixels.
    pub max_pixels: u64,
}

/// Limits of video parts in chat messages.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VideoInputLimits {
    /// Most video parts per request.
    pub max_items: u64,
    /// Longest video, seconds.
    pub max_seconds: u64,
    /// Largest inline video, decoded bytes.
    pub max_bytes: u64,
    /// Accepted formats (`mp4`, `mov`, `avi`).
    pub formats: Vec<String>,
    /// Highest frame rate.
    pub max_fps: u64,
}

/// Limits of audio parts in chat messages.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AudioInputLimits {
    /// Most audio parts per request.
    pub max_items: u64,
    /// Longest audio, seconds.
    pub max_seconds: u64,
    /// Largest inline audio, decoded bytes.
    pub max_bytes: u64,
    /// Accepted formats (`mp3`, `wav`, …).
    pub formats: Vec<String>,
}

/// The `thinking` switch of a model.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThinkingLimits {
    /// Accepted `thinking.type` values.
    pub types: Vec<String>,
    /// The upstream default, `null` when the upstream decides.
    #[serde(deserialize_with = "nullable")]
    pub default: Option<String>,
    /// Whether a thinking budget is accepted.
    pub budget_supported: bool,
}

/// The `reasoning_effort` parameter of a model.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasoningEffortLimits {
    /// Accepted values.
    pub values: Vec<String>,
    /// The upstream default, `null` when the upstream decides.
    #[serde(deserialize_with = "nullable")]
    pub default: Option<String>,
}

/// Sampling parameter ranges.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingLimits {
    /// `temperature`.
    pub temperature: SamplingRange,
    /// `top_p`.
    pub top_p: SamplingRange,
}

/// One sampling parameter: its range, and the value the gateway sends whatever the client asked, if any.
/// Numbers stay JSON numbers so that they are forwarded exactly as written (`0.95`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamplingRange {
    /// Smallest accepted value.
    pub min: Number,
    /// Largest accepted value.
    pub max: Number,
    /// The value always sent upstream, or `null` when the client's value is sent.
    #[serde(deserialize_with = "nullable")]
    pub enforced: Option<Number>,
}
