//! The kit of idem's own tests, for its crates' dev-dependencies only (not published):
//!
//! - [`harness`]: the one test harness. Each test gets a new, empty database on any store
//!   idem supports ([`harness::TestBackend`]), and [`on_every_store!`], the one test matrix,
//!   runs generic test bodies on every store whose feature the test's crate turns on.
//! - [`conformance`]: the store conformance kit. The contract of `idem-store`'s `Backend`
//!   and `KeyTable` as cases generic over the backend, which `tests/conformance.rs` runs on
//!   every store. It uses the store's public API only, and [`conformance::ConformanceSql`]
//!   for the few statements beside it (one feature per store, named as the store's).
#![warn(missing_docs, unreachable_pub)]

pub mod conformance;
pub mod failover;
pub mod harness;

/// What the exported macros name. Not an API.
#[doc(hidden)]
pub mod __private {
    pub use idem_store::sqlx;
}
