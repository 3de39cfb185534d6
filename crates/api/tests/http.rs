//! Integration tests of the HTTP edge: keys, the task list and detail, routing errors, request ids,
//! health and shutdown. The real server on `127.0.0.1:0` over real SQLite (and PostgreSQL when
//! `TEST_DATABASE_URL` is set), driven by a hyper HTTP/1.1 client. What the catalogue shows (models,
//! prices, the overview) is tested in `models.rs`.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::collections::BTreeSet;

use common::{Client, Server, assert_envelope, databases, is_date_time, is_usd_amount, task, unique};
use domain::{Scope, TaskStatus};
use http::Method;
use serde_json::{Value, json};

const MODELS: &str = "/api/v1/models";
const OVERVIEW: &str = "/api/v1/overview";
const TASKS: &str = "/api/v1/tasks";

#[tokio::test]
async fn bad_keys_get_invalid_api_key() {
    for db in databases() {
        let server = Server::start(&db).await;
        let ctx = server.label;
        let user = server.user("1").await;
        let good = server.key(&user.id, &[Scope::ModelsRead]).await;
        let tasks_only = server.key(&user.id, &[Scope::TaskRead]).await;
        let all_but_models: Vec<Scope> = Scope::ALL.into_iter().filter(|s| *s != Scope::ModelsRead).collect();
        let everything_else = server.key(&user.id, &all_but_models).await;

        let unknown = format!("Bearer {}", service::generate_secret().expect("randomness").secret);
        let truncated = format!("Bearer {}", &good.secret[..good.secret.len() - 1]);
        let no_scheme = good.secret.clone();
        let basic = format!("Basic {}", good.secret);
        let tasks_only_header = format!("Bearer {}", tasks_only.secret);
        let everything_else_header = format!("Bearer {}", everything_else.secret);
        let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
            ("missing Authorization", vec![]),
            ("empty Authorization", vec![("authorization", "")]),
            ("scheme only", vec![("authorization", "Bearer")]),
            ("scheme and blank", vec![("authorization", "Bearer    ")]),
            ("no scheme", vec![("authorization", no_scheme.as_str())]),
            ("wrong scheme", vec![("authorization", basic.as_str())]),
            ("garbage", vec![("authorization", "Bearer not-a-key")]),
            ("unknown key", vec![("authorization", unknown.as_str())]),
            ("truncated key", vec![("authorization", truncated.as_str())]),
            ("key without models:read", vec![("authorization", tasks_only_header.as_str())]),
            ("key with every scope but models:read", vec![("authorization", everything_else_header.as_str())]),
        ];
        for (what, headers) in &cases {
            let reply = server.request(Method::GET, MODELS, headers).await;
            reply.assert_error(401, "invalid_api_key", &format!("{ctx}: {what}"));
            assert!(reply.header("x-request-id").is_some(), "{ctx}: {what}: x-request-id");
        }

        // The scope is checked per operation, not just "any valid key".
        let models_only = server.key(&user.id, &[Scope::ModelsRead]).await;
        for path in [OVERVIEW, TASKS, "/api/v1/tasks/task_x"] {
            server.get(path, Some(&models_only.secret)).await.assert_error(
                401,
                "invalid_api_key",
                &format!("{ctx}: {path}"),
            );
        }

        // A revoked key stops working at once.
        let revocable = server.key(&user.id, &[Scope::ModelsRead]).await;
        assert_eq!(server.get(MODELS, Some(&revocable.secret)).await.status, 200, "{ctx}: key works before revocation");
        server.gateway.revoke_key(&revocable.key.id).await.expect("revoke");
        server.get(MODELS, Some(&revocable.secret)).await.assert_error(
            401,
            "invalid_api_key",
            &format!("{ctx}: revoked"),
        );
        // Revoking one key leaves the user's other keys alone.
        assert_eq!(server.get(MODELS, Some(&good.secret)).await.status, 200, "{ctx}: other key after revocation");
        server.stop().await;
    }
}

/// Checks one `Task` object against the interface.
fn assert_task_shape(t: &Value, context: &str) {
    for field in ["id", "user_id", "model", "provider", "created_at", "updated_at"] {
        assert!(t[field].is_string(), "{context}: task.{field} = {}", t[field]);
    }
    let kinds: BTreeSet<&str> = ["video", "image", "language", "audio"].into();
    assert!(kinds.contains(t["kind"].as_str().unwrap_or_default()), "{context}: kind {}", t["kind"]);
    let states: BTreeSet<&str> = TaskStatus::ALL.iter().map(|s| s.as_str()).collect();
    assert!(states.contains(t["status"].as_str().unwrap_or_default()), "{context}: status {}", t["status"]);
    assert!(is_date_time(t["created_at"].as_str().unwrap_or_default()), "{context}: created_at {}", t["created_at"]);
    assert!(is_date_time(t["updated_at"].as_str().unwrap_or_default()), "{context}: updated_at {}", t["updated_at"]);
    let completed = &t["completed_at"];
    assert!(completed.is_null() || completed.as_str().is_some_and(is_date_time), "{context}: completed_at {completed}");
    let billing = &t["billing"];
    assert_eq!(billing["currency"], "USD", "{context}: billing.currency");
    let billing_states: BTreeSet<&str> = ["reserved", "settled", "refunded", "unbilled"].into();
    assert!(billing_states.contains(billing["status"].as_str().unwrap_or_default()), "{context}: billing.status");
    assert!(billing["estimated_amount"].as_str().is_some_and(is_usd_amount), "{context}: estimated_amount");
    for nullable in ["actual_amount", "balance_after"] {
        let v = &billing[nullable];
        assert!(v.is_null() || v.as_str().is_some_and(is_usd_amount), "{context}: billing.{nullable} = {v}");
    }
}

/// `GET /api/v1/tasks?query` with `key`.
async fn list(server: &Server, key: &str, query: &str) -> common::Reply {
    let path = if query.is_empty() { TASKS.to_owned() } else { format!("{TASKS}?{query}") };
    server.get(&path, Some(key)).await
}

#[tokio::test]
async fn task_list_filters_pages_and_owners() {
    for db in databases() {
        let server = Server::start(&db).await;
        let ctx = server.label;
        let alice = server.user("1").await;
        let bob = server.user("1").await;
        let alice_key = server.key(&alice.id, &[Scope::TaskRead]).await;
        let bob_key = server.key(&bob.id, &[Scope::TaskRead]).await;

        let empty = list(&server, &alice_key.secret, "").await;
        assert_eq!(empty.status, 200, "{ctx}: {}", String::from_utf8_lossy(&empty.raw));
        assert_eq!(empty.json["object"], "list", "{ctx}");
        assert_eq!(empty.json["data"], json!([]), "{ctx}: no tasks yet");
        assert_eq!(
            empty.json["pagination"],
            json!({"page": 1, "page_size": 20, "total": 0, "total_pages": 0}),
            "{ctx}: empty pagination"
        );

        // 45 tasks of Alice cycling through the seven states, newest last; 3 of Bob.
        let base = domain::Clock::now(&domain::SystemClock).millis() - 1_000_000;
        let mut alice_tasks = Vec::new();
        for i in 0..45_i64 {
            let status = TaskStatus::ALL[usize::try_from(i).expect("small") % TaskStatus::ALL.len()];
            let t = task(&alice.id, status, base + i * 1000);
            alice_tasks.push((t.id.0.clone(), status));
            server.insert_task(t).await;
        }
        let mut bob_ids = BTreeSet::new();
        for i in 0..3_i64 {
            let t = task(&bob.id, TaskStatus::Queued, base + i * 1000 + 500);
            bob_ids.insert(t.id.0.clone());
            server.insert_task(t).await;
        }

        // Three pages of 20, 20 and 5, newest first, together exactly Alice's tasks.
        let mut seen = Vec::new();
        for (page, expected_len) in [(1, 20), (2, 20), (3, 5)] {
            let reply = list(&server, &alice_key.secret, &format!("page={page}&page_size=20")).await;
            assert_eq!(reply.status, 200, "{ctx}: page {page}");
            assert_eq!(
                reply.json["pagination"],
                json!({"page": page, "page_size": 20, "total": 45, "total_pages": 3}),
                "{ctx}: pagination of page {page}"
            );
            let data = reply.json["data"].as_array().expect("data");
            assert_eq!(data.len(), expected_len, "{ctx}: items on page {page}");
            for t in data {
                assert_task_shape(t, ctx);
                assert_eq!(t["user_id"], alice.id.as_str(), "{ctx}: only the caller's tasks");
                seen.push(t["id"].as_str().expect("id").to_owned());
            }
        }
        let newest_first: Vec<String> = alice_tasks.iter().rev().map(|(id, _)| id.clone()).collect();
        assert_eq!(seen, newest_first, "{ctx}: pages cover every task once, newest first");
        let default_page = list(&server, &alice_key.secret, "").await;
        assert_eq!(
            default_page.json["pagination"],
            json!({"page": 1, "page_size": 20, "total": 45, "total_pages": 3}),
            "{ctx}"
        );

        for size in [50, 100] {
            let reply = list(&server, &alice_key.secret, &format!("page_size={size}")).await;
            assert_eq!(reply.status, 200, "{ctx}: page_size {size}");
            assert_eq!(
                reply.json["pagination"],
                json!({"page": 1, "page_size": size, "total": 45, "total_pages": 1}),
                "{ctx}"
            );
            assert_eq!(reply.json["data"].as_array().map(Vec::len), Some(45), "{ctx}: page_size {size}");
        }

        // Status filters: the two groups and each single state.
        let count = |pred: &dyn Fn(TaskStatus) -> bool| alice_tasks.iter().filter(|(_, s)| pred(*s)).count();
        let mut filters: Vec<(String, usize, Vec<TaskStatus>)> = vec![
            ("running".into(), count(&|s| !s.is_terminal()), TaskStatus::RUNNING.to_vec()),
            ("completed".into(), count(&|s| s.is_terminal()), TaskStatus::TERMINAL.to_vec()),
        ];
        for state in TaskStatus::ALL {
            filters.push((state.as_str().into(), count(&|s| s == state), vec![state]));
        }
        for (filter, expected, allowed) in filters {
            let reply = list(&server, &alice_key.secret, &format!("status={filter}&page_size=100")).await;
            assert_eq!(reply.status, 200, "{ctx}: status={filter}");
            assert_eq!(reply.json["pagination"]["total"], expected, "{ctx}: total for status={filter}");
            let data = reply.json["data"].as_array().expect("data");
            assert_eq!(data.len(), expected, "{ctx}: items for status={filter}");
            let allowed: BTreeSet<&str> = allowed.iter().map(|s| s.as_str()).collect();
            for t in data {
                assert!(
                    allowed.contains(t["status"].as_str().unwrap_or_default()),
                    "{ctx}: status={filter} listed {}",
                    t["status"]
                );
            }
        }
        // 45 tasks over seven states: 21 running (3 per cycle of 7, plus the first 3 of the last cycle).
        let running = list(&server, &alice_key.secret, "status=running&page=2").await;
        assert_eq!(
            running.json["pagination"],
            json!({"page": 2, "page_size": 20, "total": 21, "total_pages": 2}),
            "{ctx}: totals follow the filter"
        );
        assert_eq!(running.json["data"].as_array().map(Vec::len), Some(1), "{ctx}: last page of running");
        // A page past the end is empty, up to the largest page number (whose offset no database
        // can bind).
        for page in ["3", "18446744073709551615"] {
            let past = list(&server, &alice_key.secret, &format!("status=running&page={page}&page_size=100")).await;
            assert_eq!(past.status, 200, "{ctx}: page {page}");
            assert_eq!(past.json["data"], json!([]), "{ctx}: page {page} is empty");
            assert_eq!(past.json["pagination"]["total"], 21, "{ctx}: page {page}");
        }

        // Bob sees his three only.
        let reply = list(&server, &bob_key.secret, "").await;
        assert_eq!(reply.json["pagination"]["total"], 3, "{ctx}: Bob's total");
        let ids: BTreeSet<String> = reply.json["data"]
            .as_array()
            .expect("data")
            .iter()
            .map(|t| t["id"].as_str().expect("id").to_owned())
            .collect();
        assert_eq!(ids, bob_ids, "{ctx}: Bob's tasks");

        // Refused queries.
        for bad in [
            "page_size=19",
            "page_size=21",
            "page_size=0",
            "page_size=101",
            "page_size=abc",
            "page_size=",
            "page_size=-20",
            "page_size=20.0",
            "page=0",
            "page=-1",
            "page=abc",
            "page=1.5",
            "page=",
            "status=done",
            "status=RUNNING",
            "status=",
            "limit=10",
            "page=1&page=2",
            "page=%zz",
        ] {
            let reply = list(&server, &alice_key.secret, bad).await;
            reply.assert_error(400, "invalid_request", &format!("{ctx}: ?{bad}"));
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn task_detail_is_visible_to_its_owner_only() {
    for db in databases() {
        let server = Server::start(&db).await;
        let ctx = server.label;
        let alice = server.user("1").await;
        let bob = server.user("1").await;
        let alice_key = server.key(&alice.id, &[Scope::TaskRead]).await;
        let bob_key = server.key(&bob.id, &[Scope::TaskRead]).await;
        let now = domain::Clock::now(&domain::SystemClock).millis();
        let mine = task(&alice.id, TaskStatus::Succeeded, now);
        let theirs = task(&bob.id, TaskStatus::Queued, now);
        let (mine_id, theirs_id) = (mine.id.0.clone(), theirs.id.0.clone());
        server.insert_task(mine).await;
        server.insert_task(theirs).await;

        let reply = server.get(&format!("{TASKS}/{mine_id}"), Some(&alice_key.secret)).await;
        assert_eq!(reply.status, 200, "{ctx}: {}", String::from_utf8_lossy(&reply.raw));
        let t = &reply.json;
        assert_task_shape(t, ctx);
        assert_eq!(t["id"], mine_id.as_str(), "{ctx}");
        assert_eq!(t["user_id"], alice.id.as_str(), "{ctx}");
        assert_eq!(t["model"], "videogen-2-0", "{ctx}");
        assert_eq!(t["kind"], "video", "{ctx}");
        assert_eq!(t["status"], "succeeded", "{ctx}");
        assert_eq!(t["provider"], "ark", "{ctx}");
        assert_eq!(t["prompt"], "a red fox running through snow", "{ctx}");
        assert_eq!(t["input_mode"], "text", "{ctx}");
        assert_eq!(t["duration"], 5, "{ctx}");
        assert_eq!(t["resolution"], "720p", "{ctx}");
        assert_eq!(t["ratio"], "16:9", "{ctx}");
        assert_eq!(t["generate_audio"], true, "{ctx}");
        assert_eq!(t["output_url"], "https://cdn.example.com/out.mp4", "{ctx}");
        assert_eq!(t["created_at"], domain::Timestamp(now).to_string(), "{ctx}");
        assert_eq!(t["completed_at"], domain::Timestamp(now).to_string(), "{ctx}");
        assert_eq!(t["billing"]["currency"], "USD", "{ctx}");
        assert_eq!(t["billing"]["status"], "unbilled", "{ctx}: a task without a reservation");
        assert_eq!(t["billing"]["pricing_version_id"], "videogen-2-0@v1", "{ctx}");

        // Another user's task is indistinguishable from a missing one.
        let missing = format!("{TASKS}/{}", unique("task_missing_"));
        server.get(&missing, Some(&alice_key.secret)).await.assert_error(
            404,
            "not_found",
            &format!("{ctx}: missing task"),
        );
        let foreign = format!("{TASKS}/{theirs_id}");
        server.get(&foreign, Some(&alice_key.secret)).await.assert_error(
            404,
            "not_found",
            &format!("{ctx}: Bob's task for Alice"),
        );
        assert_eq!(server.get(&foreign, Some(&bob_key.secret)).await.status, 200, "{ctx}: Bob reads his own task");
        // Authentication comes before lookup: no key is 401 even for an existing task.
        server.get(&format!("{TASKS}/{mine_id}"), None).await.assert_error(
            401,
            "invalid_api_key",
            &format!("{ctx}: no key"),
        );
        server.stop().await;
    }
}

#[tokio::test]
async fn routing_errors_request_ids_and_health() {
    for db in databases() {
        let server = Server::start(&db).await;
        let ctx = server.label;
        let user = server.user("1").await;
        let key = server.key(&user.id, &Scope::ALL).await;
        let auth = format!("Bearer {}", key.secret);

        let health = server.get("/healthz", None).await;
        assert_eq!(health.status, 200, "{ctx}: /healthz without a key");
        let ready = server.get("/readyz", None).await;
        assert_eq!(ready.status, 200, "{ctx}: /readyz without a key on a migrated database");
        assert_eq!(ready.json["status"], "ready", "{ctx}");

        for path in ["/api/v1/nope", "/", "/api/v2/models", "/api/v1/tasks/a/b", "/api/v1/modelsx"] {
            let reply = server.request(Method::GET, path, &[("authorization", auth.as_str())]).await;
            reply.assert_error(404, "not_found", &format!("{ctx}: GET {path}"));
        }
        for (method, path) in
            [(Method::POST, MODELS), (Method::DELETE, OVERVIEW), (Method::PUT, TASKS), (Method::POST, "/healthz")]
        {
            let reply = server.request(method.clone(), path, &[("authorization", auth.as_str())]).await;
            assert_eq!(reply.status, 405, "{ctx}: {method} {path}");
            assert_envelope(&reply.json, &format!("{ctx}: {method} {path}"));
            let allow = reply.header("allow").unwrap_or_else(|| panic!("{ctx}: {method} {path}: no Allow header"));
            assert!(allow.split(',').any(|m| m.trim() == "GET"), "{ctx}: Allow {allow:?}");
        }

        // Every response carries a request id; fresh ones differ, a plain client id is echoed.
        let mut ids = BTreeSet::new();
        let replies = [
            server.get("/healthz", None).await,
            server.get(MODELS, Some(&key.secret)).await,
            server.get(MODELS, None).await,
            server.get("/nope", None).await,
            server.request(Method::POST, MODELS, &[]).await,
            server.get(&format!("{TASKS}?page=0"), Some(&key.secret)).await,
        ];
        for reply in &replies {
            let id =
                reply.header("x-request-id").unwrap_or_else(|| panic!("{ctx}: {} without x-request-id", reply.status));
            assert!(!id.is_empty(), "{ctx}: empty request id");
            ids.insert(id.to_owned());
        }
        assert_eq!(ids.len(), replies.len(), "{ctx}: request ids are unique: {ids:?}");
        let echoed = server.request(Method::GET, "/healthz", &[("x-request-id", "client-id-123")]).await;
        assert_eq!(echoed.header("x-request-id"), Some("client-id-123"), "{ctx}: client request id kept");

        // Several requests on one keep-alive connection all work.
        let mut client = Client::connect(server.addr).await;
        for _ in 0..3 {
            assert_eq!(
                client.send(Method::GET, MODELS, &[("authorization", auth.as_str())], &[]).await.status,
                200,
                "{ctx}"
            );
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn shutdown_makes_serve_return_and_closes_idle_connections() {
    for db in databases() {
        let mut server = Server::start(&db).await;
        let ctx = server.label;
        let user = server.user("1").await;
        let key = server.key(&user.id, &[Scope::ModelsRead]).await;
        let auth = format!("Bearer {}", key.secret);

        // An idle keep-alive connection must not hold the server open.
        let mut idle = Client::connect(server.addr).await;
        assert_eq!(idle.send(Method::GET, MODELS, &[("authorization", auth.as_str())], &[]).await.status, 200, "{ctx}");

        server.trigger_shutdown();
        let started = std::time::Instant::now();
        server.wait_stopped().await;
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{ctx}: shutdown took {:?}", started.elapsed());
        assert!(idle.closed_by_server().await, "{ctx}: the idle connection was not closed");
    }
}
