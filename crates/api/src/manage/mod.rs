//! The management API: the caller's usage, ledger, keys and webhook secret, and the operator
//! routes under `/api/v1/admin/` (users, top-ups, models, prices, maintenance, audit). Each route
//! authenticates with its scope, reads a small typed body (`validation::manage_body`) and calls
//! the same service use cases as `gateway admin …`.

pub(crate) mod openapi;
pub mod wire;

use domain::{Actor, ApiKeyId, Scope, UsdAmount, UserChange, UserId};
use http::request::Parts;
use http::{Method, StatusCode};
use hyper::body::Incoming;
use service::{Gateway, NewUserRequest, Principal};
use validation::{MaintenanceBody, ModelPatchBody, NewKeyBody, NewUserBody, TopupBody, UserPatchBody, manage_body};

use crate::body::read_json;
use crate::error::ApiError;
use crate::headers::bearer;
use crate::response::{Response, json_response, ok_json};
use crate::routes::decode_query;
use crate::state::{AppState, client_ip};

/// Largest management request body: 64 KiB (the largest, a price sheet, is a few hundred bytes).
pub const MANAGE_BODY_LIMIT: u64 = 64 * 1024;

/// The management routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManageRoute {
    /// `GET /api/v1/usage`.
    Usage,
    /// `GET /api/v1/ledger`.
    Ledger,
    /// `POST /api/v1/keys`.
    CreateKey,
    /// `DELETE /api/v1/keys/{key_id}`.
    RevokeKey(String),
    /// `POST /api/v1/webhook-secret`.
    RotateWebhookSecret,
    /// `GET /api/v1/admin/users`.
    Users,
    /// `POST /api/v1/admin/users`.
    CreateUser,
    /// `GET /api/v1/admin/users/{user_id}`.
    User(String),
    /// `PATCH /api/v1/admin/users/{user_id}`.
    ChangeUser(String),
    /// `POST /api/v1/admin/users/{user_id}/topup`.
    Topup(String),
    /// `GET /api/v1/admin/models`.
    Models,
    /// `PATCH /api/v1/admin/models/{model}`.
    ChangeModel(String),
    /// `POST /api/v1/admin/models/{model}/pricing`.
    SetPrice(String),
    /// `GET /api/v1/admin/maintenance`.
    Maintenance,
    /// `PUT /api/v1/admin/maintenance`.
    SetMaintenance,
    /// `GET /api/v1/admin/audit`.
    Audit,
    /// `GET /api/v1/admin/health`.
    Health,
    /// `POST /api/v1/admin/users/{user_id}/keys`.
    CreateUserKey(String),
    /// `DELETE /api/v1/admin/keys/{key_id}`.
    RevokeAnyKey(String),
    /// `PATCH /api/v1/admin/keys/{key_id}`: a key's limits.
    ChangeKey(String),
    /// `POST /api/v1/admin/users/{user_id}/webhook-secret`.
    RotateUserSecret(String),
    /// `GET /api/v1/admin/tasks/{task_id}`: any user's task, with its upstream record.
    AdminTask(String),
    /// `POST /api/v1/chat/completions/quote`: the hold a chat call would take.
    QuoteChat,
    /// `POST /api/v1/images/generations/quote`: the hold an image call would take.
    QuoteImage,
}

impl ManageRoute {
    /// The path template, as the `route` label of the request metrics.
    pub const fn label(&self) -> &'static str {
        match self {
            ManageRoute::Usage => "/api/v1/usage",
            ManageRoute::Ledger => "/api/v1/ledger",
            ManageRoute::CreateKey => "/api/v1/keys",
            ManageRoute::RevokeKey(_) => "/api/v1/keys/{key_id}",
            ManageRoute::RotateWebhookSecret => "/api/v1/webhook-secret",
            ManageRoute::Users | ManageRoute::CreateUser => "/api/v1/admin/users",
            ManageRoute::User(_) | ManageRoute::ChangeUser(_) => "/api/v1/admin/users/{user_id}",
            ManageRoute::Topup(_) => "/api/v1/admin/users/{user_id}/topup",
            ManageRoute::Models => "/api/v1/admin/models",
            ManageRoute::ChangeModel(_) => "/api/v1/admin/models/{model}",
            ManageRoute::SetPrice(_) => "/api/v1/admin/models/{model}/pricing",
            ManageRoute::Maintenance | ManageRoute::SetMaintenance => "/api/v1/admin/maintenance",
            ManageRoute::Audit => "/api/v1/admin/audit",
            ManageRoute::Health => "/api/v1/admin/health",
            ManageRoute::CreateUserKey(_) => "/api/v1/admin/users/{user_id}/keys",
            ManageRoute::RevokeAnyKey(_) | ManageRoute::ChangeKey(_) => "/api/v1/admin/keys/{key_id}",
            ManageRoute::RotateUserSecret(_) => "/api/v1/admin/users/{user_id}/webhook-secret",
            ManageRoute::AdminTask(_) => "/api/v1/admin/tasks/{task_id}",
            ManageRoute::QuoteChat => "/api/v1/chat/completions/quote",
            ManageRoute::QuoteImage => "/api/v1/images/generations/quote",
        }
    }
}

impl ManageRoute {
    /// What the route does to the gateway's state (see [`crate::routes::Effect`]).
    pub const fn effect(&self) -> crate::routes::Effect {
        use crate::routes::Effect::{Audited, Read};
        match self {
            ManageRoute::Usage
            | ManageRoute::Ledger
            | ManageRoute::Users
            | ManageRoute::User(_)
            | ManageRoute::Models
            | ManageRoute::Maintenance
            | ManageRoute::Audit
            | ManageRoute::Health
            | ManageRoute::AdminTask(_)
            | ManageRoute::QuoteChat
            | ManageRoute::QuoteImage => Read,
            ManageRoute::CreateKey | ManageRoute::CreateUserKey(_) => Audited("key.create"),
            ManageRoute::RevokeKey(_) | ManageRoute::RevokeAnyKey(_) => Audited("key.revoke"),
            ManageRoute::ChangeKey(_) => Audited("key.limits"),
            ManageRoute::RotateWebhookSecret | ManageRoute::RotateUserSecret(_) => Audited("user.webhook_secret"),
            ManageRoute::CreateUser => Audited("user.create"),
            ManageRoute::ChangeUser(_) => Audited("user.change"),
            ManageRoute::Topup(_) => Audited("user.topup"),
            ManageRoute::ChangeModel(_) => Audited("model.set"),
            ManageRoute::SetPrice(_) => Audited("model.price"),
            ManageRoute::SetMaintenance => Audited("maintenance"),
        }
    }
}

/// The management route for `method` and the path's `segments` (after `/api/v1/`): `None` when
/// the path is not one of them, `Err` (405 with `Allow`) for a known path and another method.
/// `GET /api/v1/keys` stays a route of its own; only its `POST` is here.
pub(crate) fn route(method: &Method, segments: &[&str]) -> Option<Result<ManageRoute, ApiError>> {
    let get = *method == Method::GET || *method == Method::HEAD;
    let owned = |s: &&str| (*s).to_owned();
    let pick = |choices: &[(bool, ManageRoute)], allow: &'static str| {
        Some(choices.iter().find(|(ok, _)| *ok).map(|(_, r)| r.clone()).ok_or(ApiError::method_not_allowed(allow)))
    };
    match segments {
        ["usage"] => pick(&[(get, ManageRoute::Usage)], "GET"),
        ["ledger"] => pick(&[(get, ManageRoute::Ledger)], "GET"),
        ["keys", id] if !id.is_empty() => {
            pick(&[(*method == Method::DELETE, ManageRoute::RevokeKey(owned(id)))], "DELETE")
        }
        ["webhook-secret"] => pick(&[(*method == Method::POST, ManageRoute::RotateWebhookSecret)], "POST"),
        ["admin", "users"] => {
            pick(&[(get, ManageRoute::Users), (*method == Method::POST, ManageRoute::CreateUser)], "GET, POST")
        }
        ["admin", "users", id] if !id.is_empty() => pick(
            &[(get, ManageRoute::User(owned(id))), (*method == Method::PATCH, ManageRoute::ChangeUser(owned(id)))],
            "GET, PATCH",
        ),
        ["admin", "users", id, "topup"] if !id.is_empty() => {
            pick(&[(*method == Method::POST, ManageRoute::Topup(owned(id)))], "POST")
        }
        ["admin", "models"] => pick(&[(get, ManageRoute::Models)], "GET"),
        ["admin", "models", name] if !name.is_empty() => {
            pick(&[(*method == Method::PATCH, ManageRoute::ChangeModel(owned(name)))], "PATCH")
        }
        ["admin", "models", name, "pricing"] if !name.is_empty() => {
            pick(&[(*method == Method::POST, ManageRoute::SetPrice(owned(name)))], "POST")
        }
        ["admin", "maintenance"] => {
            pick(&[(get, ManageRoute::Maintenance), (*method == Method::PUT, ManageRoute::SetMaintenance)], "GET, PUT")
        }
        ["admin", "audit"] => pick(&[(get, ManageRoute::Audit)], "GET"),
        ["admin", "health"] => pick(&[(get, ManageRoute::Health)], "GET"),
        ["admin", "users", id, "keys"] if !id.is_empty() => {
            pick(&[(*method == Method::POST, ManageRoute::CreateUserKey(owned(id)))], "POST")
        }
        ["admin", "keys", id] if !id.is_empty() => pick(
            &[
                (*method == Method::DELETE, ManageRoute::RevokeAnyKey(owned(id))),
                (*method == Method::PATCH, ManageRoute::ChangeKey(owned(id))),
            ],
            "DELETE, PATCH",
        ),
        ["admin", "users", id, "webhook-secret"] if !id.is_empty() => {
            pick(&[(*method == Method::POST, ManageRoute::RotateUserSecret(owned(id)))], "POST")
        }
        ["admin", "tasks", id] if !id.is_empty() => pick(&[(get, ManageRoute::AdminTask(owned(id)))], "GET"),
        ["chat", "completions", "quote"] => pick(&[(*method == Method::POST, ManageRoute::QuoteChat)], "POST"),
        ["images", "generations", "quote"] => pick(&[(*method == Method::POST, ManageRoute::QuoteImage)], "POST"),
        _ => None,
    }
}

async fn auth(gateway: &Gateway, parts: &Parts, scope: Scope) -> Result<Principal, ApiError> {
    Ok(gateway.authenticate(bearer(&parts.headers), scope, client_ip(parts)).await?)
}

/// Reads the request's JSON body (at most [`MANAGE_BODY_LIMIT`]) into `T` and checks its rules.
async fn body<T>(state: &AppState, parts: &Parts, who: &Principal, body: Incoming) -> Result<T, ApiError>
where
    T: for<'de> serde::Deserialize<'de> + validation::Validate,
{
    let bytes =
        read_json(&parts.headers, body, MANAGE_BODY_LIMIT, state.body_budget(), who.user_id.as_str(), state.pace())
            .await?;
    Ok(manage_body(&bytes).map_err(service::ServiceError::from)?)
}

fn params(parts: &Parts) -> Result<Vec<(String, String)>, ApiError> {
    decode_query(parts.uri.query())
}

fn pairs(params: &[(String, String)]) -> impl Iterator<Item = (&str, &str)> {
    params.iter().map(|(k, v)| (k.as_str(), v.as_str()))
}

fn amount(text: &str) -> Result<UsdAmount, ApiError> {
    UsdAmount::parse_decimal(text).map_err(|e| ApiError::invalid(format!("amount: {e}")))
}

/// The operator behind the request: a key of an `admin` user with the `admin` scope.
async fn admin(gateway: &Gateway, parts: &Parts) -> Result<(Principal, Actor), ApiError> {
    let who = auth(gateway, parts, Scope::Admin).await?;
    let actor = gateway.operator_actor(&who)?;
    Ok((who, actor))
}

/// Runs a management route.
pub(crate) async fn handle(
    state: &AppState,
    route: ManageRoute,
    parts: Parts,
    incoming: Incoming,
) -> Result<Response, ApiError> {
    let gateway = state.gateway();
    match route {
        ManageRoute::Usage => {
            let who = auth(gateway, &parts, Scope::OverviewRead).await?;
            Ok(ok_json(&wire::usage(&gateway.usage(&who, pairs(&params(&parts)?)).await?)))
        }
        ManageRoute::Ledger => {
            let who = auth(gateway, &parts, Scope::OverviewRead).await?;
            Ok(ok_json(&wire::ledger(&gateway.ledger_page(&who, pairs(&params(&parts)?)).await?)))
        }
        ManageRoute::CreateKey => {
            let who = auth(gateway, &parts, Scope::KeysManage).await?;
            let req: NewKeyBody = body(state, &parts, &who, incoming).await?;
            let limits = req.limits().map_err(service::ServiceError::from)?;
            let created = gateway.create_own_key(&who, &req.name, &req.scopes, limits).await?;
            Ok(json_response(StatusCode::CREATED, &wire::created_key(gateway, &created)))
        }
        ManageRoute::RevokeKey(id) => {
            let who = auth(gateway, &parts, Scope::KeysManage).await?;
            Ok(ok_json(&wire::revoked_key(&gateway.revoke_own_key(&who, &id).await?)))
        }
        ManageRoute::RotateWebhookSecret => {
            let who = auth(gateway, &parts, Scope::KeysManage).await?;
            let secret = gateway.rotate_own_webhook_secret(&who).await?;
            Ok(ok_json(&wire::WebhookSecretObject { webhook_secret: secret }))
        }
        ManageRoute::Users => {
            let (_, actor) = admin(gateway, &parts).await?;
            let page = gateway.operator(&actor).users(pairs(&params(&parts)?)).await?;
            Ok(ok_json(&wire::admin_users(&page)))
        }
        ManageRoute::User(id) => {
            let (_, actor) = admin(gateway, &parts).await?;
            let detail = gateway.operator(&actor).user_detail(&UserId(id)).await?;
            Ok(ok_json(&wire::admin_user_detail(&detail)))
        }
        ManageRoute::CreateUser => {
            let (who, actor) = admin(gateway, &parts).await?;
            let req: NewUserBody = body(state, &parts, &who, incoming).await?;
            let balance = amount(req.balance.as_deref().unwrap_or("0"))?;
            let created = gateway
                .operator(&actor)
                .create_user(NewUserRequest {
                    name: req.name,
                    email: req.email,
                    role: req.role.unwrap_or_else(|| "user".into()),
                    balance,
                    concurrency_limit: req.concurrency_limit.unwrap_or(16),
                    media_quota_bytes: req.media_quota_bytes.unwrap_or(1 << 30),
                })
                .await?;
            Ok(json_response(StatusCode::CREATED, &wire::created_user(&created)))
        }
        ManageRoute::ChangeUser(id) => {
            let (who, actor) = admin(gateway, &parts).await?;
            let req: UserPatchBody = body(state, &parts, &who, incoming).await?;
            let change = UserChange {
                disabled: req.disabled,
                concurrency_limit: req.concurrency_limit,
                media_quota_bytes: req.media_quota_bytes,
            };
            let user = gateway.operator(&actor).change_user(&UserId(id), change).await?;
            Ok(ok_json(&wire::admin_user(&user)))
        }
        ManageRoute::Topup(id) => {
            let (who, actor) = admin(gateway, &parts).await?;
            let req: TopupBody = body(state, &parts, &who, incoming).await?;
            let note = req.note.as_deref().unwrap_or("");
            let entry = gateway.operator(&actor).topup(&UserId(id), amount(&req.amount)?, note).await?;
            Ok(ok_json(&crate::wire::ledger_entry(&entry)))
        }
        ManageRoute::Models => {
            let (_, actor) = admin(gateway, &parts).await?;
            let operator = gateway.operator(&actor);
            let mut models = operator.models().await?;
            models.sort_by(|a, b| a.name.cmp(&b.name));
            let maintenance = operator.maintenance().await?;
            Ok(ok_json(&wire::AdminModelList { data: models.iter().map(wire::admin_model).collect(), maintenance }))
        }
        ManageRoute::ChangeModel(name) => {
            let (who, actor) = admin(gateway, &parts).await?;
            let req: ModelPatchBody = body(state, &parts, &who, incoming).await?;
            let model = gateway.operator(&actor).set_model(&name, req.enabled, req.concurrency_limit).await?;
            Ok(ok_json(&wire::admin_model(&model)))
        }
        ManageRoute::SetPrice(name) => {
            let (who, actor) = admin(gateway, &parts).await?;
            let bytes = read_json(
                &parts.headers,
                incoming,
                MANAGE_BODY_LIMIT,
                state.body_budget(),
                who.user_id.as_str(),
                state.pace(),
            )
            .await?;
            // A price sheet is the same JSON as the command line's rates file, read by the same
            // function (a map of rate names, so it has no fixed shape to type).
            let text = std::str::from_utf8(&bytes).map_err(|_| ApiError::invalid("the body is not UTF-8"))?;
            let sheet = catalog::parse_price_sheet(text).map_err(|e| ApiError::invalid(e.to_string()))?;
            let version = gateway.operator(&actor).set_price(&name, sheet).await?;
            Ok(json_response(StatusCode::CREATED, &wire::pricing_version(&version)))
        }
        ManageRoute::Maintenance => {
            let (_, actor) = admin(gateway, &parts).await?;
            Ok(ok_json(&wire::MaintenanceObject { enabled: gateway.operator(&actor).maintenance().await? }))
        }
        ManageRoute::SetMaintenance => {
            let (who, actor) = admin(gateway, &parts).await?;
            let req: MaintenanceBody = body(state, &parts, &who, incoming).await?;
            gateway.operator(&actor).set_maintenance(req.enabled).await?;
            Ok(ok_json(&wire::MaintenanceObject { enabled: req.enabled }))
        }
        ManageRoute::Audit => {
            let (_, actor) = admin(gateway, &parts).await?;
            let page = gateway.operator(&actor).audit(pairs(&params(&parts)?)).await?;
            Ok(ok_json(&wire::audit(&page)))
        }
        ManageRoute::Health => {
            admin(gateway, &parts).await?;
            Ok(ok_json(&wire::health(&gateway.health().await?)))
        }
        ManageRoute::CreateUserKey(id) => {
            let (who, actor) = admin(gateway, &parts).await?;
            let req: NewKeyBody = body(state, &parts, &who, incoming).await?;
            let scopes =
                Scope::parse_list(&req.scopes.join(",")).map_err(|e| ApiError::invalid(format!("scopes: {e}")))?;
            let limits = req.limits().map_err(service::ServiceError::from)?;
            let created = gateway.operator(&actor).create_key(&UserId(id), scopes, req.name.trim(), limits).await?;
            Ok(json_response(StatusCode::CREATED, &wire::created_key(gateway, &created)))
        }
        ManageRoute::RevokeAnyKey(id) => {
            let (_, actor) = admin(gateway, &parts).await?;
            let key = gateway.operator(&actor).revoke_key(&ApiKeyId(id)).await?;
            Ok(ok_json(&crate::wire::key(&gateway.view_key(key, None))))
        }
        ManageRoute::ChangeKey(id) => {
            let (who, actor) = admin(gateway, &parts).await?;
            let req: validation::KeyLimitsBody = body(state, &parts, &who, incoming).await?;
            let change = req.change().map_err(service::ServiceError::from)?;
            let key = gateway.operator(&actor).set_key_limits(&ApiKeyId(id), change).await?;
            // Shown as the key lists show it, with what it spent so far.
            let keys = gateway.list_keys(&key.user_id).await?;
            let view = keys.into_iter().find(|v| v.key.id == key.id).unwrap_or_else(|| gateway.view_key(key, None));
            Ok(ok_json(&crate::wire::key(&view)))
        }
        ManageRoute::RotateUserSecret(id) => {
            let (_, actor) = admin(gateway, &parts).await?;
            let secret = gateway.operator(&actor).rotate_webhook_secret(&UserId(id)).await?;
            Ok(ok_json(&wire::WebhookSecretObject { webhook_secret: secret }))
        }
        ManageRoute::AdminTask(id) => {
            admin(gateway, &parts).await?;
            let (task, record) = gateway.task_for_operator(&id).await?;
            Ok(ok_json(&wire::admin_task(&task, &record)))
        }
        ManageRoute::QuoteChat => {
            let who = auth(gateway, &parts, Scope::LanguageCreate).await?;
            let bytes = read_json(
                &parts.headers,
                incoming,
                crate::handlers::CHAT_BODY_LIMIT,
                state.body_budget(),
                who.user_id.as_str(),
                state.pace(),
            )
            .await?;
            Ok(ok_json(&wire::quote(&gateway.quote_chat(&who, &bytes).await?)))
        }
        ManageRoute::QuoteImage => {
            let who = auth(gateway, &parts, Scope::ImageCreate).await?;
            let bytes = read_json(
                &parts.headers,
                incoming,
                crate::handlers::IMAGE_BODY_LIMIT,
                state.body_budget(),
                who.user_id.as_str(),
                state.pace(),
            )
            .await?;
            Ok(ok_json(&wire::quote(&gateway.quote_image(&who, &bytes).await?)))
        }
    }
}
