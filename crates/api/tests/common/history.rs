//! Ledger history at chosen times: a second store on a running server's database whose clock the
//! test sets before each movement, so that top-ups, holds, settlements and refunds land in past
//! months through the same batched writer (and the same ledger rules) as live calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use billing::{CallBook, Expect, Ledger};
use domain::ports::TaskOutcome;
use domain::{Clock, LedgerKind, ModelKind, TaskId, TaskStatus, Timestamp, UsdAmount, UserId};
use store::Store;

use super::{Server, task};

/// A clock that says what the test last set.
#[derive(Debug, Default)]
pub struct SetClock(AtomicI64);

impl Clock for SetClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

/// Writes a user's ledger history at chosen times (Unix milliseconds).
pub struct History {
    store: Store,
    clock: Arc<SetClock>,
    /// Whose history.
    pub user: UserId,
}

fn usd(micros: i64) -> UsdAmount {
    UsdAmount::from_micros(micros)
}

impl History {
    /// A writer of `user`'s history on `server`'s database.
    pub async fn new(server: &Server, user: &UserId) -> History {
        let clock = Arc::new(SetClock::default());
        let store = Store::connect(&server.url).await.expect("a second store on the server's database");
        History { store: store.with_clock(clock.clone()), clock, user: user.clone() }
    }

    fn at(&self, at: i64) {
        self.clock.0.store(at, Ordering::SeqCst);
    }

    /// A credit of `micros` (a top-up, or an adjustment of either sign) written at `at`.
    pub async fn credit(&self, at: i64, kind: LedgerKind, micros: i64) {
        self.at(at);
        self.store.credit(&self.user, usd(micros), kind, "history").await.expect("credit");
    }

    /// `count` top-ups of `micros` each, sent together at `at`: the writer batches them, so they
    /// share that instant and take consecutive ids.
    pub async fn credits_at_once(&self, at: i64, count: usize, micros: i64) {
        self.at(at);
        let all = (0..count).map(|_| self.store.credit(&self.user, usd(micros), LedgerKind::Topup, "batch"));
        for written in super::join_all(all.collect()).await {
            written.expect("credit");
        }
    }

    /// A language call of `model` opened at `at` with a hold of `hold` micro-USD; its task.
    pub async fn open(&self, at: i64, model: &str, hold: i64) -> TaskId {
        self.at(at);
        let mut call = task(&self.user, TaskStatus::Processing, at);
        call.kind = ModelKind::Language;
        call.model = model.to_owned();
        (call.duration, call.resolution, call.ratio, call.generate_audio) = (None, None, None, None);
        let id = call.id.clone();
        self.store.open_call(call, usd(hold)).await.expect("open a call");
        id
    }

    /// Ends the call `task` (held `hold`) at `at`: charged `charge` when given, else refunded.
    pub async fn end(&self, at: i64, task: &TaskId, hold: i64, charge: Option<i64>) {
        self.at(at);
        let status = if charge.is_some() { TaskStatus::Succeeded } else { TaskStatus::Failed };
        let outcome = TaskOutcome {
            status,
            usage_json: charge.map(|c| format!("{{\"charged_micros\":{c}}}")),
            error_code: charge.is_none().then(|| "upstream_failed".to_owned()),
            error_message: charge.is_none().then(|| "the upstream failed".to_owned()),
            via: None,
            served_by: None,
        };
        let held = Expect::of(&self.user, usd(hold));
        self.store.close_call(task, &held, charge.map(usd), outcome).await.expect("end a call");
    }

    /// Every ledger entry of the user, oldest first.
    pub async fn entries(&self) -> Vec<domain::LedgerEntry> {
        let mut entries = self.store.entries(&self.user, 10_000_000).await.expect("ledger entries");
        entries.sort_by_key(|e| e.id);
        entries
    }

    /// Stops the second store.
    pub async fn close(self) {
        self.store.close().await.expect("close the history store");
    }
}
