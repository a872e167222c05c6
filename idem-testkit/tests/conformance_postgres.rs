//! The store conformance kit on PostgreSQL (`DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`): every case in a schema `idem_test_<uuid>` of
//! its own.

idem_testkit::conformance_tests!(idem_store::sqlx::Postgres);
