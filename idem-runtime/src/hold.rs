//! An attempt's proof of life: how a retry after a crash knows, without waiting for the
//! lease, that a staged key's attempt is gone.
//!
//! On a backend whose [`Backend::HOLDS`](crate::store::Backend::HOLDS)
//! (PostgreSQL), every staged attempt holds its attempt number — a session advisory lock
//! ([`Backend::hold`](crate::store::Backend::hold)) on a connection of a small
//! pool beside the application's — from before its reservation or takeover makes the number
//! visible until after its last write. The server ends a session's locks with the session:
//! when the process running an attempt dies (`kill -9`, a lost machine), its connection
//! closes and the hold is free at once. A retry that finds the key `processing` with a live
//! lease asks whether that attempt's owner is gone
//! ([`Backend::owner_gone`](crate::store::Backend::owner_gone)):
//!
//! - held → the attempt runs: `409` with `Retry-After` (or wait, with
//!   [`InFlightPolicy::Wait`](crate::spec::InFlightPolicy::Wait));
//! - free → its owner is gone: the retry takes the key over at once (holding the next
//!   number), instead of answering `409` until the lease runs out.
//!
//! The lease still decides alone once it has run out: a key whose lease ran out is taken over
//! whatever its hold says (an owner hung past its lease, or cut off by a network partition
//! while the server still keeps its session, is fenced out as before). Each attempt holds its
//! own number, so the takeover never waits for the attempt it replaces.
//!
//! Costs, on PostgreSQL: one more connection per running staged attempt (the hold pool has
//! the application pool's size; a request takes its hold connection before anything else, so
//! the two pools never wait for each other in a circle). A new key is reserved on the hold
//! connection in the same statement that takes its hold
//! ([`Backend::reserve_held`](crate::store::Backend::reserve_held)), so a first
//! execution makes no more round trips; a takeover makes one more (its hold), and so does a
//! look that finds a live lease (the probe). Each of them first lets go of what the
//! connection held before.
//!
//! Off by default, on with [`Config::attempt_holds`](crate::Config::attempt_holds): behind
//! a transaction pooler such as PgBouncer in transaction mode a session lock does not stay
//! with its client, so [`Config::transaction_pooler`](crate::Config::transaction_pooler)
//! turns holds off, and recovery waits for the lease, as on SQLite.

use sqlx::pool::PoolConnection;

use crate::error::Error;
use crate::protocol::Idem;
use crate::store::staged::{Fence, Reservation};
use crate::store::{Backend, Failure, KeyRef};

/// A staged execution's hold connection, and the attempt it holds (its reservation and
/// number). Dropped, the connection goes back to the hold pool still holding its attempt,
/// until its next use lets go of it in the same round trip as its next hold or probe — no
/// round trip of its own — or the pool closes it (idle for 30 s). A hold left so is
/// harmless: its attempt's row is final, or its lease was released, or another attempt took
/// it over, or an operator deleted the key, whose next reservation holds other ids.
pub(crate) struct Hold<DB: Backend> {
    conn: Option<PoolConnection<DB>>,
    namespace: String,
    key: (String, String, String),
    held: Option<Fence>,
}

/// A statement of [`Hold`]'s.
#[derive(Clone, Copy)]
enum Act<'a> {
    Hold(Fence),
    OwnerGone(Fence),
    Reserve(Reservation<'a>),
}

impl<DB: Backend> Hold<DB> {
    /// Takes the hold of attempt `attempt` (letting go of any other this connection held);
    /// `false` when another session holds it.
    pub(crate) async fn take(&mut self, idem: &Idem<DB>, attempt: Fence) -> Result<bool, Error> {
        if self.held == Some(attempt) {
            return Ok(true);
        }
        self.held = None;
        let (held, _) = self.run(idem, Act::Hold(attempt)).await?;
        if held {
            self.held = Some(attempt);
        }
        Ok(held)
    }

    /// Reserves the key holding its attempt 1, in one round trip
    /// ([`Backend::reserve_held`](crate::store::Backend::reserve_held)): `None`
    /// when another session holds attempt 1 (nothing reserved), else whether the key was
    /// reserved (`false`: it has a row already).
    pub(crate) async fn reserve(
        &mut self,
        idem: &Idem<DB>,
        reservation: Reservation<'_>,
    ) -> Result<Option<bool>, Error> {
        self.held = None;
        let (held, reserved) = self.run(idem, Act::Reserve(reservation)).await?;
        if !held {
            return Ok(None);
        }
        self.held = Some(Fence {
            reservation: reservation.id,
            attempt: 1,
        });
        Ok(Some(reserved))
    }

    /// Whether the owner of attempt `attempt` is provably gone (nobody holds it). Lets go of
    /// what this connection held: a hold never probes its own attempt.
    pub(crate) async fn owner_gone(
        &mut self,
        idem: &Idem<DB>,
        attempt: Fence,
    ) -> Result<bool, Error> {
        self.held = None;
        Ok(self.run(idem, Act::OwnerGone(attempt)).await?.0)
    }

    /// Runs `act` on the hold connection. A connection found dead (the database restarted
    /// since it was last used) is closed and `act` tried on another, as the first lookup
    /// does.
    async fn run(&mut self, idem: &Idem<DB>, act: Act<'_>) -> Result<(bool, bool), Error> {
        let mut tries = idem.hold_pool().options().get_max_connections() + 1;
        loop {
            let mut conn = match self.conn.take() {
                Some(conn) => conn,
                None => acquire(idem).await?,
            };
            let key = KeyRef {
                scope: &self.key.0,
                operation: &self.key.1,
                key: &self.key.2,
            };
            let ns = self.namespace.as_str();
            let done = match act {
                Act::Hold(attempt) => crate::store::staged::hold::<DB>(&mut conn, ns, key, attempt)
                    .await
                    .map(|held| (held, false)),
                Act::OwnerGone(attempt) => {
                    crate::store::staged::owner_gone::<DB>(&mut conn, ns, key, attempt)
                        .await
                        .map(|gone| (gone, false))
                }
                Act::Reserve(reservation) => {
                    crate::store::staged::reserve_held::<DB>(
                        &mut conn,
                        ns,
                        reservation,
                        idem.ring(),
                    )
                    .await
                }
            };
            match done {
                Ok(answer) => {
                    self.conn = Some(conn);
                    return Ok(answer);
                }
                Err(error) if tries > 1 && DB::classify(&error) == Failure::Disconnected => {
                    tries -= 1;
                    conn.close_on_drop();
                    tracing::debug!(%error, "stale hold connection; trying another");
                }
                Err(error) => {
                    // Never pool a connection whose holds are unknown.
                    conn.close_on_drop();
                    return Err(Error::Store(error));
                }
            }
        }
    }
}

/// A connection of the hold pool within [`crate::Config::acquire_timeout`].
async fn acquire<DB: Backend>(idem: &Idem<DB>) -> Result<PoolConnection<DB>, Error> {
    let acquire = idem.hold_pool().acquire();
    match tokio::time::timeout(idem.config().acquire_timeout, acquire).await {
        Ok(conn) => conn.map_err(Error::Store),
        Err(_) => Err(Error::Store(sqlx::Error::PoolTimedOut)),
    }
}

impl<DB: Backend> Idem<DB> {
    /// A hold for `key`, not yet holding it, when this backend and configuration prove an
    /// attempt's owner alive; `None` otherwise (the lease alone decides). Taken before the
    /// key's lookup, so that a request never holds an application-pool connection while it
    /// waits for a hold connection (running attempts, which hold one, wait for the other).
    pub(crate) async fn hold_for(&self, key: KeyRef<'_>) -> Result<Option<Hold<DB>>, Error> {
        if !crate::store::staged::holds::<DB>()
            || !self.config().attempt_holds
            || self.config().transaction_pooler
        {
            return Ok(None);
        }
        let mut conn = acquire(self).await?;
        let namespace = self.namespace(&mut conn).await?.to_owned();
        Ok(Some(Hold {
            conn: Some(conn),
            namespace,
            key: (
                key.scope.to_owned(),
                key.operation.to_owned(),
                key.key.to_owned(),
            ),
            held: None,
        }))
    }
}
