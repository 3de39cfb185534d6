//! Shared test support: fresh databases (an SQLite file; a private PostgreSQL schema when
//! `TEST_DATABASE_URL` is set, so that tests never touch another agent's tables), users, and the
//! consistency check run after every scenario.

#![allow(dead_code, clippy::panic, clippy::unwrap_used)]

use domain::ports::AccountStore;
use domain::{NewUser, TaskId, UsdAmount, UserId};
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
