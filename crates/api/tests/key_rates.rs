//! Per-key rate limits through the HTTP API (issue 25): with `rpm = N` the N-th generation call of a
//! UTC minute passes and the next is 429 `rate_limit_exceeded` with `Retry-After` until the minute
//! ends; `tpm` reserves a language call's token estimate at admission and settles it on the tokens
//! used; two replicas on one database admit at most the limit together; refusals hold no money and
//! store no task. SQLite always, PostgreSQL when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use common::{Db, Reply, SIM_API_KEY, Server, databases, unique};
use domain::{Clock, Scope, Timestamp};
use serde_json::{Value, json};
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

/// 2026-11-26T16:12:00Z, the start of a UTC minute.
const MINUTE: i64 = 1_795_709_520_000;

const SCOPES: [Scope; 2] = [Scope::LanguageCreate, Scope::TaskRead];

/// A chat upstream on a fresh simulator (keep the handle alive).
async fn chat_upstream() -> (Arc<upstream::HttpUpstream>, sim::SimHandle) {
    let (addr, sim) = sim::spawn().await.expect("start the upstream simulator");
    let config = upstream::UpstreamConfig {
        platform_key: SIM_API_KEY.into(),
        ..upstream::UpstreamConfig::for_simulator(addr, Duration::from_secs(2), Duration::from_secs(5))
    };
    (Arc::new(upstream::HttpUpstream::new(config).expect("upstream adapter")), sim)
}

/// A gateway with a chat upstream whose time is `clock`.
async fn server(db: &Db, clock: &Arc<HandClock>) -> (Server, sim::SimHandle) {
    let (chat, sim) = chat_upstream().await;
    let clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let server =
        Server::launch_on(db, listener, move |ports, _| Gateway::new(Ports { clock, ..ports }.with_upstream(chat)))
            .await;
    (server, sim)
}

fn chat(max_tokens: u64, extra: Value) -> Value {
    let mut body = json!({"model": "LangA-V4-flash", "messages": [{"role": "user", "content": unique("hi ")}],
        "max_tokens": max_tokens, "thinking": {"type": "disabled"}});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

/// Asserts a 429 `rate_limit_exceeded` whose message names `limit` and whose `Retry-After` is `retry`
/// (when given); returns the message.
fn assert_rate_refusal(reply: &Reply, limit: &str, retry: Option<&str>, ctx: &str) -> String {
    reply.assert_error(429, "rate_limit_exceeded", ctx);
    let message = reply.json["error"]["message"].as_str().unwrap_or_default().to_owned();
    assert!(message.contains(limit), "{ctx}: the message names the limit: {message}");
    let after = reply.header("retry-after");
    assert!(after.is_some_and(|s| s.parse::<u64>().is_ok_and(|n| n >= 1)), "{ctx}: Retry-After {after:?}");
    if let Some(retry) = retry {
        assert_eq!(after, Some(retry), "{ctx}: seconds until the minute ends");
    }
    message
}

async fn task_count(server: &Server, user: &domain::UserId) -> u64 {
    let page = domain::ports::PageRequest { page: 1, page_size: 1 };
    domain::ports::TaskStore::list_tasks(&server.store, user, Default::default(), page).await.expect("tasks").1
}

#[tokio::test]
async fn the_nth_call_of_a_minute_passes_and_the_next_is_429_until_the_minute_ends() {
    for db in databases() {
        let clock = Arc::new(HandClock(AtomicI64::new(MINUTE + 30_000)));
        let (server, _sim) = server(&db, &clock).await;
        let ctx = |what: &str| format!("{}: {what}", server.label);
        let user = server.user("10").await;
        let key = server.key_with_rates(&user.id, &SCOPES, 3, 0).await.secret;
        // Chat and the message-style route count alike.
        for i in 0..2 {
            let ok = server.post_json("/api/v1/chat/completions", Some(&key), &chat(100, json!({}))).await;
            assert_eq!(ok.status, 200, "{}: {}", ctx(&format!("call {i}")), ok.json);
        }
        let headers = [("x-api-key", key.as_str()), ("anthropic-version", "2023-06-01")];
        let native =
            json!({"model": "LangA-V4-flash", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]});
        let third = server.post_json_with("/v1/messages", None, &headers, &native).await;
        assert_eq!(third.status, 200, "{}: {}", ctx("the third call, the limit"), third.json);

        let (balance, entries) = server.assert_ledger(&user.id, &ctx("before the refusal")).await;
        let tasks = task_count(&server, &user.id).await;
        let refused = server.post_json("/api/v1/chat/completions", Some(&key), &chat(100, json!({}))).await;
        assert_rate_refusal(&refused, "3 requests per minute", Some("30"), &ctx("the fourth call"));
        assert_eq!(server.assert_ledger(&user.id, &ctx("refusal")).await, (balance, entries), "{}", ctx("no hold"));
        assert_eq!(task_count(&server, &user.id).await, tasks, "{}", ctx("no task"));

        clock.0.store(MINUTE + 59_001, Ordering::SeqCst);
        let last_second = server.post_json("/api/v1/chat/completions", Some(&key), &chat(100, json!({}))).await;
        assert_rate_refusal(&last_second, "requests per minute", Some("1"), &ctx("the minute's last second"));
        clock.0.store(MINUTE + 60_000, Ordering::SeqCst);
        let next = server.post_json("/api/v1/chat/completions", Some(&key), &chat(100, json!({}))).await;
        assert_eq!(next.status, 200, "{}: {}", ctx("the next minute"), next.json);

        let metrics = server.gateway.metrics_text().await;
        assert!(metrics.contains("gateway_key_refusals_total{reason=\"rate\"} 2"), "{}: {metrics}", ctx("metrics"));
        server.stop().await;
    }
}

#[tokio::test]
async fn tokens_are_reserved_at_admission_and_given_back_at_settlement() {
    for db in databases() {
        let clock = Arc::new(HandClock(AtomicI64::new(MINUTE)));
        let (server, _sim) = server(&db, &clock).await;
        let ctx = |what: &str| format!("{}: {what}", server.label);
        let user = server.user("10").await;
        let key = server.key_with_rates(&user.id, &SCOPES, 0, 10_000).await.secret;
        // A slow call reserves its prompt bound and 6,000 output tokens while it runs.
        let slow = {
            let (addr_server, key) = (&server, key.clone());
            let body = chat(6_000, json!({"sim_latency_ms": 1500}));
            async move { addr_server.post_json("/api/v1/chat/completions", Some(&key), &body).await }
        };
        let burst = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            server.post_json("/api/v1/chat/completions", Some(&key), &chat(6_000, json!({}))).await
        };
        let (slow, refused) = tokio::join!(slow, burst);
        assert_eq!(slow.status, 200, "{}: {}", ctx("the slow call"), slow.json);
        assert_rate_refusal(&refused, "10000 tokens per minute", Some("60"), &ctx("a second reservation"));
        // Settled on what it used (a few dozen tokens): the rest is free again within the minute.
        let used = slow.json["usage"]["total_tokens"].as_u64().unwrap_or(u64::MAX);
        assert!(used < 1_000, "{}: {used}", ctx("the simulator's usage"));
        for i in 0..2 {
            let again = server.post_json("/api/v1/chat/completions", Some(&key), &chat(6_000, json!({}))).await;
            assert_eq!(again.status, 200, "{}: {}", ctx(&format!("after settlement {i}")), again.json);
        }
        let whole = server.post_json("/api/v1/chat/completions", Some(&key), &chat(10_000, json!({}))).await;
        assert_rate_refusal(&whole, "more than the whole limit", None, &ctx("above the whole limit"));
        server.assert_ledger(&user.id, &ctx("the end")).await;
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_bursting_on_one_key_admit_at_most_its_limit() {
    for db in databases() {
        let clock = Arc::new(HandClock(AtomicI64::new(MINUTE + 10_000)));
        let (a, _sim_a) = server(&db, &clock).await;
        let (chat_b, _sim_b) = chat_upstream().await;
        let clock_b: Arc<dyn Clock> = Arc::clone(&clock) as Arc<dyn Clock>;
        let b = a.replica(move |ports| Gateway::new(Ports { clock: clock_b, ..ports }.with_upstream(chat_b))).await;
        let label = a.label;
        let ctx = |what: &str| format!("{label}: {what}");
        let user = a.user("100").await;
        let key = a.key_with_rates(&user.id, &SCOPES, 32, 0).await.secret;
        let (a, b) = (Arc::new(a), Arc::new(b));
        let mut calls = tokio::task::JoinSet::new();
        for i in 0..80 {
            let server = Arc::clone(if i % 2 == 0 { &a } else { &b });
            let key = key.clone();
            calls.spawn(
                async move { server.post_json("/api/v1/chat/completions", Some(&key), &chat(50, json!({}))).await },
            );
        }
        let replies = calls.join_all().await;
        let admitted = replies.iter().filter(|r| r.status == 200).count();
        for reply in replies.iter().filter(|r| r.status != 200) {
            assert_rate_refusal(reply, "32 requests per minute", None, &ctx("a refused call"));
        }
        // At most the limit; at least the limit less the headroom each replica may hold unused (32 / 16).
        assert!((28..=32).contains(&admitted), "{}: admitted {admitted}", ctx("the burst"));
        assert_eq!(task_count(&a, &user.id).await, u64::try_from(admitted).unwrap_or(0), "{}", ctx("one task each"));
        a.assert_ledger(&user.id, &ctx("after the burst")).await;
        let (Ok(a), Ok(b)) = (Arc::try_unwrap(a), Arc::try_unwrap(b)) else { panic!("a call still holds a server") };
        b.stop().await;
        a.stop().await;
    }
}
