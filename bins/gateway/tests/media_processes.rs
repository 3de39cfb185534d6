//! Media on a shared S3-compatible bucket across real `gateway serve` processes (issue 21), against
//! the upstream simulator running in the test and the S3 server named by `TEST_S3_ENDPOINT`
//! (`moto_server` in CI):
//!
//! - two replicas with separate local media directories on one database and one bucket, behind a
//!   relay that plays the load balancer of their shared public address: a task accepted by A (an
//!   upload, or a link A imported) is finished by B after A is SIGKILLed, and the upstream
//!   received the very bytes; then the media sweep deletes the media and gives the quota back;
//! - the store cut off mid-upload: a 503 `media_store_unavailable`, no hold, no task, and once the
//!   store answers again no object and no multipart upload left;
//! - a 200 MB upload keeps the gateway's RSS growth under 64 MiB (upload and the upstream's
//!   download through a signed link, both streamed);
//! - a bucket `serve` cannot use is exit 64 with one line.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{COMMAND_TIMEOUT, Running, Sandbox, http_get, sandbox};
use serde_json::{Value, json};
use sha2::Digest;
use testkit::s3::{Relay, S3Place};

/// How long a task may take to end once a replica can run it.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

fn simulator(rt: &tokio::runtime::Runtime) -> (SocketAddr, sim::SimHandle) {
    rt.block_on(sim::spawn_with(sim::SimOptions::default())).expect("start the simulator")
}

/// An address nothing listens on.
fn closed_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr")
}

fn sha256(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A replica storing media in `place` with its own media directory, `extra` on top.
fn replica(
    sandbox: &Sandbox,
    sim: SocketAddr,
    name: &str,
    place: &S3Place,
    extra: &[(&str, String)],
) -> (Running, String) {
    let mut env: Vec<(&str, String)> = common::video_env(sim);
    let s3 = place.gateway_env();
    env.extend(s3.iter().map(|(k, v)| (k.as_str(), v.clone())));
    env.push(("GATEWAY_MEDIA_DIR", sandbox.dir.join(format!("{name}-media")).display().to_string()));
    env.extend(extra.iter().cloned());
    common::serve_against(sandbox, sim, name, &env)
}

/// The multipart body of a video task with one file: (Content-Type header line, body).
fn multipart_task(content_type: &str, file: &[u8]) -> (String, Vec<u8>) {
    let boundary = "gw-media-proc-3c9a";
    let request = json!({"model": "videogen-2-0-mini", "prompt": "a fox", "resolution": "480p"});
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{request}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"media\"; filename=\"f\"\r\nContent-Type: {content_type}\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// `POST /api/v1/tasks` with a multipart `body` of `content_type`, waiting at most `limit` for each
/// step: the status and the JSON answer.
fn post_task(addr: &str, key: &str, content_type: &str, body: &[u8], limit: Duration) -> (u16, Value) {
    let headers = [("content-type", content_type)];
    let reply = common::request(addr, testkit::http::Method::POST, "/api/v1/tasks", Some(key), &headers, body, limit);
    (reply.status, reply.json)
}

/// Polls `GET /api/v1/tasks/{id}` on `addr` until the task is terminal.
fn until_ended(addr: &str, key: &str, id: &str, sandbox: &Sandbox, name: &str) -> Value {
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let (status, task) = http_get(addr, &format!("/api/v1/tasks/{id}"), Some(key));
        assert_eq!(status, 200, "{task}");
        if matches!(task["status"].as_str(), Some("succeeded" | "failed" | "cancelled" | "expired")) {
            return task;
        }
        assert!(
            Instant::now() < deadline,
            "task {id} still {task} after {SETTLE_LIMIT:?}: {}",
            common::logged_problems(sandbox, name)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `done()` holds (polled), at most `limit`.
fn until(limit: Duration, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Media bytes `user` stores now, read from the database.
fn media_used(rt: &tokio::runtime::Runtime, sandbox: &Sandbox, user: &str) -> u64 {
    rt.block_on(async {
        let store = store::Store::open(&sandbox.database_url()).await.expect("open the store");
        let used = domain::VideoStore::media_used(&store, &domain::UserId(user.to_owned())).await.expect("media used");
        store.close().await.expect("close the store");
        used
    })
}

/// What the upstream fetched (URL, length, SHA-256) once B finished the task, the shared public
/// address, and the bucket's place.
struct Finished {
    fetched: Vec<(String, u64, String)>,
    lb: String,
    place: S3Place,
}

/// Replica A accepts a task and dies; B finishes it from the shared bucket. `accept` makes A
/// accept the task (and returns its id and the bytes the upstream must receive); A's asset control
/// plane is unreachable, so A can store media but never hand it upstream itself.
fn a_replica_dies_and_another_finishes_its_task(
    test: &str,
    b_extra: &[(&str, String)],
    a_extra: &[(&str, String)],
    accept: impl Fn(&str, &str, &S3Place) -> (String, Vec<u8>),
) -> Option<Finished> {
    let place = testkit::s3::place(test)?;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (sim_addr, sim) = simulator(&rt);
    let lb = rt.block_on(Relay::start(sim_addr));
    let (user, key) = common::account(&sandbox, "100", "video:create,task:read,task:write");
    let mut a_env = vec![("GATEWAY_PUBLIC_URL", lb.url()), ("GATEWAY_ASSETS_URL", format!("http://{}", closed_port()))];
    a_env.extend(a_extra.iter().cloned());
    let (mut a, addr_a) = replica(&sandbox, sim_addr, "replica-a", &place, &a_env);
    lb.point_to(addr_a.parse().expect("address of A"));

    let (id, expected) = accept(&addr_a, &key, &place);
    // A has the media in the bucket: no replica's disk holds it.
    until(COMMAND_TIMEOUT, "A stores the media in the bucket", || place.objects().len() == 1);
    assert!(place.objects()[0].starts_with(&format!("{user}/{id}/")), "{label}: {:?}", place.objects());
    let mut b_env = vec![
        ("GATEWAY_PUBLIC_URL", lb.url()),
        ("GATEWAY_MEDIA_RETENTION", "1s".to_owned()),
        ("GATEWAY_MEDIA_SWEEP_INTERVAL", "1s".to_owned()),
    ];
    b_env.extend(b_extra.iter().cloned());
    let (_b, addr_b) = replica(&sandbox, sim_addr, "replica-b", &place, &b_env);
    lb.point_to(addr_b.parse().expect("address of B"));
    a.0.kill().expect("SIGKILL replica A");
    a.0.wait().expect("reap replica A");

    let task = until_ended(&addr_b, &key, &id, &sandbox, "replica-b");
    assert_eq!(task["status"], "succeeded", "{label}: {task}: {}", common::logged_problems(&sandbox, "replica-b"));
    let fetched = sim.fetched_assets();
    assert_eq!(fetched.len(), 1, "{label}: one asset handed upstream: {fetched:?}");
    assert_eq!(
        (fetched[0].1, fetched[0].2.as_str()),
        (u64::try_from(expected.len()).expect("len"), sha256(&expected).as_str()),
        "{label}: the upstream received the very bytes"
    );
    common::books_when_settled(&rt, &sandbox, &user, SETTLE_LIMIT);

    // The task ended: a second later the sweep deletes its media and gives the quota back.
    assert!(media_used(&rt, &sandbox, &user) > 0, "{label}: the media counts against the quota while kept");
    until(Duration::from_secs(30), "the media sweep deletes the ended task's media", || place.objects().is_empty());
    until(Duration::from_secs(10), "the quota comes back", || media_used(&rt, &sandbox, &user) == 0);
    Some(Finished { fetched, lb: lb.url(), place })
}

#[test]
fn an_upload_accepted_by_a_replica_that_dies_is_finished_by_another() {
    let png =
        [testkit::sample("png"), (0..300_000u32).map(|i| u8::try_from(i % 241).expect("byte")).collect()].concat();
    let file = png.clone();
    let accept = move |addr: &str, key: &str, _: &S3Place| {
        let (headers, body) = multipart_task("image/png", &file);
        let (status, answer) = post_task(addr, key, &headers, &body, COMMAND_TIMEOUT);
        assert_eq!(status, 202, "{answer}");
        (answer["id"].as_str().expect("task id").to_owned(), file.clone())
    };
    let Some(Finished { fetched, lb, .. }) =
        a_replica_dies_and_another_finishes_its_task("upload_finished_by_another", &[], &[], accept)
    else {
        return;
    };
    // Through the gateway's signed link at the shared public address, served by B from the bucket.
    assert!(fetched[0].0.starts_with(&format!("{lb}/media/")), "{}", fetched[0].0);
}

#[test]
fn a_link_imported_by_a_replica_that_dies_is_finished_by_another() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (ca, identity) = testkit::test_pki();
    let (receiver, _log) = rt.block_on(testkit::receiver("127.0.0.1:0", identity)).expect("bind the receiver");
    let dir = std::env::temp_dir().join(format!("gw-media-ca-{}-{}", std::process::id(), receiver.port()));
    std::fs::create_dir_all(&dir).expect("ca dir");
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, &ca).expect("write the CA");
    let egress =
        [("GATEWAY_EGRESS_ALLOW", "127.0.0.1".to_owned()), ("GATEWAY_EXTRA_CA_FILE", ca_file.display().to_string())];
    let accept = move |addr: &str, key: &str, _: &S3Place| {
        let body = json!({
            "model": "videogen-2-0-mini", "prompt": "a fox", "resolution": "480p",
            "media": [{"type": "image", "url": format!("https://127.0.0.1:{}/sample/png", receiver.port())}],
        });
        let (status, task) = common::http_request(addr, "POST", "/api/v1/tasks", Some(key), Some(&body));
        assert_eq!(status, 202, "{task}");
        (task["id"].as_str().expect("task id").to_owned(), testkit::sample("png"))
    };
    // B hands the upstream the store's own pre-signed link: the bytes never pass through a replica.
    let b_extra = [&egress[..], &[("GATEWAY_MEDIA_LINKS", "presigned".to_owned())]].concat();
    let outcome = a_replica_dies_and_another_finishes_its_task("import_finished_by_another", &b_extra, &egress, accept);
    let _ = std::fs::remove_dir_all(&dir);
    let Some(Finished { fetched, place, .. }) = outcome else { return };
    assert!(
        fetched[0].0.starts_with(&format!("{}/{}/{}/", place.endpoint, place.bucket, place.prefix)),
        "{}",
        fetched[0].0
    );
    assert!(fetched[0].0.contains("X-Amz-Signature="), "{}", fetched[0].0);
}

#[test]
fn a_store_cut_off_mid_upload_is_503_and_leaves_nothing() {
    let Some(place) = testkit::s3::place("store_cut_off_mid_upload") else { return };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (sim_addr, _sim) = simulator(&rt);
    let endpoint: SocketAddr = place.endpoint.trim_start_matches("http://").parse().expect("S3 address");
    let relay = rt.block_on(Relay::start(endpoint));
    let (user, key) = common::account(&sandbox, "100", "video:create,task:read,task:write");
    let (_gw, addr) = replica(&sandbox, sim_addr, "gw", &place, &[("GATEWAY_S3_ENDPOINT", relay.url())]);

    // 20 MiB: two full parts and a short one. The store goes away after the first 12 MiB.
    let video = [testkit::sample("mp4"), vec![0u8; 20 << 20]].concat();
    let (headers, body) = multipart_task("video/mp4", &video);
    // Written by hand: the test cuts the store between two writes of the body.
    let mut stream = std::net::TcpStream::connect(&addr).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let head = format!(
        "POST /api/v1/tasks HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Type: {headers}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    use std::io::{Read, Write};
    stream.write_all(head.as_bytes()).expect("head");
    stream.write_all(&body[..12 << 20]).expect("first 12 MiB");
    std::thread::sleep(Duration::from_millis(500));
    relay.cut();
    let cut_at = Instant::now();
    let _ = stream.write_all(&body[12 << 20..]);
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let took = cut_at.elapsed();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.starts_with("HTTP/1.1 503"), "{label}: {answer}");
    let json: Value = answer.split_once("\r\n\r\n").and_then(|(_, b)| serde_json::from_str(b).ok()).unwrap_or_default();
    assert_eq!(json["error"]["code"], "media_store_unavailable", "{answer}");
    assert!(!answer.contains("127.0.0.1") && !answer.contains(&place.bucket), "tells a stranger nothing: {answer}");
    eprintln!("{label}: 503 media_store_unavailable {took:?} after the store was cut off");

    // The store answers again: the multipart upload is aborted, nothing is stored, nothing held.
    relay.restore();
    until(Duration::from_secs(90), "no multipart upload left open", || place.open_uploads() == 0);
    assert!(place.objects().is_empty(), "{label}: {:?}", place.objects());
    let (tasks, entries) = common::books(&rt, &sandbox, &user);
    assert!(tasks.is_empty(), "{label}: no task: {tasks:?}");
    assert_eq!(entries.len(), 1, "{label}: only the opening deposit: {entries:?}");
    assert_eq!(media_used(&rt, &sandbox, &user), 0);
}

#[test]
fn a_200_mb_upload_keeps_the_gateways_memory_level() {
    let Some(place) = testkit::s3::place("a_200_mb_upload") else { return };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sandbox, label) = sandbox(&rt);
    let (sim_addr, sim) = simulator(&rt);
    let (_user, key) = common::account(&sandbox, "100", "video:create,task:read,task:write");
    let (gw, addr) = replica(&sandbox, sim_addr, "gw", &place, &[]);
    let pid = gw.0.id();

    // Warm up: a small upload (the S3 client, pools and buffers exist afterwards).
    let small = [testkit::sample("mp4"), vec![1u8; 1 << 20]].concat();
    let (headers, body) = multipart_task("video/mp4", &small);
    let (status, answer) = post_task(&addr, &key, &headers, &body, COMMAND_TIMEOUT);
    assert_eq!(status, 202, "{answer}");
    let warm = answer["id"].as_str().expect("id").to_owned();
    until_ended(&addr, &key, &warm, &sandbox, "gw");
    let (before, _) = common::memory_kib(pid);

    let mut video = testkit::sample("mp4");
    video.resize(200_000_000, 7);
    let (headers, body) = multipart_task("video/mp4", &video);
    drop(video);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                peak = peak.max(common::memory_kib(pid).0);
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        })
    };
    let started = Instant::now();
    let (status, answer) = post_task(&addr, &key, &headers, &body, Duration::from_secs(300));
    let uploaded_in = started.elapsed();
    assert_eq!(status, 202, "{answer}: {}", common::logged_problems(&sandbox, "gw"));
    drop(body);
    let id = answer["id"].as_str().expect("id").to_owned();
    // The upstream then downloads the 200 MB through the gateway's signed link.
    let task = until_ended(&addr, &key, &id, &sandbox, "gw");
    assert_eq!(task["status"], "succeeded", "{task}");
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let peak = sampler.join().expect("sampler");
    let growth_mib = peak.saturating_sub(before) / 1024;
    let fetched = sim.fetched_assets();
    assert!(fetched.iter().any(|f| f.1 == 200_000_000), "{label}: the upstream read all 200 MB: {fetched:?}");
    eprintln!(
        "{label}: 200 MB upload to S3 in {uploaded_in:?}; gateway RSS {} MiB before, peak {} MiB, growth {growth_mib} MiB",
        before / 1024,
        peak / 1024
    );
    assert!(growth_mib < 64, "{label}: RSS grew {growth_mib} MiB (from {} to {} KiB)", before, peak);
}

#[test]
fn a_bucket_serve_cannot_use_is_exit_64_with_one_line() {
    let sandbox = Sandbox::new();
    let mut command = sandbox.command(&["serve"]);
    command
        .env("GATEWAY_LISTEN", "127.0.0.1:0")
        .env("GATEWAY_MEDIA_STORE", "s3://gateway-tests/p")
        .env("GATEWAY_S3_ENDPOINT", format!("http://{}", closed_port()))
        .env("GATEWAY_S3_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", testkit::s3::ACCESS_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", testkit::s3::SECRET_ACCESS_KEY)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let started = Instant::now();
    let out = command.output().expect("run serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last: Vec<&str> = stderr.lines().filter(|l| l.starts_with("media_store")).collect();
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert_eq!(last.len(), 1, "one line names the setting: {stderr}");
    assert!(last[0].contains("gateway-tests"), "{stderr}");
    assert!(!stderr.contains(testkit::s3::SECRET_ACCESS_KEY), "no secret in the output");
    eprintln!("unusable bucket: exit 64 after {:?}: {}", started.elapsed(), last[0]);
}
