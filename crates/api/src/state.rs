//! What every handler reads: [`AppState`] (the use cases, the budget large bodies share, the
//! connection and body [`Limits`], the metrics token), and the [`CallLog`] a billable call's
//! handler leaves on its response for the access log.

use std::sync::Arc;
use std::time::Duration;

use service::Gateway;

use crate::body::{BodyBudget, Pace};

/// What a connection and a request body may cost the server: the deadlines and the cap that keep a
/// slow or idle client from holding connections, tasks and memory. The defaults suit a public
/// deployment (`docs/ARCHITECTURE.md`, "Operations defaults", gives the reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A request's header block must arrive within this time of its first byte (HTTP/1.1; a new
    /// connection's first request counts from the accept).
    pub header_read_timeout: Duration,
    /// A connection with no request in flight and no byte received is closed after this time.
    pub idle_timeout: Duration,
    /// HTTP/2: a PING is sent after this much silence, and the connection closed when its answer
    /// takes as long again.
    pub http2_keepalive: Duration,
    /// Connections served at once; past it, new connections wait in the kernel's accept queue (and
    /// the kernel refuses them once that queue is full) until one closes.
    pub max_connections: usize,
    /// A request body must keep up with this many bytes per second on average, after the grace
    /// period (else 408 `request_timeout`).
    pub body_min_rate: u64,
    /// The time every request body gets before [`Limits::body_min_rate`] applies.
    pub body_grace: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(75),
            http2_keepalive: Duration::from_secs(20),
            max_connections: 8192,
            body_min_rate: 32 * 1024,
            body_grace: Duration::from_secs(10),
        }
    }
}

/// Everything a request handler needs, cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Gateway>,
    budget: BodyBudget,
    limits: Limits,
    /// The SHA-256 of the token `GET /metrics` requires (`None`: open, as before).
    metrics_token: Option<[u8; 32]>,
}

impl AppState {
    /// State serving `gateway`, with the default budget for large request bodies and default limits.
    pub fn new(gateway: Gateway) -> AppState {
        AppState {
            inner: Arc::new(gateway),
            budget: BodyBudget::default(),
            limits: Limits::default(),
            metrics_token: None,
        }
    }

    /// The same state with another budget for large request bodies.
    pub fn with_body_budget(mut self, budget: BodyBudget) -> AppState {
        self.budget = budget;
        self
    }

    /// The same state with other connection and body limits.
    pub fn with_limits(mut self, limits: Limits) -> AppState {
        self.limits = limits;
        self
    }

    /// The budget large request bodies share.
    pub fn body_budget(&self) -> &BodyBudget {
        &self.budget
    }

    /// The connection and body limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The pace a request body must keep.
    pub(crate) fn pace(&self) -> Pace {
        Pace::new(self.limits.body_min_rate, self.limits.body_grace)
    }

    /// The use cases.
    pub fn gateway(&self) -> &Gateway {
        &self.inner
    }

    /// The same state with `GET /metrics` behind `Authorization: Bearer <token>` (an empty token
    /// leaves it open). Only the token's digest is kept.
    pub fn with_metrics_token(mut self, token: &str) -> AppState {
        self.metrics_token = (!token.is_empty()).then(|| crate::headers::digest(token.as_bytes()));
        self
    }

    /// The digest of the token `/metrics` requires, if any.
    pub(crate) fn metrics_token(&self) -> Option<&[u8; 32]> {
        self.metrics_token.as_ref()
    }
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
