//! An upstream stream read chunk by chunk: [`HttpEventStream`], and the two framings it knows.

use std::time::Duration;

use async_trait::async_trait;
use domain::ports::{EventStream, SseEvent, UpstreamError};

use crate::sse::SseSplitter;
use crate::transport::{MAX_ERROR_BODY, Response, truncate_lossy};

/// How the events of a stream are framed, chosen by endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Chat completions: `data:` only; `data: [DONE]` ends the stream and is required;
    /// a `data: {"error":…}` payload is an error.
    DataOnly,
    /// Message-style and response-style: named events, all delivered with their name; the end
    /// of the body ends the stream; a `data: [DONE]` is skipped; an event named `error` is an error.
    Named,
}

/// What one parsed event means for the stream.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Deliver(SseEvent),
    Skip,
    End,
    Fail(UpstreamError),
}

impl Framing {
    fn judge(self, event: SseEvent) -> Verdict {
        let trimmed = event.data.trim_ascii();
        match self {
            Framing::DataOnly if trimmed == b"[DONE]" => Verdict::End,
            Framing::DataOnly if trimmed.starts_with(b"{\"error\"") => {
                Verdict::Fail(UpstreamError::Stream(error_event_message(trimmed)))
            }
            Framing::Named if trimmed == b"[DONE]" => Verdict::Skip,
            Framing::Named if event.event.as_deref() == Some("error") => {
                Verdict::Fail(UpstreamError::Stream(error_event_message(trimmed)))
            }
            _ => Verdict::Deliver(event),
        }
    }

    /// What the end of the body means: an error for data-only framing, the end for named.
    fn at_eof(self) -> Option<UpstreamError> {
        match self {
            Framing::DataOnly => Some(UpstreamError::Stream("upstream stream ended early (no [DONE])".to_owned())),
            Framing::Named => None,
        }
    }
}

/// The events of a streaming answer, read chunk by chunk; each wait for a chunk is bounded.
pub(crate) struct HttpEventStream {
    response: Response,
    splitter: SseSplitter,
    framing: Framing,
    timeout: Duration,
    eof: bool,
    finished: bool,
}

impl HttpEventStream {
    pub(crate) fn new(response: Response, framing: Framing, timeout: Duration) -> Self {
        Self { response, splitter: SseSplitter::new(), framing, timeout, eof: false, finished: false }
    }

    fn fail(&mut self, error: UpstreamError) -> Option<Result<SseEvent, UpstreamError>> {
        self.finished = true;
        Some(Err(error))
    }
}

#[async_trait]
impl EventStream for HttpEventStream {
    async fn next_event(&mut self) -> Option<Result<SseEvent, UpstreamError>> {
        loop {
            if self.finished {
                return None;
            }
            if self.splitter.overflowed() {
                return self.fail(UpstreamError::Stream("stream event too large".to_owned()));
            }
            if let Some(event) = self.splitter.next_event() {
                match self.framing.judge(event) {
                    Verdict::Deliver(event) => return Some(Ok(event)),
                    Verdict::Skip => continue,
                    Verdict::End => {
                        self.finished = true;
                        return None;
                    }
                    Verdict::Fail(error) => return self.fail(error),
                }
            }
            if self.eof {
                self.finished = true;
                return self.framing.at_eof().map(Err);
            }
            match tokio::time::timeout(self.timeout, self.response.chunk()).await {
                Err(_) => return self.fail(UpstreamError::Timeout),
                Ok(Err(e)) => {
                    return self.fail(UpstreamError::Stream(format!("upstream stream broke: {e}")));
                }
                Ok(Ok(Some(chunk))) => self.splitter.push(chunk),
                Ok(Ok(None)) => {
                    self.splitter.finish();
                    self.eof = true;
                }
            }
        }
    }
}

/// `<code>: <message>` of an error event, or its (truncated) text.
///
/// Reads the `error` object when there is one (platform `{"error":{"code",…}}`, message-style
/// `{"type":"error","error":{"type",…}}`), else the payload itself (response-style
/// `{"type":"error","code",…}`); `code` is preferred to `type`.
fn error_event_message(payload: &[u8]) -> String {
    let value: Option<serde_json::Value> = serde_json::from_slice(payload).ok();
    let error = value.as_ref().map(|v| v.get("error").filter(|e| e.is_object()).unwrap_or(v));
    let text = |key: &str| error.and_then(|e| e.get(key)).and_then(|v| v.as_str()).filter(|s| !s.is_empty());
    let code = text("code").or_else(|| text("type").filter(|t| *t != "error"));
    match (code, text("message")) {
        (None, None) => truncate_lossy(payload, MAX_ERROR_BODY),
        (code, message) => format!("{}: {}", code.unwrap_or("error"), message.unwrap_or("")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: Option<&str>, data: &str) -> SseEvent {
        SseEvent { event: name.map(str::to_owned), data: data.as_bytes().to_vec() }
    }

    #[test]
    fn error_event_texts() {
        let msg = error_event_message(br#"{"error":{"code":"InternalServiceError","message":"boom","type":"x"}}"#);
        assert_eq!(msg, "InternalServiceError: boom");
        assert_eq!(error_event_message(br#"{"error":"x"}"#), r#"{"error":"x"}"#);
        let msg =
            error_event_message(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
        assert_eq!(msg, "overloaded_error: Overloaded");
        let msg = error_event_message(br#"{"type":"error","code":"server_error","message":"m","sequence_number":7}"#);
        assert_eq!(msg, "server_error: m");
        assert_eq!(error_event_message(b"not json"), "not json");
    }

    #[test]
    fn data_only_framing() {
        let f = Framing::DataOnly;
        assert_eq!(f.judge(event(None, " [DONE] ")), Verdict::End);
        assert!(
            matches!(f.judge(event(None, r#"{"error":{"code":"c","message":"m"}}"#)), Verdict::Fail(UpstreamError::Stream(m)) if m == "c: m")
        );
        assert_eq!(f.judge(event(None, "{}")), Verdict::Deliver(event(None, "{}")));
        assert!(f.at_eof().is_some());
    }

    #[test]
    fn named_framing() {
        let f = Framing::Named;
        assert_eq!(f.judge(event(None, "[DONE]")), Verdict::Skip);
        let start = event(Some("message_start"), r#"{"type":"message_start"}"#);
        assert_eq!(f.judge(start.clone()), Verdict::Deliver(start));
        // Only the event name makes an error in this framing.
        let data_error = event(Some("response.failed"), r#"{"error":{"code":"x"}}"#);
        assert_eq!(f.judge(data_error.clone()), Verdict::Deliver(data_error));
        let error = event(Some("error"), r#"{"type":"error","error":{"type":"api_error","message":"m"}}"#);
        assert!(matches!(f.judge(error), Verdict::Fail(UpstreamError::Stream(m)) if m == "api_error: m"));
        assert!(f.at_eof().is_none());
    }
}
