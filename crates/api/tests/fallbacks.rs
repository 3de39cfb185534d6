//! Integration tests of model fallbacks and aliases: a call that sends `models: [A, B]`, or names
//! an operator's alias, is served by B when A fails before its answer (one hold, the larger; one
//! settlement, at B's price; the task names B and records what was asked for), never after the
//! caller's own 400 and never once a stream began; a model switched off is passed over; aliases are
//! checked, listed and audited. The real server on `127.0.0.1:0`, SQLite and PostgreSQL, the
//! simulator over real HTTP (`sim_fault_model` faults one model only).

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::time::Duration;

use common::{Env, amount, databases};
use domain::{Actor, LedgerKind, ModelAlias, Scope};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(5);
const SCOPES: &[Scope] = &[Scope::ModelsRead, Scope::LanguageCreate, Scope::TaskRead];
const CHAT: &str = "/api/v1/chat/completions";
const FIRST: &str = "LangA-V4-pro";
const SECOND: &str = "LangA-V4-flash";

/// The upstream model id of catalog model `name` (what `sim_fault_model` names).
fn upstream_id(name: &str) -> String {
    catalog::Catalog::builtin().expect("catalog").get(name).expect("model").upstream.model_id.clone()
}

/// A chat body with `models: [FIRST, SECOND]`, a fresh prompt, and `extra` fields.
fn listed(prompt: &str, extra: Value) -> Value {
    let mut body =
        json!({"models": [FIRST, SECOND], "max_tokens": 16, "messages": [{"role": "user", "content": prompt}]});
    for (k, v) in extra.as_object().expect("object") {
        body[k] = v.clone();
    }
    body
}

/// The hold the chat quote names for `body`, as it is or sent to one `model`.
async fn hold_of(env: &Env, model: Option<&str>, body: &Value) -> i64 {
    let mut one = body.clone();
    if let Some(model) = model {
        one.as_object_mut().expect("object").remove("models");
        one["model"] = json!(model);
    }
    let quote = env.post("/api/v1/chat/completions/quote", &one).await;
    assert_eq!(quote.status, 200, "{}", quote.text());
    amount(&quote.json["hold_usd"], "hold").micros()
}

/// The ledger rows of task `id`: (kind, micro-USD).
async fn rows(env: &Env, id: &str) -> Vec<(LedgerKind, i64)> {
    let (entries, _) = env.server.ledger(&env.user.id).await;
    let mut rows: Vec<(LedgerKind, i64)> = entries
        .iter()
        .filter(|e| e.task_id.as_ref().is_some_and(|t| t.as_str() == id))
        .map(|e| (e.kind, e.amount.micros()))
        .collect();
    rows.sort_by_key(|(kind, _)| kind.as_str());
    rows
}

/// The spec charge of `usage` at `model`'s catalog price.
fn charge(model: &str, usage: &Value) -> i64 {
    let sheet =
        catalog::Catalog::builtin().expect("catalog").get(model).and_then(|d| d.pricing.clone()).expect("price");
    let n = |p: &str| usage.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let usage = billing::LanguageUsage {
        prompt_tokens: n("/prompt_tokens"),
        completion_tokens: n("/completion_tokens"),
        cached_tokens: n("/prompt_tokens_details/cached_tokens"),
        ..billing::LanguageUsage::default()
    };
    billing::language_charge(&sheet, &usage).expect("priced").total.micros()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_on_the_first_model_is_served_by_the_second_with_one_hold_at_the_seconds_price() {
    for db in databases() {
        let env = Env::new(&db, "10", TIMEOUT, SCOPES).await;
        let ctx = env.ctx("fallback");
        let body =
            listed("Which model answers?", json!({"sim_fault": "status_503", "sim_fault_model": upstream_id(FIRST)}));
        let held = hold_of(&env, None, &body).await;
        let (first_hold, second_hold) =
            (hold_of(&env, Some(FIRST), &body).await, hold_of(&env, Some(SECOND), &body).await);
        // Each single-model body is shorter than the list's by its `models`: the list's hold is at
        // least the larger of theirs.
        assert!(
            held >= first_hold.max(second_hold) && first_hold > second_hold,
            "{ctx}: {held} {first_hold} {second_hold}"
        );
        let before = env.balance().await;
        let reply = env.post(CHAT, &body).await;
        assert_eq!(reply.status, 200, "{ctx}: {}", reply.text());
        assert_eq!(reply.json["model"], SECOND, "{ctx}: the answer names the model that served it");
        let billing = &reply.json["svc"]["billing"];
        assert_eq!(billing["estimated_amount_microusd"], held, "{ctx}: one hold, the larger candidate's: {billing}");
        assert_eq!(billing["pricing_version_id"], format!("{SECOND}@v1"), "{ctx}");
        let charged = amount(&billing["actual_amount"], &ctx).micros();
        assert_eq!(charged, charge(SECOND, &reply.json["usage"]), "{ctx}: the second model's price for its usage");
        assert_eq!(env.balance().await.micros(), before.micros() - charged, "{ctx}: charged once");
        let id = reply.json["svc"]["task_id"].as_str().expect("task").to_owned();
        assert_eq!(
            rows(&env, &id).await,
            [(LedgerKind::Reserve, -held), (LedgerKind::Settle, held - charged)],
            "{ctx}"
        );
        let task = env.settled_task(&id).await;
        assert_eq!(task["model"], SECOND, "{ctx}: {task}");
        assert_eq!(task["requested_model"], format!("{FIRST},{SECOND}"), "{ctx}: what was asked for");
        assert_eq!(task["billing"]["pricing_version_id"], format!("{SECOND}@v1"), "{ctx}");

        // The same list with no fault: the first serves, the task names it.
        let reply = env.post(CHAT, &listed("No fault this time.", json!({}))).await;
        assert_eq!((reply.status, &reply.json["model"]), (200, &json!(FIRST)), "{ctx}: {}", reply.text());
        let task = env.settled_task(reply.json["svc"]["task_id"].as_str().expect("task")).await;
        assert_eq!(task["model"], FIRST);

        // Both fail: one refund, 502, the task names the last one tried.
        let both = listed("Both fail.", json!({"sim_fault": "status_503"}));
        let before = env.balance().await;
        let reply = env.post(CHAT, &both).await;
        assert_eq!(reply.status, 502, "{ctx}: {}", reply.text());
        assert_eq!(env.balance().await, before, "{ctx}: refunded");
        env.assert_books("after the fallbacks").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_400_and_a_stream_that_began_are_never_retried_on_another_model() {
    for db in databases() {
        let env = Env::new(&db, "10", TIMEOUT, SCOPES).await;
        let ctx = env.ctx("no fallback");
        let calls_before = env.sim.requests("/api/v3/chat/completions");
        let before = env.balance().await;
        let refused = env.post(CHAT, &listed("Refused.", json!({"sim_fault": "status_400"}))).await;
        refused.assert_error(400, "invalid_request", &ctx);
        assert_eq!(env.sim.requests("/api/v3/chat/completions") - calls_before, 1, "{ctx}: the second was not tried");
        assert_eq!(env.balance().await, before, "{ctx}: refunded");

        // A stream whose first model fails before its head moves on; one that began does not.
        let moved = listed(
            "Stream moves on.",
            json!({"stream": true, "sim_fault": "status_503", "sim_fault_model": upstream_id(FIRST)}),
        );
        let reply = env.post(CHAT, &moved).await;
        assert_eq!(reply.status, 200, "{ctx}: {}", reply.text());
        let text = reply.text();
        assert!(text.contains(&format!("\"model\":\"{SECOND}\"")) && text.contains("[DONE]"), "{ctx}: {text}");
        let task = env.settled_task(reply.header("x-svc-task-id").expect("task")).await;
        assert_eq!(task["model"], SECOND, "{ctx}: {task}");

        let calls_before = env.sim.requests("/api/v3/chat/completions");
        let began =
            listed("Stream breaks.", json!({"stream": true, "sim_fault": "midstream_error", "sim_chunk_delay_ms": 20}));
        let reply = env.post(CHAT, &began).await;
        assert_eq!(reply.status, 200, "{ctx}: {}", reply.text());
        assert!(reply.text().contains("upstream_request_failed"), "{ctx}: the error event: {}", reply.text());
        assert_eq!(env.sim.requests("/api/v3/chat/completions") - calls_before, 1, "{ctx}: not retried after bytes");
        let task = env.settled_task(reply.header("x-svc-task-id").expect("task")).await;
        assert_eq!(task["model"], FIRST, "{ctx}: {task}");
        env.assert_books("after the refusals").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_is_checked_and_a_model_switched_off_is_passed_over() {
    for db in databases() {
        let env = Env::new(&db, "10", TIMEOUT, SCOPES).await;
        let ctx = env.ctx("lists");
        let five = json!({"models": ["LangA-V4-pro", "LangA-V4-flash", "LangB-2.0-pro", "LangB-2.0-lite", "LangB-2.0-mini"],
                          "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
        env.post(CHAT, &five).await.assert_error(400, "invalid_request", &format!("{ctx}: five"));
        let four = json!({"models": ["LangA-V4-pro", "LangA-V4-flash", "LangB-2.0-pro", "LangB-2.0-lite"],
                          "max_tokens": 8, "messages": [{"role": "user", "content": "four"}]});
        assert_eq!(env.post(CHAT, &four).await.status, 200, "{ctx}: four");
        let mut mismatch = listed("x", json!({}));
        mismatch["model"] = json!(SECOND);
        env.post(CHAT, &mismatch).await.assert_error(400, "invalid_request", &format!("{ctx}: model not first"));
        let mixed = listed("x", json!({"models": [FIRST, "Vendor-Imagegen-4.5"]}));
        env.post(CHAT, &mixed).await.assert_error(400, "invalid_request", &format!("{ctx}: an image model"));

        let actor = Actor::Cli;
        env.server.gateway.operator(&actor).set_model(FIRST, Some(false), None).await.expect("switch off");
        let reply = env.post(CHAT, &listed("Switched off.", json!({}))).await;
        assert_eq!((reply.status, &reply.json["model"]), (200, &json!(SECOND)), "{ctx}: {}", reply.text());
        env.assert_books("after the lists").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alias_is_checked_listed_called_with_fallback_and_audited() {
    for db in databases() {
        let env = Env::new(&db, "10", TIMEOUT, SCOPES).await;
        let ctx = env.ctx("alias");
        let actor = Actor::Cli;
        let operator = env.server.gateway.operator(&actor);
        let alias = |name: &str, models: &[&str]| ModelAlias {
            name: name.into(),
            models: models.iter().map(|m| (*m).to_owned()).collect(),
        };
        for (bad, what) in [
            (alias(SECOND, &[FIRST]), "a model's own name"),
            (alias("mixed", &[FIRST, "Vendor-Imagegen-4.5"]), "two kinds"),
            (alias("ghost", &["No-Such-Model"]), "an unknown model"),
            (alias("twice", &[FIRST, FIRST]), "a model twice"),
            (alias("five", &[FIRST, SECOND, "LangB-2.0-pro", "LangB-2.0-lite", "LangB-2.0-mini"]), "five models"),
            (alias("bad name", &[FIRST]), "a space in the name"),
        ] {
            assert!(operator.set_alias(bad).await.is_err(), "{ctx}: {what} was accepted");
        }
        operator.set_alias(alias("fast", &[FIRST, SECOND])).await.expect("set");

        let listed_models = env.server.get("/api/v1/models", Some(&env.key)).await;
        let entry = listed_models.json["data"].as_array().expect("data").iter().find(|m| m["id"] == "fast").cloned();
        let entry = entry.unwrap_or_else(|| panic!("{ctx}: the alias is not listed: {}", listed_models.json));
        assert_eq!(entry["alias_of"], json!([FIRST, SECOND]), "{ctx}");
        let v1 = env.server.get("/v1/models", Some(&env.key)).await;
        assert!(v1.json["data"].as_array().expect("data").iter().any(|m| m["id"] == "fast"), "{ctx}: {}", v1.json);
        assert_eq!(env.server.get("/v1/models/fast", Some(&env.key)).await.json["alias_of"], json!([FIRST, SECOND]));

        let body = json!({"model": "fast", "max_tokens": 8, "sim_fault": "status_503", "sim_fault_model": upstream_id(FIRST),
                          "messages": [{"role": "user", "content": "Through the alias."}]});
        let reply = env.post(CHAT, &body).await;
        assert_eq!((reply.status, &reply.json["model"]), (200, &json!(SECOND)), "{ctx}: {}", reply.text());
        let task = env.settled_task(reply.json["svc"]["task_id"].as_str().expect("task")).await;
        assert_eq!((&task["model"], &task["requested_model"]), (&json!(SECOND), &json!("fast")), "{ctx}: {task}");

        // Messages and responses fall back the same way.
        let headers = [("anthropic-version", "2023-06-01")];
        let message = json!({"model": "fast", "max_tokens": 8, "sim_fault": "status_503", "sim_fault_model": upstream_id(FIRST),
                             "messages": [{"role": "user", "content": "A message through the alias."}]});
        let reply = env.server.post_json_with("/v1/messages", Some(&env.key), &headers, &message).await;
        assert_eq!((reply.status, &reply.json["model"]), (200, &json!(SECOND)), "{ctx}: messages {}", reply.text());
        let response = json!({"models": [FIRST, SECOND], "input": "A response that falls back.",
                              "sim_fault": "status_503", "sim_fault_model": upstream_id(FIRST)});
        let reply = env.post("/v1/responses", &response).await;
        assert_eq!((reply.status, &reply.json["model"]), (200, &json!(SECOND)), "{ctx}: responses {}", reply.text());

        operator.delete_alias("fast").await.expect("delete");
        assert!(operator.delete_alias("fast").await.is_err(), "{ctx}: deleted twice");
        let gone = env
            .post(CHAT, &json!({"model": "fast", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}))
            .await;
        gone.assert_error(400, "invalid_request", &format!("{ctx}: a deleted alias"));
        let audit = env.server.gateway.operator(&actor).audit([("page_size", "100")]).await.expect("audit");
        let actions: Vec<&str> = audit.items.iter().map(|e| e.action.as_str()).collect();
        assert!(actions.contains(&"alias.set") && actions.contains(&"alias.delete"), "{ctx}: {actions:?}");
        env.assert_books("after the alias").await;
        env.server.stop().await;
    }
}
