//! Tests of the builtin catalog against the interface's tables and DESIGN §3, and of catalog validation.

use domain::{ModelKind, Rate, Scope};
use serde_json::{Value, json};

use super::*;
use crate::model::{Mode, PricingKind, kind_defaults};

fn builtin() -> Catalog {
    Catalog::builtin().expect("the builtin catalog loads")
}

fn model<'a>(catalog: &'a Catalog, name: &str) -> &'a ModelDef {
    let found = catalog.get(name);
    assert!(found.is_some(), "no model {name}");
    found.expect("checked above")
}

/// One expected rate: name, micro-USD, denominator, unit.
type Expected = (String, i64, i64, &'static str);

/// Compares a model's sheet with the expected table rate by rate, and checks that it has no other rates.
fn assert_rates(catalog: &Catalog, name: &str, expected: &[Expected]) {
    let sheet = model(catalog, name).pricing.as_ref();
    assert!(sheet.is_some(), "{name} has no pricing");
    let sheet = sheet.expect("checked above");
    for (rate_name, amount, denominator, unit) in expected {
        let want = Rate { amount_microusd: *amount, denominator: *denominator, unit: (*unit).to_owned() };
        assert_eq!(sheet.rate(rate_name), Some(&want), "{name}: rate {rate_name}");
    }
    let mut have: Vec<&str> = sheet.rates.keys().map(String::as_str).collect();
    let mut want: Vec<&str> = expected.iter().map(|(n, ..)| n.as_str()).collect();
    have.sort_unstable();
    want.sort_unstable();
    assert_eq!(have, want, "{name}: rate names");
}

/// The language rates of one tier: input, output, cache hit, optional (audio input, audio cache hit), storage.
fn lang_tier(
    suffix: &str,
    input: i64,
    output: i64,
    cache: i64,
    audio: Option<(i64, i64)>,
    storage: i64,
) -> Vec<Expected> {
    let per_million = |key: &str, amount: i64, unit: &'static str| (format!("{key}{suffix}"), amount, 1_000_000, unit);
    let mut rates = vec![
        per_million("input_tokens", input, "token"),
        per_million("output_tokens", output, "token"),
        per_million("cache_hit_tokens", cache, "token"),
        per_million("storage_token_hours", storage, "token_hour"),
    ];
    if let Some((audio_input, audio_cache)) = audio {
        rates.push(per_million("audio_input_tokens", audio_input, "token"));
        rates.push(per_million("audio_cache_hit_tokens", audio_cache, "token"));
    }
    rates
}

const LO: &str = "_lte_128k";
const HI: &str = "_gt_128k_lte_256k";

#[test]
fn builtin_has_the_fifteen_spec_models() {
    let catalog = builtin();
    assert_eq!(catalog.models.len(), 15);
    let listed: Vec<(&str, ModelKind)> = catalog.models.iter().map(|m| (m.name.as_str(), m.kind)).collect();
    assert_eq!(listed, SPEC_MODELS.to_vec());
}

#[test]
fn language_rates_match_the_spec_table() {
    let catalog = builtin();
    let code_pro = [
        lang_tier(LO, 500_000, 3_000_000, 100_000, None, 8300),
        lang_tier(HI, 1_000_000, 6_000_000, 200_000, None, 8300),
    ]
    .concat();
    let table: Vec<(&str, Vec<Expected>)> = vec![
        ("LangA-V4-flash", lang_tier("", 140_000, 280_000, 28_000, None, 8300)),
        ("LangA-V4-pro", lang_tier("", 1_740_000, 3_480_000, 145_000, None, 8300)),
        ("LangB-2.0-Code", code_pro.clone()),
        ("LangB-2.0-pro", code_pro),
        (
            "LangB-2.0-lite",
            [
                lang_tier(LO, 250_000, 2_000_000, 50_000, Some((3_750_000, 750_000)), 8300),
                lang_tier(HI, 500_000, 4_000_000, 100_000, Some((7_500_000, 1_500_000)), 8300),
            ]
            .concat(),
        ),
        (
            "LangB-2.0-mini",
            [
                lang_tier(LO, 100_000, 400_000, 20_000, Some((1_500_000, 300_000)), 8300),
                lang_tier(HI, 200_000, 800_000, 40_000, Some((3_000_000, 600_000)), 8300),
            ]
            .concat(),
        ),
        ("LangB-2.1-turbo", lang_tier("", 500_000, 2_500_000, 100_000, None, 8300)),
    ];
    for (name, expected) in &table {
        assert_rates(&catalog, name, expected);
    }
}

#[test]
fn image_rates_match_the_spec_table() {
    let catalog = builtin();
    let per_image = |key: &str, amount: i64| (key.to_owned(), amount, 1, "image");
    assert_rates(
        &catalog,
        "Vendor-Imagegen-4.5",
        &[per_image("text_to_image_pieces", 36_000), per_image("image_to_image_pieces", 36_000)],
    );
    assert_rates(
        &catalog,
        "Vendor-Imagegen-5.0-lite",
        &[per_image("text_to_image_pieces", 31_500), per_image("image_to_image_pieces", 31_500)],
    );
    assert_rates(
        &catalog,
        "Vendor-Imagegen-5.0-pro",
        &[
            per_image("input_images", 3_000),
            per_image("output_images_lte_2360000_pixels", 45_000),
            per_image("output_images_gt_2360000_pixels", 90_000),
        ],
    );
}

#[test]
fn video_and_audio_rates_match_the_design() {
    let catalog = builtin();
    let video = |rows: &[(&str, i64, i64)]| -> Vec<Expected> {
        rows.iter()
            .flat_map(|(res, plain, with_video)| {
                [
                    (format!("output_tokens_{res}"), *plain, 1_000_000, "token"),
                    (format!("output_tokens_{res}_with_video_input"), *with_video, 1_000_000, "token"),
                ]
            })
            .collect()
    };
    assert_rates(
        &catalog,
        "videogen-2-0",
        &video(&[
            ("480p", 7_000_000, 4_300_000),
            ("720p", 7_000_000, 4_300_000),
            ("1080p", 7_700_000, 4_700_000),
            ("4k", 4_000_000, 2_400_000),
        ]),
    );
    assert_rates(
        &catalog,
        "videogen-2-0-fast",
        &video(&[("480p", 5_600_000, 3_300_000), ("720p", 5_600_000, 3_300_000)]),
    );
    assert_rates(
        &catalog,
        "videogen-2-0-mini",
        &video(&[("480p", 3_500_000, 2_100_000), ("720p", 3_500_000, 2_100_000)]),
    );
    assert_rates(&catalog, "AudioGen-1.0", &[("output_audio_seconds".to_owned(), 2_500, 1, "second")]);
}

#[test]
fn only_langc_is_unpriced() {
    let catalog = builtin();
    for m in &catalog.models {
        assert_eq!(m.pricing.is_none(), m.name == "LangC-5.2", "{}", m.name);
    }
    assert_eq!(model(&catalog, "LangC-5.2").seed().sheet, None);
}

#[test]
fn every_entry_uses_its_kind_defaults() {
    for m in &builtin().models {
        let defaults = kind_defaults(m.kind);
        assert_eq!(m.endpoint, defaults.endpoint, "{}", m.name);
        assert_eq!(m.scope, defaults.scope, "{}", m.name);
        assert_eq!(m.mode, defaults.mode, "{}", m.name);
        assert_eq!(m.pricing_kind, defaults.pricing_kind, "{}", m.name);
        assert_eq!(m.concurrency_limit, defaults.concurrency_limit, "{}", m.name);
        assert!(m.enabled, "{}", m.name);
        assert!(m.description.as_deref().is_some_and(|d| !d.is_empty()), "{}", m.name);
        let base = if m.kind == ModelKind::Audio { "speech" } else { "upstream" };
        assert_eq!(m.upstream.base_url_key, base, "{}", m.name);
        assert!(!m.upstream.model_id.is_empty(), "{}", m.name);
    }
    assert_eq!(kind_defaults(ModelKind::Video).mode, Mode::Asynchronous);
    assert_eq!(kind_defaults(ModelKind::Video).scope, Scope::VideoCreate);
    assert_eq!(kind_defaults(ModelKind::Video).pricing_kind, PricingKind::PerOutputToken);
}

#[test]
fn capabilities_are_the_spec_lists() {
    let catalog = builtin();
    let langa = ["chat_completions", "streaming", "tool_calling", "deep_reasoning"];
    let seq = ["text_to_image", "image_edit", "multi_image_reference", "sequential_image_generation"];
    let table: [(&str, &[&str]); 12] = [
        ("LangA-V4-flash", &langa),
        ("LangA-V4-pro", &langa),
        ("LangB-2.0-Code", &["chat_completions", "streaming", "tool_calling", "code_generation"]),
        ("LangB-2.0-lite", &["chat_completions", "streaming", "multimodal", "deep_reasoning"]),
        ("LangB-2.0-mini", &["chat_completions", "streaming", "multimodal", "deep_reasoning"]),
        ("LangB-2.0-pro", &["chat_completions", "streaming", "multimodal", "deep_reasoning", "implicit_cache"]),
        (
            "LangB-2.1-turbo",
            &[
                "chat_completions",
                "streaming",
                "multimodal",
                "structured_output",
                "tool_calling",
                "strict_tool_calling",
                "deep_reasoning",
                "implicit_cache",
            ],
        ),
        ("LangC-5.2", &["chat_completions", "streaming"]),
        ("Vendor-Imagegen-4.5", &seq),
        ("Vendor-Imagegen-5.0-lite", &seq),
        ("Vendor-Imagegen-5.0-pro", &["text_to_image", "image_edit", "multi_image_reference"]),
        ("AudioGen-1.0", &["text_to_speech", "speaker_reference", "voice_reference", "image_reference", "subtitles"]),
    ];
    for (name, caps) in table {
        assert_eq!(model(&catalog, name).capabilities, caps, "{name}");
    }
}

#[test]
fn language_limits_follow_the_spec() {
    let catalog = builtin();
    let rows: [(&str, u64, u64, u64, u64); 8] = [
        ("LangA-V4-flash", 393_216, 1_048_576, 1_048_576, 131_072),
        ("LangA-V4-pro", 393_216, 1_048_576, 1_048_576, 131_072),
        ("LangB-2.0-Code", 131_072, 262_144, 229_376, 131_072),
        ("LangB-2.0-lite", 131_072, 262_144, 229_376, 131_072),
        ("LangB-2.0-mini", 131_072, 262_144, 229_376, 131_072),
        ("LangB-2.0-pro", 131_072, 262_144, 229_376, 131_072),
        ("LangB-2.1-turbo", 262_144, 262_144, 262_144, 262_144),
        ("LangC-5.2", 393_216, 0, 0, 0),
    ];
    for (name, max_tokens, context, input, reasoning) in rows {
        let m = model(&catalog, name);
        let limits = m.public_limits();
        assert_eq!(m.max_completion_tokens(), Some(max_tokens), "{name}");
        assert_eq!(limits.pointer("/max_tokens/max"), Some(&json!(max_tokens)), "{name}");
        assert_eq!(limits["messages"], json!({"min": 1, "max": 1000}), "{name}");
        assert_eq!(limits["max_request_bytes"], json!(104_857_600), "{name}");
        assert_eq!(limits.pointer("/stop/max_items"), Some(&json!(4)), "{name}");
        if name != "LangC-5.2" {
            assert_eq!(limits["context_window"], json!(context), "{name}");
            assert_eq!(limits["max_input_tokens"], json!(input), "{name}");
            assert_eq!(limits["max_reasoning_tokens"], json!(reasoning), "{name}");
            assert_eq!(limits.pointer("/thinking/types"), Some(&json!(["enabled", "disabled"])), "{name}");
        }
    }
    let effort = |name: &str| model(&catalog, name).limits["reasoning_effort"].clone();
    assert_eq!(effort("LangA-V4-pro"), json!({"values": ["minimal", "high", "max"], "default": null}));
    assert_eq!(effort("LangB-2.0-lite"), json!({"values": ["minimal", "low", "medium", "high"], "default": "medium"}));
    assert_eq!(effort("LangB-2.1-turbo"), json!({"values": ["minimal", "low", "medium", "high"], "default": "high"}));
    assert_eq!(effort("LangC-5.2"), json!({"values": ["minimal", "medium", "high", "max"], "default": null}));
    assert_eq!(model(&catalog, "LangA-V4-flash").limits.pointer("/thinking/default"), Some(&Value::Null));
    assert_eq!(model(&catalog, "LangB-2.0-Code").limits.pointer("/thinking/default"), Some(&json!("enabled")));
    assert_eq!(model(&catalog, "LangB-2.0-pro").limits.pointer("/sampling/top_p/enforced"), Some(&json!(0.95)));
    assert_eq!(model(&catalog, "LangB-2.0-mini").limits.pointer("/media/video/max_items"), Some(&json!(200)));
    assert_eq!(model(&catalog, "LangB-2.0-lite").limits.pointer("/media/audio/max_items"), Some(&json!(600)));
    assert_eq!(model(&catalog, "LangB-2.0-pro").limits.pointer("/media/audio"), None);
}

#[test]
fn video_image_and_audio_limits_follow_the_spec() {
    let catalog = builtin();
    let resolutions = |name: &str| model(&catalog, name).limits["resolutions"].clone();
    assert_eq!(resolutions("videogen-2-0"), json!(["480p", "720p", "1080p", "4k"]));
    assert_eq!(resolutions("videogen-2-0-fast"), json!(["480p", "720p"]));
    assert_eq!(resolutions("videogen-2-0-mini"), json!(["480p", "720p"]));
    let video = &model(&catalog, "videogen-2-0").limits;
    assert_eq!(video["duration"], json!({"min": 4, "max": 15, "auto": -1, "default": 5}));
    assert_eq!(video["upload_max_bytes"], json!({"image": 31_457_280, "video": 209_715_200, "audio": 15_728_640}));
    let pro = &model(&catalog, "Vendor-Imagegen-5.0-pro").limits;
    assert_eq!(pro.pointer("/prompt/max_chars"), Some(&json!(400_000)));
    assert_eq!(pro.pointer("/sizes/side_multiple"), Some(&json!(16)));
    assert_eq!(pro.pointer("/seed"), Some(&json!({"min": -1, "max": 2_147_483_647, "default": -1})));
    let lite = &model(&catalog, "Vendor-Imagegen-5.0-lite").limits;
    assert_eq!(lite.pointer("/sizes/named"), Some(&json!(["2K", "3K", "4K"])));
    assert_eq!(lite.pointer("/sequential_generation/max_total_images"), Some(&json!(15)));
    let audio = &model(&catalog, "AudioGen-1.0").limits;
    assert_eq!(audio["max_billed_seconds"], json!(120));
    assert_eq!(audio["reserve_seconds"], json!(120));
    assert_eq!(audio.pointer("/references/max_base64_bytes"), Some(&json!(10_485_760)));
}

#[test]
fn seeds_round_trip_through_the_definition() {
    let catalog = builtin();
    let seeds = catalog.seeds();
    assert_eq!(seeds.len(), 15);
    for (def, seed) in catalog.models.iter().zip(&seeds) {
        assert_eq!((seed.name.as_str(), seed.kind, seed.enabled), (def.name.as_str(), def.kind, def.enabled));
        assert_eq!(seed.concurrency_limit, def.concurrency_limit);
        assert_eq!(seed.sheet, def.pricing, "{}", def.name);
        assert!(!seed.definition.contains("amountMicrousd"), "{}: pricing leaked into the definition", def.name);
        let back = ModelDef::from_definition(&seed.definition).expect("definition reads back");
        let mut unpriced = def.clone();
        unpriced.pricing = None;
        assert_eq!(back, unpriced);
    }
}

/// The builtin document with `change` applied, loaded again.
fn load_changed(change: impl FnOnce(&mut Vec<Value>)) -> Result<Catalog, CatalogError> {
    let mut doc: Value = serde_json::from_str(BUILTIN_JSON).expect("fixture is JSON");
    let models = doc["models"].as_array_mut().expect("models array");
    change(models);
    Catalog::from_json(&doc.to_string())
}

#[test]
fn validation_rejects_duplicates_and_unknown_or_missing_models() {
    let duplicate = load_changed(|models| {
        let first = models[0].clone();
        models.push(first);
    });
    assert_eq!(duplicate, Err(CatalogError::DuplicateModel("videogen-2-0".into())));
    let renamed = load_changed(|models| models[1]["name"] = json!("videogen-2-0"));
    assert_eq!(renamed, Err(CatalogError::DuplicateModel("videogen-2-0".into())));
    let unknown = load_changed(|models| models[0]["name"] = json!("videogen-9"));
    assert_eq!(unknown, Err(CatalogError::UnknownModel("videogen-9".into())));
    let missing = load_changed(|models| {
        models.pop();
    });
    assert_eq!(missing, Err(CatalogError::MissingModel("AudioGen-1.0".into())));
    let wrong_kind = load_changed(|models| models[14]["kind"] = json!("language"));
    assert!(matches!(wrong_kind, Err(CatalogError::WrongKind { expected: ModelKind::Audio, .. })), "{wrong_kind:?}");
    let bad_kind = load_changed(|models| models[14]["kind"] = json!("speech"));
    assert!(matches!(bad_kind, Err(CatalogError::Malformed(_))), "{bad_kind:?}");
    assert!(matches!(Catalog::from_json("{}"), Err(CatalogError::Malformed(_))));
}

#[test]
fn validation_bounds_the_concurrency_limit() {
    for (value, ok) in [(0, false), (-1, false), (1, true), (100_000, true), (100_001, false)] {
        let result = load_changed(|models| models[3]["concurrency_limit"] = json!(value));
        if ok {
            let catalog = result.expect("limit accepted");
            assert_eq!(model(&catalog, "Vendor-Imagegen-4.5").concurrency_limit, value);
        } else {
            assert_eq!(
                result,
                Err(CatalogError::ConcurrencyLimit { model: "Vendor-Imagegen-4.5".into(), value }),
                "limit {value}"
            );
        }
    }
}

#[test]
fn validation_checks_prices_and_kind_fields() {
    let zero = load_changed(|models| models[15 - 1]["pricing"]["output_audio_seconds"]["denominator"] = json!("0"));
    assert!(
        matches!(&zero, Err(CatalogError::Malformed(m)) if m.contains("denominator must be at least 1")),
        "{zero:?}"
    );
    let float = load_changed(|models| models[6]["pricing"]["input_tokens"]["amountMicrousd"] = json!(0.14));
    assert!(matches!(&float, Err(CatalogError::Malformed(m)) if m.contains("whole number")), "{float:?}");
    let mode = load_changed(|models| models[0]["mode"] = json!("synchronous"));
    assert!(matches!(mode, Err(CatalogError::KindMismatch { field: "mode", .. })), "{mode:?}");
    let scope = load_changed(|models| models[6]["scope"] = json!("image:create"));
    assert!(matches!(scope, Err(CatalogError::KindMismatch { field: "scope", .. })), "{scope:?}");
}

#[test]
fn a_bad_limit_is_a_load_error_naming_model_and_field() {
    let misspelt = load_changed(|models| {
        let sizes = &mut models[5]["limits"]["sizes"];
        sizes["side_multiples"] = sizes["side_multiple"].take();
    });
    assert!(
        matches!(&misspelt, Err(CatalogError::Limits { model, field, .. })
            if model == "Vendor-Imagegen-5.0-pro" && field == "limits.sizes.side_multiples"),
        "{misspelt:?}"
    );
    let wrong_type = load_changed(|models| models[6]["limits"]["max_tokens"]["max"] = json!(-1));
    assert!(
        matches!(&wrong_type, Err(CatalogError::Limits { model, field, .. })
            if model == "LangA-V4-flash" && field == "limits.max_tokens.max"),
        "{wrong_type:?}"
    );
}
