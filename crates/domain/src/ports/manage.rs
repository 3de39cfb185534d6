//! The management port: what the management API and the console read and record beyond calls —
//! spend by day and model, pages of the ledger, users and the audit trail, and user switches.

use async_trait::async_trait;

use super::{PageRequest, StoreError};
use crate::manage::{AuditEntry, DailyModelSpend, NewAuditEntry, UserChange};
use crate::records::{ApiKey, ApiKeyId, LedgerEntry, User, UserId};

/// Reads and records of the management API.
#[async_trait]
pub trait ManageStore: Send + Sync {
    /// `user`'s settled charges with a settlement time in `[from_ms, to_ms)`, summed per UTC day
    /// and model, ordered by day then model.
    async fn daily_spend(&self, user: &UserId, from_ms: i64, to_ms: i64) -> Result<Vec<DailyModelSpend>, StoreError>;
    /// One page of `user`'s ledger, newest first, and how many entries it has in all.
    async fn ledger_page(&self, user: &UserId, page: PageRequest) -> Result<(Vec<LedgerEntry>, u64), StoreError>;
    /// One page of users, newest first, whose id, name or email contains `search` (any case),
    /// and how many match.
    async fn list_users(&self, search: Option<&str>, page: PageRequest) -> Result<(Vec<User>, u64), StoreError>;
    /// The key with this id, whoever owns it, revoked or not.
    async fn key(&self, id: &ApiKeyId) -> Result<Option<ApiKey>, StoreError>;
    /// Applies `change` to a user and returns it; `NotFound` for an unknown user.
    async fn change_user(&self, user: &UserId, change: UserChange) -> Result<User, StoreError>;
    /// Records one operator action, stamped with the store's clock.
    async fn record_audit(&self, entry: NewAuditEntry) -> Result<AuditEntry, StoreError>;
    /// One page of the audit trail, newest first, and its length.
    async fn audit_page(&self, page: PageRequest) -> Result<(Vec<AuditEntry>, u64), StoreError>;
}
