//! Integration tests of `POST /api/v1/audio/generations`: the real server on `127.0.0.1:0` over real
//! SQLite (and PostgreSQL when `TEST_DATABASE_URL` is set), the simulated speech service behind it over
//! real HTTP. The charge is recomputed here from the answer's `original_duration` with exact decimal
//! arithmetic; every bound just inside and just outside; 402 for the 120-second hold; the speech
//! service's refusals inside HTTP 200 and every fault refunded. After each scenario the books balance.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::str::FromStr;
use std::time::Duration;

use common::{Env, Reply, amount, databases, unique};
use domain::Scope;
use rust_decimal::{Decimal, RoundingStrategy};
use serde_json::{Value, json};

const AUDIO: &str = "/api/v1/audio/generations";
const MODEL: &str = "AudioGen-1.0";
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(2);
const SCOPES: &[Scope] = &[Scope::AudioCreate, Scope::TaskRead];

/// DESIGN §3: 2,500 micro-USD per second of `original_duration`; the hold is 120 s.
const MICROS_PER_SECOND: i64 = 2_500;
const RESERVATION_MICROS: i64 = 120 * MICROS_PER_SECOND;

/// 10 MiB, the decoded limit of a Base64 reference.
const MAX_DECODED: usize = 10 * 1024 * 1024;

/// A request with `text_prompt` and the `extra` fields.
fn body(text: &str, extra: Value) -> Value {
    let mut b = json!({"model": MODEL, "text_prompt": text});
    if let (Some(o), Value::Object(e)) = (b.as_object_mut(), extra) {
        o.extend(e);
    }
    b
}

/// Raw Base64 that decodes to exactly `bytes` bytes.
fn base64_of(bytes: usize) -> String {
    let mut b64 = "A".repeat(bytes / 3 * 4);
    match bytes % 3 {
        1 => b64.push_str("AA=="),
        2 => b64.push_str("AAA="),
        _ => {}
    }
    b64
}

/// The exact text of the answer's `original_duration` number, as written on the wire.
fn original_duration_text(r: &Reply, ctx: &str) -> String {
    let raw = String::from_utf8_lossy(&r.raw);
    let start = raw.find("\"original_duration\":").unwrap_or_else(|| panic!("{ctx}: no original_duration: {raw}"));
    let rest = &raw[start + "\"original_duration\":".len()..];
    rest.chars().take_while(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '-' | '+')).collect()
}

/// The spec's charge for `original_duration` seconds: at most 120 s, × 2,500 micro-USD, rounded once
/// half away from zero.
fn spec_charge(original_duration: &str) -> i64 {
    let seconds = Decimal::from_str(original_duration)
        .or_else(|_| Decimal::from_scientific(original_duration))
        .unwrap_or_else(|e| panic!("{original_duration}: {e}"));
    let billed = seconds.min(Decimal::from(120)) * Decimal::from(MICROS_PER_SECOND);
    let rounded = billed.round_dp_with_strategy(0, RoundingStrategy::MidpointAwayFromZero);
    i64::try_from(rounded.mantissa()).expect("fits") / 10_i64.pow(rounded.scale())
}

/// Whether `text` is raw standard Base64 (padded), not a data URL.
fn is_raw_base64(text: &str) -> bool {
    !text.is_empty()
        && text.len().is_multiple_of(4)
        && text.trim_end_matches('=').bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/'))
}

/// Checks an AudioGenerationResponse and its charge (recomputed from `original_duration`), the balance
/// movement and the task; returns the answer.
async fn speak_and_check(env: &Env, request: &Value, ctx: &str) -> Value {
    let before = env.balance().await;
    let r = env.post(AUDIO, request).await;
    assert_eq!(r.status, 200, "{ctx}: {}", String::from_utf8_lossy(&r.raw));
    let a = &r.json;
    assert_eq!(a["model"], MODEL, "{ctx}: the public model name");
    assert_eq!(a["code"], 0, "{ctx}");
    let audio = a["audio"].as_str().unwrap_or_else(|| panic!("{ctx}: audio: {a}"));
    assert!(!audio.starts_with("data:") && is_raw_base64(audio), "{ctx}: raw Base64, never a data URL");
    assert!(audio.starts_with("UklGR"), "{ctx}: the simulator's WAV (RIFF) bytes");
    let duration = a["duration"].as_f64().unwrap_or(-1.0);
    let original = a["original_duration"].as_f64().unwrap_or(-1.0);
    assert!(duration >= 0.0 && (0.0..=120.0).contains(&original), "{ctx}: durations {a}");
    assert!(a["url"].as_str().is_some_and(|u| u.starts_with("http")), "{ctx}: url");
    let task_id = a["task_id"].as_str().unwrap_or_else(|| panic!("{ctx}: task_id: {a}"));
    assert_eq!(r.header("x-svc-task-id"), Some(task_id), "{ctx}");
    let billing = &a["billing"];
    let expected = spec_charge(&original_duration_text(&r, ctx));
    assert_eq!(billing["currency"], "USD", "{ctx}");
    assert_eq!(billing["status"], "settled", "{ctx}: {billing}");
    assert_eq!(billing["estimated_amount_microusd"], RESERVATION_MICROS, "{ctx}: 120 s held");
    assert_eq!(billing["actual_amount_microusd"], expected, "{ctx}: original_duration × 2,500, rounded once");
    let actual = amount(&billing["actual_amount"], ctx);
    assert_eq!(actual.micros(), expected, "{ctx}");
    let after = env.balance().await;
    assert_eq!(before.checked_sub(actual).ok(), Some(after), "{ctx}: the balance moved by exactly the charge");
    assert_eq!(amount(&billing["balance_after"], ctx), after, "{ctx}");
    let task = env.task(task_id).await;
    assert_eq!(task["kind"], "audio", "{ctx}");
    assert_eq!(task["model"], MODEL, "{ctx}");
    assert_eq!(task["status"], "succeeded", "{ctx}");
    assert_eq!(task["billing"]["status"], "settled", "{ctx}");
    assert_eq!(amount(&task["billing"]["actual_amount"], ctx), actual, "{ctx}");
    assert_task_enums(&task, ctx);
    r.json
}

/// The Task schema's enumerations: `input_mode` text|url|base64|mixed|stream|null, `media_type`
/// image|video|audio|multiple|null.
fn assert_task_enums(task: &Value, ctx: &str) {
    let input_mode = task["input_mode"].as_str();
    assert!(
        matches!(input_mode, None | Some("text" | "url" | "base64" | "mixed" | "stream")),
        "{ctx}: input_mode {input_mode:?} is not one of the Task schema's values"
    );
    let media_type = task["media_type"].as_str();
    assert!(
        matches!(media_type, None | Some("image" | "video" | "audio" | "multiple")),
        "{ctx}: media_type {media_type:?} is not one of the Task schema's values"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn charged_on_original_duration_rounded_once() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        // The simulator speaks (500 + 37 × characters) ms: 2,000 characters are 74.5 s, 186,250 micro-USD;
        // 1 character is 0.537 s, 1,342.5 rounded once to 1,343; 3,000 are 111.5 s.
        for (text, micros) in [
            ("a".repeat(2000), 186_250),
            ("a".to_owned(), 1_343),
            ("é".repeat(3000), 278_750),
            ("hello".to_owned(), 1_713),
        ] {
            let ctx = env.ctx(&format!("{} characters", text.chars().count()));
            let a = speak_and_check(&env, &body(&text, json!({})), &ctx).await;
            assert_eq!(a["billing"]["actual_amount_microusd"], micros, "{ctx}");
            assert!(a.get("subtitle").is_none(), "{ctx}: no subtitle unless asked");
        }
        let tasks = env.tasks().await;
        assert_eq!(tasks.len(), 4, "{}", env.server.label);
        assert!(tasks.iter().all(|t| t["input_mode"] == "text" && t["media_type"].is_null()), "{}", env.server.label);
        env.assert_books("durations").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn subtitles_are_passed_through_and_references_reach_the_service() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        let ctx = env.ctx("subtitles");
        let config = json!({"audio_config": {"enable_subtitle": true, "format": "mp3", "sample_rate": 44100}});
        let a = speak_and_check(&env, &body("Hi. Bye!", config), &ctx).await;
        let expected = json!({"text": "Hi. Bye!", "sentences": [
            {"text": "Hi.", "start_time": 250, "end_time": 250 + 3 * 37},
            {"text": "Bye!", "start_time": 250 + 4 * 37, "end_time": 250 + 8 * 37},
        ]});
        assert_eq!(a["subtitle"], expected, "{ctx}: passed through unchanged");
        assert!(a["url"].as_str().is_some_and(|u| u.ends_with(".mp3")), "{ctx}: the format reached the service");

        let wav = base64_of(48);
        let with_refs: [(&str, Value, &str, Option<&str>); 5] = [
            ("speakers", json!([{"speaker": "en_female_1"}, {"speaker": "en_male_2"}]), "text", None),
            (
                "audio data URI and URL",
                json!([{"audio_data": format!("data:audio/wav;base64,{wav}")}, {"audio_url": "https://a.example.com/v.mp3"}]),
                "mixed",
                Some("audio"),
            ),
            ("raw audio Base64", json!([{"audio_data": wav}]), "base64", Some("audio")),
            ("one image URL", json!([{"image_url": "https://a.example.com/face.png"}]), "url", Some("image")),
            (
                "one image data URI",
                json!([{"image_data": format!("data:image/png;base64,{wav}")}]),
                "base64",
                Some("image"),
            ),
        ];
        for (what, references, mode, media) in with_refs {
            let ctx = env.ctx(what);
            let a = speak_and_check(&env, &body("Read this @Audio1.", json!({"references": references})), &ctx).await;
            let task = env.task(a["task_id"].as_str().unwrap_or_default()).await;
            assert_eq!(task["input_mode"], mode, "{ctx}: {task}");
            assert_eq!(task["media_type"].as_str(), media, "{ctx}: {task}");
        }
        env.assert_books("references").await;
        env.server.stop().await;
    }
}

/// What a bounds case expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Ok,
    Invalid,
    TooLarge,
}

/// Every bound of the audio request, just inside and just outside.
fn cases() -> Vec<(String, Value, Want)> {
    use Want::{Invalid, Ok, TooLarge};
    let t = |extra: Value| body("Say hello.", extra);
    let refs = |r: Value| t(json!({"references": r}));
    let config = |c: Value| t(json!({"audio_config": c}));
    let mut no_prompt = t(json!({}));
    no_prompt.as_object_mut().map(|o| o.remove("text_prompt"));
    let mut no_model = t(json!({}));
    no_model.as_object_mut().map(|o| o.remove("model"));
    let speaker = json!({"speaker": "en_female_1"});
    let image = json!({"image_url": "https://a.example.com/face.png"});
    let cases: Vec<(&str, Value, Want)> = vec![
        ("text_prompt of 3000 characters", body(&"a".repeat(3000), json!({})), Ok),
        ("text_prompt of 3001 characters", body(&"a".repeat(3001), json!({})), Invalid),
        ("text_prompt of 3000 two-byte characters", body(&"é".repeat(3000), json!({})), Ok),
        ("text_prompt of 1 character", body("a", json!({})), Ok),
        ("empty text_prompt", body("", json!({})), Invalid),
        ("no text_prompt", no_prompt, Invalid),
        ("no model", no_model, Invalid),
        ("unknown model", json!({"model": "AudioGen-9", "text_prompt": "a"}), Invalid),
        ("an image model", json!({"model": "Vendor-Imagegen-4.5", "text_prompt": "a"}), Invalid),
        ("3 speakers", refs(json!([speaker, speaker, speaker])), Ok),
        ("4 speakers", refs(json!([speaker, speaker, speaker, speaker])), Invalid),
        ("empty references", refs(json!([])), Invalid),
        ("an image reference plus a speaker", refs(json!([image, speaker])), Invalid),
        ("a speaker plus an image reference", refs(json!([speaker, {"image_data": base64_of(30)}])), Invalid),
        ("two image references", refs(json!([image, image])), Invalid),
        (
            "a reference with two fields",
            refs(json!([{"speaker": "a", "audio_url": "https://a.example.com/a.mp3"}])),
            Invalid,
        ),
        ("an empty reference", refs(json!([{}])), Invalid),
        ("an empty speaker", refs(json!([{"speaker": ""}])), Invalid),
        ("an http audio_url", refs(json!([{"audio_url": "http://a.example.com/a.mp3"}])), Invalid),
        ("an http image_url", refs(json!([{"image_url": "http://a.example.com/a.png"}])), Invalid),
        (
            "audio_data with an image data URI",
            refs(json!([{"audio_data": format!("data:image/png;base64,{}", base64_of(3))}])),
            Invalid,
        ),
        ("audio_data that is not Base64", refs(json!([{"audio_data": "not base64!"}])), Invalid),
        ("audio_data of exactly 10 MiB", refs(json!([{"audio_data": base64_of(MAX_DECODED)}])), Ok),
        ("audio_data one byte over 10 MiB", refs(json!([{"audio_data": base64_of(MAX_DECODED + 1)}])), TooLarge),
        ("image_data one byte over 10 MiB", refs(json!([{"image_data": base64_of(MAX_DECODED + 1)}])), TooLarge),
        ("speech_rate -50", config(json!({"speech_rate": -50})), Ok),
        ("speech_rate -51", config(json!({"speech_rate": -51})), Invalid),
        ("speech_rate 100", config(json!({"speech_rate": 100})), Ok),
        ("speech_rate 100.5", config(json!({"speech_rate": 100.5})), Invalid),
        ("loudness_rate -50.5", config(json!({"loudness_rate": -50.5})), Invalid),
        ("loudness_rate 100", config(json!({"loudness_rate": 100})), Ok),
        ("pitch_rate -12", config(json!({"pitch_rate": -12})), Ok),
        ("pitch_rate 13", config(json!({"pitch_rate": 13})), Invalid),
        ("pitch_rate a string", config(json!({"pitch_rate": "1"})), Invalid),
        ("sample_rate 48000", config(json!({"sample_rate": 48000})), Ok),
        ("sample_rate 44101", config(json!({"sample_rate": 44101})), Invalid),
        ("format ogg_opus", config(json!({"format": "ogg_opus"})), Ok),
        ("format pcm", config(json!({"format": "pcm"})), Ok),
        ("format flac", config(json!({"format": "flac"})), Invalid),
        ("enable_subtitle a string", config(json!({"enable_subtitle": "yes"})), Invalid),
        ("audio_config null", config(Value::Null), Invalid),
        ("unknown top-level field", t(json!({"voice": "x"})), Invalid),
        ("unknown field in audio_config", config(json!({"volume": 1})), Invalid),
        ("unknown field in a reference", refs(json!([{"speaker": "a", "volume": 1}])), Invalid),
        ("watermark is an open object", t(json!({"watermark": {"aigc_metadata": {"enable": true}, "x": 1}})), Ok),
        ("watermark not an object", t(json!({"watermark": true})), Invalid),
        ("stream (not an audio field)", t(json!({"stream": false})), Invalid),
    ];
    cases.into_iter().map(|(w, b, want)| (w.to_owned(), b, want)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_bound_just_inside_and_just_outside() {
    for db in databases() {
        let env = Env::new(&db, "100", UPSTREAM_TIMEOUT, SCOPES).await;
        for (what, request, want) in cases() {
            let ctx = env.ctx(&what);
            let (balance, entries, tasks) = env.assert_books(&ctx).await;
            if want == Want::Ok {
                speak_and_check(&env, &request, &ctx).await;
                let (_, entries_after, tasks_after) = env.assert_books(&ctx).await;
                assert_eq!((entries_after, tasks_after), (entries + 2, tasks + 1), "{ctx}");
                continue;
            }
            let r = env.post(AUDIO, &request).await;
            assert!(r.status < 500, "{ctx}: never a 5xx: {} {}", r.status, String::from_utf8_lossy(&r.raw));
            match want {
                Want::Invalid => r.assert_error(400, "invalid_request", &ctx),
                _ => r.assert_error(413, "request_too_large", &ctx),
            }
            let after = env.assert_books(&ctx).await;
            assert_eq!(after, (balance, entries, tasks), "{ctx}: a refused request moves no money");
        }
        // Unknown fields are named with their path.
        for (request, path) in [
            (body("a", json!({"voice": 1})), "unknown field \"voice\""),
            (body("a", json!({"audio_config": {"volume": 1}})), "unknown field \"volume\" at audio_config"),
            (body("a", json!({"references": [{"speaker": "s", "x": 1}]})), "unknown field \"x\" at references[0]"),
        ] {
            let r = env.post(AUDIO, &request).await;
            let message = r.json["error"]["message"].as_str().unwrap_or_default();
            assert_eq!(message, path, "{}", env.server.label);
        }
        let r = env.post(AUDIO, &body(&"a".repeat(3001), json!({}))).await;
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("3000") && message.contains("3001"), "{}: {message}", env.server.label);
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insufficient_balance_names_the_120_second_reservation() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        let poor = env.server.user("0.20").await;
        let poor_key = env.server.key(&poor.id, SCOPES).await.secret;
        let (entries_before, sum_before) = env.server.ledger(&poor.id).await;
        let r = env.server.post_json(AUDIO, Some(&poor_key), &body("a short line", json!({}))).await;
        let ctx = env.ctx("402");
        r.assert_error(402, "insufficient_balance", &ctx);
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("120-second") && message.contains("0.300000"), "{ctx}: {message}");
        let (entries_after, sum_after) = env.server.ledger(&poor.id).await;
        assert_eq!(entries_after.len(), entries_before.len(), "{ctx}: no ledger entry");
        assert_eq!(sum_after, sum_before, "{ctx}");
        assert_eq!(env.server.balance(&poor.id).await, sum_after, "{ctx}: the balance is the ledger's sum");
        let tasks = env.server.get("/api/v1/tasks", Some(&poor_key)).await;
        assert_eq!(tasks.json["pagination"]["total"], 0, "{ctx}: no task");
        assert_eq!(env.sim.requests("/api/v3/tts/create"), 0, "{ctx}: the service was not called");

        // Exactly the reservation is enough.
        let exact = env.server.user("0.30").await;
        let exact_key = env.server.key(&exact.id, SCOPES).await.secret;
        let r = env.server.post_json(AUDIO, Some(&exact_key), &body("a short line", json!({}))).await;
        assert_eq!(r.status, 200, "{}: $0.30 covers the hold; {}", env.server.label, r.json);
        let charged = r.json["billing"]["actual_amount_microusd"].as_i64().unwrap_or(-1);
        let left = env.server.balance(&exact.id).await;
        assert_eq!(left.micros(), RESERVATION_MICROS - charged, "{}", env.server.label);
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn speech_refusals_and_faults_are_502_and_refunded() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        let (start, _, _) = env.assert_books("start").await;
        let switches = [
            "code=45000001",
            "code=55000000",
            "fault=status_400",
            "fault=status_429",
            "fault=status_500",
            "fault=status_503",
            "fault=timeout",
            "fault=malformed",
            "fault=drop",
        ];
        for switch in switches {
            let ctx = env.ctx(switch);
            let r = env.post(AUDIO, &body(&format!("fail [sim:{switch}]"), json!({}))).await;
            if switch == "fault=status_400" {
                // The speech service refused the caller's own request: the caller's 400.
                r.assert_error(400, "invalid_request", &ctx);
            } else {
                r.assert_error(502, "upstream_request_failed", &ctx);
            }
            let message = r.json["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("refunded"), "{ctx}: {message}");
            assert_eq!(env.balance().await, start, "{ctx}: refunded");
        }
        let tasks = env.tasks().await;
        assert_eq!(tasks.len(), switches.len(), "{}: one task per call", env.server.label);
        for t in &tasks {
            let ctx = env.ctx(&format!("task {}", t["id"]));
            assert_eq!(t["kind"], "audio", "{ctx}");
            assert_eq!(t["status"], "failed", "{ctx}");
            assert_eq!(t["error_code"], "upstream_request_failed", "{ctx}");
            assert_eq!(t["billing"]["status"], "refunded", "{ctx}");
        }
        let (end, entries, _) = env.assert_books("after faults").await;
        assert_eq!(end, start, "{}", env.server.label);
        assert_eq!(entries, 1 + 2 * switches.len(), "{}: top-up + reserve/refund per call", env.server.label);
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_type_size_scope_and_idempotency() {
    for db in databases() {
        let env = Env::new(&db, "10", UPSTREAM_TIMEOUT, SCOPES).await;
        let (start, entries, _) = env.assert_books("start").await;
        let bytes = serde_json::to_vec(&body("a", json!({}))).expect("json");
        for content_type in ["text/plain", "multipart/form-data; boundary=x"] {
            let r = env.server.post(AUDIO, Some(&env.key), content_type, &bytes).await;
            r.assert_error(415, "unsupported_content_type", &env.ctx(content_type));
        }
        // The documented whole-body limit of an audio request is 64 MiB.
        let head = env.server.declare_body(AUDIO, &env.key, 64 * 1024 * 1024 + 1).await;
        assert!(head.starts_with("HTTP/1.1 413") && head.contains("request_too_large"), "{}: {head}", env.server.label);
        let weak = env.server.key(&env.user.id, &[Scope::ImageCreate]).await.secret;
        let r = env.server.post_json(AUDIO, Some(&weak), &body("a", json!({}))).await;
        r.assert_error(401, "invalid_api_key", &env.ctx("key without audio:create"));
        assert_eq!(env.assert_books("refusals").await, (start, entries, 0), "{}", env.server.label);

        let idem = unique("idem-audio-");
        let headers = [("idempotency-key", idem.as_str())];
        let request = body("Say it once.", json!({}));
        let first = env.server.post_json_with(AUDIO, Some(&env.key), &headers, &request).await;
        assert_eq!(first.status, 200, "{}: {}", env.server.label, first.json);
        let after_first = env.balance().await;
        let second = env.server.post_json_with(AUDIO, Some(&env.key), &headers, &request).await;
        assert_eq!(second.header("idempotent-replayed"), Some("true"), "{}", env.server.label);
        assert_eq!(second.json, first.json, "{}: the replay is the first answer", env.server.label);
        assert_eq!(env.balance().await, after_first, "{}: billed once", env.server.label);
        let other = env.server.post_json_with(AUDIO, Some(&env.key), &headers, &body("Another.", json!({}))).await;
        other.assert_error(409, "idempotency_conflict", &env.ctx("another body"));
        assert_eq!(env.sim.requests("/api/v3/tts/create"), 1, "{}: one call upstream", env.server.label);
        let (_, _, tasks) = env.assert_books("idempotency").await;
        assert_eq!(tasks, 1, "{}", env.server.label);
        env.server.stop().await;
    }
}
