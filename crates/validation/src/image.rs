//! `POST /api/v1/images/generations`: the typed request (the single place its shape lives), its checks
//! against the chosen model's typed limits, the defaults, and the plan the service reserves with.
//!
//! One request type serves the three branches; which branch fields a model accepts, and every per-model
//! bound, is catalog data ([`catalog::ImageLimits`]), so a new image model is a catalog entry, and each
//! model's request schema is this type narrowed by its limits.

mod refs;
mod size;

use catalog::{ImageLimits, ModelDef};
use domain::ports::{ImageGeneration, ImageReferences, PromptOptimisation, SequentialImages};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ValidationError;
use crate::shape::{self, invalid, present, present_object, present_plain};
pub use refs::ImageRefs;

/// A `POST /api/v1/images/generations` body. No additional properties.
///
/// The references borrow from the body they were read from (when they hold no JSON escape, as Base64
/// never does), and [`ImagePlan::generation`] lends them on, so a 600-MiB request costs its body and
/// the upstream body the adapter writes from it, not a third copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageRequest<'a> {
    /// The public model name (the branch); not sent upstream (see [`ImagePlan::generation`]).
    #[serde(skip_serializing)]
    pub model: String,
    /// The prompt; its length in characters is bounded per model.
    pub prompt: String,
    /// `url` or `b64_json`; default `url`.
    #[serde(default, deserialize_with = "present_plain", skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Whether the output carries a watermark; default true.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub watermark: Option<bool>,
    /// Only `false`.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// OpenAI's image count: only 1 (several images come from `sequential_image_generation`
    /// `auto` with `sequential_image_generation_options.max_images`, where the model has it).
    #[serde(default, deserialize_with = "present", skip_serializing)]
    #[schemars(range(min = 1, max = 1))]
    pub n: Option<i64>,
    /// Reference images: one string or an array of strings.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    #[serde(borrow)]
    pub image: Option<ImageRefs<'a>>,
    /// A named size of the model, or `<W>x<H>`.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// `auto` or `disabled` (models with sequential generation).
    #[serde(default, deserialize_with = "present_plain", skip_serializing_if = "Option::is_none")]
    pub sequential_image_generation: Option<SequentialMode>,
    /// Sequential generation options (models with sequential generation).
    #[serde(default, deserialize_with = "present_object", skip_serializing_if = "Option::is_none")]
    pub sequential_image_generation_options: Option<SequentialOptions>,
    /// `png` or `jpeg` (models with output formats).
    #[serde(default, deserialize_with = "present_plain", skip_serializing_if = "Option::is_none")]
    pub output_format: Option<OutputFormat>,
    /// The prompt-optimisation switch (models with the toggle).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub optimize_prompt: Option<bool>,
    /// Prompt-optimisation options.
    #[serde(default, deserialize_with = "present_object", skip_serializing_if = "Option::is_none")]
    pub optimize_prompt_options: Option<OptimizePromptOptions>,
    /// −1 (random) or a fixed seed (models with a seed).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
}

/// `sequential_image_generation_options`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SequentialOptions {
    /// Most images generated; bounded per model (signed, so that a negative value gets the bound's message).
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub max_images: Option<i64>,
}

/// `optimize_prompt_options`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OptimizePromptOptions {
    /// `standard` or `fast` (per model).
    #[serde(default, deserialize_with = "present_plain", skip_serializing_if = "Option::is_none")]
    pub mode: Option<PromptMode>,
    /// `auto`, `enabled` or `disabled` (models that accept it).
    #[serde(default, deserialize_with = "present_plain", skip_serializing_if = "Option::is_none")]
    pub thinking: Option<PromptThinking>,
}

/// Defines a string enum with its wire names, `ALL` and `as_str`.
macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $wire:literal),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $wire)] $variant),+
        }

        impl $name {
            /// Every value.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The wire name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire),+
                }
            }

            /// The value whose wire name is `name`.
            pub fn from_name(name: &str) -> Option<$name> {
                $name::ALL.iter().copied().find(|v| v.as_str() == name)
            }
        }
    };
}

wire_enum!(
    /// `response_format`.
    ResponseFormat {
        /// A temporary link.
        Url = "url",
        /// Inline Base64.
        B64Json = "b64_json",
    }
);
wire_enum!(
    /// `sequential_image_generation`.
    SequentialMode {
        /// Several images in one request.
        Auto = "auto",
        /// One image.
        Disabled = "disabled",
    }
);
wire_enum!(
    /// `output_format`.
    OutputFormat {
        /// PNG.
        Png = "png",
        /// JPEG.
        Jpeg = "jpeg",
    }
);
wire_enum!(
    /// `optimize_prompt_options.mode`.
    PromptMode {
        /// Standard optimisation.
        Standard = "standard",
        /// Faster optimisation.
        Fast = "fast",
    }
);
wire_enum!(
    /// `optimize_prompt_options.thinking`.
    PromptThinking {
        /// The model decides.
        Auto = "auto",
        /// Always think.
        Enabled = "enabled",
        /// Never think.
        Disabled = "disabled",
    }
);

/// What the service needs for a valid image request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePlan<'a> {
    /// The request normalised, with the model's defaults applied.
    pub request: ImageRequest<'a>,
    /// How many `image` references.
    pub reference_images: u64,
    /// Worst case of images generated: with sequential `auto`, `max_images` (filled in as
    /// `max_total_images − references`, at most `max_images.max`, when absent); otherwise 1.
    pub max_images: u64,
    /// Worst case pixels of one output: a custom size's W×H, a named size's `named_pixels`, and without a
    /// size or default the model's largest (named or custom).
    pub max_pixels_per_image: u64,
    /// `text` (no references), `url`, `base64` or `mixed`.
    pub input_mode: domain::InputMode,
}

impl ImagePlan<'_> {
    /// The same plan, owning its references (no longer tied to the body it was read from).
    pub fn into_owned(self) -> ImagePlan<'static> {
        let ImagePlan { request, reference_images, max_images, max_pixels_per_image, input_mode } = self;
        let request = ImageRequest { image: request.image.map(ImageRefs::into_owned), ..request };
        ImagePlan { request, reference_images, max_images, max_pixels_per_image, input_mode }
    }

    /// What the upstream is asked for: the normalised request for model `upstream_model_id`,
    /// borrowing its text (the upstream adapter writes the body).
    pub fn generation<'p>(&'p self, upstream_model_id: &'p str) -> ImageGeneration<'p> {
        let req = &self.request;
        let references = req.image.as_ref().map(|refs| match refs {
            ImageRefs::One(one) => ImageReferences::One(one),
            ImageRefs::Many(many) => ImageReferences::Many(many.iter().map(|r| r.as_ref()).collect()),
        });
        ImageGeneration {
            model: upstream_model_id,
            prompt: &req.prompt,
            response_format: req.response_format.map(ResponseFormat::as_str),
            watermark: req.watermark,
            stream: req.stream,
            references,
            size: req.size.as_deref(),
            sequential: req.sequential_image_generation.map(SequentialMode::as_str),
            sequential_options: req
                .sequential_image_generation_options
                .map(|o| SequentialImages { max_images: o.max_images }),
            output_format: req.output_format.map(OutputFormat::as_str),
            optimize_prompt: req.optimize_prompt,
            prompt_options: req.optimize_prompt_options.map(|o| PromptOptimisation {
                mode: o.mode.map(PromptMode::as_str),
                thinking: o.thinking.map(PromptThinking::as_str),
            }),
            seed: req.seed,
        }
    }
}

/// Reads an image request body: JSON syntax, types, unknown fields and enum values. The model's rules
/// are [`check_image_request`]'s.
pub fn parse_image_request(body: &[u8]) -> Result<ImageRequest<'_>, ValidationError> {
    shape::parse_body(body)
}

/// Checks `req` against model `def`'s branch (fields it does not have are refused) and limits, applies
/// the defaults (spec rule 3 for `optimize_prompt`) and returns the plan. A Base64 reference above the
/// model's decoded limit is `TooLarge` (413); everything else is `Invalid` (400).
pub fn check_image_request<'a>(def: &ModelDef, mut req: ImageRequest<'a>) -> Result<ImagePlan<'a>, ValidationError> {
    let Some(limits) = def.image_limits() else {
        return Err(invalid(format!("model {} is not an image model", def.name)));
    };
    if req.model != def.name {
        return Err(invalid(format!("model must be {}, got {}", def.name, shape::quote(&req.model))));
    }
    check_branch_fields(def, limits, &req)?;
    if let Some(n) = req.n.filter(|n| *n != 1) {
        let more = if limits.sequential_generation.is_some() {
            "; for several images send sequential_image_generation \"auto\" with sequential_image_generation_options.max_images"
        } else {
            ""
        };
        return Err(invalid(format!("n must be 1, got {n}: a call makes one image{more}")));
    }
    check_prompt(def, limits, &req.prompt)?;
    if req.stream == Some(true) && !limits.streaming {
        return Err(invalid("stream must be false: image generation answers in one response".to_owned()));
    }
    let refs = refs::check(limits, req.image.as_ref())?;
    let (size, max_pixels_per_image) = size::check(def, limits, req.size.as_deref())?;
    req.size = size;
    let max_images = apply_sequential(def, limits, &mut req, refs.count)?;
    apply_output_options(def, limits, &mut req)?;
    let response_format = match req.response_format {
        Some(format) => format,
        None => from_catalog(def, "default_response_format", &limits.default_response_format)?,
    };
    listed(def, "response_format", response_format.as_str(), &limits.response_formats)?;
    req.response_format = Some(response_format);
    req.watermark.get_or_insert(limits.watermark_default);
    Ok(ImagePlan {
        request: req,
        reference_images: refs.count,
        max_images,
        max_pixels_per_image,
        input_mode: refs.mode,
    })
}

/// Refuses fields that the model's branch does not have.
fn check_branch_fields(def: &ModelDef, limits: &ImageLimits, req: &ImageRequest<'_>) -> Result<(), ValidationError> {
    let thinking = req.optimize_prompt_options.is_some_and(|o| o.thinking.is_some());
    let present = [
        (
            "sequential_image_generation",
            req.sequential_image_generation.is_some(),
            limits.sequential_generation.is_some(),
        ),
        (
            "sequential_image_generation_options",
            req.sequential_image_generation_options.is_some(),
            limits.sequential_generation.is_some(),
        ),
        ("output_format", req.output_format.is_some(), limits.output_formats.supported),
        ("optimize_prompt", req.optimize_prompt.is_some(), limits.optimize_prompt.toggle),
        ("optimize_prompt_options.thinking", thinking, limits.optimize_prompt.thinking_default.is_some()),
        ("seed", req.seed.is_some(), limits.seed.is_some()),
    ];
    match present.iter().find(|(_, given, allowed)| *given && !*allowed) {
        Some((field, ..)) => Err(invalid(format!("{field} is not accepted by model {}", def.name))),
        None => Ok(()),
    }
}

/// The prompt's length in characters (not bytes) against the model's bounds.
fn check_prompt(def: &ModelDef, limits: &ImageLimits, prompt: &str) -> Result<(), ValidationError> {
    let chars = u64::try_from(prompt.chars().count()).unwrap_or(u64::MAX);
    let (min, max) = (limits.prompt.min_chars, limits.prompt.max_chars);
    if (min..=max).contains(&chars) {
        Ok(())
    } else {
        Err(invalid(format!("prompt must be {min}..{max} characters for model {}, got {chars}", def.name)))
    }
}

/// Sequential generation: mode, `max_images` range, references + outputs bound; returns the worst-case
/// image count and fills in the defaults.
fn apply_sequential(
    def: &ModelDef,
    limits: &ImageLimits,
    req: &mut ImageRequest<'_>,
    references: u64,
) -> Result<u64, ValidationError> {
    let Some(seq) = &limits.sequential_generation else { return Ok(1) };
    let mode = match req.sequential_image_generation {
        Some(mode) => mode,
        None => from_catalog(def, "sequential_generation.default", &seq.default)?,
    };
    listed(def, "sequential_image_generation", mode.as_str(), &seq.modes)?;
    req.sequential_image_generation = Some(mode);
    let given = req.sequential_image_generation_options.and_then(|o| o.max_images);
    if let Some(n) = given
        && !u64::try_from(n).is_ok_and(|n| seq.max_images.contains(n))
    {
        return Err(invalid(format!(
            "sequential_image_generation_options.max_images must be an integer from {} to {}, got {n}",
            seq.max_images.min, seq.max_images.max
        )));
    }
    if mode != SequentialMode::Auto {
        return Ok(1);
    }
    let room = seq.max_total_images.saturating_sub(references);
    let max_images = match given.and_then(|n| u64::try_from(n).ok()) {
        Some(n) if n > room => {
            return Err(invalid(format!(
                "image references ({references}) plus sequential_image_generation_options.max_images ({n}) \
                 must be at most {} for model {}",
                seq.max_total_images, def.name
            )));
        }
        Some(n) => n,
        None => room.min(seq.max_images.max),
    };
    if max_images < seq.max_images.min {
        return Err(invalid(format!(
            "sequential generation needs room for {} image(s), but {references} references leave {room}",
            seq.max_images.min
        )));
    }
    req.sequential_image_generation_options = Some(SequentialOptions { max_images: i64::try_from(max_images).ok() });
    Ok(max_images)
}

/// `output_format`, `optimize_prompt` (rule 3), `optimize_prompt_options` and `seed`, with defaults.
fn apply_output_options(
    def: &ModelDef,
    limits: &ImageLimits,
    req: &mut ImageRequest<'_>,
) -> Result<(), ValidationError> {
    let formats = &limits.output_formats;
    if let Some(format) = req.output_format {
        listed(def, "output_format", format.as_str(), &formats.values)?;
    } else if let Some(default) = &formats.default {
        req.output_format = Some(from_catalog(def, "output_formats.default", default)?);
    }
    let opt = &limits.optimize_prompt;
    if let Some(mode) = req.optimize_prompt_options.and_then(|o| o.mode) {
        listed(def, "optimize_prompt_options.mode", mode.as_str(), &opt.modes)?;
    }
    let optimize = req.optimize_prompt.or(opt.default);
    if optimize == Some(false) {
        // Rule 3: with optimisation off the options are ignored, so they are not sent.
        req.optimize_prompt_options = None;
    } else if optimize == Some(true) || req.optimize_prompt_options.is_some() {
        let given = req.optimize_prompt_options.unwrap_or(OptimizePromptOptions { mode: None, thinking: None });
        let mode = match given.mode {
            Some(mode) => mode,
            None => from_catalog(def, "optimize_prompt.default_mode", &opt.default_mode)?,
        };
        let thinking = match (given.thinking, &opt.thinking_default) {
            (Some(thinking), _) => Some(thinking),
            (None, Some(default)) => Some(from_catalog(def, "optimize_prompt.thinking_default", default)?),
            (None, None) => None,
        };
        req.optimize_prompt_options = Some(OptimizePromptOptions { mode: Some(mode), thinking });
    }
    if opt.toggle {
        // Rule 3: options supplied (or defaulted) mean the upstream switch is on unless the client said false.
        req.optimize_prompt = Some(optimize != Some(false));
    }
    if let Some(seed) = &limits.seed {
        let value = *req.seed.get_or_insert(seed.default);
        if !(seed.min..=seed.max).contains(&value) {
            return Err(invalid(format!("seed must be an integer from {} to {}, got {value}", seed.min, seed.max)));
        }
    }
    Ok(())
}

/// A catalog default as a request enum value.
fn from_catalog<T>(def: &ModelDef, field: &str, name: &str) -> Result<T, ValidationError>
where
    T: CatalogValue,
{
    T::from_catalog_name(name).ok_or_else(|| {
        invalid(format!("model {}: the catalog's {field} {name:?} is not a value this gateway knows", def.name))
    })
}

/// Request enums whose defaults the catalog names.
trait CatalogValue: Sized {
    fn from_catalog_name(name: &str) -> Option<Self>;
}

macro_rules! catalog_value {
    ($($name:ident),+) => {
        $(impl CatalogValue for $name {
            fn from_catalog_name(name: &str) -> Option<Self> {
                $name::from_name(name)
            }
        })+
    };
}
catalog_value!(ResponseFormat, SequentialMode, OutputFormat, PromptMode, PromptThinking);

/// That `value` is one of the model's `allowed` values.
fn listed(def: &ModelDef, field: &str, value: &str, allowed: &[String]) -> Result<(), ValidationError> {
    if allowed.iter().any(|a| a == value) {
        Ok(())
    } else {
        Err(invalid(format!("{field} must be one of {} for model {}, got {value:?}", allowed.join(", "), def.name)))
    }
}

#[cfg(test)]
mod tests;
