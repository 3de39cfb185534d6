//! Integration tests of the reservation rule for models that think (issue 19 §5): a call whose
//! upstream reports the model's whole reasoning for `max_tokens: 1` never takes a balance below
//! zero, a 402 says what the hold covers, and a settlement above its hold (only an upstream that
//! breaks its own bounds gets there: the simulator's `over_bounds` fault) moves
//! `gateway_overdraft_micro_usd_total`. The real server over real SQLite (and PostgreSQL when
//! `TEST_DATABASE_URL` is set), with the upstream simulator behind it.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::time::Duration;

use common::{Env, amount, databases, join_all, unique};
use domain::{Scope, UsdAmount};
use prometheus_parse::{Scrape, Value as Metric};
use serde_json::{Value, json};

const CHAT: &str = "/api/v1/chat/completions";
const MESSAGES: &str = "/v1/messages";
const RESPONSES: &str = "/v1/responses";
/// The probe's model: LangA-V4-pro thinks by default and publishes 131,072 reasoning tokens.
const MODEL: &str = "LangA-V4-pro";
/// The model's maximum reasoning (its catalog `max_reasoning_tokens`).
const MAX_REASONING: u64 = 131_072;
const OVERDRAFT: &str = "gateway_overdraft_micro_usd_total";

/// `base` with `extra`'s fields set.
fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    base
}

/// The probe of the issue: `max_tokens: 1`, thinking not turned off, and an upstream that reasons for
/// `reasoning` tokens.
fn chat_body(reasoning: u64, extra: Value) -> Value {
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": unique("think about ")}],
        "max_tokens": 1, "sim_reasoning_tokens": reasoning});
    with(body, extra)
}

fn message_body(reasoning: u64, extra: Value) -> Value {
    let body = json!({"model": MODEL, "messages": [{"role": "user", "content": unique("think about ")}],
        "max_tokens": 1, "sim_reasoning_tokens": reasoning});
    with(body, extra)
}

fn response_body(reasoning: u64, extra: Value) -> Value {
    let body = json!({"model": MODEL, "input": unique("think about "), "max_output_tokens": 1,
        "sim_reasoning_tokens": reasoning});
    with(body, extra)
}

/// `POST path` for `env`'s user, in the format's own authentication.
async fn call(env: &Env, key: &str, path: &str, body: &Value) -> common::Reply {
    if path == MESSAGES {
        let headers = [("x-api-key", key), ("anthropic-version", "2023-06-01")];
        env.server.post_json_with(path, None, &headers, body).await
    } else {
        env.server.post_json(path, Some(key), body).await
    }
}

/// The task of a finished call (its id from `X-Svc-Task-Id`), once its billing is no longer `reserved`.
async fn settled_task(env: &Env, reply: &common::Reply) -> Value {
    let id = reply.header("x-svc-task-id").unwrap_or_else(|| panic!("no task id: {}", reply.status)).to_owned();
    for _ in 0..100 {
        let task = env.task(&id).await;
        if task["billing"]["status"] != "reserved" {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{}: task {id} still reserved after 5 s", env.server.label);
}

/// `gateway_overdraft_micro_usd_total` as `/metrics` reports it.
async fn overdraft(env: &Env) -> u64 {
    let reply = env.server.get("/metrics", None).await;
    assert_eq!(reply.status, 200, "{}", env.ctx("metrics"));
    let text = String::from_utf8_lossy(&reply.raw).into_owned();
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap_or_else(|e| panic!("metrics: {e}"));
    let sample = scrape.samples.iter().find(|s| s.metric == OVERDRAFT);
    match sample.map(|s| &s.value) {
        Some(Metric::Counter(v) | Metric::Untyped(v)) => *v as u64,
        other => panic!("{}: {OVERDRAFT} is missing or not a counter: {other:?}", env.ctx("metrics")),
    }
}

/// The probe, on every path that settles a language call: a user with $0.05 and an upstream
/// that reasons for the model's whole reasoning length. Every call is answered 200 or 402, and the
/// balance never goes below zero (sequential calls on every path, then 64 at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_whole_reasoning_for_max_tokens_1_never_overdraws() {
    for db in databases() {
        let scopes = [Scope::LanguageCreate, Scope::TaskRead];
        let env = Env::new(&db, "0.05", Duration::from_secs(5), &scopes).await;
        let start = env.balance().await;
        let cases = [
            (CHAT, chat_body(MAX_REASONING, json!({}))),
            (CHAT, chat_body(MAX_REASONING, json!({"stream": true}))),
            (MESSAGES, message_body(MAX_REASONING, json!({}))),
            (MESSAGES, message_body(MAX_REASONING, json!({"stream": true}))),
            (RESPONSES, response_body(MAX_REASONING, json!({}))),
            (RESPONSES, response_body(MAX_REASONING, json!({"stream": true}))),
        ];
        let mut charged = 0_i64;
        for (path, body) in &cases {
            let ctx = env.ctx(&format!("{path} stream={}", body["stream"]));
            let reply = call(&env, &env.key, path, body).await;
            assert_eq!(reply.status, 200, "{ctx}: {}", String::from_utf8_lossy(&reply.raw));
            let task = settled_task(&env, &reply).await;
            assert_eq!(task["billing"]["status"], "settled", "{ctx}: {task}");
            let held = amount(&task["billing"]["estimated_amount"], &ctx);
            let actual = amount(&task["billing"]["actual_amount"], &ctx);
            assert!(actual <= held, "{ctx}: charged {actual} within the hold {held}");
            charged += actual.micros();
            assert!(!env.balance().await.is_negative(), "{ctx}: balance {}", env.balance().await);
        }
        let (balance, _, _) = env.assert_books("sequential").await;
        assert_eq!(balance.micros(), start.micros() - charged, "{}", env.ctx("balance = start - charges"));

        let futures: Vec<_> = (0..64)
            .map(|i| {
                let (path, body) = &cases[i % cases.len()];
                call(&env, &env.key, path, body)
            })
            .collect();
        let replies = tokio::time::timeout(Duration::from_secs(60), join_all(futures)).await.expect("64 calls in 60 s");
        for r in &replies {
            match r.status {
                200 => {}
                402 => r.assert_error(402, "insufficient_balance", &env.ctx("parallel 402")),
                other => panic!("{}: {other} {}", env.ctx("parallel"), String::from_utf8_lossy(&r.raw)),
            }
        }
        for r in replies.iter().filter(|r| r.status == 200) {
            settled_task(&env, r).await;
        }
        let (balance, _, _) = env.assert_books("parallel").await;
        let ok = replies.iter().filter(|r| r.status == 200).count();
        println!(
            "{}: $0.05, {MODEL}, max_tokens 1, 64 parallel calls: {ok} answered, balance {balance}",
            env.server.label
        );
        assert!(!balance.is_negative(), "{}: balance {balance}", env.ctx("after 64 parallel calls"));
        assert_eq!(overdraft(&env).await, 0, "{}: no settlement above its hold", env.ctx("metrics"));
        env.server.stop().await;
    }
}

/// The hold of chat `body` by the billing crate's rule, checking that it asks for `choices` choices.
fn rule(body: &Value, choices: u64) -> UsdAmount {
    let def = catalog::Catalog::builtin().expect("catalog").get(MODEL).cloned().expect("model");
    let plan = validation::chat_request(
        &def,
        &validation::RawBody::parse_body(&serde_json::to_vec(&body).expect("json")).expect("object"),
    )
    .expect("valid");
    assert_eq!((plan.choices, plan.bounds_reasoning), (choices, true));
    let sheet = def.pricing.clone().expect("priced");
    billing::language_reservation_text_only(&sheet, plan.prompt_bound_tokens, plan.output_hold_tokens()).expect("rule")
}

/// A 402 names the amount held and what it covers (prompt bound, output cap with reasoning, choices);
/// `n` multiplies the output part of the hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_402_says_what_the_hold_was() {
    for db in databases() {
        let scopes = [Scope::LanguageCreate, Scope::TaskRead];
        let env = Env::new(&db, "10", Duration::from_secs(5), &scopes).await;
        let body = chat_body(8, json!({"max_tokens": 100_000}));
        let one = env.post(CHAT, &body).await;
        assert_eq!(one.status, 200, "{}", env.ctx("rich call"));
        let held = amount(&one.json["svc"]["billing"]["estimated_amount"], &env.ctx("hold"));
        let three = env.post(CHAT, &with(body.clone(), json!({"n": 3}))).await;
        assert_eq!(three.status, 200, "{}", env.ctx("n = 3"));
        let held3 = amount(&three.json["svc"]["billing"]["estimated_amount"], &env.ctx("hold n = 3"));
        assert_eq!(held, rule(&body, 1), "{}: prompt bound + 100,000 output tokens", env.ctx("hold"));
        assert_eq!(held3, rule(&with(body.clone(), json!({"n": 3})), 3), "{}: n multiplies", env.ctx("hold n = 3"));

        let poor = env.server.user("0.1").await;
        let poor_key = env.server.key(&poor.id, &scopes).await.secret;
        let refused = env.server.post_json(CHAT, Some(&poor_key), &body).await;
        refused.assert_error(402, "insufficient_balance", &env.ctx("402"));
        let message = refused.json["error"]["message"].as_str().unwrap_or_default();
        let needed = held.to_string();
        assert!(message.contains(&needed), "{}: {message:?} names {needed}", env.ctx("402"));
        assert!(
            message.contains("100000 output tokens, reasoning included") && message.contains(MODEL),
            "{}: {message:?} says what the hold covers",
            env.ctx("402")
        );
        let refused = env.server.post_json(CHAT, Some(&poor_key), &with(body, json!({"n": 3}))).await;
        let message = refused.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&held3.to_string()) && message.contains("each of 3 choices"), "{message:?}");
        assert_eq!(env.server.balance(&poor.id).await, UsdAmount::from_micros(100_000), "{}", env.ctx("402 balance"));
        let native = call(&env, &poor_key, MESSAGES, &message_body(8, json!({"max_tokens": 100_000}))).await;
        native.assert_error(402, "insufficient_balance", &env.ctx("messages 402"));
        let message = native.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("100000 output tokens, reasoning included"), "{message:?}");
        env.server.stop().await;
    }
}

/// An upstream that breaks its own bounds (the simulator's `over_bounds` fault: the whole reasoning
/// and answer whatever the cap) is still charged what it reports; each settlement above its hold adds
/// the excess to `gateway_overdraft_micro_usd_total`, on every settling path.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_settlement_above_its_hold_is_counted() {
    for db in databases() {
        let scopes = [Scope::LanguageCreate, Scope::TaskRead];
        let env = Env::new(&db, "10", Duration::from_secs(5), &scopes).await;
        assert_eq!(overdraft(&env).await, 0, "{}: the counter exists from the start", env.ctx("metrics"));
        let fault = json!({"sim_fault": "over_bounds"});
        let cases = [
            (CHAT, chat_body(2_000, fault.clone())),
            (CHAT, chat_body(2_000, with(fault.clone(), json!({"stream": true})))),
            (MESSAGES, message_body(2_000, fault.clone())),
            (MESSAGES, message_body(2_000, with(fault.clone(), json!({"stream": true})))),
            (RESPONSES, response_body(2_000, fault.clone())),
            (RESPONSES, response_body(2_000, with(fault.clone(), json!({"stream": true})))),
        ];
        let mut expected = 0_u64;
        for (path, body) in &cases {
            let ctx = env.ctx(&format!("{path} stream={}", body["stream"]));
            let reply = call(&env, &env.key, path, body).await;
            assert_eq!(reply.status, 200, "{ctx}: {}", String::from_utf8_lossy(&reply.raw));
            let task = settled_task(&env, &reply).await;
            let held = amount(&task["billing"]["estimated_amount"], &ctx);
            let actual = amount(&task["billing"]["actual_amount"], &ctx);
            assert!(actual > held, "{ctx}: the broken bound is charged as reported: {actual} > {held}");
            expected += u64::try_from(actual.micros() - held.micros()).unwrap_or_default();
            assert_eq!(overdraft(&env).await, expected, "{ctx}: counted");
        }
        println!("{}: six settlements above their holds, overdraft counter {expected} micro-USD", env.server.label);
        env.assert_books("overdrafts").await;
        env.server.stop().await;
    }
}
