//! The models port: the catalog as configured by operators, their switches and prices.

use async_trait::async_trait;

use super::StoreError;
use crate::pricing::{PriceSheet, PricingVersion};
use crate::records::{ModelAlias, ModelRecord, ModelSeed};

/// The model catalog as configured by operators, and their switches.
#[async_trait]
pub trait ModelStore: Send + Sync {
    /// Adds the models the store does not know yet, and refreshes the definition (limits,
    /// capabilities, upstream profile) of known ones; their switches, caps and prices (operator
    /// changes) are kept. Returns how many were added.
    async fn seed_models(&self, seeds: Vec<ModelSeed>) -> Result<u64, StoreError>;
    /// Every model, enabled or not, by name.
    async fn models(&self) -> Result<Vec<ModelRecord>, StoreError>;
    /// Changes a model's switch and/or cap.
    async fn set_model(
        &self,
        name: &str,
        enabled: Option<bool>,
        concurrency_limit: Option<i64>,
    ) -> Result<ModelRecord, StoreError>;
    /// Adds a new price version and makes it active.
    async fn set_price(&self, name: &str, sheet: PriceSheet) -> Result<PricingVersion, StoreError>;
    /// The price version `version` of model `name`, active or not (a task is settled at the version
    /// it was reserved at).
    async fn pricing_version(&self, name: &str, version: i64) -> Result<Option<PricingVersion>, StoreError>;
    /// Whether maintenance mode is on.
    async fn maintenance(&self) -> Result<bool, StoreError>;
    /// Turns maintenance mode on or off.
    async fn set_maintenance(&self, on: bool) -> Result<(), StoreError>;
    /// Every model alias, by name.
    async fn aliases(&self) -> Result<Vec<ModelAlias>, StoreError>;
    /// Creates or replaces the alias `alias.name` (checked by the caller).
    async fn set_alias(&self, alias: &ModelAlias) -> Result<(), StoreError>;
    /// Removes the alias `name`; false when there was none.
    async fn delete_alias(&self, name: &str) -> Result<bool, StoreError>;
}
