//! The outbox's rows: messages as they are enqueued, claimed and read (their statements are
//! each backend's [`crate::sql::Sql`]).

use std::fmt;
use std::str::FromStr;

use serde_json::{Value, json};

use crate::error::StoreError;
use crate::glue::Glue;
use crate::key::KeyRef;
use crate::seal::{self, Column, Keyring, Place, Sealing};

/// A message to enqueue ([`enqueue`](crate::enqueue)).
///
/// ```
/// use idem_store::OutboxMessage;
/// use serde_json::json;
///
/// let message = OutboxMessage::new("order-42/created", "order.created", json!({ "order": 42 }));
/// assert_eq!(message.topic, "order.created");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxMessage {
    /// Unique in the table ([`enqueue`](crate::enqueue)), and what receivers deduplicate on
    /// (the webhook sink sends it as `Idempotency-Key`): derive it from what the message is
    /// about (`order-42/created`), not from a value drawn per attempt. For webhooks to
    /// idem-powered receivers: 1 to 8192 visible ASCII characters (a receiver stores one
    /// longer than 255 as its digest; MySQL's `dedup_id` column holds 255).
    pub dedup_id: String,
    /// The kind of message (`order.created`): what the sink routes on.
    pub topic: String,
    /// The message itself.
    pub payload: serde_json::Value,
}

impl OutboxMessage {
    /// A message.
    #[must_use]
    pub fn new(
        dedup_id: impl Into<String>,
        topic: impl Into<String>,
        payload: serde_json::Value,
    ) -> Self {
        Self {
            dedup_id: dedup_id.into(),
            topic: topic.into(),
            payload,
        }
    }
}

/// Where a message stands: the `status` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OutboxStatus {
    /// `pending`: to be delivered once due (possibly leased to a dispatcher right now).
    Pending,
    /// `delivered`: the sink accepted it.
    Delivered,
    /// `dead`: given up on (too many failed attempts, or a permanent failure), until an
    /// operator sends it again ([dead messages and operators](crate#dead-messages-and-operators)).
    Dead,
}

impl OutboxStatus {
    /// `pending`, `delivered` or `dead`, as in the column.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }
}

impl fmt::Display for OutboxStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses `pending`, `delivered` or `dead`.
///
/// ```
/// use idem_store::OutboxStatus;
///
/// assert_eq!("dead".parse::<OutboxStatus>().unwrap(), OutboxStatus::Dead);
/// assert!("gone".parse::<OutboxStatus>().is_err());
/// ```
impl FromStr for OutboxStatus {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pending" => Ok(Self::Pending),
            "delivered" => Ok(Self::Delivered),
            "dead" => Ok(Self::Dead),
            other => Err(StoreError::InvalidOutboxStatus(other.to_owned())),
        }
    }
}

/// A message a dispatcher claimed ([`Outbox::claim`](crate::Outbox::claim)): deliver it,
/// then record the outcome with [`Outbox::mark_delivered`](crate::Outbox::mark_delivered) or
/// [`Outbox::mark_failed`](crate::Outbox::mark_failed).
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    /// The row's id: what the outcome is recorded by.
    pub id: i64,
    /// [`OutboxMessage::dedup_id`].
    pub dedup_id: String,
    /// [`OutboxMessage::topic`].
    pub topic: String,
    /// [`OutboxMessage::payload`].
    pub payload: serde_json::Value,
    /// Failed deliveries before this one.
    pub attempts: u32,
    /// When it was enqueued, in milliseconds since the Unix epoch.
    pub created_at_ms: i64,
    /// When this claim's lease ends: after that another dispatcher may claim the message.
    pub locked_until_ms: i64,
}

/// A message as tools read it ([`Outbox::get`](crate::Outbox::get),
/// [`Outbox::list`](crate::Outbox::list)).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    /// The row's id (claim order).
    pub id: i64,
    /// [`OutboxMessage::dedup_id`].
    pub dedup_id: String,
    /// [`OutboxMessage::topic`].
    pub topic: String,
    /// [`OutboxMessage::payload`]; `Null` when it is sealed under a storage key the outbox
    /// was not given ([`OutboxRow::sealed`]).
    pub payload: serde_json::Value,
    /// Whether the payload is sealed at rest, and under which storage key
    /// ([`Outbox::with_keyring`](crate::Outbox::with_keyring)).
    pub sealed: Option<Sealing>,
    /// Where it stands.
    pub status: OutboxStatus,
    /// Failed deliveries so far.
    pub attempts: u32,
    /// Pending: when it is due. Dead: when it was given up on. Delivered: when its last
    /// attempt was due.
    pub next_attempt_at_ms: i64,
    /// The end of the last claim's lease, until its outcome is recorded.
    pub locked_until_ms: Option<i64>,
    /// Why the last delivery failed.
    pub last_error: Option<String>,
    /// When it was enqueued.
    pub created_at_ms: i64,
    /// When it was delivered.
    pub delivered_at_ms: Option<i64>,
}

impl OutboxRow {
    /// Whether a dispatcher holds the message at `now_ms`: pending, claimed, its lease
    /// (`locked_until`) not over yet.
    #[must_use]
    pub fn in_flight(&self, now_ms: i64) -> bool {
        self.status == OutboxStatus::Pending && self.locked_until_ms.is_some_and(|l| l > now_ms)
    }

    /// Whether [`Outbox::retry`](crate::Outbox::retry) applies to the message at `now_ms`:
    /// it is dead, or pending and waiting for its next attempt (due after `now_ms`, not
    /// [in flight](OutboxRow::in_flight)).
    ///
    /// ```
    /// # use idem_store::{OutboxRow, OutboxStatus};
    /// # let row = OutboxRow { id: 1, dedup_id: "m".into(), topic: "t".into(), payload: serde_json::json!({}), sealed: None,
    /// #     status: OutboxStatus::Dead, attempts: 10, next_attempt_at_ms: 1_000, locked_until_ms: None,
    /// #     last_error: None, created_at_ms: 0, delivered_at_ms: None };
    /// assert!(row.retryable(5_000));
    /// let backing_off = OutboxRow { status: OutboxStatus::Pending, next_attempt_at_ms: 9_000, ..row.clone() };
    /// assert!(backing_off.retryable(5_000));
    /// assert!(!backing_off.retryable(9_000)); // due: the next claim takes it
    /// let leased = OutboxRow { locked_until_ms: Some(6_000), next_attempt_at_ms: 4_000, ..backing_off };
    /// assert!(leased.in_flight(5_000) && !leased.retryable(5_000));
    /// ```
    #[must_use]
    pub fn retryable(&self, now_ms: i64) -> bool {
        match self.status {
            OutboxStatus::Dead => true,
            OutboxStatus::Delivered => false,
            OutboxStatus::Pending => !self.in_flight(now_ms) && self.next_attempt_at_ms > now_ms,
        }
    }

    /// The message as the audit trail names it, for [`AuditFilter::key`](crate::AuditFilter::key)
    /// ([dead messages and operators](crate#dead-messages-and-operators)).
    #[must_use]
    pub fn audit_key(&self) -> KeyRef<'_> {
        KeyRef {
            scope: AUDIT_SCOPE,
            operation: &self.topic,
            key: &self.dedup_id,
        }
    }
}

/// Where a message's sealed payload lives: bound to its dedup id and topic.
pub(crate) fn payload_place<'a>(dedup_id: &'a str, topic: &'a str) -> Place<'a> {
    Place::other(Column::OutboxPayload, [dedup_id, topic, ""])
}

/// The audit trail's scope of the actions on messages.
pub(crate) const AUDIT_SCOPE: &str = "outbox";

/// A message as the audit trail records it (see [`Outbox::retry`](crate::Outbox::retry)).
pub(crate) fn row_json(row: &OutboxRow) -> String {
    let mut object = json!({
        "id": row.id,
        "dedup_id": row.dedup_id,
        "topic": row.topic,
        "status": row.status.as_str(),
        "attempts": row.attempts,
        "next_attempt_at_ms": row.next_attempt_at_ms,
        "locked_until_ms": row.locked_until_ms,
        "last_error": row.last_error,
        "created_at_ms": row.created_at_ms,
        "delivered_at_ms": row.delivered_at_ms,
    });
    // A sealed payload is recorded by its key, never opened.
    match &row.sealed {
        Some(sealing) => object["sealed"] = Value::from(sealing.key.as_str()),
        None => object["payload"] = row.payload.clone(),
    }
    object.to_string()
}

impl OutboxRow {
    /// A row's columns, in the order of [`OutboxRow`]'s fields, the payload opened with
    /// `ring` where it is sealed and `ring` has its key; [`StoreError::Corrupt`] for a status
    /// this version does not know, a payload that is not JSON, or one that fails its check.
    pub(crate) fn read<DB: Glue>(
        row: &DB::Row,
        ring: Option<&Keyring>,
    ) -> Result<Self, StoreError> {
        let id = DB::int(row, 0)?;
        let corrupt = |what: String| StoreError::Corrupt(format!("outbox message {id} {what}"));
        let status = DB::text(row, 4)?;
        let status = (status.parse::<OutboxStatus>())
            .map_err(|_| corrupt(format!("has the unknown status {status:?}")))?;
        let (dedup_id, topic) = (DB::text(row, 1)?, DB::text(row, 2)?);
        let place = payload_place(&dedup_id, &topic);
        let (payload, sealed) = seal::read_text(ring, place, DB::text(row, 3)?)
            .map_err(|e| corrupt(format!("has a payload that does not open: {e}")))?;
        let payload = match payload {
            Some(text) => serde_json::from_str(&text)
                .map_err(|e| corrupt(format!("has a payload that is not JSON: {e}")))?,
            None => Value::Null,
        };
        Ok(Self {
            id,
            dedup_id,
            topic,
            payload,
            sealed,
            status,
            attempts: u32::try_from(DB::opt_int32(row, 5)?.unwrap_or(0)).unwrap_or(0),
            next_attempt_at_ms: DB::int(row, 6)?,
            locked_until_ms: DB::opt_int(row, 7)?,
            last_error: DB::opt_text(row, 8)?,
            created_at_ms: DB::int(row, 9)?,
            delivered_at_ms: DB::opt_int(row, 10)?,
        })
    }
}
