//! The platform adapter's state, shared by every call it makes: [`HttpUpstream`] (one pooled
//! client and a `Route` per configured endpoint, built from an [`UpstreamConfig`]), the
//! answer bounds of each endpoint, and one attempt's failure (`Failed`).
//!
//! The keys are kept in sensitive header values and never logged or printed (`Debug` shows `*****`).

use std::fmt;
use std::time::Duration;

use domain::ports::{Endpoint, UpstreamError};
use http::HeaderValue;
use http::header::{AUTHORIZATION, HeaderMap, HeaderName};

use crate::config::UpstreamConfig;
use crate::stream::Framing;
use crate::transport::{Client, ClientConfig, map_error};

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
    pub(crate) framing: Option<Framing>,
    /// Largest accepted 2xx non-stream answer.
    pub(crate) max_answer: usize,
}

/// The platform adapter: one pooled [`Client`] and a `Route` per configured endpoint. It
/// implements [`domain::ports::Upstream`] for the five synchronous endpoints and
/// [`domain::ports::TaskUpstream`] for video tasks.
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

    /// The route of a synchronous endpoint; `NotConfigured` when its base URL was empty.
    pub(crate) fn route(&self, endpoint: Endpoint) -> Result<&Route, UpstreamError> {
        let route = match endpoint {
            Endpoint::ChatCompletions => &self.chat,
            Endpoint::ImageGenerations => &self.images,
            Endpoint::Speech => &self.speech,
            Endpoint::Responses => &self.responses,
            Endpoint::Messages => &self.messages,
        };
        route.as_ref().ok_or_else(|| UpstreamError::NotConfigured(endpoint.as_str().to_owned()))
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
    use domain::ports::UpstreamError;

    use super::*;

    use crate::config::test_config as config;

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

    #[test]
    fn credential_headers_are_sensitive() {
        let headers = credentials(AUTHORIZATION, "Bearer ", "k", "platform").unwrap_or_default();
        assert!(headers.get(AUTHORIZATION).is_some_and(HeaderValue::is_sensitive));
        assert!(credentials(AUTHORIZATION, "Bearer ", "", "platform").is_ok_and(|h| h.is_empty()));
    }
}
