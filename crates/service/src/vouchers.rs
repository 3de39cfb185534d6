//! Vouchers: operators mint batches of codes (shown once, stored hashed), list and revoke them;
//! customers redeem a code, credited through the ledger's book in the commit that marks it
//! redeemed. Failed attempts are counted per user in the store, so the limit holds across
//! replicas.

use domain::vouchers::{CODE_CHARS, code_from_bytes, normalize_code};
use domain::{LedgerEntry, Timestamp, UsdAmount, VoucherBatch};
use serde_json::json;

use crate::error::VoucherRefusal;
use crate::{Gateway, Operator, Page, Principal, ServiceError};

/// Most codes one batch mints.
pub const MAX_VOUCHERS_PER_BATCH: u32 = 10_000;

/// Most a voucher credits, in USD.
pub const MAX_VOUCHER_USD: i64 = 100_000;

/// Failed redemptions a user may make per [`FAILURE_WINDOW_MS`]; the next is 429.
pub const MAX_FAILED_REDEMPTIONS: u64 = 10;

/// The window failed redemptions are counted over.
pub const FAILURE_WINDOW_MS: i64 = 3_600_000;

/// What an operator asks for: `count` codes of `amount` each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewVouchers {
    /// What each code credits (above zero).
    pub amount: UsdAmount,
    /// How many codes (1..=[`MAX_VOUCHERS_PER_BATCH`]).
    pub count: u32,
    /// From when on the codes are refused (in the future), if ever.
    pub expires_at: Option<Timestamp>,
    /// A note for operators (≤ 500 characters).
    pub note: String,
}

/// A minted batch and its codes, which are shown this once.
#[derive(Clone, PartialEq, Eq)]
pub struct MintedVouchers {
    /// The batch.
    pub batch: VoucherBatch,
    /// The codes, `GV-XXXX-…`.
    pub codes: Vec<String>,
}

impl std::fmt::Debug for MintedVouchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MintedVouchers").field("batch", &self.batch).field("codes", &self.codes.len()).finish()
    }
}

/// A redemption: the entry that credited it, and the balance after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redeemed {
    /// The `voucher` ledger entry.
    pub entry: LedgerEntry,
}

fn batch_state(batch: &VoucherBatch) -> serde_json::Value {
    json!({
        "amount_usd": batch.amount.to_string(),
        "count": batch.count,
        "redeemed": batch.redeemed,
        "expires_at": batch.expires_at.map(|t| t.to_string()),
        "note": batch.note,
        "revoked_at": batch.revoked_at.map(|t| t.to_string()),
    })
}

impl Operator<'_> {
    /// Mints a batch of vouchers; audited as `voucher.create` (the codes are never recorded).
    pub async fn create_vouchers(&self, req: NewVouchers) -> Result<MintedVouchers, ServiceError> {
        let gateway = self.gateway();
        let now = gateway.ports.clock.now();
        if req.amount.micros() <= 0 || req.amount > UsdAmount::from_micros(MAX_VOUCHER_USD * 1_000_000) {
            return Err(ServiceError::InvalidRequest(format!(
                "amount must be above 0 and at most {MAX_VOUCHER_USD} USD, got {}",
                req.amount
            )));
        }
        if !(1..=MAX_VOUCHERS_PER_BATCH).contains(&req.count) {
            return Err(ServiceError::InvalidRequest(format!(
                "count must be 1..{MAX_VOUCHERS_PER_BATCH}, got {}",
                req.count
            )));
        }
        if req.expires_at.is_some_and(|at| at <= now) {
            return Err(ServiceError::InvalidRequest("expires_at must be in the future".into()));
        }
        if req.note.chars().count() > 500 {
            return Err(ServiceError::InvalidRequest("note must be at most 500 characters".into()));
        }
        let mut codes = Vec::with_capacity(req.count as usize);
        let mut hashes = Vec::with_capacity(req.count as usize);
        for _ in 0..req.count {
            let mut bytes = [0u8; CODE_CHARS];
            getrandom::fill(&mut bytes).map_err(|e| ServiceError::Internal(format!("randomness: {e}")))?;
            let code = code_from_bytes(&bytes);
            let stored = normalize_code(&code).ok_or_else(|| ServiceError::Internal("a code reads back".into()))?;
            hashes.push(crate::keys::hash_secret(&stored));
            codes.push(code);
        }
        let batch = VoucherBatch {
            id: gateway.ports.ids.new_id("vb_"),
            amount: req.amount,
            count: req.count,
            redeemed: 0,
            expires_at: req.expires_at,
            note: req.note,
            created_by: self.actor_id(),
            created_at: now,
            revoked_at: None,
        };
        gateway.ports.vouchers.create_vouchers(&batch, &hashes).await?;
        self.record("voucher.create", &batch.id, None, Some(batch_state(&batch))).await?;
        Ok(MintedVouchers { batch, codes })
    }

    /// One page of batches, newest first.
    pub async fn voucher_batches<'a>(
        &self,
        params: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Page<VoucherBatch>, ServiceError> {
        let query = validation::list_query(params, false)?;
        let (items, total) = self.gateway().ports.vouchers.voucher_batches(query.page).await?;
        Ok(Page { items, total, page: query.page })
    }

    /// Revokes the codes of batch `id` not redeemed yet; audited as `voucher.revoke`.
    pub async fn revoke_vouchers(&self, id: &str) -> Result<VoucherBatch, ServiceError> {
        let gateway = self.gateway();
        let before = gateway.ports.vouchers.voucher_batch(id).await?;
        let before = before.ok_or_else(|| ServiceError::NotFound(format!("voucher batch {id}")))?;
        let after = gateway.ports.vouchers.revoke_vouchers(id, gateway.ports.clock.now()).await?;
        self.record("voucher.revoke", id, Some(batch_state(&before)), Some(batch_state(&after))).await?;
        Ok(after)
    }
}

impl Gateway {
    /// Redeems `code` for `who`'s account: the balance rises by the voucher's amount in the
    /// commit that marks it redeemed (once in the whole store), audited as `voucher.redeem`.
    /// After [`MAX_FAILED_REDEMPTIONS`] failed attempts within [`FAILURE_WINDOW_MS`] every attempt
    /// is refused (429) until the window moves on; a refused attempt counts as a failure.
    pub async fn redeem_voucher(&self, who: &Principal, code: &str) -> Result<Redeemed, ServiceError> {
        let now = self.ports.clock.now();
        let since = Timestamp(now.millis() - FAILURE_WINDOW_MS);
        let failures = self.ports.vouchers.voucher_failures_since(&who.user_id, since).await?;
        if failures >= MAX_FAILED_REDEMPTIONS {
            let retry_after_secs = u64::try_from(FAILURE_WINDOW_MS / 1000).unwrap_or(3600);
            return Err(ServiceError::Voucher(VoucherRefusal::TooManyFailures { failures, retry_after_secs }));
        }
        let redeemed = match normalize_code(code) {
            None => Err(ServiceError::Voucher(VoucherRefusal::NotFound)),
            Some(stored) => {
                let hash = crate::keys::hash_secret(&stored);
                self.ports.ledger.redeem(&who.user_id, &hash).await.map_err(ServiceError::from)
            }
        };
        let entry = match redeemed {
            Ok(entry) => entry,
            Err(e @ ServiceError::Voucher(_)) => {
                self.ports.vouchers.record_voucher_failure(&who.user_id, now, since).await?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let after = json!({"amount_usd": entry.amount.to_string(), "balance_usd": entry.balance_after.to_string(),
                           "note": entry.description});
        self.record_audit(&Gateway::key_actor(who), "voucher.redeem", who.user_id.as_str(), None, Some(after)).await?;
        Ok(Redeemed { entry })
    }
}
