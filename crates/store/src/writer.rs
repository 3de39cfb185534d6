//! The batched write path for the money and task states, on both databases.
//!
//! Callers queue operations ([`BookOp`]); a writer (a thread on SQLite, tasks on PostgreSQL)
//! takes whatever is waiting (up to [`MAX_BATCH`]) and runs it as one transaction: lock and read
//! what the batch touches, let `billing::book::plan` decide every operation, write the planned
//! rows, commit once, then answer every caller. When the queue is empty the first operation runs
//! at once; operations that arrive meanwhile form the next batch (group commit).
//!
//! A batch whose transaction fails (a guard that did not hold, a lost race on a unique key, a
//! database error) is retried; if it still fails, its operations run one at a time, so one bad
//! operation cannot fail its neighbours. The dialects (`sqlite_book.rs`, `pg_book.rs`) only read
//! and write rows: no rule is decided there.

use billing::LedgerError;
use billing::book::{BookAnswer, BookOp, Plan};
use domain::Timestamp;
use tokio::sync::{mpsc, oneshot};

/// Most operations committed together.
pub const MAX_BATCH: usize = 256;

/// Attempts of one batch before its operations run one at a time.
pub(crate) const ATTEMPTS: usize = 3;

/// One queued operation and where its answer goes.
pub(crate) struct Job {
    pub op: BookOp,
    /// The caller's clock when it asked; the batch is stamped with the latest of its jobs.
    pub now: Timestamp,
    pub reply: oneshot::Sender<Result<BookAnswer, LedgerError>>,
}

/// Why a batch's transaction did not commit; nothing of it happened.
#[derive(Debug)]
pub(crate) enum BatchError {
    /// Worth another try: a guard found another value, a unique key was taken by a concurrent
    /// writer, or the database reported a serialization failure or deadlock.
    Retry(String),
    /// Any other failure.
    Fail(String),
}

impl BatchError {
    pub(crate) fn text(&self) -> &str {
        match self {
            BatchError::Retry(t) | BatchError::Fail(t) => t,
        }
    }
}

/// What a committed batch produced: the plan, and the ids its ledger entries got.
pub(crate) type Committed = (Plan, Vec<i64>);

/// The sending side of the queue; writers stop when every handle is dropped.
#[derive(Debug, Clone)]
pub(crate) struct BookWriter {
    jobs: mpsc::UnboundedSender<Job>,
}

impl BookWriter {
    pub(crate) fn new(jobs: mpsc::UnboundedSender<Job>) -> BookWriter {
        BookWriter { jobs }
    }

    /// Queues `op` and waits for the answer, which comes only after its batch committed (or failed).
    pub(crate) async fn submit(&self, op: BookOp, now: Timestamp) -> Result<BookAnswer, LedgerError> {
        let (reply, answer) = oneshot::channel();
        self.jobs.send(Job { op, now, reply }).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn stopped() -> LedgerError {
    LedgerError::Backend("the ledger writer stopped".into())
}

/// Adds to `batch` whatever is already queued, up to [`MAX_BATCH`]; never waits.
pub(crate) fn drain(rx: &mut mpsc::UnboundedReceiver<Job>, batch: &mut Vec<Job>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

/// The batch's time: the latest of its callers' clocks.
pub(crate) fn batch_time(jobs: &[Job]) -> Timestamp {
    jobs.iter().map(|j| j.now).max().unwrap_or(Timestamp(0))
}

/// Sends every answer of a committed batch.
pub(crate) fn answer(jobs: Vec<Job>, (plan, ids): Committed) {
    for (job, answer) in jobs.into_iter().zip(plan.answers(&ids)) {
        // A caller that stopped waiting (its task was cancelled) simply misses the answer.
        let _ = job.reply.send(answer);
    }
}

/// Answers every job of a batch that did not commit.
pub(crate) fn fail(jobs: Vec<Job>, why: &str) {
    for job in jobs {
        let _ = job.reply.send(Err(LedgerError::Backend(why.to_owned())));
    }
}
