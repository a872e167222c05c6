//! Staged mode on SQLite.

use sqlx::Sqlite;

use crate::KeyRef;

/// Unused: SQLite has no hold (`sql::HOLD` is `None`).
fn hold_id(_namespace: &str, _key: KeyRef<'_>, _attempt: i64) -> i64 {
    0
}

mod sql {
    /// `?n` milliseconds as idem's text timestamp.
    macro_rules! at {
        ($n:literal) => {
            concat!(
                "strftime('%Y-%m-%d %H:%M:%f', ?",
                $n,
                " / 1000.0, 'unixepoch')"
            )
        };
    }

    /// No session outlives its process in a way another process can see: no hold.
    pub(super) const HOLD: Option<&str> = None;
    pub(super) const LET_GO: Option<&str> = None;
    pub(super) const OWNER_GONE: Option<&str> = None;
    pub(super) const RESERVE_HELD: Option<&str> = None;

    pub(super) const RESERVE: &str = concat!(
        "INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
         request, created_at, expires_at, locked_until, attempt) \
         VALUES (?1, ?2, ?3, ?4, 'processing', ?5, ",
        at!(6),
        ", ",
        at!(7),
        ", ",
        at!(8),
        ", 1) ON CONFLICT (scope, operation, idempotency_key) DO NOTHING"
    );

    /// The same, replacing a completed row that had expired by the reservation's start; a
    /// processing row, whatever its `expires_at`, is never replaced (`KeyStatus::at`: a key
    /// that is not final never expires).
    pub(super) const RESERVE_OR_REPLACE_EXPIRED: &str = concat!(
        "INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
         request, created_at, expires_at, locked_until, attempt) \
         VALUES (?1, ?2, ?3, ?4, 'processing', ?5, ",
        at!(6),
        ", ",
        at!(7),
        ", ",
        at!(8),
        ", 1) ON CONFLICT (scope, operation, idempotency_key) DO UPDATE SET \
         fingerprint = excluded.fingerprint, status = 'processing', request = excluded.request, \
         created_at = excluded.created_at, expires_at = excluded.expires_at, \
         locked_until = excluded.locked_until, attempt = idempotency_keys.attempt + 1, \
         journal = NULL, recovery_point = NULL, response_status = NULL, \
         response_headers = NULL, response_body = NULL, completed_at = NULL \
         WHERE idempotency_keys.status = 'completed' \
         AND idempotency_keys.expires_at <= excluded.created_at"
    );

    pub(super) const TAKE_OVER: &str = concat!(
        "UPDATE idempotency_keys SET attempt = attempt + 1, locked_until = ",
        at!(6),
        " WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3 \
         AND status = 'processing' AND attempt = ?4 \
         AND (locked_until IS NULL OR locked_until <= ",
        at!(5),
        ") RETURNING attempt, journal, request, fingerprint"
    );

    pub(super) const RENEW: &str = concat!(
        "UPDATE idempotency_keys SET locked_until = ",
        at!(5),
        " WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3 \
         AND status = 'processing' AND attempt = ?4"
    );

    pub(super) const JOURNAL: &str = concat!(
        "UPDATE idempotency_keys SET recovery_point = ?5, journal = ?6, locked_until = ",
        at!(7),
        " WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3 \
         AND status = 'processing' AND attempt = ?4"
    );

    /// Completed, its TTL counted from now: `expires_at` is `Ending::expires_ms`.
    pub(super) const FINISH: &str = concat!(
        "UPDATE idempotency_keys SET status = 'completed', response_status = ?5, \
         response_headers = ?6, response_body = ?7, completed_at = ",
        at!(8),
        ", expires_at = ",
        at!(9),
        ", locked_until = NULL \
         WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3 \
         AND status = 'processing' AND attempt = ?4"
    );

    pub(super) const RELEASE: &str = concat!(
        "UPDATE idempotency_keys SET locked_until = ",
        at!(5),
        " WHERE scope = ?1 AND operation = ?2 AND idempotency_key = ?3 \
         AND status = 'processing' AND attempt = ?4"
    );

    /// `KeyStatus::Stuck` keys of an operation: processing, lease run out, whatever
    /// `expires_at` says.
    pub(super) const STUCK: &str = concat!(
        "SELECT scope, operation, idempotency_key, attempt FROM idempotency_keys \
         WHERE (scope, operation, idempotency_key) IN (SELECT scope, operation, \
         idempotency_key FROM idempotency_processing WHERE operation = ?1) \
         AND status = 'processing' AND operation = ?1 AND locked_until <= ",
        at!(2),
        " ORDER BY locked_until LIMIT ?3"
    );
}

super::impl_staged_sql!(Sqlite);
