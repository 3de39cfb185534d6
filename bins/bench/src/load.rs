//! The load generator: N tasks, each on its own keep-alive HTTP/1.1 connection, sending the same
//! request back to back until a deadline or a request budget runs out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::stats::micros;

/// Bound on establishing one connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one request, from sending it to the last body byte.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause after a failed connection attempt, so a dead server does not make a busy loop.
const RETRY_PAUSE: Duration = Duration::from_millis(10);
/// Bytes of each response body kept for checking its end.
const TAIL_BYTES: usize = 64;
/// How many error messages a scenario keeps as examples.
const ERROR_EXAMPLES: usize = 3;

type Sender = SendRequest<Full<Bytes>>;

/// Where requests go: a loopback address, a path and the `Authorization` header.
#[derive(Clone, Debug)]
pub struct Endpoint {
    addr: SocketAddr,
    host: HeaderValue,
    path: String,
    authorization: HeaderValue,
    bearer: String,
}

impl Endpoint {
    /// `addr` must be a loopback socket address (`127.0.0.1:PORT`); `path` starts with `/`.
    pub fn new(addr: &str, path: &str, bearer: &str) -> Result<Endpoint, String> {
        let parsed: SocketAddr = addr.parse().map_err(|e| format!("bad address {addr:?}: {e}"))?;
        if !parsed.ip().is_loopback() {
            return Err(format!("refusing to send traffic to {addr}: only loopback addresses are allowed"));
        }
        Ok(Endpoint {
            addr: parsed,
            host: HeaderValue::from_str(addr).map_err(|e| format!("bad host {addr:?}: {e}"))?,
            path: path.to_owned(),
            authorization: HeaderValue::from_str(&format!("Bearer {bearer}")).map_err(|_| "bad API key".to_owned())?,
            bearer: bearer.to_owned(),
        })
    }

    /// The API key this endpoint sends.
    pub fn bearer(&self) -> &str {
        &self.bearer
    }

    /// The same server and key with another path.
    pub fn with_path(&self, path: &str) -> Endpoint {
        Endpoint { path: path.to_owned(), ..self.clone() }
    }
}

/// What one scenario sends, how hard and for how long.
#[derive(Debug)]
pub struct Load {
    /// Targets: connection `i` talks to `endpoints[i % len]` (a gateway and an account).
    pub endpoints: Vec<Endpoint>,
    /// The JSON request body.
    pub body: Bytes,
    /// Whether the answer is a server-sent event stream (must end with `[DONE]`).
    pub stream: bool,
    /// Concurrent connections, one task each.
    pub connections: usize,
    /// Time at the start whose requests are sent but not measured.
    pub warmup: Duration,
    /// Measured time after the warm-up.
    pub duration: Duration,
    /// Most requests sent in the whole scenario (warm-up included).
    pub max_requests: u64,
}

/// One measured successful request.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// Send to last body byte, µs.
    pub latency_us: u64,
    /// Send to first body byte, µs.
    pub ttfb_us: u64,
}

/// What the connections of a scenario saw.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Successful requests started after the warm-up.
    pub samples: Vec<Sample>,
    /// Failed requests started after the warm-up.
    pub measured_errors: u64,
    /// Successful requests, warm-up included.
    pub ok_total: u64,
    /// Successful requests, warm-up included, by index into [`Load::endpoints`].
    pub ok_by_endpoint: Vec<u64>,
    /// Failed requests and connection attempts, warm-up included.
    pub errors_total: u64,
    /// The first few error messages.
    pub error_examples: Vec<String>,
}

impl Outcome {
    fn error(&mut self, measured: bool, message: String) {
        self.errors_total += 1;
        if measured {
            self.measured_errors += 1;
        }
        if self.error_examples.len() < ERROR_EXAMPLES {
            self.error_examples.push(message);
        }
    }

    /// Adds another connection's outcome to this one.
    pub fn merge(&mut self, other: Outcome) {
        self.samples.extend(other.samples);
        self.measured_errors += other.measured_errors;
        self.ok_total += other.ok_total;
        if self.ok_by_endpoint.len() < other.ok_by_endpoint.len() {
            self.ok_by_endpoint.resize(other.ok_by_endpoint.len(), 0);
        }
        for (mine, theirs) in self.ok_by_endpoint.iter_mut().zip(other.ok_by_endpoint) {
            *mine += theirs;
        }
        self.errors_total += other.errors_total;
        for e in other.error_examples {
            if self.error_examples.len() < ERROR_EXAMPLES {
                self.error_examples.push(e);
            }
        }
    }
}

/// One finished exchange.
struct Answer {
    status: StatusCode,
    ttfb: Duration,
    total: Duration,
    /// The end of the body (the whole body when it is at most `keep` bytes).
    tail: Vec<u8>,
}

async fn connect(addr: SocketAddr) -> Result<Sender, String> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("connect to {addr} timed out"))?
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| format!("set_nodelay: {e}"))?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        // Ends when the sender is dropped or the server closes the connection.
        let _ = connection.await;
    });
    Ok(sender)
}

/// Sends one request on `sender` and reads the whole answer, keeping the last `keep` bytes.
async fn exchange(
    sender: &mut Sender,
    endpoint: &Endpoint,
    method: Method,
    body: Bytes,
    keep: usize,
) -> Result<Answer, String> {
    sender.ready().await.map_err(|e| format!("connection not ready: {e}"))?;
    let mut request = Request::builder()
        .method(method)
        .uri(endpoint.path.as_str())
        .header(header::HOST, endpoint.host.clone())
        .header(header::AUTHORIZATION, endpoint.authorization.clone());
    if !body.is_empty() {
        request = request.header(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    let request = request.body(Full::new(body)).map_err(|e| format!("request: {e}"))?;
    let started = Instant::now();
    let response = sender.send_request(request).await.map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    let mut body = response.into_body();
    let mut ttfb = None;
    let mut tail: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("reading the body: {e}"))?;
        if let Ok(data) = frame.into_data() {
            if data.is_empty() {
                continue;
            }
            ttfb.get_or_insert_with(|| started.elapsed());
            tail.extend_from_slice(&data);
            if tail.len() > keep.saturating_mul(2) {
                tail.drain(..tail.len() - keep);
            }
        }
    }
    let total = started.elapsed();
    if tail.len() > keep {
        tail.drain(..tail.len() - keep);
    }
    Ok(Answer { status, ttfb: ttfb.unwrap_or(total), total, tail })
}

/// Whether an answer is a success: 200 and a complete body (a JSON object, or a stream that
/// ends with `data: [DONE]`).
fn check(answer: &Answer, stream: bool) -> Result<(), String> {
    let text = String::from_utf8_lossy(&answer.tail);
    if answer.status != StatusCode::OK {
        return Err(format!("status {}: …{}", answer.status.as_u16(), text.trim()));
    }
    let complete = if stream { text.trim_end().ends_with("data: [DONE]") } else { text.trim_end().ends_with('}') };
    if complete { Ok(()) } else { Err(format!("incomplete body: …{}", text.trim())) }
}

/// One connection's loop: send until `end` or until the shared budget `sent` reaches the maximum.
async fn connection_loop(
    load: Arc<Load>,
    index: usize,
    sent: Arc<AtomicU64>,
    warm_end: Instant,
    end: Instant,
) -> Outcome {
    let mut out = Outcome { ok_by_endpoint: vec![0; load.endpoints.len()], ..Outcome::default() };
    let slot = index % load.endpoints.len().max(1);
    let Some(endpoint) = load.endpoints.get(slot) else {
        out.error(true, "no endpoint".into());
        return out;
    };
    let mut sender: Option<Sender> = None;
    loop {
        let now = Instant::now();
        if now >= end || sent.fetch_add(1, Ordering::Relaxed) >= load.max_requests {
            break;
        }
        let measured = now >= warm_end;
        let current = match sender.as_mut() {
            Some(s) => s,
            None => match connect(endpoint.addr).await {
                Ok(s) => sender.insert(s),
                Err(e) => {
                    out.error(measured, e);
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            },
        };
        let started = Instant::now();
        let measured = started >= warm_end;
        let call = exchange(current, endpoint, Method::POST, load.body.clone(), TAIL_BYTES);
        let result = tokio::time::timeout(REQUEST_TIMEOUT, call).await;
        match result {
            Ok(Ok(answer)) => match check(&answer, load.stream) {
                Ok(()) => {
                    out.ok_total += 1;
                    out.ok_by_endpoint[slot] += 1;
                    if measured {
                        out.samples.push(Sample { latency_us: micros(answer.total), ttfb_us: micros(answer.ttfb) });
                    }
                }
                Err(e) => out.error(measured, e),
            },
            Ok(Err(e)) => {
                out.error(measured, e);
                sender = None;
            }
            Err(_) => {
                out.error(measured, format!("no complete answer within {} s", REQUEST_TIMEOUT.as_secs()));
                sender = None;
            }
        }
    }
    out
}

/// A running scenario: its connection tasks and the moments that bound it.
pub struct Running {
    tasks: Vec<tokio::task::JoinHandle<Outcome>>,
    /// When measurement starts (end of the warm-up).
    pub warm_end: Instant,
}

/// Starts the connections of `load`; they stop by themselves at the deadline or the budget.
pub fn start(load: Load) -> Running {
    let start = Instant::now();
    let warm_end = start + load.warmup;
    let end = warm_end + load.duration;
    let connections = load.connections.max(1);
    let load = Arc::new(load);
    let sent = Arc::new(AtomicU64::new(0));
    let tasks = (0..connections)
        .map(|i| tokio::spawn(connection_loop(Arc::clone(&load), i, Arc::clone(&sent), warm_end, end)))
        .collect();
    Running { tasks, warm_end }
}

impl Running {
    /// Waits for every connection and merges what they saw.
    pub async fn finish(self) -> Outcome {
        let mut all = Outcome::default();
        for task in self.tasks {
            match task.await {
                Ok(outcome) => all.merge(outcome),
                Err(e) => all.error(true, format!("connection task failed: {e}")),
            }
        }
        all
    }
}

/// One request on a fresh connection (for the billing checks): status and body text.
pub async fn fetch(endpoint: &Endpoint) -> Result<(u16, String), String> {
    let call = async {
        let mut sender = connect(endpoint.addr).await?;
        exchange(&mut sender, endpoint, Method::GET, Bytes::new(), 1 << 20).await
    };
    let answer =
        tokio::time::timeout(REQUEST_TIMEOUT, call).await.map_err(|_| format!("GET {} timed out", endpoint.path))??;
    Ok((answer.status.as_u16(), String::from_utf8_lossy(&answer.tail).into_owned()))
}
