//! The call flow's own checks: a call opens once, closes once, and its holds and charges land.
use std::sync::Arc;
use std::time::Duration;

use domain::ports::{AccountStore, TaskStore};
use domain::{NewUser, SystemClock, UsdAmount, UserId};

use super::*;
use crate::Ports;

async fn gateway() -> (Gateway, store::Store, UserId) {
    let dir = std::env::temp_dir().join(format!("gw-call-{}", uuid::Uuid::new_v4().simple()));
    let store = store::Store::open(&format!("sqlite://{}/gw.db?mode=rwc", dir.display())).await.expect("store");
    let gateway = Gateway::new(Ports::from_store(store.clone(), Arc::new(SystemClock)));
    gateway.seed_catalog(&catalog::Catalog::builtin().expect("catalog")).await.expect("seed");
    let user = UserId(format!("usr_{}", uuid::Uuid::new_v4().simple()));
    let new = NewUser {
        id: user.clone(),
        name: "c".into(),
        email: "c@example.com".into(),
        role: domain::Role::User,
        balance: UsdAmount::from_micros(1_000_000),
        concurrency_limit: 4,
        media_quota_bytes: 0,
    };
    store.create_user(new).await.expect("user");
    (gateway, store, user)
}

/// A key of `user` with every scope and no limits.
fn anyone(user: &UserId) -> Principal {
    Principal {
        user_id: user.clone(),
        key_id: domain::ApiKeyId("key_test".into()),
        scopes: domain::Scope::ALL.to_vec(),
        expires_at: None,
        models: None,
        budget: None,
        rates: domain::KeyRates::default(),
        allow_ips: None,
        role: domain::Role::User,
        ancestors: Vec::new(),
        budget_keys: domain::BudgetKeys::NONE,
        max_cost: None,
    }
}

async fn open(gateway: &Gateway, user: &UserId, micros: i64) -> OpenCall {
    let (def, pricing) =
        gateway.priced_model(&anyone(user), ModelKind::Language, "LangA-V4-flash").await.expect("model");
    let spec = CallSpec {
        user: user.clone(),
        key: domain::ApiKeyId("key_test".into()),
        budget_keys: domain::BudgetKeys::NONE,
        def,
        pricing,
        estimate: UsdAmount::from_micros(micros),
        rate: crate::rates::RateClaim::request(&anyone(user)),
        details: TaskDetails::default(),
        max_cost: None,
    };
    gateway.open_call(spec).await.expect("open")
}

#[tokio::test]
async fn a_dropped_call_refunds_itself() {
    let (gateway, store, user) = gateway().await;
    let call = open(&gateway, &user, 400_000).await;
    let id = call.task_id().clone();
    assert_eq!(store.user(&user).await.expect("read").map(|u| u.balance.micros()), Some(600_000));
    drop(call);
    let mut task = None;
    for _ in 0..200 {
        task = store.task(&user, &id).await.expect("read").filter(|t| t.status.is_terminal());
        if task.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let task = task.expect("the dropped call ended");
    assert_eq!((task.status, task.billing.status), (TaskStatus::Failed, BillingStatus::Refunded));
    assert_eq!(task.error_code.as_deref(), Some("interrupted"));
    assert_eq!(store.user(&user).await.expect("read").map(|u| u.balance.micros()), Some(1_000_000));
}

#[tokio::test]
async fn settle_and_refund_close_once() {
    let (gateway, store, user) = gateway().await;
    let settled = open(&gateway, &user, 400_000).await.settle(UsdAmount::from_micros(1_234), Some("{}".into()), 0);
    let settled = settled.await.expect("settle");
    assert_eq!(settled.billing.status, BillingStatus::Settled);
    assert_eq!(settled.billing.actual, Some(UsdAmount::from_micros(1_234)));
    let failed = open(&gateway, &user, 400_000).await.fail(&UpstreamError::Timeout).await;
    assert!(matches!(failed, ServiceError::Upstream { retryable: true, .. }), "{failed:?}");
    let unconfigured = open(&gateway, &user, 1).await.fail(&UpstreamError::NotConfigured("speech".into())).await;
    assert!(matches!(unconfigured, ServiceError::ProviderNotConfigured(_)), "{unconfigured:?}");
    assert_eq!(store.user(&user).await.expect("read").map(|u| u.balance.micros()), Some(1_000_000 - 1_234));
    // An estimate above the balance is refused and stores nothing.
    let (def, pricing) =
        gateway.priced_model(&anyone(&user), ModelKind::Language, "LangA-V4-flash").await.expect("model");
    let spec = CallSpec {
        user: user.clone(),
        key: domain::ApiKeyId("key_test".into()),
        budget_keys: domain::BudgetKeys::NONE,
        def,
        pricing,
        estimate: UsdAmount::from_micros(2_000_000),
        rate: crate::rates::RateClaim::request(&anyone(&user)),
        details: TaskDetails::default(),
        max_cost: None,
    };
    let refused = gateway.open_call(spec).await.expect_err("402");
    assert!(matches!(refused, ServiceError::InsufficientBalance { .. }), "{refused:?}");
    let (_, total) = store
        .list_tasks(&user, Default::default(), domain::ports::PageRequest { page: 1, page_size: 20 })
        .await
        .expect("list");
    assert_eq!(total, 3);
}
