//! The rules of the money, written once: [`plan`] takes a batch of operations in arrival order and
//! the state they touch, decides every operation's outcome, and returns the rows to write.
//!
//! Every ledger implementation is a thin shell around it: the in-memory ledger plans one
//! operation at a time under its mutex; the store's writers read the balances, reservations and
//! tasks a batch touches (or, on PostgreSQL, take what its operations assume, checked by the
//! write: the store's `pg_assume.rs`), plan, write the rows in a few statements and commit once. The rules:
//!
//! - no overdraft: a hold is refused when the balance (after the batch's earlier movements) is
//!   below it; only a settlement above its hold, or a negative adjustment, goes below zero;
//! - each reservation ends exactly once, `reserved → settled | refunded`;
//! - one ledger entry per balance movement, so the balance stays the sum of the entries;
//! - a refused operation moves nothing and does not affect its neighbours in the batch;
//! - a task changes state only through [`TaskTransition::target`](domain::TaskTransition::target) (the domain's transition
//!   table, compare-and-set on the expected state); a terminal state comes together with the end
//!   of the task's reservation, never before it;
//! - a key's budget is a second balance inside the same decision: a hold counted against keys
//!   (its task's `billing.budget_keys`: the calling key and its budgeted ancestors), each of which is refused when the key's limit, less what it spent in the
//!   current period and what its open holds keep, is below it; its end takes the hold off the key
//!   and adds the charge to the key's spend of the period it ends in ([`KeyBudgetState`]).

mod rules;
#[cfg(test)]
mod tests;
mod types;

pub use rules::plan;
pub use types::*;
