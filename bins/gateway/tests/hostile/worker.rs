//! Part 4: one tenant cannot stall the video worker. Tenant A's tasks import a media link that
//! drip-feeds (a few bytes a second) and send their webhooks to a receiver that never answers; a
//! second later tenant B creates a task with a media link and a webhook. B's task reaches `succeeded`
//! and its webhook is delivered within seconds, because A's steps and deliveries only fill A's own
//! share of the worker's slots; A's drip-fed imports are cut at the minimum rate and its silent
//! receiver is given up at the webhook timeout (the default, 10 s). Printed: how many imports and
//! webhook attempts A had hanging when B was created (at most its share, 4 of each), the time to
//! B's success and to B's webhook, and how long A's import and A's webhook attempt were allowed to
//! hang. (Against the worker before this change, one pass at a time, B was still not done after 60 s.)

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::common::{self, Sandbox, http_get, http_request};

/// The most any wait in this test takes before it fails.
const LIMIT: Duration = Duration::from_secs(60);
/// How many tasks of each hostile kind tenant A creates (more than its share of 4 slots).
const HOSTILE_TASKS: usize = 6;

/// The databases to run on: SQLite always, PostgreSQL when `TEST_DATABASE_URL` is set.
fn sandboxes(rt: &tokio::runtime::Runtime) -> Vec<(Sandbox, &'static str)> {
    let mut all = vec![(Sandbox::new(), "sqlite")];
    if testkit::pg::base_url().is_some() {
        all.push(common::sandbox(rt));
    }
    all
}

/// Creates a task with `body` for `key`; its id.
fn create(addr: &str, key: &str, body: &Value) -> String {
    let (status, task) = http_request(addr, "POST", "/api/v1/tasks", Some(key), Some(body));
    assert_eq!(status, 202, "create {body}: {task}");
    task["id"].as_str().expect("task id").to_owned()
}

/// Waits (bounded by [`LIMIT`]) until `ready` gives a value; it, and how long it took since `since`.
fn wait_for<T>(what: &str, since: Instant, mut ready: impl FnMut() -> Option<T>) -> (T, Duration) {
    loop {
        if let Some(value) = ready() {
            return (value, since.elapsed());
        }
        assert!(since.elapsed() < LIMIT, "{what}: not within {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn a_tenant_with_a_drip_fed_link_and_a_silent_receiver_does_not_stall_another() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    for (sandbox, label) in sandboxes(&rt) {
        let (ca, identity) = testkit::test_pki();
        let (receiver, log) = rt.block_on(testkit::receiver("127.0.0.1:0", identity)).expect("bind the receiver");
        let ca_file = sandbox.file("test-ca.pem", &String::from_utf8(ca).expect("PEM is text"));
        let (sim_addr, _sim) = rt.block_on(sim::spawn_with(sim::SimOptions::default())).expect("start the simulator");
        let scopes = "video:create,task:read,task:write";
        let ((_, key_a), (_, key_b)) =
            (common::account(&sandbox, "1000", scopes), common::account(&sandbox, "1000", scopes));
        let mut env = common::video_env(sim_addr);
        env.extend([
            ("GATEWAY_EGRESS_ALLOW", "127.0.0.1".to_owned()),
            ("GATEWAY_EXTRA_CA_FILE", ca_file),
            // The import floor judged over 2-s windows after 2 s, so that a cut shows quickly; the
            // webhook timeout and the slots keep their defaults (10 s; 4 per user).
            ("GATEWAY_MEDIA_IMPORT_RATE_WINDOW", "2000ms".to_owned()),
            ("GATEWAY_MEDIA_IMPORT_RATE_GRACE", "2000ms".to_owned()),
        ]);
        let (_server, addr) = common::serve_against(&sandbox, sim_addr, &format!("hostile-worker-{label}"), &env);
        let https = |path: &str| format!("https://{receiver}/{path}");

        // Tenant A: tasks whose every webhook hangs, then tasks whose media link drips 5 bytes a second.
        let started = Instant::now();
        for i in 0..HOSTILE_TASKS {
            let body = json!({"model": "videogen-2-0", "prompt": format!("silent {i}"), "resolution": "480p",
                "webhook_url": https("hook/hang")});
            create(&addr, &key_a, &body);
        }
        // (Bounded waits that do not fail here: a worker that A stalls fails below, on B.)
        let until = |done: &dyn Fn() -> bool| {
            let deadline = Instant::now() + Duration::from_secs(5);
            while !done() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(25));
            }
        };
        until(&|| !log.matching("POST /hook/hang").is_empty());
        for i in 0..HOSTILE_TASKS {
            let body = json!({"model": "videogen-2-0", "prompt": format!("drip {i}"), "resolution": "480p",
                "media": [{"type": "image", "url": https("drip/200")}], "webhook_url": https("hook/hang")});
            create(&addr, &key_a, &body);
        }
        until(&|| !log.matching("GET /drip/200").is_empty());
        std::thread::sleep(Duration::from_secs(1));
        let open = |line: &str, path: &str| log.matching(line).len().saturating_sub(log.abandoned(path).len());
        let (imports, hooks) = (open("GET /drip/200", "/drip/200"), open("POST /hook/hang", "/hook/hang"));
        println!("{label}: when B was created, A had {imports} imports and {hooks} webhook attempts hanging");

        // Tenant B, a second later: a media link that answers at once and a receiver that answers.
        let body = json!({"model": "videogen-2-0", "prompt": "an honest fox", "resolution": "480p",
            "media": [{"type": "image", "url": https("sample/png")}], "webhook_url": https("hook")});
        let created = Instant::now();
        let b = create(&addr, &key_b, &body);
        let (_, to_success) = wait_for(&format!("{label}: B succeeds"), created, || {
            let (status, task) = http_get(&addr, &format!("/api/v1/tasks/{b}"), Some(&key_b));
            assert_eq!(status, 200, "{label}: {task}");
            let state = task["status"].as_str().unwrap_or_default().to_owned();
            assert!(["submitting", "queued", "processing", "succeeded"].contains(&state.as_str()), "{label}: {task}");
            (state == "succeeded").then_some(())
        });
        let (_, to_webhook) = wait_for(&format!("{label}: B's webhook"), created, || {
            log.matching("POST /hook").into_iter().find(|seen| {
                let body: Value = serde_json::from_slice(&seen.body).unwrap_or(Value::Null);
                seen.line == "POST /hook" && body["task"]["id"] == b.as_str() && body["type"] == "task.succeeded"
            })
        });
        println!("{label}: time to B's success: {:.2} s", to_success.as_secs_f64());
        println!("{label}: time to B's task.succeeded webhook: {:.2} s", to_webhook.as_secs_f64());
        assert!(to_success < Duration::from_secs(30), "{label}: B succeeded after {to_success:?}");
        assert!(to_webhook < Duration::from_secs(30), "{label}: B's webhook came after {to_webhook:?}");
        assert!(imports >= 1 && hooks >= 1, "{label}: A was hanging both kinds of work while B ran");
        // No more than A's share (4 per user) of either kind; A's first cuts come later (4 s, 10 s).
        assert!(imports <= 4 && hooks <= 4, "{label}: A held {imports} import and {hooks} delivery slots");

        // A's hanging calls end on their own bounds: the drip at the minimum rate, the silent
        // receiver at the webhook timeout.
        let (drip, _) = wait_for(&format!("{label}: a drip-fed import cut"), started, || {
            log.abandoned("/drip/200").first().copied()
        });
        let (hang, _) = wait_for(&format!("{label}: a silent receiver given up"), started, || {
            log.abandoned("/hook/hang").first().copied()
        });
        println!("{label}: A's drip-fed import cut after {:.2} s", drip.as_secs_f64());
        println!("{label}: A's silent webhook receiver given up after {:.2} s", hang.as_secs_f64());
        assert!(drip < Duration::from_secs(15), "{label}: the drip ran {drip:?}");
        assert!(hang < Duration::from_secs(20), "{label}: the silent receiver held {hang:?}");
    }
}
