//! The audit trail's one writer: every door that changes credentials, secrets, limits, balances,
//! users, models, prices or maintenance records one row through [`Gateway::record_audit`], with
//! the state before and after as JSON (never a secret).

use domain::{Actor, ApiKey, NewAuditEntry};
use serde_json::{Value, json};

use crate::{Gateway, ServiceError};

/// A key's audited state (never its secret or hash).
pub(crate) fn key_state(key: &ApiKey) -> Value {
    json!({
        "parent_id": key.parent_id.as_ref().map(|p| p.as_str()),
        "user_id": key.user_id.as_str(),
        "name": key.name,
        "scopes": key.scopes.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "revoked": key.revoked_at.is_some(),
        "expires_at": key.expires_at.map(|t| t.to_string()),
        "models": key.models.as_ref().map(ToString::to_string),
        "budget_usd": key.budget.as_ref().map(|b| b.limit.to_string()),
        "budget_period": key.budget.as_ref().map(|b| b.period.as_str()),
        "rpm": key.rates.rpm.map(|n| n.get()),
        "tpm": key.rates.tpm.map(|n| n.get()),
        "allow_ips": key.allow_ips.as_ref().map(ToString::to_string),
    })
}

impl Gateway {
    /// Records one change in the audit trail: who (`actor`), what (`action`), on what (`target`),
    /// and the state before and after as JSON (never a secret). Every door that changes
    /// credentials, secrets, limits, balances, users, models, prices or maintenance calls it.
    pub(crate) async fn record_audit(
        &self,
        actor: &Actor,
        action: &str,
        target: &str,
        before: Option<Value>,
        after: Option<Value>,
    ) -> Result<(), ServiceError> {
        let entry = NewAuditEntry {
            actor: actor.clone(),
            action: action.to_owned(),
            target: target.to_owned(),
            before: before.map(|v| v.to_string()),
            after: after.map(|v| v.to_string()),
        };
        self.ports.manage.record_audit(entry).await?;
        Ok(())
    }
}
