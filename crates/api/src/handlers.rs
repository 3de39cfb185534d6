//! One function per route: authenticate with the route's scope, run the use case, shape the reply.

use domain::Scope;
use domain::TaskId;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use service::{CallBilling, ChatReply, Gateway, Principal, ServiceError, StreamItem};

use crate::body::read_json;
use crate::error::ApiError;
use crate::response::{Response, json_response, ok_json};
use crate::routes::{Route, decode_query};
use crate::sse::SseBody;
use crate::wire;

/// Largest chat request body: 100 MB.
pub const CHAT_BODY_LIMIT: u64 = 100 * 1024 * 1024;

/// The key presented as `Authorization: Bearer <key>` (scheme case-insensitive).
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
}

async fn auth(gateway: &Gateway, parts: &Parts, scope: Scope) -> Result<Principal, ApiError> {
    Ok(gateway.authenticate(bearer(&parts.headers), scope).await?)
}

/// Runs `route` for a request whose body has been set aside.
pub(crate) async fn handle(
    gateway: &Gateway,
    route: Route,
    parts: Parts,
    body: Incoming,
) -> Result<Response, ApiError> {
    match route {
        Route::Healthz => Ok(json_response(StatusCode::OK, &serde_json::json!({"status": "ok"}))),
        Route::ListModels => {
            auth(gateway, &parts, Scope::ModelsRead).await?;
            let models = gateway.list_models().await?;
            Ok(ok_json(&wire::model_list(&models)))
        }
        Route::Overview => {
            let who = auth(gateway, &parts, Scope::OverviewRead).await?;
            let overview = gateway.overview(&who).await?;
            Ok(ok_json(&wire::overview(&overview)))
        }
        Route::ListTasks => {
            let who = auth(gateway, &parts, Scope::TaskRead).await?;
            let params = decode_query(parts.uri.query())?;
            let page = gateway.list_tasks(&who, params.iter().map(|(k, v)| (k.as_str(), v.as_str()))).await?;
            Ok(ok_json(&wire::task_page(&page)))
        }
        Route::GetTask(id) => {
            let who = auth(gateway, &parts, Scope::TaskRead).await?;
            let task = gateway.task(&who, &id).await?;
            Ok(ok_json(&wire::task(&task)))
        }
        Route::ChatCompletions => {
            let who = auth(gateway, &parts, Scope::LanguageCreate).await?;
            let bytes = read_json(&parts.headers, body, CHAT_BODY_LIMIT).await?;
            let key = idempotency_key(&parts.headers)?;
            // The call runs on a task of its own: a client that hangs up cannot stop it half-way,
            // so its reservation is always settled or refunded and its key completed or released.
            let gateway = gateway.clone();
            tokio::spawn(async move { chat_call(&gateway, &who, &bytes, key).await })
                .await
                .unwrap_or_else(|e| Err(ServiceError::Internal(format!("chat call task failed: {e}")).into()))
        }
    }
}

/// A chat call, with `Idempotency-Key` handling when a key was given.
async fn chat_call(
    gateway: &Gateway,
    who: &Principal,
    bytes: &[u8],
    key: Option<String>,
) -> Result<Response, ApiError> {
    let Some(key) = key else {
        return match gateway.chat(who, bytes).await? {
            ChatReply::Complete { answer, call } => Ok(complete_response(answer, &call, false).0),
            ChatReply::Stream { task_id, items, .. } => stream_response(&task_id, items),
        };
    };
    if let Some((status, body)) = gateway.idempotency_claim(who, &key, bytes).await? {
        return Ok(replay(status, body));
    }
    match gateway.chat(who, bytes).await {
        Ok(ChatReply::Complete { answer, call }) => {
            let (response, stored) = complete_response(answer, &call, true);
            gateway.idempotency_complete(who, &key, 200, &stored).await;
            Ok(response)
        }
        Ok(ChatReply::Stream { task_id, items, billed }) => {
            // Streams are not replayed: once the stream is charged, a retry learns which task it
            // was; a stream that ended without a charge frees the key for a retry.
            let (gateway, who, id) = (gateway.clone(), who.clone(), task_id.clone());
            tokio::spawn(async move {
                if billed.await.unwrap_or(false) {
                    let message = format!(
                        "the first request with this Idempotency-Key was streamed as task {id}; streams are not replayed"
                    );
                    let body = serde_json::json!({"error": {"code": "idempotency_conflict", "message": message}});
                    gateway.idempotency_complete(&who, &key, 409, body.to_string().as_bytes()).await;
                } else {
                    gateway.idempotency_release(&who, &key).await;
                }
            });
            stream_response(&task_id, items)
        }
        Err(e) => {
            // Every failed call was refunded (or never reserved): a retry may run again.
            gateway.idempotency_release(who, &key).await;
            Err(e.into())
        }
    }
}

/// The `Idempotency-Key` header, if present; a value that is not text is 400.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    match headers.get("idempotency-key") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .map(|s| Some(s.trim().to_owned()))
            .map_err(|_| ApiError::invalid("Idempotency-Key must be visible ASCII")),
    }
}

/// The stored first answer, marked as a replay.
fn replay(status: u16, body: Vec<u8>) -> Response {
    let mut response = http::Response::new(crate::response::full(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}

/// The JSON answer with `svc` added, and (when `keep`) its bytes for idempotent replays.
fn complete_response(mut answer: serde_json::Value, call: &CallBilling, keep: bool) -> (Response, Vec<u8>) {
    if let serde_json::Value::Object(o) = &mut answer {
        o.insert(
            "svc".into(),
            serde_json::json!({"task_id": call.task_id.as_str(), "billing": wire::billing(&call.billing)}),
        );
    }
    let stored = if keep { serde_json::to_vec(&answer).unwrap_or_default() } else { Vec::new() };
    (ok_json(&answer), stored)
}

/// A `text/event-stream` response over the chat stream's items, naming the task.
fn stream_response(task_id: &TaskId, items: tokio::sync::mpsc::Receiver<StreamItem>) -> Result<Response, ApiError> {
    let mut response = http::Response::new(SseBody::new(items).boxed());
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    let id =
        HeaderValue::from_str(task_id.as_str()).map_err(|e| ApiError::from(ServiceError::Internal(e.to_string())))?;
    headers.insert("x-svc-task-id", id);
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn bearer_parsing() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer sk-gw-abc"));
        assert_eq!(bearer(&h), Some("sk-gw-abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer   sk-gw-abc "));
        assert_eq!(bearer(&h), Some("sk-gw-abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic dXNlcjpwYXNz"));
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer"));
        assert_eq!(bearer(&h), None);
    }
}
