//! PostgreSQL: the store for several application instances sharing one database.
//!
//! Timestamps are `timestamptz`; they cross the wire as milliseconds since the epoch so that
//! the caller's clock decides what "now" is. An execution holds its key with a
//! transaction-scoped advisory lock taken in the same round trip as `BEGIN`, with the
//! transaction's own `lock_timeout` and `statement_timeout` (`SET LOCAL`, in that same round
//! trip), so that the application's queries on the pool keep their settings. Batches of the
//! sweeper and the outbox skip rows other transactions hold (`FOR UPDATE SKIP LOCKED`).

use std::fmt::Write as _;
use std::str::FromStr;

use sqlx::pool::PoolOptions;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions as _, Connection as _, Postgres, Transaction};

use crate::backend::Backend;
use crate::glue::{Arg, Glue as _, advisory_id, lock_id};
use crate::key::KeyRef;
use crate::migration::{Migration, migration};
use crate::pooler::{push_bytes, push_text};
use crate::protocol::{Begun, Failure, IDLE_PING_AFTER, KeyLock, NewRow, TxSettings};
use crate::sql::{Claim, Sql};

/// The migrations of the key table on PostgreSQL. Each `present` query fails (an unknown
/// column, table or function) or finds no row until its migration is applied.
static MIGRATIONS: [Migration; 8] = [
    migration!(1, "postgres/0001_idempotency_keys.sql", "idempotency_keys",
        present: "SELECT count(expires_at) FROM idempotency_keys WHERE 1 = 0"),
    migration!(2, "postgres/0002_staged.sql", "staged mode and the audit trail",
        present: "SELECT count(k.request) + count(a.reason) FROM idempotency_keys k, \
                  idempotency_audit a WHERE 1 = 0 HAVING to_regproc('idem_lock_key') IS NOT NULL"),
    migration!(3, "postgres/0003_outbox.sql", "idempotency_outbox",
        present: "SELECT count(delivered_at) FROM idempotency_outbox WHERE 1 = 0"),
    migration!(4, "postgres/0004_operations.sql", "idempotency_operations",
        present: "SELECT count(lease_ms) FROM idempotency_operations WHERE 1 = 0"),
    migration!(5, "postgres/0005_processing.sql", "idempotency_processing",
        present: "SELECT 1 FROM pg_trigger WHERE tgrelid = 'idempotency_keys'::regclass \
                  AND tgname = 'idempotency_processing_deleted' \
                  AND EXISTS (SELECT count(*) FROM idempotency_processing WHERE 1 = 0)"),
    migration!(6, "postgres/0006_operation_docs.sql", "the documents of registered operations",
        present: "SELECT count(doc) FROM idempotency_operations WHERE 1 = 0"),
    migration!(7, "postgres/0007_lock_key_fast_path.sql",
        "the key's lock without a second query when it is free",
        present: "SELECT 1 FROM pg_proc WHERE oid = to_regproc('idem_lock_key') \
                  AND prosrc LIKE '%pg_try_advisory_xact_lock%'"),
    migration!(8, "postgres/0008_audit_forced.sql", "forced operator actions in the audit trail",
        present: "SELECT count(forced) FROM idempotency_audit WHERE 1 = 0"),
];

/// Every statement PostgreSQL is sent ([`Sql`] says what each does).
const SQL: Sql = Sql {
    lookup: "\
        SELECT fingerprint, status, response_status, response_headers, response_body, \
        (extract(epoch FROM expires_at) * 1000)::int8, (extract(epoch FROM locked_until) * \
        1000)::int8, attempt \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    expires_at: "\
        SELECT (extract(epoch FROM expires_at) * 1000)::int8 \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    insert_completed: "\
        INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
        response_status, response_headers, response_body, created_at, completed_at, expires_at) \
        VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, to_timestamp(($8)::float8 / 1000), \
        to_timestamp(($9)::float8 / 1000), to_timestamp(($10)::float8 / 1000)) \
        ON CONFLICT (scope, operation, idempotency_key) DO NOTHING",
    insert_completed_or_replace_expired: "\
        INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
        response_status, response_headers, response_body, created_at, completed_at, expires_at) \
        VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, to_timestamp(($8)::float8 / 1000), \
        to_timestamp(($9)::float8 / 1000), to_timestamp(($10)::float8 / 1000)) \
        ON CONFLICT (scope, operation, idempotency_key) DO \
        UPDATE SET fingerprint = excluded.fingerprint, status = 'completed', response_status = \
        excluded.response_status, response_headers = excluded.response_headers, response_body = \
        excluded.response_body, created_at = excluded.created_at, completed_at = \
        excluded.completed_at, expires_at = excluded.expires_at \
        WHERE idempotency_keys.status = 'completed' AND idempotency_keys.expires_at <= \
        to_timestamp(($8)::float8 / 1000)",
    get: "\
        SELECT scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (extract(epoch FROM created_at) * 1000)::int8, \
        (extract(epoch FROM completed_at) * 1000)::int8, (extract(epoch FROM expires_at) * \
        1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, attempt, recovery_point \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    get_for_update: "\
        SELECT scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (extract(epoch FROM created_at) * 1000)::int8, \
        (extract(epoch FROM completed_at) * 1000)::int8, (extract(epoch FROM expires_at) * \
        1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, attempt, recovery_point \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 FOR \
        UPDATE",
    list: "\
        SELECT scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (extract(epoch FROM created_at) * 1000)::int8, \
        (extract(epoch FROM completed_at) * 1000)::int8, (extract(epoch FROM expires_at) * \
        1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, attempt, recovery_point \
        FROM idempotency_keys WHERE 1 = 1",
    list_completed: " \
        AND status = 'completed' AND expires_at > to_timestamp(($1)::float8 / 1000)",
    list_expired: " AND status = 'completed' AND expires_at <= to_timestamp(($1)::float8 / 1000)",
    list_processing: " \
        AND (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM \
        idempotency_processing) AND status = 'processing' AND (locked_until IS NULL OR \
        locked_until > to_timestamp(($1)::float8 / 1000))",
    list_stuck: " \
        AND (scope, operation, idempotency_key) IN (SELECT scope, operation, idempotency_key FROM \
        idempotency_processing) AND status = 'processing' AND locked_until <= \
        to_timestamp(($1)::float8 / 1000)",
    expire: "\
        UPDATE idempotency_keys SET expires_at = to_timestamp(($1)::float8 / 1000) \
        WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND (extract(epoch FROM \
        expires_at) * 1000)::int8 > $5 \
        RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (extract(epoch FROM created_at) * 1000)::int8, \
        (extract(epoch FROM completed_at) * 1000)::int8, (extract(epoch FROM expires_at) * \
        1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, attempt, recovery_point",
    delete: "\
        DELETE FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 \
        RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (extract(epoch FROM created_at) * 1000)::int8, \
        (extract(epoch FROM completed_at) * 1000)::int8, (extract(epoch FROM expires_at) * \
        1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, attempt, recovery_point",
    // Small batches, skipping rows a running request holds: no long locks.
    sweep: "\
        DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(SELECT ctid FROM idempotency_keys \
        WHERE status = 'completed' AND expires_at <= to_timestamp(($1)::float8 / 1000) LIMIT $2 \
        FOR UPDATE SKIP LOCKED))",
    count_sweepable: "\
        SELECT count(*) FROM idempotency_keys \
        WHERE status = 'completed' AND expires_at <= to_timestamp(($1)::float8 / 1000)",
    counts: "\
        SELECT operation, CASE WHEN status = 'completed' AND expires_at <= \
        to_timestamp(($1)::float8 / 1000) THEN 'expired' WHEN status = 'processing' AND \
        locked_until <= to_timestamp(($2)::float8 / 1000) THEN 'stuck' ELSE status END AS state, \
        count(*), (extract(epoch FROM min(created_at)) * 1000)::int8 \
        FROM idempotency_keys GROUP BY 1, 2",
    release: "\
        UPDATE idempotency_keys SET attempt = attempt + 1, locked_until = \
        to_timestamp(($1)::float8 / 1000) \
        WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 \
        RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (extract(epoch FROM created_at) * 1000)::int8, \
        (extract(epoch FROM completed_at) * 1000)::int8, (extract(epoch FROM expires_at) * \
        1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, attempt, recovery_point",
    complete: "\
        UPDATE idempotency_keys SET status = 'completed', response_status = $1, response_headers \
        = $2, response_body = $3, completed_at = to_timestamp(($4)::float8 / 1000), expires_at = \
        to_timestamp(($5 + COALESCE((SELECT ttl_ms FROM idempotency_operations WHERE operation = \
        $6), GREATEST((extract(epoch FROM expires_at) * 1000)::int8 - (extract(epoch FROM \
        created_at) * 1000)::int8, 0)))::float8 / 1000), locked_until = NULL, attempt = attempt + \
        1 \
        WHERE scope = $7 AND operation = $8 AND idempotency_key = $9 \
        RETURNING scope, operation, idempotency_key, fingerprint, status, response_status, \
        response_headers, response_body, (extract(epoch FROM created_at) * 1000)::int8, \
        (extract(epoch FROM completed_at) * 1000)::int8, (extract(epoch FROM expires_at) * \
        1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, attempt, recovery_point",
    delete_only: "\
        DELETE FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    insert_audit: "\
        INSERT INTO idempotency_audit (at, operator, scope, operation, idempotency_key, action, \
        reason, \"before\", \"after\", forced) \
        VALUES (to_timestamp(($1)::float8 / 1000), $2, $3, $4, $5, $6, $7, $8, $9, $10) \
        RETURNING id",
    audit: "\
        SELECT id, (extract(epoch FROM at) * 1000)::int8, operator, scope, operation, \
        idempotency_key, action, reason, \"before\", \"after\", forced \
        FROM idempotency_audit WHERE 1 = 1",
    journal: "\
        SELECT recovery_point, journal, request \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    register: "\
        INSERT INTO idempotency_operations (operation, scope, ttl_ms, mode, lease_ms, doc, \
        registered_at) \
        VALUES ($1, $2, $3, $4, $5, $6, to_timestamp(($7)::float8 / 1000)) \
        ON CONFLICT (operation) DO UPDATE \
        SET scope = excluded.scope, ttl_ms = excluded.ttl_ms, mode = excluded.mode, lease_ms = \
        excluded.lease_ms, doc = excluded.doc, registered_at = excluded.registered_at",
    registrations: "\
        SELECT operation, scope, ttl_ms, mode, lease_ms, doc, (extract(epoch FROM registered_at) \
        * 1000)::int8 \
        FROM idempotency_operations ORDER BY operation",
    // With its row in `idempotency_processing` (which the key table's triggers remove once the
    // key stops processing), in one statement. One row affected: reserved.
    reserve: "\
        WITH reserved AS (INSERT INTO idempotency_keys (scope, operation, idempotency_key, \
        fingerprint, status, request, created_at, expires_at, locked_until, attempt) VALUES ($1, \
        $2, $3, $4, 'processing', $5, to_timestamp(($6)::float8 / 1000), \
        to_timestamp(($7)::float8 / 1000), to_timestamp(($8)::float8 / 1000), 1) ON CONFLICT \
        (scope, operation, idempotency_key) DO NOTHING RETURNING scope, operation, \
        idempotency_key) \
        INSERT INTO idempotency_processing (scope, operation, idempotency_key) \
        SELECT scope, operation, idempotency_key \
        FROM reserved ON CONFLICT (scope, operation, idempotency_key) DO \
        UPDATE SET scope = excluded.scope",
    reserve_or_replace_expired: "\
        WITH reserved AS (INSERT INTO idempotency_keys (scope, operation, idempotency_key, \
        fingerprint, status, request, created_at, expires_at, locked_until, attempt) VALUES ($1, \
        $2, $3, $4, 'processing', $5, to_timestamp(($6)::float8 / 1000), \
        to_timestamp(($7)::float8 / 1000), to_timestamp(($8)::float8 / 1000), 1) ON CONFLICT \
        (scope, operation, idempotency_key) DO UPDATE SET fingerprint = excluded.fingerprint, \
        status = 'processing', request = excluded.request, created_at = excluded.created_at, \
        expires_at = excluded.expires_at, locked_until = excluded.locked_until, attempt = \
        idempotency_keys.attempt + 1, journal = NULL, recovery_point = NULL, response_status = \
        NULL, response_headers = NULL, response_body = NULL, completed_at = NULL WHERE \
        idempotency_keys.status = 'completed' AND idempotency_keys.expires_at <= \
        excluded.created_at RETURNING scope, operation, idempotency_key) \
        INSERT INTO idempotency_processing (scope, operation, idempotency_key) \
        SELECT scope, operation, idempotency_key \
        FROM reserved ON CONFLICT (scope, operation, idempotency_key) DO \
        UPDATE SET scope = excluded.scope",
    // The reservation holding attempt 1 (`$9`) in the same round trip: the row is inserted only
    // if the hold is taken. Answers (held, reserved). Like `hold` and `owner_gone`, it lets go of
    // every hold the session had first: the `FROM` subquery runs before the statement's own
    // calls (its volatile call keeps it from being pulled up).
    reserve_held: Some(
        "\
        WITH held AS (SELECT pg_try_advisory_lock($9) AS ok FROM (SELECT \
        pg_advisory_unlock_all()) AS released), reserved AS (INSERT INTO idempotency_keys (scope, \
        operation, idempotency_key, fingerprint, status, request, created_at, expires_at, \
        locked_until, attempt) SELECT $1, $2, $3, $4, 'processing', $5, to_timestamp(($6)::float8 \
        / 1000), to_timestamp(($7)::float8 / 1000), to_timestamp(($8)::float8 / 1000), 1 FROM \
        held WHERE held.ok ON CONFLICT (scope, operation, idempotency_key) DO NOTHING RETURNING \
        scope, operation, idempotency_key), processing AS (INSERT INTO idempotency_processing \
        (scope, operation, idempotency_key) SELECT scope, operation, idempotency_key FROM \
        reserved ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET scope = \
        excluded.scope RETURNING 1) \
        SELECT (SELECT ok FROM held), (SELECT count(*) FROM processing)",
    ),
    // A session advisory lock, which the server lets go when the session ends.
    hold: Some(
        "\
        SELECT pg_try_advisory_lock($1) \
        FROM (SELECT pg_advisory_unlock_all()) AS released",
    ),
    let_go: Some("SELECT pg_advisory_unlock($1)"),
    // Taken and let go again if free (`CASE` fixes the order of the two calls).
    owner_gone: Some(
        "\
        SELECT CASE WHEN pg_try_advisory_lock($1) THEN pg_advisory_unlock($1) ELSE false END \
        FROM (SELECT pg_advisory_unlock_all()) AS released",
    ),
    clear_expired: None,
    reopen_expired: None,
    sweep_locks: None,
    lease_of: "\
        SELECT attempt, journal, request, fingerprint \
        FROM idempotency_keys WHERE scope = $1 AND operation = $2 AND idempotency_key = $3",
    take_over: "\
        UPDATE idempotency_keys SET attempt = attempt + 1, locked_until = \
        to_timestamp(($1)::float8 / 1000) \
        WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND status = 'processing' \
        AND attempt = $5 AND (locked_until IS NULL OR locked_until <= to_timestamp(($6)::float8 / \
        1000)) \
        RETURNING attempt, journal, request, fingerprint",
    renew: "\
        UPDATE idempotency_keys SET locked_until = to_timestamp(($1)::float8 / 1000) \
        WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND status = 'processing' \
        AND attempt = $5",
    step: "\
        UPDATE idempotency_keys SET recovery_point = $1, journal = $2, locked_until = \
        to_timestamp(($3)::float8 / 1000) \
        WHERE scope = $4 AND operation = $5 AND idempotency_key = $6 AND status = 'processing' \
        AND attempt = $7",
    finish: "\
        UPDATE idempotency_keys SET status = 'completed', response_status = $1, response_headers \
        = $2, response_body = $3, completed_at = to_timestamp(($4)::float8 / 1000), expires_at = \
        to_timestamp(($5)::float8 / 1000), locked_until = NULL \
        WHERE scope = $6 AND operation = $7 AND idempotency_key = $8 AND status = 'processing' \
        AND attempt = $9",
    give_back: "\
        UPDATE idempotency_keys SET locked_until = to_timestamp(($1)::float8 / 1000) \
        WHERE scope = $2 AND operation = $3 AND idempotency_key = $4 AND status = 'processing' \
        AND attempt = $5",
    stuck: "\
        SELECT scope, operation, idempotency_key, attempt \
        FROM idempotency_keys WHERE (scope, operation, idempotency_key) IN (SELECT scope, \
        operation, idempotency_key FROM idempotency_processing WHERE operation = $1) AND status = \
        'processing' AND operation = $2 AND locked_until <= to_timestamp(($3)::float8 / 1000) \
        ORDER BY locked_until LIMIT $4",
    enqueue: "\
        INSERT INTO idempotency_outbox (dedup_id, topic, payload, status, attempts, \
        next_attempt_at, created_at) \
        VALUES ($1, $2, $3, 'pending', 0, to_timestamp(($4)::float8 / 1000), \
        to_timestamp(($5)::float8 / 1000)) \
        ON CONFLICT (dedup_id) DO NOTHING",
    claim: Claim::Returning(
        "\
        UPDATE idempotency_outbox SET locked_until = to_timestamp(($2)::float8 / 1000) \
        WHERE id = ANY(ARRAY(SELECT id FROM idempotency_outbox WHERE status = 'pending' AND \
        next_attempt_at <= to_timestamp(($1)::float8 / 1000) AND (locked_until IS NULL OR \
        locked_until <= to_timestamp(($1)::float8 / 1000)) ORDER BY id LIMIT $3 FOR UPDATE SKIP \
        LOCKED)) \
        RETURNING id, dedup_id, topic, payload, status, attempts, (extract(epoch FROM \
        next_attempt_at) * 1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, \
        last_error, (extract(epoch FROM created_at) * 1000)::int8, (extract(epoch FROM \
        delivered_at) * 1000)::int8",
    ),
    mark_delivered: "\
        UPDATE idempotency_outbox SET status = 'delivered', delivered_at = \
        to_timestamp(($1)::float8 / 1000), locked_until = NULL \
        WHERE id = $2 AND status = 'pending'",
    mark_failed: "\
        UPDATE idempotency_outbox SET attempts = attempts + 1, last_error = $1, status = CASE \
        WHEN $2 THEN 'dead' ELSE 'pending' END, next_attempt_at = to_timestamp((CASE WHEN $3 THEN \
        $4 ELSE $5 END)::float8 / 1000), locked_until = NULL \
        WHERE id = $6 AND status = 'pending'",
    outbox_get: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (extract(epoch FROM \
        next_attempt_at) * 1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, \
        last_error, (extract(epoch FROM created_at) * 1000)::int8, (extract(epoch FROM \
        delivered_at) * 1000)::int8 \
        FROM idempotency_outbox WHERE dedup_id = $1",
    outbox_find: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (extract(epoch FROM \
        next_attempt_at) * 1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, \
        last_error, (extract(epoch FROM created_at) * 1000)::int8, (extract(epoch FROM \
        delivered_at) * 1000)::int8 \
        FROM idempotency_outbox WHERE id = $1",
    outbox_find_for_update: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (extract(epoch FROM \
        next_attempt_at) * 1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, \
        last_error, (extract(epoch FROM created_at) * 1000)::int8, (extract(epoch FROM \
        delivered_at) * 1000)::int8 \
        FROM idempotency_outbox WHERE id = $1 FOR UPDATE",
    outbox_list: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (extract(epoch FROM \
        next_attempt_at) * 1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, \
        last_error, (extract(epoch FROM created_at) * 1000)::int8, (extract(epoch FROM \
        delivered_at) * 1000)::int8 \
        FROM idempotency_outbox ORDER BY id LIMIT $1",
    outbox_list_status: "\
        SELECT id, dedup_id, topic, payload, status, attempts, (extract(epoch FROM \
        next_attempt_at) * 1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, \
        last_error, (extract(epoch FROM created_at) * 1000)::int8, (extract(epoch FROM \
        delivered_at) * 1000)::int8 \
        FROM idempotency_outbox WHERE status = $1 \
        ORDER BY id LIMIT $2",
    outbox_counts: "\
        SELECT status, count(*), (extract(epoch FROM min(created_at)) * 1000)::int8, count(CASE \
        WHEN locked_until > to_timestamp(($1)::float8 / 1000) THEN 1 END) \
        FROM idempotency_outbox GROUP BY status",
    outbox_retry: "\
        UPDATE idempotency_outbox SET status = 'pending', attempts = $1, next_attempt_at = \
        to_timestamp(($2)::float8 / 1000), locked_until = NULL \
        WHERE id = $3 RETURNING id, dedup_id, topic, payload, status, attempts, (extract(epoch \
        FROM next_attempt_at) * 1000)::int8, (extract(epoch FROM locked_until) * 1000)::int8, \
        last_error, (extract(epoch FROM created_at) * 1000)::int8, (extract(epoch FROM \
        delivered_at) * 1000)::int8",
    outbox_retryable: "\
        SELECT id FROM idempotency_outbox \
        WHERE id > $1 AND (status = 'dead' OR (status = 'pending' AND next_attempt_at > \
        to_timestamp(($2)::float8 / 1000) AND (locked_until IS NULL OR locked_until <= \
        to_timestamp(($3)::float8 / 1000)))) \
        ORDER BY id LIMIT $4",
    sweep_delivered: "\
        DELETE FROM idempotency_outbox WHERE id = ANY(ARRAY(SELECT id FROM idempotency_outbox \
        WHERE status = 'delivered' AND delivered_at <= to_timestamp(($1)::float8 / 1000) LIMIT $2 \
        FOR UPDATE SKIP LOCKED))",
    applied_one: "SELECT checksum FROM idem_schema_migrations WHERE version = $1",
    record: "\
        INSERT INTO idem_schema_migrations (version, description, checksum) \
        VALUES ($1, $2, $3)",
    forget_sqlx_version: "DELETE FROM _sqlx_migrations WHERE version = $1",
};

impl Backend for Postgres {
    fn migrations() -> &'static [Migration] {
        &MIGRATIONS
    }
    const SQL: Sql = SQL;
    const LOCK_FIRST: bool = true;
    const SESSION_ID: Option<&'static str> = Some("SELECT pg_backend_pid()::int8");
    // The lock for the transaction, with no timeouts: migrations may wait for another
    // instance's run and take longer than requests may.
    const BEGIN_MIGRATION: Option<&'static str> = Some(
        "BEGIN; SET LOCAL lock_timeout = 0; SET LOCAL statement_timeout = 0; \
         SELECT pg_advisory_xact_lock(7594306391241484647)",
    );
    const HISTORY: &'static str = "CREATE TABLE IF NOT EXISTS idem_schema_migrations (\
         version     BIGINT      PRIMARY KEY, \
         description TEXT        NOT NULL, \
         checksum    BYTEA       NOT NULL, \
         applied_at  TIMESTAMPTZ NOT NULL DEFAULT now())";
    const HAS_SQLX_HISTORY: &'static str = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables \
         WHERE schemaname = current_schema() AND tablename = '_sqlx_migrations')";

    fn connect_options(url: &str, _settings: &TxSettings) -> Result<PgConnectOptions, sqlx::Error> {
        let mut options = PgConnectOptions::from_str(url)?;
        if options.get_application_name().is_none() {
            options = options.application_name("idem");
        }
        // idem's statements carry keys, tenants and response bodies: never logged.
        options = options.disable_statement_logging();
        if crate::pooler::is_behind_transaction_pooler() {
            // A pooler lends server sessions: it refuses startup parameters it does not track
            // (PgBouncer: "unsupported startup parameter"), and would not keep them anyway.
            return Ok(options.extra_float_digits(None));
        }
        // No session-wide timeouts: each transaction of idem's sets its own (`begin`). A
        // statement whose client stopped waiting (the runtime's deadline on its lookup) is
        // cancelled within a second instead of holding a server process until it ends.
        Ok(options.options([("client_connection_check_interval", "1000")]))
    }

    fn pool_options(options: PoolOptions<Self>) -> PoolOptions<Self> {
        // A connection that sat idle for a while may have died with a database restart:
        // pinged before use (a busy pool's connections never are), so that the application's
        // own queries do not meet it either.
        options.before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for < IDLE_PING_AFTER {
                    return Ok(true);
                }
                conn.ping().await.map(|()| true)
            })
        })
    }

    async fn namespace(conn: &mut PgConnection) -> Result<String, sqlx::Error> {
        let row = Self::fetch_optional(conn, "SELECT current_schema()", &[]).await?;
        row.map_or(Ok(String::new()), |row| Self::text(&row, 0))
    }

    async fn begin<'c>(
        conn: &'c mut PgConnection,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> Result<Begun<'c, Self>, sqlx::Error> {
        // One round trip: the simple-query protocol takes several statements. The timeouts
        // are the transaction's own: the application's queries on the pool keep theirs.
        let mut statement = Self::begin_statement(settings);
        if let Some(lock) = lock {
            // The advisory lock and the look again, in one call (migration 2; migration 7
            // takes a free lock without a query of its own).
            let _ = write!(
                statement,
                "; SELECT idem_lock_key({}, ",
                lock_id(lock.namespace, lock.key)
            );
            for text in [lock.key.scope, lock.key.operation, lock.key.key] {
                push_text(&mut statement, text);
                statement.push_str(", ");
            }
            match lock.expired_by_ms {
                None => statement.push_str("NULL)"),
                Some(ms) => {
                    let _ = write!(statement, "to_timestamp({ms}::float8 / 1000))");
                }
            }
        }
        // A taken key fails the statement (`IK001`, which `classify` calls
        // `Failure::Taken`): the caller repairs the connection with `abandon_begin`, as after
        // any failed `BEGIN`.
        Transaction::begin(conn, Some(statement.into()))
            .await
            .map(Begun::Free)
    }

    fn begin_statement(settings: &TxSettings) -> String {
        format!(
            "BEGIN; SET LOCAL lock_timeout = {}; SET LOCAL statement_timeout = {}",
            settings.lock_timeout.as_millis().max(1),
            settings.statement_timeout.as_millis().max(1),
        )
    }

    async fn abandon_begin(conn: &mut PgConnection) {
        // `BEGIN` went through and a later statement failed: the session is in an aborted
        // transaction. If even this fails the connection is broken, and its next use says so.
        if let Err(error) = Self::batch(conn, "ROLLBACK").await {
            tracing::warn!(%error, "could not roll back after a failed BEGIN");
        }
    }

    fn insert_and_commit(row: &NewRow<'_>) -> Option<String> {
        Some(insert_and_commit_statement(row))
    }

    /// The key table's primary key refused the row (and not, say, a deferred unique
    /// constraint of the application's refusing the `COMMIT`).
    fn is_key_taken(error: &sqlx::Error) -> bool {
        error.as_database_error().is_some_and(|e| {
            e.code().is_some_and(|code| code == "23505")
                && e.constraint() == Some("idempotency_keys_pkey")
        })
    }

    fn classify(error: &sqlx::Error) -> Failure {
        if crate::protocol::is_connection_error(error) {
            return Failure::Disconnected;
        }
        match error.as_database_error().and_then(|e| e.code()) {
            // lock_not_available (lock_timeout), query_canceled (statement_timeout)
            Some(code) if code == "55P03" || code == "57014" => Failure::LockTimeout,
            // raised by `idem_lock_key`
            Some(code) if code == "IK001" => Failure::Taken,
            // connection_exception; admin_shutdown, crash_shutdown, cannot_connect_now;
            // idle_in_transaction_session_timeout, transaction_timeout (the server ended the
            // session); internal errors: the session is gone or cannot be trusted.
            Some(code)
                if code.starts_with("08")
                    || code.starts_with("57P")
                    || code == "25P03"
                    || code == "25P04"
                    || code.starts_with("XX") =>
            {
                Failure::Disconnected
            }
            _ => Failure::Other,
        }
    }

    async fn key_lock_taken(
        conn: &mut PgConnection,
        lock: KeyLock<'_>,
    ) -> Result<bool, sqlx::Error> {
        // Outside a transaction the lock, if taken, is released as the statement ends.
        let id = [Arg::Int(lock_id(lock.namespace, lock.key))];
        let row = Self::fetch_optional(conn, "SELECT pg_try_advisory_xact_lock($1)", &id).await?;
        let free = row.map(|row| Self::flag(&row, 0)).transpose()?;
        Ok(free == Some(false))
    }

    async fn table_bytes(conn: &mut PgConnection) -> Result<Option<i64>, sqlx::Error> {
        let sql = "SELECT pg_total_relation_size(to_regclass('idempotency_keys'))";
        let row = Self::fetch_optional(conn, sql, &[]).await?;
        Ok(row.map(|row| Self::opt_int(&row, 0)).transpose()?.flatten())
    }

    /// The key's lock's derivation, with the attempt's number as one more part.
    fn hold_id(namespace: &str, key: KeyRef<'_>, attempt: i64) -> i64 {
        let attempt = attempt.to_string();
        advisory_id(&[
            namespace,
            key.scope,
            key.operation,
            key.key,
            "attempt",
            &attempt,
        ])
    }
}

/// `INSERT` of the completed row, `COMMIT`, `BEGIN`, as one simple query: one round trip
/// where a bound `INSERT` and then `COMMIT` take two. The `INSERT` has no `ON CONFLICT`: a
/// row that exists already fails it, which aborts the transaction and skips the `COMMIT`.
///
/// The simple-query protocol takes no parameters, so every value is written as a literal:
/// numbers as decimal digits, text and bytes as hexadecimal escapes. Nothing from the request
/// reaches the statement except as hexadecimal digits.
fn insert_and_commit_statement(row: &NewRow<'_>) -> String {
    let text_len =
        row.key.scope.len() + row.key.operation.len() + row.key.key.len() + row.headers_json.len();
    // Text takes four characters a byte (`\xHH`), bytes two.
    let mut sql =
        String::with_capacity(512 + 4 * text_len + 2 * (row.fingerprint.len() + row.body.len()));
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
    let _ = write!(sql, ", 'completed', {}, ", row.status);
    push_text(&mut sql, row.headers_json);
    sql.push_str(", ");
    push_bytes(&mut sql, row.body);
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
    fn migrations_take_the_documented_lock() {
        let begin = <Postgres as Backend>::BEGIN_MIGRATION.unwrap_or_default();
        let lock = format!("pg_advisory_xact_lock({})", crate::MIGRATION_LOCK_ID);
        assert!(begin.ends_with(&lock), "{begin}");
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

    #[test]
    fn the_merged_statement_holds_request_values_only_as_hex() {
        let body: &[u8] = b"{\"a\":\"'; DROP TABLE x; --\"}";
        let row = NewRow {
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
        let sql = insert_and_commit_statement(&row);
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
        assert!(sql.contains(", 'completed', 201, "), "{sql}");
        // The key, byte for byte.
        let key_escaped: String = "k'); COMMIT; --"
            .bytes()
            .map(|b| format!("\\x{b:02x}"))
            .collect();
        assert!(sql.contains(&format!("E'{key_escaped}'")), "{sql}");
    }

    // Computed independently: SHA-256 over the length-prefixed parts, first 8 bytes LE.
    const LOCK_ID_TENANT_T1_K1: i64 = 3_618_639_434_383_866_314;
}
