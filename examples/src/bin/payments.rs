//! `payments`: the example server.
//!
//! ```text
//! cargo run --release -p idem-examples --bin payments
//! ```
//!
//! - `DATABASE_URL`: unset → SQLite file `payments.db` in the working directory;
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
//! - `LISTEN_ADDR`: default `127.0.0.1:3001`.
//! - `PROVIDER_URL`: the payment provider, default `http://127.0.0.1:3900` (the
//!   `fake-provider` example's default address).
//! - `WEBHOOK_URL`: where the outbox delivers payment events (`payment.succeeded`), default
//!   `http://127.0.0.1:3900/webhooks` (the `fake-provider`'s receiver). Every event is
//!   retried, whatever the receiver answers, until it gets a `2xx`: after 100 failed
//!   attempts (backoff from 0.5 s to 10 s, with jitter: about 8 minutes) it is parked as
//!   dead, never dropped; `idem outbox retry ID|--all` puts it back.
//! - `WEBHOOK_SECRET`: a Standard Webhooks secret (`whsec_…`) to sign those deliveries with
//!   (`webhook-signature`); unset, they carry `webhook-id` and `webhook-timestamp` unsigned.
//! - `PROVIDER_WEBHOOK_SECRET`: the secret `POST /webhooks/provider` verifies the
//!   provider's events with, default `whsec_aWRlbS1leGFtcGxlLXNlY3JldA==` (the
//!   `fake-provider`'s default).
//! - `PAYMENTS_LEASE`: how long an attempt holds a payment's key without renewing it
//!   (`30s`, `1m` …), default `30s`. A payment whose attempt died is resumed — by a retry or
//!   by this process's reconciler — once it ran out.
//! - `PAYMENTS_UNMATCHED_AFTER`: how long after its first delivery a provider event for a
//!   charge no payment names is answered `503` (`30s`, `1h` …), default `1h`; after that it
//!   is acknowledged with `200` and kept as unmatched in the inbox (`idem inbox list`), for
//!   an operator to refund or reconcile.
//! - `PAYMENTS_ATTEMPT_HOLDS`: `on` makes every attempt hold its number on PostgreSQL
//!   ([`Config::attempt_holds`](idem_runtime::Config::attempt_holds)), so that a retry
//!   resumes a payment at once when the process that ran its attempt is gone (its hold
//!   ended with its connection), before the lease runs out; default `off`. Ignored with
//!   `MIGRATION_DATABASE_URL` (a transaction pooler keeps no session for a hold).
//! - `DATABASE_POOL_SIZE`: the pool idem opens, default 16; the process keeps up to twice
//!   this many database connections, and with attempt holds as many more for the holds.
//! - `HEADER_READ_TIMEOUT_MS`, `MAX_HEADER_BYTES`, `BODY_READ_TIMEOUT_MS`,
//!   `REQUEST_TIMEOUT_MS`, `MAX_CONNECTIONS`, `SHUTDOWN_DEADLINE_MS`: how slow clients,
//!   connections and shutdown are bounded ([`idem_examples::server`]). A payment cut off by
//!   the request timeout or the shutdown deadline keeps its lease and is resumed like any
//!   interrupted one.
//!
//! Applies the migrations and registers the payment operation at start, runs the
//! reconciler (every half lease, between 1 s and 10 s), serves `GET /metrics`
//! (Prometheus), logs `listening on http://ADDR` once it accepts connections, and shuts
//! down gracefully on SIGTERM or SIGINT, within `SHUTDOWN_DEADLINE_MS`. The HTTP contract
//! is described in [`idem_examples::payments`].

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use idem_examples::payments::{self, AppState, PaymentsCtx, PaymentsDb};
use idem_examples::server;
use idem_runtime::outbox::{Dispatcher, WebhookSink};
use idem_runtime::spec::parse_duration;
use idem_runtime::sqlx::{MySql, Postgres, Sqlite};
use idem_runtime::webhooks::WebhookSecret;
use idem_runtime::{Config, Idem};
use tokio::net::TcpListener;

const DEFAULT_DATABASE_URL: &str = "sqlite://payments.db";
const DEFAULT_LISTEN_ADDR: &str = "127.0.0.1:3001";

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
    server::exit("payments", result)
}

async fn serve<DB: PaymentsDb>(url: &str) -> Result<(), Box<dyn Error>> {
    let addr = server::listen_addr(DEFAULT_LISTEN_ADDR)?;
    let provider_url = server::env_or("PROVIDER_URL", payments::DEFAULT_PROVIDER_URL);
    let webhook_url = server::env_or("WEBHOOK_URL", payments::DEFAULT_WEBHOOK_URL);
    let signing = match std::env::var("WEBHOOK_SECRET") {
        Ok(secret) => {
            Some(WebhookSecret::new(&secret).map_err(|e| format!("WEBHOOK_SECRET: {e}"))?)
        }
        Err(_) => None,
    };
    let provider_webhooks = WebhookSecret::new(&server::env_or(
        "PROVIDER_WEBHOOK_SECRET",
        payments::DEFAULT_PROVIDER_WEBHOOK_SECRET,
    ))
    .map_err(|e| format!("PROVIDER_WEBHOOK_SECRET: {e}"))?;
    let lease = match std::env::var("PAYMENTS_LEASE") {
        Ok(text) => parse_duration(&text).map_err(|e| format!("PAYMENTS_LEASE={text}: {e}"))?,
        Err(_) => payments::DEFAULT_LEASE,
    };
    let unmatched_after = match std::env::var("PAYMENTS_UNMATCHED_AFTER") {
        Ok(text) => {
            parse_duration(&text).map_err(|e| format!("PAYMENTS_UNMATCHED_AFTER={text}: {e}"))?
        }
        Err(_) => payments::DEFAULT_UNMATCHED_AFTER,
    };
    let holds = match server::env_or("PAYMENTS_ATTEMPT_HOLDS", "off").as_str() {
        "on" => true,
        "off" => false,
        other => return Err(format!("PAYMENTS_ATTEMPT_HOLDS={other}: on or off").into()),
    };
    let limits = server::Limits::from_env()?;
    let metrics = server::install_metrics()?;

    // The attribute's lease, as `PAYMENTS_LEASE` sets it for this deployment.
    let config = Config::default()
        .max_connections(server::pool_size()?)
        .lease_for(payments::OPERATION, lease)
        .attempt_holds(holds);
    let idem: Idem<DB> = server::connect(url, config).await?;
    let ctx = Arc::new(PaymentsCtx::new(&provider_url)?.unmatched_after(unmatched_after));
    // The operator tool `idem` shows the operation's scope, ttl, mode and lease beside its
    // keys, and documents it (`idem docs`).
    idem.register_docs(payments::operations()?.docs()).await?;
    let state = AppState {
        idem: idem.clone(),
        ctx,
        provider_webhooks,
    };

    // Stuck payments — their attempt died and nobody retries — are resumed from here,
    // through the same routes clients use. Every instance runs one; the takeover is fenced,
    // so one attempt resumes each key.
    let every = payments::reconcile_interval(lease);
    let reconciler =
        payments::reconciler(idem.clone(), payments::router(state.clone())).spawn(every);

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

    // Events `payments::pay` writes in the payment's transaction are delivered from here, at
    // least once; several instances share the work (claims under a lease). Receivers
    // deduplicate on the event's `id` (`webhook-id`). Eight deliveries at a time, each
    // within 5 s: the lease the dispatcher chooses (at least 30 s) outlasts a batch of 16
    // (⌈16 ÷ 8⌉ × 5 s).
    let mut sink = WebhookSink::new(webhook_url.as_str())?.timeout(Duration::from_secs(5));
    if let Some(secret) = signing {
        sink = sink.signing_secret(secret);
    }
    let dispatcher = Dispatcher::new(&idem, sink)
        .batch(16)
        .concurrency(8)
        .max_attempts(100)
        .backoff(Duration::from_millis(500), Duration::from_secs(10))
        .poll_interval(Duration::from_millis(200))
        .spawn();
    let shutdown = server::shutdown_signal()?;
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(
        provider = %provider_url,
        lease = ?lease,
        reconcile_every = ?every,
        "payments ready"
    );
    tracing::info!("listening on http://{}", listener.local_addr()?);
    let app = payments::router(state).merge(server::metrics_routes(metrics));
    server::serve(listener, app, &limits, shutdown).await?;
    reconciler.stop();
    if let Err(error) = dispatcher.shutdown().await {
        tracing::warn!(%error, "the outbox dispatcher did not stop cleanly");
    }
    tracing::info!("shut down");
    Ok(())
}
