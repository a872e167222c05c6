//! Staged mode on SQLite.

use sqlx::sqlite::SqliteConnection;
use sqlx::{Row as _, Sqlite};

use super::{Ending, Lease, Reservation, StagedSql, StuckKey};
use crate::backend::KeyRef;

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
         WHERE idempotency_keys.expires_at <= excluded.created_at"
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

    pub(super) const FINISH: &str = concat!(
        "UPDATE idempotency_keys SET status = 'completed', response_status = ?5, \
         response_headers = ?6, response_body = ?7, completed_at = ",
        at!(8),
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

    pub(super) const STUCK: &str = concat!(
        "SELECT scope, operation, idempotency_key, attempt FROM idempotency_keys \
         WHERE status = 'processing' AND operation = ?1 AND locked_until <= ",
        at!(2),
        " ORDER BY locked_until LIMIT ?3"
    );
}

fn by_key<'q>(
    statement: &'q str,
    key: KeyRef<'q>,
) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
    sqlx::query(statement)
        .bind(key.scope)
        .bind(key.operation)
        .bind(key.key)
}

impl StagedSql for Sqlite {
    async fn reserve(conn: &mut SqliteConnection, r: Reservation<'_>) -> Result<bool, sqlx::Error> {
        let statement = if r.replace_expired {
            sql::RESERVE_OR_REPLACE_EXPIRED
        } else {
            sql::RESERVE
        };
        let done = by_key(statement, r.key)
            .bind(r.fingerprint)
            .bind(r.request)
            .bind(r.created_ms)
            .bind(r.expires_ms)
            .bind(r.locked_until_ms)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn take_over(
        conn: &mut SqliteConnection,
        key: KeyRef<'_>,
        seen_attempt: i64,
        now_ms: i64,
        locked_until_ms: i64,
    ) -> Result<Option<Lease>, sqlx::Error> {
        let row = by_key(sql::TAKE_OVER, key)
            .bind(seen_attempt)
            .bind(now_ms)
            .bind(locked_until_ms)
            .fetch_optional(conn)
            .await?;
        row.map(|row| {
            Ok(Lease {
                attempt: row.try_get(0)?,
                journal: row.try_get(1)?,
                request: row.try_get(2)?,
                fingerprint: row.try_get(3)?,
            })
        })
        .transpose()
    }

    async fn renew(
        conn: &mut SqliteConnection,
        key: KeyRef<'_>,
        attempt: i64,
        locked_until_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let done = by_key(sql::RENEW, key)
            .bind(attempt)
            .bind(locked_until_ms)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn journal(
        conn: &mut SqliteConnection,
        key: KeyRef<'_>,
        attempt: i64,
        step: &str,
        journal: &str,
        locked_until_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let done = by_key(sql::JOURNAL, key)
            .bind(attempt)
            .bind(step)
            .bind(journal)
            .bind(locked_until_ms)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn finish(
        conn: &mut SqliteConnection,
        key: KeyRef<'_>,
        attempt: i64,
        ending: Ending<'_>,
    ) -> Result<bool, sqlx::Error> {
        let done = by_key(sql::FINISH, key)
            .bind(attempt)
            .bind(i32::from(ending.status))
            .bind(ending.headers_json)
            .bind(ending.body)
            .bind(ending.completed_ms)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn release(
        conn: &mut SqliteConnection,
        key: KeyRef<'_>,
        attempt: i64,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let done = by_key(sql::RELEASE, key)
            .bind(attempt)
            .bind(now_ms)
            .execute(conn)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn stuck(
        conn: &mut SqliteConnection,
        operation: &str,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<StuckKey>, sqlx::Error> {
        let rows = sqlx::query(sql::STUCK)
            .bind(operation)
            .bind(now_ms)
            .bind(limit)
            .fetch_all(conn)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(StuckKey {
                    scope: row.try_get(0)?,
                    operation: row.try_get(1)?,
                    key: row.try_get(2)?,
                    attempt: row.try_get(3)?,
                })
            })
            .collect()
    }
}
