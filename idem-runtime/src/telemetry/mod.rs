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

mod ending;
mod meters;
pub(crate) mod outbox;
mod request;
#[cfg(test)]
mod tests;

use std::time::{Duration, Instant};

use http::StatusCode;
use metrics::{Label, Level, Metadata};
use tracing::{Span, field};

use self::ending::Ending;
pub use self::meters::describe_metrics;
use self::meters::{Labels, count, count_by, labels, observe, set};
pub(crate) use self::request::request_id_of;
pub use self::request::{KeyHash, RequestId, key_hash};
use self::request::{LazyKeyHash, cut_request_id, scope_kind};
use crate::error::Error;
use crate::record::Outcome;
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

/// The metadata of every metric: this module's path, as the target of its events.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

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
