//! Response bodies and JSON helpers shared by the handlers.

use std::convert::Infallible;

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};

/// The body type of every response: whole or streamed.
pub type Body = BoxBody<Bytes, Infallible>;

/// An HTTP response as the server sends it.
pub type Response = http::Response<Body>;

/// A body holding `bytes`.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
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
