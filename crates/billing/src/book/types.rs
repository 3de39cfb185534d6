//! The book's operations, the state a batch reads, and the plan it returns: the types the
//! planner and its callers share.

use std::collections::{BTreeSet, HashMap};

use domain::{
    ApiKeyId, BillingStatus, BudgetKeys, LedgerEntry, LedgerKind, Task, TaskId, TaskStatus, TaskTransition, TaskUpdate,
    Timestamp, UsdAmount, UserId,
};

pub use crate::ledger::Expect;
use crate::ledger::{LedgerError, Reservation, Settlement};
pub use domain::{KeyBudgetState, KeySpend};

/// One operation on the book, as a caller asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BookOp {
    /// Holds `amount` of `user`'s balance for `task`, storing `record` (the task) with it if given.
    Hold {
        /// Whose balance.
        user: UserId,
        /// The task the hold is for.
        task: TaskId,
        /// The amount to hold (≥ 0).
        amount: UsdAmount,
        /// The task row to store with the hold (`CallBook::open_call`); its `billing.budget_keys`
        /// name the keys whose budgets the hold also counts against.
        record: Option<Box<Task>>,
    },
    /// Ends the hold of `task`: charges `charge`, or refunds it when `None`.
    End {
        /// The task whose hold ends.
        task: TaskId,
        /// The reservation as the caller holds it; checked when given.
        expect: Option<Expect>,
        /// What to charge; `None` refunds.
        charge: Option<UsdAmount>,
        /// The task's change, made together with the end (`CallBook::close_task`); it must be terminal.
        then: Option<TaskTransition>,
    },
    /// Adds money outside any task (`Ledger::credit`).
    Credit {
        /// Whose balance.
        user: UserId,
        /// The signed amount.
        amount: UsdAmount,
        /// `Topup` or `Adjustment`.
        kind: LedgerKind,
        /// The entry's note; empty means the kind's name.
        note: String,
    },
    /// Redeems the voucher whose code hashes to `code_hash` for `user`: credits its amount
    /// (an entry of kind `Voucher`) and marks it redeemed by `user`, in the same commit. Refused
    /// when no voucher has the code or its batch was revoked, when it was redeemed already
    /// (earlier in this batch too), or when its batch expired.
    Redeem {
        /// Whose balance.
        user: UserId,
        /// The code's hash (the code itself is never stored).
        code_hash: String,
    },
    /// Credits a completed payment (a Stripe Checkout Session) to `user`: a `Topup` entry of
    /// `amount`, in the commit that records `payment` as credited. Refused when `payment` was
    /// credited already (earlier in this batch too).
    Pay {
        /// Whose balance.
        user: UserId,
        /// The payment's id at the processor (`cs_…`).
        payment: String,
        /// What it paid (above zero).
        amount: UsdAmount,
    },
    /// Changes a task's state; no money moves (`TaskStore::transition_task`).
    Move {
        /// The task.
        task: TaskId,
        /// The change.
        change: TaskTransition,
    },
}

impl BookOp {
    /// The keys whose budgets the operation moves, as far as the operation itself says: a hold's
    /// task record's `budget_keys`, an end's expected ones.
    pub fn budget_keys(&self) -> &[ApiKeyId] {
        match self {
            BookOp::Hold { record: Some(r), .. } => r.billing.budget_keys.keys(),
            BookOp::End { expect: Some(e), .. } => e.budget.keys(),
            BookOp::Hold { .. }
            | BookOp::End { .. }
            | BookOp::Credit { .. }
            | BookOp::Redeem { .. }
            | BookOp::Pay { .. }
            | BookOp::Move { .. } => &[],
        }
    }
}

/// A reservation as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Whose balance is held.
    pub user: UserId,
    /// The amount held.
    pub amount: UsdAmount,
    /// Where it stands.
    pub status: BillingStatus,
    /// The keys whose budgets it counts against (empty: none).
    pub budget: BudgetKeys,
}

/// A key whose budget counters the batch changes (guard: they are still as read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetWrite {
    /// The key.
    pub key: ApiKeyId,
    /// The counters and budget as read.
    pub from: KeyBudgetState,
    /// The counters after the batch (its `budget` is `from`'s).
    pub to: KeyBudgetState,
}

/// What a batch reads before it is planned: the balances of the users it touches (read under
/// their row locks, or guarded by the batch's write: see the dialects; a user missing here does
/// not exist), and the reservations and tasks of the
/// tasks it names (each missing one does not exist).
#[derive(Debug, Clone, Default)]
pub struct BookState {
    /// Balances by user.
    pub balances: HashMap<UserId, UsdAmount>,
    /// Reservations by task.
    pub holds: HashMap<TaskId, Held>,
    /// Tasks: owner and state.
    pub tasks: HashMap<TaskId, (UserId, TaskStatus)>,
    /// Budget counters of the keys the batch's holds and reservations name (a key missing here
    /// does not exist).
    pub budgets: HashMap<ApiKeyId, KeyBudgetState>,
    /// Vouchers by code hash (read under their row locks; a code missing here does not exist).
    pub vouchers: HashMap<String, VoucherSeen>,
    /// Payments the batch names that were credited already.
    pub payments: BTreeSet<String>,
}

/// A payment the batch credits (inserted: its id is unique, so a racing twin fails and rereads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPayment {
    /// The payment's id at the processor.
    pub payment: String,
    /// Whose balance it credited.
    pub user: UserId,
    /// What it credited.
    pub amount: UsdAmount,
}

/// A voucher as the batch reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoucherSeen {
    /// Its batch.
    pub batch: String,
    /// What it credits.
    pub amount: UsdAmount,
    /// From when on it is refused, if ever.
    pub expires_at: Option<Timestamp>,
    /// Whether its batch was revoked.
    pub revoked: bool,
    /// Whether it was redeemed already.
    pub redeemed: bool,
}

/// A voucher the batch redeems (guard: it is still unredeemed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoucherClaim {
    /// The code's hash.
    pub code_hash: String,
    /// Who redeemed it.
    pub user: UserId,
}

/// What a batch must read, in the fixed order that keeps concurrent writers from deadlocking.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BookKeys {
    /// Users to lock (sorted).
    pub users: BTreeSet<UserId>,
    /// Tasks whose reservation and task row to read (sorted).
    pub tasks: BTreeSet<TaskId>,
    /// Tasks named without their user: read their owner (reservation or task row) before locking,
    /// and lock that user too. Owners never change, so reading them unlocked is safe.
    pub owners_unknown: BTreeSet<TaskId>,
    /// Keys whose budgets the operations name; the budget keys of the reservations of `tasks`
    /// must be read too (a reservation's key never changes).
    pub budgets: BTreeSet<ApiKeyId>,
    /// Voucher code hashes to read under lock (sorted).
    pub vouchers: BTreeSet<String>,
    /// Payment ids to look up (sorted).
    pub payments: BTreeSet<String>,
}

/// What a batch touches.
pub fn keys<'a>(ops: impl IntoIterator<Item = &'a BookOp>) -> BookKeys {
    let mut keys = BookKeys::default();
    for op in ops {
        keys.budgets.extend(op.budget_keys().iter().cloned());
        match op {
            BookOp::Hold { user, task, .. } => {
                keys.users.insert(user.clone());
                keys.tasks.insert(task.clone());
            }
            BookOp::End { task, expect, .. } => {
                keys.tasks.insert(task.clone());
                match expect {
                    Some(e) => drop(keys.users.insert(e.user.clone())),
                    None => drop(keys.owners_unknown.insert(task.clone())),
                }
            }
            BookOp::Credit { user, .. } => drop(keys.users.insert(user.clone())),
            BookOp::Redeem { user, code_hash } => {
                keys.users.insert(user.clone());
                keys.vouchers.insert(code_hash.clone());
            }
            BookOp::Pay { user, payment, .. } => {
                keys.users.insert(user.clone());
                keys.payments.insert(payment.clone());
            }
            BookOp::Move { task, .. } => {
                keys.tasks.insert(task.clone());
                keys.owners_unknown.insert(task.clone());
            }
        }
    }
    keys
}

/// A user's balance before and after the batch, and what the batch's settlements charged: one
/// conditional update per user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalanceWrite {
    /// The user.
    pub user: UserId,
    /// The balance that was read (the update's guard).
    pub from: UsdAmount,
    /// The balance after every movement of the batch.
    pub to: UsdAmount,
    /// What the batch's settlements charged the user, added to the running total the account
    /// overview shows (`spent`); refunds add nothing.
    pub spent: UsdAmount,
}

/// What the plan's decisions for one user assumed of that user's balance. A dialect that writes
/// without locking the users' rows may apply the batch's change (`to − from` of
/// [`BalanceRead`]) to whatever balance it finds at write time, not only to the one it read, as
/// long as that balance satisfies this; the balances after each movement then shift by the
/// difference ([`Plan::rebase`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relies {
    /// Nothing: no decision looked at the amount (credits, settlements, refunds, task changes).
    Nothing,
    /// At least this balance: every hold the batch granted the user still fits in it.
    AtLeast(UsdAmount),
    /// Exactly the balance read: a hold was refused for want of balance (a larger balance might
    /// have granted it), or a task ended while it had no reservation (a hold placed on it
    /// meanwhile would change the balance, so an unchanged balance vouches for its absence).
    Exactly,
}

impl Relies {
    /// Both assumptions at once.
    pub(super) fn and(self, other: Relies) -> Relies {
        match (self, other) {
            (Relies::Exactly, _) | (_, Relies::Exactly) => Relies::Exactly,
            (Relies::AtLeast(a), Relies::AtLeast(b)) => Relies::AtLeast(a.max(b)),
            (Relies::AtLeast(a), Relies::Nothing) | (Relies::Nothing, Relies::AtLeast(a)) => Relies::AtLeast(a),
            (Relies::Nothing, Relies::Nothing) => Relies::Nothing,
        }
    }
}

/// A balance the batch read: every user it touches, whether or not the balance changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalanceRead {
    /// The user.
    pub user: UserId,
    /// The balance that was read.
    pub from: UsdAmount,
    /// The balance after every movement of the batch, counted from `from`.
    pub to: UsdAmount,
    /// What the batch's settlements charged the user ([`BalanceWrite::spent`]).
    pub spent: UsdAmount,
    /// What the batch's decisions assumed of the balance.
    pub relies: Relies,
}

/// A reservation to insert (possibly already ended within the same batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewHold {
    /// The task.
    pub task: TaskId,
    /// Whose balance.
    pub user: UserId,
    /// The amount held.
    pub amount: UsdAmount,
    /// `Reserved`, or how it ended later in the batch.
    pub status: BillingStatus,
    /// The charge, once ended.
    pub actual: Option<UsdAmount>,
    /// The balance after its last movement.
    pub balance_after: UsdAmount,
    /// The keys whose budgets it counts against (empty: none).
    pub budget: BudgetKeys,
}

/// A stored reservation that ends (guard: it is still `reserved`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedHold {
    /// The task.
    pub task: TaskId,
    /// Whose balance was held (guard: the stored reservation's).
    pub user: UserId,
    /// The amount held (guard: the stored reservation's).
    pub amount: UsdAmount,
    /// `Settled` or `Refunded`.
    pub status: BillingStatus,
    /// The charge (zero when refunded).
    pub actual: UsdAmount,
    /// The balance right after.
    pub balance_after: UsdAmount,
    /// The keys whose budgets it counted against (guard: the stored reservation's).
    pub budget: BudgetKeys,
}

/// A ledger entry to append; entries are appended in plan order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEntry {
    /// Whose balance moved.
    pub user: UserId,
    /// The task it belongs to.
    pub task: Option<TaskId>,
    /// Why.
    pub kind: LedgerKind,
    /// The signed change.
    pub amount: UsdAmount,
    /// The balance right after.
    pub balance_after: UsdAmount,
    /// The note.
    pub description: String,
}

impl NewEntry {
    /// The entry as stored, once the ledger gave it `id`, written at `now`.
    pub fn stored(&self, id: i64, now: Timestamp) -> LedgerEntry {
        LedgerEntry {
            id,
            user_id: self.user.clone(),
            task_id: self.task.clone(),
            kind: self.kind,
            amount: self.amount,
            balance_after: self.balance_after,
            description: self.description.clone(),
            created_at: now,
        }
    }
}

/// A task to insert, in the state the batch leaves it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    /// The row.
    pub task: Task,
    /// The upstream's id, if a change of the same batch recorded one.
    pub upstream_id: Option<String>,
    /// The upstream endpoint and attempts, if a change of the same batch recorded them.
    pub via: Option<domain::ports::Via>,
}

/// A stored task's change (guard: it is still in `from`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskWrite {
    /// The task.
    pub task: TaskId,
    /// Its owner (guard: the stored task's).
    pub owner: UserId,
    /// Its state when read.
    pub from: TaskStatus,
    /// Its state after the batch.
    pub to: TaskStatus,
    /// Fields to record (each `None` keeps the stored value).
    pub update: TaskUpdate,
}

/// How an operation was answered once its batch committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BookAnswer {
    /// A hold was placed.
    Held(Reservation),
    /// A hold ended.
    Ended(Settlement),
    /// Money was credited.
    Credited(LedgerEntry),
    /// A task moved to this state.
    Moved(TaskStatus),
}

/// The outcome of an operation before its entry ids are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decided {
    Held(Reservation),
    Ended(Settlement),
    /// The index of its entry in [`Plan::entries`].
    Credited(usize),
    Moved(TaskStatus),
}

/// The decisions of one batch and the rows that carry them out.
#[derive(Debug, Clone)]
pub struct Plan {
    pub(super) decided: Vec<Result<Decided, LedgerError>>,
    pub(super) now: Timestamp,
    /// One per user whose balance changed or who was charged, sorted by user.
    pub balances: Vec<BalanceWrite>,
    /// One per user the batch read (changed or not), sorted by user.
    pub reads: Vec<BalanceRead>,
    /// Reservations to insert, sorted by task.
    pub new_holds: Vec<NewHold>,
    /// Reservations that end, sorted by task.
    pub ended_holds: Vec<EndedHold>,
    /// Entries to append, in order.
    pub entries: Vec<NewEntry>,
    /// Tasks to insert, sorted by id.
    pub new_tasks: Vec<NewTask>,
    /// Task changes, sorted by task.
    pub task_writes: Vec<TaskWrite>,
    /// Keys whose budget counters change, sorted by key.
    pub budgets: Vec<BudgetWrite>,
    /// Vouchers redeemed, in order.
    pub claims: Vec<VoucherClaim>,
    /// Payments credited, in order.
    pub payments: Vec<NewPayment>,
}

impl Plan {
    /// The batch's time: every row it writes carries it.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// True when some operation was refused.
    pub fn refuses_any(&self) -> bool {
        self.decided.iter().any(Result::is_err)
    }

    /// True when the batch writes nothing (every operation was refused).
    pub fn is_empty(&self) -> bool {
        self.balances.is_empty()
            && self.new_holds.is_empty()
            && self.ended_holds.is_empty()
            && self.entries.is_empty()
            && self.new_tasks.is_empty()
            && self.task_writes.is_empty()
            && self.budgets.is_empty()
            && self.claims.is_empty()
            && self.payments.is_empty()
    }

    /// Shifts every balance after a movement of `user` by `by`: the batch's change was applied to
    /// a balance `by` away from the one it read (see [`Relies`]); the write already stored the
    /// shifted amounts, and this makes the answers say the same.
    pub fn rebase(&mut self, user: &UserId, by: UsdAmount) -> Result<(), LedgerError> {
        let shift = |a: &mut UsdAmount| -> Result<(), LedgerError> {
            *a = a.checked_add(by).map_err(|_| LedgerError::Overflow)?;
            Ok(())
        };
        for d in self.decided.iter_mut().flatten() {
            match d {
                Decided::Held(r) if r.user_id == *user => shift(&mut r.balance_after)?,
                Decided::Ended(s) if s.user_id == *user => shift(&mut s.balance_after)?,
                _ => {}
            }
        }
        for e in self.entries.iter_mut().filter(|e| e.user == *user) {
            shift(&mut e.balance_after)?;
        }
        for h in self.new_holds.iter_mut().filter(|h| h.user == *user) {
            shift(&mut h.balance_after)?;
        }
        for h in self.ended_holds.iter_mut().filter(|h| h.user == *user) {
            shift(&mut h.balance_after)?;
        }
        for r in self.reads.iter_mut().filter(|r| r.user == *user) {
            shift(&mut r.from)?;
            shift(&mut r.to)?;
        }
        for b in self.balances.iter_mut().filter(|b| b.user == *user) {
            shift(&mut b.from)?;
            shift(&mut b.to)?;
        }
        Ok(())
    }

    /// Every operation's answer, in arrival order, given the ids the database assigned to
    /// [`Plan::entries`] (same order). Missing ids answer a credit with a backend error.
    pub fn answers(self, entry_ids: &[i64]) -> Vec<Result<BookAnswer, LedgerError>> {
        let (entries, now) = (self.entries, self.now);
        self.decided
            .into_iter()
            .map(|d| match d? {
                Decided::Held(r) => Ok(BookAnswer::Held(r)),
                Decided::Ended(s) => Ok(BookAnswer::Ended(s)),
                Decided::Moved(s) => Ok(BookAnswer::Moved(s)),
                Decided::Credited(i) => {
                    let (e, id) = entries
                        .get(i)
                        .zip(entry_ids.get(i))
                        .ok_or_else(|| LedgerError::Backend(format!("no id for ledger entry {i} of the batch")))?;
                    Ok(BookAnswer::Credited(e.stored(*id, now)))
                }
            })
            .collect()
    }
}
