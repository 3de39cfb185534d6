//! Key budgets through the HTTP API (issue 25): a chat call whose hold the key's budget cannot
//! cover is 402 `key_budget_exceeded` with a message naming the key's limit, and holds nothing;
//! `GET /api/v1/keys` shows each key's limits, its budget's spend this period and what remains,
//! and the overview what each key spent. SQLite always, PostgreSQL when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use std::time::Duration;

use common::{Env, amount, databases, unique};
use domain::{BudgetPeriod, KeyBudget, KeyLimits, KeyLimitsChange, Scope, UsdAmount};
use serde_json::{Value, json};

fn budget(usd: &str, period: BudgetPeriod) -> KeyLimits {
    let limit = UsdAmount::parse_decimal(usd).expect("amount");
    KeyLimits { budget: Some(KeyBudget { limit, period }), ..KeyLimits::default() }
}

fn chat() -> Value {
    json!({"model": "LangA-V4-flash", "messages": [{"role": "user", "content": unique("hi ")}], "max_tokens": 100,
           "thinking": {"type": "disabled"}})
}

/// The key with `id` in `GET /api/v1/keys` as `secret` sees it.
async fn listed(env: &Env, secret: &str, id: &str) -> Value {
    let reply = env.server.get("/api/v1/keys", Some(secret)).await;
    assert_eq!(reply.status, 200, "{}: {}", env.ctx("list keys"), String::from_utf8_lossy(&reply.raw));
    let keys = reply.json["data"].as_array().cloned().unwrap_or_default();
    assert!(keys.iter().all(|k| k.get("key").is_none() && k.get("hash").is_none()), "no secrets: {keys:?}");
    keys.into_iter().find(|k| k["id"] == id).unwrap_or_else(|| panic!("{}: key {id} listed", env.ctx("keys")))
}

#[tokio::test]
async fn a_call_past_the_keys_budget_is_402_naming_the_key_and_holds_nothing() {
    for db in databases() {
        let scopes = [Scope::LanguageCreate, Scope::TaskRead, Scope::OverviewRead];
        let env = Env::new(&db, "100", Duration::from_secs(2), &scopes).await;
        let (start, entries) = env.assert_ledger("start").await;

        // A key with no budget left at all: refused before anything is held.
        let broke = env.server.key_with(&env.user.id, &scopes, budget("0", BudgetPeriod::Total)).await;
        let refused = env.server.post_json("/api/v1/chat/completions", Some(&broke.secret), &chat()).await;
        refused.assert_error(402, "key_budget_exceeded", &env.ctx("a zero budget"));
        let message = refused.json["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("API key's budget") && message.contains("0.000000 USD total limit"),
            "{}: {message}",
            env.ctx("the message names the key's limit, not the balance")
        );
        let (balance, n) = env.assert_ledger("after the refusal").await;
        assert_eq!((balance, n), (start, entries), "{}: balance and ledger untouched", env.ctx("refusal"));
        assert!(env.tasks().await.is_empty(), "{}: no task", env.ctx("refusal"));

        // A daily dollar: the call goes through and is counted against the key.
        let daily = env.server.key_with(&env.user.id, &scopes, budget("1", BudgetPeriod::Day)).await;
        let id = daily.key.id.as_str().to_owned();
        let ok = env.server.post_json("/api/v1/chat/completions", Some(&daily.secret), &chat()).await;
        assert_eq!(ok.status, 200, "{}: {}", env.ctx("within the budget"), String::from_utf8_lossy(&ok.raw));
        let charged = env.balance().await;
        let charged = UsdAmount::from_micros(start.micros() - charged.micros());
        assert!(charged.micros() > 0, "{}: the call cost something", env.ctx("charge"));
        let key = listed(&env, &env.key, &id).await;
        let b = &key["budget"];
        assert_eq!((&b["limit_usd"], &b["period"]), (&json!("1.000000"), &json!("day")), "{key}");
        assert_eq!(amount(&b["spent_usd"], "spent"), charged, "{}: {key}", env.ctx("the period's spend"));
        assert_eq!(amount(&b["held_usd"], "held"), UsdAmount::ZERO, "{key}");
        assert_eq!(amount(&b["remaining_usd"], "remaining").micros(), 1_000_000 - charged.micros(), "{key}");
        assert_eq!((amount(&key["spent_usd"], "total"), &key["calls"]), (charged, &json!(1)), "{key}");
        assert!(b["period_start"].as_str().is_some_and(|t| t.ends_with("T00:00:00.000Z")), "{key}");
        let overview = env.server.get("/api/v1/overview", Some(&env.key)).await;
        let line = overview.json["keys"].as_array().and_then(|k| k.iter().find(|k| k["id"] == id.as_str()).cloned());
        let line = line.unwrap_or_else(|| panic!("{}: {}", env.ctx("overview keys"), overview.json));
        assert_eq!((amount(&line["spent_usd"], "overview"), &line["calls"]), (charged, &json!(1)), "{line}");

        // The operator lowers the limit to what was spent: the next call is refused, and counted.
        let change = KeyLimitsChange {
            budget: Some(Some(KeyBudget { limit: charged, period: BudgetPeriod::Day })),
            ..KeyLimitsChange::default()
        };
        env.server.gateway.set_key_limits(&daily.key.id, change).await.expect("lower the limit");
        let refused = env.server.post_json("/api/v1/chat/completions", Some(&daily.secret), &chat()).await;
        refused.assert_error(402, "key_budget_exceeded", &env.ctx("a spent budget"));
        assert_eq!(env.tasks().await.len(), 1, "{}: only the granted call made a task", env.ctx("tasks"));
        env.assert_ledger("end").await;
        let metrics = env.server.gateway.metrics_text().await;
        assert!(
            metrics.contains("gateway_key_refusals_total{reason=\"budget\"} 2"),
            "{}: {metrics}",
            env.ctx("metric")
        );
        env.server.stop().await;
    }
}
