//! Staged mode's statements: reserve a key with a lease, take an expired lease over, renew
//! it, journal a step, finish, release; and find stuck keys.
//!
//! Every write of an attempt is fenced: it names the attempt's number and changes nothing
//! (answering `false`) once the row's `attempt` moved on or the row is no longer
//! `processing` — an attempt that lost its lease can never overwrite the attempt that took
//! over. The runtime composes these in `idem_runtime::staged`; operators act on the same rows
//! through [`crate::KeyTable::act`].

use std::future::Future;

use crate::dialect::{Arg, Dialect};
use crate::key::KeyRef;

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

/// Staged mode's statements, on every database (written once over its dialect, like the
/// protocol's primitives). Each runs on a connection, which may be a
/// transaction's (`&mut *tx`): [`StagedSql::journal`] and [`StagedSql::finish`] run in the
/// transaction of the application's writes when a step has any, so the step's writes and its
/// recovery point commit together.
///
/// Implemented for every [`crate::Backend`]; sealed like it.
pub trait StagedSql: Dialect {
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
/// Staged mode's statements on every database, written once on its [`Dialect`]'s.
impl<DB: Dialect> StagedSql for DB {
    async fn reserve(conn: &mut DB::Connection, r: Reservation<'_>) -> Result<bool, sqlx::Error> {
        let sql = DB::SQL;
        let args = Arg::on_key(r.key, &reservation_args(&r));
        let statement = match (sql.reopen_expired, r.replace_expired) {
            (_, false) => sql.reserve,
            (None, true) => sql.reserve_or_replace_expired,
            // An expired completed row reopened first, where the insert cannot do it.
            (Some(reopen), true) => {
                let set = [
                    Arg::Bytes(r.fingerprint),
                    Arg::Text(r.request),
                    Arg::Int(r.created_ms),
                    Arg::Int(r.locked_until_ms),
                    Arg::Int(r.expires_ms),
                ];
                let reopen_args = Arg::around_key(&set, r.key, &[Arg::Int(r.created_ms)]);
                if DB::execute(conn, reopen, &reopen_args).await? == 1 {
                    return Ok(true);
                }
                sql.reserve_or_replace_expired
            }
        };
        match DB::execute(conn, statement, &args).await {
            Ok(reserved) => Ok(reserved == 1),
            // Without `ON CONFLICT … DO NOTHING`: the key has a row.
            Err(error) if DB::is_duplicate(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }

    async fn take_over(
        conn: &mut DB::Connection,
        key: KeyRef<'_>,
        seen_attempt: i64,
        now_ms: i64,
        locked_until_ms: i64,
    ) -> Result<Option<Lease>, sqlx::Error> {
        let until = [Arg::Int(locked_until_ms)];
        let args = Arg::around_key(&until, key, &[Arg::Int(seen_attempt), Arg::Int(now_ms)]);
        let sql = DB::SQL;
        let row = if DB::RETURNING {
            DB::fetch_optional(conn, sql.take_over, &args).await?
        } else if DB::execute(conn, sql.take_over, &args).await? == 1 {
            // Read back under the lease just taken: no other attempt moves it on meanwhile.
            DB::fetch_optional(conn, sql.lease_of, &Arg::key(key)).await?
        } else {
            None
        };
        row.map(|row| {
            Ok(Lease {
                attempt: DB::int(&row, 0)?,
                journal: DB::opt_text(&row, 1)?,
                request: DB::opt_text(&row, 2)?,
                fingerprint: DB::bytes(&row, 3)?,
            })
        })
        .transpose()
    }

    async fn renew(
        conn: &mut DB::Connection,
        key: KeyRef<'_>,
        attempt: i64,
        locked_until_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let args = Arg::around_key(&[Arg::Int(locked_until_ms)], key, &[Arg::Int(attempt)]);
        Ok(DB::execute(conn, DB::SQL.renew, &args).await? == 1)
    }

    async fn journal(
        conn: &mut DB::Connection,
        key: KeyRef<'_>,
        attempt: i64,
        step: &str,
        journal: &str,
        locked_until_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let set = [
            Arg::Text(step),
            Arg::Text(journal),
            Arg::Int(locked_until_ms),
        ];
        let args = Arg::around_key(&set, key, &[Arg::Int(attempt)]);
        Ok(DB::execute(conn, DB::SQL.step, &args).await? == 1)
    }

    async fn finish(
        conn: &mut DB::Connection,
        key: KeyRef<'_>,
        attempt: i64,
        ending: Ending<'_>,
    ) -> Result<bool, sqlx::Error> {
        let set = [
            Arg::Int32(i32::from(ending.status)),
            Arg::Text(ending.headers_json),
            Arg::Bytes(ending.body),
            Arg::Int(ending.completed_ms),
            Arg::Int(ending.expires_ms),
        ];
        let args = Arg::around_key(&set, key, &[Arg::Int(attempt)]);
        Ok(DB::execute(conn, DB::SQL.finish, &args).await? == 1)
    }

    async fn release(
        conn: &mut DB::Connection,
        key: KeyRef<'_>,
        attempt: i64,
        now_ms: i64,
    ) -> Result<bool, sqlx::Error> {
        let args = Arg::around_key(&[Arg::Int(now_ms)], key, &[Arg::Int(attempt)]);
        Ok(DB::execute(conn, DB::SQL.give_back, &args).await? == 1)
    }

    const HOLDS: bool = DB::SQL.hold.is_some();

    async fn hold(
        conn: &mut DB::Connection,
        namespace: &str,
        key: KeyRef<'_>,
        attempt: i64,
    ) -> Result<bool, sqlx::Error> {
        match DB::SQL.hold {
            Some(statement) => on_hold::<DB>(conn, statement, namespace, key, attempt).await,
            None => Ok(true),
        }
    }

    async fn reserve_held(
        conn: &mut DB::Connection,
        namespace: &str,
        r: Reservation<'_>,
    ) -> Result<(bool, bool), sqlx::Error> {
        debug_assert!(!r.replace_expired, "reserve_held never replaces");
        let Some(statement) = DB::SQL.reserve_held else {
            return Ok((true, Self::reserve(conn, r).await?));
        };
        let mut rest = reservation_args(&r).to_vec();
        rest.push(Arg::Int(DB::hold_id(namespace, r.key, 1)));
        let args = Arg::on_key(r.key, &rest);
        let row = DB::fetch_optional(conn, statement, &args).await?;
        let row = row.ok_or(sqlx::Error::RowNotFound)?;
        Ok((DB::flag(&row, 0)?, DB::int(&row, 1)? == 1))
    }

    async fn let_go(
        conn: &mut DB::Connection,
        namespace: &str,
        key: KeyRef<'_>,
        attempt: i64,
    ) -> Result<bool, sqlx::Error> {
        match DB::SQL.let_go {
            Some(statement) => on_hold::<DB>(conn, statement, namespace, key, attempt).await,
            None => Ok(true),
        }
    }

    async fn owner_gone(
        conn: &mut DB::Connection,
        namespace: &str,
        key: KeyRef<'_>,
        attempt: i64,
    ) -> Result<bool, sqlx::Error> {
        match DB::SQL.owner_gone {
            Some(statement) => on_hold::<DB>(conn, statement, namespace, key, attempt).await,
            None => Ok(false),
        }
    }

    async fn stuck(
        conn: &mut DB::Connection,
        operation: &str,
        now_ms: i64,
        limit: i64,
    ) -> Result<Vec<StuckKey>, sqlx::Error> {
        let args = [
            Arg::Text(operation),
            Arg::Text(operation),
            Arg::Int(now_ms),
            Arg::Int(limit),
        ];
        let rows = DB::fetch_all(conn, DB::SQL.stuck, &args).await?;
        rows.iter()
            .map(|row| {
                Ok(StuckKey {
                    scope: DB::text(row, 0)?,
                    operation: DB::text(row, 1)?,
                    key: DB::text(row, 2)?,
                    attempt: DB::int(row, 3)?,
                })
            })
            .collect()
    }
}

/// A reservation's parameters after the key's: `$4` to `$8`.
fn reservation_args<'a>(r: &Reservation<'a>) -> [Arg<'a>; 5] {
    [
        Arg::Bytes(r.fingerprint),
        Arg::Text(r.request),
        Arg::Int(r.created_ms),
        Arg::Int(r.expires_ms),
        Arg::Int(r.locked_until_ms),
    ]
}

/// Runs a statement on the hold of `key`'s attempt `attempt` (its one parameter), answering
/// its one boolean.
async fn on_hold<DB: Dialect>(
    conn: &mut DB::Connection,
    statement: &str,
    namespace: &str,
    key: KeyRef<'_>,
    attempt: i64,
) -> Result<bool, sqlx::Error> {
    let id = [Arg::Int(DB::hold_id(namespace, key, attempt))];
    let row = DB::fetch_optional(conn, statement, &id).await?;
    row.map_or(Ok(false), |row| DB::flag(&row, 0))
}
