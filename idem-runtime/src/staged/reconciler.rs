//! The [`Reconciler`]: stuck staged keys resumed in the background.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use serde::Deserialize as _;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::*;
use crate::clock::millis;
use crate::error::Error;
use crate::protocol::{Idem, Outcome};
use crate::resume::{Resumption, StoredRequest, UnreadableRequest};
use crate::spec::OperationSpec;
use crate::store::Backend;
use crate::store::staged::{Lease, StuckKey};
use crate::telemetry;

/// A hand-written staged operation the [`Reconciler`] can resume.
type Resume<DB> = Arc<
    dyn Fn(Attempt<DB>, Value) -> BoxFuture<'static, Result<Finished, StepError>> + Send + Sync,
>;

/// How the [`Reconciler`] resumes one operation's keys.
enum Resumer<DB: Backend> {
    /// A hand-written staged function, called with the stored request.
    Work(Resume<DB>),
    /// An `#[idempotent(mode = "staged")]` handler, entered through the application's
    /// router with the stored request ([`crate::resume`]).
    Router(axum::Router),
}

/// Resumes stuck staged keys — processing, lease run out, no retry coming — with their
/// stored request.
///
/// `#[idempotent(mode = "staged")]` handlers are resumed through the application's router
/// ([`Reconciler::router`]; how, in [`crate::resume`]): every staged operation of the
/// registry, no spec written twice. Hand-written staged functions are registered one by one
/// with [`Reconciler::resumable`].
///
/// ```no_run
/// # use idem_runtime::staged::{Attempt, Finished, Reconciler, StepError};
/// # use idem_runtime::spec::{Mode, OperationSpec};
/// # use idem_runtime::Idem;
/// # use idem_runtime::sqlx::Sqlite;
/// # const CHARGE: OperationSpec = OperationSpec::new("charge:v1").mode(Mode::Staged);
/// # async fn charge(attempt: Attempt<Sqlite>, amount: u64) -> Result<Finished, StepError> { todo!() }
/// # fn demo(idem: Idem<Sqlite>, app: axum::Router) {
/// let reconciler = Reconciler::new(idem)
///     .router(app) // the attribute's staged handlers
///     .resumable(CHARGE, charge); // a hand-written one
/// let handle = reconciler.spawn(std::time::Duration::from_secs(5));
/// # drop(handle); }
/// ```
pub struct Reconciler<DB: Backend> {
    idem: Idem<DB>,
    operations: HashMap<&'static str, (OperationSpec, Resumer<DB>)>,
    batch: i64,
    max_attempts: i64,
}

impl<DB: Backend> fmt::Debug for Reconciler<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reconciler")
            .field("operations", &self.operations.keys().collect::<Vec<_>>())
            .field("batch", &self.batch)
            .field("max_attempts", &self.max_attempts)
            .finish_non_exhaustive()
    }
}

/// What one pass of the [`Reconciler`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Stuck keys found.
    pub stuck: usize,
    /// Keys this pass took over and completed (with a response or a stored failure).
    pub completed: usize,
    /// Keys taken over whose attempt stopped again (they stay resumable), or that could not
    /// be resumed.
    pub not_completed: usize,
    /// Keys another attempt (a client's retry, another process's reconciler) took over or
    /// completed first: nothing was resumed.
    pub taken: usize,
    /// Of `not_completed`, keys whose attempt was the last the reconciler runs
    /// ([`Reconciler::max_attempts`]): from now on it leaves them stuck for an operator.
    pub left: usize,
}

impl<DB: Backend> Reconciler<DB> {
    /// [`Reconciler::max_attempts`]'s default.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 10;

    /// A reconciler with no operations; at most 32 keys per operation and pass, and
    /// [`Reconciler::DEFAULT_MAX_ATTEMPTS`] attempts per key.
    #[must_use]
    pub fn new(idem: Idem<DB>) -> Self {
        Self {
            idem,
            operations: HashMap::new(),
            batch: 32,
            max_attempts: i64::from(Self::DEFAULT_MAX_ATTEMPTS),
        }
    }

    /// The last attempt number the reconciler runs for a key (default 10): it takes over
    /// no key whose attempt is this one or later. A key that no attempt completes by then —
    /// a step that fails the same way every time — stays stuck for an operator to look at
    /// (`idem keys list --status stuck`; complete, fail or release it), counted once in
    /// `idem_reconciler_left_total` and logged as a warning. A client's retry still takes
    /// such a key over; an operator's release lets the reconciler run it once more.
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = i64::from(attempts.max(1));
        self
    }

    /// How many stuck keys per operation one pass resumes (default 32).
    #[must_use]
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = i64::from(batch.max(1));
        self
    }

    /// Registers `spec`'s work: stuck keys of `spec.id` are resumed by calling it with their
    /// stored request (the `input` given to [`Idem::staged`]), read back as `Req`.
    #[must_use]
    pub fn resumable<Req, F, Fut>(mut self, spec: OperationSpec, work: F) -> Self
    where
        Req: DeserializeOwned + Send + 'static,
        F: Fn(Attempt<DB>, Req) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Finished, StepError>> + Send + 'static,
    {
        let resume: Resume<DB> =
            Arc::new(
                move |attempt, request: Value| match Req::deserialize(request) {
                    Ok(request) => work(attempt, request).boxed(),
                    Err(error) => Box::pin(async move { Err(StepError::Journal(error)) }),
                },
            );
        let spec = self.idem.config().spec(&spec);
        self.operations
            .insert(spec.id, (spec, Resumer::Work(resume)));
        self
    }

    /// Registers every `#[idempotent(mode = "staged")]` handler linked into the binary (the
    /// registry, [`crate::docs`]): their stuck keys are resumed by sending the stored request
    /// through `router`, the application's router with its state and layers (see
    /// [`crate::resume`]). Every such handler must be routed by `router`: a stored request
    /// the router answers without reaching its handler is logged and the key stays stuck.
    #[must_use]
    pub fn router(mut self, router: axum::Router) -> Self {
        for registration in inventory::iter::<crate::docs::AnnotatedHandler> {
            let spec = registration.spec;
            if spec.mode == crate::spec::Mode::Staged {
                let spec = self.idem.config().spec(spec);
                self.operations
                    .insert(spec.id, (spec, Resumer::Router(router.clone())));
            }
        }
        self
    }

    /// The operation ids this reconciler resumes.
    #[must_use]
    pub fn operations(&self) -> Vec<&'static str> {
        let mut ids: Vec<&'static str> = self.operations.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// One pass: takes over and resumes the stuck keys of every registered operation.
    ///
    /// # Errors
    /// When the store fails to list stuck keys.
    pub async fn run_once(&self) -> Result<Reconciled, Error> {
        let mut done = Reconciled::default();
        for (spec, resumer) in self.operations.values() {
            let now = self.idem.now_millis();
            let stuck: Vec<StuckKey> = {
                let mut conn = self.idem.acquire_bounded().await.map_err(Error::Store)?;
                crate::store::staged::stuck::<DB>(
                    &mut conn,
                    spec.id,
                    now,
                    self.max_attempts,
                    self.batch,
                )
                .await
                .map_err(Error::Store)?
            };
            done.stuck += stuck.len();
            for key in stuck {
                match self.resume_one(spec, resumer, &key).await {
                    Ok(Some(true)) => done.completed += 1,
                    Ok(Some(false)) => done.not_completed += 1,
                    Ok(None) => done.taken += 1,
                    Err(error) => {
                        done.not_completed += 1;
                        let hash = telemetry::key_hash(&key.scope, &key.key);
                        tracing::warn!(
                            operation = %key.operation,
                            key = %hash,
                            %error, "could not resume a stuck staged key"
                        );
                        let last = key.fence.attempt + 1;
                        if last >= self.max_attempts {
                            done.left += 1;
                            telemetry::left_for_operator(&key.operation, hash.as_str(), last);
                        }
                    }
                }
            }
        }
        Ok(done)
    }

    /// Takes `stuck` over and resumes it: `None` when another attempt took it first,
    /// `Some(completed)` otherwise.
    async fn resume_one(
        &self,
        spec: &OperationSpec,
        resumer: &Resumer<DB>,
        stuck: &StuckKey,
    ) -> Result<Option<bool>, Error> {
        // The next attempt's number, held before the takeover shows it ([`crate::hold`]),
        // until the resumed attempt ends.
        let mut hold = self.idem.hold_for(stuck.key_ref()).await?;
        if let Some(hold) = &mut hold
            && !hold.take(&self.idem, next(stuck.fence)).await?
        {
            return Ok(None);
        }
        let now = self.idem.now_millis();
        let until = now.saturating_add(millis(spec.lease));
        let lease = {
            let mut conn = self.idem.acquire_bounded().await.map_err(Error::Store)?;
            crate::store::staged::take_over::<DB>(
                &mut conn,
                stuck.key_ref(),
                stuck.fence,
                now,
                until,
                self.idem.ring(),
            )
            .await
            .map_err(Error::Store)?
        };
        let Some(lease) = lease else {
            return Ok(None);
        };
        let key = stuck.key_ref();
        let request: Value = match lease.request.as_deref() {
            Some(text) => serde_json::from_str(text).map_err(Error::Journal)?,
            None => Value::Null,
        };
        let outcome = match resumer {
            Resumer::Work(resume) => {
                let resume = Arc::clone(resume);
                let execution = telemetry::Execution::resumption(key.operation, key.scope, key.key);
                let attempt = self
                    .idem
                    .run_attempt(spec, key, lease, true, move |attempt| {
                        resume(attempt, request)
                    });
                execution.run(attempt).await
            }
            Resumer::Router(router) => self.through_router(router, stuck, lease, request).await,
        };
        drop(hold);
        outcome.map(|_| Some(true))
    }

    /// Sends the stored request of `stuck` through `router`, carrying the lease this
    /// reconciler took: the handler runs the attempt ([`crate::resume`]).
    async fn through_router(
        &self,
        router: &axum::Router,
        stuck: &StuckKey,
        lease: Lease,
        request: Value,
    ) -> Result<Outcome, Error> {
        use tower::ServiceExt as _;
        let number = lease.fence;
        let unresumable = |reason: String| Error::Interrupted {
            reason,
            retry_after: self.idem.config().retry_after,
        };
        let prepared = StoredRequest::deserialize(request)
            .map_err(UnreadableRequest::Json)
            .and_then(|stored| {
                let principal = stored.principal.clone();
                let resumption = Resumption::new(
                    stuck.scope.clone(),
                    stuck.operation.clone(),
                    stuck.key.clone(),
                    lease,
                    principal,
                );
                stored
                    .into_request(resumption.clone())
                    .map(|request| (request, resumption))
            });
        let (request, resumption) = match prepared {
            Ok(prepared) => prepared,
            Err(reason) => {
                // Handed back at once: a retry with the request resumes it.
                let mut conn = self.idem.acquire_bounded().await.map_err(Error::Store)?;
                crate::store::staged::release::<DB>(
                    &mut conn,
                    stuck.key_ref(),
                    number,
                    self.idem.now_millis(),
                )
                .await
                .map_err(Error::Store)?;
                return Err(unresumable(reason.to_string()));
            }
        };
        let response = router
            .clone()
            .oneshot(request)
            .await
            .unwrap_or_else(|never| match never {});
        resumption
            .with(|ticket| ticket.outcome.take())
            .unwrap_or_else(|| {
                Err(unresumable(format!(
                    "the router answered {} without reaching the handler",
                    response.status()
                )))
            })
    }

    /// Runs [`Reconciler::run_once`] every `interval` on a tokio task until the handle is
    /// dropped or [`ReconcilerHandle::stop`]ped, and after each pass
    /// [`Idem::observe_stuck`] (the `idem_stuck_keys` gauge).
    #[must_use]
    pub fn spawn(self, interval: Duration) -> ReconcilerHandle
    where
        DB: Backend,
    {
        ReconcilerHandle(tokio::spawn(async move {
            loop {
                match self.run_once().await {
                    Ok(done) if done.completed + done.not_completed > 0 => tracing::info!(
                        stuck = done.stuck,
                        completed = done.completed,
                        not_completed = done.not_completed,
                        taken_by_others = done.taken,
                        "reconciler resumed stuck staged keys"
                    ),
                    Ok(_) => {}
                    Err(error) => tracing::warn!(%error, "reconciler pass failed"),
                }
                if let Err(error) = self.idem.observe_stuck().await {
                    tracing::warn!(%error, "could not count stuck staged keys");
                }
                tokio::time::sleep(interval).await;
            }
        }))
    }
}

/// A running [`Reconciler`]: stops when dropped.
#[derive(Debug)]
pub struct ReconcilerHandle(tokio::task::JoinHandle<()>);

impl ReconcilerHandle {
    /// Stops the reconciler (a pass under way is abandoned; its keys' leases run out and
    /// they are resumed later).
    pub fn stop(self) {
        drop(self);
    }
}

impl Drop for ReconcilerHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
}
