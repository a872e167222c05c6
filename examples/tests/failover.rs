//! PostgreSQL failing over under load, with real processes: `.ci/failover` starts a primary
//! and a streaming standby of it, two servers reach them through one multi-host
//! `DATABASE_URL` (`target_session_attrs=read-write`), and while clients post new keys the
//! primary is killed (`kill -9`) and the standby promoted. The servers are not restarted.
//!
//! With a synchronous standby nothing acknowledged may be lost: every key answered has its
//! row and its business row on the promoted standby, once, and replays its first answer.
//! With an asynchronous one the last commits may be lost: the tests count the acknowledged
//! keys lost, and check that what remains is whole (a key row and its business row, or
//! neither) and that a lost key sent again executes once.
//!
//! Each test runs its own pair of servers (free ports, files in a directory of its own) and
//! stops them at the end, passed or failed; the tests run one at a time. A missing or failing
//! script fails the test.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::payments::{Provider, payments, payments_rows, post_until_final};
use common::{Client, Db, Server, eventually};
use futures_util::StreamExt as _;
use futures_util::stream;
use idem_testkit::failover::Failover;
use idem_testkit::harness::new_dir;
use serde_json::json;

const ORDER: &str = r#"{"sku": "BOOK-1", "quantity": 2}"#;

/// Concurrent clients, each posting new keys one after another.
const CLIENTS: usize = 8;

/// The tests start whole clusters: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replication {
    Sync,
    Async,
}

impl Replication {
    fn name(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Async => "async",
        }
    }
}

/// A primary and its standby, and database `test` on them: the servers get the multi-host
/// URL, the test reads the standby (once promoted).
fn cluster(replication: Replication) -> (Failover, Db) {
    let rig = Failover::start(replication == Replication::Sync);
    let db = Db::postgres_via(
        rig.url.clone(),
        &Failover::url_of(rig.standby_port, "test"),
        new_dir("failover_run"),
    );
    (rig, db)
}

/// Kills the primary, waits 750 ms, and promotes the standby (which then takes writes). An
/// asynchronous standby is cut off 300 ms before the kill, so that the promotion loses what
/// the primary acknowledged meanwhile, as a standby that lagged would.
fn fail_over(rig: &Failover, replication: Replication) {
    tokio::task::block_in_place(|| {
        if replication == Replication::Async {
            rig.cut_standby();
            std::thread::sleep(Duration::from_millis(300));
        }
        rig.kill_primary();
        std::thread::sleep(Duration::from_millis(750));
        rig.promote();
    });
}

/// One key, as its client was first answered.
struct Answer {
    key: String,
    /// The request body sent with the key.
    request: String,
    /// The body of the first `201`.
    body: String,
    /// Whether the key was first sent after the promotion.
    after_promotion: bool,
}

/// Runs [`CLIENTS`] clients, each sending new keys one after another with `send(client, n)`
/// (its `n`th key, until it is answered), for 1.5 s; fails the cluster over, goes on for 2 s
/// after the promotion, and returns every key's answer.
async fn under_load<F, Fut>(rig: &Failover, replication: Replication, send: F) -> Vec<Answer>
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Answer> + Send + 'static,
{
    let send = Arc::new(send);
    let promoted = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let (send, promoted, stop) =
                (Arc::clone(&send), Arc::clone(&promoted), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut answers = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    let after_promotion = promoted.load(Ordering::SeqCst);
                    answers.push(Answer {
                        after_promotion,
                        ..send(client, n).await
                    });
                    n += 1;
                }
                answers
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let failing = Instant::now();
    fail_over(rig, replication);
    promoted.store(true, Ordering::SeqCst);
    println!("failed over in {:?}", failing.elapsed());
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let mut answers = Vec::new();
    for task in tasks {
        answers.extend(task.await.unwrap());
    }
    let after = answers.iter().filter(|a| a.after_promotion).count();
    println!(
        "{} keys answered, {after} of them sent after the promotion",
        answers.len()
    );
    // The servers found the promoted standby by themselves.
    assert!(after > 0, "no key sent after the promotion was answered");
    answers
}

/// Completed keys whose stored response names no row of `table` (by the `id` of its body),
/// and rows of `table` that no completed key's response names.
async fn unmatched(db: &Db, table: &str) -> (i64, i64) {
    let named = "convert_from(k.response_body, 'UTF8')::json->>'id'";
    let keys = format!(
        "SELECT count(*) FROM idempotency_keys k WHERE k.status = 'completed' \
         AND NOT EXISTS (SELECT 1 FROM {table} t WHERE t.id::text = {named})"
    );
    let rows = format!(
        "SELECT count(*) FROM {table} t WHERE NOT EXISTS (SELECT 1 FROM idempotency_keys k \
         WHERE k.status = 'completed' AND t.id::text = {named})"
    );
    (db.scalar(&keys).await, db.scalar(&rows).await)
}

/// The answered keys without a row in the key table, and those whose row is not completed.
async fn missing<'a>(db: &Db, answers: &'a [Answer]) -> (Vec<&'a Answer>, Vec<&'a Answer>) {
    let statuses: HashMap<String, String> = db
        .texts("SELECT idempotency_key || ' ' || status FROM idempotency_keys")
        .await
        .into_iter()
        .map(|row| {
            let (key, status) = row.split_once(' ').unwrap();
            (key.to_owned(), status.to_owned())
        })
        .collect();
    let lost = answers
        .iter()
        .filter(|a| !statuses.contains_key(&a.key))
        .collect();
    let unfinished = answers
        .iter()
        .filter(|a| statuses.get(&a.key).is_some_and(|s| s != "completed"))
        .collect();
    (lost, unfinished)
}

/// Replays every key on each of `servers` (`POST path`): each must be a replay of exactly the
/// body it was first answered with.
async fn assert_replays(servers: &[Server], path: &str, answers: &[Answer]) {
    let clients: Vec<Client> = servers.iter().map(Client::new).collect();
    let replays = answers
        .iter()
        .flat_map(|a| clients.iter().map(move |c| (c, a)));
    let wrong: Vec<String> = stream::iter(replays)
        .map(|(c, a)| async move {
            let replay = c
                .try_post_to(path, Some("acme"), Some(&a.key), &a.request)
                .await
                .unwrap();
            let right = replay.status == 201 && replay.replayed() && replay.body == a.body;
            (!right).then(|| format!("{} on {}: {} {}", a.key, c.base, replay.status, replay.body))
        })
        .buffer_unordered(16)
        .filter_map(std::future::ready)
        .collect()
        .await;
    assert!(wrong.is_empty(), "{} wrong replays: {wrong:?}", wrong.len());
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap()
}

/// Two `orders` processes and eight clients through a failover: one key row and one order per
/// key answered `201`. Synchronous: nothing lost. Asynchronous: the lost keys counted, never a
/// key without its order or the reverse, and each lost key, sent again, makes one order.
async fn orders_failover(replication: Replication) {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let (rig, db) = cluster(replication);
    let servers = [Server::start(&db), Server::start(&db)];
    let bases = Arc::new(Mutex::new(
        servers.iter().map(|s| s.base.clone()).collect::<Vec<_>>(),
    ));
    let load_bases = Arc::clone(&bases);
    let mut answers = under_load(&rig, replication, move |client, n| {
        let bases = Arc::clone(&load_bases);
        async move {
            let key = format!("c{client}-{n}");
            let within = Duration::from_secs(20);
            let body = common::post_until_created(&bases, n, &key, ORDER, within).await;
            Answer {
                key,
                request: ORDER.to_owned(),
                body,
                after_promotion: false,
            }
        }
    })
    .await;

    let (lost, unfinished) = missing(&db, &answers).await;
    assert!(
        unfinished.is_empty(),
        "atomic mode stores completed keys only"
    );
    let lost: HashSet<String> = lost.into_iter().map(|a| a.key.clone()).collect();
    println!(
        "{} failover: {} acknowledged keys, {} lost",
        replication.name(),
        answers.len(),
        lost.len()
    );
    match replication {
        Replication::Sync => assert!(lost.is_empty(), "acknowledged keys lost: {lost:?}"),
        Replication::Async => assert!(!lost.is_empty(), "the cut-off standby lost nothing"),
    }
    // A key row and its order, or neither.
    assert_eq!(unmatched(&db, "orders").await, (0, 0));
    let kept = count(answers.len() - lost.len());
    assert_eq!(db.keys().await, kept);
    assert_eq!(db.orders().await, kept);

    // A lost key sent again executes once, answered with its new order from then on.
    for answer in answers.iter_mut().filter(|a| lost.contains(&a.key)) {
        let within = Duration::from_secs(10);
        answer.body = common::post_until_created(&bases, 0, &answer.key, ORDER, within).await;
    }
    assert_eq!(db.keys().await, count(answers.len()));
    assert_eq!(db.orders().await, count(answers.len()));
    assert_eq!(unmatched(&db, "orders").await, (0, 0));
    assert_replays(&servers, "/orders", &answers).await;
    println!("took {:?}", started.elapsed());
}

/// Two `payments` processes (lease 1 s) and eight clients paying new keys through a failover,
/// each retried until final: every key paid (`201`), charged once at the provider, one
/// payment row per key and a key row for each, its event delivered, nothing left processing.
/// Asynchronous: the lost keys (and those back to processing) counted; each lost key, sent
/// again, is paid, and still charged once in all at the provider.
async fn payments_failover(replication: Replication) {
    let _serial = SERIAL.lock().await;
    let started = Instant::now();
    let (rig, db) = cluster(replication);
    let provider = Provider::start(&db);
    let servers = [
        payments(&db, provider.url(), "1s"),
        payments(&db, provider.url(), "1s"),
    ];
    let clients: Arc<Vec<Client>> = Arc::new(servers.iter().map(Client::new).collect());
    let load_clients = Arc::clone(&clients);
    let mut answers = under_load(&rig, replication, move |client, n| {
        let clients = Arc::clone(&load_clients);
        async move {
            let key = format!("p{client}-{n}");
            let request = json!({
                "amount": 1000 + n,
                "currency": "EUR",
                "customer": format!("cus-{client}"),
            })
            .to_string();
            // Each key starts on another process.
            let mut clients = clients.to_vec();
            clients.rotate_left(n % 2);
            let reply = post_until_final(&clients, &key, &request, 100).await;
            assert_eq!(reply.status, 201, "{key}: {}", reply.body);
            Answer {
                key,
                request,
                body: reply.body,
                after_promotion: false,
            }
        }
    })
    .await;

    let (lost, unfinished) = missing(&db, &answers).await;
    let lost: HashSet<String> = lost.into_iter().map(|a| a.key.clone()).collect();
    let unfinished: HashSet<String> = unfinished.into_iter().map(|a| a.key.clone()).collect();
    println!(
        "{} failover: {} acknowledged keys, {} lost, {} back to processing",
        replication.name(),
        answers.len(),
        lost.len(),
        unfinished.len()
    );
    match replication {
        Replication::Sync => {
            assert!(lost.is_empty(), "acknowledged keys lost: {lost:?}");
            assert!(unfinished.is_empty(), "completions lost: {unfinished:?}");
        }
        Replication::Async => assert!(
            !lost.is_empty() || !unfinished.is_empty(),
            "the cut-off standby lost nothing"
        ),
    }
    // A completed key and its payment, or neither.
    assert_eq!(unmatched(&db, "payments").await, (0, 0));

    // A lost key sent again is paid, and then answers with that payment.
    for answer in answers.iter_mut().filter(|a| lost.contains(&a.key)) {
        let reply = post_until_final(&clients, &answer.key, &answer.request, 100).await;
        assert_eq!(reply.status, 201, "{}: {}", answer.key, reply.body);
        answer.body = reply.body;
    }
    // Keys whose attempt the failover cut off are resumed (a retry, or the reconciler).
    let db = &db;
    eventually(
        Duration::from_secs(20),
        "no key left processing",
        || async move {
            db.scalar("SELECT count(*) FROM idempotency_keys WHERE status <> 'completed'")
                .await
                == 0
        },
    )
    .await;
    let paid = count(answers.len());
    assert_eq!(db.keys().await, paid);
    assert_eq!(payments_rows(db).await, paid);
    assert_eq!(unmatched(db, "payments").await, (0, 0));
    assert_eq!(
        db.scalar("SELECT count(DISTINCT charge_id) FROM payments")
            .await,
        paid
    );
    assert_replays(&servers, "/payments", &answers).await;

    let stats = provider.stats().await;
    println!("provider: {stats}");
    // One charge and one provider key per key, also for a key whose row was lost and sent
    // again: its reservation, derived from the key and the request, sends the same provider
    // key, and the provider answers with the charge it made.
    assert_eq!(
        stats["charges"],
        paid,
        "one charge per key ({} lost keys sent again): {stats}",
        lost.len()
    );
    assert_eq!(
        stats["distinct_keys"], paid,
        "one provider key per key: {stats}"
    );
    // Every payment's event is delivered. (A claim whose commit the failover cut off holds
    // its events for the dispatcher's lease, 30 s, before they are sent again.)
    let ids: HashSet<String> = db
        .texts("SELECT id FROM payments")
        .await
        .into_iter()
        .collect();
    let waiting = Instant::now();
    provider
        .await_events_within(&ids, Duration::from_secs(45))
        .await;
    println!("events delivered after {:?} more", waiting.elapsed());
    println!("took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orders_sync_failover() {
    orders_failover(Replication::Sync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orders_async_failover() {
    orders_failover(Replication::Async).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn payments_sync_failover() {
    payments_failover(Replication::Sync).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn payments_async_failover() {
    payments_failover(Replication::Async).await;
}
