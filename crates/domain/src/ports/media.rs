//! Where uploaded and imported media is kept: the media store port, its sinks and sources.

use async_trait::async_trait;

/// Why a media store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaError {
    /// The key is not a valid media key (empty, too long, a character or segment not allowed).
    #[error("invalid media key: {0}")]
    InvalidKey(String),
    /// The storage failed; the text is for the log, not for clients.
    #[error("media storage failed: {0}")]
    Io(String),
}

/// Where uploaded and imported media is kept (a local directory by default; an object store can
/// replace it). Keys are `/`-separated segments of ASCII letters, digits, `-`, `_` and `.`.
#[async_trait]
pub trait MediaStore: Send + Sync {
    /// Starts writing a new object under `key`; it becomes visible (replacing any object with
    /// that key) only when the sink is finished.
    async fn create(&self, key: &str) -> Result<Box<dyn MediaSink>, MediaError>;
    /// Reads the object back chunk by chunk; `None` when there is none.
    async fn open(&self, key: &str) -> Result<Option<Box<dyn MediaSource>>, MediaError>;
    /// Removes the object; removing a missing object is not an error.
    async fn delete(&self, key: &str) -> Result<(), MediaError>;
    /// A URL of the store's own that lets anyone holding it read the object for `ttl`, so that
    /// its bytes need not pass through the gateway; `None` when the store has no such links (a
    /// local directory).
    async fn presigned_get(&self, key: &str, ttl: std::time::Duration) -> Result<Option<String>, MediaError> {
        let _ = (key, ttl);
        Ok(None)
    }
}

/// A new object being written. Dropping it without [`MediaSink::finish`] discards it.
#[async_trait]
pub trait MediaSink: Send {
    /// Appends `chunk`.
    async fn write(&mut self, chunk: &[u8]) -> Result<(), MediaError>;
    /// Makes the object visible under its key; the number of bytes written.
    async fn finish(self: Box<Self>) -> Result<u64, MediaError>;
    /// Discards what was written.
    async fn abort(self: Box<Self>);
}

/// A stored object being read.
#[async_trait]
pub trait MediaSource: Send {
    /// The object's length in bytes.
    fn len(&self) -> u64;
    /// Whether the object has no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The next chunk; `None` at the end.
    async fn next_chunk(&mut self) -> Option<Result<Vec<u8>, MediaError>>;
}
