//! The first step of a staged execution, one look at a time: the key reserved, taken over,
//! replayed or refused ([`Starting::look`]).

use super::{next, reservation_id};
use crate::clock::millis;
use crate::error::Error;
use crate::hold::Hold;
use crate::protocol::{Call, Idem, Outcome, Settled};
use crate::spec::OperationSpec;
use crate::store::staged::{Fence, Lease, Reservation, reserve, take_over};
use crate::store::{Backend, KeyRef};
use crate::telemetry;

/// A staged execution's first step: what its looks at the key share.
pub(super) struct Starting<'a, DB: Backend> {
    pub(super) idem: &'a Idem<DB>,
    pub(super) spec: &'a OperationSpec,
    pub(super) call: &'a Call<'a>,
    pub(super) key: KeyRef<'a>,
    /// The request, as stored with the reservation.
    pub(super) request: &'a str,
    /// The request's field digests, stored with the reservation.
    pub(super) digests: Option<Vec<u8>>,
    /// The attempt's hold, where attempts hold their number ([`crate::hold`]).
    pub(super) hold: Option<Hold<DB>>,
}

/// What one look at the key ended with.
pub(super) enum Look {
    /// A replay or another final answer.
    Answer(Outcome),
    /// The key is this execution's: attempt `lease`, taken over if `resumed`.
    Run { lease: Lease, resumed: bool },
    /// Another request or attempt holds it (its lease until `until`, when known): wait or
    /// answer `409`, holding no connection.
    Wait { until: Option<i64> },
    /// Another request moved first: look again.
    Again,
}

impl<DB: Backend> Starting<'_, DB> {
    /// One look at the key: its row read ([`Idem::first_lookup`]) and what it means
    /// ([`Idem::settle`]) acted on, on the lookup's connection, given back before a wait.
    pub(super) async fn look(&mut self) -> Result<Look, Error> {
        let idem = self.idem;
        let now = idem.now_millis();
        let (mut session, stored) = idem.first_lookup(self.key, None).await?;
        telemetry::looked_up(stored.as_ref(), now);
        let conn = session.conn();
        // The attempt to take over, and the end of its lease as seen.
        let (seen, seen_until) = match idem.settle(self.spec, self.call, stored, now) {
            Err(Error::Mismatch(_)) => return Err(idem.mismatch(conn, self.call, self.key).await),
            Err(error) => return Err(error),
            Ok(Settled::Answer(outcome)) => return Ok(Look::Answer(outcome)),
            Ok(Settled::Run { replace_expired }) => {
                return self.reserve(conn, replace_expired, now).await;
            }
            // The lease ran out: the lease alone decides.
            Ok(Settled::Stuck { attempt }) => (attempt, now),
            Ok(Settled::Held { attempt, until }) => {
                let gone = match &mut self.hold {
                    Some(hold) => hold.owner_gone(idem, attempt).await?,
                    None => false,
                };
                if !gone {
                    return Ok(Look::Wait { until });
                }
                telemetry::owner_gone(attempt.attempt);
                (attempt, until.unwrap_or(now))
            }
        };
        self.take_over(conn, seen, seen_until, now).await
    }

    /// A free key (or an expired row in the way): reserved for attempt 1, whose number is
    /// held first where attempts hold theirs.
    async fn reserve(
        &mut self,
        conn: &mut DB::Connection,
        replace_expired: bool,
        now: i64,
    ) -> Result<Look, Error> {
        let (idem, spec, call, key) = (self.idem, self.spec, self.call, self.key);
        let reservation = Reservation {
            key,
            fingerprint: call.fingerprint.as_bytes(),
            request: self.request,
            created_ms: now,
            expires_ms: now.saturating_add(millis(spec.ttl)),
            locked_until_ms: now.saturating_add(millis(spec.lease)),
            replace_expired,
            id: reservation_id(key, call.fingerprint.as_bytes(), replace_expired),
            field_digests: self.digests.as_deref(),
        };
        let first = Fence {
            reservation: reservation.id,
            attempt: 1,
        };
        // A replaced row: its first attempt held first, then reserved. `false`: another
        // request holds it.
        let free = match self.hold.as_mut() {
            Some(hold) if replace_expired => hold.take(idem, first).await?,
            _ => true,
        };
        // `None`: another request holds attempt 1.
        let reserved = match self.hold.as_mut() {
            // A new key: reserved in the hold's own round trip.
            Some(hold) if !replace_expired => hold.reserve(idem, reservation).await?,
            _ if !free => None,
            _ => Some(
                reserve::<DB>(conn, reservation, idem.ring())
                    .await
                    .map_err(Error::Store)?,
            ),
        };
        match reserved {
            None => Ok(Look::Wait { until: None }),
            // Someone reserved it first: look again.
            Some(false) => Ok(Look::Again),
            Some(true) => {
                telemetry::reserved(1, false);
                let lease = Lease {
                    fence: first,
                    journal: None,
                    request: Some(self.request.to_owned()),
                    fingerprint: call.fingerprint.as_bytes().to_vec(),
                };
                Ok(Look::Run {
                    lease,
                    resumed: false,
                })
            }
        }
    }

    /// A stuck key, or one whose owner is provably gone: taken over by the next attempt,
    /// whose number is held first where attempts hold theirs.
    async fn take_over(
        &mut self,
        conn: &mut DB::Connection,
        seen: Fence,
        seen_until: i64,
        now: i64,
    ) -> Result<Look, Error> {
        let idem = self.idem;
        if let Some(hold) = &mut self.hold
            && !hold.take(idem, next(seen)).await?
        {
            // Another request is taking it over.
            return Ok(Look::Wait { until: None });
        }
        let until = now.saturating_add(millis(self.spec.lease));
        let taken = take_over::<DB>(conn, self.key, seen, seen_until, until, idem.ring())
            .await
            .map_err(Error::Store)?;
        let Some(lease) = taken else {
            // Someone else took it over (or it completed) meanwhile: look again (the next
            // hold or probe lets go of the number held for nothing).
            return Ok(Look::Again);
        };
        telemetry::reserved(lease.fence.attempt, true);
        Ok(Look::Run {
            lease,
            resumed: true,
        })
    }
}
