//! `RoutedUpstream` against simulators over real HTTP on 127.0.0.1: which endpoint a call and a
//! video task go to, what is retried and what is not, and what [`Via`] reports.
#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use common::LONG;
use domain::ports::{
    Endpoint, EventStream, TaskUpstream, Upstream, UpstreamCall, UpstreamError, Via, VideoTaskRequest, VideoTaskState,
};
use serde_json::{Value, json};
use sim::{SimHandle, VIDEO_TASKS_PATH};
use upstream::config::SIM_PLATFORM_KEY;
use upstream::route::BreakerSettings;
use upstream::{Member, RoutedConfig, RoutedUpstream};

const CHAT_PATH: &str = "/api/v3/chat/completions";

/// A simulator and the platform base a member points at.
async fn simulator() -> (SimHandle, String) {
    let (addr, handle) = sim::spawn().await.unwrap();
    (handle, format!("http://{addr}/api/v3"))
}

/// A base on 127.0.0.1 where nothing listens: connections are refused at once.
async fn nothing_listening() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}/api/v3")
}

fn member(name: &str, url: &str) -> Member {
    Member::plain(name.into(), url.into(), SIM_PLATFORM_KEY.into())
}

fn router(platform: Vec<Member>) -> RoutedUpstream {
    RoutedUpstream::new(RoutedConfig {
        platform,
        speech: Vec::new(),
        messages: Vec::new(),
        connect_timeout: LONG,
        timeout: LONG,
        breaker: BreakerSettings::default(),
        max_attempts: 8,
    })
    .unwrap()
}

fn chat(extra: Value) -> Vec<u8> {
    let mut body = json!({"model": "chat-model", "messages": [{"role": "user", "content": "Hello"}]});
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
    body.to_string().into_bytes()
}

fn call(model: &str) -> UpstreamCall<'_> {
    UpstreamCall { endpoint: Endpoint::ChatCompletions, model }
}

fn via(endpoint: &str, attempts: u32) -> Option<Via> {
    Some(Via { endpoint: endpoint.into(), attempts })
}

fn video_task() -> VideoTaskRequest {
    VideoTaskRequest {
        model: "video-model".into(),
        prompt: Some("a fox".into()),
        references: Vec::new(),
        resolution: None,
        ratio: None,
        duration: None,
        generate_audio: None,
        deadline_secs: 3600,
    }
}

#[tokio::test]
async fn a_call_retried_elsewhere_reports_the_endpoint_that_answered_and_the_attempts() {
    let (a, a_url) = simulator().await;
    let (b, b_url) = simulator().await;
    a.set_outage(Some((503, None)));
    let up = router(vec![member("a", &a_url), member("b", &b_url)]);
    let mut seen = Vec::new();
    for _ in 0..4 {
        let answered = up.complete(call("chat-model"), chat(json!({}))).await;
        assert!(answered.result.is_ok(), "{:?}", answered.result);
        seen.push(answered.via.unwrap());
    }
    // Round robin sends every other call to a first; each of those is retried on b.
    assert!(seen.iter().all(|v| v.endpoint == "b"), "{seen:?}");
    let retried = seen.iter().filter(|v| v.attempts == 2).count();
    assert_eq!(retried, usize::try_from(a.requests(CHAT_PATH)).unwrap(), "{seen:?}");
    assert!(retried >= 1, "{seen:?}");
    assert_eq!(b.requests(CHAT_PATH), 4);
    // Both failing: the last endpoint tried and the attempts are reported with the error.
    b.set_outage(Some((500, None)));
    let failed = up.complete(call("chat-model"), chat(json!({}))).await;
    assert!(matches!(failed.result, Err(UpstreamError::Status { status: 500 | 503, .. })), "{:?}", failed.result);
    assert_eq!(failed.via.map(|v| v.attempts), Some(2));
}

#[tokio::test]
async fn a_stream_that_fails_after_its_head_is_not_retried() {
    let (a, a_url) = simulator().await;
    let (b, b_url) = simulator().await;
    let up = router(vec![member("a", &a_url), member("b", &b_url)]);
    let opened = up.stream(call("chat-model"), chat(json!({"stream": true, "sim_fault": "midstream_drop"}))).await;
    let first = opened.via.clone().unwrap();
    assert_eq!(first.attempts, 1);
    let mut events: Box<dyn EventStream> = opened.result.unwrap();
    let ended = loop {
        match tokio::time::timeout(LONG, events.next_event()).await.unwrap() {
            Some(Ok(_)) => {}
            Some(Err(e)) => break Some(e),
            None => break None,
        }
    };
    assert!(matches!(ended, Some(UpstreamError::Stream(_) | UpstreamError::Connect(_))), "{ended:?}");
    // The answer broke after bytes reached the caller: nothing went to the other endpoint.
    assert_eq!(a.requests(CHAT_PATH) + b.requests(CHAT_PATH), 1);
}

#[tokio::test]
async fn only_endpoints_serving_the_model_take_its_calls() {
    let (a, a_url) = simulator().await;
    let (b, b_url) = simulator().await;
    let only_x = Member { models: Some(vec!["model-x".into()]), ..member("only-x", &a_url) };
    let up = router(vec![only_x, member("all", &b_url)]);
    for _ in 0..6 {
        assert_eq!(up.complete(call("model-y"), chat(json!({}))).await.via, via("all", 1));
    }
    assert_eq!(a.requests(CHAT_PATH), 0);
    let xs: Vec<String> = endpoints_of(&up, "model-x", 6).await;
    assert_eq!(xs.iter().filter(|n| *n == "only-x").count(), 3, "{xs:?}: weights 1:1 among those serving x");
    // A model no endpoint serves: nothing is sent, and the error says no upstream is configured.
    let only_z = Member { models: Some(vec!["model-z".into()]), ..member("only-z", &b_url) };
    let bare = router(vec![Member { models: Some(vec!["model-x".into()]), ..member("only-x", &a_url) }, only_z]);
    let before = a.requests_total() + b.requests_total();
    let refused = bare.complete(call("model-y"), chat(json!({}))).await;
    assert!(matches!(refused.result, Err(UpstreamError::NotConfigured(_))), "{:?}", refused.result);
    assert_eq!(refused.via, None);
    assert_eq!(a.requests_total() + b.requests_total(), before);
}

/// The endpoints `n` sequential calls to `model` went to.
async fn endpoints_of(up: &RoutedUpstream, model: &str, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    for _ in 0..n {
        names.push(up.complete(call(model), chat(json!({}))).await.via.unwrap().endpoint);
    }
    names
}

#[tokio::test]
async fn an_endpoint_at_its_requests_per_minute_sends_calls_to_the_fallback() {
    let (a, a_url) = simulator().await;
    let (b, b_url) = simulator().await;
    let limited = Member { rpm: Some(3), ..member("limited", &a_url) };
    let fallback = Member { priority: 1, ..member("fallback", &b_url) };
    let up = router(vec![limited, fallback]);
    let names = endpoints_of(&up, "chat-model", 5).await;
    assert_eq!(names, ["limited", "limited", "limited", "fallback", "fallback"]);
    assert_eq!((a.requests(CHAT_PATH), b.requests(CHAT_PATH)), (3, 2));
}

#[tokio::test]
async fn a_video_task_is_created_elsewhere_only_when_its_request_never_left() {
    let dead = nothing_listening().await;
    let (b, b_url) = simulator().await;
    let up = router(vec![member("dead", &dead), member("b", &b_url)]);
    // Every creation succeeds on b, whichever endpoint round robin picked first.
    let mut created = Vec::new();
    for _ in 0..4 {
        let attempted = up.create_task(&video_task()).await;
        let id = attempted.result.unwrap();
        let via = attempted.via.unwrap();
        assert_eq!(via.endpoint, "b");
        created.push((id, via));
    }
    assert!(created.iter().any(|(_, v)| v.attempts == 2), "a refused connection was tried first at least once");
    assert_eq!(b.requests(VIDEO_TASKS_PATH), 4);
    // The task is polled and cancelled where it lives.
    let (id, via) = &created[0];
    let task = up.get_task(Some(&via.endpoint), id).await;
    assert!(matches!(task, Ok(VideoTaskState::Queued | VideoTaskState::Running)), "{task:?}");
    assert!(up.get_task(Some("dead"), id).await.is_err(), "not on the other endpoint");
    let gone = up.get_task(Some("removed"), id).await;
    assert!(matches!(gone, Err(UpstreamError::NotConfigured(_))), "{gone:?}");
    up.cancel_task(Some("b"), id).await.unwrap();
}

#[tokio::test]
async fn a_video_creation_that_reached_an_upstream_is_never_sent_again() {
    let (a, a_url) = simulator().await;
    let (b, b_url) = simulator().await;
    let up = router(vec![member("a", &a_url), member("b", &b_url)]);
    for sim in [&a, &b] {
        sim.set_outage(Some((500, None)));
    }
    // A 500 (or a timeout) may have created the task: the caller keeps its hold and asks again
    // later; no second endpoint is asked now.
    for _ in 0..4 {
        let attempted = up.create_task(&video_task()).await;
        assert!(matches!(attempted.result, Err(UpstreamError::Status { status: 500, .. })), "{:?}", attempted.result);
        assert_eq!(attempted.via.map(|v| v.attempts), Some(1));
    }
    assert_eq!(a.requests(VIDEO_TASKS_PATH) + b.requests(VIDEO_TASKS_PATH), 4);
    assert_eq!(a.requests(VIDEO_TASKS_PATH), 2, "round robin");
}
