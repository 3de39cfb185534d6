//! Every CreateTaskRequest rule just inside and just outside its bound.

use serde_json::{Value, json};

use super::*;

fn def(name: &str) -> ModelDef {
    catalog::Catalog::builtin().expect("catalog").get(name).cloned().expect("model")
}

fn check_with(model: &str, body: Value, uploads: &[AssetKind]) -> Result<VideoPlan, ValidationError> {
    let req = parse_video_request(body.to_string().as_bytes())?;
    check_video_request(&def(model), req, uploads)
}

fn check(body: Value) -> Result<VideoPlan, ValidationError> {
    let mut full = json!({"model": "videogen-2-0", "prompt": "a cat"});
    if let (Some(b), Some(e)) = (full.as_object_mut(), body.as_object()) {
        b.extend(e.clone());
    }
    check_with("videogen-2-0", full, &[])
}

fn message(r: Result<VideoPlan, ValidationError>) -> String {
    match r {
        Ok(plan) => panic!("expected an error, got {plan:?}"),
        Err(e) => e.message().to_owned(),
    }
}

fn media(kind: &str, n: usize) -> Vec<Value> {
    (0..n).map(|i| json!({"type": kind, "url": format!("https://example.com/{kind}/{i}")})).collect()
}

#[test]
fn defaults() {
    let plan = check(json!({})).expect("valid");
    assert_eq!((plan.duration(), plan.resolution, plan.ratio()), (5, domain::Resolution::P720, Ratio::Adaptive));
    assert_eq!(plan.request.generate_audio, Some(true));
    assert_eq!((plan.input_mode, plan.media_type, plan.has_video_input), (InputMode::Text, None, false));
}

#[test]
fn prompt_edges() {
    assert!(check(json!({"prompt": "x"})).is_ok());
    assert!(check(json!({"prompt": "é".repeat(4000)})).is_ok(), "4000 characters, counted as characters");
    assert!(message(check(json!({"prompt": "x".repeat(4001)}))).contains("prompt"));
    assert!(message(check(json!({"prompt": ""}))).contains("prompt"));
    let no_prompt = check_with("videogen-2-0", json!({"model": "videogen-2-0"}), &[]);
    assert!(message(no_prompt).contains("prompt or media"));
    let media_only = check_with("videogen-2-0", json!({"model": "videogen-2-0", "media": media("image", 1)}), &[]);
    assert!(media_only.is_ok());
    let upload_only = check_with("videogen-2-0", json!({"model": "videogen-2-0"}), &[AssetKind::Image]);
    assert_eq!(upload_only.map(|p| p.input_mode), Ok(InputMode::Stream));
}

#[test]
fn duration_edges() {
    for ok in [4, 5, 15, -1] {
        assert_eq!(check(json!({"duration": ok})).map(|p| p.duration()), Ok(ok), "{ok}");
    }
    for bad in [json!(3), json!(16), json!(0), json!(-2), json!(5.5), json!("5"), json!(null)] {
        assert!(check(json!({"duration": bad})).is_err(), "{bad}");
    }
}

#[test]
fn resolution_per_model() {
    for ok in ["480p", "720p", "1080p", "4k"] {
        assert!(check(json!({"resolution": ok})).is_ok(), "{ok}");
    }
    for model in ["videogen-2-0-fast", "videogen-2-0-mini"] {
        let body = |r: &str| json!({"model": model, "prompt": "p", "resolution": r});
        assert!(check_with(model, body("480p"), &[]).is_ok());
        assert!(check_with(model, body("720p"), &[]).is_ok());
        assert!(message(check_with(model, body("1080p"), &[])).contains("resolution"), "{model}");
        assert!(check_with(model, body("4k"), &[]).is_err(), "{model}");
    }
    assert!(check(json!({"resolution": "720P"})).is_err());
}

#[test]
fn ratio_and_audio() {
    for ratio in Ratio::ALL {
        assert_eq!(check(json!({"ratio": ratio.as_str()})).map(|p| p.ratio()), Ok(*ratio));
    }
    assert!(message(check(json!({"ratio": "2:1"}))).contains("ratio"));
    assert_eq!(check(json!({"generate_audio": false})).map(|p| p.request.generate_audio), Ok(Some(false)));
    assert!(check(json!({"generate_audio": "no"})).is_err());
}

#[test]
fn media_counts_and_links() {
    assert!(check(json!({"media": media("image", 9)})).is_ok());
    assert!(message(check(json!({"media": media("image", 10)}))).contains("at most 9 image"));
    assert!(check(json!({"media": media("video", 3)})).is_ok());
    assert!(message(check(json!({"media": media("video", 4)}))).contains("at most 3 video"));
    assert!(check(json!({"media": media("audio", 3)})).is_ok());
    assert!(check(json!({"media": media("audio", 4)})).is_err());
    let fifteen: Vec<Value> = [media("image", 9), media("video", 3), media("audio", 3)].concat();
    let plan = check(json!({"media": fifteen})).expect("15 items");
    assert_eq!((plan.media.len(), plan.media_type, plan.has_video_input), (15, Some(MediaType::Multiple), true));
    // The sixteenth item, whatever its kind: through the JSON array, or as an uploaded file.
    let sixteen: Vec<Value> = [media("image", 9), media("video", 3), media("audio", 3), media("image", 1)].concat();
    assert!(check(json!({"media": sixteen})).is_err());
    let fifteen: Vec<Value> = [media("image", 8), media("video", 3), media("audio", 3)].concat();
    let body = json!({"model": "videogen-2-0", "prompt": "p", "media": fifteen});
    assert!(check_with("videogen-2-0", body.clone(), &[AssetKind::Image]).is_ok());
    assert!(message(check_with("videogen-2-0", body, &[AssetKind::Image, AssetKind::Image])).contains("at most"));
    let mixed =
        check_with("videogen-2-0", json!({"model": "videogen-2-0", "media": media("image", 1)}), &[AssetKind::Audio]);
    assert_eq!(mixed.map(|p| (p.input_mode, p.media_type)), Ok((InputMode::Mixed, Some(MediaType::Multiple))));
    assert!(message(check(json!({"media": [{"type": "image", "url": "http://example.com/a.png"}]}))).contains("https"));
    assert!(check(json!({"media": [{"type": "image"}]})).is_err(), "url is required");
    assert!(check(json!({"media": [{"type": "text", "url": "https://e.com/x"}]})).is_err());
    assert!(
        message(check(json!({"media": [{"type": "image", "url": "https://e.com/x", "role": "first_frame"}]})))
            .contains("role")
    );
}

#[test]
fn webhook_and_unknown_fields() {
    assert!(check(json!({"webhook_url": "https://hooks.example.com/x"})).is_ok());
    assert!(message(check(json!({"webhook_url": "http://hooks.example.com/x"}))).contains("webhook_url"));
    assert!(check(json!({"webhook_url": "not a url"})).is_err());
    assert!(message(check(json!({"seed": 1}))).contains("unknown field \"seed\""));
    assert!(check(json!({"model": "Vendor-Imagegen-4.5"})).is_err(), "the model is the one checked against");
    let not_video = parse_video_request(br#"{"model": "LangA-V4-flash", "prompt": "p"}"#).expect("shape");
    assert!(message(check_video_request(&def("LangA-V4-flash"), not_video, &[])).contains("not a video model"));
    for hostile in [&b"[]"[..], b"{", b"\xff", b"{\"model\": 5}", b"{\"model\": \"videogen-2-0\", \"media\": {}}"] {
        assert!(parse_video_request(hostile).is_err(), "{hostile:?}");
    }
}

/// Every string a schema lists under `const` or `enum`, in order.
fn listed_names(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("const", Value::String(s)) => out.push(s.clone()),
                    ("enum", Value::Array(items)) => {
                        out.extend(items.iter().filter_map(|v| v.as_str().map(str::to_owned)))
                    }
                    _ => listed_names(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| listed_names(v, out)),
        _ => {}
    }
}

#[test]
fn the_schema_mirrors_list_the_domain_names() {
    let names = |schema: schemars::Schema| {
        let mut out = Vec::new();
        listed_names(&serde_json::to_value(schema).expect("schema"), &mut out);
        out
    };
    let kinds: Vec<String> = AssetKind::ALL.iter().map(|k| k.as_str().to_owned()).collect();
    assert_eq!(names(schemars::schema_for!(MediaTypeSchema)), kinds);
    let ratios: Vec<String> = Ratio::ALL.iter().map(|r| r.as_str().to_owned()).collect();
    assert_eq!(names(schemars::schema_for!(RatioSchema)), ratios);
    for kind in AssetKind::ALL {
        let item: MediaInput =
            serde_json::from_value(json!({"type": kind.as_str(), "url": "https://e.com/x"})).expect("item");
        assert_eq!(item.kind, kind);
    }
}
