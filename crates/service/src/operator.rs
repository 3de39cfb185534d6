//! The operator's front door: every operator action, from `gateway admin …` or from the
//! management API, goes through an [`Operator`] and is recorded in the audit trail (who, what, on
//! what, the state before and after), so the two never drift and neither goes unrecorded.

use domain::{
    Actor, ApiKey, ApiKeyId, AuditEntry, KeyLimits, KeyLimitsChange, LedgerEntry, ModelAlias, ModelRecord, PriceSheet,
    PricingVersion, Role, Scope, UsdAmount, User, UserChange, UserId,
};
use serde_json::{Value, json};

use crate::admin::{CreatedKey, CreatedUser, NewUserRequest};
use crate::audit::key_state;
use crate::manage::Page;
use crate::{Gateway, KeyView, Principal, ServiceError};

/// An operator acting on the gateway; see the module text.
#[derive(Clone, Copy)]
pub struct Operator<'g> {
    gateway: &'g Gateway,
    actor: &'g Actor,
}

/// A user as an operator sees it, with its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDetail {
    /// The user (balance, caps, quota, disabled).
    pub user: User,
    /// Its keys, revoked ones too, oldest first.
    pub keys: Vec<KeyView>,
}

fn user_state(user: &User) -> Value {
    json!({
        "balance_usd": user.balance.to_string(),
        "disabled": user.disabled_at.is_some(),
        "concurrency_limit": user.concurrency_limit,
        "media_quota_bytes": user.media_quota_bytes,
    })
}

fn model_state(model: &ModelRecord) -> Value {
    json!({
        "enabled": model.enabled,
        "concurrency_limit": model.concurrency_limit,
        "pricing_version": model.pricing.as_ref().map(|p| p.version),
    })
}

impl Gateway {
    /// The operator handle for `actor`.
    pub fn operator<'g>(&'g self, actor: &'g Actor) -> Operator<'g> {
        Operator { gateway: self, actor }
    }

    /// The actor behind any key: its owner and the key's id.
    pub fn key_actor(who: &Principal) -> Actor {
        Actor::Key { user: who.user_id.clone(), key: who.key_id.as_str().to_owned() }
    }

    /// The operator behind a management API key: the key's owner must have the `admin` role (its
    /// scope was checked when it authenticated); anyone else's key is `InvalidApiKey`.
    pub fn operator_actor(&self, who: &Principal) -> Result<Actor, ServiceError> {
        if who.role != Role::Admin || !who.scopes.contains(&Scope::Admin) {
            return Err(ServiceError::InvalidApiKey);
        }
        Ok(Gateway::key_actor(who))
    }
}

impl<'g> Operator<'g> {
    /// The gateway the operator acts on.
    pub(crate) fn gateway(&self) -> &'g Gateway {
        self.gateway
    }

    /// `cli`, or the operator's user id.
    pub(crate) fn actor_id(&self) -> String {
        self.actor.who().to_owned()
    }

    pub(crate) async fn record(
        &self,
        action: &str,
        target: &str,
        before: Option<Value>,
        after: Option<Value>,
    ) -> Result<(), ServiceError> {
        self.gateway.record_audit(self.actor, action, target, before, after).await
    }

    async fn user(&self, id: &UserId) -> Result<User, ServiceError> {
        self.gateway.ports.accounts.user(id).await?.ok_or_else(|| ServiceError::NotFound(format!("user {id}")))
    }

    async fn model(&self, name: &str) -> Result<ModelRecord, ServiceError> {
        let models = self.gateway.ports.models.models().await?;
        models.into_iter().find(|m| m.name == name).ok_or_else(|| ServiceError::NotFound(format!("model {name}")))
    }

    async fn key(&self, id: &ApiKeyId) -> Result<ApiKey, ServiceError> {
        let found = self.gateway.ports.manage.key(id).await?;
        found.ok_or_else(|| ServiceError::NotFound(format!("key {id}")))
    }

    /// One page of users, newest first; `q` searches id, name and email.
    pub async fn users<'a>(
        &self,
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Page<User>, ServiceError> {
        let query = validation::list_query(params, true)?;
        let (items, total) = self.gateway.ports.manage.list_users(query.search.as_deref(), query.page).await?;
        Ok(Page { items, page: query.page, total })
    }

    /// A user with its keys.
    pub async fn user_detail(&self, id: &UserId) -> Result<UserDetail, ServiceError> {
        let user = self.user(id).await?;
        let keys = self.gateway.keys_of(id).await?;
        Ok(UserDetail { user, keys })
    }

    /// Creates a user (see [`Gateway::create_user`]).
    pub async fn create_user(&self, req: NewUserRequest) -> Result<CreatedUser, ServiceError> {
        let created = self.gateway.create_user(req).await?;
        let mut after = user_state(&created.user);
        after["email"] = json!(created.user.email);
        after["role"] = json!(created.user.role.as_str());
        self.record("user.create", created.user.id.as_str(), None, Some(after)).await?;
        Ok(created)
    }

    /// Adds money to a user's balance.
    pub async fn topup(&self, user: &UserId, amount: UsdAmount, note: &str) -> Result<LedgerEntry, ServiceError> {
        let before = self.user(user).await?;
        let entry = self.gateway.topup(user, amount, note).await?;
        let after = json!({"balance_usd": entry.balance_after.to_string(), "amount_usd": amount.to_string(), "note": entry.description});
        self.record("user.topup", user.as_str(), Some(json!({"balance_usd": before.balance.to_string()})), Some(after))
            .await?;
        Ok(entry)
    }

    /// Corrects a user's balance by a signed, non-zero `amount` (a refunded or disputed payment
    /// taken back, a goodwill credit): an `adjustment` ledger entry noted `note` (required), which
    /// may take the balance below zero. Audited as `user.adjust`.
    pub async fn adjust(&self, user: &UserId, amount: UsdAmount, note: &str) -> Result<LedgerEntry, ServiceError> {
        let note = note.trim();
        if note.is_empty() || note.chars().count() > 500 {
            return Err(ServiceError::InvalidRequest("an adjustment needs a note of 1..500 characters".into()));
        }
        if amount.micros() == 0 {
            return Err(ServiceError::InvalidRequest("an adjustment must not be zero".into()));
        }
        let before = self.user(user).await?;
        let entry = self.gateway.ports.ledger.credit(user, amount, domain::LedgerKind::Adjustment, note).await?;
        let after =
            json!({"balance_usd": entry.balance_after.to_string(), "amount_usd": amount.to_string(), "note": note});
        self.record(
            "user.adjust",
            user.as_str(),
            Some(json!({"balance_usd": before.balance.to_string()})),
            Some(after),
        )
        .await?;
        Ok(entry)
    }

    /// Disables or enables a user, or changes its caps; keys see the change at once on this
    /// replica and within the key cache's second on the others.
    pub async fn change_user(&self, user: &UserId, change: UserChange) -> Result<User, ServiceError> {
        if change.is_empty() {
            return Err(ServiceError::InvalidRequest(
                "give disabled, concurrency_limit and/or media_quota_bytes".into(),
            ));
        }
        if let Some(limit) = change.concurrency_limit
            && !(1..=100_000).contains(&limit)
        {
            return Err(ServiceError::InvalidRequest("concurrency limit must be within 1..100000".into()));
        }
        if change.media_quota_bytes.is_some_and(|q| q < 0) {
            return Err(ServiceError::InvalidRequest("media quota must not be negative".into()));
        }
        let before = self.user(user).await?;
        let after = self.gateway.ports.manage.change_user(user, change).await?;
        self.gateway.caches.clear();
        self.record("user.change", user.as_str(), Some(user_state(&before)), Some(user_state(&after))).await?;
        Ok(after)
    }

    /// Replaces a user's webhook secret (the secret itself is never recorded).
    pub async fn rotate_webhook_secret(&self, user: &UserId) -> Result<String, ServiceError> {
        self.user(user).await?;
        let secret = self.gateway.rotate_webhook_secret(user).await?;
        self.record("user.webhook_secret", user.as_str(), None, Some(json!({"rotated": true}))).await?;
        Ok(secret)
    }

    /// Issues a key to a user (see [`Gateway::create_key`]); its secret is never recorded.
    pub async fn create_key(
        &self,
        user: &UserId,
        scopes: Vec<Scope>,
        name: &str,
        limits: KeyLimits,
    ) -> Result<CreatedKey, ServiceError> {
        self.user(user).await?;
        let created = self.gateway.create_key(user, scopes, name, limits).await?;
        self.record("key.create", created.key.id.as_str(), None, Some(key_state(&created.key))).await?;
        Ok(created)
    }

    /// Revokes any user's key.
    pub async fn revoke_key(&self, id: &ApiKeyId) -> Result<ApiKey, ServiceError> {
        let before = self.key(id).await?;
        let key = self.gateway.revoke_key(id).await?;
        self.record("key.revoke", id.as_str(), Some(key_state(&before)), Some(key_state(&key))).await?;
        Ok(key)
    }

    /// Changes a key's limits (see [`Gateway::set_key_limits`]).
    pub async fn set_key_limits(&self, id: &ApiKeyId, change: KeyLimitsChange) -> Result<ApiKey, ServiceError> {
        let before = self.key(id).await?;
        let key = self.gateway.set_key_limits(id, change).await?;
        self.record("key.limits", id.as_str(), Some(key_state(&before)), Some(key_state(&key))).await?;
        Ok(key)
    }

    /// Every stored model, enabled or not, with its active price.
    pub async fn models(&self) -> Result<Vec<ModelRecord>, ServiceError> {
        Ok(self.gateway.ports.models.models().await?)
    }

    /// Switches a model on or off and/or changes its cap.
    pub async fn set_model(
        &self,
        name: &str,
        enabled: Option<bool>,
        concurrency_limit: Option<i64>,
    ) -> Result<ModelRecord, ServiceError> {
        if enabled.is_none() && concurrency_limit.is_none() {
            return Err(ServiceError::InvalidRequest("give enabled and/or concurrency_limit".into()));
        }
        let before = self.model(name).await?;
        let after = self.gateway.set_model(name, enabled, concurrency_limit).await?;
        self.record("model.set", name, Some(model_state(&before)), Some(model_state(&after))).await?;
        Ok(after)
    }

    /// Adds a price version for a model and makes it active.
    pub async fn set_price(&self, name: &str, sheet: PriceSheet) -> Result<PricingVersion, ServiceError> {
        let before = self.model(name).await?;
        let version = self.gateway.set_price(name, sheet).await?;
        let after = json!({"pricing_version": version.version, "pricing": catalog::price_sheet_json(&version.sheet)});
        self.record("model.price", name, Some(model_state(&before)), Some(after)).await?;
        Ok(version)
    }

    /// Whether maintenance mode is on.
    pub async fn maintenance(&self) -> Result<bool, ServiceError> {
        Ok(self.gateway.ports.models.maintenance().await?)
    }

    /// Creates or replaces the model alias `alias`: a name that is no model's, for 1 to 4 known
    /// models of one kind, tried in order.
    pub async fn set_alias(&self, alias: ModelAlias) -> Result<ModelAlias, ServiceError> {
        self.gateway.check_alias(&alias).await?;
        let before = self.gateway.model_aliases().await?.into_iter().find(|a| a.name == alias.name);
        self.gateway.ports.models.set_alias(&alias).await?;
        self.gateway.caches.clear();
        let after = Some(json!({"models": alias.models}));
        self.record("alias.set", &alias.name, before.map(|a| json!({"models": a.models})), after).await?;
        Ok(alias)
    }

    /// Removes the model alias `name` (404 when there is none).
    pub async fn delete_alias(&self, name: &str) -> Result<(), ServiceError> {
        let before = self.gateway.model_aliases().await?.into_iter().find(|a| a.name == name);
        let before = before.ok_or_else(|| ServiceError::NotFound(format!("model alias {name}")))?;
        self.gateway.ports.models.delete_alias(name).await?;
        self.gateway.caches.clear();
        self.record("alias.delete", name, Some(json!({"models": before.models})), None).await
    }

    /// Turns maintenance mode on or off.
    pub async fn set_maintenance(&self, on: bool) -> Result<(), ServiceError> {
        let before = self.maintenance().await?;
        self.gateway.set_maintenance(on).await?;
        self.record("maintenance", "maintenance", Some(json!({"enabled": before})), Some(json!({"enabled": on}))).await
    }

    /// One page of the audit trail, newest first.
    pub async fn audit<'a>(
        &self,
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Page<AuditEntry>, ServiceError> {
        let query = validation::list_query(params, false)?;
        let (items, total) = self.gateway.ports.manage.audit_page(query.page).await?;
        Ok(Page { items, page: query.page, total })
    }
}
