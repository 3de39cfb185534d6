//! `RateLeases`: per-key rate-limit counters (`key_rate_use`, one row per limited key).
//!
//! A grant writes first (it makes sure the key's row exists), then reads the row, locked, and writes
//! the counts `domain::RateUse::grant` gives: on PostgreSQL the read is `FOR UPDATE`, so grants of
//! one key from any replica take turns on its row; on SQLite the first write takes the file's write
//! lock for the transaction (and grants of this process queue for the store's one write
//! connection before that). A grant is a few statements and is made once per block, not per call.

use async_trait::async_trait;
use domain::ports::StoreError;
use domain::{ApiKeyId, RateAsk, RateGrant, RateLeases, RateUse};
use sea_orm::{ConnectionTrait, TransactionTrait, Value};

use crate::{Backend, Store, backend_err};

fn count(n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Invalid(format!("a rate count of {n} is out of range")))
}

#[async_trait]
impl RateLeases for Store {
    async fn lease_rate(&self, key: &ApiKeyId, ask: &RateAsk) -> Result<RateGrant, StoreError> {
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let ensure = "INSERT INTO key_rate_use (key_id, window_start, requests, tokens) VALUES ($1, $2, 0, 0) \
                      ON CONFLICT (key_id) DO NOTHING";
        let values: Vec<Value> = vec![key.as_str().into(), ask.window.into()];
        txn.execute_raw(self.statement(ensure, values)).await.map_err(backend_err)?;
        let read = match self.backend() {
            Backend::Postgres => "SELECT window_start, requests, tokens FROM key_rate_use WHERE key_id = $1 FOR UPDATE",
            Backend::Sqlite => "SELECT window_start, requests, tokens FROM key_rate_use WHERE key_id = $1",
        };
        let row = txn
            .query_one_raw(self.statement(read, vec![key.as_str().into()]))
            .await
            .map_err(backend_err)?
            .ok_or_else(|| StoreError::Backend(format!("the rate counter of key {key} vanished")))?;
        let get = |column: &str| row.try_get::<i64>("", column).map_err(backend_err);
        let stored = RateUse { window: get("window_start")?, requests: get("requests")?, tokens: get("tokens")? };
        let (next, grant) = stored.grant(ask);
        if next != stored {
            let write = "UPDATE key_rate_use SET window_start = $2, requests = $3, tokens = $4 WHERE key_id = $1";
            let values: Vec<Value> =
                vec![key.as_str().into(), next.window.into(), next.requests.into(), next.tokens.into()];
            txn.execute_raw(self.statement(write, values)).await.map_err(backend_err)?;
        }
        txn.commit().await.map_err(backend_err)?;
        Ok(grant)
    }

    async fn return_tokens(&self, key: &ApiKeyId, window: i64, tokens: u64) -> Result<(), StoreError> {
        let give = "UPDATE key_rate_use SET tokens = CASE WHEN tokens > $3 THEN tokens - $3 ELSE 0 END \
                    WHERE key_id = $1 AND window_start = $2";
        let values: Vec<Value> = vec![key.as_str().into(), window.into(), count(tokens)?.into()];
        self.db.writes().execute_raw(self.statement(give, values)).await.map_err(backend_err)?;
        Ok(())
    }
}
