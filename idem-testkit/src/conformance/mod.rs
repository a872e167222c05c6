//! The store conformance kit: the contract of [`Backend`] and [`KeyTable`] as a test suite
//! that runs on any backend.
//!
//! Every semantic case of the store — migrations and their history, the protocol's
//! primitives (lookup, `begin` with the key's lock, lock waits that run out, inserting the
//! completed row, replacing expired rows, savepoints, responses stored byte for byte), staged
//! mode's fenced writes, the outbox, and the tools' API (get, list with every filter, keyset
//! pagination, counts, sweeps, operator actions and their audit trail, the operation
//! registry) — is a public `async fn` in [`cases`], generic over the backend. It uses the
//! store's public API only. Every store idem supports runs every one of them (this crate's
//! `tests/conformance_<store>.rs`, one file per store); a new backend is accepted when it
//! passes them all.
//!
//! # Running the kit
//!
//! [`conformance_tests!`](crate::conformance_tests) expands to one `#[tokio::test]` per case,
//! named after it, so that a failure names its case:
//!
//! ```ignore
//! // tests/conformance_sqlite.rs, with `idem-testkit = { features = ["sqlite"] }` and
//! // `tokio = { features = ["macros", "rt"] }` among the dev-dependencies.
//! idem_testkit::conformance_tests!(idem_store::sqlx::Sqlite);
//! ```
//!
//! The expansion uses `#[::tokio::test]`: the crate invoking it needs `tokio` (features
//! `macros` and `rt`) among its dev-dependencies. [`run`] runs every case in turn instead and
//! returns a [`Report`].
//!
//! # Where the databases come from
//!
//! A [`Harness`] hands out the URL of a new, empty database for each case: by default the
//! test harness's ([`TestBackend::fresh_url`](crate::harness::TestBackend::fresh_url): what
//! each store gets is in [the harness's docs](crate::harness)), or any closure or `async fn`
//! returning a URL. The kit opens its pools itself through
//! [`Backend::connect`], with the [`TxSettings`] a case needs (a short lock timeout to time a
//! lock wait, say), and sometimes several pools on one database (one per instance, for
//! instances migrating or claiming at once); it migrates the database itself, since some
//! cases look at what migrating does. The kit never drops what it created.
//!
//! Times are fixed ([`NOW`]): the store never reads the clock, so no case waits for time to
//! pass, except the one that times a lock wait.
//!
//! # A new backend
//!
//! [`Backend`] is sealed (its supertrait, the store's `Dialect`, is private to `idem-store`),
//! so a store for another database is added to that crate, not implemented outside it. Such a backend is a `Dialect` there (its words for the statement templates,
//! its own statements, its migrations and the few functions that differ; [`Backend`] and
//! staged mode's statements follow from it), implements [`ConformanceSql`] here (the few
//! statements the kit runs beside the store's API, to read the migration history and to spoil
//! rows on purpose), is added to the [harness](crate::harness), and gets a test file that
//! invokes [`conformance_tests!`](crate::conformance_tests) with its database type. The kit is
//! its acceptance test: every case passes, unchanged. What is specific to one database (its
//! lock ids, its layout of the history table, query plans, numeric timestamps written by hand)
//! stays in that backend's own tests in `idem-store/tests`.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use idem_store::sqlx::{self, Pool};
use idem_store::{Backend, KeyRef, KeyTable, NewRow, StoredResponse, TxSettings};

/// The fixed "now" of every case, and an hour: the harness's.
pub use crate::harness::{HOUR, NOW};

pub mod cases;
mod sql;

/// The few statements the kit runs on a backend beside the store's API: reading the
/// migration history and spoiling rows on purpose (a tampered checksum, headers or a payload
/// that is not JSON), to check how the store answers them.
///
/// Implemented for every store idem supports, each with this crate's feature of the store's
/// name (the SQL is in this module's `sql.rs`); a new backend implements it here.
pub trait ConformanceSql: Backend {
    /// `idem_schema_migrations` in version order: (version, description, checksum).
    fn history(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<Vec<(i64, String, Vec<u8>)>, sqlx::Error>> + Send;

    /// Overwrites the recorded checksum of migration `version` with 32 zero bytes.
    fn tamper_checksum(
        pool: &Pool<Self>,
        version: i64,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Records migration `version` as a newer version of idem would have applied it (a
    /// version this one does not know), with `description`.
    fn record_unknown_migration(
        pool: &Pool<Self>,
        version: i64,
        description: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Sets the `response_headers` of `key`'s row to text that is not JSON.
    fn corrupt_headers(
        pool: &Pool<Self>,
        key: KeyRef<'_>,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Sets the payload of the outbox message `dedup_id` to text that is not JSON.
    fn corrupt_payload(
        pool: &Pool<Self>,
        dedup_id: &str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

/// Where the kit gets a new, empty database for each case: its URL, for
/// [`Backend::connect`].
///
/// Any `Fn() -> impl Future<Output = String>` is one: a closure or an `async fn` without
/// arguments, such as the test harness's
/// [`TestBackend::fresh_url`](crate::harness::TestBackend::fresh_url).
pub trait Harness {
    /// The URL of a new, empty database (PostgreSQL: a new schema, set as the URL's
    /// `search_path`; SQLite: a new file). The kit connects and migrates.
    fn fresh_database(&self) -> impl Future<Output = String>;
}

impl<F, Fut> Harness for F
where
    F: Fn() -> Fut,
    Fut: Future<Output = String>,
{
    fn fresh_database(&self) -> impl Future<Output = String> {
        self()
    }
}

/// The settings the kit's pools use: the harness's
/// ([`harness::settings`](crate::harness::settings)) with a lock timeout long enough for the
/// cases that contend on purpose (concurrent migrations, operators, dispatchers) on a loaded
/// machine.
#[must_use]
pub fn settings() -> TxSettings {
    TxSettings {
        lock_timeout: Duration::from_secs(5),
        ..crate::harness::settings()
    }
}

/// Unwrapping with a message that says what the case was doing.
pub(crate) trait Must<T> {
    /// The value, or a panic naming `what` failed and why.
    fn must(self, what: &str) -> T;
}

impl<T, E: fmt::Debug> Must<T> for Result<T, E> {
    #[track_caller]
    fn must(self, what: &str) -> T {
        match self {
            Ok(value) => value,
            Err(error) => panic!("{what} failed: {error:?}"),
        }
    }
}

impl<T> Must<T> for Option<T> {
    #[track_caller]
    fn must(self, what: &str) -> T {
        match self {
            Some(value) => value,
            None => panic!("{what}: found nothing"),
        }
    }
}

/// A pool on `url` through [`Backend::connect`].
pub(crate) async fn connect<DB: Backend>(url: &str, settings: &TxSettings) -> Pool<DB> {
    DB::connect(url, 4, settings)
        .await
        .must("Backend::connect on the harness's database")
}

/// A new database from the harness, migrated, its key table empty.
pub(crate) async fn fresh<DB: Backend>(harness: &impl Harness) -> KeyTable<DB> {
    let url = harness.fresh_database().await;
    let table = KeyTable::new(connect::<DB>(&url, &settings()).await);
    table.migrate().await.must("migrating a new database");
    table
}

/// A key of scope `global` and operation `op:v1`.
pub(crate) fn key(key: &str) -> KeyRef<'_> {
    KeyRef {
        scope: "global",
        operation: "op:v1",
        key,
    }
}

/// The headers [`put`] stores: a quote, a semicolon and a comment marker in a value, a name
/// twice, and text beyond ASCII.
pub const HEADERS: [(&str, &str); 4] = [
    ("content-type", "application/json"),
    ("location", "/things/'; --"),
    ("set-cookie", "a=1"),
    ("set-cookie", "b=\"é\\\""),
];

/// Stores a completed key through the protocol's primitives, as the runtime does: `begin`
/// without a lock, then [`Backend::insert_completed_and_commit`]. Fingerprint `[7; 32]`,
/// status 201, [`HEADERS`], completed 5 ms after `created_ms`.
pub async fn put<DB: Backend>(
    pool: &Pool<DB>,
    key: KeyRef<'_>,
    created_ms: i64,
    expires_ms: i64,
    body: &[u8],
) -> bool {
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let tx = DB::begin(&mut conn, &settings(), None)
        .await
        .must("Backend::begin without a lock")
        .free()
        .must("Backend::begin without a lock: a transaction");
    let headers = StoredResponse::encode_headers(HEADERS);
    DB::insert_completed_and_commit(
        tx,
        NewRow {
            key,
            fingerprint: &[7; 32],
            status: 201,
            headers_json: &headers,
            body,
            created_ms,
            completed_ms: created_ms + 5,
            expires_ms,
            replace_expired: false,
        },
    )
    .await
    .must("Backend::insert_completed_and_commit")
}

/// The outcome of one case ([`run`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The case's name: its function in [`cases`].
    pub case: &'static str,
    /// `None` when it passed; what failed otherwise (the panic's message).
    pub failure: Option<String>,
}

/// What [`run`] found: one [`Verdict`] per case, in the order of [`CASES`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Every case's outcome.
    pub outcomes: Vec<Verdict>,
}

impl Report {
    /// Whether every case passed.
    #[must_use]
    pub fn passed(&self) -> bool {
        self.outcomes.iter().all(|o| o.failure.is_none())
    }

    /// The cases that failed.
    pub fn failures(&self) -> impl Iterator<Item = &Verdict> {
        self.outcomes.iter().filter(|o| o.failure.is_some())
    }
}

/// One line per case, `ok` or `FAILED` with the reason.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for outcome in &self.outcomes {
            match &outcome.failure {
                None => writeln!(f, "ok      {}", outcome.case)?,
                Some(why) => writeln!(f, "FAILED  {}: {why}", outcome.case)?,
            }
        }
        let failed = self.failures().count();
        write!(
            f,
            "{} cases, {} passed, {failed} failed",
            self.outcomes.len(),
            self.outcomes.len() - failed
        )
    }
}

/// A future's output, or the message of its panic.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(output)) => Poll::Ready(Ok(output)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(payload) => Poll::Ready(Err(panic_message(payload.as_ref()))),
        }
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "panicked".to_owned()
    }
}

/// Defines [`CASES`] and the dispatch of [`run`] from the one list of cases.
macro_rules! define_cases {
    ($($case:ident),* $(,)?) => {
        /// The name of every case, in the order [`run`] runs them and
        /// [`conformance_tests!`](crate::conformance_tests) defines their tests.
        pub const CASES: &[&str] = &[$(stringify!($case)),*];

        async fn run_case<DB: ConformanceSql>(case: &str, harness: &impl Harness) {
            match case {
                $(stringify!($case) => cases::$case::<DB>(harness).await,)*
                other => panic!("no case named {other}"),
            }
        }
    };
}

crate::__idem_conformance_cases!([define_cases]);

/// Runs every case on `DB`, one after the other, each on a new database from `harness`, and
/// reports each one's outcome. A failing case's panic is caught and reported (the panic hook
/// still prints it as it happens).
///
/// Needs a Tokio runtime with timers enabled (as `#[tokio::test]` has).
pub async fn run<DB: ConformanceSql>(harness: impl Harness) -> Report {
    let mut report = Report::default();
    for &case in CASES {
        let outcome = CatchUnwind(Box::pin(run_case::<DB>(case, &harness))).await;
        report.outcomes.push(Verdict {
            case,
            failure: outcome.err(),
        });
    }
    report
}

/// Every case of the kit, handed to `$callback` after its arguments: the one list that
/// [`CASES`], [`run`] and [`conformance_tests!`](crate::conformance_tests) are made from.
#[doc(hidden)]
#[macro_export]
macro_rules! __idem_conformance_cases {
    ([$($callback:tt)*] $($args:tt)*) => {
        $($callback)*! {
            $($args)*
            // Migrations.
            migrations_apply_and_record_history,
            changed_checksum_is_refused,
            unknown_migrations_are_left_alone,
            concurrent_migrations,
            // The protocol's primitives.
            lookup_absent_present_expired,
            responses_round_trip_byte_exact,
            begin_takes_a_free_key,
            begin_finds_a_committed_key_taken,
            begin_replacing_an_expired_key,
            lock_wait_times_out,
            waiter_finds_the_committed_row,
            insert_and_commit_conflict_changes_nothing,
            insert_completed_conflict_changes_nothing,
            replacing_an_expired_key,
            savepoint_rollback_undoes_the_work,
            // Staged mode.
            reserve_once,
            reserve_replacing_an_expired_key,
            lease_takeover_and_renewal,
            journal_and_finish_are_fenced,
            release_hands_the_key_on,
            journal_commits_with_the_transaction,
            stuck_keys_of_an_operation,
            holds_end_with_their_session,
            reserve_held_takes_the_hold_with_the_key,
            // A key's life: a key that is not final never expires.
            unfinished_keys_never_expire,
            unfinished_keys_are_never_swept,
            unfinished_keys_are_never_replaced,
            finish_counts_the_ttl_from_completion,
            operator_complete_counts_the_ttl_from_now,
            // The tools' API.
            get_expire_delete,
            list_filters,
            prefixes_are_literal,
            pagination,
            limits_are_clamped,
            invalid_cursor_is_an_error,
            counts,
            sweep_deletes_only_expired,
            unreadable_rows,
            // Operator actions and the audit trail.
            stuck_keys_are_listed_and_counted,
            act_release,
            act_complete,
            act_fail,
            act_expire_and_delete,
            act_not_applicable,
            act_fenced_refusals,
            act_live_lease_needs_force,
            act_delete_completed_staged_needs_force,
            act_invalid_arguments,
            audit_filters,
            journal_for_tools,
            concurrent_acts,
            processing_table_follows_the_keys,
            // The operation registry.
            operations_registry,
            // The outbox.
            outbox_enqueue_dedups,
            outbox_rolled_back_transaction_leaves_no_message,
            outbox_claims_are_leased,
            outbox_failures_back_off_then_die,
            outbox_listing_and_counts,
            outbox_retry_is_audited,
            outbox_retry_all_in_batches,
            outbox_unreadable_payloads_die,
            outbox_concurrent_claimers_never_share_a_message,
        }
    };
}

/// One `#[tokio::test]` per case of the store conformance kit ([`conformance`](crate::conformance)),
/// on the backend `$db`, each case on a new database: from the test harness
/// ([`TestBackend::fresh_url`](crate::harness::TestBackend::fresh_url)), or from `$harness`
/// when given (a [`Harness`](crate::conformance::Harness): a closure or `async fn` returning
/// a database URL). The tests are named after the cases; invoke it once per module.
///
/// The tests are `#[::tokio::test]`s: the invoking crate needs `tokio` with features `macros`
/// and `rt` (as a dev-dependency).
///
/// ```ignore
/// idem_testkit::conformance_tests!(idem_store::sqlx::Sqlite);
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($db:ty $(,)?) => {
        $crate::conformance_tests!(
            $db,
            <$db as $crate::harness::TestBackend>::fresh_url
        );
    };
    ($db:ty, $harness:expr $(,)?) => {
        $crate::__idem_conformance_cases!([$crate::__idem_conformance_tests] $db, $harness;);
    };
}

/// The tests of [`conformance_tests!`], given the list of cases.
#[doc(hidden)]
#[macro_export]
macro_rules! __idem_conformance_tests {
    ($db:ty, $harness:expr; $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test]
            async fn $case() {
                $crate::conformance::cases::$case::<$db>(&$harness).await;
            }
        )*
    };
}
