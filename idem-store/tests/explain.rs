//! Every query the operator tool issues to page through keys, filter them and open one is
//! answered from an index, on PostgreSQL with a million keys: `auto_explain` logs the plan of
//! every statement the store runs, and no plan may read `idempotency_keys` sequentially.
//!
//! A key prefix is served by the primary key within one scope and operation; across all of
//! them no index leads with the key, and the database may read the table (timed here, not
//! asserted). The other exception, by design, is [`KeyTable::counts`] (and [`KeyTable::operations`], built on
//! it): an aggregate over every key, which reads the whole table. The test runs it too and
//! prints its time; the tool runs it off the drawing path.
//!
//! PostgreSQL from `DATABASE_URL` or the harness's default, a schema `idem_test_<uuid>` of
//! its own (`idem_testkit::harness`); `LOAD 'auto_explain'` needs a superuser.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use idem_store::sqlx::postgres::PgPoolOptions;
use idem_store::sqlx::{self, Executor as _, Postgres};
use idem_store::{AuditFilter, KeyFilter, KeyRef, KeyStatus, KeyTable};
use idem_testkit::harness::{HOUR, NOW, TestBackend as _};

const KEYS: i64 = 1_000_000;

/// Where the plans go: the text of every `sqlx::postgres::notice` event.
#[derive(Clone, Default)]
struct Plans(Arc<Mutex<Vec<u8>>>);

impl Write for Plans {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Plans {
    fn take(&self) -> String {
        String::from_utf8(std::mem::take(&mut *self.0.lock().unwrap())).unwrap()
    }
}

#[tokio::test]
async fn the_tools_queries_use_indexes_on_a_million_keys() {
    let plans = Plans::default();
    let writer = plans.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("sqlx::postgres::notice=trace")
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let url = Postgres::fresh_url().await;
    let table = KeyTable::new(sqlx::PgPool::connect(&url).await.unwrap());
    table.migrate().await.unwrap();

    // A million keys: 100 tenants, 3 operations; 10 % expired, 0.1 % processing, 0.1 % stuck.
    let started = Instant::now();
    table
        .pool()
        .execute(
            format!(
                "INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, \
                   status, response_status, response_headers, response_body, created_at, \
                   completed_at, expires_at, locked_until, attempt) \
                 SELECT 'tenant:t' || (i % 100), \
                   (ARRAY['create_order:v1', 'refund:v1', 'pay:v1'])[1 + i % 3], \
                   'k-' || lpad(i::text, 8, '0'), sha256(i::text::bytea), \
                   CASE WHEN i % 1000 IN (1, 2) THEN 'processing' ELSE 'completed' END, \
                   201, '[[\"content-type\",\"application/json\"]]', '{{\"id\":1}}'::bytea, \
                   to_timestamp(({NOW} - {HOUR} - i)::float8 / 1000), \
                   to_timestamp(({NOW} - {HOUR})::float8 / 1000), \
                   to_timestamp(({NOW} + CASE WHEN i % 10 = 5 THEN -{HOUR} ELSE {HOUR} END)::float8 / 1000), \
                   CASE i % 1000 WHEN 1 THEN to_timestamp(({NOW} + 30000)::float8 / 1000) \
                                 WHEN 2 THEN to_timestamp(({NOW} - 30000)::float8 / 1000) END, \
                   CASE WHEN i % 1000 IN (1, 2) THEN 1 ELSE 0 END \
                 FROM generate_series(1, {KEYS}) AS i"
            )
            .as_str(),
        )
        .await
        .unwrap();
    // What staged mode's reservations write beside their key rows.
    table
        .pool()
        .execute(
            "INSERT INTO idempotency_processing \
             SELECT scope, operation, idempotency_key FROM idempotency_keys \
             WHERE status = 'processing'",
        )
        .await
        .unwrap();
    table
        .pool()
        .execute("VACUUM ANALYZE idempotency_keys, idempotency_processing")
        .await
        .unwrap();
    println!("seeded {KEYS} keys in {:?}", started.elapsed());

    // One connection that explains every statement it runs to its client.
    let explained = KeyTable::new(
        PgPoolOptions::new()
            .max_connections(1)
            .after_connect(|conn, _| {
                Box::pin(async move {
                    conn.execute(
                        "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; \
                         SET client_min_messages = log",
                    )
                    .await?;
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .unwrap(),
    );

    let key = KeyRef {
        scope: "tenant:t42",
        operation: "create_order:v1",
        key: "k-00000042",
    };
    let first = explained.list(&KeyFilter::new(), NOW).await.unwrap();
    let listings = [
        ("first page", KeyFilter::new()),
        ("next page", KeyFilter::new().after(first.next.clone())),
        ("completed", KeyFilter::new().status(KeyStatus::Completed)),
        ("expired", KeyFilter::new().status(KeyStatus::Expired)),
        ("processing", KeyFilter::new().status(KeyStatus::Processing)),
        ("stuck", KeyFilter::new().status(KeyStatus::Stuck)),
        ("scope", KeyFilter::new().scope("tenant:t7")),
        (
            "scope and operation",
            KeyFilter::new().scope("tenant:t7").operation("refund:v1"),
        ),
        ("operation", KeyFilter::new().operation("refund:v1")),
        (
            "key prefix in one scope and operation",
            KeyFilter::new()
                .scope("tenant:t42")
                .operation("create_order:v1")
                .key_prefix("k-0000"),
        ),
        (
            "scope and key prefix",
            KeyFilter::new().scope("tenant:t42").key_prefix("k-000000"),
        ),
        (
            "stuck of one operation",
            KeyFilter::new()
                .status(KeyStatus::Stuck)
                .operation("pay:v1"),
        ),
    ];
    let _ = plans.take();
    let mut report = Vec::new();
    for (what, filter) in &listings {
        let started = Instant::now();
        let page = explained.list(filter, NOW).await.unwrap();
        report.push((*what, started.elapsed(), page.keys.len()));
        assert!(!page.keys.is_empty(), "{what}: the seed has such keys");
    }
    let started = Instant::now();
    assert!(explained.get(key, NOW).await.unwrap().is_some());
    report.push(("one key", started.elapsed(), 1));
    let started = Instant::now();
    explained.audit(&AuditFilter::new().key(key)).await.unwrap();
    explained.audit(&AuditFilter::new()).await.unwrap();
    report.push(("audit", started.elapsed(), 0));
    let started = Instant::now();
    assert!(explained.journal(key).await.unwrap().is_some());
    report.push(("journal", started.elapsed(), 1));

    let logged = plans.take();
    let statements: Vec<&str> = logged.split("Query Text:").skip(1).collect();
    assert!(
        statements.len() >= listings.len() + 4,
        "auto_explain logged every statement:\n{logged}"
    );
    for plan in &statements {
        if plan.contains("idempotency_keys") {
            assert!(
                !plan.contains("Seq Scan on idempotency_keys"),
                "a query reads the key table sequentially:\n{plan}"
            );
        }
    }
    for (what, took, rows) in &report {
        println!("{what:<40} {took:>12?}  {rows} rows");
    }

    // A key prefix alone, in every scope and operation: no index leads with the key, so
    // the database may read the whole table (timed, not asserted).
    let started = Instant::now();
    let found = table
        .list(&KeyFilter::new().key_prefix("k-0000"), NOW)
        .await
        .unwrap();
    println!("key prefix everywhere    {:>12?}", started.elapsed());
    assert_eq!(found.keys.len(), 50);

    // The aggregate: one pass over the table, timed.
    let started = Instant::now();
    let counts = table.counts(NOW).await.unwrap();
    println!("counts                   {:>12?}", started.elapsed());
    assert_eq!(counts.by_status.total(), KEYS as u64);
    assert_eq!(counts.by_status.stuck, 1000);
    assert_eq!(counts.by_status.processing, 1000);
}
