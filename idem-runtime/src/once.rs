//! The plain function API: exactly-once work outside HTTP — message consumers, jobs,
//! webhooks — with typed results.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::future::BoxFuture;
use http::StatusCode;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sqlx::Transaction;

use crate::error::Error;
use crate::fingerprint::Fingerprint;
use crate::key::IdempotencyKey;
use crate::protocol::{Call, Idem, OutcomeKind, work_fn};
use crate::record::Record;
use crate::spec::{OperationSpec, Scope};
use crate::store::Backend;

/// The value of an operation run with [`Idem::once`], and whether it was replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done<T> {
    /// What the work returned: now, or the first time (a replay, read back from the store).
    pub value: T,
    /// `true` when the work did not run now: the key was completed before.
    pub replayed: bool,
}

/// Why [`Idem::once`] has no value.
#[derive(Debug)]
#[non_exhaustive]
pub enum OnceError<E> {
    /// The work returned this error: everything it wrote was rolled back, nothing was
    /// stored, and the key is free for a retry.
    Failed(E),
    /// idem answered instead of the work: the key was used with another input
    /// ([`Error::Mismatch`]), another execution holds it ([`Error::InFlight`]), it expired,
    /// the store failed, the commit's outcome is unknown, the work panicked.
    Idem(Error),
    /// The value stored for this key cannot be read as `T` (its type changed without a new
    /// operation version).
    Decode(serde_json::Error),
    /// The work's value cannot be stored as JSON; everything was rolled back.
    Encode(serde_json::Error),
}

impl<E: fmt::Display> fmt::Display for OnceError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed(error) => write!(f, "the operation failed: {error}"),
            Self::Idem(error) => error.fmt(f),
            Self::Decode(error) => write!(f, "the stored value cannot be read back: {error}"),
            Self::Encode(error) => write!(f, "the value cannot be stored: {error}"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for OnceError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Failed(error) => Some(error),
            Self::Idem(error) => Some(error),
            Self::Decode(error) | Self::Encode(error) => Some(error),
        }
    }
}

impl<E> From<Error> for OnceError<E> {
    fn from(error: Error) -> Self {
        Self::Idem(error)
    }
}

/// What the work left behind besides its record.
enum Left<T, E> {
    Value(T),
    Failed(E),
    Encode(serde_json::Error),
}

impl<DB: Backend> Idem<DB> {
    /// Runs `work` at most once per (`scope`, `spec`, `key`), in a transaction that also
    /// holds the key and stores the value: the same protocol as an `#[idempotent]` handler
    /// (see [`Idem::execute`]), with a typed value instead of an HTTP response.
    ///
    /// - `input` is fingerprinted (its canonical JSON, less `spec.fingerprint_exclude`,
    ///   paths relative to `input`): the same key with another input is
    ///   [`Error::Mismatch`].
    /// - `Ok(value)` commits the work's writes with the value, stored as JSON; every later
    ///   call with the key gets it back (`replayed: true`) without running anything.
    /// - `Err(error)` rolls everything back and stores nothing: the key stays free.
    ///
    /// ```no_run
    /// use idem_runtime::spec::{OperationSpec, Scope};
    /// use idem_runtime::{Config, Idem, IdempotencyKey, OnceError};
    /// use sqlx::Sqlite;
    ///
    /// const SYNC_INVOICE: OperationSpec = OperationSpec::new("sync-invoice:v1");
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Synced { invoice: i64, rows: u64 }
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let idem = Idem::<Sqlite>::connect("sqlite://app.db", Config::default()).await?;
    /// idem.migrate().await?;
    ///
    /// // A message consumer: the message id is the key, the payload the input.
    /// let payload = serde_json::json!({"invoice": 42});
    /// let key = IdempotencyKey::new("msg-7f3a")?;
    /// let done = idem
    ///     .once(&SYNC_INVOICE, &Scope::global(), &key, &payload, |tx| {
    ///         Box::pin(async move {
    ///             let rows = sqlx::query("UPDATE invoices SET synced = 1 WHERE id = 42")
    ///                 .execute(&mut **tx)
    ///                 .await?
    ///                 .rows_affected();
    ///             Ok::<_, sqlx::Error>(Synced { invoice: 42, rows })
    ///         })
    ///     })
    ///     .await?;
    /// println!("invoice {} synced ({} rows), replayed: {}", done.value.invoice, done.value.rows, done.replayed);
    /// # Ok(()) }
    /// ```
    ///
    /// With a principal instead of a fixed scope: `principal.scope_for(&SPEC)?` (see
    /// [`crate::Principal::scope_for`]).
    ///
    /// # Errors
    /// [`OnceError`].
    pub async fn once<I, T, E, F>(
        &self,
        spec: &OperationSpec,
        scope: &Scope,
        key: &IdempotencyKey,
        input: &I,
        work: F,
    ) -> Result<Done<T>, OnceError<E>>
    where
        I: Serialize + ?Sized,
        T: Serialize + DeserializeOwned + Send + 'static,
        E: Send + 'static,
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> BoxFuture<'t, Result<T, E>>
            + Send
            + 'static,
    {
        let (fingerprint, canonical) =
            Fingerprint::of_kept(spec.id, input, spec.fingerprint_exclude)
                .map_err(|e| OnceError::Idem(Error::Input(e)))?;
        let left: Arc<Mutex<Option<Left<T, E>>>> = Arc::new(Mutex::new(None));
        let slot = Arc::clone(&left);
        let work = work_fn(move |tx: &mut Transaction<'_, DB>| {
            Box::pin(async move {
                let (record, value) = match work(tx).await {
                    Ok(value) => match Record::json(StatusCode::OK, &value) {
                        Ok(record) => (record, Left::Value(value)),
                        Err(error) => (Record::failure(), Left::Encode(error)),
                    },
                    Err(error) => (Record::failure(), Left::Failed(error)),
                };
                *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(value);
                record
            })
        });
        let call = Call {
            scope: scope.as_str(),
            key,
            fingerprint,
            request: spec.mismatch_detail.then_some(&canonical[..]),
        };
        let outcome = self.execute(spec, call, work).await?;
        let left = left.lock().unwrap_or_else(PoisonError::into_inner).take();
        match (outcome.kind, left) {
            (OutcomeKind::Executed, Some(Left::Value(value))) => Ok(Done {
                value,
                replayed: false,
            }),
            (OutcomeKind::Failed, Some(Left::Failed(error))) => Err(OnceError::Failed(error)),
            (OutcomeKind::Failed, Some(Left::Encode(error))) => Err(OnceError::Encode(error)),
            // A replay, or the answer of a concurrent execution that committed first.
            _ => serde_json::from_slice(&outcome.record.body)
                .map(|value| Done {
                    value,
                    replayed: true,
                })
                .map_err(OnceError::Decode),
        }
    }
}
