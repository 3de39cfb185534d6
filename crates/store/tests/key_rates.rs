//! Per-key rate counters (issue 25): grants of one key's minute never pass its limits, also when
//! two stores (two replicas) on one database grant at once; a new minute starts from zero; tokens
//! given back are granted again, and only within the window they were granted in. SQLite always,
//! PostgreSQL when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use std::num::NonZeroU32;

use common::{TestDb, name};
use domain::{ApiKeyId, KeyRates, RateAsk, RateGrant, RateLeases, RateLimitKind};
use store::Store;

fn ask(window: i64, rpm: u32, tpm: u32, need: (u64, u64), want: (u64, u64)) -> RateAsk {
    RateAsk {
        window,
        rates: KeyRates { rpm: NonZeroU32::new(rpm), tpm: NonZeroU32::new(tpm) },
        need_requests: need.0,
        want_requests: want.0,
        need_tokens: need.1,
        want_tokens: want.1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_granting_at_once_never_pass_the_limit() {
    for db in TestDb::all("rates").await {
        let a = db.open().await;
        let b = Store::connect(&db.url).await.expect("second replica");
        let ctx = name(&a);
        let key = ApiKeyId(format!("key_{}", uuid::Uuid::new_v4().simple()));
        // 40 grants of 1..3 requests from each replica against rpm = 50, all in window 7.
        let mut racers = Vec::new();
        for i in 0..80u64 {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            let key = key.clone();
            racers.push(tokio::spawn(
                async move { store.lease_rate(&key, &ask(7, 50, 0, (1, 0), (1 + i % 3, 0))).await },
            ));
        }
        let mut granted = 0;
        let mut refused = 0;
        for racer in racers {
            match racer.await.expect("racer") {
                Ok(RateGrant::Granted { window: 7, requests, tokens: 0 }) => granted += requests,
                Ok(RateGrant::Refused { window: 7, limit: RateLimitKind::Requests }) => refused += 1,
                other => panic!("{ctx}: {other:?}"),
            }
        }
        assert_eq!(granted, 50, "{ctx}: exactly the limit was granted");
        assert!(refused > 0, "{ctx}");
        // The next minute starts from zero.
        let next = a.lease_rate(&key, &ask(8, 50, 0, (1, 0), (50, 0))).await.expect("grant");
        assert_eq!(next, RateGrant::Granted { window: 8, requests: 50, tokens: 0 }, "{ctx}");
        // A replica whose clock is behind counts into the later window.
        let behind = b.lease_rate(&key, &ask(7, 50, 0, (1, 0), (1, 0))).await.expect("grant");
        assert_eq!(behind, RateGrant::Refused { window: 8, limit: RateLimitKind::Requests }, "{ctx}");
        b.close().await.expect("close");
        a.close().await.expect("close");
        db.cleanup().await;
    }
}

#[tokio::test]
async fn tokens_given_back_are_granted_again_within_their_window() {
    for db in TestDb::all("rate_tokens").await {
        let store = db.open().await;
        let ctx = name(&store);
        let key = ApiKeyId(format!("key_{}", uuid::Uuid::new_v4().simple()));
        let first = store.lease_rate(&key, &ask(3, 0, 1000, (0, 800), (0, 900))).await.expect("grant");
        assert_eq!(first, RateGrant::Granted { window: 3, requests: 0, tokens: 900 }, "{ctx}");
        let refused = store.lease_rate(&key, &ask(3, 0, 1000, (0, 200), (0, 200))).await.expect("answer");
        assert_eq!(refused, RateGrant::Refused { window: 3, limit: RateLimitKind::Tokens }, "{ctx}");
        store.return_tokens(&key, 3, 700).await.expect("give back");
        let again = store.lease_rate(&key, &ask(3, 0, 1000, (0, 200), (0, 5000))).await.expect("grant");
        assert_eq!(again, RateGrant::Granted { window: 3, requests: 0, tokens: 800 }, "{ctx}: 200 + 700 given back");
        // Tokens of a past window are not given to the current one; never below zero.
        store.lease_rate(&key, &ask(4, 0, 1000, (0, 1000), (0, 1000))).await.expect("grant");
        store.return_tokens(&key, 3, 500).await.expect("give back to a past window");
        let full = store.lease_rate(&key, &ask(4, 0, 1000, (0, 1), (0, 1))).await.expect("answer");
        assert_eq!(full, RateGrant::Refused { window: 4, limit: RateLimitKind::Tokens }, "{ctx}");
        store.return_tokens(&key, 4, 5000).await.expect("give back more than granted");
        let all = store.lease_rate(&key, &ask(4, 0, 1000, (0, 1000), (0, 1000))).await.expect("grant");
        assert_eq!(all, RateGrant::Granted { window: 4, requests: 0, tokens: 1000 }, "{ctx}");
        store.close().await.expect("close");
        db.cleanup().await;
    }
}
