//! The pieces of an OpenAPI operation that a route declares ([`Op`]), and the schema generators they
//! are taken from ([`Docs`]): request bodies are the typed requests `validation` deserialises into,
//! answers the wire types the handlers serialise, errors the envelope `ApiError` writes. Nothing
//! here is a hand-written copy of a shape.

use schemars::generate::{Contract, SchemaSettings};
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};
use validation::schema::strip_null;

use crate::error::ErrorEnvelope;

/// One answer of an operation: `(status, description, content)`.
pub type Answer = (u16, &'static str, Option<Value>);

/// What a route's operation declares beyond its method, path, summary and security (which come
/// from the route itself).
pub struct Op {
    /// Query, header and path parameters.
    pub parameters: Vec<Value>,
    /// The request body, if any.
    pub body: Option<Value>,
    /// The answers, success first.
    pub responses: Vec<Answer>,
}

/// The schema generators of one document, and the error envelope's schema.
pub struct Docs {
    requests: SchemaGenerator,
    responses: SchemaGenerator,
    error: Value,
}

fn generator(contract: Contract) -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.contract = contract;
            s.meta_schema = None;
        })
        .into_generator()
}

impl Default for Docs {
    fn default() -> Docs {
        let requests = generator(Contract::Deserialize);
        let mut responses = generator(Contract::Serialize);
        let error = responses.subschema_for::<ErrorEnvelope<'static>>().to_value();
        Docs { requests, responses, error }
    }
}

impl Docs {
    /// The schema of request type `T` (its fields never null: the typed requests refuse it).
    pub fn request_schema<T: JsonSchema>(&mut self) -> Value {
        let mut schema = self.requests.subschema_for::<T>().to_value();
        strip_null(&mut schema);
        schema
    }

    /// A required JSON request body of type `T`.
    pub fn request<T: JsonSchema>(&mut self) -> Option<Value> {
        let schema = self.request_schema::<T>();
        Some(json!({"required": true, "content": json_content(schema)}))
    }

    /// The schema of answer type `T`.
    pub fn response<T: JsonSchema>(&mut self) -> Value {
        self.responses.subschema_for::<T>().to_value()
    }

    /// A success answer with `content`, then the error answers of `codes`.
    pub fn answers(&self, ok: Vec<Answer>, codes: &[u16]) -> Vec<Answer> {
        let mut all = ok;
        all.extend(codes.iter().map(|code| (*code, error_description(*code), Some(json_content(self.error.clone())))));
        all
    }

    /// A JSON answer of type `T` with `status`, then the error answers of `codes`.
    pub fn json_answer<T: JsonSchema>(&mut self, status: u16, description: &'static str, codes: &[u16]) -> Vec<Answer> {
        let schema = self.response::<T>();
        self.answers(vec![(status, description, Some(json_content(schema)))], codes)
    }

    /// Every schema the operations referred to; request schemas without `null`.
    pub fn into_schemas(mut self) -> Map<String, Value> {
        let mut schemas = self.responses.take_definitions(true);
        for (name, mut schema) in self.requests.take_definitions(true) {
            strip_null(&mut schema);
            schemas.insert(name, schema);
        }
        schemas
    }
}

/// The errors a billable call may answer.
pub const BILLABLE_ERRORS: &[u16] = &[400, 401, 402, 413, 415, 429, 502, 503];

/// What an error status means on this interface.
fn error_description(code: u16) -> &'static str {
    match code {
        400 => "invalid_request: the message names the field and the rule",
        401 => "invalid_api_key: missing, unknown, revoked or lacking the scope",
        402 => {
            "insufficient_balance (the balance does not cover the worst case) or key_budget_exceeded (the key's spend budget would be passed)"
        }
        404 => "not_found, or voucher_not_found (an unknown or revoked code)",
        409 => "not_cancellable, task_state_conflict, idempotency_conflict or voucher_redeemed",
        410 => "voucher_expired",
        413 => "request_too_large or media_quota_exceeded",
        415 => "unsupported_content_type",
        429 => {
            "concurrency_limit_exceeded, rate_limit_exceeded (a key's requests or tokens per minute) or voucher_attempts_exceeded (failed redemptions), with Retry-After"
        }
        502 => "upstream_request_failed; the hold was refunded",
        503 => {
            "provider_not_configured (maintenance, no upstream or no price), server_busy, or media_store_unavailable (the media store failed during an upload; nothing was held)"
        }
        _ => "error",
    }
}

/// `application/json` content of `schema`.
pub fn json_content(schema: Value) -> Value {
    json!({"application/json": {"schema": schema}})
}

/// An optional query parameter.
pub fn query(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

/// A path parameter.
pub fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string"}})
}

/// The paging parameters of a list.
pub fn page(items: &str) -> Vec<Value> {
    vec![
        query("page", "Page, from 1", json!({"type": "integer", "minimum": 1})),
        query(
            "page_size",
            &format!("{items} per page"),
            json!({"type": "integer", "enum": validation::TASK_PAGE_SIZES}),
        ),
    ]
}
