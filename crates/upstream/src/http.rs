//! The HTTP adapter for every synchronous upstream endpoint: [`HttpUpstream`].
//!
//! | endpoint | URL | credentials | stream framing | largest 2xx answer |
//! | --- | --- | --- | --- | --- |
//! | `ChatCompletions` | `<platform_base>/chat/completions` | `Authorization: Bearer <platform_key>` | data-only | [`MAX_ANSWER_BYTES`] |
//! | `ImageGenerations` | `<platform_base>/images/generations` | `Authorization: Bearer <platform_key>` | named | [`MAX_IMAGE_ANSWER_BYTES`] |
//! | `Responses` | `<platform_base>/responses` | `Authorization: Bearer <platform_key>` | named | [`MAX_ANSWER_BYTES`] |
//! | `Messages` | `<messages_base>/v1/messages` | `Authorization: Bearer <platform_key>`, `anthropic-version: 2023-06-01` | named | [`MAX_ANSWER_BYTES`] |
//! | `Speech` | `<speech_origin>/api/v3/tts/create` | `X-Api-Key: <speech_key>` | none (non-stream only) | [`MAX_SPEECH_ANSWER_BYTES`] |
//!
//! Every request is `POST` with `Content-Type: application/json` and the caller's body bytes,
//! handed to the client without a copy (`Vec<u8>` becomes the request body as is).
//!
//! Error mapping (the [`UpstreamError`] variant callers see):
//!
//! | what happened | variant |
//! | --- | --- |
//! | the endpoint's base URL is empty, or `stream` on `Speech` (nothing is sent) | `NotConfigured` |
//! | connection refused, DNS failure, connection closed before a complete response head or body (for example the simulator's `drop` fault) | `Connect` |
//! | no complete non-stream answer within `timeout`; no response head, or no next chunk of a stream, within `timeout` | `Timeout` |
//! | non-2xx status | `Status` (body truncated to [`crate::transport::MAX_ERROR_BODY`] bytes) |
//! | 2xx non-stream body that is not a JSON object, or larger than the endpoint's bound | `Malformed` |
//! | data-only framing: a `data: {"error":…}` event, or the body ending without `data: [DONE]` | `Stream` |
//! | named framing: an event named `error` (`Stream("<code or type>: <message>")`) | `Stream` |
//! | a stream broken off mid-body, or an event larger than [`crate::sse::MAX_EVENT_BYTES`] | `Stream` |
//!
//! A 2xx answer is returned as is: the speech service's non-zero `code` inside an HTTP 200, an
//! image item's `error`, a missing `usage` are for the caller to judge. Named streams end
//! (`None`) at the end of the body; whether they completed (`message_stop`,
//! `response.completed`) is for the caller to check.
//!
//! The keys are kept in sensitive header values and never logged or printed (`Debug` shows `*****`).

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use domain::ports::{Attempted, Endpoint, EventStream, Upstream, UpstreamCall, UpstreamError};
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName};
use http::{HeaderValue, Method};

use crate::config::UpstreamConfig;
use crate::stream::{Framing, HttpEventStream};
use crate::transport::{Client, ClientConfig, MAX_ERROR_BODY, Response, map_error, read_limited, read_prefix};

/// Largest accepted non-stream answer of chat, responses and messages, in bytes.
pub const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;
/// Largest accepted image answer, in bytes (up to 15 images inline as `b64_json`).
pub const MAX_IMAGE_ANSWER_BYTES: usize = 640 * 1024 * 1024;
/// Largest accepted speech answer, in bytes (the audio is inline as Base64).
pub const MAX_SPEECH_ANSWER_BYTES: usize = 64 * 1024 * 1024;
/// Largest accepted task answer, in bytes.
pub const MAX_TASK_ANSWER_BYTES: usize = 1024 * 1024;
/// The `anthropic-version` header value sent to the message-style endpoint.
pub const MESSAGES_VERSION: &str = "2023-06-01";

/// One configured endpoint: where it is, what credentials it takes, how its answers look.
#[derive(Clone)]
pub(crate) struct Route {
    pub(crate) url: url::Url,
    /// Credential and version headers (credentials marked sensitive).
    pub(crate) headers: HeaderMap,
    /// How its streams are framed; `None` when it does not stream.
    framing: Option<Framing>,
    /// Largest accepted 2xx non-stream answer.
    max_answer: usize,
}

/// [`Upstream`] over HTTP for all five endpoints, with one pooled [`Client`]; also
/// [`domain::ports::TaskUpstream`] (see [`crate::tasks`]).
#[derive(Clone)]
pub struct HttpUpstream {
    pub(crate) client: Client,
    chat: Option<Route>,
    images: Option<Route>,
    speech: Option<Route>,
    responses: Option<Route>,
    messages: Option<Route>,
    /// `<platform_base>/contents/generations/tasks`, with the platform key.
    pub(crate) tasks: Option<Route>,
    pub(crate) timeout: Duration,
}

impl fmt::Debug for HttpUpstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = |route: &Option<Route>| route.as_ref().map_or("(not configured)", |r| r.url.as_str()).to_owned();
        f.debug_struct("HttpUpstream")
            .field("chat", &url(&self.chat))
            .field("images", &url(&self.images))
            .field("speech", &url(&self.speech))
            .field("responses", &url(&self.responses))
            .field("messages", &url(&self.messages))
            .field("tasks", &url(&self.tasks))
            .field("keys", &"*****")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl HttpUpstream {
    /// An adapter for every endpoint whose base URL in `config` is not empty.
    ///
    /// Fails with [`UpstreamError::Connect`] when a base URL is not an `http`/`https` URL or a
    /// key is not a valid header value (the error names neither key).
    pub fn new(config: UpstreamConfig) -> Result<HttpUpstream, UpstreamError> {
        let bearer = credentials(AUTHORIZATION, "Bearer ", &config.platform_key, "platform")?;
        let mut messages_headers = bearer.clone();
        messages_headers
            .insert(HeaderName::from_static("anthropic-version"), HeaderValue::from_static(MESSAGES_VERSION));
        let speech_headers = credentials(HeaderName::from_static("x-api-key"), "", &config.speech_key, "speech")?;
        let platform = &config.platform_base;
        let client = Client::new(ClientConfig { connect_timeout: config.connect_timeout, extra_ca_pem: None })
            .map_err(|e| UpstreamError::Connect(format!("cannot build HTTP client: {e}")))?;
        Ok(HttpUpstream {
            client,
            chat: route(platform, "/chat/completions", &bearer, Some(Framing::DataOnly), MAX_ANSWER_BYTES)?,
            images: route(platform, "/images/generations", &bearer, Some(Framing::Named), MAX_IMAGE_ANSWER_BYTES)?,
            responses: route(platform, "/responses", &bearer, Some(Framing::Named), MAX_ANSWER_BYTES)?,
            messages: route(
                &config.messages_base,
                "/v1/messages",
                &messages_headers,
                Some(Framing::Named),
                MAX_ANSWER_BYTES,
            )?,
            tasks: route(platform, "/contents/generations/tasks", &bearer, None, MAX_TASK_ANSWER_BYTES)?,
            speech: route(&config.speech_origin, "/api/v3/tts/create", &speech_headers, None, MAX_SPEECH_ANSWER_BYTES)?,
            timeout: config.timeout,
        })
    }

    fn route(&self, endpoint: Endpoint) -> Result<&Route, UpstreamError> {
        let route = match endpoint {
            Endpoint::ChatCompletions => &self.chat,
            Endpoint::ImageGenerations => &self.images,
            Endpoint::Speech => &self.speech,
            Endpoint::Responses => &self.responses,
            Endpoint::Messages => &self.messages,
        };
        route.as_ref().ok_or_else(|| UpstreamError::NotConfigured(endpoint.as_str().to_owned()))
    }

    /// Sends `body`; returns the response if it is 2xx, otherwise `Status` (with the
    /// `Retry-After` the upstream asked for, in seconds, if any).
    async fn send(&self, route: &Route, body: Bytes, accept: &'static str) -> Result<Response, Failed> {
        let response = self
            .client
            .request(Method::POST, &route.url)
            .headers(&route.headers)
            .header(&CONTENT_TYPE, &HeaderValue::from_static("application/json"))
            .header(&ACCEPT, &HeaderValue::from_static(accept))
            .body(body)
            .send()
            .await
            .map_err(|e| Failed::request(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = read_prefix(response, MAX_ERROR_BODY).await;
        tracing::debug!(status = status.as_u16(), url = %route.url, "upstream answered with an error status");
        Err(Failed { error: UpstreamError::Status { status: status.as_u16(), body }, retry_after, unsent: false })
    }

    async fn complete_inner(&self, route: &Route, body: Bytes) -> Result<Vec<u8>, Failed> {
        let response = self.send(route, body, "application/json").await?;
        Ok(Self::judge_answer(read_limited(response, route.max_answer).await?)?)
    }

    /// A complete 2xx answer if it is a JSON object (checked without building a value: the
    /// caller parses the answer once, for its own use).
    fn judge_answer(answer: Vec<u8>) -> Result<Vec<u8>, UpstreamError> {
        let is_object = answer.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        match serde_json::from_slice::<serde::de::IgnoredAny>(&answer) {
            Ok(_) if is_object => Ok(answer),
            Ok(_) => Err(UpstreamError::Malformed("answer is JSON but not an object".to_owned())),
            Err(e) => Err(UpstreamError::Malformed(format!("answer is not JSON: {e}"))),
        }
    }
}

/// One attempt's failure, and how long the upstream asked to be left alone (`Retry-After`).
#[derive(Debug)]
pub(crate) struct Failed {
    /// What went wrong.
    pub(crate) error: UpstreamError,
    /// The `Retry-After` of a non-2xx answer, in whole seconds.
    pub(crate) retry_after: Option<Duration>,
    /// Whether the request certainly never reached the upstream (no connection could be made):
    /// only then may a call that must not run twice (a video task's creation) go elsewhere.
    pub(crate) unsent: bool,
}

impl Failed {
    /// A request that got no answer: `unsent` when the connection itself failed.
    pub(crate) fn request(error: &crate::transport::Error) -> Failed {
        Failed { error: map_error(error), retry_after: None, unsent: error.is_connect() }
    }
}

impl From<UpstreamError> for Failed {
    fn from(error: UpstreamError) -> Failed {
        Failed { error, retry_after: None, unsent: false }
    }
}

impl HttpUpstream {
    /// [`Upstream::complete`] with the body as shared bytes (so a router can try it again
    /// elsewhere without a copy) and the `Retry-After` of a refusal.
    pub(crate) async fn try_complete(&self, endpoint: Endpoint, body: Bytes) -> Result<Vec<u8>, Failed> {
        let route = self.route(endpoint)?;
        match tokio::time::timeout(self.timeout, self.complete_inner(route, body)).await {
            Ok(result) => result,
            Err(_) => Err(UpstreamError::Timeout.into()),
        }
    }

    /// [`Upstream::stream`] as [`Self::try_complete`]: it fails only before the answer's head.
    pub(crate) async fn try_stream(&self, endpoint: Endpoint, body: Bytes) -> Result<Box<dyn EventStream>, Failed> {
        let route = self.route(endpoint)?;
        let Some(framing) = route.framing else {
            return Err(UpstreamError::NotConfigured(format!("{} streaming", endpoint.as_str())).into());
        };
        let response = match tokio::time::timeout(self.timeout, self.send(route, body, "text/event-stream")).await {
            Ok(result) => result?,
            Err(_) => return Err(UpstreamError::Timeout.into()),
        };
        Ok(Box::new(HttpEventStream::new(response, framing, self.timeout)))
    }
}

#[async_trait]
impl Upstream for HttpUpstream {
    fn image_body(&self, request: &domain::ports::ImageGeneration<'_>) -> Result<Vec<u8>, UpstreamError> {
        crate::wire::images::request_body(request)
    }

    async fn complete(&self, call: UpstreamCall<'_>, body: Vec<u8>) -> Attempted<Vec<u8>> {
        Attempted::direct(self.try_complete(call.endpoint, Bytes::from(body)).await.map_err(|f| f.error))
    }

    async fn stream(&self, call: UpstreamCall<'_>, body: Vec<u8>) -> Attempted<Box<dyn EventStream>> {
        Attempted::direct(self.try_stream(call.endpoint, Bytes::from(body)).await.map_err(|f| f.error))
    }
}

/// The credential header `name: <prefix><key>`, marked sensitive; none for an empty key.
fn credentials(name: HeaderName, prefix: &str, key: &str, which: &str) -> Result<HeaderMap, UpstreamError> {
    let mut headers = HeaderMap::new();
    if key.is_empty() {
        return Ok(headers);
    }
    let mut value = HeaderValue::from_str(&format!("{prefix}{key}"))
        .map_err(|_| UpstreamError::Connect(format!("the {which} key is not a valid header value")))?;
    value.set_sensitive(true);
    headers.insert(name, value);
    Ok(headers)
}

/// The route `<base><suffix>`, or `None` for an empty base.
fn route(
    base: &str,
    suffix: &str,
    headers: &HeaderMap,
    framing: Option<Framing>,
    max_answer: usize,
) -> Result<Option<Route>, UpstreamError> {
    let base = base.trim();
    if base.is_empty() {
        return Ok(None);
    }
    let joined = format!("{}{suffix}", base.trim_end_matches('/'));
    let url = url::Url::parse(&joined)
        .map_err(|e| UpstreamError::Connect(format!("invalid upstream base URL {base:?}: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(UpstreamError::Connect(format!("unsupported scheme in upstream base URL {base:?}")));
    }
    Ok(Some(Route { url, headers: headers.clone(), framing, max_answer }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(base: &str) -> UpstreamConfig {
        UpstreamConfig {
            platform_base: base.to_owned(),
            platform_key: "sk-platform-secret".to_owned(),
            speech_origin: "http://127.0.0.1:1".to_owned(),
            speech_key: "sk-speech-secret".to_owned(),
            messages_base: "http://127.0.0.1:1/api/compatible/".to_owned(),
            connect_timeout: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn debug_hides_keys_and_shows_urls() {
        let up = HttpUpstream::new(config("http://127.0.0.1:1/api/v3/")).unwrap_or_else(|e| unreachable!("{e}"));
        let text = format!("{up:?}");
        assert!(!text.contains("secret"), "{text}");
        for url in [
            "/api/v3/chat/completions",
            "/api/v3/images/generations",
            "/api/v3/responses",
            "/api/v3/tts/create",
            "/api/compatible/v1/messages",
        ] {
            assert!(text.contains(url), "{url} in {text}");
        }
        let up = HttpUpstream::new(config("")).unwrap_or_else(|e| unreachable!("{e}"));
        assert!(format!("{up:?}").contains("(not configured)"));
    }

    #[test]
    fn bad_base_urls_and_keys() {
        assert!(matches!(HttpUpstream::new(config("not a url")), Err(UpstreamError::Connect(_))));
        assert!(matches!(HttpUpstream::new(config("ftp://x/api/v3")), Err(UpstreamError::Connect(_))));
        let mut bad = config("http://x");
        bad.platform_key = "bad\nkey".to_owned();
        match HttpUpstream::new(bad) {
            Err(UpstreamError::Connect(msg)) => assert!(!msg.contains("bad\nkey"), "{msg}"),
            other => unreachable!("{other:?}"),
        }
        let mut bad = config("http://x");
        bad.speech_key = "x\r\ny".to_owned();
        assert!(matches!(HttpUpstream::new(bad), Err(UpstreamError::Connect(_))));
    }

    #[tokio::test]
    async fn a_connection_error_does_not_name_the_upstream() {
        // Port 1 on the loopback: refused at once, nothing leaves the machine.
        let up =
            HttpUpstream::new(config("http://127.0.0.1:1/private-base/api/v3")).unwrap_or_else(|e| unreachable!("{e}"));
        for endpoint in [Endpoint::ChatCompletions, Endpoint::Responses, Endpoint::Messages] {
            let failed = up.complete(UpstreamCall { endpoint, model: "m" }, b"{}".to_vec()).await.result;
            let Err(UpstreamError::Connect(message)) = &failed else { unreachable!("{failed:?}") };
            let shown = failed.as_ref().err().map(ToString::to_string).unwrap_or_default();
            for secret in ["127.0.0.1", ":1/", "private-base", "api/compatible", "http://"] {
                assert!(!message.contains(secret) && !shown.contains(secret), "{secret} in {shown}");
            }
            assert!(message.contains("error sending request"), "the kind of failure stays: {message}");
        }
    }

    #[test]
    fn credential_headers_are_sensitive() {
        let headers = credentials(AUTHORIZATION, "Bearer ", "k", "platform").unwrap_or_default();
        assert!(headers.get(AUTHORIZATION).is_some_and(HeaderValue::is_sensitive));
        assert!(credentials(AUTHORIZATION, "Bearer ", "", "platform").is_ok_and(|h| h.is_empty()));
    }
}
