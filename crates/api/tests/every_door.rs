//! Every door holds the same line (issue 35): each operation of the OpenAPI document is matched to
//! its route, and each route is held to the effect declared with it (`api::Effect`). A route that
//! is `Audited` writes exactly one audit row with its action on success; a `Read` route writes
//! none; every route that takes a body-carrying method is `Audited` or `Billed` unless it is one
//! of the quotes. Removing a route's audit declaration, or adding a state-changing route without
//! one, fails this test. SQLite always, PostgreSQL when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use api::Effect;
use common::{Server, databases};
use domain::{Actor, Scope};
use http::Method;
use serde_json::{Value, json};

/// The POST routes that only read (they quote a hold, and hold nothing).
/// `POST`s that change nothing here: quotes, token counts, and a Checkout Session made at the
/// payment processor (the money comes with its signed event, through the ledger).
const READING_POSTS: [&str; 5] = [
    "/api/v1/topups/checkout",
    "/api/v1/chat/completions/quote",
    "/api/v1/images/generations/quote",
    "/v1/messages/count_tokens",
    "/v1/v1/messages/count_tokens",
];

async fn audit_rows(server: &Server) -> Vec<domain::AuditEntry> {
    let params = [("page_size", "100")];
    server.gateway.operator(&Actor::Cli).audit(params).await.expect("audit").items
}

#[tokio::test]
async fn every_route_is_held_to_its_declared_effect() {
    for db in databases() {
        let server = Server::start(&db).await;
        let label = server.label;
        let (admin, admin_key) = server.admin(&Scope::ALL).await;
        let customer = server.user("5").await;
        let spare = |scopes: &'static [Scope]| {
            let (server, user) = (&server, customer.id.clone());
            async move { server.key(&user, scopes).await.key.id.as_str().to_owned() }
        };
        let (own_key, any_key, limited_key) =
            (spare(&[Scope::ModelsRead]).await, spare(&[Scope::ModelsRead]).await, spare(&[Scope::ModelsRead]).await);
        // The admin's own spare key, revoked through the self-service door.
        let admin_spare = server.key(&admin.id, &[Scope::ModelsRead]).await.key.id.as_str().to_owned();
        // A voucher batch to revoke, and a code of another to redeem.
        let amount = domain::UsdAmount::from_micros(1_000);
        let ask = service::NewVouchers { amount, count: 1, expires_at: None, note: String::new() };
        let vouchers = server.gateway.operator(&Actor::Cli).create_vouchers(ask.clone()).await.expect("vouchers");
        let code = server.gateway.operator(&Actor::Cli).create_vouchers(ask).await.expect("vouchers").codes[0].clone();
        let _ = own_key;
        let user = customer.id.as_str().to_owned();
        let model = "LangA-V4-flash";
        let listed = server.get("/api/v1/admin/models", Some(&admin_key)).await;
        let models = listed.json["data"].as_array().cloned().unwrap_or_default();
        let sheet = models.iter().find(|m| m["model"] == json!(model)).map(|m| m["pricing"].clone());
        let sheet = sheet.unwrap_or_else(|| panic!("{label}: {model} in {}", listed.json));
        let chat = json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10});

        // A concrete request for every operation: the path, and the body for those that take one.
        let sample = |method: &str, template: &str| -> Option<(String, Option<Value>)> {
            let path = template
                .replace("{user_id}", &user)
                .replace("{model}", model)
                .replace("{task_id}", "task_missing")
                .replace("{id}", "task_missing")
                .replace("{key}", "u/t/0")
                .replace("{batch_id}", &vouchers.batch.id)
                .replace("{month}", "2026-01");
            let path = match (method, template) {
                ("delete", "/api/v1/keys/{key_id}") => path.replace("{key_id}", &admin_spare),
                ("delete", "/api/v1/admin/keys/{key_id}") => path.replace("{key_id}", &any_key),
                (_, _) => path.replace("{key_id}", &limited_key),
            };
            let body = match (method, template) {
                ("post", "/api/v1/keys") => json!({"name": "door", "scopes": ["models:read"]}),
                ("post", "/api/v1/admin/users") => json!({"name": "door", "email": "door@example.com"}),
                ("patch", "/api/v1/admin/users/{user_id}") => json!({"concurrency_limit": 9}),
                ("post", "/api/v1/admin/users/{user_id}/topup") => json!({"amount": "1.00"}),
                ("post", "/api/v1/admin/users/{user_id}/keys") => json!({"name": "door", "scopes": ["models:read"]}),
                ("patch", "/api/v1/admin/keys/{key_id}") => json!({"rpm": 7}),
                ("patch", "/api/v1/admin/models/{model}") => json!({"concurrency_limit": 12}),
                ("post", "/api/v1/admin/models/{model}/pricing") => sheet.clone(),
                ("put", "/api/v1/admin/maintenance") => json!({"enabled": false}),
                ("post", "/api/v1/webhook-secret" | "/api/v1/admin/users/{user_id}/webhook-secret") => json!({}),
                ("post", "/api/v1/chat/completions/quote") => chat.clone(),
                ("post", "/api/v1/admin/vouchers") => json!({"amount": "1", "count": 2}),
                ("post", "/api/v1/topups/checkout") => json!({"amount": "20"}),
                ("put", "/api/v1/alerts") => json!({"low_balance_usd": "1.00"}),
                ("post", "/api/v1/vouchers/redeem") => json!({"code": code}),
                ("post", "/v1/messages/count_tokens" | "/v1/v1/messages/count_tokens") => {
                    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
                }
                ("post", "/api/v1/images/generations/quote") => {
                    json!({"model": "Vendor-Imagegen-4.5", "prompt": "a fox"})
                }
                ("get" | "delete", _) => return Some((path, None)),
                _ => return None,
            };
            Some((path, Some(body)))
        };

        let doc = api::document();
        let mut walked = 0;
        for (template, item) in doc["paths"].as_object().expect("paths") {
            for (method, _) in item.as_object().expect("operations") {
                let verb: Method = method.to_uppercase().parse().expect("method");
                let concrete = template.replace(['{', '}'], "");
                let route = api::route(&verb, &concrete).unwrap_or_else(|e| panic!("{method} {template}: {e:?}"));
                let effect = route.effect;
                let ctx = format!("{label}: {method} {template} ({effect:?})");
                if verb != Method::GET && !READING_POSTS.contains(&template.as_str()) {
                    assert_ne!(effect, Effect::Read, "{ctx}: a route that may change state must declare it");
                }
                if effect == Effect::Billed {
                    // Money moves through the ledger; the billing suites hold those routes.
                    continue;
                }
                let Some((path, body)) = sample(method, template) else {
                    panic!("{ctx}: no sample request; add one so that this route is walked")
                };
                let before = audit_rows(&server).await.len();
                let reply = match body {
                    Some(body) => server.send_json(verb.clone(), &path, Some(&admin_key), &body).await,
                    None => {
                        let auth = format!("Bearer {admin_key}");
                        server.request(verb.clone(), &path, &[("authorization", &auth)]).await
                    }
                };
                let rows = audit_rows(&server).await;
                match effect {
                    Effect::Audited(action) => {
                        assert!(
                            (200..300).contains(&reply.status),
                            "{ctx}: the sample must succeed: {} {}",
                            reply.status,
                            String::from_utf8_lossy(&reply.raw)
                        );
                        assert_eq!(rows.len(), before + 1, "{ctx}: one audit row");
                        assert_eq!(rows[0].action, action, "{ctx}: the declared action");
                        assert_eq!(rows[0].actor, admin.id.as_str(), "{ctx}: who");
                        let text = format!("{:?}{:?}", rows[0].before, rows[0].after);
                        assert!(!text.contains("sk-gw-") && !text.contains("whsec_"), "{ctx}: no secret: {text}");
                    }
                    Effect::Read => assert_eq!(rows.len(), before, "{ctx}: a read writes no audit row"),
                    Effect::Billed => unreachable!("skipped above"),
                }
                walked += 1;
            }
        }
        assert!(walked >= 30, "{label}: walked {walked} operations");
        server.stop().await;
    }
}
