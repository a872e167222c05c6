//! The key table's generic cases beyond the conformance kit (`tests/common`), on every store
//! whose feature is on.
#![allow(clippy::unwrap_used)]

mod common;

#[allow(unused_imports)]
use common::{table_size_is_reported, upgrade_from_sqlx_layout};

idem_testkit::on_every_store!(
    // Not on MySQL: idem 0.1, whose sqlx layout this upgrades from, had no MySQL store.
    upgrade_from_sqlx_layout [postgres, sqlite],
    table_size_is_reported,
);
