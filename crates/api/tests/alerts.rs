//! Low-balance alerts through the real server: sixteen concurrent chat calls that take the balance
//! below the threshold send one `balance.low` event, signed with the user's webhook secret, noticed
//! by the replica that moved the balance (before any worker pass); a top-up re-arms the alert and
//! the next fall sends a second event; the request's bounds and the egress rules; the scope. SQLite
//! and PostgreSQL (`TEST_DATABASE_URL`).

mod common;

use std::time::Duration;

use common::video::VideoEnv;
use common::{STEP_TIMEOUT, databases, is_date_time, is_usd_amount, join_all};
use domain::{Actor, Scope, UsdAmount};
use http::Method;
use serde_json::{Value, json};

const MODEL: &str = "LangA-V4-flash";

/// Polls `GET /api/v1/alerts` until `armed` is `want` (the balance watcher runs beside the call).
async fn wait_armed(env: &VideoEnv, key: &str, want: bool) -> Value {
    let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
    loop {
        let got = env.server.get("/api/v1/alerts", Some(key)).await;
        assert_eq!(got.status, 200, "{}", env.ctx(&format!("GET alerts: {}", got.json)));
        if got.json["armed"] == want {
            return got.json;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", env.ctx(&format!("never armed={want}: {}", got.json)));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The `balance.low` events the receiver got at `path`, each checked against the user's secret.
fn events(env: &VideoEnv, path: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for seen in env.log.matching(&format!("POST {path}")) {
        let timestamp: u64 = seen.header("x-svc-webhook-timestamp").and_then(|t| t.parse().ok()).expect("timestamp");
        let signature = seen.header("x-svc-webhook-signature").expect("signature header");
        let expected = service::webhook_signature(&env.webhook_secret, timestamp, &seen.body).expect("sign");
        assert_eq!(signature, expected, "{}", env.ctx("the event verifies with the user's webhook secret"));
        assert_eq!(seen.header("x-svc-webhook-event").as_deref(), Some("balance.low"), "{}", env.ctx("event header"));
        out.push(serde_json::from_slice(&seen.body).expect("event body is JSON"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fall_below_the_threshold_sends_one_signed_event_and_a_top_up_rearms() {
    for db in databases() {
        let env = VideoEnv::new(&db, "127.0.0.1", "1.00").await;
        let key = env.server.key(&env.user.id, &[Scope::LanguageCreate, Scope::BillingManage]).await.secret;
        // The threshold is the balance: the first charge falls below it and no refund of a hold
        // (each call charges something) can climb back to it, so the burst is one crossing.
        let set = json!({"low_balance_usd": "1", "webhook_url": env.https("hook")});
        let put = env.server.send_json(Method::PUT, "/api/v1/alerts", Some(&key), &set).await;
        assert_eq!(put.status, 200, "{}", env.ctx(&format!("PUT: {}", put.json)));
        assert_eq!(
            (&put.json["low_balance_usd"], &put.json["armed"], &put.json["below"]),
            (&json!("1.000000"), &json!(true), &json!(false)),
            "{}",
            env.ctx(&put.json.to_string())
        );

        let bodies: Vec<Value> = (0..16)
            .map(|i| {
                json!({"model": MODEL, "messages": [{"role": "user", "content": format!("call {i}")}],
                            "max_tokens": 20})
            })
            .collect();
        let calls: Vec<_> =
            bodies.iter().map(|body| env.server.post_json("/api/v1/chat/completions", Some(&key), body)).collect();
        for reply in tokio::time::timeout(STEP_TIMEOUT, join_all(calls)).await.expect("16 calls in time") {
            assert_eq!(reply.status, 200, "{}", env.ctx(&format!("chat call: {}", reply.json)));
        }
        // Disarmed by the replica that moved the balance, before any worker pass.
        let after = wait_armed(&env, &key, false).await;
        assert_eq!(after["below"], true, "{}", env.ctx(&after.to_string()));
        env.flush().await;
        let sent = events(&env, "/hook");
        assert_eq!(sent.len(), 1, "{}", env.ctx(&format!("one event for one crossing: {sent:?}")));
        let event = &sent[0];
        assert_eq!(event["type"], "balance.low", "{}", env.ctx("type"));
        assert_eq!(event["user_id"], env.user.id.as_str(), "{}", env.ctx("user"));
        assert_eq!(event["threshold_usd"], "1.000000", "{}", env.ctx("threshold"));
        let balance = event["balance_usd"].as_str().expect("balance_usd");
        assert!(is_usd_amount(balance) && balance < "1.000000", "{}", env.ctx(&format!("balance {balance}")));
        assert!(is_date_time(event["created_at"].as_str().unwrap_or_default()), "{}", env.ctx("created_at"));
        env.assert_ledger(&env.ctx("books after the burst")).await;

        // A top-up back above re-arms it; an operator's negative adjustment (a debit) fires it again.
        let operator = env.server.gateway.operator(&Actor::Cli);
        operator.topup(&env.user.id, UsdAmount::from_micros(2_000_000), "more").await.expect("top-up");
        wait_armed(&env, &key, true).await;
        operator.adjust(&env.user.id, UsdAmount::from_micros(-2_500_000), "taken back").await.expect("adjust");
        wait_armed(&env, &key, false).await;
        env.flush().await;
        assert_eq!(events(&env, "/hook").len(), 2, "{}", env.ctx("a second crossing, a second event"));
        env.assert_ledger(&env.ctx("books at the end")).await;
    }
}

#[tokio::test]
async fn the_alert_request_is_checked_and_needs_billing_manage() {
    for db in databases() {
        let env = VideoEnv::new(&db, "", "10").await;
        let key = env.server.key(&env.user.id, &[Scope::BillingManage]).await.secret;
        let put = |body: Value| {
            let (server, key) = (&env.server, key.clone());
            async move { server.send_json(Method::PUT, "/api/v1/alerts", Some(&key), &body).await }
        };
        let fresh = env.server.get("/api/v1/alerts", Some(&key)).await;
        assert_eq!(
            fresh.json,
            json!({"low_balance_usd": null, "webhook_url": null, "armed": false, "below": false,
                   "balance_usd": "10.000000"}),
            "{}",
            env.ctx("no alert yet")
        );
        for (what, body) in [
            ("zero", json!({"low_balance_usd": "0"})),
            ("negative", json!({"low_balance_usd": "-1"})),
            ("seven decimals", json!({"low_balance_usd": "0.0000001"})),
            ("not a number", json!({"low_balance_usd": "five"})),
            ("a JSON number", json!({"low_balance_usd": 5})),
            ("missing", json!({"webhook_url": "https://hooks.example.com/x"})),
            ("unknown field", json!({"low_balance_usd": "5", "email": "x@example.com"})),
            ("http", json!({"low_balance_usd": "5", "webhook_url": "http://hooks.example.com/x"})),
            ("a private address", json!({"low_balance_usd": "5", "webhook_url": "https://127.0.0.1/x"})),
            (
                "a URL of 2,049 characters",
                json!({"low_balance_usd": "5", "webhook_url": format!("https://a.example/{}", "x".repeat(2031))}),
            ),
        ] {
            put(body).await.assert_error(400, "invalid_request", &env.ctx(what));
        }
        let smallest = put(json!({"low_balance_usd": "0.000001"})).await;
        assert_eq!(smallest.status, 200, "{}", env.ctx(&format!("one micro-USD: {}", smallest.json)));
        let above = put(json!({"low_balance_usd": "20", "webhook_url": null})).await;
        assert_eq!(
            (&above.json["armed"], &above.json["below"], &above.json["webhook_url"]),
            (&json!(false), &json!(true), &Value::Null),
            "{}",
            env.ctx(&format!("set above the balance: below, not armed: {}", above.json))
        );
        let off = put(json!({"low_balance_usd": null})).await;
        assert_eq!((off.status, &off.json["low_balance_usd"]), (200, &Value::Null), "{}", env.ctx("switched off"));
        let audit = env.server.gateway.operator(&Actor::Cli).audit(Vec::new()).await.expect("audit");
        let set = audit.items.iter().filter(|e| e.action == "alert.set").count();
        assert_eq!(set, 3, "{}", env.ctx("each change audited"));

        let other = env.server.key(&env.user.id, &[Scope::ModelsRead]).await.secret;
        env.server.get("/api/v1/alerts", Some(&other)).await.assert_error(
            401,
            "invalid_api_key",
            &env.ctx("a key without billing:manage"),
        );
    }
}
