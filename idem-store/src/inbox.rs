//! [`Inbox`]: incoming events that could not be applied, `idempotency_inbox`.
//!
//! A receiver that cannot apply an event yet (a provider's `charge.succeeded` for a charge
//! no payment names) tells its sender to deliver it again, and notes the delivery here as
//! `waiting`; past a time of its choosing it acknowledges the event instead and keeps it as
//! `unmatched`, so that the effect nobody owns (a charge without a payment) stays visible
//! until an operator settles it (`idem inbox list`). An event applied after all leaves the
//! inbox ([`Inbox::remove`]). The runtime's `Idem::unapplied` composes these.
//!
//! A receiver also keeps here, as `unparseable`, a delivery whose signature verified but
//! whose body it could not read as its event (a field renamed by the sender, say): refused,
//! it would be lost to a sender that gives up on a `4xx`. The runtime's `Verified` extractor
//! notes it so, with `Idem::unparseable`.

use std::fmt;
use std::str::FromStr;

use std::sync::Arc;

use sqlx::Pool;

use crate::backend::Backend;
use crate::error::StoreError;
use crate::glue::Glue;
use crate::seal::{self, Column, Keyring, Place, Sealing};
use crate::sql::Arg;

/// Where an event stands in the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InboxStatus {
    /// Not applied yet: its sender was told to deliver it again.
    Waiting,
    /// Acknowledged without being applied, kept for an operator.
    Unmatched,
    /// Signed by its sender, but its body does not read as the receiver's event: refused
    /// without being applied, kept for an operator.
    Unparseable,
}

impl InboxStatus {
    /// `waiting`, `unmatched` or `unparseable`, as stored.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Unmatched => "unmatched",
            Self::Unparseable => "unparseable",
        }
    }
}

impl fmt::Display for InboxStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for InboxStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "waiting" => Ok(Self::Waiting),
            "unmatched" => Ok(Self::Unmatched),
            "unparseable" => Ok(Self::Unparseable),
            other => Err(format!("unknown inbox status {other:?}")),
        }
    }
}

/// One delivery of an event that could not be applied ([`Inbox::note`]).
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    /// What received it: the receiving operation's id (`provider_event:v1`).
    pub source: &'a str,
    /// The event's id (its `webhook-id`).
    pub event_id: &'a str,
    /// Why it could not be applied, for the operator.
    pub reason: &'a str,
    /// The event as received (JSON text, or whatever an `unparseable` one was); the first
    /// delivery's is kept, but a delivery that reads replaces an `unparseable` one's.
    pub body: &'a str,
}

/// An event of the inbox, as tools read it ([`Inbox::list`], [`Inbox::get`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEvent {
    /// The row's id.
    pub id: i64,
    /// [`Delivery::source`].
    pub source: String,
    /// [`Delivery::event_id`].
    pub event_id: String,
    /// Where it stands.
    pub status: InboxStatus,
    /// The last delivery's [`Delivery::reason`].
    pub reason: String,
    /// The first delivery's body; empty when it is sealed under a storage key the inbox was
    /// not given ([`InboxEvent::sealed`]).
    pub body: String,
    /// Whether the body is sealed at rest, and under which storage key
    /// ([`Inbox::with_keyring`]).
    pub sealed: Option<Sealing>,
    /// Deliveries noted.
    pub deliveries: i64,
    /// When the first delivery was noted.
    pub first_seen_at_ms: i64,
    /// When the last delivery was noted.
    pub last_seen_at_ms: i64,
}

impl InboxEvent {
    /// How long ago, at `now_ms`, its first delivery was noted.
    #[must_use]
    pub fn age_ms(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(self.first_seen_at_ms)
    }

    fn read<DB: Glue>(row: &DB::Row, ring: Option<&Keyring>) -> Result<Self, StoreError> {
        let id = DB::int(row, 0)?;
        let corrupt = |what: String| StoreError::Corrupt(format!("inbox event {id}: {what}"));
        let status = DB::text(row, 3)?;
        let status = status.parse().map_err(corrupt)?;
        let (source, event_id) = (DB::text(row, 1)?, DB::text(row, 2)?);
        let place = body_place(&source, &event_id);
        let (body, sealed) = seal::read_text(ring, place, DB::text(row, 5)?)
            .map_err(|e| corrupt(format!("its body does not open: {e}")))?;
        Ok(Self {
            id,
            source,
            event_id,
            status,
            reason: DB::text(row, 4)?,
            body: body.unwrap_or_default(),
            sealed,
            deliveries: DB::int(row, 6)?,
            first_seen_at_ms: DB::int(row, 7)?,
            last_seen_at_ms: DB::int(row, 8)?,
        })
    }
}

/// The inbox in a pool's database: what operators read. The writes run on a connection the
/// caller gives ([`Inbox::note`], [`Inbox::first_seen`], [`Inbox::remove`]): a receiver's
/// transaction, or one of their own.
///
/// ```no_run
/// # use idem_store::{Inbox, InboxStatus};
/// # async fn demo<DB: idem_store::Backend>(inbox: Inbox<DB>, now_ms: i64) -> Result<(), idem_store::StoreError> {
/// for event in inbox.list(Some(InboxStatus::Unmatched), 50).await? {
///     println!("{} from {}, {} s old: {}", event.event_id, event.source, event.age_ms(now_ms) / 1000, event.reason);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Inbox<DB: Backend> {
    pool: Pool<DB>,
    ring: Option<Arc<Keyring>>,
}

impl<DB: Backend> Clone for Inbox<DB> {
    fn clone(&self) -> Self {
        Self {
            pool: self.pool.clone(),
            ring: self.ring.clone(),
        }
    }
}

/// Where an event's sealed body lives: bound to its source and id.
pub(crate) fn body_place<'a>(source: &'a str, event_id: &'a str) -> Place<'a> {
    Place::other(Column::InboxBody, [source, event_id, ""])
}

impl<DB: Backend> Inbox<DB> {
    /// The most events [`Inbox::list`] returns at once; larger numbers are lowered to this.
    pub const MAX_LIST: u32 = 1000;

    /// The inbox in `pool`'s database.
    #[must_use]
    pub fn new(pool: Pool<DB>) -> Self {
        Self { pool, ring: None }
    }

    /// The inbox read with `ring`'s storage keys: sealed bodies ([`Inbox::note`] with a
    /// keyring) are opened where the keyring has their key; without it they read as empty,
    /// with [`InboxEvent::sealed`] saying so.
    #[must_use]
    pub fn with_keyring(mut self, ring: Keyring) -> Self {
        self.ring = Some(Arc::new(ring));
        self
    }

    /// The storage keys, if the inbox was given them.
    #[must_use]
    pub fn keyring(&self) -> Option<&Keyring> {
        self.ring.as_deref()
    }

    /// The pool.
    pub(crate) fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// Notes `delivery` at `now_ms` as `status`: the event's first delivery makes its row,
    /// a later one counts one more and keeps the first's time and body. An event kept as
    /// `unmatched` stays so; an `unparseable` one takes the status, and the body, of a later
    /// delivery that reads (its sender mended it). With `ring`, the body is written sealed.
    ///
    /// # Errors
    /// Database errors.
    pub async fn note(
        conn: &mut DB::Connection,
        delivery: Delivery<'_>,
        status: InboxStatus,
        now_ms: i64,
        ring: Option<&Keyring>,
    ) -> Result<(), sqlx::Error> {
        let place = body_place(delivery.source, delivery.event_id);
        let body = seal::seal_text(ring, place, delivery.body);
        let args = [
            Arg::Text(delivery.source),
            Arg::Text(delivery.event_id),
            Arg::Text(status.as_str()),
            Arg::Text(delivery.reason),
            Arg::Text(&body),
            Arg::Int(now_ms),
            Arg::Int(now_ms),
        ];
        DB::execute(conn, DB::SQL.inbox.inbox_note, &args)
            .await
            .map(drop)
    }

    /// When the event's first delivery was noted; `None` when it is not in the inbox.
    ///
    /// # Errors
    /// Database errors.
    pub async fn first_seen(
        conn: &mut DB::Connection,
        source: &str,
        event_id: &str,
    ) -> Result<Option<i64>, sqlx::Error> {
        let args = [Arg::Text(source), Arg::Text(event_id)];
        let row = DB::fetch_optional(conn, DB::SQL.inbox.inbox_first_seen, &args).await?;
        row.map(|row| DB::int(&row, 0)).transpose()
    }

    /// Removes the event: it was applied after all. `false` when it was not in the inbox.
    ///
    /// # Errors
    /// Database errors.
    pub async fn remove(
        conn: &mut DB::Connection,
        source: &str,
        event_id: &str,
    ) -> Result<bool, sqlx::Error> {
        let args = [Arg::Text(source), Arg::Text(event_id)];
        Ok(DB::execute(conn, DB::SQL.inbox.inbox_remove, &args).await? > 0)
    }

    /// Up to `limit` events (1 to [`Inbox::MAX_LIST`]) in `status`, or in any, the longest
    /// noted first.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when a row cannot be read; database errors.
    pub async fn list(
        &self,
        status: Option<InboxStatus>,
        limit: u32,
    ) -> Result<Vec<InboxEvent>, StoreError> {
        let limit = i64::from(limit.clamp(1, Self::MAX_LIST));
        let sql = DB::SQL;
        let rows = match status {
            None => self.rows(sql.inbox.inbox_list, &[Arg::Int(limit)]).await?,
            Some(status) => {
                let args = [Arg::Text(status.as_str()), Arg::Int(limit)];
                self.rows(sql.inbox.inbox_list_status, &args).await?
            }
        };
        rows.iter()
            .map(|row| InboxEvent::read::<DB>(row, self.ring.as_deref()))
            .collect()
    }

    /// The events of id `event_id`: one per source that noted it (usually one).
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when a row cannot be read; database errors.
    pub async fn get(&self, event_id: &str) -> Result<Vec<InboxEvent>, StoreError> {
        let rows = self
            .rows(DB::SQL.inbox.inbox_get, &[Arg::Text(event_id)])
            .await?;
        rows.iter()
            .map(|row| InboxEvent::read::<DB>(row, self.ring.as_deref()))
            .collect()
    }

    async fn rows(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<DB::Row>, StoreError> {
        crate::outbox::pooled_rows(&self.pool, sql, args).await
    }
}
