//! The `orders` server against hostile and unlucky clients, as a real process with short
//! limits set through its environment: slow heads, stalled bodies, more connections than it
//! allows, oversized heads, SIGTERM with a client stuck mid-request, and paths that do not
//! decode.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::time::{Duration, Instant};

use common::{Client, Db, Kind, Reply, Server};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const ORDER: &str = r#"{"sku": "BOOK-1", "quantity": 2}"#;

/// What a timer may take beyond its setting on a busy machine.
const MARGIN: Duration = Duration::from_secs(3);

async fn connect(server: &Server) -> TcpStream {
    let addr = server.base.trim_start_matches("http://");
    TcpStream::connect(addr).await.unwrap()
}

/// Reads until the server closes the connection (end of stream or reset) and returns what
/// arrived and how long after `since` it closed. Fails if it is still open after `within`.
async fn read_until_closed(
    stream: &mut TcpStream,
    since: Instant,
    within: Duration,
) -> (Vec<u8>, Duration) {
    let mut received = Vec::new();
    let mut buf = vec![0_u8; 16 * 1024];
    loop {
        let read = tokio::time::timeout_at((since + within).into(), stream.read(&mut buf)).await;
        match read {
            Err(_) => panic!("the server kept the connection open for {within:?}"),
            Ok(Ok(0) | Err(_)) => return (received, since.elapsed()),
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// One HTTP/1.1 response with a `Content-Length` body, parsed from raw bytes.
fn parse_reply(raw: &[u8]) -> Reply {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.strip_prefix("HTTP/1.1 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    let mut headers = HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').unwrap();
        headers.append(
            HeaderName::from_bytes(name.trim().as_bytes()).unwrap(),
            HeaderValue::from_str(value.trim()).unwrap(),
        );
    }
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

/// The head of `POST /orders` with `key`, announcing the whole [`ORDER`].
fn order_head(key: &str) -> String {
    format!(
        "POST /orders HTTP/1.1\r\nhost: orders\r\nauthorization: Bearer acme\r\n\
         idempotency-key: {key}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        ORDER.len()
    )
}

/// Sends [`order_head`] and the first bytes of the body, then nothing more.
async fn stall_in_body(server: &Server, key: &str) -> TcpStream {
    let mut stream = connect(server).await;
    stream.write_all(order_head(key).as_bytes()).await.unwrap();
    stream.write_all(&ORDER.as_bytes()[..10]).await.unwrap();
    stream
}

/// Sends half a request line, then nothing more.
async fn stall_in_head(server: &Server) -> TcpStream {
    let mut stream = connect(server).await;
    stream.write_all(b"POST /ord").await.unwrap();
    stream
}

/// The server's `http_open_connections` (`GET /metrics` on `http`, whose connection counts).
async fn open_connections(http: &reqwest::Client, server: &Server) -> u64 {
    let metrics = http
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let gauge = metrics
        .lines()
        .find_map(|line| line.strip_prefix("http_open_connections "))
        .unwrap_or_else(|| panic!("no http_open_connections: {metrics}"));
    gauge.trim().parse().unwrap()
}

fn start(db: &Db, env: &[(&str, &str)]) -> Server {
    let mut all = vec![("DATABASE_URL", db.url.as_str())];
    all.extend_from_slice(env);
    Server::start_with(db, &all)
}

#[tokio::test]
async fn a_slow_head_and_an_idle_connection_are_closed_at_the_header_timeout() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = start(&db, &[("HEADER_READ_TIMEOUT_MS", "500")]);

    let mut slow = stall_in_head(&server).await;
    let since = Instant::now();
    let (received, after) = read_until_closed(&mut slow, since, Duration::from_secs(30)).await;
    assert!(
        received.is_empty(),
        "no answer to half a head: {received:?}"
    );
    assert!(
        after >= Duration::from_millis(400),
        "closed early: {after:?}"
    );
    assert!(
        after < Duration::from_millis(500) + MARGIN,
        "closed late: {after:?}"
    );

    // A keep-alive connection that goes quiet after its request is closed the same way.
    let mut idle = connect(&server).await;
    idle.write_all(
        b"GET /orders/00000000-0000-0000-0000-000000000000 HTTP/1.1\r\n\
          host: orders\r\nauthorization: Bearer acme\r\n\r\n",
    )
    .await
    .unwrap();
    let since = Instant::now();
    let (received, after) = read_until_closed(&mut idle, since, Duration::from_secs(30)).await;
    parse_reply(&received).assert_problem(404);
    assert!(
        after >= Duration::from_millis(400),
        "closed early: {after:?}"
    );
    assert!(
        after < Duration::from_millis(500) + MARGIN,
        "closed late: {after:?}"
    );

    let c = Client::new(&server);
    assert_eq!(
        c.post(Some("acme"), Some("\"k1\""), ORDER).await.status,
        201
    );
}

async fn stalled_body_answers_408_and_commits_nothing(kind: Kind) {
    let db = Db::fresh(kind).await;
    let server = start(&db, &[("BODY_READ_TIMEOUT_MS", "500")]);

    let mut stalled = stall_in_body(&server, "\"stalled\"").await;
    let since = Instant::now();
    let (received, after) = read_until_closed(&mut stalled, since, Duration::from_secs(30)).await;
    let reply = parse_reply(&received);
    let problem = reply.assert_problem(408);
    assert_eq!(problem["type"], "urn:idem:example:body-timeout");
    assert_eq!(reply.header("connection"), Some("close"));
    assert!(
        after >= Duration::from_millis(400),
        "answered early: {after:?}"
    );
    assert!(
        after < Duration::from_millis(500) + MARGIN,
        "answered late: {after:?}"
    );

    assert_eq!(
        db.orders().await,
        0,
        "no order from a body that never arrived"
    );
    assert_eq!(db.keys().await, 0, "the key was not bound");
    // So the whole request, sent again with the same key, runs.
    let c = Client::new(&server);
    let reply = c.post(Some("acme"), Some("\"stalled\""), ORDER).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert!(!reply.replayed());
    assert_eq!(db.orders().await, 1);
}

#[tokio::test]
async fn a_stalled_body_answers_408_and_commits_nothing_postgres() {
    stalled_body_answers_408_and_commits_nothing(Kind::Postgres).await;
}

#[tokio::test]
async fn a_stalled_body_answers_408_and_commits_nothing_sqlite() {
    stalled_body_answers_408_and_commits_nothing(Kind::Sqlite).await;
}

#[tokio::test]
async fn a_request_over_the_request_timeout_answers_503_and_commits_nothing() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = start(
        &db,
        &[
            ("REQUEST_TIMEOUT_MS", "500"),
            ("BODY_READ_TIMEOUT_MS", "60000"),
        ],
    );

    let mut stalled = stall_in_body(&server, "\"slow\"").await;
    let since = Instant::now();
    let (received, after) = read_until_closed(&mut stalled, since, Duration::from_secs(30)).await;
    let reply = parse_reply(&received);
    let problem = reply.assert_problem(503);
    assert_eq!(problem["type"], "urn:idem:example:request-timeout");
    assert!(reply.header("retry-after").is_some());
    assert!(
        after < Duration::from_millis(500) + MARGIN,
        "answered late: {after:?}"
    );
    assert_eq!(db.orders().await, 0);
    assert_eq!(db.keys().await, 0);
}

/// 300 clients stuck in their heads, against 32 connections allowed and a file descriptor
/// limit of 256 that accepting them all would exhaust.
#[tokio::test]
async fn slow_clients_beyond_the_connection_limit_do_not_take_the_server_down() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = Server::spawn_args(
        "sh",
        &[
            "-c",
            r#"ulimit -n 256 && exec "$0""#,
            env!("CARGO_BIN_EXE_orders"),
        ],
        "orders",
        &db.dir,
        &[
            ("DATABASE_URL", db.url.as_str()),
            ("MAX_CONNECTIONS", "32"),
            ("HEADER_READ_TIMEOUT_MS", "1000"),
        ],
    );

    let mut slow = Vec::new();
    for _ in 0..300 {
        slow.push(stall_in_head(&server).await);
    }

    // Queued behind them, a normal request is served once they have been cut off.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let response = http
        .post(format!("{}/orders", server.base))
        .header("authorization", "Bearer acme")
        .header("idempotency-key", "\"k1\"")
        .header("content-type", "application/json")
        .body(ORDER)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(db.orders().await, 1);

    // Every slow client was cut off, none answered.
    let since = Instant::now();
    for stream in &mut slow {
        let (received, _) = read_until_closed(stream, since, Duration::from_secs(120)).await;
        assert!(received.is_empty());
    }

    // The limit held throughout: the gauge never shows more than 32 open.
    let open = open_connections(&http, &server).await;
    assert!((1..=32).contains(&open), "{open} connections open");
    assert!(
        !server.logged().contains("accepting a connection failed"),
        "no descriptor ran out"
    );
}

/// With a limit above what the descriptors allow, accepting fails with `EMFILE`: the server
/// logs it, backs off and serves again once slow clients are cut off.
#[tokio::test]
async fn accept_errors_are_retried_not_fatal() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = Server::spawn_args(
        "sh",
        &[
            "-c",
            r#"ulimit -n 64 && exec "$0""#,
            env!("CARGO_BIN_EXE_orders"),
        ],
        "orders",
        &db.dir,
        &[
            ("DATABASE_URL", db.url.as_str()),
            ("MAX_CONNECTIONS", "1000"),
            ("HEADER_READ_TIMEOUT_MS", "1000"),
        ],
    );
    // One request first, so the database connection is open before descriptors run out.
    let c = Client::new(&server);
    assert_eq!(
        c.post(Some("acme"), Some("\"k1\""), ORDER).await.status,
        201
    );

    let mut slow = Vec::new();
    for _ in 0..100 {
        slow.push(stall_in_head(&server).await);
    }
    let since = Instant::now();
    for stream in &mut slow {
        read_until_closed(stream, since, Duration::from_secs(60)).await;
    }
    assert!(
        server.logged().contains("accepting a connection failed"),
        "the descriptors ran out"
    );

    let reply = Client::new(&server)
        .post(Some("acme"), Some("\"k2\""), ORDER)
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);
}

#[tokio::test]
async fn oversized_heads_are_refused_and_the_server_stays_healthy() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = start(&db, &[("MAX_HEADER_BYTES", "32768")]);

    let mut clients = Vec::new();
    for _ in 0..10 {
        let mut stream = connect(&server).await;
        clients.push(tokio::spawn(async move {
            let head = format!(
                "GET /orders HTTP/1.1\r\nhost: orders\r\nx-big: {}\r\n\r\n",
                "a".repeat(400 * 1024)
            );
            // The server may close before all of it is written.
            let _ = stream.write_all(head.as_bytes()).await;
            let (received, _) =
                read_until_closed(&mut stream, Instant::now(), Duration::from_secs(30)).await;
            received
        }));
    }
    for client in clients {
        let received = client.await.unwrap();
        // 431 (hyper's, with an empty body), or a reset that lost it.
        assert!(
            received.is_empty() || received.starts_with(b"HTTP/1.1 431"),
            "{}",
            String::from_utf8_lossy(&received)
        );
    }

    // A large head within the limit is served.
    let c = Client::new(&server);
    let reply = c
        .try_post_to(
            &format!("/orders?pad={}", "p".repeat(16 * 1024)),
            Some("acme"),
            Some("\"k1\""),
            ORDER,
        )
        .await
        .unwrap();
    assert_eq!(reply.status, 201, "{}", reply.body);
}

#[tokio::test]
async fn sigterm_with_stalled_clients_exits_at_the_deadline_and_loses_nothing() {
    let db = Db::fresh(Kind::Postgres).await;
    let mut server = start(
        &db,
        &[
            ("SHUTDOWN_DEADLINE_MS", "1500"),
            ("HEADER_READ_TIMEOUT_MS", "60000"),
            ("BODY_READ_TIMEOUT_MS", "60000"),
            ("REQUEST_TIMEOUT_MS", "60000"),
        ],
    );
    let c = Client::new(&server);
    let done = c.post(Some("acme"), Some("\"done\""), ORDER).await;
    assert_eq!(done.status, 201, "{}", done.body);

    let metrics = reqwest::Client::new();
    let open = open_connections(&metrics, &server).await;
    let _in_head = stall_in_head(&server).await;
    let _in_body = stall_in_body(&server, "\"stalled\"").await;
    // The server took both connections: graceful shutdown waits for a connection it took
    // until it finished a request (hyper closes only idle keep-alive ones), whether or not
    // the handler started waiting for the body by then; one left in the listen backlog
    // would just be refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    while open_connections(&metrics, &server).await < open + 2 {
        assert!(
            Instant::now() < deadline,
            "the server took the stalled connections"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let since = Instant::now();
    server.terminate();
    let status = server.wait_for_exit();
    let after = since.elapsed();
    assert!(status.success(), "exit status {status}");
    assert!(
        after >= Duration::from_millis(1300),
        "the stalled clients held it until the deadline: exited after {after:?}"
    );
    assert!(
        after < Duration::from_millis(1500) + MARGIN,
        "exited late: {after:?}"
    );
    assert!(
        server
            .logged()
            .contains("shutdown deadline passed: dropping the connections still open")
    );

    // The order answered before the signal is there; the stalled one left nothing.
    assert_eq!(db.orders().await, 1);
    assert_eq!(db.keys().await, 1);
}

#[tokio::test]
async fn a_path_that_does_not_decode_answers_a_400_problem() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = start(&db, &[]);
    let c = Client::new(&server);
    let problem = c.get("acme", "/orders/%FF").await.assert_problem(400);
    assert_eq!(problem["type"], "urn:idem:example:invalid-path");
    // Well-formed but unknown: still 404.
    c.get("acme", "/orders/%41").await.assert_problem(404);
}
