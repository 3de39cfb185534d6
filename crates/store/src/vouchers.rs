//! `VoucherStore`: voucher batches and their code hashes, and failed redemptions per user. The
//! redemption itself is a book operation (`Ledger::redeem`): it reads and marks the voucher in the
//! ledger writer's transaction.

use async_trait::async_trait;
use domain::ports::{PageRequest, StoreError};
use domain::{Timestamp, UsdAmount, UserId, VoucherBatch, VoucherStore};
use sea_orm::{ConnectionTrait, QueryResult, TransactionTrait, Value};

use crate::{Store, backend_err};

/// A batch with how many of its codes were redeemed.
const BATCH: &str = "SELECT b.id, b.amount_micros, b.count, b.expires_at, b.note, b.created_by, b.created_at, \
                     b.revoked_at, (SELECT COUNT(*) FROM vouchers v WHERE v.batch_id = b.id \
                     AND v.redeemed_at IS NOT NULL) AS redeemed FROM voucher_batches b";

/// Codes inserted per statement.
const CODES_PER_INSERT: usize = 200;

fn batch_from_row(row: &QueryResult) -> Result<VoucherBatch, StoreError> {
    let get_i64 = |c: &str| row.try_get::<i64>("", c).map_err(backend_err);
    let count = u32::try_from(get_i64("count")?).map_err(|e| StoreError::Backend(e.to_string()))?;
    let redeemed = u32::try_from(get_i64("redeemed")?).map_err(|e| StoreError::Backend(e.to_string()))?;
    Ok(VoucherBatch {
        id: row.try_get("", "id").map_err(backend_err)?,
        amount: UsdAmount::from_micros(get_i64("amount_micros")?),
        count,
        redeemed,
        expires_at: row.try_get::<Option<i64>>("", "expires_at").map_err(backend_err)?.map(Timestamp),
        note: row.try_get("", "note").map_err(backend_err)?,
        created_by: row.try_get("", "created_by").map_err(backend_err)?,
        created_at: Timestamp(get_i64("created_at")?),
        revoked_at: row.try_get::<Option<i64>>("", "revoked_at").map_err(backend_err)?.map(Timestamp),
    })
}

#[async_trait]
impl VoucherStore for Store {
    async fn create_vouchers(&self, batch: &VoucherBatch, code_hashes: &[String]) -> Result<(), StoreError> {
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let insert = "INSERT INTO voucher_batches (id, amount_micros, count, expires_at, note, created_by, created_at) \
                      VALUES ($1, $2, $3, $4, $5, $6, $7)";
        let values: Vec<Value> = vec![
            batch.id.clone().into(),
            batch.amount.micros().into(),
            i64::from(batch.count).into(),
            batch.expires_at.map(Timestamp::millis).into(),
            batch.note.clone().into(),
            batch.created_by.clone().into(),
            batch.created_at.millis().into(),
        ];
        txn.execute_raw(self.statement(insert, values)).await.map_err(backend_err)?;
        for chunk in code_hashes.chunks(CODES_PER_INSERT) {
            let rows: Vec<String> = (0..chunk.len()).map(|i| format!("(${}, ${})", 2 * i + 1, 2 * i + 2)).collect();
            let sql = format!("INSERT INTO vouchers (code_hash, batch_id) VALUES {}", rows.join(", "));
            let values: Vec<Value> =
                chunk.iter().flat_map(|hash| [hash.clone().into(), batch.id.clone().into()]).collect();
            txn.execute_raw(self.statement(&sql, values)).await.map_err(backend_err)?;
        }
        txn.commit().await.map_err(backend_err)
    }

    async fn voucher_batches(&self, page: PageRequest) -> Result<(Vec<VoucherBatch>, u64), StoreError> {
        let sql = format!("{BATCH} ORDER BY b.created_at DESC, b.id DESC LIMIT $1 OFFSET $2");
        let limit = i64::try_from(page.page_size).unwrap_or(i64::MAX);
        let offset = i64::try_from(page.offset()).unwrap_or(i64::MAX);
        let rows = self
            .db
            .reads()
            .query_all_raw(self.statement(&sql, vec![limit.into(), offset.into()]))
            .await
            .map_err(backend_err)?;
        let batches = rows.iter().map(batch_from_row).collect::<Result<Vec<_>, _>>()?;
        let count = self
            .db
            .reads()
            .query_one_raw(self.statement("SELECT COUNT(*) AS n FROM voucher_batches", vec![]))
            .await
            .map_err(backend_err)?;
        let total = count.map(|r| r.try_get::<i64>("", "n")).transpose().map_err(backend_err)?.unwrap_or(0);
        Ok((batches, u64::try_from(total).unwrap_or(0)))
    }

    async fn voucher_batch(&self, id: &str) -> Result<Option<VoucherBatch>, StoreError> {
        let sql = format!("{BATCH} WHERE b.id = $1");
        let row = self.db.reads().query_one_raw(self.statement(&sql, vec![id.into()])).await.map_err(backend_err)?;
        row.as_ref().map(batch_from_row).transpose()
    }

    async fn revoke_vouchers(&self, id: &str, at: Timestamp) -> Result<VoucherBatch, StoreError> {
        let sql = "UPDATE voucher_batches SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2";
        let done = self
            .db
            .writes()
            .execute_raw(self.statement(sql, vec![at.millis().into(), id.into()]))
            .await
            .map_err(backend_err)?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("voucher batch {id}")));
        }
        let sql = format!("{BATCH} WHERE b.id = $1");
        let row = self.db.writes().query_one_raw(self.statement(&sql, vec![id.into()])).await.map_err(backend_err)?;
        row.as_ref().map(batch_from_row).transpose()?.ok_or_else(|| StoreError::NotFound(format!("voucher batch {id}")))
    }

    async fn record_voucher_failure(
        &self,
        user: &UserId,
        at: Timestamp,
        forget_before: Timestamp,
    ) -> Result<(), StoreError> {
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let forget = "DELETE FROM voucher_failures WHERE user_id = $1 AND at < $2";
        txn.execute_raw(self.statement(forget, vec![user.as_str().into(), forget_before.millis().into()]))
            .await
            .map_err(backend_err)?;
        let insert = "INSERT INTO voucher_failures (user_id, at) VALUES ($1, $2)";
        txn.execute_raw(self.statement(insert, vec![user.as_str().into(), at.millis().into()]))
            .await
            .map_err(backend_err)?;
        txn.commit().await.map_err(backend_err)
    }

    async fn voucher_failures_since(&self, user: &UserId, since: Timestamp) -> Result<u64, StoreError> {
        let sql = "SELECT COUNT(*) AS n FROM voucher_failures WHERE user_id = $1 AND at >= $2";
        let row = self
            .db
            .writes()
            .query_one_raw(self.statement(sql, vec![user.as_str().into(), since.millis().into()]))
            .await
            .map_err(backend_err)?;
        let n = row.map(|r| r.try_get::<i64>("", "n")).transpose().map_err(backend_err)?.unwrap_or(0);
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
