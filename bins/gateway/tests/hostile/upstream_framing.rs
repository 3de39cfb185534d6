//! A hostile upstream's framing (issue 35): the upstream answers a chat call chunked, with a
//! first trailer line that ends exactly at byte 16,384 of the trailers (its LF is that byte,
//! counted from 0: the line that made the old count pass the bound and wrap) and then 20 MiB of
//! a trailer line that never ends. The gateway answers 502 within a second, its peak RSS rises by
//! under 8 MiB, and the call's hold is refunded.
//!
//! The upstream is a scripted server in this test (on 127.0.0.1) that answers the first call
//! normally, so that the gateway's first-call memory is in before the measure, and every later
//! call with the attack.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::common::{account, http_get, logged_problems, memory_kib, sandbox, serve_against, terminate};
use super::raw::post_bytes;

/// The trailer bound of the upstream client.
const TRAILER_BOUND: usize = 16 * 1024;
/// The never-ending trailer line that follows.
const ENDLESS: usize = 20 * 1024 * 1024;
/// The most the attack may raise the gateway's peak RSS.
const RISE_BOUND_KIB: u64 = 8 * 1024;
/// How long the upstream keeps writing at most.
const WRITE_LIMIT: Duration = Duration::from_secs(10);

/// The scripted upstream: its address, how many calls it has had, and how many attack bytes it
/// wrote before the gateway closed the connection.
struct Hostile {
    addr: std::net::SocketAddr,
    calls: Arc<AtomicUsize>,
    written: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Hostile {
    fn start() -> Hostile {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
        let addr = listener.local_addr().expect("address");
        let (calls, written, stop) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (count, bytes, flag) = (Arc::clone(&calls), Arc::clone(&written), Arc::clone(&stop));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                if let Ok(conn) = conn {
                    let (count, bytes) = (Arc::clone(&count), Arc::clone(&bytes));
                    std::thread::spawn(move || serve(conn, &count, &bytes));
                }
            }
        });
        Hostile { addr, calls, written, stop }
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Reads one request (head and `Content-Length` body); false at the close.
fn read_request(reader: &mut BufReader<TcpStream>) -> bool {
    let mut length = 0usize;
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return false;
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut rest = reader.take(u64::try_from(length).unwrap_or(0));
    std::io::copy(&mut rest, &mut std::io::sink()).is_ok()
}

/// Serves one connection: the first call of all normally, every later one with the attack.
fn serve(conn: TcpStream, calls: &AtomicUsize, written: &AtomicUsize) {
    let _ = conn.set_read_timeout(Some(WRITE_LIMIT));
    let _ = conn.set_write_timeout(Some(WRITE_LIMIT));
    let mut reader = BufReader::new(conn);
    while read_request(&mut reader) {
        let conn = reader.get_mut();
        let body = r#"{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}"#;
        if calls.fetch_add(1, Ordering::SeqCst) == 0 {
            let head =
                format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
            if conn.write_all(head.as_bytes()).and_then(|()| conn.write_all(body.as_bytes())).is_err() {
                return;
            }
            continue;
        }
        // The whole answer chunked, then the last chunk, a first trailer line whose LF is byte
        // 16,384 of the trailers, and a line that never ends.
        let mut start = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n0\r\n",
            body.len()
        )
        .into_bytes();
        let mut first = b"x-pad: ".to_vec();
        first.resize(TRAILER_BOUND - 1, b'p');
        first.extend_from_slice(b"\r\n");
        assert_eq!(first.len(), TRAILER_BOUND + 1);
        start.extend_from_slice(&first);
        if conn.write_all(&start).is_err() {
            return;
        }
        let filler = vec![b'a'; 64 * 1024];
        let started = Instant::now();
        let mut sent = 0;
        while sent < ENDLESS && started.elapsed() < WRITE_LIMIT {
            if conn.write_all(&filler).is_err() {
                break;
            }
            sent += filler.len();
            written.store(sent, Ordering::SeqCst);
        }
        return;
    }
}

/// The overview's balance of the key's user, as text.
fn balance(addr: &str, key: &str) -> String {
    let (status, overview) = http_get(addr, "/api/v1/overview", Some(key));
    assert_eq!(status, 200, "{overview}");
    overview["user"]["balance_usd"].as_str().expect("balance_usd").to_owned()
}

#[test]
fn an_endless_trailer_line_is_cut_at_its_bound() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let upstream = Hostile::start();
    let (sandbox, db) = sandbox(&rt);
    let (_user, key) = account(&sandbox, "10", "language:create,overview:read");
    let (mut gateway, addr) = serve_against(&sandbox, upstream.addr, "serve-trailers", &[]);
    let pid = gateway.0.id();
    let chat = br#"{"model":"LangA-V4-flash","messages":[{"role":"user","content":"hi"}],"max_tokens":16}"#;
    let limit = Duration::from_secs(30);

    let (status, text) = post_bytes(&addr, "/api/v1/chat/completions", &key, "", chat, limit);
    assert_eq!(status, 200, "{db}: the warm-up call: {text}\n{}", logged_problems(&sandbox, "serve-trailers"));
    let before = balance(&addr, &key);
    let (rss_before, peak_before) = memory_kib(pid);

    let started = Instant::now();
    let (status, text) = post_bytes(&addr, "/api/v1/chat/completions", &key, "", chat, limit);
    let seconds = started.elapsed().as_secs_f64();
    let (rss_after, peak_after) = memory_kib(pid);
    let rise = peak_after.saturating_sub(peak_before);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    println!(
        "{db}: endless trailer line: {status} after {seconds:.3} s; peak RSS {peak_before} KiB -> {peak_after} KiB \
         (+{rise} KiB, bound +{RISE_BOUND_KIB} KiB), RSS {rss_before} -> {rss_after} KiB; the upstream wrote {} \
         bytes of the endless line by then; {body}",
        upstream.written.load(Ordering::SeqCst)
    );
    assert_eq!(status, 502, "{db}: {text}\n{}", logged_problems(&sandbox, "serve-trailers"));
    assert!(text.contains("upstream_request_failed"), "{db}: {text}");
    assert!(seconds < 1.0, "{db}: answered after {seconds:.3} s");
    assert!(rise < RISE_BOUND_KIB, "{db}: the peak RSS rose by {rise} KiB");
    assert_eq!(balance(&addr, &key), before, "{db}: the hold was refunded");
    assert!(upstream.calls.load(Ordering::SeqCst) >= 2, "{db}: the attack reached the gateway");
    terminate(&mut gateway.0);
}
