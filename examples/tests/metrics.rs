//! `GET /metrics` of the `orders` and `payments` servers, as real processes: Prometheus text
//! with the runtime's `idem_requests_total` counted per operation and outcome.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use common::{Client, Db, Kind, Server};

const ORDER: &str = r#"{"sku": "BOOK-1", "quantity": 2}"#;
const OTHER_ORDER: &str = r#"{"sku": "BOOK-1", "quantity": 3}"#;
const PAYMENT: &str = r#"{"amount": 1250, "currency": "EUR", "customer": "cus-1"}"#;
const OTHER_PAYMENT: &str = r#"{"amount": 1251, "currency": "EUR", "customer": "cus-1"}"#;

/// Scrapes `GET /metrics` and checks it is Prometheus' text format.
async fn scrape(base: &str) -> String {
    let response = reqwest::get(format!("{base}/metrics")).await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    // The server's own gauge shows the exporter is wired, whatever the runtime records.
    assert!(
        text.lines()
            .any(|line| line.starts_with("http_open_connections ")),
        "{text}"
    );
    text
}

/// Asserts every line of `expected` appears in `metrics` as it is.
fn assert_lines(metrics: &str, expected: &[String]) {
    let missing: Vec<&String> = expected
        .iter()
        .filter(|line| !metrics.lines().any(|l| l == line.as_str()))
        .collect();
    assert!(missing.is_empty(), "missing {missing:#?} in:\n{metrics}");
}

fn requests_total(operation: &str, outcomes: &[&str]) -> Vec<String> {
    outcomes
        .iter()
        .map(|outcome| {
            format!("idem_requests_total{{operation=\"{operation}\",outcome=\"{outcome}\"}} 1")
        })
        .collect()
}

#[tokio::test]
async fn orders_counts_executed_replayed_and_mismatched_requests() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = Server::start(&db);
    let c = Client::new(&server);

    assert_eq!(
        c.post(Some("acme"), Some("\"m1\""), ORDER).await.status,
        201
    );
    let replay = c.post(Some("acme"), Some("\"m1\""), ORDER).await;
    assert!(replay.replayed());
    c.post(Some("acme"), Some("\"m1\""), OTHER_ORDER)
        .await
        .assert_problem(422);

    let metrics = scrape(&server.base).await;
    assert_lines(
        &metrics,
        &requests_total(
            idem_examples::orders::CREATE_ORDER,
            &["executed", "replayed", "mismatch"],
        ),
    );
}

#[tokio::test]
async fn payments_counts_executed_replayed_and_mismatched_requests() {
    let db = Db::fresh(Kind::Sqlite).await;
    let provider = Server::spawn(
        env!("CARGO_BIN_EXE_fake-provider"),
        "fake-provider",
        &db.dir,
        &[],
    );
    let server = Server::spawn(
        env!("CARGO_BIN_EXE_payments"),
        "payments",
        &db.dir,
        &[
            ("DATABASE_URL", &db.url),
            ("PROVIDER_URL", &provider.base),
            ("WEBHOOK_URL", &format!("{}/webhooks", provider.base)),
        ],
    );
    let c = Client::new(&server);
    let pay = |body| c.try_post_to("/payments", Some("acme"), Some("\"p1\""), body);

    let first = pay(PAYMENT).await.unwrap();
    assert_eq!(first.status, 201, "{}", first.body);
    assert!(pay(PAYMENT).await.unwrap().replayed());
    pay(OTHER_PAYMENT).await.unwrap().assert_problem(422);

    let metrics = scrape(&server.base).await;
    assert_lines(
        &metrics,
        &requests_total(
            idem_examples::payments::OPERATION,
            &["executed", "replayed", "mismatch"],
        ),
    );
}
