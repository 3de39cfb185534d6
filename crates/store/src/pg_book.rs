//! The PostgreSQL dialect of the batched write path: a few writer tasks per process on a pool
//! of their own, prepared statements through sqlx (generic plans, so the big write statement is
//! planned once per connection, not at every batch), and a fixed number of round trips per batch
//! whatever its size.
//!
//! One batch: `BEGIN`; (only when some operation names a task without its user) read the owners
//! of those tasks; in one statement, lock every user the batch touches with `SELECT … ORDER BY id
//! FOR NO KEY UPDATE` (sorted, so replicas never deadlock; all money and task-state writes of a
//! user happen under that lock, so reservations and tasks need no row locks of their own) and
//! read the reservations and tasks the batch names; let `billing::book::plan` decide; write every
//! planned row in one statement of data-modifying CTEs over `unnest` arrays (one conditional
//! update per user, guarded by the balance read under the lock; reservations and tasks inserted
//! `ON CONFLICT DO NOTHING`); check the counts; `COMMIT`. A count that differs (a lost race on a
//! task id with another replica) or a serialization failure rolls back and retries the batch.

use std::collections::BTreeSet;
use std::sync::Arc;

use billing::book::{self, BookOp, BookState, Held, Plan};
use domain::{TaskId, UsdAmount, UserId};
use sea_orm::sqlx::{self, PgPool, Postgres, Row, Transaction};
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
                               ORDER BY id FOR NO KEY UPDATE) \
                             SELECT 'u' AS k, id, id AS user_id, balance_micros AS amount, ''::text AS status FROM u \
                             UNION ALL SELECT 'r', task_id, user_id, amount_micros, status FROM reservations \
                               WHERE task_id = ANY($2) \
                             UNION ALL SELECT 't', id, user_id, 0::int8, status FROM tasks WHERE id = ANY($2)";

/// Every planned row of a batch in one statement; `$55` is the batch's time, `$56` the new
/// tasks' runners.
const WRITE: &str = "WITH \
bal AS (UPDATE users AS u SET balance_micros = v.to_balance \
  FROM unnest($1::text[], $2::int8[], $3::int8[]) AS v(id, from_balance, to_balance) \
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
  WHERE t.id = v.id AND t.status = v.from_status RETURNING 1) \
SELECT (SELECT count(*) FROM bal), (SELECT count(*) FROM hold), (SELECT count(*) FROM ends), \
  (SELECT COALESCE(array_agg(id ORDER BY id), '{}'::int8[]) FROM ent), (SELECT count(*) FROM newt), \
  (SELECT count(*) FROM movt)";

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
    let options = options.options([("plan_cache_mode", "force_generic_plan"), ("enable_seqscan", "off")]);
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

async fn run(pool: PgPool, rx: Arc<Mutex<mpsc::UnboundedReceiver<Job>>>) {
    while let Some(jobs) = next_batch(&rx).await {
        match commit_with_retries(&pool, &jobs).await {
            Ok(done) => answer(jobs, done),
            Err(e) if jobs.len() == 1 => fail(jobs, e.text()),
            Err(e) => {
                tracing::warn!(
                    error = e.text(),
                    ops = jobs.len(),
                    "ledger batch failed; running its operations one by one"
                );
                for job in jobs {
                    match commit_with_retries(&pool, std::slice::from_ref(&job)).await {
                        Ok(done) => answer(vec![job], done),
                        Err(e) => fail(vec![job], e.text()),
                    }
                }
            }
        }
    }
}

async fn commit_with_retries(pool: &PgPool, jobs: &[Job]) -> Result<Committed, BatchError> {
    let mut last = BatchError::Fail("no attempt".into());
    for _ in 0..ATTEMPTS {
        match commit(pool, jobs).await {
            Ok(done) => return Ok(done),
            Err(e @ BatchError::Retry(_)) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

fn fail_pg(e: sqlx::Error) -> BatchError {
    let retry =
        matches!(&e, sqlx::Error::Database(d) if matches!(d.code().as_deref(), Some("40001" | "40P01" | "23505")));
    if retry { BatchError::Retry(e.to_string()) } else { BatchError::Fail(e.to_string()) }
}

/// One batch in one transaction; any error rolls it back (the transaction is dropped).
async fn commit(pool: &PgPool, jobs: &[Job]) -> Result<Committed, BatchError> {
    let mut tx = pool.begin().await.map_err(fail_pg)?;
    let state = read(&mut tx, jobs.iter().map(|j| &j.op)).await.map_err(fail_pg)?;
    let plan = book::plan(jobs.iter().map(|j| &j.op), state, batch_time(jobs));
    let ids = if plan.is_empty() { Vec::new() } else { write(&mut tx, &plan).await? };
    tx.commit().await.map_err(fail_pg)?;
    Ok((plan, ids))
}

fn bad_row(what: &str, e: impl std::fmt::Display) -> sqlx::Error {
    sqlx::Error::Protocol(format!("stored {what}: {e}"))
}

/// Locks the users the batch touches and reads their balances, the reservations and the tasks
/// it names ([`LOCK_AND_READ`]); first the owners of tasks named without their user, if any.
async fn read<'a>(
    tx: &mut Transaction<'static, Postgres>,
    ops: impl IntoIterator<Item = &'a BookOp>,
) -> Result<BookState, sqlx::Error> {
    let keys = book::keys(ops);
    let mut users: BTreeSet<UserId> = keys.users;
    if !keys.owners_unknown.is_empty() {
        let unknown: Vec<&str> = keys.owners_unknown.iter().map(TaskId::as_str).collect();
        let rows = sqlx::query(OWNERS).bind(&unknown).fetch_all(&mut **tx).await?;
        for row in rows {
            users.insert(UserId(row.try_get(0)?));
        }
    }
    let mut state = BookState::default();
    let ids: Vec<&str> = users.iter().map(UserId::as_str).collect();
    let tasks: Vec<&str> = keys.tasks.iter().map(TaskId::as_str).collect();
    for row in sqlx::query(LOCK_AND_READ).bind(&ids).bind(&tasks).fetch_all(&mut **tx).await? {
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

/// Writes the plan in one statement and checks that every row landed; returns the entry ids.
async fn write(tx: &mut Transaction<'static, Postgres>, plan: &Plan) -> Result<Vec<i64>, BatchError> {
    let query = crate::pg_rows::bind_all(sqlx::query(WRITE), plan);
    let row = query.fetch_one(&mut **tx).await.map_err(fail_pg)?;
    let counts: [i64; 5] = [
        row.try_get(0).map_err(fail_pg)?,
        row.try_get(1).map_err(fail_pg)?,
        row.try_get(2).map_err(fail_pg)?,
        row.try_get(4).map_err(fail_pg)?,
        row.try_get(5).map_err(fail_pg)?,
    ];
    let ids: Vec<i64> = row.try_get(3).map_err(fail_pg)?;
    let expected = [
        plan.balances.len(),
        plan.new_holds.len(),
        plan.ended_holds.len(),
        plan.new_tasks.len(),
        plan.task_writes.len(),
    ];
    let landed = counts.iter().zip(expected).all(|(&got, want)| usize::try_from(got).is_ok_and(|g| g == want));
    if !landed || ids.len() != plan.entries.len() {
        return Err(BatchError::Retry(format!(
            "rows written {counts:?} + {} entries, planned {expected:?} + {}",
            ids.len(),
            plan.entries.len()
        )));
    }
    Ok(ids)
}
