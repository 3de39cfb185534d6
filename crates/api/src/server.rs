//! The accept loop: one hyper connection task per client, graceful shutdown, request ids, access logs.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderValue, Request};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use service::Gateway;
use tokio::net::TcpListener;

use crate::body::BodyBudget;
use crate::handlers::handle;
use crate::response::Response;
use crate::routes::{UNMATCHED_ROUTE, route};

/// How long shutdown waits for in-flight requests before closing connections.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Everything a request handler needs, cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Gateway>,
    budget: BodyBudget,
}

impl AppState {
    /// State serving `gateway`, with the default budget for large request bodies.
    pub fn new(gateway: Gateway) -> AppState {
        AppState { inner: Arc::new(gateway), budget: BodyBudget::default() }
    }

    /// The same state with another budget for large request bodies.
    pub fn with_body_budget(mut self, budget: BodyBudget) -> AppState {
        self.budget = budget;
        self
    }

    /// The budget large request bodies share.
    pub fn body_budget(&self) -> &BodyBudget {
        &self.budget
    }

    /// The use cases.
    pub fn gateway(&self) -> &Gateway {
        &self.inner
    }
}

/// Serves HTTP/1.1 and HTTP/2 on `listener` until `shutdown` completes, then stops accepting,
/// lets in-flight requests finish (up to 30 s) and returns.
pub async fn serve(listener: TcpListener, state: AppState, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
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
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let service = service_fn(move |req| {
            let state = state.clone();
            async move { Ok::<_, Infallible>(respond(&state, req).await) }
        });
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
        let conn = graceful.watch(conn.into_owned());
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection closed with error");
            }
        });
    }
    tracing::info!("shutting down: draining connections");
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(DRAIN_TIMEOUT) => tracing::warn!("drain timeout; closing remaining connections"),
    }
    Ok(())
}

/// What the access log line of a billable call adds, set on its response by the handler.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallLog {
    /// The caller's user id.
    pub user: Option<String>,
    /// The model's public name.
    pub model: Option<String>,
    /// The call's task.
    pub task: Option<String>,
    /// What the call was charged (complete calls; a stream's charge is known only at its end).
    pub billed: Option<domain::UsdAmount>,
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
    let (label, result) = match route(&parts.method, parts.uri.path()) {
        Ok(r) => (r.label(), handle(state, r, parts, body).await),
        Err(e) => (UNMATCHED_ROUTE, Err(e)),
    };
    let mut response = result.unwrap_or_else(|e| e.into_response());
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
