//! `Idempotency-Key` on chat completions: a retry with the same key and body returns the first
//! answer and is billed once; another body is 409 `idempotency_conflict`; a failed call frees the key.

#![allow(clippy::panic)]

mod common;

use std::time::Duration;

use common::{Server, databases, unique};
use domain::Scope;
use serde_json::json;

const CHAT: &str = "/api/v1/chat/completions";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_answered_once_and_billed_once() {
    for db in databases() {
        let (server, _sim) = Server::start_with_chat(&db, Duration::from_secs(2)).await;
        let user = server.user("10").await;
        let key = server.key(&user.id, &[Scope::LanguageCreate]).await.secret;
        let body =
            json!({"model": "LangB-2.0-pro", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 20});
        let idem = unique("idem-");
        let headers = [("idempotency-key", idem.as_str())];

        let first = server.post_json_with(CHAT, Some(&key), &headers, &body).await;
        assert_eq!(first.status, 200, "{}: {}", server.label, first.json);
        let after_first = server.balance(&user.id).await;
        let second = server.post_json_with(CHAT, Some(&key), &headers, &body).await;
        assert_eq!(second.status, 200);
        assert_eq!(second.header("idempotent-replayed"), Some("true"));
        assert_eq!(second.json, first.json, "the replay is the first answer");
        assert_eq!(server.balance(&user.id).await, after_first, "billed once");

        // Same key, another body: conflict, nothing billed.
        let other =
            json!({"model": "LangB-2.0-pro", "messages": [{"role": "user", "content": "bye"}], "max_tokens": 20});
        let conflict = server.post_json_with(CHAT, Some(&key), &headers, &other).await;
        conflict.assert_error(409, "idempotency_conflict", "different body");
        assert_eq!(server.balance(&user.id).await, after_first);

        // Keys are per user: another user may use the same key.
        let user2 = server.user("10").await;
        let key2 = server.key(&user2.id, &[Scope::LanguageCreate]).await.secret;
        let theirs = server.post_json_with(CHAT, Some(&key2), &headers, &body).await;
        assert_eq!(theirs.status, 200);
        assert_eq!(theirs.header("idempotent-replayed"), None);

        // A failed call (refunded) frees its key: the retry runs again and can succeed.
        let flaky_key = unique("idem-");
        let flaky = [("idempotency-key", flaky_key.as_str())];
        let failing = json!({"model": "LangB-2.0-pro", "messages": [{"role": "user", "content": "x"}], "sim_fault": "status_500"});
        server.post_json_with(CHAT, Some(&key), &flaky, &failing).await.assert_error(
            502,
            "upstream_request_failed",
            "fault",
        );
        let again = server.post_json_with(CHAT, Some(&key), &flaky, &failing).await;
        again.assert_error(502, "upstream_request_failed", "the retry ran again");
        assert_eq!(server.balance(&user.id).await, after_first, "failures bill nothing");

        // A malformed key is 400.
        let long = "k".repeat(256);
        let bad = server.post_json_with(CHAT, Some(&key), &[("idempotency-key", long.as_str())], &body).await;
        bad.assert_error(400, "invalid_request", "key too long");
        let ok255 = "k".repeat(255) + "";
        let edge = server.post_json_with(CHAT, Some(&key), &[("idempotency-key", &ok255[..255])], &body).await;
        assert_eq!(edge.status, 200, "a 255-character key is accepted");

        // A streamed first answer is not replayed: the retry is told which task it was.
        let stream_key = unique("idem-");
        let stream_body = json!({"model": "LangB-2.0-pro", "stream": true, "messages": [{"role": "user", "content": "s"}], "max_tokens": 8});
        let streamed =
            server.post_json_with(CHAT, Some(&key), &[("idempotency-key", stream_key.as_str())], &stream_body).await;
        assert_eq!(streamed.status, 200);
        let task_id = streamed.header("x-svc-task-id").expect("task header").to_owned();
        // The stream's charge is recorded just after its last byte (a background step): until then a
        // retry is told the first request is still being processed, also a 409.
        let mut retry =
            server.post_json_with(CHAT, Some(&key), &[("idempotency-key", stream_key.as_str())], &stream_body).await;
        for _ in 0..250 {
            if !retry.json["error"]["message"].as_str().is_some_and(|m| m.contains("still being processed")) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            retry = server
                .post_json_with(CHAT, Some(&key), &[("idempotency-key", stream_key.as_str())], &stream_body)
                .await;
        }
        retry.assert_error(409, "idempotency_conflict", "stream retry");
        assert!(retry.json["error"]["message"].as_str().is_some_and(|m| m.contains(&task_id)), "{}", retry.json);
        server.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_retries_bill_once() {
    for db in databases() {
        let (server, _sim) = Server::start_with_chat(&db, Duration::from_secs(2)).await;
        let user = server.user("10").await;
        let key = server.key(&user.id, &[Scope::LanguageCreate]).await.secret;
        let idem = unique("idem-");
        let body = json!({"model": "LangA-V4-flash", "messages": [{"role": "user", "content": "race"}], "max_tokens": 8, "sim_latency_ms": 100});
        let before = server.balance(&user.id).await;
        let server = std::sync::Arc::new(server);
        let replies = race(&server, &key, &idem, &body, 8).await;
        let ok = replies.iter().filter(|s| **s == 200).count();
        let conflicts = replies.iter().filter(|s| **s == 409).count();
        assert_eq!(ok + conflicts, 8, "{replies:?}");
        assert!(ok >= 1);
        let (entries, _) = server.ledger(&user.id).await;
        let reserves = entries.iter().filter(|e| e.kind == domain::LedgerKind::Reserve).count();
        assert_eq!(reserves, 1, "exactly one call ran");
        let (balance, _) = server.assert_ledger(&user.id, server.label).await;
        assert!(balance < before);
        if let Ok(server) = std::sync::Arc::try_unwrap(server) {
            server.stop().await;
        }
    }
}

/// `n` concurrent posts with one `Idempotency-Key`; their statuses.
async fn race(server: &std::sync::Arc<Server>, key: &str, idem: &str, body: &serde_json::Value, n: usize) -> Vec<u16> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (server, key, idem, body) = (server.clone(), key.to_owned(), idem.to_owned(), body.clone());
        set.spawn(async move {
            server.post_json_with(CHAT, Some(&key), &[("idempotency-key", idem.as_str())], &body).await.status
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        out.push(r.expect("join"));
    }
    out
}

/// A stream that ends without any charge frees its key: a retry runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncharged_stream_frees_its_key() {
    for db in databases() {
        let (server, _sim) = Server::start_with_chat(&db, Duration::from_secs(2)).await;
        let user = server.user("10").await;
        let key = server.key(&user.id, &[Scope::LanguageCreate]).await.secret;
        let idem = unique("idem-");
        let headers = [("idempotency-key", idem.as_str())];
        // The simulator drops the connection before any chunk reaches the gateway: nothing is charged.
        let failing = json!({"model": "LangB-2.0-pro", "stream": true, "messages": [{"role": "user", "content": "d"}],
            "max_tokens": 8, "sim_fault": "midstream_drop"});
        let first = server.post_json_with(CHAT, Some(&key), &headers, &failing).await;
        assert_eq!(first.status, 200, "{}", server.label);
        let text = String::from_utf8_lossy(&first.raw).into_owned();
        assert!(text.contains("upstream_request_failed"), "{text}");
        let charged = text.contains("only the output delivered was charged");
        let mut last = 0;
        for _ in 0..40 {
            last = server.post_json_with(CHAT, Some(&key), &headers, &failing).await.status;
            if last != 409 || charged {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if charged {
            assert_eq!(last, 409, "a charged stream keeps its key");
        } else {
            assert_eq!(last, 200, "{}: the retry ran again", server.label);
        }
        server.stop().await;
    }
}
