//! Response-style chat: `HttpUpstream` against the simulator over real HTTP on 127.0.0.1.
#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{LONG, call, data, drain, names, open, start, with};
use domain::ports::{Endpoint, UpstreamError};
use serde_json::{Value, json};
use sim::RESPONSES_PATH;
use upstream::HttpUpstream;

fn request(extra: Value) -> Value {
    with(json!({"model": "resp-model", "input": "Hello there, simulator!"}), extra)
}

async fn respond(up: &HttpUpstream, body: Value) -> Result<Value, UpstreamError> {
    call(up, Endpoint::Responses, &body).await
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
    let a = respond(&up, request(json!({"instructions": "Be brief."}))).await.unwrap();
    assert!(a["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(
        (a["object"].as_str(), a["status"].as_str(), a["model"].as_str()),
        (Some("response"), Some("completed"), Some("resp-model"))
    );
    assert!(a["created_at"].as_u64().unwrap() > 1_700_000_000);
    assert!(a["previous_response_id"].is_null());
    let item = &a["output"][0];
    assert_eq!(
        (item["type"].as_str(), item["status"].as_str(), item["role"].as_str()),
        (Some("message"), Some("completed"), Some("assistant"))
    );
    assert!(item["id"].as_str().unwrap().starts_with("msg_"));
    let part = &item["content"][0];
    assert_eq!((part["type"].as_str(), part["annotations"].clone()), (Some("output_text"), json!([])));
    assert_eq!(part["text"].as_str().unwrap().split_whitespace().count(), 16);
    // ceil((9 + 23) / 4) + 4 = 12.
    assert_eq!(
        a["usage"],
        json!({"input_tokens": 12, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 16,
               "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 28})
    );
    assert_eq!(sim.requests(RESPONSES_PATH), 1);
}

#[tokio::test]
async fn array_input_and_incomplete_when_cut() {
    let (up, _sim, _) = start(LONG).await;
    let input = json!([{"role": "user", "content": "abcd"}, {"role": "user", "content": [{"type": "input_text", "text": "efgh"}]}]);
    let a = respond(&up, json!({"model": "m", "input": input, "max_output_tokens": 5})).await.unwrap();
    assert_eq!(a["status"], "incomplete");
    assert_eq!(a["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!((a["usage"]["input_tokens"].as_u64(), a["usage"]["output_tokens"].as_u64()), (Some(2 + 8), Some(5)));
    let a = respond(&up, request(json!({"max_output_tokens": 16}))).await.unwrap();
    assert_eq!(a["status"], "completed");
    assert!(a["incomplete_details"].is_null());
}

#[tokio::test]
async fn chained_responses_count_the_previous_context() {
    let (up, _sim, _) = start(LONG).await;
    let first = respond(&up, request(json!({}))).await.unwrap();
    let total = first["usage"]["total_tokens"].as_u64().unwrap();
    let id = first["id"].as_str().unwrap();
    let second = respond(&up, request(json!({"previous_response_id": id, "input": "And?"}))).await.unwrap();
    assert_eq!(second["previous_response_id"], id);
    // "And?": ceil(4 / 4) + 4 = 5, plus the chained context.
    assert_eq!(second["usage"]["input_tokens"], 5 + total);
    assert_eq!(second["usage"]["input_tokens_details"]["cached_tokens"], total);
    // A streamed response can be chained too.
    let body = request(json!({"stream": true, "previous_response_id": second["id"]}));
    let (events, _) = drain(open(&up, Endpoint::Responses, &body).await.unwrap()).await;
    let completed = data(events.last().unwrap());
    let third = &completed["response"];
    assert_eq!(third["usage"]["input_tokens_details"]["cached_tokens"], second["usage"]["total_tokens"]);
    let fourth = respond(&up, request(json!({"previous_response_id": third["id"]}))).await.unwrap();
    assert_eq!(fourth["usage"]["input_tokens_details"]["cached_tokens"], third["usage"]["total_tokens"]);
}

#[tokio::test]
async fn unknown_previous_response_is_400() {
    let (up, _sim, _) = start(LONG).await;
    let (status, body) = status_of(respond(&up, request(json!({"previous_response_id": "resp_unknown"}))).await);
    assert_eq!(
        (status, body["error"]["code"].as_str(), body["error"]["param"].as_str()),
        (400, Some("InvalidParameter"), Some("previous_response_id"))
    );
    // Another simulator's id is unknown here too.
    let (other, _other_sim, _) = start(LONG).await;
    let id = respond(&other, request(json!({}))).await.unwrap()["id"].clone();
    assert_eq!(status_of(respond(&up, request(json!({"previous_response_id": id}))).await).0, 400);
}

#[tokio::test]
async fn stream_events_in_order_with_sequence_numbers() {
    let (up, _sim, _) = start(LONG).await;
    let body = request(json!({"stream": true, "sim_completion_tokens": 3}));
    let (events, error) = drain(open(&up, Endpoint::Responses, &body).await.unwrap()).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    for (n, event) in events.iter().enumerate() {
        let d = data(event);
        assert_eq!(d["type"].as_str(), event.event.as_deref());
        assert_eq!(d["sequence_number"], n);
    }
    assert_eq!(data(&events[0])["response"]["status"], "in_progress");
    let text: String = events[4..7].iter().map(|e| data(e)["delta"].as_str().unwrap().to_owned()).collect();
    assert_eq!(text, "This is a");
    assert_eq!(data(&events[7])["text"], "This is a");
    let done = data(&events[10]);
    assert_eq!(done["response"]["status"], "completed");
    assert_eq!(done["response"]["usage"]["output_tokens"], 3);
    assert_eq!(done["response"]["output"][0]["content"][0]["text"], "This is a");
}

#[tokio::test]
async fn midstream_faults_and_empty_usage() {
    let (up, _sim, _) = start(LONG).await;
    let (events, error) =
        drain(open(&up, Endpoint::Responses, &request(json!({"sim_fault": "midstream_error"}))).await.unwrap()).await;
    assert_eq!(events.len(), 4 + 2);
    match error {
        Some(UpstreamError::Stream(message)) => assert!(message.starts_with("server_error: "), "{message}"),
        other => panic!("{other:?}"),
    }
    let body = request(json!({"sim_fault": "midstream_drop", "stream": true}));
    let (events, error) = drain(open(&up, Endpoint::Responses, &body).await.unwrap()).await;
    assert!(events.len() <= 6);
    assert!(matches!(error, Some(UpstreamError::Stream(_))), "{error:?}");
    let a = respond(&up, request(json!({"sim_fault": "empty_usage"}))).await.unwrap();
    assert!(a.get("usage").is_none());
    let (events, error) = drain(
        open(&up, Endpoint::Responses, &request(json!({"sim_fault": "empty_usage", "stream": true}))).await.unwrap(),
    )
    .await;
    assert!(error.is_none());
    let completed = data(events.last().unwrap());
    assert_eq!(completed["type"], "response.completed");
    assert!(completed["response"].get("usage").is_none());
}

#[tokio::test]
async fn status_and_transport_faults() {
    let (up, _sim, _) = start(Duration::from_millis(300)).await;
    for (fault, status) in [("status_400", 400), ("status_429", 429), ("status_500", 500), ("status_503", 503)] {
        let (s, body) = status_of(respond(&up, request(json!({"sim_fault": fault}))).await);
        assert_eq!(s, status);
        assert!(body["error"]["code"].is_string());
        let streamed = open(&up, Endpoint::Responses, &request(json!({"sim_fault": fault, "stream": true}))).await;
        assert!(matches!(streamed, Err(UpstreamError::Status { status: s, .. }) if s == status));
    }
    assert_eq!(respond(&up, request(json!({"sim_fault": "timeout"}))).await, Err(UpstreamError::Timeout));
    assert!(matches!(respond(&up, request(json!({"sim_fault": "malformed"}))).await, Err(UpstreamError::Malformed(_))));
    assert!(matches!(respond(&up, request(json!({"sim_fault": "drop"}))).await, Err(UpstreamError::Connect(_))));
    let streamed = open(&up, Endpoint::Responses, &request(json!({"sim_fault": "drop", "stream": true}))).await;
    assert!(matches!(streamed, Err(UpstreamError::Connect(_))));
}

#[tokio::test]
async fn bad_requests_are_400_naming_the_parameter() {
    let (up, _sim, _) = start(LONG).await;
    for (body, param) in [
        (json!({"model": "m"}), "input"),
        (json!({"model": "m", "input": 3}), "input"),
        (json!({"input": "x"}), "model"),
        (request(json!({"max_output_tokens": 0})), "max_output_tokens"),
        (request(json!({"previous_response_id": 5})), "previous_response_id"),
        (request(json!({"sim_fault": "nope"})), "sim_fault"),
    ] {
        let (status, error) = status_of(respond(&up, body.clone()).await);
        assert_eq!((status, error["error"]["param"].as_str()), (400, Some(param)), "{body}");
    }
    let a = respond(&up, request(json!({"max_output_tokens": 1}))).await.unwrap();
    assert_eq!(a["usage"]["output_tokens"], 1);
}
