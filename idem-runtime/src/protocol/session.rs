//! The session of one execution: its connection, and how it goes back.

use sqlx::Connection as _;

use super::Error;
use crate::connections::{self, Conn};
use crate::store::{Backend, Begun, Failure, KeyLock, TxSettings};

/// One of the request path's connections ([`crate::connections`]) in use by one
/// execution. How it goes back when the session is dropped:
///
/// - **as it is**, at once, after [`Session::finish`] with an outcome that is not a store
///   failure and nothing queued to send: the replay's single round trip;
/// - **as it is, with a `ROLLBACK` queued**, after a first execution whose
///   [merged `COMMIT; BEGIN`](crate::store#postgresql-the-record-and-its-commit-in-one-round-trip)
///   left an empty transaction: the `ROLLBACK` goes out with the connection's next
///   statement ([`connections::give_back_with_rollback`]);
/// - **after a ping** (on a task of its own, as sqlx's pool returns every connection) when
///   the session was dropped without `finish` (its execution was dropped midway: its client
///   went away) or the store failed: the ping reads what is left of an interrupted
///   statement, and a connection that fails it is closed;
/// - **closed** if dropped while `BEGIN` was under way (it may be inside a transaction
///   holding the key's lock that sqlx does not know about) or found dead.
pub(crate) struct Session<DB: Backend> {
    pub(super) conn: Option<Conn<DB>>,
    pub(super) state: State,
}

/// Where a [`Session`]'s connection stands, which decides how it goes back when dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum State {
    /// In use: a statement may be unanswered, so it is pinged on its way back.
    Open,
    /// What is queued, if anything, is only the `ROLLBACK` of an empty transaction (after a
    /// merged `COMMIT; BEGIN`).
    RollbackQueued,
    /// `BEGIN` under way: it may be inside a transaction sqlx does not know about, holding
    /// the key's lock. Closed if dropped so.
    Beginning,
    /// Found stale or left mid-statement: closed.
    Discarded,
    /// Every statement answered ([`Session::finish`]): back as it is, with the queued
    /// `ROLLBACK` if there is one.
    Finished { rollback_queued: bool },
}

impl<DB: Backend> Session<DB> {
    /// The connection.
    pub(crate) fn conn(&mut self) -> &mut DB::Connection {
        self.conn
            .as_mut()
            .unwrap_or_else(|| unreachable!("a session's connection is taken only by drop"))
    }

    /// Step 2: `BEGIN`, with the key's lock when `lock` is given. On an error, call
    /// [`Session::recover`] before anything else uses the connection.
    pub(super) async fn begin(
        &mut self,
        settings: &TxSettings,
        lock: Option<KeyLock<'_>>,
    ) -> Result<Begun<'_, DB>, sqlx::Error> {
        self.state = State::Beginning;
        let conn = self
            .conn
            .as_mut()
            .unwrap_or_else(|| unreachable!("a session's connection is taken only by drop"));
        let tx = DB::begin(conn, settings, lock).await?;
        self.state = State::Open;
        Ok(tx)
    }

    /// Puts the connection back in a usable state after [`Session::begin`] failed.
    pub(super) async fn recover(&mut self) {
        DB::abandon_begin(self.conn()).await;
        self.state = State::Open;
    }

    /// The execution ended with `outcome`, every statement it sent answered: the connection
    /// may go back as it is.
    pub(crate) fn finish<T>(mut self, outcome: &Result<T, Error>) {
        let answered = !matches!(
            outcome,
            Err(Error::Store(_) | Error::StoreBusy(_) | Error::CommitUnknown(_) | Error::Panicked)
        );
        self.state = match self.state {
            State::Open if answered => State::Finished {
                rollback_queued: false,
            },
            State::RollbackQueued if answered => State::Finished {
                rollback_queued: true,
            },
            other => other,
        };
    }
}

impl<DB: Backend> Drop for Session<DB> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        match self.state {
            State::Beginning | State::Discarded => connections::discard(conn),
            State::Finished { .. } if !conn.should_flush() => drop(conn),
            State::Finished {
                rollback_queued: true,
            } => connections::give_back_with_rollback(conn),
            State::Open | State::RollbackQueued | State::Finished { .. } => {
                connections::ping_and_return(conn);
            }
        }
    }
}

/// The session an execution keeps in its slot.
pub(super) fn held<DB: Backend>(slot: &mut Option<Session<DB>>) -> &mut Session<DB> {
    slot.as_mut()
        .unwrap_or_else(|| unreachable!("the session is in its slot from the first step on"))
}

/// An error of a statement sent before `COMMIT`: the database refused it (nothing
/// committed), or the connection failed (nothing committed either: the transaction dies with
/// it).
pub(super) fn refused<DB: Backend>(error: sqlx::Error) -> Error {
    match DB::classify(&error) {
        Failure::LockTimeout => Error::StoreBusy(error),
        _ => Error::Store(error),
    }
}

/// An error of a round trip that carried `COMMIT`: the database refused a statement of it
/// (nothing committed: `503` store-busy or store-unavailable), or the connection failed and
/// the outcome is unknown.
pub(super) fn commit_failed<DB: Backend>(error: sqlx::Error) -> Error {
    match DB::classify(&error) {
        Failure::LockTimeout => Error::StoreBusy(error),
        Failure::Other if error.as_database_error().is_some() => Error::Store(error),
        _ => Error::CommitUnknown(error),
    }
}
