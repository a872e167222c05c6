//! The examples with `IDEM_STORAGE_KEYS`, as an operator runs them, against real processes
//! on every store: what `orders` and `payments` are sent and answer is nowhere in idem's
//! tables, as text or hexadecimal; replays are byte for byte; a new key rolled out in two
//! phases (opening only, then sealing) seals new keys while old ones replay; after a reseal
//! (as `idem keys reseal` does it) the old key can go; without any key a server refuses to
//! start on a sealed table, and told to start anyway, a key answers `503` and its row stays
//! as it is;
//! the documents each server serves and registers list those answers, the `500` of a value
//! failing its check only when it seals.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use common::payments::{Provider, post as pay};
use common::{Client, Db, Kind, Reply, Server, Store};
use serde_json::Value;

/// What the tests send, and look for in the tables.
const SKU: &str = "ZQ7SEAL-4242";
const CUSTOMER: &str = "cus-zq7seal-4242";
const SENT_AT: &str = "zq7-sealed-2026";

fn order(quantity: u32) -> String {
    format!(r#"{{"sku": "{SKU}", "quantity": {quantity}, "sent_at": "{SENT_AT}"}}"#)
}

fn payment(amount: u32) -> String {
    format!(
        r#"{{"amount": {amount}, "currency": "EUR", "customer": "{CUSTOMER}", "sent_at": "{SENT_AT}"}}"#
    )
}

/// `orders` and `payments` on `db`, sealing with `keys` (unset when empty).
fn servers(db: &Db, provider: &Provider, keys: &str) -> (Server, Server) {
    let orders = Server::start_with(
        db,
        &[
            ("DATABASE_URL", &db.url),
            ("IDEM_STORAGE_KEYS", keys),
            // Without keys, on a sealed table: told to start anyway (`refused_without_keys`).
            (
                "IDEM_CLEAR_BESIDE_SEALED",
                if keys.is_empty() { "1" } else { "" },
            ),
        ],
    );
    let hooks = format!("{}/webhooks", provider.url());
    let payments = Server::spawn(
        env!("CARGO_BIN_EXE_payments"),
        "payments",
        &db.dir,
        &[
            ("DATABASE_URL", &db.url),
            ("PROVIDER_URL", provider.url()),
            ("WEBHOOK_URL", &hooks),
            // Not the attribute's 30 s: the documents give the lease the server runs with.
            ("PAYMENTS_LEASE", "20s"),
            ("IDEM_STORAGE_KEYS", keys),
            (
                "IDEM_CLEAR_BESIDE_SEALED",
                if keys.is_empty() { "1" } else { "" },
            ),
        ],
    );
    (orders, payments)
}

/// `orders` started on `db` without storage keys, its key table sealed: it refuses to start,
/// naming the storage key and the variables that change that.
fn refused_without_keys(db: &Db, key: &str) {
    let direct = idem_testkit::harness::direct(&db.url);
    let migrations = if direct == db.url {
        ""
    } else {
        direct.as_str()
    };
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        ("MIGRATION_DATABASE_URL", migrations),
        ("IDEM_STORAGE_KEYS", ""),
    ];
    let said = common::refused_start(db, &env);
    assert!(said.contains(&format!("`{key}`")), "{said}");
    assert!(said.contains("IDEM_CLEAR_BESIDE_SEALED=1"), "{said}");
}

/// `POST path` as `client`'s server documents it (`/openapi.json`).
async fn documented(client: &Client, path: &str) -> Value {
    let api = client.get("acme", "/openapi.json").await.json();
    api["paths"][path]["post"].clone()
}

/// Whether the documented operation `post` lists the problem `type` under `status`.
fn lists(post: &Value, status: &str, type_: &str) -> bool {
    post["responses"][status]["content"]["application/problem+json"]["x-problem-types"]
        .as_array()
        .is_some_and(|types| types.iter().any(|t| t == type_))
}

/// Both servers' documents list `503 storage-key-unknown` (every server may meet a key
/// another one sealed), and `500 sealed-unreadable` exactly when they seal (`sealing`).
async fn storage_answers_documented(orders: &Client, payments: &Client, sealing: bool) {
    for (client, path) in [(orders, "/orders"), (payments, "/payments")] {
        let post = documented(client, path).await;
        let answers = &post["responses"];
        assert!(
            lists(&post, "503", "urn:idem:problem:storage-key-unknown"),
            "{path}: {answers}"
        );
        assert!(
            lists(&post, "500", "urn:idem:problem:handler-failed"),
            "{path}: {answers}"
        );
        assert_eq!(
            lists(&post, "500", "urn:idem:problem:sealed-unreadable"),
            sealing,
            "{path}: {answers}"
        );
    }
}

/// The document the servers recorded for `operation` in the operation registry, which
/// `idem docs` renders.
async fn registered(db: &Db, operation: &str) -> Value {
    let doc = db
        .text(&format!(
            "SELECT doc FROM idempotency_operations WHERE operation = '{operation}'"
        ))
        .await;
    serde_json::from_str(&doc).unwrap()
}

/// What was sent and answered, by key: (key, orders?, body, first answer).
type Sent = Vec<(String, bool, String, Reply)>;

async fn send(orders: &Client, payments: &Client, sent: &mut Sent, round: &str) {
    for i in 1..=3u32 {
        let key = format!("{round}-order-{i}");
        let body = order(i);
        let reply = orders.post(Some("acme"), Some(&key), &body).await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        assert!(reply.body.contains(SKU));
        sent.push((key, true, body, reply));
        let key = format!("{round}-payment-{i}");
        let body = payment(1000 + i);
        let reply = pay(payments, Some("acme"), Some(&key), &body).await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        assert!(reply.body.contains(CUSTOMER));
        sent.push((key, false, body, reply));
    }
}

/// Every key sent replays its first answer byte for byte.
async fn replays(orders: &Client, payments: &Client, sent: &Sent) {
    for (key, is_order, body, first) in sent {
        let reply = if *is_order {
            orders.post(Some("acme"), Some(key), body).await
        } else {
            pay(payments, Some("acme"), Some(key), body).await
        };
        assert_eq!(reply.status, first.status, "{key}: {}", reply.body);
        assert!(reply.replayed(), "{key}");
        assert_eq!(reply.body, first.body, "{key}");
        assert_eq!(reply.header("location"), first.header("location"), "{key}");
    }
}

/// Asserts that nothing sent is in idem's tables, as text or hexadecimal.
async fn nowhere(db: &Db) {
    let hex = |text: &str| -> String { text.bytes().map(|b| format!("{b:02x}")).collect() };
    let columns = db.idem_columns_hex().await;
    assert!(
        columns.iter().any(|c| !c.is_empty()),
        "the tables hold something"
    );
    for value in [SKU, CUSTOMER, SENT_AT] {
        // The value's bytes, and the value written as hexadecimal text (either case).
        let needles = [
            hex(value),
            hex(&hex(value)),
            hex(&hex(value).to_uppercase()),
        ];
        for column in &columns {
            for needle in &needles {
                assert!(
                    !column.contains(needle.as_str()),
                    "{value} stored in the clear"
                );
            }
        }
    }
}

/// The storage key a key's response is sealed under.
async fn sealed_by(db: &Db, key: &str) -> Option<String> {
    let headers = db.key_column(key, "response_headers").await;
    idem_runtime::store::Sealed::key_of(&headers).map(str::to_owned)
}

async fn sealed_at_rest<DB: Store>() {
    let db = Db::fresh(Kind::of::<DB>()).await;
    let provider = Provider::start(&db);
    let entry = idem_runtime::store::Keyring::generate_entry;
    let (k1, k2) = (entry("k1"), entry("k2"));
    let mut sent = Sent::new();

    let (orders, payments) = servers(&db, &provider, &k1);
    let (o, p) = (Client::new(&orders), Client::new(&payments));
    // The documents say what a sealing server may answer, and the lease it runs with.
    storage_answers_documented(&o, &p, true).await;
    assert_eq!(
        documented(&p, "/payments").await["x-idempotency"]["lease"],
        "20s"
    );
    assert_eq!(
        registered(&db, "create_order:v1").await["sealed_at_rest"],
        true
    );
    let recorded = registered(&db, "create_payment:v1").await;
    assert_eq!(recorded["sealed_at_rest"], true);
    assert_eq!(recorded["lease"], "20s");
    send(&o, &p, &mut sent, "one").await;
    replays(&o, &p, &sent).await;
    assert_eq!(sealed_by(&db, "one-order-1").await.as_deref(), Some("k1"));
    assert_eq!(sealed_by(&db, "one-payment-1").await.as_deref(), Some("k1"));
    drop((orders, payments));

    // Rotation, phase one: the new key only opens, after the sealing one; old keys replay.
    let (orders, payments) = servers(&db, &provider, &format!("{k1},{k2}"));
    replays(&Client::new(&orders), &Client::new(&payments), &sent).await;
    drop((orders, payments));

    // Phase two, the new key first: old keys replay, new ones are sealed under it.
    let (orders, payments) = servers(&db, &provider, &format!("{k2},{k1}"));
    let (o, p) = (Client::new(&orders), Client::new(&payments));
    replays(&o, &p, &sent).await;
    send(&o, &p, &mut sent, "two").await;
    assert_eq!(sealed_by(&db, "two-order-1").await.as_deref(), Some("k2"));
    assert_eq!(sealed_by(&db, "two-payment-2").await.as_deref(), Some("k2"));
    assert_eq!(sealed_by(&db, "one-order-2").await.as_deref(), Some("k1"));
    // An operator acts on a sealed key without the keys: audited, still nothing in the clear.
    db.force_delete("two-order-3").await;
    sent.retain(|(key, ..)| key != "two-order-3");
    nowhere(&db).await;
    drop((orders, payments));

    // Every key resealed under k2: k1 can go.
    let resealed = db.reseal(&format!("{k2},{k1}")).await;
    assert!(resealed >= 6, "the first round's keys: {resealed}");
    for (key, ..) in &sent {
        assert_eq!(sealed_by(&db, key).await.as_deref(), Some("k2"), "{key}");
    }
    let (orders, payments) = servers(&db, &provider, &k2);
    let (o, p) = (Client::new(&orders), Client::new(&payments));
    replays(&o, &p, &sent).await;
    nowhere(&db).await;
    drop((orders, payments));

    // Without any key, a server refuses to start on the sealed table; told to start anyway,
    // a sealed key answers a clear 503, and its row is as it was. The
    // documents list that 503 still (any server may meet a key another one sealed), and not
    // the 500 of a value failing its check, which only a server with keys can answer.
    refused_without_keys(&db, "k2");
    let (orders, payments) = servers(&db, &provider, "");
    let (o, p) = (Client::new(&orders), Client::new(&payments));
    storage_answers_documented(&o, &p, false).await;
    assert_eq!(
        registered(&db, "create_order:v1")
            .await
            .get("sealed_at_rest"),
        None
    );
    let (key, _, body, _) = &sent[0];
    let before = db.key_column(key, "response_body").await;
    let reply = o.post(Some("acme"), Some(key), body).await;
    let problem = reply.assert_problem(503);
    assert_eq!(problem["type"], "urn:idem:problem:storage-key-unknown");
    assert!(!reply.body.contains(SKU));
    let (key, _, body, _) = &sent[1];
    let problem = pay(&p, Some("acme"), Some(key), body)
        .await
        .assert_problem(503);
    assert_eq!(problem["type"], "urn:idem:problem:storage-key-unknown");
    assert_eq!(db.key_column(&sent[0].0, "response_body").await, before);
    assert_eq!(db.orders().await, 6, "nothing ran again");
    drop((orders, payments));
}

idem_testkit::on_every_store!(sealed_at_rest);
