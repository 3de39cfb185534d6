//! Operating a real `gateway serve` process: with `GATEWAY_LOG_FORMAT=json` every log line on
//! stderr is one JSON object, and a billable call's access line carries the request id, the user
//! id, the model, the status, the latency and the amount billed, and never the key; and SIGTERM
//! waits for a call whose client already hung up, so its hold is settled before the process exits;
//! and the call of a replica killed with SIGKILL is refunded by another replica once the dead
//! one's liveness lease has run out, long before the age-based sweep would; and the configuration
//! file's model aliases are set at start and serve calls.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{http_request, sandbox, terminate};
use serde_json::{Value, json};

#[test]
fn json_logs_carry_the_call_and_never_the_key() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim_addr, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let (user, key) = common::account(&sandbox, "10", "language:create");
    let env = [("GATEWAY_LOG_FORMAT", "json".to_owned())];
    let (mut server, addr) = common::serve_against(&sandbox, sim_addr, "serve-json", &env);
    let body = json!({"model": "LangA-V4-flash", "messages": [{"role": "user", "content": "log me"}], "max_tokens": 8});
    let (status, answer) = http_request(&addr, "POST", "/api/v1/chat/completions", Some(&key), Some(&body));
    assert_eq!(status, 200, "{answer}");
    let billed = answer["svc"]["billing"]["actual_amount"].as_str().expect("actual_amount").to_owned();
    let task = answer["svc"]["task_id"].as_str().expect("task id").to_owned();
    let (status, _) = http_request(&addr, "GET", "/api/v1/models", Some("sk-gw-not-a-key"), None);
    assert_eq!(status, 401);
    terminate(&mut server.0);

    let stderr = std::fs::read_to_string(sandbox.dir.join("serve-json.err")).expect("read stderr");
    let lines: Vec<Value> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    assert!(lines.iter().all(|l| l["level"].is_string() && l["timestamp"].is_string()), "{stderr}");
    let call = lines
        .iter()
        .find(|l| l["message"] == "request" && l["path"] == "/api/v1/chat/completions")
        .unwrap_or_else(|| panic!("no access line for the call: {stderr}"));
    assert!(call["request_id"].as_str().is_some_and(|id| !id.is_empty()), "{call}");
    assert_eq!(call["status"], 200, "{call}");
    assert_eq!(call["user_id"], user.as_str(), "{call}");
    assert_eq!(call["model"], "LangA-V4-flash", "{call}");
    assert_eq!(call["task_id"], task.as_str(), "{call}");
    assert_eq!(call["billed_usd"], billed.as_str(), "{call}");
    assert!(call["micros"].as_u64().is_some(), "{call}");
    let refused = lines
        .iter()
        .find(|l| l["message"] == "request" && l["path"] == "/api/v1/models")
        .unwrap_or_else(|| panic!("no access line for the refused call: {stderr}"));
    assert_eq!(refused["status"], 401, "{refused}");
    assert!(!stderr.contains(&key) && !stderr.contains("sk-gw-not-a-key"), "a key reached the log");
}

/// Sends a slow chat call to the gateway at `addr` and returns its connection unread (the caller
/// decides when the client goes away). Written by hand: the test is about the socket the client
/// leaves, which a client library hides.
fn send_slow_chat(addr: &str, key: &str, content: &str, latency_ms: u64) -> TcpStream {
    let body = json!({
        "model": "LangA-V4-flash",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 8,
        "sim_latency_ms": latency_ms,
    })
    .to_string();
    let mut stream = TcpStream::connect(addr).expect("connect to the gateway");
    write!(
        stream,
        "POST /api/v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    stream
}

/// Waits (bounded) until the simulator has answered or is answering a call.
fn until_upstream_reached(sim: &sim::SimHandle) {
    let started = std::time::Instant::now();
    while sim.in_flight_max() < 1 {
        assert!(started.elapsed() < Duration::from_secs(10), "the call never reached the upstream");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigterm_waits_for_a_call_whose_client_hung_up() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim_addr, sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let (user, key) = common::account(&sandbox, "10", "language:create");
    let (mut server, addr) = common::serve_against(&sandbox, sim_addr, "serve-drain", &[]);
    let stream = send_slow_chat(&addr, &key, "answer slowly", 1500);
    // The call reaches the upstream, then its client leaves and the operator stops the server.
    until_upstream_reached(&sim);
    drop(stream);
    terminate(&mut server.0);
    let (tasks, _) = common::books(&rt, &sandbox, &user);
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert_eq!(tasks[0].status, domain::TaskStatus::Succeeded, "the call finished before the exit: {tasks:?}");
    assert_eq!(tasks[0].billing.status, domain::BillingStatus::Settled, "{tasks:?}");
}

#[test]
fn a_killed_replicas_call_is_refunded_by_another_within_its_lease() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim_addr, sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let (user, key) = common::account(&sandbox, "10", "language:create");
    let env = [("GATEWAY_REPLICA_LEASE", "2000ms".to_owned())];
    let (mut doomed, addr) = common::serve_against(&sandbox, sim_addr, "serve-doomed", &env);
    let (_survivor, _) = common::serve_against(&sandbox, sim_addr, "serve-survivor", &env);
    let stream = send_slow_chat(&addr, &key, "never answered in time", 30_000);
    until_upstream_reached(&sim);
    doomed.0.kill().expect("SIGKILL the replica");
    let _ = doomed.0.wait();
    // The survivor refunds the dead replica's call within its lease (the wait is bounded).
    let (tasks, _) = common::books_when_settled(&rt, &sandbox, &user, Duration::from_secs(15));
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let task = tasks[0].clone();
    assert_eq!(task.status, domain::TaskStatus::Failed, "{task:?}");
    assert_eq!(task.error_code.as_deref(), Some("interrupted"), "{task:?}");
    assert_eq!(task.billing.status, domain::BillingStatus::Refunded, "{task:?}");
    drop(stream);
}

#[test]
fn the_configuration_files_model_aliases_are_set_at_start_and_serve_calls() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim_addr, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, label) = sandbox(&rt);
    // `gateway.toml` in the server's working directory.
    sandbox
        .file("gateway.toml", "[[model_aliases]]\nname = \"fast\"\nmodels = [\"LangA-V4-flash\", \"LangA-V4-pro\"]\n");
    let (_user, key) = common::account(&sandbox, "10", "language:create,models:read");
    let (mut server, addr) = common::serve_against(&sandbox, sim_addr, "serve-aliases", &[]);
    let listed = sandbox.run(&["admin", "alias", "list"]).json();
    assert_eq!(listed, json!({"aliases": [{"name": "fast", "models": ["LangA-V4-flash", "LangA-V4-pro"]}]}), "{label}");
    let body = json!({"model": "fast", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let (status, answer) = http_request(&addr, "POST", "/v1/chat/completions", Some(&key), Some(&body));
    assert_eq!((status, &answer["model"]), (200, &json!("LangA-V4-flash")), "{label}: {answer}");
    let (status, models) = http_request(&addr, "GET", "/v1/models", Some(&key), None);
    assert_eq!(status, 200, "{label}: {models}");
    assert!(models["data"].as_array().expect("data").iter().any(|m| m["id"] == "fast"), "{label}: {models}");
    terminate(&mut server.0);
}
