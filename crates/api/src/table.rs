//! The route table: every route the gateway serves, declared once ([`ROUTES`]), and the dispatcher
//! that serves a request from it. For each route the table says its method and path, who may call
//! it (checked here, before its handler runs), its body and body limit (the only limit its handler
//! can read with), what it does to state (held by `crates/api/tests/every_door.rs`), its handler and
//! its OpenAPI operation. 404 and 405, the metrics label and `/openapi.json` come from the table.
//!
//! Chosen over axum's `Router` and `utoipa`'s path macros (2026-11-29): the edge is hyper without a
//! framework, and a plain `static` of struct literals keeps every rule of a route in one place that
//! a test can walk, with no macro between the reader and the declaration.

use std::sync::LazyLock;

use domain::Scope;
use http::Method;
use http::request::Parts;
use hyper::body::Incoming;

use crate::ctx::Ctx;
use crate::error::ApiError;
use crate::manage::alerts as aops;
use crate::manage::ops as mops;
use crate::manage::payments as pops;
use crate::manage::vouchers as vops;
use crate::response::Response;
use crate::route::{Auth, BodyKind, Effect, Route, find};
use crate::state::AppState;
use crate::{handlers, manage, ops, tasks};

/// Largest chat request body (also the native formats'): 100 MB.
pub const CHAT_BODY_LIMIT: u64 = 100 * 1024 * 1024;

/// Largest image request body: 600 MiB. The largest valid request carries 14 references of 30 MiB
/// decoded (41,943,040 Base64 characters each, with their `data:` prefix about 587.2 MB together)
/// and a 12,000-character prompt (at most 144 KB even fully escaped), so it fits with room for the
/// other fields.
pub const IMAGE_BODY_LIMIT: u64 = 600 * 1024 * 1024;

/// Largest audio request body: 64 MiB. Three 10 MiB Base64 references take about 42 MB.
pub const AUDIO_BODY_LIMIT: u64 = 64 * 1024 * 1024;

/// Largest `/v1/audio/speech` body: 64 KiB. It carries no media: at most 3,000 characters of text
/// (12 KB fully escaped as `\uXXXX`… 18 KB), a voice name and three small settings.
pub const SPEECH_BODY_LIMIT: u64 = 64 * 1024;

/// Largest management request body: 64 KiB (the largest, a price sheet, is a few hundred bytes).
pub const MANAGE_BODY_LIMIT: u64 = 64 * 1024;

/// A table entry's handler: the async function `$f`, boxed.
macro_rules! h {
    ($f:path) => {
        |ctx| Box::pin($f(ctx))
    };
}

use Auth::{Key, KeyOrXApiKey, Operator, Public};
use BodyKind::Json;
use Effect::{Audited, Billed, Read};

const NO_BODY: BodyKind = BodyKind::None;
const MANAGE: BodyKind = Json(MANAGE_BODY_LIMIT);

/// Every route. Routes that share a path are listed in the order their `Allow` header names them.
/// The billable calls come first: the dispatcher walks the table in order.
pub static ROUTES: &[Route] = &[
    Route {
        method: Method::POST,
        path: "/api/v1/chat/completions",
        aliases: &["/v1/chat/completions"],
        auth: Key(Scope::LanguageCreate),
        body: Json(CHAT_BODY_LIMIT),
        effect: Billed,
        summary: "Chat completion (streaming with `stream: true`), billed on the reported usage",
        handler: h!(handlers::chat),
        doc: ops::chat,
    },
    Route {
        method: Method::POST,
        path: "/v1/messages",
        aliases: &["/v1/v1/messages"],
        auth: KeyOrXApiKey(Scope::LanguageCreate),
        body: Json(CHAT_BODY_LIMIT),
        effect: Billed,
        summary: "Message-style chat (Anthropic format); also served at /v1/v1/messages",
        handler: h!(handlers::messages),
        doc: ops::messages,
    },
    Route {
        method: Method::POST,
        path: "/v1/messages/count_tokens",
        aliases: &["/v1/v1/messages/count_tokens"],
        auth: KeyOrXApiKey(Scope::LanguageCreate),
        body: Json(CHAT_BODY_LIMIT),
        effect: Read,
        summary: "The prompt tokens a message-style body would send, estimated; nothing is held or billed",
        handler: h!(handlers::count_tokens),
        doc: ops::count_tokens,
    },
    Route {
        method: Method::POST,
        path: "/v1/responses",
        aliases: &["/v1/v1/responses"],
        auth: Key(Scope::LanguageCreate),
        body: Json(CHAT_BODY_LIMIT),
        effect: Billed,
        summary: "Response-style chat (OpenAI Responses format); also served at /v1/v1/responses",
        handler: h!(handlers::responses),
        doc: ops::responses,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/images/generations",
        aliases: &["/v1/images/generations"],
        auth: Key(Scope::ImageCreate),
        body: Json(IMAGE_BODY_LIMIT),
        effect: Billed,
        summary: "Image generation, billed per generated image",
        handler: h!(handlers::image),
        doc: ops::image,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/audio/generations",
        aliases: &[],
        auth: Key(Scope::AudioCreate),
        body: Json(AUDIO_BODY_LIMIT),
        effect: Billed,
        summary: "Speech generation, billed on the reported duration",
        handler: h!(handlers::audio),
        doc: ops::audio,
    },
    Route {
        method: Method::POST,
        path: "/v1/audio/speech",
        aliases: &[],
        auth: Key(Scope::AudioCreate),
        body: Json(SPEECH_BODY_LIMIT),
        effect: Billed,
        summary: "Speech in OpenAI's shape: billed as an audio generation, answered with the audio's bytes",
        handler: h!(handlers::speech),
        doc: ops::speech,
    },
    Route {
        method: Method::GET,
        path: "/healthz",
        aliases: &[],
        auth: Public,
        body: NO_BODY,
        effect: Read,
        summary: "Liveness",
        handler: h!(handlers::healthz),
        doc: ops::healthz,
    },
    Route {
        method: Method::GET,
        path: "/readyz",
        aliases: &[],
        auth: Public,
        body: NO_BODY,
        effect: Read,
        summary: "Readiness: the database answers and has every migration of this version",
        handler: h!(handlers::readyz),
        doc: ops::readyz,
    },
    Route {
        method: Method::GET,
        path: "/metrics",
        aliases: &[],
        auth: Auth::MetricsToken,
        body: NO_BODY,
        effect: Read,
        summary: "Prometheus metrics of this replica (OpenMetrics text)",
        handler: h!(handlers::metrics),
        doc: ops::metrics,
    },
    Route {
        method: Method::GET,
        path: "/openapi.json",
        aliases: &[],
        auth: Public,
        body: NO_BODY,
        effect: Read,
        summary: "This document",
        handler: h!(openapi_json),
        doc: ops::openapi,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/models",
        aliases: &[],
        auth: Key(Scope::ModelsRead),
        body: NO_BODY,
        effect: Read,
        summary: "Enabled models with limits, capabilities, active pricing and request/response schemas",
        handler: h!(handlers::list_models),
        doc: ops::list_models,
    },
    Route {
        method: Method::GET,
        path: "/v1/models",
        aliases: &[],
        auth: KeyOrXApiKey(Scope::ModelsRead),
        body: NO_BODY,
        effect: Read,
        summary: "Enabled models in OpenAI's list shape, or Anthropic's when `anthropic-version` is sent",
        handler: h!(crate::v1::models),
        doc: ops::v1_models,
    },
    Route {
        method: Method::GET,
        path: "/v1/models/{model}",
        aliases: &[],
        auth: KeyOrXApiKey(Scope::ModelsRead),
        body: NO_BODY,
        effect: Read,
        summary: "One enabled model in OpenAI's shape, or Anthropic's when `anthropic-version` is sent",
        handler: h!(crate::v1::model),
        doc: ops::v1_model,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/overview",
        aliases: &[],
        auth: Key(Scope::OverviewRead),
        body: NO_BODY,
        effect: Read,
        summary: "The caller, balance, task counts, models and newest ledger entries",
        handler: h!(handlers::overview),
        doc: ops::overview,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/keys",
        aliases: &[],
        auth: Key(Scope::OverviewRead),
        body: NO_BODY,
        effect: Read,
        summary: "The caller's keys with their limits, their budget's spend this period and what each spent",
        handler: h!(handlers::list_keys),
        doc: ops::list_keys,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/keys",
        aliases: &[],
        auth: Key(Scope::KeysManage),
        body: MANAGE,
        effect: Audited("key.create"),
        summary: "A new key for the caller, with scopes the calling key carries; the secret is shown once",
        handler: h!(manage::create_key),
        doc: mops::create_key,
    },
    Route {
        method: Method::DELETE,
        path: "/api/v1/keys/{key_id}",
        aliases: &[],
        auth: Key(Scope::KeysManage),
        body: NO_BODY,
        effect: Audited("key.revoke"),
        summary: "Revoke one of the caller's keys (the one in use too)",
        handler: h!(manage::revoke_key),
        doc: mops::revoke_key,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/webhook-secret",
        aliases: &[],
        auth: Key(Scope::KeysManage),
        body: NO_BODY,
        effect: Audited("user.webhook_secret"),
        summary: "Replace the caller's webhook secret; the new one is shown once",
        handler: h!(manage::rotate_webhook_secret),
        doc: mops::rotate_webhook_secret,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/vouchers/redeem",
        aliases: &[],
        auth: Key(Scope::BillingManage),
        body: MANAGE,
        effect: Audited("voucher.redeem"),
        summary: "Redeem a voucher code: its amount is credited once, in the commit that marks it redeemed",
        handler: h!(manage::vouchers::redeem),
        doc: vops::redeem_op,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/alerts",
        aliases: &[],
        auth: Key(Scope::BillingManage),
        body: NO_BODY,
        effect: Read,
        summary: "The caller's low-balance alert, whether it is armed, and the balance",
        handler: h!(manage::alerts::get),
        doc: aops::get_op,
    },
    Route {
        method: Method::PUT,
        path: "/api/v1/alerts",
        aliases: &[],
        auth: Key(Scope::BillingManage),
        body: MANAGE,
        effect: Audited("alert.set"),
        summary: "Set the low-balance alert (a `balance.low` webhook once per fall below it), or switch it off",
        handler: h!(manage::alerts::put),
        doc: aops::put_op,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/topups/checkout",
        aliases: &[],
        auth: Key(Scope::BillingManage),
        body: MANAGE,
        effect: Read,
        summary: "A hosted Stripe Checkout page to add funds; the balance rises when Stripe says it was paid",
        handler: h!(manage::payments::checkout),
        doc: pops::checkout_op,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/stripe/webhook",
        aliases: &[],
        auth: Auth::ProcessorSignature,
        body: MANAGE,
        effect: Billed,
        summary: "Stripe's signed events: a paid Checkout Session is credited once; no API key",
        handler: h!(manage::payments::stripe_webhook),
        doc: pops::stripe_webhook_op,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/usage",
        aliases: &[],
        auth: Key(Scope::OverviewRead),
        body: NO_BODY,
        effect: Read,
        summary: "The caller's settled spend per UTC day (every day of the range) or per model",
        handler: h!(manage::usage),
        doc: mops::usage,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/ledger",
        aliases: &[],
        auth: Key(Scope::OverviewRead),
        body: NO_BODY,
        effect: Read,
        summary: "Every ledger entry of the caller, newest first",
        handler: h!(manage::ledger),
        doc: mops::ledger,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/ledger/export",
        aliases: &[],
        auth: Key(Scope::OverviewRead),
        body: NO_BODY,
        effect: Read,
        summary: "The caller's ledger entries of a range of UTC days as CSV, in time order, streamed",
        handler: h!(manage::exports::ledger),
        doc: mops::ledger_export,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/usage/export",
        aliases: &[],
        auth: Key(Scope::OverviewRead),
        body: NO_BODY,
        effect: Read,
        summary: "The caller's calls whose hold ended in a range of UTC days as CSV, one line per task, streamed",
        handler: h!(manage::exports::usage),
        doc: mops::usage_export,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/statements/{month}",
        aliases: &[],
        auth: Key(Scope::OverviewRead),
        body: NO_BODY,
        effect: Read,
        summary: "The caller's statement of a UTC month: opening and closing balance, credits, charges, refunds, holds",
        handler: h!(manage::statements::statement_of_month),
        doc: mops::statement,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/chat/completions/quote",
        aliases: &[],
        auth: Key(Scope::LanguageCreate),
        body: Json(CHAT_BODY_LIMIT),
        effect: Read,
        summary: "What a chat call with this body would hold, at which price; nothing is held",
        handler: h!(manage::quote_chat),
        doc: mops::quote_chat,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/images/generations/quote",
        aliases: &[],
        auth: Key(Scope::ImageCreate),
        body: Json(IMAGE_BODY_LIMIT),
        effect: Read,
        summary: "What an image call with this body would hold, at which price; nothing is held",
        handler: h!(manage::quote_image),
        doc: mops::quote_image,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/tasks",
        aliases: &[],
        auth: Key(Scope::TaskRead),
        body: NO_BODY,
        effect: Read,
        summary: "The caller's tasks, newest first",
        handler: h!(handlers::list_tasks),
        doc: ops::list_tasks,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/tasks",
        aliases: &[],
        auth: Key(Scope::VideoCreate),
        body: BodyKind::JsonOrMultipart(tasks::TASK_REQUEST_LIMIT),
        effect: Billed,
        summary: "Create a video task (JSON, or multipart with uploaded media); answers at once",
        handler: h!(tasks::create),
        doc: ops::create_task,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/tasks/{task_id}",
        aliases: &[],
        auth: Key(Scope::TaskRead),
        body: NO_BODY,
        effect: Read,
        summary: "One of the caller's tasks",
        handler: h!(handlers::get_task),
        doc: ops::get_task,
    },
    Route {
        method: Method::DELETE,
        path: "/api/v1/tasks/{task_id}",
        aliases: &[],
        auth: Key(Scope::TaskWrite),
        body: NO_BODY,
        effect: Billed,
        summary: "Cancel a queued video task; its hold is refunded",
        handler: h!(tasks::cancel),
        doc: ops::cancel_task,
    },
    Route {
        method: Method::GET,
        path: "/media/{key+}",
        aliases: &[],
        auth: Auth::SignedLink,
        body: NO_BODY,
        effect: Read,
        summary: "A stored media object through a signed, expiring link (no key)",
        handler: h!(tasks::media),
        doc: ops::media,
    },
    Route {
        method: Method::GET,
        path: "/console/{path*}",
        aliases: &[],
        auth: Public,
        body: NO_BODY,
        effect: Read,
        summary: "The web console (HTML; its scripts and styles are served under /console/); no key, it signs in itself",
        handler: h!(handlers::console),
        doc: ops::console,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/users",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Read,
        summary: "Operator: users, newest first; `q` searches id, name and email",
        handler: h!(manage::users),
        doc: mops::users,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/admin/users",
        aliases: &[],
        auth: Operator,
        body: MANAGE,
        effect: Audited("user.create"),
        summary: "Operator: create a user; its webhook secret is shown once",
        handler: h!(manage::create_user),
        doc: mops::create_user,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/vouchers",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Read,
        summary: "Operator: voucher batches, newest first, with how many codes were redeemed",
        handler: h!(manage::vouchers::list),
        doc: vops::list_op,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/admin/vouchers",
        aliases: &[],
        auth: Operator,
        body: MANAGE,
        effect: Audited("voucher.create"),
        summary: "Operator: mint a batch of voucher codes; the codes are shown once and stored hashed",
        handler: h!(manage::vouchers::create),
        doc: vops::create_op,
    },
    Route {
        method: Method::DELETE,
        path: "/api/v1/admin/vouchers/{batch_id}",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Audited("voucher.revoke"),
        summary: "Operator: revoke a batch's codes not redeemed yet",
        handler: h!(manage::vouchers::revoke),
        doc: vops::revoke_op,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/users/{user_id}",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Read,
        summary: "Operator: a user with balance, caps, quota and keys",
        handler: h!(manage::user),
        doc: mops::user,
    },
    Route {
        method: Method::PATCH,
        path: "/api/v1/admin/users/{user_id}",
        aliases: &[],
        auth: Operator,
        body: MANAGE,
        effect: Audited("user.change"),
        summary: "Operator: disable or enable a user, or change its caps",
        handler: h!(manage::change_user),
        doc: mops::change_user,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/admin/users/{user_id}/topup",
        aliases: &[],
        auth: Operator,
        body: MANAGE,
        effect: Audited("user.topup"),
        summary: "Operator: add money to a user's balance",
        handler: h!(manage::topup),
        doc: mops::topup,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/admin/users/{user_id}/keys",
        aliases: &[],
        auth: Operator,
        body: MANAGE,
        effect: Audited("key.create"),
        summary: "Operator: a key for a user, with any scopes; the secret is shown once",
        handler: h!(manage::create_user_key),
        doc: mops::create_user_key,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/admin/users/{user_id}/webhook-secret",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Audited("user.webhook_secret"),
        summary: "Operator: replace a user's webhook secret; the new one is shown once",
        handler: h!(manage::rotate_user_secret),
        doc: mops::rotate_user_secret,
    },
    Route {
        method: Method::DELETE,
        path: "/api/v1/admin/keys/{key_id}",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Audited("key.revoke"),
        summary: "Operator: revoke any key",
        handler: h!(manage::revoke_any_key),
        doc: mops::revoke_any_key,
    },
    Route {
        method: Method::PATCH,
        path: "/api/v1/admin/keys/{key_id}",
        aliases: &[],
        auth: Operator,
        body: MANAGE,
        effect: Audited("key.limits"),
        summary: "Operator: set or clear a key's expiry, model allow-list, budget, rate limits or address list",
        handler: h!(manage::change_key),
        doc: mops::change_key,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/models",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Read,
        summary: "Operator: every model, enabled or not, with cap and active price",
        handler: h!(manage::models),
        doc: mops::models,
    },
    Route {
        method: Method::PATCH,
        path: "/api/v1/admin/models/{model}",
        aliases: &[],
        auth: Operator,
        body: MANAGE,
        effect: Audited("model.set"),
        summary: "Operator: switch a model on or off, or change its cap",
        handler: h!(manage::change_model),
        doc: mops::change_model,
    },
    Route {
        method: Method::POST,
        path: "/api/v1/admin/models/{model}/pricing",
        aliases: &[],
        auth: Operator,
        body: MANAGE,
        effect: Audited("model.price"),
        summary: "Operator: a new price version, active at once",
        handler: h!(manage::set_price),
        doc: mops::set_price,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/maintenance",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Read,
        summary: "Operator: whether maintenance mode is on",
        handler: h!(manage::maintenance),
        doc: mops::maintenance,
    },
    Route {
        method: Method::PUT,
        path: "/api/v1/admin/maintenance",
        aliases: &[],
        auth: Operator,
        body: MANAGE,
        effect: Audited("maintenance"),
        summary: "Operator: turn maintenance mode on or off",
        handler: h!(manage::set_maintenance),
        doc: mops::set_maintenance,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/audit",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Read,
        summary: "Operator: every operator action, newest first",
        handler: h!(manage::audit),
        doc: mops::audit,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/health",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Read,
        summary: "Operator: calls in flight and queued, open reservations, video worker lag, upstream endpoints",
        handler: h!(manage::health),
        doc: mops::health,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/revenue",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Read,
        summary: "Operator: the gateway's month: charges by model and by user, credits by kind, refunds",
        handler: h!(manage::statements::revenue_of_month),
        doc: mops::revenue,
    },
    Route {
        method: Method::GET,
        path: "/api/v1/admin/tasks/{task_id}",
        aliases: &[],
        auth: Operator,
        body: NO_BODY,
        effect: Read,
        summary: "Operator: any user's task, with the endpoint that served it and the attempts it made",
        handler: h!(manage::admin_task),
        doc: mops::admin_task,
    },
];

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
async fn openapi_json(_: Ctx<'_>) -> Result<Response, ApiError> {
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
    if let Err(e) = auth::authenticate(&mut ctx, route.auth).await {
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

mod auth;
#[cfg(test)]
mod tests;
