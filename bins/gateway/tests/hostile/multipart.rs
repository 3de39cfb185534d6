//! Multipart uploads: a body without its boundary, a part header without an end, a file that passes
//! the user's media quota mid-stream and a client that stops sending each get their 4xx within the
//! deadline, and leave the gateway's memory and its media folder as they were.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{self, memory_kib, sandbox};
use crate::connections::read_status;

const BOUNDARY: &str = "hostileboundary";
const MIB: u64 = 1024 * 1024;

/// Files under `dir` (temporary ones included), recursively.
fn files_under(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries.filter_map(Result::ok).map(|e| if e.path().is_dir() { files_under(&e.path()) } else { 1 }).sum()
}

/// Opens `POST /api/v1/tasks` as multipart, declaring `length` bytes.
fn open_upload(addr: &str, key: &str, length: u64) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST /api/v1/tasks HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("write head");
    stream
}

/// Sends `total` bytes of `filler` on a clone of `stream` from another thread, at most `rate` bytes a
/// second, stopping at the first error (the server closed the connection).
fn send_in_background(stream: &TcpStream, prefix: Vec<u8>, total: u64, rate: u64) -> std::thread::JoinHandle<u64> {
    let mut out = stream.try_clone().expect("clone the stream");
    std::thread::spawn(move || {
        let started = Instant::now();
        let mut sent = 0u64;
        if out.write_all(&prefix).is_err() {
            return 0;
        }
        let chunk = vec![0u8; 64 * 1024];
        while sent < total && started.elapsed() < Duration::from_secs(30) {
            let n = chunk.len().min(usize::try_from(total - sent).unwrap_or(usize::MAX));
            if out.write_all(&chunk[..n]).is_err() {
                break;
            }
            sent += n as u64;
            // Keep to `rate`: wait until the time this many bytes are due.
            let due = Duration::from_millis(sent.saturating_mul(1000) / rate.max(1));
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                std::thread::sleep(wait);
            }
        }
        sent
    })
}

fn media_part_head(name: &str) -> Vec<u8> {
    format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"f.png\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes()
}

#[test]
fn hostile_multipart_bodies_get_their_4xx_in_time_and_leave_nothing_behind() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, db) = sandbox(&rt);
    let quota = (2 * MIB).to_string();
    let (_, key) =
        common::account_with(&sandbox, "10", "video:create,task:read", &["--media-quota-bytes", quota.as_str()]);
    let mut env = common::video_env(sim);
    env.push(("GATEWAY_BODY_MIN_RATE_BYTES", MIB.to_string()));
    env.push(("GATEWAY_BODY_GRACE", "1000ms".to_owned()));
    let (server, addr) = common::serve_against(&sandbox, sim, "serve-multipart", &env);
    let pid = server.0.id();
    let media = sandbox.dir.join("media");
    let limit = Duration::from_secs(15);
    let mut report = Vec::new();

    // One refused body first: the allocator's first arenas are not what a request costs.
    let (rss_cold, _) = memory_kib(pid);
    let mut s = open_upload(&addr, &key, 200 * MIB);
    let sender = send_in_background(&s, Vec::new(), 200 * MIB, 1 << 40);
    assert_eq!(read_status(&mut s, limit).map(|(status, _)| status), Some(400), "the warm-up body");
    drop(s);
    sender.join().expect("sender");
    let (rss_before, peak_before) = memory_kib(pid);
    // 1. 200 MiB that never contain the boundary, sent as fast as the server takes them.
    let mut s = open_upload(&addr, &key, 200 * MIB);
    let started = Instant::now();
    let sender = send_in_background(&s, Vec::new(), 200 * MIB, 1 << 40);
    let (status, body) = read_status(&mut s, limit).expect("an answer to the body without a boundary");
    let took = started.elapsed();
    drop(s);
    let sent = sender.join().expect("sender");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("no boundary"), "{body}");
    report.push(format!("no boundary: {status} after {} ms, {} MiB sent", took.as_millis(), mib(sent)));

    // 2. A part header that never ends.
    let mut s = open_upload(&addr, &key, 200 * MIB);
    let started = Instant::now();
    let mut head = format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"media\"\r\nX-Pad: ").into_bytes();
    head.extend(std::iter::repeat_n(b'a', 1024));
    let sender = send_in_background(&s, head, 200 * MIB, 1 << 40);
    let (status, body) = read_status(&mut s, limit).expect("an answer to the endless part header");
    let took = started.elapsed();
    drop(s);
    let sent = sender.join().expect("sender");
    assert_eq!(status, 400, "{body}");
    report.push(format!("endless part header: {status} after {} ms, {} MiB sent", took.as_millis(), mib(sent)));

    // 3. A 20-MiB image for a user with a 2-MiB quota, sent at 8 MiB/s: refused at the first byte over
    //    the quota (about a quarter of a second in), long before the file's end (2.5 s).
    let mut s = open_upload(&addr, &key, 20 * MIB + 200);
    let started = Instant::now();
    let mut prefix = media_part_head("media");
    prefix.extend_from_slice(b"\x89PNG\r\n\x1a\n");
    let sender = send_in_background(&s, prefix, 20 * MIB, 8 * MIB);
    let (status, body) = read_status(&mut s, limit).expect("an answer to the upload over the quota");
    let took = started.elapsed();
    drop(s);
    let sent = sender.join().expect("sender");
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("media_quota_exceeded"), "{body}");
    assert!(took < Duration::from_millis(1500), "refused only after {took:?}");
    report.push(format!("over the quota mid-file: {status} after {} ms, {} MiB sent", took.as_millis(), mib(sent)));

    // 4. A client that stops sending half-way through a file: cut by the pace (1 s grace, 1 MiB/s).
    let mut s = open_upload(&addr, &key, 20 * MIB + 200);
    let started = Instant::now();
    let mut prefix = media_part_head("media");
    prefix.extend_from_slice(b"\x89PNG\r\n\x1a\n");
    let sender = send_in_background(&s, prefix, MIB / 2, 1 << 40);
    let (status, body) = read_status(&mut s, limit).expect("an answer to the stalled upload");
    let took = started.elapsed();
    drop(s);
    sender.join().expect("sender");
    assert_eq!(status, 408, "{body}");
    assert!(took < Duration::from_millis(3000), "cut after {took:?}");
    // Due when the first 1-s window ends with half the 1 MiB it needs (the average since the start
    // would have waited 1.5 s).
    report.push(format!("stopped sending: {status} after {} ms (due at 1 s)", took.as_millis()));

    // Nothing stays: no stored or temporary file, the quota all there, memory back where it was.
    std::thread::sleep(Duration::from_millis(300));
    let left = files_under(&media);
    let (rss_after, peak_after) = memory_kib(pid);
    println!(
        "{db}: {}; media files left {left}; RSS {} MiB idle, {} MiB after a first refused body, {} MiB after \
         the four (peak {} -> {} MiB)",
        report.join("; "),
        rss_cold / 1024,
        rss_before / 1024,
        rss_after / 1024,
        peak_before / 1024,
        peak_after / 1024
    );
    assert_eq!(left, 0, "files left in {}", media.display());
    assert!(peak_after < peak_before + 32 * 1024, "peak RSS grew from {peak_before} to {peak_after} KiB");
    assert!(rss_after < rss_before + 32 * 1024, "RSS grew from {rss_before} to {rss_after} KiB");
    let overview = common::http_get(&addr, "/api/v1/overview", Some(&key));
    assert_eq!(overview.0, 401, "the key has no overview scope; the quota is checked below");
    let png = [&b"\x89PNG\r\n\x1a\n"[..], &vec![7u8; usize::try_from(2 * MIB - 8).unwrap_or(0)]].concat();
    let request = br#"{"model":"videogen-2-0","prompt":"a cat","duration":5}"#;
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{}\r\n",
        String::from_utf8_lossy(request)
    )
    .into_bytes();
    body.extend(media_part_head("media"));
    body.extend(&png);
    body.extend(format!("\r\n--{BOUNDARY}--\r\n").into_bytes());
    let mut s = open_upload(&addr, &key, body.len() as u64);
    s.write_all(&body).expect("send the upload");
    let (status, answer) = read_status(&mut s, limit).expect("an answer to the upload of exactly the quota");
    assert_eq!(status, 202, "the whole 2-MiB quota is free again: {answer}");
}

/// `bytes` in MiB with one decimal.
fn mib(bytes: u64) -> String {
    format!("{}.{}", bytes / MIB, (bytes % MIB) * 10 / MIB)
}
