//! The speech service: `HttpUpstream` against the simulator over real HTTP on 127.0.0.1.
#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{LONG, adapter, get, start, with};
use domain::ports::{Endpoint, UpstreamError};
use serde_json::{Value, json};
use sim::SPEECH_PATH;
use upstream::{HttpUpstream, UpstreamConfig};

fn request(extra: Value) -> Value {
    with(json!({"model": "seed-audio-1.0", "text_prompt": "Hello there"}), extra)
}

/// The answer's raw text (to check the exact decimals) and its parsed value.
async fn speak(up: &HttpUpstream, body: Value) -> Result<(String, Value), UpstreamError> {
    let bytes = common::send(up, Endpoint::Speech, body.to_string().as_bytes()).await?;
    let text = String::from_utf8(bytes).unwrap();
    let value = serde_json::from_str(&text).unwrap();
    Ok((text, value))
}

#[tokio::test]
async fn success_with_exact_durations_and_a_served_url() {
    let (up, sim, addr) = start(LONG).await;
    let (text, a) = speak(&up, request(json!({}))).await.unwrap();
    // "Hello there": 11 characters, 500 + 11 × 37 = 907 ms.
    assert!(text.contains("\"original_duration\":0.907"), "{text}");
    assert!(text.contains("\"duration\":0.9"), "{text}");
    assert_eq!((a["code"].as_i64(), a["message"].as_str()), (Some(0), Some("")));
    let audio = a["audio"].as_str().unwrap();
    assert!(!audio.starts_with("data:"), "raw Base64, never a data URL");
    let wav = common::b64decode(audio);
    assert!(wav.starts_with(b"RIFF") && &wav[8..12] == b"WAVE");
    let url = a["url"].as_str().unwrap();
    assert!(url.starts_with(&format!("http://{addr}/files/audio/")) && url.ends_with(".wav"), "{url}");
    let (status, content_type, body) = get(url).await;
    assert_eq!((status, content_type.as_str(), body), (200, "audio/wav", wav));
    assert!(a.get("subtitle").is_none());
    assert_eq!(sim.requests(SPEECH_PATH), 1);
}

#[tokio::test]
async fn durations_follow_the_prompt_length() {
    let (up, _sim, _) = start(LONG).await;
    for (chars, original, duration) in
        [(1, "0.537", "0.5"), (2000, "74.5", "74.5"), (3000, "111.5", "111.5"), (13, "0.981", "0.9")]
    {
        let (text, _) = speak(&up, request(json!({"text_prompt": "é".repeat(chars)}))).await.unwrap();
        assert!(text.contains(&format!("\"original_duration\":{original},")), "{chars}: {text}");
        assert!(text.contains(&format!("\"duration\":{duration},")), "{chars}: {text}");
    }
}

#[tokio::test]
async fn subtitles_and_format() {
    let (up, _sim, _) = start(LONG).await;
    let body =
        request(json!({"text_prompt": "Hi there. Bye!", "audio_config": {"format": "mp3", "enable_subtitle": true}}));
    let (_, a) = speak(&up, body).await.unwrap();
    assert!(a["url"].as_str().unwrap().ends_with(".mp3"));
    assert_eq!(a["subtitle"]["text"], "Hi there. Bye!");
    assert_eq!(
        a["subtitle"]["sentences"],
        json!([
            {"text": "Hi there.", "start_time": 250, "end_time": 250 + 9 * 37},
            {"text": "Bye!", "start_time": 250 + 10 * 37, "end_time": 250 + 14 * 37},
        ])
    );
    let (_, a) = speak(&up, request(json!({"audio_config": {"enable_subtitle": false}}))).await.unwrap();
    assert!(a.get("subtitle").is_none());
}

#[tokio::test]
async fn invalid_requests_are_coded_inside_200() {
    let (up, _sim, _) = start(LONG).await;
    for (body, message) in [
        (json!({"model": "seed-audio-1.0"}), "text_prompt is invalid"),
        (request(json!({"text_prompt": ""})), "text_prompt is invalid"),
        (request(json!({"text_prompt": 5})), "text_prompt is invalid"),
        (json!({"text_prompt": "x"}), "model is invalid"),
        (request(json!({"audio_config": {"format": "flac"}})), "audio_config.format is invalid"),
        (request(json!({"text_prompt": "[sim:fail_image=1]"})), "text_prompt is invalid"),
    ] {
        let (_, a) = speak(&up, body.clone()).await.unwrap();
        assert_eq!(a, json!({"code": 45_000_001, "message": message}), "{body}");
    }
}

#[tokio::test]
async fn code_switch_answers_an_error_inside_200() {
    let (up, _sim, _) = start(LONG).await;
    let (_, a) = speak(&up, request(json!({"text_prompt": "Hi [sim:code=45000002]"}))).await.unwrap();
    assert_eq!(a["code"], 45_000_002);
    assert!(a["message"].as_str().unwrap().contains("45000002"));
    assert!(a.get("audio").is_none());
}

#[tokio::test]
async fn status_and_transport_faults() {
    let (up, _sim, _) = start(Duration::from_millis(300)).await;
    for (fault, status, code) in [
        ("status_400", 400, 45_000_001),
        ("status_429", 429, 45_000_029),
        ("status_500", 500, 55_000_000),
        ("status_503", 503, 55_000_003),
    ] {
        match speak(&up, request(json!({"text_prompt": format!("x [sim:fault={fault}]")}))).await {
            Err(UpstreamError::Status { status: s, body, .. }) => {
                assert_eq!(s, status);
                assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["code"], code);
            }
            other => panic!("{fault}: {other:?}"),
        }
    }
    let fault = |name: &str| request(json!({"text_prompt": format!("x [sim:fault={name}]")}));
    assert_eq!(speak(&up, fault("timeout")).await.err(), Some(UpstreamError::Timeout));
    assert!(matches!(speak(&up, fault("malformed")).await, Err(UpstreamError::Malformed(_))));
    assert!(matches!(speak(&up, fault("drop")).await, Err(UpstreamError::Connect(_))));
    let (up, _sim, _) = start(LONG).await;
    let started = Instant::now();
    speak(&up, request(json!({"text_prompt": "x [sim:latency_ms=150]"}))).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn key_is_required_and_streaming_is_not_offered() {
    let (up, sim, addr) = start(LONG).await;
    let no_key =
        adapter(UpstreamConfig { speech_key: String::new(), ..UpstreamConfig::for_simulator(addr, LONG, LONG) });
    match speak(&no_key, request(json!({}))).await {
        Err(UpstreamError::Status { status: 401, body, .. }) => assert!(body.contains("45000010"), "{body}"),
        other => panic!("{other:?}"),
    }
    // The platform key (Bearer) does not open the speech service.
    let url = format!("http://{addr}{SPEECH_PATH}");
    let (status, _) = common::raw_post(&url, &[("authorization", "Bearer k")], &request(json!({})).to_string()).await;
    assert_eq!(status, 401);
    let before = sim.requests_total();
    let streamed = common::open(&up, Endpoint::Speech, &request(json!({}))).await;
    assert!(matches!(streamed, Err(UpstreamError::NotConfigured(_))));
    assert_eq!(sim.requests_total(), before, "nothing was sent");
}
