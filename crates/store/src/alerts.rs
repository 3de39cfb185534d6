//! `AlertStore`: low-balance alerts. Firing is one transaction: the compare-and-set that disarms an
//! armed alert whose balance (read in the same statement) is below its threshold, and the
//! `balance.low` delivery in the webhook outbox (`webhook_deliveries` with no task), so each crossing
//! is enqueued once whichever replica or caller sees it first.

use async_trait::async_trait;
use domain::ports::StoreError;
use domain::{
    AlertChange, AlertPayload, AlertStore, BalanceAlert, LOW_BALANCE_EVENT, LowBalance, Timestamp, UsdAmount, UserId,
};
use sea_orm::{ConnectionTrait, QueryResult, TransactionTrait, Value};

use crate::{Store, backend_err};

/// The columns an alert is read with, and the user's balance.
const ALERT: &str = "SELECT a.user_id, a.threshold_micros, a.webhook_url, a.armed, a.updated_at, \
                     u.balance_micros FROM balance_alerts a JOIN users u ON u.id = a.user_id WHERE a.user_id = $1";

/// Sets an alert (`$1` user, `$2` threshold, `$3` URL, `$4` now), armed when the balance is at or
/// above the threshold; no row for an unknown user.
const SET: &str = "INSERT INTO balance_alerts (user_id, threshold_micros, webhook_url, armed, updated_at) \
                   SELECT id, $2, $3, balance_micros >= $2, $4 FROM users WHERE id = $1 \
                   ON CONFLICT (user_id) DO UPDATE SET threshold_micros = excluded.threshold_micros, \
                   webhook_url = excluded.webhook_url, armed = excluded.armed, updated_at = excluded.updated_at \
                   RETURNING user_id";

/// The firing compare-and-set (`$1` user, `$2` now): disarms the alert only while it is armed and
/// the balance is below its threshold at this statement.
const FIRE: &str = "UPDATE balance_alerts SET armed = FALSE, updated_at = $2 WHERE user_id = $1 AND armed \
                    AND threshold_micros > (SELECT balance_micros FROM users WHERE id = $1) \
                    RETURNING threshold_micros, webhook_url, (SELECT balance_micros FROM users WHERE id = $1) AS balance";

/// The re-arming compare-and-set (`$1` user, `$2` now).
const REARM: &str = "UPDATE balance_alerts SET armed = TRUE, updated_at = $2 WHERE user_id = $1 AND NOT armed \
                     AND threshold_micros <= (SELECT balance_micros FROM users WHERE id = $1)";

/// Alerts out of step with their balance (`$1` limit).
const OUT_OF_STEP: &str = "SELECT a.user_id FROM balance_alerts a JOIN users u ON u.id = a.user_id \
                           WHERE (a.armed AND u.balance_micros < a.threshold_micros) \
                           OR (NOT a.armed AND u.balance_micros >= a.threshold_micros) \
                           ORDER BY a.updated_at, a.user_id LIMIT $1";

/// The enqueued event (`$1` user, `$2` URL, `$3` event, `$4` payload, `$5` now).
const ENQUEUE: &str = "INSERT INTO webhook_deliveries (task_id, user_id, url, event, payload, attempts, \
                       next_attempt_at, created_at) VALUES (NULL, $1, $2, $3, $4, 0, $5, $5)";

fn alert_from_row(row: &QueryResult) -> Result<BalanceAlert, StoreError> {
    Ok(BalanceAlert {
        user_id: UserId(row.try_get("", "user_id").map_err(backend_err)?),
        threshold: UsdAmount::from_micros(row.try_get("", "threshold_micros").map_err(backend_err)?),
        webhook_url: row.try_get("", "webhook_url").map_err(backend_err)?,
        armed: row.try_get("", "armed").map_err(backend_err)?,
        updated_at: Timestamp(row.try_get("", "updated_at").map_err(backend_err)?),
        balance: UsdAmount::from_micros(row.try_get("", "balance_micros").map_err(backend_err)?),
    })
}

impl Store {
    async fn read_alert(&self, conn: &impl ConnectionTrait, user: &UserId) -> Result<Option<BalanceAlert>, StoreError> {
        let row = conn.query_one_raw(self.statement(ALERT, vec![user.as_str().into()])).await.map_err(backend_err)?;
        row.as_ref().map(alert_from_row).transpose()
    }
}

#[async_trait]
impl AlertStore for Store {
    async fn alert(&self, user: &UserId) -> Result<Option<BalanceAlert>, StoreError> {
        self.read_alert(self.db.reads(), user).await
    }

    async fn set_alert(
        &self,
        user: &UserId,
        threshold: UsdAmount,
        webhook_url: Option<&str>,
        now: Timestamp,
    ) -> Result<BalanceAlert, StoreError> {
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let values: Vec<Value> = vec![
            user.as_str().into(),
            threshold.micros().into(),
            webhook_url.map(str::to_owned).into(),
            now.millis().into(),
        ];
        if txn.query_one_raw(self.statement(SET, values)).await.map_err(backend_err)?.is_none() {
            return Err(StoreError::NotFound(format!("user {user}")));
        }
        let alert = self.read_alert(&txn, user).await?;
        txn.commit().await.map_err(backend_err)?;
        alert.ok_or_else(|| StoreError::NotFound(format!("user {user}")))
    }

    async fn clear_alert(&self, user: &UserId) -> Result<(), StoreError> {
        let sql = "DELETE FROM balance_alerts WHERE user_id = $1";
        self.db.writes().execute_raw(self.statement(sql, vec![user.as_str().into()])).await.map_err(backend_err)?;
        Ok(())
    }

    async fn check_alert(
        &self,
        user: &UserId,
        now: Timestamp,
        payload: &AlertPayload,
    ) -> Result<(Option<BalanceAlert>, AlertChange), StoreError> {
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let at: Value = now.millis().into();
        let fired = txn
            .query_one_raw(self.statement(FIRE, vec![user.as_str().into(), at.clone()]))
            .await
            .map_err(backend_err)?;
        let change = if let Some(row) = fired {
            let threshold = UsdAmount::from_micros(row.try_get("", "threshold_micros").map_err(backend_err)?);
            let balance = UsdAmount::from_micros(row.try_get("", "balance").map_err(backend_err)?);
            let url: Option<String> = row.try_get("", "webhook_url").map_err(backend_err)?;
            let low = LowBalance { user_id: user.clone(), balance, threshold, at: now };
            if let Some(url) = url {
                let values =
                    vec![user.as_str().into(), url.into(), LOW_BALANCE_EVENT.into(), payload(&low).into(), at.clone()];
                txn.execute_raw(self.statement(ENQUEUE, values)).await.map_err(backend_err)?;
            }
            AlertChange::Fired(low)
        } else {
            let rearmed =
                txn.execute_raw(self.statement(REARM, vec![user.as_str().into(), at])).await.map_err(backend_err)?;
            if rearmed.rows_affected() == 1 { AlertChange::Rearmed } else { AlertChange::Unchanged }
        };
        let alert = self.read_alert(&txn, user).await?;
        txn.commit().await.map_err(backend_err)?;
        Ok((alert, change))
    }

    async fn alerts_out_of_step(&self, limit: u64) -> Result<Vec<UserId>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .db
            .reads()
            .query_all_raw(self.statement(OUT_OF_STEP, vec![limit.into()]))
            .await
            .map_err(backend_err)?;
        rows.iter().map(|r| r.try_get("", "user_id").map(UserId).map_err(backend_err)).collect()
    }
}
