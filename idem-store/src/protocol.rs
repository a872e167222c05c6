//! The vocabulary of the protocol's primitives ([`crate::Backend`]): the key an execution
//! locks, what beginning found, the row it inserts, how an error bears on the protocol, and
//! the settings of idem's transactions.

use std::time::Duration;

use sqlx::{Database, Transaction};

use crate::key::KeyRef;

/// The key an execution locks while it runs ([`crate::Backend::begin`]).
#[derive(Debug, Clone, Copy)]
pub struct KeyLock<'a> {
    /// [`crate::Backend::namespace`].
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

/// A completed key row, as [`crate::Backend::insert_completed`] and
/// [`crate::Backend::insert_completed_and_commit`] write it: the response borrowed in its
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
    /// again). Only [`crate::Backend::insert_completed`] does.
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

/// Settings [`crate::Backend::connect`] and [`crate::Backend::begin`] apply.
#[derive(Debug, Clone)]
pub struct TxSettings {
    /// How long a transaction waits for a lock (the key's, or any other): PostgreSQL
    /// `lock_timeout`, SQLite `busy_timeout`.
    pub lock_timeout: Duration,
    /// PostgreSQL `statement_timeout` inside idempotent transactions.
    pub statement_timeout: Duration,
    /// How long a caller of a pool [`crate::Backend::connect`] opens waits for a connection
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
/// ([`crate::Backend::connect`]; the runtime's request-path connections too).
pub const IDLE_PING_AFTER: std::time::Duration = std::time::Duration::from_secs(1);
