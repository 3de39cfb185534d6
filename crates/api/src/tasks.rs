//! Video task routes: `POST /api/v1/tasks` (a JSON CreateTaskRequest, or `multipart/form-data` with a
//! `request` field and repeated `media` files streamed to the media store as they arrive),
//! `DELETE /api/v1/tasks/{task_id}`, and `GET /media/{key}` through a signed link (what the upstream fetches).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use service::{Claim, ClaimedKey, Gateway, Principal, ServiceError, StoredUpload};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::body::{BodyBudget, BodyError, Pace, Paced, is_json, read_json};
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::headers::{idempotency_key, replay};
use crate::response::Response;
use crate::wire;

/// Largest JSON CreateTaskRequest, and largest `request` field of a multipart body: 1 MiB.
pub const TASK_REQUEST_LIMIT: u64 = 1024 * 1024;

/// The route's name in `Idempotency-Key` claims.
const ROUTE: &str = "tasks";

/// `POST /api/v1/tasks`. Runs on a task of its own, so a client that hangs up mid-upload cannot leave
/// stored files, a held claim or a half-created task behind.
pub(crate) async fn create(mut ctx: Ctx<'_>) -> Result<Response, ApiError> {
    let body = ctx.take_body()?;
    let who = ctx.take_who()?;
    let key = idempotency_key(&ctx.parts.headers)?;
    let (state, headers) = (ctx.state, ctx.parts.headers);
    let gateway = state.gateway().clone();
    let rules = Reading { budget: state.body_budget().clone(), pace: state.pace(), limit: ctx.limit };
    let background = gateway.background().clone();
    background
        .spawn(async move { create_task(&gateway, &who, &headers, body, key, &rules).await })
        .await
        .unwrap_or_else(|e| Err(ServiceError::Internal(format!("task creation failed: {e}")).into()))
}

/// How a task's body is read: the body budget, the pace, and the route's JSON limit.
struct Reading {
    budget: BodyBudget,
    pace: Pace,
    limit: u64,
}

async fn create_task(
    gateway: &Gateway,
    who: &Principal,
    headers: &HeaderMap,
    body: Incoming,
    key: Option<String>,
    rules: &Reading,
) -> Result<Response, ApiError> {
    let Reading { budget, pace, limit } = rules;
    let (pace, limit) = (*pace, *limit);
    let task_id = gateway.new_video_task_id();
    let mut uploads = Vec::new();
    let read = if is_json(headers) {
        read_json(headers, body, limit, budget, who.user_id.as_str(), pace).await.map(|b| {
            let digest = hex(&Sha256::digest(&*b));
            (b.to_vec(), digest)
        })
    } else if let Some(boundary) = multipart_boundary(headers) {
        read_multipart(gateway, who, &task_id, headers, body, boundary, &mut uploads, pace).await
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_content_type",
            "this endpoint accepts application/json or multipart/form-data",
        ))
    };
    let result = match read {
        Ok((request, digest)) => run_create(gateway, who, task_id, &request, &digest, &uploads, key).await,
        Err(e) => Err(e),
    };
    if !matches!(result, Ok((_, true))) {
        // Not created (an error or a replay): the uploads go and their quota comes back.
        gateway.discard_uploads(&uploads).await;
    }
    result.map(|(response, _)| response)
}

/// Claims the key (if any), creates the task, and answers 202; `true` when a task was created.
async fn run_create(
    gateway: &Gateway,
    who: &Principal,
    task_id: domain::TaskId,
    request: &[u8],
    digest: &str,
    uploads: &[StoredUpload],
    key: Option<String>,
) -> Result<(Response, bool), ApiError> {
    let claim: Option<ClaimedKey> = match &key {
        None => None,
        Some(k) => match gateway.idempotency_claim_digest(who, ROUTE, k, digest).await? {
            Claim::Replay { status, body } => return Ok((replay(status, body), false)),
            Claim::Run(claim) => Some(claim),
        },
    };
    let task = match gateway.create_video_task(who, task_id, request, uploads).await {
        Ok(task) => task,
        Err(e) => {
            if let Some(claim) = &claim {
                gateway.idempotency_release(claim).await;
            }
            return Err(e.into());
        }
    };
    let bytes = serde_json::to_vec(&wire::task(&task))
        .map_err(|e| ApiError::from(ServiceError::Internal(format!("task not serialisable: {e}"))))?;
    if let Some(claim) = &claim {
        gateway.idempotency_complete(claim, 202, &bytes).await;
    }
    let mut response = http::Response::new(crate::response::full(bytes));
    *response.status_mut() = StatusCode::ACCEPTED;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Ok(id) = HeaderValue::from_str(task.id.as_str()) {
        response.headers_mut().insert("x-svc-task-id", id);
    }
    Ok((response, true))
}

/// The boundary of a `multipart/form-data` content type.
fn multipart_boundary(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let mime = value.split(';').next()?.trim();
    if !mime.eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    multer::parse_boundary(value).ok()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn malformed(e: &multer::Error) -> ApiError {
    ApiError::invalid(format!("the multipart body is malformed: {e}"))
}

/// The most a multipart body may hold in multer's buffer beyond the field data it has handed out:
/// the preamble before the first boundary, part headers and boundaries. A body with no boundary, or a
/// part header without an end, is refused once it passes this.
pub const MULTIPART_OVERHEAD_LIMIT: u64 = 1024 * 1024;

/// Reads a multipart body: the `request` field (JSON, at most [`TASK_REQUEST_LIMIT`]) and the `media`
/// files, each stored as it streams (into `uploads`, which the caller discards on failure). Returns the
/// request and the SHA-256 of the whole body.
///
/// Bounded in memory and time: the whole body by the widest per-kind file limits times the most files
/// of each kind plus the request field (413), what is neither field data nor handed out yet by
/// [`MULTIPART_OVERHEAD_LIMIT`] (400), each file by its kind's limit and by the user's media quota as
/// it streams (413 at the first byte over), and the body by its `pace` (408).
#[allow(clippy::too_many_arguments)]
async fn read_multipart(
    gateway: &Gateway,
    who: &Principal,
    task_id: &domain::TaskId,
    headers: &HeaderMap,
    body: Incoming,
    boundary: String,
    uploads: &mut Vec<StoredUpload>,
    pace: Pace,
) -> Result<(Vec<u8>, String), ApiError> {
    let limit = gateway.upload_body_limit().await?.saturating_add(TASK_REQUEST_LIMIT);
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::too_large(limit));
    }
    let feed = Feed::new(Paced::new(body, pace));
    let state = Arc::clone(&feed.state);
    let constraints = multer::Constraints::new().size_limit(multer::SizeLimit::new().whole_stream(limit));
    let mut multipart = multer::Multipart::with_constraints(feed, boundary, constraints);
    let failed = |e: &multer::Error| state.error(e, limit, pace);
    let mut request: Option<Vec<u8>> = None;
    while let Some(mut field) = multipart.next_field().await.map_err(|e| failed(&e))? {
        match field.name() {
            Some("request") if request.is_none() => {
                let mut text = Vec::new();
                while let Some(chunk) = field.chunk().await.map_err(|e| failed(&e))? {
                    state.delivered(chunk.len());
                    if (text.len() + chunk.len()) as u64 > TASK_REQUEST_LIMIT {
                        return Err(ApiError::too_large(TASK_REQUEST_LIMIT));
                    }
                    text.extend_from_slice(&chunk);
                }
                request = Some(text);
            }
            Some("request") => return Err(ApiError::invalid("the request field is given more than once")),
            Some("media") => {
                let index = u32::try_from(uploads.len()).unwrap_or(u32::MAX);
                if u64::from(index) >= validation::VIDEO_MAX_MEDIA {
                    return Err(ApiError::invalid(format!(
                        "a task may carry at most {} media items",
                        validation::VIDEO_MAX_MEDIA
                    )));
                }
                let mut upload = gateway.begin_upload(who, task_id, index).await?;
                let written = async {
                    while let Some(chunk) = field.chunk().await.map_err(|e| failed(&e))? {
                        state.delivered(chunk.len());
                        upload.write(&chunk).await?;
                    }
                    Ok::<(), ApiError>(())
                }
                .await;
                match written {
                    Ok(()) => uploads.push(upload.finish().await?),
                    Err(e) => {
                        upload.abort().await;
                        return Err(e);
                    }
                }
            }
            Some(other) => return Err(ApiError::invalid(format!("unknown multipart field {other:?}"))),
            None => return Err(ApiError::invalid("a multipart part without a name")),
        }
    }
    let request = request.ok_or_else(|| ApiError::invalid("the multipart field request is required"))?;
    let digest = state.hasher.lock().map(|h| hex(&h.clone().finalize())).unwrap_or_default();
    Ok((request, digest))
}

/// What the multipart reader and its [`Feed`] share.
struct FeedState {
    /// The SHA-256 of every byte fed (for `Idempotency-Key`).
    hasher: Mutex<Sha256>,
    /// Bytes handed to multer.
    fed: AtomicU64,
    /// Bytes of field data multer has handed out.
    delivered: AtomicU64,
    /// Why the feed stopped, when it was the feed's doing (multer only reports that its stream failed).
    failure: Mutex<Option<FeedFailure>>,
}

/// Why a [`Feed`] stopped.
#[derive(Debug, Clone, Copy)]
enum FeedFailure {
    /// The body fell behind its pace.
    Slow,
    /// No byte of the body came for the pace's stall time.
    Stalled,
    /// More than [`MULTIPART_OVERHEAD_LIMIT`] fed that is not field data.
    Overhead,
}

impl FeedState {
    fn delivered(&self, n: usize) {
        self.delivered.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// The client's answer for a multer error.
    fn error(&self, e: &multer::Error, limit: u64, pace: Pace) -> ApiError {
        match *self.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            Some(FeedFailure::Slow) => return pace.timeout(BodyError::Slow),
            Some(FeedFailure::Stalled) => return pace.timeout(BodyError::Stalled),
            Some(FeedFailure::Overhead) => {
                return ApiError::invalid(format!(
                    "the multipart body is malformed: no boundary or end of part headers within {MULTIPART_OVERHEAD_LIMIT} bytes"
                ));
            }
            None => {}
        }
        match e {
            multer::Error::StreamSizeExceeded { .. } => ApiError::too_large(limit),
            other => malformed(other),
        }
    }
}

/// The request body as a stream of chunks for multer: hashed, paced, one chunk per poll of multer's
/// buffer (so what multer holds beyond the data it has handed out is at most one chunk more than
/// [`MULTIPART_OVERHEAD_LIMIT`]).
struct Feed {
    body: Paced<Incoming>,
    state: Arc<FeedState>,
    /// A chunk was just handed over: the next poll yields once, so multer parses before it reads more.
    just_fed: bool,
}

impl Feed {
    fn new(body: Paced<Incoming>) -> Feed {
        let state = FeedState {
            hasher: Mutex::new(Sha256::new()),
            fed: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            failure: Mutex::new(None),
        };
        Feed { body, state: Arc::new(state), just_fed: false }
    }

    fn fail(&self, failure: FeedFailure) -> Poll<Option<Result<Bytes, FeedError>>> {
        *self.state.failure.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(failure);
        Poll::Ready(Some(Err(FeedError(failure))))
    }
}

/// The error multer sees when the [`Feed`] stops (the reader reads the reason from [`FeedState`]).
#[derive(Debug)]
struct FeedError(FeedFailure);

impl std::fmt::Display for FeedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the request body stopped: {:?}", self.0)
    }
}

impl std::error::Error for FeedError {}

impl futures_core::Stream for Feed {
    type Item = Result<Bytes, FeedError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.just_fed {
            self.just_fed = false;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let fed = self.state.fed.load(Ordering::Relaxed);
        if fed.saturating_sub(self.state.delivered.load(Ordering::Relaxed)) > MULTIPART_OVERHEAD_LIMIT {
            return self.fail(FeedFailure::Overhead);
        }
        match self.body.poll_data(cx) {
            Poll::Ready(Some(Ok(data))) => {
                if let Ok(mut h) = self.state.hasher.lock() {
                    h.update(&data);
                }
                self.state.fed.fetch_add(data.len() as u64, Ordering::Relaxed);
                self.just_fed = true;
                Poll::Ready(Some(Ok(data)))
            }
            Poll::Ready(Some(Err(BodyError::Slow))) => self.fail(FeedFailure::Slow),
            Poll::Ready(Some(Err(BodyError::Stalled))) => self.fail(FeedFailure::Stalled),
            Poll::Ready(Some(Err(BodyError::Read(_)))) => Poll::Ready(None),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// `DELETE /api/v1/tasks/{task_id}`.
pub(crate) async fn cancel(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    let task = ctx.gateway().cancel_task(ctx.who()?, ctx.param()).await?;
    Ok(crate::response::ok_json(&wire::task(&task)))
}

/// `GET /media/{key}?expires=<unix seconds>&sig=<hex>`: the object, streamed; any bad link is 404.
pub(crate) async fn media(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    let (gateway, key) = (ctx.gateway(), ctx.param());
    let params = ctx.query()?;
    let get = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let not_found = || ApiError::not_found(format!("media {key}"));
    let expires = get("expires").and_then(|e| e.parse::<u64>().ok()).ok_or_else(not_found)?;
    let sig = get("sig").ok_or_else(not_found)?;
    let mut source = gateway.open_signed_media(key, expires, sig).await?;
    let length = source.len();
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    // Counted with the gateway's background work, so shutdown waits for it (it ends when the reader
    // leaves, at the latest when the drained connection closes).
    gateway.background().spawn(async move {
        while let Some(chunk) = source.next_chunk().await {
            match chunk {
                Ok(data) => {
                    if tx.send(Bytes::from(data)).await.is_err() {
                        break; // the reader left
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "reading stored media failed mid-stream");
                    break;
                }
            }
        }
    });
    let mut response = http::Response::new(ChannelBody(rx).map_err(|never| match never {}).boxed());
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    Ok(response)
}

/// A response body fed by a channel of chunks; it ends when the sender is dropped.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|chunk| chunk.map(|data| Ok(Frame::data(data))))
    }
}
