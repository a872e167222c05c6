//! The `orders` service under database faults, probed from outside: a PostgreSQL server of
//! the test's own stopped and restarted, tables locked from another session, SQLite's write
//! lock held by another connection, a statement slow enough for sqlx's slow-statement log.
//! Each answer must be the true one, fast, and nothing may be committed twice or lost.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Client, Db, Kind, Server};
use idem_runtime::sqlx::{self, Connection as _};

const ORDER: &str = r#"{"sku":"SKU-1","quantity":1}"#;

/// A PostgreSQL server of the test's own (`initdb` into a temporary directory, trust
/// authentication, a free port), so that it can be stopped and restarted without touching
/// the shared one. The server programs must be installed: a missing one fails the test.
struct PrivatePostgres {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
}

impl PrivatePostgres {
    fn start() -> Self {
        let bin = postgres_bin();
        let dir = idem_testkit::harness::new_dir("pg");
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let this = Self { dir, bin, port };
        // PostgreSQL refuses to run as root: as root, run it as `postgres`.
        Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&this.dir)
            .status()
            .map(|_| ())
            .unwrap_or(());
        this.run(
            "initdb",
            &[
                "-D",
                &this.data(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "--no-instructions",
            ],
        );
        this.pg_ctl("start");
        this
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    fn run(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let as_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"));
        let status = if as_root {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&path)
                .args(args)
                .status()
        } else {
            Command::new(&path).args(args).status()
        }
        .unwrap_or_else(|e| panic!("{} runs: {e}", path.display()));
        assert!(status.success(), "{program} {args:?}: {status}");
    }

    fn pg_ctl(&self, action: &str) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                action,
                "-D",
                &self.data(),
                "-m",
                "fast",
                "-w",
                "-o",
                &options,
                "-l",
                &log,
            ],
        );
    }

    fn stop(&self) {
        self.pg_ctl("stop");
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["stop", "-D", &self.data(), "-m", "immediate"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where `initdb` and `pg_ctl` are: `PG_BIN`, or the newest `/usr/lib/postgresql/*/bin`.
fn postgres_bin() -> PathBuf {
    if let Ok(bin) = std::env::var("PG_BIN") {
        return PathBuf::from(bin);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect(
            "the PostgreSQL server programs (initdb, pg_ctl) are installed, or PG_BIN names them",
        )
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|bin| bin.join("initdb").exists())
        .collect();
    found.sort();
    found
        .pop()
        .expect("initdb under /usr/lib/postgresql/*/bin, or PG_BIN")
}

fn db_at(url: String, dir: &Path) -> Db {
    Db::postgres_at(url, dir.to_path_buf())
}

/// Every answer of a failing store: `503`, problem+json, `Retry-After`.
fn assert_retry_later(reply: &common::Reply, problem_type: &str) {
    let problem = reply.assert_problem(503);
    assert_eq!(problem["type"], problem_type, "{}", reply.body);
    assert!(reply.header("retry-after").is_some(), "{:?}", reply.headers);
}

/// PostgreSQL stopped: an idempotent request answers `503` with `Retry-After` within the
/// acquire timeout (500 ms), not sqlx's 30 s; so do many at once (load is shed, not queued);
/// so does a `GET` (the application's own query), never `500`. Once the database is back, the
/// same key executes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_answers_503_at_once() {
    let pg = PrivatePostgres::start();
    let db = db_at(pg.url("postgres"), &pg.dir);
    let server = Server::start(&db);
    let c = Client::new(&server);
    let first = c.post(Some("acme"), Some("before"), ORDER).await;
    assert_eq!(first.status, 201, "{}", first.body);
    let location = first.header("location").unwrap().to_owned();

    pg.stop();
    let started = Instant::now();
    let reply = c.post(Some("acme"), Some("while-down"), ORDER).await;
    let took = started.elapsed();
    assert_retry_later(&reply, "urn:idem:problem:store-unavailable");
    assert!(
        took < Duration::from_millis(1500),
        "answered after {took:?}"
    );

    let started = Instant::now();
    let many: Vec<_> = (0..64)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                c.post(Some("acme"), Some(&format!("many-{i}")), ORDER)
                    .await
            })
        })
        .collect();
    for task in many {
        assert_retry_later(&task.await.unwrap(), "urn:idem:problem:store-unavailable");
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "64 requests answered after {took:?}"
    );

    let get = c.get("acme", &location).await;
    assert_retry_later(&get, "urn:idem:problem:database-unavailable");

    pg.pg_ctl("start");
    let retry = c.post(Some("acme"), Some("while-down"), ORDER).await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert!(!retry.replayed());
    let again = c.post(Some("acme"), Some("while-down"), ORDER).await;
    assert!(again.replayed());
    assert_eq!(db.orders().await, 2);
}

/// PostgreSQL restarted while the pool holds connections: they are all dead. A connection
/// idle for a second is pinged before use; one that is not is found dead by the idempotent
/// request's lookup, dropped, and the lookup goes on with another. No request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_costs_no_request() {
    let pg = PrivatePostgres::start();
    let db = db_at(pg.url("postgres"), &pg.dir);
    let server = Server::start(&db);
    let c = Client::new(&server);
    // Fill the pool: many connections open at once.
    let warm: Vec<_> = (0..24)
        .map(|i| {
            let c = c.clone();
            tokio::spawn(async move {
                c.post(Some("acme"), Some(&format!("warm-{i}")), ORDER)
                    .await
            })
        })
        .collect();
    for task in warm {
        assert_eq!(task.await.unwrap().status, 201);
    }

    let location = c
        .post(Some("acme"), Some("to-read"), ORDER)
        .await
        .header("location")
        .unwrap()
        .to_owned();
    pg.pg_ctl("restart");
    // An idle pool: its connections are pinged before use, so the application's own query
    // does not meet a dead one either.
    tokio::time::sleep(idem_runtime::store::IDLE_PING_AFTER + Duration::from_millis(200)).await;
    let get = c.get("acme", &location).await;
    assert_eq!(get.status, 200, "{}", get.body);
    for i in 0..20 {
        let reply = c
            .post(Some("acme"), Some(&format!("after-{i}")), ORDER)
            .await;
        assert_eq!(
            reply.status, 201,
            "request {i} after the restart: {}",
            reply.body
        );
    }
    let replay = c.post(Some("acme"), Some("warm-3"), ORDER).await;
    assert_eq!(replay.status, 201);
    assert!(replay.replayed());
    assert_eq!(db.orders().await, 45);
}

/// Holds `LOCK TABLE {table} IN {mode} MODE` in a transaction of its own until dropped.
async fn lock_table(url: &str, table: &str, mode: &str) -> sqlx::PgConnection {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(&format!("BEGIN; LOCK TABLE {table} IN {mode} MODE"))
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

async fn release(mut conn: sqlx::PgConnection) {
    sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
}

/// Tables locked from outside. Each wait ends after `in_flight_wait` (2 s) with the true
/// answer, and the retry with the same key executes once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_tables_locked_from_outside() {
    let db = Db::fresh(Kind::Postgres).await;
    let server = Server::start(&db);
    let c = Client::new(&server);
    assert_eq!(c.post(Some("acme"), Some("warm"), ORDER).await.status, 201);

    // idem's own INSERT cannot take its lock: it failed before `COMMIT`, so nothing is
    // committed and the answer says so (not "outcome unknown").
    let lock = lock_table(&db.url, "idempotency_keys", "SHARE").await;
    let reply = c.post(Some("acme"), Some("insert-locked"), ORDER).await;
    assert_retry_later(&reply, "urn:idem:problem:store-busy");
    assert!(
        reply.json()["detail"]
            .as_str()
            .unwrap()
            .contains("nothing was committed")
    );
    release(lock).await;
    assert_eq!(db.orders().await, 1);

    // The key table locked for reading too: the lookup gives up after its deadline, and the
    // server cancels the statement it left waiting (`client_connection_check_interval`)
    // rather than keeping a backend blocked until the lock goes.
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE datname = current_database() AND wait_event_type = 'Lock'";
    let lock = lock_table(&db.url, "idempotency_keys", "ACCESS EXCLUSIVE").await;
    let started = Instant::now();
    let post = {
        let c = c.clone();
        tokio::spawn(async move { c.post(Some("acme"), Some("table-locked"), ORDER).await })
    };
    while db.scalar(waiting).await != 1 {
        assert!(!post.is_finished(), "the lookup waits for the lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reply = post.await.unwrap();
    assert_retry_later(&reply, "urn:idem:problem:store-busy");
    assert!(started.elapsed() < Duration::from_secs(10));
    let answered = Instant::now();
    while db.scalar(waiting).await != 0 {
        assert!(
            answered.elapsed() < Duration::from_millis(2500),
            "the abandoned lookup still waits"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    release(lock).await;

    // The application's table locked: the handler's INSERT times out inside idem's
    // transaction, and the example answers 503 with Retry-After, not 500.
    let lock = lock_table(&db.url, "orders", "EXCLUSIVE").await;
    let reply = c.post(Some("acme"), Some("orders-locked"), ORDER).await;
    assert_retry_later(&reply, "urn:idem:problem:database-unavailable");
    release(lock).await;

    assert_eq!(db.orders().await, 1);
    assert_eq!(db.keys().await, 1);
    for key in ["insert-locked", "table-locked", "orders-locked"] {
        let retry = c.post(Some("acme"), Some(key), ORDER).await;
        assert_eq!(retry.status, 201, "{key}: {}", retry.body);
        assert!(!retry.replayed());
    }
    assert_eq!(db.orders().await, 4);
}

/// sqlx logs a statement that takes longer than a second, with its text: idem's merged
/// `INSERT …; COMMIT` holds the key, the tenant and the response body as literals. Slowed
/// down by a lock, it must leave no trace of them in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_statements_log_no_secrets() {
    let db = Db::fresh(Kind::Postgres).await;
    let server = Server::start_with(
        &db,
        &[("DATABASE_URL", db.url.as_str()), ("RUST_LOG", "debug")],
    );
    let c = Client::new(&server);
    assert_eq!(c.post(Some("acme"), Some("warm"), ORDER).await.status, 201);

    let key = "key-5ecret-7d1f";
    let tenant = "tenant-5ecret-7d1f";
    let sku = "SKU-5ECRET-7D1F";
    let lock = lock_table(&db.url, "idempotency_keys", "SHARE").await;
    let post = {
        let c = c.clone();
        tokio::spawn(async move {
            c.post(
                Some(tenant),
                Some(key),
                &format!(r#"{{"sku":"{sku}","quantity":1}}"#),
            )
            .await
        })
    };
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE datname = current_database() AND wait_event_type = 'Lock'";
    while db.scalar(waiting).await != 1 {
        assert!(!post.is_finished(), "the INSERT waits for the lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // From its start, longer than sqlx's slow-statement threshold (1 s), shorter than
    // `in_flight_wait` (2 s).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    release(lock).await;
    let reply = post.await.unwrap();
    assert_eq!(reply.status, 201, "{}", reply.body);
    // The request's lines are in the log once its last one is (the warm-up's came first).
    let deadline = Instant::now() + Duration::from_secs(10);
    while server
        .logged()
        .matches("idempotent request finished")
        .count()
        < 2
    {
        assert!(Instant::now() < deadline, "{}", server.logged());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let log = server.logged();
    assert!(log.contains("listening on"), "the log is captured");
    let hex = |s: &str| s.bytes().map(|b| format!("{b:02x}")).collect::<String>();
    for secret in [
        key.to_owned(),
        tenant.to_owned(),
        sku.to_owned(),
        hex(sku),
        hex(key),
    ] {
        assert!(
            !log.to_lowercase().contains(&secret.to_lowercase()),
            "`{secret}` is in the log"
        );
    }
}

/// SQLite's write lock held by another connection: the request waited for the database,
/// not for a duplicate of itself, and says so (`503` store-busy, not `409` in-flight).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_write_contention_is_not_a_duplicate() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = Server::start(&db);
    let c = Client::new(&server);
    assert_eq!(c.post(Some("acme"), Some("warm"), ORDER).await.status, 201);

    let mut writer = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut writer)
        .await
        .unwrap();
    let reply = c.post(Some("acme"), Some("contended"), ORDER).await;
    assert_retry_later(&reply, "urn:idem:problem:store-busy");
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut writer)
        .await
        .unwrap();
    writer.close().await.unwrap();

    let retry = c.post(Some("acme"), Some("contended"), ORDER).await;
    assert_eq!(retry.status, 201, "{}", retry.body);
    assert_eq!(db.orders().await, 2);
}
