//! The one test suite every `Ledger` + `CallBook` implementation must pass: the in-memory ledger
//! here, and the store on SQLite and on PostgreSQL. Each scenario returns `Err` with what went
//! wrong; each implementation's tests call every scenario through a [`Subject`].
//!
//! The scenarios: holds and refused holds, ends and their exactly-once rule, credits, 200
//! reservations racing against a balance for 25, racing settles and refunds, calls (hold + task,
//! end + outcome) with a non-terminal outcome and a task in the wrong state refused, the same
//! ledger notes everywhere, and after every scenario: the balance equals the sum of the entries.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use domain::ports::TaskOutcome;
use domain::{
    BillingStatus, LedgerKind, ModelKind, Task, TaskBilling, TaskEvent, TaskId, TaskStatus, TaskTransition, Timestamp,
    UsdAmount, UserId,
};

use crate::ledger::{CallBook, Ledger, LedgerError};

/// A future a [`Subject`] runs concurrently with others.
pub type RaceFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// An implementation under test and what the suite needs around it.
#[async_trait]
pub trait Subject: Send + Sync {
    /// The ledger under test.
    fn ledger(&self) -> Arc<dyn Ledger>;
    /// The same implementation's call book.
    fn calls(&self) -> Arc<dyn CallBook>;
    /// A new account with a zero balance and no entries.
    async fn new_user(&self) -> Result<UserId, String>;
    /// Where the reservation of `task` stands, if it has one.
    async fn reservation(&self, task: &TaskId) -> Result<Option<BillingStatus>, String>;
    /// The state of `task`, if it is stored.
    async fn task_status(&self, task: &TaskId) -> Result<Option<TaskStatus>, String>;
    /// Runs every future concurrently (threads or runtime tasks); outputs in the same order.
    async fn race<T: Send + 'static>(&self, futures: Vec<RaceFuture<T>>) -> Vec<T>;
}

/// `Err(message)` unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err(format!($($msg)+));
        }
    };
}

/// `Err` unless `left == right`.
macro_rules! ensure_eq {
    ($left:expr, $right:expr, $what:expr) => {{
        let (l, r) = (&$left, &$right);
        if l != r {
            return Err(format!("{}: got {:?}, expected {:?}", $what, l, r));
        }
    }};
}

fn usd(micros: i64) -> UsdAmount {
    UsdAmount::from_micros(micros)
}

fn task(user: &UserId, n: usize) -> TaskId {
    TaskId(format!("task_{}_{n}", user.as_str()))
}

fn show<T: std::fmt::Debug>(r: &Result<T, LedgerError>) -> String {
    format!("{r:?}")
}

/// A new account holding `micros`, booked as one `topup` credit with an empty note.
async fn funded<S: Subject>(s: &S, micros: i64) -> Result<UserId, String> {
    let user = s.new_user().await?;
    if micros != 0 {
        s.ledger().credit(&user, usd(micros), LedgerKind::Topup, "").await.map_err(|e| format!("top-up: {e}"))?;
    }
    Ok(user)
}

/// The balance equals the sum of the entries, each entry's `balance_after` is the running sum in
/// id order, and ids increase. Returns the balance.
pub async fn balance_is_ledger_sum(ledger: &dyn Ledger, user: &UserId) -> Result<UsdAmount, String> {
    let balance = ledger.balance(user).await.map_err(|e| format!("balance: {e}"))?;
    let mut entries = ledger.entries(user, u64::MAX >> 1).await.map_err(|e| format!("entries: {e}"))?;
    entries.reverse();
    let mut running = UsdAmount::ZERO;
    let mut last_id = i64::MIN;
    for e in &entries {
        running = running.checked_add(e.amount).map_err(|_| "ledger sum overflows".to_owned())?;
        ensure!(
            e.balance_after == running,
            "entry {} says {} after, the running sum is {running}",
            e.id,
            e.balance_after
        );
        ensure!(e.id > last_id, "entry ids must increase ({} after {last_id})", e.id);
        last_id = e.id;
    }
    ensure!(balance == running, "balance {balance} but the {} entries sum to {running}", entries.len());
    Ok(balance)
}

/// Holds: placed while the balance covers them, refused (moving nothing) when it does not, and
/// refused for duplicates, negative amounts and unknown users.
pub async fn holds<S: Subject>(s: &S) -> Result<(), String> {
    let (ledger, alice) = (s.ledger(), funded(s, 100).await?);
    let first = ledger.reserve(&alice, &task(&alice, 1), usd(60)).await.map_err(|e| format!("reserve: {e}"))?;
    ensure_eq!(first.balance_after, usd(40), "balance after the first hold");
    let refused = ledger.reserve(&alice, &task(&alice, 2), usd(50)).await;
    ensure_eq!(
        refused.map(|_| ()),
        Err(LedgerError::InsufficientBalance { needed: usd(50), available: usd(40) }),
        "hold above the balance"
    );
    ensure_eq!(s.reservation(&task(&alice, 2)).await?, None, "a refused hold leaves no reservation");
    let exact = ledger.reserve(&alice, &task(&alice, 3), usd(40)).await.map(|r| r.balance_after);
    ensure_eq!(exact, Ok(usd(0)), "hold of the whole balance");
    let zero = ledger.reserve(&alice, &task(&alice, 4), usd(0)).await.map(|r| r.balance_after);
    ensure_eq!(zero, Ok(usd(0)), "hold of zero at a zero balance");
    let dup = ledger.reserve(&alice, &task(&alice, 1), usd(0)).await.map(|_| ());
    ensure_eq!(dup, Err(LedgerError::DuplicateReservation(task(&alice, 1))), "second hold for one task");
    let negative = ledger.reserve(&alice, &task(&alice, 5), usd(-1)).await.map(|_| ());
    let why = "a reservation cannot be negative (-0.000001)".to_owned();
    ensure_eq!(negative, Err(LedgerError::InvalidAmount(why)), "negative hold");
    let ghost = UserId(format!("{}_missing", alice.as_str()));
    let unknown = ledger.reserve(&ghost, &task(&alice, 6), usd(1)).await.map(|_| ());
    ensure_eq!(unknown, Err(LedgerError::UnknownUser(ghost)), "hold for an unknown user");
    ensure_eq!(ledger.entries(&alice, 100).await.map(|e| e.len()), Ok(4), "entries: top-up and three holds");
    ensure_eq!(s.reservation(&task(&alice, 1)).await?, Some(BillingStatus::Reserved), "first hold is open");
    ensure_eq!(balance_is_ledger_sum(ledger.as_ref(), &alice).await?, usd(0), "final balance");
    Ok(())
}

/// Settle and refund end a hold exactly once, settle may charge above the hold (going below
/// zero, recorded), and every note reads the same in every implementation.
pub async fn ends_and_notes<S: Subject>(s: &S) -> Result<(), String> {
    let (ledger, alice) = (s.ledger(), funded(s, 1_000).await?);
    let (t1, t2, t3) = (task(&alice, 1), task(&alice, 2), task(&alice, 3));
    ledger.reserve(&alice, &t1, usd(300)).await.map_err(|e| format!("reserve: {e}"))?;
    let settled = ledger.settle(&t1, usd(120)).await.map_err(|e| format!("settle: {e}"))?;
    ensure_eq!(
        (settled.status, settled.reserved, settled.actual, settled.balance_after),
        (BillingStatus::Settled, usd(300), usd(120), usd(880)),
        "settlement"
    );
    let finished = Err(LedgerError::AlreadyFinished { task: t1.clone(), status: BillingStatus::Settled });
    ensure_eq!(ledger.settle(&t1, usd(120)).await.map(|_| ()), finished, "second settle");
    ensure_eq!(ledger.refund(&t1).await.map(|_| ()), finished, "refund after settle");
    ledger.reserve(&alice, &t2, usd(200)).await.map_err(|e| format!("reserve: {e}"))?;
    let refunded = ledger.refund(&t2).await.map_err(|e| format!("refund: {e}"))?;
    ensure_eq!(
        (refunded.status, refunded.actual, refunded.balance_after),
        (BillingStatus::Refunded, usd(0), usd(880)),
        "refund"
    );
    ensure_eq!(s.reservation(&t2).await?, Some(BillingStatus::Refunded), "refunded reservation");
    let unknown = ledger.refund(&task(&alice, 9)).await.map(|_| ());
    ensure_eq!(unknown, Err(LedgerError::UnknownReservation(task(&alice, 9))), "refund without a hold");
    ledger.reserve(&alice, &t3, usd(880)).await.map_err(|e| format!("reserve: {e}"))?;
    let negative = ledger.settle(&t3, usd(-1)).await.map(|_| ());
    let why = "a charge cannot be negative (-0.000001)".to_owned();
    ensure_eq!(negative, Err(LedgerError::InvalidAmount(why)), "negative charge");
    let above = ledger.settle(&t3, usd(1_000)).await.map(|s| s.balance_after);
    ensure_eq!(above, Ok(usd(-120)), "settlement above the hold goes below zero");
    let refused = ledger.reserve(&alice, &task(&alice, 4), usd(0)).await.map(|_| ());
    ensure!(matches!(refused, Err(LedgerError::InsufficientBalance { .. })), "no hold below zero: {refused:?}");
    let entries = ledger.entries(&alice, 100).await.map_err(|e| format!("entries: {e}"))?;
    let notes: Vec<(LedgerKind, i64, &str)> =
        entries.iter().rev().map(|e| (e.kind, e.amount.micros(), e.description.as_str())).collect();
    let expected = vec![
        (LedgerKind::Topup, 1_000, "topup"),
        (LedgerKind::Reserve, -300, "hold of 0.000300"),
        (LedgerKind::Settle, 180, "charged 0.000120 of 0.000300 held"),
        (LedgerKind::Reserve, -200, "hold of 0.000200"),
        (LedgerKind::Refund, 200, "refund of 0.000200 held"),
        (LedgerKind::Reserve, -880, "hold of 0.000880"),
        (LedgerKind::Settle, -120, "charged 0.001000 of 0.000880 held"),
    ];
    ensure_eq!(notes, expected, "ledger entries and notes");
    ensure!(entries.iter().all(|e| e.task_id.is_some() == (e.kind != LedgerKind::Topup)), "task ids on entries");
    ensure_eq!(balance_is_ledger_sum(ledger.as_ref(), &alice).await?, usd(-120), "final balance");
    Ok(())
}

/// Credits: top-ups above zero, adjustments of either sign, nothing else; notes as given.
pub async fn credits<S: Subject>(s: &S) -> Result<(), String> {
    let (ledger, alice) = (s.ledger(), funded(s, 0).await?);
    let e = ledger.credit(&alice, usd(-50), LedgerKind::Adjustment, "correction").await;
    let e = e.map_err(|e| format!("adjustment: {e}"))?;
    ensure_eq!(
        (e.kind, e.amount, e.balance_after, e.description.as_str(), e.task_id.as_ref()),
        (LedgerKind::Adjustment, usd(-50), usd(-50), "correction", None),
        "negative adjustment"
    );
    ledger.credit(&alice, usd(80), LedgerKind::Topup, "card").await.map_err(|e| format!("top-up: {e}"))?;
    let last = ledger.credit(&alice, usd(5), LedgerKind::Adjustment, "").await.map_err(|e| format!("adjust: {e}"))?;
    ensure!(last.id > e.id, "entry ids increase ({} after {})", last.id, e.id);
    ensure_eq!(last.description, "adjustment", "empty note");
    let refusals = [
        ledger.credit(&alice, usd(0), LedgerKind::Topup, "").await.map(|_| ()),
        ledger.credit(&alice, usd(-5), LedgerKind::Topup, "").await.map(|_| ()),
        ledger.credit(&alice, usd(0), LedgerKind::Adjustment, "").await.map(|_| ()),
        ledger.credit(&alice, usd(5), LedgerKind::Refund, "").await.map(|_| ()),
        ledger.credit(&alice, usd(i64::MAX), LedgerKind::Adjustment, "").await.map(|_| ()),
    ];
    let expected = [
        Err(LedgerError::InvalidAmount("topup of 0.000000 is not allowed".into())),
        Err(LedgerError::InvalidAmount("topup of -0.000005 is not allowed".into())),
        Err(LedgerError::InvalidAmount("adjustment of 0.000000 is not allowed".into())),
        Err(LedgerError::InvalidAmount("refund is not a credit".into())),
        Err(LedgerError::Overflow),
    ];
    ensure_eq!(refusals, expected, "refused credits");
    let ghost = UserId(format!("{}_missing", alice.as_str()));
    let unknown = ledger.credit(&ghost, usd(1), LedgerKind::Topup, "").await.map(|_| ());
    ensure_eq!(unknown, Err(LedgerError::UnknownUser(ghost.clone())), "credit to an unknown user");
    ensure_eq!(ledger.balance(&ghost).await, Err(LedgerError::UnknownUser(ghost)), "balance of an unknown user");
    let amounts: Vec<i64> =
        ledger.entries(&alice, 2).await.map_err(|e| e.to_string())?.iter().map(|e| e.amount.micros()).collect();
    ensure_eq!(amounts, vec![5, 80], "newest two entries");
    ensure_eq!(ledger.entries(&alice, 0).await.map(|e| e.len()), Ok(0), "no entries for limit 0");
    ensure_eq!(balance_is_ledger_sum(ledger.as_ref(), &alice).await?, usd(35), "final balance");
    Ok(())
}

/// 200 holds race against a balance that covers 25: exactly 25 win, the rest are refused with
/// the balance they saw, the balance ends at zero. Returns the user and the 25 winning tasks.
pub async fn two_hundred_holds_race<S: Subject>(s: &S) -> Result<(UserId, Vec<TaskId>), String> {
    const EACH: i64 = 1_234_567;
    let (ledger, alice) = (s.ledger(), funded(s, EACH * 25).await?);
    let futures: Vec<RaceFuture<(TaskId, Result<UsdAmount, LedgerError>)>> = (0..200)
        .map(|n| {
            let (ledger, user, t) = (Arc::clone(&ledger), alice.clone(), task(&alice, n));
            Box::pin(async move {
                let r = ledger.reserve(&user, &t, usd(EACH)).await.map(|r| r.balance_after);
                (t, r)
            }) as RaceFuture<_>
        })
        .collect();
    let mut won = Vec::new();
    let mut refused = 0;
    for (t, r) in s.race(futures).await {
        match r {
            Ok(after) => {
                ensure!(!after.is_negative(), "a hold left {after}");
                won.push(t);
            }
            Err(LedgerError::InsufficientBalance { needed, available }) => {
                ensure!(needed == usd(EACH) && available < needed, "refusal saw {available} for {needed}");
                refused += 1;
            }
            Err(e) => return Err(format!("unexpected {e}")),
        }
    }
    ensure_eq!((won.len(), refused), (25, 175), "winners and refusals");
    ensure_eq!(balance_is_ledger_sum(ledger.as_ref(), &alice).await?, UsdAmount::ZERO, "final balance");
    ensure_eq!(ledger.entries(&alice, 1_000).await.map(|e| e.len()), Ok(26), "entries");
    Ok((alice, won))
}

/// Settles and refunds race on every hold (two per hold, plus 20 on one): each hold ends once.
pub async fn racing_ends<S: Subject>(s: &S) -> Result<(), String> {
    let (alice, won) = two_hundred_holds_race(s).await?;
    let ledger = s.ledger();
    let mut futures: Vec<RaceFuture<Result<BillingStatus, LedgerError>>> = Vec::new();
    for (n, t) in won.iter().enumerate() {
        let tries = if n == 0 { 20 } else { 2 };
        for attempt in 0..tries {
            let (ledger, t) = (Arc::clone(&ledger), t.clone());
            futures.push(Box::pin(async move {
                let ended = if (n + attempt) % 2 == 0 {
                    ledger.settle(&t, usd(1_000_000)).await
                } else {
                    ledger.refund(&t).await
                };
                ended.map(|s| s.status)
            }));
        }
    }
    let mut ends = 0;
    let mut charged = 0;
    for r in s.race(futures).await {
        match r {
            Ok(status) => {
                ends += 1;
                charged += i64::from(status == BillingStatus::Settled);
            }
            Err(LedgerError::AlreadyFinished { .. }) => {}
            Err(e) => return Err(format!("unexpected {e}")),
        }
    }
    ensure_eq!(ends, 25, "ends that won");
    for t in &won {
        let status = s.reservation(t).await?;
        ensure!(matches!(status, Some(BillingStatus::Settled | BillingStatus::Refunded)), "{t} is {status:?}");
    }
    let balance = balance_is_ledger_sum(ledger.as_ref(), &alice).await?;
    ensure_eq!(balance, usd(1_234_567 * 25 - 1_000_000 * charged), "balance after the ends");
    ensure_eq!(ledger.entries(&alice, 1_000).await.map(|e| e.len()), Ok(51), "entries");
    Ok(())
}

/// A running call's task as `open_call` stores it, for the ledger's tests.
pub fn running_task(user: &UserId, id: &TaskId, hold: UsdAmount, status: TaskStatus) -> Task {
    Task {
        id: id.clone(),
        user_id: user.clone(),
        key_id: None,
        model: "conformance-model".into(),
        kind: ModelKind::Language,
        status,
        prompt: None,
        provider: "conformance".into(),
        input_mode: Some(domain::InputMode::Text),
        media_type: None,
        media: Vec::new(),
        duration: None,
        resolution: None,
        ratio: None,
        generate_audio: None,
        billing: TaskBilling {
            status: BillingStatus::Reserved,
            pricing_version_id: None,
            estimated: hold,
            actual: None,
            balance_after: None,
            usage_json: None,
            budget_keys: domain::BudgetKeys::NONE,
            max_cost: None,
        },
        output_url: None,
        last_frame_url: None,
        error_code: None,
        error_message: None,
        webhook_url: None,
        created_at: Timestamp(1_795_300_000_000),
        updated_at: Timestamp(1_795_300_000_000),
        completed_at: None,
        runner: None,
        requested: None,
    }
}

fn outcome(status: TaskStatus) -> TaskOutcome {
    TaskOutcome {
        status,
        usage_json: Some("{\"total_tokens\":3}".into()),
        error_code: None,
        error_message: None,
        via: None,
        served_by: None,
    }
}

/// Calls: a hold opens with its task; refused closes (non-terminal outcome, wrong user or amount,
/// task in another state than expected) move nothing; a close ends the hold and the task together, once.
pub async fn calls<S: Subject>(s: &S) -> Result<(), String> {
    let (ledger, calls, alice) = (s.ledger(), s.calls(), funded(s, 1_000).await?);
    let (t1, t2) = (task(&alice, 1), task(&alice, 2));
    let opened = calls.open_call(running_task(&alice, &t1, usd(400), TaskStatus::Processing), usd(400)).await;
    ensure_eq!(opened.map(|r| r.balance_after), Ok(usd(600)), "open_call");
    ensure_eq!(s.task_status(&t1).await?, Some(TaskStatus::Processing), "task stored with its hold");
    let twice = calls.open_call(running_task(&alice, &t1, usd(1), TaskStatus::Processing), usd(1)).await.map(|_| ());
    ensure_eq!(twice, Err(LedgerError::DuplicateReservation(t1.clone())), "second open_call for one task");
    let not_terminal = calls
        .close_call(&t1, &crate::Expect::of(&alice, usd(400)), None, outcome(TaskStatus::Queued))
        .await
        .map(|_| ());
    ensure_eq!(not_terminal, Err(LedgerError::NotTerminal(TaskStatus::Queued)), "non-terminal outcome");
    let change = TaskTransition { from: None, event: TaskEvent::Started, update: Default::default() };
    let started = calls.close_task(&t1, &crate::Expect::of(&alice, usd(400)), None, change).await.map(|_| ());
    ensure_eq!(
        started,
        Err(LedgerError::TaskConflict {
            task: t1.clone(),
            status: Some(TaskStatus::Processing),
            event: TaskEvent::Started
        }),
        "close_task whose change is refused by the table"
    );
    let wrong = calls
        .close_call(&t1, &crate::Expect::of(&alice, usd(401)), None, outcome(TaskStatus::Failed))
        .await
        .map(|_| ());
    let why = format!("the reservation of {t1} has another user, amount or key");
    ensure_eq!(wrong, Err(LedgerError::InvalidAmount(why)), "close with another amount");
    let cancel = TaskTransition::new(TaskStatus::Queued, TaskEvent::Cancel);
    let cancel = calls.close_task(&t1, &crate::Expect::of(&alice, usd(400)), None, cancel).await.map(|_| ());
    ensure_eq!(
        cancel,
        Err(LedgerError::TaskConflict {
            task: t1.clone(),
            status: Some(TaskStatus::Processing),
            event: TaskEvent::Cancel
        }),
        "cancel of a task that is not queued"
    );
    ensure_eq!(s.reservation(&t1).await?, Some(BillingStatus::Reserved), "refused closes keep the hold");
    ensure_eq!(s.task_status(&t1).await?, Some(TaskStatus::Processing), "refused closes keep the task");
    ensure_eq!(ledger.balance(&alice).await, Ok(usd(600)), "refused closes move no money");
    let done = calls
        .close_call(&t1, &crate::Expect::of(&alice, usd(400)), Some(usd(150)), outcome(TaskStatus::Succeeded))
        .await;
    ensure_eq!(done.map(|s| (s.status, s.balance_after)), Ok((BillingStatus::Settled, usd(850))), "close_call");
    ensure_eq!(s.task_status(&t1).await?, Some(TaskStatus::Succeeded), "task ended with its hold");
    let again = calls
        .close_call(&t1, &crate::Expect::of(&alice, usd(400)), None, outcome(TaskStatus::Failed))
        .await
        .map(|_| ());
    let finished = Err(LedgerError::AlreadyFinished { task: t1.clone(), status: BillingStatus::Settled });
    ensure_eq!(again, finished, "second close");
    // A queued task can be cancelled with its refund, in one step.
    calls
        .open_call(running_task(&alice, &t2, usd(100), TaskStatus::Queued), usd(100))
        .await
        .map_err(|e| show(&Err::<(), _>(e)))?;
    let cancel = TaskTransition::new(TaskStatus::Queued, TaskEvent::Cancel);
    let cancelled = calls.close_task(&t2, &crate::Expect::of(&alice, usd(100)), None, cancel).await.map(|s| s.status);
    ensure_eq!(cancelled, Ok(BillingStatus::Refunded), "cancel while queued");
    ensure_eq!(s.task_status(&t2).await?, Some(TaskStatus::Cancelled), "cancelled task");
    ensure_eq!(balance_is_ledger_sum(ledger.as_ref(), &alice).await?, usd(850), "final balance");
    Ok(())
}
