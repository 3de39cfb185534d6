//! Operations ("ops"): a running `serve` prunes the tables that only grow; what an error tells a
//! stranger (an upstream's 400 is the caller's 400 with its reason, refunded; our own key's 401
//! and an unreachable upstream are 502s that name no address); `/metrics` behind a bearer token;
//! no funded demo user on PostgreSQL unless asked.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement, Value as SqlValue};
use serde_json::json;

use super::common::{
    COMMAND_TIMEOUT, Sandbox, address_in, http_get, http_request, lines_until, sandbox, serve_against, stdout_lines,
    terminate,
};

const HOUR: i64 = 3_600_000;
const DAY: i64 = 24 * HOUR;

fn now_millis() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

async fn exec(conn: &DatabaseConnection, sql: &str, values: Vec<SqlValue>) {
    let statement = Statement::from_sql_and_values(conn.get_database_backend(), sql, values);
    conn.execute_raw(statement).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
}

async fn ids(conn: &DatabaseConnection, sql: &str) -> Vec<String> {
    let statement = Statement::from_string(conn.get_database_backend(), sql.to_owned());
    let rows = conn.query_all_raw(statement).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.iter().map(|r| r.try_get_by_index::<String>(0).expect("an id")).collect()
}

#[test]
fn a_running_server_prunes_old_rows_and_keeps_recent_ones() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim_addr, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, db) = sandbox(&rt);
    sandbox.run(&["migrate"]).json();
    let url = sandbox.database_url();
    let conn = rt.block_on(Database::connect(url.as_str())).expect("connect");
    let now = now_millis();
    rt.block_on(async {
        for (key, at, answered) in [
            ("old-answered", now - 2 * DAY, true),
            ("old-abandoned", now - 2 * DAY, false),
            ("recent-answered", now - HOUR, true),
            ("recent-running", now - 60_000, false),
        ] {
            let (status, body) = if answered { (Some(200i64), Some("{}".to_owned())) } else { (None, None) };
            exec(
                &conn,
                "INSERT INTO idempotency_claims (user_id, route, idem_key, request_hash, task_id, response_status, \
                 response_body, created_at) VALUES ('usr_x', 'chat.completions', $1, 'h', NULL, $2, $3, $4)",
                vec![key.into(), status.into(), body.into(), at.into()],
            )
            .await;
        }
        for (id, at) in [("resp_old", now - 40 * DAY), ("resp_recent", now - DAY)] {
            exec(
                &conn,
                "INSERT INTO native_responses (response_id, user_id, task_id, created_at) VALUES ($1, 'usr_x', 't', $2)",
                vec![id.into(), at.into()],
            )
            .await;
        }
    });
    let started = Instant::now();
    let env = [("GATEWAY_PRUNE_INTERVAL", "1s".to_owned()), ("GATEWAY_PRUNE_BATCH", "1".to_owned())];
    let (mut server, _addr) = serve_against(&sandbox, sim_addr, "serve-prune", &env);
    let claims = "SELECT idem_key FROM idempotency_claims ORDER BY idem_key";
    let responses = "SELECT response_id FROM native_responses ORDER BY response_id";
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    loop {
        let (left, owners) = rt.block_on(async { (ids(&conn, claims).await, ids(&conn, responses).await) });
        if left == ["recent-answered", "recent-running"] && owners == ["resp_recent"] {
            break;
        }
        assert!(Instant::now() < deadline, "{db}: not pruned in time: claims {left:?}, responses {owners:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("{db}: old rows pruned by the running server {:.1} s after its start", started.elapsed().as_secs_f64());
    terminate(&mut server.0);
    let log = std::fs::read_to_string(sandbox.dir.join("serve-prune.err")).unwrap_or_default();
    assert!(log.contains("pruned old rows"), "{db}: the pass is logged: {log}");
    rt.block_on(conn.close()).ok();
}

/// The overview's balance of the key's user, as text.
fn balance(addr: &str, key: &str) -> String {
    let (status, overview) = http_get(addr, "/api/v1/overview", Some(key));
    assert_eq!(status, 200, "{overview}");
    overview["user"]["balance_usd"].as_str().expect("balance_usd").to_owned()
}

#[test]
fn upstream_refusals_and_failures_tell_a_stranger_nothing_of_our_network() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim_addr, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, db) = sandbox(&rt);
    let (_user, key) = super::common::account(&sandbox, "10", "language:create,overview:read");

    // The upstream refuses the caller's request with 400: the caller's 400, its reason, a refund.
    let (mut server, addr) = serve_against(&sandbox, sim_addr, "serve-refusals", &[]);
    let before = balance(&addr, &key);
    let no_input = json!({"model": "LangA-V4-flash", "max_output_tokens": 16});
    let bad_chat =
        json!({"model": "LangA-V4-flash", "messages": [{"role": "user", "content": "x"}], "sim_fault": "status_400"});
    for (path, body) in [("/v1/responses", &no_input), ("/api/v1/chat/completions", &bad_chat)] {
        let (status, answer) = http_request(&addr, "POST", path, Some(&key), Some(body));
        println!("{db}: {path} refused upstream: {status} {answer}");
        assert_eq!(status, 400, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "invalid_request", "{path}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("the upstream refused the request: "), "{path}: {message}");
        assert!(message.contains("refunded"), "{path}: {message}");
    }
    let (_, answer) = http_request(&addr, "POST", "/v1/responses", Some(&key), Some(&no_input));
    assert!(answer["error"]["message"].as_str().is_some_and(|m| m.contains("input")), "the reason names the field");
    assert_eq!(balance(&addr, &key), before, "{db}: every refused call was refunded");
    terminate(&mut server.0);

    // Our own key refused (401): a 502 that passes nothing of the upstream's answer on.
    let env = [("GATEWAY_UPSTREAM_API_KEY", String::new())];
    let (mut server, addr) = serve_against(&sandbox, sim_addr, "serve-no-key", &env);
    let chat = json!({"model": "LangA-V4-flash", "messages": [{"role": "user", "content": "x"}], "max_tokens": 8});
    let (status, answer) = http_request(&addr, "POST", "/api/v1/chat/completions", Some(&key), Some(&chat));
    println!("{db}: upstream 401: {status} {answer}");
    assert_eq!((status, answer["error"]["code"].as_str()), (502, Some("upstream_request_failed")), "{answer}");
    assert!(answer["error"]["message"].as_str().is_some_and(|m| m.contains("401") && !m.contains("{")), "{answer}");
    assert_eq!(balance(&addr, &key), before, "{db}: refunded");
    terminate(&mut server.0);

    // An unreachable upstream: a 502 without its address; the log keeps it for the operator.
    let env = [("GATEWAY_UPSTREAM_URL", "http://127.0.0.1:1/private-base/api/v3".to_owned())];
    let (mut server, addr) = serve_against(&sandbox, sim_addr, "serve-unreachable", &env);
    let (status, answer) = http_request(&addr, "POST", "/api/v1/chat/completions", Some(&key), Some(&chat));
    println!("{db}: unreachable upstream: {status} {answer}");
    assert_eq!((status, answer["error"]["code"].as_str()), (502, Some("upstream_request_failed")), "{answer}");
    let text = answer.to_string();
    for secret in ["127.0.0.1", "private-base", "http://"] {
        assert!(!text.contains(secret), "{db}: {secret} in {text}");
    }
    assert_eq!(balance(&addr, &key), before, "{db}: refunded");
    terminate(&mut server.0);
    let log = std::fs::read_to_string(sandbox.dir.join("serve-unreachable.err")).unwrap_or_default();
    assert!(log.contains("127.0.0.1:1/private-base"), "{db}: the log names the upstream: {log}");
}

#[test]
fn metrics_require_the_bearer_token_when_one_is_set() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim_addr, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let sandbox = Sandbox::new();
    let token = "metrics-token-0123456789";
    let env = [("GATEWAY_METRICS_TOKEN", token.to_owned())];
    let (mut server, addr) = serve_against(&sandbox, sim_addr, "serve-metrics-token", &env);
    for presented in [None, Some("wrong-token"), Some("metrics-token-012345678"), Some("sk-gw-anything")] {
        let (status, body) = http_get(&addr, "/metrics", presented);
        assert_eq!(status, 401, "{presented:?}: {body}");
        assert_eq!(body["error"]["code"], "invalid_api_key", "{presented:?}: the error envelope: {body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    let (status, _) = http_get(&addr, "/metrics", Some(token));
    assert_eq!(status, 200, "the token opens /metrics");
    assert_eq!(http_get(&addr, "/healthz", None).0, 200, "other open routes stay open");
    terminate(&mut server.0);
    let log = std::fs::read_to_string(sandbox.dir.join("serve-metrics-token.err")).unwrap_or_default();
    assert!(!log.contains(token), "the token never reaches the log");

    let (mut server, addr) = serve_against(&sandbox, sim_addr, "serve-metrics-open", &[]);
    assert_eq!(http_get(&addr, "/metrics", None).0, 200, "without a token /metrics is open, as before");
    terminate(&mut server.0);
    println!("/metrics: 401 without the token when GATEWAY_METRICS_TOKEN is set, 200 with it; 200 when unset");
}

/// Starts `serve` (with `args`) and returns its stdout lines up to the address line, and the server.
fn start(sandbox: &Sandbox, args: &[&str], name: &str) -> (super::common::Running, Vec<String>) {
    let mut command = sandbox.command(args);
    command
        .env("GATEWAY_LISTEN", "127.0.0.1:0")
        .env("GATEWAY_MEDIA_DIR", sandbox.dir.join("media"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(sandbox.dir.join(format!("{name}.err"))).expect("stderr file"));
    let mut server = super::common::Running(command.spawn().expect("spawn gateway serve"));
    let rx = stdout_lines(&mut server.0);
    let lines = lines_until(&rx, |l| l.contains("http://127.0.0.1:"), COMMAND_TIMEOUT);
    std::thread::spawn(move || while rx.recv().is_ok() {});
    (server, lines)
}

#[test]
fn serve_creates_a_funded_demo_user_on_postgres_only_when_asked() {
    // SQLite's first run is unchanged: the demo key is printed.
    let local = Sandbox::new();
    let (mut server, lines) = start(&local, &["serve"], "serve-sqlite");
    assert!(lines.last().is_some_and(|l| l.starts_with("Try:") && l.contains("sk-gw-")), "SQLite: {lines:?}");
    terminate(&mut server.0);

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, db) = sandbox(&rt);
    if db != "postgres" {
        println!("demo user: SQLite only (TEST_DATABASE_URL is not set)");
        return;
    }
    let (mut server, lines) = start(&sandbox, &["serve"], "serve-pg");
    let printed = lines.join("\n");
    assert!(!printed.contains("sk-gw-"), "PostgreSQL: no demo key without --demo: {printed}");
    assert!(printed.contains("No users yet") && printed.contains("--demo"), "says how to go on: {printed}");
    terminate(&mut server.0);
    let users = rt.block_on(async {
        let store = store::Store::open(&sandbox.database_url()).await.expect("open the store");
        let n = domain::ports::AccountStore::count_users(&store).await.expect("count users");
        store.close().await.ok();
        n
    });
    assert_eq!(users, 0, "PostgreSQL: no user was created");

    let (mut server, lines) = start(&sandbox, &["serve", "--demo"], "serve-pg-demo");
    let try_line = lines.last().expect("the Try: line");
    assert!(try_line.starts_with("Try:"), "--demo prints the demo key: {lines:?}");
    let key = try_line.split("Bearer ").nth(1).map(|k| k.trim_end_matches('\'')).expect("a key").to_owned();
    let addr = address_in(try_line);
    assert_eq!(http_get(&addr, "/api/v1/models", Some(&key)).0, 200, "the demo key works");
    terminate(&mut server.0);
    println!("demo user: SQLite first run prints a key; PostgreSQL only with serve --demo");
}
