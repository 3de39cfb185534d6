//! `CatalogError`: why a catalog, a model definition or a price sheet was refused.

use domain::{ModelKind, RateError};

/// Why a catalog, a model definition or a price sheet could not be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CatalogError {
    /// The catalog document is not JSON of the expected shape.
    #[error("malformed catalog: {0}")]
    Malformed(String),
    /// A stored model definition is not JSON of the expected shape.
    #[error("malformed model definition: {0}")]
    Definition(String),
    /// A price sheet is not JSON of the expected shape (wrong type, float, negative, unknown field, …).
    #[error("invalid price sheet: {0}")]
    PriceSheet(String),
    /// A price sheet has the right shape but a rate that cannot be used.
    #[error("invalid price sheet: {0}")]
    Rate(#[from] RateError),
    /// A model's default price sheet cannot be used.
    #[error("model {model}: invalid pricing: {source}")]
    ModelPricing {
        /// The model.
        model: String,
        /// What is wrong with its sheet.
        source: RateError,
    },
    /// Two entries carry the same public name.
    #[error("model {0:?} appears more than once in the catalog")]
    DuplicateModel(String),
    /// An entry's name is not one of the interface's models.
    #[error("model {0:?} is not one of the interface's models")]
    UnknownModel(String),
    /// One of the interface's models has no entry.
    #[error("the catalog has no entry for model {0:?}")]
    MissingModel(String),
    /// An entry's kind differs from the interface's model enum.
    #[error("model {model}: kind is {found}, but the interface lists it as {expected}")]
    WrongKind {
        /// The model.
        model: String,
        /// The kind the interface gives it.
        expected: ModelKind,
        /// The kind the entry declares.
        found: ModelKind,
    },
    /// A concurrency cap outside 1..=100000.
    #[error("model {model}: concurrency_limit {value} is outside 1..=100000")]
    ConcurrencyLimit {
        /// The model.
        model: String,
        /// The rejected cap.
        value: i64,
    },
    /// A field that every model of a kind shares (endpoint, scope, mode, pricing kind) has another value.
    #[error("model {model}: {field} is {found:?}, but {kind} models use {expected:?}")]
    KindMismatch {
        /// The model.
        model: String,
        /// The model's kind.
        kind: ModelKind,
        /// The field name.
        field: &'static str,
        /// The value the kind requires.
        expected: String,
        /// The value found.
        found: String,
    },
    /// `limits` is not a JSON object.
    #[error("model {0}: limits must be a JSON object")]
    LimitsNotObject(String),
    /// A limit is missing, misspelt, of the wrong type or inconsistent.
    #[error("model {model}: {field}: {message}")]
    Limits {
        /// The model.
        model: String,
        /// The field path, starting `limits` (`limits.sizes.named_pixels`).
        field: String,
        /// What is wrong.
        message: String,
    },
}
