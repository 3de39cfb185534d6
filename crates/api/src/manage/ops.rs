//! The management API's OpenAPI operations, one function per route, named in the route table:
//! bodies from the typed requests of `validation` (`NewKeyBody`, `NewUserBody`, …), answers from
//! `super::wire`.

use serde_json::{Value, json};
use validation::{
    ChatRequest, ImageRequest, KeyLimitsBody, MaintenanceBody, ModelPatchBody, NewKeyBody, NewUserBody, TopupBody,
    UserPatchBody,
};

use super::statements::{RevenueObject, StatementObject};
use super::wire::{
    AdminModelList, AdminModelObject, AdminTaskObject, AdminUserDetail, AdminUserList, AdminUserObject, AuditList,
    CreatedKeyObject, CreatedUserObject, HealthObject, LedgerList, MaintenanceObject, PricingVersionObject,
    QuoteObject, UsageList, WebhookSecretObject,
};
use crate::doc::{Docs, Op, json_content, page, path_param, query};
use crate::wire::{KeyObject, LedgerEntryObject};

/// The errors a route with a small JSON body may answer besides its own.
const BODY: [u16; 2] = [413, 415];

fn user_id() -> Vec<Value> {
    vec![path_param("user_id", "The user id (`usr_…`)")]
}

fn model_name() -> Vec<Value> {
    vec![path_param("model", "The public model name")]
}

fn key_id() -> Vec<Value> {
    vec![path_param("key_id", "The key id (`key_…`)")]
}

pub(crate) fn with_body(codes: &[u16]) -> Vec<u16> {
    let mut all = codes.to_vec();
    all.extend(BODY);
    all.sort_unstable();
    all
}

pub(crate) fn usage(d: &mut Docs) -> Op {
    let mut parameters =
        vec![query("group_by", "`day` (default) or `model`", json!({"type": "string", "enum": ["day", "model"]}))];
    parameters.extend(day_range());
    Op { parameters, body: None, responses: d.json_answer::<UsageList>(200, "the spend", &[400, 401]) }
}

pub(crate) fn ledger(d: &mut Docs) -> Op {
    Op { parameters: page("Items"), body: None, responses: d.json_answer::<LedgerList>(200, "one page", &[400, 401]) }
}

pub(crate) fn create_key(d: &mut Docs) -> Op {
    let body = d.request::<NewKeyBody>();
    let responses = d.json_answer::<CreatedKeyObject>(201, "the key and its secret", &with_body(&[400, 401]));
    Op { parameters: vec![], body, responses }
}

pub(crate) fn revoke_key(d: &mut Docs) -> Op {
    Op { parameters: key_id(), body: None, responses: d.json_answer::<KeyObject>(200, "the revoked key", &[401, 404]) }
}

pub(crate) fn rotate_webhook_secret(d: &mut Docs) -> Op {
    Op {
        parameters: vec![],
        body: None,
        responses: d.json_answer::<WebhookSecretObject>(200, "the new secret", &[401]),
    }
}

pub(crate) fn users(d: &mut Docs) -> Op {
    let mut parameters = page("Items");
    parameters.push(query(
        "q",
        "Text the id, name or email contains (any case), at most 100 characters",
        json!({"type": "string", "maxLength": 100}),
    ));
    Op { parameters, body: None, responses: d.json_answer::<AdminUserList>(200, "one page", &[400, 401]) }
}

pub(crate) fn create_user(d: &mut Docs) -> Op {
    let body = d.request::<NewUserBody>();
    let responses = d.json_answer::<CreatedUserObject>(201, "the user", &with_body(&[400, 401, 409]));
    Op { parameters: vec![], body, responses }
}

pub(crate) fn user(d: &mut Docs) -> Op {
    Op { parameters: user_id(), body: None, responses: d.json_answer::<AdminUserDetail>(200, "the user", &[401, 404]) }
}

pub(crate) fn change_user(d: &mut Docs) -> Op {
    let body = d.request::<UserPatchBody>();
    let responses = d.json_answer::<AdminUserObject>(200, "the user", &with_body(&[400, 401, 404]));
    Op { parameters: user_id(), body, responses }
}

pub(crate) fn topup(d: &mut Docs) -> Op {
    let body = d.request::<TopupBody>();
    let responses = d.json_answer::<LedgerEntryObject>(200, "the ledger entry", &with_body(&[400, 401, 404]));
    Op { parameters: user_id(), body, responses }
}

pub(crate) fn models(d: &mut Docs) -> Op {
    Op { parameters: vec![], body: None, responses: d.json_answer::<AdminModelList>(200, "the models", &[401]) }
}

pub(crate) fn change_model(d: &mut Docs) -> Op {
    let body = d.request::<ModelPatchBody>();
    let responses = d.json_answer::<AdminModelObject>(200, "the model", &with_body(&[400, 401, 404]));
    Op { parameters: model_name(), body, responses }
}

pub(crate) fn set_price(d: &mut Docs) -> Op {
    let sheet = json!({
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
    });
    let body = Some(json!({"required": true, "content": json_content(sheet)}));
    let responses = d.json_answer::<PricingVersionObject>(201, "the price version", &with_body(&[400, 401, 404]));
    Op { parameters: model_name(), body, responses }
}

pub(crate) fn maintenance(d: &mut Docs) -> Op {
    Op { parameters: vec![], body: None, responses: d.json_answer::<MaintenanceObject>(200, "the state", &[401]) }
}

pub(crate) fn set_maintenance(d: &mut Docs) -> Op {
    let body = d.request::<MaintenanceBody>();
    let responses = d.json_answer::<MaintenanceObject>(200, "the state", &with_body(&[400, 401]));
    Op { parameters: vec![], body, responses }
}

pub(crate) fn audit(d: &mut Docs) -> Op {
    Op { parameters: page("Items"), body: None, responses: d.json_answer::<AuditList>(200, "one page", &[400, 401]) }
}

pub(crate) fn health(d: &mut Docs) -> Op {
    Op { parameters: vec![], body: None, responses: d.json_answer::<HealthObject>(200, "the figures", &[401]) }
}

pub(crate) fn create_user_key(d: &mut Docs) -> Op {
    let body = d.request::<NewKeyBody>();
    let responses = d.json_answer::<CreatedKeyObject>(201, "the key and its secret", &with_body(&[400, 401, 404]));
    Op { parameters: user_id(), body, responses }
}

pub(crate) fn revoke_any_key(d: &mut Docs) -> Op {
    Op { parameters: key_id(), body: None, responses: d.json_answer::<KeyObject>(200, "the revoked key", &[401, 404]) }
}

pub(crate) fn change_key(d: &mut Docs) -> Op {
    let body = d.request::<KeyLimitsBody>();
    let responses = d.json_answer::<KeyObject>(200, "the key", &with_body(&[400, 401, 404]));
    Op { parameters: key_id(), body, responses }
}

pub(crate) fn rotate_user_secret(d: &mut Docs) -> Op {
    let responses = d.json_answer::<WebhookSecretObject>(200, "the new secret", &[401, 404]);
    Op { parameters: user_id(), body: None, responses }
}

pub(crate) fn admin_task(d: &mut Docs) -> Op {
    let responses = d.json_answer::<AdminTaskObject>(200, "the task", &[401, 404]);
    Op { parameters: vec![path_param("task_id", "The task id")], body: None, responses }
}

pub(crate) fn quote_chat(d: &mut Docs) -> Op {
    let body = d.request::<ChatRequest>();
    Op {
        parameters: vec![],
        body,
        responses: d.json_answer::<QuoteObject>(200, "the quote", &[400, 401, 413, 415, 503]),
    }
}

pub(crate) fn quote_image(d: &mut Docs) -> Op {
    let body = d.request::<ImageRequest>();
    Op {
        parameters: vec![],
        body,
        responses: d.json_answer::<QuoteObject>(200, "the quote", &[400, 401, 413, 415, 503]),
    }
}

/// `from` and `to` of the usage report and the exports (one day-range rule).
fn day_range() -> Vec<Value> {
    vec![
        query(
            "from",
            "First UTC day, YYYY-MM-DD (default: 29 days before `to`)",
            json!({"type": "string", "format": "date"}),
        ),
        query(
            "to",
            "Last UTC day, YYYY-MM-DD, included (default: today); at most 366 days in all",
            json!({"type": "string", "format": "date"}),
        ),
    ]
}

/// A CSV file answer (RFC 4180, a header line), then the errors of `codes`.
fn csv_answer(d: &Docs, description: &'static str, codes: &[u16]) -> Vec<crate::doc::Answer> {
    let content = json!({"text/csv": {"schema": {"type": "string"}}});
    d.answers(vec![(200, description, Some(content))], codes)
}

pub(crate) fn statement(d: &mut Docs) -> Op {
    let month = json!({
        "name": "month", "in": "path", "required": true,
        "description": "The UTC month, YYYY-MM; the month in progress or an earlier one",
        "schema": {"type": "string", "pattern": r"^\d{4}-(0[1-9]|1[0-2])$"},
    });
    let responses = d.json_answer::<StatementObject>(200, "the month's statement", &[400, 401]);
    Op { parameters: vec![month], body: None, responses }
}

pub(crate) fn ledger_export(d: &mut Docs) -> Op {
    let columns =
        "the entries written in the range, in time order: id,created_at,kind,amount_usd,balance_after_usd,task_id,note";
    Op { parameters: day_range(), body: None, responses: csv_answer(d, columns, &[400, 401]) }
}

pub(crate) fn usage_export(d: &mut Docs) -> Op {
    let columns = "one line per call whose hold ended in the range, in that order: \
                   task_id,created_at,ended_at,model,kind,status,billing_status,held_usd,amount_usd,usage";
    Op { parameters: day_range(), body: None, responses: csv_answer(d, columns, &[400, 401]) }
}

pub(crate) fn revenue(d: &mut Docs) -> Op {
    let month = query(
        "month",
        "The UTC month, YYYY-MM (default: the month in progress)",
        json!({"type": "string", "pattern": r"^\d{4}-(0[1-9]|1[0-2])$"}),
    );
    Op { parameters: vec![month], body: None, responses: d.json_answer::<RevenueObject>(200, "the month", &[400, 401]) }
}
