//! What the PostgreSQL writer's one-round-trip path assumes of a batch before reading anything.
//!
//! Only `pg_book.rs` writes without reading first, so this protocol lives with that dialect; the
//! rules it feeds (`billing::book::plan`) and what their decisions relied on
//! (`billing::book::Relies`) stay in `billing`, where every ledger shares them.

use std::collections::BTreeSet;

use billing::book::{BookOp, BookState, Held};
use domain::UsdAmount;
use domain::{BillingStatus, BudgetKeys, TaskStatus};

/// The balance [`assumed`] gives every user: far above any real one, so that every hold fits.
/// The plan's running balances are counted from it, and a write that finds the real balance
/// shifts them all by the difference ([`Plan::rebase`](billing::book::Plan::rebase)); what the holds need is the same whatever
/// the start ([`Relies::AtLeast`](billing::book::Relies::AtLeast) of `ASSUMED − lowest point`).
pub(crate) const ASSUMED_BALANCE: UsdAmount = UsdAmount::from_micros(1 << 50);

/// The state `ops` would find if each went as its caller expects, for a writer that writes without
/// reading first: every user exists (with [`ASSUMED_BALANCE`]); no reservation or task exists yet
/// for a hold; an end's reservation is open, of the user and amount the caller holds, and its task
/// (if it moves) is in the state the change names, or `processing` (where a call's task runs) when
/// the change names none. `None` when some operation gives too little to assume (an end without
/// its user and amount, a task change without its hold, two operations on one task), or moves a
/// key's budget (its counters are always read).
///
/// Every assumption must be checked by the write (the balance by its bounds; the reservation by
/// its state, user and amount; the task by its state; new rows by their ids), and a write that finds
/// one false must change nothing: the batch then takes the reading path, which decides on what is
/// stored. A plan on this state that refuses anything must not be written either.
pub(crate) fn assumed<'a>(ops: impl IntoIterator<Item = &'a BookOp>) -> Option<BookState> {
    let mut state = BookState::default();
    let mut named = BTreeSet::new();
    for op in ops {
        match op {
            // A key's budget counters are read, never assumed: the batch takes the reading path.
            _ if !op.budget_keys().is_empty() => return None,
            // A voucher is read under its row lock (the locking path).
            BookOp::Redeem { .. } | BookOp::Pay { .. } => return None,
            BookOp::Hold { user, task, .. } => {
                state.balances.insert(user.clone(), ASSUMED_BALANCE);
                named.insert(task).then_some(())?;
            }
            BookOp::End { task, expect: Some(billing::Expect { user, amount, budget }), then, .. }
                if budget.is_empty() =>
            {
                state.balances.insert(user.clone(), ASSUMED_BALANCE);
                named.insert(task).then_some(())?;
                let held = Held {
                    user: user.clone(),
                    amount: *amount,
                    status: BillingStatus::Reserved,
                    budget: BudgetKeys::NONE,
                };
                state.holds.insert(task.clone(), held);
                if let Some(change) = then {
                    let from = change.from.unwrap_or(TaskStatus::Processing);
                    state.tasks.insert(task.clone(), (user.clone(), from));
                }
            }
            BookOp::Credit { user, .. } => {
                state.balances.insert(user.clone(), ASSUMED_BALANCE);
            }
            BookOp::End { .. } | BookOp::Move { .. } => return None,
        }
    }
    Some(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::{TaskId, UserId};

    fn hold(user: &str, task: &str) -> BookOp {
        BookOp::Hold {
            user: UserId(user.into()),
            task: TaskId(task.into()),
            amount: UsdAmount::from_micros(5),
            record: None,
        }
    }

    #[test]
    fn holds_assume_the_high_balance_and_a_fresh_task() {
        let state = assumed(&[hold("u", "t1"), hold("u", "t2")]).expect("holds say enough");
        assert_eq!(state.balances.get(&UserId("u".into())), Some(&ASSUMED_BALANCE));
        assert!(state.holds.is_empty() && state.tasks.is_empty());
    }

    #[test]
    fn too_little_said_takes_the_reading_path() {
        let blind_end = BookOp::End { task: TaskId("t".into()), expect: None, charge: None, then: None };
        assert!(assumed(&[blind_end]).is_none(), "an end without its user and amount");
        assert!(assumed(&[hold("u", "t"), hold("v", "t")]).is_none(), "two operations on one task");
        let user = UserId("u".into());
        let budgeted = BookOp::End {
            task: TaskId("t".into()),
            expect: Some(billing::Expect {
                budget: BudgetKeys::new([domain::ApiKeyId("key_1".into())]),
                ..billing::Expect::of(&user, UsdAmount::from_micros(9))
            }),
            charge: None,
            then: None,
        };
        assert!(assumed(&[hold("u", "t1"), budgeted]).is_none(), "a key's budget counters are read");
    }

    #[test]
    fn an_end_assumes_its_open_reservation_and_running_task() {
        let user = UserId("u".into());
        let change =
            domain::TaskTransition { from: None, event: domain::TaskEvent::Succeeded, update: Default::default() };
        let end = BookOp::End {
            task: TaskId("t".into()),
            expect: Some(billing::Expect::of(&user, UsdAmount::from_micros(9))),
            charge: Some(UsdAmount::from_micros(3)),
            then: Some(change),
        };
        let state = assumed(&[end]).expect("an end naming its hold says enough");
        let held = state.holds.get(&TaskId("t".into())).expect("the reservation is assumed open");
        assert_eq!((held.amount, held.status), (UsdAmount::from_micros(9), BillingStatus::Reserved));
        assert_eq!(state.tasks.get(&TaskId("t".into())), Some(&(user, TaskStatus::Processing)));
    }
}
