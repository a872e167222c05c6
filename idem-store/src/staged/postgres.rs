//! Staged mode on PostgreSQL.

use sqlx::Postgres;

use crate::KeyRef;

/// The advisory lock id of `key`'s attempt `attempt` (the key's transaction lock's
/// derivation, with the attempt's number as one more part).
fn hold_id(namespace: &str, key: KeyRef<'_>, attempt: i64) -> i64 {
    let attempt = attempt.to_string();
    crate::postgres::advisory_id(&[
        namespace,
        key.scope,
        key.operation,
        key.key,
        "attempt",
        &attempt,
    ])
}

mod sql {
    /// `$n` milliseconds as a `timestamptz`.
    macro_rules! at {
        ($n:literal) => {
            concat!("to_timestamp($", $n, "::float8 / 1000)")
        };
    }

    /// The key row, and its row in `idempotency_processing` (which the key table's
    /// triggers remove once the key stops processing). One row affected: reserved.
    pub(super) const RESERVE: &str = concat!(
        "WITH reserved AS (INSERT INTO idempotency_keys (scope, operation, idempotency_key, \
         fingerprint, status, request, created_at, expires_at, locked_until, attempt) \
         VALUES ($1, $2, $3, $4, 'processing', $5, ",
        at!(6),
        ", ",
        at!(7),
        ", ",
        at!(8),
        ", 1) ON CONFLICT (scope, operation, idempotency_key) DO NOTHING \
         RETURNING scope, operation, idempotency_key) \
         INSERT INTO idempotency_processing (scope, operation, idempotency_key) \
         SELECT scope, operation, idempotency_key FROM reserved \
         ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET scope = EXCLUDED.scope"
    );

    /// [`RESERVE`] holding attempt 1 ([`HOLD`], `$9`) in the same round trip: the row is
    /// inserted only if the hold is taken. Answers (held, reserved).
    pub(super) const RESERVE_HELD: Option<&str> = Some(concat!(
        "WITH held AS (SELECT pg_try_advisory_lock($9) AS ok \
         FROM (SELECT pg_advisory_unlock_all()) AS released), \
         reserved AS (INSERT INTO idempotency_keys (scope, operation, idempotency_key, \
         fingerprint, status, request, created_at, expires_at, locked_until, attempt) \
         SELECT $1, $2, $3, $4, 'processing', $5, ",
        at!(6),
        ", ",
        at!(7),
        ", ",
        at!(8),
        ", 1 FROM held WHERE held.ok \
         ON CONFLICT (scope, operation, idempotency_key) DO NOTHING \
         RETURNING scope, operation, idempotency_key), \
         processing AS (INSERT INTO idempotency_processing (scope, operation, idempotency_key) \
         SELECT scope, operation, idempotency_key FROM reserved \
         ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET scope = EXCLUDED.scope \
         RETURNING 1) \
         SELECT (SELECT ok FROM held), (SELECT count(*) FROM processing)"
    ));

    /// The same, replacing a completed row that had expired by the reservation's start; a
    /// processing row, whatever its `expires_at`, is never replaced (`KeyStatus::at`: a key
    /// that is not final never expires).
    pub(super) const RESERVE_OR_REPLACE_EXPIRED: &str = concat!(
        "WITH reserved AS (INSERT INTO idempotency_keys (scope, operation, idempotency_key, \
         fingerprint, status, request, created_at, expires_at, locked_until, attempt) \
         VALUES ($1, $2, $3, $4, 'processing', $5, ",
        at!(6),
        ", ",
        at!(7),
        ", ",
        at!(8),
        ", 1) ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET \
         fingerprint = EXCLUDED.fingerprint, status = 'processing', request = EXCLUDED.request, \
         created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at, \
         locked_until = EXCLUDED.locked_until, attempt = idempotency_keys.attempt + 1, \
         journal = NULL, recovery_point = NULL, response_status = NULL, \
         response_headers = NULL, response_body = NULL, completed_at = NULL \
         WHERE idempotency_keys.status = 'completed' \
         AND idempotency_keys.expires_at <= EXCLUDED.created_at \
         RETURNING scope, operation, idempotency_key) \
         INSERT INTO idempotency_processing (scope, operation, idempotency_key) \
         SELECT scope, operation, idempotency_key FROM reserved \
         ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET scope = EXCLUDED.scope"
    );

    /// A session advisory lock, which the server lets go when the session ends, taken after
    /// letting go of every hold the session had (the `FROM` subquery runs first: its
    /// volatile call keeps it from being pulled up), all in one round trip.
    pub(super) const HOLD: Option<&str> =
        Some("SELECT pg_try_advisory_lock($1) FROM (SELECT pg_advisory_unlock_all()) AS released");
    pub(super) const LET_GO: Option<&str> = Some("SELECT pg_advisory_unlock($1)");
    /// Taken and let go again if free (`CASE` fixes the order of the two calls), after
    /// letting go of every hold the session had.
    pub(super) const OWNER_GONE: Option<&str> = Some(
        "SELECT CASE WHEN pg_try_advisory_lock($1) THEN pg_advisory_unlock($1) ELSE false END \
         FROM (SELECT pg_advisory_unlock_all()) AS released",
    );

    pub(super) const TAKE_OVER: &str = concat!(
        "UPDATE idempotency_keys SET attempt = attempt + 1, locked_until = ",
        at!(6),
        " WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 \
         AND status = 'processing' AND attempt = $4 \
         AND (locked_until IS NULL OR locked_until <= ",
        at!(5),
        ") RETURNING attempt, journal, request, fingerprint"
    );

    pub(super) const RENEW: &str = concat!(
        "UPDATE idempotency_keys SET locked_until = ",
        at!(5),
        " WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 \
         AND status = 'processing' AND attempt = $4"
    );

    pub(super) const JOURNAL: &str = concat!(
        "UPDATE idempotency_keys SET recovery_point = $5, journal = $6, locked_until = ",
        at!(7),
        " WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 \
         AND status = 'processing' AND attempt = $4"
    );

    /// Completed, its TTL counted from now: `expires_at` is `Ending::expires_ms`.
    pub(super) const FINISH: &str = concat!(
        "UPDATE idempotency_keys SET status = 'completed', response_status = $5, \
         response_headers = $6, response_body = $7, completed_at = ",
        at!(8),
        ", expires_at = ",
        at!(9),
        ", locked_until = NULL \
         WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 \
         AND status = 'processing' AND attempt = $4"
    );

    pub(super) const RELEASE: &str = concat!(
        "UPDATE idempotency_keys SET locked_until = ",
        at!(5),
        " WHERE scope = $1 AND operation = $2 AND idempotency_key = $3 \
         AND status = 'processing' AND attempt = $4"
    );

    /// `KeyStatus::Stuck` keys of an operation: processing, lease run out, whatever
    /// `expires_at` says.
    pub(super) const STUCK: &str = concat!(
        "SELECT scope, operation, idempotency_key, attempt FROM idempotency_keys \
         WHERE (scope, operation, idempotency_key) IN (SELECT scope, operation, \
         idempotency_key FROM idempotency_processing WHERE operation = $1) \
         AND status = 'processing' AND operation = $1 AND locked_until <= ",
        at!(2),
        " ORDER BY locked_until LIMIT $3"
    );
}

super::impl_staged_sql!(Postgres);
