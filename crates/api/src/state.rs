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
    /// Connections one client address (the TCP peer, not `X-Forwarded-For`; trusted proxies are not
    /// capped) may hold at once; a connection past it is closed as soon as it is accepted, so one
    /// address cannot take every slot of [`Limits::max_connections`].
    pub max_connections_per_ip: usize,
    /// A request body must keep up with this many bytes per second, averaged over a sliding window
    /// as long as [`Limits::body_grace`], once that grace has passed (else 408 `request_timeout`).
    pub body_min_rate: u64,
    /// The time every request body gets before [`Limits::body_min_rate`] applies, and the window it
    /// is averaged over.
    pub body_grace: Duration,
    /// A request body that brings no byte for this long while it is read is cut with 408, whatever
    /// came before (`Duration::ZERO`: no such bound).
    pub body_stall: Duration,
}

impl Limits {
    /// The defaults, the one place they are written (`gateway`'s settings name them).
    pub const DEFAULT: Limits = Limits {
        header_read_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(75),
        http2_keepalive: Duration::from_secs(20),
        max_connections: 8192,
        max_connections_per_ip: 256,
        body_min_rate: 32 * 1024,
        body_grace: Duration::from_secs(10),
        body_stall: Duration::from_secs(30),
    };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
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
    /// Proxies whose `X-Forwarded-For` names the client (empty: the peer is the client).
    trusted_proxies: domain::IpAllowList,
}

/// The client of a request that came from `peer` with `headers`: the peer itself, unless it is one
/// of the `trusted` proxies; then, walking `X-Forwarded-For` from its right end, the first address
/// that is not a trusted proxy. An entry that is no address makes the client unknown (`None`):
/// stopping at the last trusted hop instead would hand the proxy's own address to whoever wrote the
/// garbage, and a key limited to the proxy's network would pass.
fn client_behind(
    trusted: &domain::IpAllowList,
    peer: std::net::IpAddr,
    headers: &http::HeaderMap,
) -> Option<std::net::IpAddr> {
    if trusted.is_empty() || !trusted.allows(peer) {
        return Some(peer);
    }
    let mut client = peer;
    for value in headers.get_all("x-forwarded-for").iter().rev() {
        let text = value.to_str().ok()?;
        for item in text.rsplit(',') {
            let ip = item.trim().parse::<std::net::IpAddr>().ok()?;
            client = ip;
            if !trusted.allows(ip) {
                return Some(client);
            }
        }
    }
    Some(client)
}

/// The caller's address, as the edge determined it for each request (a request extension); `None`
/// when a trusted proxy forwarded an address that could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientIp(pub Option<std::net::IpAddr>);

/// The caller's address the edge recorded on the request (`None` for a request that did not come
/// through the server's accept loop, or whose forwarded address could not be read: no key's
/// address list allows it).
pub(crate) fn client_ip(parts: &http::request::Parts) -> Option<std::net::IpAddr> {
    parts.extensions.get::<ClientIp>().and_then(|c| c.0)
}

impl AppState {
    /// State serving `gateway`, with the default budget for large request bodies and default limits.
    pub fn new(gateway: Gateway) -> AppState {
        AppState {
            inner: Arc::new(gateway),
            budget: BodyBudget::default(),
            limits: Limits::default(),
            metrics_token: None,
            trusted_proxies: domain::IpAllowList::default(),
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
        Pace::new(self.limits.body_min_rate, self.limits.body_grace).with_stall(self.limits.body_stall)
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

    /// The same state believing `X-Forwarded-For` from `proxies` (load balancers in front of the
    /// gateway): a request from one of them is taken to come from the nearest address in that
    /// header that is not one of them.
    pub fn with_trusted_proxies(mut self, proxies: domain::IpAllowList) -> AppState {
        self.trusted_proxies = proxies;
        self
    }

    /// The client of a request that came from `peer` with `headers` ([`client_behind`]).
    pub(crate) fn client_ip(&self, peer: std::net::IpAddr, headers: &http::HeaderMap) -> Option<std::net::IpAddr> {
        client_behind(&self.trusted_proxies, peer, headers)
    }

    /// Whether `peer` is one of the trusted proxies (which carry many clients' connections).
    pub(crate) fn is_trusted_proxy(&self, peer: std::net::IpAddr) -> bool {
        !self.trusted_proxies.is_empty() && self.trusted_proxies.allows(peer)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> std::net::IpAddr {
        s.parse().expect(s)
    }

    fn forwarded(values: &[&str]) -> http::HeaderMap {
        let mut headers = http::HeaderMap::new();
        for v in values {
            headers.append("x-forwarded-for", http::HeaderValue::from_str(v).expect("header"));
        }
        headers
    }

    /// Without trusted proxies `X-Forwarded-For` is ignored; from a trusted proxy the client is
    /// the nearest address that is not one, across repeated headers; garbage stops the walk.
    #[test]
    fn the_client_is_the_peer_unless_a_trusted_proxy_forwards_it() {
        let none = domain::IpAllowList::default();
        let spoofed = forwarded(&["203.0.113.9"]);
        assert_eq!(client_behind(&none, ip("198.51.100.1"), &spoofed), Some(ip("198.51.100.1")), "no proxy is trusted");
        let trusted = domain::IpAllowList::parse("10.0.0.0/8,127.0.0.1").expect("list");
        let behind = |peer: &str, headers: &http::HeaderMap| client_behind(&trusted, ip(peer), headers);
        assert_eq!(behind("198.51.100.1", &spoofed), Some(ip("198.51.100.1")), "an untrusted peer");
        let chain = forwarded(&["192.0.2.1, 203.0.113.9", "10.1.1.1"]);
        assert_eq!(behind("10.0.0.5", &chain), Some(ip("203.0.113.9")), "the spoofable left part is skipped");
        assert_eq!(behind("127.0.0.1", &forwarded(&[])), Some(ip("127.0.0.1")), "no header: the proxy");
        let junk = forwarded(&["203.0.113.9, not-an-ip, 10.2.2.2"]);
        assert_eq!(behind("10.0.0.5", &junk), None, "garbage behind trusted hops: unknown, never the proxy");
        let junk_first = forwarded(&["not-an-ip"]);
        assert_eq!(behind("10.0.0.5", &junk_first), None, "garbage right after the proxy: unknown");
        let junk_left = forwarded(&["not-an-ip, 203.0.113.9"]);
        assert_eq!(behind("10.0.0.5", &junk_left), Some(ip("203.0.113.9")), "garbage beyond the client is not read");
        let mapped = forwarded(&["::ffff:203.0.113.7"]);
        assert_eq!(behind("::ffff:10.0.0.5", &mapped), Some(ip("::ffff:203.0.113.7")));
    }
}
