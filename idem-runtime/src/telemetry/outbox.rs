//! The outbox's metrics ([`crate::outbox::Dispatcher`]).

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
