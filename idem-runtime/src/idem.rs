//! [`Idem`]: the store handle and the execution protocol (the plain function API).

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use http::HeaderName;
use sqlx::pool::PoolConnection;
use sqlx::{Database, Pool, Transaction};

use crate::clock::{Clock, SystemClock, millis};
use crate::error::Error;
use crate::fingerprint::Fingerprint;
use crate::key::{IdempotencyKey, KeyFormat};
use crate::spec::{ExpiryPolicy, OperationSpec};
use crate::store::{
    Backend, Failure, KeyLock, KeyRef, NewRow, ROLLBACK_TO_SAVEPOINT, Record, SAVEPOINT, StoredKey,
    TxSettings,
};

/// Settings shared by every operation of one [`Idem`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// How long a duplicate waits for the first request's transaction before it gets
    /// `409` with `Retry-After`. Also PostgreSQL's `lock_timeout` and SQLite's
    /// `busy_timeout`. Default 2 s.
    pub in_flight_wait: Duration,
    /// PostgreSQL `statement_timeout` inside idempotent transactions. Default 30 s.
    pub statement_timeout: Duration,
    /// The `Retry-After` of a `409`. Default 1 s.
    pub retry_after: Duration,
    /// Largest request body [`crate::Json`] reads; larger → `413`. Default 64 KiB.
    pub max_request_body: usize,
    /// Largest response body that can be stored; larger → rolled back, `500`. Default 1 MiB.
    pub max_response_body: usize,
    /// Which spellings of `Idempotency-Key` are accepted. Default lenient.
    pub key_format: KeyFormat,
    /// Response headers stored and replayed. Default `content-type`, `location`,
    /// `content-language`, `cache-control`.
    pub stored_headers: Vec<HeaderName>,
    /// Pool size when idem opens the pool ([`Idem::connect`]). Default 16.
    pub max_connections: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            in_flight_wait: Duration::from_secs(2),
            statement_timeout: Duration::from_secs(30),
            retry_after: Duration::from_secs(1),
            max_request_body: 64 * 1024,
            max_response_body: 1024 * 1024,
            key_format: KeyFormat::Lenient,
            stored_headers: vec![
                http::header::CONTENT_TYPE,
                http::header::LOCATION,
                http::header::CONTENT_LANGUAGE,
                http::header::CACHE_CONTROL,
            ],
            max_connections: 16,
        }
    }
}

impl Config {
    /// Sets [`Config::in_flight_wait`].
    #[must_use]
    pub fn in_flight_wait(mut self, wait: Duration) -> Self {
        self.in_flight_wait = wait;
        self
    }
    /// Sets [`Config::max_request_body`].
    #[must_use]
    pub fn max_request_body(mut self, bytes: usize) -> Self {
        self.max_request_body = bytes;
        self
    }
    /// Sets [`Config::max_response_body`].
    #[must_use]
    pub fn max_response_body(mut self, bytes: usize) -> Self {
        self.max_response_body = bytes;
        self
    }
    /// Sets [`Config::key_format`].
    #[must_use]
    pub fn key_format(mut self, format: KeyFormat) -> Self {
        self.key_format = format;
        self
    }
    /// Sets [`Config::max_connections`].
    #[must_use]
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n;
        self
    }

    fn tx_settings(&self, session_has_timeouts: bool) -> TxSettings {
        TxSettings {
            lock_timeout: self.in_flight_wait,
            statement_timeout: self.statement_timeout,
            session_has_timeouts,
        }
    }
}

/// The request side of one execution: who, which key, what input.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The scope value: `global`, `tenant:<id>` or `user:<id>` (see [`Call::scope_value`]).
    pub scope: &'a str,
    /// The client's key.
    pub key: &'a IdempotencyKey,
    /// The request's fingerprint.
    pub fingerprint: Fingerprint,
}

impl Call<'_> {
    /// Formats a scope value from its kind and owner, as the HTTP layer does.
    #[must_use]
    pub fn scope_value(kind: crate::ScopeKind, owner: Option<&str>) -> String {
        match owner {
            Some(owner) => format!("{}:{owner}", kind.as_str()),
            None => kind.as_str().to_owned(),
        }
    }
}

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    /// The work ran now and its record was stored and committed.
    Executed,
    /// The key was already completed: this is the stored record; nothing ran.
    Replayed,
    /// The work ran and failed (`status >= 400`, not stored): everything rolled back and the
    /// key is free again.
    Failed,
}

/// The record to answer with, and how it came about.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What happened.
    pub kind: OutcomeKind,
    /// The response.
    pub record: Record,
}

/// The work of one operation: runs inside the key's transaction and returns its record.
pub type Work<'t> = BoxFuture<'t, Record>;

/// Pins a closure to the signature [`Idem::execute`] takes, so that closures stored in a
/// variable first still infer the higher-ranked lifetime.
pub fn work_fn<DB, F>(work: F) -> F
where
    DB: Backend,
    F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Work<'t> + Send,
{
    work
}

/// The handle to idem's store: a pool, the settings and a clock. Cheap to clone.
///
/// ```no_run
/// use idem_runtime::{Call, Config, Fingerprint, IdempotencyKey, Idem, OperationSpec, Record};
/// use sqlx::Sqlite;
///
/// const SYNC: OperationSpec = OperationSpec::new("sync-invoice:v1");
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let idem = Idem::<Sqlite>::connect("sqlite://app.db", Config::default()).await?;
/// idem.migrate().await?;
///
/// // A message consumer: the message id is the key, the payload the input.
/// let payload = serde_json::json!({"invoice": 42});
/// let key = IdempotencyKey::new("msg-7f3a")?;
/// let call = Call { scope: "global", key: &key, fingerprint: Fingerprint::of(SYNC.id, &payload, &[])? };
/// let outcome = idem
///     .execute(&SYNC, call, |tx| Box::pin(async move {
///         sqlx::query("UPDATE invoices SET synced = 1 WHERE id = 42").execute(&mut **tx).await.ok();
///         Record::json(200, &serde_json::json!({"synced": true})).unwrap_or_default()
///     }))
///     .await?;
/// println!("{:?}", outcome.kind); // Executed the first time, Replayed after
/// # Ok(()) }
/// ```
pub struct Idem<DB: Backend> {
    inner: Arc<Inner<DB>>,
}

struct Inner<DB: Backend> {
    pool: Pool<DB>,
    config: Config,
    tx_settings: TxSettings,
    clock: Arc<dyn Clock>,
    /// [`Backend::namespace`], asked on the first keyed execution.
    namespace: std::sync::OnceLock<String>,
    #[cfg(feature = "failpoints")]
    armed: std::sync::Mutex<Option<crate::failpoint::FailPointSpec>>,
}

impl<DB: Backend> Clone for Idem<DB> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<DB: Backend> fmt::Debug for Idem<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The pool's options hold the connection string: never print it.
        f.debug_struct("Idem")
            .field("backend", &<DB as sqlx::Database>::NAME)
            .field("config", &self.inner.config)
            .field("clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}

impl<DB: Backend> Idem<DB> {
    /// Opens a pool on `url` with settings suited to the protocol (SQLite: WAL, created if
    /// missing, `busy_timeout` = [`Config::in_flight_wait`]).
    ///
    /// # Errors
    /// When the URL is invalid or the database unreachable.
    pub async fn connect(url: &str, config: Config) -> Result<Self, sqlx::Error> {
        let settings = config.tx_settings(true);
        let pool = DB::connect(url, config.max_connections, &settings).await?;
        Ok(Self::with_settings(pool, config, settings))
    }

    /// Uses an existing pool. For SQLite, set `busy_timeout` on it to bound lock waits; on
    /// PostgreSQL each transaction sets its `lock_timeout` and `statement_timeout` with
    /// `SET LOCAL` (in the same round trip as `BEGIN`).
    #[must_use]
    pub fn from_pool(pool: Pool<DB>, config: Config) -> Self {
        let settings = config.tx_settings(false);
        Self::with_settings(pool, config, settings)
    }

    fn with_settings(pool: Pool<DB>, config: Config, tx_settings: TxSettings) -> Self {
        Self {
            inner: Arc::new(Inner {
                pool,
                tx_settings,
                config,
                clock: Arc::new(SystemClock),
                namespace: std::sync::OnceLock::new(),
                #[cfg(feature = "failpoints")]
                armed: std::sync::Mutex::new(None),
            }),
        }
    }

    /// Replaces the clock (tests, simulations). Call before cloning the handle.
    #[must_use]
    pub fn with_clock(self, clock: impl Clock) -> Self {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            pool: shared.pool.clone(),
            config: shared.config.clone(),
            tx_settings: shared.tx_settings.clone(),
            clock: Arc::clone(&shared.clock),
            namespace: shared.namespace.clone(),
            #[cfg(feature = "failpoints")]
            armed: std::sync::Mutex::new(None),
        });
        Self {
            inner: Arc::new(Inner {
                clock: Arc::new(clock),
                ..inner
            }),
        }
    }

    /// Creates or updates the key table.
    ///
    /// # Errors
    /// When a migration fails.
    pub async fn migrate(&self) -> Result<(), sqlx::migrate::MigrateError> {
        DB::migrate(&self.inner.pool).await
    }

    /// The pool, for the application's own queries.
    #[must_use]
    pub fn pool(&self) -> &Pool<DB> {
        &self.inner.pool
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Now, by the injected clock.
    #[must_use]
    pub fn now_millis(&self) -> i64 {
        self.inner.clock.now_millis()
    }

    /// Reads one key row: the store's view of a key, for tools and tests.
    ///
    /// # Errors
    /// When the store fails.
    pub async fn lookup(&self, key: KeyRef<'_>) -> Result<Option<StoredKey>, sqlx::Error> {
        let mut conn = self.inner.pool.acquire().await?;
        DB::lookup(&mut conn, key).await
    }

    /// Runs `work` at most once per (`call.scope`, `spec.id`, `call.key`):
    ///
    /// 1. one `SELECT` of the key row (outside any transaction): a completed key with the same
    ///    fingerprint replays its record; another fingerprint is [`Error::Mismatch`]; an expired
    ///    key is [`Error::Expired`] or, with [`ExpiryPolicy::Reexecute`], runs again;
    /// 2. otherwise `BEGIN` taking the key's lock (PostgreSQL: an advisory lock in the same
    ///    round trip; SQLite: `BEGIN IMMEDIATE`), `work` on that transaction, one `INSERT` of
    ///    the completed key row with the record, `COMMIT`.
    ///
    /// A concurrent duplicate waits for the key's lock up to [`Config::in_flight_wait`] and
    /// gets [`Error::InFlight`] past the wait. Whenever an execution ends without storing its
    /// record — the key's row appeared meanwhile (the `INSERT` finds it), `work` failed or
    /// panicked — everything rolls back and the key is looked up once more: a record a
    /// concurrent execution committed is the answer then, never a second effect.
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
        let key = KeyRef {
            scope: call.scope,
            operation: spec.id,
            key: call.key.as_str(),
        };
        let started = self.now_millis();
        // One connection for the lookup and, if it comes to that, the transaction.
        let mut guarded = self.acquire().await?;
        let stored = DB::lookup(&mut guarded.conn, key)
            .await
            .map_err(Error::Store)?;
        let replace_expired = match self.settle(spec, &call, stored, started)? {
            Settled::Answer(outcome) => return Ok(outcome),
            Settled::Run { replace_expired } => replace_expired,
        };
        let namespace = match self.inner.namespace.get() {
            Some(namespace) => namespace,
            None => {
                let found = DB::namespace(&mut guarded.conn)
                    .await
                    .map_err(Error::Store)?;
                self.inner.namespace.get_or_init(|| found)
            }
        };
        let lock = KeyLock { namespace, key };
        // (The error goes out through `failed` so that nothing holding the borrow of the
        // connection outlives the `let`.)
        let mut failed = None;
        guarded.beginning = true;
        let Some(mut tx) = DB::begin(&mut guarded.conn, &self.inner.tx_settings, Some(lock))
            .await
            .map_err(|error| failed = Some(error))
            .ok()
        else {
            DB::abandon_begin(&mut guarded.conn).await;
            guarded.beginning = false;
            // `failed` is always set here.
            return Err(failed.map_or_else(|| self.in_flight(), |e| self.reservation_error(e)));
        };
        guarded.beginning = false;
        if spec.store_client_errors {
            DB::execute_raw(&mut tx, SAVEPOINT)
                .await
                .map_err(Error::Store)?;
        }
        let Ok(record) = AssertUnwindSafe(work(&mut tx)).catch_unwind().await else {
            // Dropping rolls back, pipelined with the lookup that follows.
            drop(tx);
            return self
                .recheck(
                    &mut guarded.conn,
                    spec,
                    &call,
                    key,
                    started,
                    Err(Error::Panicked),
                )
                .await;
        };
        self.fail_point(crate::failpoint::FailPoint::AfterHandler)?;
        if record.is_failure() {
            if spec.store_client_errors && record.status < 500 {
                DB::execute_raw(&mut tx, ROLLBACK_TO_SAVEPOINT)
                    .await
                    .map_err(Error::Store)?;
            } else {
                drop(tx);
                let failed = Ok(Outcome {
                    kind: OutcomeKind::Failed,
                    record,
                });
                return self
                    .recheck(&mut guarded.conn, spec, &call, key, started, failed)
                    .await;
            }
        }
        let headers = record.headers_json(&self.inner.config.stored_headers);
        let row = NewRow {
            key,
            fingerprint: call.fingerprint.as_bytes(),
            record: &record,
            headers_json: &headers,
            created_ms: started,
            completed_ms: self.now_millis(),
            expires_ms: started.saturating_add(millis(spec.ttl)),
            replace_expired,
        };
        let stored = if replace_expired || self.armed(crate::failpoint::FailPoint::AfterRecord) {
            // Two steps: the replacing `INSERT … ON CONFLICT DO UPDATE … WHERE expired` tells
            // by its row count whether it won, and the fail point sits between the steps.
            let stored = DB::store(&mut tx, row).await.map_err(Error::Store)?;
            if stored {
                self.fail_point(crate::failpoint::FailPoint::AfterRecord)?;
                tx.commit().await.map_err(Error::CommitUnknown)?;
            } else {
                drop(tx);
            }
            stored
        } else {
            DB::store_and_commit(tx, row)
                .await
                .map_err(Error::CommitUnknown)?
        };
        if !stored {
            // Rolled back (or about to be, with `tx`): another execution of the key committed.
            let busy = Err(self.in_flight());
            return self
                .recheck(&mut guarded.conn, spec, &call, key, started, busy)
                .await;
        }
        self.fail_point(crate::failpoint::FailPoint::AfterCommit)?;
        Ok(Outcome {
            kind: OutcomeKind::Executed,
            record,
        })
    }

    /// Runs `work` in a transaction with no key: for operations whose key is optional.
    ///
    /// # Errors
    /// [`Error::Store`], [`Error::Panicked`] or [`Error::CommitUnknown`].
    pub async fn execute_unkeyed<F>(&self, work: F) -> Result<Outcome, Error>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Work<'t> + Send,
    {
        let mut guarded = self.acquire().await?;
        let mut failed = None;
        guarded.beginning = true;
        let Some(mut tx) = DB::begin(&mut guarded.conn, &self.inner.tx_settings, None)
            .await
            .map_err(|error| failed = Some(error))
            .ok()
        else {
            DB::abandon_begin(&mut guarded.conn).await;
            guarded.beginning = false;
            // `failed` is always set here.
            return Err(failed.map_or(Error::Panicked, Error::Store));
        };
        guarded.beginning = false;
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
        tx.commit().await.map_err(Error::CommitUnknown)?;
        Ok(Outcome {
            kind: OutcomeKind::Executed,
            record,
        })
    }

    async fn acquire(&self) -> Result<Guarded<DB>, Error> {
        Ok(Guarded {
            conn: self.inner.pool.acquire().await.map_err(Error::Store)?,
            beginning: false,
        })
    }

    /// What a key row found by a lookup at `now` means for `call`.
    fn settle(
        &self,
        spec: &OperationSpec,
        call: &Call<'_>,
        stored: Option<StoredKey>,
        now: i64,
    ) -> Result<Settled, Error> {
        let Some(stored) = stored else {
            return Ok(Settled::Run {
                replace_expired: false,
            });
        };
        if stored.expires_at_ms <= now {
            return match spec.on_expired {
                ExpiryPolicy::Gone => Err(Error::Expired),
                ExpiryPolicy::Reexecute => Ok(Settled::Run {
                    replace_expired: true,
                }),
            };
        }
        if stored.fingerprint.as_slice() != call.fingerprint.as_bytes() {
            return Err(Error::Mismatch);
        }
        match stored.record {
            Some(record) => Ok(Settled::Answer(Outcome {
                kind: OutcomeKind::Replayed,
                record,
            })),
            // Another execution holds the key (staged mode's committed reservations).
            None => Err(self.in_flight()),
        }
    }

    /// After an execution that stored nothing: a concurrent execution of the same key may
    /// have committed between this one's lookup and its lock, and its record is then the
    /// answer. Otherwise `own` is.
    async fn recheck(
        &self,
        conn: &mut DB::Connection,
        spec: &OperationSpec,
        call: &Call<'_>,
        key: KeyRef<'_>,
        now: i64,
        own: Result<Outcome, Error>,
    ) -> Result<Outcome, Error> {
        // If even this fails, the answer is unknown: 503, retry with the same key.
        match DB::lookup(conn, key).await.map_err(Error::Store)? {
            None => own,
            stored @ Some(_) => match self.settle(spec, call, stored, now)? {
                Settled::Answer(outcome) => Ok(outcome),
                Settled::Run { .. } => own,
            },
        }
    }

    /// Deletes keys that expired more than `grace` ago, `batch` rows per statement with
    /// `pause` between statements, until none are left. Returns how many were deleted.
    ///
    /// Each batch is one short statement (on PostgreSQL it skips rows a running request
    /// holds), so the sweep never blocks requests for long; the pause bounds how much of the
    /// database's write capacity it takes from them.
    ///
    /// A deleted key is unknown again: with [`ExpiryPolicy::Gone`] a request for it after the
    /// sweep runs anew, so choose `grace` longer than any client keeps retrying.
    ///
    /// # Errors
    /// When the store fails; rows deleted by earlier batches stay deleted.
    pub async fn sweep_expired(
        &self,
        grace: Duration,
        batch: u32,
        pause: Duration,
    ) -> Result<u64, sqlx::Error> {
        let before = self.now_millis().saturating_sub(millis(grace));
        let batch = i64::from(batch.max(1));
        let mut total = 0;
        loop {
            let deleted = DB::sweep(&self.inner.pool, before, batch).await?;
            total += deleted;
            if deleted < u64::try_from(batch).unwrap_or(u64::MAX) {
                return Ok(total);
            }
            if pause.is_zero() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(pause).await;
            }
        }
    }

    fn in_flight(&self) -> Error {
        Error::InFlight {
            retry_after: self.inner.config.retry_after,
        }
    }

    fn reservation_error(&self, error: sqlx::Error) -> Error {
        match DB::classify(&error) {
            Failure::LockTimeout => self.in_flight(),
            Failure::Other => Error::Store(error),
        }
    }

    /// Arms a fail point: the next execution that reaches it fails there (feature
    /// `failpoints`).
    #[cfg(feature = "failpoints")]
    pub fn fail_at(&self, point: crate::FailPoint, action: crate::FailAction) {
        *self
            .inner
            .armed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(crate::failpoint::FailPointSpec(point, action));
    }

    #[cfg(feature = "failpoints")]
    fn fail_point(&self, point: crate::FailPoint) -> Result<(), Error> {
        let mut armed = self
            .inner
            .armed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match *armed {
            Some(crate::failpoint::FailPointSpec(p, action)) if p == point => {
                *armed = None;
                match action {
                    crate::FailAction::Error => Err(Error::Injected(point.as_str())),
                    crate::FailAction::Abort => std::process::abort(),
                }
            }
            _ => Ok(()),
        }
    }

    /// Whether a fail point is armed at `point` (feature `failpoints`).
    #[cfg(feature = "failpoints")]
    fn armed(&self, point: crate::FailPoint) -> bool {
        self.inner
            .armed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .is_some_and(|spec| spec.0 == point)
    }

    #[cfg(not(feature = "failpoints"))]
    #[inline(always)]
    #[allow(clippy::unused_self)] // compiled out without the feature
    fn armed(&self, _point: crate::failpoint::FailPoint) -> bool {
        false
    }

    #[cfg(not(feature = "failpoints"))]
    #[inline(always)]
    #[allow(clippy::unused_self, clippy::unnecessary_wraps)] // compiled out without the feature
    fn fail_point(&self, _point: crate::failpoint::FailPoint) -> Result<(), Error> {
        Ok(())
    }
}

/// A pooled connection that is closed rather than pooled again if the execution using it is
/// dropped (its client went away) while `BEGIN` is under way: sqlx would pool it inside a
/// transaction it does not know about, holding the key's lock on PostgreSQL.
struct Guarded<DB: Database> {
    conn: PoolConnection<DB>,
    beginning: bool,
}

impl<DB: Database> Drop for Guarded<DB> {
    fn drop(&mut self) {
        if self.beginning {
            self.conn.close_on_drop();
        }
    }
}

enum Settled {
    /// Answer without running: a replay.
    Answer(Outcome),
    /// Run the work; `replace_expired` when an expired row is in the way.
    Run { replace_expired: bool },
}
