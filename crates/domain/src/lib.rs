//! The gateway's core vocabulary: exact money, kinds, task states, scopes, records and port traits.
//!
//! Nothing here performs I/O or needs an async runtime; the crate knows no HTTP, JSON or ORM.

pub mod alerts;
pub mod caps;
pub mod egress;
pub mod ids;
pub mod inputs;
pub mod key_limits;
pub mod key_rates;
pub mod kind;
pub mod manage;
pub mod media;
pub mod money;
pub mod payments;
pub mod ports;
pub mod pricing;
pub mod records;
pub mod scope;
pub mod statement;
pub mod task;
pub mod time;
pub mod video;
pub mod vouchers;

pub use alerts::{AlertChange, AlertPayload, AlertStore, BalanceAlert, LOW_BALANCE_EVENT, LowBalance};
pub use caps::{CapLeases, CapScope, CapState, LeaseGrant, LeaseRequest};
pub use egress::{EgressError, FetchedMeta, MediaLinks, Outbound};
pub use inputs::{InputMode, MediaType, Ratio, Resolution};
pub use key_limits::{
    BadAllowList, BadIpList, BudgetKeys, BudgetPeriod, IpAllowList, KeyBudget, KeyBudgetState, KeyLimits,
    KeyLimitsChange, KeySpend, ModelAllowList, ModelRule,
};
pub use key_rates::{
    BadRateLimit, KeyRates, RATE_WINDOW_MS, RateAsk, RateGrant, RateLeases, RateLimitKind, RateUse, rate_window,
    rate_window_end,
};
pub use kind::{ModelKind, UnknownName};
pub use manage::{Actor, AuditEntry, DailyModelSpend, NewAuditEntry, UsageGroup, UsageRow, UserChange};
pub use media::{BadMediaEntry, MediaSource, TaskMedia};
pub use money::{MoneyError, UsdAmount};
pub use payments::{CheckoutRequest, CheckoutSession, PaymentError, Payments};
pub use pricing::{BadPricingVersionId, PriceSheet, PricingVersion, PricingVersionId, Rate, RateError};
pub use records::{
    ApiKey, ApiKeyId, BillingStatus, LedgerEntry, LedgerKind, ModelAlias, ModelRecord, ModelSeed, NewUser, Role, Task,
    TaskBilling, TaskId, TaskStats, User, UserId,
};
pub use scope::Scope;
pub use statement::{
    ChargeSum, EndedCall, Keyset, KindSum, Line, Lines, Revenue, RevenueFigures, Statement, StatementError,
    StatementFigures,
};
pub use task::{StatusFilter, TaskEvent, TaskStatus, TaskTransition, TaskUpdate, TransitionError};
pub use time::{BadDay, BadMonth, BadTimestamp, Clock, SystemClock, Timestamp, UtcDay, UtcMonth, duration_millis};
pub use video::{ClaimShare, DeliveryAttempt, MediaObject, MediaRecordError, VideoJob, VideoStore, WebhookDelivery};
pub use vouchers::{VoucherBatch, VoucherStore};
