//! Integration tests of `X-Max-Cost`: a hold above the caller's cap is 402 `max_cost_exceeded`
//! with nothing held or sent, on every billable route and the quotes; a cap at the hold is served;
//! an upstream that reports more usage than the hold is charged at most the cap, and the excess is
//! counted in the overdraft metric. The real server on `127.0.0.1:0`, SQLite and PostgreSQL, the
//! simulator over real HTTP.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::time::Duration;

use common::{Env, Reply, amount, databases};
use domain::{Scope, UsdAmount};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(5);
const SCOPES: &[Scope] =
    &[Scope::LanguageCreate, Scope::ImageCreate, Scope::AudioCreate, Scope::VideoCreate, Scope::TaskRead];

/// `POST path` with `body` and `X-Max-Cost: cap`.
async fn capped(env: &Env, path: &str, cap: &str, body: &Value) -> Reply {
    env.server.post_json_with(path, Some(&env.key), &[("x-max-cost", cap)], body).await
}

/// The hold the quote of `path` names for `body`, as a wire amount.
async fn quoted_hold(env: &Env, path: &str, body: &Value) -> UsdAmount {
    let quote = env.post(&format!("{path}/quote"), body).await;
    assert_eq!(quote.status, 200, "{}", quote.text());
    amount(&quote.json["hold_usd"], "hold_usd")
}

/// The overdraft counter's value.
async fn overdraft(env: &Env) -> i64 {
    let text = env.server.get("/metrics", None).await.text();
    let line = text.lines().find(|l| l.starts_with("gateway_overdraft_micro_usd_total "));
    line.and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse::<f64>().ok()).map_or(0, |v| v as i64)
}

/// A USD amount one micro-USD below `amount`, as the header's text.
fn below(amount: UsdAmount) -> String {
    UsdAmount::from_micros(amount.micros() - 1).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_above_the_cap_is_refused_before_anything_is_held_and_a_cap_at_the_hold_is_served() {
    for db in databases() {
        let env = Env::new(&db, "10", TIMEOUT, SCOPES).await;
        let chat =
            json!({"model": "LangA-V4-flash", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
        let image = json!({"model": "Vendor-Imagegen-4.5", "prompt": "a fox"});
        let chat_hold = quoted_hold(&env, "/api/v1/chat/completions", &chat).await;
        let image_hold = quoted_hold(&env, "/api/v1/images/generations", &image).await;
        let audio = json!({"model": "AudioGen-1.0", "text_prompt": "Hello."});
        let speech = json!({"model": "AudioGen-1.0", "input": "Hello.", "voice": "alloy"});
        let audio_hold = UsdAmount::from_micros(300_000); // 120 s at 2,500 micro-USD
        let messages =
            json!({"model": "LangA-V4-flash", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]});
        let before = env.balance().await;
        let refused: [(&str, &Value, String); 7] = [
            ("/api/v1/chat/completions", &chat, below(chat_hold)),
            ("/v1/chat/completions", &chat, below(chat_hold)),
            ("/api/v1/chat/completions/quote", &chat, below(chat_hold)),
            ("/api/v1/images/generations", &image, below(image_hold)),
            ("/api/v1/images/generations/quote", &image, below(image_hold)),
            ("/api/v1/audio/generations", &audio, below(audio_hold)),
            ("/v1/audio/speech", &speech, "0".into()),
        ];
        for (path, body, cap) in refused {
            let ctx = env.ctx(&format!("{path} capped at {cap}"));
            let reply = capped(&env, path, &cap, body).await;
            assert_eq!(reply.status, 402, "{ctx}: {}", reply.text());
            assert_eq!(reply.json["error"]["code"], "max_cost_exceeded", "{ctx}");
            let message = reply.json["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(&cap) || cap == "0", "{ctx}: the cap is named: {message}");
            assert!(message.contains("X-Max-Cost"), "{ctx}: {message}");
        }
        let headers = [("x-max-cost", "0.000001"), ("anthropic-version", "2023-06-01")];
        let reply = env.server.post_json_with("/v1/messages", Some(&env.key), &headers, &messages).await;
        assert_eq!(
            (reply.status, &reply.json["error"]["code"]),
            (402, &json!("max_cost_exceeded")),
            "{}",
            reply.text()
        );
        assert_eq!(env.balance().await, before, "{}", env.ctx("nothing held or charged"));
        assert!(env.tasks().await.is_empty(), "{}", env.ctx("no task was made"));

        // Not an amount: 400, nothing held.
        for bad in ["abc", "-1", "0.1234567", "1e3", "", "0x10"] {
            let reply = capped(&env, "/api/v1/chat/completions", bad, &chat).await;
            reply.assert_error(400, "invalid_request", &env.ctx(&format!("X-Max-Cost {bad:?}")));
        }
        assert_eq!(env.balance().await, before, "{}", env.ctx("nothing held for a bad header"));
        // A route that neither bills nor quotes does not read the header.
        let headers = [("authorization", format!("Bearer {}", env.key)), ("x-max-cost", "{}".to_owned())];
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let tasks = env.server.request(http::Method::GET, "/api/v1/tasks", &headers).await;
        assert_eq!(tasks.status, 200, "{}: {}", env.ctx("a read ignores X-Max-Cost"), tasks.text());
        let cancel = env.server.request(http::Method::DELETE, "/api/v1/tasks/task_none", &headers).await;
        // (This key may not cancel: 401, not the header's 400.)
        assert_eq!(cancel.status, 401, "{}: {}", env.ctx("a cancellation ignores X-Max-Cost"), cancel.text());

        // A cap exactly at the hold is served; the charge stays within it.
        for (path, body, hold) in
            [("/api/v1/chat/completions", &chat, chat_hold), ("/api/v1/images/generations", &image, image_hold)]
        {
            let ctx = env.ctx(&format!("{path} capped at its hold"));
            let reply = capped(&env, path, &hold.to_string(), body).await;
            assert_eq!(reply.status, 200, "{ctx}: {}", reply.text());
            let task = env.settled_task(reply.header("x-svc-task-id").expect("task")).await;
            assert!(amount(&task["billing"]["actual_amount"], &ctx) <= hold, "{ctx}: {task}");
        }
        env.assert_books("after the caps").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_reporting_more_than_the_hold_is_charged_at_most_the_cap() {
    for db in databases() {
        let env = Env::new(&db, "10", TIMEOUT, SCOPES).await;
        // The simulator reports a million prompt tokens for a two-word prompt: 0.14 USD, far above
        // the call's hold.
        let chat = |content: &str| {
            json!({"model": "LangA-V4-flash", "max_tokens": 8, "sim_prompt_tokens": 1_000_000,
                   "messages": [{"role": "user", "content": content}]})
        };
        let hold = quoted_hold(&env, "/api/v1/chat/completions", &chat("hi")).await;
        let cap = UsdAmount::from_micros(hold.micros() + 500);
        let (before, overdraft_before) = (env.balance().await, overdraft(&env).await);
        let reply = capped(&env, "/api/v1/chat/completions", &cap.to_string(), &chat("hi")).await;
        let ctx = env.ctx("capped");
        assert_eq!(reply.status, 200, "{ctx}: {}", reply.text());
        let billing = &reply.json["svc"]["billing"];
        assert_eq!(
            amount(&billing["actual_amount"], &ctx),
            cap,
            "{ctx}: the cap is charged, not the report: {billing}"
        );
        assert_eq!(env.balance().await, before.checked_sub(cap).expect("fits"), "{ctx}: the balance moved by the cap");
        let reported = 140_000 + 8 * 28 / 100; // 1M prompt tokens at 0.14 USD/M, 8 output tokens at 0.28 USD/M
        let counted = overdraft(&env).await - overdraft_before;
        assert!(counted >= reported - cap.micros() - 1, "{ctx}: the excess is counted: {counted}");

        // Without a cap the same call is charged what the upstream reported (and counted as overdraft).
        // (Another prompt of the same length: the simulator would report a seen one as cached.)
        let reply = env.post("/api/v1/chat/completions", &chat("ho")).await;
        let charged = amount(&reply.json["svc"]["billing"]["actual_amount"], &ctx);
        assert!(charged.micros() >= 140_000, "{}: uncapped: {charged}", env.ctx("uncapped"));
        env.assert_books("after the capped charge").await;
        env.server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_video_task_keeps_its_cap_from_submission_to_settlement() {
    for db in databases() {
        let env = common::video::VideoEnv::new(&db, "127.0.0.1", "10").await;
        let video = json!({"model": "videogen-2-0-mini", "prompt": "a fox", "resolution": "480p", "duration": 5});
        let before = env.balance().await;
        let refused = capped(&env, "/api/v1/tasks", "0.01", &video).await;
        let ctx = env.ctx("video capped below its hold");
        assert_eq!(
            (refused.status, &refused.json["error"]["code"]),
            (402, &json!("max_cost_exceeded")),
            "{ctx}: {}",
            refused.text()
        );
        assert_eq!(env.balance().await, before, "{ctx}: nothing held");
        let message = refused.json["error"]["message"].as_str().unwrap_or_default();
        let hold = message.split_whitespace().nth(3).unwrap_or_else(|| panic!("{ctx}: {message}"));
        let hold = amount(&json!(hold), &ctx);
        assert!(hold.micros() > 10_000, "{ctx}: {message}");

        let accepted = capped(&env, "/api/v1/tasks", &hold.to_string(), &video).await;
        assert_eq!(accepted.status, 202, "{}: {}", env.ctx("video capped at its hold"), accepted.text());
        let id = accepted.json["id"].as_str().expect("task id").to_owned();
        let task = env.drive(&id, "succeeded").await;
        let ctx = env.ctx("video settled");
        assert_eq!(task["billing"]["status"], "settled", "{ctx}: {task}");
        assert!(amount(&task["billing"]["actual_amount"], &ctx) <= hold, "{ctx}: {task}");
        env.assert_books("after the capped video").await;
        env.env.server.stop().await;
    }
}
