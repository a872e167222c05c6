//! Running a staged operation: the key reserved or taken over ([`Idem::staged`]), one
//! attempt run, and how it ended.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use serde::Serialize;
use serde_json::Map;

use super::start::{Look, Starting};
use super::*;
use crate::error::Error;
use crate::fingerprint::Fingerprint;
use crate::hold::Hold;
use crate::key::IdempotencyKey;
use crate::protocol::{Call, Idem, Outcome, OutcomeKind, Record};
use crate::spec::{InFlightPolicy, OperationSpec, Scope};
use crate::store::staged::{Fence, Lease};
use crate::store::{Backend, KeyRef, StoredKey};
use crate::telemetry;

/// What the lookup at the start of a staged execution decided.
enum Start<DB: Backend> {
    Answer(Outcome),
    Run {
        lease: Lease,
        resumed: bool,
        /// The attempt's hold ([`crate::hold`]), where the backend has them.
        hold: Option<Hold<DB>>,
    },
}

/// How long a waiting retry sleeps between lookups, at most.
const POLL_MAX: Duration = Duration::from_millis(200);

impl<DB: Backend> Idem<DB> {
    /// Runs `work` at most once per (`scope`, `spec.id`, `key`), in staged mode (see [the
    /// module](crate::staged)): the same arguments as [`Idem::once`]. The key is reserved at
    /// once with a lease of [`OperationSpec::lease`]; `input` is fingerprinted and stored
    /// with it (the [`Reconciler`] resumes the key with it, read back as the type given to
    /// [`Reconciler::resumable`]); `work` runs its steps on an [`Attempt`].
    ///
    /// A retry with the same key: completed → the stored response; processing with a live
    /// lease → [`Error::InFlight`], or, with [`InFlightPolicy::Wait`], the running attempt's
    /// response once it completes (up to [`crate::Config::in_flight_wait`]); processing with
    /// a lease that ran out → this call takes the key over and runs `work` again, where
    /// recorded steps return their recorded results. A key that is not final never expires:
    /// only a completed key's TTL runs out (counted from its completion).
    ///
    /// The [`Outcome`] is a response (`Idempotent-Replayed: true` on a replay), and so is
    /// [`Error`]:
    ///
    /// ```no_run
    /// use axum::response::IntoResponse as _;
    /// # use idem_runtime::staged::{Attempt, Finished, StepError};
    /// # use idem_runtime::spec::{Mode, OperationSpec, Scope};
    /// # use idem_runtime::{Idem, IdempotencyKey};
    /// # use idem_runtime::sqlx::Sqlite;
    /// # const SEND: OperationSpec = OperationSpec::new("send:v1").mode(Mode::Staged);
    /// # async fn send(attempt: Attempt<Sqlite>, to: String) -> Result<Finished, StepError> { todo!() }
    /// # async fn demo(idem: Idem<Sqlite>, key: IdempotencyKey) -> axum::response::Response {
    /// let to = "a@example.com".to_owned();
    /// idem.staged(&SEND, &Scope::global(), &key, &to, |attempt| send(attempt, to.clone()))
    ///     .await
    ///     .into_response()
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Mismatch`], [`Error::Expired`], [`Error::InFlight`],
    /// [`Error::Interrupted`] (a [`StepError::Retryable`]), [`Error::Panicked`],
    /// [`Error::Journal`], [`Error::Input`], [`Error::Store`].
    pub async fn staged<I, F, Fut>(
        &self,
        spec: &OperationSpec,
        scope: &Scope,
        key: &IdempotencyKey,
        input: &I,
        work: F,
    ) -> Result<Outcome, Error>
    where
        I: Serialize + ?Sized,
        F: FnOnce(Attempt<DB>) -> Fut,
        Fut: Future<Output = Result<Finished, StepError>>,
    {
        let spec = &self.config().spec(spec);
        let (fingerprint, canonical) =
            Fingerprint::of_kept(spec.id, input, spec.fingerprint_exclude).map_err(Error::Input)?;
        let request = serde_json::to_string(input).map_err(Error::Journal)?;
        let call = Call {
            scope: scope.as_str(),
            key,
            fingerprint,
            request: spec.mismatch_detail.then_some(&canonical[..]),
        };
        let execution = telemetry::Execution::start(spec.id, call.scope, Some(key.as_str()), None);
        execution
            .run(self.staged_untraced(spec, call, &request, work))
            .await
    }

    /// [`Idem::staged`] at the record level, without its span and metrics: `request` is the
    /// stored request (JSON), `call` carries the fingerprint.
    pub(crate) async fn staged_untraced<F, Fut>(
        &self,
        spec: &OperationSpec,
        call: Call<'_>,
        request: &str,
        work: F,
    ) -> Result<Outcome, Error>
    where
        F: FnOnce(Attempt<DB>) -> Fut,
        Fut: Future<Output = Result<Finished, StepError>>,
    {
        let key = KeyRef {
            scope: call.scope,
            operation: spec.id,
            key: call.key.as_str(),
        };
        match self.start(spec, &call, key, request).await? {
            Start::Answer(outcome) => Ok(outcome),
            Start::Run {
                lease,
                resumed,
                hold,
            } => {
                let outcome = self.run_attempt(spec, key, lease, resumed, work).await;
                // Held until the attempt's last write is done.
                drop(hold);
                match outcome {
                    // Fenced out by another request under the key: name what differs.
                    Err(Error::Mismatch(None)) => {
                        let mut conn = self.acquire_bounded().await.map_err(Error::Store)?;
                        Err(self.mismatch(&mut conn, &call, key).await)
                    }
                    outcome => outcome,
                }
            }
        }
    }

    /// Reserves the key, takes it over, replays, or refuses: the lookup and its meaning are
    /// the atomic protocol's ([`Idem::settle`]), with its stale-connection retry and lookup
    /// deadline. Where attempts hold their number ([`crate::hold`]), a key held by a live
    /// lease whose owner is provably gone is taken over at once. Each look is
    /// [`Starting::look`]; between looks a waiting retry holds no connection.
    async fn start(
        &self,
        spec: &OperationSpec,
        call: &Call<'_>,
        key: KeyRef<'_>,
        request: &str,
    ) -> Result<Start<DB>, Error> {
        if self.replica_is_set()
            && let Some(outcome) = Box::pin(self.replica_replay(call, key, self.now_millis())).await
        {
            return Ok(Start::Answer(outcome));
        }
        let started = Instant::now();
        let mut pause = Duration::from_millis(10);
        let mut starting = Starting {
            idem: self,
            spec,
            call,
            key,
            request,
            digests: self.field_digests(call),
            // Before the lookup's connection: see `Idem::hold_for`.
            hold: self.hold_for(key).await?,
        };
        loop {
            match starting.look().await? {
                Look::Answer(outcome) => return Ok(Start::Answer(outcome)),
                Look::Run { lease, resumed } => {
                    return Ok(Start::Run {
                        lease,
                        resumed,
                        hold: starting.hold,
                    });
                }
                Look::Wait { until } => self.held_off(spec, started, &mut pause, until).await?,
                Look::Again => {}
            }
        }
    }

    /// Another attempt holds the key: `409`, or, with [`InFlightPolicy::Wait`] and time left
    /// of [`crate::Config::in_flight_wait`] since `started`, a pause (growing up to
    /// [`POLL_MAX`]) before the next look. Called without a connection: a waiting retry
    /// holds none while it sleeps. The `409`'s `Retry-After` says when a retry can succeed:
    /// the end of the attempt's lease, `until_ms` when known, rounded up to whole seconds
    /// (never less than [`crate::Config::retry_after`]); a running attempt that completes
    /// sooner is replayed to a retry that comes sooner.
    async fn held_off(
        &self,
        spec: &OperationSpec,
        started: Instant,
        pause: &mut Duration,
        until_ms: Option<i64>,
    ) -> Result<(), Error> {
        let wait = self.config().in_flight_wait;
        let waited = started.elapsed();
        if spec.on_in_flight != InFlightPolicy::Wait || waited >= wait {
            let pause = self.config().retry_after;
            let left = until_ms.map(|until| until.saturating_sub(self.now_millis()));
            let retry_after = match left.and_then(|ms| u64::try_from(ms).ok()) {
                Some(ms) => Duration::from_secs(ms.div_ceil(1000)).max(pause),
                None => pause,
            };
            return Err(Error::InFlight { retry_after });
        }
        tokio::time::sleep((*pause).min(wait.saturating_sub(waited))).await;
        *pause = (*pause * 2).min(POLL_MAX);
        Ok(())
    }

    /// Runs one attempt of `work` holding `lease`, and settles how it ended.
    pub(crate) async fn run_attempt<F, Fut>(
        &self,
        spec: &OperationSpec,
        key: KeyRef<'_>,
        lease: Lease,
        resumed: bool,
        work: F,
    ) -> Result<Outcome, Error>
    where
        F: FnOnce(Attempt<DB>) -> Fut,
        Fut: Future<Output = Result<Finished, StepError>>,
    {
        let fingerprint = lease.fingerprint;
        let journal = match lease.journal.as_deref() {
            None => Map::new(),
            Some(text) => serde_json::from_str(text).map_err(Error::Journal)?,
        };
        let state = Arc::new(AttemptState::new(
            self,
            spec,
            key,
            lease.fence,
            resumed,
            journal,
        ));
        let beat = heartbeat(Arc::clone(&state));
        let attempt = Attempt {
            inner: Arc::clone(&state),
        };
        let ended = AssertUnwindSafe(work(attempt)).catch_unwind().await;
        drop(beat);
        self.attempt_ended(spec, key, state.fence, &fingerprint, ended)
            .await
    }

    /// How attempt `number` of `key` ended, settled: its response, a stored permanent
    /// failure, or its lease released for a retry (`Interrupted`, a store failure, a panic).
    async fn attempt_ended(
        &self,
        spec: &OperationSpec,
        key: KeyRef<'_>,
        number: Fence,
        fingerprint: &[u8],
        ended: std::thread::Result<Result<Finished, StepError>>,
    ) -> Result<Outcome, Error> {
        let release = || async {
            let released = async {
                let mut conn = self.acquire_bounded().await?;
                crate::store::staged::release::<DB>(&mut conn, key, number, self.now_millis()).await
            }
            .await;
            if let Err(error) = released {
                // The lease runs out by itself.
                tracing::warn!(%error, "could not release a staged lease");
            }
        };
        let error = match ended {
            Ok(Ok(Finished(record))) => {
                return Ok(Outcome {
                    kind: OutcomeKind::Executed,
                    record,
                });
            }
            Ok(Err(StepError::Permanent(record))) => {
                let record = *record;
                let mut conn = self.acquire_bounded().await.map_err(Error::Store)?;
                let stored = store_record(self, &mut conn, key, number, spec.ttl, &record)
                    .await
                    .map_err(Error::Store)?;
                if !stored {
                    drop(conn);
                    return self.fenced(key, fingerprint).await;
                }
                return Ok(Outcome {
                    kind: OutcomeKind::Executed,
                    record,
                });
            }
            Ok(Err(StepError::LeaseLost)) => return self.fenced(key, fingerprint).await,
            Ok(Err(StepError::Retryable {
                reason,
                retry_after,
            })) => Error::Interrupted {
                reason,
                retry_after: retry_after.unwrap_or(self.config().retry_after),
            },
            Ok(Err(StepError::Store(error))) => Error::Store(error),
            Ok(Err(StepError::Journal(error))) => Error::Journal(error),
            Err(_panic) => Error::Panicked,
        };
        release().await;
        Err(error)
    }

    /// The answer for an attempt that was fenced out (another attempt took the key over, or
    /// an operator completed, failed or deleted it): what a retry of its request would be
    /// answered now — `422` when the key's row is another request's (an operator deleted the
    /// key and a request with another body reserved it again), the key's final response when
    /// it has one, else `409` (another attempt holds it).
    async fn fenced(&self, key: KeyRef<'_>, fingerprint: &[u8]) -> Result<Outcome, Error> {
        let mut conn = self.acquire_bounded().await.map_err(Error::Store)?;
        match crate::store::protocol::lookup::<DB>(&mut conn, key, self.ring())
            .await
            .map_err(Error::Store)?
        {
            Some(StoredKey {
                unopened: Some(unopened),
                ..
            }) => Err(Error::Store(unopened.into())),
            Some(row) if row.fingerprint != fingerprint => Err(Error::Mismatch(None)),
            Some(row) if row.is_final() => match row.response {
                Some(response) => Ok(Outcome {
                    kind: OutcomeKind::Replayed,
                    record: Record::from_stored(response),
                }),
                None => Err(self.in_flight()),
            },
            _ => Err(self.in_flight()),
        }
    }
}
