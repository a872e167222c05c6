//! The key table on PostgreSQL (`DATABASE_URL`, or the harness's default; each test in a
//! schema `idem_test_<uuid>`).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use idem_store::sqlx::{self, Postgres};
use idem_store::{Backend, KeyRef, KeyTable, MIGRATION_LOCK_ID, NewRow, TxSettings};
use idem_testkit::harness::{TestBackend as _, settings};

/// Session advisory locks with [`MIGRATION_LOCK_ID`] the pool's one session holds.
async fn migration_locks_held(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() \
         AND classid::int8 = $1 AND objid::int8 = $2 AND objsubid = 1",
    )
    .bind(MIGRATION_LOCK_ID >> 32)
    .bind(MIGRATION_LOCK_ID & 0xffff_ffff)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Sessions of this test (its `application_name`) waiting for [`MIGRATION_LOCK_ID`].
async fn migration_lock_waits(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
         WHERE l.locktype = 'advisory' AND NOT l.granted \
         AND a.application_name = current_setting('application_name') \
         AND l.classid::int8 = $1 AND l.objid::int8 = $2 AND l.objsubid = 1",
    )
    .bind(MIGRATION_LOCK_ID >> 32)
    .bind(MIGRATION_LOCK_ID & 0xffff_ffff)
    .fetch_one(conn)
    .await
    .unwrap()
}

/// A migration run leaves its connection as it found it: lock released, the session's
/// timeouts (here set by the application's URL) back in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_releases_its_lock_and_session() {
    let url = Postgres::fresh_url().await.replace(
        "options=",
        "options=-c%20lock_timeout%3D2s%20-c%20statement_timeout%3D30s%20",
    );
    let pool = idem_store::connect::connect::<Postgres>(&url, 1, &settings())
        .await
        .unwrap();
    // The lock as `pg_locks` shows it (the documented halves).
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATION_LOCK_ID)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(migration_locks_held(&pool).await, 1);
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(MIGRATION_LOCK_ID)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(migration_locks_held(&pool).await, 0);

    let pid = || async {
        sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let before = pid().await;
    idem_store::migrate(&pool).await.unwrap();
    // The same session, pooled again rather than closed.
    assert_eq!(pid().await, before);
    assert_eq!(migration_locks_held(&pool).await, 0);
    let (lock_timeout, statement_timeout): (String, String) = sqlx::query_as(
        "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (lock_timeout.as_str(), statement_timeout.as_str()),
        ("2s", "30s")
    );
}

/// Migrations wait for the lock another instance holds, longer than the pool's
/// `lock_timeout`, and go on when it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_waits_for_the_lock() {
    let url = Postgres::fresh_url().await;
    let quick = TxSettings {
        lock_timeout: Duration::from_millis(50),
        ..settings()
    };
    let table = KeyTable::new(
        idem_store::connect::connect::<Postgres>(&url, 1, &quick)
            .await
            .unwrap(),
    );
    let mut other = sqlx::PgConnection::connect_with_url(&url).await;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATION_LOCK_ID)
        .execute(&mut other)
        .await
        .unwrap();
    let run = tokio::spawn({
        let table = table.clone();
        async move { table.migrate().await }
    });
    // The migration waits for the lock...
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while migration_lock_waits(&mut other).await == 0 {
        assert!(!run.is_finished(), "the migration ended: {:?}", run.await);
        assert!(
            std::time::Instant::now() < deadline,
            "the migration did not wait for the lock within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // ... and still waits after several times the pool's `lock_timeout` (50 ms).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!run.is_finished(), "the migration ran without the lock");
    assert_eq!(migration_lock_waits(&mut other).await, 1);
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(MIGRATION_LOCK_ID)
        .execute(&mut other)
        .await
        .unwrap();
    run.await.unwrap().unwrap();
    assert_eq!(
        common::history(table.pool()).await.len(),
        Postgres::migrations().len()
    );
}

trait ConnectWithUrl {
    async fn connect_with_url(url: &str) -> Self;
}

impl ConnectWithUrl for sqlx::PgConnection {
    async fn connect_with_url(url: &str) -> Self {
        use sqlx::Connection as _;
        sqlx::PgConnection::connect(url).await.unwrap()
    }
}

/// The PostgreSQL history table has the documented columns and types.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_table_layout() {
    let (_, table) = common::fresh::<Postgres>().await;
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT column_name::text, data_type::text FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = 'idem_schema_migrations' \
         ORDER BY ordinal_position",
    )
    .fetch_all(table.pool())
    .await
    .unwrap();
    let columns: Vec<(&str, &str)> = columns
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    assert_eq!(
        columns,
        [
            ("version", "bigint"),
            ("description", "text"),
            ("checksum", "bytea"),
            ("applied_at", "timestamp with time zone"),
        ]
    );
}

/// PostgreSQL's merged `INSERT …; COMMIT; BEGIN` writes every value of the request as
/// hexadecimal escapes: nothing from a request reaches the statement otherwise.
#[test]
fn the_merged_statement_holds_request_values_only_as_hex() {
    let body: &[u8] = b"{\"a\":\"'; DROP TABLE x; --\"}";
    let row = NewRow {
        field_digests: Some(&[0x01, 0x02, 0x03]),
        key: KeyRef {
            scope: "tenant:o'brien",
            operation: "op:v1",
            key: "k'); COMMIT; --",
        },
        fingerprint: &[0x00, 0xff, 0x10],
        status: 201,
        headers_json: r#"[["location","/x?a='b'"]]"#,
        body,
        created_ms: 1_000,
        completed_ms: 2_000,
        expires_ms: 3_000,
        replace_expired: false,
    };
    let sql = <Postgres as Backend>::insert_and_commit(&row).unwrap_or_default();
    assert!(sql.ends_with("; COMMIT; BEGIN"), "{sql}");
    // Every quote in the statement opens or closes a literal of hexadecimal escapes or
    // a fixed word: `\xHH…` (text), `\\x<hex>` (bytea), `completed`.
    let quoted: Vec<&str> = sql.split('\'').skip(1).step_by(2).collect();
    assert_eq!(quoted.len(), 8, "{sql}");
    for literal in &quoted {
        let text = literal.len() % 4 == 0
            && literal
                .as_bytes()
                .chunks(4)
                .all(|c| c[0] == b'\\' && c[1] == b'x' && c[2..].iter().all(u8::is_ascii_hexdigit));
        let bytea = literal
            .strip_prefix("\\\\x")
            .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(text || bytea || *literal == "completed", "{literal}");
    }
    assert!(sql.contains(r"E'\\x00ff10'::bytea"), "{sql}");
    assert!(
        sql.contains(r"to_timestamp(3000::float8 / 1000), E'\\x010203'::bytea)"),
        "{sql}"
    );
    assert!(sql.contains(", 'completed', 201, "), "{sql}");
    // The key, byte for byte.
    let key_escaped: String = "k'); COMMIT; --"
        .bytes()
        .map(|b| format!("\\x{b:02x}"))
        .collect();
    assert!(sql.contains(&format!("E'{key_escaped}'")), "{sql}");
}
