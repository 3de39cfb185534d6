//! Video tasks: `HttpUpstream` as `TaskUpstream` (and its raw-body calls, for bodies the gateway
//! never writes) against the simulator over real HTTP on 127.0.0.1, with the simulated clock
//! driven by the test.
#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{LONG, body_server, get, raw_answer, with};
use domain::ports::{AssetKind, TaskUpstream, UpstreamError, VideoTaskRequest, VideoTaskState};
use serde_json::{Value, json};
use sim::{ClockMode, SimHandle, SimOptions, VIDEO_TASKS_PATH};
use upstream::{HttpUpstream, UpstreamConfig};

async fn start(options: SimOptions) -> (HttpUpstream, SimHandle, std::net::SocketAddr) {
    let (addr, handle) = sim::spawn_with(options).await.unwrap();
    (common::adapter(UpstreamConfig::for_simulator(addr, LONG, LONG)), handle, addr)
}

fn request(prompt: &str, extra: Value) -> Value {
    with(json!({"model": "video-model", "content": [{"type": "text", "text": prompt}]}), extra)
}

async fn create(up: &HttpUpstream, body: &Value) -> Result<String, UpstreamError> {
    let answer: Value = serde_json::from_slice(&up.create_task_body(body.to_string().into_bytes()).await?).unwrap();
    Ok(answer["id"].as_str().unwrap().to_owned())
}

async fn task(up: &HttpUpstream, id: &str) -> Value {
    serde_json::from_slice(&up.get_task_body(id).await.unwrap()).unwrap()
}

fn status_of<T: std::fmt::Debug>(result: Result<T, UpstreamError>) -> (u16, Value) {
    match result {
        Err(UpstreamError::Status { status, body, .. }) => (status, serde_json::from_str(&body).unwrap()),
        other => panic!("expected a status error, got {other:?}"),
    }
}

#[tokio::test]
async fn queued_running_succeeded_on_the_test_clock() {
    let (up, sim, addr) = start(SimOptions::manual()).await;
    let id = create(&up, &request("a fox", json!({"ratio": "16:9"}))).await.unwrap();
    assert!(id.starts_with("cgt-"), "{id}");
    let t = task(&up, &id).await;
    assert_eq!((t["status"].as_str(), t["id"].as_str()), (Some("queued"), Some(id.as_str())));
    assert!(t["error"].is_null() && t.get("usage").is_none() && t.get("content").is_none());
    sim.advance(Duration::from_millis(999));
    assert_eq!(task(&up, &id).await["status"], "queued");
    sim.advance(Duration::from_millis(1));
    assert_eq!(task(&up, &id).await["status"], "running");
    sim.advance(Duration::from_millis(1999));
    assert_eq!(task(&up, &id).await["status"], "running");
    sim.advance(Duration::from_millis(1));
    let done = task(&up, &id).await;
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["usage"], json!({"completion_tokens": 108_900, "total_tokens": 108_900}));
    assert_eq!(
        (done["resolution"].as_str(), done["ratio"].as_str(), done["duration"].as_u64()),
        (Some("720p"), Some("16:9"), Some(5))
    );
    assert_eq!(done["framespersecond"], 24);
    assert!(done["updated_at"].as_u64().unwrap() >= done["created_at"].as_u64().unwrap() + 3);
    let video = done["content"]["video_url"].as_str().unwrap();
    assert_eq!(video, format!("http://{addr}/files/videos/{id}.mp4"));
    let (status, content_type, bytes) = get(video).await;
    assert_eq!((status, content_type.as_str(), &bytes[4..8]), (200, "video/mp4", &b"ftyp"[..]));
    let (status, content_type, _) = get(done["content"]["last_frame_url"].as_str().unwrap()).await;
    assert_eq!((status, content_type.as_str()), (200, "image/png"));
    assert_eq!(sim.requests(VIDEO_TASKS_PATH), 1);
}

fn typed(prompt: &str) -> VideoTaskRequest {
    VideoTaskRequest {
        model: "video-model".into(),
        prompt: Some(prompt.into()),
        references: Vec::new(),
        resolution: Some(domain::Resolution::P720),
        ratio: Some(domain::Ratio::Wide),
        duration: Some(5),
        generate_audio: Some(true),
        deadline_secs: 172_800,
    }
}

#[tokio::test]
async fn the_port_writes_the_body_and_reads_the_states() {
    let (up, sim, addr) = start(SimOptions::manual()).await;
    let id = up.create_task(&typed("a fox")).await.result.unwrap();
    assert!(id.starts_with("cgt-"), "{id}");
    assert_eq!(up.get_task(None, &id).await, Ok(VideoTaskState::Queued));
    sim.advance(Duration::from_secs(1));
    assert_eq!(up.get_task(None, &id).await, Ok(VideoTaskState::Running));
    sim.advance(Duration::from_secs(2));
    let done = up.get_task(None, &id).await.unwrap();
    let VideoTaskState::Succeeded { output_url, last_frame_url, tokens, usage } = done else {
        panic!("{done:?}");
    };
    assert_eq!(output_url, Some(format!("http://{addr}/files/videos/{id}.mp4")));
    assert!(last_frame_url.is_some(), "the last frame is asked for");
    assert_eq!(tokens, 108_900);
    let usage: Value = serde_json::from_str(&usage).unwrap();
    assert_eq!(usage, json!({"completion_tokens": 108_900, "total_tokens": 108_900}));
    let failing = up.create_task(&typed("[sim:video=fail] a fox")).await.result.unwrap();
    sim.advance(Duration::from_secs(3));
    let failed = up.get_task(None, &failing).await.unwrap();
    assert!(
        matches!(&failed, VideoTaskState::Failed { code, .. } if code == "OutputVideoSensitiveContentDetected"),
        "{failed:?}"
    );
    // An asset the simulator does not know is the caller's fault (400), refused before a task exists.
    let unknown = VideoTaskRequest { references: vec![(AssetKind::Image, "asset-none".into())], ..typed("x") };
    let refused = up.create_task(&unknown).await.result.unwrap_err();
    assert!(refused.is_callers_fault(), "{refused:?}");
}

#[tokio::test]
async fn usage_by_resolution_ratio_and_duration() {
    let (up, sim, _) = start(SimOptions::manual()).await;
    let cases = [
        (json!({"resolution": "480p", "ratio": "16:9", "duration": 4}), 854 * 480 * 97 / 1024),
        (json!({"resolution": "720p", "ratio": "adaptive"}), 108_900),
        (json!({"resolution": "720p", "ratio": "3:4", "duration": 5}), 834 * 1112 * 121 / 1024),
        (json!({"resolution": "1080p", "ratio": "9:16", "duration": 15}), 1080 * 1920 * 361 / 1024),
        (json!({"resolution": "4k", "ratio": "21:9", "duration": 6}), 4412 * 1892 * 145 / 1024),
        (json!({"resolution": "1080p", "ratio": "1:1", "duration": -1}), 1440 * 1440 * 241 / 1024),
    ];
    let mut ids = Vec::new();
    for (extra, _) in &cases {
        ids.push(create(&up, &request("x", extra.clone())).await.unwrap());
    }
    sim.advance(Duration::from_secs(3));
    for ((extra, tokens), id) in cases.iter().zip(&ids) {
        let t = task(&up, id).await;
        assert_eq!(t["usage"]["completion_tokens"], json!(tokens), "{extra}");
        assert_eq!(t["usage"]["total_tokens"], json!(tokens), "{extra}");
    }
    assert_eq!(task(&up, &ids[1]).await["ratio"], "16:9");
    assert_eq!(task(&up, &ids[5]).await["duration"], 10);
    assert_eq!(sim.requests(VIDEO_TASKS_PATH), 6);
}

#[tokio::test]
async fn failure_expiry_and_no_last_frame() {
    let (up, sim, _) = start(SimOptions::manual()).await;
    let failing = create(&up, &request("[sim:video=fail] a fox", json!({}))).await.unwrap();
    let expiring = create(&up, &request("a fox [sim:video=expire]", json!({}))).await.unwrap();
    let plain = create(&up, &request("a fox", json!({"return_last_frame": false}))).await.unwrap();
    sim.advance(Duration::from_secs(3));
    let f = task(&up, &failing).await;
    assert_eq!(
        (f["status"].as_str(), f["error"]["code"].as_str()),
        (Some("failed"), Some("OutputVideoSensitiveContentDetected"))
    );
    assert!(f.get("usage").is_none() && f.get("content").is_none());
    let e = task(&up, &expiring).await;
    assert_eq!(e["status"], "expired");
    assert!(e["error"].is_null() && e.get("usage").is_none());
    let p = task(&up, &plain).await;
    assert!(p["content"].get("last_frame_url").is_none() && p["content"]["video_url"].is_string());
}

#[tokio::test]
async fn cancel_only_while_queued() {
    let (up, sim, _) = start(SimOptions::manual()).await;
    let slow = create(&up, &request("[sim:video=slow_queue]", json!({}))).await.unwrap();
    let normal = create(&up, &request("go", json!({}))).await.unwrap();
    sim.advance(Duration::from_secs(1));
    assert_eq!(task(&up, &slow).await["status"], "queued");
    assert_eq!(task(&up, &normal).await["status"], "running");
    let (status, body) = status_of(up.cancel_task(None, &normal).await);
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("InvalidTaskStatus")));
    up.cancel_task(None, &slow).await.unwrap();
    let t = task(&up, &slow).await;
    assert_eq!(t["status"], "cancelled");
    sim.advance(Duration::from_secs(7200));
    assert_eq!(task(&up, &slow).await["status"], "cancelled");
    assert_eq!(status_of(up.cancel_task(None, &slow).await).0, 409);
    assert_eq!(status_of(up.cancel_task(None, &normal).await).0, 409, "succeeded tasks are not deleted");
    assert_eq!(task(&up, &normal).await["status"], "succeeded");
    let (status, body) = status_of(up.get_task_body("cgt-unknown").await);
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("NotFound")));
    assert_eq!(status_of(up.cancel_task(None, "cgt-unknown").await).0, 404);
    assert!(matches!(up.get_task_body("../etc").await, Err(UpstreamError::Malformed(_))));
    assert!(matches!(up.get_task_body("").await, Err(UpstreamError::Malformed(_))));
}

#[tokio::test]
async fn slow_queue_then_execution_deadline_expires() {
    let (up, sim, _) = start(SimOptions::manual()).await;
    let id = create(&up, &request("[sim:video=slow_queue]", json!({"execution_expires_after": 3600}))).await.unwrap();
    sim.advance(Duration::from_millis(3_599_999));
    assert_eq!(task(&up, &id).await["status"], "queued");
    sim.advance(Duration::from_millis(1));
    assert_eq!(task(&up, &id).await["status"], "expired");
    let slow = create(&up, &request("[sim:video=slow_queue]", json!({}))).await.unwrap();
    sim.advance(Duration::from_secs(3600));
    assert_eq!(task(&up, &slow).await["status"], "running", "a slow queue ends after an hour");
}

#[tokio::test]
async fn poll_errors_then_answers() {
    let (up, _sim, _) = start(SimOptions::manual()).await;
    let id = create(&up, &request("[sim:video=poll_error:2]", json!({}))).await.unwrap();
    for _ in 0..2 {
        let (status, body) = status_of(up.get_task_body(&id).await);
        assert_eq!((status, body["error"]["code"].as_str()), (500, Some("InternalServiceError")));
    }
    assert_eq!(task(&up, &id).await["status"], "queued");
}

#[tokio::test]
async fn create_validation_edges() {
    let (up, sim, addr) = start(SimOptions::manual()).await;
    for ok in [
        json!({"duration": 4}),
        json!({"duration": 15}),
        json!({"duration": -1}),
        json!({"execution_expires_after": 3600}),
        json!({"execution_expires_after": 259_200}),
    ] {
        assert!(create(&up, &request("x", ok.clone())).await.is_ok(), "{ok}");
    }
    let bad = [
        (json!({"duration": 3}), "duration"),
        (json!({"duration": 16}), "duration"),
        (json!({"duration": 0}), "duration"),
        (json!({"resolution": "2k"}), "resolution"),
        (json!({"ratio": "2:1"}), "resolution"),
        (json!({"execution_expires_after": 3599}), "execution_expires_after"),
        (json!({"execution_expires_after": 259_201}), "execution_expires_after"),
        (json!({"generate_audio": "yes"}), "generate_audio"),
        (json!({"content": []}), "content"),
        (json!({"content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}), "content"),
        (json!({"content": [{"type": "image_url", "image_url": {"url": "asset://asset-unknown"}}]}), "content"),
        (json!({"content": [{"type": "text", "text": "[sim:video=explode]"}]}), "content"),
        (json!({"model": ""}), "model"),
    ];
    for (extra, param) in bad {
        let (status, body) = status_of(create(&up, &request("x", extra.clone())).await);
        assert_eq!((status, body["error"]["param"].as_str()), (400, Some(param)), "{extra}");
        assert_eq!(body["error"]["code"], "InvalidParameter");
    }
    let callback = request("[sim:video=callback]", json!({"callback_url": "https://example.com/hook"}));
    assert_eq!(status_of(create(&up, &callback).await).0, 400);
    let (status, _) = status_of(up.create_task_body(b"[1]".to_vec()).await);
    assert_eq!(status, 400);
    let nine = Value::Array(vec![json!({"type": "image_url", "image_url": {"url": "https://x/a.png"}}); 9]);
    assert!(create(&up, &json!({"model": "m", "content": nine})).await.is_ok());
    let ten = Value::Array(vec![json!({"type": "image_url", "image_url": {"url": "https://x/a.png"}}); 10]);
    assert_eq!(status_of(create(&up, &json!({"model": "m", "content": ten})).await).0, 400);
    let keyless = common::adapter(UpstreamConfig {
        platform_key: String::new(),
        ..UpstreamConfig::for_simulator(addr, LONG, LONG)
    });
    assert_eq!(status_of(create(&keyless, &request("x", json!({}))).await).0, 401);
    assert_eq!(status_of(keyless.get_task_body("cgt-1").await).0, 401);
    assert!(sim.requests(VIDEO_TASKS_PATH) >= 20);
}

/// The next callback's body (within 5 s).
async fn next_callback(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> Value {
    let text = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap();
    assert!(text.starts_with("POST /hook "), "{text}");
    let body = &text[text.find("\r\n\r\n").unwrap() + 4..];
    serde_json::from_str::<Value>(body).unwrap()
}

#[tokio::test]
async fn callbacks_on_every_change_in_order() {
    let (up, sim, _) = start(SimOptions::manual()).await;
    let (receiver, mut rx) = body_server(raw_answer("200 OK", "application/json", b"{}")).await;
    let hook = format!("http://{receiver}/hook");
    let id = create(&up, &request("[sim:video=callback]", json!({"callback_url": hook}))).await.unwrap();
    let mut seen = vec![next_callback(&mut rx).await];
    sim.advance(Duration::from_secs(10));
    seen.push(next_callback(&mut rx).await);
    seen.push(next_callback(&mut rx).await);
    let statuses: Vec<&str> = seen.iter().map(|t| t["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["queued", "running", "succeeded"]);
    assert!(seen.iter().all(|t| t["id"] == json!(id)));
    assert_eq!(seen[2]["usage"]["completion_tokens"], 108_900);
    assert!(seen[1].get("usage").is_none());
    for _ in 0..100 {
        if sim.callbacks_delivered() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(sim.callbacks_delivered(), 3);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(rx.try_recv().is_err(), "no callback after the terminal one");
}

#[tokio::test]
async fn clock_control_endpoint_and_real_time() {
    let options = SimOptions {
        clock: ClockMode::Real,
        video_queue: Duration::from_millis(50),
        video_run: Duration::from_millis(50),
        ..SimOptions::default()
    };
    let (up, sim, addr) = start(options).await;
    let id = create(&up, &request("x", json!({}))).await.unwrap();
    let mut status = String::new();
    for _ in 0..250 {
        status = task(&up, &id).await["status"].as_str().unwrap().to_owned();
        if status == "succeeded" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, "succeeded");
    let client = common::http_client();
    let before = sim.now_ms();
    let r = client.post(format!("http://{addr}/sim/clock/advance?ms=3600000")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let now = serde_json::from_slice::<Value>(&r.bytes().await.unwrap()).unwrap()["now_ms"].as_u64().unwrap();
    assert!(now >= before + 3_600_000);
    let r = client.get(format!("http://{addr}/sim/clock")).send().await.unwrap();
    assert!(serde_json::from_slice::<Value>(&r.bytes().await.unwrap()).unwrap()["now_ms"].as_u64().unwrap() >= now);
    for bad in ["ms=x", "ms=-1", "", "ms=2592000001"] {
        let r = client.post(format!("http://{addr}/sim/clock/advance?{bad}")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 400, "{bad}");
    }
    let r = client.post(format!("http://{addr}/sim/clock/advance?ms=2592000000")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[tokio::test]
async fn unconfigured_platform_sends_nothing() {
    let (addr, sim) = sim::spawn().await.unwrap();
    let up = common::adapter(UpstreamConfig {
        platform_base: String::new(),
        ..UpstreamConfig::for_simulator(addr, LONG, LONG)
    });
    assert_eq!(up.create_task_body(b"{}".to_vec()).await, Err(UpstreamError::NotConfigured("video_tasks".to_owned())));
    assert_eq!(up.get_task_body("cgt-1").await, Err(UpstreamError::NotConfigured("video_tasks".to_owned())));
    assert_eq!(sim.requests_total(), 0);
}
