//! PostgreSQL: the store for several application instances sharing one database.
//!
//! Timestamps are `timestamptz`; they cross the wire as milliseconds since the epoch so that
//! the injected clock decides what "now" is. An execution holds its key with a
//! transaction-scoped advisory lock taken in the same round trip as `BEGIN`; lock waits are
//! bounded by `lock_timeout`, set in the startup packet of pools idem opens and with
//! `SET LOCAL` (in that same round trip) on pools the application brings.

use std::fmt::Write as _;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{Executor as _, Pool, Postgres, Transaction};

use super::{Backend, Failure, KeyLock, KeyRef, NewRow, Record, StoredKey, TxSettings, sealed};

/// The advisory lock that stands for a key while an execution of it runs: the first eight
/// bytes of SHA-256 over the length-prefixed schema of the key table (advisory locks are per
/// database, keys per table), scope, operation and key. Distinct keys sharing a lock id (odds
/// 2^-64 per pair) only wait for each other; the primary key still keeps them apart.
fn lock_id(namespace: &str, key: KeyRef<'_>) -> i64 {
    let mut hash = Sha256::new();
    for part in [namespace, key.scope, key.operation, key.key] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let mut first = [0; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_le_bytes(first)
}

mod sql {
    pub const LOOKUP: &str = "SELECT fingerprint, status, response_status, response_headers, \
         response_body, (extract(epoch FROM expires_at) * 1000)::int8 AS expires_at_ms \
         FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3";

    /// The completed row, inserted once the handler has run; nothing if the key exists.
    pub const STORE: &str = "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, response_status, \
         response_headers, response_body, created_at, completed_at, expires_at) \
         VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, to_timestamp($8::float8 / 1000), \
         to_timestamp($9::float8 / 1000), to_timestamp($10::float8 / 1000)) \
         ON CONFLICT (scope, operation, idempotency_key) DO NOTHING";

    /// The same, overwriting a row that had expired when the execution began.
    pub const STORE_OR_REPLACE_EXPIRED: &str = "INSERT INTO idempotency_keys \
         (scope, operation, idempotency_key, fingerprint, status, response_status, \
         response_headers, response_body, created_at, completed_at, expires_at) \
         VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, to_timestamp($8::float8 / 1000), \
         to_timestamp($9::float8 / 1000), to_timestamp($10::float8 / 1000)) \
         ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET \
         fingerprint = EXCLUDED.fingerprint, status = 'completed', \
         response_status = EXCLUDED.response_status, \
         response_headers = EXCLUDED.response_headers, \
         response_body = EXCLUDED.response_body, created_at = EXCLUDED.created_at, \
         completed_at = EXCLUDED.completed_at, expires_at = EXCLUDED.expires_at \
         WHERE idempotency_keys.expires_at <= EXCLUDED.created_at";

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

    async fn begin<'c>(
        conn: &'c mut PgConnection,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> Result<Transaction<'c, Self>, sqlx::Error> {
        if settings.session_has_timeouts && lock.is_none() {
            return Transaction::begin(conn, None).await;
        }
        // One round trip: the simple-query protocol takes several statements.
        let mut statement = String::from("BEGIN");
        if !settings.session_has_timeouts {
            let _ = write!(
                statement,
                "; SET LOCAL lock_timeout = {}; SET LOCAL statement_timeout = {}",
                settings.lock_timeout.as_millis().max(1),
                settings.statement_timeout.as_millis().max(1),
            );
        }
        if let Some(lock) = lock {
            let _ = write!(
                statement,
                "; SELECT pg_advisory_xact_lock({})",
                lock_id(lock.namespace, lock.key)
            );
        }
        Transaction::begin(conn, Some(statement.into())).await
    }

    async fn namespace(conn: &mut PgConnection) -> Result<String, sqlx::Error> {
        sqlx::query_scalar("SELECT current_schema()")
            .fetch_one(conn)
            .await
    }

    async fn abandon_begin(conn: &mut PgConnection) {
        // `BEGIN` went through and a later statement failed: the session is in an aborted
        // transaction. If even this fails the connection is broken, and its next use says so.
        if let Err(error) = conn.execute("ROLLBACK").await {
            tracing::warn!(%error, "could not roll back after a failed BEGIN");
        }
    }

    async fn store_and_commit(
        mut tx: Transaction<'_, Self>,
        row: NewRow<'_>,
    ) -> Result<bool, sqlx::Error> {
        let statement = store_and_commit_statement(&row);
        // A query without arguments goes out as one simple query, several statements and all.
        match tx.execute(statement.as_str()).await {
            // Dropping `tx` rolls back the empty transaction the statement opened last; the
            // `ROLLBACK` goes out with the connection's next message (the pool's release
            // ping), so sqlx's view of the connection and the server's agree again.
            Ok(_) => Ok(true),
            // The key's row exists: the `INSERT` failed, the transaction is aborted, the
            // `COMMIT` skipped, and dropping `tx` rolls back.
            Err(error) if is_unique_violation(&error) => Ok(false),
            Err(error) => Err(error),
        }
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

/// `INSERT` of the completed row, `COMMIT`, `BEGIN`, as one simple query: one round trip
/// where a bound `INSERT` and then `COMMIT` take two. The `INSERT` has no `ON CONFLICT`: a
/// row that exists already fails it, which aborts the transaction and skips the `COMMIT`.
///
/// The simple-query protocol takes no parameters, so every value is written as a literal:
/// numbers as decimal digits, text and bytes as hexadecimal escapes. Nothing from the request
/// reaches the statement except as hexadecimal digits.
fn store_and_commit_statement(row: &NewRow<'_>) -> String {
    let text_len =
        row.key.scope.len() + row.key.operation.len() + row.key.key.len() + row.headers_json.len();
    // Text takes four characters a byte (`\xHH`), bytes two.
    let mut sql = String::with_capacity(
        512 + 4 * text_len + 2 * (row.fingerprint.len() + row.record.body.len()),
    );
    sql.push_str(
        "INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
         response_status, response_headers, response_body, created_at, completed_at, \
         expires_at) VALUES (",
    );
    for text in [row.key.scope, row.key.operation, row.key.key] {
        push_text(&mut sql, text);
        sql.push_str(", ");
    }
    push_bytes(&mut sql, row.fingerprint);
    let _ = write!(sql, ", 'completed', {}, ", row.record.status);
    push_text(&mut sql, row.headers_json);
    sql.push_str(", ");
    push_bytes(&mut sql, &row.record.body);
    sql.push_str(", ");
    for (ms, end) in [
        (row.created_ms, ", "),
        (row.completed_ms, ", "),
        (row.expires_ms, ")"),
    ] {
        let _ = write!(sql, "to_timestamp({ms}::float8 / 1000){end}");
    }
    sql.push_str("; COMMIT; BEGIN");
    sql
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A `bytea` literal: `E'\\x<hex>'::bytea`. The escape-string syntax reads the same whatever
/// `standard_conforming_strings` says; the server parses the hexadecimal in `bytea`'s input.
fn push_bytes(sql: &mut String, bytes: &[u8]) {
    sql.push_str(r"E'\\x");
    sql.reserve(2 * bytes.len() + 8);
    for &b in bytes {
        sql.push(char::from(HEX[usize::from(b >> 4)]));
        sql.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    sql.push_str("'::bytea");
}

/// A `text` literal with every byte as an escape, `E'\x74\x65…'`: the lexer makes it the
/// string; there is no function call for the server to resolve.
fn push_text(sql: &mut String, text: &str) {
    sql.push_str("E'");
    sql.reserve(4 * text.len() + 1);
    for &b in text.as_bytes() {
        sql.push_str(r"\x");
        sql.push(char::from(HEX[usize::from(b >> 4)]));
        sql.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    sql.push('\'');
}

/// The key table's primary key refused the row (and not, say, a deferred unique constraint
/// of the application's refusing the `COMMIT`).
fn is_unique_violation(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|e| {
        e.code().is_some_and(|code| code == "23505")
            && e.constraint() == Some("idempotency_keys_pkey")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(scope: &str, operation: &str, key: &str) -> i64 {
        lock_id(
            "public",
            KeyRef {
                scope,
                operation,
                key,
            },
        )
    }

    #[test]
    fn lock_ids_are_stable_across_versions() {
        // Processes of different versions share a database during a rolling deploy: they
        // must lock the same key with the same id. Changing this value is a breaking change.
        assert_eq!(
            id("tenant:t1", "create_order:v1", "k-1"),
            LOCK_ID_TENANT_T1_K1
        );
    }

    #[test]
    fn lock_ids_keep_the_parts_apart() {
        assert_ne!(id("ab", "c", "d"), id("a", "bc", "d"));
        assert_ne!(id("a", "b", "cd"), id("a", "bc", "d"));
        assert_ne!(id("global", "op:v1", "k"), id("global", "op:v2", "k"));
        let key = KeyRef {
            scope: "global",
            operation: "op:v1",
            key: "k",
        };
        assert_ne!(lock_id("public", key), lock_id("shop", key));
    }

    // Computed independently: SHA-256 over the length-prefixed parts, first 8 bytes LE.
    #[test]
    fn the_merged_statement_holds_request_values_only_as_hex() {
        let record = Record {
            status: 201,
            headers: http::HeaderMap::new(),
            body: bytes::Bytes::from_static(b"{\"a\":\"'; DROP TABLE x; --\"}"),
        };
        let row = NewRow {
            key: KeyRef {
                scope: "tenant:o'brien",
                operation: "op:v1",
                key: "k'); COMMIT; --",
            },
            fingerprint: &[0x00, 0xff, 0x10],
            record: &record,
            headers_json: r#"[["location","/x?a='b'"]]"#,
            created_ms: 1_000,
            completed_ms: 2_000,
            expires_ms: 3_000,
            replace_expired: false,
        };
        let sql = store_and_commit_statement(&row);
        assert!(sql.ends_with("; COMMIT; BEGIN"), "{sql}");
        // Every quote in the statement opens or closes a literal of hexadecimal escapes or
        // a fixed word: `\xHH…` (text), `\\x<hex>` (bytea), `completed`.
        let quoted: Vec<&str> = sql.split('\'').skip(1).step_by(2).collect();
        assert_eq!(quoted.len(), 7, "{sql}");
        for literal in &quoted {
            let text = literal.len() % 4 == 0
                && literal.as_bytes().chunks(4).all(|c| {
                    c[0] == b'\\' && c[1] == b'x' && c[2..].iter().all(u8::is_ascii_hexdigit)
                });
            let bytea = literal
                .strip_prefix("\\\\x")
                .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(text || bytea || *literal == "completed", "{literal}");
        }
        assert!(sql.contains(r"E'\\x00ff10'::bytea"), "{sql}");
        assert!(sql.contains("to_timestamp(3000::float8 / 1000))"), "{sql}");
        // The key, byte for byte.
        let key_escaped: String = "k'); COMMIT; --"
            .bytes()
            .map(|b| format!("\\x{b:02x}"))
            .collect();
        assert!(sql.contains(&format!("E'{key_escaped}'")), "{sql}");
    }

    const LOCK_ID_TENANT_T1_K1: i64 = 3_618_639_434_383_866_314;
}
