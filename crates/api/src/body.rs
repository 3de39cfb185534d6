//! Request bodies: JSON content-type check (415) and size limit (413) enforced while reading,
//! never by buffering an oversized body first.

use bytes::Bytes;
use http::{HeaderMap, header};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Body;

use crate::error::ApiError;

/// True when the `Content-Type` is `application/json` (parameters such as `charset` allowed).
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// Reads a JSON request body of at most `limit` bytes.
///
/// A non-JSON content type is 415. A declared `Content-Length` above the limit is 413 before
/// any byte is read; an undeclared (chunked) body is cut off with 413 as soon as it passes the limit.
pub async fn read_json<B>(headers: &HeaderMap, body: B, limit: u64) -> Result<Bytes, ApiError>
where
    B: Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    if !is_json(headers) {
        return Err(ApiError::unsupported_content_type());
    }
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::too_large(limit));
    }
    let cap = usize::try_from(limit).unwrap_or(usize::MAX);
    match Limited::new(body, cap).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ApiError::too_large(limit)),
        Err(e) => Err(ApiError::invalid(format!("the request body could not be read: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use http_body_util::Full;
    use hyper::body::Frame;

    fn headers(content_type: &str, length: Option<u64>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_str(content_type).expect("header"));
        if let Some(n) = length {
            h.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        h
    }

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(f)
    }

    #[test]
    fn content_type_rules() {
        assert!(is_json(&headers("application/json", None)));
        assert!(is_json(&headers("Application/JSON; charset=utf-8", None)));
        for bad in ["text/plain", "application/jsonx", "multipart/form-data; boundary=x", ""] {
            assert!(!is_json(&headers(bad, None)), "{bad}");
        }
        let err = run(read_json(&headers("text/plain", None), Full::new(Bytes::from_static(b"{}")), 10));
        assert_eq!(err.map_err(|e| e.status.as_u16()), Err(415));
    }

    #[test]
    fn size_limit_edges() {
        let body = |n: usize| Full::new(Bytes::from(vec![b' '; n]));
        assert_eq!(run(read_json(&headers("application/json", Some(10)), body(10), 10)).map(|b| b.len()), Ok(10));
        let err = run(read_json(&headers("application/json", Some(11)), body(11), 10));
        assert_eq!(err.map_err(|e| e.code), Err("request_too_large"));
        // No Content-Length: the limit is enforced while streaming.
        let err = run(read_json(&headers("application/json", None), Chunks(vec![b"abc"; 5]), 10));
        assert_eq!(err.map_err(|e| e.code), Err("request_too_large"));
        let ok = run(read_json(&headers("application/json", None), Chunks(vec![b"abc"; 3]), 10));
        assert_eq!(ok.map(|b| b.len()), Ok(9));
    }

    /// A body that arrives in chunks and declares no length.
    struct Chunks(Vec<&'static [u8; 3]>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            let next = if self.0.is_empty() { None } else { Some(self.0.remove(0)) };
            std::task::Poll::Ready(next.map(|c| Ok(Frame::data(Bytes::from_static(c)))))
        }
    }
}
