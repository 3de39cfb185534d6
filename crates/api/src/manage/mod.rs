//! The management API's handlers: the caller's usage, ledger, keys and webhook secret, the quotes,
//! and the operator routes under `/api/v1/admin/` (users, top-ups, models, prices, maintenance,
//! audit). Each reads a small typed body (`validation::manage_body`, through [`Ctx::json`]) and calls
//! the same service use cases as `gateway admin …`; the route table authenticates the caller first.

pub mod alerts;
pub(crate) mod exports;
pub(crate) mod ops;
pub mod payments;
pub mod statements;
pub mod vouchers;
pub mod wire;

use domain::{ApiKeyId, Scope, UsdAmount, UserChange, UserId};
use http::StatusCode;
use service::NewUserRequest;
use validation::{MaintenanceBody, ModelPatchBody, NewKeyBody, NewUserBody, TopupBody, UserPatchBody};

use crate::ctx::{Ctx, pairs};
use crate::error::ApiError;
use crate::response::{Response, json_response, ok_json};

/// The result of a handler.
type Reply = Result<Response, ApiError>;

fn amount(text: &str) -> Result<UsdAmount, ApiError> {
    UsdAmount::parse_decimal(text).map_err(|e| ApiError::invalid(format!("amount: {e}")))
}

/// `GET /api/v1/usage`.
pub(crate) async fn usage(ctx: Ctx<'_>) -> Reply {
    let params = ctx.query()?;
    Ok(ok_json(&wire::usage(&ctx.gateway().usage(ctx.who()?, pairs(&params)).await?)))
}

/// `GET /api/v1/ledger`.
pub(crate) async fn ledger(ctx: Ctx<'_>) -> Reply {
    let params = ctx.query()?;
    Ok(ok_json(&wire::ledger(&ctx.gateway().ledger_page(ctx.who()?, pairs(&params)).await?)))
}

/// `POST /api/v1/keys`.
pub(crate) async fn create_key(mut ctx: Ctx<'_>) -> Reply {
    let req: NewKeyBody = ctx.json().await?;
    let limits = req.limits().map_err(service::ServiceError::from)?;
    let gateway = ctx.gateway();
    let created = gateway.create_own_key(ctx.who()?, &req.name, &req.scopes, limits).await?;
    Ok(json_response(StatusCode::CREATED, &wire::created_key(gateway, &created)))
}

/// `DELETE /api/v1/keys/{key_id}`.
pub(crate) async fn revoke_key(ctx: Ctx<'_>) -> Reply {
    Ok(ok_json(&wire::revoked_key(&ctx.gateway().revoke_own_key(ctx.who()?, ctx.param()).await?)))
}

/// `POST /api/v1/webhook-secret`.
pub(crate) async fn rotate_webhook_secret(ctx: Ctx<'_>) -> Reply {
    let secret = ctx.gateway().rotate_own_webhook_secret(ctx.who()?).await?;
    Ok(ok_json(&wire::WebhookSecretObject { webhook_secret: secret }))
}

/// `GET /api/v1/admin/users`.
pub(crate) async fn users(ctx: Ctx<'_>) -> Reply {
    let params = ctx.query()?;
    let page = ctx.gateway().operator(ctx.actor()?).users(pairs(&params)).await?;
    Ok(ok_json(&wire::admin_users(&page)))
}

/// `GET /api/v1/admin/users/{user_id}`.
pub(crate) async fn user(ctx: Ctx<'_>) -> Reply {
    let detail = ctx.gateway().operator(ctx.actor()?).user_detail(&UserId(ctx.param().to_owned())).await?;
    Ok(ok_json(&wire::admin_user_detail(&detail)))
}

/// `POST /api/v1/admin/users`.
pub(crate) async fn create_user(mut ctx: Ctx<'_>) -> Reply {
    let req: NewUserBody = ctx.json().await?;
    let balance = amount(req.balance.as_deref().unwrap_or("0"))?;
    let created = ctx
        .gateway()
        .operator(ctx.actor()?)
        .create_user(NewUserRequest {
            name: req.name,
            email: req.email,
            role: req.role.unwrap_or_else(|| "user".into()),
            balance,
            concurrency_limit: req.concurrency_limit.unwrap_or(service::NEW_USER_CONCURRENCY_LIMIT),
            media_quota_bytes: req.media_quota_bytes.unwrap_or(service::NEW_USER_MEDIA_QUOTA_BYTES),
        })
        .await?;
    Ok(json_response(StatusCode::CREATED, &wire::created_user(&created)))
}

/// `PATCH /api/v1/admin/users/{user_id}`.
pub(crate) async fn change_user(mut ctx: Ctx<'_>) -> Reply {
    let req: UserPatchBody = ctx.json().await?;
    let change = UserChange {
        disabled: req.disabled,
        concurrency_limit: req.concurrency_limit,
        media_quota_bytes: req.media_quota_bytes,
    };
    let user = ctx.gateway().operator(ctx.actor()?).change_user(&UserId(ctx.param().to_owned()), change).await?;
    Ok(ok_json(&wire::admin_user(&user)))
}

/// `POST /api/v1/admin/users/{user_id}/topup`.
pub(crate) async fn topup(mut ctx: Ctx<'_>) -> Reply {
    let req: TopupBody = ctx.json().await?;
    let note = req.note.as_deref().unwrap_or("");
    let user = UserId(ctx.param().to_owned());
    let entry = ctx.gateway().operator(ctx.actor()?).topup(&user, amount(&req.amount)?, note).await?;
    Ok(ok_json(&crate::wire::ledger_entry(&entry)))
}

/// `GET /api/v1/admin/models`.
pub(crate) async fn models(ctx: Ctx<'_>) -> Reply {
    let operator = ctx.gateway().operator(ctx.actor()?);
    let mut models = operator.models().await?;
    models.sort_by(|a, b| a.name.cmp(&b.name));
    let maintenance = operator.maintenance().await?;
    Ok(ok_json(&wire::AdminModelList { data: models.iter().map(wire::admin_model).collect(), maintenance }))
}

/// `PATCH /api/v1/admin/models/{model}`.
pub(crate) async fn change_model(mut ctx: Ctx<'_>) -> Reply {
    let req: ModelPatchBody = ctx.json().await?;
    let model = ctx.gateway().operator(ctx.actor()?).set_model(ctx.param(), req.enabled, req.concurrency_limit).await?;
    Ok(ok_json(&wire::admin_model(&model)))
}

/// `POST /api/v1/admin/models/{model}/pricing`.
pub(crate) async fn set_price(mut ctx: Ctx<'_>) -> Reply {
    let bytes = ctx.json_bytes().await?;
    // A price sheet is the same JSON as the command line's rates file, read by the same function
    // (a map of rate names, so it has no fixed shape to type).
    let text = std::str::from_utf8(&bytes).map_err(|_| ApiError::invalid("the body is not UTF-8"))?;
    let sheet = catalog::parse_price_sheet(text).map_err(|e| ApiError::invalid(e.to_string()))?;
    let version = ctx.gateway().operator(ctx.actor()?).set_price(ctx.param(), sheet).await?;
    Ok(json_response(StatusCode::CREATED, &wire::pricing_version(&version)))
}

/// `GET /api/v1/admin/maintenance`.
pub(crate) async fn maintenance(ctx: Ctx<'_>) -> Reply {
    Ok(ok_json(&wire::MaintenanceObject { enabled: ctx.gateway().operator(ctx.actor()?).maintenance().await? }))
}

/// `PUT /api/v1/admin/maintenance`.
pub(crate) async fn set_maintenance(mut ctx: Ctx<'_>) -> Reply {
    let req: MaintenanceBody = ctx.json().await?;
    ctx.gateway().operator(ctx.actor()?).set_maintenance(req.enabled).await?;
    Ok(ok_json(&wire::MaintenanceObject { enabled: req.enabled }))
}

/// `GET /api/v1/admin/audit`.
pub(crate) async fn audit(ctx: Ctx<'_>) -> Reply {
    let params = ctx.query()?;
    let page = ctx.gateway().operator(ctx.actor()?).audit(pairs(&params)).await?;
    Ok(ok_json(&wire::audit(&page)))
}

/// `GET /api/v1/admin/health`.
pub(crate) async fn health(ctx: Ctx<'_>) -> Reply {
    Ok(ok_json(&wire::health(&ctx.gateway().health().await?)))
}

/// `POST /api/v1/admin/users/{user_id}/keys`.
pub(crate) async fn create_user_key(mut ctx: Ctx<'_>) -> Reply {
    let req: NewKeyBody = ctx.json().await?;
    let scopes = Scope::parse_list(&req.scopes.join(",")).map_err(|e| ApiError::invalid(format!("scopes: {e}")))?;
    let limits = req.limits().map_err(service::ServiceError::from)?;
    let gateway = ctx.gateway();
    let user = UserId(ctx.param().to_owned());
    let created = gateway.operator(ctx.actor()?).create_key(&user, scopes, req.name.trim(), limits).await?;
    Ok(json_response(StatusCode::CREATED, &wire::created_key(gateway, &created)))
}

/// `DELETE /api/v1/admin/keys/{key_id}`.
pub(crate) async fn revoke_any_key(ctx: Ctx<'_>) -> Reply {
    let gateway = ctx.gateway();
    let key = gateway.operator(ctx.actor()?).revoke_key(&ApiKeyId(ctx.param().to_owned())).await?;
    Ok(ok_json(&crate::wire::key(&gateway.view_key(key, None))))
}

/// `PATCH /api/v1/admin/keys/{key_id}`: a key's limits.
pub(crate) async fn change_key(mut ctx: Ctx<'_>) -> Reply {
    let req: validation::KeyLimitsBody = ctx.json().await?;
    let change = req.change().map_err(service::ServiceError::from)?;
    let gateway = ctx.gateway();
    let key = gateway.operator(ctx.actor()?).set_key_limits(&ApiKeyId(ctx.param().to_owned()), change).await?;
    // Shown as the key lists show it, with what it spent so far.
    let keys = gateway.list_keys(&key.user_id).await?;
    let view = keys.into_iter().find(|v| v.key.id == key.id).unwrap_or_else(|| gateway.view_key(key, None));
    Ok(ok_json(&crate::wire::key(&view)))
}

/// `POST /api/v1/admin/users/{user_id}/webhook-secret`.
pub(crate) async fn rotate_user_secret(ctx: Ctx<'_>) -> Reply {
    let user = UserId(ctx.param().to_owned());
    let secret = ctx.gateway().operator(ctx.actor()?).rotate_webhook_secret(&user).await?;
    Ok(ok_json(&wire::WebhookSecretObject { webhook_secret: secret }))
}

/// `GET /api/v1/admin/tasks/{task_id}`: any user's task, with its upstream record.
pub(crate) async fn admin_task(ctx: Ctx<'_>) -> Reply {
    let (task, record) = ctx.gateway().task_for_operator(ctx.param()).await?;
    Ok(ok_json(&wire::admin_task(&task, &record)))
}

/// `POST /api/v1/chat/completions/quote`: the hold a chat call would take.
pub(crate) async fn quote_chat(mut ctx: Ctx<'_>) -> Reply {
    let bytes = ctx.json_bytes().await?;
    Ok(ok_json(&wire::quote(&ctx.gateway().quote_chat(ctx.who()?, &bytes).await?)))
}

/// `POST /api/v1/images/generations/quote`: the hold an image call would take.
pub(crate) async fn quote_image(mut ctx: Ctx<'_>) -> Reply {
    let bytes = ctx.json_bytes().await?;
    Ok(ok_json(&wire::quote(&ctx.gateway().quote_image(ctx.who()?, &bytes).await?)))
}
