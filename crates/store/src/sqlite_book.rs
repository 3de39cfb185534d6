//! The SQLite dialect of the batched write path: one thread with its own rusqlite connection.
//!
//! SQLite has one writer at a time, so `BEGIN IMMEDIATE` is the lock: the batch then reads the
//! reservations, tasks and balances it touches, lets `billing::book::plan` decide, writes the
//! planned rows with cached prepared statements (no round trips in-process, so one statement per
//! row costs what a set-based one would), and commits once. Through sqlx every SQLite statement
//! is a hop to a worker thread; here a whole batch is one hop.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use billing::book::{self, BookOp, BookState, Held, Plan, VoucherSeen};
use domain::ports::StoreError;
use domain::{ApiKeyId, BudgetKeys, KeyBudgetState, KeySpend, Task, TaskId, Timestamp, UsdAmount, UserId};
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::mpsc;

use crate::db::{CHECKPOINTER_CACHE_KIB, WRITER_CACHE_KIB};
use crate::writer::{
    ATTEMPTS, BatchError, BookWriter, Committed, Direct, Job, Queued, Running, answer, batch_time, blocking_next,
    drain, fail,
};

/// When the checkpointer copies the WAL into the database file, and when it has the WAL start over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checkpoints {
    /// How often it looks for committed frames to copy.
    pub every: Duration,
    /// WAL frames (pages of 4 KiB) after which the writer is asked to let the WAL start over.
    pub restart_after_frames: i64,
}

impl Checkpoints {
    /// Every 100 ms; the WAL starts over past 4,096 frames (16 MiB).
    pub(crate) const DEFAULT: Checkpoints =
        Checkpoints { every: Duration::from_millis(100), restart_after_frames: 4096 };
}

/// Opens `path` (WAL, `synchronous=NORMAL`) and starts the writer thread and its checkpointer.
///
/// The writer never checkpoints itself (`wal_autocheckpoint=0`): copying the WAL back into the
/// database file and its `fsync` would stall every call queued behind that commit (the p99 of a
/// single connection was such a commit). A second thread with its own connection runs passive
/// checkpoints instead, as often as `checkpoints` says while commits happen; a passive checkpoint
/// never blocks the writer, and the WAL is reused from its start once it has been copied.
pub(crate) fn start(path: &Path, checkpoints: Checkpoints) -> Result<BookWriter, StoreError> {
    start_counting(path, checkpoints).map(|(writer, _)| writer)
}

/// [`start`], also returning how many operations were committed directly on their callers'
/// threads (see [`DirectCommit`]).
fn start_counting(path: &Path, checkpoints: Checkpoints) -> Result<(BookWriter, Arc<AtomicU64>), StoreError> {
    let conn = open(path, WRITER_CACHE_KIB, "PRAGMA wal_autocheckpoint=0;")?;
    conn.set_prepared_statement_cache_capacity(32);
    let conn = Arc::new(Mutex::new(conn));
    let ckpt_conn = open(path, CHECKPOINTER_CACHE_KIB, "")?;
    let (tx, rx) = mpsc::unbounded_channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let flags = Arc::new(Flags::default());
    let writer_flags = Arc::clone(&flags);
    let committed = Arc::new(AtomicU64::new(0));
    let direct = Arc::new(DirectCommit {
        conn: Arc::clone(&conn),
        flags: Arc::clone(&flags),
        committed: Arc::clone(&committed),
    });
    let checkpointer = std::thread::Builder::new()
        .name("ledger-ckpt".into())
        .spawn(move || checkpoint_loop(&ckpt_conn, checkpoints, &flags, &done_rx))
        .map_err(|e| StoreError::Backend(format!("cannot start the checkpoint thread: {e}")))?;
    let writer = std::thread::Builder::new()
        .name("ledger-writer".into())
        .spawn(move || {
            run(&conn, rx, &writer_flags);
            // From now on a lone operation goes to the closed queue (and fails) instead of
            // committing on its caller's thread.
            writer_flags.stopped.store(true, Ordering::Release);
            drop(done_tx);
        })
        .map_err(|e| StoreError::Backend(format!("cannot start the writer thread: {e}")))?;
    // The writer first: when it ends, the checkpointer runs its last checkpoint and ends too.
    let running = vec![Running::Thread(writer), Running::Thread(checkpointer)];
    Ok((BookWriter::with_direct(tx, direct, running), committed))
}

/// How long a statement waits for another connection's write lock (another replica on the same
/// file, or the SeaORM write connection's few writes) before it fails.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The writer's connection, borrowed by a caller that commits its lone operation itself.
struct DirectCommit {
    conn: Arc<Mutex<Connection>>,
    flags: Arc<Flags>,
    /// Operations committed directly so far.
    committed: Arc<AtomicU64>,
}

impl Direct for DirectCommit {
    /// Never waits: not while the writer thread holds the connection, not for another
    /// connection's write lock (the busy handler is off for this attempt), and not for a WAL
    /// catch-up, which the writer thread runs before its next batch.
    fn try_commit(&self, job: Job) -> Option<Job> {
        if self.flags.catch_up.load(Ordering::Acquire) || self.flags.stopped.load(Ordering::Acquire) {
            return Some(job);
        }
        let Ok(mut conn) = self.conn.try_lock() else { return Some(job) };
        if conn.busy_timeout(Duration::ZERO).is_err() {
            return Some(job);
        }
        let jobs = [job];
        let result = commit(&mut conn, &jobs);
        let restored = conn.busy_timeout(BUSY_TIMEOUT);
        drop(conn);
        let [job] = jobs;
        if let Err(e) = restored {
            tracing::warn!(error = %e, "cannot restore the writer's busy timeout");
        }
        match result {
            Ok(done) => {
                self.committed.fetch_add(1, Ordering::Relaxed);
                answer(vec![job], done);
                None
            }
            // Nothing of it happened; the writer retries it as it would any batch.
            Err(_) => Some(job),
        }
    }
}

fn open(path: &Path, cache_kib: u32, extra: &str) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).map_err(|e| StoreError::Backend(format!("writer: {e}")))?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| StoreError::Backend(e.to_string()))?;
    conn.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; \
         PRAGMA cache_size=-{cache_kib}; PRAGMA mmap_size=268435456; {extra}"
    ))
    .map_err(|e| StoreError::Backend(format!("writer pragmas: {e}")))?;
    Ok(conn)
}

/// Runs a passive checkpoint every `policy.every` until the writer stops (then one last one).
/// It also copies what other connections of the file committed (the few writes of the SeaORM
/// write connection: idempotency keys, cap leases), since no connection of this process
/// checkpoints on its own.
/// A round with nothing to copy costs a few system calls.
///
/// Under steady load a passive checkpoint never catches up with the writer, so the WAL would
/// never start over and would grow without bound. Once it holds `restart_after_frames`, the
/// checkpointer asks the writer (`catch_up`) to run one passive checkpoint itself between two
/// batches: nothing is appended meanwhile, so it copies the few frames the last round left, and
/// the writer's next batch starts the WAL over.
fn checkpoint_loop(conn: &Connection, policy: Checkpoints, flags: &Flags, done: &std::sync::mpsc::Receiver<()>) {
    loop {
        let stopped = matches!(done.recv_timeout(policy.every), Err(RecvTimeoutError::Disconnected));
        if checkpoint(conn).is_some_and(|frames| frames >= policy.restart_after_frames) {
            flags.catch_up.store(true, Ordering::Release);
        }
        if stopped {
            return;
        }
    }
}

/// One passive checkpoint; the frames in the WAL (-1 when another checkpoint was running, e.g.
/// from an operator's shell: the next round copies what this one could not), or `None` when it
/// failed. A failure is worth a warning: nothing else copies the WAL back, so it would grow.
fn checkpoint(conn: &Connection) -> Option<i64> {
    match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(1)) {
        Ok(frames) => Some(frames),
        Err(e) => {
            tracing::warn!(error = %e, "WAL checkpoint failed");
            None
        }
    }
}

/// What the writer and the checkpointer tell each other.
#[derive(Default)]
struct Flags {
    /// The WAL is long: the writer should checkpoint once itself before its next batch.
    catch_up: AtomicBool,
    /// The writer thread has ended ([`BookWriter::stop`]).
    stopped: AtomicBool,
}

fn run(conn: &Mutex<Connection>, mut rx: mpsc::UnboundedReceiver<Queued>, flags: &Flags) {
    while let Some(first) = blocking_next(&mut rx) {
        // A caller committing directly holds it for one short transaction at most.
        let mut conn = conn.lock().unwrap_or_else(|poisoned| {
            // A direct commit panicked, maybe with the busy handler still off: restore it, and
            // let direct commits go on.
            conn.clear_poison();
            let conn = poisoned.into_inner();
            if let Err(e) = conn.busy_timeout(BUSY_TIMEOUT) {
                tracing::warn!(error = %e, "cannot restore the writer's busy timeout");
            }
            conn
        });
        if flags.catch_up.swap(false, Ordering::AcqRel) {
            checkpoint(&conn);
        }
        let mut jobs = vec![first];
        drain(&mut rx, &mut jobs);
        match commit_with_retries(&mut conn, &jobs) {
            Ok(done) => answer(jobs, done),
            Err(e) if jobs.len() == 1 || !e.replayable() => fail(jobs, e.text()),
            Err(e) => {
                tracing::warn!(
                    error = e.text(),
                    ops = jobs.len(),
                    "ledger batch failed; running its operations one by one"
                );
                for job in jobs {
                    match commit_with_retries(&mut conn, std::slice::from_ref(&job)) {
                        Ok(done) => answer(vec![job], done),
                        Err(e) => fail(vec![job], e.text()),
                    }
                }
            }
        }
    }
}

fn commit_with_retries(conn: &mut Connection, jobs: &[Job]) -> Result<Committed, BatchError> {
    let mut last = BatchError::Fail("no attempt".into());
    for _ in 0..ATTEMPTS {
        match commit(conn, jobs) {
            Ok(done) => return Ok(done),
            Err(e @ BatchError::Retry(_)) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

fn fail_sql(e: rusqlite::Error) -> BatchError {
    match &e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DatabaseBusy => {
            BatchError::Retry(e.to_string())
        }
        _ => BatchError::Fail(e.to_string()),
    }
}

/// One batch in one transaction; on any error it rolls back (the transaction is dropped).
fn commit(conn: &mut Connection, jobs: &[Job]) -> Result<Committed, BatchError> {
    let txn = Txn::begin(conn).map_err(fail_sql)?;
    let state = read(&txn, jobs.iter().map(|j| &j.op)).map_err(fail_sql)?;
    let plan = book::plan(jobs.iter().map(|j| &j.op), state, batch_time(jobs));
    let ids = write(&txn, &plan)?;
    txn.commit().map_err(fail_sql)?;
    Ok((plan, ids))
}

/// A batch's write transaction, begun and committed with cached statements: rusqlite's
/// `Transaction` prepares `BEGIN IMMEDIATE` and `COMMIT` again for every batch (about 1 % of the
/// writer's time). Dropped before [`Txn::commit`] succeeded, it rolls back, as `Transaction` does.
struct Txn<'c> {
    conn: &'c Connection,
    committed: bool,
}

impl<'c> Txn<'c> {
    /// `BEGIN IMMEDIATE`: the write lock now (or after the busy timeout), not at the first write.
    fn begin(conn: &'c Connection) -> rusqlite::Result<Txn<'c>> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Txn { conn, committed: false })
    }

    fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.committed = true;
        Ok(())
    }
}

impl std::ops::Deref for Txn<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        // A failed `COMMIT` (busy) leaves the transaction open; so does any error before it.
        if !self.committed
            && !self.conn.is_autocommit()
            && let Err(e) = self.conn.execute_batch("ROLLBACK")
        {
            tracing::warn!(error = %e, "cannot roll a ledger batch back");
        }
    }
}

/// Reads the reservations and tasks the batch names, then the balances of every user involved.
fn read<'a>(txn: &Connection, ops: impl IntoIterator<Item = &'a BookOp>) -> rusqlite::Result<BookState> {
    let keys = book::keys(ops);
    let mut state = BookState::default();
    let mut users: BTreeSet<UserId> = keys.users;
    {
        let mut holds = txn
            .prepare_cached("SELECT user_id, amount_micros, status, budget_key FROM reservations WHERE task_id = ?1")?;
        let mut tasks = txn.prepare_cached("SELECT user_id, status FROM tasks WHERE id = ?1")?;
        for task in &keys.tasks {
            let hold = holds
                .query_row([task.as_str()], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?, r.get(3)?))
                })
                .optional()?;
            if let Some((user, amount, status, budget)) = hold {
                let status = status.parse().map_err(|e| bad_row("reservation status", e))?;
                let amount = UsdAmount::from_micros(amount);
                let budget: Option<String> = budget;
                let held =
                    Held { user: UserId(user), amount, status, budget: BudgetKeys::from_column(budget.as_deref()) };
                state.holds.insert(task.clone(), held);
            }
            let row = tasks
                .query_row([task.as_str()], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .optional()?;
            if let Some((user, status)) = row {
                let status = status.parse().map_err(|e| bad_row("task status", e))?;
                state.tasks.insert(task.clone(), (UserId(user), status));
            }
        }
    }
    for task in &keys.owners_unknown {
        users.extend(state.holds.get(task).map(|h| h.user.clone()));
        users.extend(state.tasks.get(task).map(|t| t.0.clone()));
    }
    let mut balance = txn.prepare_cached("SELECT balance_micros FROM users WHERE id = ?1")?;
    for user in users {
        if let Some(micros) = balance.query_row([user.as_str()], |r| r.get::<_, i64>(0)).optional()? {
            state.balances.insert(user, UsdAmount::from_micros(micros));
        }
    }
    let mut budget_keys = keys.budgets;
    budget_keys.extend(state.holds.values().flat_map(|h| h.budget.keys().iter().cloned()));
    if !budget_keys.is_empty() {
        let mut budget = txn.prepare_cached(
            "SELECT budget_micros, budget_period, budget_period_start, budget_spent_micros, budget_held_micros \
             FROM api_keys WHERE id = ?1",
        )?;
        for key in budget_keys {
            let row = budget
                .query_row([key.as_str()], |r| {
                    Ok((r.get(0)?, r.get::<_, Option<String>>(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .optional()?;
            if let Some((limit, period, start, spent, held)) = row {
                let budget = crate::accounts::budget_of(key.as_str(), limit, period.as_deref())
                    .map_err(|e| bad_row("key budget", e))?;
                let spend = KeySpend {
                    period_start: Timestamp(start),
                    spent: UsdAmount::from_micros(spent),
                    held: UsdAmount::from_micros(held),
                };
                let counters = KeyBudgetState { budget, spend };
                state.budgets.insert(key, counters);
            }
        }
    }
    if !keys.vouchers.is_empty() {
        let mut voucher = txn.prepare_cached(
            "SELECT v.batch_id, b.amount_micros, b.expires_at, b.revoked_at IS NOT NULL, v.redeemed_at IS NOT NULL \
             FROM vouchers v JOIN voucher_batches b ON b.id = v.batch_id WHERE v.code_hash = ?1",
        )?;
        for code_hash in keys.vouchers {
            let row = voucher
                .query_row([code_hash.as_str()], |r| {
                    Ok(VoucherSeen {
                        batch: r.get(0)?,
                        amount: UsdAmount::from_micros(r.get(1)?),
                        expires_at: r.get::<_, Option<i64>>(2)?.map(Timestamp),
                        revoked: r.get(3)?,
                        redeemed: r.get(4)?,
                    })
                })
                .optional()?;
            state.vouchers.extend(row.map(|v| (code_hash, v)));
        }
    }
    if !keys.payments.is_empty() {
        let mut paid = txn.prepare_cached("SELECT 1 FROM payments WHERE payment_id = ?1")?;
        for payment in keys.payments {
            if paid.exists([payment.as_str()])? {
                state.payments.insert(payment);
            }
        }
    }
    Ok(state)
}

fn bad_row(what: &str, e: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(format!("stored {what}: {e}").into())
}

/// A statement that must change exactly one row, or the batch is retried.
fn one_row(changed: usize, what: &str) -> Result<(), BatchError> {
    if changed == 1 { Ok(()) } else { Err(BatchError::Retry(format!("{what}: the guard did not hold"))) }
}

/// Writes the plan's rows; returns the ids of its ledger entries, in order.
fn write(txn: &Connection, plan: &Plan) -> Result<Vec<i64>, BatchError> {
    let now = plan.now().millis();
    let mut stmt = txn
        .prepare_cached(
            "UPDATE users SET balance_micros = ?1, spent_micros = spent_micros + ?4 WHERE id = ?2 AND balance_micros = ?3",
        )
        .map_err(fail_sql)?;
    for b in &plan.balances {
        let row = params![b.to.micros(), b.user.as_str(), b.from.micros(), b.spent.micros()];
        one_row(stmt.execute(row).map_err(fail_sql)?, "balance")?;
    }
    let mut stmt = txn
        .prepare_cached(
            "INSERT INTO reservations (task_id, user_id, amount_micros, status, actual_micros, balance_after_micros, \
             created_at, updated_at, budget_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8)",
        )
        .map_err(fail_sql)?;
    for h in &plan.new_holds {
        let actual = h.actual.map(UsdAmount::micros);
        stmt.execute(params![
            h.task.as_str(),
            h.user.as_str(),
            h.amount.micros(),
            h.status.as_str(),
            actual,
            h.balance_after.micros(),
            now,
            h.budget.to_column()
        ])
        .map_err(fail_sql)?;
    }
    let mut stmt = txn
        .prepare_cached(
            "UPDATE reservations SET status = ?1, actual_micros = ?2, balance_after_micros = ?3, updated_at = ?4 \
             WHERE task_id = ?5 AND status = 'reserved'",
        )
        .map_err(fail_sql)?;
    for e in &plan.ended_holds {
        let changed = stmt
            .execute(params![e.status.as_str(), e.actual.micros(), e.balance_after.micros(), now, e.task.as_str()])
            .map_err(fail_sql)?;
        one_row(changed, "reservation")?;
    }
    write_budgets(txn, plan)?;
    if !plan.claims.is_empty() {
        let mut stmt = txn
            .prepare_cached(
                "UPDATE vouchers SET redeemed_by = ?1, redeemed_at = ?2 WHERE code_hash = ?3 AND redeemed_at IS NULL",
            )
            .map_err(fail_sql)?;
        for c in &plan.claims {
            one_row(stmt.execute(params![c.user.as_str(), now, c.code_hash]).map_err(fail_sql)?, "voucher")?;
        }
    }
    if !plan.payments.is_empty() {
        let mut stmt = txn
            .prepare_cached(
                "INSERT INTO payments (payment_id, user_id, amount_micros, created_at) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(fail_sql)?;
        for p in &plan.payments {
            stmt.execute(params![p.payment, p.user.as_str(), p.amount.micros(), now]).map_err(fail_sql)?;
        }
    }
    let ids = write_entries(txn, plan)?;
    for t in &plan.new_tasks {
        insert_task(txn, &t.task, t.upstream_id.as_deref(), t.via.as_ref()).map_err(fail_sql)?;
    }
    write_moves(txn, plan)?;
    Ok(ids)
}

/// The keys' budget counters, each guarded by the values the plan read.
fn write_budgets(txn: &Connection, plan: &Plan) -> Result<(), BatchError> {
    if plan.budgets.is_empty() {
        return Ok(());
    }
    let mut stmt = txn
        .prepare_cached(
            "UPDATE api_keys SET budget_period_start = ?1, budget_spent_micros = ?2, budget_held_micros = ?3 \
             WHERE id = ?4 AND budget_period_start = ?5 AND budget_spent_micros = ?6 AND budget_held_micros = ?7",
        )
        .map_err(fail_sql)?;
    for b in &plan.budgets {
        let changed = stmt
            .execute(params![
                b.to.spend.period_start.millis(),
                b.to.spend.spent.micros(),
                b.to.spend.held.micros(),
                b.key.as_str(),
                b.from.spend.period_start.millis(),
                b.from.spend.spent.micros(),
                b.from.spend.held.micros()
            ])
            .map_err(fail_sql)?;
        one_row(changed, "key budget")?;
    }
    Ok(())
}

fn write_entries(txn: &Connection, plan: &Plan) -> Result<Vec<i64>, BatchError> {
    let mut stmt = txn
        .prepare_cached(
            "INSERT INTO ledger_entries (user_id, task_id, kind, amount_micros, balance_after_micros, description, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .map_err(fail_sql)?;
    let mut ids = Vec::with_capacity(plan.entries.len());
    for e in &plan.entries {
        let task = e.task.as_ref().map(TaskId::as_str);
        stmt.execute(params![
            e.user.as_str(),
            task,
            e.kind.as_str(),
            e.amount.micros(),
            e.balance_after.micros(),
            e.description,
            plan.now().millis()
        ])
        .map_err(fail_sql)?;
        ids.push(txn.last_insert_rowid());
    }
    Ok(ids)
}

fn write_moves(txn: &Connection, plan: &Plan) -> Result<(), BatchError> {
    let mut stmt = txn
        .prepare_cached(
            "UPDATE tasks SET status = ?1, updated_at = ?2, completed_at = CASE WHEN ?3 THEN ?2 ELSE completed_at END, \
             upstream_id = COALESCE(?4, upstream_id), output_url = COALESCE(?5, output_url), \
             last_frame_url = COALESCE(?6, last_frame_url), usage = COALESCE(?7, usage), \
             error_code = COALESCE(?8, error_code), error_message = COALESCE(?9, error_message), \
             upstream_endpoint = COALESCE(?12, upstream_endpoint), upstream_attempts = COALESCE(?13, upstream_attempts), \
             model = COALESCE(?14, model), pricing_version_id = COALESCE(?15, pricing_version_id) \
             WHERE id = ?10 AND status = ?11",
        )
        .map_err(fail_sql)?;
    for w in &plan.task_writes {
        let u = &w.update;
        let changed = stmt
            .execute(params![
                w.to.as_str(),
                plan.now().millis(),
                w.to.is_terminal(),
                u.upstream_id,
                u.output_url,
                u.last_frame_url,
                u.usage_json,
                u.error_code,
                u.error_message,
                w.task.as_str(),
                w.from.as_str(),
                u.via.as_ref().map(|v| v.endpoint.as_str()),
                u.via.as_ref().map(|v| v.attempts),
                u.served_by.as_ref().map(|(model, _)| model.as_str()),
                u.served_by.as_ref().map(|(_, price)| price.to_string())
            ])
            .map_err(fail_sql)?;
        one_row(changed, "task state")?;
    }
    Ok(())
}

fn insert_task(
    txn: &Connection,
    t: &Task,
    upstream_id: Option<&str>,
    via: Option<&domain::ports::Via>,
) -> rusqlite::Result<usize> {
    txn.prepare_cached(
        "INSERT INTO tasks (id, user_id, model, kind, status, prompt, provider, input_mode, media_type, media_url, \
         duration, resolution, ratio, generate_audio, pricing_version_id, usage, output_url, last_frame_url, \
         error_code, error_message, webhook_url, created_at, updated_at, completed_at, upstream_id, runner, key_id, \
         upstream_endpoint, upstream_attempts, max_cost_micros, requested_model) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, \
         ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31)",
    )?
    .execute(params![
        t.id.as_str(),
        t.user_id.as_str(),
        t.model,
        t.kind.as_str(),
        t.status.as_str(),
        t.prompt,
        t.provider,
        t.input_mode.map(domain::InputMode::as_str),
        t.media_type.map(domain::MediaType::as_str),
        crate::tasks::media_column(&t.media),
        t.duration,
        t.resolution.map(domain::Resolution::as_str),
        t.ratio.map(domain::Ratio::as_str),
        t.generate_audio,
        t.billing.pricing_version_id.as_ref().map(ToString::to_string),
        t.billing.usage_json,
        t.output_url,
        t.last_frame_url,
        t.error_code,
        t.error_message,
        t.webhook_url,
        t.created_at.millis(),
        t.updated_at.millis(),
        t.completed_at.map(|c| c.millis()),
        upstream_id,
        t.runner,
        t.key_id.as_ref().map(ApiKeyId::as_str),
        via.map(|v| v.endpoint.as_str()),
        via.map(|v| v.attempts),
        t.billing.max_cost.map(UsdAmount::micros),
        t.requested,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use billing::book::BookOp;
    use domain::LedgerKind;
    use domain::ports::AccountStore;

    /// A fresh temporary directory, its database file, and a migrated store on it.
    async fn fresh_file(prefix: &str) -> (std::path::PathBuf, std::path::PathBuf, crate::Store) {
        let dir = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("gw.db");
        let store = crate::Store::open(&format!("sqlite://{}?mode=rwc", path.display())).await.expect("store");
        (dir, path, store)
    }

    /// A user with `micros` of balance.
    async fn new_user(store: &crate::Store, id: &str, micros: i64) -> UserId {
        let user = UserId(id.to_owned());
        let new = domain::NewUser { concurrency_limit: 1, ..testkit::new_user(&user, UsdAmount::from_micros(micros)) };
        store.create_user(new).await.expect("user");
        user
    }

    /// A lone operation commits on the caller's thread only when that needs no wait: while
    /// another connection (another replica) holds the write lock, the attempt gives up at once
    /// and the operation waits in the queue, without blocking the caller's thread (here the
    /// runtime's only one), and commits once the lock is released.
    #[tokio::test(flavor = "current_thread")]
    async fn a_lone_operation_never_blocks_its_thread_on_another_writer() {
        let (dir, path, store) = fresh_file("gw-direct").await;
        let user = new_user(&store, "usr_direct", 1_000).await;
        let (writer, direct) = start_counting(&path, Checkpoints::DEFAULT).expect("writer");
        let credit = |n: i64| BookOp::Credit {
            user: user.clone(),
            amount: UsdAmount::from_micros(n),
            kind: LedgerKind::Adjustment,
            note: format!("credit {n}"),
        };
        // Nothing else is waiting and the file is free: committed directly.
        writer.submit(credit(1), domain::Timestamp(1)).await.expect("free file");
        assert_eq!(direct.load(Ordering::Relaxed), 1, "a lone operation on a free file commits directly");

        let other = Connection::open(&path).expect("other connection");
        other.execute_batch("BEGIN IMMEDIATE").expect("other replica's write lock");
        let started = std::time::Instant::now();
        let queued = tokio::spawn({
            let writer = writer.clone();
            let op = credit(2);
            async move { writer.submit(op, domain::Timestamp(2)).await }
        });
        // The spawned submit runs during this sleep; the writer thread then waits for the lock.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!queued.is_finished(), "committed while another connection held the write lock");
        // The busy timeout is 30 s: a direct attempt that waited for the lock would have held
        // this thread (and the sleep above) that long.
        assert!(started.elapsed() < Duration::from_secs(5), "the caller's thread waited for the lock");
        other.execute_batch("COMMIT").expect("release");
        queued.await.expect("join").expect("committed after the release");
        assert_eq!(direct.load(Ordering::Relaxed), 1, "the second one went through the writer thread");

        assert_eq!(testkit::assert_balance_is_ledger_sum(&store, &user, "SQLite").await, UsdAmount::from_micros(1_003));
        drop(writer);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Under a writer that never idles, the WAL keeps starting over: its file (which never
    /// shrinks, so its size is the largest the WAL ever was) stays near the restart threshold
    /// instead of growing with every batch.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_starts_over_under_steady_writes() {
        let (dir, path, store) = fresh_file("gw-ckpt").await;
        let mut users = Vec::new();
        for i in 0..64 {
            users.push(new_user(&store, &format!("usr_ckpt_{i}"), 1_000_000).await);
        }
        let policy = Checkpoints { every: Duration::from_millis(2), restart_after_frames: 64 };
        let writer = start(&path, policy).expect("writer");
        let mut submitters = tokio::task::JoinSet::new();
        for user in users {
            let writer = writer.clone();
            submitters.spawn(async move {
                for n in 0..150 {
                    let op = BookOp::Credit {
                        user: user.clone(),
                        amount: UsdAmount::from_micros(1),
                        kind: LedgerKind::Adjustment,
                        note: format!("credit {n}, padded so that every entry takes room: {}", "x".repeat(200)),
                    };
                    writer.submit(op, domain::Timestamp(1)).await.expect("credit");
                }
            });
        }
        while let Some(done) = submitters.join_next().await {
            done.expect("submitter");
        }
        let wal = std::fs::metadata(dir.join("gw.db-wal")).expect("wal").len();
        // Nothing was lost across the restarts: every credit is in every balance and ledger.
        for i in 0..64 {
            let user = UserId(format!("usr_ckpt_{i}"));
            let balance = testkit::assert_balance_is_ledger_sum(&store, &user, "SQLite").await;
            assert_eq!(balance, UsdAmount::from_micros(1_000_150));
        }
        // 9,600 entries of ~300 bytes: without restarts the WAL grows past 30 MB (measured: 35);
        // with them it stays at 2-3 MB (64 frames plus what the writer adds between two rounds).
        // The bound leaves room for a checkpointer starved of CPU on a loaded machine.
        assert!(wal < 20 * 1024 * 1024, "the WAL grew to {wal} bytes");
        drop(writer);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
