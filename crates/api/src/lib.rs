//! The HTTP edge, hand-built on hyper 1.x: accept loop with graceful shutdown, routing to a closed
//! route enum, Bearer authentication, the error envelope, request ids and access logs.
//!
//! This is the only crate that knows HTTP and the interface's JSON shapes.

pub mod body;
mod console;
mod error;
mod handlers;
mod headers;
pub mod manage;
pub mod openapi;
mod response;
mod routes;
mod server;
mod sse;
mod state;
mod tasks;
pub mod wire;

pub use body::{BodyBudget, BufferedBody, Pace};
pub use error::ApiError;
pub use response::{Body, Response};
pub use routes::{Effect, Route, route};
pub use server::serve;
pub use state::{AppState, Limits};
