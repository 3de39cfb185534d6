//! What the `/v1` base URL adds for tools that take one base URL (the OpenAI and Anthropic SDKs,
//! LangChain, LiteLLM, …): the model list in OpenAI's shape, or Anthropic's when the request
//! carries `anthropic-version`; errors that also carry OpenAI's `type` (so every SDK shows the
//! message); and a 404 that names what this gateway serves under `/v1`. The calls themselves are
//! the `/api/v1` routes' own handlers under a second path (the route table's aliases).

use http::{HeaderMap, StatusCode};
use schemars::JsonSchema;
use serde::Serialize;
use service::ModelView;

use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::response::{Response, json_response, ok_json};

/// The prefix of the one base URL.
pub const PREFIX: &str = "/v1/";

/// Whether a request asks in Anthropic's terms (the Anthropic SDK sends `anthropic-version`).
fn anthropic(headers: &HeaderMap) -> bool {
    headers.contains_key("anthropic-version")
}

/// A model in OpenAI's list shape.
#[derive(Debug, Serialize, JsonSchema)]
pub struct OpenAiModel {
    /// The public model name.
    pub id: String,
    /// Always `model`.
    pub object: &'static str,
    /// Unix seconds of the model's active price (0 while unpriced).
    pub created: i64,
    /// Always `gateway`: the gateway serves it, whoever made it.
    pub owned_by: &'static str,
    /// `language`, `image`, `audio` or `video` (this gateway's addition).
    pub kind: &'static str,
    /// For an operator's alias: its models, tried in order (this gateway's addition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias_of: Option<Vec<String>>,
}

/// `GET /v1/models` in OpenAI's shape.
#[derive(Debug, Serialize, JsonSchema)]
pub struct OpenAiModelList {
    /// Always `list`.
    pub object: &'static str,
    /// The enabled models.
    pub data: Vec<OpenAiModel>,
}

/// A model in Anthropic's list shape.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AnthropicModel {
    /// Always `model`.
    #[serde(rename = "type")]
    pub kind_of: &'static str,
    /// The public model name.
    pub id: String,
    /// The name to show (the public name).
    pub display_name: String,
    /// RFC 3339 time of the model's active price.
    pub created_at: String,
}

/// `GET /v1/models` in Anthropic's shape: one page holding every model.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AnthropicModelList {
    /// The enabled models.
    pub data: Vec<AnthropicModel>,
    /// Always false: one page holds them all.
    pub has_more: bool,
    /// The first model's id.
    pub first_id: Option<String>,
    /// The last model's id.
    pub last_id: Option<String>,
}

/// When the model's active price was set.
fn created(view: &ModelView) -> domain::Timestamp {
    view.record.pricing.as_ref().map_or(domain::Timestamp(0), |p| p.created_at)
}

fn openai(view: &ModelView) -> OpenAiModel {
    OpenAiModel {
        id: view.record.name.clone(),
        object: "model",
        created: created(view).0.div_euclid(1000),
        owned_by: "gateway",
        kind: view.record.kind.as_str(),
        alias_of: None,
    }
}

fn anthropic_model(view: &ModelView) -> AnthropicModel {
    AnthropicModel {
        kind_of: "model",
        id: view.record.name.clone(),
        display_name: view.record.name.clone(),
        created_at: created(view).to_string(),
    }
}

/// `GET /v1/models`: the enabled models, in OpenAI's shape or Anthropic's.
pub(crate) async fn models(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    let models = ctx.gateway().list_models().await?;
    let aliases = ctx.gateway().listed_aliases(&models).await?;
    if anthropic(&ctx.parts.headers) {
        let mut data: Vec<AnthropicModel> = models.iter().map(anthropic_model).collect();
        data.extend(aliases.iter().map(|(alias, first)| AnthropicModel {
            id: alias.name.clone(),
            display_name: alias.name.clone(),
            ..anthropic_model(first)
        }));
        let (first_id, last_id) = (data.first().map(|m| m.id.clone()), data.last().map(|m| m.id.clone()));
        return Ok(ok_json(&AnthropicModelList { data, has_more: false, first_id, last_id }));
    }
    let mut data: Vec<OpenAiModel> = models.iter().map(openai).collect();
    data.extend(aliases.iter().map(|(alias, first)| OpenAiModel {
        id: alias.name.clone(),
        alias_of: Some(alias.models.clone()),
        ..openai(first)
    }));
    Ok(ok_json(&OpenAiModelList { object: "list", data }))
}

/// `GET /v1/models/{model}`: one enabled model, in OpenAI's shape or Anthropic's; 404 for a
/// model that is not listed.
pub(crate) async fn model(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    let name = ctx.param();
    let models = ctx.gateway().list_models().await?;
    let aliases = ctx.gateway().listed_aliases(&models).await?;
    let alias = aliases.iter().find(|(a, _)| a.name == name);
    let view =
        models.iter().find(|m| m.record.name == name).or(alias.map(|(_, first)| first)).ok_or_else(|| {
            ApiError::not_found(format!("no enabled model is named {name:?}; GET /v1/models lists them"))
        })?;
    let alias_of = alias.filter(|_| view.record.name != name).map(|(a, _)| a.models.clone());
    if anthropic(&ctx.parts.headers) {
        return Ok(ok_json(&AnthropicModel {
            id: name.to_owned(),
            display_name: name.to_owned(),
            ..anthropic_model(view)
        }));
    }
    Ok(ok_json(&OpenAiModel { id: name.to_owned(), alias_of, ..openai(view) }))
}

/// The `type` OpenAI's error bodies carry for a status.
fn openai_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        402 => "insufficient_quota",
        403 => "permission_error",
        404 => "not_found_error",
        409 => "conflict_error",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The error body under `/v1`: the spec's envelope with OpenAI's `type` added.
#[derive(Debug, Serialize, JsonSchema)]
pub struct V1Error<'a> {
    /// The error.
    pub error: V1ErrorBody<'a>,
}

/// The inside of [`V1Error`].
#[derive(Debug, Serialize, JsonSchema)]
pub struct V1ErrorBody<'a> {
    /// Stable snake_case code, as under `/api/v1`.
    pub code: &'a str,
    /// Human-readable text.
    pub message: &'a str,
    /// OpenAI's error type (`invalid_request_error`, `authentication_error`, …).
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// The error body of the message-style routes (`/v1/messages…`): Anthropic's shape,
/// `{"type": "error", "error": {"type", "message"}}`, which its SDKs read, with the gateway's
/// stable `code` kept inside.
#[derive(Debug, Serialize, JsonSchema)]
pub struct MessagesError<'a> {
    /// Always `error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The error.
    pub error: MessagesErrorBody<'a>,
}

/// The inside of [`MessagesError`].
#[derive(Debug, Serialize, JsonSchema)]
pub struct MessagesErrorBody<'a> {
    /// Anthropic's error type (`invalid_request_error`, `authentication_error`, …).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Human-readable text.
    pub message: &'a str,
    /// Stable snake_case code, as under `/api/v1`.
    pub code: &'a str,
}

/// The `type` Anthropic's error bodies carry for a status.
fn anthropic_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// Whether `path` (under `/v1`) is one of the message-style routes (`/v1/messages`, its
/// `count_tokens`, and their `/v1/v1` twins), whose errors take Anthropic's shape.
fn message_style(path: &str) -> bool {
    path.split('/').any(|segment| segment == "messages")
}

/// Writes an error answer of a `/v1` request at `path` in the `/v1` dialect (see [`V1Error`], and
/// [`MessagesError`] for the message-style routes); other answers are left as they are.
pub(crate) fn dialect(path: &str, response: &mut Response) {
    let Some(error) = response.extensions_mut().remove::<ApiError>() else { return };
    let rewritten = if message_style(path) {
        let body = MessagesError {
            kind: "error",
            error: MessagesErrorBody { kind: anthropic_type(error.status), message: &error.message, code: error.code },
        };
        json_response(error.status, &body)
    } else {
        let body = V1Error {
            error: V1ErrorBody { code: error.code, message: &error.message, kind: openai_type(error.status) },
        };
        json_response(error.status, &body)
    };
    let (parts, _) = std::mem::replace(response, rewritten).into_parts();
    for (name, value) in &parts.headers {
        if name != http::header::CONTENT_TYPE && name != http::header::CONTENT_LENGTH {
            response.headers_mut().insert(name.clone(), value.clone());
        }
    }
}

/// The 404 of a `/v1` path no route has: it names what this gateway serves there.
pub(crate) fn not_served(path: &str, served: &[&str]) -> ApiError {
    ApiError::not_found(format!("{path} is not served by this gateway; under /v1 it serves {}", served.join(", ")))
}

/// The members of a stored audio answer that `/v1/audio/speech` answers with.
#[derive(serde::Deserialize)]
struct StoredAudio<'a> {
    #[serde(borrow)]
    audio: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    task_id: std::borrow::Cow<'a, str>,
    billing: StoredBilling<'a>,
}

/// The billing of a stored audio answer: what was charged.
#[derive(serde::Deserialize)]
struct StoredBilling<'a> {
    #[serde(borrow, default)]
    actual_amount: Option<std::borrow::Cow<'a, str>>,
}

/// The `/v1/audio/speech` answer made from the audio answer `json` (what `/api/v1/audio/generations`
/// answers, and what an `Idempotency-Key` keeps): the audio's bytes, typed by their first bytes,
/// with the task in `x-svc-task-id` and the charge in `x-svc-billed-usd`.
pub(crate) fn speech_answer(json: &[u8]) -> Result<Response, ApiError> {
    use base64::Engine as _;
    let internal = |e: String| ApiError::from(service::ServiceError::Internal(e));
    let stored: StoredAudio<'_> = serde_json::from_slice(json).map_err(|e| internal(format!("audio answer: {e}")))?;
    let audio = base64::engine::general_purpose::STANDARD
        .decode(stored.audio.as_bytes())
        .map_err(|e| internal(format!("the upstream's audio is not Base64: {e}")))?;
    let content_type = match audio.get(..4) {
        Some(b"RIFF") => "audio/wav",
        Some(b"OggS") => "audio/ogg",
        Some(b"fLaC") => "audio/flac",
        Some([b'I', b'D', b'3', _] | [0xff, 0xf0..=0xff, _, _]) => "audio/mpeg",
        _ => "application/octet-stream",
    };
    let mut response = http::Response::new(crate::response::full(audio));
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    let header = |text: &str| http::HeaderValue::from_str(text).map_err(|e| internal(e.to_string()));
    headers.insert("x-svc-task-id", header(&stored.task_id)?);
    if let Some(charged) = stored.billing.actual_amount.as_deref() {
        headers.insert("x-svc-billed-usd", header(charged)?);
    }
    Ok(response)
}
