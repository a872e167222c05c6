//! The `fake-provider` contract, driven over HTTP against the real binary (and, at the end,
//! against the library served in process).
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use idem_examples::fake_provider::{self, Provider, Stats};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

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
    fn start() -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_fake-provider"))
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "info")
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
        s.stats().await,
        json!({"requests": 3, "charges": 2, "distinct_keys": 2})
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
        json!({"requests": 5, "charges": 0, "distinct_keys": 1})
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
        s.stats().await,
        json!({"requests": 1, "charges": 1, "distinct_keys": 1})
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
        s.stats().await,
        json!({"requests": 4, "charges": 1, "distinct_keys": 1})
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
        json!({"fail_rate": 0.0, "drop_response_rate": 0.0, "delay_ms": 400})
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
        s.stats().await,
        json!({"requests": 24, "charges": 1, "distinct_keys": 1})
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
        json!({"requests": 0, "charges": 0, "distinct_keys": 0})
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
    assert_eq!(
        s.stats().await,
        json!({"requests": 9, "charges": 3, "distinct_keys": 6})
    );
}

#[tokio::test]
async fn control_validates_and_keeps_missing_fields() {
    let s = Server::start();
    let initial = json!({"fail_rate": 0.0, "drop_response_rate": 0.0, "delay_ms": 0});
    assert_eq!(s.get("/control").await.json(), initial);
    assert_eq!(s.control(json!({})).await, initial);

    let set = s
        .control(json!({"fail_rate": 0.25, "drop_response_rate": 0.5, "delay_ms": 7}))
        .await;
    let expected = json!({"fail_rate": 0.25, "drop_response_rate": 0.5, "delay_ms": 7});
    assert_eq!(set, expected);
    // A missing field keeps its value.
    let expected = json!({"fail_rate": 1.0, "drop_response_rate": 0.5, "delay_ms": 7});
    assert_eq!(s.control(json!({"fail_rate": 1})).await, expected);

    for bad in [
        r#"{"fail_rate": 1.5}"#,
        r#"{"fail_rate": -0.1}"#,
        r#"{"drop_response_rate": 2}"#,
        r#"{"drop_response_rate": "0.5"}"#,
        r#"{"delay_ms": -1}"#,
        r#"{"delay_ms": 1.5}"#,
        r#"{"fail_rate": 0, "delay_ms": -1}"#,
        r#"{"fail_rat": 0.5}"#,
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
    assert_eq!(
        provider.stats(),
        Stats {
            requests: 2,
            charges: 2,
            distinct_keys: 2
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
}
