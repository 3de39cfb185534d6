//! Connections that make no progress and addresses that take too many: an HTTP/1.1 client that asks
//! for a long stream and never reads it is cut after the idle timeout (its slot goes to the next
//! client) while a call that waits seconds on the upstream is not; one address past
//! `GATEWAY_MAX_CONNECTIONS_PER_IP` is closed at once while other addresses are served.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{self, sandbox};
use crate::connections::read_status;

/// A connection to `addr` from `local` (a loopback address) whose receive buffer is `recv_buffer`
/// bytes (0: the system's), as a blocking std stream.
fn connect_from(rt: &tokio::runtime::Runtime, local: &str, addr: &str, recv_buffer: u32) -> std::io::Result<TcpStream> {
    assert!(local.starts_with("127.") && addr.starts_with("127.0.0.1:"), "loopback only");
    rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4()?;
        if recv_buffer > 0 {
            socket.set_recv_buffer_size(recv_buffer)?;
        }
        socket.bind(format!("{local}:0").parse().map_err(std::io::Error::other)?)?;
        let stream = socket.connect(addr.parse().map_err(std::io::Error::other)?).await?;
        let stream = stream.into_std()?;
        stream.set_nonblocking(false)?;
        Ok(stream)
    })
}

/// The send queue (bytes) of the loopback socket from `server` to `client`, from `/proc/net/tcp`.
fn send_queue(server: SocketAddr, client: SocketAddr) -> Option<u64> {
    let hex = |a: SocketAddr| match a.ip() {
        IpAddr::V4(ip) => format!("{:08X}:{:04X}", u32::from_le_bytes(ip.octets()), a.port()),
        IpAddr::V6(_) => String::new(),
    };
    let (local, remote) = (hex(server), hex(client));
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&local.as_str()) && fields.get(2) == Some(&remote.as_str()))
            .then(|| fields.get(4)?.split(':').next().and_then(|q| u64::from_str_radix(q, 16).ok()))
            .flatten()
    })
}

/// Polls the send queue from `server` to `client` every 20 ms until `done` (at most `limit`): when,
/// since `since`, it last grew by data, and its size then.
fn last_growth(
    server: SocketAddr,
    client: SocketAddr,
    since: Instant,
    done: &AtomicBool,
    limit: Duration,
) -> (Duration, u64) {
    let (mut last, mut at) = (0, Duration::ZERO);
    while !done.load(Ordering::Relaxed) && since.elapsed() < limit {
        // One byte more is the FIN of the close, not data.
        if let Some(queued) = send_queue(server, client).filter(|q| *q > last + 1) {
            (last, at) = (queued, since.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (at, last)
}

#[test]
fn a_client_that_stops_reading_is_cut_and_a_slow_upstream_call_is_not() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let (_, key) = common::account(&sandbox, "10", "language:create");
    let env = [("GATEWAY_MAX_CONNECTIONS", "1".to_owned()), ("GATEWAY_IDLE_TIMEOUT", "2000ms".to_owned())];
    let (_server, addr) = common::serve_against(&sandbox, sim, "serve-stuck", &env);
    let limit = Duration::from_secs(20);

    // A stream of 65,536 tokens (megabytes of events) to a client with a 4-KiB receive buffer that
    // never reads: the gateway's writes block, and the connection holds the only slot.
    let body = json!({"model": "LangA-V4-flash", "max_tokens": 65536, "stream": true, "sim_completion_tokens": 65536,
        "messages": [{"role": "user", "content": "a long answer"}]})
    .to_string();
    let mut reader = connect_from(&rt, "127.0.0.1", &addr, 4096).expect("connect");
    let head = format!(
        "POST /api/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    reader.write_all(format!("{head}{body}").as_bytes()).expect("request");
    let asked = Instant::now();
    // The gateway's send queue towards the reader, watched until the next client is answered: it
    // stops growing when the gateway's last write went through (its last progress).
    let done = Arc::new(AtomicBool::new(false));
    let watch = {
        let (server, client) = (reader.peer_addr().expect("peer"), reader.local_addr().expect("local"));
        let done = Arc::clone(&done);
        std::thread::spawn(move || last_growth(server, client, asked, &done, limit))
    };
    // The next client waits in the accept queue until the reader is cut.
    std::thread::sleep(Duration::from_millis(100));
    let mut next = TcpStream::connect(&addr).expect("connect");
    next.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
    let answer = read_status(&mut next, limit).map(|(s, _)| s);
    let answered = asked.elapsed();
    done.store(true, Ordering::Relaxed);
    let (stopped, queued) = watch.join().expect("watcher");
    let after = answered.saturating_sub(stopped);
    // What the reader gets once it reads: what the buffers held, then the end.
    reader.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let mut got = Vec::new();
    let ended = reader.read_to_end(&mut got);
    let events = got.windows(6).filter(|w| w == b"data: ").count();
    println!(
        "HTTP/1.1, a 65,536-token stream never read (idle timeout 2 s, cap 1): the gateway's send queue to \
         the reader stopped growing {:.2} s after the request (at {} KiB); the next client's /healthz was \
         answered {answer:?} {:.2} s after that; the reader then got {} KiB ({events} events of 65,536) and {}",
        stopped.as_secs_f64(),
        queued / 1024,
        after.as_secs_f64(),
        got.len() / 1024,
        if ended.is_ok() { "the end" } else { "a reset" }
    );
    assert_eq!(answer, Some(200));
    assert!(after <= Duration::from_secs(3), "the next client waited {after:?} after the last progress");
    assert!(events < 65_536, "the stream was cut, not finished");

    // A call whose upstream takes 3 s before its first byte outlives the 2-s idle timeout.
    let slow = json!({"model": "LangA-V4-flash", "max_tokens": 8, "sim_latency_ms": 3000,
        "messages": [{"role": "user", "content": "slow"}]});
    let started = Instant::now();
    let (status, answer) = common::http_request(&addr, "POST", "/api/v1/chat/completions", Some(&key), Some(&slow));
    let took = started.elapsed();
    println!("a call whose upstream took 3 s before its first byte: {status} after {:.2} s", took.as_secs_f64());
    assert_eq!(status, 200, "{answer}");
    assert!(took >= Duration::from_secs(3), "{took:?}");
}

#[test]
fn an_address_past_its_connection_cap_is_closed_at_once_and_others_are_served() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (sim, _sim) = rt.block_on(sim::spawn()).expect("start the simulator");
    let (sandbox, _) = sandbox(&rt);
    let env = [("GATEWAY_MAX_CONNECTIONS_PER_IP", "3".to_owned()), ("GATEWAY_IDLE_TIMEOUT", "10000ms".to_owned())];
    let (_server, addr) = common::serve_against(&sandbox, sim, "serve-per-ip", &env);
    let limit = Duration::from_secs(5);
    let healthz = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

    // Three silent connections from 127.0.0.1 take its three slots.
    let mut held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(&addr).expect("connect")).collect();
    std::thread::sleep(Duration::from_millis(200));
    // A fourth from 127.0.0.1 is closed at once, unanswered.
    let started = Instant::now();
    let mut fourth = TcpStream::connect(&addr).expect("connect");
    let _ = fourth.write_all(healthz);
    let refused = read_status(&mut fourth, limit);
    let closed = started.elapsed();
    // Another address is served meanwhile.
    let started = Instant::now();
    let mut other = connect_from(&rt, "127.0.0.2", &addr, 0).expect("connect from 127.0.0.2");
    other.write_all(healthz).expect("write");
    let served = read_status(&mut other, limit).map(|(s, _)| s);
    let other_took = started.elapsed();
    // Once one of 127.0.0.1's connections closes, it has a slot again.
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(200));
    let mut again = TcpStream::connect(&addr).expect("connect");
    again.write_all(healthz).expect("write");
    let again = read_status(&mut again, limit).map(|(s, _)| s);
    println!(
        "3 connections per address: a fourth from 127.0.0.1 was closed after {} ms with {:?}; 127.0.0.2 was \
         answered {served:?} in {} ms; 127.0.0.1 again after one closed: {again:?}",
        closed.as_millis(),
        refused.as_ref().map(|(s, _)| s),
        other_took.as_millis()
    );
    assert!(refused.is_none(), "the fourth is not answered: {refused:?}");
    assert!(closed < Duration::from_secs(1), "closed after {closed:?}");
    assert_eq!(served, Some(200));
    assert_eq!(again, Some(200));
    drop(held);
}
