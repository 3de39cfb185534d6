//! The engine of [`plan`]: the working state of one batch and each operation's decision.

use std::collections::{BTreeMap, HashMap};

use domain::{
    ApiKeyId, BillingStatus, LedgerKind, Task, TaskId, TaskStatus, TaskTransition, TaskUpdate, Timestamp, UsdAmount,
    UserId,
};

use super::types::*;
use crate::ledger::{LedgerError, Reservation, Settlement, check_credit, settle_delta};

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
    /// Key budgets: as read, and as the batch leaves them.
    budgets: HashMap<ApiKeyId, (KeyBudgetState, KeyBudgetState)>,
    /// Vouchers as read, marked redeemed as the batch redeems them.
    vouchers: HashMap<String, VoucherSeen>,
    /// Vouchers the batch redeems.
    claims: Vec<VoucherClaim>,
    /// Payments credited before the batch, and by it.
    paid: std::collections::BTreeSet<String>,
    /// Payments the batch credits.
    payments: Vec<NewPayment>,
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
        let budgets = state.budgets.into_iter().map(|(key, b)| (key, (b, b.at(now)))).collect();
        Book {
            now,
            budgets,
            read: state.balances.clone(),
            balances: state.balances,
            spent: HashMap::new(),
            relies: HashMap::new(),
            holds,
            tasks,
            new_tasks: BTreeMap::new(),
            entries: Vec::new(),
            vouchers: state.vouchers,
            claims: Vec::new(),
            paid: state.payments,
            payments: Vec::new(),
        }
    }

    fn apply(&mut self, op: &BookOp) -> Result<Decided, LedgerError> {
        match op {
            BookOp::Hold { user, task, amount, record } => self.hold(user, task, *amount, record.as_deref()),
            BookOp::End { task, expect, charge, then } => self.end(task, expect.as_ref(), *charge, then.as_ref()),
            BookOp::Credit { user, amount, kind, note } => self.credit(user, *amount, *kind, note),
            BookOp::Redeem { user, code_hash } => self.redeem(user, code_hash),
            BookOp::Pay { user, payment, amount } => self.pay(user, payment, *amount),
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
        let budget = record.map(|r| r.billing.budget_keys.clone()).unwrap_or_default();
        // Every key of the chain must cover the hold; the first that cannot refuses it.
        let keys_after = budget
            .keys()
            .iter()
            .map(|key| Ok((key.clone(), self.budget_hold(key, amount)?)))
            .collect::<Result<Vec<_>, LedgerError>>()?;
        if available < amount {
            self.rely(user, Relies::Exactly);
            return Err(LedgerError::InsufficientBalance { needed: amount, available });
        }
        let hold = amount.checked_neg().map_err(|_| LedgerError::Overflow)?;
        let after = self.book(user, Some(task), LedgerKind::Reserve, hold, hold_note(amount))?;
        // The hold still fits in any starting balance at least `read − after` (`after` ≥ 0).
        let least = self.read.get(user).and_then(|read| read.checked_sub(after).ok());
        self.rely(user, least.map_or(Relies::Exactly, Relies::AtLeast));
        for (key, state) in keys_after {
            self.budgets.entry(key).and_modify(|b| b.1 = state);
        }
        let held = Held { user: user.clone(), amount, status: BillingStatus::Reserved, budget };
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

    /// The counters of `key` after a hold of `amount` on it, or the refusal: the key must exist
    /// and its remaining budget (if it has one) cover `amount`. Changes nothing.
    fn budget_hold(&self, key: &ApiKeyId, amount: UsdAmount) -> Result<KeyBudgetState, LedgerError> {
        let (_, now) = self.budgets.get(key).ok_or_else(|| {
            LedgerError::InvalidAmount(format!("the hold counts against key {key}, which does not exist"))
        })?;
        if let (Some(b), Some(remaining)) = (now.budget, now.remaining(self.now))
            && remaining < amount
        {
            return Err(LedgerError::KeyBudgetExceeded { needed: amount, remaining, limit: b.limit, period: b.period });
        }
        let held = now.spend.held.checked_add(amount).map_err(|_| LedgerError::Overflow)?;
        Ok(KeyBudgetState { spend: KeySpend { held, ..now.spend }, ..*now })
    }

    /// The counters of `key` after an end of a hold of `reserved` charging `charge`; `None` when the
    /// key no longer exists (nothing to move).
    fn budget_end(
        &self,
        key: &ApiKeyId,
        reserved: UsdAmount,
        charge: Option<UsdAmount>,
    ) -> Result<Option<KeyBudgetState>, LedgerError> {
        let Some((_, now)) = self.budgets.get(key) else { return Ok(None) };
        let held = UsdAmount::from_micros(now.spend.held.micros().saturating_sub(reserved.micros()).max(0));
        let spent = match charge {
            Some(actual) => now.spend.spent.checked_add(actual).map_err(|_| LedgerError::Overflow)?,
            None => now.spend.spent,
        };
        Ok(Some(KeyBudgetState { spend: KeySpend { held, spent, ..now.spend }, ..*now }))
    }

    fn end(
        &mut self,
        task: &TaskId,
        expect: Option<&Expect>,
        charge: Option<UsdAmount>,
        then: Option<&TaskTransition>,
    ) -> Result<Decided, LedgerError> {
        let hold = self.holds.get(task).ok_or_else(|| LedgerError::UnknownReservation(task.clone()))?;
        if hold.held.status != BillingStatus::Reserved {
            return Err(LedgerError::AlreadyFinished { task: task.clone(), status: hold.held.status });
        }
        if expect
            .is_some_and(|e| e.user != hold.held.user || e.amount != hold.held.amount || e.budget != hold.held.budget)
        {
            return Err(LedgerError::InvalidAmount(format!(
                "the reservation of {task} has another user, amount or key"
            )));
        }
        let (user, reserved, budget) = (hold.held.user.clone(), hold.held.amount, hold.held.budget.clone());
        let mut keys_after = Vec::with_capacity(budget.keys().len());
        for key in budget.keys() {
            if let Some(state) = self.budget_end(key, reserved, charge)? {
                keys_after.push((key.clone(), state));
            }
        }
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
        for (key, state) in keys_after {
            self.budgets.entry(key).and_modify(|b| b.1 = state);
        }
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

    fn redeem(&mut self, user: &UserId, code_hash: &str) -> Result<Decided, LedgerError> {
        let voucher = match self.vouchers.get(code_hash) {
            None => return Err(LedgerError::VoucherNotFound),
            Some(v) if v.revoked => return Err(LedgerError::VoucherNotFound),
            Some(v) if v.redeemed => return Err(LedgerError::VoucherRedeemed),
            Some(v) => v,
        };
        if let Some(at) = voucher.expires_at.filter(|at| *at <= self.now) {
            return Err(LedgerError::VoucherExpired(at));
        }
        let (amount, description) = (voucher.amount, format!("voucher of batch {}", voucher.batch));
        check_credit(LedgerKind::Voucher, amount)?;
        self.book(user, None, LedgerKind::Voucher, amount, description)?;
        if let Some(v) = self.vouchers.get_mut(code_hash) {
            v.redeemed = true;
        }
        self.claims.push(VoucherClaim { code_hash: code_hash.to_owned(), user: user.clone() });
        Ok(Decided::Credited(self.entries.len().saturating_sub(1)))
    }

    fn pay(&mut self, user: &UserId, payment: &str, amount: UsdAmount) -> Result<Decided, LedgerError> {
        if self.paid.contains(payment) {
            return Err(LedgerError::PaymentCredited(payment.to_owned()));
        }
        check_credit(LedgerKind::Topup, amount)?;
        self.book(user, None, LedgerKind::Topup, amount, format!("payment {payment}"))?;
        self.paid.insert(payment.to_owned());
        self.payments.push(NewPayment { payment: payment.to_owned(), user: user.clone(), amount });
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
            if let Some((model, price)) = u.served_by {
                row.model = model;
                row.billing.pricing_version_id = Some(price);
            }
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
                    budget: h.held.budget,
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
                    budget: h.held.budget,
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
                let seen = tasks.get(&id).map(|seen| &seen.update);
                let upstream_id = seen.and_then(|u| u.upstream_id.clone());
                let via = seen.and_then(|u| u.via.clone());
                NewTask { task, upstream_id, via }
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
        let mut budgets: Vec<BudgetWrite> = self
            .budgets
            .into_iter()
            .filter(|(_, (from, to))| from != to)
            .map(|(key, (from, to))| BudgetWrite { key, from, to })
            .collect();
        budgets.sort_by(|a, b| a.key.cmp(&b.key));
        Plan {
            budgets,
            decided,
            now: self.now,
            balances,
            reads,
            new_holds,
            ended_holds,
            entries: self.entries,
            new_tasks,
            task_writes,
            claims: self.claims,
            payments: self.payments,
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
    if later.via.is_some() {
        into.via.clone_from(&later.via);
    }
    if later.served_by.is_some() {
        into.served_by.clone_from(&later.served_by);
    }
}
