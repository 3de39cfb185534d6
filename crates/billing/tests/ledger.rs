//! The in-memory ledger against the port's rules: no overdraft, exactly-once settlement,
//! balance = sum of entries, under random operation sequences and under many threads.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use billing::{InMemoryLedger, Ledger, LedgerError};
use common::block_on;
use domain::{BillingStatus, Clock, LedgerKind, TaskId, Timestamp, UsdAmount, UserId};
use proptest::prelude::*;

fn usd(micros: i64) -> UsdAmount {
    UsdAmount::from_micros(micros)
}

fn user(n: usize) -> UserId {
    UserId(format!("usr_{n}"))
}

fn task(n: usize) -> TaskId {
    TaskId(format!("task_{n}"))
}

struct FixedClock;

impl Clock for FixedClock {
    fn now(&self) -> Timestamp {
        Timestamp(1_795_300_123_456)
    }
}

/// A ledger with one account holding `balance`.
fn funded(balance: i64) -> (InMemoryLedger, UserId) {
    let ledger = InMemoryLedger::with_clock(Arc::new(FixedClock));
    let alice = user(0);
    ledger.open_account(&alice).unwrap();
    if balance > 0 {
        block_on(ledger.credit(&alice, usd(balance), LedgerKind::Topup, "")).unwrap();
    }
    (ledger, alice)
}

/// Balance = sum of entries, and each entry's `balance_after` is the running sum.
fn assert_consistent(ledger: &dyn Ledger, user: &UserId) {
    let balance = block_on(ledger.balance(user)).unwrap();
    let mut entries = block_on(ledger.entries(user, u64::MAX)).unwrap();
    entries.reverse();
    let mut running = UsdAmount::ZERO;
    let mut last_id = i64::MIN;
    for e in &entries {
        running = running.checked_add(e.amount).unwrap();
        assert_eq!(e.balance_after, running, "entry {}", e.id);
        assert!(e.id > last_id, "ids increase");
        last_id = e.id;
    }
    assert_eq!(balance, running);
}

#[test]
fn no_overdraft() {
    let (ledger, alice) = funded(100);
    let first = block_on(ledger.reserve(&alice, &task(1), usd(60))).unwrap();
    assert_eq!(first.balance_after, usd(40));
    assert_eq!(
        block_on(ledger.reserve(&alice, &task(2), usd(50))),
        Err(LedgerError::InsufficientBalance { needed: usd(50), available: usd(40) })
    );
    assert_eq!(ledger.reservation_status(&task(2)), Ok(None));
    assert_eq!(block_on(ledger.reserve(&alice, &task(3), usd(40))).map(|r| r.balance_after), Ok(usd(0)));
    assert_eq!(block_on(ledger.reserve(&alice, &task(4), usd(0))).map(|r| r.balance_after), Ok(usd(0)));
    assert_eq!(block_on(ledger.entries(&alice, 10)).unwrap().len(), 4);
    assert_consistent(&ledger, &alice);
}

#[test]
fn settle_is_exactly_once() {
    let (ledger, alice) = funded(1_000);
    block_on(ledger.reserve(&alice, &task(1), usd(300))).unwrap();
    let s = block_on(ledger.settle(&task(1), usd(120))).unwrap();
    assert_eq!(
        (s.status, s.reserved, s.actual, s.balance_after),
        (BillingStatus::Settled, usd(300), usd(120), usd(880))
    );
    let finished = Err(LedgerError::AlreadyFinished { task: task(1), status: BillingStatus::Settled });
    assert_eq!(block_on(ledger.settle(&task(1), usd(120))), finished);
    assert_eq!(block_on(ledger.refund(&task(1))), finished);
    assert_eq!(block_on(ledger.balance(&alice)), Ok(usd(880)));
    let entries = block_on(ledger.entries(&alice, 10)).unwrap();
    let kinds: Vec<_> = entries.iter().map(|e| (e.kind, e.amount.micros())).collect();
    assert_eq!(kinds, vec![(LedgerKind::Settle, 180), (LedgerKind::Reserve, -300), (LedgerKind::Topup, 1_000)]);
    assert!(entries.iter().all(|e| e.created_at == FixedClock.now()));
    assert_eq!(entries[0].task_id, Some(task(1)));
    assert_eq!(entries[2].description, "topup");
    assert_consistent(&ledger, &alice);
}

#[test]
fn refund_is_exactly_once() {
    let (ledger, alice) = funded(1_000);
    block_on(ledger.reserve(&alice, &task(1), usd(300))).unwrap();
    let r = block_on(ledger.refund(&task(1))).unwrap();
    assert_eq!(
        (r.status, r.reserved, r.actual, r.balance_after),
        (BillingStatus::Refunded, usd(300), usd(0), usd(1_000))
    );
    let finished = Err(LedgerError::AlreadyFinished { task: task(1), status: BillingStatus::Refunded });
    assert_eq!(block_on(ledger.refund(&task(1))), finished);
    assert_eq!(block_on(ledger.settle(&task(1), usd(1))), finished);
    assert_eq!(ledger.reservation_status(&task(1)), Ok(Some(BillingStatus::Refunded)));
    let newest = &block_on(ledger.entries(&alice, 1)).unwrap()[0];
    assert_eq!((newest.kind, newest.amount), (LedgerKind::Refund, usd(300)));
    assert_eq!(block_on(ledger.entries(&alice, 100)).unwrap().len(), 3);
    assert_consistent(&ledger, &alice);
}

#[test]
fn settlement_above_the_hold_may_go_negative_and_is_recorded() {
    let (ledger, alice) = funded(100);
    block_on(ledger.reserve(&alice, &task(1), usd(100))).unwrap();
    let s = block_on(ledger.settle(&task(1), usd(130))).unwrap();
    assert_eq!(s.balance_after, usd(-30));
    let newest = &block_on(ledger.entries(&alice, 1)).unwrap()[0];
    assert_eq!((newest.kind, newest.amount, newest.balance_after), (LedgerKind::Settle, usd(-30), usd(-30)));
    // Nothing more can be reserved, not even zero, while the balance is negative.
    assert!(matches!(block_on(ledger.reserve(&alice, &task(2), usd(0))), Err(LedgerError::InsufficientBalance { .. })));
    assert_consistent(&ledger, &alice);
}

#[test]
fn refusals_change_nothing() {
    let (ledger, alice) = funded(100);
    let bob = user(1);
    block_on(ledger.reserve(&alice, &task(1), usd(10))).unwrap();
    let before = block_on(ledger.entries(&alice, 100)).unwrap();
    let refusals = [
        block_on(ledger.reserve(&bob, &task(2), usd(1))).map(|_| ()),
        block_on(ledger.reserve(&alice, &task(1), usd(1))).map(|_| ()),
        block_on(ledger.reserve(&alice, &task(3), usd(-1))).map(|_| ()),
        block_on(ledger.settle(&task(9), usd(1))).map(|_| ()),
        block_on(ledger.refund(&task(9))).map(|_| ()),
        block_on(ledger.settle(&task(1), usd(-1))).map(|_| ()),
        block_on(ledger.credit(&alice, usd(0), LedgerKind::Topup, "")).map(|_| ()),
        block_on(ledger.credit(&alice, usd(-5), LedgerKind::Topup, "")).map(|_| ()),
        block_on(ledger.credit(&alice, usd(5), LedgerKind::Refund, "")).map(|_| ()),
        block_on(ledger.credit(&bob, usd(5), LedgerKind::Topup, "")).map(|_| ()),
        block_on(ledger.credit(&alice, usd(i64::MAX), LedgerKind::Adjustment, "")).map(|_| ()),
        block_on(ledger.balance(&bob)).map(|_| ()),
        block_on(ledger.entries(&bob, 1)).map(|_| ()),
    ];
    let expected = [
        Err(LedgerError::UnknownUser(bob.clone())),
        Err(LedgerError::DuplicateReservation(task(1))),
        Err(LedgerError::InvalidAmount("a reservation cannot be negative (-0.000001)".into())),
        Err(LedgerError::UnknownReservation(task(9))),
        Err(LedgerError::UnknownReservation(task(9))),
        Err(LedgerError::InvalidAmount("a charge cannot be negative (-0.000001)".into())),
        Err(LedgerError::InvalidAmount("topup of 0.000000 is not allowed".into())),
        Err(LedgerError::InvalidAmount("topup of -0.000005 is not allowed".into())),
        Err(LedgerError::InvalidAmount("refund is not a credit".into())),
        Err(LedgerError::UnknownUser(bob.clone())),
        Err(LedgerError::Overflow),
        Err(LedgerError::UnknownUser(bob.clone())),
        Err(LedgerError::UnknownUser(bob.clone())),
    ];
    assert_eq!(refusals, expected);
    assert_eq!(block_on(ledger.entries(&alice, 100)).unwrap(), before);
    assert_eq!(ledger.reservation_status(&task(1)), Ok(Some(BillingStatus::Reserved)));
    assert_consistent(&ledger, &alice);
}

#[test]
fn adjustments_and_entry_order() {
    let (ledger, alice) = funded(0);
    ledger.open_account(&alice).unwrap(); // opening again keeps the account
    let e = block_on(ledger.credit(&alice, usd(-50), LedgerKind::Adjustment, "correction")).unwrap();
    assert_eq!(
        (e.kind, e.amount, e.balance_after, e.description.as_str()),
        (LedgerKind::Adjustment, usd(-50), usd(-50), "correction")
    );
    block_on(ledger.credit(&alice, usd(80), LedgerKind::Topup, "card")).unwrap();
    block_on(ledger.credit(&alice, usd(5), LedgerKind::Adjustment, "")).unwrap();
    let amounts: Vec<i64> = block_on(ledger.entries(&alice, 2)).unwrap().iter().map(|e| e.amount.micros()).collect();
    assert_eq!(amounts, vec![5, 80]);
    assert!(block_on(ledger.entries(&alice, 0)).unwrap().is_empty());
    assert_eq!(block_on(ledger.balance(&alice)), Ok(usd(35)));
    assert_consistent(&ledger, &alice);
}

#[test]
fn ledger_works_behind_arc_dyn() {
    let (ledger, alice) = funded(10);
    let port: Arc<dyn Ledger> = Arc::new(ledger);
    block_on(port.reserve(&alice, &task(1), usd(10))).unwrap();
    block_on(port.settle(&task(1), usd(4))).unwrap();
    assert_eq!(block_on(port.balance(&alice)), Ok(usd(6)));
    assert_consistent(port.as_ref(), &alice);
}

#[test]
fn concurrent_reservations_never_overdraw() {
    const THREADS: usize = 200;
    const EACH: i64 = 1_234_567;
    let (ledger, alice) = funded(EACH * 25);
    let won = AtomicUsize::new(0);
    let refused = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for n in 0..THREADS {
            let (ledger, alice, won, refused) = (&ledger, &alice, &won, &refused);
            scope.spawn(move || match block_on(ledger.reserve(alice, &task(n), usd(EACH))) {
                Ok(r) => {
                    assert!(!r.balance_after.is_negative());
                    won.fetch_add(1, Ordering::SeqCst);
                }
                Err(LedgerError::InsufficientBalance { needed, available }) => {
                    assert!(needed == usd(EACH) && available < needed);
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                Err(other) => unreachable!("unexpected {other:?}"),
            });
        }
    });
    assert_eq!(won.load(Ordering::SeqCst), 25);
    assert_eq!(refused.load(Ordering::SeqCst), THREADS - 25);
    assert_eq!(block_on(ledger.balance(&alice)), Ok(UsdAmount::ZERO));
    assert_eq!(block_on(ledger.entries(&alice, 1_000)).unwrap().len(), 26);
    assert_consistent(&ledger, &alice);

    // Settling and refunding from many threads at once: each hold ends exactly once.
    let ended = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for n in 0..THREADS {
            for attempt in 0..2 {
                let (ledger, ended) = (&ledger, &ended);
                scope.spawn(move || {
                    let result = if (n + attempt) % 2 == 0 {
                        block_on(ledger.settle(&task(n), usd(EACH / 2)))
                    } else {
                        block_on(ledger.refund(&task(n)))
                    };
                    if result.is_ok() {
                        ended.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        }
    });
    assert_eq!(ended.load(Ordering::SeqCst), 25);
    assert_eq!(block_on(ledger.entries(&alice, 1_000)).unwrap().len(), 51);
    assert_consistent(&ledger, &alice);
}

/// One operation of a random sequence.
#[derive(Debug, Clone)]
enum Op {
    Topup { user: usize, micros: i64 },
    Adjust { user: usize, micros: i64 },
    Reserve { user: usize, task: usize, micros: i64 },
    Settle { task: usize, micros: i64 },
    Refund { task: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..4usize, -10..1_000i64).prop_map(|(user, micros)| Op::Topup { user, micros }),
        (0..4usize, -500..500i64).prop_map(|(user, micros)| Op::Adjust { user, micros }),
        (0..4usize, 0..12usize, -5..600i64).prop_map(|(user, task, micros)| Op::Reserve { user, task, micros }),
        (0..12usize, -5..900i64).prop_map(|(task, micros)| Op::Settle { task, micros }),
        (0..12usize).prop_map(|task| Op::Refund { task }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Runs a random sequence against the ledger and a plain model of the rules.
    #[test]
    fn random_sequences_keep_every_rule(ops in proptest::collection::vec(op(), 1..80)) {
        let ledger = InMemoryLedger::new();
        // User 3 never gets an account.
        for u in 0..3 {
            ledger.open_account(&user(u)).unwrap();
        }
        let mut balances: HashMap<usize, i64> = (0..3).map(|u| (u, 0)).collect();
        let mut holds: HashMap<usize, (usize, i64, BillingStatus)> = HashMap::new();
        for op in ops {
            match op {
                Op::Topup { user: u, micros } | Op::Adjust { user: u, micros } => {
                    let kind = if matches!(op, Op::Topup { .. }) { LedgerKind::Topup } else { LedgerKind::Adjustment };
                    let result = block_on(ledger.credit(&user(u), usd(micros), kind, "x"));
                    let allowed = balances.contains_key(&u) && if kind == LedgerKind::Topup { micros > 0 } else { micros != 0 };
                    prop_assert_eq!(result.is_ok(), allowed, "{:?}", op);
                    if allowed {
                        *balances.get_mut(&u).unwrap() += micros;
                    }
                }
                Op::Reserve { user: u, task: t, micros } => {
                    let result = block_on(ledger.reserve(&user(u), &task(t), usd(micros)));
                    let allowed = micros >= 0
                        && !holds.contains_key(&t)
                        && balances.get(&u).is_some_and(|&b| b >= micros);
                    prop_assert_eq!(result.is_ok(), allowed, "{:?} → {:?}", op, result);
                    if let Err(LedgerError::InsufficientBalance { needed, available }) = result {
                        prop_assert!(available < needed);
                    }
                    if allowed {
                        *balances.get_mut(&u).unwrap() -= micros;
                        holds.insert(t, (u, micros, BillingStatus::Reserved));
                    }
                }
                Op::Settle { task: t, micros } => {
                    let result = block_on(ledger.settle(&task(t), usd(micros)));
                    let open = holds.get(&t).is_some_and(|h| h.2 == BillingStatus::Reserved);
                    prop_assert_eq!(result.is_ok(), open && micros >= 0, "{:?} → {:?}", op, result);
                    if let Some(h) = holds.get(&t).filter(|h| h.2 != BillingStatus::Reserved) {
                        prop_assert_eq!(result, Err(LedgerError::AlreadyFinished { task: task(t), status: h.2 }));
                    } else if let Ok(s) = result {
                        let h = holds.get_mut(&t).unwrap();
                        h.2 = BillingStatus::Settled;
                        *balances.get_mut(&h.0).unwrap() += h.1 - micros;
                        prop_assert_eq!(s.balance_after, usd(balances[&h.0]));
                    }
                }
                Op::Refund { task: t } => {
                    let result = block_on(ledger.refund(&task(t)));
                    let open = holds.get(&t).is_some_and(|h| h.2 == BillingStatus::Reserved);
                    prop_assert_eq!(result.is_ok(), open, "{:?} → {:?}", op, result);
                    if open {
                        let h = holds.get_mut(&t).unwrap();
                        h.2 = BillingStatus::Refunded;
                        *balances.get_mut(&h.0).unwrap() += h.1;
                    }
                }
            }
        }
        for u in 0..3 {
            prop_assert_eq!(block_on(ledger.balance(&user(u))), Ok(usd(balances[&u])));
            assert_consistent(&ledger, &user(u));
        }
        for (t, h) in holds {
            prop_assert_eq!(ledger.reservation_status(&task(t)), Ok(Some(h.2)));
        }
    }
}
