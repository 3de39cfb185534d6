//! The management API's JSON shapes: typed structs that serialise the answers and derive their
//! schemas for `/openapi.json`, like `crate::wire` for the rest of the interface.

use domain::{AuditEntry, LedgerEntry, ModelRecord, PricingVersion, UsageGroup, User};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use service::{CreatedKey, CreatedUser, KeyView, Page, UsageReport, UserDetail};

use crate::wire::{DateTime, KeyObject, LedgerEntryObject, Pagination, Usd, UserObject, key, ledger_entry, user};

/// Where `page` sits.
pub(crate) fn pagination<T>(page: &Page<T>) -> Pagination {
    Pagination {
        page: page.page.page,
        page_size: page.page.page_size,
        total: page.total,
        total_pages: page.page.total_pages(page.total),
    }
}

/// One group of `GET /api/v1/usage`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UsageObject {
    /// The UTC day (`YYYY-MM-DD`) when grouped by day.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    /// The public model name when grouped by model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What the settled calls of the group were charged.
    pub spent_usd: Usd,
    /// The same in micro-USD.
    pub spent_microusd: i64,
    /// How many settled calls.
    pub calls: i64,
    /// By day: the day's spend by model (models with spend that day), for a stacked chart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<UsageObject>>,
}

fn usage_object(r: &domain::UsageRow, by_day: bool) -> UsageObject {
    UsageObject {
        period: by_day.then(|| r.group.clone()),
        model: (!by_day).then(|| r.group.clone()),
        spent_usd: r.spent.into(),
        spent_microusd: r.spent.micros(),
        calls: r.calls,
        models: by_day.then(|| r.models.iter().map(|m| usage_object(m, false)).collect()),
    }
}

/// `GET /api/v1/usage`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UsageList {
    /// `day` or `model`.
    pub group_by: &'static str,
    /// First day, included.
    pub from: String,
    /// Last day, included.
    pub to: String,
    /// By day: every day of the range, oldest first, zero days too. By model: each model with
    /// settled calls in the range, largest spend first.
    pub data: Vec<UsageObject>,
    /// The sum of `data`.
    pub total_usd: Usd,
}

/// The usage list of `report`.
pub fn usage(report: &UsageReport) -> UsageList {
    let by_day = report.query.group == UsageGroup::Day;
    let total = report.rows.iter().fold(0_i64, |sum, r| sum.saturating_add(r.spent.micros()));
    UsageList {
        group_by: if by_day { "day" } else { "model" },
        from: report.query.from.to_string(),
        to: report.query.to.to_string(),
        data: report.rows.iter().map(|r| usage_object(r, by_day)).collect(),
        total_usd: domain::UsdAmount::from_micros(total).into(),
    }
}

/// `GET /api/v1/ledger`: one page of entries, newest first.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LedgerList {
    /// Always `list`.
    pub object: &'static str,
    /// The entries.
    pub data: Vec<LedgerEntryObject>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// The ledger list of `page`.
pub fn ledger(page: &Page<LedgerEntry>) -> LedgerList {
    LedgerList { object: "list", data: page.items.iter().map(ledger_entry).collect(), pagination: pagination(page) }
}

/// `POST /api/v1/keys` (201): the new key, and its secret, shown this once.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CreatedKeyObject {
    /// The key.
    #[serde(flatten)]
    pub key: KeyObject,
    /// The secret to send as `Authorization: Bearer …`; never shown again.
    pub secret: String,
}

/// The answer for a key just made.
pub fn created_key(gateway: &service::Gateway, created: &CreatedKey) -> CreatedKeyObject {
    CreatedKeyObject { key: key(&gateway.view_key(created.key.clone(), None)), secret: created.secret.clone() }
}

/// `DELETE /api/v1/keys/{key_id}`: the revoked key.
pub fn revoked_key(view: &KeyView) -> KeyObject {
    key(view)
}

/// `POST /api/v1/webhook-secret`: the new secret, shown this once.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WebhookSecretObject {
    /// `whsec_` and 64 hex digits; webhooks are signed with it from now on.
    pub webhook_secret: String,
}

/// A user as an operator sees it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AdminUserObject {
    /// The user as the overview shows it.
    #[serde(flatten)]
    pub user: UserObject,
    /// Bytes of stored media counted against the quota.
    pub media_used_bytes: i64,
    /// Whether every key of the user is refused.
    pub disabled: bool,
    /// Since when; `null` while enabled.
    pub disabled_at: Option<DateTime>,
}

/// The operator's view of `u`.
pub fn admin_user(u: &User) -> AdminUserObject {
    AdminUserObject {
        user: user(u),
        media_used_bytes: u.media_used_bytes,
        disabled: u.disabled_at.is_some(),
        disabled_at: u.disabled_at.map(Into::into),
    }
}

/// `GET /api/v1/admin/users`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AdminUserList {
    /// Always `list`.
    pub object: &'static str,
    /// The users, newest first.
    pub data: Vec<AdminUserObject>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// The user list of `page`.
pub fn admin_users(page: &Page<User>) -> AdminUserList {
    AdminUserList { object: "list", data: page.items.iter().map(admin_user).collect(), pagination: pagination(page) }
}

/// `GET /api/v1/admin/users/{user_id}`: the user with its keys.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AdminUserDetail {
    /// The user.
    #[serde(flatten)]
    pub user: AdminUserObject,
    /// Its keys, revoked ones too, oldest first.
    pub keys: Vec<KeyObject>,
}

/// The detail of `d`.
pub fn admin_user_detail(d: &UserDetail) -> AdminUserDetail {
    AdminUserDetail { user: admin_user(&d.user), keys: d.keys.iter().map(key).collect() }
}

/// `POST /api/v1/admin/users` (201): the user and its webhook secret, shown this once.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CreatedUserObject {
    /// The user.
    #[serde(flatten)]
    pub user: AdminUserObject,
    /// The secret its webhooks are signed with.
    pub webhook_secret: String,
}

/// The answer for a user just made.
pub fn created_user(c: &CreatedUser) -> CreatedUserObject {
    CreatedUserObject { user: admin_user(&c.user), webhook_secret: c.webhook_secret.clone() }
}

/// A model as an operator sees it: enabled or not, with its cap and active price.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AdminModelObject {
    /// Public name.
    pub model: String,
    /// `language`, `image`, `audio` or `video`.
    pub kind: &'static str,
    /// Listed and callable.
    pub enabled: bool,
    /// Platform-wide cap of in-flight calls.
    pub concurrency_limit: i64,
    /// The active price version; `null` while unpriced (calls answer 503).
    pub pricing_version: Option<i64>,
    /// The active rates, as `GET /api/v1/models` shows them; `null` while unpriced.
    pub pricing: Option<Value>,
}

/// The operator's view of `m`.
pub fn admin_model(m: &ModelRecord) -> AdminModelObject {
    AdminModelObject {
        model: m.name.clone(),
        kind: m.kind.as_str(),
        enabled: m.enabled,
        concurrency_limit: m.concurrency_limit,
        pricing_version: m.pricing.as_ref().map(|p| p.version),
        pricing: m.pricing.as_ref().map(|p| catalog::price_sheet_json(&p.sheet)),
    }
}

/// `GET /api/v1/admin/models`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AdminModelList {
    /// Every stored model, by name.
    pub data: Vec<AdminModelObject>,
    /// Whether maintenance mode is on (every generation call answers 503).
    pub maintenance: bool,
}

/// `POST /api/v1/admin/models/{model}/pricing` (201): the new, now active, price version.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PricingVersionObject {
    /// Public name.
    pub model: String,
    /// The version number, increasing per model.
    pub pricing_version: i64,
    /// The id tasks record it under.
    pub pricing_version_id: String,
    /// The rates.
    pub pricing: Value,
    /// When it was made.
    pub created_at: DateTime,
}

/// The answer for a price version just made.
pub fn pricing_version(v: &PricingVersion) -> PricingVersionObject {
    PricingVersionObject {
        model: v.model.clone(),
        pricing_version: v.version,
        pricing_version_id: v.id().to_string(),
        pricing: catalog::price_sheet_json(&v.sheet),
        created_at: v.created_at.into(),
    }
}

/// `GET` and `PUT /api/v1/admin/maintenance`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MaintenanceObject {
    /// Whether every generation call answers 503.
    pub enabled: bool,
}

/// One operator action.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AuditObject {
    /// Sequence number, increasing.
    pub id: i64,
    /// When.
    pub at: DateTime,
    /// `cli`, or the operator's user id.
    pub actor: String,
    /// The key the operator used; `null` from the command line.
    pub actor_key: Option<String>,
    /// What: `user.create`, `user.topup`, `user.change`, `user.webhook_secret`, `key.create`,
    /// `key.revoke`, `key.limits`, `model.set`, `model.price` or `maintenance`.
    pub action: String,
    /// On what: a user id, key id, model name or `maintenance`.
    pub target: String,
    /// The state before; `null` for a creation.
    pub before: Option<Value>,
    /// The state after.
    pub after: Option<Value>,
}

/// `GET /api/v1/admin/audit`: one page, newest first.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AuditList {
    /// Always `list`.
    pub object: &'static str,
    /// The actions.
    pub data: Vec<AuditObject>,
    /// Where the page sits.
    pub pagination: Pagination,
}

fn state(text: Option<&str>) -> Option<Value> {
    text.map(|t| serde_json::from_str(t).unwrap_or_else(|_| Value::String(t.to_owned())))
}

/// The audit list of `page`.
pub fn audit(page: &Page<AuditEntry>) -> AuditList {
    AuditList {
        object: "list",
        data: page
            .items
            .iter()
            .map(|e| AuditObject {
                id: e.id,
                at: e.at.into(),
                actor: e.actor.clone(),
                actor_key: e.actor_key.clone(),
                action: e.action.clone(),
                target: e.target.clone(),
                before: state(e.before.as_deref()),
                after: state(e.after.as_deref()),
            })
            .collect(),
        pagination: pagination(page),
    }
}

/// `POST /api/v1/chat/completions/quote` and `/api/v1/images/generations/quote`: what the call
/// would hold (nothing is held).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct QuoteObject {
    /// The public model name.
    pub model: String,
    /// `<model>@v<version>`: the price the call would be held and billed at.
    pub pricing_version_id: String,
    /// The rates of that price.
    pub pricing: Value,
    /// The worst case the call would hold from the balance until it is settled.
    pub hold_usd: Usd,
    /// The same in micro-USD.
    pub hold_microusd: i64,
}

/// The quote of `q`.
pub fn quote(q: &service::Quote) -> QuoteObject {
    QuoteObject {
        model: q.model.clone(),
        pricing_version_id: q.pricing.id().to_string(),
        pricing: catalog::price_sheet_json(&q.pricing.sheet),
        hold_usd: q.hold.into(),
        hold_microusd: q.hold.micros(),
    }
}

/// One live replica's upstream endpoints.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ReplicaHealthObject {
    /// The replica's id.
    pub replica: String,
    /// Until when its liveness lease runs.
    pub live_until: DateTime,
    /// Its endpoints as it last reported them (state, attempts, failures, errors by kind).
    pub endpoints: Vec<Value>,
}

/// `GET /api/v1/admin/health`: the figures of `/metrics` an operator watches.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HealthObject {
    /// Billable calls open in the replica that answered.
    pub calls_in_flight: i64,
    /// Calls of that replica waiting for a concurrency slot.
    pub calls_queued: i64,
    /// Reservations still holding money, all replicas.
    pub open_reservations: u64,
    /// Age in seconds of the oldest video task not yet ended (the worker's lag); `null` without one.
    pub oldest_active_video_secs: Option<i64>,
    /// Whether maintenance mode is on.
    pub maintenance: bool,
    /// Every live replica's upstream endpoints.
    pub replicas: Vec<ReplicaHealthObject>,
}

/// The health object of `h`.
pub fn health(h: &service::Health) -> HealthObject {
    HealthObject {
        calls_in_flight: h.calls_in_flight,
        calls_queued: h.calls_queued,
        open_reservations: h.open_reservations,
        oldest_active_video_secs: h.oldest_active_video_secs,
        maintenance: h.maintenance,
        replicas: h
            .replicas
            .iter()
            .map(|(replica, live_until, endpoints)| ReplicaHealthObject {
                replica: replica.clone(),
                live_until: (*live_until).into(),
                endpoints: endpoints.iter().map(|e| serde_json::to_value(e).unwrap_or(Value::Null)).collect(),
            })
            .collect(),
    }
}

/// Where an operator's task view says the upstream side of a task went.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TaskUpstreamObject {
    /// The upstream's id for the task (video tasks, once accepted).
    pub id: Option<String>,
    /// The configured endpoint that served the call (or was tried last); never a URL or key.
    pub endpoint: Option<String>,
    /// The attempts the call made.
    pub attempts: Option<u32>,
}

/// `GET /api/v1/admin/tasks/{task_id}`: the task as its owner sees it, and its upstream side.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AdminTaskObject {
    /// The task.
    #[serde(flatten)]
    pub task: crate::wire::TaskObject,
    /// Its upstream side.
    pub upstream: TaskUpstreamObject,
}

/// The operator's view of a task (what `gateway admin task show` prints).
pub fn admin_task(task: &domain::Task, record: &domain::ports::UpstreamRecord) -> AdminTaskObject {
    let via = record.via.as_ref();
    AdminTaskObject {
        task: crate::wire::task(task),
        upstream: TaskUpstreamObject {
            id: record.upstream_id.clone(),
            endpoint: via.map(|v| v.endpoint.clone()),
            attempts: via.map(|v| v.attempts),
        },
    }
}
