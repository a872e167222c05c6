//! SQLite: the embedded default, for one process.
//!
//! Timestamps are UTC text `YYYY-MM-DD HH:MM:SS.SSS`, the format of SQLite's own date
//! functions. Transactions that write start with `BEGIN IMMEDIATE`: an execution holds the
//! write lock, and with it its key, from its first statement on; lock waits are bounded by
//! `busy_timeout`. SQLite needs no `FOR UPDATE`: `BEGIN IMMEDIATE` holds the database.

use std::str::FromStr;

use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};
use sqlx::{ConnectOptions as _, Sqlite, Transaction};

use crate::backend::{Backend, look_again};
use crate::glue::{Glue as _, prefix_pattern};
use crate::migration::{Migration, migration};
use crate::protocol::{Begun, Failure, KeyLock, TxSettings};
use crate::sql::{Claim, Sql};

/// The migrations of the key table on SQLite. Each `present` query fails (an unknown
/// column or table) or finds no row until its migration is applied.
static MIGRATIONS: [Migration; 7] = [
    migration!(1, "sqlite/0001_idempotency_keys.sql", "idempotency_keys",
        present: "SELECT count(expires_at) FROM idempotency_keys WHERE 1 = 0"),
    migration!(2, "sqlite/0002_staged.sql", "staged mode and the audit trail",
        present: "SELECT count(k.request) + count(a.reason) FROM idempotency_keys k, \
                  idempotency_audit a WHERE 1 = 0"),
    migration!(3, "sqlite/0003_outbox.sql", "idempotency_outbox",
        present: "SELECT count(delivered_at) FROM idempotency_outbox WHERE 1 = 0"),
    migration!(4, "sqlite/0004_operations.sql", "idempotency_operations",
        present: "SELECT count(lease_ms) FROM idempotency_operations WHERE 1 = 0"),
    migration!(5, "sqlite/0005_processing.sql", "idempotency_processing",
        present: "SELECT 1 FROM sqlite_master WHERE type = 'trigger' \
                  AND name = 'idempotency_processing_deleted' \
                  AND EXISTS (SELECT count(*) FROM idempotency_processing WHERE 1 = 0)"),
    migration!(6, "sqlite/0006_operation_docs.sql", "the documents of registered operations",
        present: "SELECT count(doc) FROM idempotency_operations WHERE 1 = 0"),
    migration!(8, "sqlite/0008_audit_forced.sql", "forced operator actions in the audit trail",
        present: "SELECT count(forced) FROM idempotency_audit WHERE 1 = 0"),
];

/// Every statement SQLite is sent ([`Sql`] says what each does).
const SQL: Sql = Sql {
    lookup: "\
        SELECT fingerprint, status, response_status, response_headers, response_body, (CASE WHEN \
        CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(expires_at AS REAL) * 1000 \
        AS INTEGER) ELSE CAST(round((julianday(expires_at) - 2440587.5) * 86400000.0) AS INTEGER) \
        END), (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB '*[^0-9.]*' THEN \
        CAST(CAST(locked_until AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS INTEGER) END), attempt \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    expires_at: "\
        SELECT (CASE WHEN CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(expires_at \
        AS REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(expires_at) - 2440587.5) * \
        86400000.0) AS INTEGER) END) \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    insert_completed: "\
        INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
        response_status, response_headers, response_body, created_at, completed_at, expires_at) \
        VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, strftime('%Y-%m-%d %H:%M:%f', ($8) / \
        1000.0, 'unixepoch'), strftime('%Y-%m-%d %H:%M:%f', ($9) / 1000.0, 'unixepoch'), \
        strftime('%Y-%m-%d %H:%M:%f', ($10) / 1000.0, 'unixepoch')) \
        ON CONFLICT (scope, operation, idempotency_key) DO NOTHING",
    insert_completed_or_replace_expired: "\
        INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
        response_status, response_headers, response_body, created_at, completed_at, expires_at) \
        VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, strftime('%Y-%m-%d %H:%M:%f', ($8) / \
        1000.0, 'unixepoch'), strftime('%Y-%m-%d %H:%M:%f', ($9) / 1000.0, 'unixepoch'), \
        strftime('%Y-%m-%d %H:%M:%f', ($10) / 1000.0, 'unixepoch')) \
        ON CONFLICT (scope, operation, idempotency_key) DO \
        UPDATE SET fingerprint = excluded.fingerprint, status = 'completed', response_status = \
        excluded.response_status, response_headers = excluded.response_headers, response_body = \
        excluded.response_body, created_at = excluded.created_at, completed_at = \
        excluded.completed_at, expires_at = excluded.expires_at \
        WHERE idempotency_keys.status = 'completed' AND (CASE WHEN \
        CAST(idempotency_keys.expires_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN \
        CAST(CAST(idempotency_keys.expires_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(idempotency_keys.expires_at) - 2440587.5) * 86400000.0) AS INTEGER) \
        END) <= $8",
    get: "\
        SELECT scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB '*[^0-9.]*' \
        THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(completed_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(completed_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(completed_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END), (CASE WHEN CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN \
        CAST(CAST(expires_at AS REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(expires_at) - \
        2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(locked_until AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS INTEGER) END), attempt, \
        recovery_point \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    get_for_update: "\
        SELECT scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB '*[^0-9.]*' \
        THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(completed_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(completed_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(completed_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END), (CASE WHEN CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN \
        CAST(CAST(expires_at AS REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(expires_at) - \
        2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(locked_until AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS INTEGER) END), attempt, \
        recovery_point \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    list: "\
        SELECT scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB '*[^0-9.]*' \
        THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(completed_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(completed_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(completed_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END), (CASE WHEN CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN \
        CAST(CAST(expires_at AS REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(expires_at) - \
        2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(locked_until AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS INTEGER) END), attempt, \
        recovery_point \
        FROM idempotency_keys WHERE 1 = 1",
    list_completed: " \
        AND status = 'completed' AND (CASE WHEN CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' \
        THEN CAST(CAST(expires_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(expires_at) - 2440587.5) * 86400000.0) AS INTEGER) END) > $1",
    list_expired: " \
        AND status = 'completed' AND (CASE WHEN CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' \
        THEN CAST(CAST(expires_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(expires_at) - 2440587.5) * 86400000.0) AS INTEGER) END) <= $1",
    list_processing: " \
        AND (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM \
        idempotency_processing) AND status = 'processing' AND (locked_until IS NULL OR (CASE WHEN \
        CAST(locked_until AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(locked_until AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS \
        INTEGER) END) > $1)",
    list_stuck: " \
        AND (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM \
        idempotency_processing) AND status = 'processing' AND (CASE WHEN CAST(locked_until AS \
        TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(locked_until AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS INTEGER) END) <= $1",
    expire: "\
        UPDATE idempotency_keys SET expires_at = strftime('%Y-%m-%d %H:%M:%f', ($1) / 1000.0, \
        'unixepoch') \
        WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND (CASE WHEN \
        CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(expires_at AS REAL) * 1000 \
        AS INTEGER) ELSE CAST(round((julianday(expires_at) - 2440587.5) * 86400000.0) AS INTEGER) \
        END) > $5 \
        RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB '*[^0-9.]*' \
        THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(completed_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(completed_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(completed_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END), (CASE WHEN CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN \
        CAST(CAST(expires_at AS REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(expires_at) - \
        2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(locked_until AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS INTEGER) END), attempt, \
        recovery_point",
    delete: "\
        DELETE FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 \
        RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB '*[^0-9.]*' \
        THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(completed_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(completed_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(completed_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END), (CASE WHEN CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN \
        CAST(CAST(expires_at AS REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(expires_at) - \
        2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(locked_until AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS INTEGER) END), attempt, \
        recovery_point",
    sweep: "\
        DELETE FROM idempotency_keys WHERE (scope, operation, idempotency_key) IN (SELECT scope, \
        operation, idempotency_key FROM idempotency_keys WHERE status = 'completed' AND \
        expires_at <= strftime('%Y-%m-%d %H:%M:%f', ($1) / 1000.0, 'unixepoch') LIMIT $2)",
    count_sweepable: "\
        SELECT count(*) FROM idempotency_keys \
        WHERE status = 'completed' AND expires_at <= strftime('%Y-%m-%d %H:%M:%f', ($1) / 1000.0, \
        'unixepoch')",
    counts: "\
        SELECT operation, CASE WHEN status = 'completed' AND (CASE WHEN CAST(expires_at AS TEXT) \
        NOT GLOB '*[^0-9.]*' THEN CAST(CAST(expires_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(expires_at) - 2440587.5) * 86400000.0) AS INTEGER) END) <= $1 THEN \
        'expired' WHEN status = 'processing' AND (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(locked_until AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS INTEGER) END) <= $2 \
        THEN 'stuck' ELSE status END AS state, count(*), (CASE WHEN CAST(min(created_at) AS TEXT) \
        NOT GLOB '*[^0-9.]*' THEN CAST(CAST(min(created_at) AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(min(created_at)) - 2440587.5) * 86400000.0) AS INTEGER) END) \
        FROM idempotency_keys GROUP BY 1, 2",
    release: "\
        UPDATE idempotency_keys SET attempt = attempt + 1, locked_until = strftime('%Y-%m-%d \
        %H:%M:%f', ($1) / 1000.0, 'unixepoch') \
        WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 \
        RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB '*[^0-9.]*' \
        THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(completed_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(completed_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(completed_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END), (CASE WHEN CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN \
        CAST(CAST(expires_at AS REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(expires_at) - \
        2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(locked_until AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS INTEGER) END), attempt, \
        recovery_point",
    complete: "\
        UPDATE idempotency_keys SET status = 'completed', response_status = $1, response_headers \
        = $2, response_body = $3, completed_at = strftime('%Y-%m-%d %H:%M:%f', ($4) / 1000.0, \
        'unixepoch'), expires_at = strftime('%Y-%m-%d %H:%M:%f', ($5 + COALESCE((SELECT ttl_ms \
        FROM idempotency_operations WHERE operation = $6), max((CASE WHEN CAST(expires_at AS \
        TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(expires_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(expires_at) - 2440587.5) * 86400000.0) AS INTEGER) END) - (CASE \
        WHEN CAST(created_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(created_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END), 0))) / 1000.0, 'unixepoch'), locked_until = NULL, attempt = attempt + 1 \
        WHERE scope = $7 AND operation = $8 AND idempotency_key = $9 \
        RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB '*[^0-9.]*' \
        THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(completed_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(completed_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(completed_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END), (CASE WHEN CAST(expires_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN \
        CAST(CAST(expires_at AS REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(expires_at) - \
        2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(locked_until AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS INTEGER) END), attempt, \
        recovery_point",
    delete_only: "\
        DELETE FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    insert_audit: "\
        INSERT INTO idempotency_audit (at, operator, scope, operation, idempotency_key, action, \
        reason, \"before\", \"after\", forced) \
        VALUES (strftime('%Y-%m-%d %H:%M:%f', ($1) / 1000.0, 'unixepoch'), $2, $3, $4, $5, $6, \
        $7, $8, $9, $10) \
        RETURNING id",
    audit: "\
        SELECT id, (CASE WHEN CAST(at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(at) - 2440587.5) * 86400000.0) AS INTEGER) \
        END), operator, scope, operation, idempotency_key, action, reason, \"before\", \"after\", \
        forced \
        FROM idempotency_audit WHERE 1 = 1",
    journal: "\
        SELECT recovery_point, journal, request \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    register: "\
        INSERT INTO idempotency_operations (operation, scope, ttl_ms, mode, lease_ms, doc, \
        registered_at) \
        VALUES ($1, $2, $3, $4, $5, $6, strftime('%Y-%m-%d %H:%M:%f', ($7) / 1000.0, \
        'unixepoch')) \
        ON CONFLICT (operation) DO UPDATE \
        SET scope = excluded.scope, ttl_ms = excluded.ttl_ms, mode = excluded.mode, lease_ms = \
        excluded.lease_ms, doc = excluded.doc, registered_at = excluded.registered_at",
    registrations: "\
        SELECT operation, scope, ttl_ms, mode, lease_ms, doc, (CASE WHEN CAST(registered_at AS \
        TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(registered_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(registered_at) - 2440587.5) * 86400000.0) AS INTEGER) END) \
        FROM idempotency_operations ORDER BY operation",
    reserve: "\
        INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
        request, created_at, expires_at, locked_until, attempt) \
        VALUES ($1, $2, $3, $4, 'processing', $5, strftime('%Y-%m-%d %H:%M:%f', ($6) / 1000.0, \
        'unixepoch'), strftime('%Y-%m-%d %H:%M:%f', ($7) / 1000.0, 'unixepoch'), \
        strftime('%Y-%m-%d %H:%M:%f', ($8) / 1000.0, 'unixepoch'), 1) \
        ON CONFLICT (scope, operation, idempotency_key) DO NOTHING",
    reserve_or_replace_expired: "\
        INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
        request, created_at, expires_at, locked_until, attempt) \
        VALUES ($1, $2, $3, $4, 'processing', $5, strftime('%Y-%m-%d %H:%M:%f', ($6) / 1000.0, \
        'unixepoch'), strftime('%Y-%m-%d %H:%M:%f', ($7) / 1000.0, 'unixepoch'), \
        strftime('%Y-%m-%d %H:%M:%f', ($8) / 1000.0, 'unixepoch'), 1) \
        ON CONFLICT (scope, operation, idempotency_key) DO \
        UPDATE SET fingerprint = excluded.fingerprint, status = 'processing', request = \
        excluded.request, created_at = excluded.created_at, expires_at = excluded.expires_at, \
        locked_until = excluded.locked_until, attempt = idempotency_keys.attempt + 1, journal = \
        NULL, recovery_point = NULL, response_status = NULL, response_headers = NULL, \
        response_body = NULL, completed_at = NULL \
        WHERE idempotency_keys.status = 'completed' AND idempotency_keys.expires_at <= \
        excluded.created_at",
    reserve_held: None,
    hold: None,
    let_go: None,
    owner_gone: None,
    clear_expired: None,
    reopen_expired: None,
    sweep_locks: None,
    lease_of: "\
        SELECT attempt, journal, request, fingerprint \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    take_over: "\
        UPDATE idempotency_keys SET attempt = attempt + 1, locked_until = strftime('%Y-%m-%d \
        %H:%M:%f', ($1) / 1000.0, 'unixepoch') \
        WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND status = 'processing' \
        AND attempt = $5 AND (locked_until IS NULL OR locked_until <= strftime('%Y-%m-%d \
        %H:%M:%f', ($6) / 1000.0, 'unixepoch')) \
        RETURNING attempt, journal, request, fingerprint",
    renew: "\
        UPDATE idempotency_keys SET locked_until = strftime('%Y-%m-%d %H:%M:%f', ($1) / 1000.0, \
        'unixepoch') \
        WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND status = 'processing' \
        AND attempt = $5",
    step: "\
        UPDATE idempotency_keys SET recovery_point = $1, journal = $2, locked_until = \
        strftime('%Y-%m-%d %H:%M:%f', ($3) / 1000.0, 'unixepoch') \
        WHERE scope = $4 AND operation = $5 AND idempotency_key = $6 AND status = 'processing' \
        AND attempt = $7",
    finish: "\
        UPDATE idempotency_keys SET status = 'completed', response_status = $1, response_headers \
        = $2, response_body = $3, completed_at = strftime('%Y-%m-%d %H:%M:%f', ($4) / 1000.0, \
        'unixepoch'), expires_at = strftime('%Y-%m-%d %H:%M:%f', ($5) / 1000.0, 'unixepoch'), \
        locked_until = NULL \
        WHERE scope = $6 AND operation = $7 AND idempotency_key = $8 AND status = 'processing' \
        AND attempt = $9",
    give_back: "\
        UPDATE idempotency_keys SET locked_until = strftime('%Y-%m-%d %H:%M:%f', ($1) / 1000.0, \
        'unixepoch') \
        WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND status = 'processing' \
        AND attempt = $5",
    stuck: "\
        SELECT scope, operation, idempotency_key, attempt \
        FROM idempotency_keys WHERE (scope, operation, idempotency_key) IN (SELECT scope, \
        operation, idempotency_key FROM idempotency_processing WHERE operation = $1) AND status = \
        'processing' AND operation = $2 AND locked_until <= strftime('%Y-%m-%d %H:%M:%f', ($3) / \
        1000.0, 'unixepoch') \
        ORDER BY locked_until LIMIT $4",
    enqueue: "\
        INSERT INTO idempotency_outbox (dedup_id, topic, payload, status, attempts, \
        next_attempt_at, created_at) \
        VALUES ($1, $2, $3, 'pending', 0, strftime('%Y-%m-%d %H:%M:%f', ($4) / 1000.0, \
        'unixepoch'), strftime('%Y-%m-%d %H:%M:%f', ($5) / 1000.0, 'unixepoch')) \
        ON CONFLICT (dedup_id) DO NOTHING",
    claim: Claim::Returning(
        "\
        UPDATE idempotency_outbox SET locked_until = strftime('%Y-%m-%d %H:%M:%f', ($2) / 1000.0, \
        'unixepoch') \
        WHERE id IN (SELECT id FROM idempotency_outbox WHERE status = 'pending' AND \
        next_attempt_at <= strftime('%Y-%m-%d %H:%M:%f', ($1) / 1000.0, 'unixepoch') AND \
        (locked_until IS NULL OR locked_until <= strftime('%Y-%m-%d %H:%M:%f', ($1) / 1000.0, \
        'unixepoch')) ORDER BY id LIMIT $3) \
        RETURNING id, dedup_id, topic, payload, status, attempts, (CASE WHEN CAST(next_attempt_at \
        AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(next_attempt_at AS REAL) * 1000 AS INTEGER) \
        ELSE CAST(round((julianday(next_attempt_at) - 2440587.5) * 86400000.0) AS INTEGER) END), \
        (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(locked_until AS \
        REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(locked_until) - 2440587.5) * \
        86400000.0) AS INTEGER) END), last_error, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(delivered_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(delivered_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(delivered_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END)",
    ),
    mark_delivered: "\
        UPDATE idempotency_outbox SET status = 'delivered', delivered_at = strftime('%Y-%m-%d \
        %H:%M:%f', ($1) / 1000.0, 'unixepoch'), locked_until = NULL \
        WHERE id = $2 AND status = 'pending'",
    mark_failed: "\
        UPDATE idempotency_outbox SET attempts = attempts + 1, last_error = $1, status = CASE \
        WHEN $2 THEN 'dead' ELSE 'pending' END, next_attempt_at = strftime('%Y-%m-%d %H:%M:%f', \
        (CASE WHEN $3 THEN $4 ELSE $5 END) / 1000.0, 'unixepoch'), locked_until = NULL \
        WHERE id = $6 AND status = 'pending'",
    outbox_get: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (CASE WHEN CAST(next_attempt_at AS \
        TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(next_attempt_at AS REAL) * 1000 AS INTEGER) \
        ELSE CAST(round((julianday(next_attempt_at) - 2440587.5) * 86400000.0) AS INTEGER) END), \
        (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(locked_until AS \
        REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(locked_until) - 2440587.5) * \
        86400000.0) AS INTEGER) END), last_error, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(delivered_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(delivered_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(delivered_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END) \
        FROM idempotency_outbox WHERE dedup_id = $1",
    outbox_find: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (CASE WHEN CAST(next_attempt_at AS \
        TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(next_attempt_at AS REAL) * 1000 AS INTEGER) \
        ELSE CAST(round((julianday(next_attempt_at) - 2440587.5) * 86400000.0) AS INTEGER) END), \
        (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(locked_until AS \
        REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(locked_until) - 2440587.5) * \
        86400000.0) AS INTEGER) END), last_error, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(delivered_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(delivered_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(delivered_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END) \
        FROM idempotency_outbox WHERE id = $1",
    outbox_find_for_update: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (CASE WHEN CAST(next_attempt_at AS \
        TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(next_attempt_at AS REAL) * 1000 AS INTEGER) \
        ELSE CAST(round((julianday(next_attempt_at) - 2440587.5) * 86400000.0) AS INTEGER) END), \
        (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(locked_until AS \
        REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(locked_until) - 2440587.5) * \
        86400000.0) AS INTEGER) END), last_error, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(delivered_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(delivered_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(delivered_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END) \
        FROM idempotency_outbox WHERE id = $1",
    outbox_list: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (CASE WHEN CAST(next_attempt_at AS \
        TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(next_attempt_at AS REAL) * 1000 AS INTEGER) \
        ELSE CAST(round((julianday(next_attempt_at) - 2440587.5) * 86400000.0) AS INTEGER) END), \
        (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(locked_until AS \
        REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(locked_until) - 2440587.5) * \
        86400000.0) AS INTEGER) END), last_error, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(delivered_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(delivered_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(delivered_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END) \
        FROM idempotency_outbox ORDER BY id LIMIT $1",
    outbox_list_status: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (CASE WHEN CAST(next_attempt_at AS \
        TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(next_attempt_at AS REAL) * 1000 AS INTEGER) \
        ELSE CAST(round((julianday(next_attempt_at) - 2440587.5) * 86400000.0) AS INTEGER) END), \
        (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(locked_until AS \
        REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(locked_until) - 2440587.5) * \
        86400000.0) AS INTEGER) END), last_error, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(created_at) - 2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN \
        CAST(delivered_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(delivered_at AS REAL) * \
        1000 AS INTEGER) ELSE CAST(round((julianday(delivered_at) - 2440587.5) * 86400000.0) AS \
        INTEGER) END) \
        FROM idempotency_outbox WHERE status = $1 \
        ORDER BY id LIMIT $2",
    outbox_counts: "\
        SELECT status, count(*), (CASE WHEN CAST(min(created_at) AS TEXT) NOT GLOB '*[^0-9.]*' \
        THEN CAST(CAST(min(created_at) AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(min(created_at)) - 2440587.5) * 86400000.0) AS INTEGER) END), \
        count(CASE WHEN locked_until > strftime('%Y-%m-%d %H:%M:%f', ($1) / 1000.0, 'unixepoch') \
        THEN 1 END) \
        FROM idempotency_outbox GROUP BY status",
    outbox_retry: "\
        UPDATE idempotency_outbox SET status = 'pending', attempts = $1, next_attempt_at = \
        strftime('%Y-%m-%d %H:%M:%f', ($2) / 1000.0, 'unixepoch'), locked_until = NULL \
        WHERE id = $3 RETURNING id, dedup_id, topic, payload, status, attempts, (CASE WHEN \
        CAST(next_attempt_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN CAST(CAST(next_attempt_at AS \
        REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(next_attempt_at) - 2440587.5) * \
        86400000.0) AS INTEGER) END), (CASE WHEN CAST(locked_until AS TEXT) NOT GLOB '*[^0-9.]*' \
        THEN CAST(CAST(locked_until AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(locked_until) - 2440587.5) * 86400000.0) AS INTEGER) END), \
        last_error, (CASE WHEN CAST(created_at AS TEXT) NOT GLOB '*[^0-9.]*' THEN \
        CAST(CAST(created_at AS REAL) * 1000 AS INTEGER) ELSE CAST(round((julianday(created_at) - \
        2440587.5) * 86400000.0) AS INTEGER) END), (CASE WHEN CAST(delivered_at AS TEXT) NOT GLOB \
        '*[^0-9.]*' THEN CAST(CAST(delivered_at AS REAL) * 1000 AS INTEGER) ELSE \
        CAST(round((julianday(delivered_at) - 2440587.5) * 86400000.0) AS INTEGER) END)",
    outbox_retryable: "\
        SELECT id FROM idempotency_outbox \
        WHERE id > $1 AND (status = 'dead' OR (status = 'pending' AND next_attempt_at > \
        strftime('%Y-%m-%d %H:%M:%f', ($2) / 1000.0, 'unixepoch') AND (locked_until IS NULL OR \
        locked_until <= strftime('%Y-%m-%d %H:%M:%f', ($3) / 1000.0, 'unixepoch')))) \
        ORDER BY id LIMIT $4",
    sweep_delivered: "\
        DELETE FROM idempotency_outbox WHERE id IN (SELECT id FROM idempotency_outbox WHERE \
        status = 'delivered' AND delivered_at <= strftime('%Y-%m-%d %H:%M:%f', ($1) / 1000.0, \
        'unixepoch') LIMIT $2)",
    applied_one: "SELECT checksum FROM idem_schema_migrations WHERE version = $1",
    record: "\
        INSERT INTO idem_schema_migrations (version, description, checksum) \
        VALUES ($1, $2, $3)",
    forget_sqlx_version: "DELETE FROM _sqlx_migrations WHERE version = $1",
};

impl Backend for Sqlite {
    fn migrations() -> &'static [Migration] {
        &MIGRATIONS
    }
    const SQL: Sql = SQL;
    const HISTORY: &'static str = "CREATE TABLE IF NOT EXISTS idem_schema_migrations (\
         version     BIGINT PRIMARY KEY, \
         description TEXT   NOT NULL, \
         checksum    BLOB   NOT NULL, \
         applied_at  TEXT   NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')))";
    const HAS_SQLX_HISTORY: &'static str = "SELECT EXISTS (SELECT 1 FROM sqlite_master \
         WHERE type = 'table' AND name = '_sqlx_migrations')";
    // The write lock, taken at `BEGIN` rather than at the first write: another process's
    // migration or operator action waits here, then sees what it did.
    const BEGIN_WRITE: Option<&'static str> = Some("BEGIN IMMEDIATE");

    /// `GLOB`, not `LIKE`: SQLite's `LIKE` ignores ASCII case.
    fn key_prefix(prefix: &str) -> (&'static str, &'static str, String) {
        (" AND idempotency_key GLOB ", "", glob_prefix(prefix))
    }

    fn connect_options(
        url: &str,
        settings: &TxSettings,
    ) -> Result<SqliteConnectOptions, sqlx::Error> {
        Ok(SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(settings.lock_timeout)
            // idem's statements carry keys, tenants and response bodies: never logged.
            .disable_statement_logging())
    }

    async fn namespace(_conn: &mut SqliteConnection) -> Result<String, sqlx::Error> {
        // One database file, one key table, one write lock: nothing to tell apart.
        Ok(String::new())
    }

    async fn begin<'c>(
        conn: &'c mut SqliteConnection,
        _settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> Result<Begun<'c, Self>, sqlx::Error> {
        // The write lock, taken now rather than at the first write: it is the key's lock.
        let tx = Transaction::begin(conn, Self::BEGIN_WRITE.map(Into::into)).await?;
        let Some(lock) = lock else {
            return Ok(Begun::Free(tx));
        };
        // Look again, under the lock: in-process, no round trip.
        look_again(tx, lock).await
    }

    fn begin_statement(_settings: &TxSettings) -> String {
        // The connection's `busy_timeout` bounds the transaction's waits.
        "BEGIN".to_owned()
    }

    fn classify(error: &sqlx::Error) -> Failure {
        if crate::protocol::is_connection_error(error) {
            return Failure::Disconnected;
        }
        let Some(db) = error.as_database_error() else {
            return Failure::Other;
        };
        // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
        let busy = db
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .is_some_and(|c| matches!(c & 0xff, 5 | 6));
        if busy || db.message().contains("database is locked") {
            Failure::LockTimeout
        } else {
            Failure::Other
        }
    }

    /// The pages of the table and its indexes, where SQLite was built with `dbstat`.
    async fn table_bytes(conn: &mut SqliteConnection) -> Result<Option<i64>, sqlx::Error> {
        let sql = "SELECT sum(pgsize) FROM dbstat WHERE name IN \
                   (SELECT name FROM sqlite_master WHERE tbl_name = 'idempotency_keys')";
        match Self::fetch_optional(conn, sql, &[]).await {
            Ok(row) => Ok(row.map(|row| Self::opt_int(&row, 0)).transpose()?.flatten()),
            Err(sqlx::Error::Database(e)) if e.message().contains("no such table") => Ok(None),
            Err(error) => Err(error),
        }
    }
}

/// A `GLOB` pattern for keys starting with `prefix`: its wildcards (`*`, `?`, `[`) each in a
/// bracket of their own.
fn glob_prefix(prefix: &str) -> String {
    prefix_pattern(prefix, '*', |c, pattern| {
        if matches!(c, '*' | '?' | '[') {
            pattern.extend(['[', c, ']']);
        } else {
            pattern.push(c);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_wildcards_literally() {
        assert_eq!(glob_prefix("a*b?c[d]%_"), "a[*]b[?]c[[]d]%_*");
        assert_eq!(glob_prefix(""), "*");
    }
}
