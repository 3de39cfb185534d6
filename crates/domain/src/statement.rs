//! Statements and revenue: what a user's (or the whole gateway's) ledger entries of a time range
//! add up to, line by line, and the rule that makes a statement reconcile to the micro-USD.
//!
//! Every ledger entry is either a call's (its hold: [`CALL_KINDS`]) or a credit (any other kind:
//! `topup`, `adjustment`, and whatever kind adds money later, such as `voucher`). A call's entries
//! are its hold (`reserve`, −hold), any part given back early (`release`, +part), and its end:
//! `settle` (+hold − charge) or `refund` (+the rest of the hold). So at any instant the entries of
//! one call written so far add up to −(what it still holds) while it is open, −(its charge) once it
//! settled, and 0 once it was refunded. Summing over every entry of a range gives the rule
//!
//! ```text
//! opening + credits − charges − (held at end − held at start) = closing
//! ```
//!
//! where `charges` are the charges of the calls that settled in the range and `held` is what the
//! calls open at an instant hold. [`Statement::from_figures`] checks it on the figures the store
//! read; figures that break it are data that contradicts itself, never a statement.

use crate::ModelKind;
use crate::money::UsdAmount;
use crate::records::{BillingStatus, LedgerKind, TaskId, UserId};
use crate::task::TaskStatus;
use crate::time::Timestamp;

/// The kinds of a call's entries (its hold and its end); every other kind is a credit.
pub const CALL_KINDS: [LedgerKind; 4] =
    [LedgerKind::Reserve, LedgerKind::Settle, LedgerKind::Release, LedgerKind::Refund];

/// Whether entries of `kind` (its stored name) belong to a call's hold rather than being credits.
pub fn is_call_kind(kind: &str) -> bool {
    CALL_KINDS.iter().any(|k| k.as_str() == kind)
}

/// The entries of one kind in a time range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindSum {
    /// The stored kind (`topup`, `reserve`, …; a kind this build does not know is kept as text).
    pub kind: String,
    /// How many entries.
    pub entries: i64,
    /// Their sum.
    pub amount: UsdAmount,
}

/// The charges of one user's settled calls of one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChargeSum {
    /// The user.
    pub user: UserId,
    /// The model that served the calls.
    pub model: String,
    /// How many calls.
    pub calls: i64,
    /// What they were charged together.
    pub amount: UsdAmount,
}

/// What the store reads, in one snapshot, for a user's statement of `[from, to)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatementFigures {
    /// Entries written before `from`, by kind.
    pub before: Vec<KindSum>,
    /// Entries written in `[from, to)`, by kind.
    pub during: Vec<KindSum>,
    /// Calls whose `settle` entry was written in `[from, to)`, by model.
    pub charges: Vec<ChargeSum>,
    /// What the calls open at `from` held then: −(their entries written before `from`).
    pub held_at_start: UsdAmount,
    /// What the calls open at `to` held then.
    pub held_at_end: UsdAmount,
}

/// What the store reads, in one snapshot, for the gateway's revenue of `[from, to)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RevenueFigures {
    /// Every user's entries written in `[from, to)`, by kind.
    pub during: Vec<KindSum>,
    /// Calls whose `settle` entry was written in `[from, to)`, by user and model.
    pub charges: Vec<ChargeSum>,
}

/// One line of a statement or report: a kind, a model or a user, how many, and how much.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The kind, model or user id.
    pub name: String,
    /// Entries (credits) or calls (charges, refunds).
    pub count: i64,
    /// Their sum.
    pub amount: UsdAmount,
}

/// Lines with their total.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lines {
    /// The lines (see each use for the order).
    pub lines: Vec<Line>,
    /// How many entries or calls in all.
    pub count: i64,
    /// The sum of the lines.
    pub total: UsdAmount,
}

/// A user's statement of a time range, as [`Statement::from_figures`] folds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// The balance at the range's start: every entry written before it.
    pub opening: UsdAmount,
    /// Credits by kind (every kind but the calls'), by kind name; an adjustment may be negative.
    pub credits: Lines,
    /// Charges of the calls that settled in the range, by model, largest first.
    pub charges: Lines,
    /// Holds given back whole because the call failed (`refund` entries): how many and how much.
    /// They move the balance only through `held` (a refunded hold never became a charge).
    pub refunds: Line,
    /// What open calls held at the start.
    pub held_at_start: UsdAmount,
    /// What open calls held at the end.
    pub held_at_end: UsdAmount,
    /// The balance at the range's end: every entry written before it.
    pub closing: UsdAmount,
}

/// The gateway's revenue of a time range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revenue {
    /// Credits by kind, by kind name.
    pub credits: Lines,
    /// Charges by model, largest first.
    pub by_model: Lines,
    /// Charges by user, largest first.
    pub by_user: Lines,
    /// Refunded holds.
    pub refunds: Line,
}

/// Why figures make no statement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    /// A sum does not fit in an `i64` of micro-USD.
    #[error("a statement figure overflows")]
    Overflow,
    /// The figures break the statement's rule: the calls' entries of the range do not add up to
    /// −(charges) − (held at end − held at start).
    #[error("the ledger does not reconcile: the calls' entries add up to {entries}, not {expected}")]
    DoesNotReconcile {
        /// The sum of the calls' entries written in the range.
        entries: UsdAmount,
        /// What the charges and the holds say it must be.
        expected: UsdAmount,
    },
}

fn add(a: UsdAmount, b: UsdAmount) -> Result<UsdAmount, StatementError> {
    a.checked_add(b).map_err(|_| StatementError::Overflow)
}

fn sub(a: UsdAmount, b: UsdAmount) -> Result<UsdAmount, StatementError> {
    a.checked_sub(b).map_err(|_| StatementError::Overflow)
}

/// Groups `(name, count, amount)` into one line per name, with their total. Lines come sorted by
/// name, or by amount (largest first, then name) when `by_amount`.
fn group<'a>(
    items: impl IntoIterator<Item = (&'a str, i64, UsdAmount)>,
    by_amount: bool,
) -> Result<Lines, StatementError> {
    let mut out = Lines::default();
    for (name, count, amount) in items {
        match out.lines.iter_mut().find(|l| l.name == name) {
            Some(line) => {
                line.count = line.count.checked_add(count).ok_or(StatementError::Overflow)?;
                line.amount = add(line.amount, amount)?;
            }
            None => out.lines.push(Line { name: name.to_owned(), count, amount }),
        }
        out.count = out.count.checked_add(count).ok_or(StatementError::Overflow)?;
        out.total = add(out.total, amount)?;
    }
    if by_amount {
        out.lines.sort_by(|a, b| b.amount.cmp(&a.amount).then_with(|| a.name.cmp(&b.name)));
    } else {
        out.lines.sort_by(|a, b| a.name.cmp(&b.name));
    }
    Ok(out)
}

/// The credits among `sums`, by kind.
fn credits(sums: &[KindSum]) -> Result<Lines, StatementError> {
    group(sums.iter().filter(|s| !is_call_kind(&s.kind)).map(|s| (s.kind.as_str(), s.entries, s.amount)), false)
}

/// The `refund` entries among `sums`.
fn refunds(sums: &[KindSum]) -> Result<Line, StatementError> {
    let refunds = group(
        sums.iter().filter(|s| s.kind == LedgerKind::Refund.as_str()).map(|s| (s.kind.as_str(), s.entries, s.amount)),
        false,
    )?;
    Ok(Line { name: LedgerKind::Refund.as_str().to_owned(), count: refunds.count, amount: refunds.total })
}

fn total(sums: &[KindSum], pick: impl Fn(&KindSum) -> bool) -> Result<UsdAmount, StatementError> {
    sums.iter().filter(|s| pick(s)).try_fold(UsdAmount::ZERO, |sum, s| add(sum, s.amount))
}

impl Statement {
    /// Folds the store's figures into a statement, and checks its rule (see the module text).
    pub fn from_figures(f: &StatementFigures) -> Result<Statement, StatementError> {
        let opening = total(&f.before, |_| true)?;
        let closing = add(opening, total(&f.during, |_| true)?)?;
        let charges = group(f.charges.iter().map(|c| (c.model.as_str(), c.calls, c.amount)), true)?;
        let calls_moved = total(&f.during, |s| is_call_kind(&s.kind))?;
        let held_change = sub(f.held_at_end, f.held_at_start)?;
        let expected = sub(UsdAmount::ZERO, add(charges.total, held_change)?)?;
        if calls_moved != expected {
            return Err(StatementError::DoesNotReconcile { entries: calls_moved, expected });
        }
        Ok(Statement {
            opening,
            credits: credits(&f.during)?,
            charges,
            refunds: refunds(&f.during)?,
            held_at_start: f.held_at_start,
            held_at_end: f.held_at_end,
            closing,
        })
    }

    /// What the held amount changed by over the range (negative: less held at the end).
    pub fn held_change(&self) -> UsdAmount {
        UsdAmount::from_micros(self.held_at_end.micros().saturating_sub(self.held_at_start.micros()))
    }
}

impl Revenue {
    /// Folds the store's gateway-wide figures.
    pub fn from_figures(f: &RevenueFigures) -> Result<Revenue, StatementError> {
        Ok(Revenue {
            credits: credits(&f.during)?,
            by_model: group(f.charges.iter().map(|c| (c.model.as_str(), c.calls, c.amount)), true)?,
            by_user: group(f.charges.iter().map(|c| (c.user.as_str(), c.calls, c.amount)), true)?,
            refunds: refunds(&f.during)?,
        })
    }
}

/// Where a time-ordered export stands: the last row it wrote, by `(created_at, id)`. Rows come in
/// that order, each page after the last row of the one before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Keyset {
    /// The last row's time, in Unix milliseconds.
    pub at: i64,
    /// The last row's id (its ledger entry's).
    pub id: i64,
}

impl Keyset {
    /// Before every row written at `at` or later.
    pub const fn start(at: i64) -> Keyset {
        Keyset { at, id: i64::MIN }
    }
}

/// A call whose hold ended (settled or refunded): one line of the usage export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedCall {
    /// Its ending ledger entry (`settle` or `refund`).
    pub entry_id: i64,
    /// When the hold ended: that entry's time.
    pub ended_at: Timestamp,
    /// The task.
    pub task_id: TaskId,
    /// When the task was created.
    pub created_at: Timestamp,
    /// The model that served it (or was asked for, when none did).
    pub model: String,
    /// Its kind.
    pub kind: ModelKind,
    /// The task's status.
    pub status: TaskStatus,
    /// `settled` or `refunded`.
    pub billing: BillingStatus,
    /// What was held for it.
    pub held: UsdAmount,
    /// What it was charged (zero when refunded).
    pub charged: UsdAmount,
    /// The upstream's usage, as JSON text, when it reported one.
    pub usage_json: Option<String>,
}

impl EndedCall {
    /// Where an export stands after this row.
    pub const fn keyset(&self) -> Keyset {
        Keyset { at: self.ended_at.0, id: self.entry_id }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sum(kind: &str, entries: i64, micros: i64) -> KindSum {
        KindSum { kind: kind.into(), entries, amount: UsdAmount::from_micros(micros) }
    }

    fn charge(user: &str, model: &str, calls: i64, micros: i64) -> ChargeSum {
        ChargeSum { user: UserId(user.into()), model: model.into(), calls, amount: UsdAmount::from_micros(micros) }
    }

    /// A month: 10 USD before it; in it a top-up of 5, a voucher of 1, an adjustment of −0.5, a
    /// call held 2 before the month and settled at 0.3 in it, a call held 1 in it and still open,
    /// and a call held and refunded (0.4) in it.
    fn figures() -> StatementFigures {
        StatementFigures {
            before: vec![sum("topup", 1, 12_000_000), sum("reserve", 1, -2_000_000)],
            during: vec![
                sum("topup", 1, 5_000_000),
                sum("voucher", 1, 1_000_000),
                sum("adjustment", 1, -500_000),
                sum("settle", 1, 1_700_000),
                sum("reserve", 2, -1_400_000),
                sum("refund", 1, 400_000),
            ],
            charges: vec![charge("u", "m", 1, 300_000)],
            held_at_start: UsdAmount::from_micros(2_000_000),
            held_at_end: UsdAmount::from_micros(1_000_000),
        }
    }

    #[test]
    fn a_month_folds_into_lines_that_reconcile() {
        let s = Statement::from_figures(&figures()).expect("statement");
        assert_eq!(s.opening.micros(), 10_000_000);
        let kinds: Vec<(&str, i64)> = s.credits.lines.iter().map(|l| (l.name.as_str(), l.amount.micros())).collect();
        assert_eq!(kinds, vec![("adjustment", -500_000), ("topup", 5_000_000), ("voucher", 1_000_000)]);
        assert_eq!((s.credits.total.micros(), s.charges.total.micros(), s.charges.count), (5_500_000, 300_000, 1));
        assert_eq!((s.refunds.count, s.refunds.amount.micros()), (1, 400_000));
        assert_eq!(s.held_change().micros(), -1_000_000);
        assert_eq!(s.closing.micros(), 10_000_000 + 5_500_000 + 1_700_000 - 1_400_000 + 400_000);
        let rule = s.opening.micros() + s.credits.total.micros() - s.charges.total.micros() - s.held_change().micros();
        assert_eq!(rule, s.closing.micros());
    }

    #[test]
    fn figures_that_contradict_themselves_make_no_statement() {
        let mut f = figures();
        f.held_at_end = UsdAmount::from_micros(999_999);
        assert_eq!(
            Statement::from_figures(&f),
            Err(StatementError::DoesNotReconcile {
                entries: UsdAmount::from_micros(700_000),
                expected: UsdAmount::from_micros(700_001),
            })
        );
        f.during.push(sum("topup", 1, i64::MAX));
        assert_eq!(Statement::from_figures(&f), Err(StatementError::Overflow));
    }

    #[test]
    fn an_empty_range_is_all_zeros_and_revenue_groups_by_model_and_user() {
        let s = Statement::from_figures(&StatementFigures::default()).expect("empty");
        assert_eq!(
            (s.opening, s.closing, s.credits.clone(), s.charges.count),
            (UsdAmount::ZERO, UsdAmount::ZERO, Lines::default(), 0)
        );
        let r = Revenue::from_figures(&RevenueFigures {
            during: vec![sum("topup", 2, 7), sum("settle", 3, 1)],
            charges: vec![charge("a", "m1", 1, 5), charge("b", "m1", 2, 4), charge("b", "m2", 1, 6)],
        })
        .expect("revenue");
        let names =
            |l: &Lines| l.lines.iter().map(|l| (l.name.clone(), l.count, l.amount.micros())).collect::<Vec<_>>();
        assert_eq!(names(&r.by_model), vec![("m1".into(), 3, 9), ("m2".into(), 1, 6)]);
        assert_eq!(names(&r.by_user), vec![("b".into(), 3, 10), ("a".into(), 1, 5)]);
        assert_eq!(names(&r.credits), vec![("topup".into(), 2, 7)]);
        assert_eq!(r.refunds, Line { name: "refund".into(), count: 0, amount: UsdAmount::ZERO });
    }
}
