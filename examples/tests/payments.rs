//! The `payments` example's contract, driven over HTTP against real processes — the
//! `payments` server (on PostgreSQL, and on SQLite; not run on MySQL here) and the
//! `fake-provider` — including a process killed between the provider's charge and its
//! recording, and a provider that fails and loses answers under two servers sharing one
//! database.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::payments::{Provider, payments, payments_rows, payments_with, post, post_until_final};
use common::{Client, Db, Kind, Server, Store, eventually};
use futures_util::future::join_all;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

const PAYMENT: &str = r#"{"amount": 1250, "currency": "EUR", "customer": "cus-1"}"#;
/// The same payment, other key order and formatting.
const PAYMENT_REFORMATTED: &str = r#"{"customer":"cus-1","amount":1250,"currency":"EUR"}"#;
const OTHER_PAYMENT: &str = r#"{"amount": 1251, "currency": "EUR", "customer": "cus-1"}"#;
/// The fake provider declines every charge of 402.
const DECLINED: &str = r#"{"amount": 402, "currency": "EUR", "customer": "cus-1"}"#;

/// Case 1: the happy path, refusals, replays and reads.
async fn contract<DB: Store>() {
    let kind = Kind::of::<DB>();
    let db = Db::fresh(kind).await;
    let provider = Provider::start(&db);
    let server = payments(&db, provider.url(), "30s");
    let c = Client::new(&server);

    // Authentication, then the key, then the body.
    post(&c, None, Some("k1"), PAYMENT)
        .await
        .assert_problem(401);
    post(&c, Some("ACME"), Some("k1"), PAYMENT)
        .await
        .assert_problem(401);
    let missing = post(&c, Some("acme"), None, PAYMENT)
        .await
        .assert_problem(400);
    assert_eq!(missing["type"], "urn:idem:problem:missing-key");
    for bad in [
        "\"unterminated",
        "a b",
        &"k".repeat(idem_runtime::key::MAX_RECEIVED_LEN + 1),
        "\"\"",
    ] {
        post(&c, Some("acme"), Some(bad), PAYMENT)
            .await
            .assert_problem(400);
    }
    let invalid = [
        r#"{"amount": 0, "currency": "EUR", "customer": "cus-1"}"#,
        r#"{"amount": 1000001, "currency": "EUR", "customer": "cus-1"}"#,
        r#"{"amount": 12.5, "currency": "EUR", "customer": "cus-1"}"#,
        r#"{"amount": 100, "currency": "eur", "customer": "cus-1"}"#,
        r#"{"amount": 100, "currency": "EURO", "customer": "cus-1"}"#,
        r#"{"amount": 100, "currency": "EUR", "customer": "Cus_1"}"#,
        r#"{"amount": 100, "currency": "EUR", "customer": ""}"#,
        r#"{"amount": 100, "currency": "EUR"}"#,
        r#"{"amount": 100, "currency": "EUR", "customer": "cus-1", "note": "x"}"#,
        r#"{"amount": "100", "currency": "EUR", "customer": "cus-1"}"#,
    ];
    for body in invalid {
        post(&c, Some("acme"), Some("k1"), body)
            .await
            .assert_problem(422);
    }
    for body in [r#"{"amount": 100, "currency": "#, "not json"] {
        post(&c, Some("acme"), Some("k1"), body)
            .await
            .assert_problem(400);
    }
    assert_eq!(db.keys().await, 0, "refused requests store nothing");
    assert_eq!(provider.stats().await["requests"], 0);

    // The payment.
    let first = post(&c, Some("acme"), Some("k1"), PAYMENT).await;
    assert_eq!(first.status, 201, "{}", first.body);
    assert!(!first.replayed());
    assert_eq!(first.header("content-type"), Some("application/json"));
    let payment = first.json();
    let id = payment["id"].as_str().unwrap().to_owned();
    assert_eq!(first.header("location").unwrap(), format!("/payments/{id}"));
    assert_eq!(payment["amount"], 1250);
    assert_eq!(payment["currency"], "EUR");
    assert_eq!(payment["customer"], "cus-1");
    assert_eq!(payment["status"], "succeeded");
    assert!(payment["charge_id"].as_str().unwrap().starts_with("ch_"));
    assert_eq!(payment.as_object().unwrap().len(), 6, "{payment}");

    // Replays: the same answer, whatever the formatting; nothing reaches the provider.
    for body in [PAYMENT, PAYMENT_REFORMATTED] {
        let replay = post(&c, Some("acme"), Some("\"k1\""), body).await;
        assert_eq!(replay.status, 201);
        assert!(replay.replayed());
        assert_eq!(replay.body, first.body);
        assert_eq!(replay.header("location"), first.header("location"));
        assert_eq!(replay.header("content-type"), Some("application/json"));
    }
    // `sent_at` is left out of the fingerprint: another value is the same request.
    let stamped = r#"{"amount": 1250, "currency": "EUR", "customer": "cus-1", "sent_at": "now"}"#;
    let replay = post(&c, Some("acme"), Some("k1"), stamped).await;
    assert!(replay.replayed(), "{}", replay.body);
    // Same key, other payment: 422, naming the field that changed (a staged key keeps its
    // request's field digests too), never a value.
    let mismatch = post(&c, Some("acme"), Some("k1"), OTHER_PAYMENT).await;
    let problem = mismatch.assert_problem(422);
    assert_eq!(problem["type"], "urn:idem:problem:key-reused");
    assert_eq!(
        problem["mismatch"],
        json!({"changed": ["/body/amount"], "added": [], "removed": []}),
        "{problem}"
    );
    // A body the endpoint refuses gets the key's answer first, naming what differs.
    let body = r#"{"amount": 1250, "currency": "EUR", "payer": "cus-1"}"#;
    let problem = post(&c, Some("acme"), Some("k1"), body)
        .await
        .assert_problem(422);
    assert_eq!(problem["type"], "urn:idem:problem:key-reused");
    assert_eq!(
        problem["mismatch"],
        json!({"changed": ["/body"], "added": [], "removed": ["/body/customer"]}),
        "{problem}"
    );

    // Reading: own tenant only.
    let read = c.get("acme", &format!("/payments/{id}")).await;
    assert_eq!(read.status, 200, "{}", read.body);
    assert_eq!(read.json(), payment);
    c.get("globex", &format!("/payments/{id}"))
        .await
        .assert_problem(404);
    c.get("acme", "/payments/not-a-uuid")
        .await
        .assert_problem(404);
    c.get("acme", &format!("/payments/{}", uuid::Uuid::new_v4()))
        .await
        .assert_problem(404);

    let stats = provider.stats().await;
    assert_eq!(stats["charges"], 1, "{stats}");
    assert_eq!(
        stats["requests"], 1,
        "replays do not call the provider: {stats}"
    );

    // The same key under another tenant is another payment.
    let other = post(&c, Some("globex"), Some("k1"), PAYMENT).await;
    assert_eq!(other.status, 201);
    assert_ne!(other.json()["id"], payment["id"]);
    assert_ne!(other.json()["charge_id"], payment["charge_id"]);

    let stats = provider.stats().await;
    assert_eq!(stats["charges"], 2, "{stats}");
    assert_eq!(stats["requests"], 2, "{stats}");
    assert_eq!(payments_rows(&db).await, 2);
    let charge_id: String = db
        .text(&format!("SELECT charge_id FROM payments WHERE id = '{id}'"))
        .await;
    assert_eq!(charge_id, payment["charge_id"].as_str().unwrap());
    // Both payments' events reach the webhook through the outbox.
    let ids: HashSet<String> = [
        id.to_string(),
        other.json()["id"].as_str().unwrap().to_owned(),
    ]
    .into_iter()
    .collect();
    provider.await_events(&ids).await;
    assert!(server.stop().success(), "graceful shutdown exits 0");
}

/// Case 2: a declined card: `402`, stored and replayed; no payment, no charge.
async fn declined<DB: Store>() {
    let kind = Kind::of::<DB>();
    let db = Db::fresh(kind).await;
    let provider = Provider::start(&db);
    let server = payments(&db, provider.url(), "30s");
    let c = Client::new(&server);

    let first = post(&c, Some("acme"), Some("k-402"), DECLINED).await;
    let problem = first.assert_problem(402);
    assert_eq!(problem["type"], "urn:idem:example:payment-declined");
    assert_eq!(problem["title"], "payment declined");
    assert!(!first.replayed());

    let again = post(&c, Some("acme"), Some("k-402"), DECLINED).await;
    again.assert_problem(402);
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    post(&c, Some("acme"), Some("k-402"), PAYMENT)
        .await
        .assert_problem(422);

    let stats = provider.stats().await;
    assert_eq!(stats["charges"], 0, "{stats}");
    assert_eq!(
        stats["requests"], 1,
        "the replay does not call the provider"
    );
    assert_eq!(payments_rows(&db).await, 0);
}

/// Case 3: a failing provider: `503` with `Retry-After`; the retry resumes and charges once.
async fn provider_failure<DB: Store>() {
    let kind = Kind::of::<DB>();
    let db = Db::fresh(kind).await;
    let provider = Provider::start(&db);
    let server = payments(&db, provider.url(), "30s");
    let c = Client::new(&server);

    provider.control(json!({"fail_rate": 1})).await;
    for _ in 0..2 {
        let reply = post(&c, Some("acme"), Some("k-fail"), PAYMENT).await;
        let problem = reply.assert_problem(503);
        assert_eq!(problem["type"], "urn:idem:problem:interrupted");
        assert_eq!(reply.header("retry-after"), Some("1"));
    }
    assert_eq!(provider.charges().await, 0);
    assert_eq!(payments_rows(&db).await, 0);

    provider.control(json!({"fail_rate": 0})).await;
    let reply = post_until_final(std::slice::from_ref(&c), "k-fail", PAYMENT, 20).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let replay = post(&c, Some("acme"), Some("k-fail"), PAYMENT).await;
    assert!(replay.replayed());
    assert_eq!(replay.body, reply.body);
    assert_eq!(provider.charges().await, 1);
    assert_eq!(payments_rows(&db).await, 1);
}

/// A TCP proxy to `upstream` that forwards what its clients send and throws away every
/// answer: the provider does what it is asked and its caller never hears back. Returns the
/// proxy's base URL.
async fn black_hole(upstream: &str) -> String {
    let upstream = upstream.trim_start_matches("http://").to_owned();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let (mut from_client, _to_client) = inbound.split();
                let (mut from_upstream, mut to_upstream) = outbound.split();
                let forward = async {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = from_client.read(&mut buf).await {
                        if to_upstream.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                };
                let swallow = async {
                    let mut buf = [0u8; 4096];
                    while let Ok(1..) = from_upstream.read(&mut buf).await {}
                };
                tokio::join!(forward, swallow);
            });
        }
    });
    format!("http://{addr}")
}

/// Case 4: the process is killed after the provider charged and before the charge was
/// recorded. A new process resumes the payment — on the client's retry or, with no retry, by
/// its reconciler — with the same provider key: one charge, one payment.
///
/// With `ttl_passes`, the key's `expires_at` is moved into the past while it is stuck: a key
/// that is not final never expires, so the retry is never answered `410` (which would send
/// the client to a new key and a second charge); it ends `201` with one charge, and the
/// completed key's TTL counts from its completion.
async fn crash_after_charge(kind: Kind, client_retries: bool) {
    crash_after_charge_with(kind, client_retries, false).await;
}

/// A `payments` process (`lease`, `PAYMENTS_ATTEMPT_HOLDS=holds`) whose provider charges but
/// never answers, killed with `kill -9` once the charge is made for `key`: its client gets no
/// answer.
async fn killed_mid_charge(db: &Db, provider: &Provider, lease: &str, holds: &str, key: &str) {
    let proxy = black_hole(provider.url()).await;
    let doomed = payments_with(db, &proxy, lease, holds);
    let c = Client::new(&doomed);
    let key = key.to_owned();
    let lost = tokio::spawn(async move {
        c.try_post_to("/payments", Some("acme"), Some(&key), PAYMENT)
            .await
    });
    eventually(
        Duration::from_secs(10),
        "the provider charged",
        || async move { provider.charges().await == 1 },
    )
    .await;
    doomed.kill();
    assert!(lost.await.unwrap().is_err(), "the client got no answer");
}

async fn crash_after_charge_with(kind: Kind, client_retries: bool, ttl_passes: bool) {
    let db = Db::fresh(kind).await;
    let provider = Provider::start(&db);
    killed_mid_charge(&db, &provider, "1s", "off", "k-crash").await;
    assert_eq!(payments_rows(&db).await, 0, "the charge was never recorded");
    assert_eq!(
        db.text("SELECT status FROM idempotency_keys").await,
        "processing"
    );
    if ttl_passes {
        db.expire_all_keys().await;
        assert!(db.seconds_to_expiry("k-crash").await < 0);
    }

    let server = payments(&db, provider.url(), "1s");
    let c = Client::new(&server);
    if client_retries {
        let reply = post_until_final(std::slice::from_ref(&c), "k-crash", PAYMENT, 40).await;
        assert_eq!(reply.status, 201, "{}", reply.body);
    } else {
        // Nobody retries: the reconciler resumes the payment within a few leases.
        let db = &db;
        eventually(
            Duration::from_secs(8),
            "the reconciler completed it",
            || async move { db.text("SELECT status FROM idempotency_keys").await == "completed" },
        )
        .await;
    }
    assert_eq!(payments_rows(&db).await, 1);
    let replay = post(&c, Some("acme"), Some("k-crash"), PAYMENT).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    assert!(replay.replayed());
    let payment = replay.json();
    let charge_id = db.text("SELECT charge_id FROM payments").await;
    assert_eq!(payment["charge_id"], charge_id.as_str());
    assert_eq!(
        db.text("SELECT id FROM payments").await,
        payment["id"].as_str().unwrap()
    );

    let stats = provider.stats().await;
    assert_eq!(stats["charges"], 1, "charged once: {stats}");
    assert_eq!(stats["distinct_keys"], 1, "one provider key: {stats}");
    assert!(
        stats["requests"].as_u64().unwrap() >= 2,
        "the charge was asked for again, and deduplicated: {stats}"
    );
    // The resumed payment's event is delivered too.
    let id = payment["id"].as_str().unwrap().to_owned();
    provider.await_events(&HashSet::from([id])).await;
    // The completed key is replayed for its whole TTL (24 h), counted from its completion.
    let to_expiry = db.seconds_to_expiry("k-crash").await;
    assert!(
        (24 * 3600 - 120..=24 * 3600).contains(&to_expiry),
        "expires {to_expiry} s from now"
    );
}

/// Case 4b: the process is killed after the provider charged, with an hour-long lease. On
/// PostgreSQL the killed attempt's hold ended with its connection: the client's first retry
/// on a new process proves its owner gone and resumes the payment at once (one charge). On
/// SQLite, and on PostgreSQL without `PAYMENTS_ATTEMPT_HOLDS=on`, the lease decides: the retry
/// is told `409` with `Retry-After`, and the key stays processing.
async fn crash_with_a_live_lease(kind: Kind, holds: bool) {
    let db = Db::fresh(kind).await;
    let provider = Provider::start(&db);
    let holds = if holds { "on" } else { "off" };
    killed_mid_charge(&db, &provider, "1h", holds, "k-live").await;

    let server = payments_with(&db, provider.url(), "1h", holds);
    let c = Client::new(&server);
    // (Behind a transaction pooler, `PGBOUNCER_URL`, holds are off: the lease decides.)
    if kind == Kind::Postgres && holds == "on" && idem_testkit::harness::pooled().is_none() {
        // (The server ends the killed session as soon as it reads its closed socket.)
        let reply = post_until_final(std::slice::from_ref(&c), "k-live", PAYMENT, 20).await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        assert!(!reply.replayed());
        assert_eq!(payments_rows(&db).await, 1);
        let stats = provider.stats().await;
        assert_eq!(stats["charges"], 1, "charged once: {stats}");
        assert_eq!(db.scalar("SELECT attempt FROM idempotency_keys").await, 2);
    } else {
        let reply = post(&c, Some("acme"), Some("k-live"), PAYMENT).await;
        let problem = reply.assert_problem(409);
        assert!(reply.header("retry-after").is_some(), "{problem}");
        assert_eq!(
            db.text("SELECT status FROM idempotency_keys").await,
            "processing"
        );
        assert_eq!(payments_rows(&db).await, 0);
    }
}

/// Case 6: an operator deletes a payment's key with `--force` while its charge is in flight
/// (the provider answers after 2 s), and a new request comes under the same key with another
/// amount. The deleted reservation's attempt is fenced out of the new row: the new client is
/// answered with its own payment, never the old one; the old client is told the key is
/// another request's now (`422`), or to retry (`409`); the key ends final within the lease.
/// The old charge happened all the same: the provider made two, and no payment names the
/// first (the effect an operator forcing a delete takes on).
async fn forced_delete_mid_charge(kind: Kind, holds: bool) {
    const OLD: &str = r#"{"amount": 3002, "currency": "EUR", "customer": "cus-1"}"#;
    const NEW: &str = r#"{"amount": 3999, "currency": "EUR", "customer": "cus-1"}"#;
    let db = Db::fresh(kind).await;
    let provider = Provider::start(&db);
    provider.control(json!({"delay_ms": 2000})).await;
    let holds = if holds { "on" } else { "off" };
    let server = payments_with(&db, provider.url(), "10s", holds);
    let c = Client::new(&server);
    let old = {
        let c = c.clone();
        tokio::spawn(async move { post(&c, Some("acme"), Some("k-forced"), OLD).await })
    };
    let provider = &provider;
    eventually(
        Duration::from_secs(10),
        "the old charge is in flight",
        || async move { provider.stats().await["requests"].as_u64().unwrap() >= 1 },
    )
    .await;
    db.force_delete("k-forced").await;

    let new = post_until_final(std::slice::from_ref(&c), "k-forced", NEW, 60).await;
    assert_eq!(new.status, 201, "{}", new.body);
    assert_eq!(new.json()["amount"], 3999, "{}", new.body);
    let old = old.await.unwrap();
    assert!(
        matches!(old.status, 409 | 422),
        "{} {}",
        old.status,
        old.body
    );
    if old.status == 422 {
        // Fenced out by another request: the answer names what differs from it.
        assert_eq!(
            old.json()["mismatch"],
            json!({"changed": ["/body/amount"], "added": [], "removed": []}),
            "{}",
            old.body
        );
    }

    assert_eq!(
        db.text("SELECT status FROM idempotency_keys").await,
        "completed"
    );
    assert_eq!(payments_rows(&db).await, 1);
    assert_eq!(db.scalar("SELECT amount FROM payments").await, 3999);
    let replay = post(&c, Some("acme"), Some("k-forced"), NEW).await;
    assert_eq!(replay.status, 201, "{}", replay.body);
    assert!(replay.replayed());
    assert_eq!(replay.json()["amount"], 3999);
    post(&c, Some("acme"), Some("k-forced"), OLD)
        .await
        .assert_problem(422);
    let stats = provider.stats().await;
    assert_eq!(stats["charges"], 2, "the old charge and the new: {stats}");
    assert_eq!(
        stats["distinct_keys"], 2,
        "two reservations, two provider keys: {stats}"
    );
}

/// Case 7: an operator deletes a completed payment's key with `--force`, and a request with
/// another body comes under the same key: a new reservation, with provider keys of its own,
/// so the provider charges it (it would refuse the old provider key with another amount, for
/// ever) and the client gets its own final answer at once; nothing is left stuck for the
/// reconciler.
async fn forced_delete_of_a_completed_payment(kind: Kind) {
    const AGAIN: &str = r#"{"amount": 7777, "currency": "EUR", "customer": "cus-1"}"#;
    let db = Db::fresh(kind).await;
    let provider = Provider::start(&db);
    let server = payments(&db, provider.url(), "2s");
    let c = Client::new(&server);
    let first = post(&c, Some("acme"), Some("k-again"), PAYMENT).await;
    assert_eq!(first.status, 201, "{}", first.body);
    db.force_delete("k-again").await;

    let again = post_until_final(std::slice::from_ref(&c), "k-again", AGAIN, 20).await;
    assert_eq!(again.status, 201, "{}", again.body);
    assert!(!again.replayed());
    assert_eq!(again.json()["amount"], 7777);
    assert_ne!(
        again.json()["id"],
        first.json()["id"],
        "a payment of its own"
    );
    assert_eq!(payments_rows(&db).await, 2);
    assert_eq!(
        db.text("SELECT status FROM idempotency_keys").await,
        "completed"
    );
    let stats = provider.stats().await;
    assert_eq!(stats["charges"], 2, "{stats}");
    assert_eq!(stats["distinct_keys"], 2, "{stats}");
}

/// Case 5: two processes on one PostgreSQL, a provider that fails 20 % of charges and loses
/// 30 % of its answers; 20 keys, each retried on alternating processes until final: one
/// charge and one payment per paid key, none for declined ones.
#[tokio::test]
async fn chaos_two_processes_on_postgres() {
    let db = Db::fresh(Kind::Postgres).await;
    let provider = Provider::start(&db);
    let servers = [
        payments(&db, provider.url(), "1s"),
        payments(&db, provider.url(), "1s"),
    ];
    let clients: Vec<Client> = servers.iter().map(Client::new).collect();
    provider
        .control(json!({"fail_rate": 0.2, "drop_response_rate": 0.3}))
        .await;

    let work = (0..20).map(|i| {
        let clients = clients.clone();
        async move {
            let key = format!("chaos-{i}");
            let amount = if i % 5 == 4 { 402 } else { 1000 + i };
            let body = json!({"amount": amount, "currency": "EUR", "customer": format!("cus-{i}")})
                .to_string();
            // Each key starts on another process.
            let mut clients = clients;
            clients.rotate_left(i as usize % 2);
            let reply = post_until_final(&clients, &key, &body, 80).await;
            (key, amount, body, reply)
        }
    });
    let results = join_all(work).await;

    provider
        .control(json!({"fail_rate": 0, "drop_response_rate": 0}))
        .await;
    let mut paid = HashSet::new();
    let mut charge_ids = HashSet::new();
    for (key, amount, body, reply) in &results {
        if *amount == 402 {
            reply.assert_problem(402);
        } else {
            assert_eq!(reply.status, 201, "{key}: {}", reply.body);
            let payment = reply.json();
            assert_eq!(payment["amount"], *amount);
            paid.insert(payment["id"].as_str().unwrap().to_owned());
            charge_ids.insert(payment["charge_id"].as_str().unwrap().to_owned());
        }
        // Final means final, on either process.
        for c in &clients {
            let replay = post(c, Some("acme"), Some(key), body).await;
            assert!(replay.replayed(), "{key}: {}", replay.body);
            assert_eq!(replay.body, reply.body, "{key}");
        }
    }
    assert_eq!(paid.len(), 16);
    assert_eq!(charge_ids.len(), 16);

    let stats = provider.stats().await;
    println!("provider: {stats}");
    assert_eq!(stats["charges"], 16, "one charge per paid key: {stats}");
    assert_eq!(
        stats["distinct_keys"], 20,
        "one provider key per key: {stats}"
    );
    assert_eq!(payments_rows(&db).await, 16);
    assert_eq!(
        db.scalar("SELECT count(DISTINCT charge_id) FROM payments")
            .await,
        16
    );
    // Every payment's event arrives (duplicates allowed, none missing), none for declines.
    provider.await_events(&paid).await;
    let delivered: HashSet<String> = provider.payment_events().await.into_iter().collect();
    assert_eq!(delivered, paid);
    for id in &paid {
        let read = clients[0].get("acme", &format!("/payments/{id}")).await;
        assert_eq!(read.status, 200, "{id}");
        assert!(charge_ids.contains(read.json()["charge_id"].as_str().unwrap()));
    }
    assert_eq!(
        db.scalar("SELECT count(*) FROM idempotency_keys WHERE status = 'completed'")
            .await,
        20
    );
}

/// `DATABASE_URL` unset: an SQLite file `payments.db` in the working directory.
#[tokio::test]
async fn default_database_is_a_sqlite_file_in_the_working_directory() {
    let dir = idem_testkit::harness::new_dir("payments");
    let file = dir.join("payments.db");
    let db = Db::sqlite_at(format!("sqlite://{}", file.display()), dir);
    let provider = Provider::start(&db);
    let server = Server::spawn(
        env!("CARGO_BIN_EXE_payments"),
        "payments",
        &db.dir,
        &[("PROVIDER_URL", provider.url())],
    );
    let reply = post(&Client::new(&server), Some("acme"), Some("k1"), PAYMENT).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert!(common::exists(&file));
    assert_eq!(payments_rows(&db).await, 1);
    assert!(server.stop().success());
}

idem_testkit::on_every_store!(
    #[flavor = current_thread]
    contract,
    declined,
    provider_failure
);

mod crash {
    use super::{
        Kind, crash_after_charge, crash_after_charge_with, crash_with_a_live_lease,
        forced_delete_mid_charge, forced_delete_of_a_completed_payment,
    };

    #[tokio::test]
    async fn postgres_forced_delete_of_a_completed_payment() {
        forced_delete_of_a_completed_payment(Kind::Postgres).await;
    }
    #[tokio::test]
    async fn sqlite_forced_delete_of_a_completed_payment() {
        forced_delete_of_a_completed_payment(Kind::Sqlite).await;
    }

    #[tokio::test]
    async fn postgres_forced_delete_mid_charge_with_holds() {
        forced_delete_mid_charge(Kind::Postgres, true).await;
    }
    #[tokio::test]
    async fn postgres_forced_delete_mid_charge() {
        forced_delete_mid_charge(Kind::Postgres, false).await;
    }
    #[tokio::test]
    async fn sqlite_forced_delete_mid_charge() {
        forced_delete_mid_charge(Kind::Sqlite, false).await;
    }

    #[tokio::test]
    async fn postgres_live_lease_owner_gone() {
        crash_with_a_live_lease(Kind::Postgres, true).await;
    }
    #[tokio::test]
    async fn postgres_live_lease_without_holds() {
        crash_with_a_live_lease(Kind::Postgres, false).await;
    }
    #[tokio::test]
    async fn sqlite_live_lease() {
        crash_with_a_live_lease(Kind::Sqlite, true).await;
    }

    #[tokio::test]
    async fn postgres_ttl_passes_while_stuck_retry() {
        crash_after_charge_with(Kind::Postgres, true, true).await;
    }
    #[tokio::test]
    async fn postgres_ttl_passes_while_stuck_reconciler() {
        crash_after_charge_with(Kind::Postgres, false, true).await;
    }
    #[tokio::test]
    async fn sqlite_ttl_passes_while_stuck_retry() {
        crash_after_charge_with(Kind::Sqlite, true, true).await;
    }
    #[tokio::test]
    async fn sqlite_ttl_passes_while_stuck_reconciler() {
        crash_after_charge_with(Kind::Sqlite, false, true).await;
    }

    #[tokio::test]
    async fn postgres_retry_resumes() {
        crash_after_charge(Kind::Postgres, true).await;
    }
    #[tokio::test]
    async fn postgres_reconciler_resumes() {
        crash_after_charge(Kind::Postgres, false).await;
    }
    #[tokio::test]
    async fn sqlite_retry_resumes() {
        crash_after_charge(Kind::Sqlite, true).await;
    }
    #[tokio::test]
    async fn sqlite_reconciler_resumes() {
        crash_after_charge(Kind::Sqlite, false).await;
    }
}
