//! `CapLeases`: concurrency slots leased by replicas (`cap_leases`).
//!
//! A grant reads the cap, the scope's running video tasks and the other replicas' live leases, and
//! writes this replica's row, with nobody else granting on that cap in between: on PostgreSQL the
//! transaction takes an advisory lock on the cap's key first (replicas serialise per cap, never
//! on the hot balance rows); on SQLite the transaction writes first, so it holds the file's write
//! lock before it reads (and grants of this process queue for the store's one write connection before that).
//! The arithmetic is `domain::CapState::grant`, the same for both.

use async_trait::async_trait;
use domain::ports::StoreError;
use domain::{CapLeases, CapScope, CapState, LeaseGrant, LeaseRequest, TaskId, Timestamp};
use sea_orm::{ConnectionTrait, TransactionTrait, Value};

use crate::db::advisory_lock;
use crate::lease;
use crate::{Backend, Store, backend_err};

impl Store {
    /// The cap's state read by `conn` (inside the grant's lock).
    async fn cap_state<C: ConnectionTrait>(
        &self,
        conn: &C,
        replica: &str,
        scope: &CapScope,
        now: Timestamp,
    ) -> Result<CapState, StoreError> {
        let (cap, video, id) = match scope {
            CapScope::Model(name) => {
                ("SELECT concurrency_limit FROM models WHERE name = $1", "kind = 'video' AND model = $1", name.as_str())
            }
            CapScope::User(user) => {
                ("SELECT concurrency_limit FROM users WHERE id = $1", "kind = 'video' AND user_id = $1", user.as_str())
            }
        };
        let live = lease::CAP.live("", "$4");
        let sql = format!(
            "SELECT COALESCE(({cap}), 0) AS cap, \
             (SELECT COUNT(*) FROM tasks WHERE {video} AND {running}) AS video_active, \
             (SELECT CAST(COALESCE(SUM(slots), 0) AS BIGINT) FROM cap_leases \
                WHERE scope = $2 AND replica_id <> $3 AND {live}) AS others_slots, \
             (SELECT COUNT(*) FROM cap_leases \
                WHERE scope = $2 AND replica_id <> $3 AND {live} AND wanted > slots) AS others_short",
            running = is_running!("status")
        );
        let values: Vec<Value> = vec![id.into(), scope.key().into(), replica.into(), now.millis().into()];
        let row = conn
            .query_one_raw(self.statement(&sql, values))
            .await
            .map_err(backend_err)?
            .ok_or_else(|| StoreError::Backend("the cap query returned no row".into()))?;
        let get = |column: &str| row.try_get::<i64>("", column).map_err(backend_err);
        Ok(CapState {
            cap: get("cap")?,
            video_active: get("video_active")?,
            others_slots: get("others_slots")?,
            others_short: get("others_short")?,
        })
    }

    /// Computes and writes the grant inside `conn`'s transaction. Its first statement writes (it
    /// drops this replica's row and expired ones), so on SQLite the transaction holds the write lock
    /// before it reads anything, and another process granting on the same file waits for it.
    async fn write_grant<C: ConnectionTrait>(
        &self,
        conn: &C,
        replica: &str,
        request: &LeaseRequest,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<LeaseGrant, StoreError> {
        let key = request.scope.key();
        let expired =
            format!("DELETE FROM cap_leases WHERE scope = $1 AND ({} OR replica_id = $3)", lease::CAP.free("", "$2"));
        let values: Vec<Value> = vec![key.clone().into(), now.millis().into(), replica.into()];
        conn.execute_raw(self.statement(&expired, values)).await.map_err(backend_err)?;
        let state = self.cap_state(conn, replica, &request.scope, now).await?;
        let slots = state.grant(request.want, request.keep);
        if slots > 0 || request.want > 0 {
            let insert = "INSERT INTO cap_leases (scope, replica_id, slots, wanted, in_use, expires_at) \
                          VALUES ($1, $2, $3, $4, $5, $6)";
            let values: Vec<Value> = vec![
                key.into(),
                replica.into(),
                i64::from(slots).into(),
                i64::from(request.want).into(),
                i64::from(request.in_use).into(),
                expires_at.millis().into(),
            ];
            conn.execute_raw(self.statement(insert, values)).await.map_err(backend_err)?;
        }
        Ok(LeaseGrant {
            slots,
            cap: u32::try_from(state.cap.max(0)).unwrap_or(u32::MAX),
            others_short: state.others_short > 0,
        })
    }
}

#[async_trait]
impl CapLeases for Store {
    async fn lease(
        &self,
        replica: &str,
        request: &LeaseRequest,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<LeaseGrant, StoreError> {
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        if self.backend() == Backend::Postgres {
            txn.execute_raw(advisory_lock(&request.scope.key())).await.map_err(backend_err)?;
        }
        let grant = self.write_grant(&txn, replica, request, now, expires_at).await?;
        txn.commit().await.map_err(backend_err)?;
        Ok(grant)
    }

    async fn release_leases(&self, replica: &str) -> Result<(), StoreError> {
        let sql = lease::CAP.delete_held();
        self.db.writes().execute_raw(self.statement(&sql, vec![replica.into()])).await.map_err(backend_err)?;
        Ok(())
    }

    async fn leased_in_use(&self, scope: &CapScope, now: Timestamp) -> Result<u64, StoreError> {
        let sql = format!(
            "SELECT CAST(COALESCE(SUM(in_use), 0) AS BIGINT) AS n FROM cap_leases WHERE scope = $1 AND {}",
            lease::CAP.live("", "$2")
        );
        let values: Vec<Value> = vec![scope.key().into(), now.millis().into()];
        let row = self.db.reads().query_one_raw(self.statement(&sql, values)).await.map_err(backend_err)?;
        let n = match row {
            Some(row) => row.try_get::<i64>("", "n").map_err(backend_err)?,
            None => 0,
        };
        crate::video::to_u64("leased slots", n)
    }

    async fn take_slots(
        &self,
        holder: &str,
        scopes: &[CapScope],
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<Option<CapScope>, StoreError> {
        let txn = self.db.writes().begin().await.map_err(backend_err)?;
        let mut keys: Vec<String> = scopes.iter().map(CapScope::key).collect();
        keys.sort();
        if self.backend() == Backend::Postgres {
            // The grants' locks, taken in one order (a grant holds one at a time).
            for key in &keys {
                txn.execute_raw(advisory_lock(key)).await.map_err(backend_err)?;
            }
        }
        // Written first, so that on SQLite the transaction holds the write lock before it reads.
        for key in &keys {
            let expired = format!("DELETE FROM cap_leases WHERE scope = $1 AND {}", lease::CAP.free("", "$2"));
            let values: Vec<Value> = vec![key.clone().into(), now.millis().into()];
            txn.execute_raw(self.statement(&expired, values)).await.map_err(backend_err)?;
        }
        for scope in scopes {
            // Every replica's slots count (no replica is named `""`).
            let state = self.cap_state(&txn, "", scope, now).await?;
            if state.video_active.saturating_add(state.others_slots) >= state.cap {
                txn.rollback().await.map_err(backend_err)?;
                return Ok(Some(scope.clone()));
            }
        }
        for key in keys {
            let insert = "INSERT INTO cap_leases (scope, replica_id, slots, wanted, in_use, expires_at) \
                          VALUES ($1, $2, 1, 1, 1, $3)";
            let values: Vec<Value> = vec![key.into(), holder.into(), expires_at.millis().into()];
            txn.execute_raw(self.statement(insert, values)).await.map_err(backend_err)?;
        }
        txn.commit().await.map_err(backend_err)?;
        Ok(None)
    }

    async fn heartbeat(&self, replica: &str, now: Timestamp, expires_at: Timestamp) -> Result<(), StoreError> {
        let upsert = "INSERT INTO replicas (id, expires_at) VALUES ($1, $2) \
                      ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at";
        self.db
            .writes()
            .execute_raw(self.statement(upsert, vec![replica.into(), expires_at.millis().into()]))
            .await
            .map_err(backend_err)?;
        // Each start is a new replica id: forget those gone for an hour (a missing row and an
        // expired one mean the same to the sweep).
        let forget = format!("DELETE FROM replicas WHERE {}", lease::REPLICA.free("", "$1"));
        let long_ago = now.millis().saturating_sub(3_600_000);
        self.db.writes().execute_raw(self.statement(&forget, vec![long_ago.into()])).await.map_err(backend_err)?;
        Ok(())
    }

    async fn retire(&self, replica: &str) -> Result<(), StoreError> {
        let sql = lease::REPLICA.delete_held();
        self.db.writes().execute_raw(self.statement(&sql, vec![replica.into()])).await.map_err(backend_err)?;
        Ok(())
    }

    async fn report_upstream_health(&self, replica: &str, endpoints_json: &str) -> Result<(), StoreError> {
        let sql = "UPDATE replicas SET upstream_health = $1 WHERE id = $2";
        self.db
            .writes()
            .execute_raw(self.statement(sql, vec![endpoints_json.into(), replica.into()]))
            .await
            .map_err(backend_err)?;
        Ok(())
    }

    async fn replica_reports(&self, now: Timestamp) -> Result<Vec<(String, Timestamp, Option<String>)>, StoreError> {
        let sql = format!(
            "SELECT id, expires_at, upstream_health FROM replicas WHERE {} ORDER BY id",
            lease::REPLICA.live("", "$1")
        );
        let rows = self
            .db
            .reads()
            .query_all_raw(self.statement(&sql, vec![now.millis().into()]))
            .await
            .map_err(backend_err)?;
        rows.iter()
            .map(|row| {
                let id: String = row.try_get("", "id").map_err(backend_err)?;
                let until: i64 = row.try_get("", "expires_at").map_err(backend_err)?;
                let health: Option<String> = row.try_get("", "upstream_health").map_err(backend_err)?;
                Ok((id, Timestamp(until), health))
            })
            .collect()
    }

    async fn orphaned_calls(&self, now: Timestamp, before: Timestamp, limit: u64) -> Result<Vec<TaskId>, StoreError> {
        let sql = format!(
            // Placeholders in order of appearance: SQLite numbers `$n` names as it meets them.
            "SELECT t.id AS id FROM tasks t WHERE t.runner IS NOT NULL AND {running} \
             AND NOT EXISTS (SELECT 1 FROM replicas r WHERE r.id = t.runner AND {}) \
             AND t.updated_at < $2 ORDER BY t.updated_at LIMIT $3",
            lease::REPLICA.live("r.", "$1"),
            running = is_running!("t.status")
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let values: Vec<Value> = vec![now.millis().into(), before.millis().into(), limit.into()];
        let rows = self.db.reads().query_all_raw(self.statement(&sql, values)).await.map_err(backend_err)?;
        rows.iter().map(|row| row.try_get::<String>("", "id").map(TaskId).map_err(backend_err)).collect()
    }
}
