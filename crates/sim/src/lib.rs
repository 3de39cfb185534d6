//! A deterministic simulator of the upstream platform and its speech service, over real HTTP.
//!
//! One server serves every path below; this documentation (with each format module's) is the
//! simulator's contract for the gateway's tests.
//!
//! | method and path | format | credentials | details |
//! | --- | --- | --- | --- |
//! | `POST /api/v3/chat/completions` | chat completions (upstream-wire §1) | `Authorization: Bearer <non-empty>` | [`chat`] |
//! | `POST /api/v3/images/generations` | image generation (§3) | `Authorization: Bearer <non-empty>` | [`images`] |
//! | `POST /api/v3/tts/create` | speech service (§4) | `X-Api-Key: <non-empty>` | [`speech`] |
//! | `POST /api/compatible/v1/messages` | message-style (§6) | `Authorization: Bearer …` or `x-api-key`, and `anthropic-version` | [`messages`] |
//! | `POST /api/v3/responses` | response-style (§7) | `Authorization: Bearer <non-empty>` | [`responses`] |
//! | `POST /api/v3/contents/generations/tasks`, `GET`/`DELETE …/tasks/{id}` | video tasks (§2) | `Authorization: Bearer <non-empty>` | [`video`] |
//! | `POST /?Action=<A>&Version=2024-01-01` | asset control plane (§5) | signed with the simulator's access key pair | [`assets`] |
//! | `GET`/`HEAD /files/…` | the generated images, audio and videos | none | [`files`] |
//! | `POST /sim/clock/advance?ms=N`, `GET /sim/clock` | the video clock (not upstream) | none | [`SimHandle::advance`] |
//!
//! Any other method or path answers 404 with a platform error body
//! (`{"error":{"code":"NotFound",…}}`). Request bodies are bounded per path:
//! [`MAX_TEXT_REQUEST_BYTES`] (chat, messages, responses), [`MAX_IMAGE_REQUEST_BYTES`],
//! [`MAX_SPEECH_REQUEST_BYTES`]; a larger one is 413 in the format's error body.
//!
//! # Fault switches
//!
//! Chat, messages and responses read body fields (the gateway passes unknown fields through):
//! - `"sim_latency_ms": N` — wait N ms (at most 10,000) before answering.
//! - `"sim_chunk_delay_ms": N` — when streaming, wait N ms (at most 1,000) before each event.
//! - `"sim_completion_tokens": N` — the natural answer length (default 16, at most 65,536).
//! - `"sim_prompt_tokens": N` — overrides the computed input tokens (chat `prompt_tokens`,
//!   messages' base, responses' base).
//! - `"sim_fault": "…"`, one of (any other value is 400 in the format's error body):
//!   - `status_400`, `status_429`, `status_500`, `status_503` — that status with the format's
//!     error body (platform: `InvalidParameter`/`BadRequest`,
//!     `RateLimitExceeded.EndpointRPMExceeded`/`TooManyRequests`,
//!     `InternalServiceError`/`InternalServerError`, `ServiceUnavailable`/`ServiceUnavailable`).
//!   - `timeout` — accept and never answer; the connection is closed after 60 s.
//!   - `malformed` — 200 with a body that is not JSON (and not SSE).
//!   - `drop` — close the connection without any response.
//!   - `midstream_error`, `midstream_drop` — answer as a stream (whatever `stream` says), send
//!     a few events, then the format's error event and the end, or an aborted connection.
//!   - `empty_usage` — a normal answer without usage.
//!   - `over_bounds` — a normal answer whose output ignores the request's caps (an upstream
//!     breaking its own bounds; for the gateway's overdraft count).
//! - `"sim_fault_model": "<model id>"` — the `sim_fault` is only for a request whose `model` is
//!   that one (the others are answered as if it were not there): a fault on one of a call's
//!   fallback models.
//! - `"sim_reasoning_tokens": N` — reasoning tokens (at most 1,048,576), bounded as each format
//!   bounds them (chat: by `max_completion_tokens` only, not by `max_tokens`; see [`chat`]).
//!
//! Images and speech are validated strictly by the gateway (no unknown fields), so their
//! switches are directives inside the prompt text (`prompt`, `text_prompt`):
//! `[sim:fault=<name>]` (the names above without the mid-stream ones, plus `fail_all` for
//! images and `empty_usage` for images only), `[sim:latency_ms=N]`, `[sim:fail_image=I]`
//! (images, repeatable) and `[sim:code=N]` (speech). See [`images`] and [`speech`].
//!
//! Video tasks take their switches as `[sim:video=…]` directives in the text prompt; see
//! [`video`].
//!
//! # The video clock
//!
//! Video tasks move on simulated time ([`SimOptions`]): with [`ClockMode::Real`] (the default
//! of [`spawn`] and [`serve`]) it is real time since the start plus every advance; with
//! [`ClockMode::Manual`] only advances move it. Advance with [`SimHandle::advance`] or, for a
//! simulator in another process, `POST /sim/clock/advance?ms=N` (N at most
//! [`MAX_ADVANCE_MS`]; answers `{"now_ms":…}`; `GET /sim/clock` reads it). Callbacks of status
//! changes are sent within [`CALLBACK_TICK`] of the change.
//!
//! # Memory
//!
//! The simulator remembers, per server: first-message texts seen (chat and messages cache
//! hits; at most 100,000, then forgotten all at once), issued response ids (the newest
//! 100,000), request counts per path (at most 10,000 distinct paths; see
//! [`SimHandle::requests`]), video tasks and assets (the newest 100,000 of each).
//!
//! Stopping the server (the `shutdown` future, or dropping the [`SimHandle`]) stops accepting
//! and aborts connections still open.

pub mod assets;
mod body;
pub mod chat;
mod clock;
mod fault;
pub mod files;
pub mod images;
pub mod messages;
mod request;
pub mod responses;
pub mod speech;
mod state;
mod stream;
pub mod video;
mod words;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use body::SimBody;
use fault::{error_response, json_response};
use state::SimState;

pub use clock::ClockMode;
pub use fault::{MAX_CHUNK_DELAY_MS, MAX_LATENCY_MS};

/// Chat completions.
pub const CHAT_PATH: &str = "/api/v3/chat/completions";
/// Image generation.
pub const IMAGES_PATH: &str = "/api/v3/images/generations";
/// The speech service.
pub const SPEECH_PATH: &str = "/api/v3/tts/create";
/// Message-style chat.
pub const MESSAGES_PATH: &str = "/api/compatible/v1/messages";
/// Response-style chat.
pub const RESPONSES_PATH: &str = "/api/v3/responses";
/// Video task creation (`POST`); a task is `<this>/{id}`.
pub const VIDEO_TASKS_PATH: &str = "/api/v3/contents/generations/tasks";
/// The asset control plane (`POST /?Action=…`).
pub const ASSETS_PATH: &str = "/";
/// Generated files.
pub const FILES_PREFIX: &str = "/files/";
/// Advances the video clock: `POST /sim/clock/advance?ms=N`.
pub const CLOCK_ADVANCE_PATH: &str = "/sim/clock/advance";
/// Reads the video clock: `GET /sim/clock`.
pub const CLOCK_PATH: &str = "/sim/clock";
/// Counters: `GET /sim/stats` answers `{"requests":N,"in_flight_max":M}`, `M` being the most
/// synchronous generation requests (chat, images, speech, messages, responses) answered at once.
pub const STATS_PATH: &str = "/sim/stats";
/// Largest advance one `POST /sim/clock/advance` takes, ms (30 days).
pub const MAX_ADVANCE_MS: u64 = 30 * 24 * 3600 * 1000;
/// How often due callbacks are looked for.
pub const CALLBACK_TICK: Duration = Duration::from_millis(50);

/// How a simulator runs its video tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimOptions {
    /// How the clock moves.
    pub clock: ClockMode,
    /// How long a task stays `queued` (simulated time). Default 1 s.
    pub video_queue: Duration,
    /// How long a task stays `running`. Default 2 s.
    pub video_run: Duration,
    /// How long a `[sim:video=slow_queue]` task stays `queued`. Default 1 h.
    pub video_slow_queue: Duration,
}

impl Default for SimOptions {
    fn default() -> SimOptions {
        SimOptions {
            clock: ClockMode::Real,
            video_queue: Duration::from_secs(1),
            video_run: Duration::from_secs(2),
            video_slow_queue: Duration::from_secs(3600),
        }
    }
}

impl SimOptions {
    /// The defaults with a clock that only advances move ([`ClockMode::Manual`]).
    pub fn manual() -> SimOptions {
        SimOptions { clock: ClockMode::Manual, ..SimOptions::default() }
    }
}
/// Largest accepted chat, messages or responses body, in bytes (the gateway admits 100 MB).
pub const MAX_TEXT_REQUEST_BYTES: usize = 128 * 1024 * 1024;
/// Largest accepted image body, in bytes (14 references of 30 MB as Base64 fit).
pub const MAX_IMAGE_REQUEST_BYTES: usize = 768 * 1024 * 1024;
/// Largest accepted speech body, in bytes (3 references of 10 MB as Base64 fit).
pub const MAX_SPEECH_REQUEST_BYTES: usize = 64 * 1024 * 1024;

/// Serves the simulator on `listener` until `shutdown` completes (default [`SimOptions`]).
pub async fn serve(listener: TcpListener, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    serve_with_options(listener, SimOptions::default(), shutdown).await
}

/// Serves the simulator with `options` on `listener` until `shutdown` completes.
pub async fn serve_with_options(
    listener: TcpListener,
    options: SimOptions,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let state = Arc::new(SimState::new(listener.local_addr()?, options));
    serve_with(listener, state, shutdown).await
}

async fn serve_with(
    listener: TcpListener,
    state: Arc<SimState>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let mut connections = JoinSet::new();
    let mut tick = tokio::time::interval(CALLBACK_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            _ = tick.tick() => {
                let now = state.clock().now_ms();
                let due = state.with_video(|table| table.due_callbacks(now, |ms| state.clock().unix_secs(ms)));
                for delivery in due {
                    connections.spawn(video::deliver(Arc::clone(&state), delivery));
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Without this, small SSE chunks wait out the peer's delayed ACK (40 ms).
                    let _ = stream.set_nodelay(true);
                    let state = Arc::clone(&state);
                    connections.spawn(async move {
                        let service = service_fn(move |req| {
                            let state = Arc::clone(&state);
                            async move { handle(&state, req).await }
                        });
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
    state: Arc<SimState>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl SimHandle {
    /// Requests received so far for exactly `path` (such as [`IMAGES_PATH`]), whatever their
    /// answer (rejected and faulted requests count too).
    pub fn requests(&self, path: &str) -> u64 {
        self.state.requests(path)
    }

    /// Requests received so far for any path.
    pub fn requests_total(&self) -> u64 {
        self.state.requests_total()
    }

    /// Moves the video clock forward by `by` (see the module notes).
    pub fn advance(&self, by: Duration) {
        self.state.clock().advance(by);
    }

    /// The video clock: simulated milliseconds since the start.
    pub fn now_ms(&self) -> u64 {
        self.state.clock().now_ms()
    }

    /// The most synchronous generation requests answered at once so far.
    pub fn in_flight_max(&self) -> u64 {
        self.state.in_flight_max()
    }

    /// What the fetch of each active asset read, in creation order: (URL, length, SHA-256 hex), so
    /// a test can check the upstream received the very bytes a client uploaded.
    pub fn fetched_assets(&self) -> Vec<(String, u64, String)> {
        state::lock(self.state.assets()).fetched()
    }

    /// Makes every generation request (chat, images, speech, messages, responses, a video task's
    /// creation) answer `status` with `Retry-After: <secs>` when given, as an outage or a
    /// rate-limited key would; `None` serves normally again. The requests still count in [`SimHandle::requests`].
    pub fn set_outage(&self, outage: Option<(u16, Option<u64>)>) {
        self.state.set_outage(outage);
    }

    /// Answers generation requests whose bearer key is `key` with 401 from now on (a revoked key).
    pub fn refuse_key(&self, key: &str) {
        self.state.refuse_key(key);
    }

    /// Video callbacks acknowledged with a 2xx so far.
    pub fn callbacks_delivered(&self) -> u64 {
        self.state.callbacks()
    }

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

/// Binds `127.0.0.1:0` and runs the simulator (default [`SimOptions`]) on a tokio task; its
/// address and handle.
pub async fn spawn() -> std::io::Result<(SocketAddr, SimHandle)> {
    spawn_with(SimOptions::default()).await
}

/// [`spawn`] with `options`.
pub async fn spawn_with(options: SimOptions) -> std::io::Result<(SocketAddr, SimHandle)> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(SimState::new(addr, options));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_with(listener, Arc::clone(&state), async move {
        let _ = stopped.await;
    }));
    Ok((addr, SimHandle { state, stop: Some(stop), task: Some(task) }))
}

/// Answers one request; an `Err` closes the connection without a response.
async fn handle(state: &SimState, req: Request<Incoming>) -> Result<Response<SimBody>, std::io::Error> {
    let path = req.uri().path().to_owned();
    state.count(&path);
    let rid = state.next_id();
    let post = req.method() == Method::POST;
    let generation =
        post && [CHAT_PATH, IMAGES_PATH, SPEECH_PATH, MESSAGES_PATH, RESPONSES_PATH].contains(&path.as_str());
    let _in_flight = generation.then(|| state.enter());
    // A task's creation is refused too (polls are not: a task lives where it was created).
    let refusable = generation || (post && path == VIDEO_TASKS_PATH);
    if refusable && let Some(refused) = test_refusal(state, &req, &rid) {
        return Ok(refused);
    }
    match path.as_str() {
        CHAT_PATH if post => chat::handle(state, req, rid).await,
        IMAGES_PATH if post => images::handle(state, req, rid).await,
        SPEECH_PATH if post => speech::handle(state, req, rid).await,
        MESSAGES_PATH if post => messages::handle(state, req, rid).await,
        RESPONSES_PATH if post => responses::handle(state, req, rid).await,
        STATS_PATH if req.method() == Method::GET => Ok(json_response(
            200,
            serde_json::json!({"requests": state.requests_total(), "in_flight_max": state.in_flight_max()}).to_string(),
        )),
        VIDEO_TASKS_PATH if post => video::create(state, req, rid).await,
        ASSETS_PATH if post => assets::handle(state, req, rid).await,
        CLOCK_ADVANCE_PATH if post => Ok(advance(state, req.uri().query())),
        CLOCK_PATH if req.method() == Method::GET => Ok(clock_now(state)),
        p if p.starts_with(FILES_PREFIX) => Ok(files::serve(req.method(), p)),
        p if video_id(p).is_some() && (req.method() == Method::GET || req.method() == Method::DELETE) => {
            Ok(video::get_or_delete(state, &req, video_id(p).unwrap_or_default(), &rid))
        }
        _ => {
            let message = format!("The requested resource {} {} was not found.", req.method(), path);
            Ok(error_response(404, "NotFound", &message, "", &rid))
        }
    }
}

/// The answer a test asked for instead of the real one: 401 for a refused key, else the outage's
/// status (with `Retry-After`).
fn test_refusal(state: &SimState, req: &Request<Incoming>, rid: &str) -> Option<Response<SimBody>> {
    let bearer = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !bearer.is_empty() && state.is_refused(bearer) {
        return Some(fault::error_response(401, "AuthenticationError", "The API key is not valid.", "", rid));
    }
    let (status, retry_after) = state.outage()?;
    let mut refused = fault::error_response(status, "ServiceUnavailable", "The service is not available now.", "", rid);
    if let Some(secs) = retry_after {
        refused.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
    }
    Some(refused)
}

/// The `{id}` of `/api/v3/contents/generations/tasks/{id}`.
fn video_id(path: &str) -> Option<&str> {
    path.strip_prefix(VIDEO_TASKS_PATH)?.strip_prefix('/').filter(|id| !id.is_empty() && !id.contains('/'))
}

/// `{"now_ms":…}`.
fn clock_now(state: &SimState) -> Response<SimBody> {
    json_response(200, serde_json::json!({"now_ms": state.clock().now_ms()}).to_string())
}

/// `POST /sim/clock/advance?ms=N`.
fn advance(state: &SimState, query: Option<&str>) -> Response<SimBody> {
    let ms = query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix("ms="))
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|&n| n <= MAX_ADVANCE_MS);
    match ms {
        Some(ms) => {
            state.clock().advance(Duration::from_millis(ms));
            clock_now(state)
        }
        None => json_response(400, r#"{"error":"ms must be an integer 0..=2592000000"}"#),
    }
}
