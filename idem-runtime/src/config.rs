//! [`Config`]: the settings shared by every operation of one [`Idem`](crate::Idem).

use std::time::Duration;

use http::HeaderName;
use idem_docs::OperationDoc;

use crate::key::KeyFormat;
use crate::spec::OperationSpec;
use crate::store::{Keyring, TxSettings};

/// Settings shared by every operation of one [`Idem`](crate::Idem). Build it with the
/// setters:
///
/// ```
/// use std::time::Duration;
/// use idem_runtime::Config;
/// use idem_runtime::key::KeyFormat;
///
/// let config = Config::default()
///     .in_flight_wait(Duration::from_secs(5))
///     .acquire_timeout(Duration::from_millis(250))
///     .retry_after(Duration::from_secs(2))
///     .statement_timeout(Duration::from_secs(10))
///     .max_request_body(16 * 1024)
///     .key_format(KeyFormat::Strict)
///     .stored_headers([http::header::CONTENT_TYPE, http::header::LOCATION]);
/// assert_eq!(config.stored_headers.len(), 2);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// How long a duplicate waits for the first request's transaction before it gets
    /// `409` with `Retry-After`. Also PostgreSQL's `lock_timeout` in idem's transactions
    /// (`SET LOCAL`: the application's own queries outside them keep theirs), SQLite's
    /// `busy_timeout` on pools idem opens, MySQL's `innodb_lock_wait_timeout` for the
    /// statement that takes the key's lock (rounded up to whole seconds), and the deadline
    /// of the key's lookup. A wait for
    /// anything other than the key (a table locked from outside, SQLite's write lock held by
    /// another writer) answers `503` `store-busy` with `Retry-After`. Default 2 s.
    pub in_flight_wait: Duration,
    /// How long an idempotent request waits for a connection from the pool before it answers
    /// `503` with `Retry-After` (nothing ran): a database that is down, or a pool that is
    /// saturated, sheds load within this time instead of queueing every request for sqlx's
    /// 30 s. Pools [`Idem::connect`](crate::Idem::connect) opens have it as their own acquire
    /// timeout, so the application's queries on them fail as fast (`sqlx::Error::PoolTimedOut`,
    /// which [`Problem::from_database`](crate::Problem::from_database) answers with `503`).
    /// Default 500 ms.
    pub acquire_timeout: Duration,
    /// PostgreSQL `statement_timeout` inside idempotent transactions. Default 30 s.
    pub statement_timeout: Duration,
    /// The `Retry-After` of a `409`. Default 1 s.
    pub retry_after: Duration,
    /// Largest request body idem's body extractors read on idempotent handlers; larger →
    /// `413`. Default 64 KiB.
    pub max_request_body: usize,
    /// Largest response body that can be stored; larger → rolled back, `500`. Default 1 MiB.
    pub max_response_body: usize,
    /// Which spellings of `Idempotency-Key` are accepted. Default lenient. The documents say
    /// the same ([`Config::doc`]).
    pub key_format: KeyFormat,
    /// Response headers stored and replayed. Default `content-type`, `location`,
    /// `content-language`, `cache-control`.
    pub stored_headers: Vec<HeaderName>,
    /// Pool size when idem opens the pool ([`Idem::connect`](crate::Idem::connect)).
    /// Default 16. The request path's lookups and key transactions keep up to as many
    /// connections of their own beside it, opened through the pool and detached from it, so
    /// that a connection handed back costs no round trip: count twice this (or twice the
    /// size of a pool given to [`Idem::from_pool`](crate::Idem::from_pool)) against the
    /// database's connection limit.
    pub max_connections: u32,
    /// Leases set at run time, by operation id, in place of the `lease` the operation's spec
    /// (the attribute) gives: a deployment tunes them without a build. Set with
    /// [`Config::lease_for`]. Default none.
    pub leases: Vec<(String, Duration)>,
    /// Whether staged attempts prove their owner alive where the backend can (PostgreSQL:
    /// a session advisory lock on a connection of a second pool, see
    /// [`Backend::hold`](crate::store::staged::hold)), so that a retry after
    /// a crash takes the key over at once instead of answering `409` until the lease runs
    /// out. Default `false`: turn it on when idem connects to PostgreSQL directly. Behind a
    /// transaction pooler (PgBouncer in transaction mode) a session lock does not stay
    /// with its client — another client's statements run on the same server session —
    /// so a hold would prove nothing there: [`Config::transaction_pooler`] ignores it.
    ///
    /// Every process sharing the key table must set it alike: an attempt run without a
    /// hold looks unowned to a process with holds, which takes it over while it runs
    /// (fenced, and with the same provider keys, but run twice) — as during a rolling
    /// deploy that turns it on. It costs one more connection per running staged attempt (a
    /// pool the size of the first) and some of a staged operation's throughput against a
    /// provider that answers at once (`bench/run`'s `staged-held`; the figures are in
    /// `bench/RESULTS.md`).
    pub attempt_holds: bool,
    /// Whether idem's connections go through a transaction pooler: PgBouncer in
    /// `pool_mode = transaction`, or a hosted pooler that behaves like it. Default `false`.
    /// A handle configured so ([`Idem::connect`](crate::Idem::connect),
    /// [`Idem::from_pool`](crate::Idem::from_pool)) makes the whole process send idem's
    /// statements as such a pooler needs them
    /// ([`pooler::behind_transaction_pooler`](crate::store::pooler::behind_transaction_pooler)):
    ///
    /// - no prepared statements: each statement is one simple query, its values written in as
    ///   literals (hexadecimal escapes); the server parses and plans each one;
    /// - no startup parameters the pooler refuses: pools
    ///   [`Idem::connect`](crate::Idem::connect) opens send neither `extra_float_digits` nor
    ///   `options` (so no `client_connection_check_interval`: a lookup cut off by its
    ///   deadline runs to its end on the server);
    /// - no session state: [`Config::attempt_holds`] is ignored (staged recovery waits for
    ///   the lease, as on SQLite), so every process sharing the key table must run without
    ///   holds too; everything else idem does is transaction-scoped anyway.
    ///
    /// Without it, [`Idem::connect`](crate::Idem::connect) on PostgreSQL refuses a pool
    /// whose two connections reach the same server session (a pooler in between), with an
    /// error naming this switch, rather than fail later on a prepared statement. It cannot
    /// look through a pool of one connection or one given to
    /// [`Idem::from_pool`](crate::Idem::from_pool). It never turns the switch on by itself:
    /// that would hide a setting that changes how holds and cancellation behave.
    ///
    /// What it cannot do for the application's own queries on the same connections: sqlx
    /// prepares every `sqlx::query*` call (with or without parameters) under a name it never
    /// releases, even with its statement cache off. Behind a pooler that does not track
    /// prepared statements (PgBouncer before 1.21, or with `max_prepared_statements = 0`, its
    /// default before 1.24), write them with `.persistent(false)` and run them inside a
    /// transaction — the key's transaction of an idempotent handler is one; a lone query
    /// outside a transaction goes as `sqlx::raw_sql` or inside `pool.begin()`. The `query!`
    /// macros cannot be made unprepared. Migrations take no session state either and
    /// work through the pooler, but a direct connection is the usual place for them (the
    /// examples' `MIGRATION_DATABASE_URL`).
    pub transaction_pooler: bool,
    /// Whether idem's tables are created and evolved by the application's own migration tool
    /// (sqlx-cli, Flyway, Atlas, Liquibase, a DBA's review) from the files of the
    /// repository's `migrations/<store>/`, applied in order. Default `false`: idem applies
    /// them itself ([`Idem::migrate`](crate::Idem::migrate)).
    ///
    /// With it, [`Idem::migrate`](crate::Idem::migrate) applies nothing and writes nothing:
    /// it checks that every migration this version of idem expects is in the database
    /// ([`store::check_schema`](crate::store::check_schema)), and fails with
    /// [`StoreError::Migrate`](crate::store::StoreError::Migrate) naming the first one
    /// missing, its file and what it does. Call it at start, as without the switch, and
    /// refuse to start when it fails.
    pub external_migrations: bool,
    /// A standby of the database, read first for replays ([`Config::replica`]). Default
    /// none.
    pub replica: Option<ReplicaUrl>,
    /// Whether a key keeps a short salted digest of each field of its request, so that a
    /// `422` for another request under it names the fields that differ — their JSON pointers,
    /// never a value ([`crate::fields`]). Default `true`; off for a service whose field names
    /// are themselves sensitive.
    pub mismatch_detail: bool,
    /// The storage keys ([`Config::storage_keys`]). Default none: stored columns are clear.
    pub storage_keys: Option<Keyring>,
    /// Whether a server given no [storage keys](Config::storage_keys) starts on a key table
    /// whose newest rows are sealed. Default `false`: [`Idem::migrate`](crate::Idem::migrate)
    /// refuses, since such a server answers `503` for every sealed key and writes its own in
    /// the clear — an instance that lost its keyring in a fleet that seals. With it, the
    /// start goes on and logs a warning naming the storage key.
    pub clear_beside_sealed: bool,
}

/// The connection string of [`Config::replica`]; printed without its text, which may hold a
/// password.
#[derive(Clone, PartialEq, Eq)]
pub struct ReplicaUrl(String);

impl ReplicaUrl {
    /// The connection string.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ReplicaUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReplicaUrl(..)")
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            in_flight_wait: Duration::from_secs(2),
            acquire_timeout: Duration::from_millis(500),
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
            leases: Vec::new(),
            attempt_holds: false,
            transaction_pooler: false,
            external_migrations: false,
            replica: None,
            mismatch_detail: true,
            storage_keys: None,
            clear_beside_sealed: false,
        }
    }
}

macro_rules! setters {
    ($($field:ident: $ty:ty),* $(,)?) => {$(
        #[doc = concat!("Sets [`Config::", stringify!($field), "`].")]
        #[must_use]
        pub fn $field(mut self, value: $ty) -> Self {
            self.$field = value;
            self
        }
    )*};
}

impl Config {
    /// Runs the staged operation `operation_id` with leases of `lease`, whatever its spec
    /// says: the attribute's handlers, [`Idem::staged`](crate::Idem::staged) and the
    /// [`Reconciler`](crate::staged::Reconciler) (its reservations, heartbeats and takeovers)
    /// read it.
    ///
    /// ```
    /// use idem_runtime::Config;
    /// use std::time::Duration;
    ///
    /// let config = Config::default().lease_for("create_payment:v1", Duration::from_secs(5));
    /// assert_eq!(config.leases.len(), 1);
    /// ```
    #[must_use]
    pub fn lease_for(mut self, operation_id: impl Into<String>, lease: Duration) -> Self {
        let operation_id = operation_id.into();
        self.leases.retain(|(id, _)| *id != operation_id);
        self.leases.push((operation_id, lease));
        self
    }

    /// `spec` as this configuration runs it: with its lease set by [`Config::lease_for`].
    #[must_use]
    pub fn spec(&self, spec: &OperationSpec) -> OperationSpec {
        match self.lease_of(spec.id) {
            Some(lease) => spec.lease(lease),
            None => *spec,
        }
    }

    /// `doc` as a server with this configuration answers: the key's spellings it accepts
    /// ([`Config::key_format`]), the lease it runs the operation with ([`Config::lease_for`]),
    /// whether its `422` names the fields that differ (when both the operation and
    /// [`Config::mismatch_detail`] say so), and whether what it stores is sealed
    /// ([`Config::storage_keys`]: the documents then list `500 sealed-unreadable`; every
    /// server's list `503 storage-key-unknown`, which one without keys answers for a key
    /// another instance sealed). [`Operations::served_by`](crate::docs::Operations::served_by)
    /// applies it to the documents a service serves, and
    /// [`Idem::register_docs`](crate::Idem::register_docs) to those it records.
    ///
    /// ```
    /// use idem_runtime::docs::OperationDoc;
    /// use idem_runtime::key::KeyFormat;
    /// use idem_runtime::spec::OperationSpec;
    /// use idem_runtime::store::Keyring;
    /// use idem_runtime::Config;
    ///
    /// let keys = Keyring::parse(&Keyring::generate_entry("k1")).unwrap();
    /// let config = Config::default()
    ///     .key_format(KeyFormat::Strict)
    ///     .mismatch_detail(false)
    ///     .storage_keys(keys);
    /// let doc = config.doc(OperationDoc::from_spec(&OperationSpec::new("pay:v1")));
    /// assert_eq!(doc.key_format, KeyFormat::Strict);
    /// assert!(!doc.mismatch_detail);
    /// assert!(doc.sealed_at_rest);
    /// ```
    #[must_use]
    pub fn doc(&self, mut doc: OperationDoc) -> OperationDoc {
        doc.key_format = self.key_format;
        if let Some(lease) = self.lease_of(&doc.id) {
            doc.lease = lease;
        }
        doc.mismatch_detail &= self.mismatch_detail;
        doc.sealed_at_rest = self.storage_keys.is_some();
        doc
    }

    /// The lease [`Config::lease_for`] set for `operation_id`, if any.
    fn lease_of(&self, operation_id: &str) -> Option<Duration> {
        self.leases
            .iter()
            .find(|(id, _)| id == operation_id)
            .map(|&(_, lease)| lease)
    }

    setters! {
        in_flight_wait: Duration,
        acquire_timeout: Duration,
        statement_timeout: Duration,
        retry_after: Duration,
        max_request_body: usize,
        max_response_body: usize,
        key_format: KeyFormat,
        max_connections: u32,
        attempt_holds: bool,
        transaction_pooler: bool,
        external_migrations: bool,
        mismatch_detail: bool,
        clear_beside_sealed: bool,
    }

    /// Reads replays from a standby first: [`Idem::connect`](crate::Idem::connect) opens a
    /// pool on `url` beside the primary's (the same size; on PostgreSQL a
    /// [host list](crate::store::hosts) too, `target_session_attrs=prefer-standby` say), and
    /// a lookup that comes first (always on SQLite and MySQL; on PostgreSQL unless the
    /// operation's recent keys were mostly new, when the key's lock comes first; every staged
    /// start) asks the standby first. [`Idem::from_pool`](crate::Idem::from_pool) does not
    /// read it: give a pool to [`Idem::with_replica`](crate::Idem::with_replica). Only a key the
    /// standby has completed, unexpired, for the same request, is answered from there;
    /// anything else — no row, a key not final, expired, a request that differs, a standby
    /// that fails or takes longer than [`Config::acquire_timeout`] — goes to the primary's
    /// lookup and lock exactly as without a standby, so no answer depends on replication
    /// lag. A standby that failed is passed over for five seconds.
    ///
    /// What lag can show: a key an operator expired, released or deleted on the primary is
    /// still replayed from a standby that has not replayed that change yet (for as long as
    /// its lag). A key the primary completed a moment ago is not there yet: it is read on the
    /// primary. A standby that does not answer when [`Idem::connect`](crate::Idem::connect)
    /// opens it fails the start; list the primary after it (`prefer-standby`) to start
    /// without it.
    ///
    /// ```
    /// use idem_runtime::Config;
    ///
    /// let config = Config::default().replica("postgres://app@db2/orders");
    /// assert_eq!(config.replica.unwrap().as_str(), "postgres://app@db2/orders");
    /// ```
    #[must_use]
    pub fn replica(mut self, url: impl Into<String>) -> Self {
        self.replica = Some(ReplicaUrl(url.into()));
        self
    }

    /// Seals what idem stores at rest under `keys`
    /// ([sealed at rest](crate::store#storage-sealed-at-rest)): a key's fingerprint, field
    /// digests, stored request, journal, response headers and body, the outbox's payloads and
    /// the inbox's bodies are written sealed under the first key, bound to their row, and
    /// opened under whichever key sealed them. What stays clear is what operators
    /// search by: scope, operation, key, status, times. A stored value sealed under a key
    /// not given here is answered `503` (`storage-key-unknown`), and its row is left as it
    /// is; rows written clear, before the keys were set, are still read.
    ///
    /// ```
    /// use idem_runtime::Config;
    /// use idem_runtime::store::Keyring;
    ///
    /// let keys = Keyring::parse(&Keyring::generate_entry("k1")).unwrap();
    /// let config = Config::default().storage_keys(keys);
    /// assert_eq!(config.storage_keys.unwrap().current(), "k1");
    /// ```
    #[must_use]
    pub fn storage_keys(mut self, keys: Keyring) -> Self {
        self.storage_keys = Some(keys);
        self
    }

    /// Sets [`Config::stored_headers`].
    #[must_use]
    pub fn stored_headers(mut self, headers: impl IntoIterator<Item = HeaderName>) -> Self {
        self.stored_headers = headers.into_iter().collect();
        self
    }

    pub(crate) fn tx_settings(&self) -> TxSettings {
        TxSettings {
            lock_timeout: self.in_flight_wait,
            statement_timeout: self.statement_timeout,
            acquire_timeout: self.acquire_timeout,
        }
    }
}
