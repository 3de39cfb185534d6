//! The PostgreSQL dialect of the batched write path: a few writer tasks per process on a pool
//! of their own, prepared statements through sqlx (generic plans, so the big write statement is
//! planned once per connection, not at every batch), and a fixed number of round trips per batch
//! whatever its size.
//!
//! Every batch ends in one statement writing every planned row (data-modifying CTEs over
//! `unnest` arrays, run as its own transaction), which fails itself unless every part wrote
//! exactly the planned rows, so its effects are all or nothing. Balances are written relative to
//! what the statement finds (`balance + change`), within the bounds the plan's decisions need
//! (`billing::book::Relies`: at least what the granted holds need; exactly the balance read after
//! a refusal for want of balance); every balance after a movement is shifted by the difference
//! found, in the rows and in the answers. So another writer moving the same balance in between
//! (another replica on a hot account) does not make the batch retry; only a decision it would
//! change does. Reservations end only from `reserved` (and of the user and amount planned),
//! tasks move only from the state planned, new ids are inserted `ON CONFLICT DO NOTHING`.
//!
//! A batch whose operations say enough (holds, ends that name their user and amount, credits:
//! `pg_assume.rs`) is one round trip: planned on what they assume, written, and every
//! assumption checked by the statement. When one is false (a hold the balance cannot cover, a
//! reservation already ended, a user that does not exist), the statement changed nothing, and the
//! batch takes the reading path, as does a batch that says too little or whose assumed plan
//! refused something: (only when some operation names a task without its user, the owners of
//! those tasks, then) one statement reading the balances, reservations and tasks it touches; plan
//! on them; the same write (two round trips, three after a false assumption). A batch that raced
//! another writer there changed nothing and is retried.
//!
//! The retries, and every batch for a while after a race, take the locking form instead:
//! `BEGIN`; the same read, but locking every user the batch touches with `SELECT … ORDER BY id
//! FOR NO KEY UPDATE` (sorted, so replicas never deadlock); the same write; `COMMIT`. Four round
//! trips, but the balances cannot change under it; a new task id taken by another writer at the
//! same time, a reservation or task another batch changed after the read's snapshot, or a number
//! out of range can still make it retry (after three attempts the batch's operations run one at
//! a time).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use billing::book::{self, BookOp, BookState, Held, Plan};
use domain::{ApiKeyId, BudgetKeys, TaskId, UsdAmount, UserId};
use sea_orm::sqlx::pool::PoolConnection;
use sea_orm::sqlx::{self, Connection, Executor, PgConnection, PgPool, Postgres, Row};
use tokio::sync::{Mutex, mpsc};

use crate::pg_assume::assumed;
use crate::writer::{
    ATTEMPTS, BatchError, BookWriter, Committed, Job, Queued, Running, answer, batch_time, drain, fail, next,
};

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
                               ORDER BY id COLLATE \"C\" FOR NO KEY UPDATE), \
                             kb AS (SELECT id, budget_micros, budget_period, budget_period_start, budget_spent_micros, \
                               budget_held_micros FROM api_keys WHERE id IN (SELECT unnest($3::text[]) \
                               UNION SELECT unnest(string_to_array(budget_key, ',')) FROM reservations WHERE task_id = ANY($2) AND budget_key IS NOT NULL) \
                               ORDER BY id COLLATE \"C\" FOR NO KEY UPDATE) \
                             SELECT 'u' AS k, id, id AS user_id, balance_micros AS amount, ''::text AS status, \
                               NULL::text AS extra, 0::int8 AS n1, 0::int8 AS n2, 0::int8 AS n3 FROM u \
                             UNION ALL SELECT 'r', task_id, user_id, amount_micros, status, budget_key, 0, 0, 0 \
                               FROM reservations WHERE task_id = ANY($2) \
                             UNION ALL SELECT 't', id, user_id, 0::int8, status, NULL, 0, 0, 0 FROM tasks WHERE id = ANY($2) \
                             UNION ALL SELECT 'k', id, '', budget_micros, '', budget_period, budget_period_start, \
                               budget_spent_micros, budget_held_micros FROM kb";
/// [`LOCK_AND_READ`] without the locks, for a batch that writes in a transaction of its own: the
/// newest committed balances, reservations and tasks when the statement starts.
const READ: &str = "SELECT 'u' AS k, id, id AS user_id, balance_micros AS amount, ''::text AS status, \
                      NULL::text AS extra, 0::int8 AS n1, 0::int8 AS n2, 0::int8 AS n3 FROM users WHERE id = ANY($1) \
                    UNION ALL SELECT 'r', task_id, user_id, amount_micros, status, budget_key, 0, 0, 0 \
                      FROM reservations WHERE task_id = ANY($2) \
                    UNION ALL SELECT 't', id, user_id, 0::int8, status, NULL, 0, 0, 0 FROM tasks WHERE id = ANY($2) \
                    UNION ALL SELECT 'k', id, '', budget_micros, '', budget_period, budget_period_start, \
                      budget_spent_micros, budget_held_micros FROM api_keys WHERE id IN (SELECT unnest($3::text[]) \
                      UNION SELECT unnest(string_to_array(budget_key, ',')) FROM reservations WHERE task_id = ANY($2) AND budget_key IS NOT NULL)";

/// Every planned row of a batch in one statement (parameters: `pg_rows`). `bal` adds each user's
/// change to the balance it finds, if within the plan's bounds, and returns the shift (found −
/// planned); the reservations and entries it writes carry their planned balances plus that shift
/// (joined through `bal`, so they are written only after their user's row is locked: ledger ids
/// follow the order in which writers got that lock). Unless every part wrote the planned rows the
/// statement fails (a text that is no number, cast to one), so none of it happens: a bound, an
/// assumption, a reservation or task state another writer changed, or a task id another writer
/// took makes the whole batch retry. It answers the new entries' ids, and the shift of every user
/// whose balance was found other than planned.
const WRITE: &str = "WITH \
bal AS (UPDATE users AS u SET balance_micros = u.balance_micros + (v.to_balance - v.from_balance), \
    spent_micros = u.spent_micros + v.spent \
  FROM unnest($1::text[], $2::int8[], $3::int8[], $63::int8[], $64::int8[], $65::int8[]) AS v(id, from_balance, to_balance, spent, lo, hi) \
  WHERE u.id = v.id AND u.balance_micros BETWEEN v.lo AND v.hi RETURNING u.id, u.balance_micros - v.to_balance AS shift), \
hold AS (INSERT INTO reservations (task_id, user_id, amount_micros, status, actual_micros, balance_after_micros, created_at, updated_at, budget_key) \
  SELECT v.task_id, v.user_id, v.amount, v.status, v.actual, v.after + bal.shift, $55::int8, $55::int8, v.budget_key \
  FROM unnest($4::text[], $5::text[], $6::int8[], $7::text[], $8::int8[], $9::int8[], $69::text[]) AS v(task_id, user_id, amount, status, actual, after, budget_key), bal \
  WHERE bal.id = v.user_id \
  ON CONFLICT (task_id) DO NOTHING RETURNING 1), \
ends AS (UPDATE reservations AS r SET status = v.status, actual_micros = v.actual, balance_after_micros = v.after + bal.shift, \
    updated_at = $55::int8 \
  FROM unnest($10::text[], $11::text[], $12::int8[], $13::int8[], $66::text[], $67::int8[], $70::text[]) \
    AS v(task_id, status, actual, after, user_id, amount, budget_key), bal \
  WHERE r.task_id = v.task_id AND r.status = 'reserved' AND r.user_id = v.user_id AND r.amount_micros = v.amount \
    AND r.budget_key IS NOT DISTINCT FROM v.budget_key AND bal.id = v.user_id RETURNING 1), \
kb AS (UPDATE api_keys AS k SET budget_period_start = v.to_start, budget_spent_micros = v.to_spent, \
    budget_held_micros = v.to_held \
  FROM unnest($72::text[], $73::int8[], $74::text[], $75::int8[], $76::int8[], $77::int8[], $78::int8[], $79::int8[], \
    $80::int8[]) AS v(id, lim, period, from_start, from_spent, from_held, to_start, to_spent, to_held) \
  WHERE k.id = v.id AND k.budget_micros IS NOT DISTINCT FROM v.lim AND k.budget_period IS NOT DISTINCT FROM v.period \
    AND k.budget_period_start = v.from_start AND k.budget_spent_micros = v.from_spent \
    AND k.budget_held_micros = v.from_held RETURNING 1), \
ent AS (INSERT INTO ledger_entries (user_id, task_id, kind, amount_micros, balance_after_micros, description, created_at) \
  SELECT v.user_id, v.task_id, v.kind, v.amount, v.after + bal.shift, v.note, $55::int8 \
  FROM unnest($14::text[], $15::text[], $16::text[], $17::int8[], $18::int8[], $19::text[]) WITH ORDINALITY \
    AS v(user_id, task_id, kind, amount, after, note, n), bal \
  WHERE bal.id = v.user_id \
  ORDER BY v.n RETURNING id), \
newt AS (INSERT INTO tasks (id, user_id, model, kind, status, prompt, provider, input_mode, media_type, media_url, \
    duration, resolution, ratio, generate_audio, pricing_version_id, usage, output_url, last_frame_url, error_code, \
    error_message, webhook_url, created_at, updated_at, completed_at, upstream_id, runner, key_id, upstream_endpoint, \
    upstream_attempts, max_cost_micros, requested_model) \
  SELECT * FROM unnest($20::text[], $21::text[], $22::text[], $23::text[], $24::text[], $25::text[], $26::text[], \
    $27::text[], $28::text[], $29::text[], $30::int8[], $31::text[], $32::text[], $33::bool[], $34::text[], $35::text[], \
    $36::text[], $37::text[], $38::text[], $39::text[], $40::text[], $41::int8[], $42::int8[], $43::int8[], $44::text[], \
    $56::text[], $71::text[], $82::text[], $83::int4[], $86::int8[], $87::text[]) \
  ON CONFLICT (id) DO NOTHING RETURNING 1), \
movt AS (UPDATE tasks AS t SET status = v.to_status, updated_at = $55::int8, \
    completed_at = CASE WHEN v.done THEN $55::int8 ELSE t.completed_at END, \
    upstream_id = COALESCE(v.upstream_id, t.upstream_id), output_url = COALESCE(v.output_url, t.output_url), \
    last_frame_url = COALESCE(v.last_frame_url, t.last_frame_url), usage = COALESCE(v.usage, t.usage), \
    error_code = COALESCE(v.error_code, t.error_code), error_message = COALESCE(v.error_message, t.error_message), \
    upstream_endpoint = COALESCE(v.endpoint, t.upstream_endpoint), \
    upstream_attempts = COALESCE(v.attempts, t.upstream_attempts), model = COALESCE(v.model, t.model), \
    pricing_version_id = COALESCE(v.price, t.pricing_version_id) \
  FROM unnest($45::text[], $46::text[], $47::text[], $48::bool[], $49::text[], $50::text[], $51::text[], $52::text[], \
    $53::text[], $54::text[], $68::text[], $84::text[], $85::int4[], $88::text[], $89::text[]) AS v(id, from_status, \
    to_status, done, upstream_id, output_url, last_frame_url, usage, error_code, error_message, owner, endpoint, \
    attempts, model, price) \
  WHERE t.id = v.id AND t.status = v.from_status AND t.user_id = v.owner RETURNING 1), \
written AS (SELECT (SELECT count(*) FROM bal) AS b, (SELECT count(*) FROM hold) AS h, \
  (SELECT count(*) FROM ends) AS e, (SELECT COALESCE(array_agg(id ORDER BY id), '{}'::int8[]) FROM ent) AS ids, \
  (SELECT count(*) FROM newt) AS n, (SELECT count(*) FROM movt) AS m, (SELECT count(*) FROM kb) AS kb, \
  (SELECT COALESCE(array_agg(id ORDER BY id) FILTER (WHERE shift <> 0), '{}'::text[]) FROM bal) AS shifted, \
  (SELECT COALESCE(array_agg(shift ORDER BY id) FILTER (WHERE shift <> 0), '{}'::int8[]) FROM bal) AS shifts) \
SELECT ids, shifted, shifts FROM written \
WHERE CASE WHEN b = $57::int8 AND h = $58::int8 AND e = $59::int8 AND cardinality(ids) = $60::int8 \
  AND n = $61::int8 AND m = $62::int8 AND kb = $81::int8 THEN true \
  ELSE ('ledger batch: rows written differ from the plan: ' || b || ' ' || h || ' ' || e || ' ' \
    || cardinality(ids) || ' ' || n || ' ' || m || ' ' || kb)::int8 = 0 END";

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
    start_counting(pool, writers).0
}

/// [`start`], also returning how many batches committed in one round trip on what their
/// operations assumed ([`commit_assumed`]).
fn start_counting(pool: PgPool, writers: usize) -> (BookWriter, Arc<AtomicU64>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let rx = Arc::new(Mutex::new(rx));
    let assumed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> =
        (0..writers.max(1)).map(|_| tokio::spawn(run(pool.clone(), Arc::clone(&rx), Arc::clone(&assumed)))).collect();
    // One handle for all: the writer tasks end (the queue closed and drained), then their pool
    // closes its connections.
    let running = tokio::spawn(async move {
        for task in tasks {
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "a ledger writer task ended abnormally");
            }
        }
        pool.close().await;
    });
    (BookWriter::new(tx, vec![Running::Task(running)]), assumed)
}

/// The next batch: waits for one job, then takes whatever else is queued (never waits for more).
async fn next_batch(rx: &Mutex<mpsc::UnboundedReceiver<Queued>>) -> Option<Vec<Job>> {
    let mut rx = rx.lock().await;
    let first = next(&mut rx).await?;
    let mut jobs = vec![first];
    drain(&mut rx, &mut jobs);
    Some(jobs)
}

/// How long a writer's batches take the locking form after one of its batches lost a race.
const LOCKING_AFTER_A_RACE: Duration = Duration::from_secs(1);

async fn run(pool: PgPool, rx: Arc<Mutex<mpsc::UnboundedReceiver<Queued>>>, assumed: Arc<AtomicU64>) {
    let mut writer = Writer { pool, conn: None, locking_until: None, assumed };
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
    /// Batches committed on their operations' assumptions, without a read.
    assumed: Arc<AtomicU64>,
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
        if self.locking_until.is_none_or(|until| Instant::now() >= until) {
            let conn = self.connection().await?;
            match commit_assumed(conn, jobs).await {
                Ok(Some(done)) => {
                    self.assumed.fetch_add(1, Ordering::Relaxed);
                    return Ok(done);
                }
                Ok(None) => {}
                Err(e) => {
                    self.conn = None;
                    return Err(e);
                }
            }
        }
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

/// Retried: a serialization failure or deadlock, a new id another writer took, a statement whose
/// rows differ from the plan, and a number out of range (a relative write found a balance the
/// plan did not foresee; the reading path plans on the stored one and refuses what overflows; an
/// overflow of a running `spent` total, which no plan checks, still fails after the retries).
fn fail_pg(e: sqlx::Error) -> BatchError {
    let retry = matches!(&e, sqlx::Error::Database(d)
        if matches!(d.code().as_deref(), Some("40001" | "40P01" | "23505" | "22003"))
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
/// happens whole or not at all ([`WRITE`]) and within the bounds of what the plan relied on.
async fn commit_unlocked(conn: &mut PgConnection, jobs: &[Job]) -> Result<Committed, BatchError> {
    if jobs.iter().any(|j| matches!(j.op, BookOp::Redeem { .. } | BookOp::Pay { .. })) {
        // A voucher is read under its row lock, and a payment is looked up, in the transaction
        // that credits it.
        return commit_locked(conn, jobs).await;
    }
    let state = read(conn, READ, jobs.iter().map(|j| &j.op)).await.map_err(fail_pg)?;
    let mut plan = book::plan(jobs.iter().map(|j| &j.op), state, batch_time(jobs));
    if plan.is_empty() {
        // Every operation was refused on what was read; nothing is written.
        return Ok((plan, Vec::new()));
    }
    // Prepared first (a cache lookup after the first time): a failure there wrote nothing, and
    // must not be taken for a commit whose answer was lost.
    conn.prepare(sqlx::SqlSafeStr::into_sql_str(WRITE)).await.map_err(fail_pg)?;
    let written = write(conn, &plan).await.map_err(fail_pg_committing)?;
    rebase(&mut plan, &written)?;
    Ok((plan, written.ids))
}

/// One batch in one round trip, when its operations say enough to plan it without reading
/// ([`assumed`]): the write statement checks every assumption, and changes nothing when one
/// is false (a balance too low for a hold, a reservation already ended or of another amount, a task
/// in another state, an id taken, a user that does not exist). `None`: the batch must take the
/// reading path, which decides on what is stored (and refuses what it must).
async fn commit_assumed(conn: &mut PgConnection, jobs: &[Job]) -> Result<Option<Committed>, BatchError> {
    let Some(state) = assumed(jobs.iter().map(|j| &j.op)) else { return Ok(None) };
    let mut plan = book::plan(jobs.iter().map(|j| &j.op), state, batch_time(jobs));
    if plan.is_empty() || plan.refuses_any() {
        // A refusal decided on assumed balances and states is no answer: read what is stored.
        return Ok(None);
    }
    conn.prepare(sqlx::SqlSafeStr::into_sql_str(WRITE)).await.map_err(fail_pg)?;
    match write(conn, &plan).await.map_err(fail_pg_committing) {
        Ok(written) => {
            rebase(&mut plan, &written)?;
            Ok(Some((plan, written.ids)))
        }
        Err(BatchError::Retry(e)) => {
            tracing::trace!(error = e, "ledger batch: an assumption was false; reading instead");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Makes the plan's answers say the balances the write stored where it found a balance other
/// than the one read (another writer moved it meanwhile, within what the plan allowed).
fn rebase(plan: &mut Plan, written: &Written) -> Result<(), BatchError> {
    for (user, shift) in written.shifted.iter().zip(&written.shifts) {
        // The batch committed: an error here can only be a bug, and must not replay it.
        plan.rebase(&UserId(user.clone()), UsdAmount::from_micros(*shift))
            .map_err(|e| BatchError::Unknown(format!("the batch committed, its answers are wrong: {e}")))?;
    }
    Ok(())
}

/// One batch in one transaction holding its users' row locks; any error rolls it back (the
/// transaction is dropped).
async fn commit_locked(conn: &mut PgConnection, jobs: &[Job]) -> Result<Committed, BatchError> {
    let mut tx = conn.begin().await.map_err(fail_pg)?;
    let mut state = read(&mut tx, LOCK_AND_READ, jobs.iter().map(|j| &j.op)).await.map_err(fail_pg)?;
    read_vouchers(&mut tx, jobs, &mut state).await.map_err(fail_pg)?;
    read_payments(&mut tx, jobs, &mut state).await.map_err(fail_pg)?;
    let mut plan = book::plan(jobs.iter().map(|j| &j.op), state, batch_time(jobs));
    // The users' row locks keep every balance as read until the commit, so the write finds them as
    // read and shifts nothing; the answers are rebased all the same, so that they never depend on
    // which users were locked.
    write_claims(&mut tx, &plan).await?;
    let written = if plan.is_empty() { None } else { Some(write(&mut tx, &plan).await.map_err(fail_pg)?) };
    tx.commit().await.map_err(fail_pg_committing)?;
    let Some(written) = written else { return Ok((plan, Vec::new())) };
    rebase(&mut plan, &written)?;
    Ok((plan, written.ids))
}

/// Reads the vouchers the batch redeems, locking their rows until the commit.
async fn read_vouchers(conn: &mut PgConnection, jobs: &[Job], state: &mut BookState) -> Result<(), sqlx::Error> {
    let hashes: Vec<&str> = jobs
        .iter()
        .filter_map(|j| match &j.op {
            BookOp::Redeem { code_hash, .. } => Some(code_hash.as_str()),
            _ => None,
        })
        .collect();
    if hashes.is_empty() {
        return Ok(());
    }
    let rows = sqlx::query(
        "SELECT v.code_hash, v.batch_id, b.amount_micros, b.expires_at, b.revoked_at IS NOT NULL, \
         v.redeemed_at IS NOT NULL FROM vouchers v JOIN voucher_batches b ON b.id = v.batch_id \
         WHERE v.code_hash = ANY($1) ORDER BY v.code_hash FOR UPDATE OF v",
    )
    .bind(&hashes)
    .fetch_all(&mut *conn)
    .await?;
    for row in rows {
        let voucher = book::VoucherSeen {
            batch: row.try_get(1)?,
            amount: UsdAmount::from_micros(row.try_get(2)?),
            expires_at: row.try_get::<Option<i64>, _>(3)?.map(domain::Timestamp),
            revoked: row.try_get(4)?,
            redeemed: row.try_get(5)?,
        };
        state.vouchers.insert(row.try_get(0)?, voucher);
    }
    Ok(())
}

/// Reads which of the payments the batch credits were credited already. A payment not found
/// here may be credited by a racing batch meanwhile: the insert of [`write_claims`] then fails
/// on its key, and the batch is retried on what is stored.
async fn read_payments(conn: &mut PgConnection, jobs: &[Job], state: &mut BookState) -> Result<(), sqlx::Error> {
    let ids: Vec<&str> = jobs
        .iter()
        .filter_map(|j| match &j.op {
            BookOp::Pay { payment, .. } => Some(payment.as_str()),
            _ => None,
        })
        .collect();
    if ids.is_empty() {
        return Ok(());
    }
    let rows = sqlx::query("SELECT payment_id FROM payments WHERE payment_id = ANY($1)")
        .bind(&ids)
        .fetch_all(&mut *conn)
        .await?;
    for row in rows {
        state.payments.insert(row.try_get(0)?);
    }
    Ok(())
}

/// Marks the vouchers the plan redeems (guard: still unredeemed, which the row lock keeps), and
/// records the payments it credits (their ids are unique).
async fn write_claims(conn: &mut PgConnection, plan: &Plan) -> Result<(), BatchError> {
    for claim in &plan.claims {
        let done = sqlx::query(
            "UPDATE vouchers SET redeemed_by = $1, redeemed_at = $2 WHERE code_hash = $3 AND redeemed_at IS NULL",
        )
        .bind(claim.user.as_str())
        .bind(plan.now().millis())
        .bind(&claim.code_hash)
        .execute(&mut *conn)
        .await
        .map_err(fail_pg)?;
        if done.rows_affected() != 1 {
            return Err(BatchError::Retry(format!("voucher {} changed under the batch", claim.code_hash)));
        }
    }
    for p in &plan.payments {
        sqlx::query("INSERT INTO payments (payment_id, user_id, amount_micros, created_at) VALUES ($1, $2, $3, $4)")
            .bind(&p.payment)
            .bind(p.user.as_str())
            .bind(p.amount.micros())
            .bind(plan.now().millis())
            .execute(&mut *conn)
            .await
            .map_err(fail_pg)?;
    }
    Ok(())
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
    let budgets: Vec<&str> = keys.budgets.iter().map(ApiKeyId::as_str).collect();
    for row in sqlx::query(statement).bind(&ids).bind(&tasks).bind(&budgets).fetch_all(&mut *conn).await? {
        let (kind, id, user): (String, String, String) = (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
        let amount: Option<i64> = row.try_get(3)?;
        let status: String = row.try_get(4)?;
        let extra: Option<String> = row.try_get(5)?;
        if kind == "k" {
            let budget =
                crate::accounts::budget_of(&id, amount, extra.as_deref()).map_err(|e| bad_row("key budget", e))?;
            let spend = domain::KeySpend {
                period_start: domain::Timestamp(row.try_get(6)?),
                spent: UsdAmount::from_micros(row.try_get(7)?),
                held: UsdAmount::from_micros(row.try_get(8)?),
            };
            let counters = domain::KeyBudgetState { budget, spend };
            state.budgets.insert(ApiKeyId(id), counters);
            continue;
        }
        let amount = UsdAmount::from_micros(amount.unwrap_or_default());
        match kind.as_str() {
            "u" => {
                state.balances.insert(UserId(id), amount);
            }
            "r" => {
                let status = status.parse().map_err(|e| bad_row("reservation status", e))?;
                state.holds.insert(
                    TaskId(id),
                    Held { user: UserId(user), amount, status, budget: BudgetKeys::from_column(extra.as_deref()) },
                );
            }
            _ => {
                let status = status.parse().map_err(|e| bad_row("task status", e))?;
                state.tasks.insert(TaskId(id), (UserId(user), status));
            }
        }
    }
    Ok(state)
}

/// What the write statement answers.
struct Written {
    /// The ids of the plan's ledger entries, in order.
    ids: Vec<i64>,
    /// The users whose balance the write found other than read…
    shifted: Vec<String>,
    /// …and by how much (the found balance minus the one read).
    shifts: Vec<i64>,
}

/// Writes the plan in one statement, which fails unless every row landed (so a count that differs
/// is never seen here: the statement, or the transaction, changed nothing).
async fn write(conn: &mut PgConnection, plan: &Plan) -> Result<Written, sqlx::Error> {
    let row = crate::pg_rows::bind_all(sqlx::query(WRITE), plan).fetch_one(&mut *conn).await?;
    Ok(Written { ids: row.try_get(0)?, shifted: row.try_get(1)?, shifts: row.try_get(2)? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use billing::LedgerError;
    use domain::ports::AccountStore;
    use domain::{LedgerKind, Timestamp};

    fn usd(micros: i64) -> UsdAmount {
        UsdAmount::from_micros(micros)
    }

    /// A batch whose operations say enough commits in one round trip on what they assume; when an
    /// assumption is false (a balance too low, a user or reservation that is not as expected) the
    /// write changes nothing, and the batch reads what is stored and is answered as before.
    /// Needs `TEST_DATABASE_URL`; runs in a schema of its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_commit_on_their_assumptions_and_read_when_one_is_false() {
        let test = "batches_commit_on_their_assumptions_and_read_when_one_is_false";
        let Some(base) = testkit::pg::required_url(test) else { return };
        let schema = testkit::pg::Schema::create(&base, "gw_assumed").await;
        let url = schema.url.clone();
        let store = crate::Store::open(&url).await.expect("store");
        let alice = UserId("usr_assumed".into());
        let new_user = domain::NewUser { concurrency_limit: 1, ..testkit::new_user(&alice, usd(1_000)) };
        store.create_user(new_user.clone()).await.expect("user");
        let (writer, assumed) = start_counting(writer_pool(&url, 1).await.expect("pool"), 1);
        let hold = |task: &str, amount: i64| BookOp::Hold {
            user: alice.clone(),
            task: TaskId(task.into()),
            amount: usd(amount),
            record: None,
        };
        let end = |task: &str, held: i64, charge: i64| BookOp::End {
            task: TaskId(task.into()),
            expect: Some(billing::Expect::of(&alice, usd(held))),
            charge: Some(usd(charge)),
            then: None,
        };
        let count = || assumed.load(Ordering::Relaxed);

        // Assumed: the balance fits the hold. The answer reports the balance found (1,000), not
        // the assumed one.
        let held = writer.submit(hold("t1", 400), Timestamp(1)).await;
        assert!(matches!(&held, Ok(book::BookAnswer::Held(r)) if r.balance_after == usd(600)), "{held:?}");
        assert_eq!(count(), 1);
        // Too much: the write finds 600 and changes nothing; the read refuses with what is there.
        let refused = writer.submit(hold("t2", 700), Timestamp(2)).await;
        assert_eq!(refused, Err(LedgerError::InsufficientBalance { needed: usd(700), available: usd(600) }));
        // An end of another amount than held, then the right one, then the same one again.
        let wrong = writer.submit(end("t1", 300, 100), Timestamp(3)).await;
        assert!(matches!(wrong, Err(LedgerError::InvalidAmount(_))), "{wrong:?}");
        let ended = writer.submit(end("t1", 400, 100), Timestamp(4)).await;
        assert!(matches!(&ended, Ok(book::BookAnswer::Ended(s)) if s.balance_after == usd(900)), "{ended:?}");
        let again = writer.submit(end("t1", 400, 100), Timestamp(5)).await;
        assert!(matches!(again, Err(LedgerError::AlreadyFinished { .. })), "{again:?}");
        // A user that does not exist.
        let ghost =
            BookOp::Hold { user: UserId("usr_ghost".into()), task: TaskId("t3".into()), amount: usd(1), record: None };
        let unknown = writer.submit(ghost, Timestamp(6)).await;
        assert!(matches!(unknown, Err(LedgerError::UnknownUser(_))), "{unknown:?}");
        assert_eq!(count(), 2, "only the hold of t1 and its end committed on assumptions");
        // A credit, while another writer (the store's own) moved the balance since: the entry
        // reports the running balance it found.
        billing::Ledger::credit(&store, &alice, usd(5), LedgerKind::Topup, "").await.expect("other writer");
        let credit =
            BookOp::Credit { user: alice.clone(), amount: usd(50), kind: LedgerKind::Adjustment, note: String::new() };
        let credited = writer.submit(credit, Timestamp(7)).await;
        assert!(matches!(&credited, Ok(book::BookAnswer::Credited(e)) if e.balance_after == usd(955)), "{credited:?}");
        assert_eq!(count(), 3);

        // A credit the stored balance cannot take (the assumed one could): the write finds it out
        // of range and changes nothing; the read refuses it.
        let carol = UserId("usr_assumed_carol".into());
        let new_carol = domain::NewUser { id: carol.clone(), balance: usd(i64::MAX - 100), ..new_user.clone() };
        store.create_user(new_carol).await.expect("carol");
        let huge =
            BookOp::Credit { user: carol.clone(), amount: usd(200), kind: LedgerKind::Topup, note: String::new() };
        assert_eq!(writer.submit(huge, Timestamp(8)).await, Err(LedgerError::Overflow));
        assert_eq!(count(), 3);
        // A task of another user's, held by Alice: ending it with a task change is refused, and
        // neither the hold nor the task moves.
        let bob = UserId("usr_assumed_bob".into());
        let new_bob = domain::NewUser { id: bob.clone(), ..new_user };
        store.create_user(new_bob).await.expect("bob");
        let theirs = TaskId("t_bob".into());
        let task = billing::conformance::running_task(&bob, &theirs, usd(10), domain::TaskStatus::Processing);
        domain::ports::TaskStore::insert_task(&store, task).await.expect("bob's task");
        writer.submit(hold("t_bob", 10), Timestamp(9)).await.expect("alice holds for bob's task");
        let close = BookOp::End {
            task: theirs.clone(),
            expect: Some(billing::Expect::of(&alice, usd(10))),
            charge: Some(usd(5)),
            then: Some(domain::TaskTransition::new(domain::TaskStatus::Processing, domain::TaskEvent::Succeeded)),
        };
        let conflict = writer.submit(close, Timestamp(10)).await;
        assert!(matches!(conflict, Err(LedgerError::TaskConflict { .. })), "{conflict:?}");
        assert_eq!(store.task_status(&theirs).await, Ok(Some(domain::TaskStatus::Processing)));
        assert_eq!(store.reservation_status(&theirs).await, Ok(Some(domain::BillingStatus::Reserved)));

        assert_eq!(testkit::assert_balance_is_ledger_sum(&store, &alice, "PostgreSQL").await, usd(945));
        let stats = domain::ports::TaskStore::task_stats(&store, &alice).await.expect("stats");
        assert_eq!(stats.spent, usd(100));
        drop(writer);
        store.close().await.expect("close");
        schema.drop_now().await;
    }
}
