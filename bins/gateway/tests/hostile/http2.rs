//! HTTP/2 with prior knowledge against hostile clients, in frames written by hand: connections that
//! open no window (`SETTINGS_INITIAL_WINDOW_SIZE = 0`) for the answer they asked for and answer every
//! PING are cut after the idle timeout while another client is served; a rapid reset (HEADERS then
//! RST_STREAM, again and again) is closed with GOAWAY; a CONTINUATION flood, a SETTINGS flood and a
//! PING flood leave the gateway's memory where it was.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::common::{self, memory_kib, sandbox};
use crate::connections::read_status;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
/// The GOAWAY code of a peer that makes too much work (RFC 9113 §7).
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame: its 9-byte head, then `payload`.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("frame length");
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A SETTINGS frame with `params` (identifier, value).
fn settings(params: &[(u16, u32)]) -> Vec<u8> {
    let payload: Vec<u8> =
        params.iter().flat_map(|(id, v)| id.to_be_bytes().into_iter().chain(v.to_be_bytes())).collect();
    frame(SETTINGS, 0, 0, &payload)
}

/// The HPACK block of `GET path` (static-table names, literal values without indexing; short strings).
fn get_block(path: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86]; // :method GET, :scheme http
    for (name_index, value) in [(4u8, path), (1, "localhost")] {
        block.push(name_index); // literal without indexing, indexed name (:path, :authority)
        block.push(u8::try_from(value.len()).expect("a short value"));
        block.extend_from_slice(value.as_bytes());
    }
    block
}

/// A complete `GET path` request on `stream`.
fn get(stream: u32, path: &str) -> Vec<u8> {
    frame(HEADERS, END_STREAM | END_HEADERS, stream, &get_block(path))
}

/// Reads one frame (kind, flags, stream, payload); `None` at EOF, on an error or a timeout.
fn read_frame(conn: &mut TcpStream) -> Option<(u8, u8, u32, Vec<u8>)> {
    let mut head = [0u8; 9];
    conn.read_exact(&mut head).ok()?;
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    let mut payload = vec![0u8; len];
    conn.read_exact(&mut payload).ok()?;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    Some((head[3], head[4], stream, payload))
}

/// A prior-knowledge HTTP/2 connection that has sent its preface and `settings`.
fn open(addr: &str, params: &[(u16, u32)]) -> TcpStream {
    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.write_all(&[PREFACE, &settings(params)].concat()).expect("preface");
    conn
}

/// What happened to a connection that held an answer back.
struct Held {
    /// From its request to the server's close.
    cut: Option<Duration>,
    pings: usize,
    head: bool,
    data: usize,
}

/// Opens a connection with a stream window of 0, asks for `/healthz`, answers every SETTINGS and
/// PING, and reads until the server closes it (at most `limit`).
fn hold(addr: &str, sent: mpsc::Sender<()>, limit: Duration) -> Held {
    let mut conn = open(addr, &[(0x4, 0)]); // SETTINGS_INITIAL_WINDOW_SIZE = 0
    conn.write_all(&get(1, "/healthz")).expect("request");
    let asked = Instant::now();
    let _ = sent.send(());
    conn.set_read_timeout(Some(limit)).expect("timeout");
    let mut held = Held { cut: None, pings: 0, head: false, data: 0 };
    while asked.elapsed() < limit {
        let Some((kind, flags, stream, payload)) = read_frame(&mut conn) else {
            held.cut = Some(asked.elapsed());
            break;
        };
        match kind {
            SETTINGS if flags & ACK == 0 => conn.write_all(&frame(SETTINGS, ACK, 0, &[])).expect("ack"),
            PING if flags & ACK == 0 => {
                held.pings += 1;
                let _ = conn.write_all(&frame(PING, ACK, 0, &payload));
            }
            HEADERS if stream == 1 => held.head = true,
            DATA => held.data += payload.len(),
            _ => {}
        }
    }
    held
}

#[test]
fn connections_that_open_no_window_are_cut_and_another_client_is_served() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let env = [
        ("GATEWAY_MAX_CONNECTIONS", "4".to_owned()),
        ("GATEWAY_IDLE_TIMEOUT", "2000ms".to_owned()),
        // PINGs every second, all answered: they are no progress of the held answers.
        ("GATEWAY_HTTP2_KEEPALIVE", "1000ms".to_owned()),
    ];
    let (_server, addr) = common::serve_against(&sandbox, sim, "serve-h2-window", &env);
    let limit = Duration::from_secs(20);
    let (sent, asked) = mpsc::channel();
    let holders: Vec<_> = (0..4)
        .map(|_| {
            let (addr, sent) = (addr.clone(), sent.clone());
            std::thread::spawn(move || hold(&addr, sent, limit))
        })
        .collect();
    for _ in 0..4 {
        asked.recv_timeout(limit).expect("every holder asked");
    }
    // A fifth client, past the cap of 4: it waits in the accept queue until a holder is cut.
    let started = Instant::now();
    let mut fifth = TcpStream::connect(&addr).expect("connect");
    fifth.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
    let answer = read_status(&mut fifth, limit).map(|(s, _)| s);
    let answered = started.elapsed();
    let held: Vec<Held> = holders.into_iter().map(|h| h.join().expect("holder")).collect();
    let cuts: Vec<String> = held
        .iter()
        .map(|h| {
            let cut = h.cut.map_or("never".to_owned(), |c| format!("{:.2} s", c.as_secs_f64()));
            format!("{cut} ({} PINGs answered, head {}, {} data bytes)", h.pings, h.head, h.data)
        })
        .collect();
    println!(
        "4 HTTP/2 connections with window 0 on GET /healthz, cap 4, idle timeout 2 s: cut after {}; \
         a fifth client's /healthz answered {answer:?} after {:.2} s",
        cuts.join(", "),
        answered.as_secs_f64()
    );
    assert_eq!(answer, Some(200), "the fifth client is served");
    assert!(answered <= Duration::from_secs(3), "the fifth client waited {answered:?}");
    for h in &held {
        let cut = h.cut.expect("every holder is cut");
        assert!(cut >= Duration::from_millis(1500) && cut <= Duration::from_secs(3), "cut after {cut:?}");
        assert_eq!(h.data, 0, "no window, no data");
    }
    assert!(held.iter().any(|h| h.pings > 0), "the server's PINGs were answered meanwhile");
}

/// Reads frames until GOAWAY and EOF (at most `limit`): (GOAWAY code, when it came, answers seen,
/// when the connection closed).
fn until_closed(conn: &mut TcpStream, limit: Duration) -> (Option<u32>, Option<Duration>, usize, Option<Duration>) {
    let started = Instant::now();
    conn.set_read_timeout(Some(limit)).expect("timeout");
    let (mut code, mut goaway, mut answers) = (None, None, 0);
    while started.elapsed() < limit {
        match read_frame(conn) {
            Some((GOAWAY, _, _, payload)) => {
                code = payload.get(4..8).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
                goaway = Some(started.elapsed());
            }
            Some((HEADERS, ..)) => answers += 1,
            Some(_) => {}
            None => return (code, goaway, answers, Some(started.elapsed())),
        }
    }
    (code, goaway, answers, None)
}

#[test]
fn rapid_reset_and_continuation_settings_and_ping_floods_are_bounded() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let env = [("GATEWAY_IDLE_TIMEOUT", "3000ms".to_owned())];
    let (server, addr) = common::serve_against(&sandbox, sim, "serve-h2-flood", &env);
    let pid = server.0.id();
    let limit = Duration::from_secs(10);
    assert_eq!(common::http_get(&addr, "/healthz", None).0, 200, "warm-up");
    let mut report = Vec::new();

    // Rapid reset: 5,000 streams opened and cancelled at once.
    let (_, before) = memory_kib(pid);
    let mut conn = open(&addr, &[]);
    let burst: Vec<u8> = (0..5000u32)
        .flat_map(|i| [get(2 * i + 1, "/healthz"), frame(RST_STREAM, 0, 2 * i + 1, &8u32.to_be_bytes())].concat())
        .collect();
    conn.set_write_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let started = Instant::now();
    let _ = conn.write_all(&burst); // the server may close before it has read it all
    let (code, goaway, answers, closed) = until_closed(&mut conn, limit);
    let wrote = started.elapsed().saturating_sub(closed.unwrap_or_default());
    let (goaway, closed) = (goaway.map(|g| g + wrote), closed.map(|c| c + wrote));
    let (_, after) = memory_kib(pid);
    report.push(format!(
        "rapid reset, 5,000 HEADERS+RST_STREAM in one write: GOAWAY {code:?} after {:?} ms, {answers} streams answered, \
         closed after {:?} ms, peak +{} KiB",
        goaway.map(|g| format!("{:.1}", g.as_secs_f64() * 1000.0)),
        closed.map(|c| format!("{:.1}", c.as_secs_f64() * 1000.0)),
        after.saturating_sub(before)
    ));
    assert_eq!(code, Some(ENHANCE_YOUR_CALM), "{report:?}");
    assert!(closed.is_some(), "{report:?}");

    // CONTINUATION flood: a header block that never ends, 16-KiB frames, at most 1,000 (16 MiB).
    let (_, before) = memory_kib(pid);
    let mut conn = open(&addr, &[]);
    let mut start = get_block("/healthz");
    start.extend_from_slice(&[0x00, 0x01, b'x', 0x7f, 0xff, 0xff, 0xff, 0x07]); // x: a 16-MiB value
    let sent_at = Instant::now();
    conn.set_write_timeout(Some(Duration::from_secs(2))).expect("timeout");
    let chunk = frame(CONTINUATION, 0, 1, &[b'a'; 16 * 1024]);
    let mut written = 0;
    if conn.write_all(&frame(HEADERS, END_STREAM, 1, &start)).is_ok() {
        while written < 1000 && conn.write_all(&chunk).is_ok() {
            written += 1;
        }
    }
    let (code, _, _, closed) = until_closed(&mut conn, limit);
    let (_, after) = memory_kib(pid);
    report.push(format!(
        "CONTINUATION flood: {} CONTINUATION frames written before the server stopped reading, GOAWAY {code:?}, closed \
         after {:?} ms, peak +{} KiB",
        written,
        closed.map(|_| sent_at.elapsed().as_millis()),
        after.saturating_sub(before)
    ));
    assert!(closed.is_some(), "{report:?}");
    assert!(after.saturating_sub(before) < 16 * 1024, "{report:?}");

    // SETTINGS and PING floods that never read their answers: a million frames each at most, 5 s.
    for (name, one) in [("SETTINGS", settings(&[(0x3, 100)])), ("PING", frame(PING, 0, 0, &[7; 8]))] {
        let (_, before) = memory_kib(pid);
        let mut conn = open(&addr, &[]);
        conn.set_write_timeout(Some(Duration::from_millis(500))).expect("timeout");
        let batch = one.repeat(1000);
        let started = Instant::now();
        let mut frames = 0u64;
        while frames < 1_000_000 && started.elapsed() < Duration::from_secs(5) {
            if conn.write_all(&batch).is_err() {
                break;
            }
            frames += 1000;
        }
        let stopped = started.elapsed();
        let (_, after) = memory_kib(pid);
        // The watchdog closes it once idle (nothing in flight) for the idle timeout.
        let closed = closed_within(&mut conn, limit);
        report.push(format!(
            "{name} flood: the server stopped reading after about {frames} frames ({} KiB) in {} ms, peak +{} KiB; \
             closed {:?} ms after that",
            frames * one.len() as u64 / 1024,
            stopped.as_millis(),
            after.saturating_sub(before),
            closed.map(|c| c.as_millis())
        ));
        assert!(frames < 1_000_000, "{report:?}");
        assert!(after.saturating_sub(before) < 16 * 1024, "{report:?}");
        assert!(closed.is_some(), "{report:?}");
    }
    println!("{}", report.join("\n"));
    assert_eq!(common::http_get(&addr, "/healthz", None).0, 200, "still serving");
}

/// Reads (and drops) what `conn` gets until the server closes it, at most `limit`; how long that took.
fn closed_within(conn: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let started = Instant::now();
    conn.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
    let mut buf = vec![0u8; 64 * 1024];
    while started.elapsed() < limit {
        match conn.read(&mut buf) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
    None
}
