//! Unit tests of the rate-limit blocks on a real SQLite store, with a clock moved by hand.

use std::sync::atomic::{AtomicI64, Ordering};

use super::*;

/// A clock the test moves by hand.
#[derive(Debug)]
struct HandClock(AtomicI64);

impl Clock for HandClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

/// 2026-11-26T16:12:00Z, the start of a minute.
const MINUTE: i64 = 1_795_709_520_000;

async fn store() -> store::Store {
    let dir = std::env::temp_dir().join(format!("gw-rates-{}", uuid::Uuid::new_v4().simple()));
    store::Store::open(&format!("sqlite://{}/gw.db?mode=rwc", dir.display())).await.expect("store")
}

fn rates_on(store: &store::Store, clock: &Arc<HandClock>) -> Rates {
    let clock: Arc<dyn Clock> = Arc::clone(clock) as Arc<dyn Clock>;
    Rates::new(Arc::new(store.clone()), clock)
}

fn claim(key: &str, rpm: u32, tpm: u32, tokens: Option<u64>) -> RateClaim {
    RateClaim {
        key: ApiKeyId(key.to_owned()),
        rates: KeyRates { rpm: NonZeroU32::new(rpm), tpm: NonZeroU32::new(tpm) },
        tokens,
        ancestors: Vec::new(),
    }
}

fn refusal(result: Result<Option<RateTicket>, ServiceError>) -> (String, u64) {
    match result {
        Err(ServiceError::RateLimitExceeded { message, retry_after_secs }) => (message, retry_after_secs),
        other => panic!("expected a rate refusal, got {other:?}"),
    }
}

#[test]
fn the_window_is_a_minute_start() {
    assert_eq!(MINUTE % domain::RATE_WINDOW_MS, 0);
}

#[tokio::test]
async fn a_key_without_limits_costs_nothing() {
    let store = store().await;
    let clock = Arc::new(HandClock(AtomicI64::new(MINUTE)));
    let rates = rates_on(&store, &clock);
    for _ in 0..100 {
        assert!(rates.admit(&claim("key_free", 0, 0, Some(1_000_000))).await.expect("admit").is_none());
    }
    assert!(rates.inner.blocks.lock().expect("lock").is_empty(), "nothing is remembered for it");
}

#[tokio::test]
async fn the_nth_request_of_a_minute_passes_and_the_next_waits_for_the_next_minute() {
    let store = store().await;
    let clock = Arc::new(HandClock(AtomicI64::new(MINUTE + 15_500)));
    let rates = rates_on(&store, &clock);
    let limited = claim("key_rpm", 40, 0, None);
    for i in 0..40 {
        rates.admit(&limited).await.unwrap_or_else(|e| panic!("call {i}: {e}")).expect("a ticket");
    }
    let (message, retry) = refusal(rates.admit(&limited).await);
    assert!(message.contains("40 requests per minute"), "{message}");
    assert_eq!(retry, 45, "44.5 s until the minute ends, rounded up");
    clock.0.store(MINUTE + 59_999, Ordering::SeqCst);
    assert_eq!(refusal(rates.admit(&limited).await).1, 1, "at least one second");
    clock.0.store(MINUTE + 60_000, Ordering::SeqCst);
    for i in 0..40 {
        rates.admit(&limited).await.unwrap_or_else(|e| panic!("next minute, call {i}: {e}"));
    }
    refusal(rates.admit(&limited).await);
}

#[tokio::test]
async fn children_share_their_parents_rates() {
    let store = store().await;
    let clock = Arc::new(HandClock(AtomicI64::new(MINUTE)));
    let rates = rates_on(&store, &clock);
    let parent = (ApiKeyId("key_parent".into()), KeyRates { rpm: NonZeroU32::new(5), tpm: NonZeroU32::new(1_000) });
    let child =
        |i: u32| RateClaim { ancestors: vec![parent.clone()], ..claim(&format!("key_child_{i}"), 5, 1_000, Some(150)) };
    let mut tickets = Vec::new();
    for i in 0..5 {
        tickets.push(rates.admit(&child(i)).await.unwrap_or_else(|e| panic!("call {i}: {e}")).expect("a ticket"));
    }
    let (message, _) = refusal(rates.admit(&child(5)).await);
    assert!(message.contains("5 requests per minute"), "the sixth call through a sixth child: {message}");
    // Tokens: each ticket reserved 150 of the parent's 1,000; settling gives the unused part back.
    for ticket in tickets {
        ticket.settle(10).await;
    }
    clock.0.store(MINUTE + 60_000, Ordering::SeqCst);
    let big = RateClaim { ancestors: vec![parent.clone()], ..claim("key_child_9", 0, 0, Some(1_001)) };
    let (message, _) = refusal(rates.admit(&big).await);
    assert!(message.contains("1000 tokens per minute"), "the parent's tpm binds a child without one: {message}");
}

#[tokio::test]
async fn tokens_are_reserved_at_admission_and_settled_on_use() {
    let store = store().await;
    let clock = Arc::new(HandClock(AtomicI64::new(MINUTE)));
    let rates = rates_on(&store, &clock);
    let call = claim("key_tpm", 0, 1000, Some(300));
    let first = rates.admit(&call).await.expect("admit").expect("ticket");
    let second = rates.admit(&call).await.expect("admit").expect("ticket");
    let third = rates.admit(&call).await.expect("admit").expect("ticket");
    let (message, _) = refusal(rates.admit(&call).await);
    assert!(message.contains("1000 tokens per minute") && message.contains("300 tokens"), "{message}");
    // An image call of the same key does not count against its tokens.
    assert!(rates.admit(&claim("key_tpm", 0, 1000, None)).await.expect("admit").is_some());
    // Settled on 100 tokens: 200 come back, so one more 300-token call fits (100 + 200).
    first.settle(100).await;
    let fourth = rates.admit(&call).await.expect("after settlement").expect("ticket");
    refusal(rates.admit(&call).await);
    // A refunded (or dropped) call gives back all it reserved.
    second.settle(0).await;
    drop(third);
    for _ in 0..2 {
        rates.admit(&call).await.expect("given back").expect("ticket").settle(300).await;
    }
    refusal(rates.admit(&call).await);
    // Usage above the reservation is a debt paid from the next grant.
    fourth.settle(400).await;
    clock.0.store(MINUTE + 60_000, Ordering::SeqCst);
    let whole = claim("key_tpm", 0, 1000, Some(1000));
    rates.admit(&whole).await.expect("a new minute").expect("ticket").settle(1000).await;
    // A call reserving more than the whole limit is told so.
    let (message, _) = refusal(rates.admit(&claim("key_tpm", 0, 1000, Some(1001))).await);
    assert!(message.contains("more than the whole limit"), "{message}");
}

#[tokio::test]
async fn a_block_returns_its_surplus_so_another_replica_can_use_it() {
    let store = store().await;
    let clock = Arc::new(HandClock(AtomicI64::new(MINUTE)));
    let (a, b) = (rates_on(&store, &clock), rates_on(&store, &clock));
    let call = claim("key_share", 0, 1600, Some(700));
    // Replica a reserves 1400 (and holds its headroom, 100); replica b has no room.
    let (one, two) = (a.admit(&call).await.expect("a").expect("t"), a.admit(&call).await.expect("a").expect("t"));
    refusal(b.admit(&call).await);
    // Both settle on 10 tokens: a keeps twice its headroom at most and gives the rest back.
    one.settle(10).await;
    two.settle(10).await;
    let held = a.inner.blocks.lock().expect("lock").get(&ApiKeyId("key_share".into())).map(|b| b.tokens);
    assert_eq!(held, Some(100), "a keeps one headroom (1600 / 16)");
    b.admit(&call).await.expect("b now fits").expect("ticket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_bursting_admit_at_most_the_limit() {
    let store = store().await;
    let clock = Arc::new(HandClock(AtomicI64::new(MINUTE)));
    let (a, b) = (rates_on(&store, &clock), rates_on(&store, &clock));
    let limited = claim("key_burst", 100, 0, None);
    let mut calls = Vec::new();
    for i in 0..300 {
        let (rates, limited) = (if i % 2 == 0 { a.clone() } else { b.clone() }, limited.clone());
        calls.push(tokio::spawn(async move { rates.admit(&limited).await.map(|t| t.is_some()) }));
    }
    let mut admitted = 0;
    for call in calls {
        match call.await.expect("call") {
            Ok(true) => admitted += 1,
            Ok(false) => panic!("a limited key always gets a ticket"),
            Err(ServiceError::RateLimitExceeded { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    // At most the limit; at least the limit less the headroom one replica may hold unused (100 / 16).
    assert!((94..=100).contains(&admitted), "admitted {admitted}");
}
