//! The OpenAPI operations of the service routes (health, models, overview, keys, tasks, media, the
//! console and the billable calls), one function per route, named in the route table. Answers passed
//! through from the upstream are described by the fields the gateway adds (`svc`, `task_id`,
//! `billing`) on top of an open object.

use schemars::JsonSchema;
use serde_json::{Value, json};
use validation::{
    AudioRequest, ChatRequest, CountTokensRequest, ImageRequest, MessagesRequest, ResponsesRequest, VideoRequest,
};

use crate::doc::{BILLABLE_ERRORS, Docs, Op, json_content, page, path_param, query};
use crate::wire::{ChatStyleAnswer, KeyList, MediaAnswer, ModelList, OverviewObject, TaskList, TaskObject};

/// `GET /healthz` and `GET /readyz`.
#[derive(Debug, Clone, serde::Serialize, JsonSchema)]
pub struct Status {
    /// `ok` or `ready`.
    pub status: String,
}

/// An operation with no parameters and no body.
fn plain(responses: Vec<crate::doc::Answer>) -> Op {
    Op { parameters: vec![], body: None, responses }
}

/// A chat-style answer, as JSON or as server-sent events.
fn stream(docs: &mut Docs) -> Value {
    let answer = docs.response::<ChatStyleAnswer>();
    json!({
        "application/json": {"schema": answer},
        // One server-sent event as a reader parses it (`event` and `data` lines, each data a JSON
        // text, or `[DONE]` for the chat format).
        "text/event-stream": {"schema": {
            "type": "object",
            "description": "Server-sent events when the request asks for `stream: true`",
            "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}},
        }},
    })
}

pub(crate) fn healthz(d: &mut Docs) -> Op {
    let status = d.response::<Status>();
    plain(vec![(200, "alive", Some(json_content(status)))])
}

pub(crate) fn readyz(d: &mut Docs) -> Op {
    let status = d.response::<Status>();
    plain(d.answers(vec![(200, "ready", Some(json_content(status)))], &[503]))
}

pub(crate) fn metrics(_: &mut Docs) -> Op {
    plain(vec![(200, "metrics", Some(json!({"application/openmetrics-text": {"schema": {"type": "string"}}})))])
}

pub(crate) fn openapi(_: &mut Docs) -> Op {
    plain(vec![(200, "the OpenAPI 3.1 document", Some(json_content(json!({"type": "object"}))))])
}

pub(crate) fn list_models(d: &mut Docs) -> Op {
    plain(d.json_answer::<ModelList>(200, "the models", &[401]))
}

pub(crate) fn overview(d: &mut Docs) -> Op {
    plain(d.json_answer::<OverviewObject>(200, "the overview", &[401]))
}

pub(crate) fn list_keys(d: &mut Docs) -> Op {
    plain(d.json_answer::<KeyList>(200, "the keys", &[401]))
}

pub(crate) fn list_tasks(d: &mut Docs) -> Op {
    let mut parameters = page("Tasks");
    parameters.extend([
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
    ]);
    Op { parameters, body: None, responses: d.json_answer::<TaskList>(200, "one page", &[400, 401]) }
}

pub(crate) fn create_task(d: &mut Docs) -> Op {
    let video = d.request_schema::<VideoRequest>();
    let body = json!({"required": true, "content": {
        "application/json": {"schema": video},
        "multipart/form-data": {"schema": {
            "type": "object",
            "required": ["request"],
            "properties": {
                "request": {"type": "string", "description": "The CreateTaskRequest as JSON text"},
                "media": {"type": "array", "items": {"type": "string", "format": "binary"}},
            },
        }},
    }});
    let responses = d.json_answer::<TaskObject>(202, "the task, submitting", BILLABLE_ERRORS);
    Op { parameters: vec![], body: Some(body), responses }
}

pub(crate) fn get_task(d: &mut Docs) -> Op {
    let responses = d.json_answer::<TaskObject>(200, "the task", &[401, 404]);
    Op { parameters: vec![path_param("task_id", "The task id")], body: None, responses }
}

pub(crate) fn cancel_task(d: &mut Docs) -> Op {
    let responses = d.json_answer::<TaskObject>(200, "the cancelled task", &[401, 404, 409, 502]);
    Op { parameters: vec![path_param("task_id", "The task id")], body: None, responses }
}

pub(crate) fn media(d: &mut Docs) -> Op {
    let parameters = vec![
        json!({"name": "key", "in": "path", "required": true, "schema": {"type": "string"}}),
        json!({"name": "expires", "in": "query", "required": true, "schema": {"type": "integer"}}),
        json!({"name": "sig", "in": "query", "required": true, "schema": {"type": "string"}}),
    ];
    let object = json!({"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}});
    Op { parameters, body: None, responses: d.answers(vec![(200, "the object", Some(object))], &[400, 404]) }
}

pub(crate) fn console(_: &mut Docs) -> Op {
    plain(vec![(200, "the console page", Some(json!({"text/html": {"schema": {"type": "string"}}})))])
}

pub(crate) fn chat(d: &mut Docs) -> Op {
    let body = d.request::<ChatRequest>();
    let content = stream(d);
    Op { parameters: vec![], body, responses: d.answers(vec![(200, "the completion", Some(content))], BILLABLE_ERRORS) }
}

pub(crate) fn image(d: &mut Docs) -> Op {
    let body = d.request::<ImageRequest>();
    Op { parameters: vec![], body, responses: d.json_answer::<MediaAnswer>(200, "the images", BILLABLE_ERRORS) }
}

pub(crate) fn audio(d: &mut Docs) -> Op {
    let body = d.request::<AudioRequest>();
    Op { parameters: vec![], body, responses: d.json_answer::<MediaAnswer>(200, "the audio", BILLABLE_ERRORS) }
}

pub(crate) fn speech(d: &mut Docs) -> Op {
    let body = d.request::<validation::SpeechRequest>();
    let audio = json!({"audio/*": {"schema": {"type": "string", "format": "binary"}}});
    Op {
        parameters: vec![],
        body,
        responses: d.answers(vec![(200, "the audio's bytes", Some(audio))], BILLABLE_ERRORS),
    }
}

pub(crate) fn messages(d: &mut Docs) -> Op {
    let body = d.request::<MessagesRequest>();
    let content = stream(d);
    let version = json!({
        "name": "anthropic-version", "in": "header", "required": true,
        "description": "Or `messages-version`", "schema": {"type": "string"}
    });
    Op {
        parameters: vec![version],
        body,
        responses: d.answers(vec![(200, "the message", Some(content))], BILLABLE_ERRORS),
    }
}

/// `POST /v1/messages/count_tokens`'s answer.
#[derive(Debug, Clone, serde::Serialize, JsonSchema)]
pub struct TokenCount {
    /// The prompt's tokens, estimated: the compact JSON size of `system`, `messages` and `tools`
    /// over four bytes per token, plus four per message (the bill uses the upstream's count).
    pub input_tokens: u64,
}

pub(crate) fn count_tokens(d: &mut Docs) -> Op {
    let body = d.request::<CountTokensRequest>();
    let version = json!({
        "name": "anthropic-version", "in": "header", "required": true,
        "description": "Or `messages-version`", "schema": {"type": "string"}
    });
    Op {
        parameters: vec![version],
        body,
        responses: d.json_answer::<TokenCount>(200, "the estimate", &[400, 401, 413, 415, 503]),
    }
}

pub(crate) fn responses(d: &mut Docs) -> Op {
    let body = d.request::<ResponsesRequest>();
    let content = stream(d);
    // 404: a `previous_response_id` that is not one of the caller's responses.
    let codes = [400, 401, 402, 404, 413, 415, 429, 502, 503];
    Op { parameters: vec![], body, responses: d.answers(vec![(200, "the response", Some(content))], &codes) }
}

pub(crate) fn v1_models(d: &mut Docs) -> Op {
    let version = json!({
        "name": "anthropic-version", "in": "header", "required": false,
        "description": "When sent, the list is in Anthropic's shape", "schema": {"type": "string"}
    });
    let openai = d.response::<crate::v1::OpenAiModelList>();
    let anthropic = d.response::<crate::v1::AnthropicModelList>();
    let content = json_content(json!({"oneOf": [openai, anthropic]}));
    Op { parameters: vec![version], body: None, responses: d.answers(vec![(200, "the models", Some(content))], &[401]) }
}

pub(crate) fn v1_model(d: &mut Docs) -> Op {
    let openai = d.response::<crate::v1::OpenAiModel>();
    let anthropic = d.response::<crate::v1::AnthropicModel>();
    let content = json_content(json!({"oneOf": [openai, anthropic]}));
    Op {
        parameters: vec![path_param("model", "The public model name")],
        body: None,
        responses: d.answers(vec![(200, "the model", Some(content))], &[401, 404]),
    }
}
