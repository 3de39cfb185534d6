//! Wire shapes: domain records and use-case results turned into the interface's JSON objects.
//!
//! Each shape is a typed struct that is both what the handlers serialise and where the served
//! OpenAPI document takes its response schemas from (`schemars`), so the two cannot drift. The
//! models' `request_schema` and `response_schema` are made here too, from the same types.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::LazyLock;

use catalog::ModelDef;
use domain::{LedgerEntry, ModelKind, Task, TaskBilling, Timestamp, UsdAmount, User};
use schemars::generate::{Contract, SchemaSettings};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Serialize;
use serde_json::Value;
use service::{KeyView, ModelView, Overview, TaskPage};

/// A `UsdAmount` on the wire: a decimal string exact to six places (`"1.250000"`, `"-0.000001"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Usd(String);

impl From<UsdAmount> for Usd {
    fn from(a: UsdAmount) -> Usd {
        Usd(a.to_string())
    }
}

impl JsonSchema for Usd {
    fn schema_name() -> Cow<'static, str> {
        "UsdAmount".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "pattern": r"^-?\d+\.\d{6}$", "examples": ["1.250000"]})
    }
}

/// A time on the wire: RFC 3339 in UTC with milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct DateTime(String);

impl From<Timestamp> for DateTime {
    fn from(t: Timestamp) -> DateTime {
        DateTime(t.to_string())
    }
}

impl JsonSchema for DateTime {
    fn schema_name() -> Cow<'static, str> {
        "DateTime".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "format": "date-time"})
    }
}

/// A `Model` object: the spec's fields plus the catalog's (never the upstream profile).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ModelObject {
    /// The public model name.
    pub id: String,
    /// The value to send as a request's `model`.
    pub public_model: String,
    /// Always `model`.
    pub object: &'static str,
    /// `language`, `image`, `audio` or `video`.
    pub kind: &'static str,
    /// What the model is for.
    pub description: Option<String>,
    /// Always true in the public list (disabled models are not shown).
    pub enabled: bool,
    /// Calls of this model that may run at once, over all users and replicas.
    pub concurrency_limit: i64,
    /// The generation path the model is used with.
    pub endpoint: String,
    /// The key scope that path needs.
    pub scope: &'static str,
    /// `synchronous`, or `asynchronous` for video.
    pub mode: &'static str,
    /// How the model is billed; null while it has no price.
    pub pricing_kind: Option<&'static str>,
    /// The active price's rates; null while the model has no price (it then answers 503).
    pub pricing: Option<Value>,
    /// The active price's version; absent while the model has no price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pricing_version: Option<i64>,
    /// `<model>@v<version>`, as calls' billing names it; absent while the model has no price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pricing_version_id: Option<String>,
    /// For an operator's alias: the models a call naming it is tried on, in order (this entry
    /// shows the first enabled one's limits and price).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias_of: Option<Vec<String>>,
    /// The model's capabilities, each `true`.
    pub capabilities: BTreeMap<String, bool>,
    /// The model's limits, as the request checks apply them.
    pub limits: Value,
    /// JSON Schema of this model's request body, generated from the request types the checks use.
    pub request_schema: Value,
    /// JSON Schema of this model's answer.
    pub response_schema: Value,
}

impl ModelObject {
    /// The object for `view`.
    pub fn of(view: &ModelView) -> ModelObject {
        let (record, def) = (&view.record, &view.def);
        let pricing = record.pricing.as_ref();
        ModelObject {
            id: record.name.clone(),
            public_model: record.name.clone(),
            object: "model",
            kind: record.kind.as_str(),
            description: def.description.clone(),
            enabled: record.enabled,
            concurrency_limit: record.concurrency_limit,
            endpoint: def.endpoint.clone(),
            scope: def.scope.as_str(),
            mode: def.mode.as_str(),
            pricing_kind: pricing.map(|_| def.pricing_kind.as_str()),
            pricing: pricing.map(|p| catalog::price_sheet_json(&p.sheet)),
            pricing_version: pricing.map(|p| p.version),
            pricing_version_id: pricing.map(|p| p.id().to_string()),
            alias_of: None,
            capabilities: def.capabilities.iter().map(|c| (c.clone(), true)).collect(),
            limits: def.public_limits().clone(),
            request_schema: request_schema(def),
            response_schema: response_schema(def),
        }
    }
}

/// Where the task id and billing of a chat-style answer are (`svc`).
#[derive(Debug, Clone, JsonSchema)]
pub struct Svc {
    /// The task the call is recorded as.
    pub task_id: String,
    /// The call's billing.
    pub billing: Billing,
}

/// A chat completion, a message or a response answer: the upstream's object (open) with the
/// public model name and the gateway's `svc`.
#[derive(Debug, Clone, JsonSchema)]
#[schemars(extend("additionalProperties" = true))]
pub struct ChatStyleAnswer {
    /// The public model name.
    pub model: String,
    /// Task id and billing.
    pub svc: Svc,
}

/// An image or audio answer: the upstream's object (open) with `task_id` and `billing` added.
#[derive(Debug, Clone, JsonSchema)]
#[schemars(extend("additionalProperties" = true))]
pub struct MediaAnswer {
    /// The task the call is recorded as.
    pub task_id: String,
    /// The call's billing.
    pub billing: Billing,
}

/// A standalone JSON Schema 2020-12 document of `T` as the gateway writes it.
fn response_root<T: JsonSchema>() -> Value {
    SchemaSettings::draft2020_12()
        .with(|s| s.contract = Contract::Serialize)
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// The model's `request_schema`: its kind's typed request narrowed by its limits (`null` only for a
/// catalog entry without its kind's limits, which the catalog's own checks refuse).
pub fn request_schema(def: &ModelDef) -> Value {
    validation::schema::request_schema(def).unwrap_or(Value::Null)
}

static ANSWERS: LazyLock<[Value; 3]> = LazyLock::new(|| {
    [response_root::<ChatStyleAnswer>(), response_root::<MediaAnswer>(), response_root::<TaskObject>()]
});

/// The model's `response_schema`: what a successful call of it answers.
pub fn response_schema(def: &ModelDef) -> Value {
    let [chat, media, task] = &*ANSWERS;
    match def.kind {
        ModelKind::Language => chat.clone(),
        ModelKind::Image | ModelKind::Audio => media.clone(),
        ModelKind::Video => task.clone(),
    }
}

/// A `ModelListResponse`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ModelList {
    /// Always `list`.
    pub object: &'static str,
    /// The enabled models.
    pub data: Vec<ModelObject>,
}

/// The `ModelListResponse` of `models`, and of the operators' `aliases` (each shown with its first
/// enabled model's limits and price).
pub fn model_list(models: &[ModelView], aliases: &[(domain::ModelAlias, ModelView)]) -> ModelList {
    let mut data: Vec<ModelObject> = models.iter().map(ModelObject::of).collect();
    data.extend(aliases.iter().map(|(alias, first)| ModelObject {
        id: alias.name.clone(),
        public_model: alias.name.clone(),
        alias_of: Some(alias.models.clone()),
        ..ModelObject::of(first)
    }));
    ModelList { object: "list", data }
}

/// A `Billing` object.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Billing {
    /// Always `USD`.
    pub currency: &'static str,
    /// `reserved`, `settled`, `refunded` or `unbilled`.
    pub status: &'static str,
    /// The price version the call is billed at.
    pub pricing_version_id: Option<String>,
    /// The amount held when the call started.
    pub estimated_amount: Usd,
    /// The same in micro-USD.
    pub estimated_amount_microusd: i64,
    /// The charge once settled (zero when refunded); null while reserved.
    pub actual_amount: Option<Usd>,
    /// The same in micro-USD.
    pub actual_amount_microusd: Option<i64>,
    /// The balance right after the call ended; null while reserved.
    pub balance_after: Option<Usd>,
    /// The upstream's usage the charge was computed from.
    pub usage: Value,
}

/// The `Billing` object of `b`.
pub fn billing(b: &TaskBilling) -> Billing {
    let usage = b.usage_json.as_deref().and_then(|u| serde_json::from_str::<Value>(u).ok()).unwrap_or(Value::Null);
    Billing {
        currency: "USD",
        status: b.status.as_str(),
        pricing_version_id: b.pricing_version_id.as_ref().map(ToString::to_string),
        estimated_amount: b.estimated.into(),
        estimated_amount_microusd: b.estimated.micros(),
        actual_amount: b.actual.map(Usd::from),
        actual_amount_microusd: b.actual.map(UsdAmount::micros),
        balance_after: b.balance_after.map(Usd::from),
        usage,
    }
}

/// A `Task` object.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TaskObject {
    /// `task_…`.
    pub id: String,
    /// Always `task`.
    pub object: &'static str,
    /// The owner.
    pub user_id: String,
    /// The public model name.
    pub model: String,
    /// `language`, `image`, `audio` or `video`.
    pub kind: &'static str,
    /// `submitting`, `queued`, `processing`, `succeeded`, `failed`, `cancelled` or `expired`.
    pub status: &'static str,
    /// The prompt (cut to 4,000 characters for synchronous calls).
    pub prompt: Option<String>,
    /// The upstream provider's name.
    pub provider: String,
    /// `text`, `url`, `base64`, `mixed` or `stream`.
    pub input_mode: Option<&'static str>,
    /// `image`, `video`, `audio` or `multiple`.
    pub media_type: Option<&'static str>,
    /// The input media record.
    pub media_url: Option<String>,
    /// Seconds of video asked for.
    pub duration: Option<i64>,
    /// Video resolution.
    pub resolution: Option<&'static str>,
    /// Video aspect ratio.
    pub ratio: Option<&'static str>,
    /// Whether the video has sound.
    pub generate_audio: Option<bool>,
    /// The task's billing.
    pub billing: Billing,
    /// Where the result is.
    pub output_url: Option<String>,
    /// A video's last frame.
    pub last_frame_url: Option<String>,
    /// Why the task failed.
    pub error_code: Option<String>,
    /// Why the task failed, in words.
    pub error_message: Option<String>,
    /// Where status changes are posted.
    pub webhook_url: Option<String>,
    /// When the task was created.
    pub created_at: DateTime,
    /// When it last changed.
    pub updated_at: DateTime,
    /// When it ended.
    pub completed_at: Option<DateTime>,
    /// What a call that named an alias or a list of models asked for (`fast`, `A,B`); `model` is
    /// the one that served it. Absent when the call named one model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_model: Option<String>,
}

/// A task's `media_url`: its media record as the store keeps it (the JSON array of
/// `domain::media`, written through its one serde definition), `null` without media.
fn media_record(media: &[domain::TaskMedia]) -> Option<String> {
    if media.is_empty() {
        return None;
    }
    // Cannot fail: the items have string keys and plain values only.
    serde_json::to_string(media).ok()
}

/// The `Task` object of `t`.
pub fn task(t: &Task) -> TaskObject {
    TaskObject {
        id: t.id.as_str().to_owned(),
        object: "task",
        user_id: t.user_id.as_str().to_owned(),
        model: t.model.clone(),
        kind: t.kind.as_str(),
        status: t.status.as_str(),
        prompt: t.prompt.clone(),
        provider: t.provider.clone(),
        input_mode: t.input_mode.map(domain::InputMode::as_str),
        media_type: t.media_type.map(domain::MediaType::as_str),
        media_url: media_record(&t.media),
        duration: t.duration,
        resolution: t.resolution.map(domain::Resolution::as_str),
        ratio: t.ratio.map(domain::Ratio::as_str),
        generate_audio: t.generate_audio,
        billing: billing(&t.billing),
        output_url: t.output_url.clone(),
        last_frame_url: t.last_frame_url.clone(),
        error_code: t.error_code.clone(),
        error_message: t.error_message.clone(),
        webhook_url: t.webhook_url.clone(),
        requested_model: t.requested.clone(),
        created_at: t.created_at.into(),
        updated_at: t.updated_at.into(),
        completed_at: t.completed_at.map(DateTime::from),
    }
}

/// Where a page sits in the whole list.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Pagination {
    /// This page, from 1.
    pub page: u64,
    /// 20, 50 or 100.
    pub page_size: u64,
    /// Tasks matching the filter.
    pub total: u64,
    /// Pages of that size.
    pub total_pages: u64,
}

/// A `TaskListResponse`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct TaskList {
    /// Always `list`.
    pub object: &'static str,
    /// The page's tasks, newest first.
    pub data: Vec<TaskObject>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// The `TaskListResponse` of `page`.
pub fn task_page(page: &TaskPage) -> TaskList {
    let p = page.query.page;
    TaskList {
        object: "list",
        data: page.tasks.iter().map(task).collect(),
        pagination: Pagination {
            page: p.page,
            page_size: p.page_size,
            total: page.total,
            total_pages: p.total_pages(page.total),
        },
    }
}

/// The caller in the overview.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UserObject {
    /// `usr_…`.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Contact address.
    pub email: String,
    /// `user` or `admin`.
    pub role: String,
    /// The balance.
    pub balance_usd: Usd,
    /// The same in micro-USD.
    pub balance_microusd: i64,
    /// The user's calls that may run at once.
    pub concurrency_limit: i64,
    /// Bytes of stored media allowed.
    pub media_quota_bytes: i64,
    /// When the user was created.
    pub created_at: DateTime,
}

pub(crate) fn user(u: &User) -> UserObject {
    UserObject {
        id: u.id.as_str().to_owned(),
        name: u.name.clone(),
        email: u.email.clone(),
        role: u.role.as_str().to_owned(),
        balance_usd: u.balance.into(),
        balance_microusd: u.balance.micros(),
        concurrency_limit: u.concurrency_limit,
        media_quota_bytes: u.media_quota_bytes,
        created_at: u.created_at.into(),
    }
}

/// A ledger entry of the overview.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct LedgerEntryObject {
    /// Entry number, increasing.
    pub id: i64,
    /// The call it belongs to, if any.
    pub task_id: Option<String>,
    /// `topup`, `reserve`, `settle`, `refund` or `adjustment`.
    pub kind: &'static str,
    /// The movement (negative: money taken).
    pub amount_usd: Usd,
    /// The same in micro-USD.
    pub amount_microusd: i64,
    /// The balance right after.
    pub balance_after: Usd,
    /// What the movement was.
    pub description: String,
    /// When it happened.
    pub created_at: DateTime,
}

/// The overview's entry of `e`.
pub fn ledger_entry(e: &LedgerEntry) -> LedgerEntryObject {
    LedgerEntryObject {
        id: e.id,
        task_id: e.task_id.as_ref().map(|t| t.as_str().to_owned()),
        kind: e.kind.as_str(),
        amount_usd: e.amount.into(),
        amount_microusd: e.amount.micros(),
        balance_after: e.balance_after.into(),
        description: e.description.clone(),
        created_at: e.created_at.into(),
    }
}

/// Task counts and spending of the overview.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Stats {
    /// All tasks.
    pub total: i64,
    /// Tasks that succeeded.
    pub succeeded: i64,
    /// Tasks not yet ended.
    pub active: i64,
    /// Sum of settled charges.
    pub spent_usd: Usd,
}

/// An `OverviewResponse`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct OverviewObject {
    /// The caller.
    pub user: UserObject,
    /// Task counts and spending.
    pub stats: Stats,
    /// The models the caller can use.
    pub routes: Vec<ModelObject>,
    /// The newest ledger entries, newest first.
    pub ledger: Vec<LedgerEntryObject>,
    /// Whether generation endpoints answer 503 for maintenance.
    pub maintenance: bool,
    /// What each of the caller's keys spent (an extension of the interface's overview).
    pub keys: Vec<KeySpendObject>,
}

/// One key's line in the overview.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeySpendObject {
    /// The key's id.
    pub id: String,
    /// Its label.
    pub name: String,
    /// The first characters of its secret.
    pub prefix: String,
    /// The sum of its settled charges.
    pub spent_usd: Usd,
    /// How many settled calls that is.
    pub calls: i64,
}

/// An API key with its limits and spend (never its secret or hash): `GET /api/v1/keys` and the
/// operator CLI's `admin key …` print it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyObject {
    /// The key's id (`key_…`).
    pub id: String,
    /// Its owner.
    pub user_id: String,
    /// Its label.
    pub name: String,
    /// The first characters of its secret.
    pub prefix: String,
    /// What it may do.
    pub scopes: Vec<&'static str>,
    /// When it was made.
    pub created_at: DateTime,
    /// From when on it is refused as expired; `null`: never.
    pub expires_at: Option<DateTime>,
    /// The model names and kinds it may reach; `null`: every model.
    pub models: Option<Vec<String>>,
    /// Its spend budget; `null`: only the balance limits it.
    pub budget: Option<BudgetObject>,
    /// Generation calls it may make per UTC minute; `null`: no limit.
    pub rpm: Option<u32>,
    /// Language tokens (prompt + completion) it may use per UTC minute; `null`: no limit.
    pub tpm: Option<u32>,
    /// The networks it may be used from; `null`: any address.
    pub allow_ips: Option<Vec<String>>,
    /// The sum of its settled charges, all periods together.
    pub spent_usd: Usd,
    /// How many settled calls that is.
    pub calls: i64,
    /// When it was revoked; `null`: it works.
    pub revoked_at: Option<DateTime>,
    /// The key that minted it through `POST /api/v1/keys` (its limits are within that key's, its
    /// calls count against that key's budget too, and it ends with that key); `null` for a key an
    /// operator issued.
    pub parent_id: Option<String>,
    /// The limits its requests meet, its own folded with those of every key above it.
    pub effective: EffectiveObject,
}

/// A key's limits folded with those of the keys that minted it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct EffectiveObject {
    /// Whether requests with it are served: neither it nor a key above it revoked or expired.
    pub active: bool,
    /// The earliest expiry of it and the keys above it; `null`: never.
    pub expires_at: Option<DateTime>,
    /// The lowest calls-per-minute limit of it and the keys above it; `null`: none.
    pub rpm: Option<u32>,
    /// The lowest tokens-per-minute limit of it and the keys above it; `null`: none.
    pub tpm: Option<u32>,
    /// The keys whose budgets its calls count against, nearest first (each must cover a call).
    pub budget_key_ids: Vec<String>,
}

/// A key's budget as of now.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BudgetObject {
    /// The most it may spend per period.
    pub limit_usd: Usd,
    /// `total` (never starts over), `day`, `week` (from Monday) or `month`, in UTC.
    pub period: &'static str,
    /// The start of the current period.
    pub period_start: DateTime,
    /// Charged in the current period.
    pub spent_usd: Usd,
    /// Kept by its calls still running.
    pub held_usd: Usd,
    /// What it may still hold now: limit − spent − held, at least zero.
    pub remaining_usd: Usd,
}

/// The wire shape of `v`.
pub fn key(v: &KeyView) -> KeyObject {
    let k = &v.key;
    KeyObject {
        id: k.id.as_str().to_owned(),
        user_id: k.user_id.as_str().to_owned(),
        name: k.name.clone(),
        prefix: k.prefix.clone(),
        scopes: k.scopes.iter().map(|s| s.as_str()).collect(),
        created_at: k.created_at.into(),
        expires_at: k.expires_at.map(Into::into),
        models: k.models.as_ref().map(domain::ModelAllowList::entries),
        budget: v.budget.budget.map(|b| BudgetObject {
            limit_usd: b.limit.into(),
            period: b.period.as_str(),
            period_start: v.budget.spend.period_start.into(),
            spent_usd: v.budget.spend.spent.into(),
            held_usd: v.budget.spend.held.into(),
            remaining_usd: v.remaining.unwrap_or(UsdAmount::ZERO).into(),
        }),
        rpm: k.rates.rpm.map(std::num::NonZeroU32::get),
        tpm: k.rates.tpm.map(std::num::NonZeroU32::get),
        allow_ips: k.allow_ips.as_ref().map(domain::IpAllowList::entries),
        spent_usd: v.spent.into(),
        calls: v.calls,
        revoked_at: k.revoked_at.map(Into::into),
        parent_id: k.parent_id.as_ref().map(|p| p.as_str().to_owned()),
        effective: EffectiveObject {
            active: v.effective.active,
            expires_at: v.effective.expires_at.map(Into::into),
            rpm: v.effective.rates.rpm.map(std::num::NonZeroU32::get),
            tpm: v.effective.rates.tpm.map(std::num::NonZeroU32::get),
            budget_key_ids: v.effective.budget_keys.keys().iter().map(|k| k.as_str().to_owned()).collect(),
        },
    }
}

/// `GET /api/v1/keys`: `{"data": [...]}`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyList {
    /// The caller's keys, oldest first.
    pub data: Vec<KeyObject>,
}

/// The key list of `keys`.
pub fn key_list(keys: &[KeyView]) -> KeyList {
    KeyList { data: keys.iter().map(key).collect() }
}

/// The `OverviewResponse` of `o`.
pub fn overview(o: &Overview) -> OverviewObject {
    OverviewObject {
        user: user(&o.user),
        stats: Stats {
            total: o.stats.total,
            succeeded: o.stats.succeeded,
            active: o.stats.active,
            spent_usd: o.stats.spent.into(),
        },
        routes: o.routes.iter().map(ModelObject::of).collect(),
        ledger: o.ledger.iter().map(ledger_entry).collect(),
        maintenance: o.maintenance,
        keys: o
            .keys
            .iter()
            .map(|v| KeySpendObject {
                id: v.key.id.as_str().to_owned(),
                name: v.key.name.clone(),
                prefix: v.key.prefix.clone(),
                spent_usd: v.spent.into(),
                calls: v.calls,
            })
            .collect(),
    }
}

/// `value` as JSON (the wire types serialise infallibly; `Null` would only mark a bug).
pub fn to_json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The `Task` wire shape for the use cases that send it themselves (webhook bodies).
#[derive(Debug, Clone, Copy, Default)]
pub struct WireTasks;

impl service::TaskWire for WireTasks {
    fn task_json(&self, t: &Task) -> Value {
        to_json(&task(t))
    }
}
