//! The real `idem` binary in a pseudo-terminal, on a real SQLite file: search by key prefix,
//! open a key, expire it with a reason, try to delete another that an operator changes while
//! the dialog is open (refused), quit; then the database and the audit trail tell what
//! happened. Likewise in the outbox view: retry a dead message with a reason; and in the
//! inbox view: an unmatched event's reason and body, read-only.
//!
//! The same on PostgreSQL, in a schema of its own (`idem_test_<uuid>`, named by the URL's
//! `options=-c search_path=…`): PostgreSQL comes from `DATABASE_URL` (default: the
//! harness's); an unreachable server fails the test. Both
//! databases come from idem-testkit's harness.
//!
//! The binary gets the database from `DATABASE_URL` and the operator from `USER`, which both
//! the minimal main and the command line's read.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::io::{Read, Write};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_store::sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use idem_store::sqlx::{Postgres, Sqlite};
use idem_store::{
    Action, Actor, AuditFilter, Backend, Delivery, Inbox, InboxStatus, KeyRef, KeyStatus, KeyTable,
    NewRow, Outbox, OutboxMessage, OutboxStatus, StoredResponse, enqueue,
};
use idem_testkit::harness::{Location, TestBackend as _, settings};
use portable_pty::{CommandBuilder, PtySize, native_pty_system};

const OPERATION: &str = "create_order:v1";
const OPERATOR: &str = "e2e-operator";

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// A new SQLite file with the key table and three completed keys.
async fn seeded_sqlite() -> (PathBuf, KeyTable<Sqlite>) {
    seeded_sqlite_with(&["order-1", "order-2", "other-1"]).await
}

/// A new SQLite file with the key table and a completed key of each of `keys`.
async fn seeded_sqlite_with(keys: &[&str]) -> (PathBuf, KeyTable<Sqlite>) {
    let db = Sqlite::fresh().await;
    let Location::File(path) = db.location else {
        panic!("an SQLite database is a file: {db:?}")
    };
    let options = SqliteConnectOptions::from_str(&db.url)
        .unwrap()
        .create_if_missing(true);
    let pool = SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap();
    let table = KeyTable::new(pool);
    table.migrate().await.unwrap();
    seed(&table, keys).await;
    (path, table)
}

/// A new schema `idem_test_<uuid>` on the PostgreSQL of `DATABASE_URL` (default: the
/// harness's) with the key table and three completed keys,
/// and a URL whose sessions resolve names in it.
async fn seeded_postgres() -> (String, KeyTable<Postgres>) {
    let url = Postgres::fresh_url().await;
    // (The store's own connect: through a transaction pooler too, `PGBOUNCER_URL`.)
    let pool = idem_runtime::store::connect::connect::<Postgres>(&url, 2, &settings())
        .await
        .unwrap();
    let table = KeyTable::new(pool);
    table.migrate().await.unwrap();
    seed(&table, &["order-1", "order-2", "other-1"]).await;
    (url, table)
}

/// Completed keys of [`OPERATION`], stored as the runtime stores them.
async fn seed<DB: Backend>(table: &KeyTable<DB>, keys: &[&str]) {
    seed_in(table, "global", keys, now_ms() + 86_400_000).await;
}

/// Completed keys of [`OPERATION`] in `scope` that expire at `expires_ms`.
async fn seed_in<DB: Backend>(table: &KeyTable<DB>, scope: &str, keys: &[&str], expires_ms: i64) {
    let now = now_ms();
    let settings = settings();
    let headers = StoredResponse::encode_headers([("content-type", "application/json")]);
    for &key in keys {
        let mut conn = table.pool().acquire().await.unwrap();
        let tx = DB::begin(&mut conn, &settings, None)
            .await
            .unwrap()
            .free()
            .unwrap();
        let row = NewRow {
            field_digests: None,
            key: KeyRef {
                scope,
                operation: OPERATION,
                key,
            },
            fingerprint: &[7; 32],
            status: 201,
            headers_json: &headers,
            body: br#"{"id":1,"state":"created"}"#,
            created_ms: now - 60_000,
            completed_ms: now - 59_000,
            expires_ms,
            replace_expired: false,
        };
        assert!(
            idem_runtime::store::protocol::insert_completed_and_commit::<DB>(tx, row, None)
                .await
                .unwrap()
        );
    }
}

/// The binary in a pseudo-terminal of 80×24, its screen parsed as it draws.
struct Tui {
    screen: Arc<Mutex<vt100::Parser>>,
    master: Box<dyn portable_pty::MasterPty + Send>,
    writer: Box<dyn Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
}

impl Tui {
    fn start(database_url: &str) -> Self {
        let pty = native_pty_system()
            .openpty(PtySize {
                rows: 24,
                cols: 80,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_idem"));
        command.env("DATABASE_URL", database_url);
        command.env("USER", OPERATOR);
        command.env("TERM", "xterm-256color");
        command.env("TZ", "UTC");
        let child = pty.slave.spawn_command(command).unwrap();
        drop(pty.slave);
        let screen = Arc::new(Mutex::new(vt100::Parser::new(24, 80, 0)));
        let mut reader = pty.master.try_clone_reader().unwrap();
        let parser = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                parser.lock().unwrap().process(&buf[..n]);
            }
        });
        let writer = pty.master.take_writer().unwrap();
        Self {
            screen,
            master: pty.master,
            writer,
            child,
        }
    }

    fn contents(&self) -> String {
        self.screen.lock().unwrap().screen().contents()
    }

    /// Waits until the screen satisfies `ready`; panics with the screen after 15 s.
    fn wait_for(&mut self, what: &str, ready: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let screen = self.contents();
            if ready(&screen) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("idem exited ({status:?}) waiting for {what}; screen:\n{screen}");
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_text(&mut self, text: &str) {
        self.wait_for(text, |screen| screen.contains(text));
    }

    /// Scrolls down a line at a time until `text` is on the screen. One line at a time: the
    /// detail scrolls until its last line is at the top, so a fixed number of lines can
    /// scroll past what it looks for once everything has loaded.
    fn scroll_to(&mut self, text: &str) {
        for _ in 0..60 {
            if self.contents().contains(text) {
                return;
            }
            self.send("j");
            std::thread::sleep(Duration::from_millis(100));
        }
        self.wait_text(text);
    }

    /// Resizes the terminal (the binary gets a `SIGWINCH`).
    fn resize(&mut self, rows: u16, cols: u16) {
        self.screen
            .lock()
            .unwrap()
            .screen_mut()
            .set_size(rows, cols);
        self.master
            .resize(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
    }

    fn send(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).unwrap();
        self.writer.flush().unwrap();
    }

    /// Waits for the process to end; panics after 10 s.
    fn wait_exit(&mut self) -> portable_pty::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("idem did not quit; screen:\n{}", self.contents());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Search, open, expire with a reason, quit: then the key is expired and audited.
async fn expire_through_the_ui<DB: Backend>(database_url: &str, table: &KeyTable<DB>) {
    let mut tui = Tui::start(database_url);
    tui.wait_text("other-1");
    tui.wait_text("3 keys");

    // A resize redraws at the new size.
    tui.resize(30, 120);
    tui.wait_for("a redraw at 120 columns", |s| {
        s.lines()
            .any(|l| l.starts_with('└') && l.chars().count() == 120)
    });
    tui.resize(24, 80);
    tui.wait_for("a redraw at 80 columns", |s| {
        s.lines()
            .any(|l| l.starts_with('└') && l.chars().count() == 80)
    });

    // `/` + prefix: only the order- keys.
    tui.send("/order-");
    tui.wait_text("key prefix: order-");
    tui.send("\r");
    tui.wait_for("the filtered listing", |s| {
        s.contains("key=order-*") && s.contains("order-2") && !s.contains("other-1")
    });

    // Enter: the detail of the first, order-1.
    tui.send("\r");
    tui.wait_text("recovery point");
    tui.wait_text("global create_order:v1 order-1");

    // `e`, a reason, Enter to the buttons, `y`.
    tui.send("e");
    tui.wait_text("expire this key?");
    tui.send("INC-9 retried by hand");
    tui.wait_text("reason: INC-9 retried by hand");
    tui.send("\r");
    tui.wait_text("n  cancel");
    tui.send("y");
    tui.wait_text("expire: global create_order:v1 order-1 done");
    // The refreshed detail shows the key expired and, scrolled down, its audit entry.
    tui.wait_text("status         expired");
    tui.scroll_to("reason: INC-9 retried by hand");
    tui.wait_text(&format!("expire by {OPERATOR}"));

    // Back to the list, order-2, `d`: while the dialog is open another operator expires
    // the key; `y` is refused, nothing deleted.
    tui.send("\r");
    tui.wait_text("keys loaded");
    tui.send("j");
    tui.send("d");
    tui.wait_text("delete this key?");
    tui.wait_text("key: global create_order:v1 order-2");
    tui.send("cleanup");
    tui.send("\r");
    tui.wait_text("n  cancel");
    let order_2 = KeyRef {
        scope: "global",
        operation: OPERATION,
        key: "order-2",
    };
    let shown = table.get(order_2, now_ms()).await.unwrap().unwrap();
    table
        .act(
            order_2,
            &shown,
            &Action::Expire,
            &Actor::new("someone-else").reason("raced"),
            now_ms(),
        )
        .await
        .unwrap();
    tui.send("y");
    tui.wait_text("delete refused: global create_order:v1 order-2 changed since it");

    tui.send("q");
    let status = tui.wait_exit();
    assert!(status.success(), "{status:?}");

    let key = KeyRef {
        scope: "global",
        operation: OPERATION,
        key: "order-1",
    };
    let row = table.get(key, now_ms()).await.unwrap().unwrap();
    assert_eq!(row.status, KeyStatus::Expired);
    assert_eq!(
        table.get(order_2, now_ms()).await.unwrap().unwrap().status,
        KeyStatus::Expired,
        "expired by the other operator, not deleted"
    );
    let audit_2 = table.audit(&AuditFilter::new().key(order_2)).await.unwrap();
    assert_eq!(audit_2.len(), 1, "{audit_2:?}");
    assert_eq!(audit_2[0].operator, "someone-else");
    let other = KeyRef {
        key: "other-1",
        ..key
    };
    assert_eq!(
        table.get(other, now_ms()).await.unwrap().unwrap().status,
        KeyStatus::Completed
    );
    let audit = table.audit(&AuditFilter::new().key(key)).await.unwrap();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].action, "expire");
    assert_eq!(audit[0].operator, OPERATOR);
    assert_eq!(audit[0].reason.as_deref(), Some("INC-9 retried by hand"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_a_key_on_sqlite() {
    let (path, table) = seeded_sqlite().await;
    let url = format!("sqlite://{}", path.display());
    expire_through_the_ui(&url, &table).await;
    table.pool().close().await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expire_a_key_on_postgres() {
    let (url, table) = seeded_postgres().await;
    expire_through_the_ui(&url, &table).await;
    table.pool().close().await;
}

/// `ms` as the tool writes times: RFC 3339 UTC with milliseconds.
fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .unwrap()
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

/// At 80×24: a scope that fits shows whole beside the keys of `global`; then a key that
/// expires while its expire dialog is open is refused, and the refusal gives the time it
/// expired at, not milliseconds since the Unix epoch.
async fn scopes_whole_and_times_as_times<DB: Backend>(database_url: &str, table: &KeyTable<DB>) {
    let soon = now_ms() + 6_000;
    seed_in(table, "tenant:globex", &["order-9"], now_ms() + 86_400_000).await;
    seed_in(table, "tenant:globex", &["soon-1"], soon).await;
    let mut tui = Tui::start(database_url);
    tui.wait_text("5 keys loaded");
    let screen = tui.contents();
    let line = |key: &str| {
        screen
            .lines()
            .find(|l| l.contains(key))
            .unwrap_or_else(|| panic!("{key} in\n{screen}"))
            .to_owned()
    };
    for key in ["order-9", "soon-1"] {
        let words: Vec<String> = line(key).split_whitespace().map(str::to_owned).collect();
        assert_eq!(words[1..4], ["tenant:globex", OPERATION, key], "{screen}");
    }

    // The last key, soon-1: `e`, a reason, and `y` once its TTL has run out.
    tui.send("G");
    tui.send("e");
    tui.wait_text("expire this key?");
    tui.wait_text("key: tenant:globex create_order:v1 soon-1");
    tui.send("INC-3");
    tui.send("\r");
    tui.wait_text("n  cancel");
    while now_ms() <= soon + 200 {
        std::thread::sleep(Duration::from_millis(100));
    }
    tui.send("y");
    let at = format!("{})", rfc3339(soon));
    tui.wait_text(&at);
    let screen = tui.contents();
    assert!(
        screen.contains("not applicable: expire: the key"),
        "{screen}"
    );
    assert!(!screen.contains(&soon.to_string()), "{screen}");
    tui.send("q");
    assert!(tui.wait_exit().success());
    let key = KeyRef {
        scope: "tenant:globex",
        operation: OPERATION,
        key: "soon-1",
    };
    assert!(
        table
            .audit(&AuditFilter::new().key(key))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_and_times_on_sqlite() {
    let (path, table) = seeded_sqlite().await;
    let url = format!("sqlite://{}", path.display());
    scopes_whole_and_times_as_times(&url, &table).await;
    table.pool().close().await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_and_times_on_postgres() {
    let (url, table) = seeded_postgres().await;
    scopes_whole_and_times_as_times(&url, &table).await;
    table.pool().close().await;
}

/// A dead message (`order-7/paid`, given up on after an `HTTP 503`) and a delivered one
/// (`order-8/paid`) in the outbox beside the key table; the dead one's row id.
async fn seed_outbox<DB: Backend>(table: &KeyTable<DB>) -> i64 {
    let outbox = Outbox::new(table.pool().clone());
    let now = now_ms();
    let mut tx = table.pool().begin().await.unwrap();
    for id in ["order-7/paid", "order-8/paid"] {
        let message = OutboxMessage::new(id, "order.paid", serde_json::json!({"order": id}));
        assert!(
            enqueue(&mut tx, &message, now - 60_000, None)
                .await
                .unwrap()
        );
    }
    tx.commit().await.unwrap();
    let claimed = outbox.claim(now, 10, 60_000).await.unwrap();
    let (dead, delivered) = (claimed[0].id, claimed[1].id);
    let error = "HTTP 503 Service Unavailable";
    assert!(
        outbox
            .mark_failed(dead, now, error, now, true)
            .await
            .unwrap()
    );
    assert!(outbox.mark_delivered(delivered, now).await.unwrap());
    dead
}

/// Tab to the outbox, retry the dead message with a reason, open it, quit: then it is
/// pending again, due, its attempts reset, and the retry is audited.
async fn retry_through_the_ui<DB: Backend>(database_url: &str, table: &KeyTable<DB>) {
    let dead = seed_outbox(table).await;
    let mut tui = Tui::start(database_url);
    tui.wait_text("3 keys");
    tui.wait_text(" 1 dead");
    tui.send("\t\t");
    tui.wait_text("2 messages (oldest first");
    tui.wait_text("order-7/paid");
    // `r` on the delivered one is refused at once; on the dead one it asks.
    tui.send("j");
    tui.send("r");
    tui.wait_text("it is delivered");
    tui.send("k");
    tui.send("r");
    tui.wait_text("retry this message?");
    tui.wait_text("status: dead → pending, due now");
    tui.send("INC-51 receiver back");
    tui.wait_text("reason: INC-51 receiver back");
    tui.send("\r");
    tui.wait_text("n  cancel");
    tui.send("y");
    tui.wait_text("is pending again, due now (audited)");
    // Its detail, scrolled down to its audit history.
    tui.send("\r");
    tui.wait_text(&format!("message #{dead} order-7/paid"));
    tui.scroll_to(&format!("outbox-retry by {OPERATOR}"));
    tui.send("q");
    assert!(tui.wait_exit().success());

    let outbox = Outbox::new(table.pool().clone());
    let row = outbox.find(dead).await.unwrap().unwrap();
    assert_eq!((row.status, row.attempts), (OutboxStatus::Pending, 0));
    let audit = table
        .audit(&AuditFilter::new().key(row.audit_key()))
        .await
        .unwrap();
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].action, "outbox-retry");
    assert_eq!(audit[0].operator, OPERATOR);
    assert_eq!(audit[0].reason.as_deref(), Some("INC-51 receiver back"));
    assert_eq!(
        outbox.get("order-8/paid").await.unwrap().unwrap().status,
        OutboxStatus::Delivered
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_a_message_on_sqlite() {
    let (path, table) = seeded_sqlite().await;
    let url = format!("sqlite://{}", path.display());
    retry_through_the_ui(&url, &table).await;
    table.pool().close().await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_a_message_on_postgres() {
    let (url, table) = seeded_postgres().await;
    retry_through_the_ui(&url, &table).await;
    table.pool().close().await;
}

/// An event kept as unmatched after two deliveries, noted first two hours ago
/// (`evt_orphan`), and one waiting (`evt_early`), in the inbox beside the key table.
async fn seed_inbox<DB: Backend>(table: &KeyTable<DB>) {
    let now = now_ms();
    let delivery = |event_id, body| Delivery {
        source: "provider_event:v1",
        event_id,
        reason: "no payment names the charge",
        body,
    };
    let orphan = delivery("evt_orphan", r#"{"data":{"charge":"ch_1"}}"#);
    let mut conn = table.pool().acquire().await.unwrap();
    for (delivery, status, at) in [
        (orphan, InboxStatus::Waiting, now - 7_200_000),
        (orphan, InboxStatus::Unmatched, now - 3_600_000),
        (
            delivery("evt_early", r#"{"data":{"charge":"ch_2"}}"#),
            InboxStatus::Waiting,
            now - 60_000,
        ),
    ] {
        Inbox::<DB>::note(&mut conn, delivery, status, at, None)
            .await
            .unwrap();
    }
}

/// Tab to the inbox, open the unmatched event down to its body, try an action (the inbox
/// is read-only), filter the waiting ones, quit: the inbox is as it was.
async fn inbox_through_the_ui<DB: Backend>(database_url: &str, table: &KeyTable<DB>) {
    seed_inbox(table).await;
    let inbox = Inbox::new(table.pool().clone());
    let before = inbox.list(None, 10).await.unwrap();
    let mut tui = Tui::start(database_url);
    tui.wait_text("3 keys");
    tui.send("\t\t\t");
    tui.wait_text("2 events (the longest noted first");
    tui.wait_text("listed: unmatched 1  waiting 1");
    tui.wait_text("evt_orphan");
    tui.send("\r");
    tui.wait_text("event evt_orphan — Esc back");
    tui.wait_text("deliveries     2");
    tui.scroll_to("\"charge\": \"ch_1\"");
    tui.send("d");
    tui.wait_text("the inbox is read-only");
    tui.send("\x1b");
    tui.wait_text("2 events (the longest noted first");
    tui.send("s");
    tui.wait_text("1 waiting event ");
    tui.wait_text("evt_early");
    tui.send("q");
    assert!(tui.wait_exit().success());
    assert_eq!(inbox.list(None, 10).await.unwrap(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_on_sqlite() {
    let (path, table) = seeded_sqlite().await;
    let url = format!("sqlite://{}", path.display());
    inbox_through_the_ui(&url, &table).await;
    table.pool().close().await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_on_postgres() {
    let (url, table) = seeded_postgres().await;
    inbox_through_the_ui(&url, &table).await;
    table.pool().close().await;
}

/// 120 keys: the listing reads 50, then the next 50 as the selection reaches the end, and so
/// on; never the whole table at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_load_as_the_selection_moves_down() {
    let keys: Vec<String> = (0..120).map(|i| format!("key-{i:03}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let (path, table) = seeded_sqlite_with(&keys).await;
    let mut tui = Tui::start(&format!("sqlite://{}", path.display()));
    tui.wait_text("120 keys");
    tui.wait_text("50 keys loaded, more below");
    assert!(!tui.contents().contains("key-050"));
    tui.send("G");
    tui.wait_text("100 keys loaded, more below");
    tui.send("G");
    tui.wait_text("120 keys loaded ");
    tui.send("G");
    tui.wait_text("key-119");
    tui.send("q");
    assert!(tui.wait_exit().success());
    table.pool().close().await;
    let _ = std::fs::remove_file(&path);
}
