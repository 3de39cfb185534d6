//! The statements port: what monthly statements, the gateway's revenue and the CSV exports read
//! from the ledger. The figures of one statement come from one snapshot; an export reads in pages,
//! each after the last row of the one before ([`Keyset`]), so it never holds more than a page.

use async_trait::async_trait;

use super::StoreError;
use crate::records::{LedgerEntry, UserId};
use crate::statement::{EndedCall, Keyset, RevenueFigures, StatementFigures};

/// Reads of statements, revenue and exports.
#[async_trait]
pub trait StatementStore: Send + Sync {
    /// `user`'s figures for `[from_ms, to_ms)`, read in one snapshot (see [`StatementFigures`]).
    async fn statement_figures(&self, user: &UserId, from_ms: i64, to_ms: i64) -> Result<StatementFigures, StoreError>;
    /// Every user's figures for `[from_ms, to_ms)`, read in one snapshot.
    async fn revenue_figures(&self, from_ms: i64, to_ms: i64) -> Result<RevenueFigures, StoreError>;
    /// Up to `limit` of `user`'s ledger entries written in `[from_ms, to_ms)` after `after`, in
    /// `(created_at, id)` order.
    async fn ledger_rows(
        &self,
        user: &UserId,
        from_ms: i64,
        to_ms: i64,
        after: Keyset,
        limit: u64,
    ) -> Result<Vec<LedgerEntry>, StoreError>;
    /// Up to `limit` of `user`'s calls whose hold ended (a `settle` or `refund` entry) in
    /// `[from_ms, to_ms)` after `after`, in the order of those entries' `(created_at, id)`.
    async fn ended_calls(
        &self,
        user: &UserId,
        from_ms: i64,
        to_ms: i64,
        after: Keyset,
        limit: u64,
    ) -> Result<Vec<EndedCall>, StoreError>;
}
