//! PostgreSQL: the store for several application instances sharing one database.
//!
//! Timestamps are `timestamptz`; they cross the wire as milliseconds since the epoch so that
//! the injected clock decides what "now" is. Lock waits are bounded by `SET LOCAL
//! lock_timeout`, sent in the same round trip as `BEGIN`.

use std::str::FromStr;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Pool, Postgres, Transaction};

use super::{Backend, Failure, KeyRef, Record, StoredKey, TxSettings, sealed};

mod sql {
    pub const LOOKUP: &str = "SELECT fingerprint, status, response_status, response_headers, \
         response_body, (extract(epoch FROM expires_at) * 1000)::int8 AS expires_at_ms \
         FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3";

    pub const RESERVE: &str = "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, 'processing', to_timestamp($5::float8 / 1000), \
         to_timestamp($6::float8 / 1000)) \
         ON CONFLICT (scope, operation, idempotency_key) DO NOTHING";

    pub const RESERVE_OR_REPLACE_EXPIRED: &str = "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, 'processing', to_timestamp($5::float8 / 1000), \
         to_timestamp($6::float8 / 1000)) \
         ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET \
         fingerprint = EXCLUDED.fingerprint, status = 'processing', response_status = NULL, \
         response_headers = NULL, response_body = NULL, created_at = EXCLUDED.created_at, \
         completed_at = NULL, expires_at = EXCLUDED.expires_at \
         WHERE idempotency_keys.expires_at <= EXCLUDED.created_at";

    pub const COMPLETE: &str = "UPDATE idempotency_keys SET status = 'completed', \
         response_status = $4, response_headers = $5, response_body = $6, \
         completed_at = to_timestamp($7::float8 / 1000) \
         WHERE scope = $1 AND operation = $2 AND idempotency_key = $3";

    /// Small batches, skipping rows a running request holds: no long locks.
    pub const SWEEP: &str = "DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(\
         SELECT ctid FROM idempotency_keys WHERE expires_at <= to_timestamp($1::float8 / 1000) \
         LIMIT $2 FOR UPDATE SKIP LOCKED))";
}

impl sealed::Sealed for Postgres {}

impl Backend for Postgres {
    fn migrator() -> sqlx::migrate::Migrator {
        let mut migrator = sqlx::migrate!("../migrations/postgres");
        // Applications keep their own migrations in the same database.
        migrator.set_ignore_missing(true);
        migrator
    }

    async fn connect(
        url: &str,
        max_connections: u32,
        settings: &TxSettings,
    ) -> Result<Pool<Self>, sqlx::Error> {
        let mut options = PgConnectOptions::from_str(url)?;
        if options.get_application_name().is_none() {
            options = options.application_name("idem");
        }
        // The timeouts go in the startup packet: no statement per transaction.
        let options = options.options([
            (
                "lock_timeout",
                settings.lock_timeout.as_millis().max(1).to_string(),
            ),
            (
                "statement_timeout",
                settings.statement_timeout.as_millis().max(1).to_string(),
            ),
        ]);
        PgPoolOptions::new()
            .max_connections(max_connections)
            // A dead connection fails its query (answered 503, retry with the same key)
            // instead of costing every request a ping round trip.
            .test_before_acquire(false)
            .connect_with(options)
            .await
    }

    async fn begin(
        conn: PoolConnection<Self>,
        settings: &TxSettings,
    ) -> Result<Transaction<'static, Self>, sqlx::Error> {
        let statement = if settings.session_has_timeouts {
            None
        } else {
            // Still one round trip: the simple-query protocol takes several statements.
            Some(
                format!(
                    "BEGIN; SET LOCAL lock_timeout = {}; SET LOCAL statement_timeout = {}",
                    settings.lock_timeout.as_millis().max(1),
                    settings.statement_timeout.as_millis().max(1),
                )
                .into(),
            )
        };
        Transaction::begin(conn, statement).await
    }

    super::impl_backend_queries!();

    fn classify(error: &sqlx::Error) -> Failure {
        match error.as_database_error().and_then(|e| e.code()) {
            // lock_not_available (lock_timeout), query_canceled (statement_timeout)
            Some(code) if code == "55P03" || code == "57014" => Failure::LockTimeout,
            _ => Failure::Other,
        }
    }
}
