//! Storage on SQLite or PostgreSQL: accounts, keys, models, prices, tasks and the ledger.
//!
//! This is the only crate that knows SeaORM, sqlx and rusqlite. It implements the port traits
//! of `domain` (`AccountStore`, `TaskStore`, `ModelStore`, `IdempotencyStore`, `VideoStore`) and
//! the `Ledger` and `CallBook` ports of `billing`. Every movement of money and every task state
//! change goes through one batched writer (`writer.rs`): the rules are `billing::book::plan`, and
//! the two databases differ only in how a batch locks, reads and writes its rows (`sqlite_book.rs`,
//! `pg_book.rs`). No concurrency can overdraw a balance, whether the writers are tasks of one
//! process or replicas sharing one PostgreSQL.

/// The SQL condition "`$column` is a running task status": `(status = 'submitting' OR status =
/// 'queued' OR status = 'processing')` for `is_running!("status")`. The one place the running
/// statuses are written for SQL (a test checks them against `domain::TaskStatus::RUNNING` and the
/// partial indexes of the migrations). A macro, not a bound value or a `const`, because the
/// statements must carry it as a literal (a bound value cannot prove a partial index's condition)
/// and `concat!` takes only literals.
///
/// Equalities joined by `OR`, not `IN (...)`: SQLite evaluates a partial index's condition on
/// every insert and update of a task, and builds a temporary b-tree for each `IN` list of three
/// constants or more it meets (six per task update with three such indexes). SQLite's indexes
/// (migration 0025) carry this very text, which a statement must repeat to use them;
/// PostgreSQL's keep `status IN (...)`, which it proves from these equalities.
macro_rules! is_running {
    ($column:literal) => {
        concat!("(", $column, " = 'submitting' OR ", $column, " = 'queued' OR ", $column, " = 'processing')")
    };
}

mod accounts;
mod alerts;
mod caps;
mod db;
mod entities;
mod idempotency;
mod lease;
mod ledger;
mod manage;
mod media;
mod migrate;
mod models;
mod pg_assume;
mod pg_book;
mod pg_rows;
mod prune;
mod rates;
mod responses;
mod sqlite_book;
mod statements;
mod tasks;
mod video;
mod vouchers;
mod webhooks;
mod writer;

use std::sync::Arc;
use std::time::Duration;

use domain::ports::StoreError;
use domain::{Clock, SystemClock};
pub use pg_book::WRITER_APPLICATION_NAME;
pub use prune::{DEFAULT_IDEMPOTENCY_TTL, PrunePolicy, Pruned};
use sea_orm::{DbBackend, DbErr};
pub use writer::MAX_BATCH;

/// Which database a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// An embedded SQLite file.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// The gateway's storage: its connections, the batched writer, and the clock used for timestamps.
#[derive(Clone)]
pub struct Store {
    /// The read and write connections (`db.rs`): every SeaORM statement goes through them.
    db: db::Db,
    clock: Arc<dyn Clock>,
    /// The batched writer of money and task states.
    writer: writer::BookWriter,
    /// Age after which an `Idempotency-Key` claim has expired: its key is fresh again, and the
    /// prune deletes it ([`Store::with_idempotency_ttl`]).
    idempotency_ttl_ms: i64,
}

/// Connections of the PostgreSQL pool (reads and the writes outside the batched writer).
pub const PG_POOL_CONNECTIONS: u32 = 8;

/// Writer tasks of the batched writer on PostgreSQL, each with a connection of its own (a pool
/// apart from [`PG_POOL_CONNECTIONS`], so reads never wait behind batches or the reverse).
///
/// One: a second writer overlapped batches, but halved their size, so PostgreSQL paid each
/// batch's fixed cost (round trips, the commit's flush, a hot user's row lock) twice as often.
/// Measured A/B (`docs/PERFORMANCE.md`): the same throughput on one replica with ~20 % less
/// PostgreSQL CPU per call, and two replicas on one database +35 %.
pub const PG_WRITERS: usize = 1;

/// Connections of the SQLite read pool (the SeaORM writes have one connection of their own, and
/// the batched writer another).
pub const SQLITE_POOL_CONNECTIONS: u32 = 8;

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("backend", &self.backend()).finish_non_exhaustive()
    }
}

impl Store {
    /// Connects to `url` (`sqlite://path?mode=rwc` or `postgres://…`) without migrating.
    ///
    /// SQLite runs in WAL mode with `synchronous=NORMAL`, a busy timeout and foreign keys on;
    /// the parent folder of the file is created if missing. An in-memory SQLite database is
    /// refused: the writer needs its own connection to the same file. Starts the batched writer
    /// (a thread on SQLite, a task on the current tokio runtime on PostgreSQL).
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        let backend = backend_of(url)?;
        let sqlite_file = match backend {
            Backend::Sqlite => Some(sqlite_path(url).ok_or_else(|| {
                StoreError::Invalid("an in-memory SQLite database is not supported: use a file".into())
            })?),
            Backend::Postgres => None,
        };
        if backend == Backend::Sqlite {
            ensure_sqlite_parent(url)?;
        }
        let db = db::Db::connect(url, backend).await?;
        let writer = match sqlite_file {
            Some(path) => sqlite_book::start(std::path::Path::new(path), sqlite_book::Checkpoints::DEFAULT)?,
            None => pg_book::start(
                pg_book::writer_pool(url, PG_WRITERS).await.map_err(|e| StoreError::Backend(e.to_string()))?,
                PG_WRITERS,
            ),
        };
        Ok(Store {
            db,
            clock: Arc::new(SystemClock),
            writer,
            idempotency_ttl_ms: domain::duration_millis(DEFAULT_IDEMPOTENCY_TTL),
        })
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

    /// Replaces how long an `Idempotency-Key` claim lives (default [`DEFAULT_IDEMPOTENCY_TTL`]): an
    /// older one is claimed afresh, as if the key had never been used, and the prune deletes it.
    pub fn with_idempotency_ttl(mut self, ttl: Duration) -> Store {
        self.idempotency_ttl_ms = domain::duration_millis(ttl);
        self
    }

    /// Applies the embedded migrations that have not run yet; returns how many ran.
    pub async fn migrate(&self) -> Result<u64, StoreError> {
        migrate::run(self.db.writes()).await
    }

    /// The database behind this store.
    pub fn backend(&self) -> Backend {
        match self.db.backend() {
            DbBackend::Postgres => Backend::Postgres,
            _ => Backend::Sqlite,
        }
    }

    /// Stops what the store started, in order, and waits for it: the batched writer (it commits
    /// what is queued first; operations submitted afterwards, through any clone of this store,
    /// fail), then the connection pools. Calling it again does nothing more.
    pub async fn close(self) -> Result<(), StoreError> {
        self.writer.stop().await;
        self.db.close().await
    }

    fn now(&self) -> i64 {
        self.clock.now().millis()
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

#[async_trait::async_trait]
impl domain::ports::Readiness for Store {
    async fn pending_migrations(&self) -> Result<u64, StoreError> {
        migrate::pending(self.db.reads()).await
    }
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

    #[test]
    fn the_running_statuses_of_the_sql_are_the_domain_s() {
        let running = domain::TaskStatus::RUNNING.map(domain::TaskStatus::as_str);
        let equal: Vec<String> = running.iter().map(|s| format!("t.status = '{s}'")).collect();
        assert_eq!(is_running!("t.status"), format!("({})", equal.join(" OR ")));
        // The partial indexes that the statements rely on carry the same statuses: SQLite's as
        // the very condition the statements write, PostgreSQL's as a list.
        let sqlite = include_str!("../../../migrations/sqlite/0025_writer_indexes.sql");
        assert_eq!(sqlite.matches(concat!("WHERE ", is_running!("status"))).count(), 1, "{sqlite}");
        assert_eq!(sqlite.matches(concat!("AND ", is_running!("status"))).count(), 2, "{sqlite}");
        let list: Vec<String> = running.iter().map(|s| format!("'{s}'")).collect();
        let list = format!("status IN ({})", list.join(", "));
        for migration in [
            include_str!("../../../migrations/postgres/0004_video_work.sql"),
            include_str!("../../../migrations/postgres/0005_running_calls.sql"),
        ] {
            assert!(migration.contains(&list), "{migration}");
        }
    }
}
