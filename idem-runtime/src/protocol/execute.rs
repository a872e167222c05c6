//! Running an execution: [`Idem::execute`] and its connections, the lookup of step 1 and
//! the answers of a failed lock. The steps themselves are [`Execution`]'s.

use std::panic::AssertUnwindSafe;

use futures_util::FutureExt as _;
use sqlx::Transaction;
use sqlx::pool::PoolConnection;

use super::session::{Session, State, commit_failed};
use super::steps::Execution;
use super::{Call, Idem, Outcome, OutcomeKind, Record, Work};
use crate::connections;
use crate::error::Error;
use crate::spec::OperationSpec;
use crate::store::{Backend, Begun, Failure, KeyLock, KeyRef, KeyStatus, StoredKey};
use crate::telemetry;

impl<DB: Backend> Idem<DB> {
    /// Runs `work` at most once per (`call.scope`, `spec.id`, `call.key`), at the record
    /// level: what the `#[idempotent]` expansion calls, and what adapters for other web
    /// frameworks would call. Consumers and jobs use [`Idem::once`], which stores typed
    /// values.
    ///
    /// 1. One `SELECT` of the key row (outside any transaction): a completed key with the
    ///    same fingerprint replays its record; another fingerprint is [`Error::Mismatch`];
    ///    an expired key is [`Error::Expired`] or, with [`ExpiryPolicy::Reexecute`](crate::spec::ExpiryPolicy::Reexecute), runs
    ///    again.
    /// 2. Otherwise `BEGIN` taking the key's lock and looking at the key again once it holds
    ///    it (PostgreSQL: `idem_lock_key`, in the same round trip; SQLite: `BEGIN IMMEDIATE`
    ///    and a `SELECT`), `work` on that transaction, one `INSERT` of the completed key row
    ///    with the record, `COMMIT`.
    ///
    /// On PostgreSQL, for an operation whose recent keys were mostly new, step 2 comes
    /// first: a new key saves the lookup's round trip, and a key whose row exists is rolled
    /// back and goes through step 1. The answers are the same either way.
    ///
    /// A concurrent duplicate waits for the key's lock up to [`Config::in_flight_wait`](crate::Config::in_flight_wait) and
    /// gets [`Error::InFlight`] past the wait. When the execution it waited for committed, it
    /// answers with that record as soon as it holds the lock, and `work` never runs. Whenever
    /// an execution ends without storing its record — `work` failed or panicked, or the key's
    /// row appeared anyway (the `INSERT` finds it) — everything rolls back and the key is
    /// looked up once more: a record a concurrent execution committed is the answer then,
    /// never a second committed effect.
    ///
    /// A record with `status >= 400` rolls everything back and is not stored
    /// ([`OutcomeKind::Failed`]), except `4xx` with [`OperationSpec::store_client_errors`],
    /// stored with the work's writes rolled back to a savepoint. A panic in `work` rolls back
    /// and is [`Error::Panicked`].
    ///
    /// # Errors
    /// See [`Error`].
    pub async fn execute<F>(
        &self,
        spec: &OperationSpec,
        call: Call<'_>,
        work: F,
    ) -> Result<Outcome, Error>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Work<'t> + Send,
    {
        let key = Some(call.key.as_str());
        let execution = telemetry::Execution::start(spec.id, call.scope, key, None);
        execution.run(self.execute_untraced(spec, call, work)).await
    }

    /// [`Idem::execute`] without its span and metrics, for callers that record their own:
    /// the steps of [`Execution`], on one session that outlives them (once they ended, not
    /// dropped midway, its connection goes back as it is: see `Session::finish`).
    pub(crate) async fn execute_untraced<F>(
        &self,
        spec: &OperationSpec,
        call: Call<'_>,
        work: F,
    ) -> Result<Outcome, Error>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Work<'t> + Send,
    {
        let execution = Execution {
            idem: self,
            spec,
            call: &call,
            key: KeyRef {
                scope: call.scope,
                operation: spec.id,
                key: call.key.as_str(),
            },
            started: self.now_millis(),
        };
        let mut session = None;
        let outcome = execution.steps(&mut session, work).await;
        if let Some(session) = session {
            session.finish(&outcome);
        }
        outcome
    }

    /// Runs `work` in a transaction with no key: for operations whose key is optional.
    ///
    /// # Errors
    /// [`Error::Store`], [`Error::Panicked`] or [`Error::CommitUnknown`].
    pub async fn execute_unkeyed<F>(&self, work: F) -> Result<Outcome, Error>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Work<'t> + Send,
    {
        let mut session = None;
        let slot = &mut session;
        let outcome = async move {
            let session = slot.insert(self.session().await?);
            let mut failed = None;
            let begun = session.begin(&self.inner.tx_settings, None);
            // (Without a key's lock there is no key to find taken.)
            let begun = begun.await.map_err(|e| failed = Some(e)).ok();
            let Some(mut tx) = begun.and_then(Begun::free) else {
                session.recover().await;
                return Err(failed.map_or(Error::Panicked, Error::Store));
            };
            let record = AssertUnwindSafe(work(&mut tx))
                .catch_unwind()
                .await
                .map_err(|_| Error::Panicked)?;
            if record.is_failure() {
                tx.rollback().await.map_err(Error::Store)?;
                return Ok(Outcome {
                    kind: OutcomeKind::Failed,
                    record,
                });
            }
            tx.commit().await.map_err(commit_failed::<DB>)?;
            Ok(Outcome {
                kind: OutcomeKind::Executed,
                record,
            })
        }
        .await;
        if let Some(session) = session {
            session.finish(&outcome);
        }
        outcome
    }

    /// One of the request path's connections ([`crate::connections`]) within
    /// [`Config::acquire_timeout`]: a database that is down or every connection in use
    /// answer `503` at once.
    pub(super) async fn session(&self) -> Result<Session<DB>, Error> {
        let conn = connections::get(&self.inner.conns, self.inner.config.acquire_timeout)
            .await
            .map_err(Error::Store)?;
        Ok(Session {
            conn: Some(conn),
            state: State::Open,
        })
    }

    /// Step 1's read: a connection and the key's row. A pooled connection found dead (the
    /// database restarted since it was last used) is closed and the lookup tried again on
    /// another, until the pool opens a fresh one: a restart met by idle connections costs no
    /// request (one under way at the restart fails with `503`, retry with the same key). The lookup
    /// waits at most [`Config::in_flight_wait`] (a table locked from outside): `503`
    /// `store-busy` then, and the connection is closed, not pooled. `session`, if given, is
    /// tried first.
    pub(crate) async fn first_lookup(
        &self,
        key: KeyRef<'_>,
        mut session: Option<Session<DB>>,
    ) -> Result<(Session<DB>, Option<StoredKey>), Error> {
        // Every idle connection may be stale; one more try opens a new one.
        // (The request path holds as many connections as the pool: see `connections::beside`.)
        let mut tries = self.inner.pool.options().get_max_connections() + 1;
        loop {
            let mut session = match session.take() {
                Some(session) => session,
                None => self.session().await?,
            };
            let lookup = crate::store::protocol::lookup::<DB>(session.conn(), key, self.ring());
            match tokio::time::timeout(self.inner.config.in_flight_wait, lookup).await {
                Ok(Ok(stored)) => return Ok((session, stored)),
                Ok(Err(error)) => match DB::classify(&error) {
                    Failure::Disconnected if tries > 1 => {
                        tries -= 1;
                        session.state = State::Discarded;
                        tracing::debug!(%error, "stale pooled connection; looking up again");
                    }
                    Failure::Disconnected => {
                        session.state = State::Discarded;
                        return Err(Error::Store(error));
                    }
                    Failure::LockTimeout => return Err(Error::StoreBusy(error)),
                    _ => return Err(Error::Store(error)),
                },
                Err(_) => {
                    // The statement may still be waiting on the server: this connection is
                    // not reusable.
                    session.state = State::Discarded;
                    return Err(Error::StoreBusy(sqlx::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the key's lookup waited longer than in_flight_wait",
                    ))));
                }
            }
        }
    }

    /// `BEGIN` waited past `lock_timeout`: for the key (a duplicate in flight: `409`) or for
    /// something else (`503` `store-busy`). Asked on the same, repaired connection.
    pub(super) async fn lock_timed_out(
        &self,
        conn: &mut DB::Connection,
        lock: KeyLock<'_>,
        error: sqlx::Error,
    ) -> Error {
        match DB::key_lock_taken(conn, lock).await {
            Ok(true) => self.in_flight(),
            _ => Error::StoreBusy(error),
        }
    }

    /// [`Backend::namespace`], asked once per handle.
    pub(crate) async fn namespace(&self, conn: &mut DB::Connection) -> Result<&str, Error> {
        if let Some(namespace) = self.inner.namespace.get() {
            return Ok(namespace);
        }
        let found = crate::store::connect::namespace::<DB>(conn)
            .await
            .map_err(Error::Store)?;
        Ok(self.inner.namespace.get_or_init(|| found))
    }

    /// A connection of the pool (staged steps, holds) within [`Config::acquire_timeout`],
    /// whatever the pool's own acquire timeout ([`sqlx::Error::PoolTimedOut`] past it).
    pub(crate) async fn acquire_bounded(&self) -> Result<PoolConnection<DB>, sqlx::Error> {
        let acquire = self.inner.pool.acquire();
        match tokio::time::timeout(self.inner.config.acquire_timeout, acquire).await {
            Ok(conn) => conn,
            Err(_) => Err(sqlx::Error::PoolTimedOut),
        }
    }

    /// A transaction without a key's lock, bounded as the protocol's are (staged mode's
    /// steps): a connection within [`Config::acquire_timeout`], the `SET LOCAL` timeouts.
    pub(crate) async fn begin_bounded(&self) -> Result<Transaction<'static, DB>, sqlx::Error> {
        let conn = self.acquire_bounded().await?;
        let statement = DB::begin_statement(&self.inner.tx_settings);
        Transaction::begin(conn, Some(statement.into())).await
    }

    /// Whether replays are read on a standby first ([`Config::replica`]).
    pub(crate) fn replica_is_set(&self) -> bool {
        self.inner.replica.is_some()
    }

    /// A replay read on the standby ([`Config::replica`]): the response of a key the standby
    /// has completed, unexpired, for this request's fingerprint. Anything else — no standby,
    /// no row there, not final, expired, another fingerprint, a standby that fails or takes
    /// longer than [`Config::acquire_timeout`] — is `None`: the primary decides.
    pub(crate) async fn replica_replay(
        &self,
        call: &Call<'_>,
        key: KeyRef<'_>,
        now: i64,
    ) -> Option<Outcome> {
        let replica = self.inner.replica.as_ref()?;
        if replica.resting() {
            return None;
        }
        let wait = self.inner.config.acquire_timeout;
        let lookup = async {
            let conn = connections::get(&replica.conns, wait).await?;
            let mut session = Session {
                conn: Some(conn),
                state: State::Open,
            };
            let stored =
                crate::store::protocol::lookup::<DB>(session.conn(), key, self.ring()).await?;
            session.state = State::Finished {
                rollback_queued: false,
            };
            Ok::<_, sqlx::Error>(stored)
        };
        let stored = match tokio::time::timeout(wait, lookup).await {
            Ok(Ok(stored)) => stored,
            failed => {
                replica.rest();
                telemetry::replica_looked_up(telemetry::ReplicaLookup::Failed);
                match failed {
                    Ok(Err(error)) => tracing::warn!(%error, "the replica failed a lookup"),
                    _ => tracing::warn!("the replica did not answer a lookup in time"),
                }
                return None;
            }
        };
        let response = stored
            .filter(|stored| {
                stored.status_at(now) == KeyStatus::Completed
                    && stored.unopened.is_none()
                    && stored.fingerprint.as_slice() == call.fingerprint.as_bytes()
            })
            .and_then(|stored| stored.response);
        telemetry::replica_looked_up(if response.is_some() {
            telemetry::ReplicaLookup::Replayed
        } else {
            telemetry::ReplicaLookup::Primary
        });
        Some(Outcome {
            kind: OutcomeKind::Replayed,
            record: Record::from_stored(response?),
        })
    }
}
