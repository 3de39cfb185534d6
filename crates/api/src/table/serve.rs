//! Serving from the route table: the dispatcher (find the route, check its [`Auth`], run its
//! handler), the metrics labels, the `/v1` 404's list and the served OpenAPI document.

use std::sync::LazyLock;

use domain::Scope;
use http::Method;
use http::request::Parts;
use hyper::body::Incoming;

use super::ROUTES;
use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::handlers;
use crate::headers::bearer;
use crate::response::Response;
use crate::route::{Auth, Route, find};
use crate::state::{AppState, client_ip};

/// Each route's metrics label (its documented path), by its place in [`ROUTES`].
static LABELS: LazyLock<Vec<String>> = LazyLock::new(|| ROUTES.iter().map(Route::documented_path).collect());

/// What the table serves under the `/v1` base URL (`METHOD path`, each once), for the 404 of a
/// path it does not serve there.
static V1_SERVED: LazyLock<Vec<&'static str>> = LazyLock::new(|| {
    let mut served: Vec<&'static str> = Vec::new();
    for route in ROUTES {
        for path in std::iter::once(route.path).chain(route.aliases.iter().copied()) {
            let Some(rest) = path.strip_prefix(crate::v1::PREFIX) else { continue };
            if !rest.starts_with("v1/") && !served.contains(&path) {
                served.push(path);
            }
        }
    }
    served
});

/// The route for `method` and `path` (404 or 405 when there is none).
pub fn route(method: &Method, path: &str) -> Result<&'static Route, ApiError> {
    find(ROUTES, method, path).map(|(index, _)| &ROUTES[index])
}

/// The served document, built once from [`ROUTES`].
pub fn document() -> serde_json::Value {
    crate::openapi::document_of(ROUTES)
}

/// `GET /openapi.json`.
pub(super) async fn openapi_json(_: Ctx<'_>) -> Result<Response, ApiError> {
    static DOCUMENT: LazyLock<bytes::Bytes> =
        LazyLock::new(|| bytes::Bytes::from(serde_json::to_vec(&document()).unwrap_or_default()));
    let mut response = http::Response::new(crate::response::full(DOCUMENT.clone()));
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    Ok(response)
}

/// Serves one request from the table: finds its route, checks the route's [`Auth`], and runs its
/// handler. Returns the route's metrics label with the answer.
pub(crate) async fn dispatch(
    state: &AppState,
    parts: Parts,
    body: Incoming,
) -> (&'static str, Result<Response, ApiError>) {
    let (index, param) = match find(ROUTES, &parts.method, parts.uri.path()) {
        Ok(found) => found,
        Err(e) if e.status == http::StatusCode::NOT_FOUND && parts.uri.path().starts_with(crate::v1::PREFIX) => {
            return (crate::route::UNMATCHED_ROUTE, Err(crate::v1::not_served(parts.uri.path(), &V1_SERVED)));
        }
        Err(e) => return (crate::route::UNMATCHED_ROUTE, Err(e)),
    };
    let (route, label) = (&ROUTES[index], LABELS[index].as_str());
    let mut ctx = Ctx { state, parts, body: Some(body), param, who: None, actor: None, limit: route.body.limit() };
    if let Err(e) = authenticate(&mut ctx, route.auth).await {
        return (label, Err(e));
    }
    // A caller's cap on what this request's call may cost, on the routes that bill or quote.
    if route.takes_max_cost()
        && let Some(who) = ctx.who.as_mut()
    {
        match crate::headers::max_cost(&ctx.parts.headers) {
            Ok(cap) => who.max_cost = cap,
            Err(e) => return (label, Err(e)),
        }
    }
    (label, (route.handler)(ctx).await)
}

/// Checks `auth` for the request in `ctx`, recording the caller it authenticated.
async fn authenticate(ctx: &mut Ctx<'_>, auth: Auth) -> Result<(), ApiError> {
    let gateway = ctx.state.gateway();
    let headers = &ctx.parts.headers;
    let client = client_ip(&ctx.parts);
    match auth {
        Auth::Public | Auth::SignedLink | Auth::ProcessorSignature => {}
        Auth::MetricsToken => handlers::metrics_allowed(ctx.state, headers)?,
        Auth::Key(scope) => ctx.who = Some(gateway.authenticate(bearer(headers), scope, client).await?),
        Auth::KeyOrXApiKey(scope) => {
            let x_api_key = || headers.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim);
            ctx.who = Some(gateway.authenticate(bearer(headers).or_else(x_api_key), scope, client).await?);
        }
        Auth::Operator => {
            let who = gateway.authenticate(bearer(headers), Scope::Admin, client).await?;
            ctx.actor = Some(gateway.operator_actor(&who)?);
            ctx.who = Some(who);
        }
    }
    Ok(())
}
