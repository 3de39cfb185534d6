//! The `Ledger` port: every balance movement, and the reserve → settle | refund rules.
//!
//! Rules every implementation keeps:
//!
//! - the balance always equals the sum of the user's ledger entries;
//! - `reserve` is one atomic conditional step: it fails with `InsufficientBalance` when the
//!   balance is below the amount, so concurrent reservations never overdraw;
//! - a reservation ends exactly once, `reserved → settled | refunded`; ending it again returns
//!   `AlreadyFinished` and moves no money;
//! - settlement charges actual usage even above the hold; that is the only way (besides an
//!   operator's negative adjustment) a balance can go below zero.

use async_trait::async_trait;
use domain::{
    BillingStatus, LedgerEntry, LedgerKind, TaskEvent, TaskId, TaskStatus, TaskTransition, Timestamp, UsdAmount, UserId,
};

/// Why a ledger operation was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// No account for this user.
    #[error("unknown user {0}")]
    UnknownUser(UserId),
    /// The balance does not cover the reservation.
    #[error("insufficient balance: {needed} USD needed, {available} USD available")]
    InsufficientBalance {
        /// The amount asked for.
        needed: UsdAmount,
        /// The balance at the time.
        available: UsdAmount,
    },
    /// The key's budget does not cover the reservation (the balance may).
    #[error(
        "this API key's budget does not cover the call: {needed} USD needed, {remaining} USD left of its {limit} USD \
         {period} limit"
    )]
    KeyBudgetExceeded {
        /// The amount asked for.
        needed: UsdAmount,
        /// What the key may still hold in its period.
        remaining: UsdAmount,
        /// The key's limit.
        limit: UsdAmount,
        /// Its period (`total`, `day`, `week`, `month`).
        period: domain::BudgetPeriod,
    },
    /// No reservation for this task.
    #[error("no reservation for task {0}")]
    UnknownReservation(TaskId),
    /// The task already has a reservation.
    #[error("task {0} already has a reservation")]
    DuplicateReservation(TaskId),
    /// The reservation was already settled or refunded; nothing moved.
    #[error("the reservation of task {task} is already {}", status.as_str())]
    AlreadyFinished {
        /// The task.
        task: TaskId,
        /// Where its reservation stands.
        status: BillingStatus,
    },
    /// The amount (or the kind of movement) is not allowed for this operation.
    #[error("invalid amount: {0}")]
    InvalidAmount(String),
    /// The balance or an entry would not fit in 64-bit micro-USD.
    #[error("amount out of range")]
    Overflow,
    /// Closing a call needs a terminal state for its task; nothing moved.
    #[error("{0} is not a terminal state")]
    NotTerminal(TaskStatus),
    /// The task does not exist (`status: None`), is not in the state the operation expects, or
    /// the transition table refuses the event; nothing moved.
    #[error("task {task} ({}) cannot take {event:?}", status.map_or("missing", TaskStatus::as_str))]
    TaskConflict {
        /// The task.
        task: TaskId,
        /// Its state when the operation was applied, if it exists.
        status: Option<TaskStatus>,
        /// The refused event.
        event: TaskEvent,
    },
    /// A terminal state was asked for a task whose reservation is still open: the reservation
    /// and the task end together (`CallBook::close_task`); nothing moved.
    #[error("task {0} still holds a reservation; end it with its call")]
    ReservationOpen(TaskId),
    /// No voucher has this code, or its batch was revoked; nothing moved.
    #[error("no voucher has this code")]
    VoucherNotFound,
    /// The voucher was redeemed already (by anyone); nothing moved.
    #[error("this voucher was redeemed already")]
    VoucherRedeemed,
    /// The voucher's batch expired; nothing moved.
    #[error("this voucher expired at {0}")]
    VoucherExpired(Timestamp),
    /// The payment was credited already; nothing moved.
    #[error("payment {0} was credited already")]
    PaymentCredited(String),
    /// The storage behind the ledger failed; the text is for the log, not for clients.
    #[error("ledger backend error: {0}")]
    Backend(String),
}

/// A hold placed on a user's balance for one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The task the hold is for.
    pub task_id: TaskId,
    /// Whose balance is held.
    pub user_id: UserId,
    /// The amount held.
    pub amount: UsdAmount,
    /// The balance right after the hold.
    pub balance_after: UsdAmount,
}

/// How a reservation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// The task.
    pub task_id: TaskId,
    /// Whose balance moved.
    pub user_id: UserId,
    /// `Settled` or `Refunded`.
    pub status: BillingStatus,
    /// The amount that was held.
    pub reserved: UsdAmount,
    /// The amount charged (zero when refunded).
    pub actual: UsdAmount,
    /// The balance right after.
    pub balance_after: UsdAmount,
}

/// Where balances and their movements are kept. Object-safe; use it as `Arc<dyn Ledger>`.
#[async_trait]
pub trait Ledger: Send + Sync {
    /// Adds money outside any task: `Topup` (amount > 0) or `Adjustment` (any non-zero amount,
    /// which may take the balance below zero). Any other kind, or a zero or negative top-up, is
    /// `InvalidAmount`. An empty `note` is recorded as the kind's name.
    async fn credit(
        &self,
        user: &UserId,
        amount: UsdAmount,
        kind: LedgerKind,
        note: &str,
    ) -> Result<LedgerEntry, LedgerError>;

    /// Redeems the voucher whose code hashes to `code_hash` for `user`: a `Voucher` entry of its
    /// amount, in the commit that marks it redeemed. Once in the whole store, whatever the races:
    /// `VoucherRedeemed` after, `VoucherNotFound` for an unknown or revoked code, `VoucherExpired`.
    async fn redeem(&self, user: &UserId, code_hash: &str) -> Result<LedgerEntry, LedgerError>;

    /// Credits the completed payment `payment` of `amount` to `user` (a `Topup` entry), in the
    /// commit that records it: once in the whole store; `PaymentCredited` after.
    async fn pay(&self, user: &UserId, payment: &str, amount: UsdAmount) -> Result<LedgerEntry, LedgerError>;

    /// Atomically holds `amount` (≥ 0) for `task`: a `Reserve` entry of `−amount`. Fails with
    /// `InsufficientBalance` when the balance is below `amount`, `DuplicateReservation` when the
    /// task already has one.
    async fn reserve(&self, user: &UserId, task: &TaskId, amount: UsdAmount) -> Result<Reservation, LedgerError>;

    /// Ends the hold charging `actual` (≥ 0): a `Settle` entry of `reserved − actual`, negative
    /// when the call cost more than the hold. Exactly once: a second end is `AlreadyFinished`.
    async fn settle(&self, task: &TaskId, actual: UsdAmount) -> Result<Settlement, LedgerError>;

    /// Ends the hold without a charge: a `Refund` entry of `+reserved`. Exactly once.
    async fn refund(&self, task: &TaskId) -> Result<Settlement, LedgerError>;

    /// The user's balance: the sum of their ledger entries.
    async fn balance(&self, user: &UserId) -> Result<UsdAmount, LedgerError>;

    /// The user's latest `limit` entries, newest first.
    async fn entries(&self, user: &UserId, limit: u64) -> Result<Vec<LedgerEntry>, LedgerError>;
}

/// A reservation as the caller of an end holds it: the end is refused unless the stored one
/// matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expect {
    /// Whose balance is held.
    pub user: UserId,
    /// The amount held.
    pub amount: UsdAmount,
    /// The keys whose budgets the hold counts against (empty: none).
    pub budget: domain::BudgetKeys,
}

impl Expect {
    /// A hold of `amount` on `user`'s balance that counts against no key's budget.
    pub fn of(user: &UserId, amount: UsdAmount) -> Expect {
        Expect { user: user.clone(), amount, budget: domain::BudgetKeys::NONE }
    }
}

/// Reservation and task bookkeeping in one atomic step each, for stores that keep both.
///
/// `open_call` holds the amount and records the task together; `close_call` ends the hold
/// (charging `charge`, or refunding when it is `None`) and moves the task to its terminal state
/// together. Either everything of a step happens or nothing does, so a crash between the two
/// writes of a call cannot leave a hold without its task or a finished task with an open hold.
#[async_trait]
pub trait CallBook: Send + Sync {
    /// Holds `hold` for `task` (a new, running task) and stores the task, atomically.
    async fn open_call(&self, task: domain::Task, hold: UsdAmount) -> Result<Reservation, LedgerError>;

    /// Ends the hold of `task` as `held` describes it (user, amount, budget key): a `Settle` entry
    /// charging `charge`, or a `Refund` entry when `charge` is `None`, and the task's `outcome`,
    /// atomically. Exactly once: a second close, or one whose hold does not match, is refused and
    /// moves nothing.
    ///
    /// The task moves from whatever running state it is in (`outcome.transition()`); a
    /// non-terminal `outcome.status` is `NotTerminal`, a task the transition table does not let
    /// reach it (or a missing task) is `TaskConflict`, and in both cases nothing moves.
    async fn close_call(
        &self,
        task: &TaskId,
        held: &Expect,
        charge: Option<UsdAmount>,
        outcome: domain::ports::TaskOutcome,
    ) -> Result<Settlement, LedgerError> {
        let change = outcome.transition().ok_or(LedgerError::NotTerminal(outcome.status))?;
        self.close_task(task, held, charge, change).await
    }

    /// Ends the hold of `task` as `close_call` does and moves the task by `change` (a
    /// compare-and-set on `change.from` through the transition table), atomically. The new state
    /// must be terminal (`NotTerminal` otherwise); a task not in `change.from`, or one the table
    /// refuses the event, is `TaskConflict`. Refused means nothing moved: the hold stays open.
    async fn close_task(
        &self,
        task: &TaskId,
        held: &Expect,
        charge: Option<UsdAmount>,
        change: TaskTransition,
    ) -> Result<Settlement, LedgerError>;
}

/// Checks that `amount` may be credited as `kind`: `Topup` above zero, `Adjustment` non-zero.
pub fn check_credit(kind: LedgerKind, amount: UsdAmount) -> Result<(), LedgerError> {
    match kind {
        LedgerKind::Topup | LedgerKind::Voucher if amount.micros() > 0 => Ok(()),
        LedgerKind::Adjustment if amount.micros() != 0 => Ok(()),
        LedgerKind::Topup | LedgerKind::Adjustment | LedgerKind::Voucher => {
            Err(LedgerError::InvalidAmount(format!("{} of {amount} is not allowed", kind.as_str())))
        }
        other => Err(LedgerError::InvalidAmount(format!("{} is not a credit", other.as_str()))),
    }
}

/// The `Settle` entry's amount: `reserved − actual`, refusing a negative `actual`.
pub fn settle_delta(reserved: UsdAmount, actual: UsdAmount) -> Result<UsdAmount, LedgerError> {
    if actual.is_negative() {
        return Err(LedgerError::InvalidAmount(format!("a charge cannot be negative ({actual})")));
    }
    reserved.checked_sub(actual).map_err(|_| LedgerError::Overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_rules() {
        let usd = UsdAmount::from_micros;
        assert_eq!(check_credit(LedgerKind::Topup, usd(1)), Ok(()));
        assert_eq!(check_credit(LedgerKind::Adjustment, usd(-1)), Ok(()));
        assert_eq!(check_credit(LedgerKind::Adjustment, usd(1)), Ok(()));
        for (kind, amount) in [
            (LedgerKind::Topup, 0),
            (LedgerKind::Topup, -1),
            (LedgerKind::Adjustment, 0),
            (LedgerKind::Reserve, -1),
            (LedgerKind::Settle, 1),
            (LedgerKind::Refund, 1),
            (LedgerKind::Release, 1),
        ] {
            assert!(matches!(check_credit(kind, usd(amount)), Err(LedgerError::InvalidAmount(_))), "{kind:?}");
        }
    }

    #[test]
    fn settle_delta_rules() {
        let usd = UsdAmount::from_micros;
        assert_eq!(settle_delta(usd(100), usd(30)), Ok(usd(70)));
        assert_eq!(settle_delta(usd(100), usd(130)), Ok(usd(-30)));
        assert!(matches!(settle_delta(usd(100), usd(-1)), Err(LedgerError::InvalidAmount(_))));
        assert_eq!(settle_delta(usd(i64::MIN), usd(1)), Err(LedgerError::Overflow));
    }

    #[test]
    fn ledger_is_object_safe() {
        fn takes(_: Option<&dyn Ledger>) {}
        takes(None);
    }
}
