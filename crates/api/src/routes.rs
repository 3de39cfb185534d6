//! The closed set of routes and the path/method matching that picks one.

use http::Method;

use crate::error::ApiError;

/// Every route the gateway serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /healthz`: liveness, no key needed.
    Healthz,
    /// `GET /readyz`: readiness (database reachable and migrated), no key needed.
    Readyz,
    /// `GET /metrics`: Prometheus metrics of this replica, no key needed.
    Metrics,
    /// `GET /openapi.json`: the OpenAPI 3.1 document, no key needed.
    OpenApi,
    /// `GET /api/v1/models`.
    ListModels,
    /// `GET /api/v1/overview`.
    Overview,
    /// `GET /api/v1/keys`: the caller's keys with their limits and spend.
    ListKeys,
    /// `GET /api/v1/tasks`.
    ListTasks,
    /// `GET /api/v1/tasks/{task_id}`.
    GetTask(String),
    /// `POST /api/v1/tasks`: create a video task (JSON or multipart).
    CreateTask,
    /// `DELETE /api/v1/tasks/{task_id}`: cancel a queued task.
    CancelTask(String),
    /// `GET /media/{key}?expires=…&sig=…`: a stored media object through a signed link (no API key).
    Media(String),
    /// `POST /api/v1/chat/completions`.
    ChatCompletions,
    /// `POST /api/v1/images/generations`.
    ImageGenerations,
    /// `POST /api/v1/audio/generations`.
    AudioGenerations,
    /// `POST /v1/messages` (also `/v1/v1/messages`): message-style chat.
    Messages,
    /// `POST /v1/responses` (also `/v1/v1/responses`): response-style chat.
    Responses,
    /// The management API (`crate::manage`).
    Manage(crate::manage::ManageRoute),
    /// `GET /console/…`: the web console's embedded assets (no key; the pages sign in themselves).
    Console(String),
}

impl Route {
    /// The route's path template, as the `route` label of the request metrics.
    pub const fn label(&self) -> &'static str {
        match self {
            Route::Healthz => "/healthz",
            Route::Readyz => "/readyz",
            Route::Metrics => "/metrics",
            Route::OpenApi => "/openapi.json",
            Route::ListModels => "/api/v1/models",
            Route::Overview => "/api/v1/overview",
            Route::ListKeys => "/api/v1/keys",
            Route::ListTasks | Route::CreateTask => "/api/v1/tasks",
            Route::GetTask(_) | Route::CancelTask(_) => "/api/v1/tasks/{task_id}",
            Route::Media(_) => "/media/{key}",
            Route::ChatCompletions => "/api/v1/chat/completions",
            Route::ImageGenerations => "/api/v1/images/generations",
            Route::AudioGenerations => "/api/v1/audio/generations",
            Route::Messages => "/v1/messages",
            Route::Responses => "/v1/responses",
            Route::Manage(route) => route.label(),
            Route::Console(_) => "/console",
        }
    }
}

/// What a route does to the gateway's state, declared with the route: a test
/// (`crates/api/tests/every_door.rs`) walks every operation of the OpenAPI document and holds each
/// route to its declaration, so a route that changes state without an audit row fails it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Reads only (a quote, too: nothing is held).
    Read,
    /// Billable work: money moves only through holds and settlements, each in the ledger.
    Billed,
    /// Changes credentials, secrets, limits, balances, users, models, prices or maintenance: each
    /// success writes one audit row with this action.
    Audited(&'static str),
}

impl Route {
    /// What the route does to the gateway's state.
    pub const fn effect(&self) -> Effect {
        match self {
            Route::Healthz
            | Route::Readyz
            | Route::Metrics
            | Route::OpenApi
            | Route::ListModels
            | Route::Overview
            | Route::ListKeys
            | Route::ListTasks
            | Route::GetTask(_)
            | Route::Media(_)
            | Route::Console(_) => Effect::Read,
            Route::CreateTask
            | Route::CancelTask(_)
            | Route::ChatCompletions
            | Route::ImageGenerations
            | Route::AudioGenerations
            | Route::Messages
            | Route::Responses => Effect::Billed,
            Route::Manage(route) => route.effect(),
        }
    }
}

/// The `route` label of a request that matched no route (404, 405).
pub const UNMATCHED_ROUTE: &str = "unmatched";

/// Picks the route for `method` and `path`: 404 for an unknown path, 405 for a known path with
/// another method.
pub fn route(method: &Method, path: &str) -> Result<Route, ApiError> {
    let path = path.strip_suffix('/').filter(|p| !p.is_empty()).unwrap_or(path);
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let is = |m: &Method| method == m || (method == Method::HEAD && *m == Method::GET);
    // Paths that take two methods.
    match segments.as_slice() {
        ["api", "v1", "tasks"] => {
            return match () {
                () if is(&Method::GET) => Ok(Route::ListTasks),
                () if method == Method::POST => Ok(Route::CreateTask),
                () => Err(ApiError::method_not_allowed("GET, POST")),
            };
        }
        ["api", "v1", "keys"] if method == Method::POST => {
            return Ok(Route::Manage(crate::manage::ManageRoute::CreateKey));
        }
        ["api", "v1", "keys"] if !is(&Method::GET) => return Err(ApiError::method_not_allowed("GET, POST")),
        ["api", "v1", rest @ ..] if !rest.is_empty() => {
            if let Some(found) = crate::manage::route(method, rest) {
                return found.map(Route::Manage);
            }
        }
        _ => {}
    }
    match segments.as_slice() {
        ["api", "v1", "tasks", id] if !id.is_empty() => {
            return match () {
                () if is(&Method::GET) => Ok(Route::GetTask((*id).to_owned())),
                () if method == Method::DELETE => Ok(Route::CancelTask((*id).to_owned())),
                () => Err(ApiError::method_not_allowed("GET, DELETE")),
            };
        }
        ["console", rest @ ..] => {
            return if is(&Method::GET) {
                Ok(Route::Console(rest.join("/")))
            } else {
                Err(ApiError::method_not_allowed("GET"))
            };
        }
        ["media", key @ ..] if !key.is_empty() && key.iter().all(|s| !s.is_empty()) => {
            return if is(&Method::GET) {
                Ok(Route::Media(key.join("/")))
            } else {
                Err(ApiError::method_not_allowed("GET"))
            };
        }
        _ => {}
    }
    let (route, allow) = match segments.as_slice() {
        ["healthz"] => (Route::Healthz, "GET"),
        ["readyz"] => (Route::Readyz, "GET"),
        ["metrics"] => (Route::Metrics, "GET"),
        ["openapi.json"] => (Route::OpenApi, "GET"),
        ["api", "v1", "models"] => (Route::ListModels, "GET"),
        ["api", "v1", "overview"] => (Route::Overview, "GET"),
        ["api", "v1", "keys"] => (Route::ListKeys, "GET"),
        ["api", "v1", "chat", "completions"] => (Route::ChatCompletions, "POST"),
        ["api", "v1", "images", "generations"] => (Route::ImageGenerations, "POST"),
        ["api", "v1", "audio", "generations"] => (Route::AudioGenerations, "POST"),
        ["v1", "messages"] | ["v1", "v1", "messages"] => (Route::Messages, "POST"),
        ["v1", "responses"] | ["v1", "v1", "responses"] => (Route::Responses, "POST"),
        _ => return Err(ApiError::not_found(format!("no route for {path}"))),
    };
    if method.as_str() == allow || (method == Method::HEAD && allow == "GET") {
        Ok(route)
    } else {
        Err(ApiError::method_not_allowed(allow))
    }
}

/// Decodes an `application/x-www-form-urlencoded` query into pairs; malformed escapes are 400.
pub fn decode_query(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    let Some(query) = query.filter(|q| !q.is_empty()) else { return Ok(Vec::new()) };
    query
        .split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            Ok((percent_decode(name)?, percent_decode(value)?))
        })
        .collect()
}

fn percent_decode(text: &str) -> Result<String, ApiError> {
    let bad = || ApiError::invalid(format!("malformed query string near {text:?}"));
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
                let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
                out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_methods() {
        assert_eq!(route(&Method::GET, "/api/v1/models"), Ok(Route::ListModels));
        assert_eq!(route(&Method::GET, "/api/v1/models/"), Ok(Route::ListModels));
        assert_eq!(route(&Method::GET, "/api/v1/tasks/task_1"), Ok(Route::GetTask("task_1".into())));
        assert_eq!(route(&Method::GET, "/healthz"), Ok(Route::Healthz));
        assert_eq!(route(&Method::POST, "/api/v1/models").map_err(|e| e.status.as_u16()), Err(405));
        assert_eq!(route(&Method::POST, "/api/v1/tasks"), Ok(Route::CreateTask));
        assert_eq!(route(&Method::DELETE, "/api/v1/tasks/t1"), Ok(Route::CancelTask("t1".into())));
        assert_eq!(route(&Method::PUT, "/api/v1/tasks/t1").map_err(|e| e.allow), Err(Some("GET, DELETE")));
        assert_eq!(route(&Method::DELETE, "/api/v1/tasks").map_err(|e| e.allow), Err(Some("GET, POST")));
        assert_eq!(route(&Method::GET, "/media/u/t/0"), Ok(Route::Media("u/t/0".into())));
        assert_eq!(route(&Method::GET, "/media//x").map_err(|e| e.status.as_u16()), Err(404));
        assert_eq!(route(&Method::GET, "/api/v1/nope").map_err(|e| e.status.as_u16()), Err(404));
        assert_eq!(route(&Method::GET, "/").map_err(|e| e.status.as_u16()), Err(404));
        assert_eq!(route(&Method::GET, "/api/v1/tasks/a/b").map_err(|e| e.status.as_u16()), Err(404));
        for path in ["/v1/messages", "/v1/v1/messages"] {
            assert_eq!(route(&Method::POST, path), Ok(Route::Messages));
        }
        for path in ["/v1/responses", "/v1/v1/responses/"] {
            assert_eq!(route(&Method::POST, path), Ok(Route::Responses));
        }
        assert_eq!(route(&Method::GET, "/v1/messages").map_err(|e| e.status.as_u16()), Err(405));
        assert_eq!(route(&Method::POST, "/v1/v1/v1/messages").map_err(|e| e.status.as_u16()), Err(404));
        use crate::manage::ManageRoute as M;
        assert_eq!(route(&Method::GET, "/api/v1/keys"), Ok(Route::ListKeys));
        assert_eq!(route(&Method::POST, "/api/v1/keys"), Ok(Route::Manage(M::CreateKey)));
        assert_eq!(route(&Method::PUT, "/api/v1/keys").map_err(|e| e.allow), Err(Some("GET, POST")));
        assert_eq!(route(&Method::DELETE, "/api/v1/keys/key_1"), Ok(Route::Manage(M::RevokeKey("key_1".into()))));
        assert_eq!(route(&Method::GET, "/api/v1/keys/key_1").map_err(|e| e.allow), Err(Some("DELETE")));
        assert_eq!(route(&Method::GET, "/api/v1/usage"), Ok(Route::Manage(M::Usage)));
        assert_eq!(route(&Method::PATCH, "/api/v1/admin/users/u1"), Ok(Route::Manage(M::ChangeUser("u1".into()))));
        assert_eq!(route(&Method::POST, "/api/v1/admin/users/u1/topup"), Ok(Route::Manage(M::Topup("u1".into()))));
        assert_eq!(route(&Method::GET, "/api/v1/admin/users/u1/topup").map_err(|e| e.allow), Err(Some("POST")));
        assert_eq!(route(&Method::GET, "/api/v1/admin/nope").map_err(|e| e.status.as_u16()), Err(404));
        assert_eq!(route(&Method::GET, "/console/"), Ok(Route::Console(String::new())));
        assert_eq!(route(&Method::GET, "/console/app.js"), Ok(Route::Console("app.js".into())));
    }

    #[test]
    fn query_decoding() {
        assert_eq!(decode_query(None), Ok(vec![]));
        assert_eq!(
            decode_query(Some("page=2&status=running&x=a%20b+c")),
            Ok(vec![("page".into(), "2".into()), ("status".into(), "running".into()), ("x".into(), "a b c".into())])
        );
        for bad in ["a=%", "a=%4", "a=%zz", "a=%ff"] {
            assert!(decode_query(Some(bad)).is_err(), "{bad}");
        }
    }
}
