//! `InMemoryLedger`: the `Ledger` port behind one `std::sync::Mutex`, for tests and embedding.
//!
//! Every operation takes the lock once, checks, computes every new value with checked
//! arithmetic, and only then writes; a refused or failed operation changes nothing. Its futures
//! never wait: they are ready on their first poll, so no async runtime is needed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use domain::{BillingStatus, Clock, LedgerEntry, LedgerKind, SystemClock, TaskId, UsdAmount, UserId};

use crate::ledger::{Ledger, LedgerError, Reservation, Settlement, check_credit, settle_delta};

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
    holds: HashMap<TaskId, Hold>,
}

#[derive(Default)]
struct Account {
    balance: UsdAmount,
    /// Oldest first.
    entries: Vec<LedgerEntry>,
}

struct Hold {
    user: UserId,
    amount: UsdAmount,
    status: BillingStatus,
}

/// One movement about to be written.
struct Movement<'a> {
    user: &'a UserId,
    task: Option<&'a TaskId>,
    kind: LedgerKind,
    amount: UsdAmount,
    description: String,
}

impl State {
    fn account(&self, user: &UserId) -> Result<&Account, LedgerError> {
        self.accounts.get(user).ok_or_else(|| LedgerError::UnknownUser(user.clone()))
    }

    /// Appends the movement and applies it to the balance, or changes nothing on error.
    fn apply(&mut self, m: Movement<'_>, now: domain::Timestamp) -> Result<LedgerEntry, LedgerError> {
        let id = self.last_id.checked_add(1).ok_or(LedgerError::Overflow)?;
        let account = self.accounts.get_mut(m.user).ok_or_else(|| LedgerError::UnknownUser(m.user.clone()))?;
        let balance_after = account.balance.checked_add(m.amount).map_err(|_| LedgerError::Overflow)?;
        let entry = LedgerEntry {
            id,
            user_id: m.user.clone(),
            task_id: m.task.cloned(),
            kind: m.kind,
            amount: m.amount,
            balance_after,
            description: m.description,
            created_at: now,
        };
        account.balance = balance_after;
        account.entries.push(entry.clone());
        self.last_id = id;
        Ok(entry)
    }

    /// Ends the hold of `task` as `status`, charging `actual`, exactly once.
    fn finish(
        &mut self,
        task: &TaskId,
        status: BillingStatus,
        actual: UsdAmount,
        now: domain::Timestamp,
    ) -> Result<Settlement, LedgerError> {
        let hold = self.holds.get(task).ok_or_else(|| LedgerError::UnknownReservation(task.clone()))?;
        if hold.status != BillingStatus::Reserved {
            return Err(LedgerError::AlreadyFinished { task: task.clone(), status: hold.status });
        }
        let (user, reserved) = (hold.user.clone(), hold.amount);
        let delta = settle_delta(reserved, actual)?;
        let (kind, description) = match status {
            BillingStatus::Refunded => (LedgerKind::Refund, format!("refund of {reserved} held for {task}")),
            _ => (LedgerKind::Settle, format!("charged {actual} of {reserved} held for {task}")),
        };
        let entry = self.apply(Movement { user: &user, task: Some(task), kind, amount: delta, description }, now)?;
        if let Some(hold) = self.holds.get_mut(task) {
            hold.status = status;
        }
        Ok(Settlement {
            task_id: task.clone(),
            user_id: user,
            status,
            reserved,
            actual,
            balance_after: entry.balance_after,
        })
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

    /// Where the reservation of `task` stands, if it has one.
    pub fn reservation_status(&self, task: &TaskId) -> Result<Option<BillingStatus>, LedgerError> {
        self.with_state(|state| Ok(state.holds.get(task).map(|h| h.status)))
    }

    /// Runs `f` under the lock. A poisoned lock (a panic while holding it, which no code path
    /// here can cause) is reported as a backend error rather than trusted.
    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> Result<T, LedgerError>) -> Result<T, LedgerError> {
        let mut state = self.state.lock().map_err(|_| LedgerError::Backend("in-memory ledger lock poisoned".into()))?;
        f(&mut state)
    }
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

#[async_trait]
impl Ledger for InMemoryLedger {
    async fn credit(
        &self,
        user: &UserId,
        amount: UsdAmount,
        kind: LedgerKind,
        note: &str,
    ) -> Result<LedgerEntry, LedgerError> {
        check_credit(kind, amount)?;
        let now = self.clock.now();
        let description = if note.is_empty() { kind.as_str().to_owned() } else { note.to_owned() };
        self.with_state(|state| state.apply(Movement { user, task: None, kind, amount, description }, now))
    }

    async fn reserve(&self, user: &UserId, task: &TaskId, amount: UsdAmount) -> Result<Reservation, LedgerError> {
        if amount.is_negative() {
            return Err(LedgerError::InvalidAmount(format!("a reservation cannot be negative ({amount})")));
        }
        let hold = amount.checked_neg().map_err(|_| LedgerError::Overflow)?;
        let now = self.clock.now();
        self.with_state(|state| {
            let available = state.account(user)?.balance;
            if state.holds.contains_key(task) {
                return Err(LedgerError::DuplicateReservation(task.clone()));
            }
            if available < amount {
                return Err(LedgerError::InsufficientBalance { needed: amount, available });
            }
            let description = format!("hold of {amount} for {task}");
            let movement = Movement { user, task: Some(task), kind: LedgerKind::Reserve, amount: hold, description };
            let entry = state.apply(movement, now)?;
            state.holds.insert(task.clone(), Hold { user: user.clone(), amount, status: BillingStatus::Reserved });
            Ok(Reservation { task_id: task.clone(), user_id: user.clone(), amount, balance_after: entry.balance_after })
        })
    }

    async fn settle(&self, task: &TaskId, actual: UsdAmount) -> Result<Settlement, LedgerError> {
        let now = self.clock.now();
        self.with_state(|state| state.finish(task, BillingStatus::Settled, actual, now))
    }

    async fn refund(&self, task: &TaskId) -> Result<Settlement, LedgerError> {
        let now = self.clock.now();
        self.with_state(|state| state.finish(task, BillingStatus::Refunded, UsdAmount::ZERO, now))
    }

    async fn balance(&self, user: &UserId) -> Result<UsdAmount, LedgerError> {
        self.with_state(|state| Ok(state.account(user)?.balance))
    }

    async fn entries(&self, user: &UserId, limit: u64) -> Result<Vec<LedgerEntry>, LedgerError> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        self.with_state(|state| Ok(state.account(user)?.entries.iter().rev().take(limit).cloned().collect()))
    }
}
