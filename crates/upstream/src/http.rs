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
//! The adapter itself ([`HttpUpstream`], its routes and their bounds) is in [`crate::adapter`].

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use domain::ports::{Attempted, Endpoint, EventStream, Upstream, UpstreamCall, UpstreamError};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Method};

use crate::adapter::{Failed, HttpUpstream, Route};
pub use crate::adapter::{MAX_ANSWER_BYTES, MAX_IMAGE_ANSWER_BYTES, MAX_SPEECH_ANSWER_BYTES, MESSAGES_VERSION};
use crate::stream::HttpEventStream;
use crate::transport::{MAX_ERROR_BODY, Response, read_limited, read_prefix};

impl HttpUpstream {
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
        Err(Failed { error: crate::wire::errors::status(status.as_u16(), body), retry_after, unsent: false })
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

    fn read_image(&self, answer: &[u8], references: u64) -> Result<domain::ports::ImageAnswer, UpstreamError> {
        crate::wire::images::read_answer(answer, references)
    }

    fn read_speech(&self, answer: &[u8]) -> Result<domain::ports::SpeechAnswer, UpstreamError> {
        crate::wire::speech::read_answer(answer)
    }

    async fn complete(&self, call: UpstreamCall<'_>, body: Vec<u8>) -> Attempted<Vec<u8>> {
        Attempted::direct(self.try_complete(call.endpoint, Bytes::from(body)).await.map_err(|f| f.error))
    }

    async fn stream(&self, call: UpstreamCall<'_>, body: Vec<u8>) -> Attempted<Box<dyn EventStream>> {
        Attempted::direct(self.try_stream(call.endpoint, Bytes::from(body)).await.map_err(|f| f.error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::test_config as config;

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
}
