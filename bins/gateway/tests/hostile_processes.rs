//! The hostile-client suite: process tests that run the real `gateway serve` against what a hostile or
//! careless client (or tenant) can do, and prove each bound with a figure (peak RSS, seconds to cut,
//! seconds until another tenant's call succeeds), printed with `--nocapture`.
//!
//! Each part lives in `hostile/`; tests that involve the database run on SQLite and, when
//! `TEST_DATABASE_URL` is set, on PostgreSQL too.

mod common;
#[path = "hostile/connections.rs"]
mod connections;
#[path = "hostile/http2.rs"]
mod http2;
#[path = "hostile/large_bodies.rs"]
mod large_bodies;
#[path = "hostile/memory.rs"]
mod memory;
#[path = "hostile/multipart.rs"]
mod multipart;
#[path = "hostile/ops.rs"]
mod ops;
#[path = "hostile/raw.rs"]
mod raw;
#[path = "hostile/stalled_bodies.rs"]
mod stalled_bodies;
#[path = "hostile/stuck.rs"]
mod stuck;
#[path = "hostile/upstream_framing.rs"]
mod upstream_framing;
#[path = "hostile/worker.rs"]
mod worker;
