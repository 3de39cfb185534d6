//! The records the gateway keeps: users, API keys, tasks with their billing, ledger entries, models.

use std::fmt;
use std::str::FromStr;

use crate::kind::{ModelKind, UnknownName};
use crate::money::UsdAmount;
use crate::pricing::PricingVersion;
use crate::scope::Scope;
use crate::task::TaskStatus;
use crate::time::Timestamp;

pub use crate::ids::{ApiKeyId, TaskId, UserId};

/// What an account may do: an ordinary `user`, or an `admin`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// An ordinary account.
    User,
    /// An operator's account.
    Admin,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 2] = [Role::User, Role::Admin];

    /// The stored and wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL.into_iter().find(|r| r.as_str() == s).ok_or_else(|| UnknownName { what: "role", value: s.to_owned() })
    }
}

/// An account holding a prepaid USD balance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Id.
    pub id: UserId,
    /// Display name.
    pub name: String,
    /// Contact address.
    pub email: String,
    /// What the account may do.
    pub role: Role,
    /// Current balance; equals the sum of the user's ledger entries.
    pub balance: UsdAmount,
    /// Most in-flight calls and unfinished video tasks at once.
    pub concurrency_limit: i64,
    /// Bytes of stored media allowed.
    pub media_quota_bytes: i64,
    /// Bytes of stored media counted against the quota.
    pub media_used_bytes: i64,
    /// Creation time.
    pub created_at: Timestamp,
    /// When an operator disabled the account (every key refused); `None` while enabled.
    pub disabled_at: Option<Timestamp>,
}

/// What an operator supplies to create a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUser {
    /// Id to give the user.
    pub id: UserId,
    /// Display name.
    pub name: String,
    /// Contact address.
    pub email: String,
    /// What the account may do.
    pub role: Role,
    /// Opening balance, booked as a `topup` ledger entry when above zero.
    pub balance: UsdAmount,
    /// Per-user concurrency cap.
    pub concurrency_limit: i64,
    /// Media quota in bytes.
    pub media_quota_bytes: i64,
}

/// An API key as stored: the secret itself is never kept, only its SHA-256 hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// Id, shown to operators.
    pub id: ApiKeyId,
    /// Owner.
    pub user_id: UserId,
    /// Operator's label.
    pub name: String,
    /// Lowercase hex SHA-256 of the secret.
    pub hash: String,
    /// First characters of the secret, for recognising it in lists.
    pub prefix: String,
    /// What the key may do.
    pub scopes: Vec<Scope>,
    /// When it was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
    /// Creation time.
    pub created_at: Timestamp,
    /// From this instant on the key is refused as expired; `None`: it never expires.
    pub expires_at: Option<Timestamp>,
    /// The models it may reach; `None`: every model.
    pub models: Option<crate::ModelAllowList>,
    /// Its spend budget; `None`: only the owner's balance limits it.
    pub budget: Option<crate::KeyBudget>,
    /// Its budget counters as last read (zero for a key that never had a budget).
    pub spend: crate::KeySpend,
    /// Its requests- and tokens-per-minute limits.
    pub rates: crate::KeyRates,
    /// The client addresses it may be used from; `None`: any.
    pub allow_ips: Option<crate::IpAllowList>,
    /// The key that minted it through the API (its limits are within that key's, and it ends
    /// with it); `None` for a key an operator issued.
    pub parent_id: Option<ApiKeyId>,
}

impl ApiKey {
    /// The budget and its counters.
    pub fn budget_state(&self) -> crate::KeyBudgetState {
        crate::KeyBudgetState { budget: self.budget, spend: self.spend }
    }
}

/// Billing state of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BillingStatus {
    /// The estimate is held against the balance.
    Reserved,
    /// Charged at actual usage.
    Settled,
    /// The hold was returned in full.
    Refunded,
    /// Never reserved (rejected before reservation).
    Unbilled,
}

impl BillingStatus {
    /// Every status.
    pub const ALL: [BillingStatus; 4] =
        [BillingStatus::Reserved, BillingStatus::Settled, BillingStatus::Refunded, BillingStatus::Unbilled];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            BillingStatus::Reserved => "reserved",
            BillingStatus::Settled => "settled",
            BillingStatus::Refunded => "refunded",
            BillingStatus::Unbilled => "unbilled",
        }
    }
}

impl FromStr for BillingStatus {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BillingStatus::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownName { what: "billing status", value: s.to_owned() })
    }
}

/// The billing of one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskBilling {
    /// Where the reservation stands.
    pub status: BillingStatus,
    /// The price version used (`LangB-2.0-pro@v1` on the wire).
    pub pricing_version_id: Option<crate::pricing::PricingVersionId>,
    /// The amount reserved up front.
    pub estimated: UsdAmount,
    /// The amount charged, once settled (zero when refunded).
    pub actual: Option<UsdAmount>,
    /// The balance right after the last movement of this task.
    pub balance_after: Option<UsdAmount>,
    /// Usage reported by the upstream, as JSON text.
    pub usage_json: Option<String>,
    /// The keys whose spend budgets the reservation counts against (the key that made the task
    /// and its ancestors that had a budget then); empty: only the balance.
    pub budget_keys: crate::BudgetKeys,
    /// The most the call may be charged (the caller's `X-Max-Cost`); `None`: no cap.
    pub max_cost: Option<UsdAmount>,
}

/// An operator's name for a list of models of one kind, tried in order (`gateway admin alias`,
/// `[[model_aliases]]`): a call naming it falls back from each to the next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelAlias {
    /// The name callers send as `model`; never a model's own name.
    pub name: String,
    /// The models, in the order they are tried (1 to [`ModelAlias::MAX_MODELS`]).
    pub models: Vec<String>,
}

impl ModelAlias {
    /// Most models an alias, or a call's `models`, names.
    pub const MAX_MODELS: usize = 4;
}

/// A unit of billable work: a video task, or one synchronous call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    /// Id.
    pub id: TaskId,
    /// Owner.
    pub user_id: UserId,
    /// The API key that made it (`None` for tasks stored before keys were recorded).
    pub key_id: Option<ApiKeyId>,
    /// Public model name.
    pub model: String,
    /// The model's kind.
    pub kind: ModelKind,
    /// State.
    pub status: TaskStatus,
    /// Prompt, when the call had one.
    pub prompt: Option<String>,
    /// Upstream provider name.
    pub provider: String,
    /// How the input media arrived.
    pub input_mode: Option<crate::inputs::InputMode>,
    /// What kind of media the inputs are.
    pub media_type: Option<crate::inputs::MediaType>,
    /// The input media in order (stored as the `media_url` JSON record; empty without media).
    pub media: Vec<crate::media::TaskMedia>,
    /// Seconds of output (video, audio).
    pub duration: Option<i64>,
    /// Video resolution.
    pub resolution: Option<crate::Resolution>,
    /// Video aspect ratio.
    pub ratio: Option<crate::inputs::Ratio>,
    /// Whether video has sound.
    pub generate_audio: Option<bool>,
    /// Billing.
    pub billing: TaskBilling,
    /// Result address.
    pub output_url: Option<String>,
    /// Video last frame address.
    pub last_frame_url: Option<String>,
    /// Failure code.
    pub error_code: Option<String>,
    /// Failure text.
    pub error_message: Option<String>,
    /// Where status changes are posted.
    pub webhook_url: Option<String>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
    /// When it reached a terminal state.
    pub completed_at: Option<Timestamp>,
    /// The replica running a synchronous call (its liveness lease says whether the call can still
    /// end); `None` for video tasks, which the worker claims instead.
    pub runner: Option<String>,
    /// What the call asked for when it named an alias or a list of models (`fast`, `A,B`); the
    /// task's `model` is the one that served it. `None` when it named one model.
    pub requested: Option<String>,
}

/// Counts shown in the account overview.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskStats {
    /// All tasks.
    pub total: i64,
    /// Tasks in `succeeded`.
    pub succeeded: i64,
    /// Tasks not yet terminal.
    pub active: i64,
    /// Sum of settled charges.
    pub spent: UsdAmount,
}

/// Why a balance moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LedgerKind {
    /// Money added by an operator.
    Topup,
    /// A hold for a call's worst case (negative).
    Reserve,
    /// The difference between the hold and the actual charge (positive when the call cost less).
    Settle,
    /// Part of a hold given back without a charge.
    Release,
    /// A whole hold given back because the call failed (positive).
    Refund,
    /// A manual correction by an operator.
    Adjustment,
    /// A voucher (redemption code) redeemed by the user.
    Voucher,
}

impl LedgerKind {
    /// Every kind.
    pub const ALL: [LedgerKind; 7] = [
        LedgerKind::Topup,
        LedgerKind::Reserve,
        LedgerKind::Settle,
        LedgerKind::Release,
        LedgerKind::Refund,
        LedgerKind::Adjustment,
        LedgerKind::Voucher,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            LedgerKind::Topup => "topup",
            LedgerKind::Reserve => "reserve",
            LedgerKind::Settle => "settle",
            LedgerKind::Release => "release",
            LedgerKind::Refund => "refund",
            LedgerKind::Adjustment => "adjustment",
            LedgerKind::Voucher => "voucher",
        }
    }
}

impl FromStr for LedgerKind {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LedgerKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownName { what: "ledger kind", value: s.to_owned() })
    }
}

/// One movement of a user's balance. The balance always equals the sum of these.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// Increasing id; newer entries have larger ids.
    pub id: i64,
    /// Whose balance moved.
    pub user_id: UserId,
    /// The task it belongs to, if any.
    pub task_id: Option<TaskId>,
    /// Why.
    pub kind: LedgerKind,
    /// Signed change.
    pub amount: UsdAmount,
    /// Balance right after.
    pub balance_after: UsdAmount,
    /// Human-readable note.
    pub description: String,
    /// When.
    pub created_at: Timestamp,
}

/// A model as the store keeps it: operator switches, the catalog definition, and the active price.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRecord {
    /// Public name.
    pub name: String,
    /// Kind.
    pub kind: ModelKind,
    /// Whether it is listed and callable.
    pub enabled: bool,
    /// Platform-wide in-flight cap, 1..100000.
    pub concurrency_limit: i64,
    /// The catalog definition as JSON text (owned by the `catalog` crate).
    pub definition: String,
    /// The active price version; `None` for an unpriced model.
    pub pricing: Option<PricingVersion>,
}

/// A catalog entry to load when the store does not know the model yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSeed {
    /// Public name.
    pub name: String,
    /// Kind.
    pub kind: ModelKind,
    /// Initial switch.
    pub enabled: bool,
    /// Initial cap.
    pub concurrency_limit: i64,
    /// Catalog definition as JSON text.
    pub definition: String,
    /// Initial prices (version 1), if the model is priced.
    pub sheet: Option<crate::pricing::PriceSheet>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in BillingStatus::ALL {
            assert_eq!(s.as_str().parse::<BillingStatus>(), Ok(s));
        }
        for k in LedgerKind::ALL {
            assert_eq!(k.as_str().parse::<LedgerKind>(), Ok(k));
        }
        assert!("Settled".parse::<BillingStatus>().is_err());
        for r in Role::ALL {
            assert_eq!(r.as_str().parse::<Role>(), Ok(r));
            assert_eq!(r.to_string(), r.as_str());
        }
        assert_eq!("root".parse::<Role>(), Err(UnknownName { what: "role", value: "root".into() }));
        assert!("Admin".parse::<Role>().is_err());
    }
}
