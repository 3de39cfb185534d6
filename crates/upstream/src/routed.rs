//! [`RoutedUpstream`]: several endpoints (base URL and key) per kind of call, with retries before
//! the first byte, cool-downs and circuit breakers ([`crate::route`]), behind the same ports as
//! one [`HttpUpstream`].
//!
//! | endpoint of the call | pool |
//! | --- | --- |
//! | `ChatCompletions`, `ImageGenerations`, `Responses` | the platform's (`GATEWAY_UPSTREAM_URL` with `GATEWAY_UPSTREAM_API_KEY`) |
//! | `Messages` | the message-compatible bases (`GATEWAY_MESSAGES_URL`), with the platform's keys |
//! | `Speech` | the speech service's (`GATEWAY_SPEECH_URL` with `GATEWAY_SPEECH_API_KEY`) |
//! | video tasks ([`TaskUpstream`]) | the platform pool's first endpoint (a task is polled where it was created) |
//!
//! An attempt is retried on another endpoint of the pool (never the same one twice in a call) when
//! it failed before any byte of an answer reached the gateway: no connection, a timeout before
//! the answer's head, 429, 5xx, or a refused key (401, 403). A 429 or 503 with `Retry-After` cools
//! its endpoint down that long; a refused key takes its endpoint out for an hour and is logged
//! once. Any other answer (2xx, or a 4xx that is the caller's own fault) ends the call, and a
//! stream is never retried once its head arrived, so no byte of an answer ever reaches a client
//! twice. Each endpoint is tried at most once per call, at most [`RoutedUpstream::max_attempts`]
//! attempts are made, and none starts after the
//! call's timeout has passed. One hold and one settlement per call, whatever the attempts: the
//! caller sees one answer.
//!
//! A pool of one endpoint calls it directly, so a gateway with one upstream pays nothing for this.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use domain::ports::{Endpoint, EndpointHealth, EventStream, TaskUpstream, Upstream, UpstreamError, UpstreamHealth};

use crate::config::UpstreamConfig;
use crate::http::{Failed, HttpUpstream};
use crate::route::{BreakerSettings, Change, Circuit, EndpointSpec, EndpointState, Outcome, Router};

/// Attempts one call makes at most, by default. Each endpoint is tried at most once per call, so a
/// pool of fewer endpoints makes fewer; a failing first tier never hides the fallback tier from a
/// call unless the pool has more than this many endpoints.
pub const DEFAULT_MAX_ATTEMPTS: usize = 8;

/// One endpoint of a pool: its name (for logs and `admin upstream list`), base URL and key.
#[derive(Clone, PartialEq, Eq)]
pub struct Member {
    /// A name unique in its pool (`platform-1`, …).
    pub name: String,
    /// The base URL (platform base, speech origin or message-compatible base).
    pub url: String,
    /// Its key.
    pub key: String,
    /// Its share within its priority tier.
    pub weight: u32,
    /// Its tier: lower first, higher the fallback.
    pub priority: u32,
    /// Most attempts in flight on it at once in this process.
    pub max_in_flight: Option<u64>,
}

impl Member {
    /// An endpoint of weight 1 in tier 0 without an in-flight limit (the quick form).
    pub fn plain(name: String, url: String, key: String) -> Member {
        Member { name, url, key, weight: 1, priority: 0, max_in_flight: None }
    }
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member").field("name", &self.name).field("url", &self.url).field("key", &"*****").finish()
    }
}

/// What [`RoutedUpstream`] is built from.
#[derive(Debug, Clone)]
pub struct RoutedConfig {
    /// The platform's endpoints (chat, images, responses, tasks).
    pub platform: Vec<Member>,
    /// The speech service's endpoints.
    pub speech: Vec<Member>,
    /// The message-compatible endpoints (their keys are platform keys).
    pub messages: Vec<Member>,
    /// Bound on connection set-up.
    pub connect_timeout: Duration,
    /// Bound on a whole call (see [`UpstreamConfig::timeout`]); no attempt starts after it.
    pub timeout: Duration,
    /// When circuits open.
    pub breaker: BreakerSettings,
    /// Most attempts per call.
    pub max_attempts: usize,
}

/// The endpoints of one kind and their health.
#[derive(Debug)]
struct Pool {
    what: &'static str,
    members: Vec<(String, Arc<HttpUpstream>)>,
    router: Router,
}

impl Pool {
    fn new(
        what: &'static str,
        specs: &[Member],
        members: Vec<(String, Arc<HttpUpstream>)>,
        breaker: BreakerSettings,
    ) -> Pool {
        let specs = specs
            .iter()
            .map(|m| EndpointSpec {
                name: m.name.clone(),
                weight: m.weight,
                priority: m.priority,
                models: None,
                max_in_flight: m.max_in_flight,
            })
            .collect();
        Pool { what, members, router: Router::new(specs, breaker) }
    }
}

/// [`Upstream`] and [`TaskUpstream`] over pools of endpoints.
#[derive(Debug, Clone)]
pub struct RoutedUpstream {
    platform: Arc<Pool>,
    speech: Arc<Pool>,
    messages: Arc<Pool>,
    max_attempts: usize,
    timeout: Duration,
}

/// How an attempt's failure counts for its endpoint, and whether the call may try another.
fn judge(failed: &Failed) -> (Outcome, bool) {
    match &failed.error {
        UpstreamError::Connect(_) | UpstreamError::Timeout => (Outcome::Failed, true),
        UpstreamError::Status { status: 401 | 403, .. } => (Outcome::KeyRefused, true),
        UpstreamError::Status { status: status @ (429 | 503), .. } => match failed.retry_after {
            Some(wait) => (Outcome::CoolDown(wait), true),
            None if *status == 429 => (Outcome::CoolDown(Duration::from_secs(1)), true),
            None => (Outcome::Failed, true),
        },
        UpstreamError::Status { status, .. } if *status >= 500 => (Outcome::Failed, true),
        // The caller's own fault, or an answer that came: the endpoint works.
        _ => (Outcome::Answered, false),
    }
}

impl RoutedUpstream {
    /// The pools of `config`. Fails like [`HttpUpstream::new`] on a bad URL or key (naming the
    /// endpoint, never the key).
    pub fn new(config: RoutedConfig) -> Result<RoutedUpstream, UpstreamError> {
        let build = |members: &[Member], make: &dyn Fn(&Member) -> UpstreamConfig| {
            members
                .iter()
                .map(|m| {
                    HttpUpstream::new(make(m))
                        .map(|client| (m.name.clone(), Arc::new(client)))
                        .map_err(|e| UpstreamError::Connect(format!("endpoint {}: {e}", m.name)))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let blank = UpstreamConfig {
            platform_base: String::new(),
            platform_key: String::new(),
            speech_origin: String::new(),
            speech_key: String::new(),
            messages_base: String::new(),
            connect_timeout: config.connect_timeout,
            timeout: config.timeout,
        };
        let platform = build(&config.platform, &|m| UpstreamConfig {
            platform_base: m.url.clone(),
            platform_key: m.key.clone(),
            ..blank.clone()
        })?;
        let speech = build(&config.speech, &|m| UpstreamConfig {
            speech_origin: m.url.clone(),
            speech_key: m.key.clone(),
            ..blank.clone()
        })?;
        let messages = build(&config.messages, &|m| UpstreamConfig {
            messages_base: m.url.clone(),
            platform_key: m.key.clone(),
            ..blank.clone()
        })?;
        Ok(RoutedUpstream {
            platform: Arc::new(Pool::new("platform", &config.platform, platform, config.breaker)),
            speech: Arc::new(Pool::new("speech", &config.speech, speech, config.breaker)),
            messages: Arc::new(Pool::new("messages", &config.messages, messages, config.breaker)),
            max_attempts: config.max_attempts.max(1),
            timeout: config.timeout,
        })
    }

    /// Most attempts per call.
    pub fn max_attempts(&self) -> usize {
        self.max_attempts
    }

    fn pool(&self, endpoint: Endpoint) -> &Pool {
        match endpoint {
            Endpoint::ChatCompletions | Endpoint::ImageGenerations | Endpoint::Responses => &self.platform,
            Endpoint::Messages => &self.messages,
            Endpoint::Speech => &self.speech,
        }
    }

    /// Every endpoint's state, by pool (`platform`, `speech`, `messages`).
    pub fn state(&self) -> Vec<(&'static str, EndpointState)> {
        [&self.platform, &self.speech, &self.messages]
            .into_iter()
            .flat_map(|pool| pool.router.state().into_iter().map(move |s| (pool.what, s)))
            .collect()
    }

    /// Whether every pool that has endpoints has one that can take a call now.
    pub fn can_take_calls(&self) -> bool {
        let now = Instant::now();
        [&self.platform, &self.speech, &self.messages]
            .into_iter()
            .all(|pool| pool.members.is_empty() || pool.router.can_take_calls(now))
    }

    /// Runs `attempt` on the pool's endpoints until one answers, a failure may not be retried,
    /// the attempts or the time run out, or no endpoint can take the call.
    async fn run<T, F, Fut>(&self, endpoint: Endpoint, body: Vec<u8>, attempt: F) -> Result<T, UpstreamError>
    where
        F: Fn(Arc<HttpUpstream>, Bytes) -> Fut,
        Fut: std::future::Future<Output = Result<T, Failed>>,
    {
        let pool = self.pool(endpoint);
        let body = Bytes::from(body);
        if let [(_, only)] = pool.members.as_slice() {
            return attempt(Arc::clone(only), body).await.map_err(|f| f.error);
        }
        let started = Instant::now();
        let mut tried = Vec::new();
        let mut last = if pool.members.is_empty() {
            UpstreamError::NotConfigured(endpoint.as_str().to_owned())
        } else {
            UpstreamError::Connect("no upstream endpoint can take calls now (each is failing or cooling down)".into())
        };
        while tried.len() < self.max_attempts && started.elapsed() < self.timeout {
            let Some(pick) = pool.router.pick("", &tried, Instant::now()) else { break };
            tried.push(pick.index);
            if tried.len() > 1 {
                pool.router.retried(pick.index);
            }
            let client = Arc::clone(&pool.members[pick.index].1);
            let failed = match attempt(client, body.clone()).await {
                Ok(answer) => {
                    self.note(pool, pick.index, &pick.name, Outcome::Answered);
                    return Ok(answer);
                }
                Err(failed) => failed,
            };
            let (outcome, retry) = judge(&failed);
            self.note(pool, pick.index, &pick.name, outcome);
            if !retry {
                return Err(failed.error);
            }
            tracing::warn!(endpoint = pick.name, error = %failed.error, attempt = tried.len(), "upstream attempt failed; trying another endpoint");
            last = failed.error;
        }
        Err(last)
    }

    /// Reports an attempt's outcome, logging what it changed once.
    fn note(&self, pool: &Pool, index: usize, name: &str, outcome: Outcome) {
        match pool.router.report(index, outcome, Instant::now()) {
            Change::None => {}
            Change::Opened => {
                tracing::error!(endpoint = name, pool = pool.what, "upstream endpoint failing: circuit open")
            }
            Change::Closed => {
                tracing::info!(endpoint = name, pool = pool.what, "upstream endpoint answers again: circuit closed")
            }
            Change::KeyRefused => {
                tracing::error!(
                    endpoint = name,
                    pool = pool.what,
                    "upstream refused the endpoint's key (401/403): taken out of the pool"
                );
            }
        }
    }

    fn first_platform(&self) -> Result<&HttpUpstream, UpstreamError> {
        self.platform.members.first().map(|(_, c)| &**c).ok_or_else(|| UpstreamError::NotConfigured("tasks".into()))
    }
}

impl UpstreamHealth for RoutedUpstream {
    fn endpoints(&self) -> Vec<EndpointHealth> {
        let now = Instant::now();
        let left = |until: Instant| u64::try_from(until.saturating_duration_since(now).as_millis()).unwrap_or(u64::MAX);
        self.state()
            .into_iter()
            .map(|(pool, s)| {
                let cooling = s.cooling_until.filter(|until| *until > now);
                let (state, until_ms) = match (s.circuit, cooling) {
                    (Circuit::Open(until), _) if until > now => ("circuit_open", left(until)),
                    (Circuit::Open(_) | Circuit::HalfOpen(_), _) => ("half_open", 0),
                    (Circuit::Closed(_), Some(until)) => ("cooling_down", left(until)),
                    (Circuit::Closed(_), None) => ("healthy", 0),
                };
                EndpointHealth {
                    pool: pool.to_owned(),
                    name: s.name,
                    state: state.to_owned(),
                    until_ms,
                    in_flight: s.in_flight,
                    attempts: s.counts.attempts,
                    failures: s.counts.failures,
                    retries: s.counts.retries,
                    cool_downs: s.counts.cool_downs,
                    circuit_opened: s.counts.circuit_opened,
                    attempts_last_minute: s.last_minute.0,
                    failures_last_minute: s.last_minute.1,
                }
            })
            .collect()
    }

    fn can_take_calls(&self) -> bool {
        RoutedUpstream::can_take_calls(self)
    }
}

#[async_trait]
impl Upstream for RoutedUpstream {
    async fn complete(&self, endpoint: Endpoint, body: Vec<u8>) -> Result<Vec<u8>, UpstreamError> {
        self.run(endpoint, body, |client, body| async move { client.try_complete(endpoint, body).await }).await
    }

    async fn stream(&self, endpoint: Endpoint, body: Vec<u8>) -> Result<Box<dyn EventStream>, UpstreamError> {
        self.run(endpoint, body, |client, body| async move { client.try_stream(endpoint, body).await }).await
    }
}

#[async_trait]
impl TaskUpstream for RoutedUpstream {
    async fn create_task(&self, body: Vec<u8>) -> Result<Vec<u8>, UpstreamError> {
        self.first_platform()?.create_task(body).await
    }

    async fn get_task(&self, upstream_id: &str) -> Result<Vec<u8>, UpstreamError> {
        self.first_platform()?.get_task(upstream_id).await
    }

    async fn cancel_task(&self, upstream_id: &str) -> Result<(), UpstreamError> {
        self.first_platform()?.cancel_task(upstream_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(error: UpstreamError, retry_after: Option<u64>) -> Failed {
        Failed { error, retry_after: retry_after.map(Duration::from_secs) }
    }

    fn status(code: u16) -> UpstreamError {
        UpstreamError::Status { status: code, body: String::new() }
    }

    #[test]
    fn what_is_retried_and_how_it_counts() {
        let cases = [
            (failed(UpstreamError::Connect("refused".into()), None), (Outcome::Failed, true)),
            (failed(UpstreamError::Timeout, None), (Outcome::Failed, true)),
            (failed(status(500), None), (Outcome::Failed, true)),
            (failed(status(502), None), (Outcome::Failed, true)),
            (failed(status(503), None), (Outcome::Failed, true)),
            (failed(status(503), Some(7)), (Outcome::CoolDown(Duration::from_secs(7)), true)),
            (failed(status(429), Some(30)), (Outcome::CoolDown(Duration::from_secs(30)), true)),
            (failed(status(429), None), (Outcome::CoolDown(Duration::from_secs(1)), true)),
            (failed(status(401), None), (Outcome::KeyRefused, true)),
            (failed(status(403), None), (Outcome::KeyRefused, true)),
            (failed(status(400), None), (Outcome::Answered, false)),
            (failed(status(404), None), (Outcome::Answered, false)),
            (failed(status(413), None), (Outcome::Answered, false)),
            (failed(UpstreamError::Malformed("x".into()), None), (Outcome::Answered, false)),
            (
                failed(UpstreamError::Rejected { code: "c".into(), message: "m".into() }, None),
                (Outcome::Answered, false),
            ),
        ];
        for (failure, expected) in cases {
            assert_eq!(judge(&failure), expected, "{:?}", failure.error);
        }
    }

    #[test]
    fn debug_hides_keys() {
        let member = Member::plain("platform-1".into(), "http://127.0.0.1:1/api/v3".into(), "sk-secret".into());
        assert!(!format!("{member:?}").contains("sk-secret"));
    }
}
