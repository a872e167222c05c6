//! Harness for the examples' HTTP tests: real server processes on real databases.
//!
//! The servers are idem-testkit's harness's: PostgreSQL from `DATABASE_URL` and MySQL from
//! `MYSQL_URL`, or the harness's defaults. On PostgreSQL each test creates its own database
//! `idem_orders_<uuid>`, for its server processes; an unreachable server fails the test:
//! nothing is skipped. SQLite tests use a fresh file, in a new directory of the harness's.
//! On MySQL, a database `idem_orders_<uuid>` per test.
//!
//! With `PGBOUNCER_URL` set (a transaction pooler in front of that PostgreSQL, such as
//! `.ci/pgbouncer` starts), the servers reach each PostgreSQL database through it: their
//! `DATABASE_URL` names the pooler and `MIGRATION_DATABASE_URL` the server, as a deployment
//! behind PgBouncer would set them; the tests' own looks go to the server directly.
#![allow(dead_code, clippy::unwrap_used, clippy::print_stdout)]

pub mod payments;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, mpsc};
use std::time::{Duration, Instant};

use idem_runtime::sqlx::{self, MySqlPool, PgPool, SqlitePool};
use idem_runtime::store::Backend;
use idem_testkit::harness::{direct, mysql_url, new_dir, pooled, postgres_url, unique};
use reqwest::header::HeaderMap;
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Postgres,
    Sqlite,
    MySql,
}

/// A store, as the type `idem_testkit::on_every_store!` hands a test body (`name::<DB>()`).
pub use idem_runtime::sqlx::Database as Store;

impl Kind {
    /// The store `DB` is.
    pub fn of<DB: Store>() -> Self {
        match DB::NAME {
            "PostgreSQL" => Self::Postgres,
            "SQLite" => Self::Sqlite,
            "MySQL" => Self::MySql,
            other => panic!("no example runs on {other}"),
        }
    }
}

/// A fresh database and a direct connection to it, for assertions.
pub struct Db {
    pub url: String,
    pool: Pool,
    pub dir: PathBuf,
}

enum Pool {
    Pg(PgPool),
    Lite(SqlitePool),
    My(MySqlPool),
}

/// Creates a database `idem_orders_<uuid>` on the `DB` server of `url`, and returns its
/// name; an unreachable server fails the test.
async fn create_database<DB: Backend>(url: &str) -> String {
    let admin = sqlx::Pool::<DB>::connect(url).await.unwrap_or_else(|e| {
        panic!(
            "{} is required for these tests and is unreachable at {url}: {e}",
            DB::NAME
        )
    });
    let name = unique("idem_orders");
    let mut conn = admin.acquire().await.unwrap();
    DB::execute(&mut conn, &format!("CREATE DATABASE {name}"), &[])
        .await
        .unwrap();
    drop(conn);
    admin.close().await;
    name
}

impl Db {
    pub async fn fresh(kind: Kind) -> Self {
        let dir = new_dir("run");
        match kind {
            Kind::Postgres => {
                let admin_url = postgres_url();
                let name = create_database::<sqlx::Postgres>(&admin_url).await;
                let servers_url = pooled().unwrap_or(admin_url);
                let mut url = reqwest::Url::parse(&servers_url).unwrap();
                url.set_path(&format!("/{name}"));
                let url = url.to_string();
                // The server creates the tables; connect lazily for assertions.
                let pool = PgPool::connect_lazy(&direct(&url)).unwrap();
                Self {
                    url,
                    pool: Pool::Pg(pool),
                    dir,
                }
            }
            Kind::Sqlite => {
                let file = dir.join("orders.db");
                let url = format!("sqlite://{}", file.display());
                Self::sqlite_at(url, dir)
            }
            Kind::MySql => {
                let server = mysql_url();
                let server = server.trim_end_matches('/');
                let name = create_database::<sqlx::MySql>(server).await;
                let url = format!("{server}/{name}");
                let pool = MySqlPool::connect_lazy(&url).unwrap();
                Self {
                    url,
                    pool: Pool::My(pool),
                    dir,
                }
            }
        }
    }

    /// A PostgreSQL database the test made itself (its own server), used as it is.
    pub fn postgres_at(url: String, dir: PathBuf) -> Self {
        let pool = PgPool::connect_lazy(&url).unwrap();
        Self {
            url,
            pool: Pool::Pg(pool),
            dir,
        }
    }

    /// A PostgreSQL database the test made itself, which its servers reach at `url` and the
    /// test reads at `looks` (one of the servers a multi-host `url` names, say).
    pub fn postgres_via(url: String, looks: &str, dir: PathBuf) -> Self {
        let pool = PgPool::connect_lazy(looks).unwrap();
        Self {
            url,
            pool: Pool::Pg(pool),
            dir,
        }
    }

    pub fn sqlite_at(url: String, dir: PathBuf) -> Self {
        let pool = SqlitePool::connect_lazy(&url).unwrap();
        Self {
            url,
            pool: Pool::Lite(pool),
            dir,
        }
    }

    pub async fn scalar(&self, sql: &str) -> i64 {
        match &self.pool {
            Pool::Pg(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
            Pool::Lite(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
            Pool::My(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
        }
    }

    pub async fn text(&self, sql: &str) -> String {
        match &self.pool {
            Pool::Pg(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
            Pool::Lite(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
            Pool::My(p) => {
                let text: Vec<u8> = sqlx::query_scalar(sql).fetch_one(p).await.unwrap();
                String::from_utf8(text).unwrap()
            }
        }
    }

    /// The first column of every row `sql` returns.
    pub async fn texts(&self, sql: &str) -> Vec<String> {
        match &self.pool {
            Pool::Pg(p) => sqlx::query_scalar(sql).fetch_all(p).await.unwrap(),
            Pool::Lite(p) => sqlx::query_scalar(sql).fetch_all(p).await.unwrap(),
            Pool::My(p) => {
                let texts: Vec<Vec<u8>> = sqlx::query_scalar(sql).fetch_all(p).await.unwrap();
                texts
                    .into_iter()
                    .map(|text| String::from_utf8(text).unwrap())
                    .collect()
            }
        }
    }

    pub async fn orders(&self) -> i64 {
        self.scalar("SELECT count(*) FROM orders").await
    }

    pub async fn keys(&self) -> i64 {
        self.scalar("SELECT count(*) FROM idempotency_keys").await
    }

    /// Seconds from now until the key expires.
    pub async fn seconds_to_expiry(&self, key: &str) -> i64 {
        let sql = match &self.pool {
            Pool::Pg(_) => format!(
                "SELECT extract(epoch FROM expires_at - now())::int8 FROM idempotency_keys \
                 WHERE idempotency_key = '{key}'"
            ),
            Pool::Lite(_) => format!(
                "SELECT CAST(round((julianday(expires_at) - julianday('now')) * 86400) AS INTEGER) \
                 FROM idempotency_keys WHERE idempotency_key = '{key}'"
            ),
            Pool::My(_) => format!(
                "SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(3), expires_at) \
                 FROM idempotency_keys WHERE idempotency_key = '{key}'"
            ),
        };
        self.scalar(&sql).await
    }

    /// SQLite only: sets every key's expiry to a Unix time in seconds, as an operator might.
    pub async fn set_expiry_unix_seconds(&self, seconds: i64) {
        let Pool::Lite(p) = &self.pool else {
            panic!("SQLite only")
        };
        sqlx::query("UPDATE idempotency_keys SET expires_at = ?1")
            .bind(seconds)
            .execute(p)
            .await
            .unwrap();
    }

    /// Moves every key's expiry into the past, as an operator or time would.
    pub async fn expire_all_keys(&self) {
        match &self.pool {
            Pool::Pg(p) => {
                sqlx::query("UPDATE idempotency_keys SET expires_at = now() - interval '1 second'")
                    .execute(p)
                    .await
                    .unwrap();
            }
            Pool::Lite(p) => {
                sqlx::query(
                    "UPDATE idempotency_keys SET expires_at = datetime('now', '-1 second')",
                )
                .execute(p)
                .await
                .unwrap();
            }
            Pool::My(p) => {
                sqlx::query(
                    "UPDATE idempotency_keys \
                     SET expires_at = UTC_TIMESTAMP(3) - INTERVAL 1 SECOND",
                )
                .execute(p)
                .await
                .unwrap();
            }
        }
    }
}

impl Db {
    /// Every value of every column of idem's tables that could hold what a client sent or
    /// was answered, in lowercase hexadecimal, whatever the column's type: text and bytes
    /// alike.
    pub async fn idem_columns_hex(&self) -> Vec<String> {
        let tables: [(&str, &[&str]); 4] = [
            (
                "idempotency_keys",
                &[
                    "fingerprint",
                    "response_headers",
                    "response_body",
                    "request",
                    "journal",
                    "field_digests",
                    "recovery_point",
                ],
            ),
            ("idempotency_audit", &["reason", "before", "after"]),
            ("idempotency_outbox", &["payload", "last_error"]),
            ("idempotency_inbox", &["reason", "body"]),
        ];
        let mut values = Vec::new();
        for (table, columns) in tables {
            for column in columns {
                let sql = format!("SELECT coalesce({}, '') FROM {table}", self.hex(column));
                values.extend(self.texts(&sql).await);
            }
        }
        values
    }

    /// The bytes of `column` of key `key`'s row.
    pub async fn key_column(&self, key: &str, column: &str) -> Vec<u8> {
        let sql = format!(
            "SELECT coalesce({}, '') FROM idempotency_keys WHERE idempotency_key = '{key}'",
            self.hex(column)
        );
        let hex = self.text(&sql).await;
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    /// An expression of `column` in lowercase hexadecimal, text or bytes alike.
    fn hex(&self, column: &str) -> String {
        match &self.pool {
            Pool::Pg(_) if ["fingerprint", "response_body", "field_digests"].contains(&column) => {
                format!("encode(\"{column}\", 'hex')")
            }
            Pool::Pg(_) => format!("encode(convert_to(\"{column}\", 'UTF8'), 'hex')"),
            Pool::Lite(_) => format!("lower(hex(\"{column}\"))"),
            Pool::My(_) => format!("lower(hex(`{column}`))"),
        }
    }
}

impl Db {
    /// `idem keys reseal` with `keys` (`IDEM_STORAGE_KEYS`' format), through the store as the
    /// tool calls it: the key table, then the outbox and the inbox, batch by batch. How many
    /// keys it resealed.
    pub async fn reseal(&self, keys: &str) -> u64 {
        let ring = idem_runtime::store::Keyring::parse(keys).unwrap();
        match &self.pool {
            Pool::Pg(p) => reseal(p, ring).await,
            Pool::Lite(p) => reseal(p, ring).await,
            Pool::My(p) => reseal(p, ring).await,
        }
    }
}

async fn reseal<DB: Backend>(pool: &sqlx::Pool<DB>, ring: idem_runtime::store::Keyring) -> u64 {
    use idem_runtime::clock::Clock as _;
    use idem_runtime::store::{Actor, Inbox, KeyTable, Outbox, Resealed, ResealedRows};
    let now = idem_runtime::clock::SystemClock.now_millis();
    let table = KeyTable::new(pool.clone()).with_keyring(ring.clone());
    let by = Actor::new("ops").reason("retire the old storage key");
    let mut keys = Resealed::default();
    loop {
        keys.add(table.reseal(keys.next.as_ref(), 4, &by, now).await.unwrap());
        if keys.next.is_none() {
            break;
        }
    }
    assert_eq!((keys.skipped(), keys.unreadable.len()), (0, 0), "{keys:?}");
    let outbox = Outbox::new(pool.clone()).with_keyring(ring.clone());
    let inbox = Inbox::new(pool.clone()).with_keyring(ring);
    let (mut messages, mut events) = (ResealedRows::default(), ResealedRows::default());
    loop {
        messages.add(outbox.reseal(messages.next.unwrap_or(0), 4).await.unwrap());
        events.add(inbox.reseal(events.next.unwrap_or(0), 4).await.unwrap());
        if messages.next.is_none() && events.next.is_none() {
            break;
        }
    }
    keys.resealed
}

impl Db {
    /// `idem keys delete --force` of the key `key` (any scope, operation), through the store's
    /// operator action as the tool calls it: audited, forced over a live lease.
    pub async fn force_delete(&self, key: &str) {
        match &self.pool {
            Pool::Pg(p) => force_delete(p, key).await,
            Pool::Lite(p) => force_delete(p, key).await,
            Pool::My(p) => force_delete(p, key).await,
        }
    }
}

impl Db {
    /// Notes a delivery of event `event_id` received by `source` in the inbox as waiting, as
    /// a `503` for an event not applied yet does.
    pub async fn note_waiting(&self, source: &str, event_id: &str) {
        match &self.pool {
            Pool::Pg(p) => note_waiting(p, source, event_id).await,
            Pool::Lite(p) => note_waiting(p, source, event_id).await,
            Pool::My(p) => note_waiting(p, source, event_id).await,
        }
    }
}

async fn note_waiting<DB: Backend>(pool: &sqlx::Pool<DB>, source: &str, event_id: &str) {
    use idem_runtime::store::{Delivery, Inbox, InboxStatus};
    let delivery = Delivery {
        source,
        event_id,
        reason: "not applied yet",
        body: "{}",
    };
    let mut conn = pool.acquire().await.unwrap();
    Inbox::<DB>::note(&mut conn, delivery, InboxStatus::Waiting, 0, None)
        .await
        .unwrap();
}

async fn force_delete<DB: Backend>(pool: &sqlx::Pool<DB>, key: &str) {
    use idem_runtime::store::{Action, Actor, KeyFilter, KeyTable};
    let table = KeyTable::new(pool.clone());
    use idem_runtime::clock::Clock as _;
    let now = idem_runtime::clock::SystemClock.now_millis();
    let page = table.list(&KeyFilter::new(), now).await.unwrap();
    let row = page
        .keys
        .into_iter()
        .find(|row| row.key == key)
        .unwrap_or_else(|| panic!("no key {key}"));
    let by = Actor::new("test-operator")
        .reason("forced in a test")
        .force();
    table
        .act(row.key_ref(), &row, &Action::Delete, &by, now)
        .await
        .unwrap();
}

/// Runs `orders` on `db` with `env` and returns what it said, once it exited unsuccessfully
/// (within 30 s) without ever serving.
pub fn refused_start(db: &Db, env: &[(&str, &str)]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_orders"))
        .current_dir(&db.dir)
        .envs(env.iter().copied())
        .env("LISTEN_ADDR", "127.0.0.1:0")
        .env_remove("IDEM_FAILPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("orders started with {env:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stdout) + String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{said}");
    assert!(!said.contains("listening on"), "{said}");
    said.into_owned()
}

/// One server process: `orders` unless started with [`Server::spawn`].
pub struct Server {
    child: Child,
    pub base: String,
    /// Everything the process wrote to standard output so far.
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    pub fn start(db: &Db) -> Self {
        Self::start_with(db, &[("DATABASE_URL", db.url.as_str())])
    }

    pub fn start_with(db: &Db, env: &[(&str, &str)]) -> Self {
        Self::spawn(env!("CARGO_BIN_EXE_orders"), "orders", &db.dir, env)
    }

    /// Starts `program` in `dir` on a free port, with `env` added to an environment without
    /// `DATABASE_URL` or `IDEM_FAILPOINT`; echoes its output as `[label] …` and returns once
    /// it logs `listening on http://ADDR`.
    pub fn spawn(program: &str, label: &'static str, dir: &Path, env: &[(&str, &str)]) -> Self {
        Self::spawn_args(program, &[], label, dir, env)
    }

    /// [`Server::spawn`] with arguments for `program`.
    pub fn spawn_args(
        program: &str,
        args: &[&str],
        label: &'static str,
        dir: &Path,
        env: &[(&str, &str)],
    ) -> Self {
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(dir)
            .env_remove("DATABASE_URL")
            .env_remove("MIGRATION_DATABASE_URL")
            .env_remove("IDEM_FAILPOINT")
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in env {
            command.env(name, value);
            // Through the tests' transaction pooler: migrations on the server itself.
            if *name == "DATABASE_URL" && direct(value) != *value {
                command.env("MIGRATION_DATABASE_URL", direct(value));
            }
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("{label} starts: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let kept = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                println!("[{label}] {line}");
                if let Ok(mut log) = kept.lock() {
                    log.push_str(&line);
                    log.push('\n');
                }
                if let (false, Some(at)) = (sent, line.find("listening on http://")) {
                    let addr = line[at + "listening on ".len()..].trim().to_owned();
                    let _ = tx.send(addr);
                    sent = true;
                }
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("{label} logs `listening on http://…` within 60 s"));
        Self { child, base, log }
    }

    /// What the process logged so far.
    pub fn logged(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// SIGKILL: the process dies at once, whatever it was doing.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// SIGTERM, then waits for the process to exit.
    pub fn stop(mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.child.wait().unwrap()
    }

    /// SIGTERM, without waiting: see [`Server::wait_for_exit`].
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Waits for the process to exit by itself (e.g. an injected abort), at most 10 s.
    pub fn wait_for_exit(&mut self) -> ExitStatus {
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server did not exit");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    /// Asserts an RFC 9457 problem with this status.
    pub fn assert_problem(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "{}", self.body);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let problem = self.json();
        assert_eq!(problem["status"], status);
        assert!(problem["type"].as_str().is_some_and(|t| !t.is_empty()));
        assert!(problem["title"].as_str().is_some_and(|t| !t.is_empty()));
        problem
    }
}

/// A client for one server.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    pub base: String,
}

impl Client {
    pub fn new(server: &Server) -> Self {
        Self::for_base(&server.base)
    }

    pub fn for_base(base: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            base: base.to_owned(),
        }
    }

    pub async fn try_post(
        &self,
        tenant: Option<&str>,
        key: Option<&str>,
        body: &str,
    ) -> reqwest::Result<Reply> {
        self.try_post_to("/orders", tenant, key, body).await
    }

    pub async fn try_post_to(
        &self,
        path: &str,
        tenant: Option<&str>,
        key: Option<&str>,
        body: &str,
    ) -> reqwest::Result<Reply> {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body.to_owned());
        if let Some(tenant) = tenant {
            request = request.header("authorization", format!("Bearer {tenant}"));
        }
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        let response = request.send().await?;
        Ok(Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.text().await?,
        })
    }

    pub async fn post(&self, tenant: Option<&str>, key: Option<&str>, body: &str) -> Reply {
        self.try_post(tenant, key, body).await.unwrap()
    }

    pub async fn get(&self, tenant: &str, path: &str) -> Reply {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .header("authorization", format!("Bearer {tenant}"))
            .send()
            .await
            .unwrap();
        Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        }
    }
}

/// Posts the order `body` for tenant `acme` with `key` to the processes of `bases` in turn,
/// starting with the `first`th, until it is answered `201`, and returns that answer's body.
/// `409`, `503` and connection errors are retried every 20 ms (a process killed midway, a key
/// still held by another transaction, a pool reconnecting); any other answer, or none within
/// `within`, fails.
pub async fn post_until_created(
    bases: &Mutex<Vec<String>>,
    first: usize,
    key: &str,
    body: &str,
    within: Duration,
) -> String {
    let deadline = Instant::now() + within;
    let mut attempt = 0;
    loop {
        let base = {
            let bases = bases.lock().unwrap();
            bases[(first + attempt) % bases.len()].clone()
        };
        attempt += 1;
        match Client::for_base(&base)
            .try_post(Some("acme"), Some(key), body)
            .await
        {
            Ok(reply) if reply.status == 201 => return reply.body,
            Ok(reply) if [409, 503].contains(&reply.status) => {}
            Ok(reply) => panic!("{key}: {} {}", reply.status, reply.body),
            Err(_) => {}
        }
        assert!(Instant::now() < deadline, "{key} never answered 201");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn exists(path: &Path) -> bool {
    path.try_exists().unwrap_or(false)
}

/// Waits until `check` holds, for at most `within` (looking every 50 ms).
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = std::time::Instant::now() + within;
    while !check().await {
        assert!(
            std::time::Instant::now() < until,
            "not within {within:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
