//! The simulator's response body: a whole buffer, or chunks arriving over a channel.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

/// What a chunk producer sends: data, or an error that aborts the connection mid-body.
pub(crate) type ChunkResult = Result<Bytes, std::io::Error>;

/// A response body for [`hyper`]: either complete up front or streamed from a channel.
#[derive(Debug)]
pub(crate) enum SimBody {
    /// The whole body; `None` once sent.
    Full(Option<Bytes>),
    /// Chunks as their producer sends them; the body ends when the sender is dropped.
    Channel(mpsc::Receiver<ChunkResult>),
}

impl SimBody {
    /// A complete body.
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        SimBody::Full(Some(bytes.into()))
    }
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            SimBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            SimBody::Channel(rx) => rx.poll_recv(cx).map(|item| item.map(|r| r.map(Frame::data))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, SimBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            SimBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            SimBody::Full(None) => SizeHint::with_exact(0),
            SimBody::Channel(_) => SizeHint::default(),
        }
    }
}
