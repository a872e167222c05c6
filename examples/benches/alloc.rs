//! Heap allocations per request of the `orders` example, in process, on SQLite and
//! PostgreSQL: `cargo bench -p idem-examples --bench alloc`.
//!
//! Every request goes through the whole stack (axum, the `#[idempotent]` expansion, the
//! runtime, sqlx) by `tower::ServiceExt::oneshot`, one after another; a counting global
//! allocator (`stats_alloc`) sees every thread, so the drivers' work is counted too. The
//! requests are built before counting starts. What it shows: allocations per request do not
//! grow with the number of requests or of stored keys, and only their bytes grow with the
//! body.
//!
//! PostgreSQL comes from `DATABASE_URL` (an admin URL; by default the test harness's
//! default); the bench creates and drops its own database.
//! With `ALLOC_BACKENDS=sqlite` it runs on SQLite only.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::alloc::System;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use idem_examples::orders::{self, OrdersDb};
use idem_runtime::sqlx::{self, Postgres, Sqlite};
use idem_runtime::{Config, Idem};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use tower::ServiceExt as _;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const N: usize = 500;

/// `{"sku": "BENCH-1", "quantity": 1}`, padded with insignificant whitespace to `len` bytes:
/// the same order, the same fingerprint, a longer body.
fn body(len: usize) -> String {
    let core = r#"{"sku": "BENCH-1", "quantity": 1"#;
    let pad = len.saturating_sub(core.len() + 1);
    format!("{core}{}}}", " ".repeat(pad))
}

fn request(key: &str, body: &str) -> Request<Body> {
    Request::post("/orders")
        .header("authorization", "Bearer alloc")
        .header("content-type", "application/json")
        .header("idempotency-key", format!("\"{key}\""))
        .body(Body::from(body.to_owned()))
        .unwrap()
}

/// Sends `requests` one by one and returns (allocations, bytes allocated) per request.
async fn measure(app: &Router, requests: Vec<Request<Body>>, expect: u16) -> (f64, f64) {
    let n = requests.len() as f64;
    let region = Region::new(GLOBAL);
    for request in requests {
        let response = app.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status().as_u16(), expect);
        axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
    }
    let change = region.change();
    let allocations = (change.allocations + change.reallocations) as f64;
    let bytes = (change.bytes_allocated + change.bytes_reallocated.max(0) as usize) as f64;
    (allocations / n, bytes / n)
}

async fn run<DB: OrdersDb>(name: &str, url: &str) {
    let config = Config::default().max_request_body(64 * 1024);
    let idem = Idem::<DB>::connect(url, config).await.unwrap();
    idem.migrate().await.unwrap();
    DB::migrate_orders(idem.pool()).await.unwrap();
    let app = orders::router(idem);
    let small = body(34);
    let fresh = |tag: &str, count: usize, body: &str| -> Vec<Request<Body>> {
        (0..count)
            .map(|i| request(&format!("{tag}-{i}"), body))
            .collect()
    };
    // Warm up: connections, statement caches, lazily built state.
    measure(&app, fresh("warm", 200, &small), 201).await;
    measure(&app, fresh("replay", 100, &small), 201).await;

    let mut rows = Vec::new();
    for (label, requests, expect) in [
        ("fresh, 34 B body", fresh("a", N, &small), 201),
        (
            "fresh, 34 B body, 4× the requests",
            fresh("b", 4 * N, &small),
            201,
        ),
        ("fresh, 1 KiB body", fresh("c", N, &body(1024)), 201),
        ("fresh, 16 KiB body", fresh("d", N, &body(16 * 1024)), 201),
        (
            "replay, 34 B body",
            (0..N)
                .map(|i| request(&format!("replay-{}", i % 100), &small))
                .collect(),
            201,
        ),
    ] {
        let (allocations, bytes) = measure(&app, requests, expect).await;
        rows.push((label.to_owned(), allocations, bytes));
    }
    // Ten thousand more keys in the table, then the first case again.
    measure(&app, fresh("fill", 10_000, &small), 201).await;
    let (allocations, bytes) = measure(&app, fresh("e", N, &small), 201).await;
    rows.push((
        "fresh, 34 B body, 10,000 more keys stored".to_owned(),
        allocations,
        bytes,
    ));

    println!("\n{name}\n");
    println!("| requests | allocations / request | bytes allocated / request |");
    println!("|---|---:|---:|");
    for (label, allocations, bytes) in rows {
        println!("| {label} | {allocations:.1} | {bytes:.0} |");
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = std::env::temp_dir().join(format!("idem-alloc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("orders.db");
        run::<Sqlite>("SQLite", &format!("sqlite://{}", file.display())).await;
        std::fs::remove_dir_all(&dir).ok();

        if std::env::var("ALLOC_BACKENDS").is_ok_and(|b| b == "sqlite") {
            return;
        }
        let admin = idem_testkit::harness::postgres_url();
        let database = format!("idem_alloc_{}", std::process::id());
        let pool = sqlx::PgPool::connect(&admin).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {database}"))
            .execute(&pool)
            .await
            .unwrap();
        let (base, _) = admin.rsplit_once('/').unwrap();
        run::<Postgres>("PostgreSQL", &format!("{base}/{database}")).await;
        sqlx::query(&format!("DROP DATABASE {database} WITH (FORCE)"))
            .execute(&pool)
            .await
            .unwrap();
    });
}
