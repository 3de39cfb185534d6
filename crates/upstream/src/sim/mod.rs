//! A deterministic simulator of the upstream platform's chat-completions endpoint, over real HTTP.
//!
//! Serves `POST /api/v3/chat/completions` in the platform format (see `upstream-wire.md` §1);
//! any other method or path answers 404 with a platform error body. A request needs
//! `Authorization: Bearer <non-empty>` (else 401 `AuthenticationError`) and a JSON object body
//! with a string `model` and an array `messages` (else 400 `InvalidParameter`).
//!
//! # Token counts
//!
//! - `prompt_tokens` = ceil(UTF-8 bytes of all message `content` text (strings, or the `text`
//!   of array parts) / 4) + 4 per message; the body field `"sim_prompt_tokens": N` overrides it.
//! - `completion_tokens` = min(`max_completion_tokens`, else `max_tokens`, else 64; the natural
//!   length, 16 or `"sim_completion_tokens": N`). `finish_reason` is `length` when the limit cut
//!   the natural length, else `stop`.
//! - Thinking is on when `thinking.type` is `enabled`, or when `thinking` is absent and the
//!   model id starts with `seed-`; then half the completion tokens (rounded down) are
//!   `reasoning_tokens`, sent as `reasoning_content`.
//! - The answer has exactly one word per token (content and reasoning separately).
//! - `prompt_tokens_details.cached_tokens` = prompt_tokens / 2 (rounded down) when this server
//!   has seen the same first-message `content` before, else 0.
//! - `"sim_audio_tokens": N` adds `prompt_tokens_details.audio_tokens` = N.
//!
//! # Streaming
//!
//! With `"stream": true` the answer is `text/event-stream`: one `data: {chunk}` event per
//! reasoning word, then per content word (every delta carries `"role":"assistant"`), a final
//! chunk with `"content":""` and `finish_reason`, a usage chunk with `"choices":[]` when
//! `stream_options.include_usage` is true, then `data: [DONE]`. Chunks are written as they are
//! produced; `"sim_chunk_delay_ms": N` (at most 1000) waits before each one.
//!
//! # Fault switches (per request, from body fields)
//!
//! - `"sim_latency_ms": N` — wait N ms (at most 10000) before answering.
//! - `"sim_fault": "…"`, one of:
//!   - `status_400`, `status_429`, `status_500`, `status_503` — that status with a platform
//!     error body (`InvalidParameter`/`BadRequest`, `RateLimitExceeded.EndpointRPMExceeded`/
//!     `TooManyRequests`, `InternalServiceError`/`InternalServerError`,
//!     `ServiceUnavailable`/`ServiceUnavailable`).
//!   - `timeout` — accept and never answer; the connection is closed after 60 s.
//!   - `malformed` — 200 with a body that is not JSON (and not SSE).
//!   - `drop` — close the connection without any response.
//!   - `midstream_error` — answer as a stream (whatever `stream` says), send two chunks, then
//!     `data: {"error":{"code":"InternalServiceError",…}}` and end without `[DONE]`.
//!   - `midstream_drop` — answer as a stream, send two chunks, then abort the connection.
//!   - `empty_usage` — a normal answer without `usage` (no usage chunk when streaming).
//!
//!   Any other value answers 400 `InvalidParameter` (param `sim_fault`).
//!
//! Stopping the server (the `shutdown` future, or dropping the [`SimHandle`]) stops accepting
//! and aborts connections still open.

mod body;
mod chat;
mod fault;

use std::collections::HashSet;
use std::collections::hash_map::DefaultHasher;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, header};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};

use body::SimBody;
use chat::Plan;
use fault::{Fault, error_response, status_code_name};

/// The one path the simulator serves.
pub const CHAT_PATH: &str = "/api/v3/chat/completions";
/// Largest accepted request body, in bytes.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;
/// Upper bound on `sim_latency_ms`.
pub const MAX_LATENCY_MS: u64 = 10_000;
/// Upper bound on `sim_chunk_delay_ms`.
pub const MAX_CHUNK_DELAY_MS: u64 = 1_000;
/// How many chunks the `midstream_*` faults send before failing.
const MIDSTREAM_CHUNKS: u64 = 2;
/// Bound on remembered first messages (the set is cleared when full).
const MAX_SEEN: usize = 100_000;

/// What one simulator remembers across requests.
#[derive(Debug, Default)]
struct SimState {
    seen: Mutex<HashSet<u64>>,
    counter: AtomicU64,
}

impl SimState {
    fn next_id(&self) -> String {
        format!("sim-{:016x}", self.counter.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Records `key`; whether it had been recorded before.
    fn seen_before(&self, key: u64) -> bool {
        let mut seen = match self.seen.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if seen.len() >= MAX_SEEN {
            seen.clear();
        }
        !seen.insert(key)
    }
}

/// Serves the simulator on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    let state = Arc::new(SimState::default());
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Without this, small SSE chunks wait out the peer's delayed ACK (40 ms).
                    let _ = stream.set_nodelay(true);
                    let state = Arc::clone(&state);
                    connections.spawn(async move {
                        let service = service_fn(move |req| handle(Arc::clone(&state), req));
                        let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
                        if let Err(e) = conn.await {
                            tracing::debug!(error = %e, "simulator connection ended with an error");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "simulator accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
    Ok(())
}

/// A running simulator; stops when dropped or on [`SimHandle::stop`].
#[derive(Debug)]
pub struct SimHandle {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl SimHandle {
    /// Stops the simulator and waits until it has.
    pub async fn stop(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(std::io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds `127.0.0.1:0` and runs the simulator on a tokio task; its address and handle.
pub async fn spawn() -> std::io::Result<(SocketAddr, SimHandle)> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, async move {
        let _ = stopped.await;
    }));
    Ok((addr, SimHandle { stop: Some(stop), task: Some(task) }))
}

/// Answers one request; an `Err` closes the connection without a response.
async fn handle(state: Arc<SimState>, req: Request<Incoming>) -> Result<Response<SimBody>, std::io::Error> {
    let rid = state.next_id();
    if req.method() != Method::POST || req.uri().path() != CHAT_PATH {
        let message = format!("The requested resource {} {} was not found.", req.method(), req.uri().path());
        return Ok(error_response(404, "NotFound", &message, "", &rid));
    }
    if !authorized(req.headers().get(header::AUTHORIZATION)) {
        return Ok(error_response(401, "AuthenticationError", "The API key is missing or malformed.", "", &rid));
    }
    let bytes = match Limited::new(req.into_body(), MAX_REQUEST_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Ok(error_response(400, "InvalidParameter", "The request body could not be read.", "", &rid)),
    };
    let request = match parse_request(&bytes) {
        Ok(request) => request,
        Err((param, message)) => return Ok(error_response(400, "InvalidParameter", message, param, &rid)),
    };
    let fault = match request.get("sim_fault") {
        None | Some(Value::Null) => None,
        Some(value) => match value.as_str().and_then(Fault::parse) {
            Some(fault) => Some(fault),
            None => return Ok(error_response(400, "InvalidParameter", "Unknown sim_fault.", "sim_fault", &rid)),
        },
    };
    if let Some(ms) = request.get("sim_latency_ms").and_then(Value::as_u64) {
        tokio::time::sleep(Duration::from_millis(ms.min(MAX_LATENCY_MS))).await;
    }
    match fault {
        Some(Fault::Status(status)) => {
            let message = format!("Simulated {status} error.");
            Ok(error_response(status, status_code_name(status), &message, "", &rid))
        }
        Some(Fault::Timeout) => {
            tokio::time::sleep(Duration::from_secs(fault::TIMEOUT_FAULT_SECS)).await;
            Err(std::io::Error::other("simulated timeout: closing without an answer"))
        }
        Some(Fault::Drop) => Err(std::io::Error::other("simulated drop: closing without an answer")),
        Some(Fault::Malformed) => {
            Ok(with_type(Response::new(SimBody::full("<html>this is not json")), "application/json"))
        }
        other => Ok(answer(&state, &request, rid, other)),
    }
}

fn authorized(value: Option<&HeaderValue>) -> bool {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|token| !token.trim().is_empty())
}

/// The request object, or the offending parameter and a message.
fn parse_request(bytes: &[u8]) -> Result<Map<String, Value>, (&'static str, &'static str)> {
    let request = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => map,
        _ => return Err(("", "The request body is not a valid JSON object.")),
    };
    if !request.get("model").is_some_and(Value::is_string) {
        return Err(("model", "The parameter `model` is required and must be a string."));
    }
    if !request.get("messages").is_some_and(Value::is_array) {
        return Err(("messages", "The parameter `messages` is required and must be an array."));
    }
    Ok(request)
}

/// A normal answer (possibly streamed), shaped by `fault` (`None`, `EmptyUsage` or `Midstream*`).
fn answer(state: &SimState, request: &Map<String, Value>, rid: String, fault: Option<Fault>) -> Response<SimBody> {
    let model = request.get("model").and_then(Value::as_str).unwrap_or_default();
    let messages = request.get("messages").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let seen_before = messages.first().and_then(|m| m.get("content")).is_some_and(|content| {
        let mut hasher = DefaultHasher::new();
        content.to_string().hash(&mut hasher);
        state.seen_before(hasher.finish())
    });
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default();
    let plan = Plan::new(request, model, messages, rid, created, seen_before);
    let with_usage = fault != Some(Fault::EmptyUsage);
    let stream = request.get("stream").and_then(Value::as_bool).unwrap_or(false)
        || matches!(fault, Some(Fault::MidstreamError | Fault::MidstreamDrop));
    if !stream {
        return with_type(Response::new(SimBody::full(plan.answer(with_usage).to_string())), "application/json");
    }
    let include_usage = with_usage
        && request.get("stream_options").and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
    let delay = request.get("sim_chunk_delay_ms").and_then(Value::as_u64).unwrap_or(0).min(MAX_CHUNK_DELAY_MS);
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(produce(plan, include_usage, Duration::from_millis(delay), fault, tx));
    let mut response = with_type(Response::new(SimBody::Channel(rx)), "text/event-stream");
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Sends the stream's events into `tx`, ending as `fault` says.
async fn produce(
    plan: Plan,
    include_usage: bool,
    delay: Duration,
    fault: Option<Fault>,
    tx: mpsc::Sender<body::ChunkResult>,
) {
    let cut = matches!(fault, Some(Fault::MidstreamError | Fault::MidstreamDrop)).then_some(MIDSTREAM_CHUNKS);
    let mut i = 0;
    while let Some(payload) = plan.stream_payload(i, include_usage) {
        if cut == Some(i) {
            break;
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if tx.send(Ok(Bytes::from(format!("data: {payload}\n\n")))).await.is_err() {
            return;
        }
        i += 1;
    }
    let last = match fault {
        Some(Fault::MidstreamError) => Ok(Bytes::from(fault::midstream_error_event(&plan.id))),
        Some(Fault::MidstreamDrop) => Err(std::io::Error::other("simulated mid-stream drop")),
        _ => Ok(Bytes::from_static(b"data: [DONE]\n\n")),
    };
    let _ = tx.send(last).await;
}

fn with_type(mut response: Response<SimBody>, content_type: &'static str) -> Response<SimBody> {
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
