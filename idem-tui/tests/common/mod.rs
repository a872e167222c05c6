//! Test harness: a fresh database per test (idem-testkit's harness), seeded through idem's
//! runtime, and the `idem` binary run as a process against it.
//!
//! PostgreSQL comes from `DATABASE_URL` (default: the harness's);
//! each test gets its own schema `idem_test_<uuid>`, passed to the tool with `--schema`.
//! An unreachable server fails the test: nothing is skipped. SQLite uses a new file under
//! the system's temporary directory. With `PGBOUNCER_URL` (a transaction pooler), each
//! PostgreSQL test gets its own database, which the tool reaches through the pooler.
#![allow(dead_code, clippy::unwrap_used, clippy::missing_panics_doc)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use idem_runtime::clock::{Clock as _, ManualClock, SystemClock};
use idem_runtime::fingerprint::Fingerprint;
use idem_runtime::outbox::{Outbox, OutboxMessage, OutboxRow};
use idem_runtime::protocol::{Call, Record, work_fn};
use idem_runtime::spec::{Mode, OperationSpec, Scope, ScopeKind};
use idem_runtime::staged::{Finished, StepError};
use idem_runtime::store::{Delivery, Inbox, InboxStatus, KeyRef, KeyRow, KeyTable};
use idem_runtime::{Config, Idem, IdempotencyKey};
use idem_testkit::harness::{Location, TestBackend, postgres_url};
use serde_json::{Value, json};

/// Completed keys' operation, 24 hours.
pub const ORDERS: OperationSpec = OperationSpec::new("orders:v1");
/// The same operation with a one-hour ttl, for keys that expire.
const ORDERS_SHORT: OperationSpec = OperationSpec::new("orders:v1").ttl(Duration::from_secs(3600));
/// Seen in the key table, never registered.
pub const REFUNDS: OperationSpec = OperationSpec::new("refunds:v1");
/// A staged operation with a lease of an hour.
pub const PAY: OperationSpec = OperationSpec::new("pay:v1")
    .mode(Mode::Staged)
    .lease(Duration::from_secs(3600));
/// Registered, without keys.
pub const UNUSED: OperationSpec = OperationSpec::new("unused:v2").ttl(Duration::from_secs(7200));

/// The binary body of `bin-1`: not UTF-8.
pub const BINARY_BODY: &[u8] = &[0xff, 0xfe, 0x00, 0x01, 0x80];

/// A new empty database ([`TestBackend::fresh`]): the runtime's URL, the tool's
/// connection arguments (on PostgreSQL the server's URL and `--schema`), and the
/// runtime's configuration for it ([`Config::transaction_pooler`] when
/// `PGBOUNCER_URL` sends the tests through a pooler).
async fn fresh<DB: TestBackend>() -> (String, Vec<String>, Config) {
    let db = DB::fresh().await;
    let config =
        Config::default().transaction_pooler(matches!(db.location, Location::PooledDatabase(_)));
    let args = match db.location {
        Location::Schema(schema) => {
            vec![
                "--database-url".into(),
                postgres_url(),
                "--schema".into(),
                schema,
            ]
        }
        // (Through the tests' transaction pooler: the pooler's URL, no schema.)
        Location::File(_) | Location::Database(_) | Location::PooledDatabase(_) => {
            vec!["--database-url".into(), db.url.clone()]
        }
    };
    (db.url, args, config)
}

/// What one run of the tool gave.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// stdout as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// Asserts the exit code.
    #[track_caller]
    pub fn code(&self, code: i32) -> &Self {
        assert_eq!(self.code, code, "{self:#?}");
        self
    }

    /// Asserts the exit code, keeping the run.
    #[track_caller]
    pub fn exited(self, code: i32) -> Self {
        self.code(code);
        self
    }
}

/// Runs `idem` with `args` (and `stdin`), without `DATABASE_URL` nor `IDEM_STORAGE_KEYS`
/// from the environment.
pub fn idem(args: &[String], stdin: Option<&[u8]>) -> Run {
    idem_with_env(args, stdin, &[])
}

/// [`idem`] with the variables `env` set.
pub fn idem_with_env(args: &[String], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
    command
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("IDEM_STORAGE_KEYS")
        .envs(env.iter().copied())
        .env("USER", "os-user")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    let output = child.wait_with_output().unwrap();
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A seeded database and the tool pointed at it.
///
/// | key | scope | operation | state |
/// |---|---|---|---|
/// | `old-1` | global | orders:v1 | expired ten days ago |
/// | `recent-1` | global | orders:v1 | expired an hour ago |
/// | `a-1`, `a-2`, `a-3` | global | orders:v1 | completed (atomic), JSON body |
/// | `bin-1` | global | orders:v1 | completed, binary body |
/// | `t-1` | tenant:acme | refunds:v1 | completed (not registered) |
/// | `s-stuck-1..3` | tenant:acme | pay:v1 | stuck (staged, interrupted after `charge`) |
/// | `s-done` | tenant:acme | pay:v1 | completed (staged, with journal and request) |
/// | `s-running` | tenant:acme | pay:v1 | processing: an attempt holds it (lease of an hour) |
///
/// `orders:v1`, `pay:v1` and `unused:v2` (no keys) are registered.
pub struct Seeded<DB: TestBackend> {
    pub idem: Idem<DB>,
    pub args: Vec<String>,
    running: tokio::task::JoinHandle<Result<(), idem_runtime::Error>>,
    gate: Arc<tokio::sync::Notify>,
}

impl<DB: TestBackend> Seeded<DB> {
    pub async fn new() -> Self {
        let (url, args, config) = fresh::<DB>().await;
        let start = SystemClock.now_millis() - 10 * 86_400_000;
        let clock = ManualClock::new(start);
        let idem = Idem::<DB>::connect(&url, config)
            .await
            .unwrap()
            .with_clock(clock.clone());
        idem.migrate().await.unwrap();
        atomic(&idem, &ORDERS_SHORT, "global", "old-1", json_record(1)).await;
        clock.advance(Duration::from_millis(
            u64::try_from(SystemClock.now_millis() - 2 * 3_600_000 - start).unwrap(),
        ));
        atomic(&idem, &ORDERS_SHORT, "global", "recent-1", json_record(2)).await;
        clock.advance(Duration::from_secs(2 * 3600 - 60));
        for (i, k) in ["a-1", "a-2", "a-3"].into_iter().enumerate() {
            atomic(&idem, &ORDERS, "global", k, json_record(10 + i)).await;
        }
        let mut binary = Record::failure();
        binary.status = StatusCode::CREATED;
        binary.headers.insert(
            http::header::CONTENT_TYPE,
            "application/octet-stream".parse().unwrap(),
        );
        binary.body = bytes::Bytes::from_static(BINARY_BODY);
        atomic(&idem, &ORDERS, "global", "bin-1", binary).await;
        atomic(&idem, &REFUNDS, "tenant:acme", "t-1", json_record(20)).await;
        for k in ["s-stuck-1", "s-stuck-2", "s-stuck-3"] {
            assert!(
                staged(&idem, k, Then::Interrupt).await.is_err(),
                "{k} interrupted"
            );
        }
        staged(&idem, "s-done", Then::Finish).await.unwrap();
        // An attempt that holds its key (live lease) until the test ends.
        let gate = Arc::new(tokio::sync::Notify::new());
        let running = {
            let (idem, gate) = (idem.clone(), Arc::clone(&gate));
            tokio::spawn(async move { staged(&idem, "s-running", Then::Wait(gate)).await })
        };
        while idem
            .lookup(KeyRef {
                scope: "tenant:acme",
                operation: PAY.id,
                key: "s-running",
            })
            .await
            .unwrap()
            .and_then(|row| row.recovery_point)
            .is_none()
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        idem.register(&[&ORDERS, &PAY, &UNUSED]).await.unwrap();
        Self {
            idem,
            args,
            running,
            gate,
        }
    }

    /// Lets the running attempt of `s-running` go on, and returns how it ended.
    pub async fn finish_running(&mut self) -> Result<(), idem_runtime::Error> {
        self.gate.notify_one();
        (&mut self.running).await.unwrap()
    }

    /// Runs the tool on this database with `args`.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with_stdin(args, None)
    }

    /// Runs the tool on this database with `args` and `stdin`.
    pub fn run_with_stdin(&self, args: &[&str], stdin: Option<&[u8]>) -> Run {
        let mut all = self.args.clone();
        all.extend(args.iter().map(|a| (*a).to_owned()));
        idem(&all, stdin)
    }

    /// The key table, read at the real time.
    pub fn table(&self) -> KeyTable<DB> {
        self.idem.keys()
    }

    /// A key's row now, by the real clock.
    pub async fn row(&self, scope: &str, operation: &str, key: &str) -> Option<KeyRow> {
        self.table()
            .get(
                KeyRef {
                    scope,
                    operation,
                    key,
                },
                SystemClock.now_millis(),
            )
            .await
            .unwrap()
    }
}

fn json_record(n: usize) -> Record {
    Record::json(StatusCode::CREATED, &json!({"order": n})).unwrap()
}

/// Runs an atomic execution that stores `record`.
async fn atomic<DB: TestBackend>(
    idem: &Idem<DB>,
    spec: &OperationSpec,
    scope: &str,
    key: &str,
    record: Record,
) {
    let key = IdempotencyKey::new(key).unwrap();
    let call = Call {
        scope,
        key: &key,
        fingerprint: Fingerprint::of(spec.id, &json!({"key": key.as_str()}), &[]).unwrap(),
        request: None,
    };
    idem.execute(
        spec,
        call,
        work_fn::<DB, _>(move |_tx| Box::pin(async move { record })),
    )
    .await
    .unwrap();
}

/// What a staged execution does after its `charge` step.
enum Then {
    Finish,
    /// Fails retryably: the lease is released, the key is stuck at once.
    Interrupt,
    /// Waits for the gate, then finishes.
    Wait(Arc<tokio::sync::Notify>),
}

/// Runs a staged execution of `pay:v1` that records `charge`, then does `then`.
async fn staged<DB: TestBackend>(
    idem: &Idem<DB>,
    key: &str,
    then: Then,
) -> Result<(), idem_runtime::Error> {
    let k = IdempotencyKey::new(key).unwrap();
    let acme = Scope::new(ScopeKind::Tenant, Some("acme")).unwrap();
    idem.staged(
        &PAY,
        &acme,
        &k,
        &json!({"amount": 100}),
        move |attempt| async move {
            let charge: String = attempt
                .step("charge", async |provider_key| {
                    Ok(format!("ch_{provider_key}"))
                })
                .await?;
            match then {
                Then::Finish => {}
                Then::Interrupt => return Err(StepError::retryable("the network blinked")),
                Then::Wait(gate) => gate.notified().await,
            }
            let done: Finished = attempt
                .finish(async |_tx| {
                    Ok(Record::json(StatusCode::CREATED, &json!({"charge": charge})).unwrap())
                })
                .await?;
            Ok(done)
        },
    )
    .await
    .map(|_| ())
}

/// The storage key `k1`, as `IDEM_STORAGE_KEYS` holds it: 32 bytes of 1.
pub const K1: &str = "k1:AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=";
/// The storage key `k2`: 32 bytes of 2.
pub const K2: &str = "k2:AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=";
/// What a sealed key's body holds, which nothing the tool writes without the keys may show.
pub const SEALED_SECRET: &str = "4242-TOOL-SECRET";

/// A database whose keys a service wrote with the storage key [`K1`], and the tool pointed
/// at it.
///
/// | key | scope | operation | state |
/// |---|---|---|---|
/// | `clear-1` | global | orders:v1 | completed, clear (written without the keys) |
/// | `sealed-1`, `sealed-2` | global | orders:v1 | completed, sealed, a body holding [`SEALED_SECRET`] |
/// | `s-1`, `s-2` | tenant:acme | pay:v1 | stuck (staged, interrupted after `charge`), sealed |
pub struct SealedSeeded<DB: TestBackend> {
    pub idem: Idem<DB>,
    pub args: Vec<String>,
}

impl<DB: TestBackend> SealedSeeded<DB> {
    pub async fn new() -> Self {
        let (url, args, config) = fresh::<DB>().await;
        let clear = Idem::<DB>::connect(&url, config.clone()).await.unwrap();
        clear.migrate().await.unwrap();
        atomic(&clear, &ORDERS, "global", "clear-1", json_record(1)).await;
        let keys = idem_runtime::store::Keyring::parse(K1).unwrap();
        let idem = Idem::<DB>::connect(&url, config.storage_keys(keys))
            .await
            .unwrap();
        for (n, k) in ["sealed-1", "sealed-2"].into_iter().enumerate() {
            let body = json!({"card": SEALED_SECRET, "n": n});
            let record = Record::json(StatusCode::CREATED, &body).unwrap();
            atomic(&idem, &ORDERS, "global", k, record).await;
        }
        for k in ["s-1", "s-2"] {
            assert!(staged(&idem, k, Then::Interrupt).await.is_err(), "{k}");
        }
        Self { idem, args }
    }

    /// Runs the tool on this database with `args`.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, None, &[])
    }

    /// Runs the tool on this database with `args`, `stdin` and the variables `env`.
    pub fn run_with(&self, args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Run {
        let mut all = self.args.clone();
        all.extend(args.iter().map(|a| (*a).to_owned()));
        idem_with_env(&all, stdin, env)
    }
}

/// A migrated database whose outbox holds a message in each state, and the tool pointed at
/// it. Times are the real clock's, as the tool's.
///
/// | dedup id | topic | state |
/// |---|---|---|
/// | `dead-1`, `dead-2` | `order.paid` | dead after one attempt, last error `HTTP 503: …` |
/// | `backoff-1` | `order.paid` | pending, one failed attempt, next attempt in an hour |
/// | `in-flight-1` | `order.paid` | pending, claimed by a dispatcher (leased for an hour) |
/// | `due-1` | `order.paid` | pending, one failed attempt, due |
/// | `delivered-1` | `order.shipped` | delivered |
/// | `777` | `order.shipped` | delivered (a dedup id that reads as a number) |
pub struct OutboxSeeded<DB: TestBackend> {
    pub idem: Idem<DB>,
    pub args: Vec<String>,
    /// Each message's row id, by dedup id.
    pub ids: BTreeMap<&'static str, i64>,
}

/// The messages of [`OutboxSeeded`], in the order they are enqueued.
pub const MESSAGES: [&str; 7] = [
    "dead-1",
    "dead-2",
    "backoff-1",
    "in-flight-1",
    "due-1",
    "delivered-1",
    "777",
];

impl<DB: TestBackend> OutboxSeeded<DB> {
    pub async fn new() -> Self {
        let (url, args, config) = fresh::<DB>().await;
        let idem = Idem::<DB>::connect(&url, config).await.unwrap();
        idem.migrate().await.unwrap();
        let mut tx = idem.pool().begin().await.unwrap();
        for dedup_id in MESSAGES {
            let topic = if dedup_id == "777" || dedup_id.starts_with("delivered") {
                "order.shipped"
            } else {
                "order.paid"
            };
            let message =
                OutboxMessage::new(dedup_id, topic, json!({"order": dedup_id, "total": 1990}));
            assert!(idem.enqueue(&mut tx, &message).await.unwrap());
        }
        tx.commit().await.unwrap();
        let outbox = idem.outbox();
        let now = SystemClock.now_millis();
        let hour = 3_600_000;
        let claimed = outbox.claim(now, 100, hour).await.unwrap();
        let ids: BTreeMap<&'static str, i64> = MESSAGES
            .into_iter()
            .map(|dedup_id| {
                let claimed = claimed.iter().find(|m| m.dedup_id == dedup_id).unwrap();
                (dedup_id, claimed.id)
            })
            .collect();
        for dedup_id in ["dead-1", "dead-2"] {
            let error = "HTTP 503: the receiver is down for maintenance";
            assert!(
                outbox
                    .mark_failed(ids[dedup_id], now, error, now, true)
                    .await
                    .unwrap()
            );
        }
        assert!(
            outbox
                .mark_failed(ids["backoff-1"], now, "HTTP 429", now + hour, false)
                .await
                .unwrap()
        );
        assert!(
            outbox
                .mark_failed(ids["due-1"], now, "timed out", now, false)
                .await
                .unwrap()
        );
        for dedup_id in ["delivered-1", "777"] {
            assert!(outbox.mark_delivered(ids[dedup_id], now).await.unwrap());
        }
        Self { idem, args, ids }
    }

    /// Runs the tool on this database with `args`.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut all = self.args.clone();
        all.extend(args.iter().map(|a| (*a).to_owned()));
        idem(&all, None)
    }

    /// The outbox.
    pub fn outbox(&self) -> Outbox<DB> {
        self.idem.outbox()
    }

    /// A message now.
    pub async fn message(&self, dedup_id: &str) -> OutboxRow {
        self.outbox().get(dedup_id).await.unwrap().unwrap()
    }

    /// The key table, for its audit trail.
    pub fn table(&self) -> KeyTable<DB> {
        self.idem.keys()
    }
}

/// A migrated database whose inbox holds events in both states, noted at times in the past
/// (the real clock's, as the tool's), and the tool pointed at it.
///
/// | event id | source | state | noted |
/// |---|---|---|---|
/// | `evt_old` | `provider_event:v1` | unmatched, body not JSON | once, 26 hours ago |
/// | `evt_orphan` | `provider_event:v1` | unmatched | waiting 2 h and 90 min ago, unmatched 62 min ago |
/// | `evt_orphan` | `ledger_event:v1` | waiting | once, 30 minutes ago |
/// | `evt_early` | `provider_event:v1` | waiting | once, 5 minutes ago |
pub struct InboxSeeded<DB: TestBackend> {
    pub idem: Idem<DB>,
    pub args: Vec<String>,
    /// When the events were noted from: `evt_orphan`'s first delivery is `now - 2 h`.
    pub now: i64,
}

/// `evt_orphan`'s body, as received.
pub const ORPHAN_BODY: &str =
    r#"{"type":"charge.succeeded","data":{"charge":"ch_1","amount":1250}}"#;

impl<DB: TestBackend> InboxSeeded<DB> {
    pub async fn new() -> Self {
        let (url, args, config) = fresh::<DB>().await;
        let idem = Idem::<DB>::connect(&url, config).await.unwrap();
        idem.migrate().await.unwrap();
        let now = SystemClock.now_millis();
        let (min, hour) = (60_000, 3_600_000);
        let provider = |event_id, reason, body| Delivery {
            source: "provider_event:v1",
            event_id,
            reason,
            body,
        };
        let orphan = provider(
            "evt_orphan",
            "no payment names the charge ch_1",
            ORPHAN_BODY,
        );
        let notes = [
            (
                provider(
                    "evt_old",
                    "no payment names the charge ch_9",
                    "charge=ch_9; amount=500",
                ),
                InboxStatus::Unmatched,
                now - 26 * hour,
            ),
            (orphan, InboxStatus::Waiting, now - 2 * hour),
            (orphan, InboxStatus::Waiting, now - 90 * min),
            (orphan, InboxStatus::Unmatched, now - 62 * min),
            (
                Delivery {
                    source: "ledger_event:v1",
                    reason: "no ledger entry for the charge ch_1",
                    ..orphan
                },
                InboxStatus::Waiting,
                now - 30 * min,
            ),
            (
                provider(
                    "evt_early",
                    "no payment names the charge ch_2",
                    r#"{"type":"charge.succeeded","data":{"charge":"ch_2"}}"#,
                ),
                InboxStatus::Waiting,
                now - 5 * min,
            ),
        ];
        let mut conn = idem.pool().acquire().await.unwrap();
        for (delivery, status, at) in notes {
            Inbox::<DB>::note(&mut conn, delivery, status, at, None)
                .await
                .unwrap();
        }
        drop(conn);
        Self { idem, args, now }
    }

    /// Runs the tool on this database with `args`.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut all = self.args.clone();
        all.extend(args.iter().map(|a| (*a).to_owned()));
        idem(&all, None)
    }

    /// The inbox.
    pub fn inbox(&self) -> Inbox<DB> {
        self.idem.inbox()
    }
}
