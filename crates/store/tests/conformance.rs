//! The ledger conformance suite of `billing` (the same scenarios the in-memory ledger passes), run
//! through the store's batched writer on SQLite and, when `TEST_DATABASE_URL` is set, PostgreSQL.

#![allow(clippy::panic)]

mod common;

use std::future::Future;
use std::sync::Arc;

use billing::conformance::{self, RaceFuture, Subject};
use billing::{CallBook, Ledger};
use common::TestDb;
use domain::{BillingStatus, TaskId, TaskStatus, UserId};
use store::Store;

struct StoreSubject {
    store: Store,
}

#[async_trait::async_trait]
impl Subject for StoreSubject {
    fn ledger(&self) -> Arc<dyn Ledger> {
        Arc::new(self.store.clone())
    }

    fn calls(&self) -> Arc<dyn CallBook> {
        Arc::new(self.store.clone())
    }

    async fn new_user(&self) -> Result<UserId, String> {
        Ok(common::user_with(&self.store, domain::UsdAmount::ZERO).await)
    }

    async fn reservation(&self, task: &TaskId) -> Result<Option<BillingStatus>, String> {
        self.store.reservation_status(task).await.map_err(|e| e.to_string())
    }

    async fn task_status(&self, task: &TaskId) -> Result<Option<TaskStatus>, String> {
        self.store.task_status(task).await.map_err(|e| e.to_string())
    }

    async fn race<T: Send + 'static>(&self, futures: Vec<RaceFuture<T>>) -> Vec<T> {
        let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(h.await.unwrap_or_else(|e| panic!("race task: {e}")));
        }
        out
    }
}

/// Runs `scenario` on every configured database.
async fn conform<T, F, Fut>(name: &str, scenario: F)
where
    F: Fn(Arc<StoreSubject>) -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    for db in TestDb::all(name).await {
        let subject = Arc::new(StoreSubject { store: db.open().await });
        let backend = common::name(&subject.store);
        if let Err(e) = scenario(Arc::clone(&subject)).await {
            panic!("{backend}: {e}");
        }
        db.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds() {
    conform("holds", |s| async move { conformance::holds(s.as_ref()).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ends_and_notes() {
    conform("ends", |s| async move { conformance::ends_and_notes(s.as_ref()).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn credits() {
    conform("credits", |s| async move { conformance::credits(s.as_ref()).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_holds_race() {
    conform("race", |s| async move { conformance::two_hundred_holds_race(s.as_ref()).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_ends() {
    conform("ends_race", |s| async move { conformance::racing_ends(s.as_ref()).await }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls() {
    conform("calls", |s| async move { conformance::calls(s.as_ref()).await }).await;
}
