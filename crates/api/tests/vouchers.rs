//! Integration tests of vouchers: operators mint, list and revoke batches; customers redeem a code
//! once, whatever the races (32 concurrent redemptions across two replicas credit once), with
//! every refusal's code (404, 409, 410, 429), the scope, the bounds just inside and outside, the
//! audit trail, and balance = Σ ledger after all of it. The real server on `127.0.0.1:0`, SQLite
//! and PostgreSQL.

// Helpers outside `#[test]` functions fail the test by panicking, as the assertions do.
#![allow(clippy::panic)]

mod common;

use common::{Server, databases, join_all};
use domain::{Actor, LedgerKind, Scope, Timestamp, UsdAmount, VoucherBatch, VoucherStore};
use http::Method;
use serde_json::{Value, json};

const MINT: &str = "/api/v1/admin/vouchers";
const REDEEM: &str = "/api/v1/vouchers/redeem";

/// Mints `count` codes of `amount` USD as the operator `admin`; the answer's codes.
async fn mint(server: &Server, admin: &str, body: Value) -> (String, Vec<String>) {
    let made = server.post_json(MINT, Some(admin), &body).await;
    assert_eq!(made.status, 201, "{}: {}", server.label, made.text());
    let codes: Vec<String> =
        made.json["codes"].as_array().expect("codes").iter().map(|c| c.as_str().expect("code").to_owned()).collect();
    (made.json["batch_id"].as_str().expect("batch_id").to_owned(), codes)
}

async fn audit_actions(server: &Server) -> Vec<String> {
    let rows = server.gateway.operator(&Actor::Cli).audit([("page_size", "100")]).await.expect("audit").items;
    rows.into_iter().map(|r| r.action).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_credits_once_and_every_refusal_has_its_code() {
    for db in databases() {
        let server = Server::start(&db).await;
        let label = server.label;
        let (_, admin) = server.admin(&[Scope::Admin]).await;
        let user = server.user("1").await;
        let key = server.key(&user.id, &[Scope::BillingManage, Scope::OverviewRead]).await.secret;

        // Minted: codes shown once, easy to type, listed as a batch.
        let (batch, codes) = mint(&server, &admin, json!({"amount": "5.25", "count": 3, "note": "launch"})).await;
        assert_eq!(codes.len(), 3);
        for code in &codes {
            assert_eq!(code.len(), "GV-".len() + 28 + 6, "{code}");
            assert!(code[3..].chars().all(|c| c == '-' || "0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(c)), "{code}");
        }
        let listed = server.get(MINT, Some(&admin)).await;
        assert_eq!(listed.status, 200, "{label}: {}", listed.text());
        assert_eq!(listed.json["data"][0]["batch_id"], json!(batch));
        assert_eq!(
            (&listed.json["data"][0]["count"], &listed.json["data"][0]["amount"]),
            (&json!(3), &json!("5.250000"))
        );
        assert!(!listed.text().contains(&codes[0]), "{label}: a listing never shows a code");

        // Redeemed as typed, lower case and spaced: credited in the same commit, kind voucher.
        let typed = codes[0].to_lowercase().replace('-', " ");
        let redeemed = server.post_json(REDEEM, Some(&key), &json!({"code": typed})).await;
        assert_eq!(redeemed.status, 200, "{label}: {}", redeemed.text());
        assert_eq!(
            (&redeemed.json["credited"], &redeemed.json["balance_usd"]),
            (&json!("5.250000"), &json!("6.250000"))
        );
        let (entries, balance) = server.ledger(&user.id).await;
        assert_eq!(balance, UsdAmount::parse_decimal("6.25").expect("usd"), "{label}");
        let vouchers: Vec<i64> =
            entries.iter().filter(|e| e.kind == LedgerKind::Voucher).map(|e| e.amount.micros()).collect();
        assert_eq!(vouchers, [5_250_000], "{label}: one voucher entry");
        server.assert_ledger(&user.id, label).await;

        // Refusals: redeemed (by anyone), unknown, wrong shape; nothing moves.
        let again = server.post_json(REDEEM, Some(&key), &json!({"code": codes[0]})).await;
        again.assert_error(409, "voucher_redeemed", label);
        let other = server.user("0").await;
        let other_key = server.key(&other.id, &[Scope::BillingManage]).await.secret;
        let theirs = server.post_json(REDEEM, Some(&other_key), &json!({"code": codes[0]})).await;
        theirs.assert_error(409, "voucher_redeemed", label);
        let unknown =
            server.post_json(REDEEM, Some(&key), &json!({"code": "GV-0000-0000-0000-0000-0000-0000-0000"})).await;
        unknown.assert_error(404, "voucher_not_found", label);
        let garbled = server.post_json(REDEEM, Some(&key), &json!({"code": "not a code"})).await;
        garbled.assert_error(404, "voucher_not_found", label);
        server.post_json(REDEEM, Some(&key), &json!({"code": ""})).await.assert_error(400, "invalid_request", label);
        server.post_json(REDEEM, Some(&key), &json!({"code": 7})).await.assert_error(400, "invalid_request", label);

        // Revoked: what was not redeemed is refused as unknown; the listing shows it.
        let revoked = server.send_json(Method::DELETE, &format!("{MINT}/{batch}"), Some(&admin), &json!(null)).await;
        assert_eq!(revoked.status, 200, "{label}: {}", revoked.text());
        assert_eq!(revoked.json["redeemed"], json!(1));
        assert!(revoked.json["revoked_at"].is_string(), "{}", revoked.json);
        let after = server.post_json(REDEEM, Some(&key), &json!({"code": codes[1]})).await;
        after.assert_error(404, "voucher_not_found", label);
        let missing = server.send_json(Method::DELETE, &format!("{MINT}/vb_missing"), Some(&admin), &json!(null)).await;
        missing.assert_error(404, "not_found", label);

        // Expired: a batch whose time has passed (stored directly: the API refuses a past expiry).
        let past = VoucherBatch {
            id: common::unique("vb_past_"),
            amount: UsdAmount::from_micros(1),
            count: 1,
            redeemed: 0,
            expires_at: Some(Timestamp(1_000)),
            note: String::new(),
            created_by: "cli".into(),
            created_at: Timestamp(0),
            revoked_at: None,
        };
        let code = "ZZZZ0000ZZZZ0000ZZZZ0000ZZZZ";
        server.store.create_vouchers(&past, &[service::hash_secret(code)]).await.expect("store a batch");
        let expired = server.post_json(REDEEM, Some(&key), &json!({"code": code})).await;
        expired.assert_error(410, "voucher_expired", label);

        // The scope: a key without billing:manage cannot redeem.
        let plain = server.key(&user.id, &[Scope::OverviewRead]).await.secret;
        server.post_json(REDEEM, Some(&plain), &json!({"code": codes[2]})).await.assert_error(
            401,
            "invalid_api_key",
            label,
        );

        // Minting, redeeming and revoking are in the audit trail; no code is.
        let actions = audit_actions(&server).await;
        for action in ["voucher.create", "voucher.redeem", "voucher.revoke"] {
            assert!(actions.iter().any(|a| a == action), "{label}: {action} in {actions:?}");
        }
        assert_eq!(server.assert_ledger(&user.id, label).await.0, UsdAmount::parse_decimal("6.25").expect("usd"));
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounds_and_failed_attempts_are_limited() {
    for db in databases() {
        let server = Server::start(&db).await;
        let label = server.label;
        let (_, admin) = server.admin(&[Scope::Admin]).await;
        // Just inside and just outside each bound.
        for (body, ok) in [
            (json!({"amount": "0.000001", "count": 1}), true),
            (json!({"amount": "100000", "count": 1}), true),
            (json!({"amount": "0", "count": 1}), false),
            (json!({"amount": "-1", "count": 1}), false),
            (json!({"amount": "100000.000001", "count": 1}), false),
            (json!({"amount": "1", "count": 0}), false),
            (json!({"amount": "1", "count": 10001}), false),
            (json!({"amount": "1", "count": 1, "expires_at": "2001-01-01T00:00:00Z"}), false),
            (json!({"amount": "1", "count": 1, "expires_at": "2999-01-01T00:00:00Z"}), true),
            (json!({"amount": "1", "count": 1, "note": "n".repeat(500)}), true),
            (json!({"amount": "1", "count": 1, "note": "n".repeat(501)}), false),
            (json!({"amount": "1", "count": 1, "codes": []}), false),
        ] {
            let reply = server.post_json(MINT, Some(&admin), &body).await;
            if ok {
                assert_eq!(reply.status, 201, "{label}: {body}: {}", reply.text());
            } else {
                reply.assert_error(400, "invalid_request", &format!("{label}: {body}"));
            }
        }
        let (_, codes) = mint(&server, &admin, json!({"amount": "1", "count": 2000})).await;
        assert_eq!(codes.iter().collect::<std::collections::HashSet<_>>().len(), 2000, "{label}: no code twice");
        // A customer key cannot mint.
        let user = server.user("0").await;
        let key = server.key(&user.id, &[Scope::BillingManage, Scope::Admin]).await.secret;
        server.post_json(MINT, Some(&key), &json!({"amount": "1", "count": 1})).await.assert_error(
            401,
            "invalid_api_key",
            label,
        );

        // Ten failures in an hour, then even a good code is refused (429 with Retry-After).
        for i in 0..10 {
            let reply = server.post_json(REDEEM, Some(&key), &json!({"code": format!("GV-{i:04}")})).await;
            reply.assert_error(404, "voucher_not_found", label);
        }
        let limited = server.post_json(REDEEM, Some(&key), &json!({"code": codes[0]})).await;
        limited.assert_error(429, "voucher_attempts_exceeded", label);
        assert_eq!(limited.header("retry-after"), Some("3600"), "{label}");
        assert_eq!(server.balance(&user.id).await, UsdAmount::ZERO, "{label}: nothing credited");
        // Another user is not limited by them.
        let other = server.user("0").await;
        let other_key = server.key(&other.id, &[Scope::BillingManage]).await.secret;
        let ok = server.post_json(REDEEM, Some(&other_key), &json!({"code": codes[0]})).await;
        assert_eq!(ok.status, 200, "{label}: {}", ok.text());
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_racing_redemptions_across_two_replicas_credit_once() {
    for db in databases() {
        let a = Server::start(&db).await;
        let b = a.replica(service::Gateway::new).await;
        let label = a.label;
        let (_, admin) = a.admin(&[Scope::Admin]).await;
        let (_, codes) = mint(&a, &admin, json!({"amount": "7", "count": 1})).await;
        let mut users = Vec::new();
        for _ in 0..4 {
            let user = a.user("0").await;
            let key = a.key(&user.id, &[Scope::BillingManage]).await.secret;
            users.push((user, key));
        }
        let body = json!({"code": codes[0]});
        let attempts: Vec<_> = (0..32)
            .map(|i| {
                let server = if i % 2 == 0 { &a } else { &b };
                let key = users[i % users.len()].1.clone();
                let body = body.clone();
                async move { server.post_json(REDEEM, Some(&key), &body).await }
            })
            .collect();
        let replies = join_all(attempts).await;
        let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
        assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 1, "{label}: one credit: {statuses:?}");
        assert_eq!(statuses.iter().filter(|s| **s == 409).count(), 31, "{label}: the rest redeemed: {statuses:?}");
        let mut total = UsdAmount::ZERO;
        for (user, _) in &users {
            total = total.checked_add(a.assert_ledger(&user.id, label).await.0).expect("sum");
        }
        assert_eq!(total, UsdAmount::parse_decimal("7").expect("usd"), "{label}: credited once in all");
        b.stop().await;
        a.stop().await;
    }
}
