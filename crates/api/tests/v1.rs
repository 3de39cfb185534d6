//! Integration tests of the one `/v1` base URL: the model list in OpenAI's and Anthropic's shapes,
//! the `/v1` twins of the `/api/v1` calls billing exactly as their twins (same hold, same charge,
//! same ledger rows), `/v1/audio/speech` in OpenAI's shape, the errors' OpenAI `type`, and the
//! 404 that names what is served. The real server on `127.0.0.1:0`, SQLite and PostgreSQL, the
//! simulator over real HTTP.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::time::Duration;

use common::{Env, Reply, amount, assert_envelope, databases};
use domain::{LedgerKind, Scope, UsdAmount};
use http::Method;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(5);
const SCOPES: &[Scope] =
    &[Scope::ModelsRead, Scope::LanguageCreate, Scope::ImageCreate, Scope::AudioCreate, Scope::TaskRead];

/// `GET path` with the key as a bearer token and the extra `headers`.
async fn get(env: &Env, path: &str, headers: &[(&str, &str)]) -> Reply {
    let auth = format!("Bearer {}", env.key);
    let mut all = vec![("authorization", auth.as_str())];
    all.extend_from_slice(headers);
    env.server.request(Method::GET, path, &all).await
}

/// An error under `/v1`: the spec's `code` and `message`, and OpenAI's `type`.
fn assert_v1_error(reply: &Reply, status: u16, code: &str, kind: &str, ctx: &str) {
    assert_eq!(reply.status, status, "{ctx}: {}", reply.text());
    let error = reply.json["error"].as_object().unwrap_or_else(|| panic!("{ctx}: {}", reply.json));
    let mut keys: Vec<&String> = error.keys().collect();
    keys.sort();
    assert_eq!(keys, ["code", "message", "type"], "{ctx}: {}", reply.json);
    assert_eq!(error["code"], code, "{ctx}");
    assert_eq!(error["type"], kind, "{ctx}");
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{ctx}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_base_url_lists_the_models_in_both_shapes_and_names_what_it_serves() {
    for db in databases() {
        let env = Env::new(&db, "10", TIMEOUT, SCOPES).await;
        let listed = get(&env, "/api/v1/models", &[]).await;
        assert_eq!(listed.status, 200, "{}", listed.text());
        let names: Vec<&str> =
            listed.json["data"].as_array().expect("data").iter().filter_map(|m| m["id"].as_str()).collect();
        assert!(names.contains(&"LangA-V4-flash"), "{names:?}");

        // OpenAI's shape.
        let openai = get(&env, "/v1/models", &[]).await;
        assert_eq!(openai.status, 200, "{}", env.ctx(&openai.text()));
        assert_eq!(openai.json["object"], "list");
        let data = openai.json["data"].as_array().expect("data");
        assert_eq!(data.iter().filter_map(|m| m["id"].as_str()).collect::<Vec<_>>(), names, "the same models");
        for model in data {
            assert_eq!(model["object"], "model", "{model}");
            // When its active price was set (0 for a model without a price).
            assert!(model["created"].as_i64().is_some_and(|c| c >= 0), "{model}");
            assert_eq!(model["owned_by"], "gateway", "{model}");
        }
        let one = get(&env, "/v1/models/LangA-V4-flash", &[]).await;
        assert_eq!(
            (one.status, &one.json["id"], &one.json["object"]),
            (200, &json!("LangA-V4-flash"), &json!("model"))
        );

        // Anthropic's shape, asked as the Anthropic SDK asks: x-api-key and anthropic-version.
        let headers = [("x-api-key", env.key.as_str()), ("anthropic-version", "2023-06-01")];
        let anthropic = env.server.request(Method::GET, "/v1/models", &headers).await;
        assert_eq!(anthropic.status, 200, "{}", anthropic.text());
        let data = anthropic.json["data"].as_array().expect("data");
        assert_eq!(data.iter().filter_map(|m| m["id"].as_str()).collect::<Vec<_>>(), names, "the same models");
        for model in data {
            assert_eq!(model["type"], "model", "{model}");
            assert_eq!(model["display_name"], model["id"], "{model}");
            let created = model["created_at"].as_str().expect("created_at");
            assert!(common::is_date_time(created), "{created}");
        }
        assert_eq!(anthropic.json["has_more"], false);
        assert_eq!(anthropic.json["first_id"], json!(names.first()));
        assert_eq!(anthropic.json["last_id"], json!(names.last()));
        let one = env.server.request(Method::GET, "/v1/models/AudioGen-1.0", &headers).await;
        assert_eq!((one.status, &one.json["type"]), (200, &json!("model")), "{}", one.text());

        // Errors under /v1 carry OpenAI's type; under /api/v1 the spec's envelope alone.
        assert_v1_error(&get(&env, "/v1/models/nope", &[]).await, 404, "not_found", "not_found_error", "no such model");
        let stranger = env.server.request(Method::GET, "/v1/models", &[("authorization", "Bearer sk-gw-nope")]).await;
        assert_v1_error(&stranger, 401, "invalid_api_key", "authentication_error", "a stranger");
        let spec = env.server.request(Method::GET, "/api/v1/models", &[("authorization", "Bearer sk-gw-nope")]).await;
        assert_eq!(spec.status, 401);
        assert_envelope(&spec.json, "/api/v1 keeps the spec's envelope");
        let bad = env.post("/v1/chat/completions", &json!({"model": "LangA-V4-flash"})).await;
        assert_v1_error(&bad, 400, "invalid_request", "invalid_request_error", "a bad chat body");

        // What OpenAI or Anthropic define and this gateway does not serve: a 404 naming what it does.
        for (method, path) in [
            (Method::POST, "/v1/embeddings"),
            (Method::POST, "/v1/completions"),
            (Method::GET, "/v1/files"),
            (Method::POST, "/v1/audio/transcriptions"),
            (Method::POST, "/v1/moderations"),
        ] {
            let reply = env.server.send(method, path, Some(&env.key), "application/json", &[], b"{}").await;
            assert_v1_error(&reply, 404, "not_found", "not_found_error", path);
            let message = reply.json["error"]["message"].as_str().unwrap_or_default();
            for served in ["/v1/chat/completions", "/v1/models", "/v1/messages", "/v1/audio/speech"] {
                assert!(message.contains(served), "{path}: {message}");
            }
        }
        // A path the table has under /v1 with another method is still 405.
        let wrong = env.server.request(Method::GET, "/v1/chat/completions", &[]).await;
        assert_eq!(wrong.status, 405, "{}", wrong.text());
        env.server.stop().await;
    }
}

/// What one call moved: its hold, its charge, and its task's ledger rows (kind and amount).
#[derive(Debug, PartialEq)]
struct Moved {
    held: i64,
    charged: i64,
    rows: Vec<(LedgerKind, UsdAmount)>,
}

/// The hold, the charge and the ledger rows of the task `task_id`.
async fn moved(env: &Env, task_id: &str, ctx: &str) -> Moved {
    let task = env.settled_task(task_id).await;
    let billing = &task["billing"];
    assert_eq!(billing["status"], "settled", "{ctx}: {task}");
    let held = amount(&billing["estimated_amount"], ctx).micros();
    let charged = amount(&billing["actual_amount"], ctx).micros();
    let (entries, _) = env.server.ledger(&env.user.id).await;
    let mut rows: Vec<(LedgerKind, UsdAmount)> = entries
        .iter()
        .filter(|e| e.task_id.as_ref().is_some_and(|t| t.as_str() == task_id))
        .map(|e| (e.kind, e.amount))
        .collect();
    rows.sort_by_key(|(kind, amount)| (kind.as_str(), amount.micros()));
    assert!(!rows.is_empty(), "{ctx}: no ledger row");
    Moved { held, charged, rows }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_v1_twins_bill_exactly_as_their_api_v1_routes() {
    for db in databases() {
        let env = Env::new(&db, "10", TIMEOUT, SCOPES).await;
        // The simulator answers a prompt it has seen with cached tokens: each twin asks its own, of
        // the same length.
        let chat = |ask: &str| {
            json!({"model": "LangA-V4-flash", "max_tokens": 16,
                   "messages": [{"role": "user", "content": format!("Say something about billing {ask}.")}]})
        };
        let image = |_: &str| json!({"model": "Vendor-Imagegen-4.5", "prompt": "a lighthouse", "size": "2048x2048"});
        type Body<'a> = &'a dyn Fn(&str) -> Value;
        let kinds: [(&str, &str, Body<'_>, &str); 2] = [
            ("/api/v1/chat/completions", "/v1/chat/completions", &chat, "chat"),
            ("/api/v1/images/generations", "/v1/images/generations", &image, "images"),
        ];
        for (spec_path, v1_path, body, what) in kinds {
            let ctx = env.ctx(what);
            let spec = env.post(spec_path, &body("A")).await;
            let twin = env.post(v1_path, &body("B")).await;
            assert_eq!((spec.status, twin.status), (200, 200), "{ctx}: {} / {}", spec.text(), twin.text());
            let ids =
                [spec.header("x-svc-task-id"), twin.header("x-svc-task-id")].map(|h| h.expect("task id").to_owned());
            assert_eq!(
                moved(&env, &ids[0], &ctx).await,
                moved(&env, &ids[1], &ctx).await,
                "{ctx}: the same money moved"
            );
        }

        // Speech in OpenAI's shape against its audio twin: the same text, the same hold and charge.
        let ctx = env.ctx("speech");
        let text = "Hello there, this is the gateway speaking.";
        let audio = env
            .post(
                "/api/v1/audio/generations",
                &json!({"model": "AudioGen-1.0", "text_prompt": text,
                                                                   "audio_config": {"format": "wav"}}),
            )
            .await;
        assert_eq!(audio.status, 200, "{ctx}: {}", audio.text());
        let before = env.balance().await;
        let speech_body = json!({"model": "AudioGen-1.0", "input": text, "voice": "alloy", "response_format": "wav"});
        let speech = env.post("/v1/audio/speech", &speech_body).await;
        assert_eq!(speech.status, 200, "{ctx}: {}", speech.text());
        assert_eq!(speech.header("content-type"), Some("audio/wav"), "{ctx}");
        assert!(speech.raw.starts_with(b"RIFF"), "{ctx}: the audio's bytes, not JSON");
        let billed = speech.header("x-svc-billed-usd").expect("the charge");
        let charged = amount(&json!(billed), &ctx);
        assert_eq!(env.balance().await, before.checked_sub(charged).expect("fits"), "{ctx}: the balance moved by it");
        let (a, s) =
            (audio.json["task_id"].as_str().expect("task").to_owned(), speech.header("x-svc-task-id").expect("task"));
        assert_eq!(moved(&env, &a, &ctx).await, moved(&env, s, &ctx).await, "{ctx}: the same money moved");
        env.assert_books("after the twins").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_in_openai_s_shape_checks_its_bounds_holds_nothing_when_refused_and_replays() {
    for db in databases() {
        let env = Env::new(&db, "10", TIMEOUT, SCOPES).await;
        let base = json!({"model": "AudioGen-1.0", "input": "Hi.", "voice": "alloy"});
        let with = |k: &str, v: Value| {
            let mut b = base.clone();
            b[k] = v;
            b
        };
        let before = env.balance().await;
        for (body, what) in [
            (with("speed", json!(4.01)), "speed above 4"),
            (with("speed", json!(0.24)), "speed below 0.25"),
            (with("input", json!("x".repeat(3001))), "input of 3001 characters"),
            (with("response_format", json!("aac")), "a format not served"),
            (with("instructions", json!("calm")), "instructions"),
            (with("model", json!("LangA-V4-flash")), "not an audio model"),
        ] {
            let reply = env.post("/v1/audio/speech", &body).await;
            assert_v1_error(&reply, 400, "invalid_request", "invalid_request_error", &env.ctx(what));
        }
        assert_eq!(env.balance().await, before, "{}", env.ctx("nothing held or charged"));
        for (body, what) in
            [(with("speed", json!(4.0)), "speed 4"), (with("input", json!("x".repeat(3000))), "3000 characters")]
        {
            let reply = env.post("/v1/audio/speech", &body).await;
            assert_eq!(reply.status, 200, "{}: {}", env.ctx(what), reply.text());
        }

        // An Idempotency-Key replays the same bytes and bills once.
        let headers = [("idempotency-key", "speech-once")];
        let bytes = serde_json::to_vec(&base).expect("JSON");
        let first =
            env.server.post_with("/v1/audio/speech", Some(&env.key), "application/json", &headers, &bytes).await;
        let after_first = env.balance().await;
        let again =
            env.server.post_with("/v1/audio/speech", Some(&env.key), "application/json", &headers, &bytes).await;
        assert_eq!((first.status, again.status), (200, 200), "{}", again.text());
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(first.raw, again.raw, "the same audio");
        assert_eq!(first.header("x-svc-task-id"), again.header("x-svc-task-id"));
        assert_eq!(first.header("content-type"), again.header("content-type"));
        assert_eq!(env.balance().await, after_first, "{}", env.ctx("billed once"));
        env.assert_books("after speech").await;
        env.server.stop().await;
    }
}

/// An error of a message-style route: Anthropic's `{"type": "error", "error": {"type", "message"}}`
/// with the gateway's `code` inside.
fn assert_messages_error(reply: &Reply, status: u16, code: &str, kind: &str, ctx: &str) {
    assert_eq!(reply.status, status, "{ctx}: {}", reply.text());
    assert_eq!(reply.json["type"], "error", "{ctx}: {}", reply.json);
    let error = reply.json["error"].as_object().unwrap_or_else(|| panic!("{ctx}: {}", reply.json));
    let mut keys: Vec<&String> = error.keys().collect();
    keys.sort();
    assert_eq!(keys, ["code", "message", "type"], "{ctx}: {}", reply.json);
    assert_eq!((error["code"].as_str(), error["type"].as_str()), (Some(code), Some(kind)), "{ctx}");
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{ctx}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_style_routes_answer_anthropic_errors_and_count_tokens_without_billing() {
    for db in databases() {
        let env = Env::new(&db, "10", TIMEOUT, SCOPES).await;
        let server = &env.server;
        let version = [("anthropic-version", "2023-06-01")];
        let (start, entries) = env.assert_ledger("start").await;

        // Errors in Anthropic's shape, on the call and on the count, by bearer or by x-api-key.
        let no_max = json!({"model": "LangA-V4-flash", "messages": [{"role": "user", "content": "hi"}]});
        let refused = server.post_json_with("/v1/messages", Some(&env.key), &version, &no_max).await;
        assert_messages_error(&refused, 400, "invalid_request", "invalid_request_error", &env.ctx("no max_tokens"));
        let bad_key = [("anthropic-version", "2023-06-01"), ("x-api-key", "sk-nope")];
        let unknown = server.post_json_with("/v1/messages", None, &bad_key, &no_max).await;
        assert_messages_error(&unknown, 401, "invalid_api_key", "authentication_error", &env.ctx("a wrong key"));
        let no_model = json!({"model": "NoSuch-1", "messages": [{"role": "user", "content": "hi"}]});
        let missing = server.post_json_with("/v1/messages/count_tokens", Some(&env.key), &version, &no_model).await;
        assert_eq!(missing.status / 100, 4, "{}", missing.text());
        assert_eq!(missing.json["type"], "error", "{}", missing.json);
        let no_version = server.post_json("/v1/messages/count_tokens", Some(&env.key), &no_max).await;
        assert_messages_error(&no_version, 400, "invalid_request", "invalid_request_error", "no version header");
        let empty = json!({"model": "LangA-V4-flash", "messages": []});
        let empty = server.post_json_with("/v1/messages/count_tokens", Some(&env.key), &version, &empty).await;
        assert_messages_error(&empty, 400, "invalid_request", "invalid_request_error", "no message");

        // The count: four bytes a token of the prompt's JSON, four a message; it grows with the prompt.
        let count = |text: &str| json!({"model": "LangA-V4-flash", "system": "Be brief.", "messages": [{"role": "user", "content": text}]});
        let short = server.post_json_with("/v1/messages/count_tokens", Some(&env.key), &version, &count("hi")).await;
        assert_eq!(short.status, 200, "{}", env.ctx(&short.text()));
        let short_tokens = short.json["input_tokens"].as_u64().expect("input_tokens");
        let long_text = "word ".repeat(400);
        let long = count(&long_text);
        let long = server.post_json_with("/v1/messages/count_tokens", Some(&env.key), &version, &long).await;
        let long_tokens = long.json["input_tokens"].as_u64().expect("input_tokens");
        let compact = |v: &Value| u64::try_from(serde_json::to_vec(v).expect("json").len()).expect("size");
        let expected = (compact(&json!("Be brief.")) + compact(&count(&long_text)["messages"])).div_ceil(4) + 4;
        assert_eq!(long_tokens, expected, "{}", long.json);
        assert!(long_tokens >= short_tokens + 450, "{short_tokens} → {long_tokens}");

        // Nothing was held or billed by any of it.
        assert_eq!(env.assert_ledger("after the counts").await, (start, entries));
    }
}
