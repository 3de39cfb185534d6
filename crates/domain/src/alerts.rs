//! Low-balance alerts: a user's threshold, where its `balance.low` event goes, and whether the
//! next crossing below the threshold sends one (armed), with the store port that keeps them.
//!
//! The rules (kept by every [`AlertStore`]): an alert is armed while the balance is at or above its
//! threshold; disarming an armed alert whose balance is below its threshold and enqueueing its
//! event are one commit, a compare-and-set on `armed`, so each crossing sends one event whoever
//! sees it (any replica, any number of concurrent debits); a disarmed alert whose balance is back at
//! or above its threshold is armed again. Both read the balance as the database holds it at that
//! instant, not as a caller saw it.

use async_trait::async_trait;

use crate::ports::StoreError;
use crate::{Timestamp, UsdAmount, UserId};

/// The event type of a low-balance alert's webhook.
pub const LOW_BALANCE_EVENT: &str = "balance.low";

/// A user's low-balance alert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalanceAlert {
    /// Whose balance it watches.
    pub user_id: UserId,
    /// Below this the balance is low.
    pub threshold: UsdAmount,
    /// Where the `balance.low` event goes; `None`: no event (the console's banner only).
    pub webhook_url: Option<String>,
    /// Whether the next crossing below the threshold sends an event.
    pub armed: bool,
    /// When it was last set, fired or re-armed.
    pub updated_at: Timestamp,
    /// The user's balance, read with the alert.
    pub balance: UsdAmount,
}

impl BalanceAlert {
    /// Whether the balance is below the threshold.
    pub fn below(&self) -> bool {
        self.balance < self.threshold
    }

    /// Whether the alert's state disagrees with its balance: armed while below (it should fire), or
    /// disarmed while at or above (it should re-arm).
    pub fn out_of_step(&self) -> bool {
        self.armed == self.below()
    }
}

/// A crossing below the threshold, as the commit that disarmed the alert saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LowBalance {
    /// Whose balance.
    pub user_id: UserId,
    /// The balance at that commit.
    pub balance: UsdAmount,
    /// The alert's threshold.
    pub threshold: UsdAmount,
    /// When it was seen.
    pub at: Timestamp,
}

/// What bringing an alert in step with its balance did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlertChange {
    /// Nothing: no alert, or its state already matches the balance.
    Unchanged,
    /// The alert fired: disarmed, its event enqueued (when it has a URL) in the same commit.
    Fired(LowBalance),
    /// The balance was back at or above the threshold: armed again.
    Rearmed,
}

/// Builds a fired alert's webhook body.
pub type AlertPayload = dyn Fn(&LowBalance) -> String + Send + Sync;

/// Where low-balance alerts are kept.
#[async_trait]
pub trait AlertStore: Send + Sync {
    /// `user`'s alert, if it has one.
    async fn alert(&self, user: &UserId) -> Result<Option<BalanceAlert>, StoreError>;

    /// Sets `user`'s alert to `threshold` and `webhook_url`, armed when the balance is at or above
    /// the threshold now; `NotFound` for an unknown user.
    async fn set_alert(
        &self,
        user: &UserId,
        threshold: UsdAmount,
        webhook_url: Option<&str>,
        now: Timestamp,
    ) -> Result<BalanceAlert, StoreError>;

    /// Removes `user`'s alert (nothing when it has none).
    async fn clear_alert(&self, user: &UserId) -> Result<(), StoreError>;

    /// Brings `user`'s alert in step with the balance the database holds now: fires an armed alert
    /// whose balance is below its threshold (disarmed, and its event, built by `payload`, enqueued
    /// to its URL in the same commit) or re-arms a disarmed one whose balance is at or above it.
    /// Returns the alert as it now stands (`None`: the user has none) and what changed.
    async fn check_alert(
        &self,
        user: &UserId,
        now: Timestamp,
        payload: &AlertPayload,
    ) -> Result<(Option<BalanceAlert>, AlertChange), StoreError>;

    /// Users whose alert is out of step with their balance (armed and below, or disarmed and at or
    /// above), at most `limit`: what a sweep brings in step after a crash or a change made elsewhere.
    async fn alerts_out_of_step(&self, limit: u64) -> Result<Vec<UserId>, StoreError>;
}
