//! `orders`: the example server.
//!
//! ```text
//! cargo run --release -p idem-examples --bin orders
//! ```
//!
//! - `DATABASE_URL`: unset → SQLite file `orders.db` in the working directory;
//!   `sqlite://…`, `postgres://…`, or `mysql://…` / `mariadb://…` otherwise. Several
//!   instances may share one PostgreSQL or MySQL database. On PostgreSQL a host list
//!   (`postgres://db1,db2/shop?target_session_attrs=read-write`): after a failover the
//!   server finds the promoted standby by itself.
//! - `REPLICA_DATABASE_URL`: unset (or empty) → none; set → a standby replays are read from
//!   first ([`Config::replica`](idem_runtime::Config::replica)).
//! - `MIGRATION_DATABASE_URL`: unset (or empty) → migrations run on `DATABASE_URL`; set → a
//!   direct URL of the same database for the migrations, `DATABASE_URL` then going through a
//!   transaction pooler such as PgBouncer in transaction mode, and the server runs with
//!   [`Config::transaction_pooler`](idem_runtime::Config::transaction_pooler). A start
//!   through such a pooler without it is refused, saying to set it, whenever the pooler is
//!   found (usually; see [`server::connect`]).
//! - `IDEM_MIGRATIONS`: unset or `idem` → idem applies its migrations; `external` → another
//!   tool applies them, and they are only checked at start
//!   ([`Config::external_migrations`](idem_runtime::Config::external_migrations)).
//! - `IDEM_STORAGE_KEYS`: unset (or empty) → stored values are clear; set → comma-separated
//!   `ID:BASE64` storage keys, the first sealing, the others only opening
//!   ([`Config::storage_keys`](idem_runtime::Config::storage_keys), [`server::connect`]).
//!   Unset on a key table whose newest rows are sealed, the start is refused.
//! - `IDEM_CLEAR_BESIDE_SEALED=1`: start without storage keys on a sealed key table anyway
//!   (a warning is logged; [`Config::clear_beside_sealed`](idem_runtime::Config::clear_beside_sealed)).
//! - `LISTEN_ADDR`: default `127.0.0.1:3000`.
//! - `DATABASE_POOL_SIZE`: the pool idem opens, default 16; the process keeps up to twice
//!   this many database connections ([`server::pool_size`]).
//! - `ORDERS_BENCH_ROUTES=1` adds `POST /bench/plain-orders`, the same handler without
//!   idempotency, for the benchmarks.
//! - `HEADER_READ_TIMEOUT_MS`, `MAX_HEADER_BYTES`, `BODY_READ_TIMEOUT_MS`,
//!   `REQUEST_TIMEOUT_MS`, `MAX_CONNECTIONS`, `SHUTDOWN_DEADLINE_MS`: how slow clients,
//!   connections and shutdown are bounded ([`idem_examples::server`]).
//!
//! Applies the migrations and registers its operation (for the operator tool) at start,
//! serves `GET /metrics` (Prometheus), logs `listening on http://ADDR` once it accepts
//! connections, and shuts down gracefully on SIGTERM or SIGINT, within
//! `SHUTDOWN_DEADLINE_MS`.

use std::error::Error;
use std::process::ExitCode;
use std::time::Duration;

use idem_examples::orders::{self, OrdersDb};
use idem_examples::server;
use idem_runtime::sqlx::{MySql, Postgres, Sqlite};
use idem_runtime::{Config, Idem};
use tokio::net::TcpListener;

const DEFAULT_DATABASE_URL: &str = "sqlite://orders.db";
const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:3000";

#[tokio::main]
async fn main() -> ExitCode {
    server::init_tracing();
    let url = server::env_or("DATABASE_URL", DEFAULT_DATABASE_URL);
    let result = match server::Store::of(&url) {
        Ok(server::Store::Postgres) => serve::<Postgres>(&url).await,
        Ok(server::Store::Sqlite) => serve::<Sqlite>(&url).await,
        Ok(server::Store::MySql) => serve::<MySql>(&url).await,
        Err(error) => Err(error),
    };
    server::exit("orders", result)
}

async fn serve<DB: OrdersDb>(url: &str) -> Result<(), Box<dyn Error>> {
    let addr = server::listen_addr(DEFAULT_LISTEN_ADDR)?;
    let limits = server::Limits::from_env()?;
    let metrics = server::install_metrics()?;
    let config = Config::default()
        .max_request_body(16 * 1024)
        .max_connections(server::pool_size()?);
    let idem: Idem<DB> = server::connect(url, config).await?;
    // The operator tool (`idem operations`, `idem docs`) shows and documents the operation
    // from the database.
    idem.register_docs(orders::operations()?.docs()).await?;
    arm_fail_point(&idem)?;

    // Expired keys answer 410 for a week after expiry, then the sweeper forgets them.
    let sweeper = idem.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(600));
        loop {
            every.tick().await;
            match sweeper
                .sweep_expired(
                    Duration::from_secs(7 * 24 * 3600),
                    500,
                    Duration::from_millis(20),
                )
                .await
            {
                Ok(0) => {}
                Ok(n) => tracing::info!(deleted = n, "swept expired idempotency keys"),
                Err(error) => tracing::warn!(%error, "sweeping expired keys failed"),
            }
        }
    });

    let shutdown = server::shutdown_signal()?;
    let listener = TcpListener::bind(addr).await?;
    tracing::info!("listening on http://{}", listener.local_addr()?);
    let bench_routes = std::env::var("ORDERS_BENCH_ROUTES").is_ok_and(|v| v == "1");
    let app = orders::router_with(idem, bench_routes).merge(server::metrics_routes(metrics));
    server::serve(listener, app, &limits, shutdown).await?;
    tracing::info!("shut down");
    Ok(())
}

/// With the `failpoints` feature, `IDEM_FAILPOINT=after_commit=abort` (say) arms one fault
/// for the crash tests. Without it the variable is refused, so it is never silently ignored.
fn arm_fail_point<DB: OrdersDb>(idem: &Idem<DB>) -> Result<(), Box<dyn Error>> {
    let Ok(spec) = std::env::var("IDEM_FAILPOINT") else {
        return Ok(());
    };
    #[cfg(feature = "failpoints")]
    {
        let idem_runtime::failpoint::FailPointSpec(point, action) = spec.parse()?;
        idem.fail_at(point, action);
        tracing::warn!(point = point.as_str(), ?action, "fail point armed");
        Ok(())
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = idem;
        Err(format!("IDEM_FAILPOINT={spec} needs the `failpoints` feature").into())
    }
}
