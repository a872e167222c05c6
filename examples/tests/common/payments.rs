//! The `payments` example's processes, for the tests that run it: the `fake-provider`, the
//! `payments` server, and its requests.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;

use super::{Client, Db, Reply, Server, eventually};

/// One `fake-provider` process.
pub struct Provider {
    server: Server,
    http: reqwest::Client,
}

impl Provider {
    pub fn start(db: &Db) -> Self {
        Self {
            server: Server::spawn(
                env!("CARGO_BIN_EXE_fake-provider"),
                "fake-provider",
                &db.dir,
                &[],
            ),
            http: reqwest::Client::new(),
        }
    }

    pub fn url(&self) -> &str {
        &self.server.base
    }

    pub async fn control(&self, settings: Value) {
        let response = self
            .http
            .post(format!("{}/control", self.url()))
            .json(&settings)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }

    pub async fn stats(&self) -> Value {
        self.http
            .get(format!("{}/stats", self.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The `payment.succeeded` deliveries received so far, as payment ids (duplicates kept).
    pub async fn payment_events(&self) -> Vec<String> {
        let events: Value = self
            .http
            .get(format!("{}/events", self.url()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        events
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["body"]["type"] == "payment.succeeded")
            .map(|e| {
                assert_eq!(e["id"], e["body"]["id"], "{e}");
                e["body"]["data"]["payment_id"].as_str().unwrap().to_owned()
            })
            .collect()
    }

    /// Waits until every payment in `ids` has had its event delivered (30 s at most).
    pub async fn await_events(&self, ids: &HashSet<String>) {
        self.await_events_within(ids, Duration::from_secs(30)).await;
    }

    /// [`Provider::await_events`], waiting `within` at most.
    pub async fn await_events_within(&self, ids: &HashSet<String>, within: Duration) {
        eventually(within, "every payment's event delivered", || async {
            let seen: HashSet<String> = self.payment_events().await.into_iter().collect();
            ids.is_subset(&seen)
        })
        .await;
    }

    pub async fn charges(&self) -> u64 {
        self.stats().await["charges"].as_u64().unwrap()
    }
}

/// A `payments` process on `db`, calling `provider_url`.
pub fn payments(db: &Db, provider_url: &str, lease: &str) -> Server {
    payments_with(db, provider_url, lease, "off")
}

/// [`payments`] with `PAYMENTS_ATTEMPT_HOLDS` set to `holds`.
pub fn payments_with(db: &Db, provider_url: &str, lease: &str, holds: &str) -> Server {
    Server::spawn(
        env!("CARGO_BIN_EXE_payments"),
        "payments",
        &db.dir,
        &[
            ("DATABASE_URL", &db.url),
            ("PROVIDER_URL", provider_url),
            ("WEBHOOK_URL", &format!("{provider_url}/webhooks")),
            ("PAYMENTS_LEASE", lease),
            ("PAYMENTS_ATTEMPT_HOLDS", holds),
        ],
    )
}

pub async fn post(c: &Client, tenant: Option<&str>, key: Option<&str>, body: &str) -> Reply {
    c.try_post_to("/payments", tenant, key, body).await.unwrap()
}

/// Posts until the answer is final (not `409` or `503`, which say "retry"), alternating
/// between `clients`; at most `tries` requests.
pub async fn post_until_final(clients: &[Client], key: &str, body: &str, tries: usize) -> Reply {
    for i in 0..tries {
        let reply = clients[i % clients.len()]
            .try_post_to("/payments", Some("acme"), Some(key), body)
            .await;
        match reply {
            Ok(reply) if !matches!(reply.status, 409 | 503) => return reply,
            Ok(reply) => {
                let problem = reply.assert_problem(reply.status);
                assert!(reply.header("retry-after").is_some(), "{problem}");
            }
            Err(error) => println!("request failed: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    panic!("{key}: no final answer after {tries} requests");
}

pub async fn payments_rows(db: &Db) -> i64 {
    db.scalar("SELECT count(*) FROM payments").await
}
