//! Wire shapes: domain records and use-case results turned into the interface's JSON objects.

use domain::{LedgerEntry, Task, TaskBilling, UsdAmount, User};
use serde_json::{Map, Value, json};
use service::{ModelView, Overview, TaskPage};

fn opt_text<T: ToString>(v: Option<T>) -> Value {
    v.map_or(Value::Null, |t| Value::String(t.to_string()))
}

/// A `Model` object: the spec's fields plus the catalog's (never the upstream profile).
pub fn model(view: &ModelView) -> Value {
    let (record, def) = (&view.record, &view.def);
    let capabilities: Map<String, Value> = def.capabilities.iter().map(|c| (c.clone(), Value::Bool(true))).collect();
    json!({
        "id": record.name,
        "public_model": record.name,
        "object": "model",
        "kind": record.kind.as_str(),
        "description": def.description,
        "enabled": record.enabled,
        "concurrency_limit": record.concurrency_limit,
        "endpoint": def.endpoint,
        "scope": def.scope.as_str(),
        "mode": def.mode.as_str(),
        "pricing_kind": record.pricing.as_ref().map(|_| def.pricing_kind.as_str()),
        "pricing": record.pricing.as_ref().map(|p| catalog::price_sheet_json(&p.sheet)),
        "pricing_version": record.pricing.as_ref().map(|p| p.version),
        "pricing_version_id": record.pricing.as_ref().map(|p| p.id()),
        "capabilities": capabilities,
        "limits": def.public_limits(),
    })
}

/// A `ModelListResponse`.
pub fn model_list(models: &[ModelView]) -> Value {
    json!({"object": "list", "data": models.iter().map(model).collect::<Vec<_>>()})
}

/// A `Billing` object.
pub fn billing(b: &TaskBilling) -> Value {
    let usage = b.usage_json.as_deref().and_then(|u| serde_json::from_str::<Value>(u).ok()).unwrap_or(Value::Null);
    json!({
        "currency": "USD",
        "status": b.status.as_str(),
        "pricing_version_id": b.pricing_version_id,
        "estimated_amount": b.estimated.to_string(),
        "estimated_amount_microusd": b.estimated.micros(),
        "actual_amount": opt_text(b.actual),
        "actual_amount_microusd": b.actual.map(UsdAmount::micros),
        "balance_after": opt_text(b.balance_after),
        "usage": usage,
    })
}

/// A `Task` object.
pub fn task(t: &Task) -> Value {
    json!({
        "id": t.id.as_str(),
        "object": "task",
        "user_id": t.user_id.as_str(),
        "model": t.model,
        "kind": t.kind.as_str(),
        "status": t.status.as_str(),
        "prompt": t.prompt,
        "provider": t.provider,
        "input_mode": t.input_mode,
        "media_type": t.media_type,
        "media_url": t.media_url,
        "duration": t.duration,
        "resolution": t.resolution,
        "ratio": t.ratio,
        "generate_audio": t.generate_audio,
        "billing": billing(&t.billing),
        "output_url": t.output_url,
        "last_frame_url": t.last_frame_url,
        "error_code": t.error_code,
        "error_message": t.error_message,
        "webhook_url": t.webhook_url,
        "created_at": t.created_at.to_string(),
        "updated_at": t.updated_at.to_string(),
        "completed_at": opt_text(t.completed_at),
    })
}

/// A `TaskListResponse`.
pub fn task_page(page: &TaskPage) -> Value {
    let p = page.query.page;
    json!({
        "object": "list",
        "data": page.tasks.iter().map(task).collect::<Vec<_>>(),
        "pagination": {
            "page": p.page,
            "page_size": p.page_size,
            "total": page.total,
            "total_pages": p.total_pages(page.total),
        },
    })
}

fn user(u: &User) -> Value {
    json!({
        "id": u.id.as_str(),
        "name": u.name,
        "email": u.email,
        "role": u.role,
        "balance_usd": u.balance.to_string(),
        "balance_microusd": u.balance.micros(),
        "concurrency_limit": u.concurrency_limit,
        "media_quota_bytes": u.media_quota_bytes,
        "created_at": u.created_at.to_string(),
    })
}

/// A ledger entry of the overview.
pub fn ledger_entry(e: &LedgerEntry) -> Value {
    json!({
        "id": e.id,
        "task_id": e.task_id.as_ref().map(|t| t.as_str()),
        "kind": e.kind.as_str(),
        "amount_usd": e.amount.to_string(),
        "amount_microusd": e.amount.micros(),
        "balance_after": e.balance_after.to_string(),
        "description": e.description,
        "created_at": e.created_at.to_string(),
    })
}

/// An `OverviewResponse`.
pub fn overview(o: &Overview) -> Value {
    json!({
        "user": user(&o.user),
        "stats": {
            "total": o.stats.total,
            "succeeded": o.stats.succeeded,
            "active": o.stats.active,
            "spent_usd": o.stats.spent.to_string(),
        },
        "routes": o.routes.iter().map(model).collect::<Vec<_>>(),
        "ledger": o.ledger.iter().map(ledger_entry).collect::<Vec<_>>(),
        "maintenance": o.maintenance,
    })
}

/// The `Task` wire shape for the use cases that send it themselves (webhook bodies).
#[derive(Debug, Clone, Copy, Default)]
pub struct WireTasks;

impl service::TaskWire for WireTasks {
    fn task_json(&self, t: &Task) -> Value {
        task(t)
    }
}
