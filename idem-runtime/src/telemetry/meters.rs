//! Metrics: their descriptions, the labels of each operation (made once), and updates that
//! ask the recorder of the moment for their metric.

use std::collections::HashMap;
use std::sync::{OnceLock, PoisonError, RwLock};

use metrics::{Key, Label};

use super::ending::{COUNTED, REASONS};
use super::{
    EXECUTION_SECONDS, LOCK_WAIT_SECONDS, METADATA, OUTBOX_DEAD, OUTBOX_DEAD_LETTERED_TOTAL,
    OUTBOX_DELIVERED_TOTAL, OUTBOX_FAILED_ATTEMPTS_TOTAL, OUTBOX_IN_FLIGHT,
    OUTBOX_OLDEST_PENDING_AGE_SECONDS, OUTBOX_PENDING, RECONCILER_LEFT_TOTAL, REJECTED_TOTAL,
    REPLICA_LOOKUPS_TOTAL, REQUESTS_TOTAL, STORED_RESPONSE_BYTES, STUCK_KEYS,
};

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

/// The labels of one operation, built once per operation and kept for the process: metric
/// keys from them allocate nothing.
pub(super) struct Labels {
    pub(super) operation: [Label; 1],
    pub(super) outcomes: [[Label; 2]; COUNTED.len()],
    pub(super) reasons: [[Label; 2]; REASONS.len()],
}

/// The labels of `operation` (an operation id). The set of operations is the program's, so
/// this holds a few entries and never grows past them.
pub(super) fn labels(operation: &str) -> &'static Labels {
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
pub(super) fn count(name: &'static str, labels: &'static [Label]) {
    count_by(name, labels, 1);
}

pub(super) fn count_by(name: &'static str, labels: &'static [Label], n: u64) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_counter(&Key::from_static_parts(name, labels), &METADATA)
            .increment(n);
    });
}

pub(super) fn observe(name: &'static str, labels: &'static [Label], value: f64) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_histogram(&Key::from_static_parts(name, labels), &METADATA)
            .record(value);
    });
}

pub(super) fn set(name: &'static str, labels: &'static [Label], value: f64) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_gauge(&Key::from_static_parts(name, labels), &METADATA)
            .set(value);
    });
}
