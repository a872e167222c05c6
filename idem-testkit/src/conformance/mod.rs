//! The store conformance kit: the contract of [`Backend`](idem_store::Backend) and
//! [`KeyTable`](idem_store::KeyTable) as generic test bodies that run on any backend.
//!
//! Every semantic case of the store — migrations and their history, the protocol's
//! primitives (lookup, `begin` with the key's lock, lock waits that run out, inserting the
//! completed row, replacing expired rows, savepoints, responses stored byte for byte), staged
//! mode's fenced writes, the outbox, and the tools' API (get, list with every filter, keyset
//! pagination, counts, sweeps, operator actions and their audit trail, the operation
//! registry) — is a public `async fn name<DB: ConformanceSql>()` in [`cases`], generic over
//! the backend. It uses the store's public API only. Every store idem supports runs every one
//! of them: this crate's `tests/conformance.rs` runs them with
//! [`on_every_store!`](crate::on_every_store), one test per case and store
//! (`postgres::name`, `sqlite::name`, `mysql::name`), so that a failure names its case.
//!
//! # Where the databases come from
//!
//! Each case gets a new, empty database from the test harness
//! ([`TestBackend::fresh_url`](crate::harness::TestBackend::fresh_url): what each store gets
//! is in [the harness's docs](crate::harness)). The kit opens its pools itself through
//! [`Backend::connect`](idem_store::connect::connect), with the settings a case needs (a short
//! lock timeout to time a lock wait, say), and sometimes several pools on one database (one
//! per instance, for instances migrating or claiming at once); it migrates the database
//! itself, since some cases look at what migrating does. The kit never drops what it created.
//!
//! Times are fixed ([`NOW`](crate::harness::NOW)): the store never reads the clock, so no
//! case waits for time to pass, except the one that times a lock wait.
//!
//! # A new backend
//!
//! [`Backend`](idem_store::Backend) is sealed (its supertrait `Sealed` is private to
//! `idem-store`), so a store for another database is added to that crate. It
//! implements [`ConformanceSql`] here (the few statements the kit runs beside the store's
//! API, to read the migration history and to spoil rows on purpose, in `sql.rs`) and its
//! supertrait [`LockWaits`] (whether the server reports a session waiting for a lock), is
//! added to the [harness](crate::harness) and to [`on_every_store!`](crate::on_every_store),
//! and passes every case, unchanged. What is specific to one database (its lock ids, its
//! layout of the history table, query plans, numeric timestamps written by hand) stays in that
//! backend's own tests in `idem-store/tests`.
//!
//! The modules: [`cases`] (the cases), `support` (what the cases share: [`settings`], a new
//! migrated database, a key, [`put`], …) and `sql` ([`ConformanceSql`], [`LockWaits`]). The
//! cases import those two; neither imports the cases.

pub mod cases;
mod sql;
mod support;

pub use sql::{ConformanceSql, LockWaits};
pub use support::{HEADERS, put, settings};
