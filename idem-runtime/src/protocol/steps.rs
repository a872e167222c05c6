//! One execution of a key in atomic mode, step by step: the steps [the module](super)
//! names, each a method of [`Execution`].

use std::panic::AssertUnwindSafe;
use std::time::Instant;

use futures_util::FutureExt as _;
use sqlx::Transaction;

use super::session::{Session, State, commit_failed, held, refused};
use super::{Call, Idem, Outcome, OutcomeKind, Record, Settled, Work};
use crate::clock::millis;
use crate::error::Error;
use crate::failpoint::FailPoint;
use crate::spec::OperationSpec;
use crate::store::protocol::{
    insert_completed, insert_completed_and_commit, lookup, rollback_to_savepoint, savepoint,
};
use crate::store::{Backend, Begun, Failure, KeyLock, KeyRef, NewRow};
use crate::telemetry;

/// One execution of a key: what its steps share, carried in one value. Its session stays in
/// the caller's slot, apart: the key's transaction borrows its connection while the steps run.
pub(super) struct Execution<'a, DB: Backend> {
    pub(super) idem: &'a Idem<DB>,
    pub(super) spec: &'a OperationSpec,
    pub(super) call: &'a Call<'a>,
    pub(super) key: KeyRef<'a>,
    /// When the execution began: the key's `created_at`, and "now" for its lookups.
    pub(super) started: i64,
}

/// What step 1 decided ([`Execution::look_up`]).
enum Looked {
    /// A replay (or another final answer): no transaction.
    Answer(Outcome),
    /// Run the work, replacing an expired row if one is in the way.
    Run { replace_expired: bool },
}

/// Why step 2 began no transaction ([`Execution::not_begun`]).
enum NotBegun {
    /// The lock came first on a stale connection, now dropped: look the key up on another.
    Stale,
    /// The key's row is there.
    Taken,
}

/// How step 3 ended ([`Execution::work`]).
enum Worked {
    /// A record to store.
    Store(Record),
    /// Nothing to store (the work failed or panicked): the answer, unless step 5 finds
    /// another execution's.
    Settle(Result<Outcome, Error>),
}

impl<DB: Backend> Execution<'_, DB> {
    /// Steps 1 to 5 on the session in `slot`.
    pub(super) async fn steps<F>(
        &self,
        slot: &mut Option<Session<DB>>,
        work: F,
    ) -> Result<Outcome, Error>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Work<'t> + Send,
    {
        let first_step = &self.idem.inner.first_step;
        // Where it saves a round trip, an operation whose keys are mostly new begins with the
        // key's lock (see `first_step`); a key found to exist sends it to the lookup.
        let mut lock_first = DB::DIALECT.lock_first && first_step.lock_first(self.spec.id);
        let (mut tx, replace_expired) = loop {
            let replace_expired = if lock_first {
                *slot = Some(self.idem.session().await?);
                false
            } else {
                match self.look_up(slot).await? {
                    Looked::Answer(outcome) => return Ok(outcome),
                    Looked::Run { replace_expired } => replace_expired,
                }
            };
            let session = held(slot);
            let lock = KeyLock {
                namespace: self.idem.namespace(session.conn()).await?,
                key: self.key,
                expired_by_ms: replace_expired.then_some(self.started),
            };
            // (What went wrong leaves through `failed`, so that no borrow of the session
            // outlives the statement.)
            let mut failed = None;
            let waiting = Instant::now();
            let begun = session.begin(&self.idem.inner.tx_settings, Some(lock));
            let begun = begun.await.map_err(|e| failed = Some(e)).ok();
            let free = begun.as_ref().map(|b| matches!(b, Begun::Free(_)));
            telemetry::lock_taken(self.spec.id, waiting, free);
            if let Some(tx) = begun.and_then(Begun::free) {
                if lock_first {
                    // The lock's look again found no row: what the lookup would have said.
                    telemetry::looked_up(None, self.started);
                    first_step.met(self.spec.id, false);
                }
                break (tx, replace_expired);
            }
            match self.not_begun(slot, failed, lock, lock_first).await? {
                NotBegun::Stale => lock_first = false,
                NotBegun::Taken if lock_first => {
                    // The key's row exists: the lookup reads it, on the same connection.
                    first_step.met(self.spec.id, true);
                    lock_first = false;
                }
                // Another execution stored the key while this one waited for its lock: its
                // record is the answer, and the work does not run.
                NotBegun::Taken => return self.recheck(slot, Err(self.idem.in_flight())).await,
            }
        };
        let record = match self.work(&mut tx, work).await? {
            Worked::Store(record) => record,
            Worked::Settle(own) => {
                // Dropping rolls back, pipelined with the lookup that follows.
                drop(tx);
                return self.recheck(slot, own).await;
            }
        };
        let stored = self.commit(tx, &record, replace_expired).await?;
        telemetry::stored(self.spec.id, record.body.len(), stored);
        if !stored {
            // Rolled back: another execution of the key committed first.
            return self.recheck(slot, Err(self.idem.in_flight())).await;
        }
        // What is left queued, if anything, is the `ROLLBACK` of the empty transaction after
        // a merged `COMMIT; BEGIN`.
        held(slot).state = State::RollbackQueued;
        self.idem.inner.fail.check(FailPoint::AfterCommit)?;
        Ok(Outcome {
            kind: OutcomeKind::Executed,
            record,
        })
    }

    /// Step 1: the key's row and what it means ([`Idem::settle`]): read on the standby
    /// first where there is one, else on a session left in `slot` for step 2 (the one a
    /// lock that found the key kept, if any: that lock counted the key).
    async fn look_up(&self, slot: &mut Option<Session<DB>>) -> Result<Looked, Error> {
        let idem = self.idem;
        let kept = slot.take();
        let counted = kept.is_some();
        // (Boxed, and only with a replica: without one an execution's future does not grow
        // by the replica's lookup.)
        if !counted
            && idem.replica_is_set()
            && let Some(outcome) =
                Box::pin(idem.replica_replay(self.call, self.key, self.started)).await
        {
            if DB::DIALECT.lock_first {
                idem.inner.first_step.met(self.spec.id, true);
            }
            return Ok(Looked::Answer(outcome));
        }
        let (session, stored) = idem.first_lookup(self.key, kept).await?;
        let session = slot.insert(session);
        telemetry::looked_up(stored.as_ref(), self.started);
        if DB::DIALECT.lock_first && !counted {
            idem.inner.first_step.met(self.spec.id, stored.is_some());
        }
        match idem.settle(self.spec, self.call, stored, self.started) {
            Ok(Settled::Answer(outcome)) => Ok(Looked::Answer(outcome)),
            Ok(Settled::Run { replace_expired }) => Ok(Looked::Run { replace_expired }),
            // (Atomic mode commits final rows only: a staged execution of the same operation
            // id holds this key.)
            Ok(Settled::Held { .. } | Settled::Stuck { .. }) => Err(idem.in_flight()),
            Err(Error::Mismatch(_)) => {
                Err(idem.mismatch(session.conn(), self.call, self.key).await)
            }
            Err(error) => Err(error),
        }
    }

    /// Step 2 began no transaction: the key's row was there once the lock was held
    /// (`failed` is `None`, or PostgreSQL's [`Failure::Taken`]), or `BEGIN` failed. A stale
    /// connection met by a lock that came first is dropped ([`NotBegun::Stale`]); a lock
    /// wait that ran out is a `409` or a `503` ([`Idem::lock_timed_out`]).
    async fn not_begun(
        &self,
        slot: &mut Option<Session<DB>>,
        failed: Option<sqlx::Error>,
        lock: KeyLock<'_>,
        lock_first: bool,
    ) -> Result<NotBegun, Error> {
        let Some(error) = failed else {
            return Ok(NotBegun::Taken);
        };
        let failure = DB::classify(&error);
        if lock_first && matches!(failure, Failure::Disconnected) {
            held(slot).state = State::Discarded;
            *slot = None;
            return Ok(NotBegun::Stale);
        }
        let session = held(slot);
        session.recover().await;
        match failure {
            Failure::Taken => Ok(NotBegun::Taken),
            Failure::LockTimeout => {
                Err(self.idem.lock_timed_out(session.conn(), lock, error).await)
            }
            _ => Err(Error::Store(error)),
        }
    }

    /// Step 3: the work on the key's transaction, a panic caught; with
    /// [`OperationSpec::store_client_errors`], a savepoint first, rolled back to for a `4xx`
    /// stored without the work's writes.
    async fn work<F>(&self, tx: &mut Transaction<'_, DB>, work: F) -> Result<Worked, Error>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Work<'t> + Send,
    {
        if self.spec.store_client_errors {
            savepoint::<DB>(tx).await.map_err(Error::Store)?;
        }
        let Ok(record) = AssertUnwindSafe(work(tx)).catch_unwind().await else {
            return Ok(Worked::Settle(Err(Error::Panicked)));
        };
        telemetry::work_done(record.status);
        self.idem.inner.fail.check(FailPoint::AfterHandler)?;
        if !record.is_failure() {
            return Ok(Worked::Store(record));
        }
        if self.spec.store_client_errors && record.status.is_client_error() {
            rollback_to_savepoint::<DB>(tx)
                .await
                .map_err(Error::Store)?;
            return Ok(Worked::Store(record));
        }
        Ok(Worked::Settle(Ok(Outcome {
            kind: OutcomeKind::Failed,
            record,
        })))
    }

    /// Step 4: inserts the completed key row with `record` and commits. `false` when the
    /// key's row exists already (another execution committed first): rolled back then.
    async fn commit(
        &self,
        mut tx: Transaction<'_, DB>,
        record: &Record,
        replace_expired: bool,
    ) -> Result<bool, Error> {
        let idem = self.idem;
        let headers = record.headers_json(&idem.inner.config.stored_headers);
        let digests = idem.field_digests(self.call);
        let row = NewRow {
            field_digests: digests.as_deref(),
            key: self.key,
            fingerprint: self.call.fingerprint.as_bytes(),
            status: record.status.as_u16(),
            headers_json: &headers,
            body: &record.body,
            created_ms: self.started,
            completed_ms: idem.now_millis(),
            expires_ms: self.started.saturating_add(millis(self.spec.ttl)),
            replace_expired,
        };
        if !replace_expired && !idem.inner.fail.armed(FailPoint::AfterRecord) {
            // One round trip on PostgreSQL.
            return insert_completed_and_commit::<DB>(tx, row, idem.ring())
                .await
                .map_err(commit_failed::<DB>);
        }
        // Two steps: the replacing `INSERT … ON CONFLICT DO UPDATE … WHERE expired` tells by
        // its row count whether it won, and the fail point sits between the steps.
        let stored = insert_completed::<DB>(&mut tx, row, idem.ring())
            .await
            .map_err(refused::<DB>)?;
        if stored {
            idem.inner.fail.check(FailPoint::AfterRecord)?;
            tx.commit().await.map_err(commit_failed::<DB>)?;
        }
        Ok(stored)
    }

    /// Step 5, after an execution that stored nothing: a concurrent execution of the same
    /// key may have committed between this one's lookup and its lock, and its record is then
    /// the answer. Otherwise `own` is.
    async fn recheck(
        &self,
        slot: &mut Option<Session<DB>>,
        own: Result<Outcome, Error>,
    ) -> Result<Outcome, Error> {
        let conn = held(slot).conn();
        // If even this fails, the answer is unknown: 503, retry with the same key.
        let stored = lookup::<DB>(conn, self.key, self.idem.ring())
            .await
            .map_err(Error::Store)?;
        telemetry::looked_up_again(stored.as_ref(), self.started);
        match stored {
            None => own,
            stored @ Some(_) => {
                match self.idem.settle(self.spec, self.call, stored, self.started) {
                    Ok(Settled::Answer(outcome)) => Ok(outcome),
                    Ok(Settled::Run { .. } | Settled::Held { .. } | Settled::Stuck { .. }) => own,
                    Err(Error::Mismatch(_)) => {
                        Err(self.idem.mismatch(conn, self.call, self.key).await)
                    }
                    Err(error) => Err(error),
                }
            }
        }
    }
}
