//! The SQLite hot path: one writer thread that owns its own connection and runs the ledger's
//! `hold` and `end` steps in group commits.
//!
//! Through SeaORM and sqlx every SQLite statement is a round trip to a worker thread (about
//! 50 µs here even for `SELECT 1`), so a call's two transactions cost ~0.7 ms. This thread
//! instead receives whole operations, drains whatever is queued (up to [`MAX_BATCH`]), runs each
//! operation in its own savepoint inside one `BEGIN IMMEDIATE` transaction, commits once, and
//! only then answers every waiting caller. An operation refused by a rule (insufficient balance,
//! a reservation already ended) rolls back to its savepoint and moves nothing; a failed commit
//! answers every operation of the batch with an error, and none of them happened.
//!
//! The SQL here and the SeaORM path in `ledger.rs` (used on PostgreSQL) implement the same rules;
//! the store's tests run both.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use billing::{LedgerError, Reservation, Settlement};
use domain::ports::{StoreError, TaskOutcome};
use domain::{BillingStatus, LedgerKind, Task, TaskId, TaskStatus, UsdAmount, UserId};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use tokio::sync::oneshot;

/// Most operations committed together.
pub const MAX_BATCH: usize = 256;

/// A hold: debit `amount` if the balance covers it, record the reservation, and the task if given.
pub(crate) struct Hold {
    pub user: UserId,
    pub task: TaskId,
    pub amount: UsdAmount,
    pub record: Option<Task>,
    pub now: i64,
}

/// The end of a hold: charge (`Some`) or refund (`None`), and the task's outcome if given.
pub(crate) struct End {
    pub task: TaskId,
    pub user: UserId,
    pub reserved: UsdAmount,
    pub charge: Option<UsdAmount>,
    pub outcome: Option<TaskOutcome>,
    pub now: i64,
}

enum Op {
    Hold(Box<Hold>, oneshot::Sender<Result<Reservation, LedgerError>>),
    End(End, oneshot::Sender<Result<Settlement, LedgerError>>),
}

/// The answer of one operation, held until its batch commits.
enum Answer {
    Hold(oneshot::Sender<Result<Reservation, LedgerError>>, Result<Reservation, LedgerError>),
    End(oneshot::Sender<Result<Settlement, LedgerError>>, Result<Settlement, LedgerError>),
}

impl Answer {
    fn send(self) {
        match self {
            Answer::Hold(tx, r) => drop(tx.send(r)),
            Answer::End(tx, r) => drop(tx.send(r)),
        }
    }

    /// The batch did not commit: nothing of it happened.
    fn fail(self, why: &str) {
        match self {
            Answer::Hold(tx, _) => drop(tx.send(Err(LedgerError::Backend(why.to_owned())))),
            Answer::End(tx, _) => drop(tx.send(Err(LedgerError::Backend(why.to_owned())))),
        }
    }
}

/// Handle to the writer thread; the thread ends when the last handle is dropped.
#[derive(Debug, Clone)]
pub(crate) struct SqliteWriter {
    ops: mpsc::Sender<Op>,
}

impl std::fmt::Debug for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Op::Hold(..) => "Hold",
            Op::End(..) => "End",
        })
    }
}

fn sql_err(e: rusqlite::Error) -> LedgerError {
    LedgerError::Backend(e.to_string())
}

fn is_constraint(e: &rusqlite::Error) -> bool {
    matches!(e, rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::ConstraintViolation)
}

impl SqliteWriter {
    /// Opens `path` (WAL, `synchronous=NORMAL`) and starts the writer thread.
    pub(crate) fn start(path: &Path) -> Result<SqliteWriter, StoreError> {
        let conn = Connection::open(path).map_err(|e| StoreError::Backend(format!("writer: {e}")))?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(|e| StoreError::Backend(e.to_string()))?;
        conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
            .map_err(|e| StoreError::Backend(format!("writer pragmas: {e}")))?;
        conn.set_prepared_statement_cache_capacity(32);
        let (ops, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("ledger-writer".into())
            .spawn(move || run(conn, &rx))
            .map_err(|e| StoreError::Backend(format!("cannot start the writer thread: {e}")))?;
        Ok(SqliteWriter { ops })
    }

    pub(crate) async fn hold(&self, hold: Hold) -> Result<Reservation, LedgerError> {
        let (tx, rx) = oneshot::channel();
        self.ops
            .send(Op::Hold(Box::new(hold), tx))
            .map_err(|_| LedgerError::Backend("the writer thread stopped".into()))?;
        rx.await.map_err(|_| LedgerError::Backend("the writer thread stopped".into()))?
    }

    pub(crate) async fn end(&self, end: End) -> Result<Settlement, LedgerError> {
        let (tx, rx) = oneshot::channel();
        self.ops.send(Op::End(end, tx)).map_err(|_| LedgerError::Backend("the writer thread stopped".into()))?;
        rx.await.map_err(|_| LedgerError::Backend("the writer thread stopped".into()))?
    }
}

fn run(mut conn: Connection, rx: &mpsc::Receiver<Op>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        run_batch(&mut conn, batch);
    }
}

fn run_batch(conn: &mut Connection, batch: Vec<Op>) {
    let txn = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(t) => t,
        Err(e) => {
            let why = format!("cannot begin: {e}");
            for op in batch {
                match op {
                    Op::Hold(_, tx) => drop(tx.send(Err(LedgerError::Backend(why.clone())))),
                    Op::End(_, tx) => drop(tx.send(Err(LedgerError::Backend(why.clone())))),
                }
            }
            return;
        }
    };
    let mut txn = txn;
    let mut answers = Vec::with_capacity(batch.len());
    let mut aborted = false;
    for op in batch {
        let answer = match op {
            Op::Hold(h, tx) if !aborted => Answer::Hold(tx, in_savepoint(&mut txn, |sp| apply_hold(sp, &h))),
            Op::End(e, tx) if !aborted => Answer::End(tx, in_savepoint(&mut txn, |sp| apply_end(sp, &e))),
            Op::Hold(_, tx) => Answer::Hold(tx, Err(LedgerError::Backend("batch aborted".into()))),
            Op::End(_, tx) => Answer::End(tx, Err(LedgerError::Backend("batch aborted".into()))),
        };
        answers.push(answer);
        // Some errors (I/O, disk full) make SQLite roll back the whole transaction. Running more
        // operations would then autocommit them one by one behind the batch's back: stop here.
        aborted = aborted || txn.is_autocommit();
    }
    if aborted {
        tracing::error!("SQLite rolled back a ledger batch; none of its operations happened");
        answers.into_iter().for_each(|a| a.fail("the database rolled the batch back"));
        return;
    }
    match txn.commit() {
        Ok(()) => answers.into_iter().for_each(Answer::send),
        Err(e) => {
            let why = format!("commit failed: {e}");
            tracing::error!(error = %why, "ledger batch not committed");
            answers.into_iter().for_each(|a| a.fail(&why));
        }
    }
}

/// Runs `f` in a savepoint: kept on `Ok`, rolled back on `Err`.
fn in_savepoint<T>(
    txn: &mut Transaction<'_>,
    f: impl FnOnce(&Connection) -> Result<T, LedgerError>,
) -> Result<T, LedgerError> {
    let mut sp = txn.savepoint().map_err(sql_err)?;
    let result = f(&sp);
    match &result {
        Ok(_) => sp.commit().map_err(sql_err)?,
        Err(_) => {
            // Undo this operation only; the savepoint is released when dropped.
            sp.rollback().map_err(sql_err)?;
        }
    }
    result
}

/// One ledger entry to append.
struct Entry<'a> {
    user: &'a str,
    task: &'a str,
    kind: LedgerKind,
    amount: i64,
    after: i64,
    note: String,
    now: i64,
}

fn append(conn: &Connection, e: &Entry<'_>) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT INTO ledger_entries (user_id, task_id, kind, amount_micros, balance_after_micros, description, created_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .and_then(|mut s| s.execute(params![e.user, e.task, e.kind.as_str(), e.amount, e.after, e.note, e.now]))
    .map_err(sql_err)?;
    Ok(())
}

fn apply_hold(conn: &Connection, h: &Hold) -> Result<Reservation, LedgerError> {
    if h.amount.is_negative() {
        return Err(LedgerError::InvalidAmount("a reservation cannot be negative".into()));
    }
    let amount = h.amount.micros();
    let debited: Option<i64> = conn
        .prepare_cached(
            "UPDATE users SET balance_micros = balance_micros - ?1 WHERE id = ?2 AND balance_micros >= ?1 \
             RETURNING balance_micros",
        )
        .and_then(|mut s| s.query_row(params![amount, h.user.as_str()], |r| r.get(0)).optional())
        .map_err(sql_err)?;
    let Some(after) = debited else {
        let balance: Option<i64> = conn
            .prepare_cached("SELECT balance_micros FROM users WHERE id = ?1")
            .and_then(|mut s| s.query_row(params![h.user.as_str()], |r| r.get(0)).optional())
            .map_err(sql_err)?;
        return Err(match balance {
            None => LedgerError::UnknownUser(h.user.clone()),
            Some(b) => LedgerError::InsufficientBalance { needed: h.amount, available: UsdAmount::from_micros(b) },
        });
    };
    let duplicate = |e: rusqlite::Error| {
        if is_constraint(&e) { LedgerError::DuplicateReservation(h.task.clone()) } else { sql_err(e) }
    };
    conn.prepare_cached(
        "INSERT INTO reservations (task_id, user_id, amount_micros, status, actual_micros, balance_after_micros, created_at, updated_at) \
         VALUES (?1, ?2, ?3, 'reserved', NULL, ?4, ?5, ?5)",
    )
    .and_then(|mut s| s.execute(params![h.task.as_str(), h.user.as_str(), amount, after, h.now]))
    .map_err(duplicate)?;
    append(
        conn,
        &Entry {
            user: h.user.as_str(),
            task: h.task.as_str(),
            kind: LedgerKind::Reserve,
            amount: -amount,
            after,
            note: format!("hold of {}", h.amount),
            now: h.now,
        },
    )?;
    if let Some(t) = &h.record {
        conn.prepare_cached(
            "INSERT INTO tasks (id, user_id, model, kind, status, prompt, provider, input_mode, media_type, media_url, \
             duration, resolution, ratio, generate_audio, pricing_version_id, usage, output_url, last_frame_url, \
             error_code, error_message, webhook_url, created_at, updated_at, completed_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24)",
        )
        .and_then(|mut s| {
            s.execute(params![
                t.id.as_str(),
                t.user_id.as_str(),
                t.model,
                t.kind.as_str(),
                t.status.as_str(),
                t.prompt,
                t.provider,
                t.input_mode,
                t.media_type,
                t.media_url,
                t.duration,
                t.resolution,
                t.ratio,
                t.generate_audio,
                t.billing.pricing_version_id,
                t.billing.usage_json,
                t.output_url,
                t.last_frame_url,
                t.error_code,
                t.error_message,
                t.webhook_url,
                t.created_at.millis(),
                t.updated_at.millis(),
                t.completed_at.map(|c| c.millis()),
            ])
        })
        .map_err(duplicate)?;
    }
    Ok(Reservation {
        task_id: h.task.clone(),
        user_id: h.user.clone(),
        amount: h.amount,
        balance_after: UsdAmount::from_micros(after),
    })
}

fn apply_end(conn: &Connection, e: &End) -> Result<Settlement, LedgerError> {
    if e.charge.is_some_and(UsdAmount::is_negative) {
        return Err(LedgerError::InvalidAmount("a charge cannot be negative".into()));
    }
    let status = if e.charge.is_some() { BillingStatus::Settled } else { BillingStatus::Refunded };
    let actual = e.charge.unwrap_or(UsdAmount::ZERO);
    let back = billing::settle_delta(e.reserved, actual)?;
    let after: Option<i64> = conn
        .prepare_cached("UPDATE users SET balance_micros = balance_micros + ?1 WHERE id = ?2 RETURNING balance_micros")
        .and_then(|mut s| s.query_row(params![back.micros(), e.user.as_str()], |r| r.get(0)).optional())
        .map_err(sql_err)?;
    let after = after.ok_or_else(|| LedgerError::UnknownUser(e.user.clone()))?;
    let claimed = conn
        .prepare_cached(
            "UPDATE reservations SET status = ?1, actual_micros = ?2, balance_after_micros = ?3, updated_at = ?4 \
             WHERE task_id = ?5 AND status = 'reserved' AND user_id = ?6 AND amount_micros = ?7",
        )
        .and_then(|mut s| {
            s.execute(params![
                status.as_str(),
                actual.micros(),
                after,
                e.now,
                e.task.as_str(),
                e.user.as_str(),
                e.reserved.micros()
            ])
        })
        .map_err(sql_err)?;
    if claimed != 1 {
        let current: Option<String> = conn
            .prepare_cached("SELECT status FROM reservations WHERE task_id = ?1")
            .and_then(|mut s| s.query_row(params![e.task.as_str()], |r| r.get(0)).optional())
            .map_err(sql_err)?;
        return Err(match current {
            None => LedgerError::UnknownReservation(e.task.clone()),
            Some(s) if s != BillingStatus::Reserved.as_str() => LedgerError::AlreadyFinished {
                task: e.task.clone(),
                status: s.parse().unwrap_or(BillingStatus::Settled),
            },
            Some(_) => LedgerError::InvalidAmount(format!("the reservation of {} has another user or amount", e.task)),
        });
    }
    let (kind, note) = match status {
        BillingStatus::Refunded => (LedgerKind::Refund, format!("refund of {back}")),
        _ => (LedgerKind::Settle, format!("charged {actual} of {} reserved", e.reserved)),
    };
    append(
        conn,
        &Entry { user: e.user.as_str(), task: e.task.as_str(), kind, amount: back.micros(), after, note, now: e.now },
    )?;
    if let Some(outcome) = &e.outcome {
        finish_task(conn, &e.task, outcome, e.now)?;
    }
    Ok(Settlement {
        task_id: e.task.clone(),
        user_id: e.user.clone(),
        status,
        reserved: e.reserved,
        actual,
        balance_after: UsdAmount::from_micros(after),
    })
}

fn finish_task(conn: &Connection, task: &TaskId, outcome: &TaskOutcome, now: i64) -> Result<(), LedgerError> {
    if !outcome.status.is_terminal() {
        return Err(LedgerError::InvalidAmount(format!("{} is not a terminal state", outcome.status)));
    }
    let [a, b, c] = TaskStatus::RUNNING.map(TaskStatus::as_str);
    let moved = conn
        .prepare_cached(
            "UPDATE tasks SET status = ?1, updated_at = ?2, completed_at = ?2, error_code = ?3, error_message = ?4, \
             usage = COALESCE(?5, usage) WHERE id = ?6 AND status IN (?7, ?8, ?9)",
        )
        .and_then(|mut s| {
            s.execute(params![
                outcome.status.as_str(),
                now,
                outcome.error_code,
                outcome.error_message,
                outcome.usage_json,
                task.as_str(),
                a,
                b,
                c
            ])
        })
        .map_err(sql_err)?;
    if moved == 0 {
        // The money step is what must happen exactly once; a task already terminal is only logged.
        tracing::warn!(%task, "task not moved while ending its reservation");
    }
    Ok(())
}
