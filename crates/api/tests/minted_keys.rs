//! Keys minted through `POST /api/v1/keys` (issue 35): a key never grants more than the key that
//! made it. A limited key's child inherits every limit, cannot ask for more (400 naming the
//! limit), ends with its parent, and 50 children of a budgeted key spend at most that budget
//! together under 16-way load. Every self-service change is in the audit trail. SQLite always,
//! PostgreSQL when `TEST_DATABASE_URL` is set.

#![allow(clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Env, Server, databases, join_all, unique};
use domain::{
    Actor, BudgetPeriod, IpAllowList, KeyBudget, KeyLimits, KeyRates, ModelAllowList, Scope, Timestamp, UsdAmount,
};
use http::Method;
use serde_json::{Value, json};

fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": unique("hi ")}], "max_tokens": 20,
           "thinking": {"type": "disabled"}})
}

/// The limited key: expiry in an hour, one model, a $0.01 budget, 5 rpm, 1000 tpm,
/// 127.0.0.1 only.
fn limited(now: Timestamp) -> KeyLimits {
    KeyLimits {
        expires_at: Some(Timestamp(now.millis() + 3_600_000)),
        models: Some(ModelAllowList::parse("LangA-V4-flash").expect("list")),
        budget: Some(KeyBudget { limit: UsdAmount::from_micros(10_000), period: BudgetPeriod::Total }),
        rates: KeyRates { rpm: std::num::NonZeroU32::new(5), tpm: std::num::NonZeroU32::new(1_000) },
        allow_ips: Some(IpAllowList::parse("127.0.0.1/32").expect("list")),
    }
}

async fn mint(server: &Server, by: &str, body: &Value) -> common::Reply {
    server.send_json(Method::POST, "/api/v1/keys", Some(by), body).await
}

#[tokio::test]
async fn a_minted_key_never_grants_more_than_the_key_that_made_it() {
    for db in databases() {
        let env = Env::new(&db, "10", Duration::from_secs(5), &[Scope::ModelsRead]).await;
        let server = &env.server;
        let label = server.label;
        let now = Timestamp(i64::try_from(std::time::UNIX_EPOCH.elapsed().expect("time").as_millis()).expect("ms"));
        let parent = server.key_with(&env.user.id, &Scope::ALL, limited(now)).await;
        let (parent_secret, parent_id) = (parent.secret.clone(), parent.key.id.as_str().to_owned());

        // Nothing asked: the child carries every limit of its parent.
        let made =
            mint(server, &parent_secret, &json!({"name": "child", "scopes": ["language:create", "keys:manage"]})).await;
        assert_eq!(made.status, 201, "{label}: {}", made.json);
        let child = made.json["secret"].as_str().expect("secret").to_owned();
        let child_id = made.json["id"].as_str().expect("id").to_owned();
        assert_eq!(made.json["parent_id"], json!(parent_id), "{label}");
        assert_eq!(made.json["expires_at"], json!(Timestamp(now.millis() + 3_600_000).to_string()), "{label}");
        assert_eq!(made.json["models"], json!(["LangA-V4-flash"]), "{label}");
        assert_eq!((made.json["rpm"].clone(), made.json["tpm"].clone()), (json!(5), json!(1000)), "{label}");
        assert_eq!(made.json["allow_ips"], json!(["127.0.0.1/32"]), "{label}");
        assert_eq!(made.json["budget"], Value::Null, "{label}: no budget of its own");

        // It reaches only its parent's model; the other is refused before anything is held.
        let (start, entries) = env.assert_ledger("start").await;
        let refused = server.post_json("/api/v1/chat/completions", Some(&child), &chat("LangA-V4-pro")).await;
        refused.assert_error(401, "invalid_api_key", &format!("{label}: a model the parent may not use"));
        assert_eq!(env.assert_ledger("after the refusal").await, (start, entries), "{label}: nothing held");
        let served = server.post_json("/api/v1/chat/completions", Some(&child), &chat("LangA-V4-flash")).await;
        assert_eq!(served.status, 200, "{label}: {}", String::from_utf8_lossy(&served.raw));

        // The listing shows the parent and the budget the child's calls count against.
        let listed = server.get("/api/v1/keys", Some(&parent_secret)).await;
        let entry = listed.json["data"].as_array().and_then(|keys| keys.iter().find(|k| k["id"] == json!(child_id)));
        let entry = entry.unwrap_or_else(|| panic!("{label}: the child is listed: {}", listed.json));
        assert_eq!(entry["effective"]["budget_key_ids"], json!([parent_id]), "{label}: {entry}");
        assert_eq!(entry["effective"]["active"], json!(true), "{label}");
        let parent_entry = listed.json["data"].as_array().and_then(|k| k.iter().find(|k| k["id"] == json!(parent_id)));
        let spent = parent_entry.map(|p| p["budget"]["spent_usd"].clone()).unwrap_or_default();
        assert_ne!(spent, json!("0.000000"), "{label}: the child's call counted against the parent's budget");

        // Asking for more than the parent has is refused, naming the limit.
        let later = Timestamp(now.millis() + 7_200_000).to_string();
        for (field, extra) in [
            ("expires_at", json!({"expires_at": later})),
            ("models", json!({"models": "LangA-V4-pro"})),
            ("models", json!({"models": "language"})),
            ("models", json!({"models": ["LangA-V4-flash", "LangA-V4-pro"]})),
            ("models", json!({"models": []})),
            ("models", json!({"models": 7})),
            ("budget_usd", json!({"budget_usd": "1.00"})),
            ("rpm", json!({"rpm": 6})),
            ("tpm", json!({"tpm": 1001})),
            ("allow_ips", json!({"allow_ips": "0.0.0.0/0"})),
            ("allow_ips", json!({"allow_ips": "127.0.0.0/8"})),
            ("allow_ips", json!({"allow_ips": ["127.0.0.1", "10.0.0.1"]})),
        ] {
            let mut body = json!({"name": "greedy", "scopes": ["language:create"]});
            if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
                body.extend(extra.clone());
            }
            let reply = mint(server, &parent_secret, &body).await;
            reply.assert_error(400, "invalid_request", &format!("{label}: {extra}"));
            let message = reply.json["error"]["message"].as_str().unwrap_or_default();
            assert!(message.starts_with(field), "{label}: the message names {field}: {message}");
        }
        // Just inside each limit is granted.
        let inside = json!({"name": "inside", "scopes": ["language:create"], "expires_at": Timestamp(now.millis() + 3_600_000).to_string(),
            "models": ["LangA-V4-flash"], "budget_usd": "0.01", "rpm": 5, "tpm": 1000, "allow_ips": ["127.0.0.1"]});
        let reply = mint(server, &parent_secret, &inside).await;
        assert_eq!(reply.status, 201, "{label}: {}", reply.json);
        let inside_id = reply.json["id"].as_str().unwrap_or_default().to_owned();

        // A grandchild counts against both budgets; a child may not revoke a key it did not mint.
        let grand = mint(server, &child, &json!({"name": "grand", "scopes": ["language:create"]})).await;
        assert_eq!(grand.status, 201, "{label}: {}", grand.json);
        let grand_secret = grand.json["secret"].as_str().expect("secret").to_owned();
        let by_child = format!("Bearer {child}");
        let sibling = format!("/api/v1/keys/{inside_id}");
        let reply = server.request(Method::DELETE, &sibling, &[("authorization", &by_child)]).await;
        reply.assert_error(400, "invalid_request", &format!("{label}: a child revoking its sibling"));

        // Revoking the parent ends its whole line at once.
        let operator = server.gateway.operator(&Actor::Cli);
        operator.revoke_key(&parent.key.id).await.expect("revoke");
        for secret in [&child, &grand_secret] {
            let reply = server.post_json("/api/v1/chat/completions", Some(secret), &chat("LangA-V4-flash")).await;
            reply.assert_error(401, "invalid_api_key", &format!("{label}: a descendant of a revoked key"));
        }
        env.assert_ledger("end").await;
        env.server.stop().await;
    }
}

#[tokio::test]
async fn fifty_children_spend_at_most_their_parents_budget_under_sixteen_way_load() {
    for db in databases() {
        let env = Env::new(&db, "10", Duration::from_secs(5), &[Scope::LanguageCreate, Scope::TaskRead]).await;
        let server = &env.server;
        let label = server.label;
        // What one call costs, so that the budget lasts a few dozen calls.
        let probe = env.post("/api/v1/chat/completions", &chat("LangA-V4-flash")).await;
        assert_eq!(probe.status, 200, "{label}: {}", String::from_utf8_lossy(&probe.raw));
        let (balance_before, _) = env.assert_ledger("after the probe").await;
        let task = env.tasks().await.into_iter().next().expect("the probe's task");
        let per_call = task["billing"]["actual_amount_microusd"].as_i64().unwrap_or_default();
        assert!(per_call > 0, "{label}: the probe was charged");
        let budget = UsdAmount::from_micros(per_call * 40);
        let limits = KeyLimits {
            budget: Some(KeyBudget { limit: budget, period: BudgetPeriod::Total }),
            ..KeyLimits::default()
        };
        let parent = server.key_with(&env.user.id, &[Scope::LanguageCreate, Scope::KeysManage], limits).await;
        let mut children = Vec::new();
        for i in 0..50 {
            let made =
                mint(server, &parent.secret, &json!({"name": format!("c{i}"), "scopes": ["language:create"]})).await;
            assert_eq!(made.status, 201, "{label}: {}", made.json);
            children.push(made.json["secret"].as_str().expect("secret").to_owned());
        }
        let children = Arc::new(children);
        let next = Arc::new(AtomicUsize::new(0));
        let (served, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let workers = (0..16).map(|_| {
            let (children, next, served, refused) =
                (Arc::clone(&children), Arc::clone(&next), Arc::clone(&served), Arc::clone(&refused));
            async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= 160 {
                        break;
                    }
                    let key = &children[i % children.len()];
                    let reply = server.post_json("/api/v1/chat/completions", Some(key), &chat("LangA-V4-flash")).await;
                    match reply.status {
                        200 => served.fetch_add(1, Ordering::SeqCst),
                        402 => {
                            reply.assert_error(402, "key_budget_exceeded", label);
                            refused.fetch_add(1, Ordering::SeqCst)
                        }
                        other => panic!("{label}: {other} {}", String::from_utf8_lossy(&reply.raw)),
                    };
                }
            }
        });
        join_all(workers.collect()).await;
        let (served, refused) = (served.load(Ordering::SeqCst), refused.load(Ordering::SeqCst));
        let (balance, _) = env.assert_ledger("after the load").await;
        let charged = balance_before.micros() - balance.micros();
        println!(
            "{label}: 50 children, 16-way: {served} served, {refused} refused; charged {charged} of a {} micro-USD budget",
            budget.micros()
        );
        assert!(served > 0 && refused > 0, "{label}: the budget ran out during the run");
        assert!(charged <= budget.micros(), "{label}: charged {charged} > budget {}", budget.micros());
        let view = server
            .gateway
            .list_keys(&env.user.id)
            .await
            .expect("keys")
            .into_iter()
            .find(|k| k.key.id == parent.key.id)
            .expect("the parent");
        assert_eq!(view.budget.spend.spent.micros(), charged, "{label}: the parent's counter is what was charged");
        assert_eq!(view.budget.spend.held, UsdAmount::ZERO, "{label}: nothing left held");
        env.assert_books("end").await;
        env.server.stop().await;
    }
}

#[tokio::test]
async fn self_service_changes_to_keys_and_secrets_are_audited() {
    for db in databases() {
        let server = Server::start(&db).await;
        let label = server.label;
        let user = server.user("1").await;
        let manager = server.key(&user.id, &[Scope::KeysManage, Scope::OverviewRead]).await;
        let audit = || async {
            let page = server.gateway.operator(&Actor::Cli).audit(Vec::<(&str, &str)>::new()).await.expect("audit");
            page.items
        };
        let made = mint(&server, &manager.secret, &json!({"name": "ci", "scopes": ["overview:read"]})).await;
        assert_eq!(made.status, 201, "{label}: {}", made.json);
        let id = made.json["id"].as_str().expect("id").to_owned();
        let path = format!("/api/v1/keys/{id}");
        let bearer = format!("Bearer {}", manager.secret);
        assert_eq!(server.request(Method::DELETE, &path, &[("authorization", &bearer)]).await.status, 200, "{label}");
        let rotated = server.send_json(Method::POST, "/api/v1/webhook-secret", Some(&manager.secret), &json!({})).await;
        assert_eq!(rotated.status, 200, "{label}");
        let secret = rotated.json["webhook_secret"].as_str().expect("secret").to_owned();

        let rows = audit().await;
        let actions: Vec<(&str, &str)> = rows.iter().map(|r| (r.action.as_str(), r.target.as_str())).collect();
        assert_eq!(
            actions,
            vec![("user.webhook_secret", user.id.as_str()), ("key.revoke", &id), ("key.create", &id)],
            "{label}: newest first"
        );
        for row in &rows {
            assert_eq!(row.actor, user.id.as_str(), "{label}: the user acted");
            assert_eq!(row.actor_key.as_deref(), Some(manager.key.id.as_str()), "{label}: through its key");
            let text = format!("{:?} {:?}", row.before, row.after);
            assert!(!text.contains(&secret) && !text.contains("sk-gw-"), "{label}: no secret recorded: {text}");
        }
        let created = rows[2].after.as_deref().unwrap_or_default();
        assert!(created.contains(manager.key.id.as_str()), "{label}: the new key's parent is recorded: {created}");
        server.stop().await;
    }
}
