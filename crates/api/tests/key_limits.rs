//! Per-key limits through the HTTP API (issue 25): a key is refused as expired from its `expires_at`
//! on, to the millisecond, and a model outside a key's allow-list is refused with 401
//! `invalid_api_key` before anything is held, on chat calls and video tasks alike; both refusals
//! are counted by reason. SQLite always, PostgreSQL when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use common::video::VideoEnv;
use common::{Env, Server, databases, unique};
use domain::{Clock, KeyLimits, ModelAllowList, Scope, Timestamp};
use serde_json::json;
use service::{Gateway, Ports};
use tokio::net::TcpListener;

/// A clock the test moves by hand.
#[derive(Debug)]
struct HandClock(AtomicI64);

impl Clock for HandClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

const EXPIRY: i64 = 1_900_000_000_000;

/// Limits with only an allow-list.
fn allow(models: &str) -> KeyLimits {
    KeyLimits { models: Some(ModelAllowList::parse(models).expect("allow-list")), ..KeyLimits::default() }
}

#[tokio::test]
async fn a_key_expires_at_the_exact_millisecond() {
    for db in databases() {
        let clock = Arc::new(HandClock(AtomicI64::new(EXPIRY - 1)));
        let gateway_clock: Arc<dyn Clock> = clock.clone();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
        let server =
            Server::launch_on(&db, listener, move |ports, _| Gateway::new(Ports { clock: gateway_clock, ..ports }))
                .await;
        let label = server.label;
        let user = server.user("1").await;
        let key = server
            .key_with(
                &user.id,
                &[Scope::ModelsRead],
                KeyLimits { expires_at: Some(Timestamp(EXPIRY)), ..KeyLimits::default() },
            )
            .await;
        assert_eq!(key.key.expires_at, Some(Timestamp(EXPIRY)), "{label}");

        let before = server.get("/api/v1/models", Some(&key.secret)).await;
        assert_eq!(before.status, 200, "{label}: one millisecond before expiry");
        for at in [EXPIRY, EXPIRY + 1_000] {
            clock.0.store(at, Ordering::SeqCst);
            let after = server.get("/api/v1/models", Some(&key.secret)).await;
            after.assert_error(401, "invalid_api_key", &format!("{label}: at {at}"));
            let message = after.json["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("expired"), "{label}: the message says the key expired: {message}");
        }
        let metrics = server.gateway.metrics_text().await;
        assert!(metrics.contains("gateway_key_refusals_total{reason=\"expired\"} 2"), "{label}: {metrics}");
        assert!(!metrics.contains(key.key.id.as_str()), "{label}: no key id in the metrics");
        server.stop().await;
    }
}

#[tokio::test]
async fn a_chat_call_outside_the_allow_list_is_refused_before_any_hold() {
    for db in databases() {
        let scopes = [Scope::LanguageCreate, Scope::TaskRead];
        let env = Env::new(&db, "10", Duration::from_secs(2), &scopes).await;
        let (start, entries) = env.assert_ledger("start").await;
        let body = |model: &str| {
            json!({"model": model, "messages": [{"role": "user", "content": unique("hi ")}], "max_tokens": 100,
                   "thinking": {"type": "disabled"}})
        };
        let narrow = env.server.key_with(&env.user.id, &scopes, allow("image,LangB-2.0-pro")).await.secret;
        let refused = env.server.post_json("/api/v1/chat/completions", Some(&narrow), &body("LangA-V4-flash")).await;
        refused.assert_error(401, "invalid_api_key", &env.ctx("a model outside the list"));
        let message = refused.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("LangA-V4-flash"), "{}: {message}", env.ctx("the message names the model"));
        let (balance, n) = env.assert_ledger("after the refusal").await;
        assert_eq!((balance, n), (start, entries), "{}: balance and ledger untouched", env.ctx("refusal"));
        assert!(env.tasks().await.is_empty(), "{}: no task", env.ctx("refusal"));

        let allowed = env.server.post_json("/api/v1/chat/completions", Some(&narrow), &body("LangB-2.0-pro")).await;
        assert_eq!(allowed.status, 200, "{}: {}", env.ctx("a named model"), String::from_utf8_lossy(&allowed.raw));
        let by_kind = env.server.key_with(&env.user.id, &scopes, allow("language")).await.secret;
        let allowed = env.server.post_json("/api/v1/chat/completions", Some(&by_kind), &body("LangA-V4-flash")).await;
        assert_eq!(allowed.status, 200, "{}: {}", env.ctx("a listed kind"), String::from_utf8_lossy(&allowed.raw));
        let metrics = env.server.gateway.metrics_text().await;
        assert!(metrics.contains("gateway_key_refusals_total{reason=\"model\"} 1"), "{}: {metrics}", env.ctx("metric"));
        env.server.stop().await;
    }
}

#[tokio::test]
async fn a_video_task_outside_the_allow_list_is_refused_before_any_hold() {
    for db in databases() {
        let env = VideoEnv::new(&db, "", "10").await;
        let (start, entries) = env.assert_ledger("start").await;
        let scopes = [Scope::VideoCreate, Scope::TaskRead];
        let language = env.server.key_with(&env.user.id, &scopes, allow("language")).await.secret;
        let body = json!({"model": "videogen-2-0", "prompt": "a fox"});
        let refused = env.server.post_json("/api/v1/tasks", Some(&language), &body).await;
        refused.assert_error(401, "invalid_api_key", &env.ctx("a video task with a language-only key"));
        let (balance, n) = env.assert_ledger("after the refusal").await;
        assert_eq!((balance, n), (start, entries), "{}: balance and ledger untouched", env.ctx("refusal"));
        assert!(env.tasks().await.is_empty(), "{}: no task", env.ctx("refusal"));

        let video = env.server.key_with(&env.user.id, &scopes, allow("video")).await.secret;
        let created = env.server.post_json("/api/v1/tasks", Some(&video), &body).await;
        assert_eq!(created.status, 202, "{}: {}", env.ctx("an allowed kind"), String::from_utf8_lossy(&created.raw));
        assert_eq!(env.tasks().await.len(), 1, "{}: the allowed task", env.ctx("allowed"));
        env.env.server.stop().await;
    }
}

#[tokio::test]
async fn a_key_used_from_outside_its_address_list_is_refused() {
    for db in databases() {
        let scopes = [Scope::LanguageCreate, Scope::ModelsRead, Scope::TaskRead];
        let env = Env::new(&db, "10", Duration::from_secs(2), &scopes).await;
        let (start, entries) = env.assert_ledger("start").await;
        let only = |list: &str| KeyLimits {
            allow_ips: Some(domain::IpAllowList::parse(list).expect("list")),
            ..KeyLimits::default()
        };
        // The tests reach the server from 127.0.0.1.
        let elsewhere = env.server.key_with(&env.user.id, &scopes, only("10.0.0.0/8,2001:db8::/32")).await.secret;
        let refused = env.server.get("/api/v1/models", Some(&elsewhere)).await;
        refused.assert_error(401, "invalid_api_key", &env.ctx("a key for other networks"));
        let message = refused.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("127.0.0.1"), "{}: {message}", env.ctx("the message names the address"));
        let body = json!({"model": "LangA-V4-flash", "messages": [{"role": "user", "content": unique("hi ")}],
                          "max_tokens": 10, "thinking": {"type": "disabled"}});
        let call = env.server.post_json("/api/v1/chat/completions", Some(&elsewhere), &body).await;
        call.assert_error(401, "invalid_api_key", &env.ctx("a call from outside the list"));
        assert_eq!(env.assert_ledger("after the refusals").await, (start, entries), "{}", env.ctx("untouched"));

        let local = env.server.key_with(&env.user.id, &scopes, only("127.0.0.0/8")).await.secret;
        let listed = env.server.get("/api/v1/models", Some(&local)).await;
        assert_eq!(listed.status, 200, "{}: {}", env.ctx("from inside"), String::from_utf8_lossy(&listed.raw));
        let call = env.server.post_json("/api/v1/chat/completions", Some(&local), &body).await;
        assert_eq!(call.status, 200, "{}: {}", env.ctx("a call from inside"), String::from_utf8_lossy(&call.raw));
        // A forwarded address is not believed without a trusted proxy.
        let spoof = [("authorization", format!("Bearer {elsewhere}")), ("x-forwarded-for", "10.1.2.3".to_owned())];
        let headers: Vec<(&str, &str)> = spoof.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let spoofed = env.server.request(http::Method::GET, "/api/v1/models", &headers).await;
        spoofed.assert_error(401, "invalid_api_key", &env.ctx("X-Forwarded-For from an untrusted peer"));
        let metrics = env.server.gateway.metrics_text().await;
        assert!(metrics.contains("gateway_key_refusals_total{reason=\"ip\"} 3"), "{}: {metrics}", env.ctx("metric"));
        env.server.stop().await;
    }
}
