//! The transactional outbox ([the outbox](crate#the-outbox)): [`enqueue`] in the
//! application's transaction; [`Outbox`] for dispatchers (`idem-runtime`'s `outbox` module)
//! and tools. Delivery is at least once: a dispatcher that dies between delivering a message
//! and recording the outcome leaves the message to be delivered again.

mod message;

use std::sync::Arc;

use sqlx::{Pool, Transaction};

use crate::backend::{Backend, begin_write};
use crate::error::{NotApplicable, StoreError};
use crate::glue::Arg;
use crate::operator::{Actor, record};
pub(crate) use crate::outbox::message::payload_place;
use crate::outbox::message::{AUDIT_SCOPE, row_json};
use crate::seal::{self, Keyring};
use crate::sql::{Claim, Statement};

pub use crate::outbox::message::{Claimed, OutboxMessage, OutboxRow, OutboxStatus};

/// How many messages are in each state ([`Outbox::counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OutboxCounts {
    /// Pending messages, due or not, [`OutboxCounts::in_flight`] ones included.
    pub pending: u64,
    /// Pending messages [in flight](OutboxRow::in_flight) at the count's `now_ms`; counted
    /// in [`OutboxCounts::pending`] too.
    pub in_flight: u64,
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

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// Inserts `message` in the caller's transaction `tx`, due at once (`now_ms`); `false`,
/// changing nothing, when a message with its [`OutboxMessage::dedup_id`] exists already.
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
/// enqueue(&mut tx, &message, now_ms, None).await?;
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
    ring: Option<&Keyring>,
) -> Result<bool, StoreError> {
    let payload = message.payload.to_string();
    let place = payload_place(&message.dedup_id, &message.topic);
    let payload = seal::seal_text(ring, place, &payload);
    let args = [
        Arg::Text(&message.dedup_id),
        Arg::Text(&message.topic),
        Arg::Text(&payload),
        Arg::Int(now_ms),
        Arg::Int(now_ms),
    ];
    match DB::execute(tx, DB::SQL.outbox.enqueue, &args).await {
        Ok(inserted) => Ok(inserted == 1),
        // Without `ON CONFLICT … DO NOTHING`: the dedup id exists.
        Err(error) if DB::is_duplicate(&error) => Ok(false),
        Err(error) => Err(StoreError::from(error).refine::<DB>()),
    }
}

/// The outbox of one database, for dispatchers and tools ([the outbox](crate#the-outbox)).
/// Cheap to clone (it holds a [`Pool`]).
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
    ring: Option<Arc<Keyring>>,
}

impl<DB: Backend> Clone for Outbox<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            ring: self.ring.clone(),
        }
    }
}

impl<DB: Backend> Outbox<DB> {
    /// The most rows [`Outbox::claim`] and [`Outbox::list`] return at once; larger numbers
    /// are lowered to this.
    pub const MAX_BATCH: u32 = 1000;

    /// How many messages [`Outbox::retry_all`] retries per transaction.
    pub const RETRY_BATCH: u32 = 100;

    /// The audit trail's scope of the actions on messages ([`Outbox::retry`]).
    pub const AUDIT_SCOPE: &'static str = AUDIT_SCOPE;

    /// The audit trail's action of [`Outbox::retry`] and [`Outbox::retry_all`].
    pub const RETRY_ACTION: &'static str = RETRY_ACTION;

    /// The outbox in `pool`'s database (PostgreSQL: in the schema the pool's sessions resolve
    /// unqualified names in).
    #[must_use]
    pub fn new(pool: Pool<DB>) -> Self {
        Self { pool, ring: None }
    }

    /// The outbox read with `ring`'s storage keys: sealed payloads ([`enqueue`] with a
    /// keyring) are opened where the keyring has their key. Without it, or without their
    /// key, they read as `Null` with [`OutboxRow::sealed`] saying so, and [`Outbox::claim`]
    /// leaves them out.
    #[must_use]
    pub fn with_keyring(mut self, ring: Keyring) -> Self {
        self.ring = Some(Arc::new(ring));
        self
    }

    /// The storage keys, if the outbox was given them.
    #[must_use]
    pub fn keyring(&self) -> Option<&Keyring> {
        self.ring.as_deref()
    }

    /// The pool.
    #[must_use]
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Claims up to `batch` messages (1 to [`Outbox::MAX_BATCH`]) due at `now_ms`, leasing
    /// them until `now_ms + lease_ms` ([claims and leases](crate#claims-and-leases)). A row
    /// whose payload is not JSON (edited by hand), or fails its check, is marked dead with the
    /// reason, and left out. A payload sealed under a storage key the outbox was not given
    /// ([`Outbox::with_keyring`]) is left out and left as it is: claimed again once its
    /// lease ends, it is delivered by a dispatcher that has the key.
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
        let rows = match DB::SQL.outbox.claim {
            Claim::Returning(claim) => {
                let args = [
                    Arg::Int(now_ms),
                    Arg::Int(until_ms),
                    Arg::Int(i64::from(batch)),
                ];
                self.rows(claim, &args).await?
            }
            Claim::Reread { pick, lease, read } => self
                .claim_then_read([pick, lease, read], now_ms, until_ms, batch)
                .await
                .map_err(|e| StoreError::from(e).refine::<DB>())?,
        };
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            match OutboxRow::read::<DB>(&row, self.ring.as_deref()) {
                Ok(row) if row.sealed.as_ref().is_some_and(|s| !s.opened) => {
                    let key = row.sealed.map(|s| s.key).unwrap_or_default();
                    tracing::error!(
                        id = row.id,
                        storage_key = key,
                        "outbox message sealed under a storage key this dispatcher was not given; left as it is"
                    );
                }
                Ok(row) => claimed.push(Claimed {
                    id: row.id,
                    dedup_id: row.dedup_id,
                    topic: row.topic,
                    payload: row.payload,
                    attempts: row.attempts,
                    created_at_ms: row.created_at_ms,
                    locked_until_ms: row.locked_until_ms.unwrap_or(until_ms),
                }),
                Err(error @ StoreError::Corrupt(_)) => {
                    let id = DB::int(&row, 0)?;
                    tracing::warn!(id, %error, "outbox message cannot be delivered; marked dead");
                    self.mark_failed(id, now_ms, &error.to_string(), now_ms, true)
                        .await?;
                }
                Err(error) => return Err(error),
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
        let args = [Arg::Int(now_ms), Arg::Int(id)];
        Ok(self.execute(DB::SQL.outbox.mark_delivered, &args).await? == 1)
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
        let args = [
            Arg::Text(error),
            Arg::Bool(dead),
            Arg::Bool(dead),
            Arg::Int(now_ms),
            Arg::Int(next_attempt_at_ms),
            Arg::Int(id),
        ];
        Ok(self.execute(DB::SQL.outbox.mark_failed, &args).await? == 1)
    }

    /// The message enqueued with `dedup_id`, if any.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the row cannot be read; database errors.
    pub async fn get(&self, dedup_id: &str) -> Result<Option<OutboxRow>, StoreError> {
        let rows = self
            .rows(DB::SQL.outbox.outbox_get, &[Arg::Text(dedup_id)])
            .await?;
        rows.first()
            .map(|row| OutboxRow::read::<DB>(row, self.ring.as_deref()))
            .transpose()
    }

    /// The message whose row id ([`OutboxRow::id`], [`Claimed::id`]) is `id`, if any.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the row cannot be read; database errors.
    pub async fn find(&self, id: i64) -> Result<Option<OutboxRow>, StoreError> {
        let rows = self
            .rows(DB::SQL.outbox.outbox_find, &[Arg::Int(id)])
            .await?;
        rows.first()
            .map(|row| OutboxRow::read::<DB>(row, self.ring.as_deref()))
            .transpose()
    }

    /// Up to `limit` messages (1 to [`Outbox::MAX_BATCH`]) in `status`, or in any status, in
    /// `id` order (oldest first). [`Outbox::retry`]'s example lists the dead ones.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when a row cannot be read; database errors.
    pub async fn list(
        &self,
        status: Option<OutboxStatus>,
        limit: u32,
    ) -> Result<Vec<OutboxRow>, StoreError> {
        let limit = limit.clamp(1, Self::MAX_BATCH);
        let sql = DB::SQL;
        let rows = match status {
            None => {
                self.rows(sql.outbox.outbox_list, &[Arg::Int(limit.into())])
                    .await?
            }
            Some(status) => {
                let args = [Arg::Text(status.as_str()), Arg::Int(limit.into())];
                self.rows(sql.outbox.outbox_list_status, &args).await?
            }
        };
        rows.iter()
            .map(|row| OutboxRow::read::<DB>(row, self.ring.as_deref()))
            .collect()
    }

    /// How many messages are in each state at `now_ms` ([`OutboxCounts`]). Reads the whole
    /// table: meant for operators and metrics, not for every request.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for a status this version does not know; database errors.
    pub async fn counts(&self, now_ms: i64) -> Result<OutboxCounts, StoreError> {
        let rows = async {
            let mut conn = self.pool.acquire().await?;
            let args = [Arg::Int(now_ms)];
            let rows = DB::fetch_all(&mut conn, DB::SQL.outbox.outbox_counts, &args).await?;
            rows.iter()
                .map(|row| {
                    Ok((
                        DB::text(row, 0)?,
                        DB::int(row, 1)?,
                        DB::opt_int(row, 2)?,
                        DB::int(row, 3)?,
                    ))
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
        }
        .await
        .map_err(|e| StoreError::from(e).refine::<DB>())?;
        let mut counts = OutboxCounts::default();
        for (status, n, oldest, leased) in rows {
            let status = status.parse::<OutboxStatus>().map_err(|_| {
                StoreError::Corrupt(format!(
                    "an outbox message has the unknown status {status:?}"
                ))
            })?;
            match status {
                OutboxStatus::Pending => {
                    counts.pending = count(n);
                    counts.in_flight = count(leased);
                    counts.oldest_pending_ms = oldest;
                }
                OutboxStatus::Delivered => counts.delivered = count(n),
                OutboxStatus::Dead => counts.dead = count(n),
            }
        }
        Ok(counts)
    }

    /// Sends message `id` again, as `by`, at `now_ms`, and returns it as it is after: the
    /// operators' action on messages, described with its audit entry in [dead messages and
    /// operators](crate#dead-messages-and-operators). [`OutboxRow::retryable`] tells where it
    /// applies; `KeyTable::audit` reads its entries, with [`OutboxRow::audit_key`].
    ///
    /// A dead message's `attempts` go back to 0, the dispatcher's full number of attempts;
    /// `last_error` stays until the next attempt's outcome replaces it. The row is held
    /// (PostgreSQL and MySQL: `SELECT … FOR UPDATE`; SQLite: `BEGIN IMMEDIATE`): a claim
    /// meanwhile skips it (PostgreSQL, MySQL) or waits (SQLite). The entry is never forced
    /// ([`Actor::forced`] overrides nothing here); its rows before and after are JSON objects
    /// of [`OutboxRow`]'s fields under their names, the payload as JSON.
    ///
    /// ```no_run
    /// use idem_store::{Actor, Outbox, OutboxStatus};
    ///
    /// # async fn demo<DB: idem_store::Backend>(outbox: Outbox<DB>, now_ms: i64) -> Result<(), idem_store::StoreError> {
    /// let by = Actor::new("alice").reason("INC-42: the receiver is back");
    /// for dead in outbox.list(Some(OutboxStatus::Dead), 100).await? {
    ///     println!("{} {} after {} attempts: {:?}", dead.dedup_id, dead.topic, dead.attempts, dead.last_error);
    ///     let after = outbox.retry(dead.id, now_ms, &by).await?;
    ///     assert_eq!((after.status, after.attempts), (OutboxStatus::Pending, 0));
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for an empty [`Actor::operator`] (checked first);
    /// [`StoreError::NotApplicable`] when no message has the id or the retry does not apply;
    /// [`StoreError::Corrupt`] when the row cannot be read (a payload that is not JSON);
    /// [`StoreError::LockTimeout`] when another transaction holds the row too long; database
    /// errors. After an error nothing was changed and nothing audited.
    pub async fn retry(&self, id: i64, now_ms: i64, by: &Actor) -> Result<OutboxRow, StoreError> {
        check_actor(by)?;
        async {
            let mut conn = self.pool.acquire().await?;
            let mut tx = begin_write::<DB>(&mut conn).await?;
            match retry_in::<DB>(&mut tx, id, now_ms, by).await {
                Ok(after) => {
                    tx.commit().await?;
                    Ok(after)
                }
                Err(error) => {
                    // At once, not when the connection is next used: SQLite's write lock and
                    // the row's lock are held until then.
                    tx.rollback().await?;
                    Err(error)
                }
            }
        }
        .await
        .map_err(StoreError::refine::<DB>)
    }

    /// [`Outbox::retry`] of every message it applies to at `now_ms`
    /// ([`OutboxRow::retryable`]), each audited; returns how many were retried.
    ///
    /// Works in batches of [`Outbox::RETRY_BATCH`] messages in `id` order, one transaction
    /// each; a message that moved on since its batch picked it (claimed, delivered, retried
    /// by someone else), or that cannot be read, is left as it is. Messages that die while it
    /// runs are retried too when their id comes after the batch being worked on.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] for an empty [`Actor::operator`] (checked first);
    /// [`StoreError::LockTimeout`] when a row is held too long; database errors. The batches
    /// committed before an error stay retried (and audited).
    pub async fn retry_all(&self, now_ms: i64, by: &Actor) -> Result<u64, StoreError> {
        check_actor(by)?;
        let mut retried = 0;
        let mut after = 0;
        loop {
            let (done, last) = self
                .retry_batch(now_ms, by, after)
                .await
                .map_err(StoreError::refine::<DB>)?;
            retried += done;
            match last {
                Some(last) => after = last,
                None => return Ok(retried),
            }
        }
    }

    /// One batch of [`Outbox::retry_all`]: the retryable messages after id `after`, each
    /// retried in one transaction. How many were retried, and the last id picked (`None`:
    /// nothing was left to pick).
    async fn retry_batch(
        &self,
        now_ms: i64,
        by: &Actor,
        after: i64,
    ) -> Result<(u64, Option<i64>), StoreError> {
        let mut conn = self.pool.acquire().await?;
        let args = [
            Arg::Int(after),
            Arg::Int(now_ms),
            Arg::Int(now_ms),
            Arg::Int(i64::from(Self::RETRY_BATCH)),
        ];
        let picked = DB::fetch_all(&mut conn, DB::SQL.outbox.outbox_retryable, &args).await?;
        let ids = picked
            .iter()
            .map(|row| DB::int(row, 0))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(&last) = ids.last() else {
            return Ok((0, None));
        };
        let mut tx = begin_write::<DB>(&mut conn).await?;
        let mut retried = 0;
        for id in ids {
            match retry_in::<DB>(&mut tx, id, now_ms, by).await {
                Ok(_) => retried += 1,
                // Moved on since it was picked: left as it is.
                Err(StoreError::NotApplicable(_)) => {}
                Err(StoreError::Corrupt(why)) => {
                    tracing::warn!(id, %why, "outbox message cannot be read; not retried");
                }
                Err(error) => return Err(error),
            }
        }
        tx.commit().await?;
        Ok((retried, Some(last)))
    }

    /// Deletes up to `batch` messages (at least 1) delivered at or before `before_ms`, in one
    /// short statement; returns how many. Call it again while it returns `batch`. A deleted
    /// message's dedup id can be enqueued again: keep delivered rows for as long as a
    /// producer may repeat an id.
    ///
    /// # Errors
    /// Database errors.
    pub async fn sweep_delivered(&self, before_ms: i64, batch: u32) -> Result<u64, StoreError> {
        let args = [Arg::Int(before_ms), Arg::Int(i64::from(batch.max(1)))];
        self.execute(DB::SQL.outbox.sweep_delivered, &args).await
    }

    /// [`Outbox::claim`] where writes return nothing (MySQL): [`Claim::Reread`]'s statements,
    /// in one transaction.
    async fn claim_then_read(
        &self,
        [pick, lease, read]: [&str; 3],
        now_ms: i64,
        until_ms: i64,
        batch: u32,
    ) -> Result<Vec<DB::Row>, sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        let mut tx = begin_write::<DB>(&mut conn).await?;
        let args = [
            Arg::Int(now_ms),
            Arg::Int(now_ms),
            Arg::Int(i64::from(batch)),
        ];
        let picked = DB::fetch_all(&mut tx, pick, &args).await?;
        let ids = picked
            .iter()
            .map(|row| DB::int(row, 0))
            .collect::<Result<Vec<_>, _>>()?;
        if ids.is_empty() {
            // At once, not when the connection is next used: the rows the pick scanned stay
            // locked until then, and a claim meanwhile would skip them.
            tx.commit().await?;
            return Ok(Vec::new());
        }
        let mut lease = Statement::new(lease, DB::DIALECT.positional);
        lease.args.push(Arg::Int(until_ms));
        let mut read = Statement::new(read, DB::DIALECT.positional);
        for (i, id) in ids.iter().enumerate() {
            let comma = if i == 0 { "" } else { ", " };
            lease.push(comma).bind(Arg::Int(*id));
            read.push(comma).bind(Arg::Int(*id));
        }
        lease.push(")");
        read.push(") ORDER BY id");
        DB::execute(&mut tx, &lease.sql, &lease.args).await?;
        let rows = DB::fetch_all(&mut tx, &read.sql, &read.args).await?;
        tx.commit().await?;
        Ok(rows)
    }

    /// The rows `sql` returns, on a connection of the pool.
    async fn rows(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<DB::Row>, StoreError> {
        pooled_rows(&self.pool, sql, args).await
    }

    /// Runs `sql` on a connection of the pool; how many rows it changed.
    async fn execute(&self, sql: &str, args: &[Arg<'_>]) -> Result<u64, StoreError> {
        async {
            let mut conn = self.pool.acquire().await?;
            DB::execute(&mut conn, sql, args).await
        }
        .await
        .map_err(|e| StoreError::from(e).refine::<DB>())
    }
}

/// The audit trail's action of a retry.
const RETRY_ACTION: &str = "outbox-retry";

/// What [`Outbox::retry`] refuses before it reads anything.
fn check_actor(by: &Actor) -> Result<(), StoreError> {
    if by.operator.trim().is_empty() {
        return Err(StoreError::InvalidArgument(
            "an operator action needs the operator's name".to_owned(),
        ));
    }
    Ok(())
}

/// Why [`Outbox::retry`] does not apply to `row` at `now_ms` ([`OutboxRow::retryable`]).
fn refusal(row: &OutboxRow, now_ms: i64) -> Option<NotApplicable> {
    let id = row.id;
    if row.retryable(now_ms) {
        None
    } else if row.status == OutboxStatus::Delivered {
        Some(NotApplicable::Delivered { id })
    } else if let Some(locked_until_ms) = row.locked_until_ms.filter(|_| row.in_flight(now_ms)) {
        Some(NotApplicable::InFlight {
            id,
            locked_until_ms,
        })
    } else {
        Some(NotApplicable::Due {
            id,
            due_at_ms: row.next_attempt_at_ms,
        })
    }
}

/// [`Outbox::retry`] of message `id` in `tx`, which holds the database for writing: the row
/// read under its lock, checked ([`refusal`]), changed, and audited. Returns the row after.
async fn retry_in<DB: Backend>(
    tx: &mut Transaction<'_, DB>,
    id: i64,
    now_ms: i64,
    by: &Actor,
) -> Result<OutboxRow, StoreError> {
    let sql = DB::SQL;
    let before = DB::fetch_optional(tx, sql.outbox.outbox_find_for_update, &[Arg::Int(id)]).await?;
    let Some(before) = before else {
        return Err(StoreError::NotApplicable(NotApplicable::NoMessage { id }));
    };
    let before = OutboxRow::read::<DB>(&before, None)?;
    if let Some(why) = refusal(&before, now_ms) {
        return Err(StoreError::NotApplicable(why));
    }
    let attempts = match before.status {
        OutboxStatus::Dead => 0,
        _ => i32::try_from(before.attempts).unwrap_or(i32::MAX),
    };
    let args = [Arg::Int32(attempts), Arg::Int(now_ms), Arg::Int(id)];
    let after = if DB::DIALECT.returning {
        DB::fetch_optional(tx, sql.outbox.outbox_retry, &args).await?
    } else {
        DB::execute(tx, sql.outbox.outbox_retry, &args).await?;
        DB::fetch_optional(tx, sql.outbox.outbox_find, &[Arg::Int(id)]).await?
    };
    let after = after.ok_or(sqlx::Error::RowNotFound)?;
    let after = OutboxRow::read::<DB>(&after, None)?;
    let (before_json, after_json) = (row_json(&before), row_json(&after));
    let key = before.audit_key();
    let json = (before_json.as_str(), Some(after_json.as_str()));
    record::<DB>(tx, now_ms, by, (key, RETRY_ACTION), json, false).await?;
    Ok(after)
}

/// The rows `sql` returns, on a connection of `pool`: the outbox's and the inbox's reads.
pub(crate) async fn pooled_rows<DB: Backend>(
    pool: &Pool<DB>,
    sql: &str,
    args: &[Arg<'_>],
) -> Result<Vec<DB::Row>, StoreError> {
    async {
        let mut conn = pool.acquire().await?;
        DB::fetch_all(&mut conn, sql, args).await
    }
    .await
    .map_err(|e| StoreError::from(e).refine::<DB>())
}
