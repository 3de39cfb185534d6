//! Audio request tests: the interface's table and reference rules, just inside and just outside each
//! bound; defaults; messages; hostile input.

use std::sync::LazyLock;

use catalog::Catalog;
use serde_json::{Value, json};

use super::*;

static CATALOG: LazyLock<Catalog> = LazyLock::new(|| Catalog::builtin().expect("builtin catalog"));

const MODEL: &str = "AudioGen-1.0";

fn def() -> &'static ModelDef {
    CATALOG.get(MODEL).expect("audio model")
}

fn run_bytes(body: &[u8]) -> Result<AudioPlan<'static>, ValidationError> {
    check_audio_request(def(), parse_audio_request(body)?).map(AudioPlan::into_owned)
}

/// `extra` merged over `{"model": "AudioGen-1.0", "text_prompt": "Hello."}`, parsed and checked.
fn run(extra: Value) -> Result<AudioPlan<'static>, ValidationError> {
    let mut body = json!({"model": MODEL, "text_prompt": "Hello."});
    if let (Value::Object(base), Value::Object(extra)) = (&mut body, extra) {
        base.extend(extra);
    }
    run_bytes(body.to_string().as_bytes())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Ok,
    Bad,
    Big,
}
use Want::{Bad, Big, Ok as Fine};

fn table(rows: &[(Value, Want)]) {
    let wrong: Vec<String> = rows
        .iter()
        .filter_map(|(extra, want)| {
            let got = run(extra.clone());
            let outcome = match &got {
                Ok(_) => Fine,
                Err(ValidationError::Invalid(_)) => Bad,
                Err(ValidationError::TooLarge(_)) => Big,
            };
            (outcome != *want).then(|| format!("{extra}: expected {want:?}, got {got:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn message(extra: Value) -> String {
    match run(extra.clone()) {
        Err(e) => e.message().to_owned(),
        Ok(plan) => panic!("{extra}: accepted as {plan:?}"),
    }
}

fn plan(extra: Value) -> AudioPlan<'static> {
    match run(extra.clone()) {
        Ok(plan) => plan,
        Err(e) => panic!("{extra}: {e:?}"),
    }
}

fn refs(items: Vec<Value>) -> Value {
    json!({ "references": items })
}

fn speaker() -> Value {
    json!({"speaker": "en_female_1"})
}

fn audio_url() -> Value {
    json!({"audio_url": "https://example.com/v.mp3"})
}

fn image_url() -> Value {
    json!({"image_url": "https://example.com/face.png"})
}

/// Raw Base64 that decodes to exactly `bytes` bytes.
fn b64(bytes: usize) -> String {
    let tail = match bytes % 3 {
        0 => "",
        1 => "AA==",
        _ => "AAA=",
    };
    format!("{}{tail}", "A".repeat(bytes / 3 * 4))
}

#[test]
fn text_prompt_length_in_characters() {
    table(&[
        (json!({"text_prompt": "a".repeat(3000)}), Fine),
        (json!({"text_prompt": "a".repeat(3001)}), Bad),
        (json!({"text_prompt": "語".repeat(3000)}), Fine),
        (json!({"text_prompt": "語".repeat(3001)}), Bad),
        (json!({"text_prompt": "a"}), Fine),
        (json!({"text_prompt": ""}), Bad),
        (json!({"text_prompt": 1}), Bad),
        (json!({"text_prompt": null}), Bad),
    ]);
    assert_eq!(message(json!({"text_prompt": "a".repeat(3001)})), "text_prompt must be 1..3000 characters, got 3001");
    assert_eq!(message(json!({"text_prompt": ""})), "text_prompt must be 1..3000 characters, got 0");
    assert_eq!(
        run_bytes(br#"{"model": "AudioGen-1.0"}"#).map(|_| ()),
        Err(ValidationError::Invalid("text_prompt is required".into()))
    );
}

#[test]
fn reference_counts_and_composition() {
    table(&[
        (json!({}), Fine),
        (refs(vec![]), Bad),
        (refs(vec![speaker()]), Fine),
        (refs(vec![speaker(), audio_url(), json!({"audio_data": b64(30)})]), Fine),
        (refs(vec![speaker(), speaker(), speaker(), speaker()]), Bad),
        (refs(vec![image_url()]), Fine),
        (refs(vec![json!({"image_data": b64(30)})]), Fine),
        (refs(vec![image_url(), image_url()]), Bad),
        (refs(vec![image_url(), speaker()]), Bad),
        (refs(vec![audio_url(), image_url()]), Bad),
        (refs(vec![json!({"image_data": b64(3)}), json!({"audio_data": b64(3)})]), Bad),
        (json!({"references": speaker()}), Bad),
        (json!({"references": null}), Bad),
    ]);
    assert_eq!(message(refs(vec![])), "references must have 1..3 items, got 0");
    assert_eq!(message(refs(vec![speaker(); 4])), "references must have 1..3 items, got 4");
    assert_eq!(
        message(refs(vec![image_url(), speaker()])),
        "references cannot mix an image reference with audio or speaker references"
    );
    assert_eq!(message(refs(vec![image_url(), image_url()])), "references may hold at most 1 image reference, got 2");
    // The task row's input_mode and media_type, in the Task schema's values.
    let task_fields = |request: Value| {
        let p = plan(request);
        (p.input_mode.as_str(), p.media_type.map(domain::MediaType::as_str))
    };
    assert_eq!(task_fields(json!({})), ("text", None));
    assert_eq!(task_fields(refs(vec![speaker(), speaker()])), ("text", None), "speaker ids are not media");
    assert_eq!(task_fields(refs(vec![speaker(), audio_url()])), ("url", Some("audio")));
    assert_eq!(task_fields(refs(vec![json!({"audio_data": b64(3)})])), ("base64", Some("audio")));
    assert_eq!(task_fields(refs(vec![audio_url(), json!({"audio_data": b64(3)})])), ("mixed", Some("audio")));
    assert_eq!(task_fields(refs(vec![image_url()])), ("url", Some("image")));
    assert_eq!(task_fields(refs(vec![json!({"image_data": b64(3)})])), ("base64", Some("image")));
}

#[test]
fn exactly_one_field_per_reference() {
    let fields = ["speaker", "audio_data", "audio_url", "image_data", "image_url"];
    let value = |field: &str| match field {
        "speaker" => json!("en_male_2"),
        "audio_data" | "image_data" => json!(b64(6)),
        _ => json!("https://example.com/x"),
    };
    let mut rows = vec![(refs(vec![json!({})]), Bad)];
    for (i, a) in fields.iter().enumerate() {
        rows.push((refs(vec![json!({ *a: value(a) })]), Fine));
        for b in &fields[i + 1..] {
            rows.push((refs(vec![json!({ *a: value(a), *b: value(b) })]), Bad));
        }
    }
    table(&rows);
    assert_eq!(
        message(refs(vec![speaker(), json!({})])),
        "references[1] must have exactly one of speaker, audio_data, audio_url, image_data, image_url; got none"
    );
    assert_eq!(
        message(refs(vec![json!({"speaker": "s", "audio_url": "https://e.com/a"})])),
        "references[0] must have exactly one of speaker, audio_data, audio_url, image_data, image_url; got speaker, audio_url"
    );
    assert_eq!(message(refs(vec![json!({"speaker": "s", "voice": "v"})])), "unknown field \"voice\" at references[0]");
    assert_eq!(message(refs(vec![json!({"speaker": 5})])), "references[0].speaker must be a string, got 5");
    assert_eq!(message(refs(vec![json!({"speaker": ""})])), "references[0].speaker must not be empty");
}

#[test]
fn base64_items() {
    const LIMIT: usize = 10_485_760;
    table(&[
        (refs(vec![json!({"audio_data": b64(LIMIT)})]), Fine),
        (refs(vec![json!({"audio_data": b64(LIMIT + 1)})]), Big),
        (refs(vec![json!({"image_data": format!("data:image/png;base64,{}", b64(LIMIT))})]), Fine),
        (refs(vec![json!({"image_data": format!("data:image/png;base64,{}", b64(LIMIT + 1))})]), Big),
        (refs(vec![json!({"audio_data": format!("data:audio/wav;base64,{}", b64(12))})]), Fine),
        (refs(vec![json!({"audio_data": format!("DATA:AUDIO/MPEG;BASE64,{}", b64(12))})]), Fine),
        (refs(vec![json!({"audio_data": format!("data:image/png;base64,{}", b64(12))})]), Bad),
        (refs(vec![json!({"image_data": format!("data:audio/wav;base64,{}", b64(12))})]), Bad),
        (refs(vec![json!({"audio_data": format!("data:audio/;base64,{}", b64(12))})]), Bad),
        (refs(vec![json!({"audio_data": format!("data:audio/wav,{}", b64(12))})]), Bad),
        (refs(vec![json!({"audio_data": "data:audio/wav;base64"})]), Bad),
        (refs(vec![json!({"audio_data": "AA*A"})]), Bad),
        (refs(vec![json!({"audio_data": "AAAAA"})]), Bad),
        (refs(vec![json!({"audio_data": ""})]), Bad),
        (refs(vec![json!({"audio_data": "data:audio/wav;base64,"})]), Bad),
    ]);
    let err = run(refs(vec![json!({"audio_data": b64(LIMIT + 1)})])).expect_err("over");
    assert_eq!(
        err,
        ValidationError::TooLarge(
            "references[0].audio_data is 10485761 bytes decoded, above the limit of 10485760 bytes".into()
        )
    );
    assert_eq!(
        message(refs(vec![json!({"audio_data": "data:image/png;base64,AAAA"})])),
        "references[0].audio_data must be raw Base64 or a data:audio/<type>;base64, URI"
    );
    // The data: prefix is removed before the upstream call.
    let sent = plan(refs(vec![json!({"audio_data": "data:audio/wav;base64,AAAA"}), json!({"audio_data": "BBBB"})]));
    let data: Vec<Option<&str>> = sent.request.references.iter().flatten().map(|r| r.audio_data.as_deref()).collect();
    assert_eq!(data, [Some("AAAA"), Some("BBBB")]);
}

#[test]
fn urls_are_https_only() {
    table(&[
        (refs(vec![audio_url()]), Fine),
        (refs(vec![json!({"audio_url": "http://example.com/v.mp3"})]), Bad),
        (refs(vec![json!({"image_url": "http://example.com/a.png"})]), Bad),
        (refs(vec![json!({"audio_url": "https://"})]), Bad),
        (refs(vec![json!({"audio_url": "example.com/v.mp3"})]), Bad),
        (refs(vec![json!({"audio_url": ""})]), Bad),
    ]);
    assert_eq!(
        message(refs(vec![json!({"audio_url": "http://e.com/v.mp3"})])),
        "references[0].audio_url must be an https URL, got \"http://e.com/v.mp3\""
    );
}

#[test]
fn audio_config_enums_and_ranges() {
    let config = |c: Value| json!({ "audio_config": c });
    let mut rows = Vec::new();
    for format in ["wav", "mp3", "pcm", "ogg_opus"] {
        rows.push((config(json!({ "format": format })), Fine));
    }
    for rate in [8000, 16000, 24000, 32000, 44100, 48000] {
        rows.push((config(json!({ "sample_rate": rate })), Fine));
    }
    rows.extend([
        (config(json!({"format": "flac"})), Bad),
        (config(json!({"format": "WAV"})), Bad),
        (config(json!({"sample_rate": 22050})), Bad),
        (config(json!({"sample_rate": 44100.5})), Bad),
        (config(json!({"sample_rate": "44100"})), Bad),
        (config(json!({"sample_rate": -8000})), Bad),
    ]);
    for field in ["speech_rate", "loudness_rate"] {
        rows.extend([
            (config(json!({ field: -50 })), Fine),
            (config(json!({ field: 100 })), Fine),
            (config(json!({ field: 0.5 })), Fine),
            (config(json!({ field: -51 })), Bad),
            (config(json!({ field: -50.01 })), Bad),
            (config(json!({ field: 101 })), Bad),
            (config(json!({ field: 100.01 })), Bad),
            (config(json!({ field: "1" })), Bad),
        ]);
    }
    rows.extend([
        (config(json!({"pitch_rate": -12})), Fine),
        (config(json!({"pitch_rate": 12})), Fine),
        (config(json!({"pitch_rate": -13})), Bad),
        (config(json!({"pitch_rate": 13})), Bad),
        (config(json!({"enable_subtitle": true})), Fine),
        (config(json!({"enable_subtitle": "yes"})), Bad),
        (config(json!({"enable_subtitle": null})), Bad),
        (config(json!({})), Fine),
        (config(json!({"format": "mp3", "bitrate": 128})), Bad),
        (config(json!("wav")), Bad),
    ]);
    table(&rows);
    assert_eq!(
        message(config(json!({"speech_rate": 101}))),
        "audio_config.speech_rate must be from -50 to 100, got 101"
    );
    assert_eq!(
        message(config(json!({"pitch_rate": -12.5}))),
        "audio_config.pitch_rate must be from -12 to 12, got -12.5"
    );
    assert_eq!(
        message(config(json!({"format": "flac"}))),
        "audio_config.format must be one of wav, mp3, pcm, ogg_opus, got \"flac\""
    );
    assert_eq!(
        message(config(json!({"sample_rate": 22050}))),
        "audio_config.sample_rate must be one of 8000, 16000, 24000, 32000, 44100, 48000, got 22050"
    );
    assert_eq!(message(config(json!({"bitrate": 1}))), "unknown field \"bitrate\" at audio_config");
    assert_eq!(
        message(config(json!({"enable_subtitle": "yes"}))),
        "audio_config.enable_subtitle must be a boolean, got \"yes\""
    );
}

#[test]
fn unknown_fields_at_every_level_and_open_watermark() {
    table(&[
        (json!({"voice": "x"}), Bad),
        (json!({"watermark": {}}), Fine),
        (json!({"watermark": {"aigc_watermark": true, "aigc_metadata": {"enable": true, "anything": [1]}}}), Fine),
        (json!({"watermark": true}), Bad),
        (json!({"watermark": null}), Bad),
        (json!({"model": "AudioGen-2.0"}), Bad),
    ]);
    assert_eq!(message(json!({"voice": "x"})), "unknown field \"voice\"");
    assert_eq!(message(json!({"watermark": true})), "watermark must be an object, got true");
    let err = check_audio_request(
        CATALOG.get("LangA-V4-flash").expect("model"),
        parse_audio_request(br#"{"model": "LangA-V4-flash", "text_prompt": "x"}"#).expect("shape"),
    );
    assert_eq!(err.map(|_| ()), Err(ValidationError::Invalid("model LangA-V4-flash is not an audio model".into())));
}

#[test]
fn defaults_and_plan() {
    let p = plan(json!({}));
    let config = p.request.audio_config.clone().expect("config filled");
    assert_eq!((config.format, config.enable_subtitle), (Some(AudioFormat::Wav), Some(false)));
    assert_eq!((p.reserve_seconds, p.max_billed_seconds), (120, 120));
    let kept = plan(json!({"audio_config": {"format": "mp3", "enable_subtitle": true, "speech_rate": 10}}));
    let config = kept.request.audio_config.clone().expect("config");
    assert_eq!(
        (config.format, config.enable_subtitle, config.speech_rate),
        (Some(AudioFormat::Mp3), Some(true), Some(10.0))
    );
    assert_eq!(AudioFormat::Mp3.media_type(), Some("audio/mpeg"));
    assert_eq!(AudioFormat::Pcm.media_type(), None);
    assert_eq!(AudioFormat::OggOpus.media_type(), Some("audio/ogg"));
}

#[test]
fn upstream_body_replaces_the_model() {
    let p = plan(json!({"references": [speaker()], "audio_config": {"speech_rate": 0, "pitch_rate": 1.5,
        "sample_rate": 44100}, "watermark": {"aigc_watermark": true}}));
    let body: Value = serde_json::from_slice(&p.upstream_body("seed-audio-1.0").expect("body")).expect("JSON");
    assert_eq!(
        body,
        json!({"model": "seed-audio-1.0", "text_prompt": "Hello.", "references": [{"speaker": "en_female_1"}],
            "audio_config": {"format": "wav", "sample_rate": 44100, "speech_rate": 0, "pitch_rate": 1.5,
                "enable_subtitle": false},
            "watermark": {"aigc_watermark": true}})
    );
}

#[test]
fn fixed_bounds_match_the_catalog() {
    let limits = def().audio_limits().expect("audio limits");
    assert_eq!(
        (limits.text_prompt.min_chars, limits.text_prompt.max_chars),
        (TEXT_PROMPT_MIN_CHARS, TEXT_PROMPT_MAX_CHARS)
    );
    assert_eq!((limits.references.min_items, limits.references.max_items), (1, MAX_REFERENCES));
    assert_eq!((limits.speech_rate.min, limits.speech_rate.max), RATE_RANGE);
    assert_eq!((limits.loudness_rate.min, limits.loudness_rate.max), RATE_RANGE);
    assert_eq!((limits.pitch_rate.min, limits.pitch_rate.max), PITCH_RANGE);
    assert_eq!(limits.sample_rates, SampleRate::ALL);
    let formats: Vec<&str> = AudioFormat::ALL.iter().map(|f| f.as_str()).collect();
    assert_eq!(limits.formats, formats);
    assert_eq!(limits.references.fields, REFERENCE_FIELDS);
}

#[test]
fn hostile_input_never_panics() {
    // Each hostile body, and the start of the 400 it must get (`None`: it is a valid request).
    let rows: Vec<(Vec<u8>, Option<&str>)> = vec![
        (Vec::new(), Some("request body is not valid JSON: EOF while parsing")),
        (b"\xc3\x28".to_vec(), Some("request body is not valid JSON: expected value")),
        (
            format!("{}{}", "{\"a\":".repeat(50_000), "}".repeat(50_000)).into_bytes(),
            Some("request body is not valid JSON: expected value"),
        ),
        (
            br#"{"model": "AudioGen-1.0", "text_prompt": "x", "audio_config": {"speech_rate": 1e400}}"#.to_vec(),
            Some("audio_config.speech_rate: number out of range"),
        ),
        (
            br#"{"model": "AudioGen-1.0", "text_prompt": "x", "audio_config": {"speech_rate": -1e308}}"#.to_vec(),
            Some("audio_config.speech_rate must be from -50 to 100"),
        ),
        (
            br#"{"model": "AudioGen-1.0", "text_prompt": "x", "audio_config": {"sample_rate": 1e20}}"#.to_vec(),
            Some("audio_config.sample_rate must be a non-negative integer"),
        ),
        (
            br#"{"model": "AudioGen-1.0", "text_prompt": "x", "references": [[[[[[]]]]]]}"#.to_vec(),
            Some("references[0] must be an object, got an array"),
        ),
        // The watermark is an open object: anything inside it passes through.
        (br#"{"model": "AudioGen-1.0", "text_prompt": "x", "watermark": {"a": [[[[{"b": null}]]]]}}"#.to_vec(), None),
    ];
    let wrong: Vec<String> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, (body, want))| match (run_bytes(body), want) {
            (Ok(_), None) => None,
            (Err(ValidationError::Invalid(m)), Some(want)) if m.starts_with(want) => None,
            (other, _) => Some(format!("row {i}: wanted {want:?}, got {:?}", other.map(|p| p.reserve_seconds))),
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

mod props {
    use proptest::prelude::*;

    use super::*;

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[a-zA-Z0-9:/;,.=+_-]{0,24}".prop_map(Value::String),
            prop::sample::select(vec![
                "speaker",
                "audio_data",
                "image_url",
                "https://e.com/a",
                "data:audio/wav;base64,AAAA"
            ])
            .prop_map(|s| Value::String(s.to_owned())),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop::sample::select(vec![
                        "speaker",
                        "audio_data",
                        "audio_url",
                        "image_data",
                        "image_url",
                        "format",
                        "sample_rate",
                        "speech_rate",
                        "pitch_rate",
                        "x"
                    ])
                    .prop_map(str::to_owned),
                    inner,
                    0..3,
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = run_bytes(&bytes);
        }

        #[test]
        fn arbitrary_fields_never_panic(
            fields in prop::collection::vec(
                (prop::sample::select(vec!["text_prompt", "references", "audio_config", "watermark", "other"]), any_json()),
                0..5,
            ),
        ) {
            let extra: serde_json::Map<String, Value> = fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            if let Ok(plan) = run(Value::Object(extra)) {
                prop_assert!(plan.upstream_body("upstream").is_ok());
            }
        }
    }
}

/// Base64 references and the watermark borrow from the body (a large request costs its body and the
/// upstream body, not a copy and a tree of values); the watermark passes through as it was written.
#[test]
fn references_and_the_watermark_borrow_from_the_body() {
    let body = json!({"model": MODEL, "text_prompt": "Hello.",
        "references": [{"audio_data": format!("data:audio/wav;base64,{}", "UklGRiQAAABXQVZF".repeat(100))}],
        "watermark": {"aigc_watermark": true, "pad": [0, 0, 0]}})
    .to_string();
    let plan = check_audio_request(def(), parse_audio_request(body.as_bytes()).expect("parses")).expect("valid");
    let inside = |r: &str| body.as_bytes().as_ptr_range().contains(&r.as_ptr());
    let references = plan.request.references.as_ref().expect("references");
    let data = references[0].audio_data.as_ref().expect("audio data");
    assert!(matches!(data, std::borrow::Cow::Borrowed(_)) && inside(data), "the reference is copied");
    assert!(data.starts_with("UklGRiQ"), "the data: prefix is dropped: {}", &data[..20]);
    let watermark = plan.request.watermark.as_ref().expect("watermark");
    assert!(inside(watermark.get()), "the watermark is copied");
    let upstream = String::from_utf8(plan.upstream_body("up").expect("upstream body")).expect("text");
    assert!(upstream.contains(r#""watermark":{"aigc_watermark":true,"pad":[0,0,0]}"#), "{upstream}");
}
