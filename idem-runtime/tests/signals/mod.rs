//! Signals that order concurrent executions in tests, instead of sleeping: what the
//! executions themselves show — the runtime's `key looked up` event, and on PostgreSQL and
//! MySQL the sessions waiting for the key's lock (where an execution may take the key's lock
//! before it looks the key up, that wait is the only sign).
#![allow(dead_code, clippy::unwrap_used)]

use std::future::Future;
use std::time::{Duration, Instant};

use idem_runtime::sqlx::{self, PgPool};
use tracing::field::{Field, Visit};
use tracing::instrument::{WithDispatch, WithSubscriber as _};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt as _};

/// How long a signal is waited for before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// The lookups of the executions it watches: what each `key looked up` event (the DEBUG
/// event after step 1 of the protocol, documented in `idem_runtime::telemetry`) found —
/// `none`, `completed`, `processing` or `expired` — in the order they happened, with `lock`
/// for each `key lock taken` or `key lock not taken` between them.
#[derive(Clone)]
pub struct Lookups(tokio::sync::watch::Sender<Vec<String>>);

impl Default for Lookups {
    fn default() -> Self {
        Self(tokio::sync::watch::Sender::new(Vec::new()))
    }
}

impl Lookups {
    /// `execution`, with its lookups counted here (a subscriber of its own while it is
    /// polled: other tests' executions are not seen).
    pub fn watch<F: Future>(&self, execution: F) -> WithDispatch<F> {
        execution.with_subscriber(tracing_subscriber::registry().with(self.clone()))
    }

    /// What the watched executions found so far, in order (`lock` for each try of the
    /// key's lock).
    pub fn seen(&self) -> Vec<String> {
        self.0.borrow().clone()
    }

    /// Waits until `n` of the watched lookups found `found`.
    pub async fn until(&self, found: &str, n: usize) {
        let mut seen = self.0.subscribe();
        let waited = tokio::time::timeout(
            DEADLINE,
            seen.wait_for(|all| all.iter().filter(|f| *f == found).count() >= n),
        )
        .await;
        assert!(
            waited.is_ok(),
            "not within {DEADLINE:?}: {n} lookups that found `{found}` (seen: {:?})",
            *self.0.borrow()
        );
    }
}

/// The fields of a `key looked up` event.
#[derive(Default)]
struct LookedUp {
    message: String,
    found: Option<String>,
}

impl Visit for LookedUp {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "found" {
            self.found = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "found" => self.found = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

impl<S: Subscriber> Layer<S> for Lookups {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = LookedUp::default();
        event.record(&mut fields);
        if fields.message == "key looked up"
            && let Some(found) = fields.found
        {
            self.0.send_modify(|all| all.push(found));
        } else if fields.message.starts_with("key lock ") {
            self.0.send_modify(|all| all.push("lock".to_owned()));
        }
    }
}

/// Waits until `n` executions of one key, on a database `backend` (`sqlx::Database::NAME`)
/// at `url`, met the key new while one of them holds it. On PostgreSQL and MySQL the key's
/// lock may come before the lookup (`Backend::LOCK_FIRST`): the `n - 1` others wait for the
/// lock. On SQLite all `n` looked the key up and found nothing (`lookups` watches them).
pub async fn until_all_met_it_new(backend: &str, url: &str, lookups: &Lookups, n: usize) {
    match backend {
        "PostgreSQL" => {
            until_advisory_lock_waits(url, n - 1).await;
        }
        #[cfg(feature = "mysql")]
        "MySQL" => until_row_lock_waits(url, n - 1).await,
        _ => lookups.until("none", n).await,
    }
}

/// Waits until at least `n` sessions of this PostgreSQL test (the `application_name` of
/// `url`) wait for an advisory lock — idem's key locks are advisory locks. Returns their
/// process ids.
pub async fn until_advisory_lock_waits(url: &str, n: usize) -> Vec<i32> {
    // (Directly: a transaction pooler's sessions are not the test's.)
    let pool = PgPool::connect(&idem_testkit::harness::direct(url))
        .await
        .unwrap();
    let until = Instant::now() + DEADLINE;
    loop {
        let waiting: Vec<i32> = sqlx::query_scalar(
            "SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
             WHERE l.locktype = 'advisory' AND NOT l.granted \
             AND a.application_name = current_setting('application_name')",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        if waiting.len() >= n {
            pool.close().await;
            return waiting;
        }
        assert!(
            Instant::now() < until,
            "not within {DEADLINE:?}: {n} sessions waiting for an advisory lock ({} are)",
            waiting.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until at least `n` sessions of this MySQL test (the database of `url`) wait in the
/// key's lock: they are executing its upsert of `idempotency_locks`, which returns at once
/// unless another transaction holds the row.
#[cfg(feature = "mysql")]
pub async fn until_row_lock_waits(url: &str, n: usize) {
    let pool = sqlx::MySqlPool::connect(url).await.unwrap();
    let until = Instant::now() + DEADLINE;
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM information_schema.processlist \
             WHERE db = DATABASE() AND info LIKE '%INTO idempotency_locks%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if usize::try_from(waiting).unwrap_or(0) >= n {
            pool.close().await;
            return;
        }
        assert!(
            Instant::now() < until,
            "not within {DEADLINE:?}: {n} sessions waiting for the key's lock row ({waiting} are)"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `check` until it holds, for at most [`DEADLINE`]; fails the test with `what`
/// otherwise.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let until = Instant::now() + DEADLINE;
    while !check().await {
        assert!(Instant::now() < until, "not within {DEADLINE:?}: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
