//! `AlertStore`: an alert set above the balance is armed, one below is not; sixteen checks racing on
//! two stores after the balance fell below the threshold fire it once, with one `balance.low`
//! delivery in the outbox (none without a URL); a credit back to the threshold re-arms it and the
//! next fall fires again; the sweep's query finds exactly the alerts out of step. SQLite always;
//! PostgreSQL (a private schema) when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use billing::Ledger;
use common::{TestDb, name, usd, user_with};
use domain::{AlertChange, AlertStore, ClaimShare, LedgerKind, LowBalance, Timestamp, UserId, VideoStore};
use store::Store;

const HOOK: &str = "https://hooks.example.com/low";

fn payload(low: &LowBalance) -> String {
    format!(r#"{{"type":"balance.low","balance":"{}","threshold":"{}"}}"#, low.balance, low.threshold)
}

async fn adjust(store: &Store, user: &UserId, micros: i64) {
    store.credit(user, usd(micros), LedgerKind::Adjustment, "test").await.expect("adjustment");
}

/// Sixteen checks at once, alternating between the two stores; how many fired.
async fn race_checks(stores: &[Store; 2], user: &UserId) -> usize {
    let mut handles = Vec::new();
    for i in 0..16 {
        let (store, user) = (stores[i % 2].clone(), user.clone());
        handles.push(tokio::spawn(async move {
            store.check_alert(&user, Timestamp(1_800_000_000_000), &payload).await.expect("check")
        }));
    }
    let mut fired = 0;
    for handle in handles {
        if let (_, AlertChange::Fired(_)) = handle.await.expect("join") {
            fired += 1;
        }
    }
    fired
}

async fn pending_deliveries(store: &Store) -> Vec<domain::WebhookDelivery> {
    let share = ClaimShare::up_to(100);
    store.claim_deliveries("sweeper", Timestamp(i64::MAX / 4), Timestamp(i64::MAX / 2), &share).await.expect("claim")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_fall_below_the_threshold_fires_once_and_a_credit_back_rearms() {
    for db in TestDb::all("alerts_once").await {
        let stores = [db.open().await, db.open().await];
        let store = &stores[0];
        let db_name = name(store);
        let user = user_with(store, usd(10_000_000)).await;
        let now = Timestamp(1_800_000_000_000);

        let set = store.set_alert(&user, usd(5_000_000), Some(HOOK), now).await.expect("set");
        assert!(set.armed && !set.below(), "{db_name}: set above the threshold, armed: {set:?}");
        assert_eq!(store.alerts_out_of_step(10).await.expect("sweep"), Vec::<UserId>::new(), "{db_name}");
        assert_eq!(race_checks(&stores, &user).await, 0, "{db_name}: nothing fires above the threshold");

        adjust(store, &user, -6_000_000).await;
        assert_eq!(store.alerts_out_of_step(10).await.expect("sweep"), vec![user.clone()], "{db_name}");
        assert_eq!(race_checks(&stores, &user).await, 1, "{db_name}: one of sixteen racing checks fires");
        let alert = store.alert(&user).await.expect("read").expect("alert");
        assert!(!alert.armed && alert.below(), "{db_name}: disarmed below: {alert:?}");
        let sent = pending_deliveries(store).await;
        assert_eq!(sent.len(), 1, "{db_name}: one delivery: {sent:?}");
        assert_eq!(
            (sent[0].task_id.as_ref(), sent[0].event.as_str(), sent[0].url.as_str()),
            (None, "balance.low", HOOK)
        );
        assert_eq!(sent[0].payload, r#"{"type":"balance.low","balance":"4.000000","threshold":"5.000000"}"#);

        // Still below: nothing more. Back to the threshold exactly: re-armed, then a fall fires again.
        adjust(store, &user, -1).await;
        assert_eq!(race_checks(&stores, &user).await, 0, "{db_name}: a second debit below sends nothing");
        adjust(store, &user, 1_000_001).await;
        let (alert, change) = store.check_alert(&user, now, &payload).await.expect("check");
        assert_eq!(change, AlertChange::Rearmed, "{db_name}: back at the threshold: {alert:?}");
        adjust(store, &user, -1).await;
        assert_eq!(race_checks(&stores, &user).await, 1, "{db_name}: the next fall fires again");

        // Without a URL the alert fires (for the banner) and enqueues nothing.
        let quiet = user_with(store, usd(3_000_000)).await;
        store.set_alert(&quiet, usd(2_000_000), None, now).await.expect("set");
        adjust(store, &quiet, -1_500_000).await;
        assert_eq!(race_checks(&stores, &quiet).await, 1, "{db_name}");
        assert_eq!(pending_deliveries(store).await.len(), 1, "{db_name}: only the second event of the first user");

        // Set below the balance: not armed, and out of step with nothing. Cleared: gone.
        let low = store.set_alert(&quiet, usd(9_000_000), None, now).await.expect("set");
        assert!(!low.armed && low.below(), "{db_name}: {low:?}");
        assert_eq!(store.alerts_out_of_step(10).await.expect("sweep"), Vec::<UserId>::new(), "{db_name}");
        store.clear_alert(&quiet).await.expect("clear");
        assert_eq!(store.alert(&quiet).await.expect("read"), None, "{db_name}");
        let missing = store.set_alert(&UserId("usr_missing".into()), usd(1), None, now).await;
        assert!(matches!(missing, Err(domain::ports::StoreError::NotFound(_))), "{db_name}: {missing:?}");
        for s in stores {
            s.close().await.expect("close");
        }
        db.cleanup().await;
    }
}
