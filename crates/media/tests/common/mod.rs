//! Test helpers: the shared https receiver and test CA (`testkit`), and an in-memory sink.
#![allow(clippy::panic, clippy::unwrap_used, dead_code)]

use async_trait::async_trait;
use domain::ports::{MediaError, MediaSink};
pub use testkit::{Log, receiver, test_pki};

/// A sink in memory.
#[derive(Debug, Default)]
pub struct MemSink {
    pub data: Vec<u8>,
}

#[async_trait]
impl MediaSink for MemSink {
    async fn write(&mut self, chunk: &[u8]) -> Result<(), MediaError> {
        self.data.extend_from_slice(chunk);
        Ok(())
    }

    async fn finish(self: Box<Self>) -> Result<u64, MediaError> {
        Ok(u64::try_from(self.data.len()).unwrap())
    }

    async fn abort(self: Box<Self>) {}
}
