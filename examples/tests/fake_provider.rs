//! The `fake-provider` contract, driven over HTTP against the real binary (and, at the end,
//! against the library served in process, webhooks included).
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use futures_util::future::join_all;
use idem_examples::fake_provider::{
    self, DEFAULT_WEBHOOK_SECRET, Provider, Stats, WebhookConfig, WebhookConfigError,
};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use standardwebhooks::Webhook;

const CHARGE: &str = r#"{"amount": 1000, "currency": "eur", "customer": "cus_1"}"#;
/// The same charge, other field order and formatting.
const CHARGE_REFORMATTED: &str = r#"{"customer":"cus_1","currency":"eur","amount":1000}"#;
const OTHER_CHARGE: &str = r#"{"amount": 1001, "currency": "eur", "customer": "cus_1"}"#;
const DECLINED: &str = r#"{"amount": 402, "currency": "eur", "customer": "cus_1"}"#;

/// One `fake-provider` process and a client for it.
struct Server {
    child: Child,
    base: String,
    http: reqwest::Client,
}

impl Server {
    /// With its webhooks sent to a port nothing listens on (the discard port), so they are
    /// created and retried but never acknowledged.
    fn start() -> Self {
        Self::start_with(&[("PROVIDER_WEBHOOK_URL", "http://127.0.0.1:9/webhooks")])
    }

    fn start_with(env: &[(&str, &str)]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fake-provider"))
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("fake-provider starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                println!("[fake-provider] {line}");
                if let (false, Some(at)) = (sent, line.find("listening on http://")) {
                    let _ = tx.send(line[at + "listening on ".len()..].trim().to_owned());
                    sent = true;
                }
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("fake-provider logs `listening on http://…` within 60 s");
        Self {
            child,
            base,
            http: client(),
        }
    }

    /// SIGTERM, then waits for the process to exit.
    fn stop(mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.child.wait().unwrap()
    }

    async fn try_charge(&self, key: Option<&str>, body: &str) -> reqwest::Result<Reply> {
        try_charge(&self.http, &self.base, key, body).await
    }

    async fn charge(&self, key: Option<&str>, body: &str) -> Reply {
        self.try_charge(key, body).await.unwrap()
    }

    async fn post(&self, path: &str, body: &str) -> Reply {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        Reply::read(response).await.unwrap()
    }

    async fn get(&self, path: &str) -> Reply {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        Reply::read(response).await.unwrap()
    }

    /// `POST /control`, which must succeed; returns the settings it answers.
    async fn control(&self, settings: Value) -> Value {
        let reply = self.post("/control", &settings.to_string()).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()
    }

    async fn stats(&self) -> Value {
        let reply = self.get("/stats").await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        reply.json()
    }

    /// `GET /stats` but `webhooks_sent`, which goes on growing while deliveries are retried.
    async fn counters(&self) -> Value {
        let mut stats = self.stats().await;
        let sent = stats.as_object_mut().unwrap().remove("webhooks_sent");
        assert!(sent.unwrap().is_u64());
        stats
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

async fn try_charge(
    http: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    body: &str,
) -> reqwest::Result<Reply> {
    let mut request = http
        .post(format!("{base}/charges"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    Reply::read(request.send().await?).await
}

/// An HTTP response, read whole.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    async fn read(response: reqwest::Response) -> reqwest::Result<Self> {
        Ok(Self {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.text().await?,
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    /// Asserts a `201` charge and returns it.
    fn assert_charge(&self) -> Value {
        assert_eq!(self.status, 201, "{}", self.body);
        let charge = self.json();
        let id = charge["id"].as_str().unwrap();
        let hex = id.strip_prefix("ch_").unwrap();
        assert!(
            hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id}"
        );
        charge
    }

    /// Asserts an RFC 9457 problem with this status and returns it.
    fn assert_problem(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(
            self.headers.get("content-type").unwrap(),
            "application/problem+json"
        );
        let problem = self.json();
        assert_eq!(problem["type"], "about:blank");
        assert_eq!(problem["status"], status);
        assert!(problem["title"].as_str().is_some_and(|t| !t.is_empty()));
        assert!(problem["detail"].as_str().is_some_and(|t| !t.is_empty()));
        problem
    }
}

#[tokio::test]
async fn same_key_same_body_is_the_same_charge() {
    let s = Server::start();
    let first = s.charge(Some("k1"), CHARGE).await.assert_charge();
    assert_eq!(first["amount"], 1000);
    assert_eq!(first["currency"], "eur");
    assert_eq!(first["customer"], "cus_1");
    assert_eq!(first.as_object().unwrap().len(), 4, "{first}");

    // Bodies are compared as fields, not bytes.
    let again = s
        .charge(Some("k1"), CHARGE_REFORMATTED)
        .await
        .assert_charge();
    assert_eq!(again, first);

    let other = s.charge(Some("k2"), CHARGE).await.assert_charge();
    assert_ne!(other["id"], first["id"]);
    assert_eq!(
        s.counters().await,
        json!({"requests": 3, "charges": 2, "distinct_keys": 2,
               "webhook_events": 2, "webhooks_acknowledged": 0})
    );
}

#[tokio::test]
async fn same_key_other_body_is_refused() {
    let s = Server::start();
    let first = s.charge(Some("k1"), CHARGE).await.assert_charge();
    s.charge(Some("k1"), OTHER_CHARGE).await.assert_problem(422);
    // The key still answers its own request.
    let again = s.charge(Some("k1"), CHARGE).await.assert_charge();
    assert_eq!(again["id"], first["id"]);
    assert_eq!(s.stats().await["charges"], 1);
}

#[tokio::test]
async fn missing_key_and_bad_bodies_are_refused_without_binding_the_key() {
    let s = Server::start();
    s.charge(None, CHARGE).await.assert_problem(400);
    s.charge(Some(""), CHARGE).await.assert_problem(400);
    s.charge(Some(&"k".repeat(256)), CHARGE)
        .await
        .assert_problem(400);
    for body in ["not json", r#"{"amount": 1000, "#, ""] {
        s.charge(Some("k1"), body).await.assert_problem(400);
    }
    for body in [
        r#"{"amount": "1000", "currency": "eur", "customer": "cus_1"}"#,
        r#"{"amount": 10.5, "currency": "eur", "customer": "cus_1"}"#,
        r#"{"amount": 0, "currency": "eur", "customer": "cus_1"}"#,
        r#"{"amount": -5, "currency": "eur", "customer": "cus_1"}"#,
        r#"{"amount": 1000, "currency": "", "customer": "cus_1"}"#,
        r#"{"amount": 1000, "currency": "eur"}"#,
        r#"[1000, "eur", "cus_1"]"#,
    ] {
        s.charge(Some("k1"), body).await.assert_problem(422);
    }
    assert_eq!(s.stats().await["charges"], 0);
    // None of those bound `k1`: another body is still welcome.
    s.charge(Some("k1"), OTHER_CHARGE).await.assert_charge();
    assert_eq!(s.stats().await["charges"], 1);
}

#[tokio::test]
async fn amount_402_is_declined_and_stays_declined() {
    let s = Server::start();
    let problem = s.charge(Some("k1"), DECLINED).await.assert_problem(402);
    assert_eq!(problem["title"], "Card declined");
    s.charge(Some("k1"), DECLINED).await.assert_problem(402);
    assert_eq!(s.stats().await["charges"], 0);
    // The key is bound to the declined request.
    s.charge(Some("k1"), CHARGE).await.assert_problem(422);
    assert_eq!(s.stats().await["charges"], 0);
}

#[tokio::test]
async fn fail_rate_one_fails_every_charge_before_touching_it() {
    let s = Server::start();
    s.control(json!({"fail_rate": 1})).await;
    for _ in 0..5 {
        s.charge(Some("k1"), CHARGE).await.assert_problem(500);
    }
    assert_eq!(
        s.stats().await,
        json!({"requests": 5, "charges": 0, "distinct_keys": 1,
               "webhook_events": 0, "webhooks_sent": 0, "webhooks_acknowledged": 0})
    );
    // A failed request leaves the key unbound: after recovery, any body goes.
    s.control(json!({"fail_rate": 0})).await;
    s.charge(Some("k1"), OTHER_CHARGE).await.assert_charge();
    assert_eq!(s.stats().await["charges"], 1);
}

#[tokio::test]
async fn a_dropped_answer_is_a_connection_error_and_the_charge_stands() {
    let s = Server::start();
    s.control(json!({"drop_response_rate": 1})).await;
    let error = s.try_charge(Some("k1"), CHARGE).await.unwrap_err();
    assert!(!error.is_timeout(), "{error:?}");
    assert!(error.status().is_none(), "{error:?}");
    assert_eq!(
        s.counters().await,
        json!({"requests": 1, "charges": 1, "distinct_keys": 1,
               "webhook_events": 1, "webhooks_acknowledged": 0})
    );

    // Not a byte of the answer reaches the client: the connection just closes.
    let addr = s.base.strip_prefix("http://").unwrap();
    let mut raw = std::net::TcpStream::connect(addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        raw,
        "POST /charges HTTP/1.1\r\nhost: {addr}\r\nidempotency-key: k1\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{CHARGE}",
        CHARGE.len()
    )
    .unwrap();
    let mut received = Vec::new();
    // EOF or a reset, either way with nothing received.
    let _ = raw.read_to_end(&mut received);
    assert!(
        received.is_empty(),
        "{}",
        String::from_utf8_lossy(&received)
    );

    // The retry, once answers get through, finds the charge created by the first attempt.
    s.control(json!({"drop_response_rate": 0})).await;
    let retried = s.charge(Some("k1"), CHARGE).await.assert_charge();
    let again = s.charge(Some("k1"), CHARGE).await.assert_charge();
    assert_eq!(retried["id"], again["id"]);
    assert_eq!(
        s.counters().await,
        json!({"requests": 4, "charges": 1, "distinct_keys": 1,
               "webhook_events": 1, "webhooks_acknowledged": 0})
    );
}

#[tokio::test]
async fn a_dropped_answer_does_not_spoil_other_connections() {
    let s = Server::start();
    s.control(json!({"drop_response_rate": 1})).await;
    let s = &s;
    let results =
        join_all((0..8).map(|i| async move { s.try_charge(Some(&format!("k{i}")), CHARGE).await }))
            .await;
    assert!(results.iter().all(Result::is_err), "{results:?}");
    // The same client, its pool now full of closed connections, carries on.
    s.control(json!({"drop_response_rate": 0})).await;
    for i in 0..8 {
        s.charge(Some(&format!("k{i}")), CHARGE)
            .await
            .assert_charge();
    }
    assert_eq!(s.stats().await["charges"], 8);
}

#[tokio::test]
async fn delay_ms_delays_every_charge_request() {
    let s = Server::start();
    let settings = s.control(json!({"delay_ms": 400})).await;
    assert_eq!(
        settings,
        json!({"fail_rate": 0.0, "drop_response_rate": 0.0, "delay_ms": 400,
               "webhook_duplicate_rate": 0.0, "webhook_status": 0})
    );
    let started = Instant::now();
    s.charge(Some("k1"), CHARGE).await.assert_charge();
    let slow = started.elapsed();
    assert!(slow >= Duration::from_millis(400), "{slow:?}");

    // Delays overlap: concurrent requests wait side by side, not in line.
    let started = Instant::now();
    let replies = join_all((0..4).map(|_| s.charge(Some("k1"), CHARGE))).await;
    let together = started.elapsed();
    assert!(replies.iter().all(|r| r.status == 201));
    assert!(
        together >= Duration::from_millis(400) && together < Duration::from_millis(1_500),
        "{together:?}"
    );

    s.control(json!({"delay_ms": 0})).await;
    let started = Instant::now();
    s.charge(Some("k1"), CHARGE).await.assert_charge();
    let fast = started.elapsed();
    assert!(fast < Duration::from_millis(400), "{fast:?}");
}

#[tokio::test]
async fn concurrent_requests_with_one_key_make_one_charge() {
    let s = Server::start();
    s.control(json!({"delay_ms": 50})).await;
    let replies = join_all((0..24).map(|_| s.charge(Some("k1"), CHARGE))).await;
    let first = replies[0].assert_charge();
    for reply in &replies {
        assert_eq!(reply.assert_charge(), first);
    }
    assert_eq!(
        s.counters().await,
        json!({"requests": 24, "charges": 1, "distinct_keys": 1,
               "webhook_events": 1, "webhooks_acknowledged": 0})
    );
}

#[tokio::test]
async fn rates_between_zero_and_one_mix_outcomes() {
    let s = Server::start();
    s.control(json!({"fail_rate": 0.5})).await;
    let mut statuses = Vec::new();
    for i in 0..64 {
        statuses.push(s.charge(Some(&format!("k{i}")), CHARGE).await.status);
    }
    let failed = statuses.iter().filter(|&&s| s == 500).count() as u64;
    let created = statuses.iter().filter(|&&s| s == 201).count() as u64;
    // All 64 landing on one side has probability 2^-63.
    assert!(failed > 0 && created > 0, "{statuses:?}");
    assert_eq!(failed + created, 64);
    assert_eq!(s.stats().await["charges"], created);
}

#[tokio::test]
async fn stats_count_requests_charges_and_keys() {
    let s = Server::start();
    assert_eq!(
        s.stats().await,
        json!({"requests": 0, "charges": 0, "distinct_keys": 0,
               "webhook_events": 0, "webhooks_sent": 0, "webhooks_acknowledged": 0})
    );
    s.charge(Some("a"), CHARGE).await.assert_charge();
    s.charge(Some("a"), CHARGE).await.assert_charge();
    s.charge(Some("a"), OTHER_CHARGE).await.assert_problem(422);
    s.charge(Some("b"), OTHER_CHARGE).await.assert_charge();
    s.charge(None, CHARGE).await.assert_problem(400);
    s.charge(Some("c"), "not json").await.assert_problem(400);
    s.charge(Some("d"), DECLINED).await.assert_problem(402);
    s.control(json!({"fail_rate": 1})).await;
    s.charge(Some("e"), CHARGE).await.assert_problem(500);
    s.control(json!({"fail_rate": 0, "drop_response_rate": 1}))
        .await;
    assert!(s.try_charge(Some("f"), CHARGE).await.is_err());
    // Other routes are not counted.
    s.post("/webhooks", r#"{"id": "evt_1"}"#).await;
    // Webhook events: `a`, `b` and the dropped `f`; none for a replay or a decline.
    assert_eq!(
        s.counters().await,
        json!({"requests": 9, "charges": 3, "distinct_keys": 6,
               "webhook_events": 3, "webhooks_acknowledged": 0})
    );
}

#[tokio::test]
async fn control_validates_and_keeps_missing_fields() {
    let s = Server::start();
    let initial = json!({"fail_rate": 0.0, "drop_response_rate": 0.0, "delay_ms": 0,
                         "webhook_duplicate_rate": 0.0, "webhook_status": 0});
    assert_eq!(s.get("/control").await.json(), initial);
    assert_eq!(s.control(json!({})).await, initial);

    let set = s
        .control(
            json!({"fail_rate": 0.25, "drop_response_rate": 0.5, "delay_ms": 7,
                        "webhook_duplicate_rate": 0.75, "webhook_status": 503}),
        )
        .await;
    let expected = json!({"fail_rate": 0.25, "drop_response_rate": 0.5, "delay_ms": 7,
                          "webhook_duplicate_rate": 0.75, "webhook_status": 503});
    assert_eq!(set, expected);
    // A missing (or null) field keeps its value.
    let expected = json!({"fail_rate": 1.0, "drop_response_rate": 0.5, "delay_ms": 7,
                          "webhook_duplicate_rate": 0.75, "webhook_status": 503});
    assert_eq!(
        s.control(json!({"fail_rate": 1, "webhook_status": null}))
            .await,
        expected
    );
    // The edges of `webhook_status` and of the rates.
    for (status, rate) in [(100, 0.0), (599, 1.0), (0, 0.0), (204, 1.0)] {
        let set = s
            .control(json!({"webhook_status": status, "webhook_duplicate_rate": rate}))
            .await;
        assert_eq!(set["webhook_status"], status);
        assert_eq!(set["webhook_duplicate_rate"], rate);
    }
    let expected = json!({"fail_rate": 1.0, "drop_response_rate": 0.5, "delay_ms": 7,
                          "webhook_duplicate_rate": 1.0, "webhook_status": 204});
    assert_eq!(s.get("/control").await.json(), expected);

    for bad in [
        r#"{"fail_rate": 1.5}"#,
        r#"{"fail_rate": -0.1}"#,
        r#"{"drop_response_rate": 2}"#,
        r#"{"drop_response_rate": "0.5"}"#,
        r#"{"delay_ms": -1}"#,
        r#"{"delay_ms": 1.5}"#,
        r#"{"fail_rate": 0, "delay_ms": -1}"#,
        r#"{"fail_rat": 0.5}"#,
        r#"{"webhook_duplicate_rate": 1.01}"#,
        r#"{"webhook_duplicate_rate": -0.5}"#,
        r#"{"webhook_duplicate_rate": "1"}"#,
        r#"{"webhook_status": 99}"#,
        r#"{"webhook_status": 1}"#,
        r#"{"webhook_status": 600}"#,
        r#"{"webhook_status": 70000}"#,
        r#"{"webhook_status": -1}"#,
        r#"{"webhook_status": 500.5}"#,
        r#"{"webhook_status": "500"}"#,
        r#"{"webhook_status": 500, "webhook_duplicate_rate": 2}"#,
        r#"{"fail_rate": 0, "webhook_status": 600}"#,
        r#"{"webhook_statu": 500}"#,
        r#"[0.5, 0.5, 1]"#,
        "not json",
        "",
    ] {
        s.post("/control", bad).await.assert_problem(400);
    }
    // Nothing above changed anything, not even the valid half of a bad request.
    assert_eq!(s.get("/control").await.json(), expected);
}

#[tokio::test]
async fn webhooks_are_recorded_with_duplicates_in_order() {
    let s = Server::start();
    assert_eq!(s.get("/events").await.json(), json!([]));
    let first = json!({"id": "evt_1", "type": "charge.succeeded", "data": {"amount": 1000}});
    let second = json!({"id": 2, "type": "charge.refunded"});
    for delivery in [&first, &second, &first] {
        let reply = s.post("/webhooks", &delivery.to_string()).await;
        assert!(matches!(reply.status, 200 | 204), "{}", reply.body);
    }
    for bad in [
        r#"{"type": "x"}"#,
        r#"{"id": null}"#,
        r#"["evt_1"]"#,
        "not json",
    ] {
        s.post("/webhooks", bad).await.assert_problem(400);
    }
    assert_eq!(
        s.get("/events").await.json(),
        json!([
            {"id": "evt_1", "body": first},
            {"id": 2, "body": second},
            {"id": "evt_1", "body": first},
        ])
    );
}

#[tokio::test]
async fn unknown_routes_are_problems() {
    let s = Server::start();
    s.get("/nope").await.assert_problem(404);
    s.get("/charges").await.assert_problem(405);
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let s = Server::start();
    let status = s.stop();
    assert!(status.success(), "{status:?}");
}

/// The library, served in process, with a handle on its state.
#[tokio::test]
async fn in_process_serve_drops_answers_too() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let provider = Provider::new();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(fake_provider::serve(listener, provider.clone(), async {
        let _ = stopped.await;
    }));
    let http = client();

    let charge = try_charge(&http, &base, Some("k1"), CHARGE)
        .await
        .unwrap()
        .assert_charge();
    http.post(format!("{base}/control"))
        .json(&json!({"drop_response_rate": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(provider.settings().drop_response_rate, 1.0);
    assert!(try_charge(&http, &base, Some("k2"), CHARGE).await.is_err());
    // Sends no webhooks: it has no configuration for them.
    assert!(provider.webhooks().is_none());
    assert_eq!(
        provider.stats(),
        Stats {
            requests: 2,
            charges: 2,
            distinct_keys: 2,
            webhook_events: 0,
            webhooks_sent: 0,
            webhooks_acknowledged: 0,
        }
    );
    assert!(try_charge(&http, &base, Some("k1"), CHARGE).await.is_err());
    assert_eq!(provider.stats().charges, 2, "{charge}");

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

/// Served without [`fake_provider::serve`], a dropped answer still fails for the client.
#[tokio::test]
async fn plain_axum_serve_still_fails_dropped_answers() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, fake_provider::app()).await });
    let http = client();
    http.post(format!("{base}/control"))
        .json(&json!({"drop_response_rate": 1}))
        .send()
        .await
        .unwrap();
    assert!(try_charge(&http, &base, Some("k1"), CHARGE).await.is_err());
    let stats: Value = http
        .get(format!("{base}/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["charges"], 1);
    // `app()` sends no webhooks.
    assert_eq!(stats["webhook_events"], 0);
    assert_eq!(stats["webhooks_sent"], 0);
    assert_eq!(stats["webhooks_acknowledged"], 0);
}

// Webhooks sent by the provider.

const SECRET: &str = "whsec_dGhlIHRlc3RzJyBvd24gc2VjcmV0";
const DEADLINE: Duration = Duration::from_secs(20);

/// Polls `probe` every 10 ms until it gives something, for at most [`DEADLINE`].
async fn eventually<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(Instant::now() < deadline, "still waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One request a [`Receiver`] got.
#[derive(Debug, Clone)]
struct Delivery {
    headers: axum::http::HeaderMap,
    body: Bytes,
    at: Instant,
    /// What the receiver answered.
    status: u16,
}

impl Delivery {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }

    fn header(&self, name: &str) -> &str {
        self.headers.get(name).unwrap().to_str().unwrap()
    }

    fn verify(&self, secret: &str) -> Result<(), standardwebhooks::WebhookError> {
        Webhook::new(secret)
            .unwrap()
            .verify(&self.body, &self.headers)
    }
}

/// A webhook receiver in process: records every request, answers `500` to the first
/// `fail_first` and `204` to the rest, each after holding it for `hold`.
#[derive(Clone)]
struct Receiver {
    url: String,
    state: Arc<ReceiverState>,
}

struct ReceiverState {
    fail_first: usize,
    hold: Duration,
    deliveries: Mutex<Vec<Delivery>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl Receiver {
    async fn start(fail_first: usize, hold: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, fail_first, hold)
    }

    fn serve(listener: tokio::net::TcpListener, fail_first: usize, hold: Duration) -> Self {
        let url = format!("http://{}/hooks", listener.local_addr().unwrap());
        let state = Arc::new(ReceiverState {
            fail_first,
            hold,
            deliveries: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .route("/hooks", axum::routing::post(receive))
            .with_state(Arc::clone(&state));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { url, state }
    }

    fn deliveries(&self) -> Vec<Delivery> {
        self.state.deliveries.lock().unwrap().clone()
    }

    /// Waits for at least `n` deliveries, and returns them all.
    async fn wait_for(&self, n: usize) -> Vec<Delivery> {
        eventually(&format!("{n} deliveries"), || {
            let deliveries = self.deliveries();
            (deliveries.len() >= n).then_some(deliveries)
        })
        .await
    }

    fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }
}

async fn receive(
    State(state): State<Arc<ReceiverState>>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> StatusCode {
    let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    state.max_in_flight.fetch_max(now, Ordering::SeqCst);
    let status = {
        let mut deliveries = state.deliveries.lock().unwrap();
        let status = if deliveries.len() < state.fail_first {
            500
        } else {
            204
        };
        deliveries.push(Delivery {
            headers,
            body,
            at: Instant::now(),
            status,
        });
        status
    };
    tokio::time::sleep(state.hold).await;
    state.in_flight.fetch_sub(1, Ordering::SeqCst);
    StatusCode::from_u16(status).unwrap()
}

/// A provider served in process (until the test's runtime ends), sending its webhooks to
/// `url` signed with [`SECRET`]; returns its base URL.
async fn provider_sending_to(url: &str) -> (String, Provider) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let provider = Provider::with_webhooks(WebhookConfig::new(url, SECRET).unwrap());
    serve_in_background(listener, provider.clone());
    (base, provider)
}

fn serve_in_background(listener: tokio::net::TcpListener, provider: Provider) {
    tokio::spawn(fake_provider::serve(
        listener,
        provider,
        std::future::pending(),
    ));
}

async fn set_control(http: &reqwest::Client, base: &str, settings: Value) {
    let response = http
        .post(format!("{base}/control"))
        .json(&settings)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// Unix seconds now, to compare with `webhook-timestamp`.
#[allow(clippy::disallowed_methods)]
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .try_into()
        .unwrap()
}

/// Asserts `delivery` is a `charge.succeeded` event of `charge`, properly signed with
/// `secret`, and returns the event's id.
fn assert_event_of(delivery: &Delivery, charge: &Value, secret: &str) -> String {
    assert_eq!(delivery.header("content-type"), "application/json");
    let event = delivery.json();
    let id = event["id"].as_str().unwrap().to_owned();
    let hex = id.strip_prefix("evt_").unwrap();
    assert!(
        hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    assert_eq!(
        event,
        json!({
            "id": id,
            "type": "charge.succeeded",
            "data": {
                "charge_id": charge["id"],
                "amount": charge["amount"],
                "currency": charge["currency"],
            },
        })
    );
    // The body's fields go in the documented order.
    let body = std::str::from_utf8(&delivery.body).unwrap();
    assert!(
        body.starts_with(&format!(
            r#"{{"id":"{id}","type":"charge.succeeded","data":{{"#
        )),
        "{body}"
    );

    assert_eq!(delivery.header("webhook-id"), id);
    let timestamp: i64 = delivery.header("webhook-timestamp").parse().unwrap();
    assert!((timestamp - now()).abs() <= 5, "{timestamp} vs {}", now());
    let signature = delivery.header("webhook-signature");
    assert!(signature.starts_with("v1,"), "{signature}");
    delivery.verify(secret).unwrap();
    // Signed with that secret, over those bytes.
    assert!(delivery.verify(DEFAULT_WEBHOOK_SECRET).is_err());
    let mut tampered = delivery.clone();
    tampered.body = Bytes::from(body.replace("charge.succeeded", "charge.refunded"));
    assert!(tampered.verify(secret).is_err());
    id
}

#[tokio::test]
async fn a_new_charge_sends_one_signed_event_and_nothing_else_does() {
    let receiver = Receiver::start(0, Duration::ZERO).await;
    let (base, provider) = provider_sending_to(&receiver.url).await;
    assert_eq!(provider.webhooks().unwrap().url(), receiver.url);
    let http = client();

    let first = try_charge(&http, &base, Some("k1"), CHARGE)
        .await
        .unwrap()
        .assert_charge();
    // The event is created with the charge.
    assert_eq!(provider.stats().webhook_events, 1);
    let deliveries = receiver.wait_for(1).await;
    let first_event = assert_event_of(&deliveries[0], &first, SECRET);

    // Replays, a decline, refusals and failures create no event.
    try_charge(&http, &base, Some("k1"), CHARGE)
        .await
        .unwrap()
        .assert_charge();
    try_charge(&http, &base, Some("k1"), CHARGE_REFORMATTED)
        .await
        .unwrap()
        .assert_charge();
    try_charge(&http, &base, Some("k1"), OTHER_CHARGE)
        .await
        .unwrap()
        .assert_problem(422);
    try_charge(&http, &base, None, CHARGE)
        .await
        .unwrap()
        .assert_problem(400);
    for _ in 0..2 {
        try_charge(&http, &base, Some("k2"), DECLINED)
            .await
            .unwrap()
            .assert_problem(402);
    }
    set_control(&http, &base, json!({"fail_rate": 1})).await;
    try_charge(&http, &base, Some("k3"), CHARGE)
        .await
        .unwrap()
        .assert_problem(500);
    assert_eq!(provider.stats().webhook_events, 1);

    // A charge whose answer is dropped was made: it has its event.
    set_control(
        &http,
        &base,
        json!({"fail_rate": 0, "drop_response_rate": 1}),
    )
    .await;
    assert!(
        try_charge(&http, &base, Some("k4"), OTHER_CHARGE)
            .await
            .is_err()
    );
    assert_eq!(provider.stats().webhook_events, 2);
    set_control(&http, &base, json!({"drop_response_rate": 0})).await;
    let dropped = try_charge(&http, &base, Some("k4"), OTHER_CHARGE)
        .await
        .unwrap()
        .assert_charge();

    let third = try_charge(&http, &base, Some("k5"), CHARGE)
        .await
        .unwrap()
        .assert_charge();
    assert_eq!(provider.stats().webhook_events, 3);
    eventually("3 acknowledged events", || {
        (provider.stats().webhooks_acknowledged == 3).then_some(())
    })
    .await;

    // One delivery per event, each of its own charge, with its own id.
    let deliveries = receiver.deliveries();
    assert_eq!(deliveries.len(), 3, "{deliveries:?}");
    let by_charge = |charge: &Value| {
        deliveries
            .iter()
            .find(|d| d.json()["data"]["charge_id"] == charge["id"])
            .unwrap_or_else(|| panic!("no event for {charge}"))
    };
    assert_eq!(
        assert_event_of(by_charge(&first), &first, SECRET),
        first_event
    );
    let ids = [
        first_event,
        assert_event_of(by_charge(&dropped), &dropped, SECRET),
        assert_event_of(by_charge(&third), &third, SECRET),
    ];
    assert!(
        ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
        "{ids:?}"
    );
    assert_eq!(
        provider.stats(),
        Stats {
            requests: 11,
            charges: 3,
            distinct_keys: 5,
            webhook_events: 3,
            webhooks_sent: 3,
            webhooks_acknowledged: 3,
        }
    );
}

#[tokio::test]
async fn sending_does_not_delay_the_charge() {
    // The receiver takes 3 s to answer each delivery.
    let receiver = Receiver::start(0, Duration::from_secs(3)).await;
    let (base, provider) = provider_sending_to(&receiver.url).await;
    let http = client();
    let started = Instant::now();
    let charge = try_charge(&http, &base, Some("k1"), CHARGE)
        .await
        .unwrap()
        .assert_charge();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
    // The event is on its way: it is sent while the receiver is still holding it.
    let deliveries = receiver.wait_for(1).await;
    assert_event_of(&deliveries[0], &charge, SECRET);
    assert_eq!(provider.stats().webhooks_acknowledged, 0);
    eventually("the acknowledgement", || {
        (provider.stats().webhooks_acknowledged == 1).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_failed_delivery_is_retried_until_a_2xx_and_signed_anew() {
    let receiver = Receiver::start(3, Duration::ZERO).await;
    let (base, provider) = provider_sending_to(&receiver.url).await;
    let http = client();
    let charge = try_charge(&http, &base, Some("k1"), CHARGE)
        .await
        .unwrap()
        .assert_charge();
    eventually("the acknowledgement", || {
        (provider.stats().webhooks_acknowledged == 1).then_some(())
    })
    .await;

    let deliveries = receiver.deliveries();
    let statuses: Vec<u16> = deliveries.iter().map(|d| d.status).collect();
    assert_eq!(statuses, [500, 500, 500, 204]);
    let id = assert_event_of(&deliveries[0], &charge, SECRET);
    for delivery in &deliveries {
        // The same event, byte for byte, each attempt signed for itself.
        assert_eq!(delivery.body, deliveries[0].body);
        assert_eq!(delivery.header("webhook-id"), id);
        delivery.verify(SECRET).unwrap();
    }
    let timestamps: Vec<i64> = deliveries
        .iter()
        .map(|d| d.header("webhook-timestamp").parse().unwrap())
        .collect();
    assert!(
        timestamps.windows(2).all(|w| w[0] <= w[1]),
        "{timestamps:?}"
    );
    // Backing off: 200 ms, then 400, then 800 (each plus up to a tenth).
    for (i, least) in [200, 400, 800].into_iter().enumerate() {
        let gap = deliveries[i + 1].at - deliveries[i].at;
        assert!(
            gap >= Duration::from_millis(least - 20),
            "attempt {i}: {gap:?}"
        );
        // Not much more either (lenient: the machine may be busy).
        assert!(
            gap < Duration::from_millis(least * 4 + 500),
            "attempt {i}: {gap:?}"
        );
    }
    assert_eq!(
        provider.stats(),
        Stats {
            requests: 1,
            charges: 1,
            distinct_keys: 1,
            webhook_events: 1,
            webhooks_sent: 4,
            webhooks_acknowledged: 1,
        }
    );
}

#[tokio::test]
async fn a_connection_error_is_retried_until_the_receiver_is_up() {
    // A port nothing listens on, for now.
    let reserved = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = reserved.local_addr().unwrap();
    drop(reserved);
    let (base, provider) = provider_sending_to(&format!("http://{addr}/hooks")).await;
    let http = client();
    let charge = try_charge(&http, &base, Some("k1"), CHARGE)
        .await
        .unwrap()
        .assert_charge();
    eventually("two failed attempts", || {
        (provider.stats().webhooks_sent >= 2).then_some(())
    })
    .await;
    assert_eq!(provider.stats().webhooks_acknowledged, 0);

    let receiver = Receiver::serve(
        tokio::net::TcpListener::bind(addr).await.unwrap(),
        0,
        Duration::ZERO,
    );
    eventually("the acknowledgement", || {
        (provider.stats().webhooks_acknowledged == 1).then_some(())
    })
    .await;
    let deliveries = receiver.deliveries();
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_event_of(&deliveries[0], &charge, SECRET);
    let stats = provider.stats();
    assert!(stats.webhooks_sent >= 3, "{stats:?}");
    assert_eq!(stats.webhook_events, 1);
}

#[tokio::test]
async fn duplicate_rate_one_delivers_every_event_four_times() {
    // Each delivery is held 300 ms, so the copies sent at once overlap.
    let receiver = Receiver::start(0, Duration::from_millis(300)).await;
    let (base, provider) = provider_sending_to(&receiver.url).await;
    let http = client();
    set_control(&http, &base, json!({"webhook_duplicate_rate": 1})).await;
    let charge = try_charge(&http, &base, Some("k1"), CHARGE)
        .await
        .unwrap()
        .assert_charge();
    let deliveries = receiver.wait_for(4).await;
    let id = assert_event_of(&deliveries[0], &charge, SECRET);
    for delivery in &deliveries {
        assert_eq!(delivery.header("webhook-id"), id);
        assert_eq!(delivery.body, deliveries[0].body);
        delivery.verify(SECRET).unwrap();
    }
    assert!(
        receiver.max_in_flight() >= 2,
        "{}",
        receiver.max_in_flight()
    );
    eventually("the acknowledgement", || {
        (provider.stats().webhooks_acknowledged == 1).then_some(())
    })
    .await;
    assert_eq!(
        provider.stats(),
        Stats {
            requests: 1,
            charges: 1,
            distinct_keys: 1,
            webhook_events: 1,
            webhooks_sent: 4,
            webhooks_acknowledged: 1,
        }
    );
    // A replay sends nothing, duplicates or not.
    try_charge(&http, &base, Some("k1"), CHARGE)
        .await
        .unwrap()
        .assert_charge();
    assert_eq!(provider.stats().webhook_events, 1);
}

#[tokio::test]
async fn every_duplicate_is_retried_until_its_own_2xx() {
    let receiver = Receiver::start(6, Duration::ZERO).await;
    let (base, provider) = provider_sending_to(&receiver.url).await;
    let http = client();
    set_control(&http, &base, json!({"webhook_duplicate_rate": 1})).await;
    try_charge(&http, &base, Some("k1"), CHARGE)
        .await
        .unwrap()
        .assert_charge();
    // 6 failures, then each of the 4 copies gets its 204.
    let deliveries = eventually("4 acknowledged copies", || {
        let deliveries = receiver.deliveries();
        (deliveries.iter().filter(|d| d.status == 204).count() == 4).then_some(deliveries)
    })
    .await;
    assert_eq!(deliveries.len(), 10, "{deliveries:?}");
    assert!(
        deliveries
            .iter()
            .all(|d| d.body == deliveries[0].body && d.verify(SECRET).is_ok())
    );
    let stats = provider.stats();
    assert_eq!(
        (
            stats.webhook_events,
            stats.webhooks_sent,
            stats.webhooks_acknowledged
        ),
        (1, 10, 1)
    );
}

#[tokio::test]
async fn webhook_status_fails_the_providers_own_receiver() {
    // The provider sends its webhooks to its own `POST /webhooks`.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let provider = Provider::with_webhooks(
        WebhookConfig::new(&format!("{base}/webhooks"), DEFAULT_WEBHOOK_SECRET).unwrap(),
    );
    serve_in_background(listener, provider.clone());
    let http = client();
    let post_webhook = |body: &'static str| {
        let http = http.clone();
        let url = format!("{base}/webhooks");
        async move {
            let response = http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            Reply::read(response).await.unwrap()
        }
    };
    let events = || {
        let http = http.clone();
        let url = format!("{base}/events");
        async move {
            let events: Value = http.get(url).send().await.unwrap().json().await.unwrap();
            events
        }
    };

    for status in [500, 503, 404, 429] {
        set_control(&http, &base, json!({"webhook_status": status})).await;
        let problem = post_webhook(r#"{"id": "evt_1"}"#)
            .await
            .assert_problem(status);
        assert_eq!(problem["status"], status);
        // Whatever the request.
        post_webhook("not json").await.assert_problem(status);
    }
    for status in [200, 202, 204, 302] {
        set_control(&http, &base, json!({"webhook_status": status})).await;
        let reply = post_webhook(r#"{"id": "evt_1"}"#).await;
        assert_eq!(reply.status, status);
        assert_eq!(reply.body, "");
    }
    // None of those was recorded.
    assert_eq!(events().await, json!([]));

    // Its own events are refused, and retried.
    set_control(&http, &base, json!({"webhook_status": 503})).await;
    let charge = try_charge(&http, &base, Some("k1"), CHARGE)
        .await
        .unwrap()
        .assert_charge();
    eventually("three refused attempts", || {
        (provider.stats().webhooks_sent >= 3).then_some(())
    })
    .await;
    assert_eq!(provider.stats().webhooks_acknowledged, 0);
    assert_eq!(events().await, json!([]));

    // Back to normal: the next attempt is received and recorded.
    set_control(&http, &base, json!({"webhook_status": 0})).await;
    eventually("the acknowledgement", || {
        (provider.stats().webhooks_acknowledged == 1).then_some(())
    })
    .await;
    let events = events().await;
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["body"]["type"], "charge.succeeded");
    assert_eq!(events[0]["body"]["data"]["charge_id"], charge["id"]);
    assert_eq!(events[0]["id"], events[0]["body"]["id"]);
    assert_eq!(
        post_webhook(r#"{"id": "evt_2"}"#).await.status,
        204,
        "receiving again"
    );
}

#[test]
fn webhook_config_checks_its_url_and_secret() {
    let config = WebhookConfig::new("http://127.0.0.1:3001/webhooks/provider", SECRET).unwrap();
    assert_eq!(config.url(), "http://127.0.0.1:3001/webhooks/provider");
    // The secret stays out of `Debug`.
    assert!(!format!("{config:?}").contains("dGhl"), "{config:?}");
    WebhookConfig::new(
        fake_provider::DEFAULT_WEBHOOK_URL,
        fake_provider::DEFAULT_WEBHOOK_SECRET,
    )
    .unwrap();
    for url in [
        "",
        "not a url",
        "127.0.0.1:3001/x",
        "https://example.test/x",
        "ftp://h/x",
    ] {
        assert!(
            matches!(
                WebhookConfig::new(url, SECRET),
                Err(WebhookConfigError::Url(_))
            ),
            "{url}"
        );
    }
    for secret in ["whsec_not base64!", "whsec_%%%"] {
        assert!(
            matches!(
                WebhookConfig::new("http://127.0.0.1:1/x", secret),
                Err(WebhookConfigError::Secret(_))
            ),
            "{secret}"
        );
    }
}

#[tokio::test]
async fn the_binary_signs_with_its_environments_url_and_secret() {
    let receiver = Receiver::start(0, Duration::ZERO).await;
    let s = Server::start_with(&[
        ("PROVIDER_WEBHOOK_URL", &receiver.url),
        ("PROVIDER_WEBHOOK_SECRET", SECRET),
    ]);
    let charge = s.charge(Some("k1"), CHARGE).await.assert_charge();
    let deliveries = receiver.wait_for(1).await;
    assert_event_of(&deliveries[0], &charge, SECRET);
    let stats = s.stats().await;
    assert_eq!(stats["webhook_events"], 1, "{stats}");

    // Without a secret, the default one.
    let receiver = Receiver::start(0, Duration::ZERO).await;
    let s = Server::start_with(&[("PROVIDER_WEBHOOK_URL", &receiver.url)]);
    let charge = s.charge(Some("k1"), CHARGE).await.assert_charge();
    let deliveries = receiver.wait_for(1).await;
    deliveries[0].verify(DEFAULT_WEBHOOK_SECRET).unwrap();
    assert_eq!(deliveries[0].json()["data"]["charge_id"], charge["id"]);
}

#[test]
fn the_binary_refuses_a_bad_webhook_url_or_secret() {
    for (name, value) in [
        ("PROVIDER_WEBHOOK_URL", "ftp://127.0.0.1/x"),
        ("PROVIDER_WEBHOOK_SECRET", "whsec_not base64!"),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_fake-provider"))
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env(name, value)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{name}");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains(name), "{stdout}");
        assert!(!stdout.contains("listening on"), "{stdout}");
    }
}
