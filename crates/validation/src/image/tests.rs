//! Image request tests: every row of the interface's common and branch tables, per model, just inside and
//! just outside each bound; the defaults and rule 3; messages; hostile input.

use std::sync::LazyLock;

use catalog::Catalog;
use serde_json::{Value, json};

use super::*;

static CATALOG: LazyLock<Catalog> = LazyLock::new(|| Catalog::builtin().expect("builtin catalog"));

const V45: &str = "Vendor-Imagegen-4.5";
const LITE: &str = "Vendor-Imagegen-5.0-lite";
const PRO: &str = "Vendor-Imagegen-5.0-pro";
const MODELS: [&str; 3] = [V45, LITE, PRO];

fn def(model: &str) -> &'static ModelDef {
    CATALOG.get(model).expect("model in catalog")
}

/// Parses and checks `body` bytes for the model it names (or `model` when it names none).
fn run_bytes(model: &str, body: &[u8]) -> Result<ImagePlan<'static>, ValidationError> {
    let req = parse_image_request(body)?;
    let chosen = CATALOG.get(&req.model).unwrap_or_else(|| def(model));
    check_image_request(chosen, req).map(ImagePlan::into_owned)
}

/// `extra` merged over `{"model": model, "prompt": "a cat"}`, parsed and checked.
fn run(model: &str, extra: Value) -> Result<ImagePlan<'static>, ValidationError> {
    let mut body = json!({"model": model, "prompt": "a cat"});
    if let (Value::Object(base), Value::Object(extra)) = (&mut body, extra) {
        base.extend(extra);
    }
    run_bytes(model, body.to_string().as_bytes())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Ok,
    Bad,
    Big,
}
use Want::{Bad, Big, Ok as Fine};

fn outcome(result: &Result<ImagePlan, ValidationError>) -> Want {
    match result {
        Ok(_) => Fine,
        Err(ValidationError::Invalid(_)) => Bad,
        Err(ValidationError::TooLarge(_)) => Big,
    }
}

/// Runs `(model, extra, expected)` rows and reports every row whose outcome differs.
fn table(rows: &[(&str, Value, Want)]) {
    let wrong: Vec<String> = rows
        .iter()
        .filter_map(|(model, extra, want)| {
            let got = run(model, extra.clone());
            (outcome(&got) != *want).then(|| format!("{model} {extra}: expected {want:?}, got {got:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The message of a refused request.
fn message(model: &str, extra: Value) -> String {
    match run(model, extra.clone()) {
        Err(e) => e.message().to_owned(),
        Ok(plan) => panic!("{model} {extra}: accepted as {plan:?}"),
    }
}

fn plan(model: &str, extra: Value) -> ImagePlan<'static> {
    match run(model, extra.clone()) {
        Ok(plan) => plan,
        Err(e) => panic!("{model} {extra}: {e:?}"),
    }
}

fn urls(n: usize) -> Value {
    Value::Array((0..n).map(|i| json!(format!("https://example.com/{i}.png"))).collect())
}

/// A `data:image/png;base64,` URI whose payload decodes to exactly `bytes` bytes.
fn data_uri(kind: &str, bytes: usize) -> String {
    let tail = match bytes % 3 {
        0 => "",
        1 => "AA==",
        _ => "AAA=",
    };
    format!("data:image/{kind};base64,{}{tail}", "A".repeat(bytes / 3 * 4))
}

#[test]
fn prompt_length_in_characters_per_model() {
    for (model, max) in [(V45, 12_000usize), (LITE, 12_000), (PRO, 400_000)] {
        table(&[
            (model, json!({"prompt": "a".repeat(max)}), Fine),
            (model, json!({"prompt": "a".repeat(max + 1)}), Bad),
            (model, json!({"prompt": "é".repeat(max)}), Fine),
            (model, json!({"prompt": "é".repeat(max + 1)}), Bad),
            (model, json!({"prompt": "😀".repeat(max)}), Fine),
            (model, json!({"prompt": "x"}), Fine),
            (model, json!({"prompt": ""}), Bad),
            (model, json!({"prompt": 5}), Bad),
            (model, json!({"prompt": null}), Bad),
        ]);
        let text = message(model, json!({"prompt": "é".repeat(max + 1)}));
        assert!(text.contains(&format!("prompt must be 1..{max} characters")) && text.contains(&(max + 1).to_string()));
    }
}

#[test]
fn common_fields() {
    for model in MODELS {
        table(&[
            (model, json!({"response_format": "url"}), Fine),
            (model, json!({"response_format": "b64_json"}), Fine),
            (model, json!({"response_format": "URL"}), Bad),
            (model, json!({"response_format": "png"}), Bad),
            (model, json!({"response_format": 1}), Bad),
            (model, json!({"response_format": null}), Bad),
            (model, json!({"watermark": true}), Fine),
            (model, json!({"watermark": false}), Fine),
            (model, json!({"watermark": "true"}), Bad),
            (model, json!({"watermark": null}), Bad),
            (model, json!({"stream": false}), Fine),
            (model, json!({"stream": true}), Bad),
            (model, json!({"stream": "false"}), Bad),
            (model, json!({"stream": 0}), Bad),
        ]);
        let defaults = plan(model, json!({})).request;
        assert_eq!((defaults.response_format, defaults.watermark), (Some(ResponseFormat::Url), Some(true)));
        let kept = plan(model, json!({"response_format": "b64_json", "watermark": false})).request;
        assert_eq!((kept.response_format, kept.watermark), (Some(ResponseFormat::B64Json), Some(false)));
    }
    assert_eq!(
        message(V45, json!({"response_format": "png"})),
        "response_format must be one of url, b64_json, got \"png\""
    );
    assert_eq!(message(V45, json!({"watermark": "true"})), "watermark must be a boolean, got \"true\"");
    assert!(message(V45, json!({"stream": true})).starts_with("stream must be false"));
}

#[test]
fn reference_counts_per_model() {
    for (model, max) in [(V45, 14usize), (LITE, 14), (PRO, 10)] {
        table(&[
            (model, json!({"image": "https://example.com/a.png"}), Fine),
            (model, json!({"image": urls(1)}), Fine),
            (model, json!({"image": urls(max)}), Fine),
            (model, json!({"image": urls(max + 1)}), Bad),
            (model, json!({"image": urls(0)}), Bad),
            (model, json!({"image": [1]}), Bad),
            (model, json!({"image": {}}), Bad),
            (model, json!({"image": 5}), Bad),
            (model, json!({"image": null}), Bad),
        ]);
        assert_eq!(
            message(model, json!({"image": urls(max + 1)})),
            format!("image must have 1..{max} items, got {}", max + 1)
        );
        assert_eq!(plan(model, json!({"image": urls(max)})).reference_images, max as u64);
    }
    assert_eq!(
        message(V45, json!({"image": 5})),
        "image must be a reference string or an array of reference strings, got 5"
    );
    assert_eq!(message(V45, json!({"image": ["https://e.com/a.png", 7]})), "image[1] must be a string, got 7");
}

#[test]
fn reference_forms() {
    let png = data_uri("png", 4);
    for model in MODELS {
        let mut rows = vec![
            (model, json!({"image": "https://example.com/a.png"}), Fine),
            (model, json!({"image": "http://example.com/a.png"}), Bad),
            (model, json!({"image": "https://"}), Bad),
            (model, json!({"image": "example.com/a.png"}), Bad),
            (model, json!({"image": ""}), Bad),
            (model, json!({"image": png.clone()}), Fine),
            (model, json!({"image": "DATA:IMAGE/PNG;BASE64,AAAA"}), Fine),
            (model, json!({"image": "data:image/svg+xml;base64,AAAA"}), Bad),
            (model, json!({"image": "data:image/jpg;base64,AAAA"}), Bad),
            (model, json!({"image": "data:image/png,AAAA"}), Bad),
            (model, json!({"image": "data:image/png;charset=x;base64,AAAA"}), Bad),
            (model, json!({"image": "data:text/plain;base64,AAAA"}), Bad),
            (model, json!({"image": "data:image/png;base64"}), Bad),
            (model, json!({"image": "data:image/png;base64,AA*A"}), Bad),
            (model, json!({"image": "data:image/png;base64,AAAAA"}), Bad),
            (model, json!({"image": "data:image/png;base64,"}), Bad),
            (model, json!({"image": "data:;base64,AAAA"}), Bad),
        ];
        for kind in ["jpeg", "png", "webp", "bmp", "tiff", "gif", "heic", "heif"] {
            rows.push((model, json!({"image": data_uri(kind, 5)}), Fine));
        }
        table(&rows);
    }
    let many = json!({"image": ["https://e.com/a.png", "https://e.com/b.png", "http://e.com/c.png"]});
    assert_eq!(message(V45, many), "image[2] must be an https URL or a data:image/<type>;base64, URI");
    assert_eq!(
        message(V45, json!({"image": "ftp://x"})),
        "image must be an https URL or a data:image/<type>;base64, URI"
    );
    assert!(message(V45, json!({"image": ["data:image/svg;base64,AAAA"]})).contains("jpeg, png, webp"));
}

#[test]
fn decoded_size_limit_per_model() {
    const LIMIT: usize = 31_457_280;
    let at = data_uri("png", LIMIT);
    let over = data_uri("png", LIMIT + 1);
    for model in MODELS {
        let body = |uri: &str| format!(r#"{{"model":"{model}","prompt":"p","image":["https://e.com/a.png","{uri}"]}}"#);
        let ok = run_bytes(model, body(&at).as_bytes());
        assert_eq!(ok.map(|p| p.input_mode.as_str()), Ok("mixed"), "{model}: 30 MB exactly is accepted");
        let err = run_bytes(model, body(&over).as_bytes());
        assert!(
            matches!(&err, Err(ValidationError::TooLarge(m)) if m == "image[1] is 31457281 bytes decoded, above the limit of 31457280 bytes"),
            "{model}: {err:?}"
        );
    }
}

#[test]
fn input_modes() {
    let png = data_uri("png", 3);
    assert_eq!(plan(V45, json!({})).input_mode.as_str(), "text");
    assert_eq!(plan(V45, json!({"image": "https://e.com/a.png"})).input_mode.as_str(), "url");
    assert_eq!(plan(V45, json!({"image": [png.clone(), png.clone()]})).input_mode.as_str(), "base64");
    assert_eq!(plan(PRO, json!({"image": [png, "https://e.com/a.png"]})).input_mode.as_str(), "mixed");
    assert_eq!(plan(V45, json!({})).reference_images, 0);
}

#[test]
fn named_sizes_per_model() {
    table(&[
        (V45, json!({"size": "2K"}), Fine),
        (V45, json!({"size": "4K"}), Fine),
        (V45, json!({"size": "1K"}), Bad),
        (V45, json!({"size": "3K"}), Bad),
        (LITE, json!({"size": "2K"}), Fine),
        (LITE, json!({"size": "3K"}), Fine),
        (LITE, json!({"size": "4K"}), Fine),
        (LITE, json!({"size": "1K"}), Bad),
        (PRO, json!({"size": "1K"}), Fine),
        (PRO, json!({"size": "2K"}), Fine),
        (PRO, json!({"size": "3K"}), Bad),
        (PRO, json!({"size": "4K"}), Bad),
        (PRO, json!({"size": "2k"}), Bad),
        (PRO, json!({"size": "adaptive"}), Bad),
        (PRO, json!({"size": 2048}), Bad),
        (PRO, json!({"size": null}), Bad),
    ]);
    let pixels = |model: &str, size: Value| plan(model, json!({ "size": size })).max_pixels_per_image;
    assert_eq!(pixels(V45, json!("2K")), 4_194_304);
    assert_eq!(pixels(LITE, json!("3K")), 9_437_184);
    assert_eq!(pixels(V45, json!("4K")), 16_777_216);
    assert_eq!(pixels(PRO, json!("1K")), 1_048_576);
    assert_eq!(
        message(V45, json!({"size": "3K"})),
        "size must be one of 2K, 4K or <W>x<H> matching ^\\d{2,5}[xX]\\d{2,5}$ for model Vendor-Imagegen-4.5, got \"3K\""
    );
}

#[test]
fn custom_size_pattern() {
    for model in [V45, LITE] {
        table(&[
            (model, json!({"size": "2048x2048"}), Fine),
            (model, json!({"size": "2048X2048"}), Fine),
            (model, json!({"size": "02048x02048"}), Fine),
            (model, json!({"size": "2048*2048"}), Bad),
            (model, json!({"size": "2048x"}), Bad),
            (model, json!({"size": "x2048"}), Bad),
            (model, json!({"size": "2048x2048x1"}), Bad),
            (model, json!({"size": " 2048x2048"}), Bad),
            (model, json!({"size": "2048 x 2048"}), Bad),
            (model, json!({"size": "100000x100"}), Bad),
            (model, json!({"size": "9x99999"}), Bad),
            (model, json!({"size": "٢٠٤٨x٢٠٤٨"}), Bad),
            (model, json!({"size": "+2048x2048"}), Bad),
            (model, json!({"size": ""}), Bad),
        ]);
    }
    assert_eq!(plan(V45, json!({"size": "02048X02048"})).request.size.as_deref(), Some("2048x2048"));
}

#[test]
fn custom_size_pixel_range_and_ratio() {
    for model in [V45, LITE] {
        table(&[
            (model, json!({"size": "1920x1920"}), Fine),
            (model, json!({"size": "1919x1921"}), Bad),
            (model, json!({"size": "1921x1919"}), Bad),
            (model, json!({"size": "4096x4096"}), Fine),
            (model, json!({"size": "4095x4097"}), Fine),
            (model, json!({"size": "4097x4096"}), Bad),
            (model, json!({"size": "512x8192"}), Fine),
            (model, json!({"size": "8192x512"}), Fine),
            (model, json!({"size": "512x8193"}), Bad),
            (model, json!({"size": "8193x512"}), Bad),
            (model, json!({"size": "2001x2001"}), Fine),
        ]);
    }
    table(&[
        (PRO, json!({"size": "960x960"}), Fine),
        (PRO, json!({"size": "959x961"}), Bad),
        (PRO, json!({"size": "960x944"}), Bad),
        (PRO, json!({"size": "2144x2144"}), Fine),
        (PRO, json!({"size": "2160x2144"}), Bad),
        (PRO, json!({"size": "240x3840"}), Fine),
        (PRO, json!({"size": "3840x240"}), Fine),
        (PRO, json!({"size": "240x3856"}), Bad),
        (PRO, json!({"size": "3856x240"}), Bad),
        (PRO, json!({"size": "1024x1024"}), Fine),
        (PRO, json!({"size": "1032x1024"}), Bad),
        (PRO, json!({"size": "1024x1032"}), Bad),
        (PRO, json!({"size": "1000x1000"}), Bad),
        (PRO, json!({"size": "1920x1920"}), Fine),
        (PRO, json!({"size": "4096x4096"}), Bad),
    ]);
    assert_eq!(
        message(V45, json!({"size": "1919x1921"})),
        format!("size 1919x1921 has 3686399 pixels; model {V45} needs 3686400..16777216")
    );
    assert!(message(V45, json!({"size": "512x8193"})).contains("aspect ratio outside 0.0625..16"));
    assert_eq!(
        message(PRO, json!({"size": "1032x1024"})),
        format!("each side of size must be a multiple of 16 for model {PRO}, got 1032x1024")
    );
    assert!(message(PRO, json!({"size": "959x961"})).contains("921599 pixels"));
    // The pixel bound exactly, where no size of the pattern lands on it or passes the other rules.
    let pixel_error = |model: &str, w: u64, h: u64| {
        size::check_custom_for_test(def(model), w, h).err().map(|e| e.message().to_owned()).unwrap_or_default()
    };
    assert!(pixel_error(V45, 1, 16_777_217).contains("16777217 pixels"));
    assert!(pixel_error(PRO, 1, 4_624_221).contains("4624221 pixels"));
    assert!(pixel_error(PRO, 1634, 2830).contains("multiple of 16"), "4624220 pixels pass the pixel bound");
    assert!(pixel_error(PRO, 16, 57_600).contains("aspect ratio"), "921600 pixels pass the pixel bound");
    assert_eq!(plan(PRO, json!({"size": "1536x1536"})).max_pixels_per_image, 2_359_296);
    assert_eq!(plan(PRO, json!({"size": "1552x1552"})).max_pixels_per_image, 2_408_704);
}

#[test]
fn sequential_generation_rows() {
    for model in [V45, LITE] {
        let with = |refs: usize, max: Value| {
            json!({"image": urls(refs), "sequential_image_generation": "auto",
                "sequential_image_generation_options": {"max_images": max}})
        };
        table(&[
            (model, json!({"sequential_image_generation": "auto"}), Fine),
            (model, json!({"sequential_image_generation": "disabled"}), Fine),
            (model, json!({"sequential_image_generation": "AUTO"}), Bad),
            (model, json!({"sequential_image_generation": true}), Bad),
            (model, json!({"sequential_image_generation_options": {"max_images": 1}}), Fine),
            (model, json!({"sequential_image_generation_options": {"max_images": 15}}), Fine),
            (model, json!({"sequential_image_generation_options": {"max_images": 0}}), Bad),
            (model, json!({"sequential_image_generation_options": {"max_images": 16}}), Bad),
            (model, json!({"sequential_image_generation_options": {"max_images": -1}}), Bad),
            (model, json!({"sequential_image_generation_options": {"max_images": 1.5}}), Bad),
            (model, json!({"sequential_image_generation_options": {"max_images": "3"}}), Bad),
            (model, json!({"sequential_image_generation_options": {}}), Fine),
            (model, json!({"sequential_image_generation_options": {"max_images": 2, "x": 1}}), Bad),
            (model, with(3, json!(12)), Fine),
            (model, with(3, json!(13)), Bad),
            (model, with(14, json!(1)), Fine),
            (model, with(14, json!(2)), Bad),
            (
                model,
                json!({"sequential_image_generation": "auto",
                "sequential_image_generation_options": {"max_images": 15}}),
                Fine,
            ),
            (
                model,
                json!({"image": urls(3), "sequential_image_generation": "disabled",
                "sequential_image_generation_options": {"max_images": 13}}),
                Fine,
            ),
        ]);
        assert_eq!(plan(model, with(3, json!(12))).max_images, 12);
        assert_eq!(
            message(model, with(3, json!(13))),
            format!(
                "image references (3) plus sequential_image_generation_options.max_images (13) must be at most 15 for model {model}"
            )
        );
        let auto = |refs: usize| plan(model, json!({"image": urls(refs), "sequential_image_generation": "auto"}));
        assert_eq!(plan(model, json!({"sequential_image_generation": "auto"})).max_images, 15);
        assert_eq!(auto(3).max_images, 12);
        assert_eq!(
            auto(3).request.sequential_image_generation_options,
            Some(SequentialOptions { max_images: Some(12) })
        );
        assert_eq!(auto(14).max_images, 1);
        let default = plan(model, json!({}));
        assert_eq!(
            (default.max_images, default.request.sequential_image_generation),
            (1, Some(SequentialMode::Disabled))
        );
        assert_eq!(
            message(model, json!({"sequential_image_generation_options": {"max_images": 16}})),
            "sequential_image_generation_options.max_images must be an integer from 1 to 15, got 16"
        );
    }
    table(&[
        (PRO, json!({"sequential_image_generation": "disabled"}), Bad),
        (PRO, json!({"sequential_image_generation_options": {"max_images": 1}}), Bad),
    ]);
    assert_eq!(
        message(PRO, json!({"sequential_image_generation": "auto"})),
        format!("sequential_image_generation is not accepted by model {PRO}")
    );
    assert_eq!(plan(PRO, json!({})).max_images, 1);
}

#[test]
fn output_format_rows() {
    table(&[
        (V45, json!({"output_format": "png"}), Bad),
        (LITE, json!({"output_format": "png"}), Fine),
        (LITE, json!({"output_format": "jpeg"}), Fine),
        (LITE, json!({"output_format": "webp"}), Bad),
        (LITE, json!({"output_format": "PNG"}), Bad),
        (PRO, json!({"output_format": "png"}), Fine),
        (PRO, json!({"output_format": "jpeg"}), Fine),
        (PRO, json!({"output_format": "jpg"}), Bad),
    ]);
    assert_eq!(plan(LITE, json!({})).request.output_format, None);
    assert_eq!(plan(PRO, json!({})).request.output_format, Some(OutputFormat::Jpeg));
    assert_eq!(plan(PRO, json!({"output_format": "png"})).request.output_format, Some(OutputFormat::Png));
    assert_eq!(message(V45, json!({"output_format": "png"})), format!("output_format is not accepted by model {V45}"));
}

#[test]
fn optimize_prompt_rows() {
    for model in [V45, LITE] {
        table(&[
            (model, json!({"optimize_prompt": true}), Bad),
            (model, json!({"optimize_prompt": false}), Bad),
            (model, json!({"optimize_prompt_options": {"mode": "standard"}}), Fine),
            (model, json!({"optimize_prompt_options": {}}), Fine),
            (model, json!({"optimize_prompt_options": {"mode": "fast"}}), Bad),
            (model, json!({"optimize_prompt_options": {"mode": "standard", "thinking": "auto"}}), Bad),
            (model, json!({"optimize_prompt_options": {"mode": "turbo"}}), Bad),
            (model, json!({"optimize_prompt_options": "standard"}), Bad),
        ]);
        assert_eq!(plan(model, json!({})).request.optimize_prompt_options, None);
        assert_eq!(plan(model, json!({})).request.optimize_prompt, None);
        let filled = plan(model, json!({"optimize_prompt_options": {}})).request.optimize_prompt_options;
        assert_eq!(filled, Some(OptimizePromptOptions { mode: Some(PromptMode::Standard), thinking: None }));
        assert_eq!(
            message(model, json!({"optimize_prompt_options": {"thinking": "auto"}})),
            format!("optimize_prompt_options.thinking is not accepted by model {model}")
        );
        assert_eq!(
            message(model, json!({"optimize_prompt_options": {"mode": "fast"}})),
            format!("optimize_prompt_options.mode must be one of standard for model {model}, got \"fast\"")
        );
    }
    table(&[
        (PRO, json!({"optimize_prompt": true}), Fine),
        (PRO, json!({"optimize_prompt": false}), Fine),
        (PRO, json!({"optimize_prompt": "yes"}), Bad),
        (PRO, json!({"optimize_prompt_options": {"mode": "standard"}}), Fine),
        (PRO, json!({"optimize_prompt_options": {"mode": "fast"}}), Fine),
        (PRO, json!({"optimize_prompt_options": {"mode": "turbo"}}), Bad),
        (PRO, json!({"optimize_prompt_options": {"thinking": "auto"}}), Fine),
        (PRO, json!({"optimize_prompt_options": {"thinking": "enabled"}}), Fine),
        (PRO, json!({"optimize_prompt_options": {"thinking": "disabled"}}), Fine),
        (PRO, json!({"optimize_prompt_options": {"thinking": "maybe"}}), Bad),
        (PRO, json!({"optimize_prompt_options": {"thinking": true}}), Bad),
        (PRO, json!({"optimize_prompt_options": {"mode": "fast", "extra": 1}}), Bad),
    ]);
    assert_eq!(
        message(PRO, json!({"optimize_prompt_options": {"mode": "fast", "extra": 1}})),
        "unknown field \"extra\" at optimize_prompt_options"
    );
}

#[test]
fn seed_rows() {
    table(&[
        (PRO, json!({"seed": -1}), Fine),
        (PRO, json!({"seed": 0}), Fine),
        (PRO, json!({"seed": 2_147_483_647}), Fine),
        (PRO, json!({"seed": -2}), Bad),
        (PRO, json!({"seed": 2_147_483_648u64}), Bad),
        (PRO, json!({"seed": 9_223_372_036_854_775_808u64}), Bad),
        (PRO, json!({"seed": 1.5}), Bad),
        (PRO, json!({"seed": "1"}), Bad),
        (V45, json!({"seed": 1}), Bad),
        (LITE, json!({"seed": -1}), Bad),
    ]);
    assert_eq!(message(PRO, json!({"seed": -2})), "seed must be an integer from -1 to 2147483647, got -2");
    assert_eq!(message(PRO, json!({"seed": 1.5})), "seed must be an integer, got 1.5");
    assert_eq!(message(LITE, json!({"seed": 1})), format!("seed is not accepted by model {LITE}"));
    assert_eq!(plan(PRO, json!({"seed": 42})).request.seed, Some(42));
    assert_eq!(plan(V45, json!({})).request.seed, None);
}

#[test]
fn pro_defaults_and_rule_3() {
    let request = plan(PRO, json!({})).request;
    assert_eq!(request.size.as_deref(), Some("2K"));
    assert_eq!(request.output_format, Some(OutputFormat::Jpeg));
    assert_eq!(request.seed, Some(-1));
    assert_eq!(request.optimize_prompt, Some(true));
    let full = OptimizePromptOptions { mode: Some(PromptMode::Standard), thinking: Some(PromptThinking::Auto) };
    assert_eq!(request.optimize_prompt_options, Some(full));
    assert_eq!((request.response_format, request.watermark), (Some(ResponseFormat::Url), Some(true)));
    assert_eq!(plan(PRO, json!({})).max_pixels_per_image, 4_194_304);

    // optimize_prompt false: the options are ignored, so not sent.
    let off = plan(PRO, json!({"optimize_prompt": false, "optimize_prompt_options": {"mode": "fast"}})).request;
    assert_eq!((off.optimize_prompt, off.optimize_prompt_options), (Some(false), None));
    // Options supplied: the upstream switch is on, missing option fields take their defaults.
    let on = plan(PRO, json!({"optimize_prompt_options": {"mode": "fast"}})).request;
    let fast = OptimizePromptOptions { mode: Some(PromptMode::Fast), thinking: Some(PromptThinking::Auto) };
    assert_eq!((on.optimize_prompt, on.optimize_prompt_options), (Some(true), Some(fast)));
    let thinking = plan(PRO, json!({"optimize_prompt_options": {"thinking": "disabled"}})).request;
    let standard = OptimizePromptOptions { mode: Some(PromptMode::Standard), thinking: Some(PromptThinking::Disabled) };
    assert_eq!(thinking.optimize_prompt_options, Some(standard));
}

#[test]
fn shape_errors_name_the_field() {
    let rows: [(&[u8], &str); 12] = [
        (br#"{"model": "Vendor-Imagegen-4.5", "prompt": "x", "m": 1}"#, "unknown field \"m\""),
        (br#"{"model": "Vendor-Imagegen-4.5", "prompt": "x", "tools": []}"#, "unknown field \"tools\""),
        (br#"{"model": "Vendor-Imagegen-4.5"}"#, "prompt is required"),
        (br#"{"prompt": "x"}"#, "model is required"),
        (br#"{"model": "Vendor-Imagegen-4.5", "prompt": 5}"#, "prompt must be a string, got 5"),
        (br#"{"model": 4.5, "prompt": "x"}"#, "model must be a string, got 4.5"),
        (br#"{"model": "Vendor-Imagegen-4.5", "prompt": "x", "size": null}"#, "size must be a string, got null"),
        (br#"{"model": "Vendor-Imagegen-4.5", "prompt": "x", "size": {"w": 1}}"#, "size must be a string, got an object"),
        (br#"{"model": "Vendor-Imagegen-4.5", "prompt": "x", "image": [[]]}"#, "image[0] must be a string, got an array"),
        (
            br#"{"model": "Vendor-Imagegen-4.5", "prompt": "x", "sequential_image_generation_options": {"max_images": true}}"#,
            "sequential_image_generation_options.max_images must be an integer, got true",
        ),
        (br#"[1, 2]"#, "request body must be a JSON object, got an array"),
        (br#"{"model": "Vendor-Imagegen-4.5", "prompt": "#, "request body is not valid JSON: "),
    ];
    for (body, want) in rows {
        let got = parse_image_request(body).map(|_| ()).map_err(|e| e.message().to_owned());
        assert!(matches!(&got, Err(m) if m.starts_with(want)), "{}: {got:?}", String::from_utf8_lossy(body));
    }
    let long = format!(r#"{{"model": "Vendor-Imagegen-4.5", "prompt": "x", "watermark": "{}"}}"#, "y".repeat(10_000));
    let got = parse_image_request(long.as_bytes()).map(|_| ()).map_err(|e| e.message().to_owned());
    assert!(matches!(&got, Err(m) if m.len() < 120 && m.ends_with('…')), "{got:?}");
}

#[test]
fn model_must_match_an_image_model() {
    let req = parse_image_request(br#"{"model": "LangA-V4-flash", "prompt": "x"}"#).expect("shape is fine");
    let err = check_image_request(def("LangA-V4-flash"), req.clone()).expect_err("not an image model");
    assert_eq!(err.message(), "model LangA-V4-flash is not an image model");
    let err = check_image_request(def(V45), req).expect_err("another model");
    assert!(err.message().starts_with("model must be Vendor-Imagegen-4.5"), "{err}");
}

#[test]
fn the_generation_names_the_upstream_model_with_the_defaults_applied() {
    let plan = plan(PRO, json!({"image": ["https://e.com/a.png"], "size": "1552X1552"}));
    let generation = plan.generation("seedream-5-0-pro");
    assert_eq!(
        generation,
        ImageGeneration {
            model: "seedream-5-0-pro",
            prompt: "a cat",
            response_format: Some("url"),
            watermark: Some(true),
            stream: None,
            references: Some(ImageReferences::Many(vec!["https://e.com/a.png"])),
            size: Some("1552x1552"),
            sequential: None,
            sequential_options: None,
            output_format: Some("jpeg"),
            optimize_prompt: Some(true),
            prompt_options: Some(PromptOptimisation { mode: Some("standard"), thinking: Some("auto") }),
            seed: Some(-1),
        }
    );
    let one = self::plan(V45, json!({"image": "https://e.com/a.png", "sequential_image_generation": "auto"}));
    let generation = one.generation("seedream-4-5");
    assert_eq!(generation.references, Some(ImageReferences::One("https://e.com/a.png")));
    assert_eq!(generation.sequential_options, Some(SequentialImages { max_images: Some(14) }));
    assert_eq!((generation.stream, generation.seed), (None, None));
}

#[test]
fn catalog_values_are_request_enum_values() {
    for model in MODELS {
        let limits = def(model).image_limits().expect("image limits");
        for name in limits.response_formats.iter().chain([&limits.default_response_format]) {
            assert!(ResponseFormat::from_name(name).is_some(), "{model}: {name}");
        }
        for name in limits.output_formats.values.iter().chain(limits.output_formats.default.iter()) {
            assert!(OutputFormat::from_name(name).is_some(), "{model}: {name}");
        }
        let opt = &limits.optimize_prompt;
        for name in opt.modes.iter().chain([&opt.default_mode]) {
            assert!(PromptMode::from_name(name).is_some(), "{model}: {name}");
        }
        if let Some(name) = &opt.thinking_default {
            assert!(PromptThinking::from_name(name).is_some(), "{model}: {name}");
        }
        if let Some(seq) = &limits.sequential_generation {
            for name in seq.modes.iter().chain([&seq.default]) {
                assert!(SequentialMode::from_name(name).is_some(), "{model}: {name}");
            }
        }
    }
}

#[test]
fn hostile_input_never_panics() {
    let deep_array = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_field = format!(r#"{{"model": "{V45}", "prompt": {}1{}}}"#, "[".repeat(5_000), "]".repeat(5_000));
    // Each hostile body, and the start of the 400 it must get (none is a panic, a 5xx or a pass).
    let rows: Vec<(Vec<u8>, &str)> = vec![
        (Vec::new(), "request body is not valid JSON: EOF while parsing"),
        (b"null".to_vec(), "request body must be a JSON object, got null"),
        (b"\xff\xfe\x00".to_vec(), "request body is not valid JSON: expected value"),
        (b"{\"model\": \"\xff\", \"prompt\": \"x\"}".to_vec(), "model: invalid unicode code point"),
        (deep_array.into_bytes(), "request body must be a JSON object, got an array"),
        (deep_field.into_bytes(), "prompt must be a string, got an array"),
        (format!(r#"{{"model": "{PRO}", "prompt": "x", "seed": 1e400}}"#).into_bytes(), "seed: number out of range"),
        (format!(r#"{{"model": "{PRO}", "prompt": "x", "seed": -0}}"#).into_bytes(), "seed must be an integer"),
        (format!(r#"{{"model": "{PRO}", "prompt": "x", "size": "99999x99999"}}"#).into_bytes(), "size 99999x99999 has"),
        (format!(r#"{{"model": "{PRO}", "prompt": "x", "size": "00x00"}}"#).into_bytes(), "size 0x0 has 0 pixels"),
        (
            format!(r#"{{"model": "{V45}", "prompt": "x", "sequential_image_generation": "auto", "sequential_image_generation_options": {{"max_images": 18446744073709551615}}}}"#).into_bytes(),
            "sequential_image_generation_options.max_images must be an integer",
        ),
        (
            format!(r#"{{"model": "{V45}", "prompt": "\u0000", "image": "data:image/png;base64,{}"}}"#, "=".repeat(1000)).into_bytes(),
            "image: the data after base64, is not valid Base64",
        ),
        (format!(r#"{{"model": "{V45}", "prompt": "x", "model": "{PRO}"}}"#).into_bytes(), "field \"model\" is given more than once"),
    ];
    let wrong: Vec<String> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, (body, want))| match run_bytes(V45, body) {
            Err(ValidationError::Invalid(m)) if m.starts_with(want) => None,
            other => Some(format!("row {i}: wanted a 400 starting {want:?}, got {:?}", other.map(|p| p.max_images))),
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

mod props {
    use proptest::prelude::*;

    use super::*;

    /// Any JSON value of a few levels.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[a-zA-Z0-9:/;,.=+ xX_-]{0,24}".prop_map(Value::String),
            prop::sample::select(vec!["2K", "1K", "4K", "auto", "https://e.com/a.png", "data:image/png;base64,AAAA"])
                .prop_map(|s| Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    const FIELDS: [&str; 13] = [
        "prompt",
        "response_format",
        "watermark",
        "stream",
        "image",
        "size",
        "sequential_image_generation",
        "sequential_image_generation_options",
        "output_format",
        "optimize_prompt",
        "optimize_prompt_options",
        "seed",
        "other",
    ];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = run_bytes(V45, &bytes);
        }

        #[test]
        fn arbitrary_fields_never_panic(
            model in prop::sample::select(MODELS.to_vec()),
            fields in prop::collection::vec((prop::sample::select(FIELDS.to_vec()), any_json()), 0..6),
        ) {
            let extra: serde_json::Map<String, Value> = fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            if let Ok(plan) = run(model, Value::Object(extra)) {
                prop_assert!(plan.max_images >= 1 && plan.max_pixels_per_image > 0);
                prop_assert_eq!(plan.generation("upstream").prompt, plan.request.prompt.as_str());
            }
        }
    }
}

/// A Base64 reference is borrowed from the body, not copied: a 600-MiB request costs its body and
/// the upstream body written from it. A reference written with a JSON escape is copied (it must be).
#[test]
fn references_borrow_from_the_body() {
    let data = format!("data:image/png;base64,{}", "iVBORw0KGgo".repeat(1000));
    let body = json!({"model": V45, "prompt": "a cat", "image": [data, "https://example.com/a.png"]}).to_string();
    let plan = check_image_request(def(V45), parse_image_request(body.as_bytes()).expect("parses")).expect("valid");
    let refs = plan.request.image.as_ref().expect("references").as_slice();
    assert!(refs.iter().all(|r| matches!(r, std::borrow::Cow::Borrowed(_))), "copied: {refs:?}");
    let inside = |r: &str| body.as_bytes().as_ptr_range().contains(&r.as_ptr());
    assert!(refs.iter().all(|r| inside(r)), "the references point into the body");
    let escaped = body.replacen("https://", "https:\\/\\/", 1);
    let plan = check_image_request(def(V45), parse_image_request(escaped.as_bytes()).expect("parses")).expect("valid");
    let refs = plan.request.image.as_ref().expect("references").as_slice();
    assert!(matches!(refs[1], std::borrow::Cow::Owned(_)), "an escaped reference is its own copy");
    assert_eq!(refs[1], "https://example.com/a.png");
    // The generation handed to the upstream adapter lends the same text on.
    let Some(ImageReferences::Many(lent)) = plan.generation("up").references else { panic!("references") };
    let in_escaped = escaped.as_bytes().as_ptr_range().contains(&lent[0].as_ptr());
    assert!(std::ptr::eq(lent[0], refs[0].as_ref()) && in_escaped, "lent, not copied");
}

#[test]
fn openai_n_is_taken_only_as_one() {
    assert_eq!(plan(V45, json!({"n": 1})).max_images, 1, "n = 1 is one image");
    for n in [0, 2, -1] {
        let err = run(V45, json!({"n": n})).expect_err("only one");
        assert!(err.to_string().contains(&format!("n must be 1, got {n}")), "{err}");
    }
    let err = run(V45, json!({"n": "1"})).expect_err("a string");
    assert!(err.to_string().contains("n must be"), "{err}");
}
