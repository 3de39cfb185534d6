//! What a handler receives: the request, its path parameter, its caller (authenticated by the
//! dispatcher as the route declares) and the body limit the route declares, with the readers that
//! hold a handler to that limit.

use domain::Actor;
use http::request::Parts;
use hyper::body::Incoming;
use service::{Gateway, Principal, ServiceError};

use crate::body::{BufferedBody, read_json};
use crate::error::ApiError;
use crate::state::AppState;

/// One request on its way to its handler.
pub struct Ctx<'a> {
    /// The server's state.
    pub state: &'a AppState,
    /// Method, URI, headers and extensions.
    pub parts: Parts,
    /// The body, until a reader takes it.
    pub body: Option<Incoming>,
    /// The path parameter (`{task_id}`, `{key+}`, …), when the route's template has one.
    pub param: Option<String>,
    /// The caller, for routes that take a key.
    pub who: Option<Principal>,
    /// The operator, for operator routes.
    pub actor: Option<Actor>,
    /// The most bytes of JSON the route reads (the body kind its row in the route table declares).
    pub limit: u64,
}

impl Ctx<'_> {
    /// The gateway.
    pub fn gateway(&self) -> &Gateway {
        self.state.gateway()
    }

    /// The caller. Only routes that take a key call it; the dispatcher has authenticated them.
    pub fn who(&self) -> Result<&Principal, ApiError> {
        self.who.as_ref().ok_or_else(|| ServiceError::Internal("a keyed handler ran without a caller".into()).into())
    }

    /// The caller, taken out (for a handler that moves it onto a task of its own).
    pub fn take_who(&mut self) -> Result<Principal, ApiError> {
        self.who.take().ok_or_else(|| ServiceError::Internal("a keyed handler ran without a caller".into()).into())
    }

    /// The operator. Only operator routes call it.
    pub fn actor(&self) -> Result<&Actor, ApiError> {
        self.actor.as_ref().ok_or_else(|| ServiceError::Internal("an operator handler ran without one".into()).into())
    }

    /// The path parameter (empty when the template has none).
    pub fn param(&self) -> &str {
        self.param.as_deref().unwrap_or_default()
    }

    /// The query's pairs; malformed escapes are 400.
    pub fn query(&self) -> Result<Vec<(String, String)>, ApiError> {
        decode_query(self.parts.uri.query())
    }

    /// Reads the JSON body, at most the route's limit, with the caller's share of the body budget.
    pub async fn json_bytes(&mut self) -> Result<BufferedBody, ApiError> {
        let user = self.who()?.user_id.as_str().to_owned();
        self.json_bytes_of(&user).await
    }

    /// The JSON body of a route without a key, its share of the body budget counted for `sender`
    /// (such as `stripe`).
    pub async fn json_bytes_of(&mut self, sender: &str) -> Result<BufferedBody, ApiError> {
        let body = self.take_body()?;
        read_json(&self.parts.headers, body, self.limit, self.state.body_budget(), sender, self.state.pace()).await
    }

    /// The body, to read as the handler needs (once).
    pub fn take_body(&mut self) -> Result<Incoming, ApiError> {
        self.body.take().ok_or_else(|| ServiceError::Internal("the body was read twice".into()).into())
    }

    /// Reads the JSON body into `T` and checks its rules (the management API's small bodies).
    pub async fn json<T>(&mut self) -> Result<T, ApiError>
    where
        T: for<'de> serde::Deserialize<'de> + validation::Validate,
    {
        let bytes = self.json_bytes().await?;
        Ok(validation::manage_body(&bytes).map_err(ServiceError::from)?)
    }
}

/// The pairs of pairs as `&str`s.
pub fn pairs(params: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
    params.iter().map(|(k, v)| (k.as_str(), v.as_str()))
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
