//! Video tasks across real `gateway serve` processes against an upstream simulator that runs in the
//! test (so it outlives the gateways and counts what reaches it): a server killed with SIGKILL while
//! 50 tasks are in flight and started again, and two replicas on one database sharing 100 tasks.
//! The books are then read straight from the database: every task ended, held once and settled or
//! refunded once, and the balance equals the ledger's sum.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{COMMAND_TIMEOUT, Running, Sandbox, http_get, http_request, sandbox};
use domain::{LedgerKind, UserId};
use serde_json::{Value, json};

/// How long the tasks may take to end after the (last) start.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// The simulator, with the real clock: a task is `queued` 1 s, then `running` 2 s.
fn simulator(rt: &tokio::runtime::Runtime) -> (SocketAddr, sim::SimHandle) {
    rt.block_on(sim::spawn_with(sim::SimOptions::default())).expect("start the simulator")
}

/// A user with `balance` and a key for creating and reading tasks: (user id, key).
fn account(sandbox: &Sandbox, balance: &str) -> (String, String) {
    common::account(sandbox, balance, "video:create,task:read,task:write")
}

/// `gateway serve` against the simulator, polling every 100 ms with 2 s leases.
fn serve(sandbox: &Sandbox, sim: SocketAddr, name: &str) -> (Running, String) {
    common::serve_against(sandbox, sim, name, &common::video_env(sim))
}

/// Creates task number `i` on the server at `addr`; its id.
fn create(addr: &str, key: &str, i: usize) -> String {
    let body = json!({"model": "videogen-2-0-mini", "prompt": format!("fox number {i}"), "resolution": "480p"});
    let (status, task) = http_request(addr, "POST", "/api/v1/tasks", Some(key), Some(&body));
    assert_eq!(status, 202, "create {i}: {task}");
    task["id"].as_str().expect("task id").to_owned()
}

/// Every task of the key's user, by id.
fn tasks(addr: &str, key: &str) -> HashMap<String, Value> {
    let (status, page) = http_get(addr, "/api/v1/tasks?page_size=100", Some(key));
    assert_eq!(status, 200, "{page}");
    let data = page["data"].as_array().cloned().unwrap_or_default();
    data.into_iter().map(|t| (t["id"].as_str().unwrap_or_default().to_owned(), t)).collect()
}

/// Waits (bounded) until every one of `ids` is terminal; the tasks.
fn until_all_end(addr: &str, key: &str, ids: &[String]) -> HashMap<String, Value> {
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let all = tasks(addr, key);
        let open: Vec<&String> = ids
            .iter()
            .filter(|id| {
                all.get(*id).is_none_or(|t| {
                    ["submitting", "queued", "processing"].contains(&t["status"].as_str().unwrap_or(""))
                })
            })
            .collect();
        if open.is_empty() {
            return all;
        }
        assert!(Instant::now() < deadline, "{} tasks still open after {SETTLE_LIMIT:?}: {open:?}", open.len());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Reads the books from the database: each task held once and settled or refunded once, never left
/// reserved, and the balance equal to the ledger's sum.
fn assert_books(
    rt: &tokio::runtime::Runtime,
    sandbox: &Sandbox,
    user: &str,
    tasks: &HashMap<String, Value>,
    ids: &[String],
) {
    let (_, entries) = common::books(rt, sandbox, user);
    for id in ids {
        let task = &tasks[id];
        let kinds: Vec<LedgerKind> =
            entries.iter().filter(|e| e.task_id.as_ref().is_some_and(|t| t.0 == *id)).map(|e| e.kind).collect();
        assert_eq!(kinds.len(), 2, "task {id}: one hold and one close, got {kinds:?}: {task}");
        let billing = task["billing"]["status"].as_str().unwrap_or_default();
        match task["status"].as_str().unwrap_or_default() {
            "succeeded" => assert_eq!(billing, "settled", "{task}"),
            _ => assert_eq!(billing, "refunded", "{task}"),
        }
    }
}

#[test]
fn a_server_killed_with_50_tasks_in_flight_finishes_them_after_a_restart() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (sim_addr, sim) = simulator(&rt);
    let (user, key) = account(&sandbox, "100");
    let (mut first, addr) = serve(&sandbox, sim_addr, "serve-1");
    let ids: Vec<String> = (0..50).map(|i| create(&addr, &key, i)).collect();
    // Kill it mid-way: some tasks submitted, most still in flight.
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    while sim.requests(sim::VIDEO_TASKS_PATH) < 10 {
        assert!(Instant::now() < deadline, "{label}: the worker submitted nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    first.0.kill().expect("SIGKILL the server");
    first.0.wait().expect("reap the server");
    let open_at_kill = tasks_open(&sandbox, &rt, &user);
    assert!(open_at_kill > 0, "{label}: tasks were in flight when the server died");

    let (_second, addr) = serve(&sandbox, sim_addr, "serve-2");
    let all = until_all_end(&addr, &key, &ids);
    assert_books(&rt, &sandbox, &user, &all, &ids);
    let succeeded = ids.iter().filter(|id| all[*id]["status"] == "succeeded").count();
    assert_eq!(succeeded, 50, "{label}: every task succeeded after the restart");
}

/// Tasks of `user` not terminal, read from the database.
fn tasks_open(sandbox: &Sandbox, rt: &tokio::runtime::Runtime, user: &str) -> usize {
    rt.block_on(async {
        let store = store::Store::open(&sandbox.database_url()).await.expect("open the store");
        let (user_active, _) =
            domain::VideoStore::active_video_tasks(&store, &UserId(user.to_owned()), "videogen-2-0-mini")
                .await
                .expect("active tasks");
        store.close().await.expect("close the store");
        usize::try_from(user_active).unwrap_or(usize::MAX)
    })
}

#[test]
fn two_replicas_on_one_database_submit_and_settle_each_task_once() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (sim_addr, sim) = simulator(&rt);
    let (user, key) = account(&sandbox, "100");
    let (_a, addr_a) = serve(&sandbox, sim_addr, "replica-a");
    let (_b, addr_b) = serve(&sandbox, sim_addr, "replica-b");
    let ids: Vec<String> = (0..100).map(|i| create(if i % 2 == 0 { &addr_a } else { &addr_b }, &key, i)).collect();
    let all = until_all_end(&addr_b, &key, &ids);
    assert_eq!(sim.requests(sim::VIDEO_TASKS_PATH), 100, "{label}: each task submitted upstream once");
    assert_books(&rt, &sandbox, &user, &all, &ids);
    assert!(ids.iter().all(|id| all[id]["status"] == "succeeded"), "{label}: every task succeeded");
}
