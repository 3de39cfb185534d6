//! One function per route: authenticate with the route's scope, run the use case, shape the reply.

use domain::Scope;
use http::request::Parts;
use http::{HeaderMap, StatusCode, header};
use service::{Gateway, Principal};

use crate::error::ApiError;
use crate::response::{Response, json_response, ok_json};
use crate::routes::{Route, decode_query};
use crate::wire;

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
pub(crate) async fn handle(gateway: &Gateway, route: Route, parts: Parts) -> Result<Response, ApiError> {
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
