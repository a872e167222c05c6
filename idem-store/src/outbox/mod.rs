//! The transactional outbox: messages written in the application's own transaction, to be
//! delivered after it commits.
//!
//! A handler that changes data and must tell another system about it cannot do both
//! atomically: the message may go out for a transaction that then rolls back, or the
//! transaction may commit and the process die before the message goes out. With an outbox
//! the handler only inserts the message ([`enqueue`]), in the transaction that makes the
//! change: both commit, or neither does. A dispatcher (`idem-runtime`'s `outbox` module)
//! then claims due messages ([`Outbox::claim`]), delivers them and records the outcome
//! ([`Outbox::mark_delivered`], [`Outbox::mark_failed`]).
//!
//! Delivery is at least once: a dispatcher that dies between delivering a message and
//! recording it leaves the message to be delivered again. Each message carries a
//! [`OutboxMessage::dedup_id`], unique in the table, that receivers deduplicate on.
//!
//! The store never reads the clock: every time is passed in, in milliseconds since the Unix
//! epoch.

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

use std::fmt;
use std::future::Future;
use std::str::FromStr;

use sqlx::{Database, Pool, Transaction};

use crate::backend::Backend;
use crate::error::StoreError;

/// A message to enqueue ([`enqueue`]).
///
/// ```
/// use idem_store::OutboxMessage;
/// use serde_json::json;
///
/// let message = OutboxMessage::new(
///     "order-42/created",
///     "order.created",
///     json!({ "order": 42, "total": "19.90" }),
/// );
/// assert_eq!(message.topic, "order.created");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxMessage {
    /// Unique among the table's messages: a second message with the same id is not enqueued.
    /// Receivers deduplicate on it (the webhook sink sends it as `Idempotency-Key`), so
    /// derive it from what the message is about (`order-42/created`), not from a random
    /// value drawn per attempt. For webhooks to idem-powered receivers: 1 to 255 visible
    /// ASCII characters.
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
    /// `dead`: given up on, after too many failed attempts or a permanent failure. Nothing
    /// delivers it again unless [`Outbox::retry_dead`] puts it back.
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

/// A message a dispatcher claimed ([`Outbox::claim`]): deliver it, then record the outcome
/// with [`Outbox::mark_delivered`] or [`Outbox::mark_failed`].
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

/// A message as tools read it ([`Outbox::get`], [`Outbox::list`]).
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxRow {
    /// The row's id (claim order).
    pub id: i64,
    /// [`OutboxMessage::dedup_id`].
    pub dedup_id: String,
    /// [`OutboxMessage::topic`].
    pub topic: String,
    /// [`OutboxMessage::payload`].
    pub payload: serde_json::Value,
    /// Where it stands.
    pub status: OutboxStatus,
    /// Failed deliveries so far.
    pub attempts: u32,
    /// Pending: when it is due. Dead: when it was given up on. Delivered: when its last
    /// attempt was due.
    pub next_attempt_at_ms: i64,
    /// The end of the lease of the dispatcher that last claimed it, until its outcome is
    /// recorded.
    pub locked_until_ms: Option<i64>,
    /// Why the last delivery failed.
    pub last_error: Option<String>,
    /// When it was enqueued.
    pub created_at_ms: i64,
    /// When it was delivered.
    pub delivered_at_ms: Option<i64>,
}

/// How many messages are in each state ([`Outbox::counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboxCounts {
    /// Pending messages, due or not.
    pub pending: u64,
    /// Delivered messages not swept yet.
    pub delivered: u64,
    /// Dead messages.
    pub dead: u64,
    /// When the oldest pending message was enqueued: how far delivery lags behind.
    pub oldest_pending_ms: Option<i64>,
}

impl OutboxCounts {
    /// All messages in the table.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.pending + self.delivered + self.dead
    }
}

/// The columns of one row, as both backends read them. Not nameable outside the crate
/// (it appears in [`OutboxSql`]'s signatures only).
#[derive(Debug)]
pub struct RawOutboxRow {
    pub id: i64,
    pub dedup_id: String,
    pub topic: String,
    pub payload: String,
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at_ms: i64,
    pub locked_until_ms: Option<i64>,
    pub last_error: Option<String>,
    pub created_at_ms: i64,
    pub delivered_at_ms: Option<i64>,
}

impl RawOutboxRow {
    /// The row, or [`StoreError::Corrupt`] for a status this version does not know or a
    /// payload that is not JSON.
    pub(crate) fn into_row(self) -> Result<OutboxRow, StoreError> {
        let status = self.status.parse::<OutboxStatus>().map_err(|_| {
            StoreError::Corrupt(format!(
                "outbox message {} has the unknown status {:?}",
                self.id, self.status
            ))
        })?;
        let payload = self.payload()?;
        Ok(OutboxRow {
            id: self.id,
            dedup_id: self.dedup_id,
            topic: self.topic,
            payload,
            status,
            attempts: attempts(self.attempts),
            next_attempt_at_ms: self.next_attempt_at_ms,
            locked_until_ms: self.locked_until_ms,
            last_error: self.last_error,
            created_at_ms: self.created_at_ms,
            delivered_at_ms: self.delivered_at_ms,
        })
    }

    fn payload(&self) -> Result<serde_json::Value, StoreError> {
        serde_json::from_str(&self.payload).map_err(|e| {
            StoreError::Corrupt(format!(
                "outbox message {} has a payload that is not JSON: {e}",
                self.id
            ))
        })
    }

    /// The claimed message; `Err` carries the reason it cannot be delivered.
    fn into_claimed(self, locked_until_ms: i64) -> Result<Claimed, (i64, StoreError)> {
        let payload = self.payload().map_err(|e| (self.id, e))?;
        Ok(Claimed {
            id: self.id,
            dedup_id: self.dedup_id,
            topic: self.topic,
            payload,
            attempts: attempts(self.attempts),
            created_at_ms: self.created_at_ms,
            locked_until_ms: self.locked_until_ms.unwrap_or(locked_until_ms),
        })
    }
}

fn attempts(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The outbox's statements, per backend. Not nameable outside the crate: a supertrait of
/// [`crate::Backend`], so every backend has them.
pub trait OutboxSql: Database {
    fn outbox_enqueue(
        tx: &mut Transaction<'_, Self>,
        message: &OutboxMessage,
        payload: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    /// Leases up to `batch` due rows until `until_ms`; returns them in any order.
    fn outbox_claim(
        pool: &Pool<Self>,
        now_ms: i64,
        until_ms: i64,
        batch: i64,
    ) -> impl Future<Output = Result<Vec<RawOutboxRow>, sqlx::Error>> + Send;

    fn outbox_mark_delivered(
        pool: &Pool<Self>,
        id: i64,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    fn outbox_mark_failed(
        pool: &Pool<Self>,
        id: i64,
        now_ms: i64,
        error: &str,
        next_attempt_at_ms: i64,
        dead: bool,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    fn outbox_get(
        pool: &Pool<Self>,
        dedup_id: &str,
    ) -> impl Future<Output = Result<Option<RawOutboxRow>, sqlx::Error>> + Send;

    fn outbox_list(
        pool: &Pool<Self>,
        status: Option<&'static str>,
        limit: i64,
    ) -> impl Future<Output = Result<Vec<RawOutboxRow>, sqlx::Error>> + Send;

    /// (status, count, oldest `created_at` in milliseconds) per status.
    fn outbox_counts(
        pool: &Pool<Self>,
    ) -> impl Future<Output = Result<Vec<(String, i64, Option<i64>)>, sqlx::Error>> + Send;

    fn outbox_retry_dead(
        pool: &Pool<Self>,
        dedup_id: &str,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, sqlx::Error>> + Send;

    fn outbox_sweep_delivered(
        pool: &Pool<Self>,
        before_ms: i64,
        batch: i64,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send;
}

/// Inserts `message` in the caller's transaction `tx`, due at once (`now_ms`). Returns
/// `false`, changing nothing, when a message with the same [`OutboxMessage::dedup_id`]
/// exists already (`INSERT … ON CONFLICT (dedup_id) DO NOTHING`).
///
/// The message commits or rolls back with `tx`: nothing is delivered for a transaction that
/// rolls back, and nothing committed goes undelivered. On PostgreSQL a concurrent
/// transaction enqueuing the same id makes this wait until it commits or rolls back.
///
/// ```no_run
/// # #[cfg(feature = "sqlite")] mod example {
/// use idem_store::{OutboxMessage, enqueue};
/// use serde_json::json;
/// use sqlx::sqlite::SqlitePool;
///
/// # async fn demo(pool: SqlitePool, now_ms: i64) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// sqlx::query("UPDATE orders SET state = 'paid' WHERE id = 42").execute(&mut *tx).await?;
/// let message = OutboxMessage::new("order-42/paid", "order.paid", json!({ "order": 42 }));
/// enqueue(&mut tx, &message, now_ms).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// # }
/// ```
///
/// # Errors
/// Database errors ([`StoreError::LockTimeout`] when a lock wait ran out).
pub async fn enqueue<DB: Backend>(
    tx: &mut Transaction<'_, DB>,
    message: &OutboxMessage,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let payload = message.payload.to_string();
    DB::outbox_enqueue(tx, message, &payload, now_ms)
        .await
        .map_err(|e| StoreError::from(e).refine::<DB>())
}

/// The outbox of one database, for dispatchers and tools. Cheap to clone (it holds a
/// [`Pool`]).
///
/// Messages are enqueued with [`enqueue`], in the application's transaction; the table is
/// created by [`crate::migrate`]. Every method that depends on the time takes it from the
/// caller, in milliseconds since the Unix epoch.
///
/// ```no_run
/// use idem_store::Outbox;
///
/// # async fn demo<DB: idem_store::Backend>(outbox: Outbox<DB>, now_ms: i64) -> Result<(), idem_store::StoreError> {
/// for message in outbox.claim(now_ms, 32, 30_000).await? {
///     // Deliver it, then:
///     outbox.mark_delivered(message.id, now_ms).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Outbox<DB: Backend> {
    pool: Pool<DB>,
}

impl<DB: Backend> Clone for Outbox<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
        }
    }
}

impl<DB: Backend> Outbox<DB> {
    /// The most rows [`Outbox::claim`] and [`Outbox::list`] return at once; larger numbers
    /// are lowered to this.
    pub const MAX_BATCH: u32 = 1000;

    /// The outbox in `pool`'s database (PostgreSQL: in the schema the pool's sessions resolve
    /// unqualified names in).
    #[must_use]
    pub fn new(pool: Pool<DB>) -> Self {
        Self { pool }
    }

    /// The pool.
    #[must_use]
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Claims up to `batch` messages (1 to [`Outbox::MAX_BATCH`]) that are due at `now_ms`
    /// and not leased, in `id` order, leasing them until `now_ms + lease_ms`: no other claim
    /// returns them before then. One short statement; on PostgreSQL, rows another claim is
    /// taking at the same moment are skipped (`FOR UPDATE SKIP LOCKED`).
    ///
    /// A row whose payload is not JSON (edited by hand) cannot be delivered: it is marked
    /// dead with the reason, and left out.
    ///
    /// # Errors
    /// Database errors.
    pub async fn claim(
        &self,
        now_ms: i64,
        batch: u32,
        lease_ms: i64,
    ) -> Result<Vec<Claimed>, StoreError> {
        let batch = batch.clamp(1, Self::MAX_BATCH);
        let until_ms = now_ms.saturating_add(lease_ms.max(0));
        let rows = DB::outbox_claim(&self.pool, now_ms, until_ms, i64::from(batch))
            .await
            .map_err(|e| StoreError::from(e).refine::<DB>())?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            match row.into_claimed(until_ms) {
                Ok(message) => claimed.push(message),
                Err((id, error)) => {
                    tracing::warn!(id, %error, "outbox message cannot be delivered; marked dead");
                    self.mark_failed(id, now_ms, &error.to_string(), now_ms, true)
                        .await?;
                }
            }
        }
        claimed.sort_by_key(|message| message.id);
        Ok(claimed)
    }

    /// Records that message `id` was delivered at `now_ms`: `delivered`, lease cleared.
    /// Returns `false`, changing nothing, when the message is not pending (another
    /// dispatcher recorded an outcome first, after this one's lease ended).
    ///
    /// # Errors
    /// Database errors.
    pub async fn mark_delivered(&self, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        DB::outbox_mark_delivered(&self.pool, id, now_ms)
            .await
            .map_err(|e| StoreError::from(e).refine::<DB>())
    }

    /// Records a failed delivery of message `id` at `now_ms`: `attempts` + 1, `last_error`
    /// = `error`, lease cleared, and either due again at `next_attempt_at_ms` or, with
    /// `dead`, given up on (`dead`, with `next_attempt_at` = `now_ms`). Returns `false`,
    /// changing nothing, when the message is not pending.
    ///
    /// # Errors
    /// Database errors.
    pub async fn mark_failed(
        &self,
        id: i64,
        now_ms: i64,
        error: &str,
        next_attempt_at_ms: i64,
        dead: bool,
    ) -> Result<bool, StoreError> {
        DB::outbox_mark_failed(&self.pool, id, now_ms, error, next_attempt_at_ms, dead)
            .await
            .map_err(|e| StoreError::from(e).refine::<DB>())
    }

    /// The message enqueued with `dedup_id`, if any.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the row cannot be read; database errors.
    pub async fn get(&self, dedup_id: &str) -> Result<Option<OutboxRow>, StoreError> {
        let row = DB::outbox_get(&self.pool, dedup_id)
            .await
            .map_err(|e| StoreError::from(e).refine::<DB>())?;
        row.map(RawOutboxRow::into_row).transpose()
    }

    /// Up to `limit` messages (1 to [`Outbox::MAX_BATCH`]) in `status`, or in any status, in
    /// `id` order (oldest first).
    ///
    /// ```no_run
    /// use idem_store::{Outbox, OutboxStatus};
    ///
    /// # async fn demo<DB: idem_store::Backend>(outbox: Outbox<DB>) -> Result<(), idem_store::StoreError> {
    /// for row in outbox.list(Some(OutboxStatus::Dead), 100).await? {
    ///     println!("{} {} after {} attempts: {:?}", row.dedup_id, row.topic, row.attempts, row.last_error);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when a row cannot be read; database errors.
    pub async fn list(
        &self,
        status: Option<OutboxStatus>,
        limit: u32,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        let limit = limit.clamp(1, Self::MAX_BATCH);
        let rows = DB::outbox_list(&self.pool, status.map(OutboxStatus::as_str), limit.into())
            .await
            .map_err(|e| StoreError::from(e).refine::<DB>())?;
        rows.into_iter().map(RawOutboxRow::into_row).collect()
    }

    /// How many messages are in each state, and the age of the oldest pending one. Reads the
    /// whole table: meant for operators and metrics, not for every request.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a status this version does not know; database errors.
    pub async fn counts(&self) -> Result<OutboxCounts, StoreError> {
        let rows = DB::outbox_counts(&self.pool)
            .await
            .map_err(|e| StoreError::from(e).refine::<DB>())?;
        let mut counts = OutboxCounts::default();
        for (status, n, oldest) in rows {
            let status = status.parse::<OutboxStatus>().map_err(|_| {
                StoreError::Corrupt(format!(
                    "an outbox message has the unknown status {status:?}"
                ))
            })?;
            match status {
                OutboxStatus::Pending => {
                    counts.pending = count(n);
                    counts.oldest_pending_ms = oldest;
                }
                OutboxStatus::Delivered => counts.delivered = count(n),
                OutboxStatus::Dead => counts.dead = count(n),
            }
        }
        Ok(counts)
    }

    /// Puts the dead message `dedup_id` back: pending, due at `now_ms`, `attempts` reset to
    /// 0 (so it gets the dispatcher's full number of attempts again), `last_error` kept.
    /// Returns `false` when there is no dead message with that id.
    ///
    /// # Errors
    /// Database errors.
    pub async fn retry_dead(&self, dedup_id: &str, now_ms: i64) -> Result<bool, StoreError> {
        DB::outbox_retry_dead(&self.pool, dedup_id, now_ms)
            .await
            .map_err(|e| StoreError::from(e).refine::<DB>())
    }

    /// Deletes up to `batch` messages (at least 1) delivered at or before `before_ms`, in one
    /// short statement; returns how many. Call it again while it returns `batch`. A deleted
    /// message's dedup id can be enqueued again: keep delivered rows for as long as a
    /// producer may repeat an id.
    ///
    /// # Errors
    /// Database errors.
    pub async fn sweep_delivered(&self, before_ms: i64, batch: u32) -> Result<u64, StoreError> {
        DB::outbox_sweep_delivered(&self.pool, before_ms, i64::from(batch.max(1)))
            .await
            .map_err(|e| StoreError::from(e).refine::<DB>())
    }
}

/// The Rust side of [`OutboxSql`], the same for every backend: binds and reads. Each backend
/// file invokes it with its database type, beside a `mod sql` holding its statements, which
/// the invocation's paths resolve to.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! impl_outbox_sql {
    ($db:ty) => {
        /// A row's columns, in the order of `sql::columns!`.
        fn raw(
            row: &<$db as sqlx::Database>::Row,
        ) -> Result<$crate::outbox::RawOutboxRow, sqlx::Error> {
            Ok($crate::outbox::RawOutboxRow {
                id: sqlx::Row::try_get(row, 0)?,
                dedup_id: sqlx::Row::try_get(row, 1)?,
                topic: sqlx::Row::try_get(row, 2)?,
                payload: sqlx::Row::try_get(row, 3)?,
                status: sqlx::Row::try_get(row, 4)?,
                attempts: sqlx::Row::try_get(row, 5)?,
                next_attempt_at_ms: sqlx::Row::try_get(row, 6)?,
                locked_until_ms: sqlx::Row::try_get(row, 7)?,
                last_error: sqlx::Row::try_get(row, 8)?,
                created_at_ms: sqlx::Row::try_get(row, 9)?,
                delivered_at_ms: sqlx::Row::try_get(row, 10)?,
            })
        }

        impl $crate::outbox::OutboxSql for $db {
            async fn outbox_enqueue(
                tx: &mut sqlx::Transaction<'_, Self>,
                message: &$crate::outbox::OutboxMessage,
                payload: &str,
                now_ms: i64,
            ) -> Result<bool, sqlx::Error> {
                let done = sqlx::query(sql::ENQUEUE)
                    .bind(message.dedup_id.as_str())
                    .bind(message.topic.as_str())
                    .bind(payload)
                    .bind(now_ms)
                    .execute(&mut **tx)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn outbox_claim(
                pool: &sqlx::Pool<Self>,
                now_ms: i64,
                until_ms: i64,
                batch: i64,
            ) -> Result<Vec<$crate::outbox::RawOutboxRow>, sqlx::Error> {
                let rows = sqlx::query(sql::CLAIM)
                    .bind(now_ms)
                    .bind(until_ms)
                    .bind(batch)
                    .fetch_all(pool)
                    .await?;
                rows.iter().map(raw).collect()
            }

            async fn outbox_mark_delivered(
                pool: &sqlx::Pool<Self>,
                id: i64,
                now_ms: i64,
            ) -> Result<bool, sqlx::Error> {
                let done = sqlx::query(sql::MARK_DELIVERED)
                    .bind(id)
                    .bind(now_ms)
                    .execute(pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn outbox_mark_failed(
                pool: &sqlx::Pool<Self>,
                id: i64,
                now_ms: i64,
                error: &str,
                next_attempt_at_ms: i64,
                dead: bool,
            ) -> Result<bool, sqlx::Error> {
                let done = sqlx::query(sql::MARK_FAILED)
                    .bind(id)
                    .bind(error)
                    .bind(next_attempt_at_ms)
                    .bind(dead)
                    .bind(now_ms)
                    .execute(pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn outbox_get(
                pool: &sqlx::Pool<Self>,
                dedup_id: &str,
            ) -> Result<Option<$crate::outbox::RawOutboxRow>, sqlx::Error> {
                let row = sqlx::query(sql::GET)
                    .bind(dedup_id)
                    .fetch_optional(pool)
                    .await?;
                row.as_ref().map(raw).transpose()
            }

            async fn outbox_list(
                pool: &sqlx::Pool<Self>,
                status: Option<&'static str>,
                limit: i64,
            ) -> Result<Vec<$crate::outbox::RawOutboxRow>, sqlx::Error> {
                let rows = sqlx::query(sql::LIST)
                    .bind(status)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?;
                rows.iter().map(raw).collect()
            }

            async fn outbox_counts(
                pool: &sqlx::Pool<Self>,
            ) -> Result<Vec<(String, i64, Option<i64>)>, sqlx::Error> {
                sqlx::query_as(sql::COUNTS).fetch_all(pool).await
            }

            async fn outbox_retry_dead(
                pool: &sqlx::Pool<Self>,
                dedup_id: &str,
                now_ms: i64,
            ) -> Result<bool, sqlx::Error> {
                let done = sqlx::query(sql::RETRY_DEAD)
                    .bind(dedup_id)
                    .bind(now_ms)
                    .execute(pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn outbox_sweep_delivered(
                pool: &sqlx::Pool<Self>,
                before_ms: i64,
                batch: i64,
            ) -> Result<u64, sqlx::Error> {
                let done = sqlx::query(sql::SWEEP_DELIVERED)
                    .bind(before_ms)
                    .bind(batch)
                    .execute(pool)
                    .await?;
                Ok(done.rows_affected())
            }
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use impl_outbox_sql;
