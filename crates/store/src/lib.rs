//! Storage on SQLite or PostgreSQL through SeaORM: accounts, keys, models, prices, tasks and the ledger.
//!
//! This is the only crate that knows SeaORM. It implements the port traits of `domain`
//! (`AccountStore`, `TaskStore`, `ModelStore`) and the `Ledger` port of `billing`.
//! Reservations are single conditional updates, so no concurrency can overdraw a balance,
//! whether the writers are tasks of one process or replicas sharing one PostgreSQL.

mod accounts;
mod entities;
mod idempotency;
mod ledger;
mod migrate;
mod models;
mod tasks;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use domain::ports::StoreError;
use domain::{Clock, SystemClock};
use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbBackend, DbErr};

/// Which database a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// An embedded SQLite file.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// The gateway's storage: a pooled connection and the clock used for timestamps.
#[derive(Clone)]
pub struct Store {
    db: DatabaseConnection,
    clock: Arc<dyn Clock>,
    /// SQLite allows one writer at a time; writers of this process queue here instead of
    /// meeting `SQLITE_BUSY` and the busy handler's sleeps. `None` on PostgreSQL.
    write_lock: Option<Arc<tokio::sync::Mutex<()>>>,
    /// SQLite: the writer thread that runs holds and their ends in group commits.
    writer: Option<writer::SqliteWriter>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("backend", &self.backend()).finish_non_exhaustive()
    }
}

impl Store {
    /// Connects to `url` (`sqlite://path?mode=rwc` or `postgres://…`) without migrating.
    ///
    /// SQLite runs in WAL mode with `synchronous=NORMAL`, a busy timeout and foreign keys on;
    /// the parent folder of the file is created if missing.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        let backend = backend_of(url)?;
        if backend == Backend::Sqlite {
            ensure_sqlite_parent(url)?;
        }
        let mut options = ConnectOptions::new(url.to_owned());
        options
            .sqlx_logging(false)
            .acquire_timeout(Duration::from_secs(30))
            .max_connections(if backend == Backend::Sqlite { 8 } else { 16 })
            .min_connections(1)
            .map_sqlx_sqlite_opts(|o: SqliteConnectOptions| {
                o.journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(30))
                    .foreign_keys(true)
                    .create_if_missing(true)
                    .pragma("mmap_size", "268435456")
                    .pragma("cache_size", "-16384")
            });
        let db = Database::connect(options).await.map_err(backend_err)?;
        let write_lock = (backend == Backend::Sqlite).then(|| Arc::new(tokio::sync::Mutex::new(())));
        let writer = match sqlite_path(url) {
            Some(path) if backend == Backend::Sqlite => Some(writer::SqliteWriter::start(std::path::Path::new(path))?),
            _ => None,
        };
        Ok(Store { db, clock: Arc::new(SystemClock), write_lock, writer })
    }

    /// Connects to `url` and applies every pending migration.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        let store = Store::connect(url).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Replaces the clock (tests use a fixed one).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Store {
        self.clock = clock;
        self
    }

    /// Applies the embedded migrations that have not run yet; returns how many ran.
    pub async fn migrate(&self) -> Result<u64, StoreError> {
        migrate::run(&self.db).await
    }

    /// The database behind this store.
    pub fn backend(&self) -> Backend {
        match self.db.get_database_backend() {
            DbBackend::Postgres => Backend::Postgres,
            _ => Backend::Sqlite,
        }
    }

    /// Closes the pool, waiting for connections to finish.
    pub async fn close(self) -> Result<(), StoreError> {
        self.db.close().await.map_err(backend_err)
    }

    fn now(&self) -> i64 {
        self.clock.now().millis()
    }

    /// Held for the duration of a write transaction on SQLite; nothing on PostgreSQL.
    pub(crate) async fn write_guard(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        match &self.write_lock {
            Some(lock) => Some(Arc::clone(lock).lock_owned().await),
            None => None,
        }
    }
}

fn backend_of(url: &str) -> Result<Backend, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Backend::Sqlite)
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Backend::Postgres)
    } else {
        Err(StoreError::Invalid(format!(
            "unsupported database URL scheme in {:?}: use sqlite:// or postgres://",
            url.split(':').next().unwrap_or_default()
        )))
    }
}

/// The file of an SQLite URL; `None` for an in-memory database.
fn sqlite_path(url: &str) -> Option<&str> {
    let path = url.trim_start_matches("sqlite:").trim_start_matches("//");
    let path = path.split('?').next().unwrap_or_default();
    (!path.is_empty() && path != ":memory:" && !url.contains("mode=memory")).then_some(path)
}

fn ensure_sqlite_parent(url: &str) -> Result<(), StoreError> {
    let Some(path) = sqlite_path(url) else {
        return Ok(());
    };
    match std::path::Path::new(path).parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir)
            .map_err(|e| StoreError::Backend(format!("cannot create {}: {e}", dir.display()))),
        _ => Ok(()),
    }
}

/// Maps a SeaORM error to the port error; the text goes to logs only.
pub(crate) fn backend_err(e: DbErr) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// True when the error is a unique or primary-key violation.
pub(crate) fn is_unique_violation(e: &DbErr) -> bool {
    matches!(e.sql_err(), Some(sea_orm::SqlErr::UniqueConstraintViolation(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_schemes() {
        assert_eq!(backend_of("sqlite://data/x.db?mode=rwc"), Ok(Backend::Sqlite));
        assert_eq!(backend_of("postgres://u@h/db"), Ok(Backend::Postgres));
        assert!(backend_of("mysql://h/db").is_err());
    }
}
