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
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

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

/// What the queue carries: an operation, or the order to stop.
// Boxing the operation would cost an allocation per operation; the stop order is sent once.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Queued {
    /// An operation to commit.
    Job(Job),
    /// Stop once what is queued is committed: the writer that takes it closes the queue (later
    /// submissions fail), drains it, and ends ([`BookWriter::stop`]).
    Stop,
}

/// What a writer runs on: a thread (SQLite) or a task (PostgreSQL).
pub(crate) enum Running {
    /// A thread of its own.
    Thread(std::thread::JoinHandle<()>),
    /// A task on the tokio runtime.
    Task(tokio::task::JoinHandle<()>),
}

/// Why a batch's transaction did not commit; nothing of it happened.
#[derive(Debug)]
pub(crate) enum BatchError {
    /// Worth another try: a guard found another value, a unique key was taken by a concurrent
    /// writer, or the database reported a serialization failure or deadlock.
    Retry(String),
    /// Any other failure.
    Fail(String),
    /// The connection failed after the commit was sent (PostgreSQL: the `COMMIT`, or a write
    /// statement that is its own transaction): the batch may have committed. Neither retried nor
    /// run again one operation at a time, which could apply a committed credit twice; its
    /// callers get an error.
    Unknown(String),
}

impl BatchError {
    pub(crate) fn text(&self) -> &str {
        match self {
            BatchError::Retry(t) | BatchError::Fail(t) | BatchError::Unknown(t) => t,
        }
    }

    /// Whether the batch's operations may run again one at a time: known to have changed nothing.
    pub(crate) fn replayable(&self) -> bool {
        !matches!(self, BatchError::Unknown(_))
    }
}

/// What a committed batch produced: the plan, and the ids its ledger entries got.
pub(crate) type Committed = (Plan, Vec<i64>);

/// A dialect that can commit one operation on the caller's own thread, without the hop to its
/// writer and back (two thread wake-ups, the larger part of a lone call's wait on SQLite).
pub(crate) trait Direct: Send + Sync {
    /// Commits `job` alone and answers it, if the connection is free this instant and the
    /// commit needs no wait; otherwise (or when its transaction failed, so nothing happened)
    /// gives it back for the queue, whose writer retries and answers it.
    fn try_commit(&self, job: Job) -> Option<Job>;
}

/// The sending side of the queue; writers stop when every handle is dropped, or at
/// [`BookWriter::stop`].
#[derive(Clone)]
pub(crate) struct BookWriter {
    jobs: mpsc::UnboundedSender<Queued>,
    /// The threads or tasks the writer runs on, in the order they are to be waited for (taken
    /// by the first [`BookWriter::stop`]).
    running: Arc<std::sync::Mutex<Vec<Running>>>,
    /// Set for a dialect that can commit on the caller's thread.
    direct: Option<Arc<dyn Direct>>,
    /// Operations of this process submitted and not yet answered, and how often recent ones
    /// found others waiting.
    waiting: Arc<Crowd>,
}

impl std::fmt::Debug for BookWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BookWriter").field("direct", &self.direct.is_some()).finish_non_exhaustive()
    }
}

impl BookWriter {
    /// A writer fed only through its queue, running on `running`.
    pub(crate) fn new(jobs: mpsc::UnboundedSender<Queued>, running: Vec<Running>) -> BookWriter {
        BookWriter { jobs, running: Arc::new(std::sync::Mutex::new(running)), direct: None, waiting: Arc::default() }
    }

    /// A writer that commits a lone operation on the caller's thread (see [`Direct`]).
    pub(crate) fn with_direct(
        jobs: mpsc::UnboundedSender<Queued>,
        direct: Arc<dyn Direct>,
        running: Vec<Running>,
    ) -> BookWriter {
        BookWriter { direct: Some(direct), ..BookWriter::new(jobs, running) }
    }

    /// Stops the writer for every clone of this handle and waits until it has ended: what is
    /// queued is committed and answered first; operations submitted afterwards fail. Later calls
    /// return at once.
    pub(crate) async fn stop(&self) {
        // Fails only when the writer is gone already.
        let _ = self.jobs.send(Queued::Stop);
        let running = match self.running.lock() {
            Ok(mut running) => std::mem::take(&mut *running),
            Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
        };
        for run in running {
            let ended = match run {
                Running::Thread(thread) => match tokio::task::spawn_blocking(move || thread.join()).await {
                    Ok(joined) => joined.map_err(|_| "panicked".to_owned()),
                    Err(e) => Err(e.to_string()),
                },
                Running::Task(task) => task.await.map_err(|e| e.to_string()),
            };
            if let Err(e) = ended {
                tracing::warn!(error = %e, "a ledger writer ended abnormally");
            }
        }
    }

    /// Queues `op` and waits for the answer, which comes only after its batch committed (or failed).
    ///
    /// When nothing else of this process is waiting and little was lately, the operation is
    /// committed at once on this thread instead, if the dialect can (a batch of one is what the
    /// writer would have run). Under load every operation queues, so batches form as before: a
    /// lull between two batches does not make the next arrival commit alone while the others
    /// queue behind it.
    pub(crate) async fn submit(&self, op: BookOp, now: Timestamp) -> Result<BookAnswer, LedgerError> {
        let waiting = Waiting::enter(&self.waiting);
        let (reply, answer) = oneshot::channel();
        let job = Job { op, now, reply };
        let queued = match &self.direct {
            Some(direct) if waiting.quiet => direct.try_commit(job),
            _ => Some(job),
        };
        if let Some(job) = queued {
            self.jobs.send(Queued::Job(job)).map_err(|_| stopped())?;
        }
        answer.await.map_err(|_| stopped())?
    }
}

/// How many operations wait now, and a moving average of how often arrivals found company.
#[derive(Debug, Default)]
struct Crowd {
    waiting: AtomicUsize,
    /// The share of recent arrivals that found another operation waiting, in 1/1024ths (an
    /// exponential average over about the last 16 arrivals).
    company: AtomicU32,
}

/// Arrivals may commit directly while fewer than this share (1/1024ths) of recent ones found
/// company: about one in eight.
const QUIET: u32 = 128;

/// Counts an operation as waiting until it is answered or its caller gives up.
struct Waiting<'a> {
    crowd: &'a Crowd,
    /// Whether no other operation was waiting when this one came, nor often lately.
    quiet: bool,
}

impl<'a> Waiting<'a> {
    fn enter(crowd: &'a Crowd) -> Waiting<'a> {
        let alone = crowd.waiting.fetch_add(1, Ordering::AcqRel) == 0;
        // A racy read-modify-write: a lost update only blurs the average.
        let before = crowd.company.load(Ordering::Relaxed);
        let company = before - (before >> 4) + if alone { 0 } else { 64 };
        crowd.company.store(company, Ordering::Relaxed);
        Waiting { crowd, quiet: alone && company < QUIET }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.crowd.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

fn stopped() -> LedgerError {
    LedgerError::Backend("the ledger writer stopped".into())
}

/// The next operation, waiting for one (on a writer thread); `None` once the queue is closed
/// and empty.
pub(crate) fn blocking_next(rx: &mut mpsc::UnboundedReceiver<Queued>) -> Option<Job> {
    loop {
        match rx.blocking_recv()? {
            Queued::Job(job) => return Some(job),
            Queued::Stop => rx.close(),
        }
    }
}

/// [`blocking_next`] for a writer task.
pub(crate) async fn next(rx: &mut mpsc::UnboundedReceiver<Queued>) -> Option<Job> {
    loop {
        match rx.recv().await? {
            Queued::Job(job) => return Some(job),
            Queued::Stop => rx.close(),
        }
    }
}

/// Adds to `batch` whatever is already queued, up to [`MAX_BATCH`]; never waits. A stop order
/// closes the queue (what it already holds still comes).
pub(crate) fn drain(rx: &mut mpsc::UnboundedReceiver<Queued>, batch: &mut Vec<Job>) {
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(Queued::Job(job)) => batch.push(job),
            Ok(Queued::Stop) => rx.close(),
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
