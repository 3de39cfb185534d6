//! `ModelDef`: one catalog entry, its per-kind defaults, and its conversion to and from the stored definition.

use domain::{ModelKind, ModelSeed, PriceSheet, Scope};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::CatalogError;
use crate::limits::{AudioLimits, ImageLimits, KindLimits, LanguageLimits, VideoLimits};
use crate::pricing::optional_sheet;

/// The smallest accepted per-model concurrency cap.
pub const MIN_CONCURRENCY_LIMIT: i64 = 1;
/// The largest accepted per-model concurrency cap.
pub const MAX_CONCURRENCY_LIMIT: i64 = 100_000;

/// Whether the result comes back in the response or through a task that is polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The result is in the response (chat, image, audio).
    Synchronous,
    /// The response is a task record, polled until terminal (video).
    Asynchronous,
}

impl Mode {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Synchronous => "synchronous",
            Mode::Asynchronous => "asynchronous",
        }
    }
}

/// What a model's rates are counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PricingKind {
    /// Prompt and completion tokens (language models).
    PerToken,
    /// Generated and reference images (image models).
    PerImage,
    /// Output tokens reported by the upstream, by resolution (video models).
    PerOutputToken,
    /// Seconds of generated audio (audio models).
    PerSecond,
}

impl PricingKind {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            PricingKind::PerToken => "per_token",
            PricingKind::PerImage => "per_image",
            PricingKind::PerOutputToken => "per_output_token",
            PricingKind::PerSecond => "per_second",
        }
    }
}

/// What every model of one kind shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindDefaults {
    /// The generation path the model is used with.
    pub endpoint: &'static str,
    /// The key scope that path needs.
    pub scope: Scope,
    /// Synchronous or asynchronous.
    pub mode: Mode,
    /// What the rates count.
    pub pricing_kind: PricingKind,
    /// The default platform-wide concurrency cap.
    pub concurrency_limit: i64,
}

/// The endpoint, scope, mode, pricing kind and default cap of models of `kind`.
pub const fn kind_defaults(kind: ModelKind) -> KindDefaults {
    match kind {
        ModelKind::Language => KindDefaults {
            endpoint: "/api/v1/chat/completions",
            scope: Scope::LanguageCreate,
            mode: Mode::Synchronous,
            pricing_kind: PricingKind::PerToken,
            concurrency_limit: 1000,
        },
        ModelKind::Image => KindDefaults {
            endpoint: "/api/v1/images/generations",
            scope: Scope::ImageCreate,
            mode: Mode::Synchronous,
            pricing_kind: PricingKind::PerImage,
            concurrency_limit: 200,
        },
        ModelKind::Video => KindDefaults {
            endpoint: "/api/v1/tasks",
            scope: Scope::VideoCreate,
            mode: Mode::Asynchronous,
            pricing_kind: PricingKind::PerOutputToken,
            concurrency_limit: 100,
        },
        ModelKind::Audio => KindDefaults {
            endpoint: "/api/v1/audio/generations",
            scope: Scope::AudioCreate,
            mode: Mode::Synchronous,
            pricing_kind: PricingKind::PerSecond,
            concurrency_limit: 200,
        },
    }
}

/// Where a model is served upstream. Never shown to API users.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpstreamProfile {
    /// The upstream service: `ark` (the content-generation platform) or `speech`.
    pub provider: String,
    /// The model id the upstream expects, such as `doubao-seedance-2-0-260128`.
    pub model_id: String,
    /// Which configured base URL to call: `upstream` (`GATEWAY_UPSTREAM_URL`) or `speech` (`GATEWAY_SPEECH_URL`).
    pub base_url_key: String,
}

/// One catalog entry: everything the gateway knows about a model besides operator changes.
///
/// Deserializing one (directly or through [`ModelDef::from_definition`] / the catalog's
/// `Catalog::from_json`) also parses `limits` into the typed [`KindLimits`] of its kind; a limit that
/// is missing, misspelt or of the wrong type refuses the entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "ModelDefRaw")]
pub struct ModelDef {
    /// Public name, the value of a request's `model` field.
    pub name: String,
    /// Which endpoint the model is used with.
    #[serde(with = "as_text")]
    pub kind: ModelKind,
    /// Human-readable description.
    pub description: Option<String>,
    /// Initial switch; the store's value wins once seeded.
    pub enabled: bool,
    /// Initial platform-wide cap, 1..=100000; the store's value wins once seeded.
    pub concurrency_limit: i64,
    /// The generation path, such as `/api/v1/chat/completions`.
    pub endpoint: String,
    /// The key scope the endpoint needs.
    #[serde(with = "as_text")]
    pub scope: Scope,
    /// Synchronous or asynchronous.
    pub mode: Mode,
    /// What the rates count.
    pub pricing_kind: PricingKind,
    /// Capability names, such as `streaming` or `text_to_image`.
    pub capabilities: Vec<String>,
    /// The model's limits as an open JSON object, shown to API users as is. Rules read the typed copy,
    /// [`ModelDef::typed_limits`], parsed from this object when the entry was built; the two are only
    /// kept in step by building a new entry, so treat this field as read-only.
    pub limits: Value,
    /// Where the model is served upstream.
    pub upstream: UpstreamProfile,
    /// Default prices (the first pricing version); `None` for an unpriced model.
    #[serde(default, with = "optional_sheet", skip_serializing_if = "Option::is_none")]
    pub pricing: Option<PriceSheet>,
    /// `limits`, typed by kind.
    #[serde(skip)]
    typed: KindLimits,
}

/// The serde form of [`ModelDef`], before its limits are typed.
#[derive(Deserialize)]
pub(crate) struct ModelDefRaw {
    pub(crate) name: String,
    #[serde(with = "as_text")]
    pub(crate) kind: ModelKind,
    description: Option<String>,
    enabled: bool,
    concurrency_limit: i64,
    endpoint: String,
    #[serde(with = "as_text")]
    scope: Scope,
    mode: Mode,
    pricing_kind: PricingKind,
    capabilities: Vec<String>,
    limits: Value,
    upstream: UpstreamProfile,
    #[serde(default, with = "optional_sheet")]
    pricing: Option<PriceSheet>,
}

impl TryFrom<ModelDefRaw> for ModelDef {
    type Error = CatalogError;

    /// Types the entry's limits by its kind: `LimitsNotObject` or `Limits` (naming the field) on failure.
    fn try_from(raw: ModelDefRaw) -> Result<ModelDef, CatalogError> {
        if !raw.limits.is_object() {
            return Err(CatalogError::LimitsNotObject(raw.name));
        }
        let typed = KindLimits::parse(raw.kind, &raw.limits).map_err(|e| CatalogError::Limits {
            model: raw.name.clone(),
            field: if e.field.is_empty() { "limits".to_owned() } else { format!("limits.{}", e.field) },
            message: e.message,
        })?;
        Ok(ModelDef {
            name: raw.name,
            kind: raw.kind,
            description: raw.description,
            enabled: raw.enabled,
            concurrency_limit: raw.concurrency_limit,
            endpoint: raw.endpoint,
            scope: raw.scope,
            mode: raw.mode,
            pricing_kind: raw.pricing_kind,
            capabilities: raw.capabilities,
            limits: raw.limits,
            upstream: raw.upstream,
            pricing: raw.pricing,
            typed,
        })
    }
}

impl ModelDef {
    /// The store seed: switches, the definition as JSON text without pricing, and the default sheet.
    pub fn seed(&self) -> ModelSeed {
        ModelSeed {
            name: self.name.clone(),
            kind: self.kind,
            enabled: self.enabled,
            concurrency_limit: self.concurrency_limit,
            definition: self.definition_value().to_string(),
            sheet: self.pricing.clone(),
        }
    }

    /// Reads a definition stored by [`ModelDef::seed`]; the result has no pricing (prices live in the store).
    pub fn from_definition(json: &str) -> Result<ModelDef, CatalogError> {
        let raw: ModelDefRaw = serde_json::from_str(json).map_err(|e| CatalogError::Definition(e.to_string()))?;
        let mut def = ModelDef::try_from(raw)?;
        def.pricing = None;
        def.validate()?;
        Ok(def)
    }

    /// The largest completion a language model allows: `limits.max_completion_tokens`, else
    /// `limits.max_tokens.max`; `None` for other kinds.
    pub fn max_completion_tokens(&self) -> Option<u64> {
        self.language_limits().map(LanguageLimits::max_completion_tokens)
    }

    /// The limits, typed by the model's kind.
    pub fn typed_limits(&self) -> &KindLimits {
        &self.typed
    }

    /// The limits of a language model; `None` for other kinds.
    pub fn language_limits(&self) -> Option<&LanguageLimits> {
        match &self.typed {
            KindLimits::Language(limits) => Some(limits),
            _ => None,
        }
    }

    /// The limits of an image model; `None` for other kinds.
    pub fn image_limits(&self) -> Option<&ImageLimits> {
        match &self.typed {
            KindLimits::Image(limits) => Some(limits),
            _ => None,
        }
    }

    /// The limits of a video model; `None` for other kinds.
    pub fn video_limits(&self) -> Option<&VideoLimits> {
        match &self.typed {
            KindLimits::Video(limits) => Some(limits),
            _ => None,
        }
    }

    /// The limits of an audio model; `None` for other kinds.
    pub fn audio_limits(&self) -> Option<&AudioLimits> {
        match &self.typed {
            KindLimits::Audio(limits) => Some(limits),
            _ => None,
        }
    }

    /// The limits object as shown to API users.
    pub fn public_limits(&self) -> &Value {
        &self.limits
    }

    /// Whether the capability list names `capability`.
    pub fn has_capability(&self, capability: &str) -> bool {
        self.capabilities.iter().any(|c| c == capability)
    }

    /// Checks what one entry must satisfy on its own: cap range, a limits object,
    /// the endpoint, scope, mode and pricing kind of its kind, and a usable price sheet.
    pub fn validate(&self) -> Result<(), CatalogError> {
        if !(MIN_CONCURRENCY_LIMIT..=MAX_CONCURRENCY_LIMIT).contains(&self.concurrency_limit) {
            return Err(CatalogError::ConcurrencyLimit { model: self.name.clone(), value: self.concurrency_limit });
        }
        if !self.limits.is_object() {
            return Err(CatalogError::LimitsNotObject(self.name.clone()));
        }
        if self.typed.kind() != self.kind {
            return Err(CatalogError::Limits {
                model: self.name.clone(),
                field: "limits".to_owned(),
                message: format!("typed as {} limits, but the model is {}", self.typed.kind(), self.kind),
            });
        }
        let defaults = kind_defaults(self.kind);
        let checks = [
            ("endpoint", defaults.endpoint, self.endpoint.as_str()),
            ("scope", defaults.scope.as_str(), self.scope.as_str()),
            ("mode", defaults.mode.as_str(), self.mode.as_str()),
            ("pricing_kind", defaults.pricing_kind.as_str(), self.pricing_kind.as_str()),
        ];
        for (field, expected, found) in checks {
            if expected != found {
                return Err(CatalogError::KindMismatch {
                    model: self.name.clone(),
                    kind: self.kind,
                    field,
                    expected: expected.to_owned(),
                    found: found.to_owned(),
                });
            }
        }
        if let Some(sheet) = &self.pricing {
            sheet.validate().map_err(|source| CatalogError::ModelPricing { model: self.name.clone(), source })?;
        }
        Ok(())
    }

    /// The definition as JSON: every field except `pricing`, in the same shape serde reads.
    fn definition_value(&self) -> Value {
        let mut upstream = Map::new();
        upstream.insert("provider".into(), Value::String(self.upstream.provider.clone()));
        upstream.insert("model_id".into(), Value::String(self.upstream.model_id.clone()));
        upstream.insert("base_url_key".into(), Value::String(self.upstream.base_url_key.clone()));

        let mut object = Map::new();
        object.insert("name".into(), Value::String(self.name.clone()));
        object.insert("kind".into(), Value::String(self.kind.as_str().into()));
        object.insert("description".into(), self.description.clone().map_or(Value::Null, Value::String));
        object.insert("enabled".into(), Value::Bool(self.enabled));
        object.insert("concurrency_limit".into(), Value::from(self.concurrency_limit));
        object.insert("endpoint".into(), Value::String(self.endpoint.clone()));
        object.insert("scope".into(), Value::String(self.scope.as_str().into()));
        object.insert("mode".into(), Value::String(self.mode.as_str().into()));
        object.insert("pricing_kind".into(), Value::String(self.pricing_kind.as_str().into()));
        object.insert("capabilities".into(), self.capabilities.iter().cloned().map(Value::String).collect());
        object.insert("limits".into(), self.limits.clone());
        object.insert("upstream".into(), Value::Object(upstream));
        Value::Object(object)
    }
}

/// Serde adapter for domain enums that have a text form (`Display` + `FromStr`) but no serde support.
mod as_text {
    use std::fmt::Display;
    use std::str::FromStr;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the value's text form.
    pub(super) fn serialize<T: Display, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(value)
    }

    /// Parses the value from its text form.
    pub(super) fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: Deserializer<'de>,
    {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::Rate;

    /// The builtin catalog's document, the one the catalog loads.
    const BUILTIN_JSON: &str = include_str!("../../../fixtures/catalog.json");

    /// The builtin entry `name`, read as the catalog reads each entry.
    fn builtin(name: &str) -> ModelDef {
        let document: Value = serde_json::from_str(BUILTIN_JSON).expect("the builtin catalog is JSON");
        let models = document["models"].as_array().expect("a models array");
        let entry = models.iter().find(|m| m["name"] == name).expect("model");
        serde_json::from_value(entry.clone()).expect("the entry reads")
    }

    fn sample() -> ModelDef {
        let mut sheet = PriceSheet::default();
        sheet.rates.insert(
            "output_audio_seconds".into(),
            Rate { amount_microusd: 2500, denominator: 1, unit: "second".into() },
        );
        ModelDef { pricing: Some(sheet), ..builtin("AudioGen-1.0") }
    }

    /// `def` stored and read back with `limits` replaced.
    fn with_limits(def: &ModelDef, limits: Value) -> Result<ModelDef, CatalogError> {
        let mut stored: Value = serde_json::from_str(&def.seed().definition).expect("definition is JSON");
        stored["limits"] = limits;
        ModelDef::from_definition(&stored.to_string())
    }

    #[test]
    fn definition_matches_serde_without_pricing() {
        let def = sample();
        let seed = def.seed();
        let mut serde_form = serde_json::to_value(&def).expect("serializes");
        assert!(serde_form.get("pricing").is_some());
        if let Some(object) = serde_form.as_object_mut() {
            object.remove("pricing");
        }
        let stored: Value = serde_json::from_str(&seed.definition).expect("definition is JSON");
        assert_eq!(stored, serde_form);
        assert_eq!(seed.sheet, def.pricing);
        let back = ModelDef::from_definition(&seed.definition).expect("definition reads back");
        assert_eq!(back, ModelDef { pricing: None, ..def.clone() });
        let through_serde: ModelDef = serde_json::from_value(serde_json::to_value(&def).expect("ser")).expect("de");
        assert_eq!(through_serde, def);
        assert_eq!(through_serde.typed_limits(), def.typed_limits());
    }

    #[test]
    fn from_definition_checks_the_entry() {
        let mut def = sample();
        def.endpoint = "/api/v1/tasks".into();
        let err = ModelDef::from_definition(&def.seed().definition);
        assert!(matches!(err, Err(CatalogError::KindMismatch { field: "endpoint", .. })), "{err:?}");

        let err = with_limits(&sample(), Value::Array(vec![]));
        assert_eq!(err, Err(CatalogError::LimitsNotObject("AudioGen-1.0".into())));

        let err = ModelDef::from_definition(r#"{"name": "x", "kind": "sound"}"#);
        assert!(matches!(err, Err(CatalogError::Definition(ref m)) if m.contains("unknown model kind")), "{err:?}");
        assert!(ModelDef::from_definition("not json").is_err());
    }

    #[test]
    fn limits_are_typed_by_kind() {
        let audio = sample();
        assert_eq!(audio.audio_limits().map(|l| l.reserve_seconds), Some(120));
        assert!(audio.image_limits().is_none() && audio.language_limits().is_none() && audio.video_limits().is_none());
        assert_eq!(audio.typed_limits().kind(), ModelKind::Audio);
        let image = builtin("Vendor-Imagegen-5.0-pro");
        assert_eq!(image.image_limits().map(|l| l.reference_images.max_items), Some(10));
        let video = builtin("videogen-2-0");
        assert_eq!(video.video_limits().map(|l| l.duration.max), Some(15));
        let chat = builtin("LangB-2.0-pro");
        let sampling = chat.language_limits().and_then(|l| l.sampling.as_ref()).expect("sampling");
        assert_eq!(sampling.top_p.enforced.as_ref().map(ToString::to_string), Some("0.95".to_owned()));
    }

    #[test]
    fn a_misspelt_or_missing_limit_refuses_the_entry() {
        let def = sample();
        let mut misspelt = def.limits.clone();
        misspelt["reserve_secs"] = misspelt["reserve_seconds"].take();
        if let Some(o) = misspelt.as_object_mut() {
            o.remove("reserve_seconds");
        }
        let err = with_limits(&def, misspelt).expect_err("misspelt");
        assert!(
            matches!(&err, CatalogError::Limits { model, field, message }
                if model == "AudioGen-1.0" && field == "limits.reserve_secs" && message.contains("unknown field")),
            "{err:?}"
        );
        let mut missing = def.limits.clone();
        if let Some(o) = missing.as_object_mut() {
            o.remove("reserve_seconds");
        }
        let err = with_limits(&def, missing).expect_err("missing");
        assert!(
            matches!(&err, CatalogError::Limits { field, message, .. }
                if field == "limits" && message.contains("missing field `reserve_seconds`")),
            "{err:?}"
        );
        let mut nested = def.limits.clone();
        nested["references"]["max_base64_byte"] = Value::from(1);
        let err = with_limits(&def, nested).expect_err("nested unknown");
        assert!(
            matches!(&err, CatalogError::Limits { field, .. } if field == "limits.references.max_base64_byte"),
            "{err:?}"
        );
        let mut wrong_type = def.limits.clone();
        wrong_type["speech_rate"]["min"] = Value::from("-50");
        let err = with_limits(&def, wrong_type).expect_err("wrong type");
        assert!(matches!(&err, CatalogError::Limits { field, .. } if field == "limits.speech_rate.min"), "{err:?}");
        assert!(err.to_string().starts_with("model AudioGen-1.0: limits.speech_rate.min: "), "{err}");
    }

    #[test]
    fn max_completion_tokens_falls_back_to_max_tokens() {
        assert_eq!(sample().max_completion_tokens(), None);
        let flash = builtin("LangA-V4-flash");
        assert_eq!(flash.max_completion_tokens(), Some(393_216));
        let mut limits = flash.limits.clone();
        if let Some(o) = limits.as_object_mut() {
            o.remove("max_completion_tokens");
        }
        limits["max_tokens"]["max"] = Value::from(100_000);
        assert_eq!(with_limits(&flash, limits.clone()).map(|d| d.max_completion_tokens()), Ok(Some(100_000)));
        limits["max_completion_tokens"] = Value::from(131_072);
        assert_eq!(with_limits(&flash, limits).map(|d| d.max_completion_tokens()), Ok(Some(131_072)));
    }
}
