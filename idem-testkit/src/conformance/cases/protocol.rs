//! The protocol's primitives on [`idem_store::Backend`]: lookup, `begin` with the key's lock,
//! inserting the completed row, replacing an expired one, savepoints.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use idem_store::sqlx::{self, Pool};
use idem_store::staged::Reservation;
use idem_store::{
    Backend, Begun, Failure, KeyLock, KeyRef, NewRow, Outbox, OutboxMessage, StoredResponse,
    StoredStatus, TxSettings, enqueue,
};

use crate::conformance::sql::ConformanceSql;
use crate::conformance::support::{
    HEADERS, Must as _, RESERVATION, connect, fresh, key, put, settings,
};
use crate::harness::{HOUR, NOW};

/// A completed row of `key`, created at `created_ms`.
fn new_row<'a>(
    key: KeyRef<'a>,
    fingerprint: &'a [u8],
    headers_json: &'a str,
    body: &'a [u8],
    created_ms: i64,
    expires_ms: i64,
) -> NewRow<'a> {
    NewRow {
        field_digests: None,
        key,
        fingerprint,
        status: 200,
        headers_json,
        body,
        created_ms,
        completed_ms: created_ms + 1,
        expires_ms,
        replace_expired: false,
    }
}

fn lock<'a>(namespace: &'a str, key: KeyRef<'a>, expired_by_ms: Option<i64>) -> KeyLock<'a> {
    KeyLock {
        namespace,
        key,
        expired_by_ms,
    }
}

/// `Ok(true)` when [`Backend::begin`] found the key taken, in either of the forms the
/// contract allows ([`Begun::Taken`], or an error [`Backend::classify`] calls
/// [`Failure::Taken`], after which the connection is repaired with
/// [`Backend::abandon_begin`]); `Ok(false)` when it was free (the transaction is rolled
/// back); the error otherwise.
async fn begin_finds_taken<DB: Backend>(
    conn: &mut DB::Connection,
    settings: &TxSettings,
    lock: KeyLock<'_>,
) -> Result<bool, sqlx::Error> {
    let outcome = begun_taken(DB::begin(conn, settings, Some(lock)).await).await;
    repaired::<DB>(conn, outcome).await
}

/// What [`Backend::begin`] with a lock answered, as [`begin_finds_taken`] reads it:
/// `Ok(true)` for [`Begun::Taken`], `Ok(false)` for a transaction (rolled back), the error
/// as it is.
async fn begun_taken<DB: Backend>(
    begun: Result<Begun<'_, DB>, sqlx::Error>,
) -> Result<bool, sqlx::Error> {
    match begun {
        Ok(Begun::Taken) => Ok(true),
        Ok(Begun::Free(tx)) => tx.rollback().await.map(|()| false),
        Err(error) => Err(error),
    }
}

/// `outcome` of [`begun_taken`], with an error [`Backend::classify`] calls [`Failure::Taken`] as
/// `Ok(true)`, `conn` repaired with [`Backend::abandon_begin`].
async fn repaired<DB: Backend>(
    conn: &mut DB::Connection,
    outcome: Result<bool, sqlx::Error>,
) -> Result<bool, sqlx::Error> {
    match outcome {
        Err(error) if DB::classify(&error) == Failure::Taken => {
            DB::abandon_begin(conn).await;
            Ok(true)
        }
        other => other,
    }
}

/// The message a case enqueues as "the application's write" in a transaction: whether it
/// exists afterwards tells whether the transaction's writes committed.
fn write(id: &str) -> OutboxMessage {
    OutboxMessage::new(id, "conformance.write", serde_json::json!({ "id": id }))
}

async fn committed<DB: Backend>(pool: &Pool<DB>, id: &str) -> bool {
    Outbox::new(pool.clone())
        .get(id)
        .await
        .must("Outbox::get")
        .is_some()
}

/// [`lookup`](idem_store::protocol::lookup) finds nothing for an absent key, the completed row of a present one
/// (every column the protocol reads), an expired row as it is (its expiry in the past: the
/// caller judges), a staged key as processing, and nothing for a key that differs in scope or
/// operation only.
pub async fn lookup_absent_present_expired<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let k = key("k-1");
    assert!(
        idem_store::protocol::lookup::<DB>(&mut conn, k, None)
            .await
            .must("lookup")
            .is_none(),
        "lookup of an absent key"
    );

    assert!(put(pool, k, NOW - HOUR, NOW + HOUR, b"{\"id\":1}").await);
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup")
        .must("lookup of a stored key");
    assert_eq!(stored.status, StoredStatus::Completed, "status");
    assert_eq!(stored.fingerprint, [7; 32], "fingerprint");
    assert_eq!(stored.expires_at_ms, NOW + HOUR, "expires_at");
    assert_eq!(
        stored.locked_until_ms, None,
        "locked_until of an atomic row"
    );
    assert_eq!(stored.fence.attempt, 0, "attempt of an atomic row");
    let response = stored.response.must("the stored response");
    assert_eq!(response.status, 201, "response status");
    assert_eq!(response.body.as_ref(), b"{\"id\":1}", "response body");
    let headers: Vec<(String, String)> = HEADERS
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    assert_eq!(response.headers, headers, "response headers");

    for other in [
        KeyRef {
            scope: "tenant:t1",
            ..k
        },
        KeyRef {
            operation: "op:v2",
            ..k
        },
        key("k-10"),
        key("k-"),
    ] {
        assert!(
            idem_store::protocol::lookup::<DB>(&mut conn, other, None)
                .await
                .must("lookup")
                .is_none(),
            "lookup of {other:?} found the row of {k:?}"
        );
    }

    let old = key("k-old");
    assert!(put(pool, old, NOW - 2 * HOUR, NOW - HOUR, b"old").await);
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, old, None)
        .await
        .must("lookup")
        .must("lookup of an expired key");
    assert_eq!(
        stored.status,
        StoredStatus::Completed,
        "status of an expired row"
    );
    assert_eq!(
        stored.expires_at_ms,
        NOW - HOUR,
        "expires_at of an expired row"
    );
    assert_eq!(
        stored.response.map(|r| r.body),
        Some(bytes::Bytes::from_static(b"old")),
        "an expired row keeps its response"
    );

    let staged = key("k-staged");
    let reserved = idem_store::staged::reserve::<DB>(
        &mut conn,
        Reservation {
            key: staged,
            fingerprint: &[3; 32],
            request: "{}",
            created_ms: NOW,
            expires_ms: NOW + HOUR,
            locked_until_ms: NOW + 30_000,
            replace_expired: false,
            id: RESERVATION,
            field_digests: None,
        },
        None,
    )
    .await
    .must("reserve");
    assert!(reserved, "reserving a free key");
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, staged, None)
        .await
        .must("lookup")
        .must("lookup of a reserved key");
    assert_eq!(
        stored.status,
        StoredStatus::Processing,
        "status of a reserved key"
    );
    assert_eq!(stored.response, None, "response of a reserved key");
    assert_eq!(stored.locked_until_ms, Some(NOW + 30_000), "lease");
    assert_eq!(stored.fence.attempt, 1, "attempt of a reserved key");
    assert_eq!(stored.fingerprint, [3; 32], "fingerprint of a reserved key");
}

/// Responses come back byte for byte, through [`insert_completed_and_commit`](idem_store::protocol::insert_completed_and_commit) and
/// [`insert_completed`](idem_store::protocol::insert_completed) alike, read by [`lookup`](idem_store::protocol::lookup) and
/// [`idem_store::KeyTable::get`]: empty and binary bodies (NUL, invalid UTF-8, every byte value),
/// bodies with quotes, backslashes and SQL, a large body, headers in order with a repeated
/// name and text beyond ASCII, no headers at all; keys, scopes and operations with quotes and
/// text beyond ASCII.
pub async fn responses_round_trip_byte_exact<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let every_byte: Vec<u8> = (0..=255).collect();
    let large: Vec<u8> = (0..1_048_576_u32)
        .map(|i| u8::try_from(i.wrapping_mul(2_654_435_761) >> 24).unwrap_or(0))
        .collect();
    let bodies: [(&str, &[u8]); 7] = [
        ("empty", b""),
        ("nul", b"\x00"),
        ("invalid utf-8", b"\xff\xfe\x00\xc3("),
        ("every byte", &every_byte),
        (
            "sql",
            b"'); COMMIT; DROP TABLE idempotency_keys; -- \\x00 E'\\\\'",
        ),
        ("text", "{\"name\":\"Zoë 😀\"}".as_bytes()),
        ("1 MiB", &large),
    ];
    let headers = [
        vec![],
        HEADERS
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect::<Vec<_>>(),
        vec![
            ("x-empty".to_owned(), String::new()),
            ("x-text".to_owned(), "naïve – ☃ \\ ' \" ; --".to_owned()),
        ],
    ];
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let mut n = 0;
    for (what, body) in bodies {
        for headers in &headers {
            for commit_with_insert in [true, false] {
                n += 1;
                let name = format!("k-{n}-'ключ'\\");
                let k = KeyRef {
                    scope: "tenant:o'brien",
                    operation: "créer:v1",
                    key: &name,
                };
                let headers_json = StoredResponse::encode_headers(
                    headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
                );
                let fingerprint: Vec<u8> = (0..32).map(|i| i ^ 0xa5).collect();
                let row = new_row(k, &fingerprint, &headers_json, body, NOW, NOW + HOUR);
                let mut tx = DB::begin(&mut conn, &settings(), None)
                    .await
                    .must("begin")
                    .free()
                    .must("begin without a lock");
                let stored = if commit_with_insert {
                    idem_store::protocol::insert_completed_and_commit::<DB>(tx, row, None)
                        .await
                        .must("insert_completed_and_commit")
                } else {
                    let stored = idem_store::protocol::insert_completed::<DB>(&mut tx, row, None)
                        .await
                        .must("insert_completed");
                    tx.commit().await.must("commit");
                    stored
                };
                let how = if commit_with_insert {
                    "insert_completed_and_commit"
                } else {
                    "insert_completed"
                };
                assert!(stored, "{how}: body {what}, a new key");
                let expected = StoredResponse {
                    status: 200,
                    headers: headers.clone(),
                    body: bytes::Bytes::copy_from_slice(body),
                };
                let looked_up = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
                    .await
                    .must("lookup")
                    .must("lookup of the stored key");
                assert_eq!(
                    looked_up.response.as_ref(),
                    Some(&expected),
                    "{how}: body {what} as lookup reads it"
                );
                assert_eq!(looked_up.fingerprint, fingerprint, "{how}: fingerprint");
                let row = table
                    .get(k, NOW)
                    .await
                    .must("KeyTable::get")
                    .must("KeyTable::get of the stored key");
                assert_eq!(
                    row.response.as_ref(),
                    Some(&expected),
                    "{how}: body {what} as KeyTable::get reads it"
                );
                assert_eq!(row.key_ref(), k, "{how}: the key as stored");
            }
        }
    }
}

/// [`Backend::begin`] without a lock, and with the lock of a key that has no row, gives a
/// transaction ([`Begun::Free`]); the row inserted in it is there once committed, and not
/// at all when the transaction is dropped instead.
pub async fn begin_takes_a_free_key<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let namespace = idem_store::connect::namespace::<DB>(&mut conn)
        .await
        .must("namespace");
    let tx = DB::begin(&mut conn, &settings(), None)
        .await
        .must("begin without a lock");
    assert!(
        matches!(tx, Begun::Free(_)),
        "begin without a lock found a key taken"
    );
    drop(tx);

    let k = key("k");
    let mut tx = DB::begin(&mut conn, &settings(), Some(lock(&namespace, k, None)))
        .await
        .must("begin with the lock of a free key")
        .free()
        .must("begin with the lock of a free key: a transaction");
    let inserted = idem_store::protocol::insert_completed::<DB>(
        &mut tx,
        new_row(k, &[1; 32], "[]", b"dropped", NOW, NOW + HOUR),
        None,
    )
    .await
    .must("insert_completed");
    assert!(inserted, "insert_completed of a new key");
    drop(tx);
    assert!(
        idem_store::protocol::lookup::<DB>(&mut conn, k, None)
            .await
            .must("lookup")
            .is_none(),
        "a dropped transaction left its row"
    );

    let tx = DB::begin(&mut conn, &settings(), Some(lock(&namespace, k, None)))
        .await
        .must("begin again after the dropped transaction")
        .free()
        .must("begin with the lock of a free key: a transaction");
    let stored = idem_store::protocol::insert_completed_and_commit::<DB>(
        tx,
        new_row(k, &[1; 32], "[]", b"kept", NOW, NOW + HOUR),
        None,
    )
    .await
    .must("insert_completed_and_commit");
    assert!(stored, "insert_completed_and_commit of a free key");
    let row = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup")
        .must("the committed row");
    assert_eq!(
        row.response.map(|r| r.body),
        Some(bytes::Bytes::from_static(b"kept")),
        "the committed body"
    );
}

/// [`Backend::begin`] with the lock of a key whose row is committed finds it taken (as
/// [`Begun::Taken`] or an error classified [`Failure::Taken`]); the connection is usable
/// afterwards.
pub async fn begin_finds_a_committed_key_taken<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let k = key("k");
    assert!(put(pool, k, NOW - HOUR, NOW + HOUR, b"first").await);
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let namespace = idem_store::connect::namespace::<DB>(&mut conn)
        .await
        .must("namespace");
    let taken = begin_finds_taken::<DB>(&mut conn, &settings(), lock(&namespace, k, None))
        .await
        .must("begin with the lock of a committed key");
    assert!(
        taken,
        "begin with the lock of a committed key found it free"
    );
    // The same connection goes on: a lookup, and a free key's transaction.
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup on the connection after a taken begin")
        .must("the committed row");
    assert_eq!(stored.fingerprint, [7; 32], "the first execution's row");
    let other = key("other");
    let tx = DB::begin(&mut conn, &settings(), Some(lock(&namespace, other, None)))
        .await
        .must("begin on the connection after a taken begin")
        .free()
        .must("another key is free");
    tx.rollback().await.must("rollback");
}

/// An execution replacing an expired row ([`KeyLock::expired_by_ms`]) gets the key only if
/// the row had expired by then (`expires_at <= expired_by`); without `expired_by` any row
/// takes the key.
pub async fn begin_replacing_an_expired_key<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let k = key("k");
    assert!(put(pool, k, NOW - 2 * HOUR, NOW - HOUR, b"old").await);
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let namespace = idem_store::connect::namespace::<DB>(&mut conn)
        .await
        .must("namespace");
    for (expired_by, taken) in [
        (None, true),
        (Some(NOW - 2 * HOUR), true),
        (Some(NOW - HOUR - 1), true),
        (Some(NOW - HOUR), false),
        (Some(NOW), false),
    ] {
        let found =
            begin_finds_taken::<DB>(&mut conn, &settings(), lock(&namespace, k, expired_by))
                .await
                .must("begin with the lock of an expired key");
        assert_eq!(
            found, taken,
            "begin on a row expired at NOW - HOUR with expired_by {expired_by:?}: taken"
        );
    }
    // The execution that got the key replaces the row.
    let mut tx = DB::begin(&mut conn, &settings(), Some(lock(&namespace, k, Some(NOW))))
        .await
        .must("begin replacing an expired key")
        .free()
        .must("begin replacing an expired key: a transaction");
    let row = NewRow {
        field_digests: None,
        replace_expired: true,
        ..new_row(k, &[2; 32], "[]", b"new", NOW, NOW + HOUR)
    };
    assert!(
        idem_store::protocol::insert_completed::<DB>(&mut tx, row, None)
            .await
            .must("insert_completed"),
        "replacing the expired row"
    );
    tx.commit().await.must("commit");
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup")
        .must("the new row");
    assert_eq!(
        stored.fingerprint, [2; 32],
        "the replacing row's fingerprint"
    );
    assert_eq!(
        stored.expires_at_ms,
        NOW + HOUR,
        "the replacing row's expiry"
    );
}

/// A second transaction waiting for a key's lock gives up after the lock timeout, with an
/// error [`Backend::classify`] calls [`Failure::LockTimeout`]; after
/// [`Backend::abandon_begin`] the connection is usable, and once the holder is gone the key
/// is free and [`Backend::key_lock_taken`] says nobody holds it.
pub async fn lock_wait_times_out<DB: ConformanceSql>() {
    let url = DB::fresh_url().await;
    let quick = TxSettings {
        lock_timeout: Duration::from_millis(400),
        ..settings()
    };
    let pool = connect::<DB>(&url, &quick).await;
    idem_store::migrate(&pool).await.must("migrate");
    let k = key("k");
    let mut holder = pool.acquire().await.must("acquiring a connection");
    let mut waiter = pool.acquire().await.must("acquiring a second connection");
    let namespace = idem_store::connect::namespace::<DB>(&mut holder)
        .await
        .must("namespace");
    let held = DB::begin(&mut holder, &quick, Some(lock(&namespace, k, None)))
        .await
        .must("begin holding the key")
        .free()
        .must("begin holding the key: a transaction");

    let started = Instant::now();
    let (error, elapsed) = {
        let waited = DB::begin(&mut waiter, &quick, Some(lock(&namespace, k, None))).await;
        let elapsed = started.elapsed();
        match waited {
            Err(error) => (error, elapsed),
            Ok(Begun::Free(_)) => panic!("a second begin on a held key got the key"),
            Ok(Begun::Taken) => panic!("a second begin on a held key found it taken"),
        }
    };
    assert_eq!(
        DB::classify(&error),
        Failure::LockTimeout,
        "classify the error of a lock wait that ran out: {error}"
    );
    assert!(
        elapsed >= quick.lock_timeout / 2,
        "the lock wait gave up after {elapsed:?}, before the lock timeout of {:?}",
        quick.lock_timeout
    );
    assert!(
        elapsed <= quick.lock_timeout + Duration::from_secs(3),
        "the lock wait took {elapsed:?}, the lock timeout being {:?}",
        quick.lock_timeout
    );
    DB::abandon_begin(&mut waiter).await;
    DB::key_lock_taken(&mut waiter, lock(&namespace, k, None))
        .await
        .must("key_lock_taken while the key is held");
    assert!(
        idem_store::protocol::lookup::<DB>(&mut waiter, k, None)
            .await
            .must("lookup after abandon_begin")
            .is_none(),
        "lookup after abandon_begin"
    );

    held.rollback().await.must("rollback of the holder");
    let taken = DB::key_lock_taken(&mut waiter, lock(&namespace, k, None))
        .await
        .must("key_lock_taken once the holder is gone");
    assert!(!taken, "key_lock_taken says a released key is held");
    let tx = DB::begin(&mut waiter, &quick, Some(lock(&namespace, k, None)))
        .await
        .must("begin once the holder is gone")
        .free()
        .must("the key is free once the holder is gone");
    tx.rollback().await.must("rollback");
}

/// How long [`waiter_finds_the_committed_row`] waits for the store to report the duplicate
/// waiting for the key's lock: generous, for a loaded machine (the duplicate's own lock
/// timeout, [`settings`]'s, ends its wait sooner, which the case then reports).
const RACE_DEADLINE: Duration = Duration::from_secs(30);

/// What [`waiter_finds_the_committed_row`] saw happen, in the order it saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The duplicate's `begin` was polled and did not return: its first statement is sent
    /// (on SQLite, handed to the connection's worker thread).
    DuplicateBegins,
    /// The store reported the duplicate's session blocked, waiting for a lock
    /// ([`LockWaits::waits_for_lock`](crate::conformance::LockWaits::waits_for_lock)).
    DuplicateWaits,
    /// The first execution starts its commit
    /// ([`Backend::insert_completed_and_commit`]).
    FirstCommits,
    /// The first execution's commit returned.
    FirstCommitted,
    /// The duplicate's `begin` returned.
    DuplicateReturns,
}

/// The [`Step`]s of the race so far, each once, shared by its two sides.
#[derive(Debug, Default)]
struct Steps(Mutex<Vec<Step>>);

impl Steps {
    fn push(&self, step: Step) {
        let mut steps = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !steps.contains(&step) {
            steps.push(step);
        }
    }

    fn all(&self) -> Vec<Step> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn seen(&self, step: Step) -> bool {
        self.all().contains(&step)
    }
}

/// `begin`, recording [`Step::DuplicateBegins`] when a poll leaves it under way and
/// [`Step::DuplicateReturns`] the moment it returns.
async fn watched<F: Future>(steps: &Steps, begin: F) -> F::Output {
    let mut begin = pin!(begin);
    poll_fn(|cx| {
        let poll = begin.as_mut().poll(cx);
        steps.push(if poll.is_ready() {
            Step::DuplicateReturns
        } else {
            Step::DuplicateBegins
        });
        poll
    })
    .await
}

/// Polls until the store reports the duplicate's server session `session` blocked waiting for
/// a lock ([`Step::DuplicateWaits`]) or, without a server session to ask about (SQLite), until
/// the duplicate's `begin` is under way ([`Step::DuplicateBegins`]). Stops early when the
/// duplicate's `begin` returned: it did not wait, which the case's assertions then report.
/// Fails the test after [`RACE_DEADLINE`].
async fn until_the_duplicate_waits<DB: ConformanceSql>(
    pool: &Pool<DB>,
    session: Option<i64>,
    steps: &Steps,
) {
    let deadline = Instant::now() + RACE_DEADLINE;
    loop {
        if steps.seen(Step::DuplicateReturns) {
            return;
        }
        let waits = match session {
            Some(session) => DB::waits_for_lock(pool, session)
                .await
                .must("asking the store whether the duplicate waits for a lock"),
            None => steps.seen(Step::DuplicateBegins),
        };
        if waits {
            if session.is_some() {
                steps.push(Step::DuplicateWaits);
            }
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not within {RACE_DEADLINE:?}: the duplicate waiting for the key's lock (so far {:?})",
            steps.all()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A duplicate that waits for the key's lock while the first execution commits its row
/// finds the key taken once it holds the lock, and its lookup returns the first's row: the
/// duplicate's work never runs.
///
/// The race is ordered by signals, never by time. The first execution holds the key's lock;
/// the duplicate's `begin` of the same key starts; the first commits only once the store
/// itself reports the duplicate's session blocked waiting for a lock
/// ([`LockWaits::waits_for_lock`](crate::conformance::LockWaits::waits_for_lock):
/// PostgreSQL's `pg_stat_activity` and `pg_blocking_pids`, InnoDB's `LOCK WAIT` on MySQL), its
/// session named before it began ([`LockWaits::session`](crate::conformance::LockWaits::session)).
/// Asserted: the store reported that wait before the first committed, the duplicate's `begin`
/// returned only after the first's commit began, and found the key taken (its look again saw
/// the committed row). Not asserted: that the duplicate's answer reached the client after the
/// first's commit returned — the server lets the lock go as it commits, before it answers the
/// committing session, so those two answers may arrive in either order.
///
/// SQLite has no server to ask. The key's lock is the database's write lock, which the
/// duplicate's `BEGIN IMMEDIATE` waits for in its connection's busy handler, on the
/// connection's worker thread. Proven there: the duplicate's `begin` had been polled without
/// returning (its `BEGIN IMMEDIATE` handed to the worker thread) before the first execution's
/// commit began, it returned only after that, and it found the key taken. Not proven: that
/// the worker thread started the `BEGIN IMMEDIATE`, and so waited in the busy handler, before
/// the commit: had it started after, the duplicate would have found the row without waiting,
/// and the case would pass all the same.
pub async fn waiter_finds_the_committed_row<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let k = key("k");
    let mut first = pool.acquire().await.must("acquiring a connection");
    let mut second = pool.acquire().await.must("acquiring a second connection");
    let namespace = idem_store::connect::namespace::<DB>(&mut first)
        .await
        .must("namespace");
    let session = DB::session(&mut second)
        .await
        .must("the duplicate's server session");
    let tx = DB::begin(&mut first, &settings(), Some(lock(&namespace, k, None)))
        .await
        .must("begin of the first execution")
        .free()
        .must("the key is free for the first execution");
    let settings = settings();
    let steps = Steps::default();
    let (committed, taken) = tokio::join!(
        async {
            until_the_duplicate_waits::<DB>(pool, session, &steps).await;
            steps.push(Step::FirstCommits);
            let committed = idem_store::protocol::insert_completed_and_commit::<DB>(
                tx,
                new_row(k, &[1; 32], "[]", b"first", NOW, NOW + HOUR),
                None,
            )
            .await;
            steps.push(Step::FirstCommitted);
            committed
        },
        async {
            let begin = DB::begin(&mut second, &settings, Some(lock(&namespace, k, None)));
            let outcome = begun_taken(watched(&steps, begin).await).await;
            repaired::<DB>(&mut second, outcome).await
        },
    );
    let steps = steps.all();
    let at = |step| steps.iter().position(|s| *s == step);
    let commits = at(Step::FirstCommits).must("the first execution's commit");
    let (waited, what) = match session {
        Some(_) => (
            Step::DuplicateWaits,
            "the store reported the duplicate waiting for the key's lock",
        ),
        None => (Step::DuplicateBegins, "the duplicate's begin was under way"),
    };
    assert!(
        at(waited).is_some_and(|waited| waited < commits),
        "not before the first execution committed: {what} (steps {steps:?}; the duplicate's \
         begin: {taken:?})"
    );
    assert!(
        at(Step::DuplicateReturns).is_some_and(|returned| returned > commits),
        "the duplicate's begin returned before the first execution committed: it did not wait \
         for the key's lock (steps {steps:?}; the duplicate's begin: {taken:?})"
    );
    assert!(
        committed.must("the first execution's insert_completed_and_commit"),
        "the first execution stored its row"
    );
    assert!(
        taken.must("the duplicate's begin"),
        "the duplicate waiting on the lock found the key free after the first committed"
    );
    let stored = idem_store::protocol::lookup::<DB>(&mut second, k, None)
        .await
        .must("the duplicate's lookup")
        .must("the first execution's row");
    assert_eq!(
        stored.response.map(|r| r.body),
        Some(bytes::Bytes::from_static(b"first")),
        "the duplicate's answer"
    );
}

/// [`insert_completed_and_commit`](idem_store::protocol::insert_completed_and_commit) on a key whose row exists answers `false` and
/// commits nothing: neither the row nor the transaction's other writes; the row stays the
/// first one's. It ignores [`NewRow::replace_expired`].
pub async fn insert_and_commit_conflict_changes_nothing<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let k = key("k");
    assert!(put(pool, k, NOW - HOUR, NOW + HOUR, b"first").await);
    let old = key("old");
    assert!(put(pool, old, NOW - 2 * HOUR, NOW - HOUR, b"old").await);
    let mut conn = pool.acquire().await.must("acquiring a connection");
    for (target, replace_expired, write_id) in [(k, false, "w-1"), (old, true, "w-2")] {
        let mut tx = DB::begin(&mut conn, &settings(), None)
            .await
            .must("begin")
            .free()
            .must("begin without a lock");
        assert!(
            enqueue(&mut tx, &write(write_id), NOW, None)
                .await
                .must("enqueue"),
            "the application's write"
        );
        let row = NewRow {
            field_digests: None,
            replace_expired,
            ..new_row(target, &[9; 32], "[]", b"second", NOW, NOW + HOUR)
        };
        let stored = idem_store::protocol::insert_completed_and_commit::<DB>(tx, row, None)
            .await
            .must("insert_completed_and_commit on an existing key");
        assert!(
            !stored,
            "insert_completed_and_commit stored over the existing row of {} \
             (replace_expired {replace_expired})",
            target.key
        );
        assert!(
            !committed(pool, write_id).await,
            "the transaction's write committed although its key row did not"
        );
        let row = idem_store::protocol::lookup::<DB>(&mut conn, target, None)
            .await
            .must("lookup")
            .must("the first row");
        assert_eq!(row.fingerprint, [7; 32], "the first row's fingerprint");
    }
}

/// [`insert_completed`](idem_store::protocol::insert_completed) on a key whose row exists answers `false` and changes
/// nothing; the transaction stays usable and its other writes commit.
pub async fn insert_completed_conflict_changes_nothing<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let k = key("k");
    assert!(put(pool, k, NOW - HOUR, NOW + HOUR, b"first").await);
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let mut tx = DB::begin(&mut conn, &settings(), None)
        .await
        .must("begin")
        .free()
        .must("begin without a lock");
    let stored = idem_store::protocol::insert_completed::<DB>(
        &mut tx,
        new_row(k, &[9; 32], "[]", b"second", NOW, NOW + HOUR),
        None,
    )
    .await
    .must("insert_completed on an existing key");
    assert!(!stored, "insert_completed stored over an existing row");
    assert!(
        enqueue(&mut tx, &write("w"), NOW, None)
            .await
            .must("enqueue after the conflict"),
        "the application's write after the conflict"
    );
    tx.commit().await.must("commit after the conflict");
    assert!(committed(pool, "w").await, "the transaction's other write");
    let row = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup")
        .must("the first row");
    assert_eq!(row.fingerprint, [7; 32], "the first row's fingerprint");
    assert_eq!(
        row.response.map(|r| r.body),
        Some(bytes::Bytes::from_static(b"first")),
        "the first row's body"
    );
}

/// [`NewRow::replace_expired`]: [`insert_completed`](idem_store::protocol::insert_completed) replaces a row that had expired
/// by the execution's start (`created_ms`), and only such a row; on a free key it inserts.
/// The replacing row is the new one in every column.
pub async fn replacing_an_expired_key<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let k = key("k");
    let live = key("live");
    assert!(put(pool, k, NOW - 2 * HOUR, NOW - HOUR, b"first").await);
    assert!(put(pool, live, NOW - HOUR, NOW + HOUR, b"live").await);
    let row = |key, created_ms, body: &'static [u8]| NewRow {
        field_digests: None,
        key,
        fingerprint: &[9; 32],
        status: 200,
        headers_json: "[]",
        body,
        created_ms,
        completed_ms: created_ms,
        expires_ms: NOW + HOUR,
        replace_expired: true,
    };
    let mut conn = pool.acquire().await.must("acquiring a connection");
    for (target, created, what) in [
        (
            k,
            NOW - 90 * 60_000,
            "an execution that began before the row expired",
        ),
        (
            k,
            NOW - HOUR - 1,
            "an execution that began 1 ms before the row expired",
        ),
        (live, NOW, "a row that has not expired"),
    ] {
        let mut tx = DB::begin(&mut conn, &settings(), None)
            .await
            .must("begin")
            .free()
            .must("begin without a lock");
        let replaced = idem_store::protocol::insert_completed::<DB>(
            &mut tx,
            row(target, created, b"early"),
            None,
        )
        .await
        .must("insert_completed replacing");
        assert!(!replaced, "{what} replaced it");
        tx.rollback().await.must("rollback");
    }
    // One that began after the row expired does.
    let mut tx = DB::begin(&mut conn, &settings(), None)
        .await
        .must("begin")
        .free()
        .must("begin without a lock");
    let replaced =
        idem_store::protocol::insert_completed::<DB>(&mut tx, row(k, NOW, b"second"), None)
            .await
            .must("insert_completed replacing");
    assert!(
        replaced,
        "an execution that began after the row expired did not replace it"
    );
    // A free key is simply inserted.
    let inserted =
        idem_store::protocol::insert_completed::<DB>(&mut tx, row(key("free"), NOW, b"free"), None)
            .await
            .must("insert_completed replacing on a free key");
    assert!(
        inserted,
        "insert_completed with replace_expired on a free key"
    );
    tx.commit().await.must("commit");
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup")
        .must("the new row");
    assert_eq!(stored.fingerprint, [9; 32], "the new row's fingerprint");
    assert_eq!(stored.expires_at_ms, NOW + HOUR, "the new row's expiry");
    let response = stored.response.must("the new row's response");
    assert_eq!(response.body.as_ref(), b"second", "the new row's body");
    assert_eq!(response.status, 200, "the new row's status");
    assert!(response.headers.is_empty(), "the new row's headers");
    let row = table.get(k, NOW).await.must("get").must("the new row");
    assert_eq!(row.created_at_ms, NOW, "the new row's created_at");
    assert_eq!(row.completed_at_ms, Some(NOW), "the new row's completed_at");
    let live_row = idem_store::protocol::lookup::<DB>(&mut conn, live, None)
        .await
        .must("lookup")
        .must("the live row");
    assert_eq!(live_row.fingerprint, [7; 32], "the live row is untouched");
}

/// [`rollback_to_savepoint`](idem_store::protocol::rollback_to_savepoint) undoes the writes since [`savepoint`](idem_store::protocol::savepoint) and
/// keeps the transaction, its earlier writes and the key's lock: the failure stored after it
/// commits with the writes before the savepoint only.
pub async fn savepoint_rollback_undoes_the_work<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let k = key("k");
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let namespace = idem_store::connect::namespace::<DB>(&mut conn)
        .await
        .must("namespace");
    let mut tx = DB::begin(&mut conn, &settings(), Some(lock(&namespace, k, None)))
        .await
        .must("begin")
        .free()
        .must("begin with the lock of a free key");
    assert!(
        enqueue(&mut tx, &write("before"), NOW, None)
            .await
            .must("enqueue")
    );
    idem_store::protocol::savepoint::<DB>(&mut tx)
        .await
        .must("savepoint");
    assert!(
        enqueue(&mut tx, &write("inside"), NOW, None)
            .await
            .must("enqueue")
    );
    idem_store::protocol::rollback_to_savepoint::<DB>(&mut tx)
        .await
        .must("rollback_to_savepoint");
    // Once more, as a second failure in the same transaction would.
    assert!(
        enqueue(&mut tx, &write("inside"), NOW, None)
            .await
            .must("enqueue after the rollback"),
        "the write undone by the rollback to the savepoint is still there"
    );
    idem_store::protocol::rollback_to_savepoint::<DB>(&mut tx)
        .await
        .must("a second rollback_to_savepoint");
    let row = NewRow {
        field_digests: None,
        status: 422,
        ..new_row(
            k,
            &[4; 32],
            "[]",
            b"{\"error\":\"invalid\"}",
            NOW,
            NOW + HOUR,
        )
    };
    assert!(
        idem_store::protocol::insert_completed_and_commit::<DB>(tx, row, None)
            .await
            .must("insert_completed_and_commit after the savepoint"),
        "storing the failure"
    );
    assert!(
        committed(pool, "before").await,
        "the write before the savepoint"
    );
    assert!(
        !committed(pool, "inside").await,
        "the write after the savepoint"
    );
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup")
        .must("the failure");
    assert_eq!(
        stored.response.map(|r| r.status),
        Some(422),
        "the stored failure"
    );
}

/// A completed row keeps the field digests it is given, byte for byte, whether inserted and
/// committed in one go, inside a transaction, or over an expired row; a row given none, and
/// a key with no row, have none ([`field_digests`](idem_store::protocol::field_digests)).
pub async fn field_digests_round_trip<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let digests: Vec<u8> = (0..=255).collect();
    let row = |key, created_ms, field_digests| NewRow {
        field_digests,
        key,
        fingerprint: &[3; 32],
        status: 201,
        headers_json: "[]",
        body: b"{}",
        created_ms,
        completed_ms: created_ms,
        expires_ms: created_ms + HOUR,
        replace_expired: false,
    };
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let (one_go, in_tx, none, expired) = (key("one-go"), key("in-tx"), key("none"), key("old"));
    for (k, given) in [(one_go, Some(&digests[..])), (none, None)] {
        let tx = DB::begin(&mut conn, &settings(), None)
            .await
            .must("begin")
            .free()
            .must("begin without a lock");
        let stored =
            idem_store::protocol::insert_completed_and_commit::<DB>(tx, row(k, NOW, given), None)
                .await
                .must("insert_completed_and_commit");
        assert!(stored);
    }
    let mut tx = DB::begin(&mut conn, &settings(), None)
        .await
        .must("begin")
        .free()
        .must("begin without a lock");
    assert!(
        idem_store::protocol::insert_completed::<DB>(
            &mut tx,
            row(in_tx, NOW, Some(&digests[..16])),
            None
        )
        .await
        .must("insert_completed")
    );
    tx.commit().await.must("commit");
    // Over an expired row: the new row's digests.
    assert!(put(pool, expired, NOW - 3 * HOUR, NOW - 2 * HOUR, b"first").await);
    let mut tx = DB::begin(&mut conn, &settings(), None)
        .await
        .must("begin")
        .free()
        .must("begin without a lock");
    let replacing = NewRow {
        replace_expired: true,
        ..row(expired, NOW, Some(&digests[..8]))
    };
    assert!(
        idem_store::protocol::insert_completed::<DB>(&mut tx, replacing, None)
            .await
            .must("replacing")
    );
    tx.commit().await.must("commit");

    for (k, want) in [
        (one_go, Some(&digests[..])),
        (in_tx, Some(&digests[..16])),
        (expired, Some(&digests[..8])),
        (none, None),
        (key("absent"), None),
    ] {
        let got = idem_store::protocol::field_digests::<DB>(&mut conn, k, None)
            .await
            .must("field_digests");
        assert_eq!(got.as_deref(), want, "{}", k.key);
    }
}
