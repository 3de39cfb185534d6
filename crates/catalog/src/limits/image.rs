//! Typed limits of image models: prompt, reference images, sizes and the branch-specific fields.
//!
//! Which optional request fields a model accepts is data here: `sequential_generation` (absent when
//! `supported` is false), `output_formats.supported`, `optimize_prompt.toggle`,
//! `optimize_prompt.thinking_default` (present when `optimize_prompt_options.thinking` is accepted) and
//! `seed`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use super::types::{CountRange, LimitsError, PromptLimits, RatioRange, nullable, one_of, ordered};

/// The one custom size pattern the validator implements (ASCII digits only).
pub const SIZE_PATTERN: &str = r"^\d{2,5}[xX]\d{2,5}$";

/// An image model's limits, mirroring its catalog `limits` object.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageLimits {
    /// Prompt length in characters.
    pub prompt: PromptLimits,
    /// The `image` references.
    pub reference_images: ReferenceImageLimits,
    /// Named and custom sizes.
    pub sizes: SizeLimits,
    /// Accepted `response_format` values.
    pub response_formats: Vec<String>,
    /// `response_format` when the request has none.
    pub default_response_format: String,
    /// `watermark` when the request has none.
    pub watermark_default: bool,
    /// Whether `stream: true` is offered.
    pub streaming: bool,
    /// Sequential generation, `None` when the model does not offer it (`{"supported": false}`).
    #[serde(deserialize_with = "sequential")]
    pub sequential_generation: Option<SequentialLimits>,
    /// `output_format`.
    pub output_formats: OutputFormatLimits,
    /// `optimize_prompt` and `optimize_prompt_options`.
    pub optimize_prompt: OptimizePromptLimits,
    /// `seed`, when the model accepts one.
    #[serde(default)]
    pub seed: Option<SeedLimits>,
}

/// Limits of the `image` references.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceImageLimits {
    /// Fewest references when `image` is given.
    pub min_items: u64,
    /// Most references.
    pub max_items: u64,
    /// Largest decoded size of one Base64 reference, bytes.
    pub max_decoded_bytes: u64,
    /// Accepted `<type>` of `data:image/<type>;base64,` references.
    pub data_uri_types: Vec<String>,
    /// The only URL scheme accepted (`https`).
    pub url_scheme: String,
    /// Image formats the upstream reads (informational).
    #[serde(default)]
    pub formats: Option<Vec<String>>,
    /// Smallest side of a reference image, pixels (informational; not checked without decoding).
    #[serde(default)]
    pub min_side: Option<u64>,
    /// Largest reference image, pixels (informational).
    #[serde(default)]
    pub max_pixels: Option<u64>,
    /// Aspect ratio range of a reference image (informational).
    #[serde(default)]
    pub aspect_ratio: Option<RatioRange>,
}

/// Named and custom output sizes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SizeLimits {
    /// Named sizes (`2K`, `4K`).
    pub named: Vec<String>,
    /// Worst-case pixel count of each named size (`2K` is 2048×2048).
    pub named_pixels: BTreeMap<String, u64>,
    /// `size` when the request has none; `null` leaves it to the upstream.
    #[serde(deserialize_with = "nullable")]
    pub default: Option<String>,
    /// The custom `<W>x<H>` pattern; must be [`SIZE_PATTERN`].
    pub custom_pattern: String,
    /// Total pixels of a custom size.
    pub custom_pixels: CountRange,
    /// Aspect ratio (width / height) of a custom size.
    pub aspect_ratio: RatioRange,
    /// Each side of a custom size must be a multiple of this, when set.
    #[serde(deserialize_with = "nullable")]
    pub side_multiple: Option<u64>,
}

impl SizeLimits {
    /// The largest pixel count any output of this model can have: a named size or the custom maximum.
    pub fn max_pixels(&self) -> u64 {
        self.named_pixels.values().copied().fold(self.custom_pixels.max, u64::max)
    }
}

/// Sequential (multi-image) generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequentialLimits {
    /// Accepted `sequential_image_generation` values (`auto`, `disabled`).
    pub modes: Vec<String>,
    /// `sequential_image_generation` when the request has none.
    pub default: String,
    /// `sequential_image_generation_options.max_images`.
    pub max_images: CountRange,
    /// Most reference plus generated images.
    pub max_total_images: u64,
}

/// The catalog form of `sequential_generation`: `{"supported": false}` or every field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SequentialRaw {
    supported: bool,
    modes: Option<Vec<String>>,
    default: Option<String>,
    max_images: Option<CountRange>,
    max_total_images: Option<u64>,
}

fn sequential<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SequentialLimits>, D::Error> {
    use serde::de::Error;
    let raw = SequentialRaw::deserialize(d)?;
    match (raw.supported, raw.modes, raw.default, raw.max_images, raw.max_total_images) {
        (false, None, None, None, None) => Ok(None),
        (false, ..) => Err(D::Error::custom("an unsupported sequential_generation has no other fields")),
        (true, Some(modes), Some(default), Some(max_images), Some(max_total_images)) => {
            Ok(Some(SequentialLimits { modes, default, max_images, max_total_images }))
        }
        (true, ..) => Err(D::Error::custom(
            "a supported sequential_generation needs modes, default, max_images and max_total_images",
        )),
    }
}

/// `output_format`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputFormatLimits {
    /// Whether the request may carry `output_format`.
    pub supported: bool,
    /// Accepted values.
    pub values: Vec<String>,
    /// `output_format` when the request has none; `null` leaves it to the upstream.
    #[serde(deserialize_with = "nullable")]
    pub default: Option<String>,
}

/// `optimize_prompt` and `optimize_prompt_options`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizePromptLimits {
    /// Whether the request may carry the `optimize_prompt` switch.
    pub toggle: bool,
    /// The switch when the request has none (present exactly when `toggle` is true).
    #[serde(default)]
    pub default: Option<bool>,
    /// Accepted `optimize_prompt_options.mode` values.
    pub modes: Vec<String>,
    /// `optimize_prompt_options.mode` when the options have none.
    pub default_mode: String,
    /// `optimize_prompt_options.thinking` when the options have none; present exactly when the model
    /// accepts `thinking`.
    #[serde(default)]
    pub thinking_default: Option<String>,
}

/// `seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedLimits {
    /// Smallest seed (−1 means random).
    pub min: i64,
    /// Largest seed.
    pub max: i64,
    /// `seed` when the request has none.
    pub default: i64,
}

impl ImageLimits {
    /// What the types cannot say: bounds in order, defaults among the values, a pixel count for every
    /// named size, the one implemented size pattern.
    pub(super) fn check(&self) -> Result<(), LimitsError> {
        ordered("prompt", CountRange { min: self.prompt.min_chars, max: self.prompt.max_chars })?;
        let refs = &self.reference_images;
        ordered("reference_images", CountRange { min: refs.min_items, max: refs.max_items })?;
        if refs.url_scheme != "https" {
            return Err(LimitsError::new("reference_images.url_scheme", "only https is implemented"));
        }
        let sizes = &self.sizes;
        if sizes.custom_pattern != SIZE_PATTERN {
            return Err(LimitsError::new("sizes.custom_pattern", format!("only {SIZE_PATTERN} is implemented")));
        }
        ordered("sizes.custom_pixels", sizes.custom_pixels)?;
        if sizes.aspect_ratio.min > sizes.aspect_ratio.max || sizes.aspect_ratio.min.is_sign_negative() {
            return Err(LimitsError::new("sizes.aspect_ratio", "needs 0 <= min <= max"));
        }
        for name in &sizes.named {
            if !sizes.named_pixels.contains_key(name) {
                return Err(LimitsError::new("sizes.named_pixels", format!("no pixel count for {name:?}")));
            }
        }
        if let Some(default) = &sizes.default {
            one_of("sizes.default", default, &sizes.named)?;
        }
        if sizes.side_multiple == Some(0) {
            return Err(LimitsError::new("sizes.side_multiple", "must be at least 1"));
        }
        one_of("default_response_format", &self.default_response_format, &self.response_formats)?;
        if let Some(seq) = &self.sequential_generation {
            one_of("sequential_generation.default", &seq.default, &seq.modes)?;
            ordered("sequential_generation.max_images", seq.max_images)?;
        }
        let out = &self.output_formats;
        if let Some(default) = &out.default {
            one_of("output_formats.default", default, &out.values)?;
        }
        let opt = &self.optimize_prompt;
        if opt.toggle != opt.default.is_some() {
            return Err(LimitsError::new("optimize_prompt.default", "is present exactly when toggle is true"));
        }
        one_of("optimize_prompt.default_mode", &opt.default_mode, &opt.modes)?;
        if let Some(seed) = &self.seed
            && !(seed.min <= seed.default && seed.default <= seed.max)
        {
            return Err(LimitsError::new("seed.default", "must lie in min..=max"));
        }
        Ok(())
    }
}
