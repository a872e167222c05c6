//! [`Attempt`]: one attempt of a staged operation, its journaled steps and its lease's heartbeat.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};
use sqlx::Transaction;

use super::*;
use crate::clock::millis;
use crate::protocol::{Idem, Record};
use crate::spec::OperationSpec;
use crate::store::staged::{Ending, Fence};
use crate::store::{Backend, KeyRef};
use crate::telemetry;

/// One attempt at a staged key: what the work receives. Cheap to clone.
pub struct Attempt<DB: Backend> {
    pub(super) inner: Arc<AttemptState<DB>>,
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

pub(super) struct AttemptState<DB: Backend> {
    pub(super) idem: Idem<DB>,
    pub(super) scope: String,
    pub(super) operation: String,
    pub(super) key: String,
    /// The reservation this attempt runs, and its number.
    pub(super) fence: Fence,
    pub(super) lease: Duration,
    /// The operation's TTL, counted from the completion.
    pub(super) ttl: Duration,
    /// Step name → recorded result. Never held across an `await`.
    pub(super) journal: Mutex<Map<String, Value>>,
    pub(super) resumed: bool,
    pub(super) lost: AtomicBool,
}

impl<DB: Backend> AttemptState<DB> {
    /// Attempt `fence` of `key`, run by `idem` under `spec`, its recorded steps `journal`.
    pub(super) fn new(
        idem: &Idem<DB>,
        spec: &OperationSpec,
        key: KeyRef<'_>,
        fence: Fence,
        resumed: bool,
        journal: Map<String, Value>,
    ) -> Self {
        Self {
            idem: idem.clone(),
            scope: key.scope.to_owned(),
            operation: key.operation.to_owned(),
            key: key.key.to_owned(),
            fence,
            lease: spec.lease,
            ttl: spec.ttl,
            journal: Mutex::new(journal),
            resumed,
            lost: AtomicBool::new(false),
        }
    }

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
    /// out.) [`provider_key`] derives the same outside an attempt, for tools.
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

/// The provider key of `step` in the reservation `reservation` of `key`: what
/// [`Attempt::provider_key`] gives an attempt, and what a tool shows an operator for a
/// recorded step (the key row's `reservation` column: [`KeyRow::reservation`]), to search a
/// provider's dashboard with. `idem_` and 32 hexadecimal digits of SHA-256 over the
/// length-prefixed scope, operation, key, reservation and step name; reservation 0 (a row
/// reserved before idem had reservations) is left out.
///
/// ```
/// use idem_runtime::staged::provider_key;
/// use idem_runtime::store::KeyRef;
///
/// let key = KeyRef { scope: "tenant:a", operation: "pay:v1", key: "k1" };
/// assert_eq!(provider_key(key, 0, "charge"), "idem_35afa7339cf564f691b21a71699f293d");
/// // The same on every attempt at one reservation; another step, another key.
/// assert_eq!(provider_key(key, 7, "charge"), provider_key(key, 7, "charge"));
/// assert_ne!(provider_key(key, 7, "charge"), provider_key(key, 7, "refund"));
/// ```
///
/// [`KeyRow::reservation`]: crate::store::KeyRow::reservation
#[must_use]
pub fn provider_key(key: KeyRef<'_>, reservation: i64, step: &str) -> String {
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

pub(super) async fn store_record<DB: Backend>(
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
pub(super) fn reservation_id(key: KeyRef<'_>, fingerprint: &[u8], replace_expired: bool) -> i64 {
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
pub(super) fn next(seen: Fence) -> Fence {
    Fence {
        reservation: seen.reservation,
        attempt: seen.attempt + 1,
    }
}

/// Aborts the heartbeat when the attempt ends, however it ends.
pub(super) struct Heartbeat(tokio::task::JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub(super) fn heartbeat<DB: Backend>(state: Arc<AttemptState<DB>>) -> Heartbeat {
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
