//! [`Backend`]: the protocol's primitives, on every database idem keeps keys in.

use std::borrow::Cow;
use std::future::Future;

use sqlx::{Database, Pool, Transaction};

use sqlx::Connection;
use sqlx::pool::PoolOptions;

use crate::glue::{Arg, Glue, Wire, like_prefix};
use crate::key::KeyRef;
use crate::migration::Migration;
use crate::protocol::{Begun, Failure, KeyLock, NewRow, TxSettings};
use crate::row::{StoredKey, StoredResponse, StoredStatus};
use crate::seal::{self, Column, Keyring, Place, SealError};
use crate::sql::Sql;
use crate::sql::{ROLLBACK_TO_SAVEPOINT, SAVEPOINT};
use crate::staged::{Ending, Fence, Lease, Reservation, StuckKey};

/// A database idem keeps keys in, one of [the stores](crate#stores); the bound of
/// [`crate::KeyTable`], [`crate::Outbox`] and [`crate::migrate()`]. Sealed
/// ([the conformance kit](crate#the-conformance-kit)).
///
/// Its methods are the primitives of the execution protocol, which `idem-runtime` composes
/// (look the key up; begin a transaction holding the key's lock; the application's work;
/// insert the completed row and commit): the runtime's, hidden from these docs and changed
/// between versions at will ([the stores](crate#stores)). They return [`sqlx::Error`]: the
/// runtime keeps the raw error, and what it means depends on the step (a failed `COMMIT`
/// leaves the outcome unknown). Each store implements what differs (its statements, its
/// lock, its errors); the protocol's primitives are written once, as provided methods.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a database idem can keep keys in",
    note = "idem stores keys in `sqlx::Postgres`, `sqlx::MySql` or `sqlx::Sqlite`, each with the feature of its name (`postgres`, `mysql`, `sqlite`)"
)]
pub trait Backend: Glue + sealed::Sealed {
    #[doc(hidden)]
    /// The migrations that create and evolve the key table, in order
    /// ([`crate::migrate`] applies them).
    fn migrations() -> &'static [Migration];

    #[doc(hidden)]
    /// Every statement, as this database is sent it.
    const SQL: Sql;

    #[doc(hidden)]
    /// Whether parameters are `?`, taken in order, rather than `$1`, `$2`, …: MySQL's.
    const POSITIONAL: bool = false;

    #[doc(hidden)]
    /// Whether an execution may take the key's lock before looking the key up, saving the
    /// lookup's round trip when the key is new (PostgreSQL and MySQL:
    /// [the key's lock](crate#the-keys-lock)).
    const LOCK_FIRST: bool = false;

    #[doc(hidden)]
    /// With [`Self::LOCK_FIRST`], how many round trips more than the lookup alone a key that
    /// exists costs when the lock came first (the lock's round trips, its `ROLLBACK`, then
    /// the lookup), against the one a new key saves: how much an existing key weighs in the
    /// runtime's choice. PostgreSQL's `BEGIN` and lock are one round trip: 2.
    const LOCK_FIRST_MISS: i8 = 2;

    #[doc(hidden)]
    /// Whether `INSERT`, `UPDATE` and `DELETE` take `RETURNING`. Where they do not (MySQL),
    /// the generic code reads the rows again.
    const RETURNING: bool = true;

    #[doc(hidden)]
    /// The connection options of `url` with the protocol's settings (see
    /// [`Self::connect`]).
    fn connect_options(
        url: &str,
        settings: &TxSettings,
    ) -> Result<<Self::Connection as Connection>::Options, sqlx::Error>;

    #[doc(hidden)]
    /// The pool's options beyond its size and acquire timeout.
    fn pool_options(options: PoolOptions<Self>) -> PoolOptions<Self> {
        options
    }

    #[doc(hidden)]
    /// [`Sql::namespace`]: ask once per process and pass it in every [`KeyLock`].
    fn namespace(
        conn: &mut <Self as Database>::Connection,
    ) -> impl Future<Output = Result<String, sqlx::Error>> + Send {
        async move {
            let Some(sql) = Self::SQL.namespace else {
                return Ok(String::new());
            };
            let row = Self::fetch_optional(conn, sql, &[]).await?;
            let name = row.map(|row| Self::opt_text(&row, 0)).transpose()?;
            Ok(name.flatten().unwrap_or_default())
        }
    }

    #[doc(hidden)]
    /// Begins a transaction on `conn`; with `lock`, holding [the key's lock](crate#the-keys-lock)
    /// from its first round trip on (a duplicate waits there, at most
    /// [`TxSettings::lock_timeout`]): [`Begun::Taken`] (on PostgreSQL [`Failure::Taken`]) when
    /// the key's row is there once it holds it ([`KeyLock::expired_by_ms`]).
    fn begin<'c>(
        conn: &'c mut <Self as Database>::Connection,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> impl Future<Output = Result<Begun<'c, Self>, sqlx::Error>> + Send;

    #[doc(hidden)]
    /// The statement that begins a transaction without a key's lock, with the timeouts of
    /// `settings` where the store sets them per transaction, for [`sqlx::Pool::begin_with`].
    fn begin_statement(settings: &TxSettings) -> String;

    #[doc(hidden)]
    /// Puts `conn` back in a usable state after [`Self::begin`] failed (on PostgreSQL, an
    /// aborted transaction sqlx does not know about). Never fails: a connection this cannot
    /// repair is broken, and its next use says so.
    fn abandon_begin(conn: &mut <Self as Database>::Connection) -> impl Future<Output = ()> + Send {
        let _ = conn;
        async {}
    }

    #[doc(hidden)]
    /// The completed row's `INSERT` and `COMMIT` as one batch, where that saves round trips
    /// ([PostgreSQL](crate#postgresql-the-record-and-its-commit-in-one-round-trip)); `None`: a
    /// bound `INSERT`, then `COMMIT`.
    fn insert_and_commit(row: &NewRow<'_>) -> Option<String> {
        let _ = row;
        None
    }

    #[doc(hidden)]
    /// Whether `error` is the key table's primary key refusing the batch of
    /// [`Self::insert_and_commit`]: another execution's row.
    fn is_key_taken(error: &sqlx::Error) -> bool {
        let _ = error;
        false
    }

    #[doc(hidden)]
    /// Whether `error` is a unique key refusing a row: where inserts have no
    /// `ON CONFLICT … DO NOTHING` (MySQL), the generic code takes it for "exists already".
    fn is_duplicate(error: &sqlx::Error) -> bool {
        let _ = error;
        false
    }

    #[doc(hidden)]
    /// What a database error means for the protocol ([`Failure`]).
    fn classify(error: &sqlx::Error) -> Failure;

    #[doc(hidden)]
    /// After [`Self::begin`] failed with [`Failure::LockTimeout`] (and
    /// [`Self::abandon_begin`]): whether the wait was for a duplicate holding the key's lock
    /// ([`Sql::key_lock_taken`]) rather than for a lock of something else; `false` if unknown.
    fn key_lock_taken(
        conn: &mut <Self as Database>::Connection,
        lock: KeyLock<'_>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        let _ = (conn, lock);
        async { Ok(false) }
    }

    #[doc(hidden)]
    /// A listing's condition on keys starting with `prefix`, with a `$n` for `pattern`: the
    /// condition's text before and after the parameter, and the pattern bound to it. `LIKE`
    /// is case-sensitive on PostgreSQL, and on MySQL through the key's binary collation.
    fn key_prefix(prefix: &str) -> (&'static str, &'static str, String) {
        (
            " AND idempotency_key LIKE ",
            " ESCAPE '!'",
            like_prefix(prefix),
        )
    }

    #[doc(hidden)]
    /// Takes [`Sql::lock_migrations`] on `conn`, for the session, where the database has it.
    fn lock_migrations(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        execute_if::<Self>(conn, Self::SQL.lock_migrations)
    }

    #[doc(hidden)]
    /// Lets go of [`Self::lock_migrations`]'s lock.
    fn unlock_migrations(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        execute_if::<Self>(conn, Self::SQL.unlock_migrations)
    }

    #[doc(hidden)]
    /// The key table's size on disk with its indexes, where the database can tell (SQLite:
    /// where it was built with `dbstat`).
    fn table_bytes(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<Option<i64>, sqlx::Error>> + Send {
        async move {
            match Self::fetch_optional(conn, Self::SQL.table_bytes, &[]).await {
                Ok(row) => Ok(row.map(|row| Self::opt_int(&row, 0)).transpose()?.flatten()),
                Err(sqlx::Error::Database(e)) if e.message().contains("no such table") => Ok(None),
                Err(error) => Err(error),
            }
        }
    }

    #[doc(hidden)]
    /// The advisory lock id of `key`'s attempt `fence`, where staged mode's holds exist
    /// ([`Sql::hold`]). Default: no holds, never asked.
    fn hold_id(namespace: &str, key: KeyRef<'_>, fence: Fence) -> i64 {
        let _ = (namespace, key, fence);
        0
    }

    #[doc(hidden)]
    /// Opens a pool on `url` with the store's [`Self::connect_options`] and
    /// [`Self::pool_options`] ([`Self::open`]). Connections are pinged before use only on PostgreSQL, after
    /// [`crate::IDLE_PING_AFTER`] idle.
    fn connect(
        url: &str,
        max_connections: u32,
        settings: &TxSettings,
    ) -> impl Future<Output = Result<Pool<Self>, sqlx::Error>> + Send {
        async move {
            let pool = PoolOptions::<Self>::new()
                .max_connections(max_connections)
                .acquire_timeout(settings.acquire_timeout)
                // A dead connection fails its query (answered 503, retry with the same key; the
                // runtime retries a read-only lookup) instead of costing every request a ping.
                .test_before_acquire(false);
            Self::open(url, Self::pool_options(pool), settings).await
        }
    }

    #[doc(hidden)]
    /// Opens a pool with `options` on `url`'s [`Self::connect_options`]; on PostgreSQL, on a
    /// [host list](crate::hosts) when `url` is one.
    fn open(
        url: &str,
        options: PoolOptions<Self>,
        settings: &TxSettings,
    ) -> impl Future<Output = Result<Pool<Self>, sqlx::Error>> + Send {
        async move {
            options
                .connect_with(Self::connect_options(url, settings)?)
                .await
        }
    }

    #[doc(hidden)]
    /// Whether two connections of `pool`, open at once, met the same server session
    /// ([`Sql::session_id`], asked one after the other outside a transaction): `true` proves
    /// a transaction pooler in between; `false` proves nothing.
    fn shared_sessions(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        async move {
            let Some(sql) = Self::SQL.session_id else {
                return Ok(false);
            };
            if pool.options().get_max_connections() < 2 {
                return Ok(false);
            }
            let (mut first, mut second) = (pool.acquire().await?, pool.acquire().await?);
            let mut ids = Vec::with_capacity(2);
            for conn in [&mut *first, &mut *second] {
                // As a simple query: a prepared one could meet another client's statement names.
                let row = Self::fetch_optional_on(Wire::Literal, conn, sql, &[]).await?;
                ids.push(row.map(|row| Self::int(&row, 0)).transpose()?);
            }
            Ok(ids[0].is_some() && ids[0] == ids[1])
        }
    }

    #[doc(hidden)]
    /// Reads the columns of `key`'s row a request needs: one `SELECT` by primary key. Its
    /// sealed columns are opened with `ring` ([`crate::seal`]); where they do not open,
    /// [`StoredKey::unopened`] says why.
    fn lookup(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        ring: Option<&Keyring>,
    ) -> impl Future<Output = Result<Option<StoredKey>, sqlx::Error>> + Send {
        async move {
            let row = Self::fetch_optional(conn, Self::SQL.lookup, &Arg::key(key)).await?;
            let Some(row) = row else { return Ok(None) };
            let status = StoredStatus::from_column(&Self::text(&row, 1)?);
            let opened = async {
                let place = Place::key(Column::Fingerprint, key);
                let fingerprint = seal::open(ring, place, Self::bytes(&row, 0)?)?;
                let response = match Self::opt_int32(&row, 2)? {
                    Some(code) if status == StoredStatus::Completed => {
                        let headers = Self::opt_text(&row, 3)?;
                        let body = Self::opt_bytes(&row, 4)?;
                        let (headers, body) = seal::open_response(ring, key, headers, body)?;
                        Some(StoredResponse::strict(code, headers.as_deref(), body)?)
                    }
                    _ => None,
                };
                Ok::<_, sqlx::Error>((fingerprint, response))
            };
            let (fingerprint, response, unopened) = match opened.await {
                Ok((fingerprint, response)) => (fingerprint, response, None),
                Err(sqlx::Error::Decode(error)) if error.is::<SealError>() => {
                    let error = error.downcast::<SealError>().map_err(sqlx::Error::Decode)?;
                    (Vec::new(), None, Some(*error))
                }
                Err(error) => return Err(error),
            };
            Ok(Some(StoredKey {
                fingerprint,
                status,
                response,
                expires_at_ms: Self::int(&row, 5)?,
                locked_until_ms: Self::opt_int(&row, 6)?,
                fence: Fence {
                    attempt: Self::int(&row, 7)?,
                    // NULL: an atomic row.
                    reservation: Self::opt_int(&row, 8)?.unwrap_or(0),
                },
                unopened,
            }))
        }
    }

    #[doc(hidden)]
    /// `SAVEPOINT idem_handler`: separates the application's writes from the key row, for a
    /// failure that is stored while its writes are undone.
    fn savepoint(
        tx: &mut Transaction<'_, Self>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        async move { Self::execute(tx, SAVEPOINT, &[]).await.map(drop) }
    }

    #[doc(hidden)]
    /// `ROLLBACK TO SAVEPOINT idem_handler`: undoes the application's writes since
    /// [`Self::savepoint`], keeping the transaction (and the key's lock).
    fn rollback_to_savepoint(
        tx: &mut Transaction<'_, Self>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        async move {
            Self::execute(tx, ROLLBACK_TO_SAVEPOINT, &[])
                .await
                .map(drop)
        }
    }

    #[doc(hidden)]
    /// Inserts the completed key row with its response, in `tx`. Returns `false`, changing
    /// nothing, when the row exists already (and, with [`NewRow::replace_expired`], had not
    /// expired by [`NewRow::created_ms`]): another execution of the key committed first.
    fn insert_completed(
        tx: &mut Transaction<'_, Self>,
        row: NewRow<'_>,
        ring: Option<&Keyring>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        async move {
            let sealed = SealedRow::new(ring, &row);
            insert_row::<Self>(tx, sealed.row(row)).await
        }
    }

    #[doc(hidden)]
    /// The field digests of `key`'s row: `None` when it has none (written before them, or
    /// without them) or no row.
    fn field_digests(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        ring: Option<&Keyring>,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, sqlx::Error>> + Send {
        async move {
            let row = Self::fetch_optional(conn, Self::SQL.field_digests, &Arg::key(key)).await?;
            let Some(digests) = row
                .map(|row| Self::opt_bytes(&row, 0))
                .transpose()?
                .flatten()
            else {
                return Ok(None);
            };
            let place = Place::key(Column::FieldDigests, key);
            Ok(Some(seal::open(ring, place, digests)?))
        }
    }

    #[doc(hidden)]
    /// Inserts the completed key row and commits ([in one round trip on
    /// PostgreSQL](crate#postgresql-the-record-and-its-commit-in-one-round-trip)), ignoring
    /// [`NewRow::replace_expired`]. Returns `false`, rolled back, when the key's row exists
    /// already. An error leaves the outcome unknown only if [`Self::classify`] does not call it
    /// [`Failure::Other`] or [`Failure::LockTimeout`] of a database error: the database
    /// refused a statement, and nothing committed.
    fn insert_completed_and_commit(
        mut tx: Transaction<'_, Self>,
        row: NewRow<'_>,
        ring: Option<&Keyring>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        async move {
            let sealed = SealedRow::new(ring, &row);
            let row = sealed.row(row);
            let Some(batch) = Self::insert_and_commit(&row) else {
                // Documented as ignored: see `insert_completed`.
                let row = NewRow {
                    replace_expired: false,
                    ..row
                };
                if !insert_row::<Self>(&mut tx, row).await? {
                    return Ok(false);
                }
                tx.commit().await?;
                return Ok(true);
            };
            match Self::batch(&mut tx, &batch).await {
                // Dropping `tx` rolls back the empty transaction the trailing `BEGIN` opened.
                Ok(()) => Ok(true),
                // The key's row exists: the `COMMIT` was skipped; dropping `tx` rolls back.
                Err(error) if Self::is_key_taken(&error) => Ok(false),
                Err(error) => Err(error),
            }
        }
    }

    // Staged mode: each runs on a connection, which may be a transaction's (`&mut *tx`):
    // `journal` and `finish` run in the transaction of the application's writes when a step
    // has any, so the step's writes and its recovery point commit together. Every write of an
    // attempt is fenced by its reservation and its number, its [`Fence`] (see
    // [`crate::staged`]).

    #[doc(hidden)]
    /// Inserts the key as `processing`, reservation `r.id`'s attempt 1, with its lease; `false` (nothing changed)
    /// when the key has a row already (but see [`Reservation::replace_expired`]).
    fn reserve(
        conn: &mut Self::Connection,
        r: Reservation<'_>,
        ring: Option<&Keyring>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        async move {
            let sealed = SealedReservation::new(ring, &r);
            let r = sealed.reservation(r);
            let sql = Self::SQL;
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
                        Arg::Int(r.id),
                        Arg::OptBytes(r.field_digests),
                    ];
                    let reopen_args = Arg::around_key(&set, r.key, &[Arg::Int(r.created_ms)]);
                    if Self::execute(conn, reopen, &reopen_args).await? == 1 {
                        return Ok(true);
                    }
                    sql.reserve_or_replace_expired
                }
            };
            match Self::execute(conn, statement, &args).await {
                Ok(reserved) => Ok(reserved == 1),
                Err(error) if Self::is_duplicate(&error) => Ok(false),
                Err(error) => Err(error),
            }
        }
    }

    #[doc(hidden)]
    /// Takes over a `processing` key whose lease had run out by `now_ms` and whose attempt is
    /// still `seen`: one more attempt of the same reservation, leased until
    /// `locked_until_ms`. `None` when the row is not in that state any more (another attempt
    /// took it, it completed, its lease was renewed, or it is another reservation's).
    fn take_over(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        seen: Fence,
        now_ms: i64,
        locked_until_ms: i64,
        ring: Option<&Keyring>,
    ) -> impl Future<Output = Result<Option<Lease>, sqlx::Error>> + Send {
        async move {
            let until = [Arg::Int(locked_until_ms)];
            let fence = fence_args(seen);
            let args = Arg::around_key(&until, key, &[fence[0], fence[1], Arg::Int(now_ms)]);
            let sql = Self::SQL;
            let row = if Self::RETURNING {
                Self::fetch_optional(conn, sql.take_over, &args).await?
            } else if Self::execute(conn, sql.take_over, &args).await? == 1 {
                // Read back under the lease just taken: no other attempt moves it on meanwhile.
                Self::fetch_optional(conn, sql.lease_of, &Arg::key(key)).await?
            } else {
                None
            };
            row.map(|row| {
                Ok(Lease {
                    fence: Fence {
                        reservation: seen.reservation,
                        attempt: Self::int(&row, 0)?,
                    },
                    journal: (Self::opt_text(&row, 1)?)
                        .map(|j| seal::open_text(ring, Place::key(Column::Journal, key), j))
                        .transpose()?,
                    request: (Self::opt_text(&row, 2)?)
                        .map(|r| seal::open_text(ring, Place::key(Column::Request, key), r))
                        .transpose()?,
                    fingerprint: seal::open(
                        ring,
                        Place::key(Column::Fingerprint, key),
                        Self::bytes(&row, 3)?,
                    )?,
                })
            })
            .transpose()
        }
    }

    #[doc(hidden)]
    /// Renews `attempt`'s lease until `locked_until_ms`; `false` when the attempt was fenced
    /// out.
    fn renew(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        attempt: Fence,
        locked_until_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        async move {
            let args = Arg::around_key(&[Arg::Int(locked_until_ms)], key, &fence_args(attempt));
            Ok(Self::execute(conn, Self::SQL.renew, &args).await? == 1)
        }
    }

    #[doc(hidden)]
    /// Records `step` as the recovery point with the whole `journal` (a JSON object), and
    /// renews the lease; `false` when the attempt was fenced out.
    fn journal(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        attempt: Fence,
        step: &str,
        journal: &str,
        locked_until_ms: i64,
        ring: Option<&Keyring>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        async move {
            let journal = seal::seal_text(ring, Place::key(Column::Journal, key), journal);
            let set = [
                Arg::Text(step),
                Arg::Text(&journal),
                Arg::Int(locked_until_ms),
            ];
            let args = Arg::around_key(&set, key, &fence_args(attempt));
            Ok(Self::execute(conn, Self::SQL.step, &args).await? == 1)
        }
    }

    #[doc(hidden)]
    /// Completes the key with `ending`'s response, `completed_at` and `expires_at`; `false`
    /// when the attempt was fenced out.
    fn finish(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        attempt: Fence,
        ending: Ending<'_>,
        ring: Option<&Keyring>,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        async move {
            let (headers, body) = seal::seal_response(ring, key, ending.headers_json, ending.body);
            let set = [
                Arg::Int32(i32::from(ending.status)),
                Arg::Text(&headers),
                Arg::Bytes(&body),
                Arg::Int(ending.completed_ms),
                Arg::Int(ending.expires_ms),
            ];
            let args = Arg::around_key(&set, key, &fence_args(attempt));
            Ok(Self::execute(conn, Self::SQL.finish, &args).await? == 1)
        }
    }

    #[doc(hidden)]
    /// Ends `attempt`'s lease at `now_ms`, leaving the key `processing` for the next retry or
    /// the reconciler to take over; `false` when the attempt was fenced out.
    fn release(
        conn: &mut Self::Connection,
        key: KeyRef<'_>,
        attempt: Fence,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        async move {
            let args = Arg::around_key(&[Arg::Int(now_ms)], key, &fence_args(attempt));
            Ok(Self::execute(conn, Self::SQL.give_back, &args).await? == 1)
        }
    }

    #[doc(hidden)]
    /// Whether [`Self::hold`] proves an attempt's owner alive (PostgreSQL: a session
    /// advisory lock, which the server ends with the session). Where it is `false`,
    /// `hold` and `let_go` take nothing and answer `true`, [`Self::owner_gone`] answers
    /// `false`, and only a lease that ran out tells that an attempt stopped.
    const HOLDS: bool = Self::SQL.hold.is_some();

    #[doc(hidden)]
    /// Takes the hold of `key`'s attempt number `attempt` for the attempt about to run with
    /// that number: `false` when another session holds it. A connection holds one attempt at
    /// a time: this first lets go of every hold the connection had (in the same round trip),
    /// so a connection back in its pool keeps its last hold only until its next use. A hold
    /// lasts until then, [`Self::let_go`], or the end of the connection, however its process
    /// died. An attempt that holds its number from before its reservation or takeover until
    /// after its last write proves, while its connection lives, that it runs. The hold's
    /// advisory lock ([`Self::hold_id`]) is never the key's transaction lock, and each
    /// attempt's its own, so a takeover never waits for the attempt it replaces.
    fn hold(
        conn: &mut Self::Connection,
        namespace: &str,
        key: KeyRef<'_>,
        attempt: Fence,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        on_hold::<Self>(conn, Self::SQL.hold, true, namespace, key, attempt)
    }

    #[doc(hidden)]
    /// [`Self::reserve`] and [`Self::hold`] of attempt 1, in one round trip: the
    /// key is reserved only if its hold is taken. Answers (held, reserved); (`true`,
    /// `false`): the key has a row already, and this connection holds attempt 1 for nothing
    /// until its next hold or probe. `reservation.replace_expired` must be `false` (a
    /// replaced row's attempt number goes on counting: hold it once it is known). Where the
    /// backend has no holds, this is [`Self::reserve`], held.
    fn reserve_held(
        conn: &mut Self::Connection,
        namespace: &str,
        r: Reservation<'_>,
        ring: Option<&Keyring>,
    ) -> impl Future<Output = Result<(bool, bool), sqlx::Error>> + Send {
        async move {
            debug_assert!(!r.replace_expired, "reserve_held never replaces");
            let Some(statement) = Self::SQL.reserve_held else {
                return Ok((true, Self::reserve(conn, r, ring).await?));
            };
            let sealed = SealedReservation::new(ring, &r);
            let r = sealed.reservation(r);
            let mut rest = reservation_args(&r).to_vec();
            let first = Fence {
                reservation: r.id,
                attempt: 1,
            };
            rest.push(Arg::Int(Self::hold_id(namespace, r.key, first)));
            let args = Arg::on_key(r.key, &rest);
            let row = Self::fetch_optional(conn, statement, &args).await?;
            let row = row.ok_or(sqlx::Error::RowNotFound)?;
            Ok((Self::flag(&row, 0)?, Self::int(&row, 1)? == 1))
        }
    }

    #[doc(hidden)]
    /// Ends the hold [`Self::hold`] took on this connection; `false` when it held
    /// nothing.
    fn let_go(
        conn: &mut Self::Connection,
        namespace: &str,
        key: KeyRef<'_>,
        attempt: Fence,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        on_hold::<Self>(conn, Self::SQL.let_go, true, namespace, key, attempt)
    }

    #[doc(hidden)]
    /// Whether the owner of `key`'s attempt `attempt` is provably gone: nobody holds it
    /// (taken and let go again in one statement, after letting go of every hold this
    /// connection had, so the probe holds nothing after). Only meaningful for an attempt
    /// whose row is `processing` with that number, which its owner held before the row said
    /// so.
    fn owner_gone(
        conn: &mut Self::Connection,
        namespace: &str,
        key: KeyRef<'_>,
        attempt: Fence,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send {
        on_hold::<Self>(conn, Self::SQL.owner_gone, false, namespace, key, attempt)
    }

    #[doc(hidden)]
    /// Up to `limit` `processing` keys of `operation` whose lease had run out by `now_ms`
    /// and whose attempt is below `below_attempt`, the longest stuck first.
    fn stuck(
        conn: &mut Self::Connection,
        operation: &str,
        now_ms: i64,
        below_attempt: i64,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<StuckKey>, sqlx::Error>> + Send {
        async move {
            let args = [
                Arg::Text(operation),
                Arg::Text(operation),
                Arg::Int(now_ms),
                Arg::Int(below_attempt),
                Arg::Int(limit),
            ];
            let rows = Self::fetch_all(conn, Self::SQL.stuck, &args).await?;
            rows.iter()
                .map(|row| {
                    Ok(StuckKey {
                        scope: Self::text(row, 0)?,
                        operation: Self::text(row, 1)?,
                        key: Self::text(row, 2)?,
                        fence: Fence {
                            attempt: Self::int(row, 3)?,
                            reservation: Self::opt_int(row, 4)?.unwrap_or(0),
                        },
                    })
                })
                .collect()
        }
    }
}

/// Seals [`Backend`]: the stores are this crate's.
mod sealed {
    pub trait Sealed {}
    #[cfg(feature = "postgres")]
    impl Sealed for sqlx::Postgres {}
    #[cfg(feature = "sqlite")]
    impl Sealed for sqlx::Sqlite {}
    #[cfg(feature = "mysql")]
    impl Sealed for sqlx::MySql {}
}

/// The end of a `begin` that holds the key's lock in a transaction (SQLite's write lock,
/// MySQL's lock row): the look again of [`KeyLock::expired_by_ms`] and [`Begun::Taken`].
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(crate) async fn look_again<'c, DB: Backend>(
    mut tx: Transaction<'c, DB>,
    lock: KeyLock<'_>,
) -> Result<Begun<'c, DB>, sqlx::Error> {
    let row = DB::fetch_optional(&mut tx, DB::SQL.expires_at, &Arg::key(lock.key)).await?;
    let expires = row.map(|row| DB::int(&row, 0)).transpose()?;
    match (expires, lock.expired_by_ms) {
        (None, _) => Ok(Begun::Free(tx)),
        (Some(expires), Some(by)) if expires <= by => Ok(Begun::Free(tx)),
        (Some(_), _) => {
            tx.rollback().await?;
            Ok(Begun::Taken)
        }
    }
}

/// `Transaction::begin` with [`Sql::begin_write`].
pub(crate) async fn begin_write<DB: Backend>(
    conn: &mut DB::Connection,
) -> Result<Transaction<'_, DB>, sqlx::Error> {
    Transaction::begin(conn, DB::SQL.begin_write.map(Into::into)).await
}

/// A new row's sealed columns ([`crate::seal`]), kept while the row borrows them.
struct SealedRow<'v> {
    fingerprint: Cow<'v, [u8]>,
    headers: Cow<'v, str>,
    body: Cow<'v, [u8]>,
    field_digests: Option<Cow<'v, [u8]>>,
}

impl<'v> SealedRow<'v> {
    /// `row`'s columns as written with `ring`: borrowed as they are without one.
    fn new(ring: Option<&Keyring>, row: &NewRow<'v>) -> Self {
        let (headers, body) = seal::seal_response(ring, row.key, row.headers_json, row.body);
        let place = |column| Place::key(column, row.key);
        Self {
            fingerprint: seal::seal(ring, place(Column::Fingerprint), row.fingerprint),
            headers,
            body,
            field_digests: (row.field_digests)
                .map(|digests| seal::seal(ring, place(Column::FieldDigests), digests)),
        }
    }

    /// `row` with these columns.
    fn row<'r>(&'r self, row: NewRow<'r>) -> NewRow<'r> {
        NewRow {
            fingerprint: &self.fingerprint,
            headers_json: &self.headers,
            body: &self.body,
            field_digests: self.field_digests.as_deref(),
            ..row
        }
    }
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

/// [`Backend::insert_completed`] of a row whose columns are sealed already.
async fn insert_row<DB: Backend>(
    tx: &mut Transaction<'_, DB>,
    row: NewRow<'_>,
) -> Result<bool, sqlx::Error> {
    let sql = DB::SQL;
    let statement = match (sql.clear_expired, row.replace_expired) {
        (_, false) => sql.insert_completed,
        (None, true) => sql.insert_completed_or_replace_expired,
        // The expired row deleted first, where the insert cannot replace it.
        (Some(clear), true) => {
            let args = Arg::on_key(row.key, &[Arg::Int(row.created_ms)]);
            DB::execute(tx, clear, &args).await?;
            sql.insert_completed
        }
    };
    match DB::execute(tx, statement, &new_row_args(&row)).await {
        Ok(inserted) => Ok(inserted == 1),
        Err(error) if DB::is_duplicate(&error) => Ok(false),
        Err(error) => Err(error),
    }
}

/// [`Sql::insert_completed`]'s parameters.
fn new_row_args<'a>(row: &NewRow<'a>) -> [Arg<'a>; 11] {
    [
        Arg::Text(row.key.scope),
        Arg::Text(row.key.operation),
        Arg::Text(row.key.key),
        Arg::Bytes(row.fingerprint),
        Arg::Int32(i32::from(row.status)),
        Arg::Text(row.headers_json),
        Arg::Bytes(row.body),
        Arg::Int(row.created_ms),
        Arg::Int(row.completed_ms),
        Arg::Int(row.expires_ms),
        Arg::OptBytes(row.field_digests),
    ]
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

/// Runs `statement`, if there is one.
async fn execute_if<DB: Backend>(
    conn: &mut DB::Connection,
    statement: Option<&str>,
) -> Result<(), sqlx::Error> {
    match statement {
        Some(statement) => DB::execute(conn, statement, &[]).await.map(drop),
        None => Ok(()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `sql/<store>.snap` (see [`crate::sql`]).
    fn record<DB: Backend>(store: &str) {
        insta::with_settings!({ snapshot_path => "../sql", prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!(store, DB::SQL.listing());
        });
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_statements() {
        record::<sqlx::Postgres>("postgres");
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_statements() {
        record::<sqlx::Sqlite>("sqlite");
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mysql_statements() {
        record::<sqlx::MySql>("mysql");
    }
}
