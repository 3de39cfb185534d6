//! One function per route: authenticate with the route's scope, run the use case, shape the reply.

use domain::Scope;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use service::{ChatReply, Gateway, Principal};

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
            let Some(key) = idempotency_key(&parts.headers)? else {
                return chat_response(gateway.chat(&who, &bytes).await?, None).map(|(r, _)| r);
            };
            if let Some((status, body)) = gateway.idempotency_claim(&who, &key, &bytes).await? {
                return Ok(replay(status, body));
            }
            match gateway.chat(&who, &bytes).await.map_err(ApiError::from).and_then(|r| chat_response(r, Some(&key))) {
                Ok((response, (status, stored))) => {
                    gateway.idempotency_complete(&who, &key, status, &stored).await;
                    Ok(response)
                }
                Err(e) => {
                    // Every failed call was refunded (or never reserved): a retry may run again.
                    gateway.idempotency_release(&who, &key).await;
                    Err(e)
                }
            }
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

/// The response for a chat reply, and what a retry with the same `Idempotency-Key` gets:
/// the same JSON for a complete answer; a 409 naming the task for a stream (streams are not replayed).
fn chat_response(reply: ChatReply, key: Option<&str>) -> Result<(Response, (u16, Vec<u8>)), ApiError> {
    match reply {
        ChatReply::Complete { mut answer, call } => {
            if let serde_json::Value::Object(o) = &mut answer {
                o.insert(
                    "svc".into(),
                    serde_json::json!({"task_id": call.task_id.as_str(), "billing": wire::billing(&call.billing)}),
                );
            }
            let stored = if key.is_some() { serde_json::to_vec(&answer).unwrap_or_default() } else { Vec::new() };
            Ok((ok_json(&answer), (200, stored)))
        }
        ChatReply::Stream { task_id, items } => {
            let mut response = http::Response::new(SseBody::new(items).boxed());
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            let id = HeaderValue::from_str(task_id.as_str())
                .map_err(|e| ApiError::from(service::ServiceError::Internal(e.to_string())))?;
            headers.insert("x-svc-task-id", id);
            let message = format!(
                "the first request with this Idempotency-Key was streamed as task {task_id}; streams are not replayed"
            );
            let stored = ApiError::new(StatusCode::CONFLICT, "idempotency_conflict", message);
            let body = serde_json::json!({"error": {"code": stored.code, "message": stored.message}});
            Ok((response, (409, serde_json::to_vec(&body).unwrap_or_default())))
        }
    }
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
