//! The execution protocol on real databases, through the plain function API: every case
//! runs on every store idem supports (on MySQL all but the failed `COMMIT`).
#![allow(clippy::unwrap_used)]

mod common;
mod signals;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use common::{Harness, TestDb};
use idem_runtime::fingerprint::Fingerprint;
use idem_runtime::protocol::{Call, OutcomeKind, Record, Work, work_fn};
use idem_runtime::spec::{ExpiryPolicy, OperationSpec};
use idem_runtime::sqlx::Transaction;
use idem_runtime::store::{KeyRef, KeyStatus};
use idem_runtime::{Config, Error, IdempotencyKey};
use serde_json::json;
use signals::Lookups;
use tokio::sync::oneshot;

/// A `201` record with `body` and no headers.
fn raw_record(body: &'static [u8]) -> Record {
    let mut record = Record::failure();
    record.status = StatusCode::CREATED;
    record.body = bytes::Bytes::from_static(body);
    record
}

const SPEC: OperationSpec = OperationSpec::new("test-op:v1");

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

/// A global-scope call with an empty input.
fn global(k: &IdempotencyKey) -> Call<'_> {
    Call {
        scope: "global",
        key: k,
        fingerprint: fp(&json!({})),
        request: None,
    }
}

fn fp(input: &serde_json::Value) -> Fingerprint {
    Fingerprint::of(SPEC.id, input, &[]).unwrap()
}

/// Work that writes one effect and answers `status` with a unique body.
fn work<DB: TestDb>(
    note: &'static str,
    status: u16,
) -> impl for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Work<'t> + Send {
    work_pausing::<DB>(note, status, std::future::ready(()))
}

/// [`work`] that awaits `pause` after its write, holding the key's lock.
fn work_pausing<DB: TestDb>(
    note: &'static str,
    status: u16,
    pause: impl Future<Output = ()> + Send + 'static,
) -> impl for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Work<'t> + Send {
    work_fn::<DB, _>(move |tx| {
        Box::pin(async move {
            DB::write_effect(&mut **tx, note).await;
            pause.await;
            let mut record = Record::json(
                StatusCode::from_u16(status).unwrap(),
                &json!({"note": note, "nonce": uuid::Uuid::new_v4().to_string()}),
            )
            .unwrap();
            record
                .headers
                .insert("location", "/things/1".parse().unwrap());
            record
                .headers
                .insert("x-request-id", "not-stored".parse().unwrap());
            record
        })
    })
}

fn ok<DB: TestDb>(
    note: &'static str,
) -> impl for<'t, 'c> FnOnce(&'t mut Transaction<'c, DB>) -> Work<'t> + Send {
    work::<DB>(note, 201)
}

async fn sequential_replay<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let k = key("k-1");
    let call = Call {
        scope: "global",
        key: &k,
        fingerprint: fp(&json!({"a": 1})),
        request: None,
    };
    let first = h
        .idem
        .execute(&SPEC, call, ok::<DB>("first"))
        .await
        .unwrap();
    assert_eq!(first.kind, OutcomeKind::Executed);
    assert_eq!(first.record.status, 201);
    for _ in 0..3 {
        let again = h
            .idem
            .execute(&SPEC, call, ok::<DB>("again"))
            .await
            .unwrap();
        assert_eq!(again.kind, OutcomeKind::Replayed);
        assert_eq!(again.record.status, 201);
        assert_eq!(again.record.body, first.record.body);
        assert_eq!(again.record.headers["location"], "/things/1");
        assert_eq!(again.record.headers["content-type"], "application/json");
        // Headers outside the allow-list are not stored.
        assert!(again.record.headers.get("x-request-id").is_none());
    }
    assert_eq!(h.effects().await, 1);
    let stored = h
        .idem
        .lookup(KeyRef {
            scope: "global",
            operation: SPEC.id,
            key: "k-1",
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.status, KeyStatus::Completed);
    assert_eq!(stored.fingerprint, fp(&json!({"a": 1})).as_bytes());
}

/// Values that would break a statement built by hand come back byte for byte.
async fn awkward_values_round_trip<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let k = key(r"it's\\k');COMMIT;--");
    let scope = "tenant:O'Brien ✓ \\x00";
    let call = Call {
        scope,
        key: &k,
        fingerprint: fp(&json!({"q": "'"})),
        request: None,
    };
    let body: &'static [u8] = b"\x00\xff'\\x00; ROLLBACK; --\n\xc3\x28";
    let run = || {
        work_fn::<DB, _>(move |tx| {
            Box::pin(async move {
                DB::write_effect(&mut **tx, "awkward").await;
                let mut record = raw_record(body);
                record
                    .headers
                    .insert("location", "/things/'; --".parse().unwrap());
                record
            })
        })
    };
    let first = h.idem.execute(&SPEC, call, run()).await.unwrap();
    assert_eq!(first.kind, OutcomeKind::Executed);
    let again = h.idem.execute(&SPEC, call, run()).await.unwrap();
    assert_eq!(again.kind, OutcomeKind::Replayed);
    assert_eq!(again.record.body.as_ref(), body);
    assert_eq!(again.record.headers["location"], "/things/'; --");
    let stored = h
        .idem
        .lookup(KeyRef {
            scope,
            operation: SPEC.id,
            key: k.as_str(),
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.fingerprint, call.fingerprint.as_bytes());
    assert_eq!(h.effects().await, 1);
}

async fn replay_survives_a_new_process<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let k = key("k-restart");
    let call = global(&k);
    let first = h
        .idem
        .execute(&SPEC, call, ok::<DB>("first"))
        .await
        .unwrap();
    h.idem.pool().close().await;
    let other = h.reopen(Config::default()).await;
    let again = other.execute(&SPEC, call, ok::<DB>("again")).await.unwrap();
    assert_eq!(again.kind, OutcomeKind::Replayed);
    assert_eq!(again.record.body, first.record.body);
    assert_eq!(DB::count_effects(other.pool()).await, 1);
}

async fn mismatch_runs_nothing<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let k = key("k-2");
    let first = Call {
        scope: "global",
        key: &k,
        fingerprint: fp(&json!({"a": 1})),
        request: None,
    };
    h.idem
        .execute(&SPEC, first, ok::<DB>("first"))
        .await
        .unwrap();
    let other = Call {
        fingerprint: fp(&json!({"a": 2})),
        ..first
    };
    let err = h
        .idem
        .execute(&SPEC, other, ok::<DB>("other"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Mismatch(_)), "{err:?}");
    assert_eq!(err.status(), 422);
    assert_eq!(h.effects().await, 1);
}

/// A request under a reused key, from the plain API with its canonical request: the `422`
/// names the fields changed, added and removed — never a value — from the digests the first
/// request left in the key's row; with `Config::mismatch_detail(false)` the row keeps none
/// and the `422` names nothing.
async fn mismatch_names_the_fields<DB: TestDb>() {
    for detail in [true, false] {
        let h = Harness::<DB>::with_config(Config::default().mismatch_detail(detail)).await;
        let k = key("k-fields");
        let first = json!({"body": {"amount": 100, "note": "a", "items": [{"sku": "A"}]}});
        let second = json!({"body": {"amount": 101, "memo": "a", "items": [{"sku": "A"}]}});
        let (first, second) = (canonical(&first), canonical(&second));
        fn call<'a>(k: &'a IdempotencyKey, request: &'a [u8]) -> Call<'a> {
            Call {
                scope: "global",
                key: k,
                fingerprint: Fingerprint::of(SPEC.id, request, &[]).unwrap(),
                request: Some(request),
            }
        }
        h.idem
            .execute(&SPEC, call(&k, &first), ok::<DB>("first"))
            .await
            .unwrap();
        let err = h
            .idem
            .execute(&SPEC, call(&k, &second), ok::<DB>("second"))
            .await
            .unwrap_err();
        let problem = serde_json::to_value(err.problem()).unwrap();
        if detail {
            assert_eq!(
                problem["mismatch"],
                json!({"changed": ["/body/amount"], "added": ["/body/memo"], "removed": ["/body/note"]}),
                "{problem}"
            );
        } else {
            assert!(matches!(err, Error::Mismatch(None)), "{err:?}");
            assert!(problem.get("mismatch").is_none(), "{problem}");
        }
        // The same request reordered replays.
        let again = h
            .idem
            .execute(&SPEC, call(&k, &first), ok::<DB>("again"))
            .await
            .unwrap();
        assert_eq!(again.kind, OutcomeKind::Replayed);
        assert_eq!(h.effects().await, 1);
    }
}

fn canonical(value: &serde_json::Value) -> Vec<u8> {
    idem_runtime::__fuzz::canonical_json(value).unwrap()
}

async fn scopes_and_operations_are_independent<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let k = key("shared");
    let f = fp(&json!({}));
    let a = Call {
        scope: "tenant:a",
        key: &k,
        fingerprint: f,
        request: None,
    };
    let b = Call {
        scope: "tenant:b",
        key: &k,
        fingerprint: f,
        request: None,
    };
    let ra = h.idem.execute(&SPEC, a, ok::<DB>("a")).await.unwrap();
    let rb = h.idem.execute(&SPEC, b, ok::<DB>("b")).await.unwrap();
    assert_eq!(
        (ra.kind, rb.kind),
        (OutcomeKind::Executed, OutcomeKind::Executed)
    );
    assert_ne!(ra.record.body, rb.record.body);
    const OTHER: OperationSpec = OperationSpec::new("other-op:v1");
    let ro = h.idem.execute(&OTHER, a, ok::<DB>("other")).await.unwrap();
    assert_eq!(ro.kind, OutcomeKind::Executed);
    assert_eq!(h.effects().await, 3);
    assert_eq!(h.keys().await, 3);
}

async fn failure_is_rolled_back_and_frees_the_key<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let k = key("k-fail");
    let call = global(&k);
    for status in [400, 409, 500] {
        let failed = h
            .idem
            .execute(&SPEC, call, work::<DB>("failing", status))
            .await
            .unwrap();
        assert_eq!(failed.kind, OutcomeKind::Failed);
        assert_eq!(failed.record.status, status);
    }
    assert_eq!(h.effects().await, 0);
    assert_eq!(h.keys().await, 0);
    let ok = h.idem.execute(&SPEC, call, ok::<DB>("ok")).await.unwrap();
    assert_eq!(ok.kind, OutcomeKind::Executed);
    assert_eq!(h.effects().await, 1);
}

async fn client_errors_can_be_stored_without_their_writes<DB: TestDb>() {
    const STORING: OperationSpec = OperationSpec::new("storing:v1").store_client_errors(true);
    let h = Harness::<DB>::new().await;
    let k = key("k-4xx");
    let call = global(&k);
    let first = h
        .idem
        .execute(&STORING, call, work::<DB>("declined", 402))
        .await
        .unwrap();
    assert_eq!(first.kind, OutcomeKind::Executed);
    let again = h
        .idem
        .execute(&STORING, call, ok::<DB>("ok"))
        .await
        .unwrap();
    assert_eq!(again.kind, OutcomeKind::Replayed);
    assert_eq!(again.record.status, 402);
    assert_eq!(again.record.body, first.record.body);
    // The handler's write was rolled back to the savepoint; the key row was kept.
    assert_eq!(h.effects().await, 0);
    assert_eq!(h.keys().await, 1);

    // 5xx is never stored, even here.
    let k5 = key("k-5xx");
    let call = Call { key: &k5, ..call };
    let failed = h
        .idem
        .execute(&STORING, call, work::<DB>("broken", 503))
        .await
        .unwrap();
    assert_eq!(failed.kind, OutcomeKind::Failed);
    assert_eq!(h.keys().await, 1);
}

async fn panic_rolls_back<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let k = key("k-panic");
    let call = global(&k);
    let err = h
        .idem
        .execute(
            &SPEC,
            call,
            work_fn::<DB, _>(|tx| {
                Box::pin(async move {
                    DB::write_effect(&mut **tx, "before panic").await;
                    panic!("handler bug");
                })
            }),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Panicked), "{err:?}");
    assert_eq!(err.status(), 500);
    assert_eq!(h.effects().await, 0);
    assert_eq!(h.keys().await, 0);
    let ok = h.idem.execute(&SPEC, call, ok::<DB>("ok")).await.unwrap();
    assert_eq!(ok.kind, OutcomeKind::Executed);
}

/// Where the key's lock may come before the lookup (`Backend::LOCK_FIRST`: PostgreSQL, MySQL), an
/// operation whose keys were new begins with the lock: a new key runs, a key that exists is
/// refused by the lock's look again and answered by the lookup, as when the lookup comes
/// first. Elsewhere the lookup always comes first.
async fn either_first_step_gives_the_same_answers<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let lock_first = <DB as idem_runtime::store::Backend>::DIALECT.lock_first;
    let run = |name: &'static str, input: serde_json::Value| {
        let (idem, lookups) = (h.idem.clone(), Lookups::default());
        async move {
            let k = key(name);
            let call = Call {
                scope: "global",
                key: &k,
                fingerprint: fp(&input),
                request: None,
            };
            let outcome = lookups
                .watch(idem.execute(&SPEC, call, ok::<DB>(name)))
                .await;
            (outcome, lookups.seen())
        }
    };
    let mut bodies = Vec::new();
    for name in ["a", "b", "c"] {
        let (outcome, _) = run(name, json!({})).await;
        let outcome = outcome.unwrap();
        assert_eq!(outcome.kind, OutcomeKind::Executed);
        bodies.push(outcome.record.body);
    }
    // After three new keys, a new key: on PostgreSQL the lock first, which found no row.
    let (outcome, seen) = run("d", json!({})).await;
    assert_eq!(outcome.unwrap().kind, OutcomeKind::Executed);
    let expected = if lock_first {
        ["lock", "none"]
    } else {
        ["none", "lock"]
    };
    assert_eq!(seen, expected);
    // A key that exists: replayed; on PostgreSQL after the lock refused it.
    let (outcome, seen) = run("a", json!({})).await;
    let outcome = outcome.unwrap();
    assert_eq!(outcome.kind, OutcomeKind::Replayed);
    assert_eq!(outcome.record.body, bodies[0]);
    let expected: &[&str] = if lock_first {
        &["lock", "completed"]
    } else {
        &["completed"]
    };
    assert_eq!(seen, expected);
    // Another payload on a key that exists: refused the same way.
    let (outcome, _) = run("b", json!({"other": true})).await;
    assert!(matches!(outcome, Err(Error::Mismatch(_))), "{outcome:?}");
    // Two keys that existed outweigh four new ones: the lookup comes first again.
    let (outcome, seen) = run("c", json!({})).await;
    assert_eq!(outcome.unwrap().record.body, bodies[2]);
    assert_eq!(seen, ["completed"]);
    assert_eq!(h.effects().await, 4);
    assert_eq!(h.keys().await, 4);
}

async fn expired_key_is_gone<DB: TestDb>() {
    const SHORT: OperationSpec = OperationSpec::new("short:v1").ttl(Duration::from_secs(60));
    let h = Harness::<DB>::new().await;
    let k = key("k-exp");
    let call = global(&k);
    h.idem
        .execute(&SHORT, call, ok::<DB>("first"))
        .await
        .unwrap();
    h.advance(Duration::from_secs(59));
    let replay = h
        .idem
        .execute(&SHORT, call, ok::<DB>("again"))
        .await
        .unwrap();
    assert_eq!(replay.kind, OutcomeKind::Replayed);
    h.advance(Duration::from_secs(1));
    let err = h
        .idem
        .execute(&SHORT, call, ok::<DB>("late"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Expired), "{err:?}");
    assert_eq!(err.status(), 410);
    // Gone even with another payload: nothing runs after expiry.
    let other = Call {
        fingerprint: fp(&json!({"x": 1})),
        ..call
    };
    assert!(matches!(
        h.idem.execute(&SHORT, other, ok::<DB>("late")).await,
        Err(Error::Expired)
    ));
    assert_eq!(h.effects().await, 1);
}

async fn expired_key_reexecutes<DB: TestDb>() {
    const AGAIN: OperationSpec = OperationSpec::new("again:v1")
        .ttl(Duration::from_secs(60))
        .on_expired(ExpiryPolicy::Reexecute);
    let h = Harness::<DB>::new().await;
    let k = key("k-reexec");
    let call = Call {
        scope: "global",
        key: &k,
        fingerprint: fp(&json!({"v": 1})),
        request: None,
    };
    let first = h
        .idem
        .execute(&AGAIN, call, ok::<DB>("first"))
        .await
        .unwrap();
    h.advance(Duration::from_secs(61));
    // After expiry the key is new again, even for another payload.
    let call2 = Call {
        fingerprint: fp(&json!({"v": 2})),
        ..call
    };
    let second = h
        .idem
        .execute(&AGAIN, call2, ok::<DB>("second"))
        .await
        .unwrap();
    assert_eq!(second.kind, OutcomeKind::Executed);
    assert_ne!(second.record.body, first.record.body);
    let replay = h
        .idem
        .execute(&AGAIN, call2, ok::<DB>("third"))
        .await
        .unwrap();
    assert_eq!(replay.kind, OutcomeKind::Replayed);
    assert_eq!(replay.record.body, second.record.body);
    // The new row has the new fingerprint and a new expiry.
    assert!(matches!(
        h.idem.execute(&AGAIN, call, ok::<DB>("x")).await,
        Err(Error::Mismatch(_))
    ));
    assert_eq!(h.effects().await, 2);
    assert_eq!(h.keys().await, 1);
}

async fn concurrent_duplicates_execute_once<DB: TestDb>() {
    let config = Config::default().in_flight_wait(Duration::from_secs(20));
    let h = Harness::<DB>::with_config(config.clone()).await;
    let second_process = h.reopen(config).await;
    let handles = [h.idem.clone(), second_process];
    let k = Arc::new(key("k-race"));
    let f = fp(&json!({"race": true}));
    let lookups = Lookups::default();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let idem = handles[i % 2].clone();
        let k = Arc::clone(&k);
        // The work holds the key until all 16 met it new.
        let everyone = {
            let (lookups, url) = (lookups.clone(), h.url.clone());
            let backend = <DB as idem_runtime::sqlx::Database>::NAME;
            async move { signals::until_all_met_it_new(backend, &url, &lookups, 16).await }
        };
        tasks.push(tokio::spawn(lookups.watch(async move {
            let call = Call {
                scope: "global",
                key: &k,
                fingerprint: f,
                request: None,
            };
            idem.execute(&SPEC, call, work_pausing::<DB>("race", 201, everyone))
                .await
                .unwrap()
        })));
    }
    let mut executed = 0;
    let mut bodies = Vec::new();
    for task in tasks {
        let outcome = task.await.unwrap();
        if outcome.kind == OutcomeKind::Executed {
            executed += 1;
        } else {
            assert_eq!(outcome.kind, OutcomeKind::Replayed);
        }
        bodies.push(outcome.record.body);
    }
    assert_eq!(executed, 1);
    assert!(
        bodies.windows(2).all(|w| w[0] == w[1]),
        "all bodies identical"
    );
    assert_eq!(h.effects().await, 1);
}

/// Starts a first execution of `k` and returns once its work runs, holding the key's lock,
/// with the sender that lets it go on and answer `status`.
async fn hold_first<DB: TestDb>(
    idem: &idem_runtime::Idem<DB>,
    k: &Arc<IdempotencyKey>,
    f: Fingerprint,
    status: u16,
) -> (
    tokio::task::JoinHandle<idem_runtime::protocol::Outcome>,
    oneshot::Sender<()>,
) {
    let (started, running) = oneshot::channel();
    let (release, released) = oneshot::channel::<()>();
    let (idem, k) = (idem.clone(), Arc::clone(k));
    let first = tokio::spawn(async move {
        let call = Call {
            scope: "global",
            key: &k,
            fingerprint: f,
            request: None,
        };
        let pause = async move {
            started.send(()).unwrap();
            // (A dropped sender lets it go on too.)
            let _ = released.await;
        };
        idem.execute(&SPEC, call, work_pausing::<DB>("first", status, pause))
            .await
            .unwrap()
    });
    if running.await.is_err() {
        panic!(
            "the first execution ended before its work ran: {:?}",
            first.await
        );
    }
    (first, release)
}

/// Waits until `n` duplicates of a key that a first execution holds are at its lock. On
/// PostgreSQL (`url`) they wait for the key's advisory lock, on MySQL for its lock row; each
/// may come before their lookup (`Backend::LOCK_FIRST`). On SQLite they looked the key up and
/// found nothing (`lookups` watches them): a wait for the write lock shows nowhere, from its
/// lookup a duplicate goes straight into `BEGIN IMMEDIATE`, awaiting nothing else.
async fn until_at_the_lock<DB: TestDb>(url: &str, lookups: &Lookups, n: usize) {
    match <DB as idem_runtime::sqlx::Database>::NAME {
        "PostgreSQL" => {
            signals::until_advisory_lock_waits(url, n).await;
        }
        #[cfg(feature = "mysql")]
        "MySQL" => {
            signals::until_row_lock_waits(url, n).await;
        }
        _ => lookups.until("none", n).await,
    }
}

async fn waiting_duplicate_runs_when_the_first_rolls_back<DB: TestDb>() {
    let h =
        Harness::<DB>::with_config(Config::default().in_flight_wait(Duration::from_secs(20))).await;
    let k = Arc::new(key("k-rollback"));
    let f = fp(&json!({}));
    let (first, release) = hold_first::<DB>(&h.idem, &k, f, 500).await;
    let call = global(&k);
    // The second's work goes on once the first answered: after its rollback the first looks
    // the key up again, and a record the second committed meanwhile would be its answer.
    let (answered, first_answer) = oneshot::channel();
    let after_the_first = async move {
        let first = tokio::time::timeout(signals::DEADLINE, first)
            .await
            .expect("the first answers while the second runs");
        answered.send(first.unwrap()).unwrap();
    };
    let lookups = Lookups::default();
    // The first rolls back once the second waits for the key.
    let (second, ()) = tokio::join!(
        lookups.watch(h.idem.execute(
            &SPEC,
            call,
            work_pausing::<DB>("second", 201, after_the_first)
        )),
        async {
            until_at_the_lock::<DB>(&h.url, &lookups, 1).await;
            release.send(()).unwrap();
        }
    );
    let second = second.unwrap();
    assert_eq!(first_answer.await.unwrap().kind, OutcomeKind::Failed);
    assert_eq!(second.kind, OutcomeKind::Executed);
    assert_eq!(h.effects().await, 1);
}

/// A duplicate that looked the key up before the first committed waits for the key's lock,
/// looks again once it holds it, and answers with the first's record as soon as the first
/// commits: its work never runs (an effect outside the transaction would happen twice).
async fn waiting_duplicate_never_runs_and_replays<DB: TestDb>() {
    let h =
        Harness::<DB>::with_config(Config::default().in_flight_wait(Duration::from_secs(20))).await;
    let k = Arc::new(key("k-waited"));
    let f = fp(&json!({}));
    let (first, release) = hold_first::<DB>(&h.idem, &k, f, 201).await;
    let call = global(&k);
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    let lookups = Lookups::default();
    let started = std::time::Instant::now();
    // The first commits once the duplicate looked the key up and waits for its lock.
    let (second, ()) = tokio::join!(
        lookups.watch(h.idem.execute(
            &SPEC,
            call,
            work_fn::<DB, _>(move |tx| {
                Box::pin(async move {
                    DB::write_effect(&mut **tx, "second").await;
                    flag.store(true, std::sync::atomic::Ordering::SeqCst);
                    Record::json(StatusCode::CREATED, &json!({"second": true})).unwrap()
                })
            }),
        )),
        async {
            until_at_the_lock::<DB>(&h.url, &lookups, 1).await;
            release.send(()).unwrap();
        }
    );
    let second = second.unwrap();
    let waited = started.elapsed();
    let first = first.await.unwrap();
    assert_eq!(first.kind, OutcomeKind::Executed);
    assert!(
        !ran.load(std::sync::atomic::Ordering::SeqCst),
        "the duplicate ran"
    );
    assert_eq!(second.kind, OutcomeKind::Replayed);
    assert_eq!(second.record.body, first.record.body);
    // Answered when the first committed, not at the end of the 20 s wait.
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert_eq!(h.effects().await, 1);
    assert_eq!(h.keys().await, 1);
}

/// A side store outside every key's transaction, a stand-in for an email or a card charge:
/// a table in a database of its own, written with its own connection.
async fn side_store() -> idem_runtime::sqlx::SqlitePool {
    let path = idem_testkit::harness::temp_file(&format!("side-{}", uuid::Uuid::new_v4().simple()));
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let pool = idem_runtime::sqlx::SqlitePool::connect(&url).await.unwrap();
    idem_runtime::sqlx::query("CREATE TABLE sent (key TEXT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    pool
}

/// 32 concurrent duplicates of each of three keys, across two pools ("processes"), all
/// arriving at once or spread over 0–300 ms: the work runs exactly once per key, counted in
/// memory and in a side table outside the transaction; everyone else replays its record.
async fn duplicates_never_run_the_work_twice<DB: TestDb>(spread: bool) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // (96 executions queue for a few connections: no shedding here.)
    let config = Config::default()
        .in_flight_wait(Duration::from_secs(30))
        .acquire_timeout(Duration::from_secs(30));
    let h = Harness::<DB>::with_config(config.clone()).await;
    let handles = [h.idem.clone(), h.reopen(config).await];
    let side = side_store().await;
    let keys: [&'static str; 3] = ["dup-a", "dup-b", "dup-c"];
    let runs: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
    // Each key's work holds it until its duplicates arrived: all 32, or, spread, the first
    // half (the others arrive while it commits or after, and replay from the lookup).
    let hold_until = if spread { 16 } else { 32 };
    let arrived: Arc<[tokio::sync::watch::Sender<usize>; 3]> =
        Arc::new(std::array::from_fn(|_| tokio::sync::watch::Sender::new(0)));
    let mut tasks = Vec::new();
    for (k, name) in keys.into_iter().enumerate() {
        for i in 0..32_u64 {
            let idem = handles[(i % 2) as usize].clone();
            let runs = Arc::clone(&runs);
            let arrived = Arc::clone(&arrived);
            let side = side.clone();
            let offset = if spread {
                (i * 97 + k as u64 * 31) % 301
            } else {
                0
            };
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(offset)).await;
                arrived[k].send_modify(|n| *n += 1);
                let key = key(name);
                let call = Call {
                    scope: "global",
                    key: &key,
                    fingerprint: fp(&json!({"dup": name})),
                    request: None,
                };
                let outcome = idem
                    .execute(
                        &SPEC,
                        call,
                        work_fn::<DB, _>(move |tx| {
                            Box::pin(async move {
                                runs[k].fetch_add(1, Ordering::SeqCst);
                                idem_runtime::sqlx::query("INSERT INTO sent (key) VALUES (?1)")
                                    .bind(name)
                                    .execute(&side)
                                    .await
                                    .unwrap();
                                DB::write_effect(&mut **tx, name).await;
                                let mut seen = arrived[k].subscribe();
                                let held = seen.wait_for(|n| *n >= hold_until);
                                tokio::time::timeout(signals::DEADLINE, held)
                                    .await
                                    .expect("the duplicates arrive")
                                    .unwrap();
                                Record::json(StatusCode::CREATED, &json!({"key": name})).unwrap()
                            })
                        }),
                    )
                    .await
                    .unwrap();
                (k, outcome)
            }));
        }
    }
    let mut executed = [0; 3];
    for task in tasks {
        let (k, outcome) = task.await.unwrap();
        match outcome.kind {
            OutcomeKind::Executed => executed[k] += 1,
            kind => assert_eq!(kind, OutcomeKind::Replayed),
        }
        assert_eq!(outcome.record.status, 201);
    }
    assert_eq!(executed, [1, 1, 1]);
    for (k, name) in keys.iter().enumerate() {
        assert_eq!(
            runs[k].load(Ordering::SeqCst),
            1,
            "{name} ran more than once"
        );
        let sent: i64 =
            idem_runtime::sqlx::query_scalar("SELECT count(*) FROM sent WHERE key = ?1")
                .bind(name)
                .fetch_one(&side)
                .await
                .unwrap();
        assert_eq!(sent, 1, "{name}: side effects");
    }
    assert_eq!(h.effects().await, 3);
}

async fn simultaneous_duplicates_never_run_twice<DB: TestDb>() {
    duplicates_never_run_the_work_twice::<DB>(false).await;
}

async fn spread_duplicates_never_run_twice<DB: TestDb>() {
    duplicates_never_run_the_work_twice::<DB>(true).await;
}

/// A duplicate that gave up waiting leaves its connection clean: with a pool of one, the
/// next execution on that same connection works.
async fn connection_is_clean_after_giving_up<DB: TestDb>() {
    let h =
        Harness::<DB>::with_config(Config::default().in_flight_wait(Duration::from_millis(300)))
            .await;
    let single = h
        .reopen(
            Config::default()
                .in_flight_wait(Duration::from_millis(300))
                .max_connections(1),
        )
        .await;
    let k = Arc::new(key("k-held"));
    let f = fp(&json!({}));
    let (first, release) = hold_first::<DB>(&h.idem, &k, f, 201).await;
    let call = global(&k);
    let err = single
        .execute(&SPEC, call, ok::<DB>("dup"))
        .await
        .unwrap_err();
    assert_gave_up_waiting::<DB>(&err);
    // (After the first: on SQLite any other write waits for it too.)
    release.send(()).unwrap();
    assert_eq!(first.await.unwrap().kind, OutcomeKind::Executed);
    let other = key("k-other");
    let next = single
        .execute(&SPEC, global(&other), ok::<DB>("next"))
        .await
        .unwrap();
    assert_eq!(next.kind, OutcomeKind::Executed);
    let replay = single.execute(&SPEC, call, ok::<DB>("late")).await.unwrap();
    assert_eq!(replay.kind, OutcomeKind::Replayed);
    assert_eq!(h.effects().await, 2);
}

/// Drops a duplicate (its client went away) while it waits for the key's lock in `BEGIN`.
/// Returns the harness and the duplicate's single-connection handle.
async fn drop_a_waiting_duplicate<DB: TestDb>() -> (Harness<DB>, idem_runtime::Idem<DB>) {
    let config = Config::default().in_flight_wait(Duration::from_secs(5));
    let h = Harness::<DB>::with_config(config.clone()).await;
    let single = h.reopen(config.max_connections(1)).await;
    let k = Arc::new(key("k-cancelled"));
    let f = fp(&json!({}));
    let (first, release) = hold_first::<DB>(&h.idem, &k, f, 201).await;
    let call = global(&k);
    let lookups = Lookups::default();
    // Dropped as soon as it waits for the key's lock.
    tokio::select! {
        done = lookups.watch(single.execute(&SPEC, call, ok::<DB>("dropped"))) => {
            panic!("the duplicate answered while the first held the key: {done:?}");
        }
        () = until_at_the_lock::<DB>(&h.url, &lookups, 1) => {}
    }
    release.send(()).unwrap();
    assert_eq!(first.await.unwrap().kind, OutcomeKind::Executed);
    let pool = single.pool();
    signals::eventually(
        "the dropped duplicate's connection is closed or pooled again",
        || async { pool.size() as usize == pool.num_idle() },
    )
    .await;
    (h, single)
}

/// ... and leaves nothing behind: no transaction pooled with the database's write lock
/// (SQLite) or the key's lock (PostgreSQL) in it. Writes go through elsewhere first, then on
/// the duplicate's own pool.
async fn writes_go_on_after_a_dropped_duplicate<DB: TestDb>(
    h: &Harness<DB>,
    single: &idem_runtime::Idem<DB>,
) {
    let third = key("k-third");
    let elsewhere = h
        .idem
        .execute(&SPEC, global(&third), ok::<DB>("third"))
        .await
        .unwrap();
    assert_eq!(elsewhere.kind, OutcomeKind::Executed);
    let other = key("k-after");
    let after = single
        .execute(&SPEC, global(&other), ok::<DB>("after"))
        .await
        .unwrap();
    assert_eq!(after.kind, OutcomeKind::Executed);
    assert_eq!(h.effects().await, 3);
}

/// An execution dropped inside its work (its client went away): its write rolls back and
/// its connection, the handle's only one, serves the next executions — a first one, its
/// replays, and other keys.
async fn dropped_execution_leaves_its_connection_usable<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let single = h.reopen(Config::default().max_connections(1)).await;
    let k = key("k-dropped");
    let dropped = tokio::time::timeout(
        Duration::from_millis(200),
        single.execute(
            &SPEC,
            global(&k),
            work_pausing::<DB>("dropped", 201, std::future::pending()),
        ),
    )
    .await;
    assert!(dropped.is_err(), "the work never ends: {dropped:?}");
    assert_eq!(h.effects().await, 0, "the dropped work's write rolled back");
    let first = single
        .execute(&SPEC, global(&k), ok::<DB>("after"))
        .await
        .unwrap();
    assert_eq!(first.kind, OutcomeKind::Executed);
    for _ in 0..20 {
        let again = single
            .execute(&SPEC, global(&k), ok::<DB>("again"))
            .await
            .unwrap();
        assert_eq!(again.kind, OutcomeKind::Replayed);
        assert_eq!(again.record.body, first.record.body);
    }
    writes_go_on_after_a_dropped_duplicate(&h, &single).await;
}

async fn dropped_duplicate_leaves_no_lock<DB: TestDb>() {
    let (h, single) = drop_a_waiting_duplicate::<DB>().await;
    writes_go_on_after_a_dropped_duplicate(&h, &single).await;
}

/// On PostgreSQL, no session of the test holds an advisory lock once the first is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dropped_duplicate_holds_no_advisory_lock() {
    use idem_runtime::sqlx::{self, Postgres};
    let (h, single) = drop_a_waiting_duplicate::<Postgres>().await;
    // (The dropped duplicate's closed session takes the key's lock when the first commits,
    // and ends when it reads that it was closed.)
    signals::eventually("no session of the test holds an advisory lock", || async {
        let held: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
             WHERE l.locktype = 'advisory' \
             AND a.application_name = current_setting('application_name')",
        )
        .fetch_one(h.idem.pool())
        .await
        .unwrap();
        held == 0
    })
    .await;
    writes_go_on_after_a_dropped_duplicate(&h, &single).await;
}

async fn duplicate_past_the_wait_is_in_flight<DB: TestDb>() {
    let h =
        Harness::<DB>::with_config(Config::default().in_flight_wait(Duration::from_millis(300)))
            .await;
    let k = Arc::new(key("k-slow"));
    let f = fp(&json!({}));
    let (first, release) = hold_first::<DB>(&h.idem, &k, f, 201).await;
    let call = global(&k);
    let err = h
        .idem
        .execute(&SPEC, call, ok::<DB>("dup"))
        .await
        .unwrap_err();
    assert_gave_up_waiting::<DB>(&err);
    release.send(()).unwrap();
    let first = first.await.unwrap();
    assert_eq!(first.kind, OutcomeKind::Executed);
    let replay = h.idem.execute(&SPEC, call, ok::<DB>("late")).await.unwrap();
    assert_eq!(replay.kind, OutcomeKind::Replayed);
    assert_eq!(replay.record.body, first.record.body);
    assert_eq!(h.effects().await, 1);
}

async fn sweeper_deletes_only_expired_keys<DB: TestDb>() {
    const SHORT: OperationSpec = OperationSpec::new("short:v1").ttl(Duration::from_secs(10));
    let h = Harness::<DB>::new().await;
    let f = fp(&json!({}));
    for i in 0..7 {
        let k = key(&format!("old-{i}"));
        let call = Call {
            scope: "global",
            key: &k,
            fingerprint: f,
            request: None,
        };
        h.idem.execute(&SHORT, call, ok::<DB>("old")).await.unwrap();
    }
    h.advance(Duration::from_secs(11));
    for i in 0..3 {
        let k = key(&format!("new-{i}"));
        let call = Call {
            scope: "global",
            key: &k,
            fingerprint: f,
            request: None,
        };
        h.idem.execute(&SHORT, call, ok::<DB>("new")).await.unwrap();
    }
    // With a grace period longer than the expiry, nothing is old enough yet.
    assert_eq!(
        h.idem
            .sweep_expired(Duration::from_secs(60), 2, Duration::ZERO)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        h.idem
            .sweep_expired(Duration::ZERO, 2, Duration::from_millis(1))
            .await
            .unwrap(),
        7
    );
    assert_eq!(h.keys().await, 3);
    // A swept key is unknown again: it runs anew.
    let k = key("old-0");
    let call = global(&k);
    let again = h
        .idem
        .execute(&SHORT, call, ok::<DB>("again"))
        .await
        .unwrap();
    assert_eq!(again.kind, OutcomeKind::Executed);
}

/// A duplicate that waited past `in_flight_wait` for the first execution: PostgreSQL knows
/// it waited for the key (`409` in-flight); SQLite only that it waited for the database's
/// write lock, which any writer may hold (`503` store-busy). Both with `Retry-After`.
fn assert_gave_up_waiting<DB: TestDb>(err: &Error) {
    if <DB as idem_runtime::sqlx::Database>::NAME == "SQLite" {
        assert!(matches!(err, Error::StoreBusy(_)), "{err:?}");
        assert_eq!(err.status(), 503);
        assert_eq!(err.problem().type_uri(), "urn:idem:problem:store-busy");
    } else {
        match err {
            Error::InFlight { retry_after } => assert_eq!(*retry_after, Duration::from_secs(1)),
            other => panic!("expected InFlight, got {other:?}"),
        }
        assert_eq!(err.status(), 409);
    }
}

async fn failed_commit_answers_503_and_keeps_nothing<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let k = key("k-commit");
    let call = global(&k);
    let err = h
        .idem
        .execute(
            &SPEC,
            call,
            work_fn::<DB, _>(|tx| {
                Box::pin(async move {
                    DB::write_effect(&mut **tx, "lost").await;
                    DB::violate_at_commit(&mut **tx).await;
                    Record::json(StatusCode::CREATED, &json!({})).unwrap()
                })
            }),
        )
        .await
        .unwrap_err();
    // The database refused the commit: nothing committed, and idem knows it.
    assert!(matches!(err, Error::Store(_)), "{err:?}");
    assert_eq!(err.status(), 503);
    assert_eq!(
        err.problem().type_uri(),
        "urn:idem:problem:store-unavailable"
    );
    let detail = err.problem().detail().unwrap().to_owned();
    assert!(detail.contains("nothing was committed"), "{detail}");
    assert_eq!(h.effects().await, 0);
    assert_eq!(h.keys().await, 0);
    // The advice holds: the retry with the same key executes once.
    let retry = h
        .idem
        .execute(&SPEC, call, ok::<DB>("retry"))
        .await
        .unwrap();
    assert_eq!(retry.kind, OutcomeKind::Executed);
    assert_eq!(h.effects().await, 1);
}

async fn unkeyed_work_runs_each_time<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    for _ in 0..2 {
        let outcome = h.idem.execute_unkeyed(ok::<DB>("unkeyed")).await.unwrap();
        assert_eq!(outcome.kind, OutcomeKind::Executed);
    }
    let failed = h
        .idem
        .execute_unkeyed(work::<DB>("bad", 422))
        .await
        .unwrap();
    assert_eq!(failed.kind, OutcomeKind::Failed);
    assert_eq!(h.effects().await, 2);
    assert_eq!(h.keys().await, 0);
}

#[cfg(feature = "failpoints")]
async fn injected_fault_rolls_back<DB: TestDb>(point: idem_runtime::failpoint::FailPoint) {
    let h = Harness::<DB>::new().await;
    let k = key("k-fault");
    let call = global(&k);
    h.idem
        .fail_at(point, idem_runtime::failpoint::FailAction::Error);
    let err = h
        .idem
        .execute(&SPEC, call, ok::<DB>("faulty"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Injected(_)), "{err:?}");
    assert_eq!(h.effects().await, 0, "business write rolled back");
    assert_eq!(h.keys().await, 0, "key row rolled back");
    let retry = h
        .idem
        .execute(&SPEC, call, ok::<DB>("retry"))
        .await
        .unwrap();
    assert_eq!(retry.kind, OutcomeKind::Executed);
    let replay = h
        .idem
        .execute(&SPEC, call, ok::<DB>("replay"))
        .await
        .unwrap();
    assert_eq!(replay.kind, OutcomeKind::Replayed);
    assert_eq!(h.effects().await, 1);
}

#[cfg(feature = "failpoints")]
async fn fault_after_business_write<DB: TestDb>() {
    injected_fault_rolls_back::<DB>(idem_runtime::failpoint::FailPoint::AfterHandler).await;
}

#[cfg(feature = "failpoints")]
async fn fault_after_response_write<DB: TestDb>() {
    injected_fault_rolls_back::<DB>(idem_runtime::failpoint::FailPoint::AfterRecord).await;
}

idem_testkit::on_every_store!(
    sequential_replay,
    awkward_values_round_trip,
    replay_survives_a_new_process,
    mismatch_runs_nothing,
    mismatch_names_the_fields,
    scopes_and_operations_are_independent,
    failure_is_rolled_back_and_frees_the_key,
    client_errors_can_be_stored_without_their_writes,
    panic_rolls_back,
    either_first_step_gives_the_same_answers,
    expired_key_is_gone,
    expired_key_reexecutes,
    concurrent_duplicates_execute_once,
    waiting_duplicate_runs_when_the_first_rolls_back,
    duplicate_past_the_wait_is_in_flight,
    waiting_duplicate_never_runs_and_replays,
    simultaneous_duplicates_never_run_twice,
    spread_duplicates_never_run_twice,
    connection_is_clean_after_giving_up,
    dropped_duplicate_leaves_no_lock,
    dropped_execution_leaves_its_connection_usable,
    sweeper_deletes_only_expired_keys,
    unkeyed_work_runs_each_time,
    // Not on MySQL: it checks no constraint at commit, so nothing makes a `COMMIT` fail on
    // purpose.
    failed_commit_answers_503_and_keeps_nothing [postgres, sqlite],
);

#[cfg(feature = "failpoints")]
mod faults {
    use super::*;
    idem_testkit::on_every_store!(fault_after_business_write, fault_after_response_write);
}

/// A pool the application opened itself: the timeouts are set per transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pool_from_the_application_still_bounds_lock_waits() {
    use idem_runtime::sqlx::{PgPool, Postgres};
    let h = Harness::<Postgres>::new().await;
    let config = Config::default().in_flight_wait(Duration::from_millis(300));
    let idem =
        idem_runtime::Idem::<Postgres>::from_pool(PgPool::connect(&h.url).await.unwrap(), config);
    let k = Arc::new(key("k-own-pool"));
    let f = fp(&json!({}));
    let (first, release) = hold_first::<Postgres>(&idem, &k, f, 201).await;
    let call = global(&k);
    let err = idem
        .execute(&SPEC, call, ok::<Postgres>("dup"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InFlight { .. }), "{err:?}");
    release.send(()).unwrap();
    assert_eq!(first.await.unwrap().kind, OutcomeKind::Executed);
    assert_eq!(h.effects().await, 1);
}

/// idem's timeouts are its transactions' own (`SET LOCAL`): the application's queries on
/// the pool idem opened keep the database's (here: none), and a lock the application's own
/// query waits for is not cut short by idem's `in_flight_wait`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_timeouts_bind_only_idems_transactions() {
    use idem_runtime::sqlx::{self, Postgres};
    let h = Harness::<Postgres>::with_config(
        Config::default()
            .in_flight_wait(Duration::from_millis(300))
            .statement_timeout(Duration::from_secs(7)),
    )
    .await;
    let show = |name: &'static str| sqlx::query_scalar::<_, String>(name);
    let pool = h.idem.pool();
    assert_eq!(
        show("SHOW lock_timeout").fetch_one(pool).await.unwrap(),
        "0"
    );
    assert_eq!(
        show("SHOW statement_timeout")
            .fetch_one(pool)
            .await
            .unwrap(),
        "0"
    );
    let k = key("k-settings");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let inside = Arc::clone(&seen);
    h.idem
        .execute(
            &SPEC,
            global(&k),
            work_fn::<Postgres, _>(move |tx| {
                Box::pin(async move {
                    for name in ["SHOW lock_timeout", "SHOW statement_timeout"] {
                        let value: String =
                            sqlx::query_scalar(name).fetch_one(&mut **tx).await.unwrap();
                        inside.lock().unwrap().push(value);
                    }
                    Record::json(StatusCode::CREATED, &json!({})).unwrap()
                })
            }),
        )
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), ["300ms", "7s"]);
    // After idem's transaction, on the same pooled connections: the defaults again.
    for _ in 0..4 {
        assert_eq!(
            show("SHOW lock_timeout").fetch_one(pool).await.unwrap(),
            "0"
        );
    }
    // An application query waiting for a lock longer than `in_flight_wait` is not cut short.
    sqlx::query("CREATE TABLE app_table (v int)")
        .execute(pool)
        .await
        .unwrap();
    let mut locker = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE app_table")
        .execute(&mut *locker)
        .await
        .unwrap();
    let reader = {
        let pool = pool.clone();
        tokio::spawn(async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM app_table")
                .fetch_one(&pool)
                .await
        })
    };
    signals::eventually("the reader waits for the table's lock", || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND application_name = current_setting('application_name')",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        waiting == 1
    })
    .await;
    // Still waiting well past `in_flight_wait` (a wait for wall-clock time).
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!reader.is_finished(), "cut short: {:?}", reader.await);
    locker.rollback().await.unwrap();
    assert_eq!(reader.await.unwrap().unwrap(), 0);
}

/// Pools do not ping a connection that was busy a moment ago: killed under the pool, such a
/// connection is found dead by the key's lookup, which drops it and looks up again on another
/// (finally a new one). No request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_dead_pooled_connections_cost_no_request() {
    use idem_runtime::sqlx::{self, PgPool, Postgres};
    let h = Harness::<Postgres>::new().await;
    let k = key("k-dead");
    let call = global(&k);
    h.idem
        .execute(&SPEC, call, ok::<Postgres>("first"))
        .await
        .unwrap();
    let application: String = sqlx::query_scalar("SHOW application_name")
        .fetch_one(h.idem.pool())
        .await
        .unwrap();
    assert!(application.starts_with("idem_test_"), "{application}");
    let admin = PgPool::connect(&idem_testkit::harness::postgres_url())
        .await
        .unwrap();
    let killed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE application_name = $1) t",
    )
    .bind(&application)
    .fetch_one(&admin)
    .await
    .unwrap();
    assert!(killed >= 1);
    signals::eventually("the killed sessions are gone", || async {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
                .bind(&application)
                .fetch_one(&admin)
                .await
                .unwrap();
        left == 0
    })
    .await;
    // Every pooled connection is dead: the lookup finds out, closes them and goes on with a
    // new one. No request fails.
    for _ in 0..3 {
        let outcome = h
            .idem
            .execute(&SPEC, call, ok::<Postgres>("again"))
            .await
            .unwrap();
        assert_eq!(outcome.kind, OutcomeKind::Replayed);
    }
    assert_eq!(h.effects().await, 1);
}

/// A first execution's merged `INSERT …; COMMIT; BEGIN` leaves its connection in an empty
/// transaction whose `ROLLBACK` waits for the connection's next statement (the next
/// execution's `BEGIN` takes it along). A connection no execution takes has it sent within
/// about two seconds: no session of idem's stays idle in a transaction. The connection then
/// serves the next executions as any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_no_session_stays_idle_in_a_transaction() {
    use idem_runtime::sqlx::{self, PgPool, Postgres};
    let h = Harness::<Postgres>::new().await;
    let application: String = sqlx::query_scalar("SHOW application_name")
        .fetch_one(h.idem.pool())
        .await
        .unwrap();
    let admin = PgPool::connect(&idem_testkit::harness::postgres_url())
        .await
        .unwrap();
    let idle_in_transaction = || async {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE application_name = $1 AND state = 'idle in transaction'",
        )
        .bind(&application)
        .fetch_one(&admin)
        .await
        .unwrap();
        n
    };
    let first = key("k-idle-1");
    let outcome = h
        .idem
        .execute(&SPEC, global(&first), ok::<Postgres>("first"))
        .await
        .unwrap();
    assert_eq!(outcome.kind, OutcomeKind::Executed);
    let returned = std::time::Instant::now();
    assert_eq!(idle_in_transaction().await, 1, "the ROLLBACK waits");
    signals::eventually("the empty transaction is rolled back", || async {
        idle_in_transaction().await == 0
    })
    .await;
    let waited = returned.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "rolled back after {waited:?}"
    );
    let second = key("k-idle-2");
    let outcome = h
        .idem
        .execute(&SPEC, global(&second), ok::<Postgres>("second"))
        .await
        .unwrap();
    assert_eq!(outcome.kind, OutcomeKind::Executed);
    let outcome = h
        .idem
        .execute(&SPEC, global(&first), ok::<Postgres>("again"))
        .await
        .unwrap();
    assert_eq!(outcome.kind, OutcomeKind::Replayed);
    assert_eq!(h.effects().await, 2);
}

/// A server that ends sessions idle in a transaction sooner than idem sends the `ROLLBACK` a
/// first execution left queued (`idle_in_transaction_session_timeout`) costs a connection,
/// not a request: the next use of the ended session is a stale connection, and the lookup
/// goes on with another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_idle_in_transaction_timeout_costs_no_request() {
    use idem_runtime::sqlx::{PgPool, Postgres, postgres::PgConnectOptions};
    let h = Harness::<Postgres>::new().await;
    // The setting for this pool's sessions alone (the database is shared with other tests).
    let options = h
        .url
        .parse::<PgConnectOptions>()
        .unwrap()
        .options([("idle_in_transaction_session_timeout", "100")]);
    let idem = idem_runtime::Idem::<Postgres>::from_pool(
        PgPool::connect_with(options).await.unwrap(),
        Config::default(),
    );
    for i in 0..3 {
        let k = key(&format!("k-ended-{i}"));
        let outcome = idem
            .execute(&SPEC, global(&k), ok::<Postgres>("first"))
            .await
            .unwrap();
        assert_eq!(outcome.kind, OutcomeKind::Executed);
        // The session ends while its empty transaction waits for the `ROLLBACK`.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let outcome = idem
            .execute(&SPEC, global(&k), ok::<Postgres>("again"))
            .await
            .unwrap();
        assert_eq!(outcome.kind, OutcomeKind::Replayed);
    }
    assert_eq!(h.effects().await, 3);
}

/// A unique constraint of the application's that is only checked at `COMMIT` refuses the
/// merged `INSERT …; COMMIT`: a refused commit (`503`, nothing committed), not the key's row
/// existing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_deferred_unique_violation_is_a_failed_commit() {
    use idem_runtime::sqlx::{self, Postgres};
    let h = Harness::<Postgres>::new().await;
    sqlx::query("CREATE TABLE deferred_unique (v INTEGER UNIQUE DEFERRABLE INITIALLY DEFERRED)")
        .execute(h.idem.pool())
        .await
        .unwrap();
    let k = key("k-deferred-unique");
    let call = global(&k);
    let err = h
        .idem
        .execute(
            &SPEC,
            call,
            work_fn::<Postgres, _>(|tx| {
                Box::pin(async move {
                    Postgres::write_effect(&mut **tx, "lost").await;
                    for _ in 0..2 {
                        sqlx::query("INSERT INTO deferred_unique (v) VALUES (1)")
                            .execute(&mut **tx)
                            .await
                            .unwrap();
                    }
                    Record::json(StatusCode::CREATED, &json!({})).unwrap()
                })
            }),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Store(_)), "{err:?}");
    assert_eq!(err.status(), 503);
    assert_eq!(h.effects().await, 0);
    assert_eq!(h.keys().await, 0);
}

/// The merged `INSERT`'s literals read the same with `standard_conforming_strings = off`
/// (a pool the application set up that way): backslashes and quotes come back byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_literals_hold_without_standard_conforming_strings() {
    use idem_runtime::sqlx::postgres::PgPoolOptions;
    use idem_runtime::sqlx::{Executor as _, Postgres};
    let h = Harness::<Postgres>::new().await;
    let pool = PgPoolOptions::new()
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET standard_conforming_strings = off")
                    .await?;
                Ok(())
            })
        })
        .connect(&h.url)
        .await
        .unwrap();
    let idem = idem_runtime::Idem::<Postgres>::from_pool(pool, Config::default());
    let k = key(r"k\'\\x27");
    let call = Call {
        scope: r"tenant:a\'b",
        key: &k,
        fingerprint: fp(&json!({})),
        request: None,
    };
    let body: &'static [u8] = b"\\x00\\\\' \"\x00\xff";
    let run = || {
        work_fn::<Postgres, _>(move |tx| {
            Box::pin(async move {
                Postgres::write_effect(&mut **tx, "scs").await;
                raw_record(body)
            })
        })
    };
    let first = idem.execute(&SPEC, call, run()).await.unwrap();
    assert_eq!(first.kind, OutcomeKind::Executed);
    let again = idem.execute(&SPEC, call, run()).await.unwrap();
    assert_eq!(again.kind, OutcomeKind::Replayed);
    assert_eq!(again.record.body.as_ref(), body);
    let stored = idem
        .lookup(KeyRef {
            scope: call.scope,
            operation: SPEC.id,
            key: k.as_str(),
        })
        .await
        .unwrap();
    assert!(stored.is_some());
    assert_eq!(h.effects().await, 1);
}

/// A transaction pooler in front of PostgreSQL (`PGBOUNCER_URL`) is found at connect when
/// `Config::transaction_pooler` is not set: two connections met one server session. On the
/// server itself two connections are two sessions, and nothing is refused.
mod pooler {
    mod postgres {
        use idem_runtime::sqlx::Postgres;
        use idem_runtime::{Config, Idem};
        use idem_testkit::harness::{TestBackend as _, pooled};

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn found_without_the_switch() {
            let url = Postgres::fresh_url().await;
            let unswitched = Idem::<Postgres>::connect(&url, Config::default()).await;
            if pooled().is_none() {
                unswitched.unwrap().close().await;
                return;
            }
            match unswitched {
                Err(idem_runtime::sqlx::Error::Configuration(error)) => {
                    assert!(error.to_string().contains("transaction pooler"), "{error}");
                }
                other => panic!("connected through the pooler unswitched: {other:?}"),
            }
            let switched = Config::default().transaction_pooler(true);
            let idem = Idem::<Postgres>::connect(&url, switched).await.unwrap();
            idem.migrate().await.unwrap();
            idem.close().await;
        }
    }
}
