//! The store's SeaORM connections: one way to read, one way to write.
//!
//! Reads go to [`Db::reads`]; every write outside the batched writer goes to [`Db::writes`]
//! (single statements, or a transaction begun on it). On PostgreSQL both are the same pool. On
//! SQLite they are two pools of the same file: the read pool's connections are `query_only` (a
//! write sent there fails at once, in the first test that runs it), and the write pool holds one
//! connection, which is the process's write lock: a write statement or transaction of one task
//! waits for the pool's only connection while another task's runs, in order of arrival, instead
//! of meeting SQLite's sleeping busy handler. Nothing has to be remembered around a write: there
//! is no other connection that can write. (The batched writer, `sqlite_book.rs`, has its own
//! rusqlite connection and meets this one through SQLite's busy timeout, as another process
//! would.)

use std::time::Duration;

use domain::ports::StoreError;
use sea_orm::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sea_orm::{ConnectOptions, Database, DatabaseConnection, DbBackend, Statement, Value};

use crate::{Backend, PG_POOL_CONNECTIONS, SQLITE_POOL_CONNECTIONS, Store, backend_err};

/// The read and the write connections of one store.
#[derive(Clone)]
pub(crate) struct Db {
    reads: DatabaseConnection,
    /// SQLite: a pool of one connection, apart from `reads`; PostgreSQL: `reads` again.
    writes: DatabaseConnection,
}

impl Db {
    /// Connects to `url`: on SQLite the write pool first (it creates the file and puts it in WAL
    /// mode), then the `query_only` read pool.
    pub(crate) async fn connect(url: &str, backend: Backend) -> Result<Db, StoreError> {
        match backend {
            Backend::Postgres => {
                let pool = Database::connect(options(url, PG_POOL_CONNECTIONS)).await.map_err(backend_err)?;
                Ok(Db { reads: pool.clone(), writes: pool })
            }
            Backend::Sqlite => {
                let writes = Database::connect(sqlite_options(url, 1, false)).await.map_err(backend_err)?;
                let reads =
                    Database::connect(sqlite_options(url, SQLITE_POOL_CONNECTIONS, true)).await.map_err(backend_err)?;
                Ok(Db { reads, writes })
            }
        }
    }

    /// The connections for queries (on SQLite they refuse to write).
    pub(crate) fn reads(&self) -> &DatabaseConnection {
        &self.reads
    }

    /// The connection for every write outside the batched writer: a statement alone, or a
    /// transaction begun on it. On SQLite it is the process's one write connection, so a
    /// transaction begun here holds the process's write lock until it ends.
    pub(crate) fn writes(&self) -> &DatabaseConnection {
        &self.writes
    }

    /// The database behind the connections.
    pub(crate) fn backend(&self) -> DbBackend {
        self.reads.get_database_backend()
    }

    /// Closes both pools, waiting for their connections to finish.
    pub(crate) async fn close(self) -> Result<(), StoreError> {
        let same = self.backend() == DbBackend::Postgres;
        self.reads.close().await.map_err(backend_err)?;
        if !same {
            self.writes.close().await.map_err(backend_err)?;
        }
        Ok(())
    }
}

/// The options both databases share.
fn options(url: &str, connections: u32) -> ConnectOptions {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .sqlx_logging(false)
        .acquire_timeout(Duration::from_secs(30))
        .max_connections(connections)
        .min_connections(1)
        // sqlx pings a connection before every use by default: a round trip per query.
        .test_before_acquire(false);
    options
}

/// The page cache of each pooled SQLite connection, in KiB (`PRAGMA cache_size=-N`). In WAL mode
/// a connection's cache is emptied whenever another connection has committed, which the batched
/// writer does all the time, and the database file's pages are read through `mmap` without it;
/// a larger cache only grows the C heap (SQLite allocates it with `malloc`, which keeps what it
/// has touched): at 16 MiB each, the connections held ~16 MiB more after two seconds of calls.
pub(crate) const POOL_CACHE_KIB: u32 = 1024;
/// The batched writer's page cache, in KiB: no other connection writes between its batches, so
/// the pages it rewrites on every batch (the balances, the indexes' right edges) stay cached. At
/// 4 MiB, `gateway-c64` ran as fast as at 16 MiB.
pub(crate) const WRITER_CACHE_KIB: u32 = 4096;
/// The checkpointer's page cache, in KiB: a checkpoint copies WAL frames without it.
pub(crate) const CHECKPOINTER_CACHE_KIB: u32 = 128;

/// SQLite runs in WAL mode with `synchronous=NORMAL`, a busy timeout and foreign keys on; a
/// read pool's connections are `query_only`.
fn sqlite_options(url: &str, connections: u32, query_only: bool) -> ConnectOptions {
    let mut options = options(url, connections);
    options.map_sqlx_sqlite_opts(move |o: SqliteConnectOptions| {
        let o = o
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(30))
            .foreign_keys(true)
            .create_if_missing(!query_only)
            .pragma("mmap_size", "268435456")
            .pragma("cache_size", format!("-{POOL_CACHE_KIB}"))
            // The writer's checkpointer thread copies the WAL back for every connection
            // (`sqlite_book.rs`); a request must not pay for a checkpoint in its commit.
            .pragma("wal_autocheckpoint", "0");
        if query_only { o.pragma("query_only", "ON") } else { o }
    });
    options
}

/// The PostgreSQL statement that serialises transactions on `key` until they end: the one
/// advisory lock of the store (migrations, and each cap's grants).
pub(crate) fn advisory_lock(key: &str) -> Statement {
    Statement::from_sql_and_values(
        DbBackend::Postgres,
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 7))",
        [Value::from(key)],
    )
}

impl Store {
    /// A statement for this store's database; the text uses `$1`, `$2`, … on both (sqlx binds
    /// SQLite's `$N` parameters by number too).
    pub(crate) fn statement(&self, sql: &str, values: Vec<Value>) -> Statement {
        Statement::from_sql_and_values(self.db.backend(), sql, values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_orm::ConnectionTrait;

    /// On SQLite a write sent to the read pool fails at once (it would otherwise race the one
    /// write connection through the busy handler); the write connection writes, and the reads see it.
    #[tokio::test]
    async fn sqlite_reads_refuse_to_write() {
        let dir = std::env::temp_dir().join(format!("gw-db-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let url = format!("sqlite://{}?mode=rwc", dir.join("gw.db").display());
        let db = Db::connect(&url, Backend::Sqlite).await.expect("connect");
        let refused = db.reads().execute_unprepared("CREATE TABLE t (a INTEGER)").await;
        let error = refused.expect_err("the read pool wrote").to_string();
        assert!(error.contains("readonly"), "{error}");
        db.writes().execute_unprepared("CREATE TABLE t (a INTEGER)").await.expect("create");
        db.writes().execute_unprepared("INSERT INTO t VALUES (7)").await.expect("insert");
        let refused = db.reads().execute_unprepared("INSERT INTO t VALUES (8)").await;
        assert!(refused.is_err(), "the read pool inserted");
        let row = db.reads().query_one_raw(Statement::from_string(DbBackend::Sqlite, "SELECT SUM(a) AS n FROM t"));
        let n: i64 = row.await.expect("read").expect("a row").try_get("", "n").expect("n");
        assert_eq!(n, 7);
        db.close().await.expect("close");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
