//! Server-sent events out of a chat stream: `data: <json>\n\n` per item, `data: [DONE]` at the end.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};
use service::StreamItem;
use tokio::sync::mpsc;

/// A response body fed by the chat stream's channel. Dropping it (client gone) closes the channel,
/// which tells the pump to stop reading upstream and settle.
pub struct SseBody {
    items: mpsc::Receiver<StreamItem>,
    done: bool,
}

impl SseBody {
    /// A body over `items`.
    pub fn new(items: mpsc::Receiver<StreamItem>) -> SseBody {
        SseBody { items, done: false }
    }
}

/// The wire form of one item.
pub fn frame(item: &StreamItem) -> Bytes {
    match item {
        StreamItem::Chunk(v) | StreamItem::Error(v) => Bytes::from(format!("data: {v}\n\n")),
        StreamItem::Done => Bytes::from_static(b"data: [DONE]\n\n"),
    }
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.items.poll_recv(cx) {
            Poll::Ready(Some(item)) => {
                if !matches!(item, StreamItem::Chunk(_)) {
                    self.done = true;
                }
                Poll::Ready(Some(Ok(Frame::data(frame(&item)))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames() {
        assert_eq!(frame(&StreamItem::Done), Bytes::from_static(b"data: [DONE]\n\n"));
        assert_eq!(frame(&StreamItem::Chunk(json!({"a": 1}))), Bytes::from_static(b"data: {\"a\":1}\n\n"));
    }
}
