//! The key table of [idem](https://github.com/idem-rs/idem): its migrations, the SQL of the
//! idempotency protocol on PostgreSQL and SQLite, and a typed API over the keys for tools.
//!
//! idem makes axum handlers safe to retry: each (scope, operation, `Idempotency-Key`) gets a
//! row in the table `idempotency_keys`, committed in the same transaction as the handler's
//! writes, with the response that is replayed on every retry. This crate owns that table and
//! every statement on it; `idem-runtime` runs the protocol through [`Backend`], and tools
//! (the `idem` operator CLI, docs generators, tests) read and manage keys through
//! [`KeyTable`]. It knows nothing of HTTP: a stored response is a [`StoredResponse`].
//!
//! | feature | database |
//! |---|---|
//! | `sqlite` (default) | [`sqlx::Sqlite`], the embedded default for one process |
//! | `postgres` | [`sqlx::Postgres`], for several instances sharing one database |
//! | `mysql` | [`sqlx::MySql`]: MySQL 8 or MariaDB 10.6 and later, for several instances sharing one database ([what differs](#mysql-and-mariadb)) |
//!
//! # Example
//!
//! Expired keys, page by page:
//!
//! ```no_run
//! # #[cfg(feature = "sqlite")] mod example {
//! use idem_store::{KeyFilter, KeyStatus, KeyTable};
//! use sqlx::sqlite::SqlitePool;
//!
//! # async fn demo(now_ms: i64) -> Result<(), Box<dyn std::error::Error>> {
//! let table = KeyTable::new(SqlitePool::connect("sqlite://app.db").await?);
//! table.migrate().await?;
//!
//! // Times are the caller's: milliseconds since the Unix epoch.
//! let mut filter = KeyFilter::new().status(KeyStatus::Expired).limit(100);
//! loop {
//!     let page = table.list(&filter, now_ms).await?;
//!     for row in &page.keys {
//!         println!("{} {} {} expired at {}", row.scope, row.operation, row.key, row.expires_at_ms);
//!     }
//!     let Some(next) = page.next else { break };
//!     filter.after = Some(next);
//! }
//!
//! // Stuck keys: staged executions whose lease ran out with nobody resuming them.
//! let stuck = table.list(&KeyFilter::new().status(KeyStatus::Stuck), now_ms).await?;
//! println!("{} stuck", stuck.keys.len());
//! # Ok(()) }
//! # }
//! ```
//!
//! # The key table
//!
//! `idempotency_keys`, primary key (`scope`, `operation`, `idempotency_key`) and an index on
//! `expires_at` for the sweeper, and no other: every index on the key table is paid by every
//! first execution of atomic mode. Next to it `idempotency_processing`, the keys staged mode
//! holds (`processing`), which listings of processing and stuck keys start from, and the
//! audit trail `idempotency_audit`. Created and evolved by [`migrate`], which keeps its own
//! history in `idem_schema_migrations` (never sqlx's `_sqlx_migrations`, so an application's
//! own sqlx migrations and idem's ignore each other).
//!
//! | column | PostgreSQL | SQLite | meaning |
//! |---|---|---|---|
//! | `scope` | text | text | `global`, `tenant:<id>` or `user:<id>` |
//! | `operation` | text | text | operation id, `<name>:v<version>` |
//! | `idempotency_key` | text | text | the client's key, unquoted |
//! | `fingerprint` | bytea | blob | SHA-256 of operation id + canonical input (32 bytes) |
//! | `status` | text | text | `completed`, or `processing` while a staged execution holds the key |
//! | `response_status` | integer | integer | stored status |
//! | `response_headers` | text | text | JSON array of `[name, value]` ([`StoredResponse::encode_headers`]) |
//! | `response_body` | bytea | blob | stored body |
//! | `created_at` | timestamptz | text | when the execution that stored the row began |
//! | `completed_at` | timestamptz | text | when the response was stored |
//! | `expires_at` | timestamptz | text | completed rows: after this, `410` or run again; atomic mode: the start of the execution that stored the row + TTL, staged mode and operator actions: completion + TTL; a processing row never expires ([`KeyStatus::at`]) |
//! | `locked_until` | timestamptz | text | staged mode: the running attempt's lease; past it, the key is stuck |
//! | `attempt` | bigint | integer | staged mode: the fencing number, 1 for the first attempt, one more at every takeover or release (0 for atomic mode's rows) |
//! | `recovery_point` | text | text | staged mode: the last step journaled |
//! | `journal` | text | text | staged mode: JSON object from step name to its result |
//! | `request` | text | text | staged mode: the request (JSON) the key was reserved with, for resuming without its client |
//!
//! Every write of a staged attempt names its `attempt` (`WHERE attempt = $n AND status =
//! 'processing'`): once a takeover or an operator moved the number on, the old attempt's
//! writes change nothing.
//!
//! SQLite timestamps are UTC text `YYYY-MM-DD HH:MM:SS.SSS`, the format of its date
//! functions; an `expires_at` set to a plain number by hand is read as Unix seconds. All times
//! cross the API as milliseconds since the Unix epoch, passed in by the caller: the store
//! never reads the clock.
//!
//! ## Migrations
//!
//! The files of the repository's top-level `migrations/` (`postgres`, `sqlite`, `mysql`: the
//! crate's `migrations` is a link to it, which `cargo package` follows), embedded in the
//! crate and applied in order by [`migrate`], each with its history row in one transaction.
//! Where the application's own tool applies them instead, [`check_schema`] checks that each
//! is there and applies nothing (the runtime's `Config::external_migrations`).
//!
//! | version | what it does |
//! |---|---|
//! | 1 | `idempotency_keys` and its `expires_at` index, `IF NOT EXISTS`: a table idem 0.1 created through sqlx is adopted as it is |
//! | 2 | staged mode's columns (`locked_until`, `attempt`, `recovery_point`, `journal`, `request`); the audit trail `idempotency_audit` (who, when, which key, the action, the reason, the row before and after as JSON); on PostgreSQL the function `idem_lock_key`, which takes a key's advisory lock and raises `IK001` when the key's row exists |
//! | 3 | the outbox, `idempotency_outbox` |
//! | 4 | the operation registry, `idempotency_operations` |
//! | 5 | `idempotency_processing`, one row per processing key, in place of migration 2's partial index on the key table (which every atomic insert maintained). On PostgreSQL staged mode's reservation inserts its row in the same statement, and triggers on `UPDATE OF status` and `DELETE` remove it: no trigger fires on an `INSERT`, so atomic mode's path is untouched. On SQLite triggers do both |
//! | 6 | `idempotency_operations.doc`: the operation's generated documentation as JSON |
//! | 7 | PostgreSQL only: `idem_lock_key` takes a free lock without a query of its own (the same signature, so processes of the previous version call it unchanged); SQLite has no version 7 |
//! | 8 | `idempotency_audit.forced`: set when an action was applied only because the operator forced it |
//!
//! Migrations go through a transaction pooler (PgBouncer in `pool_mode = transaction`) as well
//! as on a direct connection: on PostgreSQL each migration's transaction takes the lock
//! ([`MIGRATION_LOCK_ID`]) for itself, and the runner's statements always go as simple
//! queries. MySQL's runner holds a session lock (`GET_LOCK`) for the whole run.
//!
//! # Behind a transaction pooler
//!
//! [`pooler::behind_transaction_pooler`] switches the process to statements a transaction
//! pooler lets through: see the [`pooler`] module for what changes and what a tool of its own
//! on the store must also do.
//!
//! # MySQL and MariaDB
//!
//! The same tables and the same guarantees, in InnoDB; what differs:
//!
//! - **Columns.** Times are `DATETIME(3)` in UTC, converted to and from milliseconds by
//!   arithmetic from `1970-01-01` (no session's `time_zone` applies; write UTC when setting
//!   one by hand, e.g. `UTC_TIMESTAMP(3)`); `scope`, `operation` and `idempotency_key` are
//!   `VARCHAR(255)` in `utf8mb4_bin`,
//!   compared byte for byte (keys are case-sensitive), so a scope longer than 255 characters
//!   is refused by the database. One migration (version 1) creates everything at once.
//! - **The key's lock.** MySQL has no transaction-scoped advisory lock (`GET_LOCK` belongs
//!   to the session and outlives a rollback). An execution upserts its key's row in
//!   `idempotency_locks` (an id derived from the database and the key, as PostgreSQL's lock
//!   id is) in its own `READ COMMITTED` transaction, and looks at the key again; InnoDB holds
//!   the row lock until that transaction commits or rolls back, on every path, a dropped
//!   connection included. A duplicate waits there for [`TxSettings::lock_timeout`]
//!   rounded up to whole seconds, set for that one statement only (`SET STATEMENT` on
//!   MariaDB, the `SET_VAR` hint on MySQL), then is told a duplicate is in flight (a
//!   `NOWAIT` read of the lock row tells it from other lock waits). Waits that end in a
//!   deadlock count as lock waits that ran out. Other waits in idem's transactions are
//!   bounded by the server's `innodb_lock_wait_timeout`, and there is no statement timeout:
//!   a session setting would outlive idem's transaction on the application's connection.
//!   The sweeper ([`KeyTable::sweep_batch`]) deletes the lock rows no execution took since
//!   its cutoff; the next execution of their key makes one again.
//! - **Statements.** MySQL has neither `RETURNING` nor `ON CONFLICT`: a written row is read
//!   again in its transaction, a duplicate key's error means "exists already", an expired
//!   row is deleted (or, in staged mode, reopened with its attempt moved on) before the new
//!   one is inserted, and the outbox's claim picks its rows with `FOR UPDATE SKIP LOCKED`,
//!   leases and reads them in one transaction. Sweeps delete with `ORDER BY … LIMIT`.
//! - **Staged mode's attempt holds** exist on PostgreSQL only: on MySQL the lease decides.
//! - **Tested on MariaDB** (10.11): the conformance kit, the runtime's protocol suite, the
//!   operator tool's and the examples' suites all run there. MySQL 8's few differences (its
//!   `SET_VAR` hint, its `NOWAIT` error 3572) are written in but not in the test runs.
//! - **Migrations** run under `GET_LOCK('idem-migrations:<database>')`; MySQL commits each
//!   DDL statement on its own, so every statement of the migration is `IF NOT EXISTS`.
//!
//! # Operator actions
//!
//! [`KeyTable::act`] releases, completes, fails, expires or deletes one key ([`Action`]), as
//! an operator ([`Actor`]) decided it on the row they looked at: in one transaction holding
//! the row it checks that the row is still that one ([`StoreError::Changed`] otherwise:
//! the running attempt, a retry or another operator moved it on) and that the action applies
//! ([`StoreError::NotApplicable`]), applies it and records it in the audit trail
//! `idempotency_audit` (who, why, when, the row before and after as JSON), which
//! [`KeyTable::audit`] reads back newest first. [`KeyTable::journal`] shows a staged key's
//! journal and request.
//!
//! ```no_run
//! # #[cfg(feature = "sqlite")] mod example {
//! use idem_store::{Action, Actor, AuditFilter, KeyFilter, KeyStatus, KeyTable, StoreError};
//! use sqlx::sqlite::SqlitePool;
//!
//! # async fn demo(now_ms: i64) -> Result<(), Box<dyn std::error::Error>> {
//! let table = KeyTable::new(SqlitePool::connect("sqlite://app.db").await?);
//! let by = Actor::new("alice").reason("INC-42: the payment provider is back");
//!
//! // Hand every stuck key back: the next retry (or the reconciler) resumes it.
//! let stuck = table.list(&KeyFilter::new().status(KeyStatus::Stuck), now_ms).await?;
//! for row in &stuck.keys {
//!     if let Some(journal) = table.journal(row.key_ref()).await? {
//!         println!("{}: {} steps done", row.key, journal.steps.len());
//!     }
//!     match table.act(row.key_ref(), row, &Action::Release, &by, now_ms).await {
//!         Ok(acted) => println!("released {} (audit #{})", row.key, acted.audit_id),
//!         // It moved on since the listing: leave it.
//!         Err(StoreError::Changed { .. }) => {}
//!         Err(other) => return Err(other.into()),
//!     }
//! }
//!
//! for entry in table.audit(&AuditFilter::new().operator("alice").limit(20)).await? {
//!     println!("#{} {} {} {}", entry.id, entry.action, entry.scope, entry.key);
//! }
//! # Ok(()) }
//! # }
//! ```
//!
//! # The outbox
//!
//! Messages written in the application's own transaction with [`enqueue`], to be delivered
//! after it commits, at least once: [`Outbox`] claims due messages under a lease, records
//! each outcome, and serves tools (list, find, counts, operators' audited retries, sweeps
//! of delivered messages). Receivers deduplicate on each message's
//! [`OutboxMessage::dedup_id`].
//!
//! `idempotency_outbox`, created by migration 3 of [`migrate`]:
//!
//! | column | PostgreSQL | SQLite | meaning |
//! |---|---|---|---|
//! | `id` | bigserial | integer (autoincrement) | claim order |
//! | `dedup_id` | text, unique | text, unique | what receivers deduplicate on |
//! | `topic` | text | text | the kind of message, for the sink |
//! | `payload` | text | text | the message, JSON |
//! | `status` | text | text | `pending`, `delivered` or `dead` |
//! | `attempts` | integer | integer | failed deliveries so far |
//! | `next_attempt_at` | timestamptz | text | when a pending message is due |
//! | `locked_until` | timestamptz | text | the lease of the dispatcher that claimed it |
//! | `last_error` | text | text | why the last delivery failed |
//! | `created_at` | timestamptz | text | when it was enqueued |
//! | `delivered_at` | timestamptz | text | when it was delivered |
//!
//! A partial index on `id` over pending rows serves the claim; one on `delivered_at` over
//! delivered rows serves [`Outbox::sweep_delivered`].
//!
//! ## Claims and leases
//!
//! [`Outbox::claim`] takes up to `batch` pending rows that are due (`next_attempt_at <= now`)
//! and not leased (`locked_until` empty or past), in `id` order, and sets their
//! `locked_until` to `now + lease`, in one statement:
//!
//! - PostgreSQL: the rows are picked with `FOR UPDATE SKIP LOCKED`, so dispatchers claiming
//!   at the same moment skip each other's rows instead of waiting or taking them twice;
//! - SQLite: the one `UPDATE … RETURNING` runs under the database's single write lock.
//!
//! Until the lease ends no other claim returns the rows. A dispatcher that dies mid-batch
//! only delays its rows: they are claimed again once the lease is over. A dispatcher still
//! delivering when its lease ends may see its rows claimed by another: choose leases longer
//! than a batch takes to deliver.
//!
//! ## Dead messages and operators
//!
//! A message given up on is `dead` and stays in the table, with its `last_error`, until an
//! operator sends it again; nothing deletes it. [`Outbox::counts`] says how many messages
//! are pending, in flight (leased by a dispatcher at that moment), delivered and dead;
//! [`Outbox::list`], [`Outbox::find`] (by row id) and [`Outbox::get`] (by dedup id) show
//! them. [`Outbox::retry`] is the one operator action on a message: a dead message goes back
//! to `pending`, due at once, with its attempts reset; a pending message waiting for its
//! backoff is made due at once, its attempts kept; a message in flight, due already or
//! delivered is refused ([`StoreError::NotApplicable`]). [`Outbox::retry_all`] does it for
//! every message it applies to, in batches. Each retry holds the message's row, and writes
//! its entry in the audit trail `idempotency_audit` in the same transaction, as
//! [`KeyTable::act`] does for keys: scope `outbox`, the topic as the operation, the dedup
//! id as the key, action `outbox-retry`, and the row before and after as JSON (on MySQL that
//! `operation` column holds 255 characters: a longer topic fails the retry, changing
//! nothing). The `idem` tool's `outbox` commands and its UI's outbox view go through them.
//!
//! # The operation registry
//!
//! `idempotency_operations` (migration 4): one row per operation id with the scope kind,
//! ttl, mode and lease a service runs it with, written by [`KeyTable::register`] (the
//! runtime's `Idem::register`, called at start). [`KeyTable::operations`] lists every
//! operation registered or seen in the key table, with its keys counted by state.
//!
//! # The conformance kit
//!
//! The contract of [`Backend`] and [`KeyTable`] is written down as a conformance kit: cases
//! generic over the backend, using this crate's public items only, each run as a test on a new
//! database. It lives in the repository's test kit (`idem-testkit`, not published). idem's
//! PostgreSQL and SQLite stores pass every case; a new backend added to this crate is
//! accepted when it passes them all.
//!
//! # Errors
//!
//! [`KeyTable`] and [`migrate`] return [`StoreError`]. The protocol's primitives on
//! [`Backend`] return [`sqlx::Error`], which the runtime classifies with
//! [`Backend::classify`].
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, unreachable_pub)]
// Without a backend there is nothing to run the statements on.
#![cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]

mod backend;
mod dialect;
mod error;
mod key;
mod list;
mod migrate;
mod migration;
#[cfg(feature = "mysql")]
mod mysql;
mod operations;
mod operator;
mod outbox;
pub mod pooler;
#[cfg(feature = "postgres")]
mod postgres;
mod protocol;
mod row;
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
#[doc(hidden)]
pub mod staged;
mod table;

pub use crate::backend::Backend;
pub use crate::error::{Hazard, StoreError};
pub use crate::key::KeyRef;
pub use crate::list::{Counts, Cursor, KeyFilter, Page, StatusCounts};
pub use crate::migrate::{MIGRATION_LOCK_ID, check_schema, migrate};
pub use crate::migration::Migration;
pub use crate::operations::{OperationInfo, Registration};
pub use crate::operator::{Acted, Action, Actor, AuditEntry, AuditFilter, Journal};
pub use crate::outbox::{
    Claimed, Outbox, OutboxCounts, OutboxMessage, OutboxRow, OutboxStatus, enqueue,
};
// The vocabulary of the protocol's primitives: the runtime's (see `Backend`).
#[doc(hidden)]
pub use crate::protocol::{Begun, Failure, KeyLock, NewRow, TxSettings};
#[doc(hidden)]
pub use crate::row::StoredKey;
pub use crate::row::{KeyRow, KeyStatus, StoredResponse, StoredStatus};

/// The decoding of a key row's columns, for the fuzz targets (`fuzz/` in the repository) and
/// the property tests. Not a public API: it changes between versions.
#[doc(hidden)]
pub mod __fuzz {
    use crate::{KeyRow, StoreError, StoredResponse};

    /// The stored response as the protocol reads it when it replays (lenient).
    #[must_use]
    pub fn lenient(status: i32, headers: Option<&str>, body: Option<Vec<u8>>) -> StoredResponse {
        StoredResponse::lenient(status, headers, body)
    }

    /// The stored response as tools read it (strict): `Err` says what is unreadable.
    ///
    /// # Errors
    /// A status outside `u16`, or headers that are not a JSON array of `[name, value]` pairs.
    pub fn strict(
        status: i32,
        headers: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Result<StoredResponse, String> {
        StoredResponse::strict(status, headers, body)
    }

    /// A row of `(global, op:v1, k)` with these columns, as tools read it at `now_ms`.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for an unknown status or an unreadable response.
    pub fn row(
        status: &str,
        response_status: Option<i32>,
        response_headers: Option<String>,
        response_body: Option<Vec<u8>>,
        expires_at_ms: i64,
        locked_until_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<KeyRow, StoreError> {
        crate::list::RawRow {
            scope: "global".to_owned(),
            operation: "op:v1".to_owned(),
            key: "k".to_owned(),
            fingerprint: Vec::new(),
            status: status.to_owned(),
            response_status,
            response_headers,
            response_body,
            created_at_ms: 0,
            completed_at_ms: None,
            expires_at_ms,
            locked_until_ms,
            attempt: 0,
            recovery_point: None,
        }
        .into_row(now_ms)
    }
}
pub use crate::table::KeyTable;

/// Re-exported: the pools and transactions in this crate's signatures are sqlx 0.8's.
pub use sqlx;
