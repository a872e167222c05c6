//! The transactional outbox: messages enqueued in a handler's own transaction, delivered
//! after it commits by a [`Dispatcher`] through a [`Sink`].
//!
//! A handler that changes data and must tell another system about it (a webhook, a queue)
//! cannot do both atomically. With the outbox it only inserts the message, in the
//! transaction that makes the change, so both commit or neither does; a dispatcher delivers
//! it afterwards, retrying until the sink accepts it:
//!
//! ```no_run
//! # #[cfg(feature = "webhook")] mod example {
//! use std::time::Duration;
//! use idem_runtime::Idem;
//! use idem_runtime::outbox::{Dispatcher, OutboxMessage, WebhookSink};
//! use idem_runtime::sqlx::Sqlite;
//! use serde_json::json;
//!
//! # async fn demo(idem: Idem<Sqlite>) -> Result<(), Box<dyn std::error::Error>> {
//! // In a handler (or any transaction): the message commits with the order.
//! let mut tx = idem.pool().begin().await?;
//! sqlx::query("INSERT INTO orders (id, total) VALUES (42, 1990)").execute(&mut *tx).await?;
//! idem.enqueue(&mut tx, &OutboxMessage::new("order-42/created", "order.created", json!({ "id": 42 })))
//!     .await?;
//! tx.commit().await?;
//!
//! // Once per process: delivers what commits, until shut down.
//! let sink = WebhookSink::new("http://hooks.internal/orders")?;
//! let dispatcher = Dispatcher::new(&idem, sink)
//!     .batch(32)
//!     .concurrency(8)
//!     .max_attempts(25)
//!     .backoff(Duration::from_secs(1), Duration::from_secs(15 * 60))
//!     .spawn();
//! // …
//! dispatcher.shutdown().await?;
//! # Ok(()) }
//! # }
//! ```
//!
//! In an `#[idempotent]` handler, enqueue on the handler's transaction: a retried request
//! replays its stored response and enqueues nothing again. Deriving the dedup id from what
//! the message is about (`order-42/created`) also keeps two different requests from
//! announcing the same fact twice.
//!
//! # At least once
//!
//! A message is delivered at least once, never "exactly once": a dispatcher that dies (or
//! whose database write fails) after the sink accepted a message and before recording it
//! leaves the message pending, and it is delivered again. Receivers deduplicate on the
//! message's [`dedup_id`](OutboxMessage::dedup_id), unique in the outbox: the webhook sink
//! sends it as `webhook-id` (Standard Webhooks) and as `Idempotency-Key`, so an idem-powered
//! receiver answers a repeated delivery with its stored response instead of acting twice.
//!
//! # Claims, leases and several dispatchers
//!
//! A dispatcher claims a batch of due messages in `id` order and leases them for
//! [`Dispatcher::lease`]: no other claim returns them until the lease ends. On PostgreSQL
//! and MySQL the claim picks its rows with `FOR UPDATE SKIP LOCKED`, so any number of
//! dispatchers, in any number of processes, can share one outbox: they never hold the same
//! message at once. On SQLite every claim runs under the database's single write lock;
//! several dispatchers work too, but gain nothing over one.
//!
//! A batch's messages are delivered [`Dispatcher::concurrency`] at a time (8 by default), so
//! a slow receiver holds up one delivery slot, not the batch. A dispatcher that dies
//! mid-batch only delays its messages until their lease ends; another dispatcher (or the
//! same one, restarted) then delivers them. The lease must outlast a batch: at worst
//! ⌈batch ÷ concurrency⌉ × the sink's timeout. By default it is chosen from those (one and a
//! half times that, at least 30 s); a lease set shorter is warned about when the dispatcher
//! starts. A delivery is never started once its lease has ended (the message is left to
//! the next claim), but one still running when its lease ends may overlap with another
//! dispatcher's delivery of the same message.
//!
//! # Order
//!
//! **Messages are not delivered in order.** They are claimed in `id` order, but delivered
//! several at a time, and a message whose delivery failed is retried after its backoff,
//! after messages enqueued later. Each message must stand on its own: a receiver that needs
//! the latest state of a thing reads it (or compares a version carried in the payload)
//! rather than relying on arrival order. The `payments` example's `payment.succeeded` is
//! such an event: one per payment, final. For a stream that needs order per aggregate, run
//! a dispatcher with `concurrency(1)` and `max_attempts` high enough never to park a
//! message, and know that a dead-lettered message still lets later ones pass.
//!
//! # Retries, backoff and dead letters
//!
//! A failed delivery — any status but `2xx`, a timeout, a refused connection — is retried
//! after a delay drawn at random ("full jitter") between zero and
//! `min(max, base × 2^(attempts − 1))`, `attempts` counting the failures so far including
//! this one ([`Dispatcher::backoff`], default base 1 s, max 15 min). The random spread keeps
//! the retries of many messages that failed together (a receiver's outage) from arriving
//! together.
//!
//! After [`Dispatcher::max_attempts`] failures (default 25: hours of an unreachable
//! receiver), or at once for a failure the sink reports as
//! [permanent](DeliveryError::permanent), the message is parked as *dead*: it is never
//! deleted, and nothing delivers it again until an operator puts it back, with
//! `idem outbox retry ID` (or `--all`) or [`Outbox::retry`], once the cause is fixed. The
//! operator tool lists them (`idem outbox list --dead`), and the `idem_outbox_dead` gauge
//! counts them. Delivered messages stay too, until [`Outbox::sweep_delivered`] deletes
//! them; while a delivered message is in the table its dedup id cannot be enqueued again.
//!
//! Each failed attempt is logged at `WARN` with its cause, each message parked as dead at
//! `ERROR`, and both are counted (`idem_outbox_failed_attempts_total`,
//! `idem_outbox_dead_lettered_total`; the [`telemetry`](crate::telemetry) module lists
//! the outbox's metrics).
//!
//! # Time
//!
//! The dispatcher reads the time from its [`Idem`]'s clock ([`Idem::with_clock`]): due
//! times, leases and backoff follow a [`ManualClock`](crate::clock::ManualClock) in tests.
//! Only the pause between idle polls ([`Dispatcher::poll_interval`]) is real time.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt as _, StreamExt as _, stream};
use sqlx::Transaction;
use tokio::sync::oneshot;
use tokio::task::{JoinError, JoinHandle};

use crate::clock::millis;
use crate::protocol::Idem;
use crate::store::{Backend, StoreError};

pub use crate::store::{
    Claimed, Outbox, OutboxCounts, OutboxMessage, OutboxRow, OutboxStatus, enqueue,
};

#[cfg(feature = "webhook")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhook")))]
pub use self::webhook::WebhookSink;

impl<DB: Backend> Idem<DB> {
    /// Enqueues `message` in `tx`, due now by this handle's clock: [`enqueue`] with
    /// [`Idem::now_millis`]. Returns `false`, changing nothing, when a message with the same
    /// dedup id exists already.
    ///
    /// # Errors
    /// When the store fails.
    pub async fn enqueue(
        &self,
        tx: &mut Transaction<'_, DB>,
        message: &OutboxMessage,
    ) -> Result<bool, StoreError> {
        enqueue(tx, message, self.now_millis(), self.ring()).await
    }

    /// The outbox, for tools: inspect, list, count, retry dead messages, sweep delivered
    /// ones (see [`Outbox`]).
    #[must_use]
    pub fn outbox(&self) -> Outbox<DB> {
        let outbox = Outbox::new(self.pool().clone());
        match self.ring() {
            Some(ring) => outbox.with_keyring(ring.clone()),
            None => outbox,
        }
    }
}

/// Why a delivery failed ([`Sink::deliver`]).
///
/// Transient failures are retried with backoff; a permanent one makes the message dead at
/// once. [`DeliveryError::message`] is stored as the outbox message's `last_error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DeliveryError {
    message: String,
    permanent: bool,
}

impl DeliveryError {
    /// A failure worth retrying: the receiver is down, overloaded, timed out.
    #[must_use]
    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: false,
        }
    }

    /// A failure no retry will fix: the receiver refuses the message itself. The message is
    /// dead at once.
    #[must_use]
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            permanent: true,
        }
    }

    /// What went wrong.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying is pointless ([`DeliveryError::permanent`]).
    #[must_use]
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }
}

/// Where a [`Dispatcher`] delivers messages: a webhook ([`WebhookSink`], feature `webhook`),
/// a message broker, anything.
///
/// `deliver` returns once the receiver has the message (`Ok`) or has not (`Err`); the
/// dispatcher records the outcome. It may be called again for a message it already
/// delivered (see the [module documentation](self) on at-least-once delivery), and for
/// several messages at once with [`Dispatcher::concurrency`]. Bound its time (a timeout):
/// a delivery that outlasts the dispatcher's lease may overlap with another dispatcher's.
/// A panic counts as a transient failure.
///
/// The method returns `impl Future`, so the trait is not object safe: a dispatcher is
/// generic over its sink. To choose a sink at run time, implement `Sink` on an enum of
/// sinks, or on a struct holding an `Arc<dyn YourTrait>` whose method returns a boxed
/// future.
///
/// ```
/// use idem_runtime::outbox::{Claimed, DeliveryError, Sink};
///
/// /// Prints messages; fails for topics it does not know.
/// struct Print;
///
/// impl Sink for Print {
///     async fn deliver(&self, message: &Claimed) -> Result<(), DeliveryError> {
///         match message.topic.as_str() {
///             "order.created" => {
///                 tracing::info!(id = message.id, "order created");
///                 Ok(())
///             }
///             other => Err(DeliveryError::permanent(format!("unknown topic {other}"))),
///         }
///     }
/// }
/// ```
pub trait Sink: Send + Sync + 'static {
    /// Delivers one message.
    fn deliver(&self, message: &Claimed) -> impl Future<Output = Result<(), DeliveryError>> + Send;

    /// The longest one delivery can take (its timeout), if the sink bounds it: the
    /// dispatcher's default lease is chosen from it ([`Dispatcher::lease`]). `None` by
    /// default.
    fn timeout(&self) -> Option<Duration> {
        None
    }
}

impl<S: Sink> Sink for Arc<S> {
    fn deliver(&self, message: &Claimed) -> impl Future<Output = Result<(), DeliveryError>> + Send {
        S::deliver(self, message)
    }

    fn timeout(&self) -> Option<Duration> {
        S::timeout(self)
    }
}

/// What one [`Dispatcher::run_once`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchReport {
    /// Messages claimed.
    pub claimed: usize,
    /// Delivered and recorded.
    pub delivered: usize,
    /// Failed, to be retried after a backoff.
    pub failed: usize,
    /// Failed and given up on (dead): too many attempts, or a permanent failure.
    pub dead: usize,
    /// Not attempted because their lease had ended before their turn came (a batch that
    /// took longer than the lease): the next claim takes them again.
    pub skipped: usize,
}

/// Delivers the outbox's messages through a [`Sink`]: claims due messages, delivers them,
/// records each outcome, retries failures with backoff (see the
/// [module documentation](self)).
///
/// Built from an [`Idem`] (its pool and clock) and a sink; run it with
/// [`Dispatcher::spawn`] (a task of its own), [`Dispatcher::run`] (a loop until a shutdown
/// signal) or [`Dispatcher::run_once`] (one batch, for tests and cron-like callers).
pub struct Dispatcher<DB: Backend, S: Sink> {
    idem: Idem<DB>,
    outbox: Outbox<DB>,
    sink: S,
    batch: u32,
    /// `None`: chosen from the batch, the concurrency and the sink's timeout.
    lease: Option<Duration>,
    max_attempts: u32,
    backoff_base: Duration,
    backoff_max: Duration,
    poll_interval: Duration,
    concurrency: usize,
    observe_every: Duration,
}

impl<DB: Backend, S: Sink> fmt::Debug for Dispatcher<DB, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field("idem", &self.idem)
            .field("batch", &self.batch)
            .field("lease", &self.lease_duration())
            .field("max_attempts", &self.max_attempts)
            .field("backoff_base", &self.backoff_base)
            .field("backoff_max", &self.backoff_max)
            .field("poll_interval", &self.poll_interval)
            .field("concurrency", &self.concurrency)
            .field("observe_every", &self.observe_every)
            .finish_non_exhaustive()
    }
}

impl<DB: Backend, S: Sink> Dispatcher<DB, S> {
    /// The default [`Dispatcher::max_attempts`].
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 25;
    /// The default [`Dispatcher::backoff`] base.
    pub const DEFAULT_BACKOFF_BASE: Duration = Duration::from_secs(1);
    /// The default [`Dispatcher::backoff`] cap.
    pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);
    /// The default [`Dispatcher::concurrency`].
    pub const DEFAULT_CONCURRENCY: usize = 8;

    /// A dispatcher of `idem`'s outbox (its pool, its clock) to `sink`, with the defaults:
    /// batches of 32, 8 deliveries at once, a lease chosen from those and the sink's timeout,
    /// 25 attempts with a backoff from 1 s to 15 min (a receiver may be down for hours
    /// before a message is parked as dead), a poll every 500 ms when idle, the outbox's
    /// gauges every 10 s.
    #[must_use]
    pub fn new(idem: &Idem<DB>, sink: S) -> Self {
        Self {
            outbox: idem.outbox(),
            idem: idem.clone(),
            sink,
            batch: 32,
            lease: None,
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            backoff_base: Self::DEFAULT_BACKOFF_BASE,
            backoff_max: Self::DEFAULT_BACKOFF_MAX,
            poll_interval: Duration::from_millis(500),
            concurrency: Self::DEFAULT_CONCURRENCY,
            observe_every: Duration::from_secs(10),
        }
    }

    /// Messages claimed at once (1 to [`Outbox::MAX_BATCH`]). Default 32.
    #[must_use]
    pub fn batch(mut self, batch: u32) -> Self {
        self.batch = batch.clamp(1, Outbox::<DB>::MAX_BATCH);
        self
    }

    /// How long a claim holds its messages: longer than a batch takes to deliver, which is
    /// at worst ⌈batch ÷ concurrency⌉ × the sink's timeout. By default one and a half times
    /// that, and at least 30 s (30 s for a sink that does not say its timeout). A shorter
    /// lease is taken as set, with a warning when the dispatcher starts: a delivery whose
    /// lease has ended before its turn is left to the next claim, never started late.
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// The lease claims take ([`Dispatcher::lease`]).
    #[must_use]
    pub fn lease_duration(&self) -> Duration {
        self.lease_and_worst().0
    }

    /// The lease, and the longest a batch can take when the sink says its timeout.
    fn lease_and_worst(&self) -> (Duration, Option<Duration>) {
        let rounds = u32::try_from((self.batch as usize).div_ceil(self.concurrency.max(1)))
            .unwrap_or(u32::MAX);
        let worst = self.sink.timeout().map(|t| t.saturating_mul(rounds));
        let lease = self.lease.unwrap_or_else(|| {
            worst
                .map_or(Duration::ZERO, |w| w.saturating_add(w / 2))
                .max(Duration::from_secs(30))
        });
        (lease, worst)
    }

    /// Failed deliveries after which a message is parked as dead (at least 1). Default 25.
    #[must_use]
    pub fn max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }

    /// The backoff after a failure: a random delay between zero and
    /// `min(max, base × 2^(attempts − 1))`. Default 1 s and 15 min.
    #[must_use]
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff_base = base;
        self.backoff_max = max.max(base);
        self
    }

    /// The pause before the next claim when the last one found less than a full batch (real
    /// time, not the clock's). Default 500 ms.
    #[must_use]
    pub fn poll_interval(mut self, poll_interval: Duration) -> Self {
        self.poll_interval = poll_interval;
        self
    }

    /// Deliveries of one batch in flight at once (at least 1). Default 8. Messages are
    /// started in `id` order, but with more than one at a time they may arrive in any order
    /// (and a retried one always arrives after later ones): see the
    /// [module documentation](self) on order.
    #[must_use]
    pub fn concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = concurrency.max(1);
        self
    }

    /// How often [`Dispatcher::run`] counts the outbox for its gauges (`idem_outbox_pending`,
    /// `idem_outbox_dead`, `idem_outbox_oldest_pending_age_seconds`; see
    /// [`telemetry`](crate::telemetry)). Counting reads the whole table. Default 10 s.
    #[must_use]
    pub fn observe_every(mut self, every: Duration) -> Self {
        self.observe_every = every;
        self
    }

    /// Counts the outbox and sets its gauges.
    ///
    /// # Errors
    /// When the store fails; no gauge changes then.
    pub async fn observe(&self) -> Result<OutboxCounts, StoreError> {
        let now = self.idem.now_millis();
        let counts = self.outbox.counts(now).await?;
        let age = counts.oldest_pending_ms.map_or(0, |oldest| now - oldest);
        crate::telemetry::outbox::table(counts.pending, counts.dead, age);
        Ok(counts)
    }

    /// The outbox this dispatcher delivers.
    #[must_use]
    pub fn outbox(&self) -> &Outbox<DB> {
        &self.outbox
    }

    /// The sink.
    #[must_use]
    pub fn sink(&self) -> &S {
        &self.sink
    }

    /// Claims one batch of due messages, delivers them and records each outcome.
    ///
    /// # Errors
    /// When the store fails; the batch stops there (deliveries in flight are dropped), and
    /// its messages not recorded yet are claimed again once their lease ends.
    pub async fn run_once(&self) -> Result<DispatchReport, StoreError> {
        let now = self.idem.now_millis();
        let claimed = self
            .outbox
            .claim(now, self.batch, millis(self.lease_duration()))
            .await?;
        let mut report = DispatchReport {
            claimed: claimed.len(),
            ..DispatchReport::default()
        };
        let mut outcomes = stream::iter(claimed)
            .map(|message| self.dispatch(message))
            .buffer_unordered(self.concurrency);
        while let Some(outcome) = outcomes.next().await {
            match outcome? {
                Delivery::Delivered => report.delivered += 1,
                Delivery::Failed => report.failed += 1,
                Delivery::Dead => report.dead += 1,
                Delivery::Skipped => report.skipped += 1,
            }
        }
        Ok(report)
    }

    /// Runs batches until `shutdown` completes: a full batch is followed by the next at
    /// once, anything less by a pause of [`Dispatcher::poll_interval`]. Store errors are
    /// logged (`tracing`, warn) and the loop goes on after the pause.
    ///
    /// `shutdown` is looked at between batches: a batch that started is finished first (its
    /// deliveries are bounded by the sink's timeout).
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let (lease, worst) = self.lease_and_worst();
        if let Some(worst) = worst
            && lease <= worst
        {
            tracing::warn!(
                ?lease,
                ?worst,
                batch = self.batch,
                concurrency = self.concurrency,
                "the outbox lease is shorter than a batch can take (batch ÷ concurrency × the \
                 sink's timeout): messages whose lease ends first are left to the next claim"
            );
        }
        crate::telemetry::outbox::register();
        let mut observed: Option<std::time::Instant> = None;
        loop {
            if shutdown.as_mut().now_or_never().is_some() {
                return;
            }
            if observed.is_none_or(|at| at.elapsed() >= self.observe_every) {
                observed = Some(std::time::Instant::now());
                if let Err(error) = self.observe().await {
                    tracing::warn!(%error, "counting the outbox failed");
                }
            }
            let more = match self.run_once().await {
                Ok(report) => {
                    if report.claimed > 0 {
                        tracing::debug!(
                            claimed = report.claimed,
                            delivered = report.delivered,
                            failed = report.failed,
                            dead = report.dead,
                            skipped = report.skipped,
                            "outbox batch dispatched"
                        );
                    }
                    report.claimed >= self.batch as usize
                }
                Err(error) => {
                    tracing::warn!(%error, "outbox dispatch failed; retrying after the poll interval");
                    false
                }
            };
            if more {
                tokio::task::yield_now().await;
                continue;
            }
            tokio::select! {
                () = shutdown.as_mut() => return,
                () = tokio::time::sleep(self.poll_interval) => {}
            }
        }
    }

    /// Runs the dispatcher on a task of its own ([`Dispatcher::run`]) until
    /// [`DispatcherHandle::shutdown`]. Dropping the handle aborts the task at once, as
    /// [`DispatcherHandle::abort`] does: messages it was delivering are delivered again
    /// once their lease ends. Keep the handle for as long as the dispatcher should run.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    #[must_use = "dropping the handle stops the dispatcher"]
    pub fn spawn(self) -> DispatcherHandle {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            self.run(async move {
                // A dropped sender stops the loop too.
                let _ = stopped.await;
            })
            .await;
        });
        DispatcherHandle {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Delivers one claimed message and records the outcome.
    async fn dispatch(&self, message: Claimed) -> Result<Delivery, StoreError> {
        if self.idem.now_millis() >= message.locked_until_ms {
            return Ok(Delivery::Skipped);
        }
        let in_flight = InFlight::start();
        let result = AssertUnwindSafe(self.sink.deliver(&message))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Err(DeliveryError::transient("the sink panicked")));
        drop(in_flight);
        let now = self.idem.now_millis();
        let error = match result {
            Ok(()) => {
                crate::telemetry::outbox::delivered();
                if !self.outbox.mark_delivered(message.id, now).await? {
                    tracing::debug!(
                        message_id = message.id,
                        "outbox message delivered after its lease ended; another dispatcher recorded it"
                    );
                }
                return Ok(Delivery::Delivered);
            }
            Err(error) => error,
        };
        let attempts = message.attempts.saturating_add(1);
        let dead = error.is_permanent() || attempts >= self.max_attempts;
        let next = now.saturating_add(millis(self.backoff_delay(attempts)));
        self.outbox
            .mark_failed(message.id, now, error.message(), next, dead)
            .await?;
        crate::telemetry::outbox::failed(dead);
        if dead {
            tracing::error!(
                message_id = message.id,
                dedup_id = %message.dedup_id,
                topic = %message.topic,
                attempts,
                permanent = error.is_permanent(),
                %error,
                "outbox message parked as dead; `idem outbox retry` puts it back"
            );
            Ok(Delivery::Dead)
        } else {
            tracing::warn!(
                message_id = message.id,
                topic = %message.topic,
                attempts,
                retry_in_ms = next - now,
                %error,
                "outbox delivery failed; will retry"
            );
            Ok(Delivery::Failed)
        }
    }

    /// The delay before the next attempt after `attempts` failures: uniform in
    /// `[0, min(max, base × 2^(attempts − 1))]`.
    fn backoff_delay(&self, attempts: u32) -> Duration {
        backoff_delay_within(backoff_cap(self.backoff_base, self.backoff_max, attempts))
    }
}

/// One delivery in progress, counted in `idem_outbox_in_flight` until dropped (also when the
/// dispatcher is aborted mid-delivery).
struct InFlight;

impl InFlight {
    fn start() -> Self {
        crate::telemetry::outbox::in_flight(1.0);
        Self
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        crate::telemetry::outbox::in_flight(-1.0);
    }
}

/// A delay drawn uniformly from `[0, cap]`, in whole milliseconds.
fn backoff_delay_within(cap: Duration) -> Duration {
    let cap_ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(fastrand::u64(0..=cap_ms))
}

/// `min(max, base × 2^(attempts − 1))`, without overflow.
fn backoff_cap(base: Duration, max: Duration, attempts: u32) -> Duration {
    if base.is_zero() {
        return Duration::ZERO;
    }
    2_u32
        .checked_pow(attempts.saturating_sub(1))
        .and_then(|factor| base.checked_mul(factor))
        .map_or(max, |cap| cap.min(max))
}

#[derive(Debug, Clone, Copy)]
enum Delivery {
    Delivered,
    Failed,
    Dead,
    Skipped,
}

/// A [`Dispatcher`] running on a task of its own ([`Dispatcher::spawn`]).
///
/// [`DispatcherHandle::shutdown`] stops it gracefully (after the batch in progress);
/// [`DispatcherHandle::abort`], or dropping the handle, stops it at once.
#[derive(Debug)]
pub struct DispatcherHandle {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl DispatcherHandle {
    /// Stops the dispatcher after the batch in progress and waits for it.
    ///
    /// # Errors
    /// When the task panicked or was aborted.
    pub async fn shutdown(mut self) -> Result<(), JoinError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await,
            None => Ok(()),
        }
    }

    /// Stops the dispatcher at once, in the middle of a batch if need be: the messages it
    /// had claimed are delivered again (by any dispatcher) once their lease ends.
    pub fn abort(&self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }

    /// Whether the task has ended.
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(JoinHandle::is_finished)
    }
}

impl Drop for DispatcherHandle {
    fn drop(&mut self) {
        self.abort();
    }
}

#[cfg(feature = "webhook")]
mod webhook;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_cap_doubles_up_to_the_max() {
        let base = Duration::from_secs(1);
        let max = Duration::from_secs(300);
        let caps: Vec<u64> = (1..=11)
            .map(|n| backoff_cap(base, max, n).as_secs())
            .collect();
        assert_eq!(caps, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(backoff_cap(base, max, 0), base);
        assert_eq!(backoff_cap(base, max, u32::MAX), max);
        assert_eq!(backoff_cap(Duration::MAX, Duration::MAX, 40), Duration::MAX);
        assert_eq!(backoff_cap(base, max, 33), max);
        assert_eq!(backoff_cap(Duration::ZERO, max, 40), Duration::ZERO);
    }

    #[test]
    fn backoff_delays_spread_over_the_whole_range() {
        let seen: std::collections::BTreeSet<u64> = (0..10_000)
            .map(|_| {
                let delay = backoff_delay_within(Duration::from_millis(10));
                u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)
            })
            .collect();
        assert_eq!(seen, (0..=10).collect(), "{seen:?}");
        assert_eq!(backoff_delay_within(Duration::ZERO), Duration::ZERO);
        let _ = backoff_delay_within(Duration::MAX);
    }
}
