//! The two-replica proof: two real `gateway serve` processes on one database (PostgreSQL when
//! `TEST_DATABASE_URL` is set, else one SQLite file) take concurrent chat, image and video traffic
//! through both, and one of them is killed with SIGKILL in the middle of it. The upstream
//! simulator runs in the test, so it outlives the gateways and counts what reaches it.
//!
//! Afterwards: the caps held across both replicas (the simulator never saw more synchronous calls
//! at once than the capped models allow together), every call and task ended with its hold settled
//! or refunded exactly once (none left reserved, including the killed replica's), each video task
//! was held and closed once, and the balance equals the ledger's sum.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{COMMAND_TIMEOUT, Running, Sandbox, http_request, sandbox};
use domain::{BillingStatus, LedgerKind};
use serde_json::{Value, json};

const CHAT_MODEL: &str = "LangA-V4-flash";
const CHAT_CAP: u64 = 4;
const IMAGE_MODEL: &str = "Vendor-Imagegen-4.5";
const IMAGE_CAP: u64 = 2;
const VIDEO_MODEL: &str = "videogen-2-0-mini";
/// How long everything may take to end after the kill.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

/// `gateway serve` against the simulator with short leases, so that the dead replica's slots,
/// calls and task claims come back within seconds.
fn serve(sandbox: &Sandbox, sim: SocketAddr, name: &str) -> (Running, String) {
    let mut env = common::video_env(sim);
    env.extend([
        ("GATEWAY_CAP_LEASE", "2000ms".to_owned()),
        ("GATEWAY_REPLICA_LEASE", "2000ms".to_owned()),
        ("GATEWAY_QUEUE_WAIT", "20000ms".to_owned()),
    ]);
    common::serve_against(sandbox, sim, name, &env)
}

/// One POST through the test client on a fresh connection: the status, or `None` when the
/// connection broke (the replica died under it).
fn post(addr: &str, key: &str, path: &str, body: &Value) -> Option<u16> {
    let addr: SocketAddr = addr.parse().expect("a socket address");
    let auth = format!("Bearer {key}");
    let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
    let body = body.to_string();
    let step = Duration::from_secs(60);
    let sent = testkit::http::try_fetch(addr, testkit::http::Method::POST, path, &headers, body.as_bytes(), step);
    testkit::http::blocking(sent).ok().map(|reply| reply.status)
}

/// The chat calls running on the replica at `addr`, from its `/metrics` (0 when it does not answer).
fn chat_calls_running(addr: &str) -> u64 {
    let addr: SocketAddr = addr.parse().expect("a socket address");
    let fetched = testkit::http::try_fetch(addr, testkit::http::Method::GET, "/metrics", &[], &[], COMMAND_TIMEOUT);
    let Ok(reply) = testkit::http::blocking(fetched) else { return 0 };
    let series = format!("gateway_calls_in_flight{{model=\"{CHAT_MODEL}\"}} ");
    let text = reply.text();
    text.lines().find_map(|l| l.strip_prefix(series.as_str())).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

#[test]
fn two_replicas_take_chat_image_and_video_and_a_sigkill_loses_nothing() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (sim_addr, sim) = rt.block_on(sim::spawn_with(sim::SimOptions::default())).expect("start the simulator");
    for (model, cap) in [(CHAT_MODEL, CHAT_CAP), (IMAGE_MODEL, IMAGE_CAP)] {
        sandbox.run(&["admin", "model", "set", "--model", model, "--concurrency-limit", &cap.to_string()]).json();
    }
    let (user, key) =
        common::account(&sandbox, "100", "language:create,image:create,video:create,task:read,task:write");
    let (mut doomed, addr_a) = serve(&sandbox, sim_addr, "replica-a");
    let (_survivor, addr_b) = serve(&sandbox, sim_addr, "replica-b");

    // Video tasks through both replicas.
    let videos: Vec<String> = (0..20)
        .map(|i| {
            let addr = if i % 2 == 0 { &addr_a } else { &addr_b };
            let body = json!({"model": VIDEO_MODEL, "prompt": format!("tide number {i}"), "resolution": "480p"});
            let (status, task) = http_request(addr, "POST", "/api/v1/tasks", Some(&key), Some(&body));
            assert_eq!(status, 202, "{label}: create video {i}: {task}");
            task["id"].as_str().expect("task id").to_owned()
        })
        .collect();

    // Slow chat calls and image calls through both replicas, all at once.
    let answered = Arc::new(AtomicUsize::new(0));
    let broken = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for i in 0..48 {
        let addr = if i % 2 == 0 { addr_a.clone() } else { addr_b.clone() };
        let (key, answered, broken) = (key.clone(), Arc::clone(&answered), Arc::clone(&broken));
        clients.push(std::thread::spawn(move || {
            let (path, body) = if i % 3 == 2 {
                ("/api/v1/images/generations", json!({"model": IMAGE_MODEL, "prompt": format!("harbour {i}")}))
            } else {
                let content = format!("slow question {i}");
                let body = json!({"model": CHAT_MODEL, "messages": [{"role": "user", "content": content}],
                                  "max_tokens": 8, "sim_latency_ms": 400});
                ("/api/v1/chat/completions", body)
            };
            match post(&addr, &key, path, &body) {
                Some(200) => answered.fetch_add(1, Ordering::Relaxed),
                Some(status) => panic!("{path} answered {status}"),
                None => broken.fetch_add(1, Ordering::Relaxed),
            };
        }));
    }
    // Kill replica A while chat calls run on it (its own metrics say so).
    let started = Instant::now();
    while chat_calls_running(&addr_a) == 0 {
        assert!(started.elapsed() < COMMAND_TIMEOUT, "{label}: no chat call ran on replica A");
        std::thread::sleep(Duration::from_millis(5));
    }
    doomed.0.kill().expect("SIGKILL replica A");
    let _ = doomed.0.wait();
    for client in clients {
        client.join().expect("client thread");
    }
    let (answered, broken) = (answered.load(Ordering::Relaxed), broken.load(Ordering::Relaxed));
    assert_eq!(answered + broken, 48, "{label}");
    assert!(answered >= 24, "{label}: replica B answered its calls ({answered} answered, {broken} broken)");
    assert!(broken > 0, "{label}: replica A died with calls on it");

    let peak = sim.in_flight_max();
    assert!(
        peak <= CHAT_CAP + IMAGE_CAP,
        "{label}: {peak} calls at the upstream at once, caps allow {}",
        CHAT_CAP + IMAGE_CAP
    );

    let (tasks, entries) = common::books_when_settled(&rt, &sandbox, &user, SETTLE_LIMIT);
    for task in &tasks {
        let ended = match task.billing.status {
            BillingStatus::Settled => task.status == domain::TaskStatus::Succeeded,
            BillingStatus::Refunded => task.status != domain::TaskStatus::Succeeded,
            _ => false,
        };
        assert!(ended, "{label}: every hold ended once with its task: {task:?}");
        let moves: Vec<LedgerKind> =
            entries.iter().filter(|e| e.task_id.as_ref() == Some(&task.id)).map(|e| e.kind).collect();
        assert_eq!(moves.len(), 2, "{label}: one hold and one close for {}: {moves:?}", task.id);
    }
    let settled_sync = tasks
        .iter()
        .filter(|t| t.kind != domain::ModelKind::Video && t.billing.status == BillingStatus::Settled)
        .count();
    assert!(settled_sync >= answered, "{label}: every answered call was settled ({settled_sync} < {answered})");
    let video_ids: Vec<&str> =
        tasks.iter().filter(|t| t.kind == domain::ModelKind::Video).map(|t| t.id.as_str()).collect();
    assert_eq!(video_ids.len(), videos.len(), "{label}: every video task is there");
    let interrupted = tasks.iter().filter(|t| t.error_code.as_deref() == Some("interrupted")).count();
    assert!(interrupted > 0, "{label}: the calls running on replica A were refunded by replica B");
    assert_eq!(
        interrupted + settled_sync + video_ids.len(),
        tasks.len(),
        "{label}: a call either settled or was refunded as interrupted"
    );
    eprintln!(
        "{label}: {answered} answered, {broken} cut by the kill, {settled_sync} settled, {interrupted} refunded as \
         interrupted, {} video tasks, peak {peak} at the upstream",
        video_ids.len()
    );
}
