//! Message-style chat: `HttpUpstream` against the simulator over real HTTP on 127.0.0.1.
#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{LONG, call, data, drain, names, open, start, with};
use domain::ports::{Endpoint, UpstreamError};
use serde_json::{Value, json};
use sim::MESSAGES_PATH;
use upstream::HttpUpstream;

fn request(extra: Value) -> Value {
    with(
        json!({"model": "msg-model", "max_tokens": 64, "messages": [{"role": "user", "content": "Hello there, simulator!"}]}),
        extra,
    )
}

async fn message(up: &HttpUpstream, body: Value) -> Result<Value, UpstreamError> {
    call(up, Endpoint::Messages, &body).await
}

fn status_of(result: Result<Value, UpstreamError>) -> (u16, Value) {
    match result {
        Err(UpstreamError::Status { status, body, .. }) => (status, serde_json::from_str(&body).unwrap()),
        other => panic!("expected a status error, got {other:?}"),
    }
}

#[tokio::test]
async fn non_stream_answer_shape() {
    let (up, sim, _) = start(LONG).await;
    let body = request(json!({"system": [{"type": "text", "text": "Be brief."}]}));
    let a = message(&up, body).await.unwrap();
    assert!(a["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        (a["type"].as_str(), a["role"].as_str(), a["model"].as_str()),
        (Some("message"), Some("assistant"), Some("msg-model"))
    );
    assert_eq!(a["content"][0]["type"], "text");
    assert_eq!(a["content"][0]["text"].as_str().unwrap().split_whitespace().count(), 16);
    assert_eq!((a["stop_reason"].as_str(), a["stop_sequence"].clone()), (Some("end_turn"), Value::Null));
    // ceil((9 + 23) / 4) + 4 = 12.
    assert_eq!(
        a["usage"],
        json!({"input_tokens": 12, "output_tokens": 16, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
    );
    assert_eq!(sim.requests(MESSAGES_PATH), 1);
}

#[tokio::test]
async fn max_tokens_cuts_and_switches_set_lengths() {
    let (up, _sim, _) = start(LONG).await;
    let a = message(&up, request(json!({"max_tokens": 5}))).await.unwrap();
    assert_eq!((a["stop_reason"].as_str(), a["usage"]["output_tokens"].as_u64()), (Some("max_tokens"), Some(5)));
    let a = message(&up, request(json!({"max_tokens": 16}))).await.unwrap();
    assert_eq!(a["stop_reason"], "end_turn");
    let a = message(&up, request(json!({"sim_completion_tokens": 40, "sim_prompt_tokens": 9000}))).await.unwrap();
    // The same first message a third time: half the base is read from cache, apart from input.
    let usage = &a["usage"];
    assert_eq!(usage["output_tokens"], 40);
    assert_eq!((usage["input_tokens"].as_u64(), usage["cache_read_input_tokens"].as_u64()), (Some(4500), Some(4500)));
    assert_eq!(a["stop_reason"], "end_turn");
}

#[tokio::test]
async fn cache_creation_then_cache_read() {
    let (up, _sim, _) = start(LONG).await;
    let long = "y".repeat(1024);
    let body = |turn: &str| json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": long}, {"role": "user", "content": turn}]});
    // base = ceil((1024 + 4) / 4) + 8 = 265.
    let first = message(&up, body("one?")).await.unwrap()["usage"].clone();
    assert_eq!(
        first,
        json!({"input_tokens": 132, "output_tokens": 8, "cache_creation_input_tokens": 133, "cache_read_input_tokens": 0})
    );
    let second = message(&up, body("two?")).await.unwrap()["usage"].clone();
    assert_eq!(
        second,
        json!({"input_tokens": 133, "output_tokens": 8, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 132})
    );
    // Just under 1,024 bytes: no cache creation.
    let short = json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "z".repeat(1023)}]});
    assert_eq!(message(&up, short).await.unwrap()["usage"]["cache_creation_input_tokens"], 0);
}

#[tokio::test]
async fn stream_events_in_order_with_cumulative_usage() {
    let (up, _sim, _) = start(LONG).await;
    let (events, error) =
        drain(open(&up, Endpoint::Messages, &request(json!({"stream": true, "max_tokens": 3}))).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for event in &events {
        assert_eq!(data(event)["type"].as_str(), event.event.as_deref());
    }
    let start = data(&events[0]);
    assert_eq!(start["message"]["content"], json!([]));
    assert!(start["message"]["stop_reason"].is_null());
    assert_eq!(start["message"]["usage"]["input_tokens"], 10);
    let text: String = events[3..6].iter().map(|e| data(e)["delta"]["text"].as_str().unwrap().to_owned()).collect();
    assert_eq!(text, "This is a");
    assert_eq!(data(&events[3])["delta"]["type"], "text_delta");
    let delta = data(&events[7]);
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
    assert_eq!(
        delta["usage"],
        json!({"input_tokens": 10, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0})
    );
}

#[tokio::test]
async fn midstream_error_is_a_stream_error_after_two_deltas() {
    let (up, _sim, _) = start(LONG).await;
    let stream = open(&up, Endpoint::Messages, &request(json!({"stream": true, "sim_fault": "midstream_error"}))).await;
    let (events, error) = drain(stream.unwrap()).await;
    assert_eq!(
        names(&events),
        ["message_start", "content_block_start", "ping", "content_block_delta", "content_block_delta"]
    );
    assert_eq!(error, Some(UpstreamError::Stream("overloaded_error: Overloaded".to_owned())));
    // Forced streaming even without `stream`.
    let (events, error) =
        drain(open(&up, Endpoint::Messages, &request(json!({"sim_fault": "midstream_drop"}))).await.unwrap()).await;
    assert!(events.len() <= 5, "{:?}", names(&events));
    assert!(matches!(error, Some(UpstreamError::Stream(_))), "{error:?}");
}

#[tokio::test]
async fn empty_usage_has_no_usage() {
    let (up, _sim, _) = start(LONG).await;
    let a = message(&up, request(json!({"sim_fault": "empty_usage"}))).await.unwrap();
    assert!(a.get("usage").is_none());
    let body = request(json!({"sim_fault": "empty_usage", "stream": true}));
    let (events, error) = drain(open(&up, Endpoint::Messages, &body).await.unwrap()).await;
    assert!(error.is_none());
    assert_eq!(names(&events).last().map(String::as_str), Some("message_stop"));
    assert!(events.iter().map(data).all(|d| d.get("usage").is_none() && d["message"].get("usage").is_none()));
}

#[tokio::test]
async fn status_and_transport_faults() {
    let (up, _sim, _) = start(Duration::from_millis(300)).await;
    for (fault, status, kind) in [
        ("status_400", 400, "invalid_request_error"),
        ("status_429", 429, "rate_limit_error"),
        ("status_500", 500, "api_error"),
        ("status_503", 503, "overloaded_error"),
    ] {
        let (s, body) = status_of(message(&up, request(json!({"sim_fault": fault}))).await);
        assert_eq!((s, body["type"].as_str(), body["error"]["type"].as_str()), (status, Some("error"), Some(kind)));
        let streamed = open(&up, Endpoint::Messages, &request(json!({"sim_fault": fault, "stream": true}))).await;
        assert!(matches!(streamed, Err(UpstreamError::Status { status: s, .. }) if s == status));
    }
    assert_eq!(message(&up, request(json!({"sim_fault": "timeout"}))).await, Err(UpstreamError::Timeout));
    assert!(matches!(message(&up, request(json!({"sim_fault": "malformed"}))).await, Err(UpstreamError::Malformed(_))));
    assert!(matches!(message(&up, request(json!({"sim_fault": "drop"}))).await, Err(UpstreamError::Connect(_))));
    let streamed = open(&up, Endpoint::Messages, &request(json!({"sim_fault": "timeout", "stream": true}))).await;
    assert!(matches!(streamed, Err(UpstreamError::Timeout)));
}

#[tokio::test]
async fn bad_requests_use_the_message_error_body() {
    let (up, _sim, _) = start(LONG).await;
    for body in [
        json!({"model": "m", "messages": []}),
        json!({"model": "m", "messages": [], "max_tokens": 0}),
        json!({"model": "m", "max_tokens": 1}),
        json!({"messages": [], "max_tokens": 1}),
        request(json!({"sim_fault": "fail_all"})),
    ] {
        let (status, error) = status_of(message(&up, body.clone()).await);
        assert_eq!((status, error["error"]["type"].as_str()), (400, Some("invalid_request_error")), "{body}");
    }
    // Just inside: max_tokens 1.
    let a = message(&up, json!({"model": "m", "messages": [], "max_tokens": 1})).await.unwrap();
    assert_eq!(a["usage"]["output_tokens"], 1);
}

#[tokio::test]
async fn credentials_and_version_header() {
    let (_up, _sim, addr) = start(LONG).await;
    let url = format!("http://{addr}{MESSAGES_PATH}");
    let body = request(json!({})).to_string();
    let version = ("anthropic-version", "2023-06-01");
    let (status, text) = common::raw_post(&url, &[version], &body).await;
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("authentication_error"), "{text}");
    assert_eq!(common::raw_post(&url, &[version, ("x-api-key", "k")], &body).await.0, 200);
    assert_eq!(common::raw_post(&url, &[version, ("authorization", "Bearer k")], &body).await.0, 200);
    let (status, text) = common::raw_post(&url, &[("x-api-key", "k")], &body).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("anthropic-version"), "{text}");
}
