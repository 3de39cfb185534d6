//! What a route declares, once, in the route table (`crate::table::ROUTES`): its method and path
//! template, who may call it, its body, what it does to the gateway's state, its handler and its
//! OpenAPI operation. Dispatch, 404 and 405, the metrics label, the OpenAPI document and the audit
//! check (`crates/api/tests/every_door.rs`) are all derived from these declarations, so a route
//! cannot skip a rule the others keep.

use std::future::Future;
use std::pin::Pin;

use domain::Scope;
use http::Method;

use crate::ctx::Ctx;
use crate::doc::{Docs, Op};
use crate::error::ApiError;
use crate::response::Response;

/// What a handler returns: the route's future, boxed so that the table can hold every handler.
pub type Reply<'a> = Pin<Box<dyn Future<Output = Result<Response, ApiError>> + Send + 'a>>;

/// A route's handler: it receives the request with its caller already authenticated (see [`Auth`]).
pub type Handler = for<'a> fn(Ctx<'a>) -> Reply<'a>;

/// One route of the table.
pub struct Route {
    /// The method (`HEAD` is also served by a `GET` route).
    pub method: Method,
    /// The path template: literal segments, at most one `{name}` (one non-empty segment), or a last
    /// `{name+}` (one or more non-empty segments) or `{name*}` (any, the documented path leaves it out).
    pub path: &'static str,
    /// Other paths served by the same route (documented as copies of its operation).
    pub aliases: &'static [&'static str],
    /// Who may call it; checked before the handler runs.
    pub auth: Auth,
    /// The body it reads and the most it takes.
    pub body: BodyKind,
    /// What it does to the gateway's state.
    pub effect: Effect,
    /// A short summary for the document and the route's name in prose.
    pub summary: &'static str,
    /// The handler.
    pub handler: Handler,
    /// Its OpenAPI operation: parameters, request body and answers.
    pub doc: fn(&mut Docs) -> Op,
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// Anyone (liveness, the document, the console's files).
    Public,
    /// `Authorization: Bearer <the metrics token>` when one is configured, else anyone.
    MetricsToken,
    /// Anyone holding a signed, expiring link (the handler checks its signature); no key.
    SignedLink,
    /// The payment processor, whose request carries its signature over the body with the
    /// operator's webhook secret; the handler checks it before anything else; no key.
    ProcessorSignature,
    /// A key with this scope, presented as `Authorization: Bearer`.
    Key(Scope),
    /// A key with this scope, as `Authorization: Bearer` or `x-api-key` (message-style clients).
    KeyOrXApiKey(Scope),
    /// A key with the `admin` scope of a user whose role is `admin`: the operator.
    Operator,
}

impl Auth {
    /// The scope a key needs, for the document (`None`: no key).
    pub const fn scope(self) -> Option<Scope> {
        match self {
            Auth::Public | Auth::MetricsToken | Auth::SignedLink | Auth::ProcessorSignature => None,
            Auth::Key(scope) | Auth::KeyOrXApiKey(scope) => Some(scope),
            Auth::Operator => Some(Scope::Admin),
        }
    }
}

/// The body a route reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// None (a body sent anyway is not read).
    None,
    /// JSON of at most this many bytes.
    Json(u64),
    /// JSON of at most this many bytes, or `multipart/form-data` whose `request` field is at most this
    /// many bytes and whose files are bounded by their kind's limits and the user's media quota.
    JsonOrMultipart(u64),
}

impl BodyKind {
    /// The most bytes of JSON the route reads (0 for none).
    pub const fn limit(self) -> u64 {
        match self {
            BodyKind::None => 0,
            BodyKind::Json(limit) | BodyKind::JsonOrMultipart(limit) => limit,
        }
    }
}

/// What a route does to the gateway's state. A test (`crates/api/tests/every_door.rs`) walks every
/// operation of the OpenAPI document and holds each route to its declaration, so a route that
/// changes state without an audit row fails it.
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

/// The `route` label of a request that matched no route (404, 405).
pub const UNMATCHED_ROUTE: &str = "unmatched";

impl Route {
    /// Whether the route takes `X-Max-Cost`: a caller's key makes a billed call (a `POST` that
    /// bills; a cancellation bills too, but only refunds; a processor's event credits), or quotes one.
    pub fn takes_max_cost(&self) -> bool {
        let keyed = matches!(self.auth, Auth::Key(_) | Auth::KeyOrXApiKey(_));
        keyed && ((self.effect == Effect::Billed && self.method == Method::POST) || self.path.ends_with("/quote"))
    }

    /// The documented path: the template without `+`/`*` markers, and without a last `{name*}`.
    /// Also the `route` label of the request metrics.
    pub fn documented_path(&self) -> String {
        documented(self.path)
    }

    /// The path's captured parameter when `path` is this route's (or one of its aliases').
    fn capture(&self, path: &str) -> Option<Option<String>> {
        std::iter::once(self.path).chain(self.aliases.iter().copied()).find_map(|template| capture(template, path))
    }

    /// Whether the route serves `method` (a `GET` route serves `HEAD` too).
    fn serves(&self, method: &Method) -> bool {
        self.method == method || (method == Method::HEAD && self.method == Method::GET)
    }
}

/// `template` as documented (see [`Route::documented_path`]).
pub fn documented(template: &str) -> String {
    let path = match template.rsplit_once('/') {
        Some((head, last)) if last.starts_with('{') && last.ends_with("*}") => head,
        _ => template,
    };
    path.replace("+}", "}")
}

/// Matches `path` against `template`: `Some(parameter)` when it matches.
fn capture(template: &str, path: &str) -> Option<Option<String>> {
    let mut wanted = template.split('/');
    let mut given = path.split('/');
    let mut captured = None;
    loop {
        match (wanted.next(), given.next()) {
            (None, None) => return Some(captured),
            (Some(segment), first) if segment.starts_with('{') => {
                if segment.ends_with("+}") || segment.ends_with("*}") {
                    let rest: Vec<&str> = first.into_iter().chain(given).collect();
                    let some = segment.ends_with("+}");
                    if some && (rest.is_empty() || rest.iter().any(|s| s.is_empty())) {
                        return None;
                    }
                    return Some(Some(rest.join("/")));
                }
                match first {
                    Some(value) if !value.is_empty() => captured = Some(value.to_owned()),
                    _ => return None,
                }
            }
            (Some(a), Some(b)) if a == b => {}
            _ => return None,
        }
    }
}

/// Picks the route of `table` for `method` and `path` (its place in the table), with its path parameter: 404 for a path no
/// route has, 405 (with `Allow`, the path's methods in table order) for a path with other methods.
/// A trailing `/` is ignored.
pub fn find(table: &[Route], method: &Method, path: &str) -> Result<(usize, Option<String>), ApiError> {
    let path = path.strip_suffix('/').filter(|p| !p.is_empty()).unwrap_or(path);
    let mut known = false;
    for (index, route) in table.iter().enumerate() {
        if let Some(parameter) = route.capture(path) {
            if route.serves(method) {
                return Ok((index, parameter));
            }
            known = true;
        }
    }
    if !known {
        return Err(ApiError::not_found(format!("no route for {path}")));
    }
    let mut allow: Vec<&str> = Vec::new();
    for route in table.iter().filter(|r| r.capture(path).is_some()) {
        if !allow.contains(&route.method.as_str()) {
            allow.push(route.method.as_str());
        }
    }
    Err(ApiError::method_not_allowed(allow.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_capture_one_segment_or_the_rest() {
        assert_eq!(capture("/api/v1/models", "/api/v1/models"), Some(None));
        assert_eq!(capture("/api/v1/models", "/api/v1/model"), None);
        assert_eq!(capture("/api/v1/tasks/{task_id}", "/api/v1/tasks/t1"), Some(Some("t1".into())));
        assert_eq!(capture("/api/v1/tasks/{task_id}", "/api/v1/tasks/"), None, "an empty parameter");
        assert_eq!(capture("/api/v1/tasks/{task_id}", "/api/v1/tasks/t1/x"), None);
        assert_eq!(capture("/media/{key+}", "/media/u/t/0"), Some(Some("u/t/0".into())));
        assert_eq!(capture("/media/{key+}", "/media"), None);
        assert_eq!(capture("/media/{key+}", "/media/u//0"), None, "an empty segment");
        assert_eq!(capture("/console/{path*}", "/console"), Some(Some(String::new())));
        assert_eq!(capture("/console/{path*}", "/console/app.js"), Some(Some("app.js".into())));
        assert_eq!(documented("/console/{path*}"), "/console");
        assert_eq!(documented("/media/{key+}"), "/media/{key}");
        assert_eq!(documented("/api/v1/tasks/{task_id}"), "/api/v1/tasks/{task_id}");
    }
}
