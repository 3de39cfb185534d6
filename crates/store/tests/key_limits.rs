//! Per-key limits (issue 25): an expiry time, a model allow-list, a budget and rate limits are
//! stored at creation, changed or cleared one at a time, read back with the key, and an unreadable
//! stored list, budget or limit is corrupt.

mod common;

use common::{TestDb, name, usd, user_with};
use domain::ports::{AccountStore, StoreError};
use std::num::NonZeroU32;

use domain::{ApiKey, ApiKeyId, BudgetPeriod, KeyBudget, KeyLimitsChange, KeyRates, ModelAllowList, Scope, Timestamp};
use sea_orm::{ConnectionTrait, Database};

fn key(user: &domain::UserId, id: &str) -> ApiKey {
    ApiKey {
        id: ApiKeyId(id.to_owned()),
        user_id: user.clone(),
        name: "script".into(),
        hash: format!("hash-{id}"),
        prefix: "sk-gw-ab".into(),
        scopes: vec![Scope::LanguageCreate],
        revoked_at: None,
        created_at: Timestamp(1),
        expires_at: Some(Timestamp(1_800_000_000_000)),
        models: Some(ModelAllowList::parse("language,Img-1").expect("list")),
        budget: Some(KeyBudget { limit: usd(50_000), period: BudgetPeriod::Week }),
        spend: domain::KeySpend::default(),
        rates: KeyRates { rpm: NonZeroU32::new(60), tpm: NonZeroU32::new(100_000) },
        allow_ips: Some(domain::IpAllowList::parse("203.0.113.0/24,2001:db8::/32").expect("list")),
        parent_id: Some(ApiKeyId("key_parent".into())),
    }
}

#[tokio::test]
async fn limits_are_stored_changed_and_cleared() {
    for db in TestDb::all("key_limits").await {
        let store = db.open().await;
        let db_name = name(&store);
        let user = user_with(&store, usd(0)).await;
        let created = store.create_key(key(&user, "key_a")).await.expect("create");
        assert_eq!(created, key(&user, "key_a"), "{db_name}: read back as given");
        let (found, _) = store.key_by_hash("hash-key_a").await.expect("read").expect("found");
        assert_eq!(found, created, "{db_name}");

        let models_only = KeyLimitsChange { models: Some(None), ..Default::default() };
        let changed = store.set_key_limits(&created.id, models_only).await.expect("clear models");
        assert_eq!(changed.models, None, "{db_name}: cleared");
        assert_eq!(changed.expires_at, created.expires_at, "{db_name}: expiry untouched");

        let video = ModelAllowList::parse("video").expect("list");
        let both = KeyLimitsChange { expires_at: Some(None), models: Some(Some(video.clone())), ..Default::default() };
        let changed = store.set_key_limits(&created.id, both).await.expect("change both");
        assert_eq!((changed.expires_at, changed.models.clone()), (None, Some(video)), "{db_name}");
        assert_eq!(changed.rates, created.rates, "{db_name}: rates untouched");

        let rates = KeyLimitsChange { rpm: Some(None), tpm: Some(NonZeroU32::new(5)), ..Default::default() };
        let changed = store.set_key_limits(&created.id, rates).await.expect("change rates");
        assert_eq!(changed.rates, KeyRates { rpm: None, tpm: NonZeroU32::new(5) }, "{db_name}: rpm cleared");
        let (found, _) = store.key_by_hash("hash-key_a").await.expect("read").expect("found");
        assert_eq!(found, changed, "{db_name}: stored");

        let daily = KeyBudget { limit: usd(7), period: BudgetPeriod::Day };
        let budget = KeyLimitsChange { budget: Some(Some(daily)), ..Default::default() };
        let changed = store.set_key_limits(&created.id, budget).await.expect("change the budget");
        assert_eq!(changed.budget, Some(daily), "{db_name}: the new budget");
        assert_eq!(changed.models, Some(ModelAllowList::parse("video").expect("list")), "{db_name}: kept");
        let ips = domain::IpAllowList::parse("198.51.100.7").expect("list");
        let only = KeyLimitsChange { allow_ips: Some(Some(ips.clone())), ..Default::default() };
        assert_eq!(store.set_key_limits(&created.id, only).await.expect("ips").allow_ips, Some(ips), "{db_name}");
        let any = KeyLimitsChange { allow_ips: Some(None), ..Default::default() };
        assert_eq!(store.set_key_limits(&created.id, any).await.expect("any").allow_ips, None, "{db_name}");
        let no_budget = KeyLimitsChange { budget: Some(None), ..Default::default() };
        assert_eq!(store.set_key_limits(&created.id, no_budget).await.expect("clear").budget, None, "{db_name}");
        let changed = store.set_key_limits(&created.id, budget_change(daily)).await.expect("again");

        let later = KeyLimitsChange { expires_at: Some(Some(Timestamp(5))), ..Default::default() };
        let missing = store.set_key_limits(&ApiKeyId("key_missing".into()), later).await;
        assert!(matches!(missing, Err(StoreError::NotFound(_))), "{db_name}: {missing:?}");
        let nothing = store.set_key_limits(&created.id, KeyLimitsChange::default()).await;
        assert!(matches!(nothing, Err(StoreError::Invalid(_))), "{db_name}: {nothing:?}");

        let unlimited =
            ApiKey { expires_at: None, models: None, budget: None, rates: KeyRates::default(), ..key(&user, "key_b") };
        let other = store.create_key(unlimited).await;
        let other = other.expect("second key");
        let listed = store.keys_of_user(&user).await.expect("list");
        assert_eq!(listed, vec![changed.clone(), other], "{db_name}: both keys, oldest first");
        assert!(store.keys_of_user(&user_with(&store, usd(0)).await).await.expect("list").is_empty(), "{db_name}");

        let raw = Database::connect(db.url.as_str()).await.expect("raw connection");
        raw.execute_unprepared("UPDATE api_keys SET models = ',' WHERE id = 'key_a'").await.expect("spoil");
        raw.close().await.expect("close");
        let corrupt = store.key_by_hash("hash-key_a").await;
        assert!(matches!(corrupt, Err(StoreError::Corrupt { .. })), "{db_name}: {corrupt:?}");
        let raw = Database::connect(db.url.as_str()).await.expect("raw connection");
        let spoil = "UPDATE api_keys SET budget_period = 'fortnight' WHERE id = 'key_b'";
        raw.execute_unprepared("UPDATE api_keys SET budget_micros = 5 WHERE id = 'key_b'").await.expect("spoil");
        raw.close().await.expect("close");
        let half = store.key_by_hash("hash-key_b").await;
        assert!(matches!(half, Err(StoreError::Corrupt { .. })), "{db_name}: a limit without a period: {half:?}");
        let raw = Database::connect(db.url.as_str()).await.expect("raw connection");
        raw.execute_unprepared(spoil).await.expect("spoil");
        raw.close().await.expect("close");
        let unknown = store.key_by_hash("hash-key_b").await;
        assert!(matches!(unknown, Err(StoreError::Corrupt { .. })), "{db_name}: an unknown period: {unknown:?}");
        let raw = Database::connect(db.url.as_str()).await.expect("raw connection");
        let zero = "UPDATE api_keys SET budget_micros = NULL, budget_period = NULL, rpm = 0 WHERE id = 'key_b'";
        raw.execute_unprepared(zero).await.expect("spoil");
        raw.close().await.expect("close");
        let corrupt = store.key_by_hash("hash-key_b").await;
        assert!(matches!(corrupt, Err(StoreError::Corrupt { .. })), "{db_name}: a zero limit: {corrupt:?}");
        store.close().await.expect("close");
        db.cleanup().await;
    }
}

fn budget_change(budget: KeyBudget) -> KeyLimitsChange {
    KeyLimitsChange { budget: Some(Some(budget)), ..Default::default() }
}
