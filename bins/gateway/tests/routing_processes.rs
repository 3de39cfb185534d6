//! Upstream routing across real processes (issue 22): one `gateway serve` with two upstream
//! simulators behind `GATEWAY_UPSTREAM_URL=a,b` (running in the test, so one can be stopped while
//! traffic runs): calls are shared evenly, a simulator stopped mid-run costs no client call, every
//! call is billed exactly once and the balance equals the ledger; video tasks are created on any
//! endpoint (retried elsewhere only when the request never left) and polled where they live.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Running, Sandbox, sandbox};
use serde_json::json;

const CHAT_MODEL: &str = "LangA-V4-flash";

fn simulator(rt: &tokio::runtime::Runtime) -> (SocketAddr, sim::SimHandle) {
    rt.block_on(sim::spawn_with(sim::SimOptions::default())).expect("start a simulator")
}

/// `serve` with the platform at both simulators (one key for both), everything else at `a`.
fn serve(sandbox: &Sandbox, a: SocketAddr, b: SocketAddr) -> (Running, String) {
    // A short liveness lease: the replica reports its endpoints every second.
    let env = [
        ("GATEWAY_UPSTREAM_URL", format!("http://{a}/api/v3,http://{b}/api/v3")),
        ("GATEWAY_REPLICA_LEASE", "3000ms".to_owned()),
    ];
    common::serve_against(sandbox, a, "serve", &env)
}

/// The text of `GET /metrics`.
fn metrics_text(addr: &str) -> String {
    common::request(addr, testkit::http::Method::GET, "/metrics", None, &[], &[], common::COMMAND_TIMEOUT).text()
}

/// `calls` chat calls from `threads` clients at once; each answer's status (0: none came).
fn chat_calls(addr: &str, key: &str, calls: usize, threads: usize, done: &Arc<AtomicUsize>) -> Vec<u16> {
    let per = calls / threads;
    let clients: Vec<_> = (0..threads)
        .map(|t| {
            let (addr, key, done) = (addr.to_owned(), key.to_owned(), Arc::clone(done));
            std::thread::spawn(move || {
                (0..per)
                    .map(|i| {
                        let body = json!({"model": CHAT_MODEL, "max_tokens": 8,
                                          "messages": [{"role": "user", "content": format!("question {t}-{i}")}]});
                        let (status, _) =
                            common::http_request(&addr, "POST", "/api/v1/chat/completions", Some(&key), Some(&body));
                        done.fetch_add(1, Ordering::SeqCst);
                        status
                    })
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    clients.into_iter().flat_map(|c| c.join().expect("client thread")).collect()
}

#[test]
fn two_upstreams_share_the_calls_and_one_stopped_mid_run_costs_no_call() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (a, sim_a) = simulator(&rt);
    let (b, sim_b) = simulator(&rt);
    let (user, key) = common::account(&sandbox, "1000", "language:create,task:read");
    let (_serve, addr) = serve(&sandbox, a, b);
    let chat = sim::CHAT_PATH;

    // Equal weights: 1,000 calls split within ±10 % of 500 each.
    let done = Arc::new(AtomicUsize::new(0));
    let statuses = chat_calls(&addr, &key, 1_000, 8, &done);
    assert!(
        statuses.iter().all(|s| *s == 200),
        "{label}: every call answered: {:?}",
        common::logged_problems(&sandbox, "serve")
    );
    let (on_a, on_b) = (sim_a.requests(chat), sim_b.requests(chat));
    eprintln!("{label}: 1,000 calls: {on_a} on a, {on_b} on b");
    assert_eq!(on_a + on_b, 1_000, "{label}: one upstream request per call");
    assert!((450..=550).contains(&on_a), "{label}: a took {on_a} of 1,000");

    // B stops while 400 more calls run: every one is still answered.
    let done = Arc::new(AtomicUsize::new(0));
    let traffic = {
        let (addr, key, done) = (addr.clone(), key.clone(), Arc::clone(&done));
        std::thread::spawn(move || chat_calls(&addr, &key, 400, 8, &done))
    };
    while done.load(Ordering::SeqCst) < 100 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let b_at_stop = sim_b.requests(chat);
    rt.block_on(sim_b.stop()).expect("stop simulator b");
    let statuses = traffic.join().expect("traffic");
    let failed = statuses.iter().filter(|s| **s != 200).count();
    assert_eq!(
        failed,
        0,
        "{label}: no client call failed: {statuses:?}: {}",
        common::logged_problems(&sandbox, "serve")
    );
    let after_a = sim_a.requests(chat);
    eprintln!(
        "{label}: 400 calls with b stopped after ~100: {} on b before it stopped, {} more on a",
        b_at_stop - on_b,
        after_a - on_a
    );

    // The stopped endpoint's circuit is open, and /metrics says so per endpoint (no key in a label).
    let metrics = metrics_text(&addr);
    assert!(
        metrics.contains(r#"gateway_upstream_endpoint_state{pool="platform",endpoint="platform-2"} 3"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"gateway_upstream_endpoint_state{pool="platform",endpoint="platform-1"} 0"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"gateway_upstream_endpoint_attempts_total{pool="platform",endpoint="platform-1"}"#),
        "{metrics}"
    );
    // Stopped, b refuses connections: its errors are of that kind.
    let connect_errors = metrics
        .lines()
        .find(|l| {
            l.starts_with(
                r#"gateway_upstream_endpoint_errors_total{pool="platform",endpoint="platform-2",kind="connect"}"#,
            )
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok());
    assert!(connect_errors.is_some_and(|n| n >= 1), "{label}: {metrics}");
    assert!(
        metrics.contains(
            r#"gateway_upstream_endpoint_errors_total{pool="platform",endpoint="platform-2",kind="server_error"} 0"#
        ),
        "{metrics}"
    );
    assert!(!metrics.contains(upstream::config::SIM_PLATFORM_KEY));
    let (ready, _) = common::http_get(&addr, "/readyz", None);
    assert_eq!(ready, 200, "{label}: ready while platform-1 takes calls");
    // And `admin upstream list` shows it, from the replica's last report in the database.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let listed = loop {
        let listed = sandbox.run(&["admin", "upstream", "list"]).json();
        let endpoints = listed["replicas"][0]["endpoints"].as_array().cloned().unwrap_or_default();
        let state_of = |name: &str| endpoints.iter().find(|e| e["name"] == name).map(|e| e["state"].clone());
        if state_of("platform-2") == Some(json!("circuit_open")) && state_of("platform-1") == Some(json!("healthy")) {
            break listed;
        }
        assert!(std::time::Instant::now() < deadline, "{label}: not reported: {listed}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let b = listed["replicas"][0]["endpoints"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["name"] == "platform-2").cloned());
    let b = b.expect("platform-2 listed");
    assert!(b["failures"].as_u64().is_some_and(|f| f >= 5) && b["until_ms"].as_u64().is_some_and(|u| u > 0), "{b}");
    assert!(b["errors"]["connect"].as_u64().is_some_and(|n| n >= 1), "{b}");
    assert!(!listed.to_string().contains(upstream::config::SIM_PLATFORM_KEY), "no key listed");

    // Every call is one task, settled once; balance = Σ ledger.
    let (tasks, entries) = common::books_when_settled(&rt, &sandbox, &user, Duration::from_secs(60));
    assert_eq!(tasks.len(), 1_400, "{label}: a task per call");
    assert!(tasks.iter().all(|t| t.status == domain::TaskStatus::Succeeded), "{label}: every task succeeded");
    let count = |kind| entries.iter().filter(|e| e.kind == kind).count();
    assert_eq!(count(domain::LedgerKind::Reserve), 1_400, "{label}: one hold per call, whatever its attempts");
    assert_eq!(count(domain::LedgerKind::Refund), 0, "{label}: no call failed");
    assert!(count(domain::LedgerKind::Settle) <= 1_400, "{label}: at most one settlement per call");
}

#[test]
fn a_key_list_of_the_wrong_length_is_exit_64_naming_the_setting() {
    let sandbox = Sandbox::new();
    for (urls, keys, named) in [
        ("http://127.0.0.1:1/api/v3,http://127.0.0.1:2/api/v3", "k1,k2,k3", "upstream_api_key"),
        ("http://127.0.0.1:1/api/v3", "k1,k2", "upstream_api_key"),
    ] {
        let out = sandbox
            .command(&["serve"])
            .env("GATEWAY_LISTEN", "127.0.0.1:0")
            .env("GATEWAY_UPSTREAM_URL", urls)
            .env("GATEWAY_UPSTREAM_API_KEY", keys)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let named_lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with(named)).collect();
        assert_eq!(out.status.code(), Some(64), "{urls} / {keys}: {stderr}");
        assert_eq!(named_lines.len(), 1, "one line names {named}: {stderr}");
        assert!(!stderr.contains("k1") && !stderr.contains("k2"), "no key in the output: {stderr}");
    }
}

/// `calls` chat calls from 4 clients; how many were answered 200 and the other statuses.
fn answered(addr: &str, key: &str, calls: usize) -> (usize, Vec<u16>) {
    let statuses = chat_calls(addr, key, calls, 4, &Arc::new(AtomicUsize::new(0)));
    let others: Vec<u16> = statuses.iter().copied().filter(|s| *s != 200).collect();
    (statuses.len() - others.len(), others)
}

#[test]
fn a_refusing_upstream_loses_its_share_until_it_recovers_and_all_down_is_502_refunded() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (a, sim_a) = simulator(&rt);
    let (b, sim_b) = simulator(&rt);
    let (user, key) = common::account(&sandbox, "1000", "language:create,task:read");
    let (_serve, addr) = serve(&sandbox, a, b);
    let chat = sim::CHAT_PATH;
    let on_b = || sim_b.requests(chat);

    // 429 with Retry-After: 2 — b is asked again only after each cool-down.
    sim_b.set_outage(Some((429, Some(2))));
    let before = on_b();
    assert_eq!(answered(&addr, &key, 100), (100, vec![]), "{label}: every call answered by a");
    let asked = on_b() - before;
    assert!(asked <= 2, "{label}: b asked {asked} times while cooling down");

    // b recovers: after its cool-down it takes its share again.
    sim_b.set_outage(None);
    std::thread::sleep(Duration::from_millis(2_100));
    let before = on_b();
    assert_eq!(answered(&addr, &key, 100).0, 100, "{label}");
    let share = on_b() - before;
    assert!((40..=60).contains(&share), "{label}: b took {share} of 100 after its cool-down");

    // 500s: five in a row open b's circuit; the calls go to a meanwhile.
    sim_b.set_outage(Some((500, None)));
    let before = on_b();
    assert_eq!(answered(&addr, &key, 100), (100, vec![]), "{label}: every call answered by a");
    let asked = on_b() - before;
    assert!((5..=8).contains(&asked), "{label}: b asked {asked} times before its circuit opened");

    // Both down: 502, the hold refunded, no reservation left open.
    sim_a.set_outage(Some((500, None)));
    let (ok, failed) = answered(&addr, &key, 20);
    assert_eq!(ok, 0, "{label}: nothing answers");
    assert!(failed.iter().all(|s| *s == 502), "{label}: {failed:?}");
    let (ready, answer) = common::http_get(&addr, "/readyz", None);
    assert_eq!(ready, 503, "{label}: not ready with every platform endpoint's circuit open: {answer}");
    let (tasks, entries) = common::books_when_settled(&rt, &sandbox, &user, Duration::from_secs(60));
    let count = |kind| entries.iter().filter(|e| e.kind == kind).count();
    assert_eq!(count(domain::LedgerKind::Reserve), 320, "{label}: one hold per call");
    assert_eq!(count(domain::LedgerKind::Refund), 20, "{label}: each failed call refunded once");
    let failed_tasks = tasks.iter().filter(|t| t.status == domain::TaskStatus::Failed).count();
    assert_eq!(failed_tasks, 20, "{label}");
}

#[test]
fn a_refused_key_leaves_the_pool_and_is_reported_once() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (a, sim_a) = simulator(&rt);
    let (user, key) = common::account(&sandbox, "1000", "language:create,task:read");
    let revoked = "sk-revoked-3f9c2e";
    sim_a.refuse_key(revoked);
    // One URL twice: a pool of two keys.
    let env = [
        ("GATEWAY_UPSTREAM_URL", format!("http://{a}/api/v3,http://{a}/api/v3")),
        ("GATEWAY_UPSTREAM_API_KEY", format!("{},{revoked}", upstream::config::SIM_PLATFORM_KEY)),
    ];
    let (_serve, addr) = common::serve_against(&sandbox, a, "serve", &env);
    assert_eq!(answered(&addr, &key, 200), (200, vec![]), "{label}: every call answered with the good key");
    // Tried once, or by each of the 4 clients that picked it before its first refusal came back.
    let tried = sim_a.requests(sim::CHAT_PATH) - 200;
    assert!((1..=4).contains(&tried), "{label}: the revoked key was tried {tried} times");
    let log = common::logged_problems(&sandbox, "serve");
    let reported: Vec<&str> = log.lines().filter(|l| l.contains("refused the endpoint's key")).collect();
    assert_eq!(reported.len(), 1, "{label}: reported once: {log}");
    assert!(reported[0].contains("platform-2"), "{label}: names the endpoint: {}", reported[0]);
    assert!(!log.contains(revoked), "{label}: never the key itself");
    common::books_when_settled(&rt, &sandbox, &user, Duration::from_secs(60));
}

#[test]
fn the_full_form_sets_weights_key_pools_and_a_fallback_tier() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (a, sim_a) = simulator(&rt);
    let (b, sim_b) = simulator(&rt);
    let (c, sim_c) = simulator(&rt);
    let key = upstream::config::SIM_PLATFORM_KEY;
    // `gateway.toml` in the server's working directory: a weighs 3, b 1 with a pool of two keys,
    // c is the fallback tier.
    sandbox.file(
        "gateway.toml",
        &format!(
            "[[upstream_endpoints]]\nname = \"heavy\"\npool = \"platform\"\nurl = \"http://{a}/api/v3\"\nkeys = [\"{key}\"]\nweight = 3\n\n\
             [[upstream_endpoints]]\nname = \"light\"\npool = \"platform\"\nurl = \"http://{b}/api/v3\"\nkeys = [\"{key}\", \"{key}-2\"]\n\n\
             [[upstream_endpoints]]\nname = \"fallback\"\npool = \"platform\"\nurl = \"http://{c}/api/v3\"\nkeys = [\"{key}\"]\npriority = 1\n"
        ),
    );
    let (user, api_key) = common::account(&sandbox, "1000", "language:create,task:read");
    let (_serve, addr) = common::serve_against(&sandbox, a, "serve", &[]);
    let chat = sim::CHAT_PATH;
    assert_eq!(answered(&addr, &api_key, 400), (400, vec![]), "{label}");
    let shares = (sim_a.requests(chat), sim_b.requests(chat), sim_c.requests(chat));
    eprintln!("{label}: 400 calls: heavy {}, light {}, fallback {}", shares.0, shares.1, shares.2);
    assert_eq!(shares, (300, 100, 0), "{label}: weights 3:1 exactly, the fallback unused");
    let metrics = metrics_text(&addr);
    for name in ["heavy", "light#1", "light#2", "fallback"] {
        assert!(metrics.contains(&format!("endpoint=\"{name}\"")), "{name} in {metrics}");
    }
    // The first tier down: the fallback takes every call.
    sim_a.set_outage(Some((503, None)));
    sim_b.set_outage(Some((503, None)));
    assert_eq!(answered(&addr, &api_key, 100), (100, vec![]), "{label}: every call answered by the fallback");
    assert_eq!(sim_c.requests(chat), 100, "{label}");
    common::books_when_settled(&rt, &sandbox, &user, Duration::from_secs(60));
}

/// A platform base on 127.0.0.1 where nothing listens (connections refused at once).
fn nothing_listening() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("address");
    drop(listener);
    format!("http://{addr}/api/v3")
}

#[test]
fn video_tasks_live_where_they_were_created_and_every_task_records_its_endpoint() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (a, sim_a) = simulator(&rt);
    let (b, sim_b) = simulator(&rt);
    let (user, key) = common::account(&sandbox, "100", "language:create,video:create,task:read,task:write");
    // platform-1 refuses connections, platform-2 is a, platform-3 is b.
    let mut env = common::video_env(a);
    env.push(("GATEWAY_UPSTREAM_URL", format!("{},http://{a}/api/v3,http://{b}/api/v3", nothing_listening())));
    let (_serve, addr) = common::serve_against(&sandbox, a, "serve", &env);

    let ids: Vec<String> = (0..12)
        .map(|i| {
            let body = json!({"model": "videogen-2-0-mini", "prompt": format!("otter {i}"), "resolution": "480p"});
            let (status, task) = common::http_request(&addr, "POST", "/api/v1/tasks", Some(&key), Some(&body));
            assert_eq!(status, 202, "{label}: {task}");
            task["id"].as_str().expect("id").to_owned()
        })
        .collect();
    let (tasks, entries) = common::books_when_settled(&rt, &sandbox, &user, Duration::from_secs(120));
    assert!(tasks.iter().all(|t| t.status == domain::TaskStatus::Succeeded), "{label}: {tasks:?}");
    let created = sim_a.requests(sim::VIDEO_TASKS_PATH) + sim_b.requests(sim::VIDEO_TASKS_PATH);
    assert_eq!(created, 12, "{label}: one upstream task per task, none created twice");
    let mut retried = 0;
    let mut on = std::collections::HashMap::new();
    for id in &ids {
        let shown = sandbox.run(&["admin", "task", "show", "--id", id]).json();
        let upstream = &shown["upstream"];
        let endpoint = upstream["endpoint"].as_str().unwrap_or_default().to_owned();
        let upstream_id = upstream["id"].as_str().expect("an upstream id");
        let attempts = upstream["attempts"].as_u64().unwrap_or_default();
        assert!((1..=2).contains(&attempts), "{label}: {shown}");
        retried += usize::from(attempts == 2);
        // Polled where it was created: the simulators number their tasks alike, so the result's
        // address (the simulator that answered the polls) tells which one did.
        let here = match endpoint.as_str() {
            "platform-2" => a,
            "platform-3" => b,
            other => panic!("{label}: created on {other:?}: {shown}"),
        };
        let output = shown["output_url"].as_str().unwrap_or_default();
        assert!(output.starts_with(&format!("http://{here}/")) && output.contains(upstream_id), "{label}: {shown}");
        assert_eq!(shown["id"], id.as_str(), "{label}: the task as its owner sees it");
        assert_eq!(upstream.as_object().map(serde_json::Map::len), Some(3), "{label}: names, never URLs: {shown}");
        *on.entry(endpoint).or_insert(0) += 1;
    }
    eprintln!("{label}: 12 tasks: {on:?}, {retried} created after a refused connection");
    assert!(retried >= 1, "{label}: the dead endpoint was picked first at least once");
    assert_eq!(on.len(), 2, "{label}: both live endpoints created tasks: {on:?}");
    let count = |kind| entries.iter().filter(|e| e.kind == kind).count();
    assert_eq!((count(domain::LedgerKind::Reserve), count(domain::LedgerKind::Settle)), (12, 12), "{label}");

    // A chat call records its endpoint too, and the public task object does not show it.
    let body = json!({"model": CHAT_MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let (status, answer) = common::http_request(&addr, "POST", "/api/v1/chat/completions", Some(&key), Some(&body));
    assert_eq!(status, 200, "{label}: {answer}");
    let (tasks, _) = common::books_when_settled(&rt, &sandbox, &user, Duration::from_secs(60));
    let chat_task = tasks.iter().find(|t| t.kind == domain::ModelKind::Language).expect("the chat task");
    let shown = sandbox.run(&["admin", "task", "show", "--id", chat_task.id.as_str()]).json();
    let endpoint = shown["upstream"]["endpoint"].as_str().unwrap_or_default();
    assert!(["platform-2", "platform-3"].contains(&endpoint), "{label}: {shown}");
    let (status, public) = common::http_get(&addr, &format!("/api/v1/tasks/{}", chat_task.id.as_str()), Some(&key));
    assert_eq!(status, 200, "{label}: {public}");
    assert!(public.get("upstream").is_none() && !public.to_string().contains("platform-"), "{label}: {public}");
}
