//! Webhooks both ways, against real processes on every store: the `fake-provider` sends a
//! signed `charge.succeeded` for each charge (and sends it again, some copies at once), and
//! `payments` applies each event once (`POST /webhooks/provider`), under one identity, and
//! keeps a signed event that does not read; `payments`' outbox delivers its
//! `payment.succeeded` events through a receiver that refuses them for a while.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Client, Db, Kind, Reply, Server, eventually};
use idem_runtime::sqlx;
use idem_runtime::store::{Backend, Inbox, InboxEvent, InboxStatus, Keyring};
use idem_runtime::telemetry::key_hash;
use idem_runtime::webhooks::WebhookSecret;
use serde_json::{Value, json};

/// The secret both examples default to.
const SECRET: &str = "whsec_aWRlbS1leGFtcGxlLXNlY3JldA==";

/// A storage key (`IDEM_STORAGE_KEYS`), for an inbox whose bodies are sealed.
const STORAGE_KEYS: &str = "k1:BwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSY=";

/// The receiver's source in the inbox.
const SOURCE: &str = "provider_event:v1";

/// A port nothing listens on yet, for a server whose address another must know first.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// The `fake-provider`, sending its events to `payments_port`, and `payments`, listening
/// there and sending its own to the provider's receiver.
struct Pair {
    provider: Server,
    payments: Server,
    http: reqwest::Client,
}

impl Pair {
    fn start(db: &Db) -> Self {
        Self::start_with(db, "1h")
    }

    /// [`Pair::start`] with `PAYMENTS_UNMATCHED_AFTER=unmatched_after`.
    fn start_with(db: &Db, unmatched_after: &str) -> Self {
        Self::start_env(db, unmatched_after, &[])
    }

    /// [`Pair::start_with`], `payments` with `env` too.
    fn start_env(db: &Db, unmatched_after: &str, env: &[(&str, &str)]) -> Self {
        let port = free_port();
        let provider = Server::spawn(
            env!("CARGO_BIN_EXE_fake-provider"),
            "fake-provider",
            &db.dir,
            &[(
                "PROVIDER_WEBHOOK_URL",
                &format!("http://127.0.0.1:{port}/webhooks/provider"),
            )],
        );
        let (listen, hooks) = (
            format!("127.0.0.1:{port}"),
            format!("{}/webhooks", provider.base),
        );
        let mut vars = vec![
            ("DATABASE_URL", db.url.as_str()),
            ("LISTEN_ADDR", &listen),
            ("PROVIDER_URL", &provider.base),
            ("WEBHOOK_URL", &hooks),
            ("PAYMENTS_UNMATCHED_AFTER", unmatched_after),
        ];
        vars.extend_from_slice(env);
        let payments = Server::spawn(env!("CARGO_BIN_EXE_payments"), "payments", &db.dir, &vars);
        Self {
            provider,
            payments,
            http: reqwest::Client::new(),
        }
    }

    async fn control(&self, settings: Value) {
        let response = self
            .http
            .post(format!("{}/control", self.provider.base))
            .json(&settings)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }

    async fn get(&self, url: String) -> Value {
        self.http
            .get(url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    async fn stats(&self) -> Value {
        self.get(format!("{}/stats", self.provider.base)).await
    }

    /// The payment ids of the `payment.succeeded` deliveries the provider accepted.
    async fn payment_events(&self) -> HashSet<String> {
        let events = self.get(format!("{}/events", self.provider.base)).await;
        events
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["body"]["type"] == "payment.succeeded")
            .map(|e| e["body"]["data"]["payment_id"].as_str().unwrap().to_owned())
            .collect()
    }

    async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.payments.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Pays `n` times, each under its own key; the payment ids.
    async fn pay(&self, n: usize) -> Vec<String> {
        let client = Client::new(&self.payments);
        let mut ids = Vec::new();
        for i in 0..n {
            let body = format!(
                r#"{{"amount": {}, "currency": "EUR", "customer": "c-{i}"}}"#,
                100 + i
            );
            let key = format!("pay-{i}-{}", uuid::Uuid::new_v4());
            let reply = client
                .try_post_to("/payments", Some("acme"), Some(&key), &body)
                .await
                .unwrap();
            assert_eq!(reply.status, 201, "{}", reply.body);
            ids.push(reply.json()["id"].as_str().unwrap().to_owned());
        }
        ids
    }

    /// Posts one provider event as the provider would, signed with `secret` at `timestamp`
    /// (`None`: unsigned).
    async fn deliver(&self, id: &str, body: &Value, signed: Option<(&str, i64)>) -> Reply {
        let body = body.to_string();
        let mut request = self
            .http
            .post(format!("{}/webhooks/provider", self.payments.base))
            .header("content-type", "application/json")
            .header("webhook-id", id);
        if let Some((secret, timestamp)) = signed {
            let signature = WebhookSecret::new(secret)
                .unwrap()
                .sign(id, timestamp, body.as_bytes())
                .unwrap();
            request = request
                .header("webhook-timestamp", timestamp.to_string())
                .header("webhook-signature", signature);
        }
        let response = request.body(body).send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        Reply {
            status,
            headers,
            body: response.text().await.unwrap(),
        }
    }
}

/// The wall clock: what the server checks a delivery's timestamp against.
#[allow(clippy::disallowed_methods)]
fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

async fn settled(db: &Db, times: i64) -> i64 {
    db.scalar(&format!(
        "SELECT count(*) FROM payments WHERE settlements = {times}"
    ))
    .await
}

/// Every event delivered several times, some copies at once, some before the payment
/// naming their charge is committed: each payment is settled exactly once.
async fn provider_events_apply_once<DB: Backend>() {
    let kind = Kind::of::<DB>();
    let db = Db::fresh(kind).await;
    let pair = Pair::start(&db);
    pair.control(json!({ "webhook_duplicate_rate": 1.0 })).await;
    let paid = 12;
    pair.pay(paid).await;

    eventually(Duration::from_secs(60), "every payment settled", || async {
        settled(&db, 1).await == i64::try_from(paid).unwrap()
    })
    .await;
    // Until the provider stops sending (every copy of every event answered 2xx), nothing
    // may be applied twice.
    let until = Instant::now() + Duration::from_secs(60);
    let mut last = -1;
    loop {
        let sent = pair.stats().await["webhooks_sent"].as_i64().unwrap();
        if sent == last {
            break;
        }
        assert!(Instant::now() < until, "the provider never stops sending");
        last = sent;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let stats = pair.stats().await;
    assert_eq!(stats["webhook_events"], paid, "{stats}");
    assert_eq!(stats["webhooks_acknowledged"], paid, "{stats}");
    assert!(
        stats["webhooks_sent"].as_u64().unwrap() >= 2 * paid as u64,
        "every event went out twice or more: {stats}"
    );
    assert_eq!(settled(&db, 1).await, i64::try_from(paid).unwrap());
    assert_eq!(
        db.scalar("SELECT count(*) FROM payments").await,
        i64::try_from(paid).unwrap()
    );
}

/// Only signed, fresh deliveries are applied; a repeated event id replays; an event whose
/// charge no payment names yet is not recorded, so that it is delivered again.
async fn signatures_and_repeats<DB: Backend>() {
    let kind = Kind::of::<DB>();
    let db = Db::fresh(kind).await;
    let pair = Pair::start(&db);
    pair.pay(1).await;
    eventually(Duration::from_secs(30), "the payment settled", || async {
        settled(&db, 1).await == 1
    })
    .await;
    assert_eq!(pair.stats().await["webhook_events"], 1);
    let charge = db.text("SELECT charge_id FROM payments").await;
    let event = |id: &str| {
        json!({
            "id": id,
            "type": "charge.succeeded",
            "data": { "charge_id": charge, "amount": 100, "currency": "EUR" },
        })
    };

    // Forged, stale, unsigned: 401, nothing applied, nothing stored.
    let forged = pair
        .deliver(
            "evt_forged",
            &event("evt_forged"),
            Some(("whsec_b3RoZXI=", now())),
        )
        .await;
    let problem = forged.assert_problem(401);
    assert_eq!(problem["type"], "urn:idem:problem:webhook-unverified");
    pair.deliver("evt_old", &event("evt_old"), Some((SECRET, now() - 600)))
        .await
        .assert_problem(401);
    pair.deliver("evt_unsigned", &event("evt_unsigned"), None)
        .await
        .assert_problem(401);
    // Signed for another body: 401.
    let mut tampered = pair
        .http
        .post(format!("{}/webhooks/provider", pair.payments.base))
        .header("content-type", "application/json")
        .header("webhook-id", "evt_tampered");
    let ts = now();
    let signature = WebhookSecret::new(SECRET)
        .unwrap()
        .sign(
            "evt_tampered",
            ts,
            event("evt_tampered").to_string().as_bytes(),
        )
        .unwrap();
    tampered = tampered
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", signature);
    let mut changed = event("evt_tampered");
    changed["data"]["amount"] = json!(1);
    let response = tampered.body(changed.to_string()).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(settled(&db, 1).await, 1);
    assert_eq!(
        db.scalar("SELECT count(*) FROM idempotency_keys WHERE operation = 'provider_event:v1'")
            .await,
        1,
        "only the provider's own event is recorded"
    );

    // A new event for the same charge: applied once; its repeat replays.
    let first = pair
        .deliver("evt_new", &event("evt_new"), Some((SECRET, now())))
        .await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.json()["settlements"], 2);
    let again = pair
        .deliver("evt_new", &event("evt_new"), Some((SECRET, now())))
        .await;
    assert_eq!(again.status, 200);
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    assert_eq!(settled(&db, 2).await, 1);
    // The same id with another body: refused, nothing applied.
    let mut other = event("evt_new");
    other["data"]["amount"] = json!(999);
    pair.deliver("evt_new", &other, Some((SECRET, now())))
        .await
        .assert_problem(422);
    assert_eq!(settled(&db, 2).await, 1);

    // An event whose charge no payment names (yet): 503, not recorded, so a redelivery
    // runs again.
    let mut early = event("evt_early");
    early["data"]["charge_id"] = json!("ch_not_yet");
    for _ in 0..2 {
        let reply = pair
            .deliver("evt_early", &early, Some((SECRET, now())))
            .await;
        let problem = reply.assert_problem(503);
        assert_eq!(problem["type"], "urn:idem:example:charge-not-recorded-yet");
        assert_eq!(reply.header("retry-after"), Some("1"));
        assert!(!reply.replayed());
    }
    assert_eq!(
        db.scalar("SELECT count(*) FROM idempotency_keys WHERE idempotency_key = 'evt_early'")
            .await,
        0
    );
    // Its deliveries are noted in the inbox, waiting.
    let db = &db;
    eventually(
        Duration::from_secs(5),
        "evt_early noted as waiting",
        || async move {
            db.scalar(
                "SELECT count(*) FROM idempotency_inbox \
             WHERE event_id = 'evt_early' AND status = 'waiting'",
            )
            .await
                == 1
        },
    )
    .await;
}

/// An event whose charge no payment names is answered `503` for `PAYMENTS_UNMATCHED_AFTER`
/// (2 s here) after its first delivery, then acknowledged (`200`, `"unmatched": true`,
/// stored and replayed like any answer) and kept in the inbox as unmatched, never dropped.
/// An event that waited there and is applied after all leaves it.
async fn unmatched_events_are_kept<DB: Backend>() {
    let db = Db::fresh(Kind::of::<DB>()).await;
    let pair = Pair::start_with(&db, "2s");
    let event = |id: &str, charge: &str| {
        json!({
            "id": id,
            "type": "charge.succeeded",
            "data": { "charge_id": charge, "amount": 100, "currency": "EUR" },
        })
    };
    // A webhook-id of 300 characters: kept, as its key is, by its digest.
    let orphan_id = format!("evt_orphan_{}", "o".repeat(289));
    let orphan = event(&orphan_id, "ch_nobody");
    let first = std::time::Instant::now();
    let acknowledged = loop {
        let reply = pair
            .deliver(&orphan_id, &orphan, Some((SECRET, now())))
            .await;
        if reply.status == 200 {
            break reply;
        }
        let problem = reply.assert_problem(503);
        assert_eq!(problem["type"], "urn:idem:example:charge-not-recorded-yet");
        assert!(
            first.elapsed() < Duration::from_secs(15),
            "never acknowledged"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(
        first.elapsed() >= Duration::from_millis(1500),
        "acknowledged after {:?}",
        first.elapsed()
    );
    let applied = acknowledged.json();
    assert_eq!(applied["unmatched"], true, "{applied}");
    assert_eq!(applied["payment_id"], Value::Null);
    assert_eq!(
        db.text("SELECT status FROM idempotency_inbox WHERE event_id LIKE 'sha256:%'")
            .await,
        "unmatched"
    );
    assert!(
        db.scalar("SELECT deliveries FROM idempotency_inbox WHERE event_id LIKE 'sha256:%'")
            .await
            >= 2
    );
    let body = db
        .text("SELECT body FROM idempotency_inbox WHERE event_id LIKE 'sha256:%'")
        .await;
    assert!(body.contains("ch_nobody"), "{body}");
    // A repeat replays the acknowledgement; the event stays in the inbox.
    let again = pair
        .deliver(&orphan_id, &orphan, Some((SECRET, now())))
        .await;
    assert_eq!(again.status, 200);
    assert!(again.replayed());
    assert_eq!(again.body, acknowledged.body);

    // An early event, applied once its payment exists, leaves the inbox.
    let ids = pair.pay(1).await;
    let charge = db
        .text(&format!(
            "SELECT charge_id FROM payments WHERE id = '{}'",
            ids[0]
        ))
        .await;
    let late = event("evt_late", &charge);
    // (As an early delivery of it would have left it.)
    db.note_waiting("provider_event:v1", "evt_late").await;
    let applied = pair.deliver("evt_late", &late, Some((SECRET, now()))).await;
    assert_eq!(applied.status, 200, "{}", applied.body);
    assert_eq!(applied.json()["payment_id"], ids[0].as_str());
    assert_eq!(
        db.scalar("SELECT count(*) FROM idempotency_inbox WHERE event_id = 'evt_late'")
            .await,
        0
    );
}

/// The inbox's events in `status` (any: `None`), read through the store as `idem inbox list
/// --json` reads them, with the storage keys.
async fn inbox<DB: Backend>(db: &Db, status: Option<InboxStatus>) -> Vec<InboxEvent> {
    let pool = sqlx::Pool::<DB>::connect(&idem_testkit::harness::direct(&db.url))
        .await
        .unwrap();
    let ring = Keyring::parse(STORAGE_KEYS).unwrap();
    let events = Inbox::new(pool.clone())
        .with_keyring(ring)
        .list(status, 10)
        .await
        .unwrap();
    pool.close().await;
    events
}

/// Asserts that `text` (an answer, a reason) holds none of `sent`.
fn holds_none(text: &str, sent: &[&str]) {
    for value in sent {
        assert!(!text.contains(value), "{value:?} in {text}");
    }
}

/// A signed event that does not read (`data.charge` in place of `data.charge_id`) is
/// answered `422 invalid-body` without a value of it, and kept: in the inbox as
/// `unparseable` with its `webhook-id` and its body as sent (sealed), logged at `WARN`; a
/// redelivery counts on the same row. Mended under the same `webhook-id`, it is applied and
/// leaves the inbox.
async fn unparseable_events_are_kept<DB: Backend>() {
    let db = Db::fresh(Kind::of::<DB>()).await;
    let pair = Pair::start_env(&db, "1h", &[("IDEM_STORAGE_KEYS", STORAGE_KEYS)]);
    let id = "evt_zq7garbled";
    let garbled = json!({
        "id": id,
        "type": "charge.succeeded",
        "data": { "charge": "ch_zq7garbled", "amount": 424_242, "currency": "EUR" },
    });
    let sent = ["ch_zq7garbled", "424242", id];
    for deliveries in 1..=2 {
        let reply = pair.deliver(id, &garbled, Some((SECRET, now()))).await;
        let problem = reply.assert_problem(422);
        assert_eq!(
            problem["type"], "urn:idem:problem:invalid-body",
            "{problem}"
        );
        holds_none(&reply.body, &sent);
        let events = inbox::<DB>(&db, Some(InboxStatus::Unparseable)).await;
        assert_eq!(events.len(), 1, "one row for every delivery: {events:?}");
        let event = &events[0];
        assert_eq!(
            (event.source.as_str(), event.event_id.as_str()),
            (SOURCE, id)
        );
        assert_eq!(event.status, InboxStatus::Unparseable);
        assert_eq!(event.deliveries, deliveries);
        assert_eq!(event.body, garbled.to_string(), "the body as sent");
        assert!(event.sealed.is_some(), "sealed like other inbox bodies");
        assert!(event.reason.contains("invalid-body"), "{}", event.reason);
        assert!(event.reason.contains("charge_id"), "{}", event.reason);
        holds_none(&event.reason, &sent);
    }
    let raw = db.text("SELECT body FROM idempotency_inbox").await;
    holds_none(&raw, &sent[..2]);
    assert_eq!(
        db.scalar("SELECT count(*) FROM idempotency_keys WHERE operation = 'provider_event:v1'")
            .await,
        0,
        "nothing is recorded under its key"
    );
    let event = key_hash(SOURCE, id).to_string();
    let logged = pair.payments.logged();
    assert!(
        logged.lines().any(|line| line.contains("WARN")
            && line.contains("kept as unparseable")
            && line.contains(&event)),
        "a WARN line with the event's hash {event}:\n{logged}"
    );

    // Mended, under the same webhook-id: applied once, and it leaves the inbox.
    pair.pay(1).await;
    eventually(Duration::from_secs(30), "the payment settled", || async {
        settled(&db, 1).await == 1
    })
    .await;
    let charge = db.text("SELECT charge_id FROM payments").await;
    let mended = json!({
        "id": id,
        "type": "charge.succeeded",
        "data": { "charge_id": charge, "amount": 100, "currency": "EUR" },
    });
    let reply = pair.deliver(id, &mended, Some((SECRET, now()))).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["settlements"], 2);
    assert!(inbox::<DB>(&db, None).await.is_empty());
}

/// One identity per event: the `webhook-id`. A delivery whose body `id` is not its
/// `webhook-id` is refused (`422 event-id-mismatch`, naming neither) and applies nothing, so
/// an event sent again under another `webhook-id` settles once.
async fn one_identity_per_event<DB: Backend>() {
    let db = Db::fresh(Kind::of::<DB>()).await;
    let pair = Pair::start(&db);
    pair.pay(1).await;
    eventually(Duration::from_secs(30), "the payment settled", || async {
        settled(&db, 1).await == 1
    })
    .await;
    let charge = db.text("SELECT charge_id FROM payments").await;
    let event = json!({
        "id": "evt_zq7one",
        "type": "charge.succeeded",
        "data": { "charge_id": charge, "amount": 100, "currency": "EUR" },
    });
    let first = pair
        .deliver("evt_zq7one", &event, Some((SECRET, now())))
        .await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.json()["settlements"], 2);
    let sent = ["evt_zq7one", "evt_zq7other", charge.as_str()];
    for _ in 0..2 {
        let again = pair
            .deliver("evt_zq7other", &event, Some((SECRET, now())))
            .await;
        let problem = again.assert_problem(422);
        assert_eq!(
            problem["type"], "urn:idem:example:event-id-mismatch",
            "{problem}"
        );
        holds_none(&again.body, &sent);
    }
    assert_eq!(settled(&db, 2).await, 1, "settled once by the event");
    assert_eq!(
        db.scalar("SELECT count(*) FROM idempotency_keys WHERE idempotency_key = 'evt_zq7other'")
            .await,
        0,
        "nothing stored under the second webhook-id"
    );
    assert!(inbox::<DB>(&db, None).await.is_empty());
}

/// `payments`' outbox: a receiver answering 404 for a while loses nothing, and `/metrics`
/// shows the outbox.
async fn outbox_outlasts_a_refusing_receiver<DB: Backend>() {
    let kind = Kind::of::<DB>();
    let db = Db::fresh(kind).await;
    let pair = Pair::start(&db);
    pair.control(json!({ "webhook_status": 404 })).await;
    let ids: HashSet<String> = pair.pay(5).await.into_iter().collect();
    eventually(
        Duration::from_secs(30),
        "failed attempts counted",
        || async {
            let metrics = pair.metrics().await;
            metric(&metrics, "idem_outbox_failed_attempts_total") >= 5.0
        },
    )
    .await;
    assert!(pair.payment_events().await.is_empty());
    let metrics = pair.metrics().await;
    for name in [
        "idem_outbox_pending",
        "idem_outbox_dead",
        "idem_outbox_in_flight",
        "idem_outbox_oldest_pending_age_seconds",
        "idem_outbox_delivered_total",
        "idem_outbox_dead_lettered_total",
    ] {
        assert!(metrics.contains(name), "{name} in /metrics:\n{metrics}");
    }
    assert_eq!(metric(&metrics, "idem_outbox_dead_lettered_total"), 0.0);

    // The receiver is back: every event arrives by itself.
    pair.control(json!({ "webhook_status": 0 })).await;
    eventually(
        Duration::from_secs(60),
        "every payment's event delivered",
        || async { ids.is_subset(&pair.payment_events().await) },
    )
    .await;
    eventually(Duration::from_secs(30), "the delivered count", || async {
        metric(&pair.metrics().await, "idem_outbox_delivered_total") >= 5.0
    })
    .await;
    // The counter moves when the receiver answers, the row just after: wait for the rows.
    eventually(Duration::from_secs(30), "every row delivered", || async {
        db.scalar("SELECT count(*) FROM idempotency_outbox WHERE status = 'delivered'")
            .await
            == 5
    })
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM idempotency_outbox").await,
        5,
        "one message per payment, none added"
    );
}

/// The value of an unlabelled metric in a Prometheus text page; 0 when absent.
fn metric(page: &str, name: &str) -> f64 {
    page.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            (key == name).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

idem_testkit::on_every_store!(
    #[flavor = current_thread]
    provider_events_apply_once,
    signatures_and_repeats,
    unmatched_events_are_kept,
    unparseable_events_are_kept,
    one_identity_per_event,
    outbox_outlasts_a_refusing_receiver,
);
