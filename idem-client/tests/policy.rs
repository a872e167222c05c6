//! The retry policy against a scripted HTTP server: which outcomes are retried, how often,
//! how long the waits are, and which key every attempt carries. (The guarantees themselves —
//! a lost response replayed, a reused key refused — are tested against the `orders` example
//! in `examples/tests/client.rs`.)
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::stream;
use idem_client::reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Error};
use idem_client::{Builder, IdempotencyInfo, IdempotencyMiddleware, Jitter};
use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the stub does with one connection.
#[derive(Debug, Clone)]
enum Act {
    /// Reads the request, answers with this status, these headers and a short body, closes.
    Answer(u16, &'static [(&'static str, &'static str)]),
    /// Reads the request and closes the connection without a response.
    Close,
}

const OK: Act = Act::Answer(201, &[]);
const DOWN: Act = Act::Answer(503, &[("retry-after", "0")]);

/// One request as the stub received it.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    head: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

/// A server that plays a script, one act per connection; the last act repeats.
struct Stub {
    base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Stub {
    async fn start(script: Vec<Act>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            let mut n = 0;
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let act = script[n.min(script.len() - 1)].clone();
                n += 1;
                let log = Arc::clone(&log);
                tokio::spawn(serve(socket, act, log));
            }
        });
        Self { base, seen }
    }

    fn url(&self) -> String {
        format!("{}/orders", self.base)
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn serve(mut socket: TcpStream, act: Act, log: Arc<Mutex<Vec<Seen>>>) {
    let at = Instant::now();
    let head = read_request(&mut socket).await;
    log.lock().unwrap().push(Seen { at, head });
    match act {
        Act::Close => {}
        Act::Answer(status, headers) => {
            let body = format!("status {status}");
            let mut response = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                response.push_str(&format!("{name}: {value}\r\n"));
            }
            response.push_str("\r\n");
            response.push_str(&body);
            let _ = socket.write_all(response.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    }
}

/// Reads one request (a `content-length` or chunked body) and returns its head.
async fn read_request(socket: &mut TcpStream) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&buf).into_owned(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let lower = head.to_ascii_lowercase();
    let length = lower.lines().find_map(|l| {
        l.strip_prefix("content-length:")
            .and_then(|v| v.trim().parse::<usize>().ok())
    });
    let chunked = lower.contains("transfer-encoding: chunked");
    loop {
        let body = &buf[head_end..];
        let done = match length {
            Some(n) => body.len() >= n,
            None if chunked => body.ends_with(b"0\r\n\r\n"),
            None => true,
        };
        if done {
            return head;
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return head,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Fast retries: waits of at most a few milliseconds unless the server asks for more.
fn fast() -> Builder {
    IdempotencyMiddleware::builder()
        .base_delay(Duration::from_millis(1))
        .max_delay(Duration::from_millis(5))
}

fn client(middleware: Builder) -> ClientWithMiddleware {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    ClientBuilder::new(http).with(middleware.build()).build()
}

fn info(response: &reqwest::Response) -> IdempotencyInfo {
    response
        .extensions()
        .get::<IdempotencyInfo>()
        .cloned()
        .unwrap()
}

#[tokio::test]
async fn a_post_gets_one_quoted_uuid_key_for_all_its_attempts() {
    let stub = Stub::start(vec![DOWN, Act::Close, OK]).await;
    let response = client(fast())
        .post(stub.url())
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let info = info(&response);
    assert_eq!(info.attempts(), 3);
    let key = info.key().unwrap().to_owned();
    assert!(uuid_like(&key), "{key}");
    let seen = stub.seen();
    assert_eq!(seen.len(), 3);
    for request in &seen {
        assert_eq!(
            request.header("idempotency-key"),
            Some(format!("\"{key}\""))
        );
    }
    // The next logical request gets a key of its own.
    let again = client(fast())
        .post(stub.url())
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_ne!(
        again.extensions().get::<IdempotencyInfo>().unwrap().key(),
        Some(key.as_str())
    );
}

fn uuid_like(key: &str) -> bool {
    key.len() == 36
        && key.bytes().enumerate().all(|(i, b)| {
            matches!(i, 8 | 13 | 18 | 23) == (b == b'-') && (b == b'-' || b.is_ascii_hexdigit())
        })
}

#[tokio::test]
async fn the_callers_key_is_kept_never_replaced() {
    let stub = Stub::start(vec![DOWN, OK]).await;
    for (sent, key) in [("\"order-1\"", "order-1"), ("order-2", "order-2")] {
        let response = client(fast())
            .patch(stub.url())
            .header("Idempotency-Key", sent)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201);
        assert_eq!(info(&response).key(), Some(key));
    }
    let seen = stub.seen();
    assert_eq!(seen.len(), 3, "the first request was retried once");
    let keys: Vec<_> = seen.iter().map(|s| s.header("idempotency-key")).collect();
    assert_eq!(
        keys,
        [
            Some("\"order-1\"".to_owned()),
            Some("\"order-1\"".to_owned()),
            Some("order-2".to_owned())
        ]
    );
}

#[tokio::test]
async fn which_methods_get_a_key_and_which_are_retried() {
    // GET: no key, but idempotent: retried.
    let stub = Stub::start(vec![DOWN, OK]).await;
    let response = client(fast()).get(stub.url()).send().await.unwrap();
    assert_eq!(response.status(), 201);
    assert_eq!(info(&response).key(), None);
    assert_eq!(info(&response).attempts(), 2);
    assert!(
        stub.seen()
            .iter()
            .all(|s| s.header("idempotency-key").is_none())
    );

    // POST without a key (keys for PUT only): not idempotent, sent once.
    let stub = Stub::start(vec![DOWN, OK]).await;
    let response = client(fast().methods([Method::PUT]))
        .post(stub.url())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(info(&response).attempts(), 1);
    assert_eq!(stub.seen().len(), 1);
    assert!(stub.seen()[0].header("idempotency-key").is_none());

    // PUT, configured: gets a key.
    let stub = Stub::start(vec![OK]).await;
    let response = client(fast().methods([Method::PUT]))
        .put(stub.url())
        .send()
        .await
        .unwrap();
    let key = info(&response).key().unwrap().to_owned();
    assert_eq!(
        stub.seen()[0].header("idempotency-key"),
        Some(format!("\"{key}\""))
    );
}

#[tokio::test]
async fn final_answers_are_never_retried() {
    let answers: [(u16, &'static [(&'static str, &'static str)]); 9] = [
        (200, &[]),
        (303, &[("location", "/orders/1")]),
        (400, &[]),
        (404, &[]),
        // An application's own conflict: no Retry-After.
        (409, &[]),
        (410, &[]),
        (422, &[("retry-after", "0")]),
        (500, &[("retry-after", "0")]),
        (501, &[]),
    ];
    for (status, headers) in answers {
        let stub = Stub::start(vec![Act::Answer(status, headers), OK]).await;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let client = ClientBuilder::new(http).with(fast().build()).build();
        let response = client.post(stub.url()).body("{}").send().await.unwrap();
        assert_eq!(response.status(), status);
        assert_eq!(info(&response).attempts(), 1, "{status}");
        assert_eq!(stub.seen().len(), 1, "{status}");
    }
}

#[tokio::test]
async fn transient_answers_are_retried() {
    let answers: [(u16, &'static [(&'static str, &'static str)]); 5] = [
        (503, &[]),
        (502, &[]),
        (504, &[]),
        (429, &[]),
        (409, &[("retry-after", "0")]),
    ];
    for (status, headers) in answers {
        let stub = Stub::start(vec![Act::Answer(status, headers), OK]).await;
        let response = client(fast()).post(stub.url()).send().await.unwrap();
        assert_eq!(response.status(), 201, "{status}");
        assert_eq!(info(&response).attempts(), 2, "{status}");
    }
}

#[tokio::test]
async fn always_unavailable_ends_after_max_attempts_with_the_last_response() {
    let stub = Stub::start(vec![DOWN]).await;
    let response = client(fast().max_attempts(3))
        .post(stub.url())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "0");
    assert_eq!(info(&response).attempts(), 3);
    assert_eq!(response.text().await.unwrap(), "status 503");
    assert_eq!(stub.seen().len(), 3);
}

#[tokio::test]
async fn retry_after_is_waited_for_even_past_max_delay() {
    let stub = Stub::start(vec![Act::Answer(503, &[("retry-after", "1")]), OK]).await;
    let response = client(fast()).post(stub.url()).send().await.unwrap();
    assert_eq!(response.status(), 201);
    let seen = stub.seen();
    assert_eq!(seen.len(), 2);
    let gap = seen[1].at - seen[0].at;
    assert!(gap >= Duration::from_secs(1), "{gap:?}");
}

#[tokio::test]
async fn a_wait_past_the_budget_is_not_begun() {
    let stub = Stub::start(vec![Act::Answer(503, &[("retry-after", "5")]), OK]).await;
    let started = Instant::now();
    let response = client(fast().max_attempts(10).budget(Duration::from_secs(1)))
        .post(stub.url())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "5");
    assert_eq!(info(&response).attempts(), 1);
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    // The budget also ends a run of short waits.
    let stub = Stub::start(vec![Act::Answer(503, &[("retry-after", "0")])]).await;
    let started = Instant::now();
    let response = client(
        IdempotencyMiddleware::builder()
            .max_attempts(100)
            .base_delay(Duration::from_millis(100))
            .max_delay(Duration::from_millis(100))
            .jitter(Jitter::None)
            .budget(Duration::from_millis(450)),
    )
    .post(stub.url())
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 503);
    let attempts = info(&response).attempts();
    assert!((2..=5).contains(&attempts), "{attempts}");
    assert_eq!(stub.seen().len(), attempts as usize);
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_connection_closed_before_the_response_is_retried_then_given_up() {
    let stub = Stub::start(vec![Act::Close]).await;
    let error = client(fast().max_attempts(4))
        .post(stub.url())
        .body("{}")
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Reqwest(e) if e.is_request()),
        "{error:?}"
    );
    assert_eq!(stub.seen().len(), 4);
}

#[tokio::test]
async fn a_refused_connection_is_retried_with_growing_waits_then_given_up() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Nothing listens there any more.
    let started = Instant::now();
    let error = client(
        IdempotencyMiddleware::builder()
            .max_attempts(3)
            .base_delay(Duration::from_millis(100))
            .jitter(Jitter::None),
    )
    .post(format!("http://127.0.0.1:{port}/orders"))
    .send()
    .await
    .unwrap_err();
    assert!(
        matches!(&error, Error::Reqwest(e) if e.is_connect()),
        "{error:?}"
    );
    // 100 ms after the first attempt, 200 ms after the second, none after the third.
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(700), "{elapsed:?}");
}

#[tokio::test]
async fn a_streaming_body_is_sent_once() {
    let body = || {
        reqwest::Body::wrap_stream(stream::iter([Ok::<_, std::io::Error>(
            "{\"sku\": \"BOOK-1\"}",
        )]))
    };
    let stub = Stub::start(vec![DOWN, OK]).await;
    let response = client(fast())
        .post(stub.url())
        .body(body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 503);
    assert_eq!(info(&response).attempts(), 1);
    assert!(info(&response).key().is_some(), "it still carries a key");
    assert_eq!(stub.seen().len(), 1);

    let stub = Stub::start(vec![Act::Close, OK]).await;
    let error = client(fast()).post(stub.url()).body(body()).send().await;
    assert!(error.is_err());
    assert_eq!(stub.seen().len(), 1);
}

#[tokio::test]
async fn a_key_no_server_would_accept_fails_before_anything_is_sent() {
    let stub = Stub::start(vec![OK]).await;
    let error = client(fast().key_generator(|| "a key with spaces".to_owned()))
        .post(stub.url())
        .send()
        .await
        .unwrap_err();
    assert!(error.is_middleware(), "{error:?}");
    assert!(error.to_string().contains("visible ASCII"), "{error}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(stub.seen().is_empty());

    // A custom generator's key is what is sent.
    let response = client(fast().key_generator(|| "job-7".to_owned()))
        .post(stub.url())
        .send()
        .await
        .unwrap();
    assert_eq!(info(&response).key(), Some("job-7"));
    assert_eq!(
        stub.seen()[0].header("idempotency-key").as_deref(),
        Some("\"job-7\"")
    );
}
