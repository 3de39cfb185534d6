//! The upstream ports: synchronous endpoints (with their event streams) and video tasks, and their error.

use async_trait::async_trait;

use super::{ImageAnswer, ImageGeneration, SpeechAnswer, VideoTaskRequest, VideoTaskState};

/// Why an upstream call produced no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    /// The connection could not be made or broke before an answer.
    #[error("upstream connection failed: {0}")]
    Connect(String),
    /// No (complete) answer within the configured time.
    #[error("upstream timed out")]
    Timeout,
    /// The upstream answered with a non-2xx status; `body` is its (possibly truncated) text.
    #[error("upstream answered {status}")]
    Status {
        /// HTTP status.
        status: u16,
        /// Response text, for logs.
        body: String,
        /// The upstream's own reason, read from its error body by the adapter (shortened); empty
        /// when the body gave none. Only a refusal that is the caller's fault passes it on.
        reason: String,
    },
    /// The answer was not in the expected format.
    #[error("malformed upstream answer: {0}")]
    Malformed(String),
    /// The stream carried an error event or broke off.
    #[error("upstream stream failed: {0}")]
    Stream(String),
    /// The upstream answered 2xx but refused the request inside the answer (the speech service's
    /// non-zero `code`, an image call's top-level `error`).
    #[error("the upstream refused the request ({code}: {message})")]
    Rejected {
        /// The upstream's error code.
        code: String,
        /// The upstream's message.
        message: String,
    },
    /// No upstream is configured for this endpoint (no base URL or key); nothing was sent.
    #[error("no upstream is configured for {0}")]
    NotConfigured(String),
}

impl UpstreamError {
    /// A short fixed name of the failure's kind (a metrics label; no upstream text in it).
    pub const fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Connect(_) => "connect",
            UpstreamError::Timeout => "timeout",
            UpstreamError::Status { .. } => "status",
            UpstreamError::Malformed(_) => "malformed",
            UpstreamError::Stream(_) => "stream",
            UpstreamError::Rejected { .. } => "rejected",
            UpstreamError::NotConfigured(_) => "not_configured",
        }
    }

    /// Whether retrying the same call later may succeed (connection trouble, timeouts, 429, 5xx).
    pub fn retryable(&self) -> bool {
        match self {
            UpstreamError::Connect(_) | UpstreamError::Timeout | UpstreamError::Stream(_) => true,
            UpstreamError::Status { status, .. } => *status == 429 || *status >= 500,
            UpstreamError::Malformed(_) | UpstreamError::NotConfigured(_) | UpstreamError::Rejected { .. } => false,
        }
    }

    /// Whether the failure is the caller's own: the upstream answered with a 4xx that refuses what
    /// the request asked for, so the same request fails again on any endpoint and the caller may
    /// be told why. Not the caller's: 401 and 403 (the gateway's own key), 404 (a model or task
    /// the gateway named is unknown there), 408 and 429 (time and load), and every failure without
    /// a 4xx answer (the speech service's and the image endpoint's in-answer refusals included:
    /// their codes also report the gateway's own key and account).
    pub fn is_callers_fault(&self) -> bool {
        match self {
            UpstreamError::Status { status, .. } => {
                (400..500).contains(status) && !matches!(status, 401 | 403 | 404 | 408 | 429)
            }
            UpstreamError::Connect(_)
            | UpstreamError::Timeout
            | UpstreamError::Malformed(_)
            | UpstreamError::Stream(_)
            | UpstreamError::Rejected { .. }
            | UpstreamError::NotConfigured(_) => false,
        }
    }
}

/// One server-sent event of an upstream stream: its `event:` name, if any, and its `data:` payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field (named-event formats: message-style and response-style streams).
    pub event: Option<String>,
    /// The `data:` payload (several `data:` lines joined with `\n`).
    pub data: Vec<u8>,
}

/// The events of an upstream server-sent event stream, in order.
#[async_trait]
pub trait EventStream: Send {
    /// The next event; `None` after `[DONE]` (chat framing) or the end of the stream.
    async fn next_event(&mut self) -> Option<Result<SseEvent, UpstreamError>>;
}

/// The synchronous upstream endpoints the gateway calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST <platform base>/chat/completions` (data-only SSE ending with `data: [DONE]`).
    ChatCompletions,
    /// `POST <platform base>/images/generations` (non-streaming only).
    ImageGenerations,
    /// `POST <speech origin>/api/v3/tts/create`, with the speech service's own key.
    Speech,
    /// `POST <platform base>/responses` (response-style; named SSE events).
    Responses,
    /// `POST <message-compatible base>/v1/messages` (message-style; named SSE events).
    Messages,
}

impl Endpoint {
    /// Every endpoint.
    pub const ALL: [Endpoint; 5] = [
        Endpoint::ChatCompletions,
        Endpoint::ImageGenerations,
        Endpoint::Speech,
        Endpoint::Responses,
        Endpoint::Messages,
    ];

    /// A short name for logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat_completions",
            Endpoint::ImageGenerations => "image_generations",
            Endpoint::Speech => "speech",
            Endpoint::Responses => "responses",
            Endpoint::Messages => "messages",
        }
    }
}

/// What a call to the upstream is for: the endpoint and the upstream model id it names (a router
/// sends it only to endpoints that serve that model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamCall<'a> {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// The model id the upstream expects (the catalog's `upstream.model_id`).
    pub model: &'a str,
}

/// Which configured upstream endpoint a call went to, and after how many attempts: recorded on the
/// call's task for operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Via {
    /// The endpoint's configured name: the one that answered, or the last one tried when none did.
    pub endpoint: String,
    /// Attempts the call made (1 when the first endpoint answered).
    pub attempts: u32,
}

/// An upstream call's result and the endpoint it went to (`None`: the adapter does not route, or
/// no endpoint was tried).
#[derive(Debug)]
pub struct Attempted<T> {
    /// The answer or why there is none.
    pub result: Result<T, UpstreamError>,
    /// Where it went.
    pub via: Option<Via>,
}

impl<T> Attempted<T> {
    /// A result that went through no router.
    pub fn direct(result: Result<T, UpstreamError>) -> Attempted<T> {
        Attempted { result, via: None }
    }
}

/// The upstream platform's synchronous endpoints. Bodies are JSON bytes whose `model` is already
/// the upstream id; the adapter moves bytes and never interprets usage or prices.
#[async_trait]
pub trait Upstream: Send + Sync {
    /// The [`Endpoint::ImageGenerations`] request body for `request`, written straight from the
    /// borrowed references (no tree of JSON values, no further copy of a reference).
    fn image_body(&self, request: &ImageGeneration<'_>) -> Result<Vec<u8>, UpstreamError>;
    /// Reads a 2xx [`Endpoint::ImageGenerations`] answer to a request that sent `references`
    /// reference images: `Rejected` when the upstream refused inside it, `Malformed` when it is
    /// not an answer.
    fn read_image(&self, answer: &[u8], references: u64) -> Result<ImageAnswer, UpstreamError>;
    /// Reads a 2xx [`Endpoint::Speech`] answer: `Rejected` when it carries a non-zero `code`,
    /// `Malformed` without usable audio or duration.
    fn read_speech(&self, answer: &[u8]) -> Result<SpeechAnswer, UpstreamError>;
    /// Sends a non-streaming request body for `call`; returns the 2xx body.
    async fn complete(&self, call: UpstreamCall<'_>, body: Vec<u8>) -> Attempted<Vec<u8>>;
    /// Sends a streaming request body for `call`; returns the event stream once the upstream answered 2xx.
    async fn stream(&self, call: UpstreamCall<'_>, body: Vec<u8>) -> Attempted<Box<dyn EventStream>>;
}

/// The platform's content-generation tasks (video). The adapter writes the platform's request
/// bodies and reads its answers; callers see typed values only.
///
/// A task lives on the endpoint that created it: `create_task` says which ([`Attempted::via`]),
/// the caller records it with the task's upstream id, and later calls name it again (`at`;
/// `None`: the first platform endpoint, for tasks recorded before routing).
#[async_trait]
pub trait TaskUpstream: Send + Sync {
    /// `POST <platform base>/contents/generations/tasks`: creates `request`'s task; the upstream's id
    /// for it.
    async fn create_task(&self, request: &VideoTaskRequest) -> Attempted<String>;
    /// `GET <platform base>/contents/generations/tasks/{id}` on endpoint `at`: what the task is doing.
    async fn get_task(&self, at: Option<&str>, upstream_id: &str) -> Result<VideoTaskState, UpstreamError>;
    /// `DELETE <platform base>/contents/generations/tasks/{id}` on endpoint `at`: cancels a queued task.
    async fn cancel_task(&self, at: Option<&str>, upstream_id: &str) -> Result<(), UpstreamError>;
}

/// What one upstream endpoint is doing, as operators see it (`/metrics`, `/readyz`,
/// `gateway admin upstream list`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EndpointHealth {
    /// Its pool: `platform`, `speech` or `messages`.
    pub pool: String,
    /// Its name in the pool (`platform-1`, …); never its key.
    pub name: String,
    /// `healthy`, `cooling_down`, `circuit_open` or `half_open`.
    pub state: String,
    /// Milliseconds until a cool-down or an open circuit ends (0 when neither).
    pub until_ms: u64,
    /// Attempts in flight now.
    pub in_flight: u64,
    /// Attempts made since the start, and how many of them failed (no answer, 429, 5xx, a
    /// refused key).
    pub attempts: u64,
    /// See [`EndpointHealth::attempts`].
    pub failures: u64,
    /// Attempts that were a retry of a call another endpoint failed.
    pub retries: u64,
    /// Cool-downs asked for (`Retry-After`).
    pub cool_downs: u64,
    /// Times its circuit opened.
    pub circuit_opened: u64,
    /// Attempts and failures in the last minute.
    pub attempts_last_minute: u64,
    /// See [`EndpointHealth::attempts_last_minute`].
    pub failures_last_minute: u64,
    /// Failed attempts since the start by kind: `connect`, `timeout`, `rate_limited` (429, or
    /// 503 with `Retry-After`), `server_error` (another 5xx), `refused_key` (401, 403). Empty in
    /// a report written before the kinds were counted.
    #[serde(default)]
    pub errors: std::collections::BTreeMap<String, u64>,
}

/// The health of the upstream endpoints a process routes over.
pub trait UpstreamHealth: Send + Sync {
    /// Every endpoint, by pool, in configured order.
    fn endpoints(&self) -> Vec<EndpointHealth>;
    /// Whether each pool that has endpoints has one that can take a call now.
    fn can_take_calls(&self) -> bool;
}

#[cfg(test)]
mod tests {
    use super::UpstreamError;

    #[test]
    fn only_a_refusing_4xx_is_the_callers_fault() {
        let status = |status| UpstreamError::Status { status, body: String::new(), reason: String::new() };
        for callers in [400, 409, 413, 415, 422] {
            assert!(status(callers).is_callers_fault(), "{callers}");
        }
        for not in [200, 401, 403, 404, 408, 429, 500, 502, 503] {
            assert!(!status(not).is_callers_fault(), "{not}");
        }
        let others = [
            UpstreamError::Connect("refused".into()),
            UpstreamError::Timeout,
            UpstreamError::Malformed("x".into()),
            UpstreamError::Stream("x".into()),
            UpstreamError::Rejected { code: "c".into(), message: "m".into() },
            UpstreamError::NotConfigured("x".into()),
        ];
        for other in others {
            assert!(!other.is_callers_fault(), "{other:?}");
        }
    }
}
