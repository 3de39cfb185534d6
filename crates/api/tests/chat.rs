//! Integration tests of `POST /api/v1/chat/completions`: the real server on `127.0.0.1:0` over real SQLite
//! (and PostgreSQL when `TEST_DATABASE_URL` is set), with the upstream simulator behind it, checking
//! answers, errors, streams and every balance movement against the interface and DESIGN §3–4.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::time::Duration;

use common::{Db, Env, assert_envelope, databases, is_usd_amount, join_all, unique};
use domain::{Scope, UsdAmount};
use http_body_util::BodyExt;
use serde_json::{Value, json};

const CHAT: &str = "/api/v1/chat/completions";
const TASKS: &str = "/api/v1/tasks";
const MODEL: &str = "LangB-2.0-pro";

/// Upstream timeout for the tests (the `timeout` fault waits for it).
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(1);

/// The spec's LangB-2.0-pro rates (micro-USD per 1,000,000 tokens): (input, output, cache_hit) per tier.
const PRO_LTE_128K: (i128, i128, i128) = (500_000, 3_000_000, 100_000);
const PRO_GT_128K: (i128, i128, i128) = (1_000_000, 6_000_000, 200_000);

/// A gateway with a chat upstream, one user with `balance` and a key with the scopes the tests need.
async fn chat_env(db: &Db, balance: &str) -> Env {
    Env::new(db, balance, UPSTREAM_TIMEOUT, &[Scope::LanguageCreate, Scope::TaskRead, Scope::OverviewRead]).await
}

/// A chat body for LangB-2.0-pro with a fresh first message (no prefix-cache hit), thinking off, a
/// small `max_tokens`, plus `extra` fields.
fn body(extra: Value) -> Value {
    let mut b = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": unique("Say something about ")}],
        "max_tokens": 1000,
        "thinking": {"type": "disabled"},
    });
    if let (Some(o), Some(e)) = (b.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            o.insert(k.clone(), v.clone());
        }
    }
    b
}

fn u(v: &Value, path: &str) -> u64 {
    v.pointer(path).and_then(Value::as_u64).unwrap_or(0)
}

/// The charge for `usage` on LangB-2.0-pro computed from the spec's table with integer arithmetic:
/// Σ tokens × rate, divided by 1,000,000 rounding half away from zero (the sum is never negative).
fn spec_charge_micros(usage: &Value) -> i64 {
    let prompt = u(usage, "/prompt_tokens");
    let (input_rate, output_rate, cache_rate) = if prompt <= 128_000 { PRO_LTE_128K } else { PRO_GT_128K };
    let cached = u(usage, "/prompt_tokens_details/cached_tokens");
    let audio = u(usage, "/prompt_tokens_details/audio_tokens");
    let audio_cached = u(usage, "/prompt_tokens_details/audio_cached_tokens");
    let input = prompt.saturating_sub(cached).saturating_sub(audio);
    let audio_input = audio.saturating_sub(audio_cached);
    // No audio rates on this model: audio tokens are charged at the text input / cache-hit rates.
    let sum = i128::from(input) * input_rate
        + i128::from(cached) * cache_rate
        + i128::from(audio_input) * input_rate
        + i128::from(audio_cached) * cache_rate
        + i128::from(u(usage, "/completion_tokens")) * output_rate;
    i64::try_from((sum + 500_000) / 1_000_000).expect("charge fits in i64")
}

/// The same charge through `billing::language_charge` on the built-in sheet.
fn billing_charge(usage: &Value) -> UsdAmount {
    let catalog = catalog::Catalog::builtin().expect("catalog");
    let sheet = catalog.get(MODEL).and_then(|d| d.pricing.clone()).expect("LangB-2.0-pro is priced");
    let usage = billing::LanguageUsage {
        prompt_tokens: u(usage, "/prompt_tokens"),
        completion_tokens: u(usage, "/completion_tokens"),
        cached_tokens: u(usage, "/prompt_tokens_details/cached_tokens"),
        audio_tokens: u(usage, "/prompt_tokens_details/audio_tokens"),
        audio_cached_tokens: u(usage, "/prompt_tokens_details/audio_cached_tokens"),
    };
    billing::language_charge(&sheet, &usage).expect("charge").total
}

fn amount(v: &Value, ctx: &str) -> UsdAmount {
    let text = v.as_str().unwrap_or_else(|| panic!("{ctx}: amount is not a string: {v}"));
    assert!(is_usd_amount(text), "{ctx}: {text:?} is not a UsdAmount");
    UsdAmount::parse_wire(text).unwrap_or_else(|e| panic!("{ctx}: {text}: {e}"))
}

/// The `data:` payloads of an SSE body, in order.
fn sse_data(raw: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(raw)
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let line = e.trim();
            line.strip_prefix("data: ").unwrap_or_else(|| panic!("SSE event without `data: `: {line:?}")).to_owned()
        })
        .collect()
}

/// Bytes of `content` and `reasoning_content` deltas in a chunk.
fn delta_bytes(chunk: &Value) -> u64 {
    let Some(choices) = chunk["choices"].as_array() else { return 0 };
    let mut n = 0;
    for c in choices {
        for k in ["content", "reasoning_content"] {
            n += c["delta"][k].as_str().map_or(0, str::len) as u64;
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn non_streaming_call_is_settled_at_the_spec_rates() {
    for db in databases() {
        let env = chat_env(&db, "10").await;
        let start = env.balance().await;
        assert_eq!(start, UsdAmount::from_micros(10_000_000));
        let first = body(json!({}));
        // The second call repeats the first message: the simulator reports cached tokens.
        for (round, request) in [first.clone(), first].into_iter().enumerate() {
            let ctx = env.ctx(&format!("call {round}"));
            let before = env.balance().await;
            let r = env.post(CHAT, &request).await;
            assert_eq!(r.status, 200, "{ctx}: {}", String::from_utf8_lossy(&r.raw));
            assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")), "{ctx}");
            let a = &r.json;
            assert_eq!(a["object"], "chat.completion", "{ctx}");
            assert_eq!(a["model"], MODEL, "{ctx}: the public model name");
            assert!(a["id"].is_string() && a["created"].is_i64(), "{ctx}: {a}");
            assert_eq!(a["choices"][0]["index"], 0, "{ctx}");
            assert_eq!(a["choices"][0]["message"]["role"], "assistant", "{ctx}");
            let usage = &a["usage"];
            assert_eq!(u(usage, "/completion_tokens"), 16, "{ctx}: the simulator's natural length");
            if round == 1 {
                assert!(u(usage, "/prompt_tokens_details/cached_tokens") > 0, "{ctx}: cache hit expected: {usage}");
            }
            let task_id = a["svc"]["task_id"].as_str().unwrap_or_else(|| panic!("{ctx}: svc.task_id: {a}"));
            let billing = &a["svc"]["billing"];
            assert_eq!(billing["currency"], "USD", "{ctx}");
            assert_eq!(billing["status"], "settled", "{ctx}");
            let actual = amount(&billing["actual_amount"], &ctx);
            let estimated = amount(&billing["estimated_amount"], &ctx);
            let expected = spec_charge_micros(usage);
            assert_eq!(actual.micros(), expected, "{ctx}: actual vs spec rates for {usage}");
            assert_eq!(actual, billing_charge(usage), "{ctx}: actual vs billing::language_charge");
            assert_eq!(billing["actual_amount_microusd"], expected, "{ctx}");
            assert!(actual <= estimated, "{ctx}: {actual} ≤ estimate {estimated}");
            assert!(expected > 0, "{ctx}");
            let after = env.balance().await;
            assert_eq!(before.checked_sub(actual).ok(), Some(after), "{ctx}: balance dropped by exactly the charge");
            assert_eq!(amount(&billing["balance_after"], &ctx), after, "{ctx}: balance_after");
            let task = env.task(task_id).await;
            assert_eq!(task["id"], task_id, "{ctx}");
            assert_eq!(task["kind"], "language", "{ctx}");
            assert_eq!(task["model"], MODEL, "{ctx}");
            assert_eq!(task["status"], "succeeded", "{ctx}");
            assert_eq!(task["billing"]["status"], "settled", "{ctx}");
            assert_eq!(amount(&task["billing"]["actual_amount"], &ctx), actual, "{ctx}: task billing");
        }
        let (_, entries) = env.assert_ledger("after two calls").await;
        assert_eq!(entries, 1 + 2 * 2, "{}: topup + (reserve, settle) per call", env.server.label);
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prompt_length_picks_the_price_tier() {
    for db in databases() {
        let env = chat_env(&db, "10").await;
        // (prompt tokens, expected charge): 16 completion tokens each, no cache hit.
        for (prompt, expected) in [
            (130_000_u64, "0.130096"), // 130000 × 1.0 + 16 × 6.0 (per M), the >128k tier
            (128_000, "0.064048"),     // 128000 × 0.5 + 16 × 3.0 (per M), the ≤128k tier
        ] {
            let ctx = env.ctx(&format!("prompt {prompt}"));
            let before = env.balance().await;
            let r = env.post(CHAT, &body(json!({"sim_prompt_tokens": prompt}))).await;
            assert_eq!(r.status, 200, "{ctx}: {}", String::from_utf8_lossy(&r.raw));
            assert_eq!(u(&r.json["usage"], "/prompt_tokens"), prompt, "{ctx}");
            let billing = &r.json["svc"]["billing"];
            assert_eq!(billing["status"], "settled", "{ctx}");
            assert_eq!(billing["actual_amount"], expected, "{ctx}");
            assert_eq!(spec_charge_micros(&r.json["usage"]), amount(&json!(expected), &ctx).micros(), "{ctx}");
            let after = env.balance().await;
            assert_eq!(before.checked_sub(amount(&json!(expected), &ctx)).ok(), Some(after), "{ctx}");
        }
        env.assert_ledger("tiers").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rejected_calls_move_no_money() {
    for db in databases() {
        let env = chat_env(&db, "10").await;
        let (start, entries) = env.assert_ledger("start").await;
        let check_untouched = |what: String| {
            let env = &env;
            async move {
                let (balance, n) = env.assert_ledger(&what).await;
                assert_eq!(balance, start, "{}: balance unchanged", env.ctx(&what));
                assert_eq!(n, entries, "{}: no ledger entry", env.ctx(&what));
                assert!(env.tasks().await.is_empty(), "{}: no task recorded", env.ctx(&what));
            }
        };

        let r = env.post(CHAT, &body(json!({"model": "LangC-5.2"}))).await;
        r.assert_error(503, "provider_not_configured", &env.ctx("unpriced LangC-5.2"));
        check_untouched("LangC-5.2".into()).await;

        env.server.gateway.set_maintenance(true).await.expect("maintenance on");
        let r = env.post(CHAT, &body(json!({}))).await;
        r.assert_error(503, "provider_not_configured", &env.ctx("maintenance"));
        env.server.gateway.set_maintenance(false).await.expect("maintenance off");
        check_untouched("maintenance".into()).await;

        let weak = env.server.key(&env.user.id, &[Scope::TaskRead, Scope::ImageCreate]).await.secret;
        let r = env.server.post_json(CHAT, Some(&weak), &body(json!({}))).await;
        r.assert_error(401, "invalid_api_key", &env.ctx("key without language:create"));
        let r = env.server.post_json(CHAT, None, &body(json!({}))).await;
        r.assert_error(401, "invalid_api_key", &env.ctx("no key"));
        check_untouched("401".into()).await;

        let bytes = serde_json::to_vec(&body(json!({}))).expect("json");
        let r = env.server.post(CHAT, Some(&env.key), "text/plain", &bytes).await;
        r.assert_error(415, "unsupported_content_type", &env.ctx("text/plain"));
        let r = env.server.post(CHAT, Some(&env.key), "application/json", b"{\"model\": \"LangB-2.0-pro\", ").await;
        r.assert_error(400, "invalid_request", &env.ctx("malformed JSON"));
        let r = env.server.post(CHAT, Some(&env.key), "application/json", b"[1, 2]").await;
        r.assert_error(400, "invalid_request", &env.ctx("JSON array body"));
        check_untouched("415/400 body".into()).await;

        let invalid: [(&str, Value); 7] = [
            ("unknown model", json!({"model": "LangZ-9"})),
            ("image model", json!({"model": "Vendor-Imagegen-4.5"})),
            ("empty messages", json!({"messages": []})),
            ("max_tokens above the model's max", json!({"max_tokens": 131_073})),
            ("max_completion_tokens above the model's max", json!({"max_completion_tokens": 131_073})),
            ("max_tokens 0", json!({"max_tokens": 0})),
            ("stream not a boolean", json!({"stream": "yes"})),
        ];
        for (what, extra) in invalid {
            let r = env.post(CHAT, &body(extra)).await;
            r.assert_error(400, "invalid_request", &env.ctx(what));
        }
        let mut no_model = body(json!({}));
        no_model.as_object_mut().map(|o| o.remove("model"));
        env.post(CHAT, &no_model).await.assert_error(400, "invalid_request", &env.ctx("no model"));
        check_untouched("400 validation".into()).await;

        // The model's maximum itself is accepted (and reserved for, then settled).
        let r = env.post(CHAT, &body(json!({"max_tokens": 131_072}))).await;
        assert_eq!(r.status, 200, "{}: max_tokens at the bound; {}", env.server.label, String::from_utf8_lossy(&r.raw));
        env.assert_ledger("after a valid call").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn insufficient_balance_is_402_with_the_amount_needed() {
    for db in databases() {
        let env = chat_env(&db, "10").await;
        let request = body(json!({"max_tokens": 131_072}));
        // The reservation for exactly this body, read from a call by a user who can afford it.
        let r = env.post(CHAT, &request).await;
        assert_eq!(r.status, 200, "{}", env.ctx("rich call"));
        let needed = r.json["svc"]["billing"]["estimated_amount"].as_str().expect("estimated_amount").to_owned();
        assert!(
            UsdAmount::parse_wire(&needed).expect("amount").micros() > 100_000,
            "{}: {needed}",
            env.ctx("estimate")
        );

        let poor = env.server.user("0.1").await;
        let poor_key = env.server.key(&poor.id, &[Scope::LanguageCreate, Scope::TaskRead]).await.secret;
        let before = env.server.balance(&poor.id).await;
        let (entries_before, _) = env.server.ledger(&poor.id).await;
        let r = env.server.post_json(CHAT, Some(&poor_key), &request).await;
        r.assert_error(402, "insufficient_balance", &env.ctx("402"));
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&needed), "{}: message {message:?} names {needed}", env.ctx("402"));
        let (entries_after, sum) = env.server.ledger(&poor.id).await;
        assert_eq!(env.server.balance(&poor.id).await, before, "{}", env.ctx("402 balance"));
        assert_eq!(sum, before, "{}", env.ctx("402 ledger sum"));
        assert_eq!(entries_after.len(), entries_before.len(), "{}: no ledger entry", env.ctx("402"));
        let tasks = env.server.get(&format!("{TASKS}?page_size=100"), Some(&poor_key)).await;
        assert_eq!(tasks.json["pagination"]["total"], 0, "{}: no task for a 402", env.ctx("402"));
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upstream_failures_are_502_and_refunded() {
    for db in databases() {
        let env = chat_env(&db, "10").await;
        let (start, _) = env.assert_ledger("start").await;
        let faults =
            ["status_400", "status_429", "status_500", "status_503", "timeout", "malformed", "drop", "empty_usage"];
        for fault in faults {
            let ctx = env.ctx(&format!("fault {fault}"));
            let r = env.post(CHAT, &body(json!({"sim_fault": fault}))).await;
            if fault == "status_400" {
                // The upstream refused the caller's own request: the caller's 400, with its reason.
                r.assert_error(400, "invalid_request", &ctx);
                let message = r.json["error"]["message"].as_str().unwrap_or_default();
                assert!(message.starts_with("the upstream refused the request: "), "{ctx}: {message}");
            } else {
                r.assert_error(502, "upstream_request_failed", &ctx);
            }
            assert_eq!(env.balance().await, start, "{ctx}: refunded");
        }
        // A stream refused before its first byte is a plain 502 as well.
        let ctx = env.ctx("stream fault status_500");
        let r = env.post(CHAT, &body(json!({"sim_fault": "status_500", "stream": true}))).await;
        r.assert_error(502, "upstream_request_failed", &ctx);
        assert_eq!(env.balance().await, start, "{ctx}: refunded");
        // A 200 answer that is not an event stream: the gateway has already committed to a stream,
        // so it ends with an error event only (no chunks, no [DONE]) and refunds.
        let ctx = env.ctx("stream fault malformed");
        let r = env.post(CHAT, &body(json!({"sim_fault": "malformed", "stream": true}))).await;
        if r.status == 200 {
            let events = sse_data(&r.raw);
            assert_eq!(events.len(), 1, "{ctx}: only the error event: {events:?}");
            let error: Value = serde_json::from_str(&events[0]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_envelope(&error, &ctx);
            assert_eq!(error["error"]["code"], "upstream_request_failed", "{ctx}");
        } else {
            r.assert_error(502, "upstream_request_failed", &ctx);
        }
        for _ in 0..100 {
            if env.balance().await == start {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(env.balance().await, start, "{ctx}: refunded");
        let tasks = env.tasks().await;
        assert_eq!(tasks.len(), faults.len() + 2, "{}: one task per failed call", env.server.label);
        for t in &tasks {
            let ctx = env.ctx(&format!("task {}", t["id"]));
            assert_eq!(t["kind"], "language", "{ctx}");
            assert_eq!(t["status"], "failed", "{ctx}");
            assert_eq!(t["error_code"], "upstream_request_failed", "{ctx}");
            assert_eq!(t["billing"]["status"], "refunded", "{ctx}");
        }
        let (balance, _) = env.assert_ledger("after faults").await;
        assert_eq!(balance, start, "{}", env.server.label);
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn midstream_failures_end_with_an_error_event_and_charge_once() {
    for db in databases() {
        let env = chat_env(&db, "10").await;
        for fault in ["midstream_error", "midstream_drop"] {
            let ctx = env.ctx(fault);
            let before = env.balance().await;
            // A small delay between chunks gets them onto the wire before the fault (with none, the
            // simulator's abort can discard its unflushed chunks, and the call is then refunded).
            let request = body(json!({"sim_fault": fault, "stream": true, "sim_chunk_delay_ms": 20}));
            let r = env.post(CHAT, &request).await;
            assert_eq!(r.status, 200, "{ctx}: {}", String::from_utf8_lossy(&r.raw));
            assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")), "{ctx}");
            let task_id = r.header("x-svc-task-id").unwrap_or_else(|| panic!("{ctx}: no task id header")).to_owned();
            let events = sse_data(&r.raw);
            assert!(!events.iter().any(|e| e == "[DONE]"), "{ctx}: no [DONE] after a failure: {events:?}");
            let (last, chunks) = events.split_last().unwrap_or_else(|| panic!("{ctx}: empty stream"));
            assert!(!chunks.is_empty(), "{ctx}: some chunks before the error: {events:?}");
            let error: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{ctx}: {last}: {e}"));
            assert_envelope(&error, &ctx);
            assert_eq!(error["error"]["code"], "upstream_request_failed", "{ctx}");
            let mut delivered = 0;
            for c in chunks {
                let chunk: Value = serde_json::from_str(c).unwrap_or_else(|e| panic!("{ctx}: {c}: {e}"));
                assert_eq!(chunk["object"], "chat.completion.chunk", "{ctx}");
                assert_eq!(chunk["model"], MODEL, "{ctx}");
                delivered += delta_bytes(&chunk);
            }
            let task = env.settled_task(&task_id).await;
            let billing = &task["billing"];
            let after = env.balance().await;
            if delivered == 0 {
                assert_eq!(billing["status"], "refunded", "{ctx}: nothing delivered: {task}");
                assert_eq!(after, before, "{ctx}");
            } else {
                assert_eq!(billing["status"], "settled", "{ctx}: {task}");
                let usage = &billing["usage"];
                assert_eq!(usage["estimated"], true, "{ctx}: settled on the estimate: {usage}");
                assert_eq!(u(usage, "/completion_tokens"), delivered.div_ceil(4), "{ctx}: ⌈{delivered} B / 4⌉");
                // Prompt estimate = ⌈prompt bound / 4⌉, the bound the validation computed for this body.
                let def = catalog::Catalog::builtin().expect("catalog").get(MODEL).cloned().expect("model");
                let plan = validation::chat_request(
                    &def,
                    &validation::RawBody::parse_body(&serde_json::to_vec(&request).expect("json")).expect("object"),
                )
                .expect("valid");
                assert_eq!(u(usage, "/prompt_tokens"), plan.prompt_bound_tokens.div_ceil(4), "{ctx}");
                let actual = amount(&billing["actual_amount"], &ctx);
                assert_eq!(actual.micros(), spec_charge_micros(usage), "{ctx}: {usage}");
                assert_eq!(before.checked_sub(actual).ok(), Some(after), "{ctx}: charged exactly once");
                assert_eq!(task["status"], "succeeded", "{ctx}: billed output counts as a result");
            }
            env.assert_ledger(fault).await;
        }
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streaming_call_ends_with_usage_and_done_and_is_settled() {
    for db in databases() {
        let env = chat_env(&db, "10").await;
        let before = env.balance().await;
        let ctx = env.ctx("stream");
        let r = env
            .post(CHAT, &body(json!({"stream": true, "thinking": {"type": "enabled"}, "sim_completion_tokens": 10})))
            .await;
        assert_eq!(r.status, 200, "{ctx}: {}", String::from_utf8_lossy(&r.raw));
        assert!(r.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")), "{ctx}");
        let task_id = r.header("x-svc-task-id").unwrap_or_else(|| panic!("{ctx}: no x-svc-task-id")).to_owned();
        assert!(String::from_utf8_lossy(&r.raw).ends_with("data: [DONE]\n\n"), "{ctx}: ends with [DONE]");
        let events = sse_data(&r.raw);
        let (last, chunks) = events.split_last().expect("events");
        assert_eq!(last, "[DONE]", "{ctx}");
        let mut usage = Value::Null;
        let mut text = String::new();
        let mut reasoning = String::new();
        for (i, c) in chunks.iter().enumerate() {
            let chunk: Value = serde_json::from_str(c).unwrap_or_else(|e| panic!("{ctx}: chunk {i} {c}: {e}"));
            assert_eq!(chunk["object"], "chat.completion.chunk", "{ctx}: chunk {i}");
            assert_eq!(chunk["model"], MODEL, "{ctx}: chunk {i} names the public model");
            assert!(usage.is_null(), "{ctx}: the usage chunk is the last chunk");
            if chunk["usage"].is_object() {
                usage = chunk["usage"].clone();
            }
            text.push_str(chunk["choices"][0]["delta"]["content"].as_str().unwrap_or_default());
            reasoning.push_str(chunk["choices"][0]["delta"]["reasoning_content"].as_str().unwrap_or_default());
        }
        assert!(usage.is_object(), "{ctx}: a usage chunk");
        assert_eq!(u(&usage, "/completion_tokens"), 10, "{ctx}");
        assert_eq!(text.split_whitespace().count(), 5, "{ctx}: {text:?}");
        assert_eq!(reasoning.split_whitespace().count(), 5, "{ctx}: {reasoning:?}");
        let task = env.settled_task(&task_id).await;
        assert_eq!(task["status"], "succeeded", "{ctx}");
        assert_eq!(task["kind"], "language", "{ctx}");
        assert_eq!(task["billing"]["status"], "settled", "{ctx}");
        let actual = amount(&task["billing"]["actual_amount"], &ctx);
        assert_eq!(actual.micros(), spec_charge_micros(&usage), "{ctx}: {usage}");
        assert_eq!(actual, billing_charge(&usage), "{ctx}");
        assert_eq!(before.checked_sub(actual).ok(), Some(env.balance().await), "{ctx}");
        env.assert_ledger("stream").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_disconnect_mid_stream_settles_on_the_estimate() {
    for db in databases() {
        let env = chat_env(&db, "10").await;
        let before = env.balance().await;
        let ctx = env.ctx("disconnect");
        let request = body(json!({"stream": true, "sim_chunk_delay_ms": 50, "sim_completion_tokens": 200}));
        let bytes = serde_json::to_vec(&request).expect("json");
        let (parts, mut incoming, conn) =
            env.server.post_streaming(CHAT, Some(&env.key), "application/json", &bytes).await;
        assert_eq!(parts.status, 200, "{ctx}");
        let task_id = parts
            .headers
            .get("x-svc-task-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("{ctx}: no task id"))
            .to_owned();
        let mut received = Vec::new();
        for _ in 0..50 {
            if received.windows(2).filter(|w| w == b"\n\n").count() >= 3 {
                break;
            }
            let frame = tokio::time::timeout(Duration::from_secs(5), incoming.frame())
                .await
                .unwrap_or_else(|_| panic!("{ctx}: no chunk within 5 s"))
                .unwrap_or_else(|| panic!("{ctx}: stream ended early"))
                .expect("frame");
            if let Ok(data) = frame.into_data() {
                received.extend_from_slice(&data);
            }
        }
        assert!(!String::from_utf8_lossy(&received).contains("[DONE]"), "{ctx}");
        drop(incoming);
        conn.abort();
        let task = env.settled_task(&task_id).await;
        let billing = &task["billing"];
        assert_eq!(billing["status"], "settled", "{ctx}: settled on what was delivered: {task}");
        assert_eq!(billing["usage"]["estimated"], true, "{ctx}");
        let completion = u(&billing["usage"], "/completion_tokens");
        assert!(completion > 0 && completion < 200, "{ctx}: only part of 200 tokens was delivered: {completion}");
        let actual = amount(&billing["actual_amount"], &ctx);
        assert_eq!(actual.micros(), spec_charge_micros(&billing["usage"]), "{ctx}");
        assert!(actual < amount(&billing["estimated_amount"], &ctx), "{ctx}");
        assert_eq!(before.checked_sub(actual).ok(), Some(env.balance().await), "{ctx}");
        env.assert_ledger("disconnect").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_calls_never_overdraw() {
    for db in databases() {
        let env = chat_env(&db, "10").await;
        let request = body(json!({"sim_latency_ms": 200}));
        let reservation = {
            let r = env.post(CHAT, &request).await;
            assert_eq!(r.status, 200, "{}", env.ctx("probe call"));
            amount(&r.json["svc"]["billing"]["estimated_amount"], &env.ctx("probe"))
        };
        // Cross-check the probe with the billing crate's rule for this body.
        let def = catalog::Catalog::builtin().expect("catalog").get(MODEL).cloned().expect("model");
        let plan = validation::chat_request(
            &def,
            &validation::RawBody::parse_body(&serde_json::to_vec(&request).expect("json")).expect("object"),
        )
        .expect("valid");
        let sheet = def.pricing.clone().expect("priced");
        let rule = billing::language_reservation_text_only(&sheet, plan.prompt_bound_tokens, plan.max_output_tokens);
        assert_eq!(rule.ok(), Some(reservation), "{}: estimate", env.server.label);

        let micros = reservation.micros() * 10;
        let balance = format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000);
        // A concurrency limit above the 100 calls, so that they all race for the balance at once.
        let user = env.server.user_with(&balance, 1000, 0).await.user;
        let key = env.server.key(&user.id, &[Scope::LanguageCreate, Scope::TaskRead]).await.secret;
        assert_eq!(env.server.balance(&user.id).await, UsdAmount::from_micros(micros));

        let bytes = serde_json::to_vec(&request).expect("json");
        let server = &env.server;
        let futures: Vec<_> = (0..100).map(|_| server.post(CHAT, Some(&key), "application/json", &bytes)).collect();
        let replies =
            tokio::time::timeout(Duration::from_secs(30), join_all(futures)).await.expect("100 calls within 30 s");
        let ok = replies.iter().filter(|r| r.status == 200).count();
        let poor = replies.iter().filter(|r| r.status == 402).count();
        for r in &replies {
            assert!(
                r.status == 200 || r.status == 402,
                "{}: unexpected {} {}",
                env.server.label,
                r.status,
                String::from_utf8_lossy(&r.raw)
            );
            if r.status == 402 {
                r.assert_error(402, "insufficient_balance", &env.ctx("concurrent 402"));
            }
        }
        assert!(ok >= 1 && poor >= 1, "{}: {ok} succeeded, {poor} refused", env.server.label);

        let tasks = env.server.get(&format!("{TASKS}?page_size=100"), Some(&key)).await;
        assert_eq!(tasks.json["pagination"]["total"], ok, "{}: one task per accepted call", env.server.label);
        let mut charged = 0_i64;
        for t in tasks.json["data"].as_array().cloned().unwrap_or_default() {
            assert_eq!(t["billing"]["status"], "settled", "{}: {t}", env.server.label);
            assert_eq!(t["status"], "succeeded", "{}: {t}", env.server.label);
            charged += amount(&t["billing"]["actual_amount"], "task").micros();
        }
        let (after, entries) = env.server.assert_ledger(&user.id, &env.ctx("racing calls")).await;
        assert!(!after.is_negative(), "{}: no overdraft: {after}", env.server.label);
        assert_eq!(after.micros(), micros - charged, "{}: balance = start − charges", env.server.label);
        assert_eq!(entries, 1 + 2 * ok, "{}: topup + reserve/settle per accepted call", env.server.label);
        env.server.stop().await;
    }
}

/// Size limits answer 413 `request_too_large` and move no money: a declared body above 100 MB is
/// refused before it is read; inline Base64 above a model's media limit is refused after parsing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_requests_are_413() {
    for db in databases() {
        let env = chat_env(&db, "5").await;
        let before = env.server.balance(&env.user.id).await;

        // Declared 100 MB + 1: answered without reading the body (none is sent).
        let text = env.server.declare_body(CHAT, &env.key, 100 * 1024 * 1024 + 1).await;
        assert!(text.starts_with("HTTP/1.1 413"), "{}: {text}", env.ctx("declared length"));
        assert!(text.contains("request_too_large"), "{text}");

        // An inline image of 10 MiB + 1 decoded bytes on LangB-2.0-pro (limit 10485760).
        let b64 = "A".repeat((10_485_761usize).div_ceil(3) * 4);
        let body = json!({"model": MODEL, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{b64}")}}]}]});
        env.post(CHAT, &body).await.assert_error(413, "request_too_large", &env.ctx("inline image"));
        assert_eq!(env.server.balance(&env.user.id).await, before, "{}", env.ctx("no money moved"));
        env.server.stop().await;
    }
}

/// A client that hangs up while a non-streaming call is upstream does not strand its reservation:
/// the call runs to its end and is settled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_during_a_non_streaming_call_still_settles() {
    for db in databases() {
        let env = chat_env(&db, "10").await;
        let ctx = env.ctx("non-stream disconnect");
        let request = body(json!({"sim_latency_ms": 300}));
        let bytes = serde_json::to_vec(&request).expect("json");
        // Send the request, then close the connection before the answer (300 ms away) arrives.
        {
            let mut client = common::Client::connect(env.server.addr).await;
            let auth = format!("Bearer {}", env.key);
            let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
            let sent = client.open(http::Method::POST, CHAT, &headers, &bytes);
            assert!(tokio::time::timeout(Duration::from_millis(100), sent).await.is_err(), "{ctx}: answered early");
            client.into_connection().abort();
        }
        let mut settled = None;
        for _ in 0..100 {
            let tasks = env.tasks().await;
            if let Some(t) = tasks.first().filter(|t| t["billing"]["status"] != "reserved") {
                settled = Some(t.clone());
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let task = settled.unwrap_or_else(|| panic!("{ctx}: the call was never settled"));
        assert_eq!(task["billing"]["status"], "settled", "{ctx}: {task}");
        assert_eq!(task["status"], "succeeded", "{ctx}: {task}");
        env.assert_ledger("non-stream disconnect").await;
        env.server.stop().await;
    }
}
