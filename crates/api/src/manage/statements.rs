//! `GET /api/v1/statements/{month}` and `GET /api/v1/admin/revenue`: a month's statement of the
//! caller's account and the gateway's revenue, and their JSON shapes (also what `gateway admin
//! statement` prints). Every amount is a `Usd` string exact to the micro-USD.

use domain::{Line, Lines};
use schemars::JsonSchema;
use serde::Serialize;
use service::{MonthRevenue, MonthStatement};

use crate::ctx::{Ctx, pairs};
use crate::error::ApiError;
use crate::response::{Response, ok_json};
use crate::wire::{DateTime, Usd};

/// Credits of one ledger kind.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CreditLine {
    /// The ledger kind (`topup`, `adjustment`, … every kind that is not a call's).
    pub kind: String,
    /// How many entries.
    pub entries: i64,
    /// Their sum (an adjustment may take money away).
    pub amount: Usd,
}

/// The credits of a period.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Credits {
    /// The sum of every credit.
    pub total: Usd,
    /// By kind, in the kinds' order; kinds without an entry are left out.
    pub by_kind: Vec<CreditLine>,
}

/// Charges of one model.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ModelCharge {
    /// The model that served the calls.
    pub model: String,
    /// Calls that settled in the period.
    pub calls: i64,
    /// What they were charged together.
    pub amount: Usd,
}

/// Charges of one user (the operators' report).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UserCharge {
    /// The user.
    pub user_id: String,
    /// Calls that settled in the period.
    pub calls: i64,
    /// What they were charged together.
    pub amount: Usd,
}

/// The charges of the calls that settled in a period.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Charges {
    /// What they were charged in all.
    pub total: Usd,
    /// How many calls.
    pub calls: i64,
    /// By model, largest first.
    pub by_model: Vec<ModelCharge>,
}

/// Holds given back whole because their call failed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Refunds {
    /// How many.
    pub calls: i64,
    /// Their sum. It leaves the balance where it was before the hold: it is part of `held`'s
    /// change, not a line of its own in the statement's rule.
    pub amount: Usd,
}

/// What calls still open held.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Held {
    /// At the period's start.
    pub at_start: Usd,
    /// At its end: the holds of calls still open at the month's end.
    pub at_end: Usd,
    /// `at_end − at_start`.
    pub change: Usd,
}

/// `GET /api/v1/statements/{month}`. It holds exactly: `opening_balance + credits.total −
/// charges.total − held.change = closing_balance`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StatementObject {
    /// Always `statement`.
    pub object: &'static str,
    /// Whose.
    pub user_id: String,
    /// The UTC month, `YYYY-MM`.
    pub month: String,
    /// Its first instant.
    pub starts_at: DateTime,
    /// The first instant after it (not part of it).
    pub ends_at: DateTime,
    /// Whether the month has ended; a month in progress changes until it does.
    pub complete: bool,
    /// The balance at the month's start: the sum of every earlier ledger entry.
    pub opening_balance: Usd,
    /// Money added (every ledger kind that is not a call's).
    pub credits: Credits,
    /// Calls that settled in the month (a call belongs to the month it settled in).
    pub charges: Charges,
    /// Failed calls whose hold came back whole.
    pub refunds: Refunds,
    /// What open calls held at the month's start and end.
    pub held: Held,
    /// The balance at the month's end: the sum of every ledger entry written before `ends_at`.
    pub closing_balance: Usd,
}

/// The charges of the gateway's revenue.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RevenueCharges {
    /// What every settled call was charged.
    pub total: Usd,
    /// How many calls.
    pub calls: i64,
    /// By model, largest first.
    pub by_model: Vec<ModelCharge>,
    /// By user, largest first.
    pub by_user: Vec<UserCharge>,
}

/// `GET /api/v1/admin/revenue`: the whole gateway's month.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RevenueObject {
    /// Always `revenue`.
    pub object: &'static str,
    /// The UTC month, `YYYY-MM`.
    pub month: String,
    /// Its first instant.
    pub starts_at: DateTime,
    /// The first instant after it.
    pub ends_at: DateTime,
    /// Whether the month has ended.
    pub complete: bool,
    /// Money added to every balance, by kind.
    pub credits: Credits,
    /// Calls that settled in the month.
    pub charges: RevenueCharges,
    /// Failed calls whose hold came back whole.
    pub refunds: Refunds,
}

fn credits(lines: &Lines) -> Credits {
    let by_kind =
        lines.lines.iter().map(|l| CreditLine { kind: l.name.clone(), entries: l.count, amount: l.amount.into() });
    Credits { total: lines.total.into(), by_kind: by_kind.collect() }
}

fn by_model(lines: &Lines) -> Vec<ModelCharge> {
    lines.lines.iter().map(|l| ModelCharge { model: l.name.clone(), calls: l.count, amount: l.amount.into() }).collect()
}

fn refunds(line: &Line) -> Refunds {
    Refunds { calls: line.count, amount: line.amount.into() }
}

/// The statement object of `s`.
pub fn statement(s: &MonthStatement) -> StatementObject {
    let st = &s.statement;
    StatementObject {
        object: "statement",
        user_id: s.user.as_str().to_owned(),
        month: s.month.to_string(),
        starts_at: s.month.start().into(),
        ends_at: s.month.end().into(),
        complete: s.complete,
        opening_balance: st.opening.into(),
        credits: credits(&st.credits),
        charges: Charges { total: st.charges.total.into(), calls: st.charges.count, by_model: by_model(&st.charges) },
        refunds: refunds(&st.refunds),
        held: Held {
            at_start: st.held_at_start.into(),
            at_end: st.held_at_end.into(),
            change: st.held_change().into(),
        },
        closing_balance: st.closing.into(),
    }
}

/// The revenue object of `r`.
pub fn revenue(r: &MonthRevenue) -> RevenueObject {
    let rev = &r.revenue;
    let by_user = rev.by_user.lines.iter().map(|l| UserCharge {
        user_id: l.name.clone(),
        calls: l.count,
        amount: l.amount.into(),
    });
    RevenueObject {
        object: "revenue",
        month: r.month.to_string(),
        starts_at: r.month.start().into(),
        ends_at: r.month.end().into(),
        complete: r.complete,
        credits: credits(&rev.credits),
        charges: RevenueCharges {
            total: rev.by_model.total.into(),
            calls: rev.by_model.count,
            by_model: by_model(&rev.by_model),
            by_user: by_user.collect(),
        },
        refunds: refunds(&rev.refunds),
    }
}

/// `GET /api/v1/statements/{month}`.
pub(crate) async fn statement_of_month(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    Ok(ok_json(&statement(&ctx.gateway().statement(ctx.who()?, ctx.param()).await?)))
}

/// `GET /api/v1/admin/revenue`.
pub(crate) async fn revenue_of_month(ctx: Ctx<'_>) -> Result<Response, ApiError> {
    let params = ctx.query()?;
    Ok(ok_json(&revenue(&ctx.gateway().revenue(pairs(&params)).await?)))
}
