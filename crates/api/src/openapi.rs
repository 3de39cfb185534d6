//! The served OpenAPI 3.1 document (`GET /openapi.json`).
//!
//! Nothing here is a hand-written copy of a shape: request bodies are the typed requests the
//! validation deserialises into (`validation::schema`), responses are the wire types the handlers
//! serialise (`crate::wire`), the error envelope is the one `ApiError` writes, and answers passed
//! through from the upstream are described by the fields the gateway itself adds (`svc`,
//! `task_id`, `billing`) on top of an open object. The list of operations is checked against the
//! router by a test that fails when a route has no operation here.

use std::sync::LazyLock;

use schemars::generate::{Contract, SchemaSettings};
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value, json};
use validation::schema::strip_null;
use validation::{AudioRequest, ChatRequest, ImageRequest, MessagesRequest, ResponsesRequest, VideoRequest};

use crate::error::ErrorEnvelope;
use crate::wire::{ChatStyleAnswer, KeyList, MediaAnswer, ModelList, OverviewObject, TaskList, TaskObject};

/// `GET /healthz` and `GET /readyz`.
#[derive(Debug, Clone, JsonSchema)]
pub struct Status {
    /// `ok` or `ready`.
    pub status: String,
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

/// One operation of the document.
pub(crate) struct Operation {
    pub(crate) method: &'static str,
    pub(crate) path: &'static str,
    pub(crate) summary: &'static str,
    /// Key scope needed (`None`: no key).
    pub(crate) scope: Option<&'static str>,
    pub(crate) parameters: Vec<Value>,
    pub(crate) body: Option<Value>,
    /// `(status, description, content)`.
    pub(crate) responses: Vec<(u16, &'static str, Option<Value>)>,
}

pub(crate) fn json_content(schema: Value) -> Value {
    json!({"application/json": {"schema": schema}})
}

pub(crate) fn query(name: &str, description: &str, schema: Value) -> Value {
    json!({"name": name, "in": "query", "required": false, "description": description, "schema": schema})
}

pub(crate) fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string"}})
}

/// The error statuses every keyed call may answer, with the generic ones every route may.
pub(crate) fn errors(codes: &[u16], error: &Value) -> Vec<(u16, &'static str, Option<Value>)> {
    codes
        .iter()
        .map(|code| {
            let description = match code {
                400 => "invalid_request: the message names the field and the rule",
                401 => "invalid_api_key: missing, unknown, revoked or lacking the scope",
                402 => "insufficient_balance (the balance does not cover the worst case) or key_budget_exceeded (the key's spend budget would be passed)",
                404 => "not_found",
                409 => "not_cancellable, task_state_conflict or idempotency_conflict",
                413 => "request_too_large or media_quota_exceeded",
                415 => "unsupported_content_type",
                429 => "concurrency_limit_exceeded or rate_limit_exceeded (a key's requests or tokens per minute), with Retry-After",
                502 => "upstream_request_failed; the hold was refunded",
                503 => {
                    "provider_not_configured (maintenance, no upstream or no price), server_busy, or media_store_unavailable (the media store failed during an upload; nothing was held)"
                }
                _ => "error",
            };
            (*code, description, Some(json_content(error.clone())))
        })
        .collect()
}

/// Every operation, with its schemas taken from `requests` and `responses`.
fn operations(requests: &mut SchemaGenerator, responses: &mut SchemaGenerator) -> Vec<Operation> {
    let error = responses.subschema_for::<ErrorEnvelope<'static>>().to_value();
    let billable = [400, 401, 402, 413, 415, 429, 502, 503];
    let read = [401];
    let task = responses.subschema_for::<TaskObject>().to_value();
    let chat_answer = responses.subschema_for::<ChatStyleAnswer>().to_value();
    let media_answer = responses.subschema_for::<MediaAnswer>().to_value();
    let status = responses.subschema_for::<Status>().to_value();
    let request = |schema: Value| {
        let mut schema = schema;
        strip_null(&mut schema);
        json!({"required": true, "content": json_content(schema)})
    };
    let chat_body = request(requests.subschema_for::<ChatRequest>().to_value());
    let messages_body = request(requests.subschema_for::<MessagesRequest>().to_value());
    let responses_body = request(requests.subschema_for::<ResponsesRequest>().to_value());
    let stream = |answer: &Value| {
        json!({
            "application/json": {"schema": answer},
            // One server-sent event as a reader parses it (`event` and `data` lines, each data a
            // JSON text, or `[DONE]` for the chat format).
            "text/event-stream": {"schema": {
                "type": "object",
                "description": "Server-sent events when the request asks for `stream: true`",
                "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}},
            }},
        })
    };
    let with = |mut ok: Vec<(u16, &'static str, Option<Value>)>, codes: &[u16]| {
        ok.extend(errors(codes, &error));
        ok
    };
    let image_body = request(requests.subschema_for::<ImageRequest>().to_value());
    let audio_body = request(requests.subschema_for::<AudioRequest>().to_value());
    let video_schema = requests.subschema_for::<VideoRequest>().to_value();
    let video_body = json!({"required": true, "content": {
        "application/json": {"schema": video_schema},
        "multipart/form-data": {"schema": {
            "type": "object",
            "required": ["request"],
            "properties": {
                "request": {"type": "string", "description": "The CreateTaskRequest as JSON text"},
                "media": {"type": "array", "items": {"type": "string", "format": "binary"}},
            },
        }},
    }});
    vec![
        Operation {
            method: "get",
            path: "/healthz",
            summary: "Liveness",
            scope: None,
            parameters: vec![],
            body: None,
            responses: vec![(200, "alive", Some(json_content(status.clone())))],
        },
        Operation {
            method: "get",
            path: "/readyz",
            summary: "Readiness: the database answers and has every migration of this version",
            scope: None,
            parameters: vec![],
            body: None,
            responses: with(vec![(200, "ready", Some(json_content(status)))], &[503]),
        },
        Operation {
            method: "get",
            path: "/metrics",
            summary: "Prometheus metrics of this replica (OpenMetrics text)",
            scope: None,
            parameters: vec![],
            body: None,
            responses: vec![(
                200,
                "metrics",
                Some(json!({"application/openmetrics-text": {"schema": {"type": "string"}}})),
            )],
        },
        Operation {
            method: "get",
            path: "/openapi.json",
            summary: "This document",
            scope: None,
            parameters: vec![],
            body: None,
            responses: vec![(200, "the OpenAPI 3.1 document", Some(json_content(json!({"type": "object"}))))],
        },
        Operation {
            method: "get",
            path: "/api/v1/models",
            summary: "Enabled models with limits, capabilities, active pricing and request/response schemas",
            scope: Some("models:read"),
            parameters: vec![],
            body: None,
            responses: with(
                vec![(200, "the models", Some(json_content(responses.subschema_for::<ModelList>().to_value())))],
                &read,
            ),
        },
        Operation {
            method: "get",
            path: "/api/v1/overview",
            summary: "The caller, balance, task counts, models and newest ledger entries",
            scope: Some("overview:read"),
            parameters: vec![],
            body: None,
            responses: with(
                vec![(200, "the overview", Some(json_content(responses.subschema_for::<OverviewObject>().to_value())))],
                &read,
            ),
        },
        Operation {
            method: "get",
            path: "/api/v1/keys",
            summary: "The caller's keys with their limits, their budget's spend this period and what each spent",
            scope: Some("overview:read"),
            parameters: vec![],
            body: None,
            responses: with(
                vec![(200, "the keys", Some(json_content(responses.subschema_for::<KeyList>().to_value())))],
                &read,
            ),
        },
        Operation {
            method: "get",
            path: "/api/v1/tasks",
            summary: "The caller's tasks, newest first",
            scope: Some("task:read"),
            parameters: vec![
                query("page", "Page, from 1", json!({"type": "integer", "minimum": 1})),
                query("page_size", "Tasks per page", json!({"type": "integer", "enum": validation::TASK_PAGE_SIZES})),
                query(
                    "kind",
                    "Only tasks of this kind of model (an addition of this gateway)",
                    json!({"type": "string", "enum": ["language", "image", "audio", "video"]}),
                ),
                query(
                    "status",
                    "A status, or `running` / `completed`",
                    json!({"type": "string", "enum": [
                        "submitting", "queued", "processing", "succeeded", "failed", "cancelled", "expired",
                        "running", "completed"
                    ]}),
                ),
            ],
            body: None,
            responses: with(
                vec![(200, "one page", Some(json_content(responses.subschema_for::<TaskList>().to_value())))],
                &[400, 401],
            ),
        },
        Operation {
            method: "post",
            path: "/api/v1/tasks",
            summary: "Create a video task (JSON, or multipart with uploaded media); answers at once",
            scope: Some("video:create"),
            parameters: vec![],
            body: Some(video_body),
            responses: with(vec![(202, "the task, submitting", Some(json_content(task.clone())))], &billable),
        },
        Operation {
            method: "get",
            path: "/api/v1/tasks/{task_id}",
            summary: "One of the caller's tasks",
            scope: Some("task:read"),
            parameters: vec![path_param("task_id", "The task id")],
            body: None,
            responses: with(vec![(200, "the task", Some(json_content(task.clone())))], &[401, 404]),
        },
        Operation {
            method: "delete",
            path: "/api/v1/tasks/{task_id}",
            summary: "Cancel a queued video task; its hold is refunded",
            scope: Some("task:write"),
            parameters: vec![path_param("task_id", "The task id")],
            body: None,
            responses: with(vec![(200, "the cancelled task", Some(json_content(task)))], &[401, 404, 409, 502]),
        },
        Operation {
            method: "get",
            path: "/media/{key}",
            summary: "A stored media object through a signed, expiring link (no key)",
            scope: None,
            parameters: vec![
                json!({"name": "key", "in": "path", "required": true, "schema": {"type": "string"}}),
                json!({"name": "expires", "in": "query", "required": true, "schema": {"type": "integer"}}),
                json!({"name": "sig", "in": "query", "required": true, "schema": {"type": "string"}}),
            ],
            body: None,
            responses: with(
                vec![(
                    200,
                    "the object",
                    Some(json!({"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}})),
                )],
                &[400, 404],
            ),
        },
        Operation {
            method: "get",
            path: "/console",
            summary: "The web console (HTML; its scripts and styles are served under /console/); no key, it signs in itself",
            scope: None,
            parameters: vec![],
            body: None,
            responses: vec![(200, "the console page", Some(json!({"text/html": {"schema": {"type": "string"}}})))],
        },
        Operation {
            method: "post",
            path: "/api/v1/chat/completions",
            summary: "Chat completion (streaming with `stream: true`), billed on the reported usage",
            scope: Some("language:create"),
            parameters: vec![],
            body: Some(chat_body),
            responses: with(vec![(200, "the completion", Some(stream(&chat_answer)))], &billable),
        },
        Operation {
            method: "post",
            path: "/api/v1/images/generations",
            summary: "Image generation, billed per generated image",
            scope: Some("image:create"),
            parameters: vec![],
            body: Some(image_body),
            responses: with(vec![(200, "the images", Some(json_content(media_answer.clone())))], &billable),
        },
        Operation {
            method: "post",
            path: "/api/v1/audio/generations",
            summary: "Speech generation, billed on the reported duration",
            scope: Some("audio:create"),
            parameters: vec![],
            body: Some(audio_body),
            responses: with(vec![(200, "the audio", Some(json_content(media_answer)))], &billable),
        },
        Operation {
            method: "post",
            path: "/v1/messages",
            summary: "Message-style chat (Anthropic format); also served at /v1/v1/messages",
            scope: Some("language:create"),
            parameters: vec![json!({
                "name": "anthropic-version", "in": "header", "required": true,
                "description": "Or `messages-version`", "schema": {"type": "string"}
            })],
            body: Some(messages_body),
            responses: with(vec![(200, "the message", Some(stream(&chat_answer)))], &billable),
        },
        Operation {
            method: "post",
            path: "/v1/responses",
            summary: "Response-style chat (OpenAI Responses format); also served at /v1/v1/responses",
            scope: Some("language:create"),
            parameters: vec![],
            body: Some(responses_body),
            // 404: a `previous_response_id` that is not one of the caller's responses.
            responses: with(
                vec![(200, "the response", Some(stream(&chat_answer)))],
                &[400, 401, 402, 404, 413, 415, 429, 502, 503],
            ),
        },
    ]
}

/// The paths served under a second name, with the operation they repeat.
const ALIASES: [(&str, &str); 2] = [("/v1/v1/messages", "/v1/messages"), ("/v1/v1/responses", "/v1/responses")];

/// The document as served, built once.
pub fn document_bytes() -> bytes::Bytes {
    static DOCUMENT: LazyLock<bytes::Bytes> =
        LazyLock::new(|| bytes::Bytes::from(serde_json::to_vec(&document()).unwrap_or_default()));
    DOCUMENT.clone()
}

/// The whole document.
pub fn document() -> Value {
    let mut requests = generator(Contract::Deserialize);
    let mut responses = generator(Contract::Serialize);
    let mut operations = operations(&mut requests, &mut responses);
    operations.extend(crate::manage::openapi::operations(&mut requests, &mut responses));
    let mut paths: Map<String, Value> = Map::new();
    for op in operations {
        let mut answers = Map::new();
        for (status, description, content) in op.responses {
            let mut answer = json!({"description": description});
            if let Some(content) = content {
                answer["content"] = content;
            }
            if status == 429 || status == 503 {
                answer["headers"] = json!({"Retry-After": {"schema": {"type": "integer"}}});
            }
            answers.insert(status.to_string(), answer);
        }
        let mut operation = json!({
            "operationId": format!("{}{}", op.method, op.path.replace(['/', '{', '}', '.'], "_")),
            "summary": op.summary,
            "responses": answers,
        });
        operation["security"] = match op.scope {
            None => json!([]),
            Some(scope) if op.path == "/v1/messages" => json!([{"bearer": [scope]}, {"x-api-key": [scope]}]),
            Some(scope) => json!([{"bearer": [scope]}]),
        };
        if !op.parameters.is_empty() {
            operation["parameters"] = Value::Array(op.parameters);
        }
        if let Some(body) = op.body {
            operation["requestBody"] = body;
        }
        if let Value::Object(item) = paths.entry(op.path).or_insert_with(|| json!({})) {
            item.insert(op.method.to_owned(), operation);
        }
    }
    for (alias, original) in ALIASES {
        if let Some(Value::Object(item)) = paths.get(original).cloned() {
            let renamed = item
                .into_iter()
                .map(|(method, mut op)| {
                    op["operationId"] = Value::String(format!("{method}{}", alias.replace('/', "_")));
                    (method, op)
                })
                .collect();
            paths.insert(alias.to_owned(), Value::Object(renamed));
        }
    }
    let mut schemas = responses.take_definitions(true);
    for (name, mut schema) in requests.take_definitions(true) {
        // Request fields are never null (the typed requests refuse it); responses keep `null`.
        strip_null(&mut schema);
        schemas.insert(name, schema);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Model gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "One gateway in front of chat, image, audio and video models, with prepaid USD balances \
                            and exact per-call billing. Amounts are decimal strings exact to 0.000001 USD.",
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "An API key: `Authorization: Bearer sk-gw-…`"},
                "x-api-key": {"type": "apiKey", "in": "header", "name": "x-api-key"},
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;
    use crate::routes::{Route, route};

    /// A request for every route, found through the router. The `match` has no wildcard, so a new
    /// route does not compile here until it has a request in this list, and the test then fails
    /// until the document has its operation.
    fn requests() -> Vec<(Method, &'static str)> {
        use crate::manage::ManageRoute as M;
        let sample = |r: &Route| -> (Method, &'static str) {
            match r {
                Route::Healthz => (Method::GET, "/healthz"),
                Route::Readyz => (Method::GET, "/readyz"),
                Route::Metrics => (Method::GET, "/metrics"),
                Route::OpenApi => (Method::GET, "/openapi.json"),
                Route::ListModels => (Method::GET, "/api/v1/models"),
                Route::Overview => (Method::GET, "/api/v1/overview"),
                Route::ListKeys => (Method::GET, "/api/v1/keys"),
                Route::ListTasks => (Method::GET, "/api/v1/tasks"),
                Route::CreateTask => (Method::POST, "/api/v1/tasks"),
                Route::GetTask(_) => (Method::GET, "/api/v1/tasks/task_1"),
                Route::CancelTask(_) => (Method::DELETE, "/api/v1/tasks/task_1"),
                Route::Media(_) => (Method::GET, "/media/u/t/0"),
                Route::ChatCompletions => (Method::POST, "/api/v1/chat/completions"),
                Route::ImageGenerations => (Method::POST, "/api/v1/images/generations"),
                Route::AudioGenerations => (Method::POST, "/api/v1/audio/generations"),
                Route::Messages => (Method::POST, "/v1/messages"),
                Route::Responses => (Method::POST, "/v1/responses"),
                Route::Console(_) => (Method::GET, "/console/"),
                Route::Manage(m) => match m {
                    M::Usage => (Method::GET, "/api/v1/usage"),
                    M::Ledger => (Method::GET, "/api/v1/ledger"),
                    M::CreateKey => (Method::POST, "/api/v1/keys"),
                    M::RevokeKey(_) => (Method::DELETE, "/api/v1/keys/key_1"),
                    M::RotateWebhookSecret => (Method::POST, "/api/v1/webhook-secret"),
                    M::Users => (Method::GET, "/api/v1/admin/users"),
                    M::CreateUser => (Method::POST, "/api/v1/admin/users"),
                    M::User(_) => (Method::GET, "/api/v1/admin/users/usr_1"),
                    M::ChangeUser(_) => (Method::PATCH, "/api/v1/admin/users/usr_1"),
                    M::Topup(_) => (Method::POST, "/api/v1/admin/users/usr_1/topup"),
                    M::Models => (Method::GET, "/api/v1/admin/models"),
                    M::ChangeModel(_) => (Method::PATCH, "/api/v1/admin/models/m"),
                    M::SetPrice(_) => (Method::POST, "/api/v1/admin/models/m/pricing"),
                    M::Maintenance => (Method::GET, "/api/v1/admin/maintenance"),
                    M::SetMaintenance => (Method::PUT, "/api/v1/admin/maintenance"),
                    M::Audit => (Method::GET, "/api/v1/admin/audit"),
                    M::Health => (Method::GET, "/api/v1/admin/health"),
                    M::CreateUserKey(_) => (Method::POST, "/api/v1/admin/users/usr_1/keys"),
                    M::RevokeAnyKey(_) => (Method::DELETE, "/api/v1/admin/keys/key_1"),
                    M::QuoteChat => (Method::POST, "/api/v1/chat/completions/quote"),
                    M::QuoteImage => (Method::POST, "/api/v1/images/generations/quote"),
                    M::ChangeKey(_) => (Method::PATCH, "/api/v1/admin/keys/key_1"),
                    M::RotateUserSecret(_) => (Method::POST, "/api/v1/admin/users/usr_1/webhook-secret"),
                    M::AdminTask(_) => (Method::GET, "/api/v1/admin/tasks/task_1"),
                },
            }
        };
        let manage = [
            M::Usage,
            M::Ledger,
            M::CreateKey,
            M::RevokeKey(String::new()),
            M::RotateWebhookSecret,
            M::Users,
            M::CreateUser,
            M::User(String::new()),
            M::ChangeUser(String::new()),
            M::Topup(String::new()),
            M::Models,
            M::ChangeModel(String::new()),
            M::SetPrice(String::new()),
            M::Maintenance,
            M::SetMaintenance,
            M::Audit,
            M::Health,
            M::CreateUserKey(String::new()),
            M::RevokeAnyKey(String::new()),
            M::QuoteChat,
            M::QuoteImage,
            M::ChangeKey(String::new()),
            M::RotateUserSecret(String::new()),
            M::AdminTask(String::new()),
        ];
        let all = [
            Route::Healthz,
            Route::Readyz,
            Route::Metrics,
            Route::OpenApi,
            Route::ListModels,
            Route::Overview,
            Route::ListKeys,
            Route::ListTasks,
            Route::CreateTask,
            Route::GetTask(String::new()),
            Route::CancelTask(String::new()),
            Route::Media(String::new()),
            Route::ChatCompletions,
            Route::ImageGenerations,
            Route::AudioGenerations,
            Route::Messages,
            Route::Responses,
            Route::Console(String::new()),
        ];
        let mut out: Vec<(Method, &'static str)> =
            all.iter().cloned().chain(manage.into_iter().map(Route::Manage)).map(|r| sample(&r)).collect();
        out.extend([(Method::POST, "/v1/v1/messages"), (Method::POST, "/v1/v1/responses")]);
        out
    }

    #[test]
    fn every_route_has_an_operation_and_every_operation_a_route() {
        let doc = document();
        let paths = doc["paths"].as_object().expect("paths");
        let mut documented = 0;
        for (method, path) in requests() {
            let found = route(&method, path).unwrap_or_else(|e| panic!("{method} {path}: {e:?}"));
            let template = match found {
                Route::Messages | Route::Responses => path,
                other => other.label(),
            };
            let operation = &paths.get(template).unwrap_or_else(|| panic!("no path {template}"))
                [method.as_str().to_ascii_lowercase()];
            assert!(operation.is_object(), "{method} {template} is not in the document");
            documented += 1;
        }
        let operations: usize = paths.values().map(|item| item.as_object().map_or(0, Map::len)).sum();
        assert_eq!(operations, documented, "the document has an operation the router does not serve");
    }

    #[test]
    fn the_task_path_parameter_is_named_as_the_interface_names_it() {
        let doc = document();
        for method in ["get", "delete"] {
            let operation = &doc["paths"]["/api/v1/tasks/{task_id}"][method];
            assert_eq!(operation["parameters"][0]["name"], "task_id", "{method}: {operation}");
            assert_eq!(operation["parameters"][0]["in"], "path", "{method}");
        }
        assert!(doc["paths"].get("/api/v1/tasks/{id}").is_none());
    }

    #[test]
    fn the_document_is_openapi_3_1_with_every_reference_defined() {
        let doc = document();
        assert_eq!(doc["openapi"], "3.1.0");
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        let text = doc.to_string();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = reference.split('"').next().unwrap_or_default();
            let name = target.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("$ref {target}"));
            assert!(schemas.contains_key(name), "$ref {target} has no definition");
        }
        for name in [
            "ImageRequest",
            "AudioRequest",
            "VideoRequest",
            "ChatRequest",
            "MessagesRequest",
            "ResponsesRequest",
            "TaskObject",
            "ModelList",
            "ErrorEnvelope",
        ] {
            assert!(schemas.contains_key(name), "{name} is defined");
        }
        // Request fields are not nullable; response fields may be.
        assert!(!schemas["AudioConfig"].to_string().contains("null"));
        assert!(schemas["Billing"].to_string().contains("null"));
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("path item") {
                assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()), "{method} {path}");
                assert!(op["operationId"].is_string(), "{method} {path}");
            }
        }
    }
}
