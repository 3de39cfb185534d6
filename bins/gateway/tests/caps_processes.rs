//! Concurrency caps across two real `gateway serve` processes on one database (PostgreSQL when
//! `TEST_DATABASE_URL` is set, else one SQLite file), with the upstream simulator in the test counting
//! how many calls reach it at once: a model capped at 5 never has more than 5 calls at the upstream
//! whatever replica they enter by, the others wait or get 429 with `Retry-After`, every answered call
//! is billed once; and the slots of a replica killed with SIGKILL come back within the lease time.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{COMMAND_TIMEOUT, Running, Sandbox, sandbox};
use serde_json::{Value, json};

const MODEL: &str = "LangA-V4-flash";
/// The lease time the servers run with.
const LEASE_MS: u64 = 2_000;

/// A user with a chat key: (user id, key).
fn account(sandbox: &Sandbox) -> (String, String) {
    common::account(sandbox, "100", "language:create,task:read")
}

/// `gateway serve` against the simulator, with short leases and `queue_wait_ms`.
fn serve(sandbox: &Sandbox, sim: SocketAddr, name: &str, queue_wait_ms: u64) -> (Running, String) {
    let env = [("GATEWAY_CAP_LEASE", format!("{LEASE_MS}ms")), ("GATEWAY_QUEUE_WAIT", format!("{queue_wait_ms}ms"))];
    common::serve_against(sandbox, sim, name, &env)
}

/// One chat call whose upstream answer takes `latency_ms`: status, `Retry-After`, body.
fn chat(addr: &str, key: &str, latency_ms: u64) -> (u16, Option<u64>, Value) {
    let body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "slow one"}],
        "max_tokens": 8,
        "sim_latency_ms": latency_ms,
    })
    .to_string();
    let headers = [("content-type", "application/json")];
    let path = "/api/v1/chat/completions";
    let reply =
        common::request(addr, testkit::http::Method::POST, path, Some(key), &headers, body.as_bytes(), COMMAND_TIMEOUT);
    let retry_after = reply.header("retry-after").and_then(|v| v.trim().parse().ok());
    (reply.status, retry_after, reply.json)
}

/// The books of `user` read from the database: balance = Σ ledger, no call left reserved; the
/// number of settled chat tasks.
fn settled_calls(rt: &tokio::runtime::Runtime, sandbox: &Sandbox, user: &str) -> usize {
    let (tasks, _) = common::books(rt, sandbox, user);
    let mut settled = 0;
    for task in &tasks {
        assert_ne!(task.billing.status, domain::BillingStatus::Reserved, "no call left reserved: {task:?}");
        if task.billing.status == domain::BillingStatus::Settled {
            settled += 1;
        }
    }
    settled
}

#[test]
fn a_model_cap_of_5_holds_across_two_replicas() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (sim_addr, sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (user, key) = account(&sandbox);
    sandbox.run(&["admin", "model", "set", "--model", MODEL, "--concurrency-limit", "5"]).json();
    let (_a, addr_a) = serve(&sandbox, sim_addr, "serve-a", 2_500);
    let (_b, addr_b) = serve(&sandbox, sim_addr, "serve-b", 2_500);

    // 50 calls of 300 ms at once, half through each replica: 5 at a time take 3 s, so some wait
    // their turn and the rest are refused when the 2.5 s wait runs out.
    let calls: Vec<_> = (0..50)
        .map(|i| {
            let addr = if i % 2 == 0 { addr_a.clone() } else { addr_b.clone() };
            let key = key.clone();
            std::thread::spawn(move || chat(&addr, &key, 300))
        })
        .collect();
    let answers: Vec<(u16, Option<u64>, Value)> = calls.into_iter().map(|c| c.join().expect("call thread")).collect();

    let peak = sim.in_flight_max();
    assert!((1..=5).contains(&peak), "{label}: at most 5 calls at the upstream at once, saw {peak}");
    let ok = answers.iter().filter(|a| a.0 == 200).count();
    for (status, retry_after, body) in &answers {
        match status {
            200 => {}
            429 => {
                assert_eq!(body["error"]["code"], "concurrency_limit_exceeded", "{label}: {body}");
                assert!(retry_after.is_some_and(|s| (1..=60).contains(&s)), "{label}: Retry-After {retry_after:?}");
            }
            other => panic!("{label}: unexpected {other}: {body}"),
        }
    }
    assert!(ok >= 10, "{label}: calls waited for slots rather than all being refused ({ok} answered)");
    assert_eq!(settled_calls(&rt, &sandbox, &user), ok, "{label}: one settled call per answer, none for a 429");
}

#[test]
fn the_slots_of_a_replica_killed_with_sigkill_come_back_within_the_lease_time() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (sim_addr, sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (_user, key) = account(&sandbox);
    sandbox.run(&["admin", "model", "set", "--model", MODEL, "--concurrency-limit", "2"]).json();
    let (mut doomed, addr_doomed) = serve(&sandbox, sim_addr, "serve-doomed", 1_000);
    let (_survivor, addr) = serve(&sandbox, sim_addr, "serve-survivor", 500);

    // The doomed replica takes both slots with long calls, then dies without giving them back.
    let held: Vec<_> = (0..2)
        .map(|_| {
            let (addr, key) = (addr_doomed.clone(), key.clone());
            std::thread::spawn(move || chat(&addr, &key, 8_000))
        })
        .collect();
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    while sim.in_flight_max() < 2 {
        assert!(Instant::now() < deadline, "{label}: the doomed replica's calls never reached the upstream");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (status, _, body) = chat(&addr, &key, 0);
    assert_eq!(status, 429, "{label}: both slots are held by the other replica: {body}");
    doomed.0.kill().expect("SIGKILL");
    doomed.0.wait().expect("reap");
    let killed_at = Instant::now();
    for h in held {
        let _ = h.join();
    }

    let mut answered = 0;
    while answered < 2 {
        let (status, _, body) = chat(&addr, &key, 0);
        match status {
            200 => answered += 1,
            429 => {}
            other => panic!("{label}: {other}: {body}"),
        }
        assert!(
            killed_at.elapsed() < Duration::from_millis(LEASE_MS * 3),
            "{label}: the dead replica's slots did not come back within the lease time"
        );
    }
}
