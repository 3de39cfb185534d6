//! The PostgreSQL dialect of the batched write path: a few writer tasks per process on a pool
//! of their own, prepared statements through sqlx (generic plans, so the big write statement is
//! planned once per connection, not at every batch), and a fixed number of round trips per batch
//! whatever its size.
//!
//! A batch is two round trips when no other writer got in its way: (only when some operation
//! names a task without its user, the owners of those tasks, then) one statement reading the
//! balances of the users it touches and the reservations and tasks it names; let
//! `billing::book::plan` decide; then one statement writing every planned row (data-modifying CTEs
//! over `unnest` arrays: one conditional update per user, guarded by the balance that was read,
//! also for users whose balance the batch leaves as it was; reservations and tasks inserted `ON
//! CONFLICT DO NOTHING`, ended and moved only from the state that was read), run as its own
//! transaction. Every row the plan relied on is guarded, and the
//! statement fails itself unless every planned row landed, so its effects are all or nothing: a
//! batch that raced another writer (another replica, or a second writer of this one) changed
//! nothing and is retried.
//!
//! The retries, and every batch for a while after a race (another replica busy on the same hot
//! account keeps racing), take the locking form instead: `BEGIN`; the same read, but locking every
//! user the batch touches with `SELECT … ORDER BY id FOR NO KEY UPDATE` (sorted, so replicas never
//! deadlock; all money and task-state writes of a user happen under that lock, so reservations
//! and tasks need no row locks of their own); the same write; `COMMIT`. Four round trips, but the
//! balances cannot change under it; only a new task id taken by another writer at the same time
//! can still make it retry (after three attempts the batch's operations run one at a time).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use billing::book::{self, BalanceWrite, BookOp, BookState, Held, Plan};
use domain::{TaskId, UsdAmount, UserId};
use sea_orm::sqlx::pool::PoolConnection;
use sea_orm::sqlx::{self, Connection, Executor, PgConnection, PgPool, Postgres, Row};
use tokio::sync::{Mutex, mpsc};

use crate::writer::{ATTEMPTS, BatchError, BookWriter, Committed, Job, answer, batch_time, drain, fail};

const OWNERS: &str = "SELECT user_id FROM reservations WHERE task_id = ANY($1) \
                      UNION SELECT user_id FROM tasks WHERE id = ANY($1)";
/// Locks the batch's users (sorted, so batches never deadlock) and reads their balances, then
/// reads the reservations and tasks the batch names, in one round trip. The balances come from
/// the locked rows (the newest versions, after any wait for the lock); the reservations and
/// tasks come from the statement's snapshot, which may predate a batch that held the lock
/// meanwhile. That is safe: every write the plan makes from them is guarded (`status =
/// 'reserved'`, `status = <from>`, `ON CONFLICT DO NOTHING`), and a guard that finds another
/// value makes the batch retry with a fresh read.
const LOCK_AND_READ: &str = "WITH u AS (SELECT id, balance_micros FROM users WHERE id = ANY($1) \
                               ORDER BY id COLLATE \"C\" FOR NO KEY UPDATE) \
                             SELECT 'u' AS k, id, id AS user_id, balance_micros AS amount, ''::text AS status FROM u \
                             UNION ALL SELECT 'r', task_id, user_id, amount_micros, status FROM reservations \
                               WHERE task_id = ANY($2) \
                             UNION ALL SELECT 't', id, user_id, 0::int8, status FROM tasks WHERE id = ANY($2)";
/// [`LOCK_AND_READ`] without the locks, for a batch that writes in a transaction of its own: the
/// newest committed balances, reservations and tasks when the statement starts.
const READ: &str = "SELECT 'u' AS k, id, id AS user_id, balance_micros AS amount, ''::text AS status FROM users \
                      WHERE id = ANY($1) \
                    UNION ALL SELECT 'r', task_id, user_id, amount_micros, status FROM reservations \
                      WHERE task_id = ANY($2) \
                    UNION ALL SELECT 't', id, user_id, 0::int8, status FROM tasks WHERE id = ANY($2)";

/// Every planned row of a batch in one statement; `$55` is the batch's time, `$56` the new
/// tasks' runners, `$57`–`$62` how many rows each part must write, `$63` what each user of `$1`
/// was charged (added to the running total, so the balance guard alone decides). Unless every part wrote them
/// all the statement fails (a text that is no number, cast to one), so none of it happens: a
/// guard that found another value (a balance, a reservation or task state another writer changed
/// since the read) or a task id another writer took makes the whole batch retry.
const WRITE: &str = "WITH \
bal AS (UPDATE users AS u SET balance_micros = v.to_balance, spent_micros = u.spent_micros + v.spent \
  FROM unnest($1::text[], $2::int8[], $3::int8[], $63::int8[]) AS v(id, from_balance, to_balance, spent) \
  WHERE u.id = v.id AND u.balance_micros = v.from_balance RETURNING 1), \
hold AS (INSERT INTO reservations (task_id, user_id, amount_micros, status, actual_micros, balance_after_micros, created_at, updated_at) \
  SELECT v.task_id, v.user_id, v.amount, v.status, v.actual, v.after, $55::int8, $55::int8 \
  FROM unnest($4::text[], $5::text[], $6::int8[], $7::text[], $8::int8[], $9::int8[]) AS v(task_id, user_id, amount, status, actual, after) \
  ON CONFLICT (task_id) DO NOTHING RETURNING 1), \
ends AS (UPDATE reservations AS r SET status = v.status, actual_micros = v.actual, balance_after_micros = v.after, updated_at = $55::int8 \
  FROM unnest($10::text[], $11::text[], $12::int8[], $13::int8[]) AS v(task_id, status, actual, after) \
  WHERE r.task_id = v.task_id AND r.status = 'reserved' RETURNING 1), \
ent AS (INSERT INTO ledger_entries (user_id, task_id, kind, amount_micros, balance_after_micros, description, created_at) \
  SELECT v.user_id, v.task_id, v.kind, v.amount, v.after, v.note, $55::int8 \
  FROM unnest($14::text[], $15::text[], $16::text[], $17::int8[], $18::int8[], $19::text[]) WITH ORDINALITY \
    AS v(user_id, task_id, kind, amount, after, note, n) \
  ORDER BY v.n RETURNING id), \
newt AS (INSERT INTO tasks (id, user_id, model, kind, status, prompt, provider, input_mode, media_type, media_url, \
    duration, resolution, ratio, generate_audio, pricing_version_id, usage, output_url, last_frame_url, error_code, \
    error_message, webhook_url, created_at, updated_at, completed_at, upstream_id, runner) \
  SELECT * FROM unnest($20::text[], $21::text[], $22::text[], $23::text[], $24::text[], $25::text[], $26::text[], \
    $27::text[], $28::text[], $29::text[], $30::int8[], $31::text[], $32::text[], $33::bool[], $34::text[], $35::text[], \
    $36::text[], $37::text[], $38::text[], $39::text[], $40::text[], $41::int8[], $42::int8[], $43::int8[], $44::text[], \
    $56::text[]) \
  ON CONFLICT (id) DO NOTHING RETURNING 1), \
movt AS (UPDATE tasks AS t SET status = v.to_status, updated_at = $55::int8, \
    completed_at = CASE WHEN v.done THEN $55::int8 ELSE t.completed_at END, \
    upstream_id = COALESCE(v.upstream_id, t.upstream_id), output_url = COALESCE(v.output_url, t.output_url), \
    last_frame_url = COALESCE(v.last_frame_url, t.last_frame_url), usage = COALESCE(v.usage, t.usage), \
    error_code = COALESCE(v.error_code, t.error_code), error_message = COALESCE(v.error_message, t.error_message) \
  FROM unnest($45::text[], $46::text[], $47::text[], $48::bool[], $49::text[], $50::text[], $51::text[], $52::text[], \
    $53::text[], $54::text[]) AS v(id, from_status, to_status, done, upstream_id, output_url, last_frame_url, usage, \
    error_code, error_message) \
  WHERE t.id = v.id AND t.status = v.from_status RETURNING 1), \
written AS (SELECT (SELECT count(*) FROM bal) AS b, (SELECT count(*) FROM hold) AS h, \
  (SELECT count(*) FROM ends) AS e, (SELECT COALESCE(array_agg(id ORDER BY id), '{}'::int8[]) FROM ent) AS ids, \
  (SELECT count(*) FROM newt) AS n, (SELECT count(*) FROM movt) AS m) \
SELECT ids FROM written \
WHERE CASE WHEN b = $57::int8 AND h = $58::int8 AND e = $59::int8 AND cardinality(ids) = $60::int8 \
  AND n = $61::int8 AND m = $62::int8 THEN true \
  ELSE ('ledger batch: rows written differ from the plan: ' || b || ' ' || h || ' ' || e || ' ' \
    || cardinality(ids) || ' ' || n || ' ' || m)::int8 = 0 END";

/// The part of the write statement's error when not every planned row landed.
const DIFFERS: &str = "rows written differ from the plan";

/// How the writers' connections name themselves to the server (`pg_stat_activity`).
pub const WRITER_APPLICATION_NAME: &str = "gateway ledger writer";

/// The writers' own pool: one connection per writer, never pinged before use. A connection
/// that broke fails the batch that used it (its operations then run one at a time, as after any
/// failed batch) instead of every batch paying a round trip to find out.
///
/// Every statement of a batch finds its rows by primary key, so its connections plan once and
/// for good: generic plans (planning the big write statement at every batch cost more than
/// running it), with sequential scans ruled out. Without the second setting a plan made while
/// the tables are still small (a fresh database) joins by scanning `tasks` and `users`, and
/// keeps doing so as they grow to millions of rows.
pub(crate) async fn writer_pool(url: &str, writers: usize) -> Result<PgPool, sqlx::Error> {
    let options: sqlx::postgres::PgConnectOptions = url.parse()?;
    let options = options
        .options([("plan_cache_mode", "force_generic_plan"), ("enable_seqscan", "off")])
        .application_name(WRITER_APPLICATION_NAME);
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(u32::try_from(writers.max(1)).unwrap_or(1))
        .min_connections(1)
        .test_before_acquire(false)
        .acquire_timeout(std::time::Duration::from_secs(30))
        .connect_with(options)
        .await
}

/// Starts `writers` writer tasks on the current runtime, sharing one queue and `pool` (which
/// should hold one connection per writer). With more than one, while one writer's batch waits
/// for its commit the next writer already takes what queued meanwhile; batches of one user queue
/// on that user's row lock (as batches of two replicas do). See [`crate::PG_WRITERS`].
pub(crate) fn start(pool: PgPool, writers: usize) -> BookWriter {
    let (tx, rx) = mpsc::unbounded_channel();
    let rx = Arc::new(Mutex::new(rx));
    for _ in 0..writers.max(1) {
        tokio::spawn(run(pool.clone(), Arc::clone(&rx)));
    }
    BookWriter::new(tx)
}

/// The next batch: waits for one job, then takes whatever else is queued (never waits for more).
async fn next_batch(rx: &Mutex<mpsc::UnboundedReceiver<Job>>) -> Option<Vec<Job>> {
    let mut rx = rx.lock().await;
    let first = rx.recv().await?;
    let mut jobs = vec![first];
    drain(&mut rx, &mut jobs);
    Some(jobs)
}

/// How long a writer's batches take the locking form after one of its batches lost a race.
const LOCKING_AFTER_A_RACE: Duration = Duration::from_secs(1);

async fn run(pool: PgPool, rx: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>) {
    let mut writer = Writer { pool, conn: None, locking_until: None };
    while let Some(jobs) = next_batch(&rx).await {
        match writer.commit_with_retries(&jobs).await {
            Ok(done) => answer(jobs, done),
            Err(e) if jobs.len() == 1 || !e.replayable() => fail(jobs, e.text()),
            Err(e) => {
                tracing::warn!(
                    error = e.text(),
                    ops = jobs.len(),
                    "ledger batch failed; running its operations one by one"
                );
                for job in jobs {
                    match writer.commit_with_retries(std::slice::from_ref(&job)).await {
                        Ok(done) => answer(vec![job], done),
                        Err(e) => fail(vec![job], e.text()),
                    }
                }
            }
        }
    }
}

/// One writer task's state: its connection, and which form its next batch takes.
struct Writer {
    pool: PgPool,
    /// Kept from batch to batch: a pooled connection goes back to its pool through a task of
    /// its own at every release, and the next batch would wait for that task to run (~100 µs
    /// under load). Given back after a batch failed for any reason but a race; the pool replaces
    /// it if it broke.
    conn: Option<PoolConnection<Postgres>>,
    /// Until when batches take the locking form: set for [`LOCKING_AFTER_A_RACE`] when a batch in
    /// the two-round-trip form lost a race.
    locking_until: Option<Instant>,
}

impl Writer {
    async fn connection(&mut self) -> Result<&mut PgConnection, BatchError> {
        let conn = match self.conn.take() {
            Some(conn) => conn,
            None => self.pool.acquire().await.map_err(fail_pg)?,
        };
        Ok(&mut **self.conn.insert(conn))
    }

    async fn commit_with_retries(&mut self, jobs: &[Job]) -> Result<Committed, BatchError> {
        let mut last = BatchError::Fail("no attempt".into());
        for attempt in 0..ATTEMPTS {
            let locking = attempt > 0 || self.locking_until.is_some_and(|until| Instant::now() < until);
            let conn = self.connection().await?;
            let result = if locking { commit_locked(conn, jobs).await } else { commit_unlocked(conn, jobs).await };
            match result {
                Ok(done) => return Ok(done),
                Err(e @ BatchError::Retry(_)) => {
                    if !locking {
                        tracing::debug!(
                            error = e.text(),
                            "ledger batch raced another writer; taking row locks for a while"
                        );
                        self.locking_until = Some(Instant::now() + LOCKING_AFTER_A_RACE);
                    }
                    last = e;
                }
                Err(e) => {
                    self.conn = None;
                    return Err(e);
                }
            }
        }
        Err(last)
    }
}

fn fail_pg(e: sqlx::Error) -> BatchError {
    let retry = matches!(&e, sqlx::Error::Database(d)
        if matches!(d.code().as_deref(), Some("40001" | "40P01" | "23505"))
            || (d.code().as_deref() == Some("22P02") && d.message().contains(DIFFERS)));
    if retry { BatchError::Retry(e.to_string()) } else { BatchError::Fail(e.to_string()) }
}

/// [`fail_pg`] for the statement that commits: an error the server reported means it rolled back,
/// any other (the connection broke, an answer that cannot be read) leaves the outcome unknown.
fn fail_pg_committing(e: sqlx::Error) -> BatchError {
    if matches!(e, sqlx::Error::Database(_)) {
        fail_pg(e)
    } else {
        BatchError::Unknown(format!("the batch may have committed; its answer was lost: {e}"))
    }
}

/// One batch in two statements, each its own transaction: the read, then the write, which
/// happens whole or not at all ([`WRITE`]).
///
/// The plan relies on every balance it read, also those it leaves as they were (a settlement that
/// charges exactly its hold still reports the balance after it; a task may end only while its
/// owner holds nothing for it): each of those users gets a guard that writes the balance it read
/// back unchanged, so a change by another writer since the read fails the statement too.
async fn commit_unlocked(conn: &mut PgConnection, jobs: &[Job]) -> Result<Committed, BatchError> {
    let state = read(conn, READ, jobs.iter().map(|j| &j.op)).await.map_err(fail_pg)?;
    let read: Vec<(UserId, UsdAmount)> = state.balances.iter().map(|(u, b)| (u.clone(), *b)).collect();
    let plan = book::plan(jobs.iter().map(|j| &j.op), state, batch_time(jobs));
    if plan.is_empty() {
        // Every operation was refused on what was read; nothing is written.
        return Ok((plan, Vec::new()));
    }
    let unchanged: Vec<BalanceWrite> = read
        .into_iter()
        .filter(|(user, _)| !plan.balances.iter().any(|b| &b.user == user))
        .map(|(user, balance)| BalanceWrite { user, from: balance, to: balance, spent: UsdAmount::ZERO })
        .collect();
    // Prepared first (a cache lookup after the first time): a failure there wrote nothing, and
    // must not be taken for a commit whose answer was lost.
    conn.prepare(sqlx::SqlSafeStr::into_sql_str(WRITE)).await.map_err(fail_pg)?;
    let ids = write(conn, &plan, &unchanged).await.map_err(fail_pg_committing)?;
    Ok((plan, ids))
}

/// One batch in one transaction holding its users' row locks; any error rolls it back (the
/// transaction is dropped).
async fn commit_locked(conn: &mut PgConnection, jobs: &[Job]) -> Result<Committed, BatchError> {
    let mut tx = conn.begin().await.map_err(fail_pg)?;
    let state = read(&mut tx, LOCK_AND_READ, jobs.iter().map(|j| &j.op)).await.map_err(fail_pg)?;
    let plan = book::plan(jobs.iter().map(|j| &j.op), state, batch_time(jobs));
    // The users' row locks keep every balance as read until the commit: no guard of its own
    // needed for the unchanged ones.
    let ids = if plan.is_empty() { Vec::new() } else { write(&mut tx, &plan, &[]).await.map_err(fail_pg)? };
    tx.commit().await.map_err(fail_pg_committing)?;
    Ok((plan, ids))
}

fn bad_row(what: &str, e: impl std::fmt::Display) -> sqlx::Error {
    sqlx::Error::Protocol(format!("stored {what}: {e}"))
}

/// Reads the balances of the users the batch touches, the reservations and the tasks it names
/// with `statement` ([`READ`], or [`LOCK_AND_READ`], which also locks the users); first the
/// owners of tasks named without their user, if any.
async fn read<'a>(
    conn: &mut PgConnection,
    statement: &'static str,
    ops: impl IntoIterator<Item = &'a BookOp>,
) -> Result<BookState, sqlx::Error> {
    let keys = book::keys(ops);
    let mut users: BTreeSet<UserId> = keys.users;
    if !keys.owners_unknown.is_empty() {
        let unknown: Vec<&str> = keys.owners_unknown.iter().map(TaskId::as_str).collect();
        let rows = sqlx::query(OWNERS).bind(&unknown).fetch_all(&mut *conn).await?;
        for row in rows {
            users.insert(UserId(row.try_get(0)?));
        }
    }
    let mut state = BookState::default();
    let ids: Vec<&str> = users.iter().map(UserId::as_str).collect();
    let tasks: Vec<&str> = keys.tasks.iter().map(TaskId::as_str).collect();
    for row in sqlx::query(statement).bind(&ids).bind(&tasks).fetch_all(&mut *conn).await? {
        let (kind, id, user): (String, String, String) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        let amount = UsdAmount::from_micros(row.try_get(3)?);
        let status: String = row.try_get(4)?;
        match kind.as_str() {
            "u" => {
                state.balances.insert(UserId(id), amount);
            }
            "r" => {
                let status = status.parse().map_err(|e| bad_row("reservation status", e))?;
                state.holds.insert(TaskId(id), Held { user: UserId(user), amount, status });
            }
            _ => {
                let status = status.parse().map_err(|e| bad_row("task status", e))?;
                state.tasks.insert(TaskId(id), (UserId(user), status));
            }
        }
    }
    Ok(state)
}

/// Writes the plan in one statement, which fails unless every row landed (so a count that differs
/// is never seen here: the statement, or the transaction, changed nothing); returns the entry ids.
/// `unchanged`: balances to guard besides the plan's own writes (see [`commit_unlocked`]).
async fn write(conn: &mut PgConnection, plan: &Plan, unchanged: &[BalanceWrite]) -> Result<Vec<i64>, sqlx::Error> {
    let query = crate::pg_rows::bind_all(sqlx::query(WRITE), plan, unchanged);
    query.fetch_one(&mut *conn).await?.try_get(0)
}
