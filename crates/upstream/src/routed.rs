//! [`RoutedUpstream`]: several endpoints (base URL and key) per kind of call, with retries before
//! the first byte, cool-downs and circuit breakers ([`crate::route`]), behind the same ports as
//! one [`HttpUpstream`].
//!
//! | endpoint of the call | pool |
//! | --- | --- |
//! | `ChatCompletions`, `ImageGenerations`, `Responses` | the platform's (`GATEWAY_UPSTREAM_URL` with `GATEWAY_UPSTREAM_API_KEY`) |
//! | `Messages` | the message-compatible bases (`GATEWAY_MESSAGES_URL`), with the platform's keys |
//! | `Speech` | the speech service's (`GATEWAY_SPEECH_URL` with `GATEWAY_SPEECH_API_KEY`) |
//! | video tasks ([`TaskUpstream`]) | the platform's: created on any endpoint that serves the model, then polled and cancelled on that one (by the name recorded with the task) |
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
//! caller sees one answer, and [`Via`] (the endpoint that answered, or was tried last, and the
//! attempts made) for its task's record.
//!
//! A video task's creation is retried elsewhere only when its request never left (no connection
//! could be made): any other failure may have created a task upstream, so a second creation could
//! run (and bill) it twice; the caller keeps its hold and tries again later, as with one endpoint.
//!
//! Only endpoints that serve the call's upstream model (their `models`, default all) are picked.
//! A pool of one endpoint without limits or a model list calls it directly, so a gateway with one
//! upstream pays nothing for this.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use domain::ports::{
    Attempted, Endpoint, EndpointHealth, EventStream, ImageGeneration, TaskUpstream, Upstream, UpstreamCall,
    UpstreamError, UpstreamHealth, Via, VideoTaskRequest, VideoTaskState,
};

use crate::adapter::{Failed, HttpUpstream};
use crate::config::UpstreamConfig;
use crate::route::{BreakerSettings, Change, Circuit, EndpointSpec, EndpointState, ErrorKind, Outcome, Router};

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
    /// Most attempts started on it per minute in this process.
    pub rpm: Option<u64>,
    /// The upstream model ids it serves; `None`: every model of its kind.
    pub models: Option<Vec<String>>,
}

impl Member {
    /// An endpoint of weight 1 in tier 0 serving every model, without limits (the quick form).
    pub fn plain(name: String, url: String, key: String) -> Member {
        Member { name, url, key, weight: 1, priority: 0, max_in_flight: None, rpm: None, models: None }
    }

    /// Whether calls to it need no routing decision (no limit, no model list).
    fn unconditional(&self) -> bool {
        self.max_in_flight.is_none() && self.rpm.is_none() && self.models.is_none()
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
    /// The pool's only endpoint when it has one without limits or a model list: called directly.
    direct: Option<usize>,
}

impl Pool {
    fn new(
        what: &'static str,
        configured: &[Member],
        members: Vec<(String, Arc<HttpUpstream>)>,
        breaker: BreakerSettings,
    ) -> Pool {
        let specs = configured
            .iter()
            .map(|m| EndpointSpec {
                name: m.name.clone(),
                weight: m.weight,
                priority: m.priority,
                models: m.models.clone(),
                max_in_flight: m.max_in_flight,
                rpm: m.rpm,
            })
            .collect();
        let direct = match configured {
            [only] if only.unconditional() => Some(0),
            _ => None,
        };
        Pool { what, members, router: Router::new(specs, breaker), direct }
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
        // The caller's own fault: the endpoint works, and another would refuse the same.
        error if error.is_callers_fault() => (Outcome::Answered, false),
        // An answer that came (a 404 or 408 too): the endpoint works.
        _ => (Outcome::Answered, false),
    }
}

/// The kind of a failed attempt that counts against its endpoint (`None`: the caller's own fault
/// or an answer that came).
fn error_kind(failed: &Failed) -> Option<ErrorKind> {
    match &failed.error {
        UpstreamError::Connect(_) => Some(ErrorKind::Connect),
        UpstreamError::Timeout => Some(ErrorKind::Timeout),
        UpstreamError::Status { status: 401 | 403, .. } => Some(ErrorKind::RefusedKey),
        UpstreamError::Status { status: 429, .. } => Some(ErrorKind::RateLimited),
        UpstreamError::Status { status: 503, .. } if failed.retry_after.is_some() => Some(ErrorKind::RateLimited),
        UpstreamError::Status { status, .. } if *status >= 500 => Some(ErrorKind::ServerError),
        _ => None,
    }
}

/// Whether a failed attempt of a synchronous call may go to another endpoint.
fn sync_retry(failed: &Failed) -> bool {
    judge(failed).1
}

/// Whether a failed attempt to create a video task may go to another endpoint: only when the
/// request never left, so no task can exist upstream.
fn create_retry(failed: &Failed) -> bool {
    failed.unsent
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

    /// Runs `attempt` on the endpoints of `pool` that serve `model` until one answers, a failure
    /// may not be retried (`may_retry`), the attempts or the time run out, or no endpoint can take
    /// the call.
    async fn run<T, F, Fut>(
        &self,
        pool: &Pool,
        model: &str,
        body: Bytes,
        may_retry: fn(&Failed) -> bool,
        attempt: F,
    ) -> Attempted<T>
    where
        F: Fn(Arc<HttpUpstream>, Bytes) -> Fut,
        Fut: std::future::Future<Output = Result<T, Failed>>,
    {
        if let Some(only) = pool.direct {
            let (name, client) = &pool.members[only];
            let result = attempt(Arc::clone(client), body).await.map_err(|f| f.error);
            return Attempted { result, via: Some(Via { endpoint: name.clone(), attempts: 1 }) };
        }
        let started = Instant::now();
        let mut tried = Vec::new();
        let mut last = if pool.members.is_empty() {
            UpstreamError::NotConfigured(pool.what.to_owned())
        } else {
            UpstreamError::Connect("no upstream endpoint can take calls now (each is failing or cooling down)".into())
        };
        let mut via = None;
        while tried.len() < self.max_attempts && started.elapsed() < self.timeout {
            let Some(pick) = pool.router.pick(model, &tried, Instant::now()) else {
                if tried.is_empty() && !pool.members.is_empty() && !pool.router.serves(model) {
                    last = UpstreamError::NotConfigured("this model (no endpoint of its kind serves it)".into());
                }
                break;
            };
            tried.push(pick.index);
            if tried.len() > 1 {
                pool.router.retried(pick.index);
            }
            let client = Arc::clone(&pool.members[pick.index].1);
            let outcome = attempt(client, body.clone()).await;
            via = Some(Via { endpoint: pick.name.clone(), attempts: u32::try_from(tried.len()).unwrap_or(u32::MAX) });
            let failed = match outcome {
                Ok(answer) => {
                    self.note(pool, pick.index, &pick.name, Outcome::Answered);
                    return Attempted { result: Ok(answer), via };
                }
                Err(failed) => failed,
            };
            let (outcome, _) = judge(&failed);
            if let Some(kind) = error_kind(&failed) {
                pool.router.count_error(pick.index, kind);
            }
            self.note(pool, pick.index, &pick.name, outcome);
            if !may_retry(&failed) {
                return Attempted { result: Err(failed.error), via };
            }
            tracing::warn!(endpoint = pick.name, error = %failed.error, attempt = tried.len(), "upstream attempt failed; trying another endpoint");
            last = failed.error;
        }
        Attempted { result: Err(last), via }
    }

    /// The platform endpoint named `at` (`None`: the first), where a task lives.
    fn task_endpoint(&self, at: Option<&str>) -> Result<&HttpUpstream, UpstreamError> {
        let members = &self.platform.members;
        let found = match at {
            None => members.first(),
            Some(name) => members.iter().find(|(n, _)| n == name),
        };
        found.map(|(_, c)| &**c).ok_or_else(|| match at {
            None => UpstreamError::NotConfigured("video_tasks".into()),
            Some(name) => UpstreamError::NotConfigured(format!("the task's upstream endpoint {name}")),
        })
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
                    errors: ErrorKind::ALL
                        .iter()
                        .map(|kind| (kind.as_str().to_owned(), s.counts.errors_of(*kind)))
                        .collect(),
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
    fn image_body(&self, request: &ImageGeneration<'_>) -> Result<Vec<u8>, UpstreamError> {
        crate::wire::images::request_body(request)
    }

    fn read_image(&self, answer: &[u8], references: u64) -> Result<domain::ports::ImageAnswer, UpstreamError> {
        crate::wire::images::read_answer(answer, references)
    }

    fn read_speech(&self, answer: &[u8]) -> Result<domain::ports::SpeechAnswer, UpstreamError> {
        crate::wire::speech::read_answer(answer)
    }

    async fn complete(&self, call: UpstreamCall<'_>, body: Vec<u8>) -> Attempted<Vec<u8>> {
        let endpoint = call.endpoint;
        let pool = self.pool(endpoint);
        self.run(pool, call.model, Bytes::from(body), sync_retry, |client, body| async move {
            client.try_complete(endpoint, body).await
        })
        .await
    }

    async fn stream(&self, call: UpstreamCall<'_>, body: Vec<u8>) -> Attempted<Box<dyn EventStream>> {
        let endpoint = call.endpoint;
        let pool = self.pool(endpoint);
        self.run(pool, call.model, Bytes::from(body), sync_retry, |client, body| async move {
            client.try_stream(endpoint, body).await
        })
        .await
    }
}

#[async_trait]
impl TaskUpstream for RoutedUpstream {
    async fn create_task(&self, request: &VideoTaskRequest) -> Attempted<String> {
        let body = match crate::wire::video::create_body(request) {
            Ok(body) => body,
            Err(e) => return Attempted::direct(Err(e)),
        };
        // The body travels as shared bytes; an attempt needs its own vector (rarely more than one).
        let attempted = self
            .run(&self.platform, &request.model, Bytes::from(body), create_retry, |client, body| async move {
                client.try_create_task(body.to_vec()).await
            })
            .await;
        let result = attempted.result.and_then(|answer| crate::wire::video::parse_created(&answer));
        Attempted { result, via: attempted.via }
    }

    async fn get_task(&self, at: Option<&str>, upstream_id: &str) -> Result<VideoTaskState, UpstreamError> {
        self.task_endpoint(at)?.get_task(None, upstream_id).await
    }

    async fn cancel_task(&self, at: Option<&str>, upstream_id: &str) -> Result<(), UpstreamError> {
        self.task_endpoint(at)?.cancel_task(None, upstream_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(error: UpstreamError, retry_after: Option<u64>) -> Failed {
        Failed { error, retry_after: retry_after.map(Duration::from_secs), unsent: false }
    }

    fn status(code: u16) -> UpstreamError {
        UpstreamError::Status { status: code, body: String::new(), reason: String::new() }
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
            // Every failure that counts against the endpoint has a kind, and no other has one.
            assert_eq!(error_kind(&failure).is_some(), expected.0 != Outcome::Answered, "{:?}", failure.error);
        }
        let kind = |error, retry_after| error_kind(&failed(error, retry_after)).map(ErrorKind::as_str);
        assert_eq!(kind(UpstreamError::Connect("refused".into()), None), Some("connect"));
        assert_eq!(kind(UpstreamError::Timeout, None), Some("timeout"));
        assert_eq!(kind(status(429), None), Some("rate_limited"));
        assert_eq!(kind(status(503), Some(5)), Some("rate_limited"));
        assert_eq!(kind(status(503), None), Some("server_error"));
        assert_eq!(kind(status(500), None), Some("server_error"));
        assert_eq!(kind(status(401), None), Some("refused_key"));
        assert_eq!(kind(status(400), None), None);
    }

    #[test]
    fn debug_hides_keys() {
        let member = Member::plain("platform-1".into(), "http://127.0.0.1:1/api/v3".into(), "sk-secret".into());
        assert!(!format!("{member:?}").contains("sk-secret"));
    }
}
