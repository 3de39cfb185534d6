//! Slots taken for work that counts through its own row (video task creation): checked and
//! written under the caps' locks against every live lease and running video task, so racing
//! takers never pass a cap, and a slot given back (or expired) is free again. SQLite always;
//! PostgreSQL when `TEST_DATABASE_URL` is set.

mod common;

use billing::CallBook;
use common::{TestDb, call_task, new_task, usd, user_with};
use domain::{CapLeases, CapScope, ModelKind, TaskStatus, Timestamp};

#[tokio::test]
async fn racing_takers_never_pass_a_cap_and_given_back_slots_are_free_again() {
    for db in TestDb::all("slots").await {
        let store = db.open().await;
        let ctx = common::name(&store);
        let user = user_with(&store, usd(1_000_000)).await; // concurrency limit 10
        let scope = [CapScope::User(user.clone())];
        let (now, until) = (Timestamp(1_000), Timestamp(60_000));

        // 30 takers at once against a cap of 10: exactly 10 get a slot.
        let mut racers = Vec::new();
        for i in 0..30 {
            let (store, scope) = (store.clone(), scope.clone());
            racers.push(tokio::spawn(async move { store.take_slots(&format!("video:{i}"), &scope, now, until).await }));
        }
        let mut taken = 0;
        for racer in racers {
            match racer.await.expect("taker") {
                Ok(None) => taken += 1,
                Ok(Some(full)) => assert_eq!(full, scope[0], "{ctx}"),
                Err(e) => panic!("{ctx}: {e}"),
            }
        }
        assert_eq!(taken, 10, "{ctx}: exactly the cap");
        assert_eq!(store.take_slots("late", &scope, now, until).await, Ok(Some(scope[0].clone())), "{ctx}");

        // One given back: one more fits. A running video task counts like a slot.
        store.release_leases("video:0").await.expect("give back");
        store.release_leases("video:1").await.expect("give back");
        assert_eq!(store.take_slots("late", &scope, now, until).await, Ok(None), "{ctx}: a freed slot");
        let id = new_task();
        let mut task = call_task(&user, &id);
        task.kind = ModelKind::Video;
        task.status = TaskStatus::Submitting;
        store.open_call(task, usd(1)).await.unwrap_or_else(|e| panic!("{ctx}: open: {e}"));
        assert_eq!(
            store.take_slots("later", &scope, now, until).await,
            Ok(Some(scope[0].clone())),
            "{ctx}: the running video task took the last room"
        );
        // Expired slots count for nothing.
        let after = Timestamp(until.millis() + 1);
        assert_eq!(
            store.take_slots("after", &scope, after, Timestamp(after.millis() + 1_000)).await,
            Ok(None),
            "{ctx}: the expired slots are free"
        );
        store.close().await.expect("close");
        db.cleanup().await;
    }
}
