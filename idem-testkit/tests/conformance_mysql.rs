//! The store conformance kit on MySQL or MariaDB (`MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306`): every case in a new database `idem_test_<uuid>`.

use idem_store::sqlx::MySql;

idem_testkit::conformance_tests!(MySql);
