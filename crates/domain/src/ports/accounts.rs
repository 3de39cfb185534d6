//! The accounts port (users and their API keys) and the store's readiness.

use async_trait::async_trait;

use super::StoreError;
use crate::records::{ApiKey, ApiKeyId, NewUser, User, UserId};

/// Users and their API keys.
#[async_trait]
pub trait AccountStore: Send + Sync {
    /// Creates a user; a positive opening balance is booked as a `topup` ledger entry.
    async fn create_user(&self, user: NewUser) -> Result<User, StoreError>;
    /// The user, if it exists.
    async fn user(&self, id: &UserId) -> Result<Option<User>, StoreError>;
    /// How many users exist.
    async fn count_users(&self) -> Result<u64, StoreError>;
    /// Stores a new key (its hash only).
    async fn create_key(&self, key: ApiKey) -> Result<ApiKey, StoreError>;
    /// Marks a key revoked; revoking twice is allowed and keeps the first time.
    async fn revoke_key(&self, id: &ApiKeyId) -> Result<ApiKey, StoreError>;
    /// Changes a key's expiry, allow-list and budget as `change` says (revoked or not) and returns it.
    async fn set_key_limits(&self, id: &ApiKeyId, change: crate::KeyLimitsChange) -> Result<ApiKey, StoreError>;
    /// Every key of `user` (revoked ones too), oldest first.
    async fn keys_of_user(&self, user: &UserId) -> Result<Vec<ApiKey>, StoreError>;
    /// The key whose secret hashes to `hash`, with its owner, revoked or not.
    async fn key_by_hash(&self, hash: &str) -> Result<Option<(ApiKey, User)>, StoreError>;
    /// What each of `user`'s keys has been charged in all (settled calls made with it), by key;
    /// keys that made no settled call are absent.
    async fn spend_by_key(&self, user: &UserId) -> Result<Vec<KeyTotal>, StoreError>;
}

/// What one key has been charged in all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTotal {
    /// The key.
    pub key: ApiKeyId,
    /// The sum of its settled charges.
    pub spent: crate::UsdAmount,
    /// How many settled calls that is.
    pub calls: i64,
}

/// Whether the store can serve: reachable, and migrated to the schema this build expects.
#[async_trait]
pub trait Readiness: Send + Sync {
    /// Migrations this build knows that the database lacks (0 when ready); an error when the
    /// database cannot be reached or has never been migrated.
    async fn pending_migrations(&self) -> Result<u64, StoreError>;
}
