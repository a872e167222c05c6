//! The store conformance kit on SQLite: every case in a new file under the system's
//! temporary directory.

mod common;

idem_store::conformance_tests!(idem_store::sqlx::Sqlite, common::fresh_sqlite_url);
