//! The upstream platform: an HTTP adapter for its chat-completions endpoint and a simulator of it.
//!
//! - [`http::HttpChatUpstream`] implements [`domain::ports::ChatUpstream`] with one pooled
//!   `reqwest` client, reading streams chunk by chunk through [`sse::SseSplitter`].
//! - [`sim`] serves the same endpoint deterministically over real HTTP, with per-request fault
//!   switches, for tests and local runs.
//!
//! **Architecture Invariant:** this crate knows the upstream wire format only as far as
//! transport needs (status, SSE framing, error events); request and answer bodies pass through
//! as bytes, and their meaning is decided by the callers.

pub mod http;
pub mod sim;
pub mod sse;

pub use http::HttpChatUpstream;
