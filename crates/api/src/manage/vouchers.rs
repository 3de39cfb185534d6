//! The voucher routes: operators mint, list and revoke batches (`/api/v1/admin/vouchers`);
//! customers redeem a code (`POST /api/v1/vouchers/redeem`). Handlers, wire shapes and OpenAPI
//! operations, each declared once in the route table.

use domain::{Timestamp, VoucherBatch};
use http::StatusCode;
use schemars::JsonSchema;
use serde::Serialize;
use service::NewVouchers;
use validation::{NewVouchersBody, RedeemBody};

use super::wire::pagination;
use super::{Reply, amount};
use crate::ctx::{Ctx, pairs};
use crate::doc::{Docs, Op, page, path_param};
use crate::error::ApiError;
use crate::response::{json_response, ok_json};
use crate::wire::{DateTime, Pagination, Usd};

/// A batch of vouchers (never its codes).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct VoucherBatchObject {
    /// `vb_…`.
    pub batch_id: String,
    /// What each code credits.
    pub amount: Usd,
    /// How many codes were minted.
    pub count: u32,
    /// How many were redeemed.
    pub redeemed: u32,
    /// From when on its codes are refused; `null`: never.
    pub expires_at: Option<DateTime>,
    /// The operator's note.
    pub note: String,
    /// Who minted it (`cli`, or the operator's user id).
    pub created_by: String,
    /// When.
    pub created_at: DateTime,
    /// When its unredeemed codes were revoked; `null`: they were not.
    pub revoked_at: Option<DateTime>,
}

/// The wire form of `b`.
pub fn batch(b: &VoucherBatch) -> VoucherBatchObject {
    VoucherBatchObject {
        batch_id: b.id.clone(),
        amount: b.amount.into(),
        count: b.count,
        redeemed: b.redeemed,
        expires_at: b.expires_at.map(Into::into),
        note: b.note.clone(),
        created_by: b.created_by.clone(),
        created_at: b.created_at.into(),
        revoked_at: b.revoked_at.map(Into::into),
    }
}

/// `POST /api/v1/admin/vouchers` (201): the batch and its codes, shown this once.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct MintedVouchersObject {
    /// The batch.
    #[serde(flatten)]
    pub batch: VoucherBatchObject,
    /// The codes (`GV-XXXX-…`, 140 random bits each); only their hashes are kept.
    pub codes: Vec<String>,
}

/// `GET /api/v1/admin/vouchers`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct VoucherBatchList {
    /// Always `list`.
    pub object: &'static str,
    /// The batches, newest first.
    pub data: Vec<VoucherBatchObject>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// `POST /api/v1/vouchers/redeem`: what was credited.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RedeemedObject {
    /// The amount credited.
    pub credited: Usd,
    /// The balance after it.
    pub balance_usd: Usd,
    /// The `voucher` ledger entry's id.
    pub ledger_entry_id: i64,
}

/// The wire form of a minted batch, with its codes.
pub fn minted(m: &service::MintedVouchers) -> MintedVouchersObject {
    MintedVouchersObject { batch: batch(&m.batch), codes: m.codes.clone() }
}

/// The wire form of a page of batches.
pub fn batch_list(page: &service::Page<VoucherBatch>) -> VoucherBatchList {
    VoucherBatchList { object: "list", data: page.items.iter().map(batch).collect(), pagination: pagination(page) }
}

/// `POST /api/v1/admin/vouchers`.
pub(crate) async fn create(mut ctx: Ctx<'_>) -> Reply {
    let req: NewVouchersBody = ctx.json().await?;
    let expires_at = match req.expires_at.as_deref() {
        Some(t) => Some(t.parse::<Timestamp>().map_err(|e| ApiError::invalid(format!("expires_at: {e}")))?),
        None => None,
    };
    let count = u32::try_from(req.count).map_err(|_| ApiError::invalid("count must be 1..10000"))?;
    let asked = NewVouchers { amount: amount(&req.amount)?, count, expires_at, note: req.note.unwrap_or_default() };
    let made = ctx.gateway().operator(ctx.actor()?).create_vouchers(asked).await?;
    Ok(json_response(StatusCode::CREATED, &minted(&made)))
}

/// `GET /api/v1/admin/vouchers`.
pub(crate) async fn list(ctx: Ctx<'_>) -> Reply {
    let params = ctx.query()?;
    let page = ctx.gateway().operator(ctx.actor()?).voucher_batches(pairs(&params)).await?;
    Ok(ok_json(&batch_list(&page)))
}

/// `DELETE /api/v1/admin/vouchers/{batch_id}`.
pub(crate) async fn revoke(ctx: Ctx<'_>) -> Reply {
    let revoked = ctx.gateway().operator(ctx.actor()?).revoke_vouchers(ctx.param()).await?;
    Ok(ok_json(&batch(&revoked)))
}

/// `POST /api/v1/vouchers/redeem`.
pub(crate) async fn redeem(mut ctx: Ctx<'_>) -> Reply {
    let req: RedeemBody = ctx.json().await?;
    let redeemed = ctx.gateway().redeem_voucher(ctx.who()?, &req.code).await?;
    let entry = &redeemed.entry;
    Ok(ok_json(&RedeemedObject {
        credited: entry.amount.into(),
        balance_usd: entry.balance_after.into(),
        ledger_entry_id: entry.id,
    }))
}

pub(crate) fn create_op(d: &mut Docs) -> Op {
    let body = d.request::<NewVouchersBody>();
    let codes = super::ops::with_body(&[400, 401]);
    Op {
        parameters: vec![],
        body,
        responses: d.json_answer::<MintedVouchersObject>(201, "the batch and its codes, shown once", &codes),
    }
}

pub(crate) fn list_op(d: &mut Docs) -> Op {
    Op {
        parameters: page("Batches"),
        body: None,
        responses: d.json_answer::<VoucherBatchList>(200, "one page", &[400, 401]),
    }
}

pub(crate) fn revoke_op(d: &mut Docs) -> Op {
    Op {
        parameters: vec![path_param("batch_id", "The batch id (`vb_…`)")],
        body: None,
        responses: d.json_answer::<VoucherBatchObject>(200, "the batch, its unredeemed codes revoked", &[401, 404]),
    }
}

pub(crate) fn redeem_op(d: &mut Docs) -> Op {
    let body = d.request::<RedeemBody>();
    let codes = [400, 401, 404, 409, 410, 413, 415, 429];
    Op { parameters: vec![], body, responses: d.json_answer::<RedeemedObject>(200, "credited", &codes) }
}
