//! The batched writer across OS processes: 200 holds racing from two processes on one database
//! (two writers, two pools, as two replicas would), then the two processes racing to end the 25
//! holds that won (one settles every one, the other refunds every one: each ends exactly once),
//! and a process killed with SIGKILL in the
//! middle of a stream of batches, after which every balance equals its ledger and every
//! reservation is open (to be swept) or ended exactly once, together with its task.
//!
//! The test binary re-executes itself as the child (`GW_STORE_CHILD` names the role). SQLite
//! always; PostgreSQL (a private schema) when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic, clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use billing::{CallBook, Ledger, LedgerError};
use common::{TestDb, new_task, usd, user_with};
use domain::ports::{TaskOutcome, TaskStore};
use domain::{BillingStatus, LedgerKind, TaskId, TaskStatus, UserId};
use store::Store;

const EACH: i64 = 1_234_567;

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Starts this test binary again as a child running only `test`, in `role`.
fn spawn_child(test: &str, role: &str, env: &[(&str, String)]) -> Child {
    let exe = std::env::current_exe().expect("test binary");
    let mut cmd = Command::new(exe);
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("GW_STORE_CHILD", role)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn child")
}

/// The child's `CHILD …` lines, as they come, on a channel.
fn child_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            // libtest may print its own words before ours on the same line.
            if let Some((_, rest)) = line.split_once("CHILD ") {
                let _ = tx.send(rest.to_owned());
            }
        }
    });
    rx
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} not set"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_race_two_hundred_holds() {
    const TEST: &str = "two_processes_race_two_hundred_holds";
    match std::env::var("GW_STORE_CHILD").as_deref() {
        Ok("race") => return race_child().await,
        Ok("end") => return end_child().await,
        _ => {}
    }
    for db in TestDb::all("procs").await {
        let store = db.open().await;
        let name = common::name(&store);
        let alice = user_with(&store, usd(EACH * 25)).await;
        let go = (now_ms() + 1_500).to_string();
        let vars = [("GW_STORE_URL", db.url.clone()), ("GW_STORE_USER", alice.0.clone()), ("GW_STORE_GO", go)];
        let mut children: Vec<Child> = (0..2).map(|_| spawn_child(TEST, "race", &vars)).collect();
        let (mut won, mut refused) = (Vec::new(), 0);
        for child in &mut children {
            let lines = child_lines(child);
            let line = lines.recv_timeout(Duration::from_secs(120)).expect("child result");
            let (r, tasks) = line.split_once(' ').expect("count and tasks");
            refused += r.parse::<u32>().expect("refused");
            won.extend(tasks.split(',').filter(|t| !t.is_empty()).map(|t| t.to_owned()));
            assert!(child.wait().expect("wait").success());
        }
        assert_eq!((won.len(), refused), (25, 175), "{name}");
        assert_eq!(common::balance_is_ledger_sum(&store, &alice).await, usd(0));
        assert_eq!(store.entries(&alice, 1_000).await.map(|e| e.len()), Ok(26));

        // Phase 2: the same 25 holds, ended from both processes at once.
        let go = (now_ms() + 1_500).to_string();
        let tasks = won.join(",");
        let mut enders: Vec<Child> = ["settle", "refund"]
            .into_iter()
            .map(|how| {
                let vars = [
                    ("GW_STORE_URL", db.url.clone()),
                    ("GW_STORE_TASKS", tasks.clone()),
                    ("GW_STORE_GO", go.clone()),
                    ("GW_STORE_HOW", how.to_owned()),
                ];
                spawn_child(TEST, "end", &vars)
            })
            .collect();
        let mut ended = HashMap::new();
        for (child, how) in enders.iter_mut().zip(["settle", "refund"]) {
            let lines = child_lines(child);
            let line = lines.recv_timeout(Duration::from_secs(120)).expect("child result");
            for task in line.split(',').filter(|t| !t.is_empty()) {
                assert!(ended.insert(task.to_owned(), how).is_none(), "{name}: {task} ended twice");
            }
            assert!(child.wait().expect("wait").success());
        }
        assert_eq!(ended.len(), 25, "{name}: every hold ended once");
        let settled = ended.values().filter(|h| **h == "settle").count() as i64;
        let balance = common::balance_is_ledger_sum(&store, &alice).await;
        assert_eq!(balance, usd(EACH * 25 - SETTLE_AT * settled), "{name}: {settled} settled");
        for task in &won {
            let status = store.reservation_status(&TaskId(task.clone())).await.expect("status");
            let want = if ended[task] == "settle" { BillingStatus::Settled } else { BillingStatus::Refunded };
            assert_eq!(status, Some(want), "{name}: {task}");
        }
        assert_eq!(store.entries(&alice, 1_000).await.map(|e| e.len()), Ok(51), "{name}: 25 holds + 25 ends + 1");
        eprintln!("{name}: 25 of 200 holds won across two processes; {settled} settled, {} refunded", 25 - settled);
        db.cleanup().await;
    }
}

/// What the settling process charges for each hold.
const SETTLE_AT: i64 = 1_000_000;

/// 100 holds at once from this process, starting at the agreed time; prints `refused task,task,…`
/// (the tasks whose holds won).
async fn race_child() {
    let store = Store::connect(&env("GW_STORE_URL")).await.expect("open");
    let user = UserId(env("GW_STORE_USER"));
    let go: u64 = env("GW_STORE_GO").parse().expect("go");
    tokio::time::sleep(Duration::from_millis(go.saturating_sub(now_ms()))).await;
    let handles: Vec<_> = (0..100)
        .map(|_| {
            let (store, user) = (store.clone(), user.clone());
            tokio::spawn(async move {
                let task = new_task();
                store.reserve(&user, &task, usd(EACH)).await.map(|_| task)
            })
        })
        .collect();
    let (mut won, mut refused) = (Vec::new(), 0);
    for h in handles {
        match h.await.expect("join") {
            Ok(task) => won.push(task.0),
            Err(LedgerError::InsufficientBalance { .. }) => refused += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    println!("CHILD {refused} {}", won.join(","));
}

/// Ends every listed hold at once (`GW_STORE_HOW`: settle or refund), starting at the agreed
/// time; prints the tasks this process ended. Losing a race is `AlreadyFinished`, nothing else.
async fn end_child() {
    let store = Store::connect(&env("GW_STORE_URL")).await.expect("open");
    let settle = env("GW_STORE_HOW") == "settle";
    let go: u64 = env("GW_STORE_GO").parse().expect("go");
    let tasks: Vec<TaskId> = env("GW_STORE_TASKS").split(',').map(|t| TaskId(t.to_owned())).collect();
    tokio::time::sleep(Duration::from_millis(go.saturating_sub(now_ms()))).await;
    let handles: Vec<_> = tasks
        .into_iter()
        .map(|task| {
            let store = store.clone();
            tokio::spawn(async move {
                let ended = if settle { store.settle(&task, usd(SETTLE_AT)).await } else { store.refund(&task).await };
                (task, ended)
            })
        })
        .collect();
    let mut mine = Vec::new();
    for h in handles {
        match h.await.expect("join") {
            (task, Ok(_)) => mine.push(task.0),
            (_, Err(LedgerError::AlreadyFinished { .. })) => {}
            (task, Err(e)) => panic!("{task}: unexpected {e}"),
        }
    }
    println!("CHILD {}", mine.join(","));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_mid_stream_leaves_no_half_batch() {
    if std::env::var("GW_STORE_CHILD").as_deref() == Ok("stream") {
        return stream_child().await;
    }
    for db in TestDb::all("sigkill").await {
        let store = db.open().await;
        let mut users = Vec::new();
        for _ in 0..4 {
            users.push(user_with(&store, usd(1_000_000_000)).await);
        }
        let names = users.iter().map(|u| u.0.clone()).collect::<Vec<_>>().join(",");
        for round in 0..2 {
            let vars = [("GW_STORE_URL", db.url.clone()), ("GW_STORE_USERS", names.clone())];
            let mut child = spawn_child("sigkill_mid_stream_leaves_no_half_batch", "stream", &vars);
            let lines = child_lines(&mut child);
            let deadline = Instant::now() + Duration::from_secs(60);
            // Kill once the stream is well under way (round 1 a bit later than round 0).
            let target = 300 + 200 * round;
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                let line = lines.recv_timeout(left).unwrap_or_else(|_| panic!("child made no progress"));
                if line.parse::<u64>().is_ok_and(|n| n >= target) {
                    break;
                }
            }
            child.kill().expect("SIGKILL");
            let status = child.wait().expect("wait");
            assert!(!status.success(), "the child was killed");
            let reopened = db.open().await;
            let open = check_after_crash(&reopened, &users).await;
            eprintln!(
                "{}: round {round}: killed mid-stream; {} reservations left open",
                common::name(&reopened),
                open.len()
            );
        }
        // The sweep: every open hold is refunded and its task ended; the books still add up.
        let reopened = db.open().await;
        let open = check_after_crash(&reopened, &users).await;
        for task in open {
            reopened.refund(&task).await.expect("sweep refund");
            if reopened.task_status(&task).await.expect("status").is_some() {
                let failed = TaskOutcome {
                    status: TaskStatus::Failed,
                    usage_json: None,
                    error_code: Some("interrupted".into()),
                    error_message: None,
                    via: None,
                    served_by: None,
                };
                reopened.finish_task(&task, failed).await.expect("sweep finish");
            }
        }
        assert!(check_after_crash(&reopened, &users).await.is_empty());
        db.cleanup().await;
    }
}

/// Every balance equals its ledger; every task with a hold has exactly one hold entry and at most
/// one end entry matching its reservation; a call's task is terminal exactly when its hold ended.
/// Returns the reservations still open.
async fn check_after_crash(store: &Store, users: &[UserId]) -> Vec<TaskId> {
    let mut open = Vec::new();
    for user in users {
        common::balance_is_ledger_sum(store, user).await;
        let mut per_task: HashMap<TaskId, (u32, Vec<LedgerKind>)> = HashMap::new();
        for e in store.entries(user, u64::MAX >> 1).await.expect("entries") {
            let Some(task) = e.task_id else { continue };
            let slot = per_task.entry(task).or_default();
            match e.kind {
                LedgerKind::Reserve => slot.0 += 1,
                kind => slot.1.push(kind),
            }
        }
        for (task, (holds, ends)) in per_task {
            let what = format!("{}: {task}", common::name(store));
            assert_eq!(holds, 1, "{what}: one hold entry");
            let status = store.reservation_status(&task).await.expect("reservation").expect("reservation row");
            let expected = match ends.as_slice() {
                [] => BillingStatus::Reserved,
                [LedgerKind::Settle] => BillingStatus::Settled,
                [LedgerKind::Refund] => BillingStatus::Refunded,
                other => panic!("{what}: end entries {other:?}"),
            };
            assert_eq!(status, expected, "{what}");
            if let Some(state) = store.task_status(&task).await.expect("task") {
                assert_eq!(state.is_terminal(), status != BillingStatus::Reserved, "{what}: task {state}");
            }
            if status == BillingStatus::Reserved {
                open.push(task);
            }
        }
    }
    open
}

/// Calls and bare holds from 16 workers over the given users until killed (or 20 s); prints the
/// number of finished operations every 50.
async fn stream_child() {
    let store = Store::connect(&env("GW_STORE_URL")).await.expect("open");
    let users: Vec<UserId> = env("GW_STORE_USERS").split(',').map(|u| UserId(u.to_owned())).collect();
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + Duration::from_secs(20);
    let mut workers = Vec::new();
    for w in 0..16usize {
        let (store, user, done) = (store.clone(), users[w % users.len()].clone(), Arc::clone(&done));
        workers.push(tokio::spawn(async move {
            for n in 0..100_000usize {
                if Instant::now() > until {
                    break;
                }
                one_call(&store, &user, n).await;
                let finished = done.fetch_add(1, Ordering::SeqCst) + 1;
                if finished % 50 == 0 {
                    println!("CHILD {finished}");
                }
            }
        }));
    }
    for w in workers {
        let _ = w.await;
    }
}

/// One call: a hold with its task, then its close; or a bare hold and its settle or refund.
async fn one_call(store: &Store, user: &UserId, n: usize) {
    let task = new_task();
    let hold = usd(1_000 + (n as i64 % 7) * 100);
    if n.is_multiple_of(3) {
        store.reserve(user, &task, hold).await.expect("reserve");
        let ended = if n.is_multiple_of(2) { store.settle(&task, usd(700)).await } else { store.refund(&task).await };
        ended.expect("end");
        return;
    }
    let record = common::call_task(user, &task);
    store.open_call(record, hold).await.expect("open");
    let outcome = TaskOutcome {
        status: TaskStatus::Succeeded,
        usage_json: None,
        error_code: None,
        error_message: None,
        via: None,
        served_by: None,
    };
    store.close_call(&task, &billing::Expect::of(user, hold), Some(usd(900)), outcome).await.expect("close");
}
