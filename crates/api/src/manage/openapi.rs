//! The management API's operations in `/openapi.json`: bodies from the typed requests of
//! `validation` (`NewKeyBody`, `NewUserBody`, …), answers from `super::wire`.

use schemars::SchemaGenerator;
use serde_json::{Value, json};
use validation::{MaintenanceBody, ModelPatchBody, NewKeyBody, NewUserBody, TopupBody, UserPatchBody};

use super::wire::{
    AdminModelList, AdminModelObject, AdminUserDetail, AdminUserList, AdminUserObject, AuditList, CreatedKeyObject,
    CreatedUserObject, HealthObject, LedgerList, MaintenanceObject, PricingVersionObject, QuoteObject, UsageList,
    WebhookSecretObject,
};
use crate::error::ErrorEnvelope;
use crate::openapi::{Operation, errors, json_content, path_param, query};
use crate::wire::{KeyObject, LedgerEntryObject};

/// The management operations.
pub(crate) fn operations(requests: &mut SchemaGenerator, responses: &mut SchemaGenerator) -> Vec<Operation> {
    let error = responses.subschema_for::<ErrorEnvelope<'static>>().to_value();
    let answer = |status: u16, description: &'static str, schema: Value, codes: &[u16]| {
        let mut list = vec![(status, description, Some(json_content(schema)))];
        list.extend(errors(codes, &error));
        list
    };
    let body = |schema: Value| {
        let mut schema = schema;
        validation::schema::strip_null(&mut schema);
        Some(json!({"required": true, "content": json_content(schema)}))
    };
    let page = || {
        vec![
            query("page", "Page, from 1", json!({"type": "integer", "minimum": 1})),
            query("page_size", "Items per page", json!({"type": "integer", "enum": validation::TASK_PAGE_SIZES})),
        ]
    };
    let usage = responses.subschema_for::<UsageList>().to_value();
    let ledger = responses.subschema_for::<LedgerList>().to_value();
    let created_key = responses.subschema_for::<CreatedKeyObject>().to_value();
    let key = responses.subschema_for::<KeyObject>().to_value();
    let secret = responses.subschema_for::<WebhookSecretObject>().to_value();
    let users = responses.subschema_for::<AdminUserList>().to_value();
    let created_user = responses.subschema_for::<CreatedUserObject>().to_value();
    let detail = responses.subschema_for::<AdminUserDetail>().to_value();
    let user = responses.subschema_for::<AdminUserObject>().to_value();
    let entry = responses.subschema_for::<LedgerEntryObject>().to_value();
    let models = responses.subschema_for::<AdminModelList>().to_value();
    let model = responses.subschema_for::<AdminModelObject>().to_value();
    let version = responses.subschema_for::<PricingVersionObject>().to_value();
    let maintenance = responses.subschema_for::<MaintenanceObject>().to_value();
    let audit = responses.subschema_for::<AuditList>().to_value();
    let health = responses.subschema_for::<HealthObject>().to_value();
    let quote = responses.subschema_for::<QuoteObject>().to_value();
    let chat_body = body(requests.subschema_for::<validation::ChatRequest>().to_value());
    let image_body = body(requests.subschema_for::<validation::ImageRequest>().to_value());
    let user_key = body(requests.subschema_for::<NewKeyBody>().to_value());
    let key_limits = body(requests.subschema_for::<validation::KeyLimitsBody>().to_value());
    let admin_task = responses.subschema_for::<super::wire::AdminTaskObject>().to_value();
    let new_key = body(requests.subschema_for::<NewKeyBody>().to_value());
    let new_user = body(requests.subschema_for::<NewUserBody>().to_value());
    let user_patch = body(requests.subschema_for::<UserPatchBody>().to_value());
    let topup = body(requests.subschema_for::<TopupBody>().to_value());
    let model_patch = body(requests.subschema_for::<ModelPatchBody>().to_value());
    let maintenance_body = body(requests.subschema_for::<MaintenanceBody>().to_value());
    let price_sheet = Some(json!({"required": true, "content": json_content(json!({
        "type": "object",
        "description": "Rate name → {amountMicrousd, denominator, unit}: the same JSON as `gateway admin price set --rates`",
        "additionalProperties": {
            "type": "object",
            "required": ["amountMicrousd", "denominator", "unit"],
            "properties": {
                "amountMicrousd": {"type": "string"},
                "denominator": {"type": "string"},
                "unit": {"type": "string"},
            },
        },
    }))}));
    let user_id = || vec![path_param("user_id", "The user id (`usr_…`)")];
    let model_name = || vec![path_param("model", "The public model name")];
    let op = |method, path, summary, scope, parameters, body, responses| Operation {
        method,
        path,
        summary,
        scope: Some(scope),
        parameters,
        body,
        responses,
    };
    vec![
        op(
            "get",
            "/api/v1/usage",
            "The caller's settled spend per UTC day (every day of the range) or per model",
            "overview:read",
            vec![
                query("group_by", "`day` (default) or `model`", json!({"type": "string", "enum": ["day", "model"]})),
                query(
                    "from",
                    "First UTC day, YYYY-MM-DD (default: 29 days before `to`)",
                    json!({"type": "string", "format": "date"}),
                ),
                query(
                    "to",
                    "Last UTC day, YYYY-MM-DD (default: today); at most 366 days in all",
                    json!({"type": "string", "format": "date"}),
                ),
            ],
            None,
            answer(200, "the spend", usage, &[400, 401]),
        ),
        op(
            "get",
            "/api/v1/ledger",
            "Every ledger entry of the caller, newest first",
            "overview:read",
            page(),
            None,
            answer(200, "one page", ledger, &[400, 401]),
        ),
        op(
            "post",
            "/api/v1/keys",
            "A new key for the caller, with scopes the calling key carries; the secret is shown once",
            "keys:manage",
            vec![],
            new_key,
            answer(201, "the key and its secret", created_key.clone(), &[400, 401, 413, 415]),
        ),
        op(
            "delete",
            "/api/v1/keys/{key_id}",
            "Revoke one of the caller's keys (the one in use too)",
            "keys:manage",
            vec![path_param("key_id", "The key id (`key_…`)")],
            None,
            answer(200, "the revoked key", key.clone(), &[401, 404]),
        ),
        op(
            "post",
            "/api/v1/webhook-secret",
            "Replace the caller's webhook secret; the new one is shown once",
            "keys:manage",
            vec![],
            None,
            answer(200, "the new secret", secret.clone(), &[401]),
        ),
        op(
            "get",
            "/api/v1/admin/users",
            "Operator: users, newest first; `q` searches id, name and email",
            "admin",
            {
                let mut p = page();
                p.push(query(
                    "q",
                    "Text the id, name or email contains (any case), at most 100 characters",
                    json!({"type": "string", "maxLength": 100}),
                ));
                p
            },
            None,
            answer(200, "one page", users, &[400, 401]),
        ),
        op(
            "post",
            "/api/v1/admin/users",
            "Operator: create a user; its webhook secret is shown once",
            "admin",
            vec![],
            new_user,
            answer(201, "the user", created_user, &[400, 401, 409, 413, 415]),
        ),
        op(
            "get",
            "/api/v1/admin/users/{user_id}",
            "Operator: a user with balance, caps, quota and keys",
            "admin",
            user_id(),
            None,
            answer(200, "the user", detail, &[401, 404]),
        ),
        op(
            "patch",
            "/api/v1/admin/users/{user_id}",
            "Operator: disable or enable a user, or change its caps",
            "admin",
            user_id(),
            user_patch,
            answer(200, "the user", user, &[400, 401, 404, 413, 415]),
        ),
        op(
            "post",
            "/api/v1/admin/users/{user_id}/topup",
            "Operator: add money to a user's balance",
            "admin",
            user_id(),
            topup,
            answer(200, "the ledger entry", entry, &[400, 401, 404, 413, 415]),
        ),
        op(
            "get",
            "/api/v1/admin/models",
            "Operator: every model, enabled or not, with cap and active price",
            "admin",
            vec![],
            None,
            answer(200, "the models", models, &[401]),
        ),
        op(
            "patch",
            "/api/v1/admin/models/{model}",
            "Operator: switch a model on or off, or change its cap",
            "admin",
            model_name(),
            model_patch,
            answer(200, "the model", model, &[400, 401, 404, 413, 415]),
        ),
        op(
            "post",
            "/api/v1/admin/models/{model}/pricing",
            "Operator: a new price version, active at once",
            "admin",
            model_name(),
            price_sheet,
            answer(201, "the price version", version, &[400, 401, 404, 413, 415]),
        ),
        op(
            "get",
            "/api/v1/admin/maintenance",
            "Operator: whether maintenance mode is on",
            "admin",
            vec![],
            None,
            answer(200, "the state", maintenance.clone(), &[401]),
        ),
        op(
            "put",
            "/api/v1/admin/maintenance",
            "Operator: turn maintenance mode on or off",
            "admin",
            vec![],
            maintenance_body,
            answer(200, "the state", maintenance, &[400, 401, 413, 415]),
        ),
        op(
            "get",
            "/api/v1/admin/audit",
            "Operator: every operator action, newest first",
            "admin",
            page(),
            None,
            answer(200, "one page", audit, &[400, 401]),
        ),
        op(
            "get",
            "/api/v1/admin/health",
            "Operator: calls in flight and queued, open reservations, video worker lag, upstream endpoints",
            "admin",
            vec![],
            None,
            answer(200, "the figures", health, &[401]),
        ),
        op(
            "post",
            "/api/v1/admin/users/{user_id}/keys",
            "Operator: a key for a user, with any scopes; the secret is shown once",
            "admin",
            user_id(),
            user_key,
            answer(201, "the key and its secret", created_key, &[400, 401, 404, 413, 415]),
        ),
        op(
            "delete",
            "/api/v1/admin/keys/{key_id}",
            "Operator: revoke any key",
            "admin",
            vec![path_param("key_id", "The key id (`key_…`)")],
            None,
            answer(200, "the revoked key", key.clone(), &[401, 404]),
        ),
        op(
            "post",
            "/api/v1/chat/completions/quote",
            "What a chat call with this body would hold, at which price; nothing is held",
            "language:create",
            vec![],
            chat_body,
            answer(200, "the quote", quote.clone(), &[400, 401, 413, 415, 503]),
        ),
        op(
            "post",
            "/api/v1/images/generations/quote",
            "What an image call with this body would hold, at which price; nothing is held",
            "image:create",
            vec![],
            image_body,
            answer(200, "the quote", quote, &[400, 401, 413, 415, 503]),
        ),
        op(
            "patch",
            "/api/v1/admin/keys/{key_id}",
            "Operator: set or clear a key's expiry, model allow-list, budget, rate limits or address list",
            "admin",
            vec![path_param("key_id", "The key id (`key_…`)")],
            key_limits,
            answer(200, "the key", key, &[400, 401, 404, 413, 415]),
        ),
        op(
            "post",
            "/api/v1/admin/users/{user_id}/webhook-secret",
            "Operator: replace a user's webhook secret; the new one is shown once",
            "admin",
            user_id(),
            None,
            answer(200, "the new secret", secret, &[401, 404]),
        ),
        op(
            "get",
            "/api/v1/admin/tasks/{task_id}",
            "Operator: any user's task, with the endpoint that served it and the attempts it made",
            "admin",
            vec![path_param("task_id", "The task id")],
            None,
            answer(200, "the task", admin_task, &[401, 404]),
        ),
    ]
}
