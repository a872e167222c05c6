//! The `orders` example's contract, driven over HTTP against real server processes on every
//! store idem supports (on MySQL, the injected faults and two processes on one key).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Client, Db, Kind, Server, Store, refused_start};
use futures_util::future::join_all;
use idem_testkit::harness::{apply_with_client, direct, migration_files};

const ORDER: &str = r#"{"sku": "BOOK-1", "quantity": 2}"#;
/// The same order, other key order and formatting.
const ORDER_REFORMATTED: &str = r#"{"quantity":2,"sku":"BOOK-1"}"#;
const OTHER_ORDER: &str = r#"{"sku": "BOOK-1", "quantity": 3}"#;

async fn contract<DB: Store>() {
    let kind = Kind::of::<DB>();
    let db = Db::fresh(kind).await;
    let server = Server::start(&db);
    contract_on(&db, server).await;
}

/// The contract, against `server` on `db`, both fresh.
async fn contract_on(db: &Db, server: Server) {
    let c = Client::new(&server);

    // Authentication comes before anything else.
    c.post(None, Some("k1"), ORDER).await.assert_problem(401);
    c.post(Some("ACME"), Some("k1"), ORDER)
        .await
        .assert_problem(401);
    c.post(Some(&"a".repeat(65)), Some("k1"), ORDER)
        .await
        .assert_problem(401);

    // Missing or malformed keys: 400, nothing stored.
    c.post(Some("acme"), None, ORDER).await.assert_problem(400);
    for bad in [
        "\"unterminated",
        "\"a b\"",
        "a\"b",
        &"k".repeat(idem_runtime::key::MAX_RECEIVED_LEN + 1),
        "\"\"",
    ] {
        c.post(Some("acme"), Some(bad), ORDER)
            .await
            .assert_problem(400);
    }

    // Invalid bodies: 4xx, nothing stored, the key is not burned.
    let bad_bodies = [
        r#"{"sku": "BOOK-1", "quantity": 0}"#,
        r#"{"sku": "BOOK-1", "quantity": 21}"#,
        r#"{"sku": "book-1", "quantity": 2}"#,
        r#"{"sku": "", "quantity": 2}"#,
        r#"{"sku": "BOOK-1", "quantity": 2, "coupon": "x"}"#,
        r#"{"sku": "BOOK-1"}"#,
        r#"{"sku": "BOOK-1", "quantity": "#,
        "not json",
    ];
    for body in bad_bodies {
        let reply = c.post(Some("acme"), Some("k1"), body).await;
        assert!(
            matches!(reply.status, 400 | 422),
            "{body}: {}",
            reply.status
        );
        reply.assert_problem(reply.status);
    }
    let huge = format!(
        r#"{{"sku": "BOOK-1", "quantity": 2, "pad": "{}"}}"#,
        "x".repeat(17 * 1024)
    );
    c.post(Some("acme"), Some("k1"), &huge)
        .await
        .assert_problem(413);
    assert_eq!(db.orders().await, 0);
    assert_eq!(db.keys().await, 0);

    // First execution.
    let first = c.post(Some("acme"), Some("\"k1\""), ORDER).await;
    assert_eq!(first.status, 201, "{}", first.body);
    assert!(!first.replayed());
    let order = first.json();
    let id = order["id"].as_str().unwrap().to_owned();
    assert_eq!(order["sku"], "BOOK-1");
    assert_eq!(order["quantity"], 2);
    assert_eq!(first.header("location").unwrap(), format!("/orders/{id}"));
    assert_eq!(first.header("content-type"), Some("application/json"));

    // Replays: identical, whatever the formatting, quoted or bare key.
    for (key, body) in [("\"k1\"", ORDER), ("k1", ORDER_REFORMATTED)] {
        let replay = c.post(Some("acme"), Some(key), body).await;
        assert_eq!(replay.status, 201);
        assert!(replay.replayed());
        assert_eq!(replay.body, first.body);
        assert_eq!(replay.header("location"), first.header("location"));
        assert_eq!(replay.header("content-type"), Some("application/json"));
    }

    // `sent_at` is left out of the fingerprint: another value, or none, is the same request.
    for sent_at in [r#""2026-12-05T10:00:00Z""#, r#""yesterday""#, "null"] {
        let body = format!(r#"{{"sku": "BOOK-1", "quantity": 2, "sent_at": {sent_at}}}"#);
        let replay = c.post(Some("acme"), Some("k1"), &body).await;
        assert!(replay.replayed(), "{}", replay.body);
        assert_eq!(replay.body, first.body);
    }

    // Same key, other payload: 422, nothing runs; it names the field that changed, never a
    // value.
    let mismatch = c.post(Some("acme"), Some("k1"), OTHER_ORDER).await;
    let problem = mismatch.assert_problem(422);
    assert_eq!(
        problem["mismatch"],
        serde_json::json!({"changed": ["/body/quantity"], "added": [], "removed": []}),
        "{problem}"
    );
    assert!(!mismatch.body.contains('3'), "{}", mismatch.body);
    // A body the endpoint would refuse gets the key's answer first: a field added (which
    // the order does not know: told as a change of the body, never by its name) and one
    // removed (which it requires), a value out of range.
    for (body, expected) in [
        (
            r#"{"sku": "BOOK-1", "count": 7}"#,
            serde_json::json!({"changed": ["/body"], "added": [], "removed": ["/body/quantity"]}),
        ),
        (
            r#"{"sku": "BOOK-1", "quantity": 99}"#,
            serde_json::json!({"changed": ["/body/quantity"], "added": [], "removed": []}),
        ),
    ] {
        let mismatch = c.post(Some("acme"), Some("k1"), body).await;
        let problem = mismatch.assert_problem(422);
        assert_eq!(problem["type"], "urn:idem:problem:key-reused", "{problem}");
        assert_eq!(problem["mismatch"], expected, "{problem}");
        assert!(!mismatch.body.contains("99") && !mismatch.body.contains('7'));
    }
    // Under a new key, or as malformed JSON, the refusal stands.
    let invalid = c
        .post(
            Some("acme"),
            Some("k-new"),
            r#"{"sku": "BOOK-1", "count": 7}"#,
        )
        .await;
    assert_eq!(
        invalid.assert_problem(422)["type"],
        "urn:idem:problem:invalid-body"
    );
    c.post(Some("acme"), Some("k1"), r#"{"sku": "#)
        .await
        .assert_problem(400);
    assert_eq!(db.orders().await, 1);
    // The key row holds no value of the request.
    assert_eq!(
        db.scalar("SELECT count(*) FROM idempotency_keys WHERE field_digests IS NOT NULL")
            .await,
        1
    );

    // The same key under another tenant is a new, independent order.
    let other = c.post(Some("globex"), Some("k1"), ORDER).await;
    assert_eq!(other.status, 201);
    assert!(!other.replayed());
    assert_ne!(other.json()["id"], order["id"]);
    assert_eq!(db.orders().await, 2);

    // Reading: own tenant only.
    let read = c.get("acme", &format!("/orders/{id}")).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.json(), order);
    c.get("globex", &format!("/orders/{id}"))
        .await
        .assert_problem(404);
    c.get("acme", "/orders/not-a-uuid")
        .await
        .assert_problem(404);
    c.get("acme", "/nowhere").await.assert_problem(404);

    // The key row, as operators see it.
    assert_eq!(db.keys().await, 2);
    let ttl = db.seconds_to_expiry("k1").await;
    assert!((86_000..=86_400).contains(&ttl), "expires in {ttl} s");
    assert!(server.stop().success(), "graceful shutdown exits 0");
}

async fn expired_key_is_gone<DB: Store>() {
    let kind = Kind::of::<DB>();
    let db = Db::fresh(kind).await;
    let server = Server::start(&db);
    let c = Client::new(&server);
    assert_eq!(c.post(Some("acme"), Some("k-exp"), ORDER).await.status, 201);
    db.expire_all_keys().await;
    c.post(Some("acme"), Some("k-exp"), ORDER)
        .await
        .assert_problem(410);
    c.post(Some("acme"), Some("k-exp"), OTHER_ORDER)
        .await
        .assert_problem(410);
    assert_eq!(db.orders().await, 1);
    if kind == Kind::Sqlite {
        // A Unix time in seconds written by hand is understood too, both ways.
        let now = db
            .scalar("SELECT CAST(strftime('%s', 'now') AS INTEGER)")
            .await;
        db.set_expiry_unix_seconds(now + 3600).await;
        assert!(c.post(Some("acme"), Some("k-exp"), ORDER).await.replayed());
        db.set_expiry_unix_seconds(now - 3600).await;
        c.post(Some("acme"), Some("k-exp"), ORDER)
            .await
            .assert_problem(410);
    }
}

/// 32 concurrent requests with one key, spread over `servers`: one order, 32 identical 201s.
async fn concurrent_same_key(kind: Kind, servers: usize) {
    let db = Db::fresh(kind).await;
    let servers: Vec<Server> = (0..servers).map(|_| Server::start(&db)).collect();
    let clients: Vec<Client> = servers.iter().map(Client::new).collect();
    let requests = (0..32).map(|i| {
        let c = clients[i % clients.len()].clone();
        async move { c.post(Some("acme"), Some("k-race"), ORDER).await }
    });
    let replies = join_all(requests).await;
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert!(statuses.iter().all(|s| *s == 201), "{statuses:?}");
    let bodies: HashSet<&str> = replies.iter().map(|r| r.body.as_str()).collect();
    assert_eq!(bodies.len(), 1, "identical bodies");
    assert_eq!(replies.iter().filter(|r| !r.replayed()).count(), 1);
    assert_eq!(db.orders().await, 1);
    assert_eq!(db.keys().await, 1);
}

/// Two processes, each killed (`kill -9`) and restarted in turn for `duration`, while four
/// clients post new keys and retry each on either process until it is answered `201`: one
/// order per key, and every later answer for a key the same order.
async fn killed_and_restarted(kind: Kind, duration: Duration) {
    let db = Arc::new(Db::fresh(kind).await);
    let mut servers = [Some(Server::start(&db)), Some(Server::start(&db))];
    let bases = Arc::new(Mutex::new(
        servers
            .iter()
            .flatten()
            .map(|s| s.base.clone())
            .collect::<Vec<_>>(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let clients = (0..4).map(|client| {
        let (bases, stop) = (Arc::clone(&bases), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut answered = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let key = format!("c{client}-{n}");
                let body =
                    common::post_until_created(&bases, n, &key, ORDER, Duration::from_secs(60))
                        .await;
                answered.push((key, body));
                n += 1;
            }
            answered
        })
    });
    let clients: Vec<_> = clients.collect();
    let started = Instant::now();
    let mut kills = 0;
    while started.elapsed() < duration {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let victim = kills % 2;
        if let Some(server) = servers[victim].take() {
            server.kill();
        }
        let db = Arc::clone(&db);
        let server = tokio::task::spawn_blocking(move || Server::start(&db))
            .await
            .unwrap();
        bases.lock().unwrap()[victim].clone_from(&server.base);
        servers[victim] = Some(server);
        kills += 1;
    }
    stop.store(true, Ordering::SeqCst);
    let mut answers: HashMap<String, String> = HashMap::new();
    for client in clients {
        answers.extend(client.await.unwrap());
    }
    assert!(
        kills >= 4 && answers.len() >= 20,
        "{kills} kills, {} keys",
        answers.len()
    );
    // No key lost, none duplicated: one order and one key row each.
    assert_eq!(db.orders().await, i64::try_from(answers.len()).unwrap());
    assert_eq!(db.keys().await, i64::try_from(answers.len()).unwrap());
    // And every key replays the order it was answered with, on either process.
    let replayers: Vec<Client> = servers.iter().flatten().map(Client::new).collect();
    for (i, (key, body)) in answers.iter().enumerate() {
        let replay = replayers[i % 2].post(Some("acme"), Some(key), ORDER).await;
        assert_eq!(replay.status, 201, "{key}");
        assert!(replay.replayed(), "{key}");
        assert_eq!(&replay.body, body, "{key}");
    }
}

/// Started with `DATABASE_URL` alone: on the server itself `orders` serves; through a
/// transaction pooler (`PGBOUNCER_URL`) it finds the pooler, refuses to start and says to set
/// `MIGRATION_DATABASE_URL`.
async fn database_url_alone(kind: Kind) {
    let db = Db::fresh(kind).await;
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        // (Empty is unset; the harness would add the server's URL.)
        ("MIGRATION_DATABASE_URL", ""),
    ];
    if idem_testkit::harness::pooled().is_none() {
        let server = Server::start_with(&db, &env);
        let reply = Client::new(&server)
            .post(Some("acme"), Some("k1"), ORDER)
            .await;
        assert_eq!(reply.status, 201, "{}", reply.body);
        return;
    }
    let said = refused_start(&db, &env);
    assert!(said.contains("transaction pooler"), "{said}");
    assert!(said.contains("set MIGRATION_DATABASE_URL"), "{said}");
    // Refused before anything ran: no table was created.
    let tables = "SELECT count(*) FROM pg_tables WHERE tablename = 'idempotency_keys'";
    assert_eq!(db.scalar(tables).await, 0, "{said}");
}

/// idem's tables applied by the store's own command-line client from the repository's
/// `migrations/`, as a team's own tooling would, and `orders` run with
/// `IDEM_MIGRATIONS=external`: one migration behind, it refuses to start, naming that
/// migration, and creates nothing; with every file applied it serves the whole contract, and
/// idem never writes a migration history of its own.
async fn external_migrations<DB: Store>() {
    let kind = Kind::of::<DB>();
    let db = Db::fresh(kind).await;
    let url = direct(&db.url);
    let files = migration_files(&url);
    let (last, before) = files.split_last().unwrap();
    apply_with_client(&url, before);
    // Through the tests' transaction pooler, the check goes to the server itself, as the
    // harness's servers do.
    let env = [
        ("DATABASE_URL", db.url.as_str()),
        (
            "MIGRATION_DATABASE_URL",
            if url == db.url { "" } else { url.as_str() },
        ),
        ("IDEM_MIGRATIONS", "external"),
    ];
    let said = refused_start(&db, &env);
    let name = last.file_name().unwrap().to_str().unwrap();
    assert!(said.contains(name), "{said}");
    assert!(said.contains("not applied"), "{said}");
    let orders_table = match kind {
        Kind::Sqlite => "SELECT count(*) FROM sqlite_master WHERE name = 'orders'",
        _ => {
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'orders' \
              AND table_schema = current_schema()"
        }
    };
    let orders_table = if kind == Kind::MySql {
        orders_table.replace("current_schema()", "DATABASE()")
    } else {
        orders_table.to_owned()
    };
    assert_eq!(
        db.scalar(&orders_table).await,
        0,
        "the start went on: {said}"
    );

    apply_with_client(&url, std::slice::from_ref(last));
    let server = Server::start_with(&db, &env);
    contract_on(&db, server).await;
    let history = match kind {
        Kind::Sqlite => "SELECT count(*) FROM sqlite_master WHERE name = 'idem_schema_migrations'",
        Kind::MySql => {
            "SELECT count(*) FROM information_schema.tables \
                        WHERE table_name = 'idem_schema_migrations' AND table_schema = DATABASE()"
        }
        Kind::Postgres => {
            "SELECT count(*) FROM pg_tables WHERE tablename = 'idem_schema_migrations'"
        }
    };
    assert_eq!(db.scalar(history).await, 0);
}

/// A fault after the business write, or after the response write: both roll back, and the
/// retry succeeds exactly once.
async fn injected_fault(kind: Kind, point: &str) {
    let db = Db::fresh(kind).await;
    let failpoint = format!("{point}=error");
    let server = Server::start_with(
        &db,
        &[("DATABASE_URL", &db.url), ("IDEM_FAILPOINT", &failpoint)],
    );
    let c = Client::new(&server);
    c.post(Some("acme"), Some("k-fault"), ORDER)
        .await
        .assert_problem(500);
    assert_eq!(db.orders().await, 0);
    assert_eq!(db.keys().await, 0);
    let retry = c.post(Some("acme"), Some("k-fault"), ORDER).await;
    assert_eq!(retry.status, 201);
    assert!(!retry.replayed());
    let again = c.post(Some("acme"), Some("k-fault"), ORDER).await;
    assert!(again.replayed());
    assert_eq!(again.body, retry.body);
    assert_eq!(db.orders().await, 1);
}

/// The process dies after COMMIT, before the response leaves: the retry, on a restarted
/// server, replays the committed order.
async fn crash_after_commit<DB: Store>() {
    let kind = Kind::of::<DB>();
    let db = Db::fresh(kind).await;
    let mut crashing = Server::start_with(
        &db,
        &[
            ("DATABASE_URL", &db.url),
            ("IDEM_FAILPOINT", "after_commit=abort"),
        ],
    );
    let c = Client::new(&crashing);
    assert!(
        c.try_post(Some("acme"), Some("k-crash"), ORDER)
            .await
            .is_err(),
        "the response is lost"
    );
    assert!(!crashing.wait_for_exit().success());
    assert_eq!(db.orders().await, 1, "the commit happened");

    let server = Server::start(&db);
    let c = Client::new(&server);
    let retry = c.post(Some("acme"), Some("k-crash"), ORDER).await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed());
    let id = retry.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(c.get("acme", &format!("/orders/{id}")).await.status, 200);
    assert_eq!(db.orders().await, 1);
}

/// Restarts keep every key: the store is the database, not memory. A restart logs no notice
/// of idem's migration history existing already.
async fn persistence_across_restart<DB: Store>() {
    let kind = Kind::of::<DB>();
    let db = Db::fresh(kind).await;
    let server = Server::start(&db);
    let first = Client::new(&server)
        .post(Some("acme"), Some("k-persist"), ORDER)
        .await;
    assert_eq!(first.status, 201);
    assert!(server.stop().success());
    let server = Server::start(&db);
    let replay = Client::new(&server)
        .post(Some("acme"), Some("k-persist"), ORDER)
        .await;
    assert!(replay.replayed());
    assert_eq!(replay.body, first.body);
    assert_eq!(db.orders().await, 1);
    let logged = server.logged();
    assert!(!logged.contains("idem_schema_migrations"), "{logged}");
}

idem_testkit::on_every_store!(
    #[flavor = current_thread]
    contract,
    external_migrations,
    expired_key_is_gone,
    crash_after_commit,
    persistence_across_restart,
);

mod faults {
    use super::{Kind, injected_fault};

    #[tokio::test]
    async fn postgres_after_business_write() {
        injected_fault(Kind::Postgres, "after_handler").await;
    }
    #[tokio::test]
    async fn postgres_after_response_write() {
        injected_fault(Kind::Postgres, "after_record").await;
    }
    #[tokio::test]
    async fn sqlite_after_business_write() {
        injected_fault(Kind::Sqlite, "after_handler").await;
    }
    #[tokio::test]
    async fn sqlite_after_response_write() {
        injected_fault(Kind::Sqlite, "after_record").await;
    }
    #[tokio::test]
    async fn mysql_after_business_write() {
        injected_fault(Kind::MySql, "after_handler").await;
    }
    #[tokio::test]
    async fn mysql_after_response_write() {
        injected_fault(Kind::MySql, "after_record").await;
    }
}

mod pooler {
    use super::{Kind, database_url_alone};

    #[tokio::test]
    async fn postgres_database_url_alone() {
        database_url_alone(Kind::Postgres).await;
    }
}

mod concurrency {
    use super::{Duration, Kind, concurrent_same_key, killed_and_restarted};

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn postgres_two_processes_killed_and_restarted() {
        killed_and_restarted(Kind::Postgres, Duration::from_secs(8)).await;
    }

    #[tokio::test]
    async fn postgres_two_processes() {
        concurrent_same_key(Kind::Postgres, 2).await;
    }
    #[tokio::test]
    async fn sqlite_one_process() {
        concurrent_same_key(Kind::Sqlite, 1).await;
    }
    #[tokio::test]
    async fn mysql_two_processes() {
        concurrent_same_key(Kind::MySql, 2).await;
    }
}

/// `DATABASE_URL` unset: an SQLite file `orders.db` in the working directory.
#[tokio::test]
async fn default_database_is_a_sqlite_file_in_the_working_directory() {
    let dir = idem_testkit::harness::new_dir("default");
    let file = dir.join("orders.db");
    let db = Db::sqlite_at(format!("sqlite://{}", file.display()), dir);
    let server = Server::start_with(&db, &[]);
    let reply = Client::new(&server)
        .post(Some("acme"), Some("k-default"), ORDER)
        .await;
    assert_eq!(reply.status, 201);
    assert!(common::exists(&file));
    assert_eq!(db.orders().await, 1);
    assert!(server.stop().success());
}
