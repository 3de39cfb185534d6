//! The management API over HTTP (issue 23): usage and ledger from real calls, a caller's own keys
//! and webhook secret, and the operator routes with their audit trail; scopes, another user's ids
//! (404) and the edges of every page and range. SQLite always, PostgreSQL when
//! `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use std::time::Duration;

use common::{Env, Server, databases, unique};
use domain::{Clock, Scope, UsdAmount, UtcDay};
use http::Method;
use serde_json::{Value, json};

const MODEL: &str = "LangB-2.0-pro";

fn chat() -> Value {
    json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": unique("Say something about ")}],
        "max_tokens": 100,
        "thinking": {"type": "disabled"},
    })
}

fn usd(v: &Value) -> UsdAmount {
    UsdAmount::parse_decimal(v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))).expect("USD")
}

/// An admin user with a key carrying `scopes`.

#[tokio::test]
async fn usage_and_the_ledger_follow_settled_calls() {
    for db in databases() {
        let env = Env::new(&db, "10", Duration::from_secs(5), &[Scope::LanguageCreate, Scope::OverviewRead]).await;
        let ctx = |what: &str| env.ctx(what);
        let call = env.post("/api/v1/chat/completions", &chat()).await;
        assert_eq!(call.status, 200, "{}", ctx("chat"));
        let charge = usd(&call.json["svc"]["billing"]["actual_amount"]);
        assert!(charge.micros() > 0, "{}", ctx("the call cost something"));

        let today = UtcDay::of(domain::SystemClock.now()).to_string();
        let days = env.server.get("/api/v1/usage", Some(&env.key)).await;
        assert_eq!(days.status, 200, "{}: {}", ctx("usage"), days.json);
        let data = days.json["data"].as_array().expect("data");
        assert_eq!(data.len(), 30, "{}", ctx("every day of the default range, zero days too"));
        assert_eq!(data[29]["period"], today.as_str(), "{}", ctx("the range ends today"));
        assert_eq!(usd(&data[29]["spent_usd"]), charge, "{}", ctx("today's spend is the call's charge"));
        assert_eq!(data[29]["calls"], 1, "{}", ctx("one call"));
        assert_eq!(
            data[29]["models"],
            json!([{"model": MODEL, "spent_usd": charge.to_string(),
            "spent_microusd": charge.micros(), "calls": 1}]),
            "{}",
            ctx("today by model")
        );
        assert_eq!(data[0]["models"], json!([]), "{}", ctx("no model on a day without calls"));
        assert_eq!(usd(&data[0]["spent_usd"]), UsdAmount::ZERO, "{}", ctx("a day without calls is zero"));
        assert_eq!(usd(&days.json["total_usd"]), charge, "{}", ctx("the total"));

        let models = env.server.get("/api/v1/usage?group_by=model", Some(&env.key)).await;
        assert_eq!(
            models.json["data"],
            json!([{"model": MODEL, "spent_usd": charge.to_string(),
            "spent_microusd": charge.micros(), "calls": 1}]),
            "{}",
            ctx("by model")
        );

        // The range's edges: 366 days is the most, one more is refused; from after to is refused.
        let r = env.server.get("/api/v1/usage?from=2025-01-01&to=2026-01-01", Some(&env.key)).await;
        assert_eq!((r.status, r.json["data"].as_array().map(Vec::len)), (200, Some(366)), "{}", ctx("366 days"));
        for bad in [
            "/api/v1/usage?from=2024-12-31&to=2026-01-01",
            "/api/v1/usage?from=2026-01-02&to=2026-01-01",
            "/api/v1/usage?group_by=week",
            "/api/v1/usage?from=2026-02-30",
            "/api/v1/usage?page=1",
        ] {
            env.server.get(bad, Some(&env.key)).await.assert_error(400, "invalid_request", &ctx(bad));
        }

        // The ledger, page by page: the opening top-up, the call's hold and its settlement, and
        // 20 more top-ups make 23 entries, so two pages of 20.
        for i in 0..20 {
            env.server.gateway.topup(&env.user.id, UsdAmount::from_micros(1), &format!("t{i}")).await.expect("top-up");
        }
        let first = env.server.get("/api/v1/ledger", Some(&env.key)).await;
        assert_eq!(first.status, 200, "{}", ctx("ledger"));
        assert_eq!(first.json["pagination"], json!({"page": 1, "page_size": 20, "total": 23, "total_pages": 2}));
        assert_eq!(first.json["data"][0]["description"], "t19", "{}", ctx("newest first"));
        let second = env.server.get("/api/v1/ledger?page=2", Some(&env.key)).await;
        assert_eq!(second.json["data"].as_array().map(Vec::len), Some(3), "{}", ctx("the last page's rest"));
        let past = env.server.get("/api/v1/ledger?page=3&page_size=100", Some(&env.key)).await;
        assert_eq!(
            (past.status, past.json["data"].as_array().map(Vec::len)),
            (200, Some(0)),
            "{}",
            ctx("past the end")
        );
        for bad in ["/api/v1/ledger?page=0", "/api/v1/ledger?page_size=10", "/api/v1/ledger?status=x"] {
            env.server.get(bad, Some(&env.key)).await.assert_error(400, "invalid_request", &ctx(bad));
        }
        let sum: i64 = [first, second]
            .iter()
            .flat_map(|p| p.json["data"].as_array().cloned().unwrap_or_default())
            .map(|e| e["amount_microusd"].as_i64().expect("amount"))
            .sum();
        assert_eq!(UsdAmount::from_micros(sum), env.balance().await, "{}", ctx("the pages sum to the balance"));

        // Another user sees nothing of this one's spend.
        let other = env.server.user("1").await;
        let other_key = env.server.key(&other.id, &[Scope::OverviewRead]).await.secret;
        let theirs = env.server.get("/api/v1/usage", Some(&other_key)).await;
        assert_eq!(usd(&theirs.json["total_usd"]), UsdAmount::ZERO, "{}", ctx("another user's usage"));
        // Scope: a key without overview:read is refused.
        let chat_only = env.server.key(&env.user.id, &[Scope::LanguageCreate]).await.secret;
        for path in ["/api/v1/usage", "/api/v1/ledger"] {
            env.server.get(path, Some(&chat_only)).await.assert_error(401, "invalid_api_key", &ctx(path));
        }
    }
}

#[tokio::test]
async fn a_caller_manages_its_own_keys_and_webhook_secret() {
    for db in databases() {
        let server = Server::start(&db).await;
        let label = server.label;
        let user = server.user("1").await;
        let manager = server.key(&user.id, &[Scope::KeysManage, Scope::OverviewRead]).await.secret;

        let made = server
            .send_json(
                Method::POST,
                "/api/v1/keys",
                Some(&manager),
                &json!({"name": "ci", "scopes": ["overview:read"]}),
            )
            .await;
        assert_eq!(made.status, 201, "{label}: {}", made.json);
        let secret = made.json["secret"].as_str().expect("secret").to_owned();
        let id = made.json["id"].as_str().expect("id").to_owned();
        assert_eq!(made.json["scopes"], json!(["overview:read"]), "{label}");
        assert_eq!(server.get("/api/v1/overview", Some(&secret)).await.status, 200, "{label}: the new key works");
        let listed = server.get("/api/v1/keys", Some(&manager)).await;
        assert!(
            listed.raw.len() > 10 && !String::from_utf8_lossy(&listed.raw).contains(&secret),
            "{label}: never listed"
        );
        // It lacks keys:manage, so it cannot make keys itself.
        server
            .send_json(Method::POST, "/api/v1/keys", Some(&secret), &json!({"name": "x", "scopes": ["overview:read"]}))
            .await
            .assert_error(401, "invalid_api_key", label);
        // A key never grants a scope its creator's key lacks; bad bodies are 400.
        for (what, body) in [
            ("a scope the caller lacks", json!({"name": "x", "scopes": ["language:create"]})),
            ("an unknown scope", json!({"name": "x", "scopes": ["root"]})),
            ("no scope", json!({"name": "x", "scopes": []})),
            ("no name", json!({"name": "", "scopes": ["overview:read"]})),
            ("a name of 101 characters", json!({"name": "n".repeat(101), "scopes": ["overview:read"]})),
            ("an unknown field", json!({"name": "x", "scopes": ["overview:read"], "burst": 5})),
        ] {
            server.send_json(Method::POST, "/api/v1/keys", Some(&manager), &body).await.assert_error(
                400,
                "invalid_request",
                &format!("{label}: {what}"),
            );
        }
        let longest = json!({"name": "n".repeat(100), "scopes": ["overview:read", "keys:manage"]});
        assert_eq!(
            server.send_json(Method::POST, "/api/v1/keys", Some(&manager), &longest).await.status,
            201,
            "{label}"
        );

        // Another user's key is 404, like a missing one; the own key is revoked and then refused.
        let other = server.user("1").await;
        let theirs = server.key(&other.id, &[Scope::OverviewRead]).await;
        for missing in [theirs.key.id.as_str(), "key_nope"] {
            let path = format!("/api/v1/keys/{missing}");
            server
                .request(Method::DELETE, &path, &[("authorization", &format!("Bearer {manager}"))])
                .await
                .assert_error(404, "not_found", label);
        }
        assert_eq!(server.get("/api/v1/overview", Some(&theirs.secret)).await.status, 200, "{label}: untouched");
        let revoke = |key: String, by: String| {
            let path = format!("/api/v1/keys/{key}");
            let server = &server;
            async move { server.request(Method::DELETE, &path, &[("authorization", &format!("Bearer {by}"))]).await }
        };
        let revoked = revoke(id.clone(), manager.clone()).await;
        assert_eq!(revoked.status, 200, "{label}: {}", revoked.json);
        assert!(revoked.json["revoked_at"].is_string(), "{label}");
        server.get("/api/v1/overview", Some(&secret)).await.assert_error(401, "invalid_api_key", label);

        // The webhook secret: new each time, shown once.
        let empty = json!({});
        let rotate = || server.send_json(Method::POST, "/api/v1/webhook-secret", Some(&manager), &empty);
        let (a, b) = (rotate().await, rotate().await);
        let (a, b) = (a.json["webhook_secret"].as_str().unwrap_or(""), b.json["webhook_secret"].as_str().unwrap_or(""));
        assert!(a.starts_with("whsec_") && b.starts_with("whsec_") && a != b, "{label}: {a} {b}");

        // Revoking the key in use is allowed and ends it.
        let own_id = server
            .gateway
            .my_keys(&server.gateway.authenticate(Some(&manager), Scope::KeysManage, None).await.expect("auth"))
            .await
            .expect("keys")
            .into_iter()
            .find(|k| k.key.revoked_at.is_none() && k.key.scopes.contains(&Scope::OverviewRead) && k.key.name == "test")
            .expect("the manager key")
            .key
            .id;
        assert_eq!(revoke(own_id.as_str().to_owned(), manager.clone()).await.status, 200, "{label}");
        server.get("/api/v1/overview", Some(&manager)).await.assert_error(401, "invalid_api_key", label);
    }
}

#[tokio::test]
async fn operators_manage_users_models_and_maintenance_and_every_change_is_audited() {
    for db in databases() {
        let server = Server::start(&db).await;
        let label = server.label;
        let (operator, key) = server.admin(&[Scope::Admin, Scope::OverviewRead]).await;
        let send = |method: Method, path: String, body: Value| {
            let (server, key) = (&server, key.clone());
            async move { server.send_json(method, &path, Some(&key), &body).await }
        };

        // Only an admin's key with the admin scope reaches the operator routes.
        let plain = server.user("1").await;
        let plain_key = server.key(&plain.id, &Scope::ALL).await.secret;
        let no_scope = server.key(&operator.id, &[Scope::OverviewRead]).await.secret;
        for who in [&plain_key, &no_scope] {
            server.get("/api/v1/admin/users", Some(who)).await.assert_error(401, "invalid_api_key", label);
        }

        let tag = unique("ann");
        let name = format!("{tag} <b>");
        let made = send(
            Method::POST,
            "/api/v1/admin/users".into(),
            json!({"name": name, "email": "ann@example.com", "balance": "1.5"}),
        )
        .await;
        assert_eq!(made.status, 201, "{label}: {}", made.json);
        let user_id = made.json["id"].as_str().expect("id").to_owned();
        assert!(made.json["webhook_secret"].as_str().is_some_and(|s| s.starts_with("whsec_")), "{label}");
        assert_eq!(made.json["balance_usd"], "1.500000", "{label}");
        let found = server.get(&format!("/api/v1/admin/users?q={}", tag.to_uppercase()), Some(&key)).await;
        assert!(
            found.json["data"].as_array().is_some_and(|d| d.iter().any(|u| u["id"] == user_id.as_str())),
            "{label}: search"
        );
        let none = server.get("/api/v1/admin/users?q=%25nobody%25", Some(&key)).await;
        assert_eq!(none.json["pagination"]["total"], 0, "{label}: a wildcard is literal");

        let user_key = server.key(&domain::UserId(user_id.clone()), &[Scope::OverviewRead]).await.secret;
        let topup = send(
            Method::POST,
            format!("/api/v1/admin/users/{user_id}/topup"),
            json!({"amount": "2.25", "note": "welcome"}),
        )
        .await;
        assert_eq!(topup.status, 200, "{label}: {}", topup.json);
        assert_eq!(topup.json["balance_after"], "3.750000", "{label}");
        let seen = server.get("/api/v1/overview", Some(&user_key)).await;
        assert_eq!(seen.json["user"]["balance_usd"], "3.750000", "{label}: the user sees the top-up");
        for amount in ["0", "-1", "abc", "0.0000001"] {
            send(Method::POST, format!("/api/v1/admin/users/{user_id}/topup"), json!({"amount": amount}))
                .await
                .assert_error(400, "invalid_request", &format!("{label}: amount {amount}"));
        }
        send(Method::POST, "/api/v1/admin/users/usr_nope/topup".into(), json!({"amount": "1"})).await.assert_error(
            404,
            "not_found",
            label,
        );

        // Disable: every key refused, with a message; enable again.
        let off = send(Method::PATCH, format!("/api/v1/admin/users/{user_id}"), json!({"disabled": true})).await;
        assert_eq!((off.status, &off.json["disabled"]), (200, &json!(true)), "{label}: {}", off.json);
        let refused = server.get("/api/v1/overview", Some(&user_key)).await;
        refused.assert_error(401, "invalid_api_key", label);
        assert!(refused.json["error"]["message"].as_str().is_some_and(|m| m.contains("disabled")), "{label}");
        send(
            Method::PATCH,
            format!("/api/v1/admin/users/{user_id}"),
            json!({"disabled": false, "concurrency_limit": 100000}),
        )
        .await;
        assert_eq!(server.get("/api/v1/overview", Some(&user_key)).await.status, 200, "{label}: enabled again");
        for bad in [
            json!({}),
            json!({"concurrency_limit": 0}),
            json!({"concurrency_limit": 100001}),
            json!({"disabled": "yes"}),
        ] {
            send(Method::PATCH, format!("/api/v1/admin/users/{user_id}"), bad.clone()).await.assert_error(
                400,
                "invalid_request",
                &format!("{label}: {bad}"),
            );
        }
        let detail = server.get(&format!("/api/v1/admin/users/{user_id}"), Some(&key)).await;
        assert_eq!(detail.json["concurrency_limit"], 100000, "{label}");
        assert_eq!(detail.json["keys"].as_array().map(Vec::len), Some(1), "{label}: its key");
        server.get("/api/v1/admin/users/usr_nope", Some(&key)).await.assert_error(404, "not_found", label);

        // Models, prices and maintenance.
        let models = server.get("/api/v1/admin/models", Some(&key)).await;
        assert!(models.json["data"].as_array().is_some_and(|m| m.len() >= 15), "{label}: {}", models.json);
        let off = send(Method::PATCH, format!("/api/v1/admin/models/{MODEL}"), json!({"enabled": false})).await;
        assert_eq!(off.json["enabled"], false, "{label}: {}", off.json);
        let listed = server.get("/api/v1/models", Some(&plain_key)).await;
        assert!(
            !listed.raw.windows(MODEL.len()).any(|w| w == MODEL.as_bytes()),
            "{label}: a disabled model is not listed"
        );
        send(Method::PATCH, format!("/api/v1/admin/models/{MODEL}"), json!({"enabled": true})).await;
        send(Method::PATCH, "/api/v1/admin/models/NoSuch-1".into(), json!({"enabled": true})).await.assert_error(
            404,
            "not_found",
            label,
        );
        let before = models.json["data"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["model"] == MODEL))
            .cloned()
            .expect("model");
        let price =
            send(Method::POST, format!("/api/v1/admin/models/{MODEL}/pricing"), before["pricing"].clone()).await;
        assert_eq!(price.status, 201, "{label}: {}", price.json);
        assert_eq!(price.json["pricing_version"], before["pricing_version"].as_i64().unwrap_or(0) + 1, "{label}");
        send(Method::POST, format!("/api/v1/admin/models/{MODEL}/pricing"), json!({"input": 5})).await.assert_error(
            400,
            "invalid_request",
            label,
        );
        let on = send(Method::PUT, "/api/v1/admin/maintenance".into(), json!({"enabled": true})).await;
        assert_eq!(on.json, json!({"enabled": true}), "{label}");
        assert_eq!(server.get("/api/v1/admin/maintenance", Some(&key)).await.json, json!({"enabled": true}), "{label}");
        send(Method::PUT, "/api/v1/admin/maintenance".into(), json!({"enabled": false})).await;

        // The audit trail: every change above, newest first, with who and the states.
        let audit = server.get("/api/v1/admin/audit?page_size=100", Some(&key)).await;
        let actions: Vec<&str> =
            audit.json["data"].as_array().expect("data").iter().filter_map(|e| e["action"].as_str()).collect();
        assert_eq!(
            actions,
            [
                "maintenance",
                "maintenance",
                "model.price",
                "model.set",
                "model.set",
                "user.change",
                "user.change",
                "user.topup",
                "user.create"
            ],
            "{label}: {}",
            audit.json
        );
        let topped = &audit.json["data"][7];
        assert_eq!((&topped["actor"], &topped["target"]), (&json!(operator.id.as_str()), &json!(user_id)), "{label}");
        assert_eq!(topped["before"]["balance_usd"], "1.500000", "{label}");
        assert_eq!(topped["after"]["balance_usd"], "3.750000", "{label}");
        assert!(topped["actor_key"].as_str().is_some_and(|k| k.starts_with("key_")), "{label}");
        assert!(!audit.raw.windows(6).any(|w| w == b"whsec_"), "{label}: no secret in the audit trail");
    }
}

#[tokio::test]
async fn quotes_health_operator_keys_and_the_kind_filter() {
    for db in databases() {
        let env = Env::new(
            &db,
            "10",
            Duration::from_secs(5),
            &[Scope::LanguageCreate, Scope::ImageCreate, Scope::TaskRead, Scope::OverviewRead],
        )
        .await;
        let ctx = |what: &str| env.ctx(what);
        let send = |path: &'static str, body: Value| {
            let (server, key) = (&env.server, env.key.clone());
            async move { server.send_json(Method::POST, path, Some(&key), &body).await }
        };

        // A quote is the hold the call then takes, and holds nothing itself.
        let before = env.balance().await;
        let body = chat();
        let quote = send("/api/v1/chat/completions/quote", body.clone()).await;
        assert_eq!(quote.status, 200, "{}: {}", ctx("quote"), quote.json);
        assert_eq!(env.balance().await, before, "{}", ctx("a quote holds nothing"));
        assert_eq!(quote.json["pricing_version_id"], format!("{MODEL}@v1"), "{}", ctx("the price"));
        let call = env.post("/api/v1/chat/completions", &body).await;
        assert_eq!(call.json["svc"]["billing"]["estimated_amount"], quote.json["hold_usd"], "{}", ctx("the same hold"));
        let image = json!({"model": "Vendor-Imagegen-4.5", "prompt": "a fox"});
        let image_quote = send("/api/v1/images/generations/quote", image.clone()).await;
        assert!(usd(&image_quote.json["hold_usd"]).micros() > 0, "{}: {}", ctx("image quote"), image_quote.json);
        send("/api/v1/chat/completions/quote", json!({"model": MODEL})).await.assert_error(
            400,
            "invalid_request",
            &ctx("a quote checks the body"),
        );
        let reader = env.server.key(&env.user.id, &[Scope::OverviewRead]).await.secret;
        env.server
            .send_json(Method::POST, "/api/v1/chat/completions/quote", Some(&reader), &chat())
            .await
            .assert_error(401, "invalid_api_key", &ctx("a quote needs the call's scope"));
        assert_eq!(env.post("/api/v1/images/generations", &image).await.status, 200, "{}", ctx("image"));

        // The kind filter of the task list.
        let kinds = |kind: &'static str| {
            let (server, key) = (&env.server, env.key.clone());
            async move { server.get(&format!("/api/v1/tasks?kind={kind}"), Some(&key)).await }
        };
        let language = kinds("language").await;
        assert_eq!(language.json["pagination"]["total"], 1, "{}: {}", ctx("language tasks"), language.json);
        assert_eq!(kinds("image").await.json["pagination"]["total"], 1, "{}", ctx("image tasks"));
        assert_eq!(kinds("video").await.json["pagination"]["total"], 0, "{}", ctx("no video task"));
        kinds("chat").await.assert_error(400, "invalid_request", &ctx("an unknown kind"));

        // Operator keys for any user, revoked by any operator; health from the metrics' sources.
        let (_, admin_key) = env.server.admin(&[Scope::Admin]).await;
        let path = format!("/api/v1/admin/users/{}/keys", env.user.id);
        let body = json!({"name": "ops-made", "scopes": ["models:read", "admin"]});
        let made = env.server.send_json(Method::POST, &path, Some(&admin_key), &body).await;
        assert_eq!(made.status, 201, "{}: {}", ctx("operator key"), made.json);
        let secret = made.json["secret"].as_str().expect("secret").to_owned();
        assert_eq!(env.server.get("/api/v1/models", Some(&secret)).await.status, 200, "{}", ctx("it works"));
        env.server.get("/api/v1/admin/health", Some(&secret)).await.assert_error(
            401,
            "invalid_api_key",
            &ctx("the admin scope alone does not make a user an operator"),
        );
        let bad = json!({"name": "x", "scopes": ["root"]});
        env.server.send_json(Method::POST, &path, Some(&admin_key), &bad).await.assert_error(
            400,
            "invalid_request",
            &ctx("scope"),
        );
        let nobody =
            env.server.send_json(Method::POST, "/api/v1/admin/users/usr_nope/keys", Some(&admin_key), &body).await;
        nobody.assert_error(404, "not_found", &ctx("an unknown user"));
        let id = made.json["id"].as_str().expect("id");
        let auth = format!("Bearer {admin_key}");
        let revoked =
            env.server.request(Method::DELETE, &format!("/api/v1/admin/keys/{id}"), &[("authorization", &auth)]).await;
        assert_eq!(revoked.status, 200, "{}: {}", ctx("revoke"), revoked.json);
        env.server.get("/api/v1/models", Some(&secret)).await.assert_error(401, "invalid_api_key", &ctx("revoked"));
        // A key's limits: set, cleared, refused when both; a user's webhook secret; any task.
        let limits_path =
            format!("/api/v1/admin/keys/{}", env.server.key(&env.user.id, &[Scope::ModelsRead]).await.key.id);
        let patch = |body: Value| {
            let (server, path, key) = (&env.server, limits_path.clone(), admin_key.clone());
            async move { server.send_json(Method::PATCH, &path, Some(&key), &body).await }
        };
        let set = patch(json!({"rpm": 60, "budget_usd": "2.5", "budget_period": "day"})).await;
        assert_eq!(
            (set.status, &set.json["rpm"], &set.json["budget"]["period"]),
            (200, &json!(60), &json!("day")),
            "{}",
            ctx("set")
        );
        let cleared = patch(json!({"clear": ["rpm", "budget"]})).await;
        assert_eq!((&cleared.json["rpm"], &cleared.json["budget"]), (&Value::Null, &Value::Null), "{}", ctx("cleared"));
        for bad in [json!({}), json!({"rpm": 0}), json!({"rpm": 5, "clear": ["rpm"]}), json!({"models": "NoSuch-9"})] {
            patch(bad.clone()).await.assert_error(400, "invalid_request", &ctx(&bad.to_string()));
        }
        let rotated = env
            .server
            .send_json(
                Method::POST,
                &format!("/api/v1/admin/users/{}/webhook-secret", env.user.id),
                Some(&admin_key),
                &json!({}),
            )
            .await;
        assert!(rotated.json["webhook_secret"].as_str().is_some_and(|s| s.starts_with("whsec_")), "{}", ctx("rotated"));
        let task_id = call.json["svc"]["task_id"].as_str().expect("task id");
        let shown = env.server.get(&format!("/api/v1/admin/tasks/{task_id}"), Some(&admin_key)).await;
        assert_eq!((shown.status, &shown.json["id"]), (200, &json!(task_id)), "{}: {}", ctx("any task"), shown.json);
        let upstream = shown.json["upstream"].as_object().expect("the upstream record");
        assert!(["id", "endpoint", "attempts"].iter().all(|k| upstream.contains_key(*k)), "{}", ctx("its fields"));
        env.server.get("/api/v1/admin/tasks/task_nope", Some(&admin_key)).await.assert_error(
            404,
            "not_found",
            &ctx("no task"),
        );
        let audit = env.server.get("/api/v1/admin/audit?page_size=100", Some(&admin_key)).await;
        let actions: Vec<&str> =
            audit.json["data"].as_array().expect("data").iter().filter_map(|e| e["action"].as_str()).collect();
        assert_eq!(
            actions,
            ["user.webhook_secret", "key.limits", "key.limits", "key.revoke", "key.create"],
            "{}",
            ctx("audited")
        );

        let health = env.server.get("/api/v1/admin/health", Some(&admin_key)).await;
        assert_eq!(health.status, 200, "{}: {}", ctx("health"), health.json);
        assert_eq!(health.json["open_reservations"], 0, "{}", ctx("nothing held"));
        assert_eq!(health.json["calls_in_flight"], 0, "{}", ctx("no call in flight"));
        assert!(health.json["replicas"].is_array(), "{}", ctx("replicas"));
    }
}
