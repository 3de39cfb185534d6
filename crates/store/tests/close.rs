//! `Store::close` stops what the store started: the batched writer commits what is queued, then
//! stops for every clone of the store (on SQLite its direct commits too), and the pools close.
//! On SQLite and, when `TEST_DATABASE_URL` is set, PostgreSQL.

mod common;

use billing::{Ledger, LedgerError};
use common::{TestDb, usd, user_with};
use domain::LedgerKind;

/// Of credits racing the close, each answered one is stored and each other one failed, saying
/// the writer stopped; a credit after the close fails (it neither queues nor commits on its own
/// thread); a second close does nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_commits_what_is_queued_then_stops_the_writer() {
    for db in TestDb::all("close").await {
        let store = db.open().await;
        let ctx = common::name(&store);
        let user = user_with(&store, usd(0)).await;
        let mut credits = tokio::task::JoinSet::new();
        for _ in 0..64 {
            let (store, user) = (store.clone(), user.clone());
            credits.spawn(async move { store.credit(&user, usd(1), LedgerKind::Adjustment, "racing the close").await });
        }
        tokio::task::yield_now().await;
        store.clone().close().await.expect("close");
        let mut answered = 0;
        while let Some(done) = credits.join_next().await {
            match done.expect("credit task") {
                Ok(_) => answered += 1,
                Err(e) => assert!(matches!(&e, LedgerError::Backend(t) if t.contains("stopped")), "{ctx}: {e:?}"),
            }
        }
        let late = store.credit(&user, usd(1), LedgerKind::Adjustment, "late").await;
        assert!(matches!(&late, Err(LedgerError::Backend(t)) if t.contains("stopped")), "{ctx}: {late:?}");
        store.clone().close().await.expect("a second close");
        let reopened = db.open().await;
        assert_eq!(reopened.balance(&user).await.expect("balance"), usd(answered), "{ctx}");
        reopened.close().await.expect("close");
        db.cleanup().await;
    }
}
