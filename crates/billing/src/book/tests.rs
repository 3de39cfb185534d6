//! The plan's decisions on small batches: balances, what each decision assumed, rebasing.

use super::*;
use domain::{
    ApiKeyId, BillingStatus, BudgetKeys, TaskEvent, TaskId, TaskStatus, TaskTransition, Timestamp, UsdAmount, UserId,
};

use crate::ledger::LedgerError;

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
    BookState { balances: balances.iter().map(|&(u, b)| (UserId(u.into()), usd(b))).collect(), ..BookState::default() }
}

#[test]
fn a_hot_user_gets_one_balance_write_checked_in_order() {
    let ops = [hold("u", "t1", 40), hold("u", "t2", 50), hold("u", "t3", 30), hold("v", "t4", 1), end("t1", Some(10))];
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
    let ops = [hold("u", "t1", 40), hold("u", "t2", 50), end("t1", Some(10)), hold("w", "t3", 5), hold("w", "t4", 6)];
    let mut read = state(&[("u", 100), ("v", 7), ("w", 10)]);
    read.holds.insert(
        TaskId("t0".into()),
        Held { user: UserId("v".into()), amount: usd(3), status: BillingStatus::Reserved, budget: BudgetKeys::NONE },
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

/// Key `k`'s counters with a `limit` per `period`.
fn budget(limit: i64, period: domain::BudgetPeriod, start: Timestamp, spent: i64, held: i64) -> KeyBudgetState {
    KeyBudgetState {
        budget: Some(domain::KeyBudget { limit: usd(limit), period }),
        spend: KeySpend { period_start: start, spent: usd(spent), held: usd(held) },
    }
}

/// A hold for `task` of `user` whose task record counts against key `k`'s budget.
fn budgeted_hold(user: &str, task: &str, amount: i64) -> BookOp {
    let (user, task) = (UserId(user.into()), TaskId(task.into()));
    let mut record = crate::conformance::running_task(&user, &task, usd(amount), TaskStatus::Processing);
    record.billing.budget_keys = BudgetKeys::new([ApiKeyId("k".into())]);
    BookOp::Hold { user, task, amount: usd(amount), record: Some(Box::new(record)) }
}

fn with_budget(mut read: BookState, b: KeyBudgetState) -> BookState {
    read.budgets.insert(ApiKeyId("k".into()), b);
    read
}

#[test]
fn a_key_budget_refuses_the_hold_that_would_pass_it_whatever_the_balance() {
    let total = domain::BudgetPeriod::Total;
    let read = with_budget(state(&[("u", 1_000)]), budget(100, total, Timestamp(0), 30, 0));
    let ops = [budgeted_hold("u", "t1", 60), budgeted_hold("u", "t2", 11), budgeted_hold("u", "t3", 10)];
    let plan = plan(&ops, read, Timestamp(7));
    let answers = plan.clone().answers(&[]);
    assert!(matches!(answers[0], Ok(BookAnswer::Held(_))));
    assert_eq!(
        answers[1],
        Err(LedgerError::KeyBudgetExceeded { needed: usd(11), remaining: usd(10), limit: usd(100), period: total })
    );
    assert!(matches!(answers[2], Ok(BookAnswer::Held(_))), "exactly the remaining budget fits");
    let k = ApiKeyId("k".into());
    let written: Vec<_> =
        plan.budgets.iter().map(|b| (b.key.clone(), b.from.spend.held, b.to.spend.held, b.to.spend.spent)).collect();
    assert_eq!(written, vec![(k.clone(), usd(0), usd(70), usd(30))]);
    assert!(plan.new_holds.iter().all(|h| h.budget.keys() == [k.clone()]), "each reservation names its key");
    assert_eq!(plan.balances[0].to, usd(930), "the balance moved only for the granted holds");
}

#[test]
fn an_end_takes_its_hold_off_the_key_and_adds_the_charge() {
    let k = ApiKeyId("k".into());
    let mut read = with_budget(state(&[("u", 1_000)]), budget(100, domain::BudgetPeriod::Total, Timestamp(0), 0, 90));
    for task in ["t1", "t2"] {
        let held = Held {
            user: UserId("u".into()),
            amount: usd(45),
            status: BillingStatus::Reserved,
            budget: BudgetKeys::new([k.clone()]),
        };
        read.holds.insert(TaskId(task.into()), held);
    }
    let plan = plan(&[end("t1", Some(20)), end("t2", None)], read, Timestamp(7));
    assert_eq!(plan.budgets.len(), 1);
    assert_eq!((plan.budgets[0].to.spend.held, plan.budgets[0].to.spend.spent), (usd(0), usd(20)));
    assert!(plan.ended_holds.iter().all(|h| h.budget.keys() == [k.clone()]), "the guard names the key");
}

#[test]
fn a_period_that_moved_on_starts_over_and_open_holds_still_count() {
    let day = domain::BudgetPeriod::Day;
    let yesterday = Timestamp(86_400_000);
    let today = Timestamp(2 * 86_400_000);
    let now = Timestamp(today.millis() + 5);
    let k = ApiKeyId("k".into());
    // Yesterday's 90 spent no longer counts; the 10 still held (a hold from yesterday) does.
    let mut read = with_budget(state(&[("u", 1_000)]), budget(100, day, yesterday, 90, 10));
    let old = Held {
        user: UserId("u".into()),
        amount: usd(10),
        status: BillingStatus::Reserved,
        budget: BudgetKeys::new([k]),
    };
    read.holds.insert(TaskId("t0".into()), old);
    let ops = [budgeted_hold("u", "t1", 91), budgeted_hold("u", "t2", 90), end("t0", Some(4))];
    let plan = plan(&ops, read, now);
    let answers = plan.clone().answers(&[]);
    assert!(matches!(answers[0], Err(LedgerError::KeyBudgetExceeded { remaining, .. }) if remaining == usd(90)));
    assert!(matches!(answers[1], Ok(BookAnswer::Held(_))));
    // The hold from yesterday is charged into today's period.
    let b = &plan.budgets[0];
    assert_eq!((b.from.spend.period_start, b.from.spend.spent), (yesterday, usd(90)), "the guard is what was read");
    assert_eq!((b.to.spend.period_start, b.to.spend.spent, b.to.spend.held), (today, usd(4), usd(90)));
}

#[test]
fn a_key_without_a_budget_any_more_still_counts_and_refuses_nothing_and_a_missing_key_is_refused() {
    let unlimited = KeyBudgetState { budget: None, spend: KeySpend { spent: usd(5), ..KeySpend::default() } };
    let read = with_budget(state(&[("u", 1_000)]), unlimited);
    let plan = plan(&[budgeted_hold("u", "t1", 500)], read, Timestamp(7));
    assert!(!plan.refuses_any());
    assert_eq!(plan.budgets[0].to.spend, KeySpend { held: usd(500), ..unlimited.spend });
    let missing = super::plan(&[budgeted_hold("u", "t1", 1)], state(&[("u", 1_000)]), Timestamp(7));
    assert!(matches!(missing.answers(&[])[0], Err(LedgerError::InvalidAmount(_))));
}

#[test]
fn utc_periods_start_where_they_should() {
    let b = |period| budget(1, period, Timestamp(0), 0, 0);
    let now: Timestamp = "2026-11-26T16:00:00Z".parse().expect("time");
    assert_eq!(b(domain::BudgetPeriod::Total).at(now).spend.period_start, Timestamp(0));
    assert_eq!(
        b(domain::BudgetPeriod::Month).at(now).spend.period_start,
        "2026-11-01T00:00:00Z".parse().expect("time")
    );
    assert_eq!(b(domain::BudgetPeriod::Week).at(now).spend.period_start, "2026-11-23T00:00:00Z".parse().expect("time"));
    assert_eq!(b(domain::BudgetPeriod::Day).remaining(now), Some(usd(1)));
}

/// A hold for `task` of `user` counted against the chain `keys` (nearest first).
fn chained_hold(user: &str, task: &str, amount: i64, keys: &[&str]) -> BookOp {
    let BookOp::Hold { user, task, amount, record: Some(mut record) } = budgeted_hold(user, task, amount) else {
        unreachable!("budgeted_hold makes a hold with a record")
    };
    record.billing.budget_keys = BudgetKeys::new(keys.iter().map(|k| ApiKeyId((*k).into())));
    BookOp::Hold { user, task, amount, record: Some(record) }
}

#[test]
fn a_hold_counts_against_every_key_of_its_chain_and_the_tightest_refuses() {
    let total = domain::BudgetPeriod::Total;
    let mut read = state(&[("u", 1_000)]);
    // The child has 50 left of its own, its parent only 30 (shared with the parent's other children).
    read.budgets.insert(ApiKeyId("child".into()), budget(100, total, Timestamp(0), 50, 0));
    read.budgets.insert(ApiKeyId("parent".into()), budget(40, total, Timestamp(0), 10, 0));
    let ops = [
        chained_hold("u", "t1", 31, &["child", "parent"]),
        chained_hold("u", "t2", 30, &["child", "parent"]),
        chained_hold("u", "t3", 1, &["sibling_without_budget", "parent"]),
    ];
    read.budgets.insert(ApiKeyId("sibling_without_budget".into()), KeyBudgetState::default());
    let plan = plan(&ops, read, Timestamp(7));
    let answers = plan.clone().answers(&[]);
    assert!(
        matches!(answers[0], Err(LedgerError::KeyBudgetExceeded { limit, .. }) if limit == usd(40)),
        "the parent's budget refuses what the child's own would allow: {:?}",
        answers[0]
    );
    assert!(matches!(answers[1], Ok(BookAnswer::Held(_))), "exactly what the parent has left fits");
    assert!(matches!(answers[2], Err(LedgerError::KeyBudgetExceeded { .. })), "a sibling shares the parent's budget");
    let held: Vec<(String, UsdAmount)> =
        plan.budgets.iter().map(|b| (b.key.as_str().to_owned(), b.to.spend.held)).collect();
    assert_eq!(held, vec![("child".to_owned(), usd(30)), ("parent".to_owned(), usd(30))]);
    let keys: Vec<&[ApiKeyId]> = plan.new_holds.iter().map(|h| h.budget.keys()).collect();
    assert_eq!(keys, vec![&[ApiKeyId("child".into()), ApiKeyId("parent".into())][..]]);
}

#[test]
fn a_voucher_credits_once_and_only_while_it_is_good() {
    let redeem = |user: &str, code: &str| BookOp::Redeem { user: UserId(user.into()), code_hash: code.into() };
    let voucher = |expires_at: Option<i64>, revoked: bool, redeemed: bool| VoucherSeen {
        batch: "vb_1".into(),
        amount: usd(5_000_000),
        expires_at: expires_at.map(Timestamp),
        revoked,
        redeemed,
    };
    let mut read = state(&[("u", 100), ("v", 0)]);
    read.vouchers.insert("good".into(), voucher(Some(8), false, false));
    read.vouchers.insert("spent".into(), voucher(None, false, true));
    read.vouchers.insert("late".into(), voucher(Some(7), false, false));
    read.vouchers.insert("gone".into(), voucher(None, true, false));
    // The same good code twice in one batch (two users racing): the first gets it.
    let ops = [
        redeem("u", "good"),
        redeem("v", "good"),
        redeem("u", "spent"),
        redeem("u", "late"),
        redeem("u", "gone"),
        redeem("u", "unknown"),
    ];
    let plan = plan(&ops, read, Timestamp(7));
    assert_eq!(plan.claims, vec![VoucherClaim { code_hash: "good".into(), user: UserId("u".into()) }]);
    assert_eq!(plan.entries.len(), 1);
    assert_eq!((plan.entries[0].kind, plan.entries[0].amount), (domain::LedgerKind::Voucher, usd(5_000_000)));
    let answers = plan.answers(&[11]);
    assert!(matches!(&answers[0], Ok(BookAnswer::Credited(e)) if e.balance_after == usd(5_000_100) && e.id == 11));
    assert!(matches!(answers[1], Err(LedgerError::VoucherRedeemed)), "{:?}", answers[1]);
    assert!(matches!(answers[2], Err(LedgerError::VoucherRedeemed)));
    assert!(matches!(answers[3], Err(LedgerError::VoucherExpired(Timestamp(7)))), "expired at its instant");
    assert!(matches!(answers[4], Err(LedgerError::VoucherNotFound)), "a revoked batch");
    assert!(matches!(answers[5], Err(LedgerError::VoucherNotFound)));
}
