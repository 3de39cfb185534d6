//! The HTTP edge, hand-built on hyper 1.x: accept loop with graceful shutdown, one route table
//! (`table::ROUTES`) from which dispatch, authentication, 404/405, metrics labels and the OpenAPI
//! document are derived, the error envelope, request ids and access logs.
//!
//! This is the only crate that knows HTTP and the interface's JSON shapes.

pub mod body;
mod console;
mod ctx;
mod doc;
mod error;
mod handlers;
mod headers;
pub mod manage;
mod openapi;
mod ops;
mod response;
mod route;
mod server;
mod sse;
mod state;
mod table;
mod tasks;
mod v1;
pub mod wire;

pub use body::{BodyBudget, BufferedBody, Pace};
pub use error::ApiError;
pub use response::{Body, Response};
pub use route::{Auth, BodyKind, Effect, Route};
pub use server::serve;
pub use state::{AppState, Limits};
pub use table::{ROUTES, document, route};
