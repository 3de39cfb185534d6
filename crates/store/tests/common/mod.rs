//! Shared test support: fresh databases (an SQLite file; a private PostgreSQL schema when
//! `TEST_DATABASE_URL` is set, so that tests never touch another agent's tables), users, and the
//! consistency check run after every scenario.

#![allow(dead_code, clippy::panic, clippy::unwrap_used)]

use billing::CallBook;
use domain::ports::{AccountStore, TaskStore};
use domain::{ModelKind, NewUser, TaskEvent, TaskId, TaskStatus, TaskTransition, Timestamp, UsdAmount, UserId};
use store::{Backend, Store};
use testkit::pg::Schema;

/// A database for one test: its URL, and the schema to drop afterwards (PostgreSQL).
pub struct TestDb {
    pub url: String,
    schema: Option<Schema>,
}

impl TestDb {
    /// A new SQLite file in a fresh temporary directory.
    pub fn sqlite(name: &str) -> TestDb {
        let dir = std::env::temp_dir().join(format!("gw-store-{name}-{}", uuid::Uuid::new_v4().simple()));
        TestDb { url: format!("sqlite://{}/gw.db?mode=rwc", dir.display()), schema: None }
    }

    /// A new schema on the `TEST_DATABASE_URL` server, when set.
    pub async fn postgres(name: &str) -> Option<TestDb> {
        let schema = Schema::from_env(&format!("gw_store_{name}")).await?;
        Some(TestDb { url: schema.url.clone(), schema: Some(schema) })
    }

    /// A new schema for a test that runs on PostgreSQL alone: `None` after a visible skip when
    /// `TEST_DATABASE_URL` is unset (a failure in CI: `testkit::pg::required_url`).
    pub async fn postgres_only(name: &str, test: &str) -> Option<TestDb> {
        let schema = Schema::create(&testkit::pg::required_url(test)?, &format!("gw_store_{name}")).await;
        Some(TestDb { url: schema.url.clone(), schema: Some(schema) })
    }

    /// The databases a test runs on: SQLite always, PostgreSQL when configured.
    pub async fn all(name: &str) -> Vec<TestDb> {
        let mut dbs = vec![TestDb::sqlite(name)];
        dbs.extend(TestDb::postgres(name).await);
        dbs
    }

    /// Opens (and migrates) a store on this database.
    pub async fn open(&self) -> Store {
        Store::open(&self.url).await.unwrap_or_else(|e| panic!("open {}: {e}", self.url))
    }

    /// Drops the PostgreSQL schema (SQLite files stay in the temporary directory).
    pub async fn cleanup(self) {
        if let Some(schema) = self.schema {
            schema.drop_now().await;
        }
    }
}

/// Which database a store runs on, for messages.
pub fn name(store: &Store) -> &'static str {
    match store.backend() {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
    }
}

pub fn usd(micros: i64) -> UsdAmount {
    UsdAmount::from_micros(micros)
}

pub fn new_task() -> TaskId {
    TaskId(format!("task_{}", uuid::Uuid::now_v7().simple()))
}

/// A new user with `balance` (booked as the opening top-up).
pub async fn user_with(store: &Store, balance: UsdAmount) -> UserId {
    create_user(store, testkit::new_user(&testkit::user_id(), balance)).await
}

/// Creates `user` (a [`testkit::new_user`], changed as a test needs); its id.
pub async fn create_user(store: &Store, user: NewUser) -> UserId {
    let id = user.id.clone();
    store.create_user(user).await.unwrap_or_else(|e| panic!("{}: create user: {e}", name(store)));
    id
}

/// Balance = Σ ledger, checked through the port; returns the balance.
pub async fn balance_is_ledger_sum(store: &Store, user: &UserId) -> UsdAmount {
    testkit::assert_balance_is_ledger_sum(store, user, name(store)).await
}

/// A running call's task, as `CallBook::open_call` stores it (the ledger suite's task with this
/// crate's names and times).
pub fn call_task(user: &UserId, id: &TaskId) -> domain::Task {
    domain::Task {
        model: "m".into(),
        provider: "p".into(),
        input_mode: None,
        created_at: domain::Timestamp(1),
        updated_at: domain::Timestamp(1),
        ..billing::conformance::running_task(user, id, UsdAmount::ZERO, domain::TaskStatus::Processing)
    }
}

/// What a video task of [`open_video_task`] holds.
pub const VIDEO_HOLD: i64 = 1_000;

/// A video task of `user` in `submitting` created at `created`, stored by `CallBook::open_call`
/// with a hold of [`VIDEO_HOLD`].
pub async fn open_video_task(store: &Store, user: &UserId, created: i64, webhook: Option<&str>) -> TaskId {
    let id = new_task();
    let task = domain::Task {
        kind: ModelKind::Video,
        model: "Videogen-2.0".into(),
        status: TaskStatus::Submitting,
        prompt: Some("a cat".into()),
        duration: Some(5),
        webhook_url: webhook.map(str::to_owned),
        created_at: Timestamp(created),
        updated_at: Timestamp(created),
        ..call_task(user, &id)
    };
    store.open_call(task, usd(VIDEO_HOLD)).await.unwrap_or_else(|e| panic!("{}: open: {e}", name(store)));
    id
}

/// Moves the video task `task` by `event` (an upstream id when accepted); a terminal state ends its
/// hold too (half of it charged on success, else refunded).
pub async fn video_step(store: &Store, user: &UserId, task: &TaskId, from: TaskStatus, event: TaskEvent) {
    let mut change = TaskTransition::new(from, event);
    if event == TaskEvent::Accepted {
        change.update.upstream_id = Some(format!("cgt-{}", task.as_str()));
    }
    let to = from.apply(event).expect("an allowed change");
    let moved = if to.is_terminal() {
        let charge = (to == TaskStatus::Succeeded).then(|| usd(VIDEO_HOLD / 2));
        store
            .close_task(task, &billing::Expect::of(user, usd(VIDEO_HOLD)), charge, change)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    } else {
        store.transition_task(task, change).await.map(drop).map_err(|e| e.to_string())
    };
    moved.unwrap_or_else(|e| panic!("{}: {from} {event:?}: {e}", name(store)));
}
