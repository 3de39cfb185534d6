//! `InMemoryLedger`: the `Ledger` and `CallBook` ports behind one `std::sync::Mutex`, for tests
//! and embedding.
//!
//! Every operation takes the lock once, reads what it touches, and lets [`crate::book::plan`]
//! (the rules every ledger shares) decide; then it applies the plan's rows to the maps. A refused
//! or failed operation changes nothing. Its futures never wait: they are ready on their first
//! poll, so no async runtime is needed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use domain::{
    ApiKeyId, BillingStatus, Clock, KeyBudget, LedgerEntry, LedgerKind, SystemClock, Task, TaskId, TaskStatus,
    TaskTransition, UsdAmount, UserId,
};

use crate::book::{self, BookAnswer, BookOp, BookState, Held, KeyBudgetState, Plan, VoucherSeen};
use crate::ledger::{CallBook, Expect, Ledger, LedgerError, Reservation, Settlement};

/// A ledger held in memory; see the crate documentation for an embedding example.
pub struct InMemoryLedger {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The id of the last entry written; ids increase across all users.
    last_id: i64,
    accounts: HashMap<UserId, Account>,
    holds: HashMap<TaskId, Held>,
    /// Tasks recorded by `open_call`: owner and state.
    tasks: HashMap<TaskId, (UserId, TaskStatus)>,
    /// Budget counters of keys given one ([`InMemoryLedger::set_key_budget`]).
    budgets: HashMap<ApiKeyId, KeyBudgetState>,
    /// Vouchers by code hash ([`InMemoryLedger::add_voucher`]).
    vouchers: HashMap<String, VoucherSeen>,
    /// Payments credited.
    payments: std::collections::BTreeSet<String>,
}

#[derive(Default)]
struct Account {
    balance: UsdAmount,
    /// Oldest first.
    entries: Vec<LedgerEntry>,
}

impl State {
    fn account(&self, user: &UserId) -> Result<&Account, LedgerError> {
        self.accounts.get(user).ok_or_else(|| LedgerError::UnknownUser(user.clone()))
    }

    /// What `op` reads: the accounts, reservations and tasks it names, and their owners.
    fn read_for(&self, op: &BookOp) -> BookState {
        let keys = book::keys([op]);
        let mut users = keys.users;
        for task in &keys.owners_unknown {
            users.extend(self.holds.get(task).map(|h| h.user.clone()));
            users.extend(self.tasks.get(task).map(|t| t.0.clone()));
        }
        let holds: HashMap<TaskId, Held> =
            keys.tasks.iter().filter_map(|t| Some((t.clone(), self.holds.get(t)?.clone()))).collect();
        let mut budget_keys = keys.budgets;
        budget_keys.extend(holds.values().flat_map(|h| h.budget.keys().iter().cloned()));
        BookState {
            balances: users.into_iter().filter_map(|u| Some((u.clone(), self.accounts.get(&u)?.balance))).collect(),
            tasks: keys.tasks.iter().filter_map(|t| Some((t.clone(), self.tasks.get(t)?.clone()))).collect(),
            holds,
            budgets: budget_keys.into_iter().filter_map(|k| Some((k.clone(), *self.budgets.get(&k)?))).collect(),
            vouchers: keys.vouchers.iter().filter_map(|h| Some((h.clone(), self.vouchers.get(h)?.clone()))).collect(),
            payments: keys.payments.into_iter().filter(|p| self.payments.contains(p)).collect(),
        }
    }

    /// Writes the plan's rows; returns the ids given to its entries.
    fn write(&mut self, plan: &Plan) -> Result<Vec<i64>, LedgerError> {
        let first = self.last_id.checked_add(1).ok_or(LedgerError::Overflow)?;
        let count = i64::try_from(plan.entries.len()).map_err(|_| LedgerError::Overflow)?;
        self.last_id.checked_add(count).ok_or(LedgerError::Overflow)?;
        let ids: Vec<i64> = (first..first + count).collect();
        for (e, &id) in plan.entries.iter().zip(&ids) {
            let account = self.accounts.get_mut(&e.user).ok_or_else(|| LedgerError::UnknownUser(e.user.clone()))?;
            account.entries.push(e.stored(id, plan.now()));
            account.balance = e.balance_after;
            self.last_id = id;
        }
        for h in &plan.new_holds {
            let held = Held { user: h.user.clone(), amount: h.amount, status: h.status, budget: h.budget.clone() };
            self.holds.insert(h.task.clone(), held);
        }
        for h in &plan.ended_holds {
            if let Some(held) = self.holds.get_mut(&h.task) {
                held.status = h.status;
            }
        }
        for t in &plan.new_tasks {
            self.tasks.insert(t.task.id.clone(), (t.task.user_id.clone(), t.task.status));
        }
        for w in &plan.task_writes {
            if let Some(task) = self.tasks.get_mut(&w.task) {
                task.1 = w.to;
            }
        }
        for b in &plan.budgets {
            self.budgets.insert(b.key.clone(), b.to);
        }
        for p in &plan.payments {
            self.payments.insert(p.payment.clone());
        }
        for c in &plan.claims {
            if let Some(v) = self.vouchers.get_mut(&c.code_hash) {
                v.redeemed = true;
            }
        }
        Ok(ids)
    }
}

impl InMemoryLedger {
    /// An empty ledger on the system clock.
    pub fn new() -> Self {
        InMemoryLedger::with_clock(Arc::new(SystemClock))
    }

    /// An empty ledger stamping entries with `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        InMemoryLedger { clock, state: Mutex::new(State::default()) }
    }

    /// Opens an account with a zero balance. Opening an existing account changes nothing.
    pub fn open_account(&self, user: &UserId) -> Result<(), LedgerError> {
        self.with_state(|state| {
            state.accounts.entry(user.clone()).or_default();
            Ok(())
        })
    }

    /// Gives `key` a spend budget (or takes it away with `None`), keeping its counters; a key must
    /// have been given one before a hold counts against it.
    pub fn set_key_budget(&self, key: &ApiKeyId, budget: Option<KeyBudget>) -> Result<(), LedgerError> {
        self.with_state(|state| {
            state.budgets.entry(key.clone()).or_default().budget = budget;
            Ok(())
        })
    }

    /// Adds (or replaces) the voucher whose code hashes to `code_hash`.
    pub fn add_voucher(&self, code_hash: &str, voucher: VoucherSeen) -> Result<(), LedgerError> {
        self.with_state(|state| {
            state.vouchers.insert(code_hash.to_owned(), voucher);
            Ok(())
        })
    }

    /// The budget counters of `key`, if it was given a budget.
    pub fn key_budget(&self, key: &ApiKeyId) -> Result<Option<KeyBudgetState>, LedgerError> {
        self.with_state(|state| Ok(state.budgets.get(key).copied()))
    }

    /// Where the reservation of `task` stands, if it has one.
    pub fn reservation_status(&self, task: &TaskId) -> Result<Option<BillingStatus>, LedgerError> {
        self.with_state(|state| Ok(state.holds.get(task).map(|h| h.status)))
    }

    /// The state of a task recorded by `open_call`, if any.
    pub fn task_status(&self, task: &TaskId) -> Result<Option<TaskStatus>, LedgerError> {
        self.with_state(|state| Ok(state.tasks.get(task).map(|t| t.1)))
    }

    /// Runs `f` under the lock. A poisoned lock (a panic while holding it, which no code path
    /// here can cause) is reported as a backend error rather than trusted.
    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> Result<T, LedgerError>) -> Result<T, LedgerError> {
        let mut state = self.state.lock().map_err(|_| LedgerError::Backend("in-memory ledger lock poisoned".into()))?;
        f(&mut state)
    }

    /// Plans `op` against the current state and applies it, as one step under the lock.
    fn run(&self, op: BookOp) -> Result<BookAnswer, LedgerError> {
        let now = self.clock.now();
        self.with_state(|state| {
            let plan = book::plan([&op], state.read_for(&op), now);
            let ids = state.write(&plan)?;
            plan.answers(&ids).pop().unwrap_or_else(|| Err(LedgerError::Backend("no answer".into())))
        })
    }
}

/// The answer a `Ledger` method expects, or a backend error when the plan answered another kind.
fn unexpected(answer: BookAnswer) -> LedgerError {
    LedgerError::Backend(format!("unexpected ledger answer {answer:?}"))
}

impl Default for InMemoryLedger {
    fn default() -> Self {
        InMemoryLedger::new()
    }
}

impl std::fmt::Debug for InMemoryLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryLedger").finish_non_exhaustive()
    }
}

impl InMemoryLedger {
    fn hold(&self, op: BookOp) -> Result<Reservation, LedgerError> {
        match self.run(op)? {
            BookAnswer::Held(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    fn end(&self, op: BookOp) -> Result<Settlement, LedgerError> {
        match self.run(op)? {
            BookAnswer::Ended(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }
}

#[async_trait]
impl Ledger for InMemoryLedger {
    async fn credit(
        &self,
        user: &UserId,
        amount: UsdAmount,
        kind: LedgerKind,
        note: &str,
    ) -> Result<LedgerEntry, LedgerError> {
        match self.run(BookOp::Credit { user: user.clone(), amount, kind, note: note.to_owned() })? {
            BookAnswer::Credited(e) => Ok(e),
            other => Err(unexpected(other)),
        }
    }

    async fn pay(&self, user: &UserId, payment: &str, amount: UsdAmount) -> Result<LedgerEntry, LedgerError> {
        match self.run(BookOp::Pay { user: user.clone(), payment: payment.to_owned(), amount })? {
            BookAnswer::Credited(e) => Ok(e),
            other => Err(unexpected(other)),
        }
    }

    async fn redeem(&self, user: &UserId, code_hash: &str) -> Result<LedgerEntry, LedgerError> {
        match self.run(BookOp::Redeem { user: user.clone(), code_hash: code_hash.to_owned() })? {
            BookAnswer::Credited(e) => Ok(e),
            other => Err(unexpected(other)),
        }
    }

    async fn reserve(&self, user: &UserId, task: &TaskId, amount: UsdAmount) -> Result<Reservation, LedgerError> {
        self.hold(BookOp::Hold { user: user.clone(), task: task.clone(), amount, record: None })
    }

    async fn settle(&self, task: &TaskId, actual: UsdAmount) -> Result<Settlement, LedgerError> {
        self.end(BookOp::End { task: task.clone(), expect: None, charge: Some(actual), then: None })
    }

    async fn refund(&self, task: &TaskId) -> Result<Settlement, LedgerError> {
        self.end(BookOp::End { task: task.clone(), expect: None, charge: None, then: None })
    }

    async fn balance(&self, user: &UserId) -> Result<UsdAmount, LedgerError> {
        self.with_state(|state| Ok(state.account(user)?.balance))
    }

    async fn entries(&self, user: &UserId, limit: u64) -> Result<Vec<LedgerEntry>, LedgerError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        self.with_state(|state| Ok(state.account(user)?.entries.iter().rev().take(limit).cloned().collect()))
    }
}

#[async_trait]
impl CallBook for InMemoryLedger {
    async fn open_call(&self, task: Task, hold: UsdAmount) -> Result<Reservation, LedgerError> {
        let (user, id) = (task.user_id.clone(), task.id.clone());
        self.hold(BookOp::Hold { user, task: id, amount: hold, record: Some(Box::new(task)) })
    }

    async fn close_task(
        &self,
        task: &TaskId,
        held: &Expect,
        charge: Option<UsdAmount>,
        change: TaskTransition,
    ) -> Result<Settlement, LedgerError> {
        let expect = Some(held.clone());
        self.end(BookOp::End { task: task.clone(), expect, charge, then: Some(change) })
    }
}
