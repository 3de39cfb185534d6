//! Shared helpers of the upstream integration tests: a simulator with an adapter in front of
//! it, JSON calls, bounded stream draining, Base64 decoding, a header-capturing server.
#![allow(clippy::panic, clippy::unwrap_used, dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use domain::ports::{Endpoint, EventStream, SseEvent, Upstream, UpstreamCall, UpstreamError};
use serde_json::Value;
use sim::SimHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use upstream::{HttpUpstream, UpstreamConfig};

/// A generous per-call timeout.
pub const LONG: Duration = Duration::from_secs(5);

/// A fresh simulator, an adapter for all endpoints pointing at it with `timeout`, and its address.
pub async fn start(timeout: Duration) -> (HttpUpstream, SimHandle, SocketAddr) {
    let (addr, handle) = sim::spawn().await.unwrap();
    (adapter(UpstreamConfig::for_simulator(addr, LONG, timeout)), handle, addr)
}

/// The adapter for `config`.
pub fn adapter(config: UpstreamConfig) -> HttpUpstream {
    HttpUpstream::new(config).unwrap()
}

/// `base` with the fields of `extra` added (or replaced).
pub fn with(mut base: Value, extra: Value) -> Value {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
    base
}

/// A non-stream call with `body` as is (model `m`); the 2xx answer's bytes.
pub async fn send(up: &HttpUpstream, endpoint: Endpoint, body: &[u8]) -> Result<Vec<u8>, UpstreamError> {
    up.complete(UpstreamCall { endpoint, model: "m" }, body.to_vec()).await.result
}

/// A stream call with `body` as is (model `m`).
pub async fn open_raw(
    up: &HttpUpstream,
    endpoint: Endpoint,
    body: &[u8],
) -> Result<Box<dyn EventStream>, UpstreamError> {
    up.stream(UpstreamCall { endpoint, model: "m" }, body.to_vec()).await.result
}

/// A non-stream call with a JSON body; the answer parsed.
pub async fn call(up: &HttpUpstream, endpoint: Endpoint, body: &Value) -> Result<Value, UpstreamError> {
    let bytes = send(up, endpoint, body.to_string().as_bytes()).await?;
    Ok(serde_json::from_slice(&bytes).unwrap())
}

/// A stream call with a JSON body.
pub async fn open(up: &HttpUpstream, endpoint: Endpoint, body: &Value) -> Result<Box<dyn EventStream>, UpstreamError> {
    open_raw(up, endpoint, body.to_string().as_bytes()).await
}

/// All events of a stream (bounded), and the error that ended it, if any; checks that the
/// stream stays ended.
pub async fn drain(mut stream: Box<dyn EventStream>) -> (Vec<SseEvent>, Option<UpstreamError>) {
    let mut events = Vec::new();
    let mut error = None;
    for _ in 0..100_000 {
        match stream.next_event().await {
            Some(Ok(event)) => {
                assert!(error.is_none(), "an event after the error {error:?}");
                events.push(event);
            }
            Some(Err(e)) => {
                assert!(error.is_none(), "two errors: {error:?} then {e:?}");
                error = Some(e);
            }
            None => {
                assert!(stream.next_event().await.is_none(), "stream resumed after its end");
                return (events, error);
            }
        }
    }
    panic!("stream did not end");
}

/// An event's data as JSON.
pub fn data(event: &SseEvent) -> Value {
    serde_json::from_slice(&event.data).unwrap()
}

/// Event names, `-` for none.
pub fn names(events: &[SseEvent]) -> Vec<String> {
    events.iter().map(|e| e.event.clone().unwrap_or_else(|| "-".to_owned())).collect()
}

/// A `reqwest` client for the tests' own calls to the simulator (ring installed first as the
/// process's rustls provider: reqwest is built without one).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// `GET url`: status, content type and body.
pub async fn get(url: &str) -> (u16, String, Vec<u8>) {
    let response = http_client().get(url).send().await.unwrap();
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    (status, content_type, response.bytes().await.unwrap().to_vec())
}

/// A raw `POST` to the simulator with the given headers; status and body text.
pub async fn raw_post(url: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut request = http_client().post(url).body(body.to_owned());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Standard Base64 decoding (panics on bad input).
pub fn b64decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not Base64: {c}"),
    };
    let bytes = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= u32::from(value(*c)) << (18 - 6 * i);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// A one-request-at-a-time server on 127.0.0.1 that records each request head and answers
/// 200 `{}`.
pub async fn capture_server() -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let answer =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
    scripted_server(answer.as_bytes().to_vec()).await
}

/// A one-request-at-a-time server on 127.0.0.1 that records each request head, reads the body,
/// writes `answer` (a whole raw HTTP/1.1 response) and closes the connection.
pub async fn scripted_server(answer: Vec<u8>) -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            // Read the whole body too, so that closing does not reset the connection.
            let text = String::from_utf8_lossy(&head).into_owned();
            let head_len = text.find("\r\n\r\n").map_or(text.len(), |i| i + 4);
            let body_len: usize = header_of(&text, "content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            let mut have = head.len().saturating_sub(head_len);
            while have < body_len {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => have += n,
                }
            }
            let _ = tx.send(text);
            let _ = socket.write_all(&answer).await;
            let _ = socket.shutdown().await;
        }
    });
    (addr, rx)
}

/// The value of header `name` in a captured request head, if present.
pub fn header_of(head: &str, name: &str) -> Option<String> {
    head.lines().find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
    })
}

/// A one-request-at-a-time server on 127.0.0.1 that sends each request's head and body text
/// (head, blank line, body) and answers `answer` (a whole raw HTTP/1.1 response).
pub async fn body_server(answer: Vec<u8>) -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut data = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let text = String::from_utf8_lossy(&data).into_owned();
                if let Some(end) = text.find("\r\n\r\n") {
                    let body_len: usize = header_of(&text, "content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
                    if data.len() >= end + 4 + body_len {
                        break;
                    }
                }
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => data.extend_from_slice(&buf[..n]),
                }
                assert!(data.len() < 1024 * 1024, "request too large for the test server");
            }
            let _ = tx.send(String::from_utf8_lossy(&data).into_owned());
            let _ = socket.write_all(&answer).await;
            let _ = socket.shutdown().await;
        }
    });
    (addr, rx)
}

/// A raw HTTP/1.1 answer with `status` and `body`, closing the connection.
pub fn raw_answer(status: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(body);
    answer
}
