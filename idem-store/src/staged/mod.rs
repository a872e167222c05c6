//! Staged mode's statements: reserve a key with a lease, take an expired lease over, renew
//! it, journal a step, finish, release; and find stuck keys.
//!
//! Every write of an attempt is fenced: it names the attempt's number and changes nothing
//! (answering `false`) once the row's `attempt` moved on or the row is no longer
//! `processing` — an attempt that lost its lease can never overwrite the attempt that took
//! over. The runtime composes these in `idem_runtime::staged`; operators act on the same rows
//! through [`crate::KeyTable::act`].

use std::future::Future;

use sqlx::Database;

use crate::key::KeyRef;
use crate::sealed::Sealed;

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

/// A new staged key ([`StagedSql::reserve`]).
#[derive(Debug, Clone, Copy)]
pub struct Reservation<'a> {
    /// The key.
    pub key: KeyRef<'a>,
    /// The request's fingerprint.
    pub fingerprint: &'a [u8],
    /// The request, as JSON, for resuming without its client.
    pub request: &'a str,
    /// Now (`created_at`).
    pub created_ms: i64,
    /// `expires_at` while the key is processing, where it counts for nothing (a processing
    /// key never expires); [`StagedSql::finish`] sets it from the completion.
    pub expires_ms: i64,
    /// The first attempt's lease (`locked_until`).
    pub locked_until_ms: i64,
    /// Replace a completed row that had expired by [`Reservation::created_ms`] (an operation
    /// that runs expired keys again); otherwise an existing row wins. A processing row is
    /// never replaced, whatever its `expires_at`: it is not final, so it does not expire.
    pub replace_expired: bool,
}

/// An attempt's hold on a staged key: what [`StagedSql::take_over`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The attempt's fencing number.
    pub attempt: i64,
    /// The journal so far: a JSON object from step name to result (`None`: no step yet).
    pub journal: Option<String>,
    /// The request the key was reserved with (JSON).
    pub request: Option<String>,
    /// The fingerprint the key was reserved with.
    pub fingerprint: Vec<u8>,
}

/// A staged key whose lease ran out ([`StagedSql::stuck`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StuckKey {
    /// `global`, `tenant:<id>` or `user:<id>`.
    pub scope: String,
    /// The operation id.
    pub operation: String,
    /// The client's key.
    pub key: String,
    /// The attempt that held it.
    pub attempt: i64,
}

impl StuckKey {
    /// The key's identity.
    #[must_use]
    pub fn key_ref(&self) -> KeyRef<'_> {
        KeyRef {
            scope: &self.scope,
            operation: &self.operation,
            key: &self.key,
        }
    }
}

/// The response a staged key ends with ([`StagedSql::finish`]), in its columns' form.
#[derive(Debug, Clone, Copy)]
pub struct Ending<'a> {
    /// `response_status`.
    pub status: u16,
    /// `response_headers` ([`crate::StoredResponse::encode_headers`]).
    pub headers_json: &'a str,
    /// `response_body`.
    pub body: &'a [u8],
    /// `completed_at`.
    pub completed_ms: i64,
    /// `expires_at`: the completion plus the operation's TTL. A key's time to live counts
    /// from its completion, so a key completed late (resumed after its reservation's
    /// `expires_at` passed) has its whole TTL from then on.
    pub expires_ms: i64,
}

/// Staged mode's statements, per backend. Each runs on a connection, which may be a
/// transaction's (`&mut *tx`): [`StagedSql::journal`] and [`StagedSql::finish`] run in the
/// transaction of the application's writes when a step has any, so the step's writes and its
/// recovery point commit together.
///
/// Implemented for every [`crate::Backend`]; sealed like it.
pub trait StagedSql: Database + Sealed {
    /// Inserts the key as `processing`, attempt 1, with its lease; `false` (nothing changed)
    /// when the key has a row already (unless it is a completed row that had expired and
    /// [`Reservation::replace_expired`]: a processing row never expires, see
    /// [`crate::KeyStatus::at`]).
    fn reserve(
        conn: &mut Self::Connection,
        reservation: Reservation<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Takes over a `processing` key whose lease had run out by `now_ms` and whose attempt is
    /// still `seen_attempt`: one more attempt, leased until `locked_until_ms`. `None` when the
    /// row is not in that state any more (another attempt took it, it completed, or its lease
    /// was renewed).
    fn take_over(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        seen_attempt: i64,
        now_ms: i64,
        locked_until_ms: i64,
    ) -> impl Future<Output = Result<Option<Lease>, sqlx::Error>> + Send;

    /// Renews `attempt`'s lease until `locked_until_ms`; `false` when the attempt was fenced
    /// out.
    fn renew(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        attempt: i64,
        locked_until_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Records `step` as the recovery point with the whole `journal` (a JSON object), and
    /// renews the lease; `false` when the attempt was fenced out.
    fn journal(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        attempt: i64,
        step: &str,
        journal: &str,
        locked_until_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Completes the key with `ending`'s response, `completed_at` and `expires_at`; `false`
    /// when the attempt was fenced out.
    fn finish(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        attempt: i64,
        ending: Ending<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Ends `attempt`'s lease at `now_ms`, leaving the key `processing` for the next retry or
    /// the reconciler to take over; `false` when the attempt was fenced out.
    fn release(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        attempt: i64,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Whether [`StagedSql::hold`] proves an attempt's owner alive (PostgreSQL: a session
    /// advisory lock, which the server ends with the session). Where it is `false` (SQLite),
    /// `hold` and `let_go` take nothing and answer `true`, [`StagedSql::owner_gone`] answers
    /// `false`, and only a lease that ran out tells that an attempt stopped.
    const HOLDS: bool;

    /// Takes the hold of `key`'s attempt number `attempt` for the attempt about to run with
    /// that number: `false` when another session holds it. A connection holds one attempt
    /// at a time: this first lets go of every hold the connection had (in the same round
    /// trip), so a connection back in its pool keeps its last hold only until its next use.
    /// A hold lasts until then, [`StagedSql::let_go`], or the end of the connection — with
    /// the process that owned it, however it died. An attempt that holds its number from
    /// before its reservation or takeover until after its last write proves, while its
    /// connection lives, that it runs.
    ///
    /// The hold is an advisory lock whose id is derived from `namespace`, the key and the
    /// attempt number: never the key's transaction lock ([`crate::Backend::begin`]'s), and
    /// each attempt's its own, so a takeover never waits for the attempt it replaces.
    fn hold(
        conn: &mut Self::Connection,
        namespace: &str,
        key: KeyRef<'_>,
        attempt: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// [`StagedSql::reserve`] and [`StagedSql::hold`] of attempt 1, in one round trip: the
    /// key is reserved only if its hold is taken. Answers (held, reserved); (`true`,
    /// `false`): the key has a row already, and this connection holds attempt 1 for nothing
    /// until its next hold or probe. `reservation.replace_expired` must be `false` (a
    /// replaced row's attempt number goes on counting: hold it once it is known). Where the
    /// backend has no holds, this is [`StagedSql::reserve`], held.
    fn reserve_held(
        conn: &mut Self::Connection,
        namespace: &str,
        reservation: Reservation<'_>,
    ) -> impl Future<Output = Result<(bool, bool), sqlx::Error>> + Send;

    /// Ends the hold [`StagedSql::hold`] took on this connection; `false` when it held
    /// nothing.
    fn let_go(
        conn: &mut Self::Connection,
        namespace: &str,
        key: KeyRef<'_>,
        attempt: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Whether the owner of `key`'s attempt `attempt` is provably gone: nobody holds it
    /// (taken and let go again in one statement, after letting go of every hold this
    /// connection had, so the probe holds nothing after). Only meaningful for an attempt
    /// whose row is `processing` with that number, which its owner held before the row said
    /// so. Always `false` where the backend has no holds.
    fn owner_gone(
        conn: &mut Self::Connection,
        namespace: &str,
        key: KeyRef<'_>,
        attempt: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Up to `limit` `processing` keys of `operation` whose lease had run out by `now_ms`,
    /// the longest stuck first.
    fn stuck(
        conn: &mut Self::Connection,
        operation: &str,
        now_ms: i64,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<StuckKey>, sqlx::Error>> + Send;
}

/// The Rust side of [`StagedSql`], the same for every backend: binds and reads. Each backend
/// file invokes it with its database type, beside a `mod sql` holding its statements
/// (`RESERVE`, `RESERVE_OR_REPLACE_EXPIRED`, `TAKE_OVER`, `RENEW`, `JOURNAL`, `FINISH`,
/// `RELEASE`, `STUCK`, and `HOLD` / `LET_GO` / `OWNER_GONE`: `None` where the backend has no
/// holds) and a `hold_id(namespace, key, attempt) -> i64`, which the invocation's paths
/// resolve to.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! impl_staged_sql {
    ($db:ty) => {
        fn by_key<'q>(
            statement: &'q str,
            key: $crate::KeyRef<'q>,
        ) -> sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>> {
            sqlx::query(statement)
                .bind(key.scope)
                .bind(key.operation)
                .bind(key.key)
        }

        /// A hold statement on `key`'s attempt `attempt`: one boolean.
        async fn by_hold(
            statement: &'static str,
            namespace: &str,
            key: $crate::KeyRef<'_>,
            attempt: i64,
            conn: &mut <$db as sqlx::Database>::Connection,
        ) -> Result<bool, sqlx::Error> {
            sqlx::query_scalar(statement)
                .bind(hold_id(namespace, key, attempt))
                .fetch_one(conn)
                .await
        }

        impl $crate::staged::StagedSql for $db {
            async fn reserve(
                conn: &mut <$db as sqlx::Database>::Connection,
                r: $crate::staged::Reservation<'_>,
            ) -> Result<bool, sqlx::Error> {
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
                conn: &mut <$db as sqlx::Database>::Connection,
                key: $crate::KeyRef<'_>,
                seen_attempt: i64,
                now_ms: i64,
                locked_until_ms: i64,
            ) -> Result<Option<$crate::staged::Lease>, sqlx::Error> {
                let row = by_key(sql::TAKE_OVER, key)
                    .bind(seen_attempt)
                    .bind(now_ms)
                    .bind(locked_until_ms)
                    .fetch_optional(conn)
                    .await?;
                row.map(|row| {
                    Ok($crate::staged::Lease {
                        attempt: sqlx::Row::try_get(&row, 0)?,
                        journal: sqlx::Row::try_get(&row, 1)?,
                        request: sqlx::Row::try_get(&row, 2)?,
                        fingerprint: sqlx::Row::try_get(&row, 3)?,
                    })
                })
                .transpose()
            }

            async fn renew(
                conn: &mut <$db as sqlx::Database>::Connection,
                key: $crate::KeyRef<'_>,
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
                conn: &mut <$db as sqlx::Database>::Connection,
                key: $crate::KeyRef<'_>,
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
                conn: &mut <$db as sqlx::Database>::Connection,
                key: $crate::KeyRef<'_>,
                attempt: i64,
                ending: $crate::staged::Ending<'_>,
            ) -> Result<bool, sqlx::Error> {
                let done = by_key(sql::FINISH, key)
                    .bind(attempt)
                    .bind(i32::from(ending.status))
                    .bind(ending.headers_json)
                    .bind(ending.body)
                    .bind(ending.completed_ms)
                    .bind(ending.expires_ms)
                    .execute(conn)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn release(
                conn: &mut <$db as sqlx::Database>::Connection,
                key: $crate::KeyRef<'_>,
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

            const HOLDS: bool = sql::HOLD.is_some();

            async fn hold(
                conn: &mut <$db as sqlx::Database>::Connection,
                namespace: &str,
                key: $crate::KeyRef<'_>,
                attempt: i64,
            ) -> Result<bool, sqlx::Error> {
                match sql::HOLD {
                    Some(statement) => by_hold(statement, namespace, key, attempt, conn).await,
                    None => Ok(true),
                }
            }

            async fn reserve_held(
                conn: &mut <$db as sqlx::Database>::Connection,
                namespace: &str,
                r: $crate::staged::Reservation<'_>,
            ) -> Result<(bool, bool), sqlx::Error> {
                debug_assert!(!r.replace_expired, "reserve_held never replaces");
                let Some(statement) = sql::RESERVE_HELD else {
                    return Ok((
                        true,
                        <$db as $crate::staged::StagedSql>::reserve(conn, r).await?,
                    ));
                };
                let row = by_key(statement, r.key)
                    .bind(r.fingerprint)
                    .bind(r.request)
                    .bind(r.created_ms)
                    .bind(r.expires_ms)
                    .bind(r.locked_until_ms)
                    .bind(hold_id(namespace, r.key, 1))
                    .fetch_one(conn)
                    .await?;
                let held: bool = sqlx::Row::try_get(&row, 0)?;
                let reserved: i64 = sqlx::Row::try_get(&row, 1)?;
                Ok((held, reserved == 1))
            }

            async fn let_go(
                conn: &mut <$db as sqlx::Database>::Connection,
                namespace: &str,
                key: $crate::KeyRef<'_>,
                attempt: i64,
            ) -> Result<bool, sqlx::Error> {
                match sql::LET_GO {
                    Some(statement) => by_hold(statement, namespace, key, attempt, conn).await,
                    None => Ok(true),
                }
            }

            async fn owner_gone(
                conn: &mut <$db as sqlx::Database>::Connection,
                namespace: &str,
                key: $crate::KeyRef<'_>,
                attempt: i64,
            ) -> Result<bool, sqlx::Error> {
                match sql::OWNER_GONE {
                    Some(statement) => by_hold(statement, namespace, key, attempt, conn).await,
                    None => Ok(false),
                }
            }

            async fn stuck(
                conn: &mut <$db as sqlx::Database>::Connection,
                operation: &str,
                now_ms: i64,
                limit: i64,
            ) -> Result<Vec<$crate::staged::StuckKey>, sqlx::Error> {
                let rows = sqlx::query(sql::STUCK)
                    .bind(operation)
                    .bind(now_ms)
                    .bind(limit)
                    .fetch_all(conn)
                    .await?;
                rows.iter()
                    .map(|row| {
                        Ok($crate::staged::StuckKey {
                            scope: sqlx::Row::try_get(row, 0)?,
                            operation: sqlx::Row::try_get(row, 1)?,
                            key: sqlx::Row::try_get(row, 2)?,
                            attempt: sqlx::Row::try_get(row, 3)?,
                        })
                    })
                    .collect()
            }
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use impl_staged_sql;
