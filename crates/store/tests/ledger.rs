//! The database ledger under concurrency, on SQLite and (when `TEST_DATABASE_URL` is set) PostgreSQL:
//! no overdraft, exactly-once settlement, and every balance equal to the sum of its ledger.

#![allow(clippy::panic)] // Test failures are panics.

use std::sync::Arc;

use billing::{Ledger, LedgerError};
use domain::ports::AccountStore;
use domain::{BillingStatus, LedgerKind, NewUser, TaskId, UsdAmount, UserId};
use store::Store;

/// A fresh SQLite file, and PostgreSQL too when `TEST_DATABASE_URL` names one.
async fn stores(name: &str) -> Vec<Store> {
    let dir =
        std::env::temp_dir().join(format!("gw-store-{name}-{}-{}", std::process::id(), uuid::Uuid::new_v4().simple()));
    let mut urls = vec![format!("sqlite://{}/gw.db?mode=rwc", dir.display())];
    if let Ok(pg) = std::env::var("TEST_DATABASE_URL").ok().filter(|u| !u.is_empty()).ok_or(()) {
        urls.push(pg);
    }
    let mut out = Vec::new();
    for url in urls {
        out.push(Store::open(&url).await.unwrap_or_else(|e| panic!("open {url}: {e}")));
    }
    out
}

fn usd(micros: i64) -> UsdAmount {
    UsdAmount::from_micros(micros)
}

fn task() -> TaskId {
    TaskId(format!("task_{}", uuid::Uuid::now_v7().simple()))
}

async fn user_with(store: &Store, balance: UsdAmount) -> UserId {
    let id = UserId(format!("usr_{}", uuid::Uuid::now_v7().simple()));
    store
        .create_user(NewUser {
            id: id.clone(),
            name: "t".into(),
            email: "t@example.com".into(),
            role: "user".into(),
            balance,
            concurrency_limit: 10,
            media_quota_bytes: 0,
        })
        .await
        .expect("create user");
    id
}

/// The invariant checked after every scenario.
async fn assert_balance_is_ledger_sum(store: &Store, user: &UserId) -> UsdAmount {
    let balance = store.balance(user).await.expect("balance");
    let entries = store.entries(user, u64::MAX >> 1).await.expect("entries");
    let sum = UsdAmount::checked_sum(entries.iter().map(|e| e.amount)).expect("sum");
    assert_eq!(balance, sum, "balance must equal the sum of the ledger ({} entries)", entries.len());
    if let Some(newest) = entries.first() {
        assert_eq!(newest.balance_after, balance, "newest entry's balance_after is the balance");
    }
    balance
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_concurrent_reservations_against_twenty_five_worth() {
    for store in stores("race").await {
        let cost = usd(1_234_567);
        let user = user_with(&store, usd(cost.micros() * 25)).await;
        let mut handles = Vec::new();
        for _ in 0..200 {
            let (store, user) = (store.clone(), user.clone());
            handles.push(tokio::spawn(async move { store.reserve(&user, &task(), cost).await }));
        }
        let (mut ok, mut refused) = (0, 0);
        for h in handles {
            match h.await.expect("join") {
                Ok(r) => {
                    assert!(!r.balance_after.is_negative());
                    ok += 1;
                }
                Err(LedgerError::InsufficientBalance { needed, available }) => {
                    assert_eq!(needed, cost);
                    assert!(available < cost);
                    refused += 1;
                }
                Err(e) => panic!("{:?}: unexpected {e}", store.backend()),
            }
        }
        assert_eq!((ok, refused), (25, 175), "{:?}", store.backend());
        assert_eq!(assert_balance_is_ledger_sum(&store, &user).await, UsdAmount::ZERO);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pools_on_one_database_cannot_overdraw() {
    // Two independent connection pools stand in for two replicas sharing one database.
    let Ok(url) = std::env::var("TEST_DATABASE_URL").ok().filter(|u| !u.is_empty()).ok_or(()) else {
        let dir = std::env::temp_dir().join(format!("gw-store-pools-{}", uuid::Uuid::new_v4().simple()));
        return run_two_pools(&format!("sqlite://{}/gw.db?mode=rwc", dir.display())).await;
    };
    run_two_pools(&url).await;
}

async fn run_two_pools(url: &str) {
    let a = Store::open(url).await.expect("first pool");
    let b = Store::open(url).await.expect("second pool");
    let user = user_with(&a, usd(10_000_000)).await;
    let mut handles = Vec::new();
    for i in 0..100 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        let user = user.clone();
        handles.push(tokio::spawn(async move { store.reserve(&user, &task(), usd(250_000)).await.is_ok() }));
    }
    let mut ok = 0;
    for h in handles {
        ok += usize::from(h.await.expect("join"));
    }
    assert_eq!(ok, 40);
    assert_eq!(assert_balance_is_ledger_sum(&b, &user).await, UsdAmount::ZERO);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn settlement_happens_exactly_once_under_races() {
    for store in stores("settle").await {
        let user = user_with(&store, usd(100_000_000)).await;
        let t = task();
        store.reserve(&user, &t, usd(3_000_000)).await.expect("reserve");
        let store = Arc::new(store);
        let mut handles = Vec::new();
        for i in 0..20 {
            let (store, t) = (store.clone(), t.clone());
            handles.push(tokio::spawn(async move {
                if i % 2 == 0 { store.settle(&t, usd(1_000_000)).await } else { store.refund(&t).await }
            }));
        }
        let mut finished = Vec::new();
        for h in handles {
            match h.await.expect("join") {
                Ok(s) => finished.push(s),
                Err(LedgerError::AlreadyFinished { .. }) => {}
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!(finished.len(), 1, "exactly one end wins");
        let expected = match finished[0].status {
            BillingStatus::Settled => usd(99_000_000),
            _ => usd(100_000_000),
        };
        assert_eq!(assert_balance_is_ledger_sum(&store, &user).await, expected);
    }
}

#[tokio::test]
async fn settle_above_the_hold_and_refund_rules() {
    for store in stores("rules").await {
        let user = user_with(&store, usd(5_000_000)).await;
        // Settling above the hold is charged in full and may go below zero: recorded, not hidden.
        let t = task();
        store.reserve(&user, &t, usd(5_000_000)).await.expect("reserve all");
        let s = store.settle(&t, usd(5_000_001)).await.expect("settle");
        assert_eq!(s.balance_after, usd(-1));
        assert_eq!(assert_balance_is_ledger_sum(&store, &user).await, usd(-1));
        // Nothing more can be reserved, not even zero-cost-plus-one.
        let refused = store.reserve(&user, &task(), usd(1)).await;
        assert!(matches!(refused, Err(LedgerError::InsufficientBalance { .. })));
        // A top-up brings it back; a refund returns exactly the hold.
        store.credit(&user, usd(2_000_000), LedgerKind::Topup, "").await.expect("topup");
        let t2 = task();
        store.reserve(&user, &t2, usd(1_999_999)).await.expect("reserve");
        assert_eq!(store.balance(&user).await.expect("balance"), UsdAmount::ZERO);
        let r = store.refund(&t2).await.expect("refund");
        assert_eq!((r.status, r.actual, r.balance_after), (BillingStatus::Refunded, UsdAmount::ZERO, usd(1_999_999)));
        assert!(matches!(store.settle(&t2, usd(1)).await, Err(LedgerError::AlreadyFinished { .. })));
        assert!(matches!(store.refund(&task()).await, Err(LedgerError::UnknownReservation(_))));
        // Duplicate reservation for one task is refused and moves nothing.
        let t3 = task();
        store.reserve(&user, &t3, usd(1)).await.expect("reserve");
        assert!(matches!(store.reserve(&user, &t3, usd(1)).await, Err(LedgerError::DuplicateReservation(_))));
        // Bad amounts.
        assert!(matches!(store.reserve(&user, &task(), usd(-1)).await, Err(LedgerError::InvalidAmount(_))));
        assert!(matches!(store.credit(&user, usd(0), LedgerKind::Topup, "").await, Err(LedgerError::InvalidAmount(_))));
        assert!(matches!(
            store.credit(&user, usd(1), LedgerKind::Reserve, "").await,
            Err(LedgerError::InvalidAmount(_))
        ));
        let ghost = UserId("usr_missing".into());
        assert!(matches!(store.reserve(&ghost, &task(), usd(1)).await, Err(LedgerError::UnknownUser(_))));
        assert!(matches!(store.credit(&ghost, usd(1), LedgerKind::Topup, "").await, Err(LedgerError::UnknownUser(_))));
        assert_balance_is_ledger_sum(&store, &user).await;
    }
}

#[tokio::test]
async fn migrations_are_idempotent() {
    for store in stores("migrate").await {
        assert_eq!(store.migrate().await.expect("second run"), 0);
    }
}
