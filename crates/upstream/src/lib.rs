//! The upstream platform: HTTP adapters for its endpoints and its asset control plane.
//!
//! - [`HttpUpstream`] implements [`domain::ports::Upstream`] for chat completions, image
//!   generation, the speech service, response-style and message-style chat, built from an
//!   [`UpstreamConfig`] (base URLs, keys, timeouts), with one pooled HTTP/1.1 client of its own (`transport`); streams
//!   are read chunk by chunk through [`sse::SseSplitter`] and framed per endpoint (data-only
//!   for chat, named events for the native formats). Its routes, answer bounds and failures
//!   are in [`adapter`], below the calls it makes: the endpoint table and the error mapping
//!   are in [`http`]. It also implements [`domain::ports::TaskUpstream`] for the platform's
//!   video tasks ([`tasks`]).
//! - [`RoutedUpstream`] puts several endpoints (base URL and key) behind the same ports, per
//!   kind of call: it picks by weight and priority ([`route`]), retries a call on another
//!   endpoint when it failed before the first byte of an answer, cools endpoints down on
//!   `Retry-After` and opens circuit breakers on repeated failures ([`routed`]).
//! - [`HttpAssetUpstream`] implements [`domain::ports::AssetUpstream`] for the asset control
//!   plane, with Volcengine-style signed requests ([`assets`], [`assets::sign`]), built from an
//!   [`AssetsConfig`].
//!
//! The simulator these adapters are tested against is its own crate, `sim`, which builds on
//! this one (the signature scheme of [`assets::sign`], the simulator's keys in [`config`]); this
//! crate runs no server.
//!
//! **Architecture Invariant:** the platform's bodies for image generation and video tasks are
//! this crate's: [`wire`] writes them from the domain's typed requests and reads the task answers
//! into typed states, so callers never see those shapes. The other synchronous bodies (chat, the
//! native formats, speech) still pass through as bytes, and their meaning (usage, completion of a
//! named stream, the speech service's `code`) is decided by the callers; for those this crate knows
//! the wire format only as far as transport needs (status, SSE framing, error events).

pub mod adapter;
pub mod assets;
pub mod config;
pub mod http;
pub mod route;
pub mod routed;
pub mod sse;
mod stream;
pub mod tasks;
pub mod transport;
pub mod wire;

pub use adapter::HttpUpstream;
pub use assets::HttpAssetUpstream;
pub use config::{AssetsConfig, UpstreamConfig};
pub use routed::{Member, RoutedConfig, RoutedUpstream};
