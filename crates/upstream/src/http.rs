//! The HTTP adapter for the upstream chat-completions endpoint (`POST <base>/chat/completions`).
//!
//! Error mapping (the [`UpstreamError`] variant callers see):
//!
//! | what happened | variant |
//! | --- | --- |
//! | connection refused, DNS failure, connection closed before a complete response head or body (for example the simulator's `drop` fault) | `Connect` |
//! | no complete non-stream answer within `timeout`; no response head, or no next chunk of a stream, within `timeout` | `Timeout` |
//! | non-2xx status | `Status` (body truncated to [`MAX_ERROR_BODY`] bytes) |
//! | 2xx non-stream body that is not a JSON object | `Malformed` |
//! | `data: {"error":…}` event, a broken stream, or a stream ending without `[DONE]` | `Stream` |
//!
//! The API key is kept in a sensitive header value and never logged or printed.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use domain::ports::{ChatUpstream, EventStream, UpstreamError};
use http::HeaderValue;
use http::header::{AUTHORIZATION, CONTENT_TYPE};

use crate::sse::SseSplitter;

/// Most bytes of a non-2xx answer kept in [`UpstreamError::Status`].
pub const MAX_ERROR_BODY: usize = 2048;

/// Largest accepted non-stream answer, in bytes.
pub const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// [`ChatUpstream`] over HTTP with one pooled `reqwest` client.
#[derive(Clone)]
pub struct HttpChatUpstream {
    client: reqwest::Client,
    url: reqwest::Url,
    auth: HeaderValue,
    timeout: Duration,
}

impl fmt::Debug for HttpChatUpstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpChatUpstream")
            .field("url", &self.url.as_str())
            .field("api_key", &"*****")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl HttpChatUpstream {
    /// An adapter posting to `<base_url>/chat/completions` (for example
    /// `http://127.0.0.1:PORT/api/v3`) with `Authorization: Bearer <api_key>`.
    ///
    /// `connect_timeout` bounds connection set-up; `timeout` bounds a whole non-stream call,
    /// the wait for a stream's response head, and each wait for a stream's next chunk.
    /// Fails with [`UpstreamError::Connect`] when the URL or key is unusable.
    pub fn new(
        base_url: &str,
        api_key: String,
        connect_timeout: Duration,
        timeout: Duration,
    ) -> Result<Self, UpstreamError> {
        let joined = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        let url = reqwest::Url::parse(&joined)
            .map_err(|e| UpstreamError::Connect(format!("invalid upstream base URL {base_url:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(UpstreamError::Connect(format!("unsupported scheme in upstream base URL {base_url:?}")));
        }
        let mut auth = HeaderValue::from_str(&format!("Bearer {api_key}"))
            .map_err(|_| UpstreamError::Connect("upstream API key is not a valid header value".to_owned()))?;
        auth.set_sensitive(true);
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .build()
            .map_err(|e| UpstreamError::Connect(format!("cannot build HTTP client: {}", chain(&e))))?;
        Ok(Self { client, url, auth, timeout })
    }

    /// Sends `body`; returns the response if it is 2xx, otherwise `Status`.
    async fn send(&self, body: Vec<u8>) -> Result<reqwest::Response, UpstreamError> {
        let response = self
            .client
            .post(self.url.clone())
            .header(AUTHORIZATION, self.auth.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| map_reqwest(&e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = read_prefix(response, MAX_ERROR_BODY).await;
        tracing::debug!(status = status.as_u16(), "upstream answered with an error status");
        Err(UpstreamError::Status { status: status.as_u16(), body })
    }

    async fn complete_inner(&self, body: Vec<u8>) -> Result<Vec<u8>, UpstreamError> {
        let mut response = self.send(body).await?;
        let mut answer = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| map_reqwest(&e))? {
            if answer.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(UpstreamError::Malformed(format!("answer larger than {MAX_ANSWER_BYTES} bytes")));
            }
            answer.extend_from_slice(&chunk);
        }
        // Checked without building a value: the caller parses the answer once, for its own use.
        let is_object = answer.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        match serde_json::from_slice::<serde::de::IgnoredAny>(&answer) {
            Ok(_) if is_object => Ok(answer),
            Ok(_) => Err(UpstreamError::Malformed("answer is JSON but not an object".to_owned())),
            Err(e) => Err(UpstreamError::Malformed(format!("answer is not JSON: {e}"))),
        }
    }
}

#[async_trait]
impl ChatUpstream for HttpChatUpstream {
    async fn complete(&self, body: Vec<u8>) -> Result<Vec<u8>, UpstreamError> {
        match tokio::time::timeout(self.timeout, self.complete_inner(body)).await {
            Ok(result) => result,
            Err(_) => Err(UpstreamError::Timeout),
        }
    }

    async fn stream(&self, body: Vec<u8>) -> Result<Box<dyn EventStream>, UpstreamError> {
        let response = match tokio::time::timeout(self.timeout, self.send(body)).await {
            Ok(result) => result?,
            Err(_) => return Err(UpstreamError::Timeout),
        };
        Ok(Box::new(HttpEventStream::new(response, self.timeout)))
    }
}

/// The `data` payloads of a streaming answer, read chunk by chunk.
struct HttpEventStream {
    response: reqwest::Response,
    splitter: SseSplitter,
    timeout: Duration,
    eof: bool,
    finished: bool,
}

impl HttpEventStream {
    fn new(response: reqwest::Response, timeout: Duration) -> Self {
        Self { response, splitter: SseSplitter::new(), timeout, eof: false, finished: false }
    }

    fn fail(&mut self, error: UpstreamError) -> Option<Result<Vec<u8>, UpstreamError>> {
        self.finished = true;
        Some(Err(error))
    }
}

#[async_trait]
impl EventStream for HttpEventStream {
    async fn next_event(&mut self) -> Option<Result<Vec<u8>, UpstreamError>> {
        loop {
            if self.finished {
                return None;
            }
            if self.splitter.overflowed() {
                return self.fail(UpstreamError::Stream("stream event too large".to_owned()));
            }
            if let Some(data) = self.splitter.next_data() {
                let trimmed = data.trim_ascii();
                if trimmed == b"[DONE]" {
                    self.finished = true;
                    return None;
                }
                if trimmed.starts_with(b"{\"error\"") {
                    return self.fail(UpstreamError::Stream(error_event_message(trimmed)));
                }
                return Some(Ok(data));
            }
            if self.eof {
                return self.fail(UpstreamError::Stream("upstream stream ended early (no [DONE])".to_owned()));
            }
            match tokio::time::timeout(self.timeout, self.response.chunk()).await {
                Err(_) => return self.fail(UpstreamError::Timeout),
                Ok(Err(e)) => {
                    return self.fail(UpstreamError::Stream(format!("upstream stream broke: {}", chain(&e))));
                }
                Ok(Ok(Some(chunk))) => self.splitter.push(&chunk),
                Ok(Ok(None)) => {
                    self.splitter.finish();
                    self.eof = true;
                }
            }
        }
    }
}

/// `code: message` of a `{"error":{…}}` event, or its (truncated) text.
fn error_event_message(payload: &[u8]) -> String {
    let value: Option<serde_json::Value> = serde_json::from_slice(payload).ok();
    let error = value.as_ref().and_then(|v| v.get("error"));
    let text = |key: &str| error.and_then(|e| e.get(key)).and_then(|v| v.as_str()).unwrap_or("");
    match (text("code"), text("message")) {
        ("", "") => truncate_lossy(payload, MAX_ERROR_BODY),
        (code, message) => format!("{code}: {message}"),
    }
}

/// Up to `limit` bytes of the response body as text; read errors end it early.
async fn read_prefix(mut response: reqwest::Response, limit: usize) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    truncate_lossy(&bytes, limit)
}

/// The first `limit` bytes as text, without splitting a UTF-8 character.
fn truncate_lossy(bytes: &[u8], limit: usize) -> String {
    if bytes.len() <= limit {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let cut = &bytes[..limit];
    let cut = match std::str::from_utf8(cut) {
        Err(e) if e.error_len().is_none() => &cut[..e.valid_up_to()],
        _ => cut,
    };
    String::from_utf8_lossy(cut).into_owned()
}

fn map_reqwest(error: &reqwest::Error) -> UpstreamError {
    if error.is_timeout() { UpstreamError::Timeout } else { UpstreamError::Connect(chain(error)) }
}

/// An error and its sources, joined with `: `.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_event_text() {
        let msg = error_event_message(br#"{"error":{"code":"InternalServiceError","message":"boom","type":"x"}}"#);
        assert_eq!(msg, "InternalServiceError: boom");
        assert_eq!(error_event_message(br#"{"error":"x"}"#), r#"{"error":"x"}"#);
    }

    #[test]
    fn truncation_keeps_characters_whole() {
        assert_eq!(truncate_lossy("héllo".as_bytes(), 2), "h");
        assert_eq!(truncate_lossy(b"hello", 10), "hello");
        assert_eq!(truncate_lossy(b"hello", 3), "hel");
    }

    #[test]
    fn debug_hides_key() {
        let up = HttpChatUpstream::new(
            "http://127.0.0.1:1/api/v3/",
            "sk-secret".to_owned(),
            Duration::from_secs(1),
            Duration::from_secs(1),
        );
        let text = format!("{up:?}");
        assert!(!text.contains("sk-secret"), "{text}");
        assert!(text.contains("/api/v3/chat/completions"), "{text}");
    }

    #[test]
    fn bad_base_urls() {
        let new = |u: &str| HttpChatUpstream::new(u, "k".to_owned(), Duration::from_secs(1), Duration::from_secs(1));
        assert!(matches!(new("not a url"), Err(UpstreamError::Connect(_))));
        assert!(matches!(new("ftp://x/api/v3"), Err(UpstreamError::Connect(_))));
        assert!(matches!(
            HttpChatUpstream::new("http://x", "bad\nkey".to_owned(), Duration::from_secs(1), Duration::from_secs(1)),
            Err(UpstreamError::Connect(_))
        ));
    }
}
