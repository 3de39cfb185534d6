//! Video tasks end to end: the real server, the upstream simulator over HTTP (assets, tasks) on a clock
//! the test moves, media imported from an https receiver on 127.0.0.1 through the egress guard,
//! signed webhooks, cancel, failure, idempotency and concurrent workers; the books checked after each.

mod common;

use common::video::VideoEnv;
use common::{Db, amount, databases};
use domain::UsdAmount;
use http::Method;
use serde_json::{Value, json};

/// The simulator's tokens for a 5 s 720p 16:9 video (its own formula), and the model's rate.
fn expected_charge(seconds: u64) -> UsdAmount {
    let tokens = sim::video::task::tokens(1280, 720, seconds);
    // videogen-2-0 at 720p: 7 USD per million output tokens = 7 micro-USD per token.
    UsdAmount::from_micros(i64::try_from(tokens).expect("tokens fit") * 7)
}

/// The id of a task a 202 answer created.
fn created_id(env: &VideoEnv, reply: &common::Reply, what: &str) -> String {
    assert_eq!(reply.status, 202, "{}", env.ctx(&format!("{what}: {}", String::from_utf8_lossy(&reply.raw))));
    let id = reply.json["id"].as_str().expect("task id").to_owned();
    assert_eq!(reply.header("x-svc-task-id"), Some(id.as_str()), "{}", env.ctx("X-Svc-Task-Id"));
    assert!(
        ["submitting", "queued"].contains(&reply.json["status"].as_str().unwrap_or_default()),
        "{}",
        env.ctx(&format!("a new task is submitting or queued: {}", reply.json))
    );
    assert_eq!(reply.json["billing"]["status"], "reserved", "{}", env.ctx("the estimate is held"));
    id
}

async fn json_task_with_imported_media(db: &Db) {
    let env = VideoEnv::new(db, "127.0.0.1", "10").await;
    let start = env.server.balance(&env.user.id).await;
    let body = json!({
        "model": "videogen-2-0",
        "prompt": "a red fox running through snow",
        "media": [{"type": "image", "url": env.https("sample/png")}],
        "webhook_url": env.https("hook"),
    });
    let reply = env.create(&body).await;
    let id = created_id(&env, &reply, "create");
    let held = amount(&reply.json["billing"]["estimated_amount"], "estimate");
    assert_eq!(env.server.balance(&env.user.id).await, start.checked_sub(held).expect("fits"), "{}", env.ctx("hold"));

    let task = env.drive(&id, "succeeded").await;
    assert!(task["output_url"].as_str().is_some_and(|u| !u.is_empty()), "{}", env.ctx(&format!("output_url: {task}")));
    assert!(task["last_frame_url"].as_str().is_some_and(|u| !u.is_empty()), "{}", env.ctx("last_frame_url"));
    assert!(task["completed_at"].is_string(), "{}", env.ctx("completed_at"));
    assert_eq!(task["billing"]["status"], "settled", "{}", env.ctx("settled"));
    let charge = expected_charge(5);
    assert_eq!(amount(&task["billing"]["actual_amount"], "actual"), charge, "{}", env.ctx("rate × tokens"));
    assert_eq!(env.server.balance(&env.user.id).await, start.checked_sub(charge).expect("fits"), "{}", env.ctx("paid"));
    assert_eq!(env.log.matching("GET /sample/png").len(), 1, "{}", env.ctx("the media link is imported once"));

    env.flush().await;
    let events = env.webhooks("/hook", &id);
    assert_eq!(events, ["task.queued", "task.processing", "task.succeeded"], "{}", env.ctx("one webhook per change"));
    env.assert_ledger("json task").await;
}

#[tokio::test]
async fn a_json_task_imports_its_media_succeeds_settles_and_sends_signed_webhooks() {
    for db in databases() {
        json_task_with_imported_media(&db).await;
    }
}

#[tokio::test]
async fn a_multipart_task_with_an_image_file_succeeds() {
    for db in databases() {
        let env = VideoEnv::new(&db, "127.0.0.1", "10").await;
        let start = env.server.balance(&env.user.id).await;
        let request =
            json!({"model": "videogen-2-0", "prompt": "the picture, moving", "webhook_url": env.https("hook")});
        let reply = env.create_multipart(&request, &[("image/png", testkit::sample("png"))]).await;
        let id = created_id(&env, &reply, "multipart create");
        assert_eq!(reply.json["media_type"], "image", "{}", env.ctx(&format!("media type: {}", reply.json)));
        let task = env.drive(&id, "succeeded").await;
        let charge = expected_charge(5);
        assert_eq!(amount(&task["billing"]["actual_amount"], "actual"), charge, "{}", env.ctx("rate × tokens"));
        assert_eq!(
            env.server.balance(&env.user.id).await,
            start.checked_sub(charge).expect("fits"),
            "{}",
            env.ctx("paid")
        );
        env.flush().await;
        assert_eq!(
            env.webhooks("/hook", &id),
            ["task.queued", "task.processing", "task.succeeded"],
            "{}",
            env.ctx("one webhook per change")
        );
        env.assert_ledger("multipart task").await;
    }
}

#[tokio::test]
async fn a_queued_task_cancels_with_a_refund_and_a_processing_one_is_409() {
    for db in databases() {
        let env = VideoEnv::new(&db, "127.0.0.1", "10").await;
        let start = env.server.balance(&env.user.id).await;
        let slow = json!({"model": "videogen-2-0", "prompt": "[sim:video=slow_queue] a slow fox", "webhook_url": env.https("hook")});
        let id = created_id(&env, &env.create(&slow).await, "slow create");
        env.drive(&id, "queued").await;

        // Another user's key does not see the task.
        let other = env.server.user("1").await;
        let other_key = env.server.key(&other.id, &domain::Scope::ALL).await.secret;
        let path = format!("/api/v1/tasks/{id}");
        let auth = |k: &str| format!("Bearer {k}");
        let foreign = env.server.request(Method::DELETE, &path, &[("authorization", &auth(&other_key))]).await;
        foreign.assert_error(404, "not_found", &env.ctx("another user's task"));

        let cancelled = env.server.request(Method::DELETE, &path, &[("authorization", &auth(&env.key))]).await;
        assert_eq!(
            cancelled.status,
            200,
            "{}",
            env.ctx(&format!("cancel: {}", String::from_utf8_lossy(&cancelled.raw)))
        );
        assert_eq!(cancelled.json["status"], "cancelled", "{}", env.ctx("cancelled"));
        assert_eq!(cancelled.json["billing"]["status"], "refunded", "{}", env.ctx("refunded"));
        assert!(cancelled.json["completed_at"].is_string(), "{}", env.ctx("completed_at"));
        assert_eq!(env.server.balance(&env.user.id).await, start, "{}", env.ctx("the hold came back"));
        let again = env.server.request(Method::DELETE, &path, &[("authorization", &auth(&env.key))]).await;
        again.assert_error(409, "not_cancellable", &env.ctx("a cancelled task"));
        env.flush().await;
        assert_eq!(env.webhooks("/hook", &id), ["task.queued", "task.cancelled"], "{}", env.ctx("webhooks"));

        let busy = json!({"model": "videogen-2-0", "prompt": "a busy fox"});
        let busy_id = created_id(&env, &env.create(&busy).await, "busy create");
        env.drive(&busy_id, "processing").await;
        let refused = env
            .server
            .request(Method::DELETE, &format!("/api/v1/tasks/{busy_id}"), &[("authorization", &auth(&env.key))])
            .await;
        refused.assert_error(409, "not_cancellable", &env.ctx("a processing task"));
        let done = env.drive(&busy_id, "succeeded").await;
        assert_eq!(done["billing"]["status"], "settled", "{}", env.ctx("the refused cancel changed nothing"));
        env.assert_ledger("cancel").await;
    }
}

#[tokio::test]
async fn failed_expired_and_unreachable_outcomes_refund_or_keep_the_hold() {
    for db in databases() {
        let env = VideoEnv::new(&db, "127.0.0.1", "10").await;
        let start = env.server.balance(&env.user.id).await;
        let fail = json!({"model": "videogen-2-0", "prompt": "[sim:video=fail] a fox"});
        let failed = env.drive(&created_id(&env, &env.create(&fail).await, "fail"), "failed").await;
        assert!(failed["error_code"].as_str().is_some_and(|c| !c.is_empty()), "{}", env.ctx(&format!("{failed}")));
        assert!(failed["error_message"].as_str().is_some_and(|c| !c.is_empty()), "{}", env.ctx("error_message"));
        assert_eq!(failed["billing"]["status"], "refunded", "{}", env.ctx("failed is refunded"));

        let expire = json!({"model": "videogen-2-0", "prompt": "[sim:video=expire] a fox"});
        let expired = env.drive(&created_id(&env, &env.create(&expire).await, "expire"), "expired").await;
        assert_eq!(expired["billing"]["status"], "refunded", "{}", env.ctx("expired is refunded"));
        assert_eq!(env.server.balance(&env.user.id).await, start, "{}", env.ctx("both holds came back"));

        // Polls that fail keep the hold; the task still ends, billed once.
        let flaky = json!({"model": "videogen-2-0", "prompt": "[sim:video=poll_error:3] a fox"});
        let id = created_id(&env, &env.create(&flaky).await, "flaky");
        let done = env.drive(&id, "succeeded").await;
        assert_eq!(amount(&done["billing"]["actual_amount"], "actual"), expected_charge(5), "{}", env.ctx("flaky"));
        env.assert_ledger("outcomes").await;
    }
}

#[tokio::test]
async fn a_failing_webhook_receiver_is_retried_until_it_answers() {
    for db in databases() {
        let env = VideoEnv::new(&db, "127.0.0.1", "10").await;
        let body = json!({"model": "videogen-2-0", "prompt": "a fox", "webhook_url": env.https("hook/fail/2")});
        let id = created_id(&env, &env.create(&body).await, "create");
        env.drive(&id, "succeeded").await;
        env.flush().await;
        let mut events = env.webhooks("/hook/fail/2", &id);
        // The first two attempts (both for `queued`) got 500s and `queued` was retried until it was
        // taken. Deliveries are independent, so a later status may arrive before a retried one.
        events.sort();
        assert_eq!(
            events,
            ["task.processing", "task.queued", "task.queued", "task.queued", "task.succeeded"],
            "{}",
            env.ctx("retries")
        );
    }
}

#[tokio::test]
async fn the_same_idempotency_key_and_body_create_one_task_submitted_once() {
    for db in databases() {
        let env = VideoEnv::new(&db, "127.0.0.1", "10").await;
        let body = json!({"model": "videogen-2-0", "prompt": "only once"});
        let headers = [("idempotency-key", "video-once-1")];
        let first = env.server.post_json_with("/api/v1/tasks", Some(&env.key), &headers, &body).await;
        let id = created_id(&env, &first, "first");
        let second = env.server.post_json_with("/api/v1/tasks", Some(&env.key), &headers, &body).await;
        assert_eq!(
            second.json["id"],
            id.as_str(),
            "{}",
            env.ctx(&format!("the replay names the same task: {}", second.json))
        );
        let other = json!({"model": "videogen-2-0", "prompt": "another body"});
        let conflict = env.server.post_json_with("/api/v1/tasks", Some(&env.key), &headers, &other).await;
        conflict.assert_error(409, "idempotency_conflict", &env.ctx("same key, other body"));
        env.drive(&id, "succeeded").await;
        let creates = env.sim.requests(sim::VIDEO_TASKS_PATH);
        assert_eq!(creates, 1, "{}", env.ctx("submitted upstream once"));
        let (entries, _) = env.server.ledger(&env.user.id).await;
        // The initial grant, the hold and its settlement: nothing twice.
        assert!(entries.len() <= 3, "{}", env.ctx(&format!("ledger entries: {entries:?}")));
        env.assert_ledger("idempotency").await;
    }
}

#[tokio::test]
async fn media_links_to_loopback_and_plain_http_are_refused_without_an_allow_list() {
    for db in databases() {
        let env = VideoEnv::new(&db, "", "10").await;
        let start = env.server.balance(&env.user.id).await;
        let port = env.receiver.port();
        let refused = [
            format!("https://127.0.0.1:{port}/sample/png"),
            format!("https://localhost:{port}/sample/png"),
            format!("https://[::1]:{port}/sample/png"),
            format!("http://127.0.0.1:{port}/sample/png"),
        ];
        for url in &refused {
            let body = json!({"model": "videogen-2-0", "prompt": "x", "media": [{"type": "image", "url": url}]});
            env.create(&body).await.assert_error(400, "invalid_request", &env.ctx(&format!("media {url}")));
            let hook = json!({"model": "videogen-2-0", "prompt": "x", "webhook_url": url});
            env.create(&hook).await.assert_error(400, "invalid_request", &env.ctx(&format!("webhook {url}")));
        }
        assert_eq!(env.log.connections(), 0, "{}", env.ctx("the local https server saw no connection"));
        assert_eq!(env.server.balance(&env.user.id).await, start, "{}", env.ctx("nothing held"));
        let listed = env.server.get("/api/v1/tasks", Some(&env.key)).await;
        assert_eq!(listed.json["data"], Value::Array(vec![]), "{}", env.ctx("no task was made"));
    }
}

#[tokio::test]
async fn two_workers_on_one_database_submit_and_settle_each_task_once() {
    for db in databases() {
        let env = VideoEnv::new(&db, "127.0.0.1", "100").await;
        let mut ids = Vec::new();
        for i in 0..40 {
            let body = json!({"model": "videogen-2-0-mini", "prompt": format!("fox number {i}"), "resolution": "480p"});
            ids.push(created_id(&env, &env.create(&body).await, "create"));
        }
        let gateway = env.server.gateway.clone();
        for _ in 0..100 {
            let (a, b) = tokio::join!(gateway.video_tick("replica-a"), gateway.video_tick("replica-b"));
            let (a, b) = (a.expect("pass a"), b.expect("pass b"));
            env.sim.advance(std::time::Duration::from_millis(500));
            if a == service::TickReport::default() && b == service::TickReport::default() {
                break;
            }
        }
        assert_eq!(env.sim.requests(sim::VIDEO_TASKS_PATH), 40, "{}", env.ctx("each task submitted once"));
        let (entries, _) = env.server.ledger(&env.user.id).await;
        for id in &ids {
            let task = env.task(id).await;
            assert_eq!(task["status"], "succeeded", "{}", env.ctx(&format!("{task}")));
            assert_eq!(task["billing"]["status"], "settled", "{}", env.ctx("settled"));
            let settles = entries.iter().filter(|e| e.task_id.as_ref().is_some_and(|t| t.0 == *id)).count();
            assert_eq!(settles, 2, "{}", env.ctx(&format!("task {id}: one hold and one settlement")));
        }
        env.assert_ledger("two workers").await;
    }
}

/// A padded sample of `kind` exactly `len` bytes long.
fn padded(kind: &str, len: usize) -> Vec<u8> {
    let mut bytes = testkit::sample(kind);
    bytes.resize(len, 0);
    bytes
}

#[tokio::test]
async fn uploads_are_sniffed_bounded_per_kind_and_counted_against_the_media_quota() {
    for db in databases() {
        let env = VideoEnv::new(&db, "127.0.0.1", "10").await;
        let request = json!({"model": "videogen-2-0", "prompt": "the upload, moving"});
        // The user's quota is 1 MiB: exactly that is taken, one byte more is not.
        let over = env.create_multipart(&request, &[("image/png", padded("png", (1 << 20) + 1))]).await;
        over.assert_error(413, "media_quota_exceeded", &env.ctx("one byte past the quota"));
        let at = env.create_multipart(&request, &[("image/png", padded("png", 1 << 20))]).await;
        created_id(&env, &at, "exactly the quota");
        let full = env.create_multipart(&request, &[("image/png", testkit::sample("png"))]).await;
        full.assert_error(413, "media_quota_exceeded", &env.ctx("the quota is used up"));

        // A user with room: audio files may be 15 MiB, not one byte more; text is not media.
        let roomy = env.server.user_with("10", 100, 1 << 30).await;
        let key = env.server.key(&roomy.user.id, &domain::Scope::ALL).await.secret;
        let send = |files: Vec<(&'static str, Vec<u8>)>| {
            let (content_type, body) = common::video::multipart(&request, &files);
            let server = &env.server;
            let key = key.clone();
            async move { server.post("/api/v1/tasks", Some(&key), &content_type, &body).await }
        };
        let limit = 15 * 1024 * 1024;
        let too_big = send(vec![("audio/wav", padded("wav", limit + 1))]).await;
        too_big.assert_error(413, "request_too_large", &env.ctx("an audio file one byte past 15 MiB"));
        let fits = send(vec![("image/png", testkit::sample("png")), ("audio/wav", padded("wav", limit))]).await;
        assert_eq!(
            fits.status,
            202,
            "{}",
            env.ctx(&format!("15 MiB of audio: {}", String::from_utf8_lossy(&fits.raw)))
        );
        let text = send(vec![("image/png", testkit::sample("text"))]).await;
        text.assert_error(400, "invalid_request", &env.ctx("a file that is not media"));
        let (content_type, body) = common::video::multipart(&request, &[]);
        let stripped = String::from_utf8_lossy(&body).replace("name=\"request\"", "name=\"other\"");
        let missing = env.server.post("/api/v1/tasks", Some(&key), &content_type, stripped.as_bytes()).await;
        missing.assert_error(400, "invalid_request", &env.ctx("no request field"));
        env.assert_ledger("uploads").await;
    }
}

/// A task whose stored media record was corrupted (on purpose, under the store): reading it is a 500
/// with the generic body and no internal text, and the worker does not run it on a guess (a broken
/// record read as "no media" would price the task at the text-only rate): its hold stays, nothing is
/// charged and nothing is sent upstream.
#[tokio::test]
async fn a_corrupt_media_record_is_a_500_and_never_runs_as_text_only() {
    for db in databases() {
        let env = VideoEnv::new(&db, "127.0.0.1", "10").await;
        let start = env.server.balance(&env.user.id).await;
        let body = json!({
            "model": "videogen-2-0",
            "prompt": "the clip, slower",
            "media": [{"type": "video", "url": env.https("sample/mp4")}],
        });
        let reply = env.create(&body).await;
        let id = created_id(&env, &reply, "create");
        let held = amount(&reply.json["billing"]["estimated_amount"], "estimate");

        let corrupt = "[{\"type\":\"vid\",\"url\":\"https://x\"}]";
        let sql = "UPDATE tasks SET media_url = $1 WHERE id = $2";
        assert_eq!(
            testkit::books::execute_under_the_store(env.server.url.as_str(), sql, &[corrupt, id.as_str()]).await,
            1
        );

        let read = env.server.get(&format!("/api/v1/tasks/{id}"), Some(&env.key)).await;
        read.assert_error(500, "internal_error", &env.ctx("a corrupt row"));
        assert_eq!(
            read.json["error"]["message"],
            "the gateway failed; try again later",
            "{}",
            env.ctx("the generic message")
        );
        let text = String::from_utf8_lossy(&read.raw);
        assert!(!text.contains("media") && !text.contains("vid"), "{}", env.ctx(&format!("internal text: {text}")));

        for _ in 0..40 {
            assert_eq!(env.tick().await.tasks, 0, "{}", env.ctx("the corrupt task is not run"));
        }
        assert_eq!(
            env.server.balance(&env.user.id).await,
            start.checked_sub(held).expect("fits"),
            "{}",
            env.ctx("the hold stays; nothing is charged")
        );
        assert!(env.log.matching("GET /sample/mp4").is_empty(), "{}", env.ctx("nothing is imported"));
    }
}
