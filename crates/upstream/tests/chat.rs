//! Chat completions: drives `HttpUpstream` against the simulator over real HTTP on 127.0.0.1.
#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{LONG, adapter};
use domain::ports::{Endpoint, EventStream, UpstreamError};
use serde_json::{Value, json};
use sim::SimHandle;
use upstream::{HttpUpstream, UpstreamConfig};

async fn start(timeout: Duration) -> (HttpUpstream, SimHandle) {
    let (up, handle, _) = common::start(timeout).await;
    (up, handle)
}

/// An adapter for chat only, at `base` with `key`.
fn chat_only(base: &str, key: &str) -> HttpUpstream {
    adapter(UpstreamConfig {
        platform_base: base.to_owned(),
        platform_key: key.to_owned(),
        speech_origin: String::new(),
        speech_key: String::new(),
        messages_base: String::new(),
        connect_timeout: LONG,
        timeout: LONG,
    })
}

fn request(extra: Value) -> Value {
    common::with(
        json!({"model": "chat-model", "messages": [{"role": "user", "content": "Hello there, simulator!"}]}),
        extra,
    )
}

async fn complete(up: &HttpUpstream, body: Value) -> Result<Value, UpstreamError> {
    common::call(up, Endpoint::ChatCompletions, &body).await
}

/// All payloads of a stream (bounded; chat events have no name), and the error that ended it, if any.
async fn drain(stream: Box<dyn EventStream>) -> (Vec<Value>, Option<UpstreamError>) {
    let (events, error) = common::drain(stream).await;
    assert!(events.iter().all(|e| e.event.is_none()));
    (events.iter().map(common::data).collect(), error)
}

async fn stream(up: &HttpUpstream, body: Value) -> Result<Box<dyn EventStream>, UpstreamError> {
    common::open(up, Endpoint::ChatCompletions, &body).await
}

#[tokio::test]
async fn non_stream_answer_shape() {
    let (up, _sim) = start(LONG).await;
    let a = complete(&up, request(json!({}))).await.unwrap();
    assert!(a["id"].as_str().unwrap().starts_with("sim-"));
    assert_eq!(a["object"], "chat.completion");
    assert_eq!(a["model"], "chat-model");
    assert_eq!(a["service_tier"], "default");
    let choice = &a["choices"][0];
    assert_eq!((choice["index"].as_u64(), choice["finish_reason"].as_str()), (Some(0), Some("stop")));
    assert!(choice["logprobs"].is_null());
    assert_eq!(choice["message"]["role"], "assistant");
    assert!(choice["message"].get("reasoning_content").is_none());
    let usage = &a["usage"];
    // "Hello there, simulator!" is 23 bytes: ceil(23/4) + 4.
    assert_eq!(usage["prompt_tokens"], 10);
    assert_eq!(usage["completion_tokens"], 16);
    assert_eq!(usage["total_tokens"], 26);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 0);
    assert_eq!(choice["message"]["content"].as_str().unwrap().split_whitespace().count(), 16);
}

#[tokio::test]
async fn deterministic_usage() {
    let (a, _s1) = start(LONG).await;
    let (b, _s2) = start(LONG).await;
    let body = request(json!({"max_tokens": 9}));
    let ua = complete(&a, body.clone()).await.unwrap()["usage"].clone();
    let ub = complete(&b, body.clone()).await.unwrap()["usage"].clone();
    assert_eq!(ua, ub);
    assert_eq!(ua["completion_tokens"], 9);
    // The same simulator again: same counts, now with a cache hit.
    let again = complete(&a, body).await.unwrap()["usage"].clone();
    assert_eq!(again["prompt_tokens"], ua["prompt_tokens"]);
    assert_eq!(again["completion_tokens"], ua["completion_tokens"]);
}

#[tokio::test]
async fn limits_cut_with_length() {
    let (up, _sim) = start(LONG).await;
    let a = complete(&up, request(json!({"max_completion_tokens": 3}))).await.unwrap();
    assert_eq!(a["choices"][0]["finish_reason"], "length");
    assert_eq!(a["choices"][0]["message"]["content"].as_str().unwrap().split_whitespace().count(), 3);
    let a = complete(&up, request(json!({"sim_completion_tokens": 40}))).await.unwrap();
    assert_eq!(a["usage"]["completion_tokens"], 40);
}

#[tokio::test]
async fn prompt_tokens_grow_with_input() {
    let (up, _sim) = start(LONG).await;
    let mut last = 0;
    for n in [1_usize, 100, 1000] {
        let body =
            json!({"model": "m", "messages": [{"role": "user", "content": format!("{n}{}", "x".repeat(n * 4))}]});
        let p = complete(&up, body).await.unwrap()["usage"]["prompt_tokens"].as_u64().unwrap();
        assert!(p > last, "{p} after {last}");
        last = p;
    }
    let p = complete(&up, request(json!({"sim_prompt_tokens": 130_000}))).await.unwrap();
    assert_eq!(p["usage"]["prompt_tokens"], 130_000);
}

#[tokio::test]
async fn reasoning_when_thinking() {
    let (up, _sim) = start(LONG).await;
    let a = complete(&up, request(json!({"thinking": {"type": "enabled"}}))).await.unwrap();
    let msg = &a["choices"][0]["message"];
    assert_eq!(a["usage"]["completion_tokens_details"]["reasoning_tokens"], 8);
    assert_eq!(msg["reasoning_content"].as_str().unwrap().split_whitespace().count(), 8);
    assert_eq!(msg["content"].as_str().unwrap().split_whitespace().count(), 8);
    let seed = complete(&up, json!({"model": "seed-1", "messages": [{"role": "user", "content": "q"}]})).await.unwrap();
    assert_eq!(seed["usage"]["completion_tokens_details"]["reasoning_tokens"], 8);
    let off =
        json!({"model": "seed-1", "messages": [{"role": "user", "content": "q"}], "thinking": {"type": "disabled"}});
    let off = complete(&up, off).await.unwrap();
    assert_eq!(off["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
}

#[tokio::test]
async fn cached_and_audio_tokens() {
    let (up, _sim) = start(LONG).await;
    let first = json!({"model": "m", "messages": [{"role": "system", "content": "a long shared system prompt"}, {"role": "user", "content": "one"}]});
    let second = json!({"model": "m", "messages": [{"role": "system", "content": "a long shared system prompt"}, {"role": "user", "content": "two"}], "sim_audio_tokens": 7});
    let u1 = complete(&up, first).await.unwrap()["usage"].clone();
    assert_eq!(u1["prompt_tokens_details"]["cached_tokens"], 0);
    let u2 = complete(&up, second).await.unwrap()["usage"].clone();
    let prompt = u2["prompt_tokens"].as_u64().unwrap();
    assert_eq!(u2["prompt_tokens_details"]["cached_tokens"], prompt / 2);
    assert_eq!(u2["prompt_tokens_details"]["audio_tokens"], 7);
}

#[tokio::test]
async fn streaming_chunks_then_usage_then_end() {
    let (up, _sim) = start(LONG).await;
    let body = request(
        json!({"stream": true, "stream_options": {"include_usage": true}, "thinking": {"type": "enabled"}, "sim_completion_tokens": 6}),
    );
    let (events, error) = drain(stream(&up, body).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(events.len(), 3 + 3 + 1 + 1);
    for e in &events {
        assert_eq!(e["object"], "chat.completion.chunk");
    }
    assert!(events[0]["choices"][0]["delta"]["reasoning_content"].is_string());
    assert_eq!(events[3]["choices"][0]["delta"]["role"], "assistant");
    let text: String = events[3..6].iter().map(|e| e["choices"][0]["delta"]["content"].as_str().unwrap()).collect();
    assert_eq!(text.split_whitespace().count(), 3);
    assert_eq!(events[6]["choices"][0]["finish_reason"], "stop");
    assert!(events[6]["usage"].is_null());
    assert_eq!(events[7]["choices"], json!([]));
    assert_eq!(events[7]["usage"]["completion_tokens"], 6);
    // Without include_usage there is no usage chunk.
    let (events, _) = drain(stream(&up, request(json!({"stream": true}))).await.unwrap()).await;
    assert_eq!(events.len(), 16 + 1);
}

#[tokio::test]
async fn stream_read_timeout_between_chunks() {
    let (up, _sim) = start(Duration::from_millis(300)).await;
    let body = request(json!({"stream": true, "sim_chunk_delay_ms": 1000}));
    let (events, error) = drain(stream(&up, body).await.unwrap()).await;
    assert!(events.is_empty());
    assert_eq!(error, Some(UpstreamError::Timeout));
}

#[tokio::test]
async fn status_faults() {
    let (up, _sim) = start(LONG).await;
    for (fault, status, code) in [
        ("status_400", 400, "InvalidParameter"),
        ("status_429", 429, "RateLimitExceeded"),
        ("status_500", 500, "InternalServiceError"),
        ("status_503", 503, "ServiceUnavailable"),
    ] {
        match complete(&up, request(json!({"sim_fault": fault}))).await {
            Err(UpstreamError::Status { status: s, body, .. }) => {
                assert_eq!(s, status);
                let v: Value = serde_json::from_str(&body).unwrap();
                assert!(v["error"]["code"].as_str().unwrap().starts_with(code), "{body}");
                assert_eq!(v["error"]["param"], "");
            }
            other => panic!("{fault}: {other:?}"),
        }
        let streamed = stream(&up, request(json!({"sim_fault": fault, "stream": true}))).await;
        assert!(matches!(streamed, Err(UpstreamError::Status { status: s, .. }) if s == status));
    }
}

#[tokio::test]
async fn auth_bad_request_and_not_found() {
    let (addr, _sim) = sim::spawn().await.unwrap();
    let no_key = chat_only(&format!("http://{addr}/api/v3"), "");
    match complete(&no_key, request(json!({}))).await {
        Err(UpstreamError::Status { status: 401, body, .. }) => {
            assert!(body.contains("\"AuthenticationError\"") && body.contains("\"Unauthorized\""), "{body}");
        }
        other => panic!("{other:?}"),
    }
    let up = chat_only(&format!("http://{addr}/api/v3"), "k");
    for bad in [json!({"messages": []}), json!({"model": "m"}), json!([1])] {
        match complete(&up, bad).await {
            Err(UpstreamError::Status { status: 400, body, .. }) => assert!(body.contains("\"BadRequest\""), "{body}"),
            other => panic!("{other:?}"),
        }
    }
    let unknown = complete(&up, request(json!({"sim_fault": "nope"}))).await;
    assert!(matches!(unknown, Err(UpstreamError::Status { status: 400, .. })));
    let wrong_path = chat_only(&format!("http://{addr}/api/v2"), "k");
    assert!(matches!(complete(&wrong_path, request(json!({}))).await, Err(UpstreamError::Status { status: 404, .. })));
}

#[tokio::test]
async fn timeout_fault_maps_to_timeout() {
    let (up, _sim) = start(Duration::from_millis(300)).await;
    let started = Instant::now();
    assert_eq!(complete(&up, request(json!({"sim_fault": "timeout"}))).await, Err(UpstreamError::Timeout));
    let streamed = stream(&up, request(json!({"sim_fault": "timeout", "stream": true}))).await;
    assert!(matches!(streamed, Err(UpstreamError::Timeout)));
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn latency_delays_the_answer() {
    let (up, _sim) = start(LONG).await;
    let started = Instant::now();
    complete(&up, request(json!({"sim_latency_ms": 200}))).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn malformed_maps_to_malformed() {
    let (up, _sim) = start(LONG).await;
    assert!(matches!(
        complete(&up, request(json!({"sim_fault": "malformed"}))).await,
        Err(UpstreamError::Malformed(_))
    ));
}

#[tokio::test]
async fn drop_maps_to_connect() {
    let (up, _sim) = start(LONG).await;
    assert!(matches!(complete(&up, request(json!({"sim_fault": "drop"}))).await, Err(UpstreamError::Connect(_))));
    let streamed = stream(&up, request(json!({"sim_fault": "drop", "stream": true}))).await;
    assert!(matches!(streamed, Err(UpstreamError::Connect(_))));
}

#[tokio::test]
async fn midstream_error_yields_stream_error() {
    let (up, _sim) = start(LONG).await;
    let (events, error) =
        drain(stream(&up, request(json!({"sim_fault": "midstream_error", "stream": true}))).await.unwrap()).await;
    assert_eq!(events.len(), 2);
    match error {
        Some(UpstreamError::Stream(msg)) => assert!(msg.contains("InternalServiceError"), "{msg}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn midstream_drop_yields_stream_error() {
    let (up, _sim) = start(LONG).await;
    let (events, error) =
        drain(stream(&up, request(json!({"sim_fault": "midstream_drop", "stream": true}))).await.unwrap()).await;
    assert!(events.len() <= 2);
    assert!(matches!(error, Some(UpstreamError::Stream(_))), "{error:?}");
}

#[tokio::test]
async fn empty_usage_omits_usage() {
    let (up, _sim) = start(LONG).await;
    let a = complete(&up, request(json!({"sim_fault": "empty_usage"}))).await.unwrap();
    assert!(a.get("usage").is_none());
    assert_eq!(a["object"], "chat.completion");
    let body = request(json!({"sim_fault": "empty_usage", "stream": true, "stream_options": {"include_usage": true}}));
    let (events, error) = drain(stream(&up, body).await.unwrap()).await;
    assert!(error.is_none());
    assert!(events.iter().all(|e| e["usage"].is_null()));
}

#[tokio::test]
async fn connection_refused_maps_to_connect() {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let up = chat_only(&format!("http://{addr}/api/v3"), "k");
    assert!(matches!(complete(&up, request(json!({}))).await, Err(UpstreamError::Connect(_))));
    assert!(matches!(stream(&up, request(json!({"stream": true}))).await, Err(UpstreamError::Connect(_))));
}

#[tokio::test]
async fn stop_ends_the_simulator() {
    let (addr, sim) = sim::spawn().await.unwrap();
    sim.stop().await.unwrap();
    let up = chat_only(&format!("http://{addr}/api/v3"), "k");
    assert!(matches!(complete(&up, request(json!({}))).await, Err(UpstreamError::Connect(_))));
}
