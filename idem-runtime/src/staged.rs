//! Staged mode: exactly-once for effects outside the database.
//!
//! A database transaction cannot undo a card charge or an email. In staged mode the key is
//! reserved at once, in its own short transaction (status `processing`, the request, a lease
//! and an attempt number), and the work runs as named, journaled steps:
//!
//! - [`Attempt::step`] calls another system. It receives a provider key derived from
//!   (scope, operation, key, reservation, step) — the same on every attempt — to send as that system's
//!   own idempotency key, and its result (any serde type) is recorded in the key's row, the
//!   recovery point, in a short transaction of its own.
//! - [`Attempt::db_step`] runs database writes in a transaction that also records its
//!   result.
//! - [`Attempt::finish`] runs the last writes and stores the response in one transaction.
//!
//! An attempt holds the key with a lease its heartbeat renews every third of it. If the
//! attempt dies (the process is killed, the provider times out), the key stays
//! `processing`; once the lease has run out, the next retry with the same key — or the
//! [`Reconciler`] — takes it over with a new attempt number and runs the work again from the
//! start: recorded steps return their recorded result without running, and the first
//! unrecorded step runs again **with the same provider key**, so the provider answers with
//! what it did the first time.
//!
//! # What may run twice
//!
//! - The closure of a [`Attempt::step`] whose attempt died between the provider's answer and
//!   the recording: it runs again with the same provider key. Only call systems that
//!   deduplicate on that key (or whose effect is harmless to repeat) from it.
//! - Code between steps, outside any step: it runs on every attempt. Keep it to pure
//!   computation.
//! - Never: a recorded step, or a [`Attempt::db_step`] / [`Attempt::finish`] whose
//!   transaction committed.
//!
//! An attempt whose request is dropped (its client went away) stops where it is: its
//! heartbeat stops with it, the lease runs out, and the next retry or the reconciler
//! resumes the key.
//!
//! Every write of an attempt is fenced by its reservation and its attempt number: an attempt
//! whose lease was taken over, or whose key an operator completed, failed or deleted (and a
//! new request reserved again), can no longer record, finish or release anything
//! ([`StepError::LeaseLost`]). A reservation is one life of a key's row for one request: a
//! key deleted and reserved again by another request, or expired and executed again, is a
//! new reservation, with new provider keys, whose attempts count from 1 again. The same
//! request reserved again after its row was lost (a promoted standby that had not received
//! it, an operator's forced delete) is the same reservation: its provider keys are the ones
//! its first attempts sent ([`Attempt::provider_key`]).
//!
//! # Outcomes
//!
//! | the work returns | the key | the client |
//! |---|---|---|
//! | `Ok(`[`Finished`]`)` from [`Attempt::finish`] | completed with the response | the response, replayed to every retry |
//! | [`StepError::permanent`] (a declined card) | completed with that error response | the error, replayed to every retry |
//! | [`StepError::Retryable`] (a provider timeout) | processing, lease released | `503` with `Retry-After`; a retry resumes |
//! | a panic | processing, lease released | `500`; a retry resumes |
//!
//! ```no_run
//! use idem_runtime::staged::{Attempt, Finished, StepError};
//! use idem_runtime::protocol::Record;
//! use idem_runtime::spec::{Mode, OperationSpec, Scope};
//! use idem_runtime::{Idem, IdempotencyKey};
//! use idem_runtime::sqlx::Sqlite;
//! use std::time::Duration;
//!
//! const CHARGE: OperationSpec = OperationSpec::new("charge:v1")
//!     .mode(Mode::Staged)
//!     .lease(Duration::from_secs(30));
//!
//! async fn charge(attempt: Attempt<Sqlite>, amount: u64) -> Result<Finished, StepError> {
//!     // Runs once; on a resumed attempt, returns what the first recorded.
//!     let charge_id: String = attempt
//!         .step("charge", async |provider_key| {
//!             // POST /charges with `Idempotency-Key: provider_key` …
//!             Ok(format!("ch_{provider_key}"))
//!         })
//!         .await?;
//!     // The writes and the response commit together; the closure borrows what it needs.
//!     attempt
//!         .finish(async |tx| {
//!             sqlx::query("INSERT INTO payments (charge_id, amount) VALUES (?1, ?2)")
//!                 .bind(&charge_id)
//!                 .bind(amount as i64)
//!                 .execute(&mut **tx)
//!                 .await?;
//!             Ok(Record::json(http::StatusCode::CREATED, &serde_json::json!({"charge": charge_id}))?)
//!         })
//!         .await
//! }
//!
//! # async fn demo(idem: Idem<Sqlite>, key: IdempotencyKey) -> Result<(), idem_runtime::Error> {
//! let outcome = idem
//!     .staged(&CHARGE, &Scope::global(), &key, &1200_u64, |attempt| charge(attempt, 1200))
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! An `#[idempotent(mode = "staged")]` handler is the same work behind the attribute, and
//! [`Reconciler::router`] resumes it without its client ([`crate::resume`]).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use http::StatusCode;
use serde::Deserialize as _;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use sqlx::Transaction;

use crate::clock::millis;
use crate::error::Error;
use crate::fingerprint::Fingerprint;
use crate::hold::Hold;
use crate::key::IdempotencyKey;
use crate::problem::Problem;
use crate::protocol::{Call, Idem, Outcome, OutcomeKind, Record, Settled};
use crate::resume::{Resumption, StoredRequest};
use crate::spec::{InFlightPolicy, OperationSpec, Scope};
use crate::store::staged::{Ending, Fence, Lease, Reservation, StuckKey};
use crate::store::{Backend, KeyRef, StoredKey};
use crate::telemetry;

/// Why a staged operation stopped before [`Attempt::finish`].
#[derive(Debug)]
#[non_exhaustive]
pub enum StepError {
    /// A definitive failure (a declined card): this response is stored and replayed, and the
    /// key is done. Boxed so that `Result<_, StepError>` stays small; build it with
    /// [`StepError::permanent`].
    Permanent(Box<Record>),
    /// A failure worth retrying (a provider timeout): the lease is released, the client gets
    /// `503` with `Retry-After`, and a retry with the same key resumes after the recorded
    /// steps.
    Retryable {
        /// What happened, for logs.
        reason: String,
        /// When to try again (default: [`crate::Config::retry_after`]).
        retry_after: Option<Duration>,
    },
    /// This attempt's lease was taken over: another attempt owns the key now, and nothing
    /// this one writes counts.
    LeaseLost,
    /// The store failed; the key stays resumable.
    Store(sqlx::Error),
    /// A step's result could not be recorded or read back as its type.
    Journal(serde_json::Error),
}

impl StepError {
    /// The problem type of a step another system refused for good
    /// ([`StepError::from_status`]).
    pub const REFUSED: &'static str = "urn:idem:problem:step-refused";

    /// [`StepError::Permanent`]: store `record` (a [`Record`], or a [`Problem`]) as the key's
    /// response and end the key.
    #[must_use]
    pub fn permanent(record: impl Into<Record>) -> Self {
        Self::Permanent(Box::new(record.into()))
    }

    /// What another system's answer means for the step that called it, when it is not the
    /// answer the step expects — the one classification of a provider's HTTP status, so that
    /// a step needs to handle only its own successes (and its own refusals, such as a
    /// declined card):
    ///
    /// | the answer | the step | its client |
    /// |---|---|---|
    /// | `408`, `409`, `425`, `429`, any `5xx`, or not a `4xx` at all | [`StepError::Retryable`], with the answer's `Retry-After` | `503` with `Retry-After`; a retry or the [`Reconciler`] resumes the key, and the step runs again with the same provider key |
    /// | any other `4xx` | [`StepError::Permanent`]: `422`, problem type [`StepError::REFUSED`], naming the status | that problem, replayed to every retry: the provider would refuse the same request under the same provider key the same way |
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use idem_runtime::staged::StepError;
    ///
    /// let busy = StepError::from_status(StatusCode::TOO_MANY_REQUESTS, Some(Duration::from_secs(2)));
    /// assert!(matches!(busy, StepError::Retryable { retry_after: Some(_), .. }));
    /// let refused = StepError::from_status(StatusCode::UNPROCESSABLE_ENTITY, None);
    /// let StepError::Permanent(record) = refused else { panic!() };
    /// assert_eq!(record.status, StatusCode::UNPROCESSABLE_ENTITY);
    /// ```
    #[must_use]
    pub fn from_status(status: StatusCode, retry_after: Option<Duration>) -> Self {
        let transient = matches!(status.as_u16(), 408 | 409 | 425 | 429);
        if !status.is_client_error() || transient {
            return Self::Retryable {
                reason: format!("another system answered {status}"),
                retry_after,
            };
        }
        Self::permanent(
            Problem::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                Self::REFUSED,
                "refused by another system",
            )
            .with_detail(format!(
                "a step of this request was refused for good by the system it calls (it \
                 answered {status}); retrying it under this key changes nothing: send a \
                 corrected request under a new key"
            )),
        )
    }

    /// [`StepError::Retryable`] with the default `Retry-After`.
    pub fn retryable(reason: impl fmt::Display) -> Self {
        Self::Retryable {
            reason: reason.to_string(),
            retry_after: None,
        }
    }
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Permanent(record) => write!(f, "failed for good with {}", record.status),
            Self::Retryable { reason, .. } => write!(f, "interrupted: {reason}"),
            Self::LeaseLost => f.write_str("the attempt's lease was taken over"),
            Self::Store(error) => write!(f, "store: {error}"),
            Self::Journal(error) => write!(f, "journal: {error}"),
        }
    }
}

impl std::error::Error for StepError {}

impl From<sqlx::Error> for StepError {
    fn from(error: sqlx::Error) -> Self {
        Self::Store(error)
    }
}

impl From<serde_json::Error> for StepError {
    fn from(error: serde_json::Error) -> Self {
        Self::Journal(error)
    }
}

/// A `reqwest` call of a step that failed ([`reqwest::Error`]): an error that carries an
/// HTTP status (from `error_for_status`) is classified by [`StepError::from_status`]; any
/// other — a timeout, a refused or dropped connection, a body that does not read as the
/// step's type — is [`StepError::Retryable`], with its causes in the reason (reqwest's own
/// message leaves them out).
#[cfg(feature = "reqwest")]
impl From<reqwest::Error> for StepError {
    fn from(error: reqwest::Error) -> Self {
        if let Some(status) = error.status() {
            return Self::from_status(status, None);
        }
        let mut reason = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            reason.push_str(": ");
            reason.push_str(&cause.to_string());
            source = cause.source();
        }
        Self::retryable(reason)
    }
}

#[cfg(feature = "reqwest")]
impl StepError {
    /// [`StepError::from_status`] of a provider's answer, with its `Retry-After` (in
    /// seconds) when it has one: for the answers a step does not expect.
    ///
    /// ```no_run
    /// use idem_runtime::staged::StepError;
    ///
    /// async fn charge(http: &reqwest::Client, provider_key: String) -> Result<String, StepError> {
    ///     let response = http
    ///         .post("https://provider.example/charges")
    ///         .header("idempotency-key", provider_key)
    ///         .send()
    ///         .await?; // no answer: retryable
    ///     match response.status() {
    ///         reqwest::StatusCode::CREATED => Ok(response.text().await?),
    ///         _ => Err(StepError::from_response(&response)),
    ///     }
    /// }
    /// ```
    #[must_use]
    pub fn from_response(response: &reqwest::Response) -> Self {
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        Self::from_status(response.status(), retry_after)
    }
}

/// Proof that [`Attempt::finish`] stored the response: what a staged operation returns.
#[derive(Debug)]
pub struct Finished(Record);

impl Finished {
    /// The stored response.
    #[must_use]
    pub fn record(&self) -> &Record {
        &self.0
    }
}

/// One attempt at a staged key: what the work receives. Cheap to clone.
pub struct Attempt<DB: Backend> {
    inner: Arc<AttemptState<DB>>,
}

impl<DB: Backend> Clone for Attempt<DB> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<DB: Backend> fmt::Debug for Attempt<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key as in logs: its hash (see `telemetry::key_hash`).
        let key = telemetry::key_hash(&self.inner.scope, &self.inner.key);
        f.debug_struct("Attempt")
            .field("operation", &self.inner.operation)
            .field("key", &key)
            .field("number", &self.inner.fence.attempt)
            .finish_non_exhaustive()
    }
}

struct AttemptState<DB: Backend> {
    idem: Idem<DB>,
    scope: String,
    operation: String,
    key: String,
    /// The reservation this attempt runs, and its number.
    fence: Fence,
    lease: Duration,
    /// The operation's TTL, counted from the completion.
    ttl: Duration,
    /// Step name → recorded result. Never held across an `await`.
    journal: Mutex<Map<String, Value>>,
    resumed: bool,
    lost: AtomicBool,
}

impl<DB: Backend> AttemptState<DB> {
    fn key(&self) -> KeyRef<'_> {
        KeyRef {
            scope: &self.scope,
            operation: &self.operation,
            key: &self.key,
        }
    }

    fn lease_end(&self) -> i64 {
        self.idem.now_millis().saturating_add(millis(self.lease))
    }
}

impl<DB: Backend> Attempt<DB> {
    /// This attempt's fencing number: 1 for the first, one more at every takeover.
    #[must_use]
    pub fn number(&self) -> i64 {
        self.inner.fence.attempt
    }

    /// Whether an earlier attempt ran (this one took the key over).
    #[must_use]
    pub fn is_resumed(&self) -> bool {
        self.inner.resumed
    }

    /// The store handle: its clock ([`Idem::now_millis`]) for the outbox's
    /// [`Idem::enqueue`](crate::Idem::enqueue), its pool for reads outside the steps.
    #[must_use]
    pub fn idem(&self) -> &Idem<DB> {
        &self.inner.idem
    }

    /// The scope, operation and key this attempt runs.
    #[must_use]
    pub fn key(&self) -> KeyRef<'_> {
        self.inner.key()
    }

    /// The key to send to another system for `step`: `idem_` and 32 hexadecimal digits of
    /// SHA-256 over the length-prefixed scope, operation, key, reservation and step name.
    /// The same on every attempt at one reservation of the key, different for every step and
    /// key. A new key's reservation is derived from the key and the request's fingerprint, so
    /// the same request reserved again after its row was lost (a promoted standby that had not
    /// received it, an operator's forced delete) sends the same provider keys, and another
    /// request under a deleted key, or a key re-executed after it expired, new ones: its
    /// effects are new. (Rows reserved before idem had reservations, reservation 0, leave it
    /// out.)
    #[must_use]
    pub fn provider_key(&self, step: &str) -> String {
        provider_key(self.inner.key(), self.inner.fence.reservation, step)
    }

    /// The recorded result of `step`, if an attempt recorded one.
    ///
    /// # Errors
    /// [`StepError::Journal`] when it does not read as `T`.
    pub fn recorded<T: DeserializeOwned>(&self, step: &str) -> Result<Option<T>, StepError> {
        let journal = self
            .inner
            .journal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        journal
            .get(step)
            .map(|value| T::deserialize(value).map_err(StepError::Journal))
            .transpose()
    }

    /// Runs `call` once for this key: a call to another system, given
    /// [`Attempt::provider_key`]`(name)`. Its result is recorded before this returns; on a
    /// later attempt the recorded result is returned and `call` does not run. If the attempt
    /// dies between `call` and the recording, the next attempt runs `call` again with the same
    /// provider key.
    ///
    /// # Errors
    /// What `call` returns; [`StepError::LeaseLost`] when the attempt was fenced out (the
    /// result is not recorded); [`StepError::Store`].
    pub async fn step<T, F>(&self, name: &str, call: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned,
        F: AsyncFnOnce(String) -> Result<T, StepError>,
    {
        if let Some(done) = self.recorded(name)? {
            return Ok(done);
        }
        self.check_lease()?;
        let value = call(self.provider_key(name)).await?;
        let journal = self.journal_with(name, &value)?;
        let state = &self.inner;
        let mut conn = state.idem.acquire_bounded().await?;
        let kept = crate::store::staged::journal::<DB>(
            &mut conn,
            state.key(),
            state.fence,
            name,
            &journal,
            state.lease_end(),
            self.inner.idem.ring(),
        )
        .await?;
        self.kept(kept)?;
        telemetry::step_recorded(name, state.fence.attempt);
        Ok(value)
    }

    /// Runs `work` once for this key, in a transaction that also records its result: the
    /// writes and the recovery point commit together. On a later attempt the recorded result
    /// is returned and `work` does not run.
    ///
    /// # Errors
    /// What `work` returns (its writes rolled back); [`StepError::LeaseLost`] when the
    /// attempt was fenced out (rolled back too); [`StepError::Store`].
    pub async fn db_step<T, F>(&self, name: &str, work: F) -> Result<T, StepError>
    where
        T: Serialize + DeserializeOwned + Send,
        F: for<'t, 'c> AsyncFnOnce(&'t mut Transaction<'c, DB>) -> Result<T, StepError> + Send,
    {
        if let Some(done) = self.recorded(name)? {
            return Ok(done);
        }
        self.check_lease()?;
        let state = &self.inner;
        let mut tx = state.idem.begin_bounded().await?;
        let value = work(&mut tx).await?;
        let journal = self.journal_with(name, &value)?;
        let kept = crate::store::staged::journal::<DB>(
            &mut tx,
            state.key(),
            state.fence,
            name,
            &journal,
            state.lease_end(),
            self.inner.idem.ring(),
        )
        .await?;
        self.kept(kept)?;
        tx.commit().await?;
        telemetry::step_recorded(name, state.fence.attempt);
        Ok(value)
    }

    /// The last step: runs `work` in a transaction that also stores its response and
    /// completes the key. A response of `500` or more is not stored: the writes roll back and
    /// the key stays resumable ([`StepError::Retryable`]).
    ///
    /// # Errors
    /// What `work` returns (its writes rolled back); [`StepError::LeaseLost`];
    /// [`StepError::Store`].
    pub async fn finish<F>(&self, work: F) -> Result<Finished, StepError>
    where
        F: for<'t, 'c> AsyncFnOnce(&'t mut Transaction<'c, DB>) -> Result<Record, StepError> + Send,
    {
        self.check_lease()?;
        let state = &self.inner;
        let mut tx = state.idem.begin_bounded().await?;
        let record = work(&mut tx).await?;
        if record.status.is_server_error() {
            return Err(StepError::retryable(format!(
                "the last step answered {}",
                record.status
            )));
        }
        let kept = store_record(
            &state.idem,
            &mut tx,
            state.key(),
            state.fence,
            state.ttl,
            &record,
        )
        .await?;
        self.kept(kept)?;
        tx.commit().await?;
        Ok(Finished(record))
    }

    fn check_lease(&self) -> Result<(), StepError> {
        if self.inner.lost.load(Ordering::SeqCst) {
            return Err(StepError::LeaseLost);
        }
        Ok(())
    }

    fn kept(&self, kept: bool) -> Result<(), StepError> {
        if kept {
            Ok(())
        } else {
            self.inner.lost.store(true, Ordering::SeqCst);
            Err(StepError::LeaseLost)
        }
    }

    /// The journal with `name` recorded as `value`, as the column's JSON text.
    fn journal_with<T: Serialize>(&self, name: &str, value: &T) -> Result<String, StepError> {
        let value = serde_json::to_value(value)?;
        let mut journal = self
            .inner
            .journal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        journal.insert(name.to_owned(), value);
        Ok(serde_json::to_string(&*journal)?)
    }
}

/// [`Attempt::provider_key`].
fn provider_key(key: KeyRef<'_>, reservation: i64, step: &str) -> String {
    let reservation = (reservation != 0).then(|| reservation.to_string());
    let parts = [key.scope, key.operation, key.key]
        .into_iter()
        .chain(reservation.as_deref())
        .chain([step]);
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    format!("idem_{}", crate::hex::encode(&digest[..16]))
}

async fn store_record<DB: Backend>(
    idem: &Idem<DB>,
    conn: &mut DB::Connection,
    key: KeyRef<'_>,
    attempt: Fence,
    ttl: Duration,
    record: &Record,
) -> Result<bool, sqlx::Error> {
    let headers = record.headers_json(&idem.config().stored_headers);
    let completed_ms = idem.now_millis();
    let ending = Ending {
        status: record.status.as_u16(),
        headers_json: &headers,
        body: &record.body,
        completed_ms,
        expires_ms: completed_ms.saturating_add(millis(ttl)),
    };
    let stored =
        crate::store::staged::finish::<DB>(conn, key, attempt, ending, idem.ring()).await?;
    telemetry::stored(key.operation, record.body.len(), stored);
    Ok(stored)
}

/// A new reservation's id ([`Reservation::id`]), never 0. A new key's is derived from the key
/// and the request's fingerprint: the same request reserved again after its row was lost (a
/// promoted standby that had not received it, an operator's forced delete) is the same
/// reservation, with the same provider keys, so its effects are not made twice. One that
/// replaces an expired key is random: a new life, whose effects are new ones.
fn reservation_id(key: KeyRef<'_>, fingerprint: &[u8], replace_expired: bool) -> i64 {
    let id = if replace_expired {
        fastrand::i64(..)
    } else {
        let mut hash = Sha256::new();
        for part in [
            key.scope.as_bytes(),
            key.operation.as_bytes(),
            key.key.as_bytes(),
            fingerprint,
        ] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part);
        }
        let digest = hash.finalize();
        i64::from_le_bytes(std::array::from_fn(|i| digest[i]))
    };
    if id == 0 { 1 } else { id }
}

/// The attempt that takes `seen` over: the same reservation, the next number.
fn next(seen: Fence) -> Fence {
    Fence {
        reservation: seen.reservation,
        attempt: seen.attempt + 1,
    }
}

/// Aborts the heartbeat when the attempt ends, however it ends.
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn heartbeat<DB: Backend>(state: Arc<AttemptState<DB>>) -> Heartbeat {
    let every = (state.lease / 3).max(Duration::from_millis(10));
    let beat = async move {
        loop {
            tokio::time::sleep(every).await;
            let renewed = async {
                let mut conn = state.idem.acquire_bounded().await?;
                crate::store::staged::renew::<DB>(
                    &mut conn,
                    state.key(),
                    state.fence,
                    state.lease_end(),
                )
                .await
            }
            .await;
            match renewed {
                Ok(true) => {}
                Ok(false) => {
                    state.lost.store(true, Ordering::SeqCst);
                    tracing::warn!(
                        attempt = state.fence.attempt,
                        "staged attempt lost its lease: another attempt took the key over"
                    );
                    return;
                }
                // The lease may still be renewed in time by the next beat.
                Err(error) => tracing::warn!(%error, "could not renew a staged lease"),
            }
        }
    };
    // In the execution's span: its lines name the operation and the key's hash.
    Heartbeat(tokio::spawn(tracing::Instrument::in_current_span(beat)))
}

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
    /// lease whose owner is provably gone is taken over at once.
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
        let digests = self.field_digests(call);
        // Before the lookup's connection: see `Idem::hold_for`.
        let mut hold = self.hold_for(key).await?;
        loop {
            let now = self.now_millis();
            let (mut session, stored) = self.first_lookup(key, None).await?;
            telemetry::looked_up(stored.as_ref(), now);
            let conn: &mut DB::Connection = session.conn();
            // The attempt to take over, and the end of its lease as seen.
            let settled = match self.settle(spec, call, stored, now) {
                Err(Error::Mismatch(_)) => {
                    return Err(self.mismatch(session.conn(), call, key).await);
                }
                settled => settled?,
            };
            let (seen, seen_until) = match settled {
                Settled::Answer(outcome) => return Ok(Start::Answer(outcome)),
                Settled::Run { replace_expired } => {
                    let reservation = Reservation {
                        key,
                        fingerprint: call.fingerprint.as_bytes(),
                        request,
                        created_ms: now,
                        expires_ms: now.saturating_add(millis(spec.ttl)),
                        locked_until_ms: now.saturating_add(millis(spec.lease)),
                        replace_expired,
                        id: reservation_id(key, call.fingerprint.as_bytes(), replace_expired),
                        field_digests: digests.as_deref(),
                    };
                    let first = Fence {
                        reservation: reservation.id,
                        attempt: 1,
                    };
                    // The first attempt is held before the reservation shows it, where
                    // attempts hold theirs. `None`: another request holds it.
                    let reserved = match hold.as_mut().filter(|_| !replace_expired) {
                        // A new key: reserved in the hold's own round trip.
                        Some(hold) => hold.reserve(self, reservation).await?,
                        // A replaced row: held first, then reserved.
                        None => {
                            let free = match &mut hold {
                                Some(hold) => hold.take(self, first).await?,
                                None => true,
                            };
                            if free {
                                let reserved = crate::store::staged::reserve::<DB>(
                                    &mut *conn,
                                    reservation,
                                    self.ring(),
                                )
                                .await;
                                Some(reserved.map_err(Error::Store)?)
                            } else {
                                None
                            }
                        }
                    };
                    let Some(reserved) = reserved else {
                        // Another request is reserving it.
                        drop(session);
                        self.held_off(spec, started, &mut pause, None).await?;
                        continue;
                    };
                    if !reserved {
                        // Someone reserved it first: look again.
                        continue;
                    }
                    telemetry::reserved(1, false);
                    return Ok(Start::Run {
                        lease: Lease {
                            fence: first,
                            journal: None,
                            request: Some(request.to_owned()),
                            fingerprint: call.fingerprint.as_bytes().to_vec(),
                        },
                        resumed: false,
                        hold,
                    });
                }
                // The lease ran out: the lease alone decides.
                Settled::Stuck { attempt } => (attempt, now),
                Settled::Held { attempt, until } => {
                    let gone = match &mut hold {
                        Some(hold) => hold.owner_gone(self, attempt).await?,
                        None => false,
                    };
                    if !gone {
                        drop(session);
                        self.held_off(spec, started, &mut pause, until).await?;
                        continue;
                    }
                    telemetry::owner_gone(attempt.attempt);
                    (attempt, until.unwrap_or(now))
                }
            };
            // Hold the next number before the takeover shows it.
            if let Some(hold) = &mut hold
                && !hold.take(self, next(seen)).await?
            {
                // Another request is taking it over.
                drop(session);
                self.held_off(spec, started, &mut pause, None).await?;
                continue;
            }
            let until = now.saturating_add(millis(spec.lease));
            if let Some(lease) = crate::store::staged::take_over::<DB>(
                &mut *conn,
                key,
                seen,
                seen_until,
                until,
                self.ring(),
            )
            .await
            .map_err(Error::Store)?
            {
                telemetry::reserved(lease.fence.attempt, true);
                return Ok(Start::Run {
                    lease,
                    resumed: true,
                    hold,
                });
            }
            // Someone else took it over (or it completed) meanwhile: look again (the next
            // hold or probe lets go of the number held for nothing).
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
        let state = Arc::new(AttemptState {
            idem: self.clone(),
            scope: key.scope.to_owned(),
            operation: key.operation.to_owned(),
            key: key.key.to_owned(),
            fence: lease.fence,
            lease: spec.lease,
            ttl: spec.ttl,
            journal: Mutex::new(journal),
            resumed,
            lost: AtomicBool::new(false),
        });
        let beat = heartbeat(Arc::clone(&state));
        let attempt = Attempt {
            inner: Arc::clone(&state),
        };
        let ended = AssertUnwindSafe(work(attempt)).catch_unwind().await;
        drop(beat);
        let number = state.fence;
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
        match ended {
            Ok(Ok(Finished(record))) => Ok(Outcome {
                kind: OutcomeKind::Executed,
                record,
            }),
            Ok(Err(StepError::Permanent(record))) => {
                let record = *record;
                let mut conn = self.acquire_bounded().await.map_err(Error::Store)?;
                if store_record(self, &mut conn, key, number, spec.ttl, &record)
                    .await
                    .map_err(Error::Store)?
                {
                    Ok(Outcome {
                        kind: OutcomeKind::Executed,
                        record,
                    })
                } else {
                    drop(conn);
                    self.fenced(key, &fingerprint).await
                }
            }
            Ok(Err(StepError::Retryable {
                reason,
                retry_after,
            })) => {
                release().await;
                Err(Error::Interrupted {
                    reason,
                    retry_after: retry_after.unwrap_or(self.config().retry_after),
                })
            }
            Ok(Err(StepError::LeaseLost)) => self.fenced(key, &fingerprint).await,
            Ok(Err(StepError::Store(error))) => {
                release().await;
                Err(Error::Store(error))
            }
            Ok(Err(StepError::Journal(error))) => {
                release().await;
                Err(Error::Journal(error))
            }
            Err(_panic) => {
                release().await;
                Err(Error::Panicked)
            }
        }
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
            .map_err(|error| format!("its stored request does not read back: {error}"))
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
                return Err(unresumable(reason));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_answers_are_classified() {
        use http::StatusCode as S;
        for status in [
            S::REQUEST_TIMEOUT,
            S::CONFLICT,
            S::TOO_EARLY,
            S::TOO_MANY_REQUESTS,
            S::INTERNAL_SERVER_ERROR,
            S::BAD_GATEWAY,
            S::SERVICE_UNAVAILABLE,
            S::OK,
            S::FOUND,
        ] {
            let after = Some(Duration::from_secs(7));
            match StepError::from_status(status, after) {
                StepError::Retryable { retry_after, .. } => assert_eq!(retry_after, after),
                other => panic!("{status}: {other}"),
            }
        }
        for status in [
            S::BAD_REQUEST,
            S::UNAUTHORIZED,
            S::PAYMENT_REQUIRED,
            S::NOT_FOUND,
            S::GONE,
            S::UNPROCESSABLE_ENTITY,
        ] {
            let StepError::Permanent(record) = StepError::from_status(status, None) else {
                panic!("{status}: not permanent");
            };
            assert_eq!(record.status, S::UNPROCESSABLE_ENTITY);
            assert_eq!(
                record.headers[http::header::CONTENT_TYPE],
                "application/problem+json"
            );
            let problem: Value = serde_json::from_slice(&record.body).unwrap();
            assert_eq!(problem["type"], StepError::REFUSED);
            let detail = problem["detail"].as_str().unwrap();
            assert!(detail.contains(&status.to_string()), "{detail}");
        }
    }

    #[test]
    fn the_same_request_is_the_same_reservation() {
        let key = KeyRef {
            scope: "tenant:a",
            operation: "pay:v1",
            key: "k1",
        };
        let first = reservation_id(key, b"request", false);
        // Reserved again after its row was lost: the same reservation, the same provider keys.
        assert_eq!(first, reservation_id(key, b"request", false));
        assert_ne!(first, 0);
        // Another request under the key, or another key: another reservation.
        assert_ne!(first, reservation_id(key, b"another", false));
        assert_ne!(
            first,
            reservation_id(KeyRef { key: "k2", ..key }, b"request", false)
        );
        // A key executed again after it expired: a new life, new each time.
        let again = reservation_id(key, b"request", true);
        assert_ne!(again, 0);
        assert_ne!(again, first);
        assert_ne!(again, reservation_id(key, b"request", true));
    }

    #[test]
    fn provider_keys_are_stable_and_distinct() {
        let key = KeyRef {
            scope: "tenant:a",
            operation: "pay:v1",
            key: "k1",
        };
        let a = provider_key(key, 7, "charge");
        assert_eq!(a, provider_key(key, 7, "charge"));
        assert_eq!(a.len(), 37);
        assert!(a.starts_with("idem_"));
        assert_ne!(a, provider_key(key, 7, "refund"));
        let other = KeyRef { key: "k2", ..key };
        assert_ne!(a, provider_key(other, 7, "charge"));
        // Another reservation of the same key (deleted, reserved again): other effects.
        assert_ne!(a, provider_key(key, 8, "charge"));
        // Length prefixes: moving a character between parts changes the key.
        let shifted = KeyRef {
            scope: "tenant:",
            operation: "apay:v1",
            key: "k1",
        };
        assert_ne!(a, provider_key(shifted, 7, "charge"));
        // A row reserved before reservations existed keeps the key its attempts sent.
        assert_eq!(
            provider_key(key, 0, "charge"),
            "idem_35afa7339cf564f691b21a71699f293d"
        );
    }
}
