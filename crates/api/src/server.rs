//! The accept loop: one hyper connection task per client, graceful shutdown, request ids, access logs.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{HeaderValue, Request};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};

use crate::response::Response;

use crate::state::{AppState, CallLog, Limits};

mod watchdog;

use watchdog::{Activity, Busy, BusyBody, Wake, Watchdog, Watched};

/// What the connection's service answers a request with.
type ServiceFuture = Pin<Box<dyn Future<Output = Result<http::Response<BusyBody>, Infallible>> + Send>>;

/// How long shutdown waits for in-flight requests before closing connections.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a connection closed for idleness may take to say goodbye (an HTTP/2 GOAWAY) before it
/// is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// HTTP/2: streams one connection may have open at once (its requests in flight). Each is a task
/// holding its request's headers and up to [`HTTP2_SEND_BUFFER`] of its answer; 100 is Envoy's
/// default (nginx: 128) and far more than a client multiplexes in practice.
const HTTP2_MAX_STREAMS: u32 = 100;

/// HTTP/2: the largest header list a request may carry, decoded (16 KiB, hyper's default, stated
/// here so that it is a choice). It also bounds a CONTINUATION flood: h2 refuses a header block
/// spread over more frames than this size needs (plus a quarter) with a GOAWAY, and one that grows
/// past it without decoding it.
const HTTP2_MAX_HEADER_LIST: u32 = 16 * 1024;

/// HTTP/2: streams the client may reset before the server has even accepted them, at once, before
/// the connection is closed with GOAWAY `ENHANCE_YOUR_CALM` (the "rapid reset" attack,
/// CVE-2023-44487: HEADERS then RST_STREAM, again and again, makes work without ever counting as
/// open). 20 is h2's own default, stated here so that it is a choice.
const HTTP2_MAX_PENDING_RESETS: usize = 20;

/// HTTP/2: streams the server may reset for a client's protocol errors over the connection's life
/// before it closes the connection with GOAWAY (RUSTSEC-2024-0003: a client that provokes resets in
/// a loop). hyper's default, stated here so that it is a choice.
const HTTP2_MAX_ERROR_RESETS: usize = 1024;

/// HTTP/2: the most of one stream's answer buffered while the client's window or socket does not
/// take it: 64 KiB (hyper's default is 400 KiB), so a connection's answers held back cost at most
/// [`HTTP2_MAX_STREAMS`] times this, 6.4 MiB, until the watchdog cuts it.
const HTTP2_SEND_BUFFER: usize = 64 * 1024;

/// Serves HTTP/1.1 and HTTP/2 on `listener` until `shutdown` completes, then stops accepting,
/// lets in-flight requests finish (up to 30 s) and returns.
///
/// Each connection is watched ([`Activity`]): one that has no request in flight is closed when it
/// has been silent for [`Limits::idle_timeout`], or when a request's header block has not arrived
/// within [`Limits::header_read_timeout`] of its first byte; one whose client takes none of the
/// bytes of the answers ready for it (a reader that stopped reading, an HTTP/2 window of 0) for the
/// idle timeout is dropped. A client address may hold [`Limits::max_connections_per_ip`]
/// connections at once (trusted proxies excepted); the next one from it is closed at once. HTTP/2
/// is bounded by the `HTTP2_*` constants above (streams, header list, resets, send buffer); h2
/// itself answers one SETTINGS or PING at a time and reads nothing more until that answer is
/// written, so a flood of either is held back by the client's own socket.
///
/// Which protocol a connection speaks is judged on its first bytes without reading them
/// ([`opening`]), and it is then served by that protocol's own builder: hyper-util's `auto`
/// server reads those bytes and hands them back, and each HTTP/1.1 connection's read buffer then
/// grew to 16 KiB instead of hyper's 8 (`docs/PERFORMANCE.md`).
pub async fn serve(listener: TcpListener, state: AppState, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    let limits = *state.limits();
    let http1 = Arc::new(http1::Builder::new());
    let mut http2 = http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(limits.http2_keepalive))
        .keep_alive_timeout(limits.http2_keepalive)
        .max_concurrent_streams(HTTP2_MAX_STREAMS)
        .max_header_list_size(HTTP2_MAX_HEADER_LIST)
        .max_pending_accept_reset_streams(HTTP2_MAX_PENDING_RESETS)
        .max_local_error_reset_streams(HTTP2_MAX_ERROR_RESETS)
        .max_send_buf_size(HTTP2_SEND_BUFFER);
    let http2 = Arc::new(http2);
    let slots = Arc::new(Semaphore::new(limits.max_connections.clamp(1, Semaphore::MAX_PERMITS)));
    let peers = PeerSlots::new(limits.max_connections_per_ip);
    let (stop, stopped) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        // Past the cap, the next connection waits in the kernel's accept queue for a slot.
        let slot = tokio::select! {
            slot = Arc::clone(&slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors and similar: back off briefly instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(peer_slot) = peers.take(peer.ip(), &state) else {
            tracing::debug!(%peer, "closing a connection past the per-address cap");
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        let service = {
            let (state, activity) = (state.clone(), Arc::clone(&activity));
            service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
                let client = state.client_ip(peer.ip(), req.headers());
                req.extensions_mut().insert(crate::state::ClientIp(client));
                let state = state.clone();
                let busy = Busy::begin(&activity);
                // Boxed apart: hyper keeps a connection's request future in a box of its own for
                // the connection's life, sized for the future (~7 KiB); this way that box holds a
                // pointer, and the future's memory goes back as soon as the answer's head is out
                // (a stream then costs its connection nothing for it).
                let responding: ServiceFuture = Box::pin(async move {
                    let response = respond(&state, req).await;
                    // The head is ready: from now on the response is owed to the client.
                    let waker = std::future::poll_fn(|cx| std::task::Poll::Ready(cx.waker().clone())).await;
                    Ok::<_, Infallible>(response.map(|body| busy.respond(body, &waker)))
                });
                responding
            })
        };
        let (http1, http2) = (Arc::clone(&http1), Arc::clone(&http2));
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let _slots = (slot, peer_slot);
            let protocol = tokio::select! {
                protocol = opening(&stream, &limits) => protocol,
                _ = stopped.changed() => None,
            };
            let Some(protocol) = protocol else {
                tracing::debug!(%peer, "closing a connection that never began a request");
                return;
            };
            activity.set_http2(protocol == Protocol::Http2);
            let io = TokioIo::new(Watched::new(stream, Arc::clone(&activity)));
            let watchdog = Watchdog::new(activity, limits);
            // Boxed as `dyn` to spell out that it is `Send` (rustc cannot prove it here on its own).
            let serving: Pin<Box<dyn Future<Output = ()> + Send>> = match protocol {
                Protocol::Http1 => Box::pin(drive(http1.serve_connection(io, service), watchdog, stopped, peer)),
                Protocol::Http2 => Box::pin(drive(http2.serve_connection(io, service), watchdog, stopped, peer)),
            };
            serving.await;
        });
    }
    tracing::info!("shutting down: draining connections");
    let _ = stop.send(true);
    let all = u32::try_from(limits.max_connections.clamp(1, Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
    tokio::select! {
        _ = slots.acquire_many(all) => tracing::info!("all connections closed"),
        () = tokio::time::sleep(DRAIN_TIMEOUT + CLOSE_GRACE) => tracing::warn!("drain timeout; closing remaining connections"),
    }
    Ok(())
}

/// Connections open from each client address, each at most `cap`. The address is the TCP peer's:
/// `X-Forwarded-For` is a request header, not known when a connection is accepted, and anyone can
/// write it. Peers among the trusted proxies are not capped (they carry many clients each).
#[derive(Clone)]
struct PeerSlots {
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
    cap: usize,
}

impl PeerSlots {
    fn new(cap: usize) -> PeerSlots {
        PeerSlots { open: Arc::new(Mutex::new(HashMap::new())), cap: cap.max(1) }
    }

    /// A slot for one more connection from `ip`, held until dropped; `None` when `ip` is at the cap.
    fn take(&self, ip: IpAddr, state: &AppState) -> Option<PeerSlot> {
        let ip = ip.to_canonical();
        if state.is_trusted_proxy(ip) {
            return Some(PeerSlot { slots: None, ip });
        }
        let mut open = self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mine = open.entry(ip).or_insert(0);
        if *mine >= self.cap {
            return None;
        }
        *mine += 1;
        Some(PeerSlot { slots: Some(self.clone()), ip })
    }
}

/// One connection's place in its address's count in [`PeerSlots`] (none for a trusted proxy).
struct PeerSlot {
    slots: Option<PeerSlots>,
    ip: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let Some(slots) = &self.slots else { return };
        let mut open = slots.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(mine) = open.get_mut(&self.ip) {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// The protocol a client opens its connection with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    /// HTTP/2 with prior knowledge: the connection preface, which starts with `PRI `.
    Http2,
}

/// The first bytes of HTTP/2's connection preface; no HTTP/1.1 request starts with them.
const HTTP2_PREFACE_START: &[u8; 4] = b"PRI ";

/// How long to wait before looking again at a connection whose first bytes are a part of
/// [`HTTP2_PREFACE_START`] (a client sends its first line in one piece, so this is rare).
const PEEK_AGAIN: Duration = Duration::from_millis(5);

/// The protocol `stream` opens with, judged on its first bytes without reading them (they stay
/// for the protocol's own parser). `None`: the client closed or failed, sent nothing for
/// [`Limits::idle_timeout`], or stalled inside those first four bytes for
/// [`Limits::header_read_timeout`].
async fn opening(stream: &TcpStream, limits: &Limits) -> Option<Protocol> {
    let mut first = [0u8; 4];
    let mut seen = match tokio::time::timeout(limits.idle_timeout, stream.peek(&mut first)).await {
        Ok(Ok(n)) if n > 0 => n,
        _ => return None,
    };
    let stalled_at = tokio::time::Instant::now() + limits.header_read_timeout;
    loop {
        if first[..seen] != HTTP2_PREFACE_START[..seen] {
            return Some(Protocol::Http1);
        }
        if seen == HTTP2_PREFACE_START.len() {
            return Some(Protocol::Http2);
        }
        if tokio::time::Instant::now() >= stalled_at {
            return None;
        }
        // Bytes are waiting, so the socket stays readable: look again after a pause, not at once.
        tokio::time::sleep(PEEK_AGAIN).await;
        seen = match stream.peek(&mut first).await {
            Ok(n) if n > 0 => n,
            _ => return None,
        };
    }
}

/// Serves `conn` until it ends: closed on the watchdog's word when idle or stalled, drained when
/// the server stops.
async fn drive<C>(conn: C, mut watchdog: Watchdog, mut stopped: watch::Receiver<bool>, peer: SocketAddr)
where
    C: GracefulConnection + Send,
    C::Error: std::fmt::Display,
{
    let mut conn = std::pin::pin!(conn);
    let mut stopping = false;
    loop {
        tokio::select! {
            // The connection first: the watchdog then sees what it has just read.
            biased;
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "connection closed with error");
                }
                break;
            }
            _ = stopped.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
                watchdog.close_by(tokio::time::Instant::now() + DRAIN_TIMEOUT);
            }
            wake = &mut watchdog => match wake {
                Wake::Stalled if watchdog.http2() => {
                    // Nothing in flight: a GOAWAY, and a moment for the client to read it.
                    tracing::debug!(%peer, "closing an idle HTTP/2 connection");
                    conn.as_mut().graceful_shutdown();
                    watchdog.close_by(tokio::time::Instant::now() + CLOSE_GRACE);
                }
                Wake::Stalled => {
                    // HTTP/1.1 with nothing in flight (at most half a header): just close.
                    tracing::debug!(%peer, "closing an idle or stalled connection");
                    break;
                }
                Wake::Stuck => {
                    // Responses ready that the client has not taken for the idle timeout (it stopped
                    // reading, or opened no HTTP/2 window): it would not read a goodbye either.
                    tracing::debug!(%peer, "closing a connection whose client takes no response bytes");
                    break;
                }
                Wake::TimeUp => break, // it had its time to finish
            },
        }
    }
}

/// A request id from the client's `X-Request-Id` when it is short and plain, else a fresh one.
fn request_id(req: &Request<Incoming>) -> HeaderValue {
    req.headers()
        .get("x-request-id")
        .filter(|v| {
            let b = v.as_bytes();
            !b.is_empty() && b.len() <= 128 && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.:".contains(c))
        })
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::from_str(&format!("req_{}", uuid::Uuid::now_v7().simple()))
                .unwrap_or(HeaderValue::from_static("req"))
        })
}

/// Routes, runs and logs one request; every error becomes the error envelope.
async fn respond(state: &AppState, req: Request<Incoming>) -> Response {
    let started = Instant::now();
    let id = request_id(&req);
    let (parts, body) = req.into_parts();
    let (method, path) = (parts.method.clone(), parts.uri.path().to_owned());
    let (label, result) = crate::table::dispatch(state, parts, body).await;
    let mut response = result.unwrap_or_else(|e| e.into_response());
    if path.starts_with(crate::v1::PREFIX) {
        crate::v1::dialect(&path, &mut response);
    }
    state.gateway().record_request(label, response.status().as_u16(), started.elapsed());
    let call = response.extensions_mut().remove::<CallLog>().unwrap_or_default();
    tracing::info!(
        request_id = id.to_str().unwrap_or_default(),
        %method,
        path,
        status = response.status().as_u16(),
        micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        user_id = call.user.as_deref(),
        model = call.model.as_deref(),
        task_id = call.task.as_deref(),
        billed_usd = call.billed.map(|a| a.to_string()).as_deref(),
        "request"
    );
    response.headers_mut().insert("x-request-id", id);
    response
}
