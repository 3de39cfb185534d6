//! Where new ids come from.

/// Where new ids come from.
pub trait IdSource: Send + Sync {
    /// A fresh, unique id starting with `prefix` (such as `task_`).
    fn new_id(&self, prefix: &str) -> String;
}
