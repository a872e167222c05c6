//! [`Idem`], the store handle, and the atomic protocol that runs one execution of a key.
//!
//! An execution goes through named steps, each a method below:
//!
//! 1. `Idem::settle` — what the key row found by the lookup means: replay, `422`, `410`,
//!    `409`, or run;
//! 2. `Session::begin` — `BEGIN` taking the key's lock and looking at the key again once it
//!    holds it, in the same round trip: a key another execution stored meanwhile is answered
//!    as in step 5, without running the work;
//! 3. the work, on the transaction (a panic is caught);
//! 4. `Idem::store` — the completed key row inserted with the record and committed;
//! 5. `Idem::recheck` — whenever nothing was stored, the key is looked up once more: a
//!    record a concurrent execution committed is the answer then.
//!
//! Where step 2 is one round trip that fails when the key's row exists (PostgreSQL), an
//! operation whose keys were mostly new begins with step 2 (`first_step.rs`): a key
//! found there goes back to the lookup and step 1.
//!
//! The key is held by the store's lock while the work runs, not by a reserved row
//! ([why, and each store's lock](crate::store#the-keys-lock)); staged mode, whose effects
//! cannot wait for a `COMMIT`, reserves a row instead ([`crate::staged`]).
//!
//! # What an error means
//!
//! The store sorts a database error into a lock wait that ran out, the key taken, a
//! connection gone, or anything else (`Backend::classify`); the answer follows from that and
//! from the step it happened in. The rule: an error the database answered means the statement
//! failed and nothing of the transaction committed; only a connection that fails while
//! `COMMIT` is under way leaves the outcome unknown. Any failure of a round trip that carried
//! `COMMIT` answers `503` "retry with the same key", which is right whether the commit
//! happened or not. A dead pooled connection met by the lookup (or by the key's lock, where
//! it comes first) is dropped and the lookup retried on another; met by any other statement,
//! it fails the execution with `503`.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use futures_util::FutureExt as _;
use futures_util::future::BoxFuture;
use sqlx::pool::PoolConnection;
use sqlx::{Connection as _, Pool, Transaction};

use crate::clock::{Clock, SystemClock, millis};
use crate::config::Config;
use crate::connections::{self, Conn, Connections};
use crate::error::Error;
use crate::failpoint::{FailPoint, FailPoints};
use crate::fingerprint::Fingerprint;
use crate::first_step::FirstStep;
use crate::key::IdempotencyKey;
pub use crate::record::{Outcome, OutcomeKind, Record};
use crate::spec::{ExpiryPolicy, OperationSpec};
use crate::store::staged::Fence;
use crate::store::{
    Backend, Begun, Failure, KeyLock, KeyRef, KeyRow, KeyStatus, KeyTable, Keyring, NewRow,
    StoreError, StoredKey, TxSettings,
};
use crate::telemetry;

/// The request side of one execution: who, which key, what input.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The scope's stored form: `global`, `tenant:<id>` or `user:<id>`
    /// ([`Scope::as_str`](crate::spec::Scope::as_str)).
    pub scope: &'a str,
    /// The client's key.
    pub key: &'a IdempotencyKey,
    /// The request's fingerprint.
    pub fingerprint: Fingerprint,
    /// The canonical request the fingerprint is of, where the caller kept it: its field
    /// digests are stored with the key, and a `422` for another request under the key names
    /// the fields that differ ([`crate::fields`]). `None`: a `422` names no field.
    pub request: Option<&'a [u8]>,
}

/// The work of one operation at the record level: runs inside the key's transaction and
/// returns its record.
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
/// Handlers reach it through [`IdemState`](crate::IdemState); the plain function API
/// ([`Idem::once`]) and maintenance ([`Idem::sweep_expired`], [`Idem::keys`]) are methods.
///
/// ```no_run
/// use idem_runtime::{Config, Idem};
/// use sqlx::Sqlite;
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let idem = Idem::<Sqlite>::connect("sqlite://app.db", Config::default()).await?;
/// idem.migrate().await?; // idem's own tables, with their own migration history
/// # Ok(()) }
/// ```
pub struct Idem<DB: Backend> {
    inner: Arc<Inner<DB>>,
}

struct Inner<DB: Backend> {
    pool: Pool<DB>,
    /// The request path's connections ([`crate::connections`]), beside the pool.
    conns: Connections<DB>,
    config: Config,
    tx_settings: TxSettings,
    clock: Arc<dyn Clock>,
    /// [`Backend::namespace`], asked on the first keyed execution.
    namespace: OnceLock<String>,
    /// Staged attempts' hold connections ([`crate::hold`]), opened on first use.
    holds: OnceLock<Holds<DB>>,
    /// The standby replays are read from first ([`Config::replica`]).
    replica: Option<Replica<DB>>,
    /// Per operation, whether an execution begins with the key's lock or its lookup.
    first_step: FirstStep,
    fail: FailPoints,
}

/// A standby replays are read from first ([`Config::replica`]): its pool, the request path's
/// connections beside it, and until when it is passed over after it failed.
struct Replica<DB: Backend> {
    pool: Pool<DB>,
    conns: Connections<DB>,
    resting_until: Arc<std::sync::Mutex<Option<Instant>>>,
}

/// How long a standby that failed a lookup is passed over.
const REPLICA_REST: std::time::Duration = std::time::Duration::from_secs(5);

impl<DB: Backend> Replica<DB> {
    fn new(pool: Pool<DB>) -> Self {
        Self {
            conns: connections::beside(&pool),
            pool,
            resting_until: Arc::default(),
        }
    }

    fn resting(&self) -> bool {
        let until = self
            .resting_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        until.is_some_and(|until| Instant::now() < until)
    }

    fn rest(&self) {
        *self
            .resting_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(Instant::now() + REPLICA_REST);
    }
}

impl<DB: Backend> Clone for Replica<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            conns: self.conns.clone(),
            resting_until: Arc::clone(&self.resting_until),
        }
    }
}

impl<DB: Backend> Inner<DB> {
    /// Another handle's state, for a builder method called after the handle was cloned.
    fn copy(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            conns: self.conns.clone(),
            config: self.config.clone(),
            tx_settings: self.tx_settings.clone(),
            clock: Arc::clone(&self.clock),
            namespace: self.namespace.clone(),
            holds: self.holds.clone(),
            replica: self.replica.clone(),
            first_step: FirstStep::new(DB::DIALECT.lock_first_miss),
            fail: FailPoints::default(),
        }
    }
}

/// The pool of staged attempts' hold connections, and the application pool's connect options
/// it was last given.
struct Holds<DB: Backend> {
    pool: Pool<DB>,
    on: std::sync::Mutex<Arc<<DB::Connection as sqlx::Connection>::Options>>,
}

impl<DB: Backend> Clone for Holds<DB> {
    fn clone(&self) -> Self {
        let on = self
            .on
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Self {
            pool: self.pool.clone(),
            on: std::sync::Mutex::new(Arc::clone(&on)),
        }
    }
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
    /// missing, `busy_timeout` = [`Config::in_flight_wait`]; PostgreSQL: `lock_timeout` and
    /// `statement_timeout` in each of idem's transactions; MySQL: `utf8mb4`, the key's lock
    /// wait bounded in the statement that takes it).
    ///
    /// Without [`Config::transaction_pooler`], on PostgreSQL, it asks two connections which
    /// server session each is on: the same one for both means a transaction pooler is in
    /// between (usually told at once; a busy pooler may hide it), and it refuses to go on,
    /// rather than fail later on prepared statements the pooler does not keep.
    ///
    /// # Errors
    /// When the URL is invalid or the database unreachable; [`sqlx::Error::Configuration`]
    /// when a transaction pooler is found and [`Config::transaction_pooler`] is not set.
    pub async fn connect(url: &str, config: Config) -> Result<Self, sqlx::Error> {
        if config.transaction_pooler {
            crate::store::pooler::behind_transaction_pooler();
        }
        let settings = config.tx_settings();
        let pool =
            crate::store::connect::connect::<DB>(url, config.max_connections, &settings).await?;
        if !config.transaction_pooler && crate::store::connect::shared_sessions::<DB>(&pool).await?
        {
            pool.close().await;
            return Err(sqlx::Error::Configuration(
                "two connections of the pool met the same database session: a transaction \
                 pooler (PgBouncer in transaction mode, say) is in between, which prepared \
                 statements do not survive; set Config::transaction_pooler"
                    .into(),
            ));
        }
        let replica = match &config.replica {
            Some(url) => Some(
                crate::store::connect::connect::<DB>(
                    url.as_str(),
                    config.max_connections,
                    &settings,
                )
                .await
                .map_err(|e| sqlx::Error::Configuration(format!("Config::replica: {e}").into()))?,
            ),
            None => None,
        };
        let idem = Self::with_settings(pool, config, settings);
        Ok(match replica {
            Some(replica) => idem.with_replica(replica),
            None => idem,
        })
    }

    /// Reads replays from `replica`, a pool on a standby, first, as [`Config::replica`] says
    /// ([`Idem::connect`] opens it from there; this is for a pool of the application's own).
    /// Call before cloning the handle.
    #[must_use]
    pub fn with_replica(self, replica: Pool<DB>) -> Self {
        let replica = Some(Replica::new(replica));
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| shared.copy());
        Self {
            inner: Arc::new(Inner { replica, ..inner }),
        }
    }

    /// Uses an existing pool, shared with the application. The request path's lookups and
    /// key transactions keep up to the pool's size of connections beside it, opened through
    /// it (its options and hooks apply) and detached from it
    /// ([`Config::max_connections`]). For SQLite, set `busy_timeout`
    /// on it to bound lock waits; on PostgreSQL each transaction sets its `lock_timeout` and
    /// `statement_timeout` with `SET LOCAL` (in the same round trip as `BEGIN`), as on pools
    /// idem opens; on MySQL the statement that takes the key's lock bounds its own wait.
    ///
    /// idem's statements carry keys, tenants and response bodies: switch sqlx's statement
    /// logging off on such a pool, or sqlx's slow-statement warning writes them to the log
    /// (pools [`Idem::connect`] opens have it off):
    ///
    /// ```
    /// use idem_runtime::sqlx::ConnectOptions as _;
    /// use idem_runtime::sqlx::sqlite::SqliteConnectOptions;
    ///
    /// // (The same on `PgConnectOptions`.)
    /// let options = "sqlite://app.db"
    ///     .parse::<SqliteConnectOptions>()?
    ///     .disable_statement_logging();
    /// # Ok::<(), idem_runtime::sqlx::Error>(())
    /// ```
    #[must_use]
    pub fn from_pool(pool: Pool<DB>, config: Config) -> Self {
        let settings = config.tx_settings();
        Self::with_settings(pool, config, settings)
    }

    fn with_settings(pool: Pool<DB>, config: Config, tx_settings: TxSettings) -> Self {
        if config.transaction_pooler {
            crate::store::pooler::behind_transaction_pooler();
        }
        Self {
            inner: Arc::new(Inner {
                conns: connections::beside(&pool),
                pool,
                tx_settings,
                config,
                clock: Arc::new(SystemClock),
                namespace: OnceLock::new(),
                holds: OnceLock::new(),
                replica: None,
                first_step: FirstStep::new(DB::DIALECT.lock_first_miss),
                fail: FailPoints::default(),
            }),
        }
    }

    /// Replaces the clock (tests, simulations). Call before cloning the handle.
    #[must_use]
    pub fn with_clock(self, clock: impl Clock) -> Self {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| shared.copy());
        Self {
            inner: Arc::new(Inner {
                clock: Arc::new(clock),
                ..inner
            }),
        }
    }

    /// Creates or updates idem's tables. idem keeps its own migration history
    /// (`idem_schema_migrations`), apart from the application's: run your own
    /// `sqlx::migrate!()` beside it, untouched.
    ///
    /// With [`Config::external_migrations`] it applies nothing: it checks that the tables
    /// another tool created are those this version of idem expects
    /// ([`store::check_schema`](crate::store::check_schema)).
    ///
    /// Then, for a server given no storage keys, [`Idem::check_storage_keys`].
    ///
    /// # Errors
    /// When a migration fails or is refused; with [`Config::external_migrations`], when one
    /// is missing ([`StoreError::Migrate`] names it); [`Idem::check_storage_keys`]'s refusal.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        if self.inner.config.external_migrations {
            crate::store::check_schema(&self.inner.pool).await?;
        } else {
            crate::store::migrate(&self.inner.pool).await?;
        }
        self.check_storage_keys().await
    }

    /// Refuses a server given no [storage keys](Config::storage_keys) on a key table whose
    /// newest rows are sealed ([`store::newest_sealed`](crate::store::newest_sealed)),
    /// unless [`Config::clear_beside_sealed`] says to start anyway (then it logs a warning).
    /// [`Idem::migrate`] calls it; call it at start where idem's migrations run elsewhere.
    ///
    /// # Errors
    /// [`StoreError::NeedsStorageKeys`] naming the storage key; database errors.
    pub async fn check_storage_keys(&self) -> Result<(), StoreError> {
        let config = &self.inner.config;
        if config.storage_keys.is_some() {
            return Ok(());
        }
        let Some(key) = crate::store::newest_sealed(&self.inner.pool).await? else {
            return Ok(());
        };
        if config.clear_beside_sealed {
            tracing::warn!(
                storage_key = %key,
                "the key table holds rows sealed under a storage key and this server has none: \
                 it answers 503 for them and stores its own answers in the clear"
            );
            return Ok(());
        }
        Err(StoreError::NeedsStorageKeys(format!(
            "the key table holds rows sealed under storage key `{key}` and this server was \
             given no storage keys: it would answer 503 for them and store new answers in the \
             clear; give it the keyring (Config::storage_keys), or set \
             Config::clear_beside_sealed to start anyway"
        )))
    }

    /// Closes idem's connections — the pool, staged mode's hold connections and the
    /// [replica](Config::replica)'s — waiting
    /// for those in use to come back: after a graceful shutdown, or in a test, to end this
    /// handle's sessions as a stopped process's end. Every clone of this handle shares them.
    pub async fn close(&self) {
        // A connection coming back while the pool closes can land among its idle ones after
        // `close` looked at them: close again until none is left.
        async fn close_all<DB: sqlx::Database>(pool: &Pool<DB>) {
            for _ in 0..8 {
                pool.close().await;
                if pool.size() == 0 {
                    return;
                }
                tokio::task::yield_now().await;
            }
        }
        if let Some(holds) = self.inner.holds.get() {
            close_all(&holds.pool).await;
        }
        connections::close_all(&self.inner.conns).await;
        close_all(&self.inner.pool).await;
        if let Some(replica) = &self.inner.replica {
            connections::close_all(&replica.conns).await;
            close_all(&replica.pool).await;
        }
    }

    /// The pool, for the application's own queries.
    #[must_use]
    pub fn pool(&self) -> &Pool<DB> {
        &self.inner.pool
    }

    /// The pool of staged attempts' hold connections ([`crate::hold`]): the application
    /// pool's size and connect options, opened on first use (inside the runtime), its
    /// connections not pinged on acquire (a dead one fails the hold's own statement, which
    /// tries another).
    ///
    /// On a [host list](crate::store::hosts) the application pool moves to another host after
    /// a failover: the hold pool's new connections follow it.
    pub(crate) fn hold_pool(&self) -> &Pool<DB> {
        let pool = &self.inner.pool;
        let holds = self.inner.holds.get_or_init(|| {
            let options = pool.connect_options();
            Holds {
                pool: sqlx::pool::PoolOptions::<DB>::new()
                    .max_connections(pool.options().get_max_connections())
                    .min_connections(0)
                    .test_before_acquire(false)
                    .idle_timeout(std::time::Duration::from_secs(30))
                    .connect_lazy_with((*options).clone()),
                on: std::sync::Mutex::new(options),
            }
        });
        let now = pool.connect_options();
        let mut on = holds
            .on
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !Arc::ptr_eq(&on, &now) {
            holds.pool.set_connect_options((*now).clone());
            *on = now;
        }
        &holds.pool
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The storage keys stored columns are sealed with ([`Config::storage_keys`]).
    pub(crate) fn ring(&self) -> Option<&Keyring> {
        self.inner.config.storage_keys.as_ref()
    }

    /// Now, by the injected clock, in milliseconds since the Unix epoch.
    #[must_use]
    pub fn now_millis(&self) -> i64 {
        self.inner.clock.now_millis()
    }

    /// The key table, for tools: list, inspect, expire, delete, count (see
    /// [`KeyTable`]).
    #[must_use]
    pub fn keys(&self) -> KeyTable<DB> {
        let table = KeyTable::new(self.inner.pool.clone());
        match self.ring() {
            Some(ring) => table.with_keyring(ring.clone()),
            None => table,
        }
    }

    /// Reads one key row as it stands now by the injected clock.
    ///
    /// # Errors
    /// When the store fails.
    pub async fn lookup(&self, key: KeyRef<'_>) -> Result<Option<KeyRow>, StoreError> {
        self.keys().get(key, self.now_millis()).await
    }

    /// Runs `work` at most once per (`call.scope`, `spec.id`, `call.key`), at the record
    /// level: what the `#[idempotent]` expansion calls, and what adapters for other web
    /// frameworks would call. Consumers and jobs use [`Idem::once`], which stores typed
    /// values.
    ///
    /// 1. One `SELECT` of the key row (outside any transaction): a completed key with the
    ///    same fingerprint replays its record; another fingerprint is [`Error::Mismatch`];
    ///    an expired key is [`Error::Expired`] or, with [`ExpiryPolicy::Reexecute`], runs
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
    /// A concurrent duplicate waits for the key's lock up to [`Config::in_flight_wait`] and
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

    /// [`Idem::execute`] without its span and metrics, for callers that record their own.
    pub(crate) async fn execute_untraced<F>(
        &self,
        spec: &OperationSpec,
        call: Call<'_>,
        work: F,
    ) -> Result<Outcome, Error>
    where
        F: for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Work<'t> + Send,
    {
        // The session outlives the steps: once they ended (not dropped midway), its
        // connection goes back as it is (see `Session::finish`).
        let mut session = None;
        let slot = &mut session;
        let outcome = async move {
            let key = KeyRef {
                scope: call.scope,
                operation: spec.id,
                key: call.key.as_str(),
            };
            let started = self.now_millis();
            // Where it saves a round trip, an operation whose keys are mostly new begins with the
            // key's lock (see `first_step`); a key found to exist sends it to the lookup.
            let mut lock_first =
                DB::DIALECT.lock_first && self.inner.first_step.lock_first(spec.id);
            let (mut tx, replace_expired) = loop {
                let replace_expired = if lock_first {
                    *slot = Some(self.session().await?);
                    false
                } else {
                    // One connection for the lookup and, if it comes to that, the transaction: the
                    // one a lock that found the key kept, if any (that lock counted the key).
                    let kept = slot.take();
                    let counted = kept.is_some();
                    // (Boxed, and only with a replica: without one an execution's future
                    // does not grow by the replica's lookup.)
                    if !counted
                        && self.replica_is_set()
                        && let Some(outcome) =
                            Box::pin(self.replica_replay(&call, key, started)).await
                    {
                        if DB::DIALECT.lock_first {
                            self.inner.first_step.met(spec.id, true);
                        }
                        return Ok(outcome);
                    }
                    let (session, stored) = self.first_lookup(key, kept).await?;
                    *slot = Some(session);
                    telemetry::looked_up(stored.as_ref(), started);
                    if DB::DIALECT.lock_first && !counted {
                        self.inner.first_step.met(spec.id, stored.is_some());
                    }
                    let settled = match self.settle(spec, &call, stored, started) {
                        Err(Error::Mismatch(_)) => {
                            return Err(self.mismatch(held(slot).conn(), &call, key).await);
                        }
                        settled => settled?,
                    };
                    match settled {
                        Settled::Answer(outcome) => return Ok(outcome),
                        Settled::Run { replace_expired } => replace_expired,
                        // (Atomic mode commits final rows only: a staged execution of the same
                        // operation id holds this key.)
                        Settled::Held { .. } | Settled::Stuck { .. } => {
                            return Err(self.in_flight());
                        }
                    }
                };
                let session = held(slot);
                let namespace = self.namespace(session.conn()).await?;
                let lock = KeyLock {
                    namespace,
                    key,
                    expired_by_ms: replace_expired.then_some(started),
                };
                // (What went wrong leaves through `failed`, so that no borrow of the session
                // outlives the statement.)
                let mut failed = None;
                let waiting = Instant::now();
                let begun = session.begin(&self.inner.tx_settings, Some(lock));
                let begun = begun.await.map_err(|e| failed = Some(e)).ok();
                let free = begun.as_ref().map(|b| matches!(b, Begun::Free(_)));
                telemetry::lock_taken(spec.id, waiting, free);
                if let Some(tx) = begun.and_then(Begun::free) {
                    if lock_first {
                        // The lock's look again found no row: what the lookup would have said.
                        telemetry::looked_up(None, started);
                        self.inner.first_step.met(spec.id, false);
                    }
                    break (tx, replace_expired);
                }
                if let Some(error) = failed {
                    let failure = DB::classify(&error);
                    if lock_first && matches!(failure, Failure::Disconnected) {
                        // A stale connection: the lookup's path tries others.
                        held(slot).state = State::Discarded;
                        *slot = None;
                        lock_first = false;
                        continue;
                    }
                    held(slot).recover().await;
                    match failure {
                        Failure::Taken => {}
                        Failure::LockTimeout => {
                            return Err(self.lock_timed_out(held(slot).conn(), lock, error).await);
                        }
                        _ => return Err(Error::Store(error)),
                    }
                }
                if lock_first {
                    // The key's row exists: the lookup reads it, on the same connection.
                    self.inner.first_step.met(spec.id, true);
                    lock_first = false;
                    continue;
                }
                // Another execution stored the key while this one waited for its lock: its
                // record is the answer, and the work does not run.
                let busy = Err(self.in_flight());
                return self
                    .recheck(held(slot).conn(), spec, &call, key, started, busy)
                    .await;
            };
            if spec.store_client_errors {
                crate::store::protocol::savepoint::<DB>(&mut tx)
                    .await
                    .map_err(Error::Store)?;
            }
            let Ok(record) = AssertUnwindSafe(work(&mut tx)).catch_unwind().await else {
                // Dropping rolls back, pipelined with the lookup that follows.
                drop(tx);
                let panicked = Err(Error::Panicked);
                return self
                    .recheck(held(slot).conn(), spec, &call, key, started, panicked)
                    .await;
            };
            telemetry::work_done(record.status);
            self.inner.fail.check(FailPoint::AfterHandler)?;
            if record.is_failure() {
                if spec.store_client_errors && record.status.is_client_error() {
                    crate::store::protocol::rollback_to_savepoint::<DB>(&mut tx)
                        .await
                        .map_err(Error::Store)?;
                } else {
                    drop(tx);
                    let failed = Ok(Outcome {
                        kind: OutcomeKind::Failed,
                        record,
                    });
                    return self
                        .recheck(held(slot).conn(), spec, &call, key, started, failed)
                        .await;
                }
            }
            let stored = self
                .store(tx, spec, &call, key, &record, started, replace_expired)
                .await?;
            telemetry::stored(spec.id, record.body.len(), stored);
            if !stored {
                // Rolled back: another execution of the key committed first.
                let busy = Err(self.in_flight());
                return self
                    .recheck(held(slot).conn(), spec, &call, key, started, busy)
                    .await;
            }
            // What is left queued, if anything, is the `ROLLBACK` of the empty transaction after a
            // merged `COMMIT; BEGIN`.
            held(slot).state = State::RollbackQueued;
            self.inner.fail.check(FailPoint::AfterCommit)?;
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
    async fn session(&self) -> Result<Session<DB>, Error> {
        let conn = connections::get(&self.inner.conns, self.inner.config.acquire_timeout)
            .await
            .map_err(Error::Store)?;
        Ok(Session {
            conn: Some(conn),
            state: State::Open,
        })
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

    /// Step 1's read: a connection and the key's row. A pooled connection found dead (the
    /// database restarted since it was last used) is closed and the lookup tried again on
    /// another, until the pool opens a fresh one: a restart costs no request. The lookup
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
    async fn lock_timed_out(
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

    /// Step 1, for both modes: what a key row found by a lookup at `now` means for `call`.
    ///
    /// The rule of a key's life is the store's ([`StoredKey::status_at`]): only a final
    /// (completed) key expires — `410`, or run again with [`ExpiryPolicy::Reexecute`]. A key
    /// that is not final (a staged execution holds it, or held it and stopped) never
    /// expires, whatever its `expires_at`: it is held by a live lease, or stuck and resumed.
    pub(crate) fn settle(
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
        let status = stored.status_at(now);
        if status == KeyStatus::Expired {
            return match spec.on_expired {
                ExpiryPolicy::Reexecute => Ok(Settled::Run {
                    replace_expired: true,
                }),
                _ => Err(Error::Expired),
            };
        }
        if let Some(unopened) = stored.unopened {
            return Err(Error::Store(unopened.into()));
        }
        if stored.fingerprint.as_slice() != call.fingerprint.as_bytes() {
            return Err(Error::Mismatch(None));
        }
        if let Some(response) = stored.response {
            return Ok(Settled::Answer(Outcome {
                kind: OutcomeKind::Replayed,
                record: Record::from_stored(response),
            }));
        }
        // Not final: an execution holds the key, or held it and stopped.
        Ok(match status {
            KeyStatus::Stuck => Settled::Stuck {
                attempt: stored.fence,
            },
            _ => Settled::Held {
                attempt: stored.fence,
                until: stored.locked_until_ms,
            },
        })
    }

    /// Step 4: inserts the completed key row with `record` and commits. `false` when the
    /// key's row exists already (another execution committed first): rolled back then.
    #[allow(clippy::too_many_arguments)] // the pieces of one row, named
    async fn store(
        &self,
        mut tx: Transaction<'_, DB>,
        spec: &OperationSpec,
        call: &Call<'_>,
        key: KeyRef<'_>,
        record: &Record,
        started: i64,
        replace_expired: bool,
    ) -> Result<bool, Error> {
        let headers = record.headers_json(&self.inner.config.stored_headers);
        let digests = self.field_digests(call);
        let row = NewRow {
            field_digests: digests.as_deref(),
            key,
            fingerprint: call.fingerprint.as_bytes(),
            status: record.status.as_u16(),
            headers_json: &headers,
            body: &record.body,
            created_ms: started,
            completed_ms: self.now_millis(),
            expires_ms: started.saturating_add(millis(spec.ttl)),
            replace_expired,
        };
        if !replace_expired && !self.inner.fail.armed(FailPoint::AfterRecord) {
            // One round trip on PostgreSQL.
            return crate::store::protocol::insert_completed_and_commit::<DB>(tx, row, self.ring())
                .await
                .map_err(commit_failed::<DB>);
        }
        // Two steps: the replacing `INSERT … ON CONFLICT DO UPDATE … WHERE expired` tells by
        // its row count whether it won, and the fail point sits between the steps.
        let stored = crate::store::protocol::insert_completed::<DB>(&mut tx, row, self.ring())
            .await
            .map_err(refused::<DB>)?;
        if stored {
            self.inner.fail.check(FailPoint::AfterRecord)?;
            tx.commit().await.map_err(commit_failed::<DB>)?;
        }
        Ok(stored)
    }

    /// The field digests of `call`'s request, as stored with its key ([`crate::fields`]):
    /// `None` without the request, or with [`Config::mismatch_detail`] off.
    pub(crate) fn field_digests(&self, call: &Call<'_>) -> Option<Vec<u8>> {
        if !self.inner.config.mismatch_detail {
            return None;
        }
        let salt = fastrand::u64(..).to_le_bytes();
        let digests = crate::fields::FieldDigests::of_canonical(call.request?, salt);
        digests.ok().map(|digests| digests.to_bytes())
    }

    /// A `422` for `call` under `key`, whose row has another fingerprint: with the fields
    /// that differ, where the row keeps their digests (read on `conn`; a failure to read them
    /// only leaves them out).
    pub(crate) async fn mismatch(
        &self,
        conn: &mut DB::Connection,
        call: &Call<'_>,
        key: KeyRef<'_>,
    ) -> Error {
        let Some(request) = call.request.filter(|_| self.inner.config.mismatch_detail) else {
            return Error::Mismatch(None);
        };
        let stored = match crate::store::protocol::field_digests::<DB>(conn, key, self.ring()).await
        {
            Ok(stored) => stored,
            Err(error) => {
                tracing::debug!(%error, "the key's field digests could not be read");
                None
            }
        };
        let mismatch = stored
            .as_deref()
            .and_then(crate::fields::FieldDigests::from_bytes)
            .and_then(|stored| stored.compare(request).ok());
        Error::Mismatch(mismatch.map(Box::new))
    }

    /// How `body`, a body the operation's extractor refused, differs from the request `key`
    /// was first used with: the key's answer comes before the refusal. `None` — the refusal
    /// stands — without [`Config::mismatch_detail`], when the key has no unexpired row with
    /// field digests, when no body field differs, or when the store fails.
    pub(crate) async fn refused_mismatch(
        &self,
        spec: &OperationSpec,
        key: KeyRef<'_>,
        body: &serde_json::Value,
    ) -> Option<crate::fields::Mismatch> {
        if !self.inner.config.mismatch_detail || !spec.mismatch_detail {
            return None;
        }
        let mut conn = self.acquire_bounded().await.ok()?;
        let row = crate::store::protocol::lookup::<DB>(&mut conn, key, self.ring())
            .await
            .ok()??;
        if row.expires_at_ms <= self.now_millis() {
            return None;
        }
        let stored = crate::store::protocol::field_digests::<DB>(&mut conn, key, self.ring())
            .await
            .ok()??;
        let stored = crate::fields::FieldDigests::from_bytes(&stored)?;
        let mismatch = stored.compare_body(body, spec.fingerprint_exclude);
        (!mismatch.is_empty()).then_some(mismatch)
    }

    /// Step 5, after an execution that stored nothing: a concurrent execution of the same
    /// key may have committed between this one's lookup and its lock, and its record is then
    /// the answer. Otherwise `own` is.
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
        let stored = crate::store::protocol::lookup::<DB>(conn, key, self.ring())
            .await
            .map_err(Error::Store)?;
        telemetry::looked_up_again(stored.as_ref(), now);
        match stored {
            None => own,
            stored @ Some(_) => match self.settle(spec, call, stored, now) {
                Ok(Settled::Answer(outcome)) => Ok(outcome),
                Ok(Settled::Run { .. } | Settled::Held { .. } | Settled::Stuck { .. }) => own,
                Err(Error::Mismatch(_)) => Err(self.mismatch(conn, call, key).await),
                Err(error) => Err(error),
            },
        }
    }

    pub(crate) fn in_flight(&self) -> Error {
        Error::InFlight {
            retry_after: self.inner.config.retry_after,
        }
    }

    /// Arms a fail point: the next execution that reaches it fails there (feature
    /// `failpoints`).
    #[cfg(feature = "failpoints")]
    #[cfg_attr(docsrs, doc(cfg(feature = "failpoints")))]
    pub fn fail_at(
        &self,
        point: crate::failpoint::FailPoint,
        action: crate::failpoint::FailAction,
    ) {
        self.inner.fail.arm(point, action);
    }
}

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
    conn: Option<Conn<DB>>,
    state: State,
}

/// Where a [`Session`]'s connection stands, which decides how it goes back when dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
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
    async fn begin(
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
    async fn recover(&mut self) {
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
fn held<DB: Backend>(slot: &mut Option<Session<DB>>) -> &mut Session<DB> {
    slot.as_mut()
        .unwrap_or_else(|| unreachable!("the session is in its slot from the first step on"))
}

/// An error of a statement sent before `COMMIT`: the database refused it (nothing
/// committed), or the connection failed (nothing committed either: the transaction dies with
/// it).
fn refused<DB: Backend>(error: sqlx::Error) -> Error {
    match DB::classify(&error) {
        Failure::LockTimeout => Error::StoreBusy(error),
        _ => Error::Store(error),
    }
}

/// An error of a round trip that carried `COMMIT`: the database refused a statement of it
/// (nothing committed: `503` store-busy or store-unavailable), or the connection failed and
/// the outcome is unknown.
fn commit_failed<DB: Backend>(error: sqlx::Error) -> Error {
    match DB::classify(&error) {
        Failure::LockTimeout => Error::StoreBusy(error),
        Failure::Other if error.as_database_error().is_some() => Error::Store(error),
        _ => Error::CommitUnknown(error),
    }
}

/// What a key row means for a request ([`Idem::settle`]).
pub(crate) enum Settled {
    /// Answer without running: a replay.
    Answer(Outcome),
    /// Run the work; `replace_expired` when an expired row is in the way.
    Run { replace_expired: bool },
    /// Not final, and attempt `attempt`'s lease is live (until `until`; `None`: no lease):
    /// `409`, or wait — or, where the attempt's hold proves its owner gone
    /// ([`crate::hold`]), take it over at once.
    Held { attempt: Fence, until: Option<i64> },
    /// Not final, and its attempt's lease ran out: take it over and resume.
    Stuck { attempt: Fence },
}
