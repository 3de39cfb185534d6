//! What the management API reads and records: spend grouped by day or model, pages of users,
//! changes to a user, and the operators' audit trail.

use crate::money::UsdAmount;
use crate::records::UserId;
use crate::time::Timestamp;

/// How `GET /api/v1/usage` groups settled charges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageGroup {
    /// By UTC day of settlement.
    Day,
    /// By public model name.
    Model,
}

/// Settled spend of one group: a UTC day (`YYYY-MM-DD`) or a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    /// The day or the model.
    pub group: String,
    /// What the calls settled in the group were charged together.
    pub spent: UsdAmount,
    /// How many settled calls.
    pub calls: i64,
    /// A day's spend by model (models with spend that day only); empty for a model's row.
    pub models: Vec<UsageRow>,
}

/// Settled charges of one model on one UTC day, the unit both groupings are summed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DailyModelSpend {
    /// Days since 1970-01-01 (UTC).
    pub day: i64,
    /// Public model name.
    pub model: String,
    /// Sum of the settled charges.
    pub spent: UsdAmount,
    /// How many settled calls.
    pub calls: i64,
}

/// What an operator changes on a user; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserChange {
    /// Disable (every key refused) or enable again.
    pub disabled: Option<bool>,
    /// Most concurrent calls, 1..100000.
    pub concurrency_limit: Option<i64>,
    /// Media quota in bytes, not negative.
    pub media_quota_bytes: Option<i64>,
}

impl UserChange {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == UserChange::default()
    }
}

/// Who did an operator action: the operator user and the key it used, or the command line on a
/// machine that reaches the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actor {
    /// `gateway admin …`.
    Cli,
    /// An admin user's key, through the management API.
    Key {
        /// The operator.
        user: UserId,
        /// The key's id.
        key: String,
    },
}

impl Actor {
    /// `cli`, or the operator's user id.
    pub fn who(&self) -> &str {
        match self {
            Actor::Cli => "cli",
            Actor::Key { user, .. } => user.as_str(),
        }
    }

    /// The key's id, if a key acted.
    pub fn key(&self) -> Option<&str> {
        match self {
            Actor::Cli => None,
            Actor::Key { key, .. } => Some(key),
        }
    }
}

/// One operator action to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewAuditEntry {
    /// Who.
    pub actor: Actor,
    /// What, such as `user.topup` or `model.set`.
    pub action: String,
    /// On what: a user id, key id, model name, or `maintenance`.
    pub target: String,
    /// The state before, as JSON text (absent for a creation).
    pub before: Option<String>,
    /// The state after, as JSON text.
    pub after: Option<String>,
}

/// A recorded operator action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// Sequence number, increasing.
    pub id: i64,
    /// When.
    pub at: Timestamp,
    /// `cli` or the operator's user id.
    pub actor: String,
    /// The key the operator used, if any.
    pub actor_key: Option<String>,
    /// What.
    pub action: String,
    /// On what.
    pub target: String,
    /// The state before (JSON text).
    pub before: Option<String>,
    /// The state after (JSON text).
    pub after: Option<String>,
}
