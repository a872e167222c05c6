//! The request path's own connections: the lookups and key transactions of
//! [`Idem::execute`](crate::Idem::execute) and staged mode's first step.
//!
//! Each is opened by the pool the application and idem's other work share
//! ([`Idem::pool`](crate::Idem::pool)) — with its connect options and its hooks (an
//! `after_connect` of the application's runs on them too) — and then detached from it: they
//! are up to the pool's size more, beside it. What differs is how one comes back: sqlx's pool sends every returned connection a ping, a
//! round trip after each request (a replay's second one), on a task of its own. Here an
//! execution that ended (not cancelled midway) with nothing left to send hands its
//! connection back as it is. So does a first execution whose
//! [merged `COMMIT; BEGIN`](crate::store#postgresql-the-record-and-its-commit-in-one-round-trip) left an
//! empty transaction, its `ROLLBACK` queued ([`give_back_with_rollback`]): the `ROLLBACK`
//! goes out with the connection's next statement — in the same round trip when that is the
//! next execution's `BEGIN` — and a connection left idle with it for a second is brought
//! back in step by a task of the pool's ([`flush_idle`]). One whose execution was dropped
//! midway, or whose store failed, is brought back in step by that same ping first, as sqlx's
//! pool would ([`Session`](crate::protocol::Session)).
//!
//! A connection idle for a second or more is pinged before it is handed out again (a
//! database restart leaves dead ones behind); one older than half an hour is replaced.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadpool::managed::{
    self, Metrics, Object, QueueMode, RecycleError, RecycleResult, Timeouts, WeakPool,
};
use sqlx::Connection as _;

use crate::store::{Backend, IDLE_PING_AFTER};

/// How long a connection is used before it is closed and replaced (sqlx's pool's
/// `max_lifetime`).
const MAX_LIFETIME: Duration = Duration::from_secs(30 * 60);

/// The pool of the request path's connections.
pub(crate) type Connections<DB> = managed::Pool<Opener<DB>>;

/// One of them, checked out.
pub(crate) type Conn<DB> = Object<Opener<DB>>;

/// Opens connections through the application's pool, detached from it.
pub(crate) struct Opener<DB: Backend> {
    pool: sqlx::Pool<DB>,
    /// Whether [`flush_idle`] runs for this pool.
    flushing: AtomicBool,
}

impl<DB: Backend> managed::Manager for Opener<DB> {
    type Type = DB::Connection;
    type Error = sqlx::Error;

    async fn create(&self) -> Result<DB::Connection, sqlx::Error> {
        Ok(self.pool.acquire().await?.detach())
    }

    async fn recycle(
        &self,
        conn: &mut DB::Connection,
        metrics: &Metrics,
    ) -> RecycleResult<sqlx::Error> {
        if metrics.age() >= MAX_LIFETIME {
            return Err(RecycleError::message("past its lifetime"));
        }
        if metrics.last_used() >= IDLE_PING_AFTER {
            conn.ping().await.map_err(RecycleError::Backend)?;
        }
        Ok(())
    }
}

/// The request path's connections beside `pool`, as many as it holds at most. Opens none
/// until the first request.
pub(crate) fn beside<DB: Backend>(pool: &sqlx::Pool<DB>) -> Connections<DB> {
    let max = pool.options().get_max_connections();
    managed::Pool::builder(Opener {
        pool: pool.clone(),
        flushing: AtomicBool::new(false),
    })
    .max_size(usize::try_from(max).unwrap_or(usize::MAX).max(1))
    // The most recently used first: the busy few stay warm, the others idle.
    .queue_mode(QueueMode::Lifo)
    .runtime(deadpool::Runtime::Tokio1)
    .build()
    .unwrap_or_else(|_| unreachable!("a runtime is set"))
}

/// A connection within `timeout`, with sqlx's errors: [`sqlx::Error::PoolTimedOut`] past it,
/// [`sqlx::Error::PoolClosed`] after [`close`].
pub(crate) async fn get<DB: Backend>(
    conns: &Connections<DB>,
    timeout: Duration,
) -> Result<Conn<DB>, sqlx::Error> {
    match tokio::time::timeout(timeout, conns.get()).await {
        Ok(Ok(conn)) => Ok(conn),
        Ok(Err(managed::PoolError::Backend(error))) => Err(error),
        Ok(Err(managed::PoolError::Closed)) => Err(sqlx::Error::PoolClosed),
        Ok(Err(_)) | Err(_) => Err(sqlx::Error::PoolTimedOut),
    }
}

/// Returns `conn` after the ping that brings it back in step (flushing what is queued), or
/// closes it if the ping fails: on a task of its own, as sqlx's pool does.
pub(crate) fn ping_and_return<DB: Backend>(mut conn: Conn<DB>) {
    tokio::spawn(async move {
        match tokio::time::timeout(Duration::from_secs(5), conn.ping()).await {
            Ok(Ok(())) => drop(conn),
            _ => close::<DB>(Object::take(conn)).await,
        }
    });
}

/// Returns `conn`, whose only queued statement is the `ROLLBACK` of an empty transaction (a
/// first execution's merged `COMMIT; BEGIN` left it), as it is: the `ROLLBACK` goes out with
/// the connection's next statement, in one write with it — the next execution's `BEGIN`
/// takes no round trip more — and [`flush_idle`] sends it within about two seconds when no
/// execution takes the connection, so that no server session stays idle in a transaction
/// for long. Behind a transaction pooler, where a client inside a transaction holds a server
/// connection for itself, the connection is pinged at once instead ([`ping_and_return`]).
pub(crate) fn give_back_with_rollback<DB: Backend>(conn: Conn<DB>) {
    if crate::store::pooler::is_behind_transaction_pooler() {
        return ping_and_return(conn);
    }
    if let Some(pool) = Object::pool(&conn)
        && !pool.manager().flushing.swap(true, Ordering::Relaxed)
    {
        tokio::spawn(flush_idle(pool.weak()));
    }
    drop(conn);
}

/// Every second, while the pool lives: when an idle connection has had a statement queued
/// for a second or more ([`give_back_with_rollback`]), takes every idle connection out of the
/// pool and puts them back in their order. Taking one out recycles it, which pings one idle
/// for a second or more ([`Opener::recycle`]): that ping sends what is queued and reads the
/// answers, or closes a connection that fails it.
async fn flush_idle<DB: Backend>(pool: WeakPool<Opener<DB>>) {
    let no_wait = Timeouts {
        wait: Some(Duration::ZERO),
        create: Some(Duration::ZERO),
        recycle: Some(Duration::from_secs(5)),
    };
    let mut tick = tokio::time::interval(IDLE_PING_AFTER);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        if pool.is_closed() {
            return;
        }
        let mut queued = false;
        pool.retain(|conn, metrics| {
            queued |= conn.should_flush() && metrics.last_used() >= IDLE_PING_AFTER;
            true
        });
        if !queued {
            continue;
        }
        let mut taken = Vec::with_capacity(pool.status().available);
        for _ in 0..taken.capacity() {
            match pool.timeout_get(&no_wait).await {
                Ok(conn) => taken.push(conn),
                Err(_) => break,
            }
        }
        // The most recently used was taken first: it goes back last, on top again.
        while let Some(conn) = taken.pop() {
            drop(conn);
        }
    }
}

/// Closes `conn` on a task of its own, taken out of the pool.
pub(crate) fn discard<DB: Backend>(conn: Conn<DB>) {
    let conn = Object::take(conn);
    tokio::spawn(close::<DB>(conn));
}

/// Closes one connection gracefully, within five seconds.
async fn close<DB: Backend>(conn: DB::Connection) {
    let _ = tokio::time::timeout(Duration::from_secs(5), conn.close()).await;
}

/// Closes the pool's connections: the idle ones now, gracefully; those in use as they come
/// back (waiting a little for them, as for a ping under way).
pub(crate) async fn close_all<DB: Backend>(conns: &Connections<DB>) {
    let idle = conns.retain(|_, _| false);
    conns.close();
    for conn in idle.removed {
        close::<DB>(conn).await;
    }
    for _ in 0..100 {
        if conns.status().size == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
