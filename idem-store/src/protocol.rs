//! The vocabulary of the protocol's primitives ([`crate::Backend`]): the key an execution
//! locks, what beginning found, the row it inserts, how an error bears on the protocol, and
//! the settings of idem's transactions.

use std::borrow::Cow;
use std::time::Duration;

use sqlx::{Database, Transaction};

use crate::backend::Backend;
use crate::glue::Arg;
use crate::key::KeyRef;
use crate::row::{StoredKey, StoredResponse, StoredStatus};
use crate::seal::{self, Column, Keyring, Place, SealError};
use crate::sql::{ROLLBACK_TO_SAVEPOINT, SAVEPOINT};
use crate::staged::Fence;

/// The key an execution locks while it runs ([`crate::Backend::begin`]).
#[derive(Debug, Clone, Copy)]
pub struct KeyLock<'a> {
    /// [`namespace`](crate::connect::namespace).
    pub namespace: &'a str,
    /// The key.
    pub key: KeyRef<'a>,
    /// Once the lock is held the key must still have no row, or (`Some(t)`, an execution
    /// replacing an expired row) no row unexpired at `t`, milliseconds since the Unix epoch;
    /// otherwise [`crate::Backend::begin`] answers [`Begun::Taken`].
    pub expired_by_ms: Option<i64>,
}

/// What [`crate::Backend::begin`] found.
#[derive(Debug)]
pub enum Begun<'c, DB: Database> {
    /// The transaction, holding the key's lock, the key still free.
    Free(Transaction<'c, DB>),
    /// The key's row appeared while the lock was awaited (another execution committed): the
    /// transaction was rolled back, nothing ran, and the connection is usable. Look the key
    /// up again: its row is the answer.
    Taken,
}

impl<'c, DB: Database> Begun<'c, DB> {
    /// The transaction, if the key was free.
    #[must_use]
    pub fn free(self) -> Option<Transaction<'c, DB>> {
        match self {
            Self::Free(tx) => Some(tx),
            Self::Taken => None,
        }
    }
}

/// A completed key row, as [`insert_completed`] and
/// [`insert_completed_and_commit`] write it: the response borrowed in its
/// columns' form, so that storing it copies nothing.
#[derive(Debug, Clone, Copy)]
pub struct NewRow<'a> {
    /// The key.
    pub key: KeyRef<'a>,
    /// The request's fingerprint (SHA-256, 32 bytes).
    pub fingerprint: &'a [u8],
    /// `response_status`.
    pub status: u16,
    /// `response_headers` ([`crate::StoredResponse::encode_headers`]).
    pub headers_json: &'a str,
    /// `response_body`.
    pub body: &'a [u8],
    /// When the execution began (`created_at`).
    pub created_ms: i64,
    /// When the response was stored (`completed_at`).
    pub completed_ms: i64,
    /// When the key expires (`expires_at`).
    pub expires_ms: i64,
    /// The request's field digests (`field_digests`), if kept.
    pub field_digests: Option<&'a [u8]>,
    /// Overwrite a row that had expired by `created_ms` (an operation that runs expired keys
    /// again). Only [`insert_completed`] does.
    pub replace_expired: bool,
}

/// How a database error bears on the protocol ([`crate::Backend::classify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Failure {
    /// A lock wait or a statement ran out of time, as in [`crate::StoreError::LockTimeout`]:
    /// the key's lock or another ([`crate::Backend::key_lock_taken`] tells which). The
    /// statement failed: nothing it was part of committed.
    LockTimeout,
    /// [`crate::Backend::begin`] found the key's row once it held the lock, and failed
    /// (PostgreSQL's `IK001`, [the key's lock](crate#the-keys-lock); the other stores answer
    /// [`Begun::Taken`]): after [`crate::Backend::abandon_begin`], look the key up again.
    Taken,
    /// The connection is gone or unusable (an I/O or protocol error, PostgreSQL's class `08`,
    /// `57P01`–`57P03`, the server shutting down, and `25P03`/`25P04`, the server ending a
    /// session idle in a transaction or past `transaction_timeout`): whatever was under way
    /// has an unknown outcome, and a pooled connection found so was stale.
    Disconnected,
    /// Anything else: the database refused the statement (it failed, nothing it was part of
    /// committed), or the error is not the database's.
    Other,
}

/// Settings [`connect`](crate::connect::connect) and [`crate::Backend::begin`] apply.
#[derive(Debug, Clone)]
pub struct TxSettings {
    /// How long a transaction waits for a lock (the key's, or any other): PostgreSQL
    /// `lock_timeout`, SQLite `busy_timeout`.
    pub lock_timeout: Duration,
    /// PostgreSQL `statement_timeout` inside idempotent transactions.
    pub statement_timeout: Duration,
    /// How long a caller of a pool [`connect`](crate::connect::connect) opens waits for a connection
    /// (sqlx's `acquire_timeout`): a database that is down fails fast for the application's
    /// queries on the pool too.
    pub acquire_timeout: Duration,
}

/// Whether `error` says the connection itself failed (I/O, protocol, TLS, a closed pool or
/// a crashed worker), before any database-specific code is looked at.
pub(crate) fn is_connection_error(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
    )
}

/// How long a pooled connection may sit idle before it is pinged on its next use, on
/// PostgreSQL, where a restart leaves the pool's connections dead
/// ([`connect`](crate::connect::connect); the runtime's request-path connections too).
pub const IDLE_PING_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Reads the columns of `key`'s row a request needs: one `SELECT` by primary key. Its
/// sealed columns are opened with `ring` ([sealed at rest](crate#storage-sealed-at-rest)); where they do not open,
/// [`StoredKey::unopened`] says why.
pub async fn lookup<DB: Backend>(
    conn: &mut DB::Connection,
    key: KeyRef<'_>,
    ring: Option<&Keyring>,
) -> Result<Option<StoredKey>, sqlx::Error> {
    let row = DB::fetch_optional(conn, DB::SQL.keys.lookup, &Arg::key(key)).await?;
    let Some(row) = row else { return Ok(None) };
    let status = StoredStatus::from_column(&DB::text(&row, 1)?);
    let opened = async {
        let place = Place::key(Column::Fingerprint, key);
        let fingerprint = seal::open(ring, place, DB::bytes(&row, 0)?)?;
        let response = match DB::opt_int32(&row, 2)? {
            Some(code) if status == StoredStatus::Completed => {
                let headers = DB::opt_text(&row, 3)?;
                let body = DB::opt_bytes(&row, 4)?;
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
        expires_at_ms: DB::int(&row, 5)?,
        locked_until_ms: DB::opt_int(&row, 6)?,
        fence: Fence {
            attempt: DB::int(&row, 7)?,
            // NULL: an atomic row.
            reservation: DB::opt_int(&row, 8)?.unwrap_or(0),
        },
        unopened,
    }))
}

/// `SAVEPOINT idem_handler`: separates the application's writes from the key row, for a
/// failure that is stored while its writes are undone.
pub async fn savepoint<DB: Backend>(tx: &mut Transaction<'_, DB>) -> Result<(), sqlx::Error> {
    async move { DB::execute(tx, SAVEPOINT, &[]).await.map(drop) }.await
}

/// `ROLLBACK TO SAVEPOINT idem_handler`: undoes the application's writes since
/// [`savepoint`], keeping the transaction (and the key's lock).
pub async fn rollback_to_savepoint<DB: Backend>(
    tx: &mut Transaction<'_, DB>,
) -> Result<(), sqlx::Error> {
    DB::execute(tx, ROLLBACK_TO_SAVEPOINT, &[]).await.map(drop)
}

/// Inserts the completed key row with its response, in `tx`. Returns `false`, changing
/// nothing, when the row exists already (and, with [`NewRow::replace_expired`], had not
/// expired by [`NewRow::created_ms`]): another execution of the key committed first.
pub async fn insert_completed<DB: Backend>(
    tx: &mut Transaction<'_, DB>,
    row: NewRow<'_>,
    ring: Option<&Keyring>,
) -> Result<bool, sqlx::Error> {
    let sealed = SealedRow::new(ring, &row);
    insert_row::<DB>(tx, sealed.row(row)).await
}

/// The field digests of `key`'s row: `None` when it has none (written before them, or
/// without them) or no row.
pub async fn field_digests<DB: Backend>(
    conn: &mut DB::Connection,
    key: KeyRef<'_>,
    ring: Option<&Keyring>,
) -> Result<Option<Vec<u8>>, sqlx::Error> {
    let row = DB::fetch_optional(conn, DB::SQL.keys.field_digests, &Arg::key(key)).await?;
    let Some(digests) = row.map(|row| DB::opt_bytes(&row, 0)).transpose()?.flatten() else {
        return Ok(None);
    };
    let place = Place::key(Column::FieldDigests, key);
    Ok(Some(seal::open(ring, place, digests)?))
}

/// Inserts the completed key row and commits ([in one round trip on
/// PostgreSQL](crate#postgresql-the-record-and-its-commit-in-one-round-trip)), ignoring
/// [`NewRow::replace_expired`]. Returns `false`, rolled back, when the key's row exists
/// already. An error leaves the outcome unknown only if [`classify`](crate::Backend::classify) does not call it
/// [`Failure::Other`] or [`Failure::LockTimeout`] of a database error: the database
/// refused a statement, and nothing committed.
pub async fn insert_completed_and_commit<DB: Backend>(
    mut tx: Transaction<'_, DB>,
    row: NewRow<'_>,
    ring: Option<&Keyring>,
) -> Result<bool, sqlx::Error> {
    let sealed = SealedRow::new(ring, &row);
    let row = sealed.row(row);
    let Some(batch) = DB::insert_and_commit(&row) else {
        // Documented as ignored: see `insert_completed`.
        let row = NewRow {
            replace_expired: false,
            ..row
        };
        if !insert_row::<DB>(&mut tx, row).await? {
            return Ok(false);
        }
        tx.commit().await?;
        return Ok(true);
    };
    match DB::batch(&mut tx, &batch).await {
        // Dropping `tx` rolls back the empty transaction the trailing `BEGIN` opened.
        Ok(()) => Ok(true),
        // The key's row exists: the `COMMIT` was skipped; dropping `tx` rolls back.
        Err(error) if DB::is_duplicate(&error) => Ok(false),
        Err(error) => Err(error),
    }
}

/// A new row's sealed columns ([sealed at rest](crate#storage-sealed-at-rest)), kept while the row borrows them.
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

/// [`insert_completed`] of a row whose columns are sealed already.
async fn insert_row<DB: Backend>(
    tx: &mut Transaction<'_, DB>,
    row: NewRow<'_>,
) -> Result<bool, sqlx::Error> {
    let sql = DB::SQL;
    let statement = match (sql.staged.clear_expired, row.replace_expired) {
        (_, false) => sql.keys.insert_completed,
        (None, true) => sql.keys.insert_completed_or_replace_expired,
        // The expired row deleted first, where the insert cannot replace it.
        (Some(clear), true) => {
            let args = Arg::on_key(row.key, &[Arg::Int(row.created_ms)]);
            DB::execute(tx, clear, &args).await?;
            sql.keys.insert_completed
        }
    };
    match DB::execute(tx, statement, &new_row_args(&row)).await {
        Ok(inserted) => Ok(inserted == 1),
        Err(error) if DB::is_duplicate(&error) => Ok(false),
        Err(error) => Err(error),
    }
}

/// [`KeySql::insert_completed`]'s parameters.
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
