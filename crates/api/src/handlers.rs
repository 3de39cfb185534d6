//! The handlers of the service routes (health, models, overview, keys, tasks, the console) and of
//! the billable calls, each an `async fn(Ctx) -> Result<Response, ApiError>` named in the route
//! table; the caller is authenticated before they run.

use bytes::Bytes;
use domain::TaskId;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::json;
use service::{Answer, CallBilling, CallReply, Claim, Gateway, Principal, ServiceError};

use crate::ctx::{Ctx, pairs};
use crate::error::ApiError;
use crate::headers::{bearer, digest, idempotency_key, replay};
use crate::response::{Response, json_response, ok_json};
use crate::sse::{SseBody, StreamFormat};
use crate::state::{AppState, CallLog};
use crate::wire;

/// Whether two digests are equal, in time that does not depend on where they differ.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    subtle::ConstantTimeEq::ct_eq(&a[..], &b[..]).into()
}

/// `GET /metrics` with a token configured: 401 unless the request presents it as its bearer. The
/// presented value is hashed and the digests compared in constant time, so neither the token's
/// length nor its bytes show in the answer's timing.
pub(crate) fn metrics_allowed(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = state.metrics_token() else { return Ok(()) };
    let presented = bearer(headers).map(|t| digest(t.as_bytes()));
    match presented {
        Some(presented) if same_digest(&presented, expected) => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "this endpoint requires Authorization: Bearer <the metrics token>",
        )),
    }
}

/// `GET /healthz`.
pub(crate) async fn healthz(_: Ctx<'_>) -> Result<Response, ApiError> {
    Ok(json_response(StatusCode::OK, &crate::ops::Status { status: "ok".into() }))
}

/// `GET /readyz`.
pub(crate) async fn readyz(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    ctx.gateway().ready().await?;
    Ok(json_response(StatusCode::OK, &crate::ops::Status { status: "ready".into() }))
}

/// `GET /metrics` (the token, if any, was checked by the dispatcher).
pub(crate) async fn metrics(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    let mut response = http::Response::new(crate::response::full(ctx.gateway().metrics_text().await));
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static(service::METRICS_CONTENT_TYPE));
    Ok(response)
}

/// `GET /api/v1/models`.
pub(crate) async fn list_models(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    let models = ctx.gateway().list_models().await?;
    let aliases = ctx.gateway().listed_aliases(&models).await?;
    Ok(ok_json(&wire::model_list(&models, &aliases)))
}

/// `GET /api/v1/overview`.
pub(crate) async fn overview(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    Ok(ok_json(&wire::overview(&ctx.gateway().overview(ctx.who()?).await?)))
}

/// `GET /api/v1/keys`.
pub(crate) async fn list_keys(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    Ok(ok_json(&wire::key_list(&ctx.gateway().my_keys(ctx.who()?).await?)))
}

/// `GET /api/v1/tasks`.
pub(crate) async fn list_tasks(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    let params = ctx.query()?;
    Ok(ok_json(&wire::task_page(&ctx.gateway().list_tasks(ctx.who()?, pairs(&params)).await?)))
}

/// `GET /api/v1/tasks/{task_id}`.
pub(crate) async fn get_task(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    Ok(ok_json(&wire::task(&ctx.gateway().task(ctx.who()?, ctx.param()).await?)))
}

/// `GET /console/…`.
pub(crate) async fn console(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    Ok(crate::console::asset(ctx.param()))
}

/// `POST /api/v1/chat/completions`.
pub(crate) async fn chat(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    billable(ctx, Billable::Chat).await
}

/// `POST /api/v1/images/generations`.
pub(crate) async fn image(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    billable(ctx, Billable::Image).await
}

/// `POST /api/v1/audio/generations`.
pub(crate) async fn audio(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    billable(ctx, Billable::Audio).await
}

/// `POST /v1/audio/speech` (OpenAI's shape).
pub(crate) async fn speech(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    billable(ctx, Billable::Speech).await
}

/// `POST /v1/messages`.
pub(crate) async fn messages(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    billable(ctx, Billable::Messages).await
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, estimated.
pub(crate) async fn count_tokens(mut ctx: Ctx<'_>) -> Result<Response, ApiError> {
    Billable::Messages.check_headers(&ctx.parts.headers)?;
    let bytes = ctx.json_bytes().await?;
    let input_tokens = ctx.gateway().count_message_tokens(ctx.who()?, &bytes).await?;
    Ok(ok_json(&crate::ops::TokenCount { input_tokens }))
}

/// `POST /v1/responses`.
pub(crate) async fn responses(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    billable(ctx, Billable::Responses).await
}

/// The billable POST routes: each has a stable name for `Idempotency-Key` claims, its own stream
/// format and its own answer shape (their scopes and body limits are in the route table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Billable {
    /// `POST /api/v1/chat/completions`.
    Chat,
    /// `POST /api/v1/images/generations`.
    Image,
    /// `POST /api/v1/audio/generations`.
    Audio,
    /// `POST /v1/audio/speech`: OpenAI's request, run as an audio generation, answered with the
    /// audio's bytes.
    Speech,
    /// `POST /v1/messages`.
    Messages,
    /// `POST /v1/responses`.
    Responses,
}

impl Billable {
    /// The route's name in `Idempotency-Key` claims.
    fn name(self) -> &'static str {
        match self {
            Billable::Chat => "chat.completions",
            Billable::Image => "images.generations",
            Billable::Audio => "audio.generations",
            Billable::Speech => "audio.speech",
            Billable::Messages => "messages",
            Billable::Responses => "responses",
        }
    }

    fn stream_format(self) -> StreamFormat {
        match self {
            // Image and audio calls never stream (their requests cannot ask for it).
            Billable::Chat | Billable::Image | Billable::Audio | Billable::Speech => StreamFormat::Chat,
            Billable::Messages => StreamFormat::Messages,
            Billable::Responses => StreamFormat::Responses,
        }
    }

    /// Runs the use case.
    async fn run(self, gateway: &Gateway, who: &Principal, body: &[u8]) -> Result<CallReply, ServiceError> {
        match self {
            Billable::Chat => gateway.chat(who, body).await,
            Billable::Image => gateway.image(who, body).await,
            Billable::Audio => gateway.audio(who, body).await,
            Billable::Speech => {
                let (audio, _) = validation::speech_to_audio(body).map_err(ServiceError::from)?;
                gateway.audio(who, &audio).await
            }
            Billable::Messages => gateway.messages(who, body).await,
            Billable::Responses => gateway.responses(who, body).await,
        }
    }

    /// Headers the route requires: message-style calls need `messages-version` (or `anthropic-version`).
    fn check_headers(self, headers: &HeaderMap) -> Result<(), ApiError> {
        if self == Billable::Messages
            && !["messages-version", "anthropic-version"].iter().any(|h| headers.contains_key(*h))
        {
            return Err(ApiError::invalid("the messages-version header (or anthropic-version) is required"));
        }
        Ok(())
    }

    /// The client's answer: the use case's answer with the task id and billing added where this
    /// route's shape puts them (chat and the native formats: an `svc` object; images and audio: top-level
    /// `task_id` and `billing`).
    ///
    /// Written in one pass over the answer (`Answer::to_json_with`): no JSON tree is built for it.
    fn answer(self, answer: &Answer, call: &CallBilling) -> Result<Vec<u8>, serde_json::Error> {
        let billing = wire::billing(&call.billing);
        match self {
            Billable::Chat | Billable::Messages | Billable::Responses => {
                let svc = serde_json::value::to_raw_value(&Svc { task_id: call.task_id.as_str(), billing })?;
                answer.to_json_with(&[("svc", &svc)])
            }
            Billable::Image | Billable::Audio | Billable::Speech => {
                let task_id = serde_json::value::to_raw_value(call.task_id.as_str())?;
                let billing = serde_json::value::to_raw_value(&billing)?;
                answer.to_json_with(&[("task_id", &task_id), ("billing", &billing)])
            }
        }
    }
}

/// The `svc` member of a chat-style answer: the call's task and billing.
#[derive(serde::Serialize)]
struct Svc<'a> {
    task_id: &'a str,
    billing: wire::Billing,
}

/// A billable call: read the JSON body, honour `Idempotency-Key`, and run the call on a task of its
/// own, so that a client that hangs up cannot stop it half-way: its reservation is always settled
/// or refunded and its key completed or released.
async fn billable(mut ctx: Ctx<'_>, route: Billable) -> Result<Response, ApiError> {
    route.check_headers(&ctx.parts.headers)?;
    let bytes = ctx.json_bytes().await?;
    let key = idempotency_key(&ctx.parts.headers)?;
    let who = ctx.take_who()?;
    let gateway = ctx.gateway().clone();
    let user = who.user_id.as_str().to_owned();
    let background = gateway.background().clone();
    let result = background
        .spawn(async move { billable_call(&gateway, route, &who, &bytes, key).await })
        .await
        .unwrap_or_else(|e| Err(ServiceError::Internal(format!("call task failed: {e}")).into()));
    let mut response = result.unwrap_or_else(ApiError::into_response);
    let log = response.extensions_mut().get_or_insert_default::<CallLog>();
    log.user = Some(user);
    Ok(response)
}

/// Runs a billable call, with `Idempotency-Key` handling when a key was given.
async fn billable_call(
    gateway: &Gateway,
    route: Billable,
    who: &Principal,
    bytes: &[u8],
    key: Option<String>,
) -> Result<Response, ApiError> {
    let Some(key) = key else {
        return match route.run(gateway, who, bytes).await? {
            CallReply::Complete { answer, call } => complete_response(route, &answer, &call).map(|(r, _)| r),
            CallReply::Stream(stream) => stream_response(route, &stream.task_id, stream.items),
        };
    };
    let claim = match gateway.idempotency_claim(who, route.name(), &key, bytes).await? {
        Claim::Replay { status, body } if route == Billable::Speech && status == 200 => {
            let mut response = crate::v1::speech_answer(&body)?;
            response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
            return Ok(response);
        }
        Claim::Replay { status, body } => return Ok(replay(status, body)),
        Claim::Run(claim) => claim,
    };
    match route.run(gateway, who, bytes).await {
        Ok(CallReply::Complete { answer, call }) => match complete_response(route, &answer, &call) {
            Ok((response, stored)) => {
                gateway.idempotency_complete(&claim, 200, &stored).await;
                Ok(response)
            }
            Err(e) => {
                // Billed but not answerable: a retry must not bill again, so the key keeps the error.
                let body = json!({"error": {"code": e.code, "message": e.message}}).to_string();
                gateway.idempotency_complete(&claim, e.status.as_u16(), body.as_bytes()).await;
                Err(e)
            }
        },
        Ok(CallReply::Stream(stream)) => {
            // Streams are not replayed: once the stream is charged, a retry learns which task it
            // was; a stream that ended without a charge frees the key for a retry.
            let service::CallStream { task_id, items, billed } = stream;
            let (gateway, id) = (gateway.clone(), task_id.clone());
            gateway.background().clone().spawn(async move {
                if billed.await.unwrap_or(false) {
                    let message = format!(
                        "the first request with this Idempotency-Key was streamed as task {id}; streams are not replayed"
                    );
                    let body = json!({"error": {"code": "idempotency_conflict", "message": message}});
                    gateway.idempotency_complete(&claim, 409, body.to_string().as_bytes()).await;
                } else {
                    gateway.idempotency_release(&claim).await;
                }
            });
            stream_response(route, &task_id, items)
        }
        Err(e) => {
            // Every failed call was refunded (or never reserved): a retry may run again.
            gateway.idempotency_release(&claim).await;
            Err(e.into())
        }
    }
}

/// The `X-Svc-Task-Id` header value of a call.
fn task_header(task_id: &TaskId) -> Result<HeaderValue, ApiError> {
    HeaderValue::from_str(task_id.as_str()).map_err(|e| ApiError::from(ServiceError::Internal(e.to_string())))
}

/// The JSON answer of a complete call, serialised once: the response, and the same bytes to keep for
/// idempotent replays.
fn complete_response(route: Billable, answer: &Answer, call: &CallBilling) -> Result<(Response, Bytes), ApiError> {
    let bytes = Bytes::from(
        route
            .answer(answer, call)
            .map_err(|e| ApiError::from(ServiceError::Internal(format!("answer not serialisable: {e}"))))?,
    );
    // The body and the copy kept for replays share one buffer.
    let mut response = if route == Billable::Speech {
        crate::v1::speech_answer(&bytes)?
    } else {
        let mut response = http::Response::new(crate::response::full(bytes.clone()));
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    };
    response.headers_mut().insert("x-svc-task-id", task_header(&call.task_id)?);
    response.extensions_mut().insert(CallLog {
        user: None,
        model: Some(call.model.clone()),
        task: Some(call.task_id.as_str().to_owned()),
        billed: call.billing.actual,
    });
    Ok((response, bytes))
}

/// A `text/event-stream` response over the call's stream, naming the task.
fn stream_response(
    route: Billable,
    task_id: &TaskId,
    items: tokio::sync::mpsc::Receiver<service::StreamItem>,
) -> Result<Response, ApiError> {
    let id = task_header(task_id)?;
    let mut response =
        http::Response::new(SseBody::new(items, route.stream_format()).map_err(|never| match never {}).boxed());
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-svc-task-id", id);
    response.extensions_mut().insert(CallLog { task: Some(task_id.as_str().to_owned()), ..CallLog::default() });
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_token_digests_compare_whole() {
        let token = digest(b"scrape-me");
        assert!(same_digest(&token, &digest(b"scrape-me")));
        for other in [&b""[..], b"scrape-m", b"scrape-me ", b"Scrape-me"] {
            assert!(!same_digest(&token, &digest(other)), "{other:?}");
        }
        let mut last_byte = token;
        last_byte[31] ^= 1;
        assert!(!same_digest(&token, &last_byte), "a difference in the last byte counts");
    }
}
