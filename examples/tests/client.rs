//! idem-client's middleware against the `orders` example: a lost response, an in-flight
//! duplicate, a busy store and a reused key, each driven through the real server. A proxy
//! between the client and the server counts the connections (the test client keeps none
//! idle, so every attempt is a connection of its own), records the status of every answer
//! and can lose one.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Client, Db, Kind, Server};
use idem_client::reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use idem_client::{IdempotencyInfo, IdempotencyMiddleware};
use idem_runtime::sqlx::{self, Connection as _};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const ORDER: &str = r#"{"sku": "BOOK-1", "quantity": 2}"#;
const OTHER_ORDER: &str = r#"{"sku": "BOOK-1", "quantity": 3}"#;

/// What the proxy does with one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    /// Forwards both ways.
    Forward,
    /// Forwards the request; once the server's answer starts, closes the client's connection
    /// without passing it on: the server did the work, the client never hears of it.
    LoseAnswer,
}

/// One connection as the proxy saw it.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    /// The status of the server's answer (`None` until it arrives).
    status: Option<u16>,
    lost: bool,
}

/// A TCP proxy that plays a script, one act per connection; the last act repeats.
struct Proxy {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Proxy {
    async fn start(upstream: &str, script: Vec<Act>) -> Self {
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let index = {
                    let mut log = log.lock().unwrap();
                    log.push(Seen {
                        at: Instant::now(),
                        status: None,
                        lost: false,
                    });
                    log.len() - 1
                };
                let act = script[index.min(script.len() - 1)];
                let server = TcpStream::connect(&upstream).await.unwrap();
                tokio::spawn(relay(client, server, act, Arc::clone(&log), index));
            }
        });
        Self { base, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn statuses(&self) -> Vec<Option<u16>> {
        self.seen().iter().map(|s| s.status).collect()
    }
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    act: Act,
    log: Arc<Mutex<Vec<Seen>>>,
    index: usize,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let requests = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    });
    let mut buf = vec![0u8; 16 * 1024];
    let mut first = true;
    loop {
        let n = match server_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if first {
            first = false;
            // "HTTP/1.1 201 Created": the status is the second word.
            let status = String::from_utf8_lossy(&buf[..n])
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok());
            let mut log = log.lock().unwrap();
            log[index].status = status;
            log[index].lost = act == Act::LoseAnswer;
        }
        if act == Act::LoseAnswer {
            // Dropping both halves closes the client's connection, answer unsent.
            requests.abort();
            return;
        }
        if client_write.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = client_write.shutdown().await;
    requests.abort();
}

/// The middleware with short waits, on a client that keeps no connection idle.
fn client() -> ClientWithMiddleware {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let retries = IdempotencyMiddleware::builder()
        .base_delay(Duration::from_millis(10))
        .max_delay(Duration::from_millis(50))
        .build();
    ClientBuilder::new(http).with(retries).build()
}

async fn post(base: &str, key: Option<&str>, body: &str) -> reqwest::Response {
    let mut request = client()
        .post(format!("{base}/orders"))
        .bearer_auth("acme")
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.send().await.unwrap()
}

fn info(response: &reqwest::Response) -> IdempotencyInfo {
    response
        .extensions()
        .get::<IdempotencyInfo>()
        .cloned()
        .unwrap()
}

fn replayed(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true")
}

/// Polls `count` (a `count(*)`) on `conn` until it is 1 or more, for at most 10 s.
async fn until(conn: &mut sqlx::PgConnection, count: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: i64 = sqlx::query_scalar(count)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        if n >= 1 {
            return;
        }
        assert!(Instant::now() < deadline, "not within 10 s: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The response to the first attempt is lost after the server committed; the middleware
/// retries with the same key and gets the stored response. One order.
async fn a_lost_answer_is_replayed(kind: Kind) {
    let db = Db::fresh(kind).await;
    let server = Server::start(&db);
    let proxy = Proxy::start(&server.base, vec![Act::LoseAnswer, Act::Forward]).await;

    let response = post(&proxy.base, None, ORDER).await;
    assert_eq!(response.status(), 201);
    assert!(replayed(&response), "{:?}", response.headers());
    let info = info(&response);
    assert_eq!(info.attempts(), 2);
    let key = info.key().unwrap().to_owned();
    let order: serde_json::Value = response.json().await.unwrap();

    let seen = proxy.seen();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].lost);
    assert_eq!(proxy.statuses(), [Some(201), Some(201)]);
    assert_eq!(db.orders().await, 1);
    assert_eq!(db.keys().await, 1);
    // The key the middleware generated is the key the server holds.
    assert_eq!(
        db.text("SELECT idempotency_key FROM idempotency_keys")
            .await,
        key
    );
    let id = order["id"].as_str().unwrap();
    let read = Client::new(&server)
        .get("acme", &format!("/orders/{id}"))
        .await;
    assert_eq!(read.status, 200);
    assert_eq!(read.json(), order);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_lost_answer_is_replayed() {
    a_lost_answer_is_replayed(Kind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_lost_answer_is_replayed() {
    a_lost_answer_is_replayed(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_lost_answer_is_replayed() {
    a_lost_answer_is_replayed(Kind::MySql).await;
}

/// Same key, another payload: `422`, sent once. Invalid input and no credentials: sent once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_are_never_retried() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = Server::start(&db);
    let first = Client::new(&server)
        .post(Some("acme"), Some("\"order-1\""), ORDER)
        .await;
    assert_eq!(first.status, 201);
    let proxy = Proxy::start(&server.base, vec![Act::Forward]).await;

    let reused = post(&proxy.base, Some("\"order-1\""), OTHER_ORDER).await;
    assert_eq!(reused.status(), 422);
    assert_eq!(info(&reused).attempts(), 1);
    assert_eq!(info(&reused).key(), Some("order-1"));
    let reused = idem_client::KeyReused::from_problem(&reused.bytes().await.unwrap()).unwrap();
    assert_eq!(reused.changed, ["/body/quantity"]);
    assert!(reused.added.is_empty() && reused.removed.is_empty());
    assert_eq!(proxy.statuses(), [Some(422)]);

    let invalid = post(&proxy.base, None, r#"{"sku": "BOOK-1", "quantity": 0}"#).await;
    assert_eq!(invalid.status(), 422);
    assert_eq!(info(&invalid).attempts(), 1);

    let anonymous = client()
        .post(format!("{}/orders", proxy.base))
        .header("content-type", "application/json")
        .body(ORDER)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(info(&anonymous).attempts(), 1);

    assert_eq!(proxy.statuses(), [Some(422), Some(422), Some(401)]);
    assert_eq!(db.orders().await, 1);
    assert_eq!(db.keys().await, 1);
}

/// SQLite's write lock held from outside: the server answers `503` store-busy with
/// `Retry-After: 1` after waiting 2 s; the middleware waits for it and the retry runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_store_busy_is_retried_after_retry_after() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = Server::start(&db);
    let proxy = Proxy::start(&server.base, vec![Act::Forward]).await;

    let mut writer = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut writer)
        .await
        .unwrap();
    let base = proxy.base.clone();
    let call = tokio::spawn(async move { post(&base, None, ORDER).await });
    // Hold the lock until the retry arrives, so that the first attempt cannot succeed.
    let deadline = Instant::now() + Duration::from_secs(20);
    while proxy.seen().len() < 2 {
        assert!(Instant::now() < deadline, "no retry: {:?}", proxy.seen());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut writer)
        .await
        .unwrap();
    writer.close().await.unwrap();

    let response = call.await.unwrap();
    assert_eq!(response.status(), 201);
    assert!(!replayed(&response), "the first attempt committed nothing");
    assert_eq!(info(&response).attempts(), 2);
    assert_eq!(proxy.statuses(), [Some(503), Some(201)]);
    // The server waited 2 s for the lock, then asked for 1 s more; the backoff alone
    // would have retried within 50 ms.
    let seen = proxy.seen();
    let gap = seen[1].at - seen[0].at;
    assert!(gap >= Duration::from_millis(2900), "{gap:?}");
    assert_eq!(db.orders().await, 1);
}

/// A duplicate while the first request is still running: the server answers `409`
/// in-flight with `Retry-After` after waiting 2 s; the middleware comes back, waits for the
/// first to commit and gets its response. The first request is held in its `INSERT` into
/// `orders` by a trigger until the test opens a gate (an advisory lock it holds), once the
/// retry waits for the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_an_in_flight_duplicate_is_retried_until_replayed() {
    let db = Db::fresh(Kind::Postgres).await;
    let server = Server::start(&db);
    let mut gate = sqlx::PgConnection::connect(&db.url).await.unwrap();
    // The trigger polls the gate rather than waiting for it: a lock wait in idem's
    // transaction would end at its `lock_timeout`.
    sqlx::raw_sql(
        "CREATE FUNCTION held_insert() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN \
         WHILE NOT pg_try_advisory_xact_lock(4242, 1) LOOP PERFORM pg_sleep(0.01); END LOOP; \
         RETURN NEW; END $$; \
         CREATE TRIGGER held_insert BEFORE INSERT ON orders \
         FOR EACH ROW EXECUTE FUNCTION held_insert(); \
         SELECT pg_advisory_lock(4242, 1)",
    )
    .execute(&mut gate)
    .await
    .unwrap();
    let proxy = Proxy::start(&server.base, vec![Act::Forward]).await;

    let direct = Client::new(&server);
    let first =
        tokio::spawn(async move { direct.post(Some("acme"), Some("\"order-1\""), ORDER).await });
    // At the gate, the first holds the key.
    let at_the_gate = "SELECT count(*) FROM pg_stat_activity \
                       WHERE datname = current_database() AND wait_event = 'PgSleep'";
    until(&mut gate, at_the_gate, "the first request is at the gate").await;
    let duplicate = {
        let base = proxy.base.clone();
        tokio::spawn(async move { post(&base, Some("\"order-1\""), ORDER).await })
    };
    // The duplicate's first attempt answered `409`, and its retry waits for the key.
    let deadline = Instant::now() + Duration::from_secs(20);
    while proxy.seen().len() < 2 {
        assert!(Instant::now() < deadline, "no retry: {:?}", proxy.seen());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    until(&mut gate, waiting, "the retry waits for the key").await;
    sqlx::query("SELECT pg_advisory_unlock(4242, 1)")
        .execute(&mut gate)
        .await
        .unwrap();
    let duplicate = duplicate.await.unwrap();
    let first = first.await.unwrap();

    assert_eq!(first.status, 201, "{}", first.body);
    assert!(!first.replayed());
    assert_eq!(duplicate.status(), 201);
    assert!(replayed(&duplicate));
    assert_eq!(info(&duplicate).attempts(), 2);
    assert_eq!(proxy.statuses(), [Some(409), Some(201)]);
    let seen = proxy.seen();
    let gap = seen[1].at - seen[0].at;
    assert!(gap >= Duration::from_millis(2900), "{gap:?}");
    assert_eq!(duplicate.text().await.unwrap(), first.body);
    assert_eq!(db.orders().await, 1);
}
