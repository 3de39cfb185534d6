//! Request bodies: JSON content-type check (415), size limit (413) enforced while reading, never by
//! buffering an oversized body first, and a shared memory budget for large bodies in flight (503).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, header};
use http_body_util::BodyExt;
use hyper::body::Body;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// True when the `Content-Type` is `application/json` (parameters such as `charset` allowed).
pub fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"))
}

/// Request bodies up to this size are read without touching the [`BodyBudget`] (every chat call of
/// ordinary size): 1 MiB.
pub const SMALL_BODY_BYTES: u64 = 1024 * 1024;

/// The default [`BodyBudget`]: 1 GiB of large request bodies buffered at once, across all requests.
pub const DEFAULT_BODY_BUDGET_BYTES: u64 = 1024 * 1024 * 1024;

/// How long a large request waits for room in the budget before it is refused with 503 `server_busy`.
pub const BUDGET_WAIT: Duration = Duration::from_secs(10);

/// The budget counts in units of this many bytes (a semaphore permit each).
const UNIT: u64 = 64 * 1024;

/// Bounds the memory that large request bodies take together: a body above [`SMALL_BODY_BYTES`] holds
/// its size in the budget while it is read and processed (its declared length up front, or, without
/// one, as it grows). A request that finds no room within [`BUDGET_WAIT`] answers 503 `server_busy`,
/// so a burst of big uploads waits or is turned away instead of exhausting the process.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    units: Arc<Semaphore>,
    total_units: u32,
    wait: Duration,
}

impl BodyBudget {
    /// A budget of `bytes` (at least one largest body's worth is sensible).
    pub fn new(bytes: u64) -> BodyBudget {
        let total_units = u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX).max(1);
        let permits = usize::try_from(total_units).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS);
        BodyBudget { units: Arc::new(Semaphore::new(permits)), total_units, wait: BUDGET_WAIT }
    }

    /// The same budget with another wait before 503 (tests use a short one).
    pub fn with_wait(mut self, wait: Duration) -> BodyBudget {
        self.wait = wait;
        self
    }

    /// Takes room for `bytes` more, waiting up to the budget's wait.
    async fn take(&self, bytes: u64, held: &mut Option<OwnedSemaphorePermit>) -> Result<(), ApiError> {
        let units = u32::try_from(bytes.div_ceil(UNIT)).unwrap_or(u32::MAX).min(self.total_units);
        let wait = Arc::clone(&self.units).acquire_many_owned(units);
        match tokio::time::timeout(self.wait, wait).await {
            Ok(Ok(permit)) => {
                match held {
                    Some(h) => h.merge(permit),
                    None => *held = Some(permit),
                }
                Ok(())
            }
            Ok(Err(_)) | Err(_) => Err(ApiError::from(service::ServiceError::Busy {
                message: "too many large requests are being processed; retry shortly".into(),
                retry_after_secs: self.wait.as_secs().max(1),
            })),
        }
    }
}

impl Default for BodyBudget {
    fn default() -> BodyBudget {
        BodyBudget::new(DEFAULT_BODY_BUDGET_BYTES)
    }
}

/// A request body read into memory, holding its share of the [`BodyBudget`] until dropped.
#[derive(Debug)]
pub struct BufferedBody {
    bytes: Bytes,
    _room: Option<OwnedSemaphorePermit>,
}

impl std::ops::Deref for BufferedBody {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// Reads a JSON request body of at most `limit` bytes.
///
/// A non-JSON content type is 415. A declared `Content-Length` above the limit is 413 before
/// any byte is read; an undeclared (chunked) body is cut off with 413 as soon as it passes the limit.
/// Bodies above [`SMALL_BODY_BYTES`] take room in `budget` first (503 `server_busy` when there is none).
pub async fn read_json<B>(
    headers: &HeaderMap,
    body: B,
    limit: u64,
    budget: &BodyBudget,
) -> Result<BufferedBody, ApiError>
where
    B: Body<Data = Bytes> + Unpin,
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
    let mut room = None;
    let mut reserved = 0;
    if let Some(n) = declared.filter(|&n| n > SMALL_BODY_BYTES) {
        budget.take(n, &mut room).await?;
        reserved = n;
    }
    let mut body = body;
    let mut buffer = BytesMut::with_capacity(usize::try_from(declared.unwrap_or(0).min(limit)).unwrap_or(0));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::invalid(format!("the request body could not be read: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        let len = buffer.len() as u64 + data.len() as u64;
        if len > limit {
            return Err(ApiError::too_large(limit));
        }
        if len > SMALL_BODY_BYTES && len > reserved {
            // Undeclared (or under-declared) large body: take room as it grows, a megabyte at a time.
            let more = (len - reserved).max(SMALL_BODY_BYTES);
            budget.take(more, &mut room).await?;
            reserved += more;
        }
        buffer.extend_from_slice(&data);
    }
    Ok(BufferedBody { bytes: buffer.freeze(), _room: room })
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
        tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime").block_on(f)
    }

    #[test]
    fn content_type_rules() {
        assert!(is_json(&headers("application/json", None)));
        assert!(is_json(&headers("Application/JSON; charset=utf-8", None)));
        for bad in ["text/plain", "application/jsonx", "multipart/form-data; boundary=x", ""] {
            assert!(!is_json(&headers(bad, None)), "{bad}");
        }
        let budget = BodyBudget::default();
        let err = run(read_json(&headers("text/plain", None), Full::new(Bytes::from_static(b"{}")), 10, &budget));
        assert_eq!(err.map(|b| b.len()).map_err(|e| e.status.as_u16()), Err(415));
    }

    #[test]
    fn size_limit_edges() {
        let b = BodyBudget::default();
        let body = |n: usize| Full::new(Bytes::from(vec![b' '; n]));
        assert_eq!(run(read_json(&headers("application/json", Some(10)), body(10), 10, &b)).map(|b| b.len()), Ok(10));
        let err = run(read_json(&headers("application/json", Some(11)), body(11), 10, &b));
        assert_eq!(err.map(|b| b.len()).map_err(|e| e.code), Err("request_too_large"));
        // No Content-Length: the limit is enforced while streaming.
        let err = run(read_json(&headers("application/json", None), Chunks(vec![b"abc"; 5]), 10, &b));
        assert_eq!(err.map(|b| b.len()).map_err(|e| e.code), Err("request_too_large"));
        let ok = run(read_json(&headers("application/json", None), Chunks(vec![b"abc"; 3]), 10, &b));
        assert_eq!(ok.map(|b| b.len()), Ok(9));
    }

    #[test]
    fn large_bodies_share_the_budget() {
        let mib = 1024 * 1024;
        let budget = BodyBudget::new(3 * mib).with_wait(Duration::from_millis(50));
        let big = |n: u64| Full::new(Bytes::from(vec![b' '; usize::try_from(n).unwrap_or(0)]));
        let limit = 10 * mib;
        run(async {
            let json = |n| headers("application/json", Some(n));
            let first = read_json(&json(2 * mib), big(2 * mib), limit, &budget).await.expect("room for the first");
            // Small bodies never wait for the budget.
            assert!(read_json(&json(SMALL_BODY_BYTES), big(SMALL_BODY_BYTES), limit, &budget).await.is_ok());
            let busy = read_json(&json(2 * mib), big(2 * mib), limit, &budget).await;
            let busy = busy.expect_err("no room while the first body is held");
            assert_eq!((busy.status.as_u16(), busy.code, busy.retry_after), (503, "server_busy", Some(1)));
            // An undeclared body takes room as it grows, and is refused the same way.
            let chunked = read_json(&headers("application/json", None), big(2 * mib), limit, &budget).await;
            assert_eq!(chunked.map_err(|e| e.code).map(|b| b.len()), Err("server_busy"));
            drop(first);
            let second = read_json(&json(2 * mib), big(2 * mib), limit, &budget).await;
            assert_eq!(second.map(|b| b.len() as u64), Ok(2 * mib), "room is back once the first is dropped");
        });
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
