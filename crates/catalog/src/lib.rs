//! The model catalog: the interface's fifteen models with their limits, capabilities, upstream profiles and default prices.
//!
//! The data lives in `fixtures/catalog.json` and is compiled in; [`Catalog::builtin`] parses and checks it.
//! [`ModelDef::seed`] turns an entry into the [`domain::ModelSeed`] the store loads, and
//! [`parse_price_sheet`] / [`price_sheet_json`] convert price sheets to and from their wire form
//! (`{"rate": {"amountMicrousd": "…", "denominator": "…", "unit": "…"}}`).

mod catalog;
mod error;
pub mod limits;
mod model;
mod pricing;

pub use catalog::{Catalog, SPEC_MODELS};
pub use error::CatalogError;
pub use limits::{AudioLimits, ImageLimits, KindLimits, LanguageLimits, VideoLimits};
pub use model::{
    KindDefaults, MAX_CONCURRENCY_LIMIT, MIN_CONCURRENCY_LIMIT, Mode, ModelDef, PricingKind, UpstreamProfile,
    kind_defaults,
};
pub use pricing::{parse_price_sheet, price_sheet_from_value, price_sheet_json};
