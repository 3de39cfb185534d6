//! Two replicas (two stores, two writer pools, one PostgreSQL database) hammer three users with
//! every kind of operation at once: calls opened and closed in one round trip each (sometimes
//! racing a task change that must lose), bare holds ended by the reading path from either
//! replica, top-ups, negative adjustments, holds far above any balance. Then every money rule
//! is checked against the stored rows and against what each caller was answered. PostgreSQL only
//! (`TEST_DATABASE_URL`): SQLite has one writer per file.

#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use billing::{CallBook, Ledger, LedgerError};
use common::{TestDb, call_task, new_task, usd, user_with};
use domain::ports::TaskStore;
use domain::{LedgerKind, TaskEvent, TaskStatus, TaskTransition, UserId};
use sea_orm::sqlx::{self, Row};
use store::Store;

/// What the callers were answered.
#[derive(Default)]
struct Seen {
    /// (task, entry kind, balance after) as answered.
    task_answers: Vec<(String, &'static str, i64)>,
    /// (entry id, balance after) as answered to credits.
    credit_answers: Vec<(i64, i64)>,
}

/// A small deterministic generator (xorshift), so that a failure repeats.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_mixing_every_operation_keep_every_money_rule() {
    let Some(db) = TestDb::postgres_only("mixed", "two_replicas_mixing_every_operation_keep_every_money_rule").await
    else {
        return;
    };
    let a = db.open().await;
    let b = Store::connect(&db.url).await.expect("second replica");
    let mut users = Vec::new();
    for _ in 0..3 {
        users.push(user_with(&a, usd(3_000)).await);
    }
    let stores = Arc::new([a.clone(), b.clone()]);
    let users = Arc::new(users);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (workers, rounds): (u64, u64) = (48, 80);
    let mut handles = Vec::new();
    for w in 0..workers {
        let (stores, users, seen) = (Arc::clone(&stores), Arc::clone(&users), Arc::clone(&seen));
        handles.push(tokio::spawn(async move {
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (w + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
            for _ in 0..rounds {
                let user: UserId = users[rng.below(users.len() as u64) as usize].clone();
                let s = &stores[rng.below(2) as usize];
                let s2 = &stores[rng.below(2) as usize];
                match rng.below(6) {
                    0 | 1 => {
                        // a call: open (assumed), close (assumed) or race a transition (reading)
                        let id = new_task();
                        let hold = 100 + rng.below(900) as i64;
                        match s.open_call(call_task(&user, &id), usd(hold)).await {
                            Ok(r) => {
                                seen.lock().unwrap().task_answers.push((
                                    id.0.clone(),
                                    "reserve",
                                    r.balance_after.micros(),
                                ));
                                let charge = match rng.below(3) {
                                    0 => None,
                                    1 => Some(usd(rng.below(hold as u64) as i64)),
                                    _ => Some(usd(hold + rng.below(500) as i64)),
                                };
                                let ev = if charge.is_some() { TaskEvent::Succeeded } else { TaskEvent::Failed };
                                let change = TaskTransition::new(TaskStatus::Processing, ev);
                                let racer = async {
                                    if rng.below(3) == 0 {
                                        let t = TaskTransition::new(TaskStatus::Processing, TaskEvent::Failed);
                                        Some(s2.transition_task(&id, t).await)
                                    } else {
                                        None
                                    }
                                };
                                let held = billing::Expect::of(&user, usd(hold));
                                let (closed, raced) = tokio::join!(s2.close_task(&id, &held, charge, change), racer);
                                match closed {
                                    Ok(st) => seen.lock().unwrap().task_answers.push((
                                        id.0.clone(),
                                        if charge.is_some() { "settle" } else { "refund" },
                                        st.balance_after.micros(),
                                    )),
                                    Err(e) => panic!("close {id}: {e} (raced: {raced:?})"),
                                }
                                if let Some(Ok(st)) = raced {
                                    panic!("{id}: terminal move {st:?} succeeded while the hold was open");
                                }
                            }
                            Err(LedgerError::InsufficientBalance { .. }) => {}
                            Err(e) => panic!("open {id}: {e}"),
                        }
                    }
                    2 => {
                        // a bare reserve (assumed), then settle/refund (reading) from either replica
                        let id = new_task();
                        let hold = 100 + rng.below(900) as i64;
                        match s.reserve(&user, &id, usd(hold)).await {
                            Ok(r) => {
                                seen.lock().unwrap().task_answers.push((
                                    id.0.clone(),
                                    "reserve",
                                    r.balance_after.micros(),
                                ));
                                let (k, ended) = if rng.below(2) == 0 {
                                    ("refund", s2.refund(&id).await)
                                } else {
                                    ("settle", s2.settle(&id, usd(rng.below(2 * hold as u64) as i64)).await)
                                };
                                let st = ended.unwrap_or_else(|e| panic!("end {id}: {e}"));
                                seen.lock().unwrap().task_answers.push((id.0.clone(), k, st.balance_after.micros()));
                            }
                            Err(LedgerError::InsufficientBalance { .. }) => {}
                            Err(e) => panic!("reserve {id}: {e}"),
                        }
                    }
                    3 => {
                        let amount = 50 + rng.below(500) as i64;
                        let e = s.credit(&user, usd(amount), LedgerKind::Topup, "").await.expect("topup");
                        seen.lock().unwrap().credit_answers.push((e.id, e.balance_after.micros()));
                    }
                    4 => {
                        let amount = -(10 + rng.below(200) as i64);
                        let e = s.credit(&user, usd(amount), LedgerKind::Adjustment, "").await.expect("adjust");
                        seen.lock().unwrap().credit_answers.push((e.id, e.balance_after.micros()));
                    }
                    _ => {
                        // a too-large hold: refused, must move nothing
                        let id = new_task();
                        match s.reserve(&user, &id, usd(1_000_000_000)).await {
                            Err(LedgerError::InsufficientBalance { .. }) => {}
                            other => panic!("huge hold: {other:?}"),
                        }
                    }
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("worker");
    }

    // Checks on what is stored.
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(&db.url).await.expect("pool");
    let mut problems = Vec::new();
    for user in users.iter() {
        common::balance_is_ledger_sum(&a, user).await;
        let rows = sqlx::query(
            "SELECT id, kind, amount_micros, balance_after_micros, COALESCE(task_id, '') FROM ledger_entries \
             WHERE user_id = $1 ORDER BY id",
        )
        .bind(user.as_str())
        .fetch_all(&pool)
        .await
        .expect("entries");
        let mut running = 0i64;
        for r in &rows {
            let (id, kind, amount, after): (i64, String, i64, i64) = (r.get(0), r.get(1), r.get(2), r.get(3));
            running += amount;
            if running != after {
                problems.push(format!("{user}: entry {id} ({kind} {amount}) says {after}, running {running}"));
            }
            if kind == "reserve" && after < 0 {
                problems.push(format!("{user}: overdraft at entry {id}: {after}"));
            }
        }
        let bal: i64 = sqlx::query("SELECT balance_micros FROM users WHERE id = $1")
            .bind(user.as_str())
            .fetch_one(&pool)
            .await
            .expect("bal")
            .get(0);
        if bal != running {
            problems.push(format!("{user}: balance {bal} vs ledger {running}"));
        }
        let spent: (i64, i64) = {
            let r = sqlx::query(
                "SELECT u.spent_micros, COALESCE((SELECT sum(actual_micros)::int8 FROM reservations r \
                 WHERE r.user_id = u.id AND r.status = 'settled'), 0) FROM users u WHERE u.id = $1",
            )
            .bind(user.as_str())
            .fetch_one(&pool)
            .await
            .expect("spent");
            (r.get(0), r.get(1))
        };
        if spent.0 != spent.1 {
            problems.push(format!("{user}: spent {} vs settled {}", spent.0, spent.1));
        }
    }
    // Reservations vs their entries.
    let rows = sqlx::query(
        "SELECT r.task_id, r.status, r.balance_after_micros, \
           (SELECT e.balance_after_micros FROM ledger_entries e WHERE e.task_id = r.task_id ORDER BY e.id DESC LIMIT 1), \
           (SELECT count(*) FROM ledger_entries e WHERE e.task_id = r.task_id), \
           (SELECT t.status FROM tasks t WHERE t.id = r.task_id) \
         FROM reservations r",
    )
    .fetch_all(&pool)
    .await
    .expect("reservations");
    for r in &rows {
        let (task, status, after, last, n, tstatus): (String, String, i64, Option<i64>, i64, Option<String>) =
            (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5));
        if Some(after) != last {
            problems.push(format!("reservation {task} ({status}) says {after}, its last entry {last:?}"));
        }
        let want = if status == "reserved" { 1 } else { 2 };
        if n != want {
            problems.push(format!("reservation {task} ({status}) has {n} entries"));
        }
        if let Some(ts) = tstatus {
            let terminal = matches!(ts.as_str(), "succeeded" | "failed" | "cancelled");
            if terminal != (status != "reserved") {
                problems.push(format!("task {task} is {ts} while its reservation is {status}"));
            }
        }
    }
    // Answers vs what was stored.
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    for (task, kind, answered) in &seen.task_answers {
        let stored: Option<i64> =
            sqlx::query("SELECT balance_after_micros FROM ledger_entries WHERE task_id = $1 AND kind = $2")
                .bind(task)
                .bind(*kind)
                .fetch_optional(&pool)
                .await
                .expect("answer")
                .map(|r| r.get(0));
        if stored != Some(*answered) {
            problems.push(format!("{task} {kind}: answered {answered}, stored {stored:?}"));
        }
    }
    for (id, answered) in &seen.credit_answers {
        let stored: Option<i64> = sqlx::query("SELECT balance_after_micros FROM ledger_entries WHERE id = $1")
            .bind(*id)
            .fetch_optional(&pool)
            .await
            .expect("answer")
            .map(|r| r.get(0));
        if stored != Some(*answered) {
            problems.push(format!("credit {id}: answered {answered}, stored {stored:?}"));
        }
    }
    let total: i64 = sqlx::query("SELECT count(*) FROM ledger_entries").fetch_one(&pool).await.expect("n").get(0);
    eprintln!(
        "{total} entries, {} task answers, {} credit answers, {} problems",
        seen.task_answers.len(),
        seen.credit_answers.len(),
        problems.len()
    );
    for p in problems.iter().take(30) {
        eprintln!("PROBLEM {p}");
    }
    assert!(problems.is_empty(), "{} problems", problems.len());
    db.cleanup().await;
}
