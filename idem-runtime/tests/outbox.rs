//! The outbox end to end, on every store: messages enqueued in committed transactions are
//! delivered by dispatchers, to a real HTTP receiver through `WebhookSink` or to in-memory
//! sinks; failures back off and die; an aborted dispatcher's messages are delivered by
//! another once the lease ends; two dispatchers share one outbox without delivering a
//! message twice.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use common::{Harness, TestDb};
use idem_runtime::IdempotencyKey;
use idem_runtime::key::KeyFormat;
use idem_runtime::outbox::{
    Claimed, DeliveryError, Dispatcher, OutboxMessage, OutboxStatus, Sink, WebhookSink,
};
use idem_runtime::store::Actor;
use idem_runtime::webhooks::WebhookSecret;
use serde_json::{Value, json};

fn message(id: &str) -> OutboxMessage {
    OutboxMessage::new(id, "order.created", json!({ "order": id, "total": 1990 }))
}

/// Enqueues `messages` in one committed transaction, next to a business write.
async fn commit<DB: TestDb>(h: &Harness<DB>, messages: &[OutboxMessage]) {
    let mut tx = h.idem.pool().begin().await.unwrap();
    DB::write_effect(&mut tx, "order").await;
    for message in messages {
        assert!(h.idem.enqueue(&mut tx, message).await.unwrap());
    }
    tx.commit().await.unwrap();
}

/// Waits (real time, at most 30 s) until `done` holds.
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..3_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

// A webhook receiver: a real axum server on a local port.

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Hook {
    idempotency_key: String,
    content_type: String,
    headers: HeaderMap,
    raw: axum::body::Bytes,
    body: Value,
}

#[derive(Debug, Default)]
struct ReceiverState {
    hooks: Vec<Hook>,
    /// Per dedup id: how many requests fail, and with which status, before one succeeds.
    fail_first: HashMap<String, (usize, u16)>,
    /// Per dedup id: the status every request gets (instead of 200).
    always: HashMap<String, u16>,
}

#[derive(Debug, Clone, Default)]
struct Receiver(Arc<Mutex<ReceiverState>>);

impl Receiver {
    /// Serves on a free local port; returns the receiver and its webhook URL.
    async fn start() -> (Self, String) {
        let receiver = Self::default();
        let app = axum::Router::new()
            .route("/hooks", axum::routing::post(hook))
            .with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (receiver, url)
    }

    fn fail_first(&self, id: &str, times: usize) {
        self.fail_first_with(id, times, 503);
    }

    fn fail_first_with(&self, id: &str, times: usize, status: u16) {
        self.0
            .lock()
            .unwrap()
            .fail_first
            .insert(id.to_owned(), (times, status));
    }

    fn always(&self, id: &str, status: u16) {
        self.0.lock().unwrap().always.insert(id.to_owned(), status);
    }

    fn hooks(&self) -> Vec<Hook> {
        self.0.lock().unwrap().hooks.clone()
    }

    fn hooks_for(&self, id: &str) -> Vec<Hook> {
        self.hooks()
            .into_iter()
            .filter(|h| h.body["id"] == json!(id))
            .collect()
    }
}

async fn hook(
    State(receiver): State<Receiver>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, &'static str) {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let raw = body;
    let body: Value = serde_json::from_slice(&raw).unwrap();
    let id = body["id"].as_str().unwrap().to_owned();
    let mut state = receiver.0.lock().unwrap();
    state.hooks.push(Hook {
        idempotency_key: text("idempotency-key"),
        content_type: text("content-type"),
        headers: headers.clone(),
        raw,
        body,
    });
    if let Some(status) = state.always.get(&id) {
        return (
            StatusCode::from_u16(*status).unwrap(),
            "refused by the test",
        );
    }
    if let Some((left, status)) = state.fail_first.get_mut(&id).filter(|(left, _)| *left > 0) {
        *left -= 1;
        return (StatusCode::from_u16(*status).unwrap(), "down for the test");
    }
    (StatusCode::OK, "")
}

// In-memory sinks.

#[derive(Debug, Default)]
struct Deliveries {
    per_id: BTreeMap<String, usize>,
    per_label: BTreeMap<&'static str, usize>,
    in_flight: HashSet<String>,
    /// Ids delivered by two deliveries at once.
    overlaps: Vec<String>,
}

/// Records every delivery, taking `delay` (real time) over each.
#[derive(Debug, Clone)]
struct Recording {
    label: &'static str,
    delay: Duration,
    log: Arc<Mutex<Deliveries>>,
}

impl Sink for Recording {
    async fn deliver(&self, message: &Claimed) -> Result<(), DeliveryError> {
        {
            let mut log = self.log.lock().unwrap();
            if !log.in_flight.insert(message.dedup_id.clone()) {
                log.overlaps.push(message.dedup_id.clone());
            }
        }
        tokio::time::sleep(self.delay).await;
        let mut log = self.log.lock().unwrap();
        log.in_flight.remove(&message.dedup_id);
        *log.per_id.entry(message.dedup_id.clone()).or_default() += 1;
        *log.per_label.entry(self.label).or_default() += 1;
        Ok(())
    }
}

/// Never returns: says which message it got stuck on.
#[derive(Debug)]
struct Stuck(tokio::sync::mpsc::UnboundedSender<String>);

impl Sink for Stuck {
    async fn deliver(&self, message: &Claimed) -> Result<(), DeliveryError> {
        let _ = self.0.send(message.dedup_id.clone());
        std::future::pending().await
    }
}

/// Keeps every payload delivered.
#[derive(Debug, Clone, Default)]
struct Payloads(Arc<Mutex<Vec<Value>>>);

impl Sink for Payloads {
    async fn deliver(&self, message: &Claimed) -> Result<(), DeliveryError> {
        self.0.lock().unwrap().push(message.payload.clone());
        Ok(())
    }
}

/// With storage keys, payloads are stored sealed and delivered as they were enqueued; a
/// dispatcher without the key leaves them as they are, for one that has it.
async fn sealed_payloads_are_delivered_as_enqueued<DB: TestDb>() {
    let ring = |ids: &[&str]| {
        idem_runtime::store::Keyring::new(ids.iter().map(|id| (*id, [id.as_bytes()[1]; 32])))
            .unwrap()
    };
    let config = idem_runtime::Config::default().storage_keys(ring(&["k1"]));
    let h = Harness::<DB>::with_config(config).await;
    let secret = "Zq7-cardholder-4242-Vw9";
    let sealed = OutboxMessage::new("s-1", "payment.made", json!({ "card": secret }));
    commit(&h, &[sealed]).await;
    let mut conn = h.idem.pool().acquire().await.unwrap();
    let row = DB::fetch_optional(&mut conn, "SELECT payload FROM idempotency_outbox", &[]).await;
    let stored = DB::text(&row.unwrap().unwrap(), 0).unwrap();
    drop(conn);
    assert_eq!(
        idem_runtime::store::Sealed::key_of(stored.as_bytes()),
        Some("k1")
    );
    assert!(!stored.contains(secret));

    let lease = Duration::from_secs(30);
    let payloads = Payloads::default();
    let lacking = h
        .reopen(idem_runtime::Config::default().storage_keys(ring(&["k2"])))
        .await;
    let report = Dispatcher::new(&lacking, payloads.clone())
        .lease(lease)
        .run_once()
        .await;
    assert_eq!(report.unwrap().delivered, 0);
    let row = lacking.outbox().get("s-1").await.unwrap().unwrap();
    assert_eq!(
        (row.status, row.payload.clone()),
        (OutboxStatus::Pending, Value::Null)
    );
    let sealing = row.sealed.unwrap();
    assert_eq!((sealing.key.as_str(), sealing.opened), ("k1", false));

    h.advance(lease);
    let rotated = h
        .reopen(idem_runtime::Config::default().storage_keys(ring(&["k2", "k1"])))
        .await;
    let report = Dispatcher::new(&rotated, payloads.clone())
        .run_once()
        .await
        .unwrap();
    assert_eq!(report.delivered, 1, "{report:?}");
    assert_eq!(*payloads.0.lock().unwrap(), [json!({ "card": secret })]);
    let row = rotated.outbox().get("s-1").await.unwrap().unwrap();
    assert_eq!(row.payload, json!({ "card": secret }));
    assert_eq!(row.status, OutboxStatus::Delivered);
}

// The cases.

async fn committed_messages_are_delivered_as_webhooks<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let (receiver, url) = Receiver::start().await;
    commit(
        &h,
        &[message("order-1/created"), message("order-2/created")],
    )
    .await;
    // Rolled back: never delivered.
    {
        let mut tx = h.idem.pool().begin().await.unwrap();
        assert!(
            h.idem
                .enqueue(&mut tx, &message("order-3/created"))
                .await
                .unwrap()
        );
        tx.rollback().await.unwrap();
    }
    // A repeated dedup id is not enqueued again.
    {
        let mut tx = h.idem.pool().begin().await.unwrap();
        assert!(
            !h.idem
                .enqueue(&mut tx, &message("order-1/created"))
                .await
                .unwrap()
        );
        tx.commit().await.unwrap();
    }

    let dispatcher = Dispatcher::new(&h.idem, WebhookSink::new(url.as_str()).unwrap());
    let report = dispatcher.run_once().await.unwrap();
    assert_eq!((report.claimed, report.delivered), (2, 2), "{report:?}");
    assert_eq!(dispatcher.run_once().await.unwrap().claimed, 0);

    // Delivered several at a time: in no particular order.
    assert_eq!(receiver.hooks().len(), 2);
    let hooks = receiver.hooks_for("order-1/created");
    assert_eq!(hooks.len(), 1);
    let first = &hooks[0];
    assert_eq!(first.content_type, "application/json");
    assert_eq!(first.idempotency_key, "\"order-1/created\"");
    let key = IdempotencyKey::parse(first.idempotency_key.as_bytes(), KeyFormat::Strict).unwrap();
    assert_eq!(key.as_str(), "order-1/created");
    assert_eq!(
        first.body,
        json!({
            "id": "order-1/created",
            "type": "order.created",
            "data": { "order": "order-1/created", "total": 1990 },
        })
    );
    assert_eq!(receiver.hooks_for("order-2/created").len(), 1);

    let row = h
        .idem
        .outbox()
        .get("order-1/created")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, OutboxStatus::Delivered);
    assert_eq!(row.delivered_at_ms, Some(h.idem.now_millis()));
    assert_eq!(row.attempts, 0);
    assert!(
        h.idem
            .outbox()
            .get("order-3/created")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(h.effects().await, 1);

    // A spawned dispatcher picks up what commits later, and shuts down cleanly.
    let handle = Dispatcher::new(&h.idem, WebhookSink::new(url.as_str()).unwrap())
        .poll_interval(Duration::from_millis(20))
        .spawn();
    commit(&h, &[message("order-4/created")]).await;
    eventually("the spawned dispatcher's delivery", || {
        receiver.hooks_for("order-4/created").len() == 1
    })
    .await;
    handle.shutdown().await.unwrap();
    let counts = h.idem.outbox().counts(h.idem.now_millis()).await.unwrap();
    assert_eq!((counts.delivered, counts.pending), (3, 0));
}

async fn failures_are_retried_with_growing_backoff<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let (receiver, url) = Receiver::start().await;
    receiver.fail_first("flaky", 3);
    commit(&h, &[message("flaky")]).await;
    let base = Duration::from_secs(1);
    let dispatcher = Dispatcher::new(&h.idem, WebhookSink::new(url.as_str()).unwrap())
        .backoff(base, Duration::from_secs(60));
    let outbox = h.idem.outbox();

    let mut previous_next = 0;
    for attempt in 1..=3_u32 {
        let now = h.idem.now_millis();
        let report = dispatcher.run_once().await.unwrap();
        assert_eq!((report.claimed, report.failed), (1, 1), "{report:?}");
        let row = outbox.get("flaky").await.unwrap().unwrap();
        assert_eq!(row.status, OutboxStatus::Pending);
        assert_eq!(row.attempts, attempt);
        assert_eq!(row.locked_until_ms, None);
        let error = row.last_error.unwrap();
        assert!(error.starts_with("HTTP 503"), "{error}");
        assert!(error.contains("down for the test"), "{error}");
        // Full jitter: somewhere in [now, now + base × 2^(attempt − 1)].
        let cap = 1_000 * (1_i64 << (attempt - 1));
        assert!(
            (now..=now + cap).contains(&row.next_attempt_at_ms),
            "attempt {attempt}: due at +{} ms, cap {cap} ms",
            row.next_attempt_at_ms - now
        );
        assert!(row.next_attempt_at_ms >= previous_next);
        previous_next = row.next_attempt_at_ms;
        // Not due before then.
        if row.next_attempt_at_ms > now {
            assert_eq!(dispatcher.run_once().await.unwrap().claimed, 0);
        }
        h.advance(Duration::from_millis(u64::try_from(cap).unwrap()));
    }
    let report = dispatcher.run_once().await.unwrap();
    assert_eq!((report.claimed, report.delivered), (1, 1), "{report:?}");
    let row = outbox.get("flaky").await.unwrap().unwrap();
    assert_eq!(row.status, OutboxStatus::Delivered);
    assert_eq!(row.attempts, 3);
    // Every attempt carried the same key.
    let hooks = receiver.hooks_for("flaky");
    assert_eq!(hooks.len(), 4);
    assert!(hooks.iter().all(|h| h.idempotency_key == "\"flaky\""));
}

async fn always_failing_messages_die<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let (receiver, url) = Receiver::start().await;
    receiver.always("down", 500);
    receiver.always("refused", 422);
    receiver.always("busy", 429);
    commit(&h, &[message("down"), message("refused"), message("busy")]).await;
    let sink = WebhookSink::new(url.as_str())
        .unwrap()
        .permanent_client_errors(true);
    let dispatcher = Dispatcher::new(&h.idem, sink)
        .max_attempts(3)
        .backoff(Duration::from_millis(100), Duration::from_millis(100));
    let outbox = h.idem.outbox();

    // With `permanent_client_errors`, a 422 is permanent: dead at once. 500 and 429 are
    // retried.
    let report = dispatcher.run_once().await.unwrap();
    assert_eq!((report.failed, report.dead), (2, 1), "{report:?}");
    let refused = outbox.get("refused").await.unwrap().unwrap();
    assert_eq!(refused.status, OutboxStatus::Dead);
    assert_eq!(refused.attempts, 1);
    assert!(refused.last_error.unwrap().starts_with("HTTP 422"));

    for _ in 0..2 {
        h.advance(Duration::from_secs(1));
        dispatcher.run_once().await.unwrap();
    }
    for id in ["down", "busy"] {
        let row = outbox.get(id).await.unwrap().unwrap();
        assert_eq!(row.status, OutboxStatus::Dead, "{id}");
        assert_eq!(row.attempts, 3, "{id}");
        assert_eq!(receiver.hooks_for(id).len(), 3, "{id}");
    }
    h.advance(Duration::from_secs(3_600));
    assert_eq!(dispatcher.run_once().await.unwrap().claimed, 0);
    let dead = outbox.list(Some(OutboxStatus::Dead), 10).await.unwrap();
    assert_eq!(dead.len(), 3);
    assert_eq!(outbox.counts(h.idem.now_millis()).await.unwrap().dead, 3);

    // Once the receiver is fixed, an operator puts a dead message back.
    receiver.0.lock().unwrap().always.clear();
    let down = outbox.get("down").await.unwrap().unwrap();
    let by = Actor::new("ops").reason("the receiver is fixed");
    let retried = outbox
        .retry(down.id, h.idem.now_millis(), &by)
        .await
        .unwrap();
    assert_eq!(
        (retried.status, retried.attempts),
        (OutboxStatus::Pending, 0)
    );
    let report = dispatcher.run_once().await.unwrap();
    assert_eq!((report.claimed, report.delivered), (1, 1), "{report:?}");
    assert_eq!(
        outbox.get("down").await.unwrap().unwrap().status,
        OutboxStatus::Delivered
    );
}

async fn an_aborted_dispatcher_leaves_its_batch_to_the_next<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let ids: Vec<String> = (0..5).map(|i| format!("m-{i}")).collect();
    let messages: Vec<OutboxMessage> = ids.iter().map(|id| message(id)).collect();
    commit(&h, &messages).await;

    let lease = Duration::from_secs(30);
    let (started, mut stuck_on) = tokio::sync::mpsc::unbounded_channel();
    let handle = Dispatcher::new(&h.idem, Stuck(started))
        .lease(lease)
        .batch(10)
        .spawn();
    assert_eq!(stuck_on.recv().await.unwrap(), "m-0");
    handle.abort();
    eventually("the aborted task to end", || handle.is_finished()).await;
    drop(handle);

    // The whole batch is leased to the dead dispatcher.
    let pending = h
        .idem
        .outbox()
        .list(Some(OutboxStatus::Pending), 10)
        .await
        .unwrap();
    assert_eq!(pending.len(), 5);
    let leased_until = h.idem.now_millis() + i64::try_from(lease.as_millis()).unwrap();
    assert!(
        pending
            .iter()
            .all(|row| row.locked_until_ms == Some(leased_until))
    );

    let log = Arc::new(Mutex::new(Deliveries::default()));
    let next = Dispatcher::new(
        &h.reopen(idem_runtime::Config::default()).await,
        Recording {
            label: "next",
            delay: Duration::ZERO,
            log: Arc::clone(&log),
        },
    );
    // Nothing until the lease ends.
    assert_eq!(next.run_once().await.unwrap().claimed, 0);
    h.advance(lease - Duration::from_millis(1));
    assert_eq!(next.run_once().await.unwrap().claimed, 0);
    h.advance(Duration::from_millis(1));
    let report = next.run_once().await.unwrap();
    assert_eq!((report.claimed, report.delivered), (5, 5), "{report:?}");
    let delivered: Vec<String> = log.lock().unwrap().per_id.keys().cloned().collect();
    assert_eq!(delivered, ids);
    assert_eq!(
        h.idem
            .outbox()
            .counts(h.idem.now_millis())
            .await
            .unwrap()
            .delivered,
        5
    );
}

async fn two_dispatchers_deliver_each_message_once<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let messages: Vec<OutboxMessage> = (0..200).map(|i| message(&format!("m-{i:03}"))).collect();
    commit(&h, &messages).await;

    let log = Arc::new(Mutex::new(Deliveries::default()));
    let other = h.reopen(idem_runtime::Config::default()).await;
    let mut handles = Vec::new();
    for (label, idem) in [("a", &h.idem), ("b", &other)] {
        let sink = Recording {
            label,
            delay: Duration::from_millis(2),
            log: Arc::clone(&log),
        };
        handles.push(
            Dispatcher::new(idem, sink)
                .batch(8)
                // The clock does not move: leases never end, so no message may be
                // delivered twice.
                .lease(Duration::from_secs(600))
                .poll_interval(Duration::from_millis(10))
                .spawn(),
        );
    }
    eventually("200 deliveries", || {
        log.lock().unwrap().per_id.values().sum::<usize>() >= 200
    })
    .await;
    for handle in handles {
        handle.shutdown().await.unwrap();
    }

    {
        let log = log.lock().unwrap();
        assert_eq!(log.per_id.len(), 200);
        let repeated: Vec<_> = log.per_id.iter().filter(|(_, n)| **n != 1).collect();
        assert!(
            repeated.is_empty(),
            "delivered more than once: {repeated:?}"
        );
        assert!(
            log.overlaps.is_empty(),
            "delivered concurrently: {:?}",
            log.overlaps
        );
        assert_eq!(
            log.per_label.len(),
            2,
            "one dispatcher did everything: {:?}",
            log.per_label
        );
    }
    let counts = h.idem.outbox().counts(h.idem.now_millis()).await.unwrap();
    assert_eq!((counts.delivered, counts.pending), (200, 0));
}

async fn every_failure_is_retried_and_deliveries_are_signed<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let (receiver, url) = Receiver::start().await;
    // A receiver being redeployed: 404, 410 and 400 for a while, then up.
    receiver.fail_first_with("gone-for-a-while", 3, 404);
    receiver.fail_first_with("misrouted", 2, 410);
    receiver.fail_first_with("odd", 1, 400);
    commit(
        &h,
        &[
            message("gone-for-a-while"),
            message("misrouted"),
            message("odd"),
        ],
    )
    .await;
    let secret = WebhookSecret::new("whsec_aWRlbS1leGFtcGxlLXNlY3JldA==").unwrap();
    let sink = WebhookSink::new(url.as_str())
        .unwrap()
        .signing_secret(secret.clone());
    let dispatcher = Dispatcher::new(&h.idem, sink);
    for _ in 0..4 {
        let report = dispatcher.run_once().await.unwrap();
        assert_eq!(report.dead, 0, "{report:?}");
        h.advance(Dispatcher::<DB, WebhookSink>::DEFAULT_BACKOFF_MAX);
    }
    let outbox = h.idem.outbox();
    for (id, failures) in [("gone-for-a-while", 3), ("misrouted", 2), ("odd", 1)] {
        let row = outbox.get(id).await.unwrap().unwrap();
        assert_eq!(row.status, OutboxStatus::Delivered, "{id}");
        assert_eq!(row.attempts, failures, "{id}");
        assert_eq!(receiver.hooks_for(id).len(), failures as usize + 1, "{id}");
    }

    // Every delivery carries Standard Webhooks headers: the dedup id, the time of the
    // attempt, a signature that verifies over the body as sent.
    // The sink stamps deliveries with the wall clock, as receivers check them.
    #[allow(clippy::disallowed_methods)]
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for hook in receiver.hooks() {
        assert_eq!(
            hook.headers["webhook-id"],
            hook.body["id"].as_str().unwrap()
        );
        let sent: u64 = hook.headers["webhook-timestamp"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(sent.abs_diff(now) < 60, "{sent} vs {now}");
        assert!(
            hook.headers["webhook-signature"]
                .to_str()
                .unwrap()
                .starts_with("v1,")
        );
        assert_eq!(secret.verify(&hook.headers, &hook.raw), Ok(()));
        let other = WebhookSecret::new("whsec_b3RoZXI=").unwrap();
        assert!(other.verify(&hook.headers, &hook.raw).is_err());
    }

    // A refused connection is retried too, and says why it failed.
    commit(&h, &[message("nobody-home")]).await;
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nowhere = format!("http://{}/hooks", closed.local_addr().unwrap());
    drop(closed);
    let dispatcher = Dispatcher::new(&h.idem, WebhookSink::new(nowhere.as_str()).unwrap());
    let report = dispatcher.run_once().await.unwrap();
    assert_eq!((report.failed, report.dead), (1, 0), "{report:?}");
    let row = outbox.get("nobody-home").await.unwrap().unwrap();
    let error = row.last_error.unwrap();
    assert!(
        error.contains("error sending request") && error.len() > "error sending request".len(),
        "the cause is kept: {error}"
    );
    assert!(!error.contains(&nowhere), "no URL in errors: {error}");
}

/// Holds every delivery until `parties` are in flight at once.
struct Together(Arc<tokio::sync::Barrier>);

impl Sink for Together {
    async fn deliver(&self, _: &Claimed) -> Result<(), DeliveryError> {
        self.0.wait().await;
        Ok(())
    }
}

async fn deliveries_run_concurrently<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let messages: Vec<OutboxMessage> = (0..8).map(|i| message(&format!("c-{i}"))).collect();
    commit(&h, &messages).await;
    // Four at a time: the barrier of four opens only if four deliveries run together, so
    // one at a time would never finish.
    let dispatcher =
        Dispatcher::new(&h.idem, Together(Arc::new(tokio::sync::Barrier::new(4)))).concurrency(4);
    let report = tokio::time::timeout(Duration::from_secs(30), dispatcher.run_once())
        .await
        .expect("four deliveries in flight at once")
        .unwrap();
    assert_eq!((report.claimed, report.delivered), (8, 8), "{report:?}");

    // The default lease covers a batch of slow deliveries: ⌈32 ÷ 8⌉ × 10 s, and a half.
    let sink = WebhookSink::new("http://127.0.0.1:9/hooks").unwrap();
    assert_eq!(
        Dispatcher::new(&h.idem, sink.clone()).lease_duration(),
        Duration::from_secs(60)
    );
    assert_eq!(
        Dispatcher::new(&h.idem, sink.clone())
            .concurrency(1)
            .batch(10)
            .lease_duration(),
        Duration::from_secs(150)
    );
    assert_eq!(
        Dispatcher::new(&h.idem, sink)
            .lease(Duration::from_secs(5))
            .lease_duration(),
        Duration::from_secs(5)
    );
}

idem_testkit::on_every_store!(
    sealed_payloads_are_delivered_as_enqueued,
    every_failure_is_retried_and_deliveries_are_signed,
    deliveries_run_concurrently,
    committed_messages_are_delivered_as_webhooks,
    failures_are_retried_with_growing_backoff,
    always_failing_messages_die,
    an_aborted_dispatcher_leaves_its_batch_to_the_next,
    two_dispatchers_deliver_each_message_once,
);
