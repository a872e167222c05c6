//! An outbox message's detail, built once for `idem outbox show` and the terminal UI's
//! message pane: its columns as `(name, value)` in the order both show them ([`fields`]),
//! how it stands ([`state`]), its last error and its payload. A value the message does not
//! have (no next attempt, no lease, not delivered, no error) is [`NONE`] on both.

use idem_store::{OutboxRow, OutboxStatus};

use crate::format::{sealed, unopened};

/// The one word for a value a message does not have.
pub const NONE: &str = "-";

/// The name of the status field, which the terminal UI colours.
pub const STATUS: &str = "status";

/// How a message stands at `now_ms`, in words: `dead`, `delivered`, `being delivered (in
/// flight)`, `due (the next claim takes it)` or `waiting for its next attempt`.
#[must_use]
pub fn state(row: &OutboxRow, now_ms: i64) -> &'static str {
    match row.status {
        OutboxStatus::Dead => "dead",
        OutboxStatus::Delivered => "delivered",
        OutboxStatus::Pending if row.in_flight(now_ms) => "being delivered (in flight)",
        OutboxStatus::Pending if row.next_attempt_at_ms <= now_ms => {
            "due (the next claim takes it)"
        }
        OutboxStatus::Pending => "waiting for its next attempt",
    }
}

/// The status field's value: the status, then how a pending message stands, or that a dead
/// one was given up on.
fn status(row: &OutboxRow, now_ms: i64) -> String {
    match row.status {
        OutboxStatus::Pending => format!("{}: {}", row.status, state(row, now_ms)),
        OutboxStatus::Dead => format!("{} (given up on; a retry sends it again)", row.status),
        OutboxStatus::Delivered => row.status.to_string(),
    }
}

/// The message's columns but its last error and its payload, as `(name, value)` lines, times
/// written by `at`.
pub fn fields(
    row: &OutboxRow,
    now_ms: i64,
    at: impl Fn(i64) -> String,
) -> Vec<(&'static str, String)> {
    let none = || NONE.to_owned();
    let next = match row.status {
        OutboxStatus::Pending => at(row.next_attempt_at_ms),
        // For dead and delivered messages the column records when they were given up on or
        // last attempted: no attempt follows.
        OutboxStatus::Dead | OutboxStatus::Delivered => none(),
    };
    let lease = |until: i64| {
        let held = if until <= now_ms { "ran out" } else { "held" };
        format!("{} (lease {held})", at(until))
    };
    vec![
        ("id", row.id.to_string()),
        ("dedup id", row.dedup_id.clone()),
        ("topic", row.topic.clone()),
        (STATUS, status(row, now_ms)),
        ("attempts", row.attempts.to_string()),
        ("next attempt", next),
        ("locked until", row.locked_until_ms.map_or_else(none, lease)),
        ("created", at(row.created_at_ms)),
        ("delivered", row.delivered_at_ms.map_or_else(none, &at)),
    ]
}

/// The message's last error, whole, or [`NONE`].
#[must_use]
pub fn last_error(row: &OutboxRow) -> &str {
    row.last_error.as_deref().unwrap_or(NONE)
}

/// A message's payload, as shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Pretty JSON.
    Json(String),
    /// That it is sealed under a key the tool was not given: `sealed (key k1)`.
    Sealed(String),
}

impl Payload {
    /// The message's payload: pretty JSON, or that it is sealed under a key the tool was
    /// not given.
    #[must_use]
    pub fn of(row: &OutboxRow) -> Self {
        match unopened(row.sealed.as_ref()) {
            Some(key) => Self::Sealed(sealed(key)),
            None => Self::Json(
                serde_json::to_string_pretty(&row.payload)
                    .unwrap_or_else(|_| row.payload.to_string()),
            ),
        }
    }

    /// The text shown.
    #[must_use]
    pub fn text(&self) -> &str {
        match self {
            Self::Json(text) | Self::Sealed(text) => text,
        }
    }
}
