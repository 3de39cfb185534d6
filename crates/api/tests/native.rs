//! Integration tests of the native formats, `POST /v1/messages` and `POST /v1/responses` (and their
//! doubled paths): the real server on `127.0.0.1:0` over real SQLite (and PostgreSQL when
//! `TEST_DATABASE_URL` is set) with the upstream simulator behind it. Each answer is billed exactly from
//! its format's usage, streams end with the format's final event and are settled, a dropped stream is
//! settled, and `previous_response_id` only continues the caller's own responses.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::time::Duration;

use common::{Db, Env, Reply, databases, unique};
use domain::{Scope, UsdAmount};
use http_body_util::BodyExt;
use serde_json::{Value, json};

const MODEL: &str = "LangA-V4-flash";
/// LangA-V4-flash: input, output and cache-hit micro-USD per 1,000,000 tokens.
const RATES: (i128, i128, i128) = (140_000, 280_000, 28_000);

/// A gateway with a chat upstream, one user with 10 USD and a key for language calls.
async fn native_env(db: &Db) -> Env {
    Env::new(db, "10", Duration::from_secs(2), &[Scope::LanguageCreate, Scope::TaskRead]).await
}

/// The native formats' requests.
impl Env {
    async fn messages(&self, path: &str, body: &Value) -> Reply {
        let headers = [("x-api-key", self.key.as_str()), ("anthropic-version", "2023-06-01")];
        self.server.post_json_with(path, None, &headers, body).await
    }

    async fn responses(&self, path: &str, key: &str, body: &Value) -> Reply {
        self.server.post_json(path, Some(key), body).await
    }
}

fn n(v: &Value, path: &str) -> i128 {
    i128::from(v.pointer(path).and_then(Value::as_u64).unwrap_or(0))
}

/// The exact charge, rounded once, of `(prompt incl. cached, cached, output)` tokens at LangA-V4-flash rates.
fn charge(prompt: i128, cached: i128, output: i128) -> String {
    let (input, out, cache) = RATES;
    let sum = (prompt - cached) * input + cached * cache + output * out;
    UsdAmount::from_micros(i64::try_from((sum + 500_000) / 1_000_000).expect("fits")).to_string()
}

/// The message-style charge: prompt = input + cache read + cache creation; cached = cache read.
fn message_charge(usage: &Value) -> String {
    let read = n(usage, "/cache_read_input_tokens");
    let prompt = n(usage, "/input_tokens") + read + n(usage, "/cache_creation_input_tokens");
    charge(prompt, read, n(usage, "/output_tokens"))
}

fn response_charge(usage: &Value) -> String {
    charge(n(usage, "/input_tokens"), n(usage, "/input_tokens_details/cached_tokens"), n(usage, "/output_tokens"))
}

/// `(event name, data)` of every event of a named SSE body.
fn events(raw: &[u8]) -> Vec<(String, Value)> {
    String::from_utf8_lossy(raw)
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in e.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = v.to_owned();
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(v).unwrap_or_else(|_| panic!("event data is not JSON: {v}"));
                }
            }
            (name, data)
        })
        .collect()
}

fn message_body(extra: Value) -> Value {
    let mut body =
        json!({"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": unique("hello ")}]});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn messages_are_billed_from_their_usage_on_both_paths() {
    for db in databases() {
        let env = native_env(&db).await;
        for path in ["/v1/messages", "/v1/v1/messages"] {
            let ctx = env.ctx(path);
            let reply = env.messages(path, &message_body(json!({}))).await;
            assert_eq!(reply.status, 200, "{ctx}: {}", String::from_utf8_lossy(&reply.raw));
            let answer = &reply.json;
            assert_eq!((answer["type"].as_str(), answer["model"].as_str()), (Some("message"), Some(MODEL)), "{ctx}");
            assert!(answer["content"][0]["text"].as_str().is_some_and(|t| !t.is_empty()), "{ctx}: {answer}");
            let billing = &answer["svc"]["billing"];
            assert_eq!(billing["status"], "settled", "{ctx}");
            assert_eq!(billing["actual_amount"].as_str(), Some(message_charge(&answer["usage"]).as_str()), "{ctx}");
            let task_id = answer["svc"]["task_id"].as_str().unwrap_or_default();
            assert_eq!(reply.header("x-svc-task-id"), Some(task_id), "{ctx}");
            let task = env.task(task_id).await;
            assert_eq!(
                (task["kind"].as_str(), task["status"].as_str()),
                (Some("language"), Some("succeeded")),
                "{ctx}"
            );
        }
        // The bearer key works too; the version header is required; the rules of the table apply.
        let bearer = env
            .server
            .post_json_with(
                "/v1/messages",
                Some(&env.key),
                &[("messages-version", "2023-06-01")],
                &message_body(json!({})),
            )
            .await;
        assert_eq!(bearer.status, 200, "{}", env.ctx("bearer + messages-version"));
        let no_version = env.server.post_json("/v1/messages", Some(&env.key), &message_body(json!({}))).await;
        no_version.assert_error(400, "invalid_request", &env.ctx("no version header"));
        let no_key = env
            .server
            .post_json_with("/v1/messages", None, &[("anthropic-version", "1")], &message_body(json!({})))
            .await;
        no_key.assert_error(401, "invalid_api_key", &env.ctx("no key"));
        let before = env.assert_ledger("before rejects").await.0;
        for (bad, what) in [
            (json!({"max_tokens": 0}), "max_tokens 0"),
            (json!({"max_tokens": 393_217}), "max_tokens above the model's bound"),
            (json!({"temperature": 1.5}), "temperature above 1"),
            (json!({"messages": []}), "no messages"),
            (json!({"model": "Vendor-Imagegen-4.5"}), "not a language model"),
        ] {
            env.messages("/v1/messages", &message_body(bad)).await.assert_error(400, "invalid_request", &env.ctx(what));
        }
        assert_eq!(env.assert_ledger("after rejects").await.0, before, "{}", env.ctx("rejects move no money"));
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn message_streams_end_with_message_stop_settled() {
    for db in databases() {
        let env = native_env(&db).await;
        let ctx = env.ctx("message stream");
        let reply = env.messages("/v1/messages", &message_body(json!({"stream": true}))).await;
        assert_eq!(reply.status, 200, "{ctx}");
        assert_eq!(reply.header("content-type"), Some("text/event-stream"), "{ctx}");
        let seen = events(&reply.raw);
        let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"message_start"), "{ctx}: {names:?}");
        assert_eq!(names.last(), Some(&"message_stop"), "{ctx}: {names:?}");
        for (name, data) in &seen {
            assert_eq!(data["type"].as_str(), Some(name.as_str()), "{ctx}: event name matches its type");
        }
        assert_eq!(seen[0].1["message"]["model"], MODEL, "{ctx}: the public model name");
        let delta = seen.iter().find(|(n, _)| n == "message_delta").map(|(_, d)| d.clone()).expect("message_delta");
        let mut usage = seen[0].1["message"]["usage"].clone();
        if let (Some(u), Some(d)) = (usage.as_object_mut(), delta["usage"].as_object()) {
            u.extend(d.clone());
        }
        // Settled before the final event reached the client.
        let task = env.task(reply.header("x-svc-task-id").unwrap_or_default()).await;
        assert_eq!(task["billing"]["status"], "settled", "{ctx}: {task}");
        assert_eq!(task["billing"]["actual_amount"].as_str(), Some(message_charge(&usage).as_str()), "{ctx}");
        // A mid-stream upstream error is the format's own error event, and what was produced is charged once.
        let failed =
            env.messages("/v1/messages", &message_body(json!({"stream": true, "sim_fault": "midstream_error"}))).await;
        let last = events(&failed.raw).pop().expect("events");
        assert_eq!(last.0, "error", "{ctx}: {last:?}");
        assert_eq!(last.1["type"], "error", "{ctx}");
        assert!(last.1["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{ctx}: {last:?}");
        let failed_task = env.settled_task(failed.header("x-svc-task-id").unwrap_or_default()).await;
        assert_eq!(failed_task["status"], "succeeded", "{ctx}: charged for what was delivered: {failed_task}");
        env.assert_ledger("message streams").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_message_stream_dropped_halfway_is_settled() {
    for db in databases() {
        let env = native_env(&db).await;
        let ctx = env.ctx("dropped message stream");
        let body = message_body(
            json!({"stream": true, "max_tokens": 400, "sim_completion_tokens": 300, "sim_chunk_delay_ms": 20}),
        );
        let headers = [("x-api-key", env.key.as_str()), ("anthropic-version", "2023-06-01")];
        let bytes = serde_json::to_vec(&body).expect("json");
        let (parts, mut incoming, conn) =
            env.server.post_streaming_with("/v1/messages", None, "application/json", &headers, &bytes).await;
        assert_eq!(parts.status, 200, "{ctx}");
        let task_id = parts.headers.get("x-svc-task-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let mut received = Vec::new();
        while received.windows(19).filter(|w| w == b"content_block_delta").count() < 6 {
            let frame = tokio::time::timeout(Duration::from_secs(5), incoming.frame()).await;
            let frame = frame.unwrap_or_else(|_| panic!("{ctx}: no event in 5 s")).expect("open").expect("frame");
            received.extend_from_slice(&frame.into_data().unwrap_or_default());
        }
        drop(incoming);
        conn.abort();
        let task = env.settled_task(&task_id).await;
        assert_eq!(task["billing"]["status"], "settled", "{ctx}: never left reserved: {task}");
        let output = n(&task["billing"]["usage"], "/completion_tokens");
        assert!(output > 0 && output < 300, "{ctx}: settled on the part delivered: {task}");
        env.assert_ledger("dropped stream").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn responses_chain_only_the_callers_own_responses() {
    for db in databases() {
        let env = native_env(&db).await;
        let ctx = env.ctx("responses");
        let first = env
            .responses(
                "/v1/responses",
                &env.key,
                &json!({"model": MODEL, "input": unique("hi "), "max_output_tokens": 32}),
            )
            .await;
        assert_eq!(first.status, 200, "{ctx}: {}", String::from_utf8_lossy(&first.raw));
        assert_eq!(
            (first.json["object"].as_str(), first.json["model"].as_str()),
            (Some("response"), Some(MODEL)),
            "{ctx}"
        );
        let billing = &first.json["svc"]["billing"];
        assert_eq!(billing["actual_amount"].as_str(), Some(response_charge(&first.json["usage"]).as_str()), "{ctx}");
        let id = first.json["id"].as_str().expect("response id").to_owned();
        // The second turn, streamed, on the doubled path.
        let second = env
            .responses(
                "/v1/v1/responses",
                &env.key,
                &json!({"model": MODEL, "input": "and then?", "previous_response_id": id, "stream": true}),
            )
            .await;
        assert_eq!(second.status, 200, "{ctx}: {}", String::from_utf8_lossy(&second.raw));
        let (last, completed) = events(&second.raw).last().cloned().expect("events");
        assert_eq!(last, "response.completed", "{ctx}");
        assert_eq!(completed["response"]["model"], MODEL, "{ctx}");
        let task = env.task(second.header("x-svc-task-id").unwrap_or_default()).await;
        assert_eq!(
            task["billing"]["actual_amount"].as_str(),
            Some(response_charge(&completed["response"]["usage"]).as_str()),
            "{ctx}: settled at the completed usage"
        );
        // Another user may not continue it: 404, and nothing moves.
        let other = env.server.user("5").await;
        let other_key = env.server.key(&other.id, &[Scope::LanguageCreate]).await.secret;
        let before = env.server.ledger(&other.id).await.0.len();
        let stolen = env
            .responses("/v1/responses", &other_key, &json!({"model": MODEL, "input": "x", "previous_response_id": id}))
            .await;
        stolen.assert_error(404, "not_found", &ctx);
        let unknown = env
            .responses(
                "/v1/responses",
                &other_key,
                &json!({"model": MODEL, "input": "x", "previous_response_id": "resp_nope"}),
            )
            .await;
        unknown.assert_error(404, "not_found", &ctx);
        assert_eq!(env.server.ledger(&other.id).await.0.len(), before, "{ctx}: nothing charged");
        env.assert_ledger("responses").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idempotency_keys_are_scoped_by_route() {
    for db in databases() {
        let env = native_env(&db).await;
        let ctx = env.ctx("one key on two routes");
        let key = unique("idem-");
        let chat = json!({"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "same key"}]});
        let first = env
            .server
            .post_json_with("/api/v1/chat/completions", Some(&env.key), &[("idempotency-key", &key)], &chat)
            .await;
        assert_eq!(first.status, 200, "{ctx}");
        let headers = [("x-api-key", env.key.as_str()), ("anthropic-version", "1"), ("idempotency-key", key.as_str())];
        let other = env.server.post_json_with("/v1/messages", None, &headers, &message_body(json!({}))).await;
        assert_eq!(
            other.status,
            200,
            "{ctx}: a different route is a different request: {}",
            String::from_utf8_lossy(&other.raw)
        );
        assert_eq!(other.json["type"], "message", "{ctx}: not the chat answer replayed");
        assert!(other.header("idempotent-replayed").is_none(), "{ctx}");
        let again = env.server.post_json_with("/v1/messages", None, &headers, &message_body(json!({}))).await;
        again.assert_error(409, "idempotency_conflict", &format!("{ctx}: another body on the same route"));
        env.server.stop().await;
    }
}
