//! The kit of idem's own tests, for its crates' dev-dependencies only (not published):
//!
//! - [`harness`]: the one test harness. Each test gets a new, empty database on any store
//!   idem supports ([`harness::TestBackend`]); [`tests_on!`] runs generic test bodies on one
//!   backend, [`on_both_backends!`] on PostgreSQL and on SQLite.
//! - [`conformance`]: the store conformance kit. The contract of `idem-store`'s `Backend`
//!   and `KeyTable` as cases generic over the backend, run by [`conformance_tests!`] as one
//!   test per case. It uses the store's public API only, and [`conformance::ConformanceSql`]
//!   for the few statements beside it (one feature per store, named as the store's).
#![warn(missing_docs, unreachable_pub)]

pub mod conformance;
pub mod harness;

/// What the exported macros name. Not an API.
#[doc(hidden)]
pub mod __private {
    pub use idem_store::sqlx;
}
