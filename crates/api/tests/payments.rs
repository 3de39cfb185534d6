//! Integration tests of self-serve top-ups through Stripe Checkout: a local server plays Stripe's
//! documented API (it checks the form fields, the secret key and the idempotency header, and
//! answers a session), and events are signed exactly as Stripe documents (HMAC-SHA256 over
//! `"{t}.{body}"`). A paid session is credited once across replays, a second event and two
//! replicas racing; a bad signature, a stale timestamp, an unpaid session and another currency
//! credit nothing. The real server on `127.0.0.1:0`, SQLite and PostgreSQL.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use common::{Server, databases, join_all};
use domain::{LedgerKind, Scope, UsdAmount};
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{Value, json};
use sha2::Sha256;

const SECRET_KEY: &str = "sk_test_gateway";
const WEBHOOK_SECRET: &str = "whsec_test_gateway";
const HOOK: &str = "/api/v1/stripe/webhook";
const CHECKOUT: &str = "/api/v1/topups/checkout";

/// One request the fake Stripe saw: its form, `Authorization` and `Idempotency-Key`.
type StripeCall = (HashMap<String, String>, Option<String>, Option<String>);

/// What the fake Stripe saw.
#[derive(Default)]
struct StripeLog {
    calls: Mutex<Vec<StripeCall>>,
}

/// A local server playing `POST /v1/checkout/sessions`; its base URL and log.
async fn fake_stripe() -> (String, Arc<StripeLog>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let log = Arc::new(StripeLog::default());
    let shared = Arc::clone(&log);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let log = Arc::clone(&shared);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let log = Arc::clone(&log);
                    async move {
                        let header = |n: &str| req.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
                        let (auth, key) = (header("authorization"), header("idempotency-key"));
                        let path = req.uri().path().to_owned();
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let form: HashMap<String, String> =
                            url::form_urlencoded::parse(&body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
                        log.calls.lock().expect("log").push((form.clone(), auth.clone(), key));
                        let (status, answer) = if path != "/v1/checkout/sessions" {
                            (404, json!({"error": {"type": "invalid_request_error", "message": "no such path"}}))
                        } else if auth.as_deref() != Some(&format!("Bearer {SECRET_KEY}")) {
                            (401, json!({"error": {"type": "invalid_request_error", "message": "Invalid API Key"}}))
                        } else {
                            let cents: i64 = form["line_items[0][price_data][unit_amount]"].parse().unwrap_or(0);
                            let id = format!("cs_test_{}", uuid::Uuid::new_v4().simple());
                            (
                                200,
                                json!({
                                    "id": id, "object": "checkout.session", "mode": "payment", "status": "open",
                                    "payment_status": "unpaid", "amount_total": cents, "currency": "usd",
                                    "client_reference_id": form.get("client_reference_id"),
                                    "url": format!("https://checkout.stripe.com/c/pay/{id}"),
                                }),
                            )
                        };
                        let mut response = hyper::Response::new(Full::new(Bytes::from(answer.to_string())));
                        *response.status_mut() = hyper::StatusCode::from_u16(status).expect("status");
                        Ok::<_, Infallible>(response)
                    }
                });
                let io = hyper_util::rt::TokioIo::new(socket);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
            });
        }
    });
    (format!("http://{addr}"), log)
}

/// A server with payments through the fake Stripe at `base`.
async fn server_with_payments(db: &common::Db, base: &str) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = base.to_owned();
    Server::launch_on(db, listener, move |ports, _| {
        let settings = service::PaymentSettings {
            webhook_secret: WEBHOOK_SECRET.into(),
            min: UsdAmount::parse_decimal("5").expect("usd"),
            max: UsdAmount::parse_decimal("1000").expect("usd"),
            success_url: "http://127.0.0.1/console/#/overview?paid=1".into(),
            cancel_url: "http://127.0.0.1/console/#/overview".into(),
        };
        let stripe = media::StripeCheckout::new(&base, SECRET_KEY).expect("client");
        service::Gateway::new(ports.with_payments(Arc::new(stripe), settings))
    })
    .await
}

/// The `Stripe-Signature` of `body` at `t` with `secret`, as Stripe writes it.
fn signature(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("t={t},v1={hex}")
}

fn now_secs() -> i64 {
    i64::try_from(std::time::UNIX_EPOCH.elapsed().expect("time").as_secs()).expect("secs")
}

/// A `checkout.session.completed` event for `session`.
fn completed(session: &str, user: &str, cents: i64, paid: &str, currency: &str) -> Vec<u8> {
    let event = json!({
        "id": format!("evt_{}", uuid::Uuid::new_v4().simple()), "object": "event", "api_version": "2024-06-20",
        "created": now_secs(), "livemode": false, "type": "checkout.session.completed",
        "data": {"object": {
            "id": session, "object": "checkout.session", "mode": "payment", "status": "complete",
            "payment_status": paid, "amount_total": cents, "currency": currency,
            "client_reference_id": user, "metadata": {"user_id": user},
        }},
    });
    serde_json::to_vec(&event).expect("json")
}

async fn deliver(server: &Server, body: &[u8], signature: &str) -> common::Reply {
    let headers = [("stripe-signature", signature)];
    server.send(http::Method::POST, HOOK, None, "application/json", &headers, body).await
}

fn topups(entries: &[domain::LedgerEntry]) -> Vec<(i64, String)> {
    entries.iter().filter(|e| e.kind == LedgerKind::Topup).map(|e| (e.amount.micros(), e.description.clone())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_session_is_credited_once_and_nothing_else_is() {
    let (base, stripe) = fake_stripe().await;
    for db in databases() {
        let server = server_with_payments(&db, &base).await;
        let label = server.label;
        let user = server.user("0").await;
        let key = server.key(&user.id, &[Scope::BillingManage]).await.secret;

        // The session, made with Stripe's documented form, key and idempotency header.
        let made = server.post_json(CHECKOUT, Some(&key), &json!({"amount": "20.00"})).await;
        assert_eq!(made.status, 201, "{label}: {}", made.text());
        let session = made.json["id"].as_str().expect("id").to_owned();
        assert!(made.json["url"].as_str().is_some_and(|u| u.contains(&session)), "{}", made.json);
        let (form, auth, idem) = stripe.calls.lock().expect("log").last().cloned().expect("a call");
        assert_eq!(auth.as_deref(), Some(format!("Bearer {SECRET_KEY}").as_str()));
        assert!(idem.is_some_and(|k| !k.is_empty()), "{label}: an Idempotency-Key");
        for (field, want) in [
            ("mode", "payment"),
            ("line_items[0][price_data][currency]", "usd"),
            ("line_items[0][price_data][unit_amount]", "2000"),
            ("line_items[0][quantity]", "1"),
            ("client_reference_id", user.id.as_str()),
            ("metadata[user_id]", user.id.as_str()),
        ] {
            assert_eq!(form.get(field).map(String::as_str), Some(want), "{label}: {field}");
        }
        assert!(form.contains_key("line_items[0][price_data][product_data][name]") && form.contains_key("success_url"));

        // Amounts just inside and just outside the bounds, and more than two decimals.
        for (amount, ok) in [("5", true), ("1000.00", true), ("4.99", false), ("1000.01", false), ("20.001", false)] {
            let reply = server.post_json(CHECKOUT, Some(&key), &json!({"amount": amount})).await;
            if ok {
                assert_eq!(reply.status, 201, "{label}: {amount}: {}", reply.text());
            } else {
                reply.assert_error(400, "invalid_request", &format!("{label}: {amount}"));
            }
        }

        // Refused events credit nothing: a bad signature, another secret, a stale timestamp, an
        // unpaid session, another currency.
        let paid = completed(&session, user.id.as_str(), 2000, "paid", "usd");
        let now = now_secs();
        let bad = signature(WEBHOOK_SECRET, now, b"another body");
        deliver(&server, &paid, &bad).await.assert_error(400, "invalid_request", "bad signature");
        let other = signature("whsec_other", now, &paid);
        deliver(&server, &paid, &other).await.assert_error(400, "invalid_request", "another secret");
        let stale = signature(WEBHOOK_SECRET, now - 301, &paid);
        deliver(&server, &paid, &stale).await.assert_error(400, "invalid_request", "stale");
        let none = server.send(http::Method::POST, HOOK, None, "application/json", &[], &paid).await;
        none.assert_error(400, "invalid_request", "no signature");
        for body in [
            completed(&session, user.id.as_str(), 2000, "unpaid", "usd"),
            completed(&session, user.id.as_str(), 2000, "paid", "eur"),
            serde_json::to_vec(&json!({"id": "evt_x", "type": "charge.refunded", "data": {"object": {}}}))
                .expect("json"),
        ] {
            let reply = deliver(&server, &body, &signature(WEBHOOK_SECRET, now, &body)).await;
            assert_eq!(
                (reply.status, reply.json["outcome"].clone()),
                (200, json!("ignored")),
                "{label}: {}",
                reply.text()
            );
        }
        assert_eq!(server.balance(&user.id).await, UsdAmount::ZERO, "{label}: nothing credited yet");

        // Paid: credited once; a replay and a second event for the same session are acknowledged.
        let first = deliver(&server, &paid, &signature(WEBHOOK_SECRET, now, &paid)).await;
        assert_eq!((first.status, &first.json["credited"]), (200, &json!("20.000000")), "{label}: {}", first.text());
        let replay = deliver(&server, &paid, &signature(WEBHOOK_SECRET, now, &paid)).await;
        assert_eq!(replay.json["outcome"], json!("already_credited"), "{label}");
        let second = completed(&session, user.id.as_str(), 2000, "paid", "usd");
        let again = deliver(&server, &second, &signature(WEBHOOK_SECRET, now, &second)).await;
        assert_eq!(again.json["outcome"], json!("already_credited"), "{label}");
        let (entries, balance) = server.ledger(&user.id).await;
        assert_eq!(balance, UsdAmount::parse_decimal("20").expect("usd"), "{label}");
        assert_eq!(topups(&entries), [(20_000_000, format!("payment {session}"))], "{label}");
        server.assert_ledger(&user.id, label).await;
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn events_raced_across_two_replicas_credit_once() {
    let (base, _) = fake_stripe().await;
    for db in databases() {
        let a = server_with_payments(&db, &base).await;
        let b = {
            let base = base.clone();
            a.replica(move |ports| {
                let settings = service::PaymentSettings {
                    webhook_secret: WEBHOOK_SECRET.into(),
                    min: UsdAmount::parse_decimal("5").expect("usd"),
                    max: UsdAmount::parse_decimal("1000").expect("usd"),
                    success_url: String::new(),
                    cancel_url: String::new(),
                };
                let stripe = media::StripeCheckout::new(&base, SECRET_KEY).expect("client");
                service::Gateway::new(ports.with_payments(Arc::new(stripe), settings))
            })
            .await
        };
        let label = a.label;
        let user = a.user("0").await;
        let session = format!("cs_test_{}", uuid::Uuid::new_v4().simple());
        let now = now_secs();
        let deliveries: Vec<_> = (0..16)
            .map(|i| {
                let server = if i % 2 == 0 { &a } else { &b };
                let body = completed(&session, user.id.as_str(), 1234, "paid", "usd");
                async move {
                    let signed = signature(WEBHOOK_SECRET, now, &body);
                    deliver(server, &body, &signed).await
                }
            })
            .collect();
        let replies = join_all(deliveries).await;
        let outcomes: Vec<Value> = replies.iter().map(|r| r.json["outcome"].clone()).collect();
        assert_eq!(outcomes.iter().filter(|o| **o == json!("credited")).count(), 1, "{label}: {outcomes:?}");
        assert!(replies.iter().all(|r| r.status == 200), "{label}: {outcomes:?}");
        let (balance, _) = a.assert_ledger(&user.id, label).await;
        assert_eq!(balance, UsdAmount::from_micros(12_340_000), "{label}: credited once");
        b.stop().await;
        a.stop().await;
    }
}

#[tokio::test]
async fn without_stripe_the_routes_say_payments_are_not_configured() {
    for db in databases() {
        let server = Server::start(&db).await;
        let user = server.user("0").await;
        let key = server.key(&user.id, &[Scope::BillingManage]).await.secret;
        let reply = server.post_json(CHECKOUT, Some(&key), &json!({"amount": "20"})).await;
        reply.assert_error(503, "payments_not_configured", server.label);
        let event = completed("cs_x", user.id.as_str(), 100, "paid", "usd");
        let hook = deliver(&server, &event, &signature(WEBHOOK_SECRET, now_secs(), &event)).await;
        hook.assert_error(503, "payments_not_configured", server.label);
        server.stop().await;
    }
}
