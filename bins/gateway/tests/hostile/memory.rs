//! Memory bounded by the bytes received (issue 19 §2), for the chat-family bodies: a 60 MB body whose
//! pass-through field is `[0,0,0,…]` (which a `serde_json::Value` tree makes 16–32 times larger)
//! raises the gateway's peak RSS (`VmHWM` in `/proc/<pid>/status`) by at most twice its size plus
//! 32 MiB: the body held once by the edge, and the upstream body written from its raw members.
//! Ten such bodies at once keep the peak under 1.5 GiB (a 503 `server_busy` from the body budget
//! is allowed). The same for the message-style and response-style formats.
//!
//! The upstream is a small server in this test that reads each request to its end and throws it
//! away, so that only the gateway's memory is measured.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::common::{account, sandbox, serve_against};
use super::raw::post_bytes;

/// The body size of the probe.
const BODY_BYTES: usize = 60_000_000;
/// How many bodies are sent at once in the second step.
const CONCURRENT: usize = 10;
/// The allowed rise of the peak RSS for one body: twice its size plus 32 MiB.
const ONE_BODY_RISE: u64 = 2 * BODY_BYTES as u64 + 32 * 1024 * 1024;
/// The most the peak RSS may reach with [`CONCURRENT`] bodies at once: 1.5 GiB.
const CONCURRENT_PEAK: u64 = 1536 * 1024 * 1024;
/// How long one request may take (a debug build reads 60 MB several times).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
const MIB: u64 = 1024 * 1024;

/// An upstream that answers every request, after reading its body to the end, with a fixed
/// answer in the format its path names.
struct Discard {
    addr: String,
    stop: Arc<AtomicBool>,
}

impl Discard {
    fn start() -> Discard {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
        let addr = listener.local_addr().expect("address").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                if let Ok(conn) = conn {
                    std::thread::spawn(move || answer(conn));
                }
            }
        });
        Discard { addr, stop }
    }
}

impl Drop for Discard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(&self.addr);
    }
}

/// Serves the requests of one connection: reads the head and `Content-Length` bytes, answers.
fn answer(conn: TcpStream) {
    let _ = conn.set_read_timeout(Some(REQUEST_TIMEOUT));
    let mut reader = BufReader::new(conn);
    loop {
        let mut path = String::new();
        let mut length = 0usize;
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(p) = line.split_whitespace().nth(1) {
            path = p.to_owned();
        }
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
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
        let mut rest = (&mut reader).take(u64::try_from(length).unwrap_or(u64::MAX));
        if std::io::copy(&mut rest, &mut std::io::sink()).is_err() {
            return;
        }
        let body = if path.contains("/messages") {
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}"#
        } else if path.contains("/responses") {
            r#"{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[],"usage":{"input_tokens":10,"output_tokens":1,"total_tokens":11}}"#
        } else {
            r#"{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}"#
        };
        let head =
            format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", body.len());
        let conn = reader.get_mut();
        if conn.write_all(head.as_bytes()).and_then(|()| conn.write_all(body.as_bytes())).is_err() {
            return;
        }
    }
}

/// The chat-family format under test: its path, extra headers and the body around the padding.
struct Format {
    name: &'static str,
    path: &'static str,
    headers: &'static str,
    head: &'static str,
}

const FORMATS: [Format; 3] = [
    Format {
        name: "chat",
        path: "/api/v1/chat/completions",
        headers: "",
        head: r#"{"model":"LangA-V4-flash","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"pad":["#,
    },
    Format {
        name: "messages",
        path: "/v1/messages",
        headers: "anthropic-version: 2023-06-01\r\n",
        head: r#"{"model":"LangA-V4-flash","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"pad":["#,
    },
    Format {
        name: "responses",
        path: "/v1/responses",
        headers: "",
        head: r#"{"model":"LangA-V4-flash","input":"hi","max_output_tokens":16,"pad":["#,
    },
];

/// A body of exactly `size` bytes: the format's head, then `0,0,…,0]}` (a space before the end
/// when the size is odd).
fn padded(head: &str, size: usize) -> Vec<u8> {
    let mut body = Vec::with_capacity(size);
    body.extend_from_slice(head.as_bytes());
    let zeros = (size - head.len() - 3) / 2;
    for _ in 0..zeros {
        body.extend_from_slice(b"0,");
    }
    body.extend_from_slice(b"0");
    body.resize(size - 2, b' ');
    body.extend_from_slice(b"]}");
    body
}

/// `VmHWM` (peak resident set) and `VmRSS` of process `pid`, in bytes.
fn memory(pid: u32) -> (u64, u64) {
    let (rss, peak) = crate::common::memory_kib(pid);
    (peak * 1024, rss * 1024)
}

#[test]
fn chat_family_bodies_cost_their_bytes_not_a_tree() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let upstream = Discard::start();
    let upstream_addr: std::net::SocketAddr = upstream.addr.parse().expect("address");
    for format in &FORMATS {
        let (sandbox, db) = sandbox(&rt);
        let (_user, key) = account(&sandbox, "1000", "language:create,task:read");
        // Concurrency caps are not what is measured: without them no body waits for a slot. The
        // message-style base defaults to the built-in simulator, which would parse the body in the
        // gateway's own process: it goes to the discarding upstream too.
        let env = [
            ("GATEWAY_CAPS", "false".to_owned()),
            ("GATEWAY_MESSAGES_URL", format!("http://{}/api/compatible", upstream.addr)),
        ];
        let (mut gateway, addr) = serve_against(&sandbox, upstream_addr, &format!("memory-{}", format.name), &env);
        let pid = gateway.0.id();
        let small = padded(format.head, 200);
        let (status, text) = post_bytes(&addr, format.path, &key, format.headers, &small, REQUEST_TIMEOUT);
        assert_eq!(status, 200, "{db} {}: warm-up call: {text}", format.name);
        let body = Arc::new(padded(format.head, BODY_BYTES));
        assert_eq!(body.len(), BODY_BYTES);

        let (peak_before, rss_before) = memory(pid);
        let started = Instant::now();
        let (status, text) = post_bytes(&addr, format.path, &key, format.headers, &body, REQUEST_TIMEOUT);
        assert_eq!(status, 200, "{db} {}: one 60 MB body: {}", format.name, text.chars().take(300).collect::<String>());
        let (peak_one, _) = memory(pid);
        let rise = peak_one.saturating_sub(peak_before);
        println!(
            "{db} {}: one {} MB body: peak RSS {} MiB -> {} MiB (+{} MiB, bound +{} MiB; RSS before {} MiB), {:.1} s",
            format.name,
            BODY_BYTES / 1_000_000,
            peak_before / MIB,
            peak_one / MIB,
            rise / MIB,
            ONE_BODY_RISE / MIB,
            rss_before / MIB,
            started.elapsed().as_secs_f64()
        );
        assert!(rise <= ONE_BODY_RISE, "{db} {}: one body raised the peak by {} MiB", format.name, rise / MIB);

        let started = Instant::now();
        let senders: Vec<_> = (0..CONCURRENT)
            .map(|_| {
                let (body, addr, key) = (Arc::clone(&body), addr.clone(), key.clone());
                let (path, headers) = (format.path, format.headers);
                std::thread::spawn(move || post_bytes(&addr, path, &key, headers, &body, REQUEST_TIMEOUT))
            })
            .collect();
        let answers: Vec<(u16, String)> = senders.into_iter().map(|s| s.join().expect("sender")).collect();
        let (peak_all, _) = memory(pid);
        let ok = answers.iter().filter(|(s, _)| *s == 200).count();
        let busy = answers.iter().filter(|(s, t)| *s == 503 && t.contains("server_busy")).count();
        println!(
            "{db} {}: {CONCURRENT} bodies at once: {ok} answered 200, {busy} 503 server_busy; peak RSS {} MiB \
             (bound {} MiB), {:.1} s",
            format.name,
            peak_all / MIB,
            CONCURRENT_PEAK / MIB,
            started.elapsed().as_secs_f64()
        );
        let unexpected = answers.iter().any(|(s, t)| !(*s == 200 || (*s == 503 && t.contains("server_busy"))));
        if unexpected {
            let log = sandbox.dir.join(format!("memory-{}.err", format.name));
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            println!(
                "{db} {}: the gateway's last log lines:\n{}",
                format.name,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        for (status, text) in &answers {
            assert!(
                *status == 200 || (*status == 503 && text.contains("server_busy")),
                "{db} {}: {status} {}",
                format.name,
                text.chars().take(300).collect::<String>()
            );
        }
        assert!(ok >= 1, "{db} {}: at least one body is served", format.name);
        assert!(peak_all <= CONCURRENT_PEAK, "{db} {}: peak RSS {} MiB", format.name, peak_all / MIB);
        super::common::terminate(&mut gateway.0);
    }
    drop(upstream);
}
