//! Video task routes: `POST /api/v1/tasks` (a JSON CreateTaskRequest, or `multipart/form-data` with a
//! `request` field and repeated `media` files streamed to the media store as they arrive),
//! `DELETE /api/v1/tasks/{id}`, and `GET /media/{key}` through a signed link (what the upstream fetches).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use service::{Claim, ClaimedKey, Gateway, Principal, ServiceError, StoredUpload};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::body::{BodyBudget, is_json, read_json};
use crate::error::ApiError;
use crate::handlers::{bearer, idempotency_key, replay};
use crate::response::Response;
use crate::routes::decode_query;
use crate::server::AppState;
use crate::wire;

/// Largest JSON CreateTaskRequest, and largest `request` field of a multipart body: 1 MiB.
pub const TASK_REQUEST_LIMIT: u64 = 1024 * 1024;

/// The route's name in `Idempotency-Key` claims.
const ROUTE: &str = "tasks";

/// `POST /api/v1/tasks`. Runs on a task of its own, so a client that hangs up mid-upload cannot leave
/// stored files, a held claim or a half-created task behind.
pub(crate) async fn create(state: &AppState, parts: Parts, body: Incoming) -> Result<Response, ApiError> {
    let gateway = state.gateway().clone();
    let who = gateway.authenticate(bearer(&parts.headers), domain::Scope::VideoCreate).await?;
    let key = idempotency_key(&parts.headers)?;
    let budget = state.body_budget().clone();
    let background = gateway.background().clone();
    background
        .spawn(async move { create_task(&gateway, &who, &parts.headers, body, key, &budget).await })
        .await
        .unwrap_or_else(|e| Err(ServiceError::Internal(format!("task creation failed: {e}")).into()))
}

async fn create_task(
    gateway: &Gateway,
    who: &Principal,
    headers: &HeaderMap,
    body: Incoming,
    key: Option<String>,
    budget: &BodyBudget,
) -> Result<Response, ApiError> {
    let task_id = gateway.new_video_task_id();
    let mut uploads = Vec::new();
    let read = if is_json(headers) {
        read_json(headers, body, TASK_REQUEST_LIMIT, budget).await.map(|b| {
            let digest = hex(&Sha256::digest(&*b));
            (b.to_vec(), digest)
        })
    } else if let Some(boundary) = multipart_boundary(headers) {
        read_multipart(gateway, who, &task_id, body, boundary, &mut uploads).await
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

/// Reads a multipart body: the `request` field (JSON, at most [`TASK_REQUEST_LIMIT`]) and the `media`
/// files, each stored as it streams (into `uploads`, which the caller discards on failure). Returns the
/// request and the SHA-256 of the whole body.
async fn read_multipart(
    gateway: &Gateway,
    who: &Principal,
    task_id: &domain::TaskId,
    body: Incoming,
    boundary: String,
    uploads: &mut Vec<StoredUpload>,
) -> Result<(Vec<u8>, String), ApiError> {
    let hasher = Arc::new(Mutex::new(Sha256::new()));
    let mut multipart = multer::Multipart::new(HashingBody { body, hasher: Arc::clone(&hasher) }, boundary);
    let mut request: Option<Vec<u8>> = None;
    while let Some(mut field) = multipart.next_field().await.map_err(|e| malformed(&e))? {
        match field.name() {
            Some("request") if request.is_none() => {
                let mut text = Vec::new();
                while let Some(chunk) = field.chunk().await.map_err(|e| malformed(&e))? {
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
                    while let Some(chunk) = field.chunk().await.map_err(|e| malformed(&e))? {
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
    let digest = hasher.lock().map(|h| hex(&h.clone().finalize())).unwrap_or_default();
    Ok((request, digest))
}

/// The request body as a stream of chunks for multer, hashing every byte that passes.
struct HashingBody {
    body: Incoming,
    hasher: Arc<Mutex<Sha256>>,
}

impl futures_core::Stream for HashingBody {
    type Item = Result<Bytes, hyper::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            return match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        if let Ok(mut h) = self.hasher.lock() {
                            h.update(&data);
                        }
                        Poll::Ready(Some(Ok(data)))
                    }
                    Err(_) => continue, // trailers
                },
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            };
        }
    }
}

/// `DELETE /api/v1/tasks/{id}`.
pub(crate) async fn cancel(gateway: &Gateway, parts: &Parts, id: &str) -> Result<Response, ApiError> {
    let who = gateway.authenticate(bearer(&parts.headers), domain::Scope::TaskWrite).await?;
    let task = gateway.cancel_task(&who, id).await?;
    Ok(crate::response::ok_json(&wire::task(&task)))
}

/// `GET /media/{key}?expires=<unix seconds>&sig=<hex>`: the object, streamed; any bad link is 404.
pub(crate) async fn media(gateway: &Gateway, parts: &Parts, key: &str) -> Result<Response, ApiError> {
    let params = decode_query(parts.uri.query())?;
    let get = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    let not_found = || ApiError::not_found(format!("media {key}"));
    let expires = get("expires").and_then(|e| e.parse::<u64>().ok()).ok_or_else(not_found)?;
    let sig = get("sig").ok_or_else(not_found)?;
    let mut source = gateway.open_signed_media(key, expires, sig).await?;
    let length = source.len();
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
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
    let mut response = http::Response::new(ChannelBody(rx).boxed());
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
