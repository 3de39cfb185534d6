//! Outgoing requests to URLs a user named (media imports, webhooks) and signed links to stored media:
//! the ports the use cases reach them through. The `media` crate implements both.

use async_trait::async_trait;

use crate::ports::{MediaError, MediaSink};

/// What a fetch stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedMeta {
    /// Bytes written to the sink.
    pub bytes: u64,
    /// The final answer's `Content-Type`, if any.
    pub content_type: Option<String>,
    /// The URL the body came from (after redirects).
    pub final_url: String,
}

/// Why an outgoing request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    /// The URL or a redirect is not allowed (not https, a non-public address, too many
    /// redirects, not a URL).
    #[error("refused: {0}")]
    Refused(String),
    /// The body is larger than allowed.
    #[error("larger than {limit} bytes")]
    TooLarge {
        /// The bound that was passed.
        limit: u64,
    },
    /// The final answer was not 2xx (fetches only).
    #[error("answered HTTP {0}")]
    Status(u16),
    /// No complete answer in time.
    #[error("timed out")]
    Timeout,
    /// The body came in slower than the configured minimum rate (a drip-fed fetch is cut).
    #[error("slower than {bytes_per_sec} bytes per second")]
    TooSlow {
        /// The minimum rate, in bytes per second.
        bytes_per_sec: u64,
    },
    /// Connection, TLS or protocol failure.
    #[error("network error: {0}")]
    Network(String),
    /// The sink failed.
    #[error(transparent)]
    Sink(#[from] MediaError),
    /// The configuration is unusable (bad PEM).
    #[error("egress configuration: {0}")]
    Config(String),
}

/// Requests to user-named URLs, under the egress policy (https only, no non-public address unless
/// allow-listed, redirects re-checked, bounded size and time).
#[async_trait]
pub trait Outbound: Send + Sync {
    /// Checks `url` against the policy, resolving its host, without sending anything to it.
    async fn check(&self, url: &str) -> Result<(), EgressError>;
    /// GETs `url` and streams its body into `sink`, at most `max_bytes`; the sink is neither
    /// finished nor aborted.
    async fn fetch_to(&self, url: &str, max_bytes: u64, sink: &mut dyn MediaSink) -> Result<FetchedMeta, EgressError>;
    /// POSTs a JSON `body` with extra `headers`; the answer's status.
    async fn post_json(&self, url: &str, headers: &[(String, String)], body: Vec<u8>) -> Result<u16, EgressError>;
}

/// Signed, expiring links to stored media, which the upstream fetches.
pub trait MediaLinks: Send + Sync {
    /// The link to `key`, valid until `expires_at_unix` (seconds).
    fn link(&self, key: &str, expires_at_unix: u64) -> String;
    /// Whether `sig` signs `key` until `expires`, and `now_unix` is not past it.
    fn verify(&self, key: &str, expires: u64, sig: &str, now_unix: u64) -> bool;
}
