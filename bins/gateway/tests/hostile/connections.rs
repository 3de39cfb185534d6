//! Connections and request bodies: a half-sent header, an idle keep-alive connection and a client that
//! never finishes the first bytes are closed within their timeouts, and HTTP/2 with prior knowledge is
//! served beside HTTP/1.1; thousands of idle connections, and
//! connections past the cap, do not stop a normal call from being answered; a trickled body is cut with
//! 408 and gives its room in the body budget back, and one user's large bodies cannot take another's room.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{self, http_request, sandbox};

/// Reads from `stream` until the server closes it (EOF or reset), at most `limit`; how long that took.
fn time_to_close(stream: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    stream.set_read_timeout(Some(Duration::from_millis(100))).expect("read timeout");
    let mut buf = [0u8; 4096];
    while started.elapsed() < limit {
        match stream.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
    None
}

/// The status of the first response on `stream`, read within `limit`.
pub fn read_status(stream: &mut TcpStream, limit: Duration) -> Option<(u16, String)> {
    let started = Instant::now();
    stream.set_read_timeout(Some(Duration::from_millis(50))).expect("read timeout");
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while started.elapsed() < limit {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&got);
                if let Some(end) = text.find("\r\n\r\n") {
                    let status = text.get(9..12).and_then(|s| s.parse().ok())?;
                    // Give the body a moment to follow the head.
                    std::thread::sleep(Duration::from_millis(20));
                    if let Ok(n) = stream.read(&mut buf) {
                        got.extend_from_slice(&buf[..n]);
                    }
                    let body = String::from_utf8_lossy(&got).get(end + 4..).unwrap_or_default().to_owned();
                    return Some((status, body));
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    None
}

/// Opens a chat call on a fresh connection that declares `length` bytes of body and sends `first` of them.
fn start_body(addr: &str, key: &str, length: u64, first: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let head = format!(
        "POST /api/v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("write head");
    stream.write_all(first).expect("write the first bytes");
    stream
}

/// A chat body of about `size` bytes (its one message padded with spaces).
fn chat_body(size: usize) -> Vec<u8> {
    let skeleton = json!({"model": "LangA-V4-flash", "max_tokens": 8, "messages": [{"role": "user", "content": ""}]});
    let text = skeleton.to_string();
    let pad = size.saturating_sub(text.len());
    text.replacen("\"content\":\"\"", &format!("\"content\":\"hi{}\"", " ".repeat(pad)), 1).into_bytes()
}

#[test]
fn stalled_and_idle_connections_are_closed_within_their_timeouts() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let env = [("GATEWAY_HEADER_READ_TIMEOUT", "1000ms".to_owned()), ("GATEWAY_IDLE_TIMEOUT", "2500ms".to_owned())];
    let (_server, addr) = common::serve_against(&sandbox, sim, "serve-conn", &env);
    let limit = Duration::from_secs(10);

    // Half a request header (past the bytes that tell HTTP/1.1 from HTTP/2).
    let mut half = TcpStream::connect(&addr).expect("connect");
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ").expect("write");
    // Two bytes of an HTTP/1.1 request line, and two of HTTP/2's preface (the protocol is not
    // known yet: the server is still looking at the first bytes).
    let mut two = TcpStream::connect(&addr).expect("connect");
    two.write_all(b"GE").expect("write");
    let mut pr = TcpStream::connect(&addr).expect("connect");
    pr.write_all(b"PR").expect("write");
    // Nothing at all, and an idle keep-alive connection after one request.
    let mut silent = TcpStream::connect(&addr).expect("connect");
    let mut kept = TcpStream::connect(&addr).expect("connect");
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    assert_eq!(read_status(&mut kept, limit).map(|(s, _)| s), Some(200));

    let half_cut = time_to_close(&mut half, limit).expect("the half header is closed");
    let two_cut = time_to_close(&mut two, limit).expect("the two bytes are closed");
    let pr_cut = time_to_close(&mut pr, limit).expect("the two bytes of the preface are closed");
    let kept_cut = time_to_close(&mut kept, limit).expect("the idle keep-alive connection is closed");
    let silent_cut = time_to_close(&mut silent, limit).expect("the silent connection is closed");
    println!(
        "header timeout 1.0 s, idle timeout 2.5 s: half header closed after {:.2} s, two bytes after {:.2} s, \
         two bytes of the HTTP/2 preface after {:.2} s, idle keep-alive after (at most) {:.2} s more, \
         silent connection after (at most) {:.2} s more",
        half_cut.as_secs_f64(),
        two_cut.as_secs_f64(),
        pr_cut.as_secs_f64(),
        kept_cut.as_secs_f64(),
        silent_cut.as_secs_f64()
    );
    assert!(half_cut <= Duration::from_millis(1800), "half header closed after {half_cut:?}");
    assert!(two_cut <= Duration::from_millis(1800), "two bytes closed after {two_cut:?}");
    assert!(pr_cut <= Duration::from_millis(1800), "two bytes of the preface closed after {pr_cut:?}");
    // Measured from after the half header closed: the idle ones had 2.5 s from their start.
    assert!(kept_cut <= Duration::from_millis(2500), "idle keep-alive closed after {kept_cut:?} more");
    assert!(silent_cut <= Duration::from_millis(2500), "silent closed after {silent_cut:?} more");

    // HTTP/2 with prior knowledge is served on the same port: the preface and an empty SETTINGS
    // frame are answered with the server's own SETTINGS frame (type 4, stream 0).
    let mut h2 = TcpStream::connect(&addr).expect("connect");
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").expect("write");
    h2.set_read_timeout(Some(limit)).expect("timeout");
    let mut head = [0u8; 9];
    h2.read_exact(&mut head).expect("the server's first frame");
    assert_eq!((head[3], &head[5..9]), (4, &[0u8; 4][..]), "a SETTINGS frame on stream 0: {head:?}");

    // A connection in use is never cut by the idle timeout: a stream longer than it runs to its end.
    let (_, key) = common::account(&sandbox, "10", "language:create");
    let body = json!({"model": "LangA-V4-flash", "max_tokens": 40, "stream": true,
        "messages": [{"role": "user", "content": "slow stream"}], "sim_chunk_delay_ms": 250});
    let started = Instant::now();
    let (status, _) = http_request(&addr, "POST", "/api/v1/chat/completions", Some(&key), Some(&body));
    assert_eq!(status, 200);
    let lasted = started.elapsed();
    println!("a stream of {:.1} s outlived the 2.5-s idle timeout", lasted.as_secs_f64());
    assert!(lasted > Duration::from_millis(2600), "the stream took only {lasted:?}");
}

#[test]
fn idle_connections_and_connections_past_the_cap_do_not_stop_a_call() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let (_, key) = common::account(&sandbox, "10", "language:create");
    let body = json!({"model": "LangA-V4-flash", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});

    // 2,000 idle connections under the default cap (all from 127.0.0.1: the per-address cap is lifted).
    let per_ip = [("GATEWAY_MAX_CONNECTIONS_PER_IP", "8192".to_owned())];
    let (server, addr) = common::serve_against(&sandbox, sim, "serve-idle", &per_ip);
    let idle: Vec<TcpStream> = (0..2000).map(|_| TcpStream::connect(&addr).expect("connect")).collect();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let (status, answer) = http_request(&addr, "POST", "/api/v1/chat/completions", Some(&key), Some(&body));
    assert_eq!(status, 200, "{answer}");
    println!("with {} idle connections open, a chat call was answered in {} ms", idle.len(), ms(started));
    drop(idle);
    drop(server);

    // A cap of 50 and 60 silent connections: the call waits in the accept queue until the idle timeout
    // frees slots, and the gateway never holds more than the cap.
    let env = [("GATEWAY_MAX_CONNECTIONS", "50".to_owned()), ("GATEWAY_IDLE_TIMEOUT", "1500ms".to_owned())];
    let (server, addr) = common::serve_against(&sandbox, sim, "serve-cap", &env);
    let idle: Vec<TcpStream> = (0..60).map(|_| TcpStream::connect(&addr).expect("connect")).collect();
    std::thread::sleep(Duration::from_millis(300));
    let sockets = open_sockets(server.0.id());
    let started = Instant::now();
    let (status, answer) = http_request(&addr, "POST", "/api/v1/chat/completions", Some(&key), Some(&body));
    assert_eq!(status, 200, "{answer}");
    println!(
        "cap 50, 60 silent connections: the gateway held {sockets} sockets; a call past the cap was answered \
         after {} ms (idle timeout 1,500 ms)",
        ms(started)
    );
    assert!(sockets <= 50 + 16, "{sockets} sockets open with a cap of 50");
    assert!(started.elapsed() < Duration::from_secs(5), "the call waited {:?}", started.elapsed());
    drop(idle);
}

/// Sockets the process `pid` has open (its client connections, the listener, database and upstream).
fn open_sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:")))
                .count()
        })
        .unwrap_or(0)
}

fn ms(since: Instant) -> u128 {
    since.elapsed().as_millis()
}

#[test]
fn a_trickled_body_is_cut_and_one_user_cannot_take_another_users_room() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let (_, a) = common::account(&sandbox, "10", "language:create");
    let (_, b) = common::account(&sandbox, "10", "language:create");
    let mib: u64 = 1024 * 1024;
    let env = [
        ("GATEWAY_BODY_BUDGET_BYTES", (8 * mib).to_string()),
        ("GATEWAY_BODY_BUDGET_USER_BYTES", (4 * mib).to_string()),
        ("GATEWAY_BODY_MIN_RATE_BYTES", mib.to_string()),
        ("GATEWAY_BODY_GRACE", "1000ms".to_owned()),
    ];
    let (_server, addr) = common::serve_against(&sandbox, sim, "serve-trickle", &env);
    let body = chat_body(usize::try_from(3 * mib).unwrap_or(0));
    let declared = 60 * mib;

    // User A starts two bodies that declare 60 MiB, sends 3 MiB of each, then trickles.
    let started = Instant::now();
    let mut first = start_body(&addr, &a, declared, &body);
    let mut second = start_body(&addr, &a, declared, &body);
    std::thread::sleep(Duration::from_millis(200));
    // User B's 3-MiB call is answered at once: A holds at most its 4-MiB share of the 8-MiB budget.
    let b_started = Instant::now();
    let mut call = start_body(&addr, &b, body.len() as u64, &body);
    let (status, answer) = read_status(&mut call, Duration::from_secs(10)).expect("B is answered");
    let b_took = b_started.elapsed();
    assert_eq!(status, 200, "{answer}");
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(100));
        let _ = first.write_all(b" ");
        let _ = second.write_all(b" ");
    }
    let ends: Vec<(Option<u16>, Duration)> = [first, second]
        .map(|mut s| {
            std::thread::spawn(move || {
                let status = read_status(&mut s, Duration::from_secs(20)).map(|(s, _)| s);
                (status, started.elapsed())
            })
        })
        .into_iter()
        .map(|t| t.join().expect("reader"))
        .collect();
    let shown: Vec<String> =
        ends.iter().map(|(s, t)| format!("{} after {:.2} s", s.unwrap_or(0), t.as_secs_f64())).collect();
    println!(
        "budget 8 MiB, 4 MiB a user, pace 1 MiB/s after 1 s: B's 3-MiB call answered in {} ms while A trickled \
         two 60-MiB bodies; A's bodies ended {}",
        b_took.as_millis(),
        shown.join(" and ")
    );
    assert!(b_took < Duration::from_secs(2), "B waited {b_took:?}");
    // A's two bodies share A's 4-MiB share: each ends with 408 (cut by its pace, due at 1 s + what it
    // sent at 1 MiB/s, time spent waiting for room excused) or 503 (no room in A's share within the
    // 10-s wait), whichever way they interleave; so all within 10 s + 1 s + 4 MiB at 1 MiB/s, plus slack.
    assert!(ends.iter().any(|(s, _)| matches!(s, Some(408 | 503))), "{shown:?}");
    assert!(ends.iter().all(|(s, t)| matches!(s, Some(408 | 503)) && *t < Duration::from_secs(20)), "{shown:?}");
    // Once cut, A's room is back: A's own 3-MiB call goes through.
    let mut again = start_body(&addr, &a, body.len() as u64, &body);
    assert_eq!(read_status(&mut again, Duration::from_secs(10)).map(|(s, _)| s), Some(200));
}
