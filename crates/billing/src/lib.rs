//! Exact pricing, reservation estimates, the settle/refund rules, the `Ledger` port and an in-memory ledger.
//!
//! Nothing here performs I/O or needs an async runtime: the crate depends only on `domain`,
//! `rust_decimal`, `async-trait` and `thiserror`.
//!
//! # Pricing
//!
//! One module per pricing model: [`language`], [`image`], [`video`], [`audio`]. Each offers a
//! `*_charge` function that bills actual usage and a `*_reservation` function that returns the
//! worst case to hold before calling upstream. A charge is the exact sum of its line items
//! (quantity × `amount_microusd` / `denominator`), rounded **once**, half away from zero, to
//! whole micro-USD; see [`Charge`].
//!
//! # Ledger
//!
//! [`Ledger`] is the port every balance movement goes through: `credit`, `reserve`, `settle`,
//! `refund`; [`CallBook`] opens and closes a call (hold + task row, end + task outcome) in one
//! step each. The rules themselves live once, in [`book`]: a pure planner that decides a batch of
//! operations against the state they touch and lists the rows to write. [`InMemoryLedger`] runs
//! it under a mutex with no runtime; the `store` crate runs it in batched database transactions.
//! `conformance` (behind the feature of that name, for tests only) holds the one test suite every
//! implementation must pass (plain async code, no runtime of its own; each implementation's tests
//! drive it).
//!
//! # Embedding the in-memory ledger
//!
//! The futures of [`InMemoryLedger`] are ready on their first poll, so a service without an
//! async runtime can drive them with a few lines:
//!
//! ```
//! use std::future::Future;
//! use std::pin::pin;
//! use std::task::{Context, Poll, Waker};
//!
//! use billing::{InMemoryLedger, Ledger};
//! use domain::{BillingStatus, LedgerKind, TaskId, UsdAmount, UserId};
//!
//! /// Polls a future until it is ready. Only for futures that never wait for a wake-up,
//! /// such as those of `InMemoryLedger`: nothing here would ever wake a pending one.
//! fn block_on<F: Future>(future: F) -> F::Output {
//!     let mut future = pin!(future);
//!     let mut cx = Context::from_waker(Waker::noop());
//!     loop {
//!         if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
//!             return output;
//!         }
//!     }
//! }
//!
//! # fn main() -> Result<(), billing::LedgerError> {
//! let ledger = InMemoryLedger::new();
//! let alice = UserId("usr_alice".into());
//! ledger.open_account(&alice)?;
//!
//! block_on(ledger.credit(&alice, UsdAmount::from_micros(10_000_000), LedgerKind::Topup, "welcome"))?;
//!
//! // Hold the worst case before calling upstream…
//! let task = TaskId("task_1".into());
//! let hold = block_on(ledger.reserve(&alice, &task, UsdAmount::from_micros(2_500_000)))?;
//! assert_eq!(hold.balance_after, UsdAmount::from_micros(7_500_000));
//!
//! // …then charge what the call actually cost.
//! let done = block_on(ledger.settle(&task, UsdAmount::from_micros(617)))?;
//! assert_eq!(done.status, BillingStatus::Settled);
//! assert_eq!(done.balance_after, UsdAmount::from_micros(9_999_383));
//!
//! // Settling twice moves no money.
//! assert!(block_on(ledger.settle(&task, UsdAmount::from_micros(617))).is_err());
//!
//! // The balance is the sum of the ledger entries (topup, reserve, settle).
//! let balance = block_on(ledger.balance(&alice))?;
//! let entries = block_on(ledger.entries(&alice, 100))?;
//! let sum = UsdAmount::checked_sum(entries.iter().map(|e| e.amount)).map_err(|_| billing::LedgerError::Overflow)?;
//! assert_eq!(entries.len(), 3);
//! assert_eq!(balance, sum);
//! assert_eq!(balance, UsdAmount::from_micros(9_999_383));
//! # Ok(())
//! # }
//! ```

pub mod audio;
pub mod book;
mod charge;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod image;
pub mod language;
mod ledger;
mod memory;
pub mod video;

pub use audio::{audio_charge, audio_charge_seconds, audio_reservation};
pub use charge::{Charge, ChargeLine, PricingError};
pub use image::{ImageUsage, image_charge, image_reservation};
pub use language::{LanguageUsage, language_charge, language_reservation, language_reservation_text_only};
pub use ledger::{CallBook, Expect, Ledger, LedgerError, Reservation, Settlement, check_credit, settle_delta};
pub use memory::InMemoryLedger;
pub use video::{video_charge, video_dimensions, video_estimate_tokens, video_reservation};
