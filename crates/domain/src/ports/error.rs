//! `StoreError`: a storage failure, reduced to what callers can act on.
//!
//! A caller's bad input (`Invalid`, a 400 at the edge) and stored data that does not read back
//! (`Corrupt`, a 500 with a generic message and the cause logged) are different variants: a corrupt
//! row is never the caller's fault and its text never reaches a client.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// A storage failure, reduced to what callers can act on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The named thing does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// The change conflicts with what is stored (duplicate, wrong state).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The caller's request is not acceptable (a value out of range, an empty secret).
    #[error("invalid: {0}")]
    Invalid(String),
    /// A stored row does not read back as a valid record (a value no type accepts, a broken JSON
    /// record): the data is corrupt. The text is for the log, not for clients.
    #[error("corrupt stored {what}")]
    Corrupt {
        /// What was being read, such as `media record of task task_1`.
        what: String,
        /// Why it does not read.
        #[source]
        source: Cause,
    },
    /// The database failed; the text is for the log, not for clients.
    #[error("database error: {0}")]
    Backend(String),
}

/// The underlying error of a [`StoreError::Corrupt`], kept as a source (shared, so the error stays `Clone`).
pub type Cause = Arc<dyn Error + Send + Sync>;

impl StoreError {
    /// A corrupt stored `what`, because of `source`.
    pub fn corrupt(what: impl Into<String>, source: impl Error + Send + Sync + 'static) -> StoreError {
        StoreError::Corrupt { what: what.into(), source: Arc::new(source) }
    }

    /// The error and its sources, `: `-separated (for logs).
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut next = self.source();
        while let Some(cause) = next {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            next = cause.source();
        }
        text
    }
}

/// Two errors are equal when they are the same variant with the same text (a `Corrupt` cause is
/// compared by its text).
impl PartialEq for StoreError {
    fn eq(&self, other: &StoreError) -> bool {
        match (self, other) {
            (StoreError::NotFound(a), StoreError::NotFound(b))
            | (StoreError::Conflict(a), StoreError::Conflict(b))
            | (StoreError::Invalid(a), StoreError::Invalid(b))
            | (StoreError::Backend(a), StoreError::Backend(b)) => a == b,
            (StoreError::Corrupt { what: a, source: x }, StoreError::Corrupt { what: b, source: y }) => {
                a == b && x.to_string() == y.to_string()
            }
            (
                StoreError::NotFound(_)
                | StoreError::Conflict(_)
                | StoreError::Invalid(_)
                | StoreError::Corrupt { .. }
                | StoreError::Backend(_),
                _,
            ) => false,
        }
    }
}

impl Eq for StoreError {}

/// A stored value that is not what its column must hold, as a cause of [`StoreError::Corrupt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadValue(pub String);

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for BadValue {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::UnknownName;

    #[test]
    fn corrupt_keeps_its_cause() {
        let e = StoreError::corrupt("kind of task t", UnknownName { what: "model kind", value: "vid".into() });
        assert_eq!(e.to_string(), "corrupt stored kind of task t");
        assert_eq!(e.chain(), "corrupt stored kind of task t: unknown model kind \"vid\"");
        assert!(e.source().is_some());
        assert_eq!(e.clone(), e);
        assert_ne!(e, StoreError::Invalid("corrupt stored kind of task t".into()));
    }
}
