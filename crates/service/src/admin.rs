//! Operator use cases behind `gateway admin …`, catalog seeding and the first-run demo account.

use catalog::Catalog;
use domain::{
    ApiKey, ApiKeyId, KeyBudget, KeyLimits, KeyLimitsChange, LedgerEntry, LedgerKind, ModelAllowList, ModelRecord,
    ModelRule, NewUser, PriceSheet, PricingVersion, Role, Scope, Timestamp, UsdAmount, User, UserId,
};

use crate::keys::{generate_secret, hex};
use crate::{Gateway, ServiceError};

/// The prefix of every webhook secret, so that leaked secrets are easy to recognise.
pub const WEBHOOK_SECRET_PREFIX: &str = "whsec_";

/// A new user's concurrency cap when none is given (the console, the API and `gateway admin`).
pub const NEW_USER_CONCURRENCY_LIMIT: i64 = 16;

/// A new user's media quota when none is given: 1 GiB.
pub const NEW_USER_MEDIA_QUOTA_BYTES: i64 = 1 << 30;

/// What an operator gives to create a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUserRequest {
    /// Display name, 1..200 characters.
    pub name: String,
    /// Contact address; must look like an email address.
    pub email: String,
    /// `user` or `admin`.
    pub role: String,
    /// Opening balance, not negative.
    pub balance: UsdAmount,
    /// Per-user concurrency cap, 1..100000.
    pub concurrency_limit: i64,
    /// Media quota in bytes, not negative.
    pub media_quota_bytes: i64,
}

/// A key just created: the stored record and the secret, shown this once.
#[derive(Clone, PartialEq, Eq)]
pub struct CreatedKey {
    /// The stored record.
    pub key: ApiKey,
    /// The secret.
    pub secret: String,
}

impl std::fmt::Debug for CreatedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedKey").field("key", &self.key).field("secret", &"*****").finish()
    }
}

/// A user just created, and the secret its webhooks are signed with (shown to the operator).
#[derive(Clone, PartialEq, Eq)]
pub struct CreatedUser {
    /// The stored user.
    pub user: User,
    /// The webhook secret: [`WEBHOOK_SECRET_PREFIX`] and 32 random bytes in hex.
    pub webhook_secret: String,
}

impl std::fmt::Debug for CreatedUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedUser").field("user", &self.user).field("webhook_secret", &"*****").finish()
    }
}

/// A new webhook secret from 32 bytes of operating-system randomness.
fn new_webhook_secret() -> Result<String, ServiceError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| ServiceError::Internal(format!("no randomness: {e}")))?;
    Ok(format!("{WEBHOOK_SECRET_PREFIX}{}", hex(&bytes)))
}

/// The first-run demo account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoAccount {
    /// The demo user.
    pub user: User,
    /// Its all-scopes key.
    pub key: CreatedKey,
}

fn looks_like_email(email: &str) -> bool {
    let Some((local, domain)) = email.split_once('@') else { return false };
    !local.is_empty()
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && !domain.contains('@')
}

impl Gateway {
    /// Creates a user with a new webhook secret; a positive opening balance is a `topup` ledger
    /// entry. The secret is in the result (for the operator to hand over) and never logged.
    pub async fn create_user(&self, req: NewUserRequest) -> Result<CreatedUser, ServiceError> {
        let name = req.name.trim();
        if name.is_empty() || name.chars().count() > 200 {
            return Err(ServiceError::InvalidRequest("name must be 1..200 characters".into()));
        }
        if !looks_like_email(&req.email) {
            return Err(ServiceError::InvalidRequest(format!("{:?} is not an email address", req.email)));
        }
        let role: Role = req
            .role
            .parse()
            .map_err(|_| ServiceError::InvalidRequest(format!("role must be user or admin, got {:?}", req.role)))?;
        if req.balance.is_negative() {
            return Err(ServiceError::InvalidRequest("balance must not be negative".into()));
        }
        if !(1..=100_000).contains(&req.concurrency_limit) {
            return Err(ServiceError::InvalidRequest("concurrency limit must be within 1..100000".into()));
        }
        if req.media_quota_bytes < 0 {
            return Err(ServiceError::InvalidRequest("media quota must not be negative".into()));
        }
        let user = NewUser {
            id: UserId(self.ports.ids.new_id("usr_")),
            name: name.to_owned(),
            email: req.email,
            role,
            balance: req.balance,
            concurrency_limit: req.concurrency_limit,
            media_quota_bytes: req.media_quota_bytes,
        };
        let webhook_secret = new_webhook_secret()?;
        let user = self.ports.accounts.create_user(user).await?;
        self.ports.videos.set_webhook_secret(&user.id, &webhook_secret).await?;
        Ok(CreatedUser { user, webhook_secret })
    }

    /// Replaces `user`'s webhook secret with a new one, which is returned; webhooks signed from
    /// now on use it.
    pub async fn rotate_webhook_secret(&self, user: &UserId) -> Result<String, ServiceError> {
        let secret = new_webhook_secret()?;
        self.ports.videos.set_webhook_secret(user, &secret).await?;
        Ok(secret)
    }

    /// Issues a key with `scopes` to `user`, with `limits` (expiry, model allow-list, budget, rate
    /// limits); the secret is in the result and nowhere else.
    pub async fn create_key(
        &self,
        user: &UserId,
        scopes: Vec<Scope>,
        name: &str,
        limits: KeyLimits,
    ) -> Result<CreatedKey, ServiceError> {
        self.issue_key(user, scopes, name, limits, None).await
    }

    /// Issues a key as [`Gateway::create_key`] does, the child of `parent` when a key mints it.
    pub(crate) async fn issue_key(
        &self,
        user: &UserId,
        scopes: Vec<Scope>,
        name: &str,
        limits: KeyLimits,
        parent: Option<&ApiKeyId>,
    ) -> Result<CreatedKey, ServiceError> {
        if scopes.is_empty() {
            return Err(ServiceError::InvalidRequest("a key needs at least one scope".into()));
        }
        let KeyLimits { expires_at, models, budget, rates, allow_ips } = limits;
        self.check_key_limits(expires_at, models.as_ref(), budget.as_ref()).await?;
        let fresh = generate_secret().map_err(|e| ServiceError::Internal(format!("no randomness: {e}")))?;
        let key = ApiKey {
            id: ApiKeyId(self.ports.ids.new_id("key_")),
            user_id: user.clone(),
            name: name.to_owned(),
            hash: fresh.hash,
            prefix: fresh.prefix,
            scopes,
            revoked_at: None,
            created_at: self.ports.clock.now(),
            expires_at,
            models,
            budget,
            spend: domain::KeySpend::default(),
            rates,
            allow_ips,
            parent_id: parent.cloned(),
        };
        let key = self.ports.accounts.create_key(key).await?;
        Ok(CreatedKey { key, secret: fresh.secret })
    }

    /// Revokes a key; later calls with it get `invalid_api_key`.
    pub async fn revoke_key(&self, id: &ApiKeyId) -> Result<ApiKey, ServiceError> {
        let key = self.ports.accounts.revoke_key(id).await?;
        self.caches.clear();
        Ok(key)
    }

    /// Every key of `user` (revoked ones too), oldest first, with its budget's spend and what it
    /// was charged in all; 404 for an unknown user.
    pub async fn list_keys(&self, user: &UserId) -> Result<Vec<crate::KeyView>, ServiceError> {
        if self.ports.accounts.user(user).await?.is_none() {
            return Err(ServiceError::NotFound(format!("user {user}")));
        }
        self.keys_of(user).await
    }

    /// Changes a key's expiry, allow-list, budget and rate limits as `change` says (a `Some(None)`
    /// clears one) and returns the stored key; requests with it see the change at once in this
    /// process, and within the principal cache's lifetime (one second) on other replicas.
    pub async fn set_key_limits(&self, id: &ApiKeyId, change: KeyLimitsChange) -> Result<ApiKey, ServiceError> {
        if change == KeyLimitsChange::default() {
            return Err(ServiceError::InvalidRequest(
                "give --expires-at, --models, --budget-usd, --rpm, --tpm and/or --allow-ip".into(),
            ));
        }
        let expires_at = change.expires_at.flatten();
        let models = change.models.as_ref().and_then(Option::as_ref);
        self.check_key_limits(expires_at, models, change.budget.as_ref().and_then(Option::as_ref)).await?;
        let key = self.ports.accounts.set_key_limits(id, change).await?;
        self.caches.clear();
        Ok(key)
    }

    /// A new expiry must be in the future, a budget at least zero, and every name on an
    /// allow-list a model the store knows (enabled or not; kinds are parsed by the list itself).
    async fn check_key_limits(
        &self,
        expires_at: Option<Timestamp>,
        models: Option<&ModelAllowList>,
        budget: Option<&KeyBudget>,
    ) -> Result<(), ServiceError> {
        if let Some(b) = budget
            && b.limit.is_negative()
        {
            return Err(ServiceError::InvalidRequest(format!("a key's budget cannot be below zero ({})", b.limit)));
        }
        if let Some(at) = expires_at
            && at <= self.ports.clock.now()
        {
            return Err(ServiceError::InvalidRequest(format!(
                "expiry {at} is not in the future (revoke the key to stop it now)"
            )));
        }
        let Some(list) = models else { return Ok(()) };
        let known = self.ports.models.models().await?;
        for rule in list.rules() {
            if let ModelRule::Name(name) = rule
                && !known.iter().any(|m| &m.name == name)
            {
                let kinds = domain::ModelKind::ALL.map(domain::ModelKind::as_str).join(", ");
                return Err(ServiceError::InvalidRequest(format!(
                    "{name:?} is neither a known model nor a kind ({kinds})"
                )));
            }
        }
        Ok(())
    }

    /// Adds money to a user's balance.
    pub async fn topup(&self, user: &UserId, amount: UsdAmount, note: &str) -> Result<LedgerEntry, ServiceError> {
        if amount.micros() <= 0 {
            return Err(ServiceError::InvalidRequest("a top-up must be above zero".into()));
        }
        let note = if note.is_empty() { "top-up" } else { note };
        Ok(self.ports.ledger.credit(user, amount, LedgerKind::Topup, note).await?)
    }

    /// Switches a model on or off and/or changes its cap.
    pub async fn set_model(
        &self,
        name: &str,
        enabled: Option<bool>,
        concurrency_limit: Option<i64>,
    ) -> Result<ModelRecord, ServiceError> {
        let model = self.ports.models.set_model(name, enabled, concurrency_limit).await?;
        self.caches.clear();
        Ok(model)
    }

    /// Adds a price version for a model and makes it active.
    pub async fn set_price(&self, name: &str, sheet: PriceSheet) -> Result<PricingVersion, ServiceError> {
        sheet.validate().map_err(|e| ServiceError::InvalidRequest(e.to_string()))?;
        let version = self.ports.models.set_price(name, sheet).await?;
        self.caches.clear();
        Ok(version)
    }

    /// Turns maintenance mode on or off.
    pub async fn set_maintenance(&self, on: bool) -> Result<(), ServiceError> {
        self.ports.models.set_maintenance(on).await?;
        self.caches.clear();
        Ok(())
    }

    /// Loads catalog models the store does not know yet; returns how many were added.
    pub async fn seed_catalog(&self, catalog: &Catalog) -> Result<u64, ServiceError> {
        let seeds = catalog.models.iter().map(|m| m.seed()).collect();
        Ok(self.ports.models.seed_models(seeds).await?)
    }

    /// The first-run demo user (by its address), when there is one.
    pub async fn demo_user(&self) -> Result<Option<domain::User>, ServiceError> {
        let page = domain::ports::PageRequest { page: 1, page_size: 10 };
        let (users, _) = self.ports.manage.list_users(Some(DEMO_EMAIL), page).await?;
        Ok(users.into_iter().find(|u| u.email == DEMO_EMAIL))
    }

    /// On a store without users, creates a demo user with `balance` and an all-scopes key, both
    /// recorded in the audit trail as the command line's (`serve` on the operator's machine).
    /// Returns `None` when users exist already.
    pub async fn ensure_demo_account(&self, balance: UsdAmount) -> Result<Option<DemoAccount>, ServiceError> {
        if self.ports.accounts.count_users().await? > 0 {
            return Ok(None);
        }
        let actor = domain::Actor::Cli;
        let operator = self.operator(&actor);
        let user = operator
            .create_user(NewUserRequest {
                name: "Demo".into(),
                email: DEMO_EMAIL.into(),
                role: Role::Admin.as_str().into(),
                balance,
                concurrency_limit: 64,
                media_quota_bytes: 1 << 30,
            })
            .await?
            .user;
        let key = operator.create_key(&user.id, Scope::ALL.to_vec(), "demo", KeyLimits::default()).await?;
        Ok(Some(DemoAccount { user, key }))
    }
}

/// The first-run demo user's address.
pub const DEMO_EMAIL: &str = "demo@example.com";

#[cfg(test)]
mod tests {
    use super::{WEBHOOK_SECRET_PREFIX, looks_like_email, new_webhook_secret};

    #[test]
    fn webhook_secrets_are_random_prefixed_hex() {
        let a = new_webhook_secret().expect("randomness");
        let b = new_webhook_secret().expect("randomness");
        assert_ne!(a, b);
        let digits = a.strip_prefix(WEBHOOK_SECRET_PREFIX).expect("prefix");
        assert_eq!(digits.len(), 64);
        assert!(digits.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{a}");
    }

    #[test]
    fn email_shapes() {
        for ok in ["a@b.co", "first.last+tag@example.com"] {
            assert!(looks_like_email(ok), "{ok}");
        }
        for bad in ["", "a", "a@", "@b.co", "a@b", "a b@c.de", "a@.com", "a@b.", "a@b@c.de"] {
            assert!(!looks_like_email(bad), "{bad}");
        }
    }
}
