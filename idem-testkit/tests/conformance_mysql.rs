//! The store conformance kit on MySQL or MariaDB (`MYSQL_URL`, or the harness's default):
//! every case in a new database `idem_test_<uuid>`.

use idem_store::sqlx::MySql;

idem_testkit::conformance_tests!(MySql);
