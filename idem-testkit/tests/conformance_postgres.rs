//! The store conformance kit on PostgreSQL (`DATABASE_URL`, or the harness's default):
//! every case in a schema `idem_test_<uuid>` of its own.

idem_testkit::conformance_tests!(idem_store::sqlx::Postgres);
