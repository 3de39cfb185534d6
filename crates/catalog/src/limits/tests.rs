//! Tests of the typed limits: the builtin catalog's values and the load-time checks.

use std::collections::BTreeMap;

use rust_decimal::Decimal;
use serde_json::json;

use super::*;
use crate::Catalog;

fn limits_of(name: &str) -> Value {
    Catalog::builtin().expect("builtin").get(name).expect("model").limits.clone()
}

fn image(name: &str) -> ImageLimits {
    match KindLimits::parse(ModelKind::Image, &limits_of(name)) {
        Ok(KindLimits::Image(l)) => l,
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn image_branches_are_catalog_data() {
    let v45 = image("Vendor-Imagegen-4.5");
    let lite = image("Vendor-Imagegen-5.0-lite");
    let pro = image("Vendor-Imagegen-5.0-pro");
    assert_eq!([v45.prompt.max_chars, lite.prompt.max_chars, pro.prompt.max_chars], [12_000, 12_000, 400_000]);
    assert_eq!(
        [v45.reference_images.max_items, lite.reference_images.max_items, pro.reference_images.max_items],
        [14, 14, 10]
    );
    assert!(v45.sequential_generation.is_some() && lite.sequential_generation.is_some());
    assert!(pro.sequential_generation.is_none());
    assert!(!v45.output_formats.supported && lite.output_formats.supported && pro.output_formats.supported);
    assert_eq!(pro.output_formats.default.as_deref(), Some("jpeg"));
    assert!(!v45.optimize_prompt.toggle && pro.optimize_prompt.toggle);
    assert!(v45.optimize_prompt.thinking_default.is_none());
    assert_eq!(pro.optimize_prompt.thinking_default.as_deref(), Some("auto"));
    assert_eq!(pro.seed, Some(SeedLimits { min: -1, max: 2_147_483_647, default: -1 }));
    assert!(v45.seed.is_none() && lite.seed.is_none());
    assert_eq!(pro.sizes.side_multiple, Some(16));
    assert_eq!(pro.sizes.default.as_deref(), Some("2K"));
    let named: BTreeMap<String, u64> = [("1K".to_owned(), 1_048_576), ("2K".to_owned(), 4_194_304)].into();
    assert_eq!(pro.sizes.named_pixels, named);
    assert_eq!(v45.sizes.max_pixels(), 16_777_216);
    assert_eq!(pro.sizes.max_pixels(), 4_624_220);
}

#[test]
fn ratio_range_is_exact() {
    let ratio = image("Vendor-Imagegen-4.5").sizes.aspect_ratio;
    assert!(ratio.contains(512, 8192) && ratio.contains(8192, 512) && ratio.contains(1, 1));
    assert!(!ratio.contains(512, 8193) && !ratio.contains(8193, 512));
    assert!(!ratio.contains(1, 0) && ratio.contains(0, 1) == (Decimal::ZERO >= ratio.min));
}

/// Parses the limits of `name` after `edit`, returning the error's field and message.
fn broken(name: &str, kind: ModelKind, edit: impl FnOnce(&mut Value)) -> (String, String) {
    let mut limits = limits_of(name);
    edit(&mut limits);
    match KindLimits::parse(kind, &limits) {
        Err(e) => (e.field, e.message),
        Ok(_) => panic!("{name}: accepted"),
    }
}

/// One change to a limits object.
type Edit = Box<dyn FnOnce(&mut Value)>;

#[test]
fn load_time_checks_name_the_field() {
    let pro = "Vendor-Imagegen-5.0-pro";
    let cases: Vec<(Edit, &str)> = vec![
        (Box::new(|l| l["sizes"]["named_pixels"] = json!({"1K": 1})), "sizes.named_pixels"),
        (Box::new(|l| l["sizes"]["custom_pattern"] = json!("^\\d+x\\d+$")), "sizes.custom_pattern"),
        (Box::new(|l| l["sizes"]["default"] = json!("4K")), "sizes.default"),
        (Box::new(|l| l["sizes"]["aspect_ratio"]["max"] = json!("16")), "sizes.aspect_ratio.max"),
        (Box::new(|l| l["sequential_generation"] = json!({"supported": false, "modes": []})), "sequential_generation"),
        (Box::new(|l| l["sequential_generation"] = json!({"supported": true})), "sequential_generation"),
        (Box::new(|l| l["optimize_prompt"]["toggle"] = json!(false)), "optimize_prompt.default"),
        (Box::new(|l| l["seed"]["default"] = json!(-2)), "seed.default"),
        (Box::new(|l| l["output_formats"]["default"] = json!("gif")), "output_formats.default"),
        (
            Box::new(|l| {
                if let Some(o) = l["sizes"].as_object_mut() {
                    o.remove("side_multiple");
                }
            }),
            "sizes",
        ),
    ];
    for (edit, field) in cases {
        let (got, message) = broken(pro, ModelKind::Image, edit);
        assert_eq!(got, field, "{message}");
    }
    let (field, message) = broken("AudioGen-1.0", ModelKind::Audio, |l| l["default_format"] = json!("flac"));
    assert_eq!(field, "default_format", "{message}");
    let (field, _) = broken("LangC-5.2", ModelKind::Language, |l| l["stop"] = json!({"max_item": 4}));
    assert_eq!(field, "stop.max_item");
    let (field, _) = broken("videogen-2-0", ModelKind::Video, |l| l["media"]["max_images"] = json!(-1));
    assert_eq!(field, "media.max_images");
    let (field, message) = broken("LangC-5.2", ModelKind::Language, |l| l["max_token"] = json!({}));
    assert!(field == "max_token" && message.contains("unknown field"), "{field} {message}");
    let (field, message) = broken("LangC-5.2", ModelKind::Language, |l| {
        if let Some(o) = l.as_object_mut() {
            o.remove("messages");
        }
    });
    assert!(field.is_empty() && message.contains("missing field `messages`"), "{field} {message}");
}

#[test]
fn every_builtin_model_has_typed_limits_of_its_kind() {
    for def in Catalog::builtin().expect("builtin").models {
        assert_eq!(def.typed_limits().kind(), def.kind, "{}", def.name);
    }
}

#[test]
fn every_builtin_language_model_can_think() {
    // Each one has a thinking switch or reasoning effort (the interface's "Thinking and reasoning"
    // list); a limits object with neither, or with only the off values, cannot.
    for def in Catalog::builtin().expect("builtin").models {
        if let Some(limits) = def.language_limits() {
            assert!(limits.can_think(), "{}", def.name);
            let mut plain = limits.clone();
            plain.max_reasoning_tokens = None;
            plain.thinking = plain.thinking.map(|t| ThinkingLimits { types: vec!["disabled".into()], ..t });
            plain.reasoning_effort =
                plain.reasoning_effort.map(|e| ReasoningEffortLimits { values: vec!["minimal".into()], ..e });
            assert!(!plain.can_think(), "{}", def.name);
        }
    }
}
