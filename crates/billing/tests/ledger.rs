//! The in-memory ledger against the port's rules: the shared conformance suite (with races on OS
//! threads), and random operation sequences checked against a plain model of the rules.

#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use billing::conformance::{self, RaceFuture, Subject};
use billing::{CallBook, InMemoryLedger, Ledger, LedgerError};
use common::block_on;
use domain::{BillingStatus, Clock, LedgerKind, TaskId, TaskStatus, Timestamp, UsdAmount, UserId};
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

/// The in-memory ledger as a conformance subject: races run on OS threads.
struct Memory {
    ledger: Arc<InMemoryLedger>,
    next: AtomicUsize,
}

impl Memory {
    fn new() -> Memory {
        Memory { ledger: Arc::new(InMemoryLedger::with_clock(Arc::new(FixedClock))), next: AtomicUsize::new(0) }
    }
}

#[async_trait::async_trait]
impl Subject for Memory {
    fn ledger(&self) -> Arc<dyn Ledger> {
        self.ledger.clone()
    }

    fn calls(&self) -> Arc<dyn CallBook> {
        self.ledger.clone()
    }

    async fn new_user(&self) -> Result<UserId, String> {
        let u = user(1_000 + self.next.fetch_add(1, Ordering::SeqCst));
        self.ledger.open_account(&u).map_err(|e| e.to_string())?;
        Ok(u)
    }

    async fn reservation(&self, task: &TaskId) -> Result<Option<BillingStatus>, String> {
        self.ledger.reservation_status(task).map_err(|e| e.to_string())
    }

    async fn task_status(&self, task: &TaskId) -> Result<Option<TaskStatus>, String> {
        self.ledger.task_status(task).map_err(|e| e.to_string())
    }

    async fn race<T: Send + 'static>(&self, futures: Vec<RaceFuture<T>>) -> Vec<T> {
        let handles: Vec<_> = futures.into_iter().map(|f| std::thread::spawn(move || block_on(f))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }
}

fn conform<F: std::future::Future<Output = Result<T, String>>, T>(scenario: impl FnOnce(&'static Memory) -> F) {
    let subject: &'static Memory = Box::leak(Box::new(Memory::new()));
    if let Err(e) = block_on(scenario(subject)) {
        panic!("{e}");
    }
}

#[test]
fn conformance_holds() {
    conform(conformance::holds);
}

#[test]
fn conformance_ends_and_notes() {
    conform(conformance::ends_and_notes);
}

#[test]
fn conformance_credits() {
    conform(conformance::credits);
}

#[test]
fn conformance_two_hundred_holds_race() {
    conform(conformance::two_hundred_holds_race);
}

#[test]
fn conformance_racing_ends() {
    conform(conformance::racing_ends);
}

#[test]
fn conformance_calls() {
    conform(conformance::calls);
}

#[test]
fn entries_carry_the_clock_and_the_task() {
    let (ledger, alice) = funded(1_000);
    block_on(ledger.reserve(&alice, &task(1), usd(300))).unwrap();
    block_on(ledger.settle(&task(1), usd(120))).unwrap();
    let entries = block_on(ledger.entries(&alice, 10)).unwrap();
    assert!(entries.iter().all(|e| e.created_at == FixedClock.now()));
    assert_eq!(entries[0].task_id, Some(task(1)));
    assert_eq!(block_on(ledger.entries(&alice, 1)).unwrap().len(), 1);
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
