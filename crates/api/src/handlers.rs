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
            chat_response(gateway.chat(&who, &bytes).await?)
        }
    }
}

fn chat_response(reply: ChatReply) -> Result<Response, ApiError> {
    match reply {
        ChatReply::Complete { mut answer, call } => {
            if let serde_json::Value::Object(o) = &mut answer {
                o.insert(
                    "svc".into(),
                    serde_json::json!({"task_id": call.task_id.as_str(), "billing": wire::billing(&call.billing)}),
                );
            }
            Ok(ok_json(&answer))
        }
        ChatReply::Stream { task_id, items } => {
            let mut response = http::Response::new(SseBody::new(items).boxed());
            let headers = response.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            let id = HeaderValue::from_str(task_id.as_str())
                .map_err(|e| ApiError::from(service::ServiceError::Internal(e.to_string())))?;
            headers.insert("x-svc-task-id", id);
            Ok(response)
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
