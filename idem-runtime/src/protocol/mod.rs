//! [`Idem`], the store handle, and the atomic protocol that runs one execution of a key.
//!
//! An execution is one value, `steps::Execution` (the request, the key, when it began), and
//! its steps are its methods, in `steps.rs`, in order:
//!
//! 1. `look_up` — the key's row (`store::protocol::lookup`, on the standby first where there
//!    is one) and what it means (`Idem::settle`, `answer.rs`): replay, `422`, `410`, `409`,
//!    or run;
//! 2. `Session::begin` (`session.rs`) — `BEGIN` taking the key's lock and looking at the key
//!    again once it holds it, in the same round trip; `not_begun` when the key is taken or
//!    the lock failed: a key another execution stored meanwhile is answered as in step 5,
//!    without running the work;
//! 3. `work` — the work, on the transaction (a panic is caught);
//! 4. `commit` — the completed key row inserted with the record and committed
//!    (`store::protocol::insert_completed_and_commit`);
//! 5. `recheck` — whenever nothing was stored, the key is looked up once more: a record a
//!    concurrent execution committed is the answer then.
//!
//! `execute.rs` holds what runs them: [`Idem::execute`], the request path's connections and
//! the lookup's retry on a stale one.
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

mod answer;
mod execute;
mod session;
mod steps;

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use futures_util::future::BoxFuture;
use sqlx::{Pool, Transaction};

pub(crate) use self::answer::Settled;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::connections::{self, Connections};
use crate::error::Error;
use crate::failpoint::FailPoints;
use crate::fingerprint::Fingerprint;
use crate::first_step::FirstStep;
use crate::key::IdempotencyKey;
pub use crate::record::{Outcome, OutcomeKind, Record};
use crate::store::{Backend, KeyRef, KeyRow, KeyTable, Keyring, StoreError, TxSettings};

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
    /// the fields that differ ([`crate::fields`]). `None`: a `422` names no field. The
    /// attribute's handlers add, after a line feed, where the request's maps are (so that
    /// their keys, the client's words, are compared whole and never named); plain canonical
    /// bytes are read as they are.
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
