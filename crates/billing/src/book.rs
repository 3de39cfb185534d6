//! The rules of the money, written once: [`plan`] takes a batch of operations in arrival order and
//! the state they touch, decides every operation's outcome, and returns the rows to write.
//!
//! Every ledger implementation is a thin shell around it: the in-memory ledger plans one
//! operation at a time under its mutex; the store's writers read the balances, reservations and
//! tasks a batch touches (or, on PostgreSQL, take what its operations assume: [`assumed`], checked
//! by the write), plan, write the rows in a few statements and commit once. The rules:
//!
//! - no overdraft: a hold is refused when the balance (after the batch's earlier movements) is
//!   below it; only a settlement above its hold, or a negative adjustment, goes below zero;
//! - each reservation ends exactly once, `reserved → settled | refunded`;
//! - one ledger entry per balance movement, so the balance stays the sum of the entries;
//! - a refused operation moves nothing and does not affect its neighbours in the batch;
//! - a task changes state only through [`TaskTransition::target`] (the domain's transition
//!   table, compare-and-set on the expected state); a terminal state comes together with the end
//!   of the task's reservation, never before it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use domain::{
    BillingStatus, LedgerEntry, LedgerKind, Task, TaskId, TaskStatus, TaskTransition, TaskUpdate, Timestamp, UsdAmount,
    UserId,
};

use crate::ledger::{LedgerError, Reservation, Settlement, check_credit, settle_delta};

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
        /// The task row to store with the hold (`CallBook::open_call`).
        record: Option<Box<Task>>,
    },
    /// Ends the hold of `task`: charges `charge`, or refunds it when `None`.
    End {
        /// The task whose hold ends.
        task: TaskId,
        /// The user and amount the caller holds for it; checked when given.
        expect: Option<(UserId, UsdAmount)>,
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
    /// Changes a task's state; no money moves (`TaskStore::transition_task`).
    Move {
        /// The task.
        task: TaskId,
        /// The change.
        change: TaskTransition,
    },
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
}

/// What a batch touches.
pub fn keys<'a>(ops: impl IntoIterator<Item = &'a BookOp>) -> BookKeys {
    let mut keys = BookKeys::default();
    for op in ops {
        match op {
            BookOp::Hold { user, task, .. } => {
                keys.users.insert(user.clone());
                keys.tasks.insert(task.clone());
            }
            BookOp::End { task, expect, .. } => {
                keys.tasks.insert(task.clone());
                match expect {
                    Some((user, _)) => drop(keys.users.insert(user.clone())),
                    None => drop(keys.owners_unknown.insert(task.clone())),
                }
            }
            BookOp::Credit { user, .. } => drop(keys.users.insert(user.clone())),
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
    fn and(self, other: Relies) -> Relies {
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

/// A task to insert, in the state the batch leaves it in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    /// The row.
    pub task: Task,
    /// The upstream's id, if a change of the same batch recorded one.
    pub upstream_id: Option<String>,
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
enum Decided {
    Held(Reservation),
    Ended(Settlement),
    /// The index of its entry in [`Plan::entries`].
    Credited(usize),
    Moved(TaskStatus),
}

/// The decisions of one batch and the rows that carry them out.
#[derive(Debug, Clone)]
pub struct Plan {
    decided: Vec<Result<Decided, LedgerError>>,
    now: Timestamp,
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
                    Ok(BookAnswer::Credited(LedgerEntry {
                        id: *id,
                        user_id: e.user.clone(),
                        task_id: e.task.clone(),
                        kind: e.kind,
                        amount: e.amount,
                        balance_after: e.balance_after,
                        description: e.description.clone(),
                        created_at: now,
                    }))
                }
            })
            .collect()
    }
}

/// The note of a hold's entry.
fn hold_note(amount: UsdAmount) -> String {
    format!("hold of {amount}")
}

/// The note of an end's entry.
fn end_note(status: BillingStatus, reserved: UsdAmount, actual: UsdAmount) -> String {
    match status {
        BillingStatus::Refunded => format!("refund of {reserved} held"),
        _ => format!("charged {actual} of {reserved} held"),
    }
}

/// The balance [`assumed`] gives every user: far above any real one, so that every hold fits.
/// The plan's running balances are counted from it, and a write that finds the real balance
/// shifts them all by the difference ([`Plan::rebase`]); what the holds need is the same whatever
/// the start ([`Relies::AtLeast`] of `ASSUMED − lowest point`).
pub const ASSUMED_BALANCE: UsdAmount = UsdAmount::from_micros(1 << 50);

/// The state `ops` would find if each went as its caller expects, for a writer that writes without
/// reading first: every user exists (with [`ASSUMED_BALANCE`]); no reservation or task exists yet
/// for a hold; an end's reservation is open, of the user and amount the caller holds, and its task
/// (if it moves) is in the state the change names, or `processing` (where a call's task runs) when
/// the change names none. `None` when some operation gives too little to assume (an end without
/// its user and amount, a task change without its hold, two operations on one task).
///
/// Every assumption must be checked by the write (the balance by its bounds; the reservation by
/// its state, user and amount; the task by its state; new rows by their ids), and a write that finds
/// one false must change nothing: the batch then takes the reading path, which decides on what is
/// stored. A plan on this state that refuses anything must not be written either.
pub fn assumed<'a>(ops: impl IntoIterator<Item = &'a BookOp>) -> Option<BookState> {
    let mut state = BookState::default();
    let mut named = BTreeSet::new();
    for op in ops {
        match op {
            BookOp::Hold { user, task, .. } => {
                state.balances.insert(user.clone(), ASSUMED_BALANCE);
                named.insert(task).then_some(())?;
            }
            BookOp::End { task, expect: Some((user, amount)), then, .. } => {
                state.balances.insert(user.clone(), ASSUMED_BALANCE);
                named.insert(task).then_some(())?;
                let held = Held { user: user.clone(), amount: *amount, status: BillingStatus::Reserved };
                state.holds.insert(task.clone(), held);
                if let Some(change) = then {
                    let from = change.from.unwrap_or(TaskStatus::Processing);
                    state.tasks.insert(task.clone(), (user.clone(), from));
                }
            }
            BookOp::Credit { user, .. } => {
                state.balances.insert(user.clone(), ASSUMED_BALANCE);
            }
            BookOp::End { expect: None, .. } | BookOp::Move { .. } => return None,
        }
    }
    Some(state)
}

/// Plans `ops` (in arrival order) against `state`, stamping every row with `now`.
pub fn plan<'a>(ops: impl IntoIterator<Item = &'a BookOp>, state: BookState, now: Timestamp) -> Plan {
    let mut book = Book::new(state, now);
    let decided = ops.into_iter().map(|op| book.apply(op)).collect();
    book.finish(decided)
}

/// A task as the batch sees it.
#[derive(Debug, Clone)]
struct TaskSeen {
    owner: UserId,
    status: TaskStatus,
    /// The state it was read in; `None` for a task inserted by this batch.
    read: Option<TaskStatus>,
    update: TaskUpdate,
}

/// A reservation as the batch sees it.
#[derive(Debug, Clone)]
struct HoldSeen {
    held: Held,
    actual: Option<UsdAmount>,
    balance_after: UsdAmount,
    /// True when this batch inserts it; false when it was read.
    new: bool,
    /// True when this batch changed it.
    changed: bool,
}

/// The working state of a batch being planned.
struct Book {
    now: Timestamp,
    read: HashMap<UserId, UsdAmount>,
    balances: HashMap<UserId, UsdAmount>,
    spent: HashMap<UserId, UsdAmount>,
    relies: HashMap<UserId, Relies>,
    holds: HashMap<TaskId, HoldSeen>,
    tasks: HashMap<TaskId, TaskSeen>,
    new_tasks: BTreeMap<TaskId, Task>,
    entries: Vec<NewEntry>,
}

impl Book {
    fn new(state: BookState, now: Timestamp) -> Book {
        let holds = state
            .holds
            .into_iter()
            .map(|(task, held)| {
                (task, HoldSeen { held, actual: None, balance_after: UsdAmount::ZERO, new: false, changed: false })
            })
            .collect();
        let tasks = state
            .tasks
            .into_iter()
            .map(|(task, (owner, status))| {
                (task, TaskSeen { owner, status, read: Some(status), update: TaskUpdate::default() })
            })
            .collect();
        Book {
            now,
            read: state.balances.clone(),
            balances: state.balances,
            spent: HashMap::new(),
            relies: HashMap::new(),
            holds,
            tasks,
            new_tasks: BTreeMap::new(),
            entries: Vec::new(),
        }
    }

    fn apply(&mut self, op: &BookOp) -> Result<Decided, LedgerError> {
        match op {
            BookOp::Hold { user, task, amount, record } => self.hold(user, task, *amount, record.as_deref()),
            BookOp::End { task, expect, charge, then } => self.end(task, expect.as_ref(), *charge, then.as_ref()),
            BookOp::Credit { user, amount, kind, note } => self.credit(user, *amount, *kind, note),
            BookOp::Move { task, change } => self.move_task(task, change),
        }
    }

    /// Records that a decision assumed `what` of `user`'s balance.
    fn rely(&mut self, user: &UserId, what: Relies) {
        let entry = self.relies.entry(user.clone()).or_insert(Relies::Nothing);
        *entry = entry.and(what);
    }

    fn balance(&self, user: &UserId) -> Result<UsdAmount, LedgerError> {
        self.balances.get(user).copied().ok_or_else(|| LedgerError::UnknownUser(user.clone()))
    }

    /// Records a movement: the new balance and its entry. Changes nothing on overflow.
    fn book(
        &mut self,
        user: &UserId,
        task: Option<&TaskId>,
        kind: LedgerKind,
        amount: UsdAmount,
        description: String,
    ) -> Result<UsdAmount, LedgerError> {
        let after = self.balance(user)?.checked_add(amount).map_err(|_| LedgerError::Overflow)?;
        self.balances.insert(user.clone(), after);
        self.entries.push(NewEntry {
            user: user.clone(),
            task: task.cloned(),
            kind,
            amount,
            balance_after: after,
            description,
        });
        Ok(after)
    }

    fn hold(
        &mut self,
        user: &UserId,
        task: &TaskId,
        amount: UsdAmount,
        record: Option<&Task>,
    ) -> Result<Decided, LedgerError> {
        if amount.is_negative() {
            return Err(LedgerError::InvalidAmount(format!("a reservation cannot be negative ({amount})")));
        }
        if record.is_some_and(|r| r.id != *task || r.user_id != *user) {
            return Err(LedgerError::InvalidAmount(format!("the task record does not match the hold of {task}")));
        }
        let available = self.balance(user)?;
        if self.holds.contains_key(task) || (record.is_some() && self.tasks.contains_key(task)) {
            return Err(LedgerError::DuplicateReservation(task.clone()));
        }
        if available < amount {
            self.rely(user, Relies::Exactly);
            return Err(LedgerError::InsufficientBalance { needed: amount, available });
        }
        let hold = amount.checked_neg().map_err(|_| LedgerError::Overflow)?;
        let after = self.book(user, Some(task), LedgerKind::Reserve, hold, hold_note(amount))?;
        // The hold still fits in any starting balance at least `read − after` (`after` ≥ 0).
        let least = self.read.get(user).and_then(|read| read.checked_sub(after).ok());
        self.rely(user, least.map_or(Relies::Exactly, Relies::AtLeast));
        let held = Held { user: user.clone(), amount, status: BillingStatus::Reserved };
        self.holds
            .insert(task.clone(), HoldSeen { held, actual: None, balance_after: after, new: true, changed: true });
        if let Some(record) = record {
            let seen =
                TaskSeen { owner: user.clone(), status: record.status, read: None, update: TaskUpdate::default() };
            self.tasks.insert(task.clone(), seen);
            self.new_tasks.insert(task.clone(), record.clone());
        }
        Ok(Decided::Held(Reservation { task_id: task.clone(), user_id: user.clone(), amount, balance_after: after }))
    }

    fn end(
        &mut self,
        task: &TaskId,
        expect: Option<&(UserId, UsdAmount)>,
        charge: Option<UsdAmount>,
        then: Option<&TaskTransition>,
    ) -> Result<Decided, LedgerError> {
        let hold = self.holds.get(task).ok_or_else(|| LedgerError::UnknownReservation(task.clone()))?;
        if hold.held.status != BillingStatus::Reserved {
            return Err(LedgerError::AlreadyFinished { task: task.clone(), status: hold.held.status });
        }
        if expect.is_some_and(|(user, amount)| *user != hold.held.user || *amount != hold.held.amount) {
            return Err(LedgerError::InvalidAmount(format!("the reservation of {task} has another user or amount")));
        }
        let (user, reserved) = (hold.held.user.clone(), hold.held.amount);
        let actual = charge.unwrap_or(UsdAmount::ZERO);
        let back = settle_delta(reserved, actual)?;
        self.balance(&user)?.checked_add(back).map_err(|_| LedgerError::Overflow)?;
        let spent = self.spent.get(&user).copied().unwrap_or(UsdAmount::ZERO);
        let spent =
            if charge.is_some() { spent.checked_add(actual).map_err(|_| LedgerError::Overflow)? } else { spent };
        let target = match then {
            Some(change) => Some(self.check_move(task, change, Some(&user))?),
            None => None,
        };
        if let Some(target) = target.filter(|t| !t.is_terminal()) {
            return Err(LedgerError::NotTerminal(target));
        }
        let status = if charge.is_some() { BillingStatus::Settled } else { BillingStatus::Refunded };
        let kind = if charge.is_some() { LedgerKind::Settle } else { LedgerKind::Refund };
        let after = self.book(&user, Some(task), kind, back, end_note(status, reserved, actual))?;
        self.spent.insert(user.clone(), spent);
        if let Some(hold) = self.holds.get_mut(task) {
            hold.held.status = status;
            hold.actual = Some(actual);
            hold.balance_after = after;
            hold.changed = true;
        }
        if let (Some(change), Some(target)) = (then, target) {
            self.record_move(task, target, &change.update);
        }
        Ok(Decided::Ended(Settlement {
            task_id: task.clone(),
            user_id: user,
            status,
            reserved,
            actual,
            balance_after: after,
        }))
    }

    fn credit(
        &mut self,
        user: &UserId,
        amount: UsdAmount,
        kind: LedgerKind,
        note: &str,
    ) -> Result<Decided, LedgerError> {
        check_credit(kind, amount)?;
        let description = if note.is_empty() { kind.as_str().to_owned() } else { note.to_owned() };
        self.book(user, None, kind, amount, description)?;
        Ok(Decided::Credited(self.entries.len().saturating_sub(1)))
    }

    fn move_task(&mut self, task: &TaskId, change: &TaskTransition) -> Result<Decided, LedgerError> {
        let target = self.check_move(task, change, None)?;
        if target.is_terminal() {
            match self.holds.get(task) {
                Some(h) if h.held.status == BillingStatus::Reserved => {
                    return Err(LedgerError::ReservationOpen(task.clone()));
                }
                Some(_) => {}
                None => {
                    if let Some(owner) = self.tasks.get(task).map(|seen| seen.owner.clone()) {
                        self.rely(&owner, Relies::Exactly);
                    }
                }
            }
        }
        self.record_move(task, target, &change.update);
        Ok(Decided::Moved(target))
    }

    /// The state `change` takes `task` to, if it exists, belongs to `owner` (when given) and its
    /// owner's balance was read by this batch (so its write guards that owner), and the expected
    /// state and the table allow it.
    fn check_move(
        &self,
        task: &TaskId,
        change: &TaskTransition,
        owner: Option<&UserId>,
    ) -> Result<TaskStatus, LedgerError> {
        let conflict = |status| LedgerError::TaskConflict { task: task.clone(), status, event: change.event };
        let seen = self.tasks.get(task).ok_or_else(|| conflict(None))?;
        if owner.is_some_and(|o| *o != seen.owner) || !self.balances.contains_key(&seen.owner) {
            return Err(conflict(Some(seen.status)));
        }
        change.target(seen.status).map_err(|e| conflict(Some(e.from)))
    }

    fn record_move(&mut self, task: &TaskId, target: TaskStatus, update: &TaskUpdate) {
        let now = self.now;
        if let Some(seen) = self.tasks.get_mut(task) {
            seen.status = target;
            merge(&mut seen.update, update);
        }
        if let Some(row) = self.new_tasks.get_mut(task) {
            row.status = target;
            row.updated_at = now;
            if target.is_terminal() {
                row.completed_at = Some(now);
            }
            let u = update.clone();
            row.output_url = u.output_url.or(row.output_url.take());
            row.last_frame_url = u.last_frame_url.or(row.last_frame_url.take());
            row.billing.usage_json = u.usage_json.or(row.billing.usage_json.take());
            row.error_code = u.error_code.or(row.error_code.take());
            row.error_message = u.error_message.or(row.error_message.take());
        }
    }

    fn finish(self, decided: Vec<Result<Decided, LedgerError>>) -> Plan {
        let mut balances: Vec<BalanceWrite> = self
            .balances
            .iter()
            .filter_map(|(user, &to)| {
                let from = *self.read.get(user)?;
                let spent = self.spent.get(user).copied().unwrap_or(UsdAmount::ZERO);
                (from != to || spent != UsdAmount::ZERO).then(|| BalanceWrite { user: user.clone(), from, to, spent })
            })
            .collect();
        balances.sort_by(|a, b| a.user.cmp(&b.user));
        let mut reads: Vec<BalanceRead> = self
            .read
            .iter()
            .map(|(user, &from)| BalanceRead {
                user: user.clone(),
                from,
                to: self.balances.get(user).copied().unwrap_or(from),
                spent: self.spent.get(user).copied().unwrap_or(UsdAmount::ZERO),
                relies: self.relies.get(user).copied().unwrap_or(Relies::Nothing),
            })
            .collect();
        reads.sort_by(|a, b| a.user.cmp(&b.user));
        let (mut new_holds, mut ended_holds) = (Vec::new(), Vec::new());
        for (task, h) in self.holds.into_iter().filter(|(_, h)| h.changed) {
            if h.new {
                new_holds.push(NewHold {
                    task,
                    user: h.held.user,
                    amount: h.held.amount,
                    status: h.held.status,
                    actual: h.actual,
                    balance_after: h.balance_after,
                });
            } else {
                let actual = h.actual.unwrap_or(UsdAmount::ZERO);
                ended_holds.push(EndedHold {
                    task,
                    user: h.held.user,
                    amount: h.held.amount,
                    status: h.held.status,
                    actual,
                    balance_after: h.balance_after,
                });
            }
        }
        new_holds.sort_by(|a, b| a.task.cmp(&b.task));
        ended_holds.sort_by(|a, b| a.task.cmp(&b.task));
        let tasks = &self.tasks;
        let new_tasks = self
            .new_tasks
            .into_iter()
            .map(|(id, task)| {
                let upstream_id = tasks.get(&id).and_then(|seen| seen.update.upstream_id.clone());
                NewTask { task, upstream_id }
            })
            .collect::<Vec<_>>();
        let mut task_writes: Vec<TaskWrite> = self
            .tasks
            .into_iter()
            .filter_map(|(task, seen)| {
                let from = seen.read?;
                (from != seen.status).then_some(TaskWrite {
                    task,
                    owner: seen.owner,
                    from,
                    to: seen.status,
                    update: seen.update,
                })
            })
            .collect();
        task_writes.sort_by(|a, b| a.task.cmp(&b.task));
        Plan {
            decided,
            now: self.now,
            balances,
            reads,
            new_holds,
            ended_holds,
            entries: self.entries,
            new_tasks,
            task_writes,
        }
    }
}

/// Later fields replace earlier ones; fields left `None` keep what was there.
fn merge(into: &mut TaskUpdate, later: &TaskUpdate) {
    let pick = |a: &mut Option<String>, b: &Option<String>| {
        if b.is_some() {
            a.clone_from(b);
        }
    };
    pick(&mut into.upstream_id, &later.upstream_id);
    pick(&mut into.output_url, &later.output_url);
    pick(&mut into.last_frame_url, &later.last_frame_url);
    pick(&mut into.usage_json, &later.usage_json);
    pick(&mut into.error_code, &later.error_code);
    pick(&mut into.error_message, &later.error_message);
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::TaskEvent;

    fn usd(micros: i64) -> UsdAmount {
        UsdAmount::from_micros(micros)
    }

    fn hold(user: &str, task: &str, amount: i64) -> BookOp {
        BookOp::Hold { user: UserId(user.into()), task: TaskId(task.into()), amount: usd(amount), record: None }
    }

    fn end(task: &str, charge: Option<i64>) -> BookOp {
        BookOp::End { task: TaskId(task.into()), expect: None, charge: charge.map(usd), then: None }
    }

    fn state(balances: &[(&str, i64)]) -> BookState {
        BookState {
            balances: balances.iter().map(|&(u, b)| (UserId(u.into()), usd(b))).collect(),
            ..BookState::default()
        }
    }

    #[test]
    fn a_hot_user_gets_one_balance_write_checked_in_order() {
        let ops =
            [hold("u", "t1", 40), hold("u", "t2", 50), hold("u", "t3", 30), hold("v", "t4", 1), end("t1", Some(10))];
        let mut read = state(&[("u", 100)]);
        read.balances.insert(UserId("v".into()), usd(0));
        let plan = plan(&ops, read, Timestamp(7));
        assert_eq!(
            plan.balances,
            vec![BalanceWrite { user: UserId("u".into()), from: usd(100), to: usd(40), spent: usd(10) }],
            "one write for u; none for v, whose hold was refused"
        );
        let answers = plan.clone().answers(&[1, 2, 3, 4]);
        assert!(matches!(answers[2], Err(LedgerError::InsufficientBalance { available, .. }) if available == usd(10)));
        assert!(matches!(answers[3], Err(LedgerError::InsufficientBalance { .. })));
        assert_eq!(plan.entries.iter().map(|e| e.balance_after.micros()).collect::<Vec<_>>(), vec![60, 10, 40]);
        // t1 was held and settled in this batch: one insert that is already settled, no update.
        assert!(plan.ended_holds.is_empty());
        let t1 = plan.new_holds.iter().find(|h| h.task.as_str() == "t1").map(|h| (h.status, h.actual, h.balance_after));
        assert_eq!(t1, Some((BillingStatus::Settled, Some(usd(10)), usd(40))));
        assert_eq!(plan.new_holds.len(), 2);
    }

    #[test]
    fn a_plan_says_what_it_assumed_of_each_balance() {
        let ops =
            [hold("u", "t1", 40), hold("u", "t2", 50), end("t1", Some(10)), hold("w", "t3", 5), hold("w", "t4", 6)];
        let mut read = state(&[("u", 100), ("v", 7), ("w", 10)]);
        read.holds.insert(
            TaskId("t0".into()),
            Held { user: UserId("v".into()), amount: usd(3), status: BillingStatus::Reserved },
        );
        let plan = plan(&ops, read, Timestamp(7));
        let relies: Vec<(&str, i64, i64, Relies)> =
            plan.reads.iter().map(|r| (r.user.as_str(), r.from.micros(), r.to.micros(), r.relies)).collect();
        assert_eq!(
            relies,
            vec![
                // u's lowest point was 10 after the second hold: any start ≥ 90 still grants both.
                ("u", 100, 40, Relies::AtLeast(usd(90))),
                ("v", 7, 7, Relies::Nothing),
                // t4 was refused for want of balance: only the balance read justifies that.
                ("w", 10, 5, Relies::Exactly),
            ]
        );
    }

    #[test]
    fn a_rebased_plan_answers_with_the_balances_written() {
        let ops = [hold("u", "t1", 40), end("t1", Some(10)), hold("v", "t2", 1)];
        let mut plan = plan(&ops, state(&[("u", 100), ("v", 5)]), Timestamp(7));
        plan.rebase(&UserId("u".into()), usd(1_000)).expect("no overflow");
        assert_eq!(plan.entries.iter().map(|e| e.balance_after.micros()).collect::<Vec<_>>(), vec![1_060, 1_090, 4]);
        let answers = plan.answers(&[1, 2, 3]);
        assert!(matches!(&answers[0], Ok(BookAnswer::Held(r)) if r.balance_after == usd(1_060)));
        assert!(matches!(&answers[1], Ok(BookAnswer::Ended(s)) if s.balance_after == usd(1_090)));
        assert!(matches!(&answers[2], Ok(BookAnswer::Held(r)) if r.balance_after == usd(4)));
    }

    #[test]
    fn ending_a_task_without_a_hold_relies_on_the_exact_balance() {
        let t = TaskId("t".into());
        let mut read = state(&[("u", 50)]);
        read.tasks.insert(t.clone(), (UserId("u".into()), TaskStatus::Queued));
        let ops = [BookOp::Move { task: t, change: TaskTransition::new(TaskStatus::Queued, TaskEvent::Cancel) }];
        let plan = plan(&ops, read, Timestamp(7));
        assert_eq!(plan.task_writes.len(), 1);
        assert_eq!(plan.reads.iter().map(|r| r.relies).collect::<Vec<_>>(), vec![Relies::Exactly]);
    }

    #[test]
    fn refused_operations_write_nothing() {
        let ops = [hold("ghost", "t1", 1), hold("u", "t2", -1), end("t9", None), hold("u", "t3", 101)];
        let plan = plan(&ops, state(&[("u", 100)]), Timestamp(7));
        assert!(plan.is_empty());
        assert!(plan.answers(&[]).iter().all(Result::is_err));
    }

    #[test]
    fn task_changes_merge_and_need_their_owner_locked() {
        let t = TaskId("t".into());
        let mut read = state(&[("u", 0)]);
        read.tasks.insert(t.clone(), (UserId("u".into()), TaskStatus::Submitting));
        let mut accepted = TaskTransition::new(TaskStatus::Submitting, TaskEvent::Accepted);
        accepted.update.upstream_id = Some("up".into());
        let ops = [
            BookOp::Move { task: t.clone(), change: accepted.clone() },
            BookOp::Move { task: t.clone(), change: accepted },
            BookOp::Move { task: t.clone(), change: TaskTransition::new(TaskStatus::Queued, TaskEvent::Started) },
        ];
        let plan = plan(&ops, read.clone(), Timestamp(7));
        assert_eq!(plan.task_writes.len(), 1);
        let w = &plan.task_writes[0];
        assert_eq!(
            (w.from, w.to, w.update.upstream_id.as_deref()),
            (TaskStatus::Submitting, TaskStatus::Processing, Some("up"))
        );
        let answers = plan.answers(&[]);
        assert_eq!(answers[0], Ok(BookAnswer::Moved(TaskStatus::Queued)));
        assert!(matches!(answers[1], Err(LedgerError::TaskConflict { status: Some(TaskStatus::Queued), .. })));
        // Without its owner's balance (not locked), a task is not changed.
        read.balances.clear();
        let refused = super::plan(&ops[..1], read, Timestamp(7));
        assert!(refused.is_empty());
    }

    #[test]
    fn keys_are_sorted_and_name_unknown_owners() {
        let ops = [hold("b", "t2", 1), hold("a", "t1", 1), end("t3", None)];
        let k = keys(&ops);
        assert_eq!(k.users.iter().map(UserId::as_str).collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(k.tasks.len(), 3);
        assert_eq!(k.owners_unknown.iter().map(TaskId::as_str).collect::<Vec<_>>(), vec!["t3"]);
    }
}
