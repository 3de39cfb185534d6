//! Response bodies and JSON helpers shared by the handlers.

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

/// Why a streamed body broke off mid-way (a store that failed under an export): the server then
/// cuts the response (HTTP/1.1 closes the connection before the last chunk, HTTP/2 resets the
/// stream), so that a client never takes a cut body for a whole one.
pub type StreamError = Box<dyn std::error::Error + Send + Sync>;

/// The body type of every response: whole or streamed.
pub type Body = BoxBody<Bytes, StreamError>;

/// An HTTP response as the server sends it.
pub type Response = http::Response<Body>;

/// A body holding `bytes`.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

/// A JSON response with `status`.
pub fn json_response<T: serde::Serialize + ?Sized>(status: StatusCode, value: &T) -> Response {
    let bytes = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    let mut response = http::Response::new(full(bytes));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// A 200 JSON response.
pub fn ok_json<T: serde::Serialize + ?Sized>(value: &T) -> Response {
    json_response(StatusCode::OK, value)
}

/// A streamed body fed by a channel of chunks: it ends when the sender is dropped, and breaks off
/// (see [`StreamError`]) at the first error sent. The channel's bound is what the body buffers.
pub fn channel(chunks: tokio::sync::mpsc::Receiver<Result<Bytes, StreamError>>) -> Body {
    ChannelBody(chunks).boxed()
}

/// See [`channel`].
struct ChannelBody(tokio::sync::mpsc::Receiver<Result<Bytes, StreamError>>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = StreamError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, StreamError>>> {
        self.0.poll_recv(cx).map(|chunk| chunk.map(|c| c.map(hyper::body::Frame::data)))
    }
}
