//! Streamed simulator answers: SSE frames written as they are produced, cut short by the
//! mid-stream faults.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, header};
use tokio::sync::mpsc;

use super::body::{ChunkResult, SimBody};

/// How a stream ends after its frames (or after the cut).
#[derive(Debug)]
pub(crate) enum Ending {
    /// The body ends.
    End,
    /// One last frame, then the body ends.
    Tail(String),
    /// The connection is aborted.
    Abort,
}

/// The frames of one stream and how it ends.
pub(crate) struct Plan {
    /// The frames, produced lazily.
    pub(crate) frames: Box<dyn Iterator<Item = String> + Send>,
    /// Wait before each frame.
    pub(crate) delay: Duration,
    /// Stop after this many frames (mid-stream faults).
    pub(crate) cut: Option<usize>,
    /// What follows the frames.
    pub(crate) ending: Ending,
}

/// `data: <payload>\n\n`.
pub(crate) fn data_frame(payload: &str) -> String {
    format!("data: {payload}\n\n")
}

/// `event: <name>\ndata: <payload>\n\n`.
pub(crate) fn named_frame(name: &str, payload: &str) -> String {
    format!("event: {name}\ndata: {payload}\n\n")
}

/// A `text/event-stream` answer whose frames a task writes as they are produced.
pub(crate) fn response(plan: Plan) -> Response<SimBody> {
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(produce(plan, tx));
    let mut response = Response::new(SimBody::Channel(rx));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

async fn produce(plan: Plan, tx: mpsc::Sender<ChunkResult>) {
    let limit = plan.cut.unwrap_or(usize::MAX);
    for frame in plan.frames.take(limit) {
        if !plan.delay.is_zero() {
            tokio::time::sleep(plan.delay).await;
        }
        if tx.send(Ok(Bytes::from(frame))).await.is_err() {
            return;
        }
    }
    let last = match plan.ending {
        Ending::End => return,
        Ending::Tail(frame) => Ok(Bytes::from(frame)),
        Ending::Abort => Err(std::io::Error::other("simulated mid-stream drop")),
    };
    let _ = tx.send(last).await;
}
