//! Staged mode's primitives on the key table, written once for every store.
//!
//! Each runs on a connection, which may be a transaction's (`&mut *tx`): [`journal`] and
//! [`finish`] run in the transaction of the application's writes when a step has any, so
//! the step's writes and its recovery point commit together. Every write of an attempt is
//! fenced by its reservation and its number, its [`Fence`].

use std::borrow::Cow;

use crate::backend::Backend;
use crate::glue::Arg;
use crate::key::KeyRef;
use crate::seal::{self, Column, Keyring, Place};
use crate::staged::{Ending, Fence, Lease, Reservation, StuckKey};

// Staged mode: each runs on a connection, which may be a transaction's (`&mut *tx`):
// `journal` and `finish` run in the transaction of the application's writes when a step
// has any, so the step's writes and its recovery point commit together. Every write of an
// attempt is fenced by its reservation and its number, its [`Fence`] (see
// [`crate::staged`]).

/// Inserts the key as `processing`, reservation `r.id`'s attempt 1, with its lease; `false` (nothing changed)
/// when the key has a row already (but see [`Reservation::replace_expired`]).
pub async fn reserve<DB: Backend>(
    conn: &mut DB::Connection,
    r: Reservation<'_>,
    ring: Option<&Keyring>,
) -> Result<bool, sqlx::Error> {
    let sealed = SealedReservation::new(ring, &r);
    let r = sealed.reservation(r);
    let sql = DB::SQL;
    let args = Arg::on_key(r.key, &reservation_args(&r));
    let statement = match (sql.staged.reopen_expired, r.replace_expired) {
        (_, false) => sql.staged.reserve,
        (None, true) => sql.staged.reserve_or_replace_expired,
        // An expired completed row reopened first, where the insert cannot do it.
        (Some(reopen), true) => {
            let set = [
                Arg::Bytes(r.fingerprint),
                Arg::Text(r.request),
                Arg::Int(r.created_ms),
                Arg::Int(r.locked_until_ms),
                Arg::Int(r.expires_ms),
                Arg::Int(r.id),
                Arg::OptBytes(r.field_digests),
            ];
            let reopen_args = Arg::around_key(&set, r.key, &[Arg::Int(r.created_ms)]);
            if DB::execute(conn, reopen, &reopen_args).await? == 1 {
                return Ok(true);
            }
            sql.staged.reserve_or_replace_expired
        }
    };
    match DB::execute(conn, statement, &args).await {
        Ok(reserved) => Ok(reserved == 1),
        Err(error) if DB::is_duplicate(&error) => Ok(false),
        Err(error) => Err(error),
    }
}

/// Takes over a `processing` key whose lease had run out by `now_ms` and whose attempt is
/// still `seen`: one more attempt of the same reservation, leased until
/// `locked_until_ms`. `None` when the row is not in that state any more (another attempt
/// took it, it completed, its lease was renewed, or it is another reservation's).
pub async fn take_over<DB: Backend>(
    conn: &mut DB::Connection,
    key: KeyRef<'_>,
    seen: Fence,
    now_ms: i64,
    locked_until_ms: i64,
    ring: Option<&Keyring>,
) -> Result<Option<Lease>, sqlx::Error> {
    let until = [Arg::Int(locked_until_ms)];
    let fence = fence_args(seen);
    let args = Arg::around_key(&until, key, &[fence[0], fence[1], Arg::Int(now_ms)]);
    let sql = DB::SQL;
    let row = if DB::DIALECT.returning {
        DB::fetch_optional(conn, sql.staged.take_over, &args).await?
    } else if DB::execute(conn, sql.staged.take_over, &args).await? == 1 {
        // Read back under the lease just taken: no other attempt moves it on meanwhile.
        DB::fetch_optional(conn, sql.staged.lease_of, &Arg::key(key)).await?
    } else {
        None
    };
    row.map(|row| {
        Ok(Lease {
            fence: Fence {
                reservation: seen.reservation,
                attempt: DB::int(&row, 0)?,
            },
            journal: (DB::opt_text(&row, 1)?)
                .map(|j| seal::open_text(ring, Place::key(Column::Journal, key), j))
                .transpose()?,
            request: (DB::opt_text(&row, 2)?)
                .map(|r| seal::open_text(ring, Place::key(Column::Request, key), r))
                .transpose()?,
            fingerprint: seal::open(
                ring,
                Place::key(Column::Fingerprint, key),
                DB::bytes(&row, 3)?,
            )?,
        })
    })
    .transpose()
}

/// Renews `attempt`'s lease until `locked_until_ms`; `false` when the attempt was fenced
/// out.
pub async fn renew<DB: Backend>(
    conn: &mut DB::Connection,
    key: KeyRef<'_>,
    attempt: Fence,
    locked_until_ms: i64,
) -> Result<bool, sqlx::Error> {
    let args = Arg::around_key(&[Arg::Int(locked_until_ms)], key, &fence_args(attempt));
    Ok(DB::execute(conn, DB::SQL.staged.renew, &args).await? == 1)
}

/// Records `step` as the recovery point with the whole `journal` (a JSON object), and
/// renews the lease; `false` when the attempt was fenced out.
pub async fn journal<DB: Backend>(
    conn: &mut DB::Connection,
    key: KeyRef<'_>,
    attempt: Fence,
    step: &str,
    journal: &str,
    locked_until_ms: i64,
    ring: Option<&Keyring>,
) -> Result<bool, sqlx::Error> {
    let journal = seal::seal_text(ring, Place::key(Column::Journal, key), journal);
    let set = [
        Arg::Text(step),
        Arg::Text(&journal),
        Arg::Int(locked_until_ms),
    ];
    let args = Arg::around_key(&set, key, &fence_args(attempt));
    Ok(DB::execute(conn, DB::SQL.staged.step, &args).await? == 1)
}

/// Completes the key with `ending`'s response, `completed_at` and `expires_at`; `false`
/// when the attempt was fenced out.
pub async fn finish<DB: Backend>(
    conn: &mut DB::Connection,
    key: KeyRef<'_>,
    attempt: Fence,
    ending: Ending<'_>,
    ring: Option<&Keyring>,
) -> Result<bool, sqlx::Error> {
    let (headers, body) = seal::seal_response(ring, key, ending.headers_json, ending.body);
    let set = [
        Arg::Int32(i32::from(ending.status)),
        Arg::Text(&headers),
        Arg::Bytes(&body),
        Arg::Int(ending.completed_ms),
        Arg::Int(ending.expires_ms),
    ];
    let args = Arg::around_key(&set, key, &fence_args(attempt));
    Ok(DB::execute(conn, DB::SQL.staged.finish, &args).await? == 1)
}

/// Ends `attempt`'s lease at `now_ms`, leaving the key `processing` for the next retry or
/// the reconciler to take over; `false` when the attempt was fenced out.
pub async fn release<DB: Backend>(
    conn: &mut DB::Connection,
    key: KeyRef<'_>,
    attempt: Fence,
    now_ms: i64,
) -> Result<bool, sqlx::Error> {
    let args = Arg::around_key(&[Arg::Int(now_ms)], key, &fence_args(attempt));
    Ok(DB::execute(conn, DB::SQL.staged.give_back, &args).await? == 1)
}

/// Whether staged mode's holds exist on `DB` ([`hold`] proves an attempt's owner alive).
#[must_use]
pub fn holds<DB: Backend>() -> bool {
    DB::SQL.staged.hold.is_some()
}

/// Takes the hold of `key`'s attempt number `attempt` for the attempt about to run with
/// that number: `false` when another session holds it. A connection holds one attempt at
/// a time: this first lets go of every hold the connection had (in the same round trip),
/// so a connection back in its pool keeps its last hold only until its next use. A hold
/// lasts until then, [`let_go`], or the end of the connection, however its process
/// died. An attempt that holds its number from before its reservation or takeover until
/// after its last write proves, while its connection lives, that it runs. The hold's
/// advisory lock ([`hold_id`](crate::Backend::hold_id)) is never the key's transaction lock, and each
/// attempt's its own, so a takeover never waits for the attempt it replaces.
pub async fn hold<DB: Backend>(
    conn: &mut DB::Connection,
    namespace: &str,
    key: KeyRef<'_>,
    attempt: Fence,
) -> Result<bool, sqlx::Error> {
    on_hold::<DB>(conn, DB::SQL.staged.hold, true, namespace, key, attempt).await
}

/// [`reserve`] and [`hold`] of attempt 1, in one round trip: the
/// key is reserved only if its hold is taken. Answers (held, reserved); (`true`,
/// `false`): the key has a row already, and this connection holds attempt 1 for nothing
/// until its next hold or probe. `reservation.replace_expired` must be `false` (a
/// replaced row's attempt number goes on counting: hold it once it is known). Where the
/// backend has no holds, this is [`reserve`], held.
pub async fn reserve_held<DB: Backend>(
    conn: &mut DB::Connection,
    namespace: &str,
    r: Reservation<'_>,
    ring: Option<&Keyring>,
) -> Result<(bool, bool), sqlx::Error> {
    debug_assert!(!r.replace_expired, "reserve_held never replaces");
    let Some(statement) = DB::SQL.staged.reserve_held else {
        return Ok((true, reserve::<DB>(conn, r, ring).await?));
    };
    let sealed = SealedReservation::new(ring, &r);
    let r = sealed.reservation(r);
    let mut rest = reservation_args(&r).to_vec();
    let first = Fence {
        reservation: r.id,
        attempt: 1,
    };
    rest.push(Arg::Int(DB::hold_id(namespace, r.key, first)));
    let args = Arg::on_key(r.key, &rest);
    let row = DB::fetch_optional(conn, statement, &args).await?;
    let row = row.ok_or(sqlx::Error::RowNotFound)?;
    Ok((DB::flag(&row, 0)?, DB::int(&row, 1)? == 1))
}

/// Ends the hold [`hold`] took on this connection; `false` when it held
/// nothing.
pub async fn let_go<DB: Backend>(
    conn: &mut DB::Connection,
    namespace: &str,
    key: KeyRef<'_>,
    attempt: Fence,
) -> Result<bool, sqlx::Error> {
    on_hold::<DB>(conn, DB::SQL.staged.let_go, true, namespace, key, attempt).await
}

/// Whether the owner of `key`'s attempt `attempt` is provably gone: nobody holds it
/// (taken and let go again in one statement, after letting go of every hold this
/// connection had, so the probe holds nothing after). Only meaningful for an attempt
/// whose row is `processing` with that number, which its owner held before the row said
/// so.
pub async fn owner_gone<DB: Backend>(
    conn: &mut DB::Connection,
    namespace: &str,
    key: KeyRef<'_>,
    attempt: Fence,
) -> Result<bool, sqlx::Error> {
    on_hold::<DB>(
        conn,
        DB::SQL.staged.owner_gone,
        false,
        namespace,
        key,
        attempt,
    )
    .await
}

/// Up to `limit` `processing` keys of `operation` whose lease had run out by `now_ms`
/// and whose attempt is below `below_attempt`, the longest stuck first.
pub async fn stuck<DB: Backend>(
    conn: &mut DB::Connection,
    operation: &str,
    now_ms: i64,
    below_attempt: i64,
    limit: i64,
) -> Result<Vec<StuckKey>, sqlx::Error> {
    let args = [
        Arg::Text(operation),
        Arg::Text(operation),
        Arg::Int(now_ms),
        Arg::Int(below_attempt),
        Arg::Int(limit),
    ];
    let rows = DB::fetch_all(conn, DB::SQL.staged.stuck, &args).await?;
    rows.iter()
        .map(|row| {
            Ok(StuckKey {
                scope: DB::text(row, 0)?,
                operation: DB::text(row, 1)?,
                key: DB::text(row, 2)?,
                fence: Fence {
                    attempt: DB::int(row, 3)?,
                    reservation: DB::opt_int(row, 4)?.unwrap_or(0),
                },
            })
        })
        .collect()
}

/// A reservation's sealed columns, as [`SealedRow`].
struct SealedReservation<'v> {
    fingerprint: Cow<'v, [u8]>,
    request: Cow<'v, str>,
    field_digests: Option<Cow<'v, [u8]>>,
}

impl<'v> SealedReservation<'v> {
    fn new(ring: Option<&Keyring>, r: &Reservation<'v>) -> Self {
        let place = |column| Place::key(column, r.key);
        Self {
            fingerprint: seal::seal(ring, place(Column::Fingerprint), r.fingerprint),
            request: seal::seal_text(ring, place(Column::Request), r.request),
            field_digests: (r.field_digests)
                .map(|digests| seal::seal(ring, place(Column::FieldDigests), digests)),
        }
    }

    fn reservation<'r>(&'r self, r: Reservation<'r>) -> Reservation<'r> {
        Reservation {
            fingerprint: &self.fingerprint,
            request: &self.request,
            field_digests: self.field_digests.as_deref(),
            ..r
        }
    }
}

/// A reservation's parameters after the key's: `$4` to `$10`.
fn reservation_args<'a>(r: &Reservation<'a>) -> [Arg<'a>; 7] {
    [
        Arg::Bytes(r.fingerprint),
        Arg::Text(r.request),
        Arg::Int(r.created_ms),
        Arg::Int(r.expires_ms),
        Arg::Int(r.locked_until_ms),
        Arg::Int(r.id),
        Arg::OptBytes(r.field_digests),
    ]
}

/// A fenced write's last parameters: `reservation = ? AND attempt = ?`.
fn fence_args<'a>(fence: Fence) -> [Arg<'a>; 2] {
    [Arg::Int(fence.reservation), Arg::Int(fence.attempt)]
}

/// Runs `statement` on the hold of `key`'s attempt `attempt` (its one parameter), answering
/// its one boolean; `without` where the backend has no such statement (no holds).
async fn on_hold<DB: Backend>(
    conn: &mut DB::Connection,
    statement: Option<&str>,
    without: bool,
    namespace: &str,
    key: KeyRef<'_>,
    attempt: Fence,
) -> Result<bool, sqlx::Error> {
    let Some(statement) = statement else {
        return Ok(without);
    };
    let id = [Arg::Int(DB::hold_id(namespace, key, attempt))];
    let row = DB::fetch_optional(conn, statement, &id).await?;
    row.map_or(Ok(false), |row| DB::flag(&row, 0))
}
