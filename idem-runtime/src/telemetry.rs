//! Tracing and metrics: one span per idempotent execution, an event at each step of the
//! protocol, and metrics through the [`metrics`] facade.
//!
//! Nothing here writes a client's key, a tenant, a user or a body as it is. A key appears as
//! its [`key_hash`], a scope as its kind.
//!
//! # The span
//!
//! Every execution — an `#[idempotent]` request, [`Idem::execute`], [`Idem::once`],
//! [`Idem::staged`] — runs inside one `INFO` span named [`SPAN_NAME`] (`idem.execute`), whose
//! target is this module (`idem_runtime::telemetry`). The handler's own spans and events are
//! its children, and idem's error lines (a failed store, an unknown commit, a panic) carry its
//! fields:
//!
//! | field | value |
//! |---|---|
//! | `operation` | the operation id, as the key table stores it: `create_order:v1` |
//! | `scope` | the scope's kind only: `global`, `tenant` or `user` |
//! | `key` | [`key_hash`] of the scope and the key: 12 hexadecimal digits; absent without a key |
//! | `request_id` | the request's [`RequestId`] extension, or else its [`REQUEST_ID_HEADER`] (`x-request-id`) header; absent without either |
//! | `outcome` | recorded when it ends: `executed`, `replayed`, `mismatch`, `in_flight`, `expired`, `failed`, `error`, or `rejected` |
//! | `reconciler` | `true` when the [`Reconciler`](crate::staged::Reconciler) resumes a stuck key |
//!
//! Every field but `outcome` and `reconciler` is given as the span is made, so a formatting
//! subscriber writes them once. `operation`, `scope`, `key` and `outcome` are the program's
//! words or hexadecimal digits and are written with `Display` (`tracing_subscriber::fmt`
//! prints `operation=create_order:v1`, unquoted); `request_id` comes from the client and
//! stays a string, which such a subscriber quotes and escapes.
//!
//! The outcomes: `executed` — the work ran and its response was stored (a staged
//! operation's stored permanent failure too); `replayed` — a stored response was answered,
//! nothing ran (also the answer a concurrent execution committed first); `mismatch` — the
//! key was used with another request (`422`); `in_flight` — another execution holds the key
//! (`409`); `expired` — the key expired (`410`); `failed` — the work answered `>= 400` and
//! nothing was stored, or a staged step stopped on a retryable failure (`503`, resumable);
//! `error` — idem answered `5xx` on its own: the store failed, the commit's outcome is
//! unknown, the work panicked; `rejected` — refused before the protocol: no key where one is
//! required, a malformed key, an input that cannot be fingerprinted (`400`).
//!
//! The span's last event, `idempotent request finished` (fields `outcome`, `elapsed_ms`), is
//! `DEBUG` for what a healthy service does all day (`executed`, `replayed`, `failed`) and
//! `INFO` for the rest (`mismatch`, `in_flight`, `expired`, `rejected`, `error`); replays
//! are counted in `idem_requests_total` either way. The steps are `DEBUG` events:
//! `key looked up` (`found`: `none`, `completed`, `processing`, `expired`), `key lock taken`
//! (`waited_ms`, `key_free`) or `key lock not taken`, `work done` (`status`), `response
//! stored` (`bytes`) or `response not stored: the key was stored meanwhile`, `key looked up
//! again` (`found`); in staged mode `key reserved`, `key taken over` (`attempt`), `step
//! recorded` (`step`, `attempt`) and `response stored`. Where the key's lock comes before
//! the lookup (PostgreSQL, for an operation whose recent keys were more than two in three new), `key lock taken`
//! comes first and `key looked up` with `found = "none"` follows it: the lock's look at the
//! key found no row; a lock that found the key's row is `key lock not taken`, and the lookup
//! follows.
//!
//! # Finding a key from a log line
//!
//! [`key_hash`] is the first 12 hexadecimal digits of the SHA-256 of the scope's stored form
//! (`global`, `tenant:<id>`, `user:<id>`), one line feed, and the key as the key table stores
//! it (unquoted): for the key `"order-1"` of tenant `acme`,
//!
//! ```sh
//! printf 'tenant:acme\norder-1' | sha256sum | cut -c1-12
//! ```
//!
//! gives the `key` field of its lines. It is a correlation id, not a secret: a key that can
//! be guessed can be confirmed against it.
//!
//! # Metrics
//!
//! Recorded through the [`metrics`] facade: nothing is kept, and almost nothing done, until
//! the application installs a recorder (`metrics-exporter-prometheus`, say). Call
//! [`describe_metrics`] after installing it for their descriptions and units.
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | `idem_requests_total` | counter | `operation`, `outcome` | executions by outcome: `executed`, `replayed`, `mismatch`, `in_flight`, `expired`, `failed`, `error` |
//! | `idem_rejected_total` | counter | `operation`, `reason` | refused before the protocol: `missing_key`, `invalid_key`, `invalid_input` |
//! | `idem_execution_seconds` | histogram | `operation`, `outcome` | a whole execution, from its first step (the lookup, or the key's lock where it comes first) to the answer |
//! | `idem_lock_wait_seconds` | histogram | `operation` | atomic mode: `BEGIN` and the key's lock, waits that ended in a lock timeout or found the key's row included |
//! | `idem_stored_response_bytes` | histogram | `operation` | the body of each response stored |
//! | `idem_stuck_keys` | gauge | `operation` | staged keys whose lease ran out, not completed: set by [`Idem::observe_stuck`] |
//! | `idem_replica_lookups_total` | counter | `result` | lookups on the [replica](crate::Config::replica): `replayed` (answered from there), `primary` (not there, not final, expired or another request: the primary answered), `failed` (the standby failed or was slow; passed over for 5 s) |
//! | `idem_reconciler_left_total` | counter | `operation` | staged keys the [`Reconciler`](crate::staged::Reconciler) stopped resuming after its last attempt, left stuck for an operator |
//! | `idem_outbox_delivered_total` | counter | | outbox messages delivered (by this process's dispatchers) |
//! | `idem_outbox_failed_attempts_total` | counter | | failed delivery attempts, retried later or dead-lettered |
//! | `idem_outbox_dead_lettered_total` | counter | | messages parked as dead by this process's dispatchers |
//! | `idem_outbox_in_flight` | gauge | | deliveries this process's dispatchers are making now |
//! | `idem_outbox_pending` | gauge | | pending messages in the outbox (the table; in flight included) |
//! | `idem_outbox_dead` | gauge | | dead-lettered messages in the outbox (the table) |
//! | `idem_outbox_oldest_pending_age_seconds` | gauge | | how long the oldest pending message has waited (0 when none) |
//!
//! The outbox's table gauges are set by every running dispatcher (`outbox::Dispatcher`)
//! every [`observe_every`](crate::outbox::Dispatcher::observe_every) (10 s by default):
//! instances sharing an outbox report the same values, so aggregate them with `max`, and
//! the counters and `idem_outbox_in_flight` with `sum`.
//!
//! The `operation` label is the operation id (`create_order:v1`), as in the span and the key
//! table, which `idem keys --operation` takes: a handful of values per service.
//! Executions the reconciler resumes are in the span, not in the counters.
//!
//! Each update asks the recorder of that moment for its metric instead of holding a handle
//! made once. The labels are made once per operation, and the key is built from them
//! without allocating (the recorder may allocate for its handle). A held handle is bound to
//! one recorder: under a test's local recorder (`metrics::set_default_local_recorder`) it
//! would count into the recorder it was made with, and `metrics-exporter-prometheus` with an
//! `idle_timeout` drops a series nobody updated for a while, after which a held handle counts
//! into nothing. Asking costs a replay a small share of its instructions (`bench/callgrind`;
//! the figure is in `bench/RESULTS.md`, step 6).
//!
//! ```
//! use idem_runtime::telemetry::{self, key_hash};
//!
//! assert_eq!(telemetry::SPAN_NAME, "idem.execute");
//! assert_eq!(telemetry::REQUESTS_TOTAL, "idem_requests_total");
//! // The `key` field of the lines of the key "order-1" of tenant acme:
//! let hash = key_hash("tenant:acme", "order-1");
//! assert_eq!(hash.as_str().len(), 12);
//! assert_eq!(hash, key_hash("tenant:acme", "order-1"));
//! assert_ne!(hash, key_hash("tenant:globex", "order-1"));
//! ```
//!
//! [`Idem::execute`]: crate::Idem::execute
//! [`Idem::once`]: crate::Idem::once
//! [`Idem::staged`]: crate::Idem::staged
//! [`Idem::observe_stuck`]: crate::Idem::observe_stuck

use std::collections::HashMap;
use std::fmt;
use std::sync::{OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use http::StatusCode;
use metrics::{Key, Label, Level, Metadata};
use sha2::{Digest as _, Sha256};
use tracing::{Span, field};

use crate::error::Error;
use crate::record::{Outcome, OutcomeKind};
use crate::store::StoredKey;

/// The name of the span of one execution.
pub const SPAN_NAME: &str = "idem.execute";

/// The request header read as the span's `request_id` when the request has no
/// [`RequestId`] extension. tower-http's `SetRequestIdLayer::x_request_id` sets it.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Counter: executions by `operation` and `outcome`.
pub const REQUESTS_TOTAL: &str = "idem_requests_total";
/// Counter: requests refused before the protocol, by `operation` and `reason`.
pub const REJECTED_TOTAL: &str = "idem_rejected_total";
/// Histogram: a whole execution in seconds, by `operation` and `outcome`.
pub const EXECUTION_SECONDS: &str = "idem_execution_seconds";
/// Histogram: the wait for `BEGIN` and the key's lock in seconds, by `operation`.
pub const LOCK_WAIT_SECONDS: &str = "idem_lock_wait_seconds";
/// Histogram: the body size of each stored response in bytes, by `operation`.
pub const STORED_RESPONSE_BYTES: &str = "idem_stored_response_bytes";
/// Gauge: staged keys whose lease ran out and that are not completed, by `operation`.
pub const STUCK_KEYS: &str = "idem_stuck_keys";
/// Counter: staged keys the reconciler left stuck for an operator, by `operation`.
pub const RECONCILER_LEFT_TOTAL: &str = "idem_reconciler_left_total";
/// Counter: lookups on the [replica](crate::Config::replica), by `result`.
pub const REPLICA_LOOKUPS_TOTAL: &str = "idem_replica_lookups_total";

/// Counter: outbox messages delivered.
pub const OUTBOX_DELIVERED_TOTAL: &str = "idem_outbox_delivered_total";
/// Counter: failed outbox delivery attempts.
pub const OUTBOX_FAILED_ATTEMPTS_TOTAL: &str = "idem_outbox_failed_attempts_total";
/// Counter: outbox messages parked as dead.
pub const OUTBOX_DEAD_LETTERED_TOTAL: &str = "idem_outbox_dead_lettered_total";
/// Gauge: outbox deliveries in progress in this process.
pub const OUTBOX_IN_FLIGHT: &str = "idem_outbox_in_flight";
/// Gauge: pending outbox messages.
pub const OUTBOX_PENDING: &str = "idem_outbox_pending";
/// Gauge: dead outbox messages.
pub const OUTBOX_DEAD: &str = "idem_outbox_dead";
/// Gauge: the age of the oldest pending outbox message, in seconds.
pub const OUTBOX_OLDEST_PENDING_AGE_SECONDS: &str = "idem_outbox_oldest_pending_age_seconds";

/// The longest request id recorded; longer ones are cut.
const REQUEST_ID_MAX: usize = 128;

/// A request id the application chose, as a request extension: the span's `request_id`,
/// ahead of the [`REQUEST_ID_HEADER`] header. Insert it in a middleware before the handler.
///
/// ```
/// use idem_runtime::telemetry::RequestId;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(RequestId::new("req-7f3a"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(String);

impl RequestId {
    /// A request id (at most 128 characters are recorded).
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// The id.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The request id of a request: its [`RequestId`] extension, or else its
/// [`REQUEST_ID_HEADER`] header when that is visible ASCII. Allocates only when there is one.
pub(crate) fn request_id_of(parts: &http::request::Parts) -> Option<String> {
    if let Some(id) = parts.extensions.get::<RequestId>() {
        return Some(id.0.clone());
    }
    let header = parts.headers.get(REQUEST_ID_HEADER)?;
    header.to_str().ok().map(str::to_owned)
}

/// The hash that stands for a key in logs: see [`key_hash`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash([u8; 12]);

impl KeyHash {
    /// The 12 lower-case hexadecimal digits.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Only ASCII digits are ever written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What logs write for a key: the first 12 hexadecimal digits (48 bits) of SHA-256 over
/// `scope` (the stored form: `global`, `tenant:<id>`, `user:<id>`), a line feed, and `key`
/// (unquoted, as the key table stores it). A key never has a line feed, so no two pairs
/// share their input. See [the module](self) for the shell equivalent.
#[must_use]
pub fn key_hash(scope: &str, key: &str) -> KeyHash {
    let digest = Sha256::new()
        .chain_update(scope.as_bytes())
        .chain_update(b"\n")
        .chain_update(key.as_bytes())
        .finalize();
    let mut out = [0; 12];
    for (pair, byte) in out.chunks_exact_mut(2).zip(digest.iter()) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xf)];
    }
    KeyHash(out)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A key's [`key_hash`], computed when it is written: a span no subscriber records never
/// hashes.
struct LazyKeyHash<'a> {
    scope: &'a str,
    key: &'a str,
}

impl fmt::Display for LazyKeyHash<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(key_hash(self.scope, self.key).as_str())
    }
}

/// `id`'s first [`REQUEST_ID_MAX`] characters.
fn cut_request_id(id: &str) -> &str {
    if id.len() <= REQUEST_ID_MAX {
        return id; // no more characters than bytes
    }
    let end = id
        .char_indices()
        .nth(REQUEST_ID_MAX)
        .map_or(id.len(), |(at, _)| at);
    &id[..end]
}

/// The kind of a scope's stored form, never its owner.
fn scope_kind(scope: &str) -> &'static str {
    match scope.split(':').next() {
        Some("global") => "global",
        Some("tenant") => "tenant",
        Some("user") => "user",
        _ => "other",
    }
}

/// Gives the metrics their descriptions and units. Call it once after installing the
/// recorder; metrics are recorded without it too.
pub fn describe_metrics() {
    use metrics::Unit;
    metrics::describe_counter!(
        REQUESTS_TOTAL,
        Unit::Count,
        "Idempotent executions by operation and outcome"
    );
    metrics::describe_counter!(
        REJECTED_TOTAL,
        Unit::Count,
        "Idempotent requests refused before the protocol (no key, malformed key, input)"
    );
    metrics::describe_histogram!(
        EXECUTION_SECONDS,
        Unit::Seconds,
        "Duration of a whole idempotent execution"
    );
    metrics::describe_histogram!(
        LOCK_WAIT_SECONDS,
        Unit::Seconds,
        "Wait for BEGIN and the key's lock (atomic mode)"
    );
    metrics::describe_histogram!(
        STORED_RESPONSE_BYTES,
        Unit::Bytes,
        "Body size of each stored response"
    );
    metrics::describe_gauge!(
        STUCK_KEYS,
        Unit::Count,
        "Staged keys whose lease ran out and that are not completed"
    );
    metrics::describe_counter!(
        REPLICA_LOOKUPS_TOTAL,
        Unit::Count,
        "Lookups on the replica, by result: replayed there, left to the primary, failed"
    );
    metrics::describe_counter!(
        RECONCILER_LEFT_TOTAL,
        Unit::Count,
        "Staged keys the reconciler stopped resuming, left stuck for an operator"
    );
    metrics::describe_counter!(
        OUTBOX_DELIVERED_TOTAL,
        Unit::Count,
        "Outbox messages delivered"
    );
    metrics::describe_counter!(
        OUTBOX_FAILED_ATTEMPTS_TOTAL,
        Unit::Count,
        "Failed outbox delivery attempts (retried later, or dead-lettered)"
    );
    metrics::describe_counter!(
        OUTBOX_DEAD_LETTERED_TOTAL,
        Unit::Count,
        "Outbox messages parked as dead after their last attempt"
    );
    metrics::describe_gauge!(
        OUTBOX_IN_FLIGHT,
        Unit::Count,
        "Outbox deliveries in progress in this process"
    );
    metrics::describe_gauge!(OUTBOX_PENDING, Unit::Count, "Pending outbox messages");
    metrics::describe_gauge!(OUTBOX_DEAD, Unit::Count, "Dead-lettered outbox messages");
    metrics::describe_gauge!(
        OUTBOX_OLDEST_PENDING_AGE_SECONDS,
        Unit::Seconds,
        "Age of the oldest pending outbox message"
    );
}

/// The outbox's metrics ([`crate::outbox::Dispatcher`]).
pub(crate) mod outbox {
    use super::{count_by, set};

    /// Registers every outbox metric, so that they show before the first event.
    pub(crate) fn register() {
        for name in [
            super::OUTBOX_DELIVERED_TOTAL,
            super::OUTBOX_FAILED_ATTEMPTS_TOTAL,
            super::OUTBOX_DEAD_LETTERED_TOTAL,
        ] {
            count_by(name, &[], 0);
        }
    }

    /// One delivered message.
    pub(crate) fn delivered() {
        count_by(super::OUTBOX_DELIVERED_TOTAL, &[], 1);
    }

    /// One failed attempt; `dead`: the message's last.
    pub(crate) fn failed(dead: bool) {
        count_by(super::OUTBOX_FAILED_ATTEMPTS_TOTAL, &[], 1);
        if dead {
            count_by(super::OUTBOX_DEAD_LETTERED_TOTAL, &[], 1);
        }
    }

    /// Deliveries in progress in this process, moved by `delta`.
    pub(crate) fn in_flight(delta: f64) {
        metrics::with_recorder(|recorder| {
            recorder
                .register_gauge(
                    &metrics::Key::from_static_name(super::OUTBOX_IN_FLIGHT),
                    &super::METADATA,
                )
                .increment(delta);
        });
    }

    /// The table's counts.
    #[allow(clippy::cast_precision_loss)]
    pub(crate) fn table(pending: u64, dead: u64, oldest_age_ms: i64) {
        set(super::OUTBOX_PENDING, &[], pending as f64);
        set(super::OUTBOX_DEAD, &[], dead as f64);
        set(
            super::OUTBOX_OLDEST_PENDING_AGE_SECONDS,
            &[],
            oldest_age_ms.max(0) as f64 / 1000.0,
        );
    }
}

/// How an execution ended, as the `outcome` field and label spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Executed,
    Replayed,
    Mismatch,
    InFlight,
    Expired,
    Failed,
    Error,
    Rejected(Rejection),
}

/// Why a request was refused before the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rejection {
    MissingKey,
    InvalidKey,
    InvalidInput,
}

/// The outcomes counted in [`REQUESTS_TOTAL`], in label order.
const COUNTED: [&str; 7] = [
    "executed",
    "replayed",
    "mismatch",
    "in_flight",
    "expired",
    "failed",
    "error",
];

/// The reasons counted in [`REJECTED_TOTAL`], in label order.
const REASONS: [&str; 3] = ["missing_key", "invalid_key", "invalid_input"];

impl Ending {
    fn of(result: &Result<Outcome, Error>) -> Self {
        match result {
            Ok(outcome) => match outcome.kind {
                OutcomeKind::Executed => Self::Executed,
                OutcomeKind::Replayed => Self::Replayed,
                _ => Self::Failed,
            },
            Err(error) => match error {
                Error::MissingKey | Error::KeyFromRequest { missing: true, .. } => {
                    Self::Rejected(Rejection::MissingKey)
                }
                Error::InvalidKey(_) | Error::KeyFromRequest { .. } => {
                    Self::Rejected(Rejection::InvalidKey)
                }
                Error::Input(_) => Self::Rejected(Rejection::InvalidInput),
                Error::Mismatch(_) => Self::Mismatch,
                Error::InFlight { .. } => Self::InFlight,
                Error::Expired => Self::Expired,
                Error::Interrupted { .. } => Self::Failed,
                _ => Self::Error,
            },
        }
    }

    /// The index in [`COUNTED`], or in [`REASONS`] for a rejection.
    fn index(self) -> usize {
        match self {
            Self::Executed | Self::Rejected(Rejection::MissingKey) => 0,
            Self::Replayed | Self::Rejected(Rejection::InvalidKey) => 1,
            Self::Mismatch | Self::Rejected(Rejection::InvalidInput) => 2,
            Self::InFlight => 3,
            Self::Expired => 4,
            Self::Failed => 5,
            Self::Error => 6,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Rejected(_) => "rejected",
            counted => COUNTED[counted.index()],
        }
    }
}

/// The labels of one operation, built once per operation and kept for the process: metric
/// keys from them allocate nothing.
struct Labels {
    operation: [Label; 1],
    outcomes: [[Label; 2]; COUNTED.len()],
    reasons: [[Label; 2]; REASONS.len()],
}

/// The labels of `operation` (an operation id). The set of operations is the program's, so
/// this holds a few entries and never grows past them.
fn labels(operation: &str) -> &'static Labels {
    static ALL: OnceLock<RwLock<HashMap<Box<str>, &'static Labels>>> = OnceLock::new();
    let all = ALL.get_or_init(RwLock::default);
    if let Some(labels) = all
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(operation)
    {
        return labels;
    }
    let mut all = all.write().unwrap_or_else(PoisonError::into_inner);
    all.entry(operation.into()).or_insert_with(|| {
        let value: &'static str = Box::leak(operation.into());
        let pair = |name: &'static str, second: &'static str| {
            [
                Label::from_static_parts("operation", value),
                Label::from_static_parts(name, second),
            ]
        };
        Box::leak(Box::new(Labels {
            operation: [Label::from_static_parts("operation", value)],
            outcomes: COUNTED.map(|outcome| pair("outcome", outcome)),
            reasons: REASONS.map(|reason| pair("reason", reason)),
        }))
    })
}

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

fn count(name: &'static str, labels: &'static [Label]) {
    count_by(name, labels, 1);
}

fn count_by(name: &'static str, labels: &'static [Label], n: u64) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_counter(&Key::from_static_parts(name, labels), &METADATA)
            .increment(n);
    });
}

fn observe(name: &'static str, labels: &'static [Label], value: f64) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_histogram(&Key::from_static_parts(name, labels), &METADATA)
            .record(value);
    });
}

fn set(name: &'static str, labels: &'static [Label], value: f64) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_gauge(&Key::from_static_parts(name, labels), &METADATA)
            .set(value);
    });
}

fn millis(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}

/// One execution being observed: its span, its start, its operation's labels.
pub(crate) struct Execution {
    span: Span,
    started: Instant,
    labels: &'static Labels,
    /// Counted in the metrics (not for the reconciler's resumptions).
    tallied: bool,
}

impl Execution {
    /// Opens the span of an execution of `operation` for (`scope`, `key`). Every field the
    /// request gives is in the span as it is made, so a subscriber formats them once (each
    /// later `record` is another pass through every layer); the key is hashed only when a
    /// subscriber records the span, and `operation`, the scope's kind and the hash are
    /// written with `Display` (they are the program's or hexadecimal digits, and need no
    /// quoting). The request id is the client's: it stays a string, for the subscriber to
    /// quote and escape.
    pub(crate) fn start(
        operation: &str,
        scope: &str,
        key: Option<&str>,
        request_id: Option<&str>,
    ) -> Self {
        let request_id = request_id.map(cut_request_id);
        let span = tracing::info_span!(
            "idem.execute",
            operation = %operation,
            scope = %scope_kind(scope),
            key = key.map(|key| field::display(LazyKeyHash { scope, key })),
            request_id,
            outcome = field::Empty,
            reconciler = field::Empty,
        );
        Self {
            span,
            started: Instant::now(),
            labels: labels(operation),
            tallied: true,
        }
    }

    /// A reconciler's resumption of a stuck key: the span, without the counters.
    pub(crate) fn resumption(operation: &str, scope: &str, key: &str) -> Self {
        let mut execution = Self::start(operation, scope, Some(key), None);
        execution.span.record("reconciler", true);
        execution.tallied = false;
        execution
    }

    /// The span, to instrument the execution's future with and to enter while its answer is
    /// written.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// Runs `execution` in the span and records how it ended.
    ///
    /// The execution's future — the protocol's steps with the handler's, several kilobytes
    /// — goes on the heap here, where it is made: every future that awaits this one (the
    /// handler the attribute writes, axum's, the middleware's) then holds a pointer, and is
    /// not copied whole each time one of them is moved into the next (what the copies cost:
    /// `bench/RESULTS.md`, step 3).
    pub(crate) fn run<'a, F>(
        self,
        execution: F,
    ) -> impl Future<Output = Result<Outcome, Error>> + 'a
    where
        F: Future<Output = Result<Outcome, Error>> + 'a,
    {
        let execution = Box::pin(tracing::Instrument::instrument(
            execution,
            self.span.clone(),
        ));
        async move {
            let result = execution.await;
            self.finish(&result);
            result
        }
    }

    /// Records how the execution ended: the span's `outcome`, its last event, the metrics.
    pub(crate) fn finish(self, result: &Result<Outcome, Error>) {
        let ending = Ending::of(result);
        let elapsed = self.started.elapsed();
        if self.tallied {
            match ending {
                Ending::Rejected(_) => {
                    count(REJECTED_TOTAL, &self.labels.reasons[ending.index()]);
                }
                counted => {
                    let labels = &self.labels.outcomes[counted.index()];
                    count(REQUESTS_TOTAL, labels);
                    observe(EXECUTION_SECONDS, labels, elapsed.as_secs_f64());
                }
            }
        }
        let outcome = ending.as_str();
        self.span.record("outcome", field::display(outcome));
        let elapsed_ms = millis(elapsed);
        match ending {
            Ending::Executed | Ending::Replayed | Ending::Failed => tracing::debug!(
                parent: &self.span,
                outcome,
                elapsed_ms,
                "idempotent request finished"
            ),
            _ => tracing::info!(
                parent: &self.span,
                outcome,
                elapsed_ms,
                "idempotent request finished"
            ),
        }
    }
}

/// Step 1: what the lookup found.
pub(crate) fn looked_up(stored: Option<&StoredKey>, now_ms: i64) {
    tracing::debug!(found = found(stored, now_ms), "key looked up");
}

/// What a lookup on the [replica](crate::Config::replica) led to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReplicaLookup {
    /// A replay, answered from there.
    Replayed,
    /// Anything else: the primary decides.
    Primary,
    /// The standby failed or was slow: the primary decides.
    Failed,
}

/// Step 1 on the replica: counted in [`REPLICA_LOOKUPS_TOTAL`].
pub(crate) fn replica_looked_up(result: ReplicaLookup) {
    static LABELS: [[Label; 1]; 3] = [
        [Label::from_static_parts("result", "replayed")],
        [Label::from_static_parts("result", "primary")],
        [Label::from_static_parts("result", "failed")],
    ];
    let labels = &LABELS[result as usize];
    tracing::debug!(result = labels[0].value(), "key looked up on the replica");
    count(REPLICA_LOOKUPS_TOTAL, labels);
}

/// Step 5: what the lookup after an execution that stored nothing found.
pub(crate) fn looked_up_again(stored: Option<&StoredKey>, now_ms: i64) {
    tracing::debug!(found = found(stored, now_ms), "key looked up again");
}

fn found(stored: Option<&StoredKey>, now_ms: i64) -> &'static str {
    match stored.map(|row| row.status_at(now_ms)) {
        None => "none",
        Some(crate::store::KeyStatus::Expired) => "expired",
        Some(crate::store::KeyStatus::Completed) => "completed",
        Some(_) => "processing",
    }
}

/// Step 2, atomic mode: `BEGIN` with the key's lock, started at `started`, ended with the
/// key free (`Some(true)`), stored meanwhile (`Some(false)`), or failed (`None`).
pub(crate) fn lock_taken(operation: &str, started: Instant, free: Option<bool>) {
    let waited = started.elapsed();
    observe(
        LOCK_WAIT_SECONDS,
        &labels(operation).operation,
        waited.as_secs_f64(),
    );
    match free {
        Some(key_free) => tracing::debug!(waited_ms = millis(waited), key_free, "key lock taken"),
        None => tracing::debug!(waited_ms = millis(waited), "key lock not taken"),
    }
}

/// Step 3: the work answered `status`.
pub(crate) fn work_done(status: StatusCode) {
    tracing::debug!(status = status.as_u16(), "work done");
}

/// Step 4: the response of `bytes` was stored (`true`) or the key was stored meanwhile.
pub(crate) fn stored(operation: &str, bytes: usize, stored: bool) {
    if stored {
        #[allow(clippy::cast_precision_loss)] // sizes stay far below 2^52
        observe(
            STORED_RESPONSE_BYTES,
            &labels(operation).operation,
            bytes as f64,
        );
        tracing::debug!(bytes, "response stored");
    } else {
        tracing::debug!("response not stored: the key was stored meanwhile");
    }
}

/// Staged mode: the key was reserved (`attempt` 1, or more over an expired row) or taken
/// over from an attempt whose lease ran out.
pub(crate) fn reserved(attempt: i64, taken_over: bool) {
    if taken_over {
        tracing::debug!(attempt, "key taken over");
    } else {
        tracing::debug!(attempt, "key reserved");
    }
}

/// Staged mode: a key's live lease is taken over because its attempt's owner is provably
/// gone ([`crate::hold`]).
pub(crate) fn owner_gone(attempt: i64) {
    tracing::info!(
        attempt,
        "staged attempt's owner is gone (its hold ended with its connection): taking the key over before its lease runs out"
    );
}

/// Staged mode: a step's result was recorded.
pub(crate) fn step_recorded(step: &str, attempt: i64) {
    tracing::debug!(step, attempt, "step recorded");
}

/// The reconciler left a key of `operation` for an operator ([`RECONCILER_LEFT_TOTAL`]).
pub(crate) fn left_for_operator(operation: &str, key: &str, attempt: i64) {
    tracing::warn!(
        key,
        attempt,
        "the reconciler leaves this staged key stuck for an operator: its last attempt did not \
         complete it (idem keys list --status stuck)"
    );
    count_by(RECONCILER_LEFT_TOTAL, &labels(operation).operation, 1);
}

/// Sets the [`STUCK_KEYS`] gauge of `operation` to `n`.
pub(crate) fn stuck_keys(operation: &str, n: u64) {
    #[allow(clippy::cast_precision_loss)] // counts stay far below 2^52
    set(STUCK_KEYS, &labels(operation).operation, n as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_hash_is_the_documented_digest() {
        // printf 'tenant:acme\norder-1' | sha256sum | cut -c1-12
        let full = Sha256::digest(b"tenant:acme\norder-1");
        let hex = crate::hex::encode(&full);
        let hash = key_hash("tenant:acme", "order-1");
        assert_eq!(hash.as_str(), &hex[..12]);
        assert_eq!(hash.to_string(), hash.as_str());
        assert_ne!(hash, key_hash("tenant:acme", "order-2"));
        assert_ne!(hash, key_hash("global", "order-1"));
    }

    /// What `tracing_subscriber::fmt` writes for the span: the program's words and the
    /// hash unquoted, the client's request id quoted and escaped, the key itself nowhere.
    #[test]
    fn a_formatting_subscriber_quotes_only_the_request_id() {
        #[derive(Clone, Default)]
        struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let execution = Execution::start(
                "create_order:v1",
                "tenant:acme",
                Some("order-1"),
                Some("a \"b\""),
            );
            execution.span().in_scope(|| tracing::info!("inside"));
        });
        let written = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let hash = key_hash("tenant:acme", "order-1");
        for field in [
            "operation=create_order:v1".to_owned(),
            "scope=tenant".to_owned(),
            format!("key={hash}"),
            r#"request_id="a \"b\"""#.to_owned(),
        ] {
            assert!(written.contains(&field), "{field} in {written}");
        }
        assert!(!written.contains("order-1"), "{written}");
        assert!(!written.contains("acme"), "{written}");
    }

    #[test]
    fn request_ids_are_cut_at_128_characters_not_bytes() {
        let ascii = "r".repeat(200);
        assert_eq!(cut_request_id(&ascii), &ascii[..128]);
        assert_eq!(cut_request_id(&ascii[..128]), &ascii[..128]);
        let wide = "é".repeat(100); // 200 bytes, 100 characters
        assert_eq!(cut_request_id(&wide), wide);
        let wider = "é".repeat(200);
        assert_eq!(cut_request_id(&wider).chars().count(), 128);
        assert_eq!(cut_request_id(""), "");
    }

    #[test]
    fn scopes_are_written_as_their_kind() {
        assert_eq!(scope_kind("global"), "global");
        assert_eq!(scope_kind("tenant:acme"), "tenant");
        assert_eq!(scope_kind("user:42:x"), "user");
        assert_eq!(scope_kind("tenantacme"), "other");
    }

    #[test]
    fn outcomes_have_their_labels() {
        let ok = |kind| {
            Ending::of(&Ok(Outcome {
                kind,
                record: crate::record::Record::failure(),
            }))
            .as_str()
        };
        assert_eq!(ok(OutcomeKind::Executed), "executed");
        assert_eq!(ok(OutcomeKind::Replayed), "replayed");
        assert_eq!(ok(OutcomeKind::Failed), "failed");
        let err = |error| Ending::of(&Err(error)).as_str();
        assert_eq!(err(Error::Mismatch(None)), "mismatch");
        assert_eq!(err(Error::Expired), "expired");
        assert_eq!(
            err(Error::InFlight {
                retry_after: Duration::from_secs(1)
            }),
            "in_flight"
        );
        assert_eq!(err(Error::Panicked), "error");
        assert_eq!(err(Error::MissingKey), "rejected");
        let missing = Ending::of(&Err(Error::MissingKey));
        assert_eq!(REASONS[missing.index()], "missing_key");
        // A key taken from the request: the same reasons.
        let part = |missing| {
            Ending::of(&Err(Error::KeyFromRequest {
                from: crate::spec::KeySource::Parts(&[crate::spec::KeyPart::Header("webhook-id")]),
                missing,
                reason: "the request has no such header",
            }))
        };
        assert_eq!(REASONS[part(true).index()], "missing_key");
        assert_eq!(REASONS[part(false).index()], "invalid_key");
    }

    #[test]
    fn labels_are_built_once_per_operation() {
        let a = labels("telemetry-test:v1");
        let b = labels("telemetry-test:v1");
        assert!(std::ptr::eq(a, b));
        assert_eq!(a.operation[0].value(), "telemetry-test:v1");
        assert_eq!(a.outcomes[1][1].value(), "replayed");
    }
}
