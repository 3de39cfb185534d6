//! [`Egress`]: the SSRF-safe client for media imports ([`Egress::fetch_to`]) and webhooks
//! ([`Egress::post_json`]).
//!
//! Rules, for every request and every redirect hop:
//!
//! - The URL must be `https://` (anything else is [`EgressError::Refused`]; so is a redirect to
//!   it), with a host and no user or password.
//! - A host that is an IP address must be permitted by the [`AllowList`] (listed, or public per
//!   [`policy`]) before anything is sent. A host name is resolved by the client's own resolver,
//!   which keeps only the permitted addresses (all of them when the name itself is listed); if
//!   none is left, the request is refused without connecting. Requests go to those addresses
//!   only: no proxy is used, whatever the environment says.
//! - Redirects (`fetch_to` only) are followed by hand, at most [`MAX_REDIRECTS`], each checked
//!   as above. `post_json` never follows them: a 3xx is returned as the status.
//! - The whole call (all hops, the body included) is bounded by [`EgressConfig::timeout`]
//!   ([`EgressError::Timeout`]), a webhook by [`EgressConfig::webhook_timeout`] (seconds: a
//!   receiver that never answers holds a worker slot that long); connecting by
//!   [`EgressConfig::connect_timeout`]. A fetch is also held to [`EgressConfig::min_rate`]: past
//!   its grace period, a window that brings fewer bytes than the rate asks cuts it
//!   ([`EgressError::TooSlow`]), so a drip-fed link cannot hold a worker slot for the whole timeout.
//! - `fetch_to` streams the body into the sink chunk by chunk; an announced `Content-Length`
//!   over `max_bytes` is refused before reading, and a body that grows past it is stopped
//!   there ([`EgressError::TooLarge`]). A non-2xx final status is [`EgressError::Status`].
//!   On any error the caller should [`domain::ports::MediaSink::abort`] the sink.
//! - Certificates are checked against the system roots plus the PEM certificates of
//!   [`EgressConfig::extra_ca_pem`] (`GATEWAY_EXTRA_CA_FILE`).
//!
//! Suggested client answers: `Refused` and `Status` → 400, `TooLarge` → 413, `Timeout`, `TooSlow` and
//! `Network` → 400 for an import the user asked for (the URL did not work), retried later for
//! webhooks.

pub mod policy;
mod resolver;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use domain::ports::MediaSink;
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use reqwest::{StatusCode, Url};

use policy::{AllowList, non_public_reason};
use resolver::{PolicyRefusal, PolicyResolver};

/// Most redirects [`Egress::fetch_to`] follows.
pub const MAX_REDIRECTS: usize = 5;

/// How [`Egress`] is set up.
#[derive(Debug, Clone, Default)]
pub struct EgressConfig {
    /// Non-public hosts and networks that may be reached (`GATEWAY_EGRESS_ALLOW`).
    pub allow: AllowList,
    /// Extra root certificates, PEM (the contents of `GATEWAY_EXTRA_CA_FILE`).
    pub extra_ca_pem: Option<Vec<u8>>,
    /// Bound on connecting.
    pub connect_timeout: Duration,
    /// Bound on a whole call.
    pub timeout: Duration,
    /// Bound on a whole webhook call ([`Egress::post_json`]); `None`: [`EgressConfig::timeout`].
    pub webhook_timeout: Option<Duration>,
    /// The slowest a fetched body may arrive; `None`: no floor.
    pub min_rate: Option<MinRate>,
}

/// A floor on the speed of a fetch: after `grace` from the start of the call, every `window` must
/// bring at least `bytes_per_sec` × `window` bytes (the headers and redirects count as no bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinRate {
    /// Bytes per second, averaged over a window.
    pub bytes_per_sec: u64,
    /// The span the rate is averaged over.
    pub window: Duration,
    /// Time from the start of the call before the first window is judged.
    pub grace: Duration,
}

impl MinRate {
    /// The bytes one window must bring.
    fn per_window(&self) -> u64 {
        let millis = domain::duration_millis(self.window).unsigned_abs();
        self.bytes_per_sec.saturating_mul(millis) / 1000
    }

    /// Completes (with [`EgressError::TooSlow`]) once a window after the grace brings fewer bytes
    /// than the rate asks; `received` counts the bytes so far.
    async fn watch(self, received: &AtomicU64) -> EgressError {
        tokio::time::sleep(self.grace).await;
        let mut before = received.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(self.window.max(Duration::from_millis(1))).await;
            let now = received.load(Ordering::Relaxed);
            if now.saturating_sub(before) < self.per_window() {
                return EgressError::TooSlow { bytes_per_sec: self.bytes_per_sec };
            }
            before = now;
        }
    }
}

pub use domain::{EgressError, FetchedMeta};

/// The outgoing HTTP client for user-named URLs.
#[derive(Debug, Clone)]
pub struct Egress {
    client: reqwest::Client,
    allow: Arc<AllowList>,
    timeout: Duration,
    webhook_timeout: Duration,
    min_rate: Option<MinRate>,
}

/// An error and its sources, joined with `: `.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn map_reqwest(error: &reqwest::Error) -> EgressError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = source {
        if let Some(refusal) = cause.downcast_ref::<PolicyRefusal>() {
            return EgressError::Refused(refusal.0.clone());
        }
        source = cause.source();
    }
    if error.is_timeout() { EgressError::Timeout } else { EgressError::Network(chain(error)) }
}

/// Installs ring as the process's rustls crypto provider, which `reqwest` (built without one of its
/// own) needs before it builds a client: the egress client's and the S3 media store's.
pub(crate) fn install_tls_provider() {
    // Err: a provider is installed already (this one, or one the process chose).
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Egress {
    /// A client for `config`; fails with [`EgressError::Config`] when the PEM has no usable
    /// certificate or the client cannot be built.
    pub fn new(config: EgressConfig) -> Result<Egress, EgressError> {
        let allow = Arc::new(config.allow);
        install_tls_provider();
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .https_only(true)
            .connect_timeout(config.connect_timeout)
            .dns_resolver(PolicyResolver { allow: Arc::clone(&allow) })
            .user_agent(concat!("model-gateway/", env!("CARGO_PKG_VERSION")));
        if let Some(pem) = &config.extra_ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| EgressError::Config(chain(&e)))?;
            if certs.is_empty() {
                return Err(EgressError::Config("no certificate in the extra CA file".to_owned()));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder.build().map_err(|e| EgressError::Config(chain(&e)))?;
        Ok(Egress {
            client,
            allow,
            timeout: config.timeout,
            webhook_timeout: config.webhook_timeout.unwrap_or(config.timeout),
            min_rate: config.min_rate,
        })
    }

    /// Parses and checks `url` before anything is sent.
    fn check_text(&self, url: &str) -> Result<Url, EgressError> {
        let parsed = Url::parse(url).map_err(|e| EgressError::Refused(format!("not a URL: {e}")))?;
        self.check_url(&parsed)?;
        Ok(parsed)
    }

    fn check_url(&self, url: &Url) -> Result<(), EgressError> {
        if url.scheme() != "https" {
            return Err(EgressError::Refused(format!("only https URLs are allowed, not {}:", url.scheme())));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(EgressError::Refused("URLs with credentials are not allowed".to_owned()));
        }
        let host = url.host_str().filter(|h| !h.is_empty());
        let host = host.ok_or_else(|| EgressError::Refused("the URL has no host".to_owned()))?;
        // The URL parser has already normalised IPv4 forms (`127.1`, `0x7f.0.0.1`).
        let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() else {
            return Ok(()); // a name: the resolver applies the policy
        };
        if self.allow.permits("", ip) {
            return Ok(());
        }
        let why = non_public_reason(ip).unwrap_or("refused");
        Err(EgressError::Refused(format!("{ip} is not allowed ({why})")))
    }

    /// GETs `url` (following checked redirects) and streams the body into `sink`, at most
    /// `max_bytes`, within the timeout and above the minimum rate. The sink is neither finished
    /// nor aborted here.
    pub async fn fetch_to(
        &self,
        url: &str,
        max_bytes: u64,
        sink: &mut dyn MediaSink,
    ) -> Result<FetchedMeta, EgressError> {
        let start = self.check_text(url)?;
        let received = AtomicU64::new(0);
        let fetch = self.fetch_inner(start, max_bytes, sink, &received);
        let guarded = async {
            match self.min_rate {
                None => fetch.await,
                Some(rate) => tokio::select! {
                    done = fetch => done,
                    slow = rate.watch(&received) => Err(slow),
                },
            }
        };
        tokio::time::timeout(self.timeout, guarded).await.map_err(|_| EgressError::Timeout)?
    }

    async fn fetch_inner(
        &self,
        mut url: Url,
        max_bytes: u64,
        sink: &mut dyn MediaSink,
        received: &AtomicU64,
    ) -> Result<FetchedMeta, EgressError> {
        for hop in 0..=MAX_REDIRECTS {
            self.check_url(&url)?;
            let response = self.client.get(url.clone()).send().await.map_err(|e| map_reqwest(&e))?;
            let status = response.status();
            if status.is_redirection() && status != StatusCode::NOT_MODIFIED {
                if hop == MAX_REDIRECTS {
                    return Err(EgressError::Refused(format!("more than {MAX_REDIRECTS} redirects")));
                }
                let location = response.headers().get(LOCATION).and_then(|v| v.to_str().ok());
                let location = location.ok_or_else(|| EgressError::Status(status.as_u16()))?;
                url = url.join(location).map_err(|e| EgressError::Refused(format!("bad redirect: {e}")))?;
                continue;
            }
            if !status.is_success() {
                return Err(EgressError::Status(status.as_u16()));
            }
            return stream_body(response, url, max_bytes, sink, received).await;
        }
        Err(EgressError::Refused(format!("more than {MAX_REDIRECTS} redirects")))
    }

    /// POSTs `body` as JSON with extra `headers` to `url` within the webhook timeout; the answer's
    /// status (a redirect is not followed). The answer's body is not read.
    pub async fn post_json(&self, url: &str, headers: &[(String, String)], body: Vec<u8>) -> Result<u16, EgressError> {
        let url = self.check_text(url)?;
        let timeout = self.webhook_timeout;
        let mut request = self.client.post(url).timeout(timeout).header(CONTENT_TYPE, "application/json");
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let send = request.body(body).send();
        let response = tokio::time::timeout(timeout, send).await.map_err(|_| EgressError::Timeout)?;
        Ok(response.map_err(|e| map_reqwest(&e))?.status().as_u16())
    }
}

/// Copies the body of a 2xx answer into `sink`, bounded by `max_bytes`, counting the bytes in
/// `received` as they arrive.
async fn stream_body(
    mut response: reqwest::Response,
    url: Url,
    max_bytes: u64,
    sink: &mut dyn MediaSink,
    received: &AtomicU64,
) -> Result<FetchedMeta, EgressError> {
    let too_large = EgressError::TooLarge { limit: max_bytes };
    let announced = response.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > max_bytes) {
        return Err(too_large);
    }
    let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let mut bytes = 0u64;
    while let Some(chunk) = response.chunk().await.map_err(|e| map_reqwest(&e))? {
        bytes = bytes.saturating_add(u64::try_from(chunk.len()).unwrap_or(u64::MAX));
        received.store(bytes, Ordering::Relaxed);
        if bytes > max_bytes {
            return Err(too_large);
        }
        sink.write(&chunk).await?;
    }
    Ok(FetchedMeta { bytes, content_type, final_url: url.to_string() })
}

#[async_trait::async_trait]
impl domain::Outbound for Egress {
    async fn check(&self, url: &str) -> Result<(), EgressError> {
        let parsed = self.check_text(url)?;
        let host = parsed.host_str().unwrap_or_default();
        if host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>().is_ok() {
            return Ok(()); // an address: already checked
        }
        resolver::permitted(&self.allow, host).await.map(drop)
    }

    async fn fetch_to(&self, url: &str, max_bytes: u64, sink: &mut dyn MediaSink) -> Result<FetchedMeta, EgressError> {
        Egress::fetch_to(self, url, max_bytes, sink).await
    }

    async fn post_json(&self, url: &str, headers: &[(String, String)], body: Vec<u8>) -> Result<u16, EgressError> {
        Egress::post_json(self, url, headers, body).await
    }
}
