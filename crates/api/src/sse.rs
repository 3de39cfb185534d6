//! Server-sent events out of a streamed call, written in the wire format of its endpoint: data-only
//! chunks ending with `data: [DONE]` (chat completions) or named events (message-style and
//! response-style), where a failure becomes the format's own error event.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use serde_json::{Value, json};
use service::{StreamFailure, StreamItem};
use tokio::sync::mpsc;

/// How a stream's items are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFormat {
    /// `data: <chunk>` per item, `data: [DONE]` at the end, `data: {"error":{code,message}}` on failure.
    Chat,
    /// Message-style named events; a failure is `event: error` with `{"type":"error","error":{type,message}}`.
    Messages,
    /// Response-style named events; a failure is `event: error` with `{"type":"error","code","message"}`.
    Responses,
}

/// A response body fed by the stream's channel. Dropping it (client gone) closes the channel, which tells
/// the pump to stop reading upstream and settle.
pub struct SseBody {
    items: mpsc::Receiver<StreamItem>,
    format: StreamFormat,
    done: bool,
}

impl SseBody {
    /// A body over `items`, written as `format`.
    pub fn new(items: mpsc::Receiver<StreamItem>, format: StreamFormat) -> SseBody {
        SseBody { items, format, done: false }
    }
}

/// The error object of a failed stream in `format`.
fn failure_data(format: StreamFormat, failure: &StreamFailure) -> Value {
    match format {
        StreamFormat::Chat => json!({"error": {"code": "upstream_request_failed", "message": failure.message}}),
        StreamFormat::Messages => {
            let kind = if failure.retryable { "overloaded_error" } else { "api_error" };
            json!({"type": "error", "error": {"type": kind, "message": failure.message}})
        }
        StreamFormat::Responses => {
            json!({"type": "error", "code": "upstream_request_failed", "message": failure.message, "param": null})
        }
    }
}

/// One SSE event: `event: <name>` when named, then the data line.
fn event(name: Option<&str>, data: &Value) -> Bytes {
    match name {
        Some(name) => Bytes::from(format!("event: {name}\ndata: {data}\n\n")),
        None => Bytes::from(format!("data: {data}\n\n")),
    }
}

/// The wire form of one item in `format`; `None` when the item writes nothing.
pub fn frame(format: StreamFormat, item: &StreamItem) -> Option<Bytes> {
    let named = format != StreamFormat::Chat;
    match item {
        StreamItem::Event { name, data } => {
            // A named format needs a name: the event's own, else its `type`.
            let fallback = data.get("type").and_then(Value::as_str);
            Some(event(if named { name.as_deref().or(fallback) } else { None }, data))
        }
        StreamItem::Data(data) => {
            let mut bytes = Vec::with_capacity(data.len() + 8);
            bytes.extend_from_slice(b"data: ");
            bytes.extend_from_slice(data);
            bytes.extend_from_slice(b"\n\n");
            Some(Bytes::from(bytes))
        }
        StreamItem::Failed(failure) => Some(event(named.then_some("error"), &failure_data(format, failure))),
        StreamItem::Done if named => None,
        StreamItem::Done => Some(Bytes::from_static(b"data: [DONE]\n\n")),
    }
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            match self.items.poll_recv(cx) {
                Poll::Ready(Some(item)) => {
                    if !matches!(item, StreamItem::Event { .. } | StreamItem::Data(_)) {
                        self.done = true;
                    }
                    if let Some(bytes) = frame(self.format, &item) {
                        return Poll::Ready(Some(Ok(Frame::data(bytes))));
                    }
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(format: StreamFormat, item: &StreamItem) -> Option<String> {
        frame(format, item).map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    #[test]
    fn chat_frames() {
        assert_eq!(text(StreamFormat::Chat, &StreamItem::Done).as_deref(), Some("data: [DONE]\n\n"));
        assert_eq!(
            text(StreamFormat::Chat, &StreamItem::Data(br#"{"a":1}"#.to_vec())).as_deref(),
            Some("data: {\"a\":1}\n\n")
        );
        let chunk = StreamItem::Event { name: None, data: json!({"a": 1}) };
        assert_eq!(text(StreamFormat::Chat, &chunk).as_deref(), Some("data: {\"a\":1}\n\n"));
        let failed = StreamItem::Failed(StreamFailure { message: "m".into(), retryable: true, charged: false });
        assert_eq!(
            text(StreamFormat::Chat, &failed).as_deref(),
            Some("data: {\"error\":{\"code\":\"upstream_request_failed\",\"message\":\"m\"}}\n\n")
        );
    }

    #[test]
    fn named_frames() {
        let stop = StreamItem::Event { name: Some("message_stop".into()), data: json!({"type": "message_stop"}) };
        assert_eq!(
            text(StreamFormat::Messages, &stop).as_deref(),
            Some("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
        );
        let unnamed = StreamItem::Event { name: None, data: json!({"type": "response.created"}) };
        assert!(text(StreamFormat::Responses, &unnamed).is_some_and(|t| t.starts_with("event: response.created\n")));
        assert_eq!(text(StreamFormat::Messages, &StreamItem::Done), None);
        let failed = StreamItem::Failed(StreamFailure { message: "m".into(), retryable: true, charged: true });
        let messages = text(StreamFormat::Messages, &failed).unwrap_or_default();
        assert!(
            messages.starts_with("event: error\ndata: {\"error\":{\"message\":\"m\",\"type\":\"overloaded_error\"}"),
            "{messages}"
        );
        let responses = text(StreamFormat::Responses, &failed).unwrap_or_default();
        assert!(responses.contains("\"code\":\"upstream_request_failed\""), "{responses}");
    }
}
