//! Shared test support: fresh databases (an SQLite file; a private PostgreSQL schema when
//! `TEST_DATABASE_URL` is set, so that tests never touch another agent's tables), users, and the
//! consistency check run after every scenario.

#![allow(dead_code, clippy::panic, clippy::unwrap_used)]

use billing::Ledger;
use domain::ports::AccountStore;
use domain::{NewUser, TaskId, UsdAmount, UserId};
use sea_orm::{ConnectionTrait, Database};
use store::{Backend, Store};

/// A database for one test: its URL, and the schema to drop afterwards (PostgreSQL).
pub struct TestDb {
    pub url: String,
    admin_url: Option<String>,
    schema: Option<String>,
}

impl TestDb {
    /// A new SQLite file in a fresh temporary directory.
    pub fn sqlite(name: &str) -> TestDb {
        let dir = std::env::temp_dir().join(format!("gw-store-{name}-{}", uuid::Uuid::new_v4().simple()));
        TestDb { url: format!("sqlite://{}/gw.db?mode=rwc", dir.display()), admin_url: None, schema: None }
    }

    /// A new schema on the `TEST_DATABASE_URL` server, when set.
    pub async fn postgres(name: &str) -> Option<TestDb> {
        let base = std::env::var("TEST_DATABASE_URL").ok().filter(|u| !u.is_empty())?;
        let schema = format!("gw_store_{name}_{}", uuid::Uuid::new_v4().simple());
        let admin = Database::connect(base.as_str()).await.unwrap_or_else(|e| panic!("connect {base}: {e}"));
        admin.execute_unprepared(&format!("CREATE SCHEMA {schema}")).await.expect("create schema");
        admin.close().await.ok();
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
        Some(TestDb { url, admin_url: Some(base), schema: Some(schema) })
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
        if let (Some(base), Some(schema)) = (self.admin_url, self.schema)
            && let Ok(admin) = Database::connect(base.as_str()).await
        {
            let _ = admin.execute_unprepared(&format!("DROP SCHEMA {schema} CASCADE")).await;
            let _ = admin.close().await;
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

/// Balance = Σ ledger, checked through the port; returns the balance.
pub async fn balance_is_ledger_sum(store: &Store, user: &UserId) -> UsdAmount {
    billing::conformance::balance_is_ledger_sum(store as &dyn Ledger, user)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", name(store)))
}

/// A running call's task, as `CallBook::open_call` stores it.
pub fn call_task(user: &UserId, id: &TaskId) -> domain::Task {
    domain::Task {
        id: id.clone(),
        user_id: user.clone(),
        model: "m".into(),
        kind: domain::ModelKind::Language,
        status: domain::TaskStatus::Processing,
        prompt: None,
        provider: "p".into(),
        input_mode: None,
        media_type: None,
        media: Vec::new(),
        duration: None,
        resolution: None,
        ratio: None,
        generate_audio: None,
        billing: domain::TaskBilling {
            status: domain::BillingStatus::Reserved,
            pricing_version_id: None,
            estimated: UsdAmount::ZERO,
            actual: None,
            balance_after: None,
            usage_json: None,
        },
        output_url: None,
        last_frame_url: None,
        error_code: None,
        error_message: None,
        webhook_url: None,
        created_at: domain::Timestamp(1),
        updated_at: domain::Timestamp(1),
        completed_at: None,
        runner: None,
    }
}
