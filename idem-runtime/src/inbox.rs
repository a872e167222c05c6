//! Incoming events that cannot be applied yet: answered "deliver again" for a while, then
//! acknowledged and kept for an operator, never dropped.
//!
//! A receiver of another system's events sometimes gets one it cannot apply: the provider's
//! `charge.succeeded` for a charge no payment names. Usually the event is early (the payment
//! that names the charge is still committing), and a `503` with `Retry-After` has the sender
//! deliver it again. But a charge can also have no payment at all — the attempt that made it
//! was fenced out by an operator's forced action, or failed for good after the provider
//! charged — and then the `503`s go on for as long as the sender retries, and nobody learns
//! that a charge exists that nothing names.
//!
//! [`Idem::unapplied`] bounds that: within `keep_after` of the event's first delivery it
//! answers [`Unapplied::Retry`] (answer `503`, `Retry-After`) and notes the delivery in the
//! inbox as `waiting`; after it, [`Unapplied::Kept`]: the event is kept as `unmatched` in the
//! receiver's transaction (answer `200`, stored with the event's key like any answer), for
//! an operator to settle — `idem inbox list` lists them, `idem inbox show ID` shows one. An
//! event applied after all leaves the inbox ([`Idem::applied`]).
//!
//! A delivery whose signature verified but whose body the receiver's extractor refuses (its
//! sender renamed a field, say) is kept too, as `unparseable` ([`Idem::unparseable`]): the
//! `Verified` extractor of a receiver whose secret names the inbox
//! (`WebhookSecret::keep_unparseable`, feature `standard-webhooks`) notes it before its
//! refusal is answered, so that a sender which gives up on a `4xx` loses nothing.
//!
//! ```no_run
//! use std::time::Duration;
//! use idem_runtime::Idem;
//! use idem_runtime::inbox::Unapplied;
//! use idem_runtime::sqlx::{Sqlite, Transaction};
//! use idem_runtime::store::Delivery;
//!
//! async fn unknown_charge(
//!     idem: &Idem<Sqlite>,
//!     tx: &mut Transaction<'_, Sqlite>,
//!     event_id: &str,
//!     body: &str,
//! ) -> Result<&'static str, idem_runtime::sqlx::Error> {
//!     let delivery = Delivery {
//!         source: "provider_event:v1",
//!         event_id,
//!         reason: "no payment names the charge",
//!         body,
//!     };
//!     Ok(match idem.unapplied(tx, delivery, Duration::from_secs(3600)).await? {
//!         Unapplied::Retry => "503, deliver again",
//!         Unapplied::Kept => "200, kept as unmatched",
//!     })
//! }
//! ```

use std::time::Duration;

use crate::clock::millis;
use crate::key::stored;
use crate::protocol::Idem;
use crate::store::{Backend, Delivery, Inbox, InboxStatus};

/// What to answer an event that cannot be applied ([`Idem::unapplied`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Unapplied {
    /// Within the window since its first delivery: ask the sender to deliver it again
    /// (`503` with `Retry-After`); the receiver's transaction rolls back.
    Retry,
    /// Past it: acknowledge it (`200`); it is kept as `unmatched` in the receiver's
    /// transaction, which commits.
    Kept,
}

impl<DB: Backend> Idem<DB> {
    /// The inbox of events not applied, for reading ([`Inbox::list`], [`Inbox::get`]).
    #[must_use]
    pub fn inbox(&self) -> Inbox<DB> {
        let inbox = Inbox::new(self.pool().clone());
        match self.ring() {
            Some(ring) => inbox.with_keyring(ring.clone()),
            None => inbox,
        }
    }

    /// An event the receiver cannot apply, found in its transaction `tx` (see [the
    /// module](crate::inbox)); an event id longer than 255 characters is kept as its digest,
    /// as a key is ([long keys](crate::key#long-keys)): [`Unapplied::Kept`] — noted in `tx` as `unmatched` — once
    /// `keep_after` has passed since its first delivery was noted, [`Unapplied::Retry`]
    /// before. A retry's delivery is noted as `waiting` on a connection of its own, after `tx`
    /// ends (it rolls back with the `503`; SQLite has one writer at a time): its first
    /// delivery's time survives, and a note lost with its process is made again by the next
    /// delivery.
    ///
    /// # Errors
    /// Database errors of the reads and writes in `tx`.
    pub async fn unapplied(
        &self,
        tx: &mut DB::Connection,
        delivery: Delivery<'_>,
        keep_after: Duration,
    ) -> Result<Unapplied, sqlx::Error> {
        let event_id = stored(delivery.event_id);
        let delivery = Delivery {
            event_id: &event_id,
            ..delivery
        };
        let now = self.now_millis();
        let first = Inbox::<DB>::first_seen(tx, delivery.source, delivery.event_id).await?;
        if now.saturating_sub(first.unwrap_or(now)) >= millis(keep_after) {
            Inbox::<DB>::note(tx, delivery, InboxStatus::Unmatched, now, self.ring()).await?;
            tracing::warn!(
                source = delivery.source,
                event = %crate::telemetry::key_hash(delivery.source, delivery.event_id),
                reason = delivery.reason,
                "an event that cannot be applied is acknowledged and kept as unmatched \
                 (idem inbox list)"
            );
            return Ok(Unapplied::Kept);
        }
        let (pool, ring) = (self.pool().clone(), self.ring().cloned());
        let (source, event_id) = (delivery.source.to_owned(), delivery.event_id.to_owned());
        let (reason, body) = (delivery.reason.to_owned(), delivery.body.to_owned());
        tokio::spawn(async move {
            let noted = async {
                let mut conn = pool.acquire().await?;
                let delivery = Delivery {
                    source: &source,
                    event_id: &event_id,
                    reason: &reason,
                    body: &body,
                };
                Inbox::<DB>::note(
                    &mut conn,
                    delivery,
                    InboxStatus::Waiting,
                    now,
                    ring.as_ref(),
                )
                .await
            }
            .await;
            if let Err(error) = noted {
                let event = crate::telemetry::key_hash(&source, &event_id);
                tracing::warn!(%error, %event, "could not note an event's delivery");
            }
        });
        Ok(Unapplied::Retry)
    }

    /// A delivery whose sender is proven (its signature verified) but whose body does not
    /// read as the receiver's event: noted as `unparseable` from `delivery.source`, on a
    /// connection of its own (nothing else of the request is written: it is refused), and
    /// logged at `WARN`. A redelivery of it counts one more on the same row; one that reads
    /// takes the row over ([`Inbox::note`]). The event id is kept as [`Idem::unapplied`]
    /// keeps it; `delivery.reason` must hold no value of the body (the body itself is
    /// sealed with the storage keys, the reason is not).
    ///
    /// # Errors
    /// Database errors: the delivery is not kept, and its sender should deliver it again.
    pub async fn unparseable(&self, delivery: Delivery<'_>) -> Result<(), sqlx::Error> {
        let event_id = stored(delivery.event_id);
        let delivery = Delivery {
            event_id: &event_id,
            ..delivery
        };
        let mut conn = self.pool().acquire().await?;
        let (status, now) = (InboxStatus::Unparseable, self.now_millis());
        Inbox::<DB>::note(&mut conn, delivery, status, now, self.ring()).await?;
        tracing::warn!(
            source = delivery.source,
            event = %crate::telemetry::key_hash(delivery.source, delivery.event_id),
            reason = delivery.reason,
            "a signed event whose body does not read is refused and kept as unparseable \
             (idem inbox list --status unparseable)"
        );
        Ok(())
    }

    /// The receiver applied the event: it leaves the inbox, if it waited there, in the
    /// receiver's transaction `tx`.
    ///
    /// # Errors
    /// Database errors.
    pub async fn applied(
        &self,
        tx: &mut DB::Connection,
        source: &str,
        event_id: &str,
    ) -> Result<(), sqlx::Error> {
        Inbox::<DB>::remove(tx, source, &stored(event_id))
            .await
            .map(drop)
    }
}
