//! Staged mode on real databases: reservation, journaled steps, leases, takeover, fencing,
//! outcomes and the reconciler. Every case runs on every store, and the protocol's cases on
//! PostgreSQL with attempts holding their number too.
#![allow(clippy::unwrap_used)]

mod common;
mod signals;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use common::{Harness, TestDb};
use idem_runtime::protocol::{OutcomeKind, Record};
use idem_runtime::spec::{InFlightPolicy, Mode, OperationSpec, Scope, ScopeKind};
use idem_runtime::staged::{Attempt, Finished, Reconciler, StepError};
use idem_runtime::store::{Arg, KeyRef, KeyStatus, Keyring, Sealed};
use idem_runtime::{Config, Error, IdempotencyKey};
use serde_json::json;

/// An hour: no heartbeat fires during a test; leases run out only when the test's clock
/// is moved past them.
const LEASE: Duration = Duration::from_secs(3600);

const SPEC: OperationSpec = OperationSpec::new("pay:v1").mode(Mode::Staged).lease(LEASE);

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

fn key_ref(k: &str) -> KeyRef<'_> {
    KeyRef {
        scope: "tenant:acme",
        operation: SPEC.id,
        key: k,
    }
}

/// A stand-in for a payment provider that deduplicates on the provider key: every call is
/// counted, charges are created once per provider key.
#[derive(Default)]
struct Provider {
    calls: AtomicUsize,
    charges: Mutex<Vec<String>>,
}

impl Provider {
    fn charge(&self, provider_key: &str) -> String {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut charges = self.charges.lock().unwrap();
        if !charges.iter().any(|k| k == provider_key) {
            charges.push(provider_key.to_owned());
        }
        format!("ch_{provider_key}")
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn charges(&self) -> usize {
        self.charges.lock().unwrap().len()
    }
}

/// What the work does after charging.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum After {
    Finish,
    /// Stops with a retryable failure after the charge is recorded.
    Interrupt,
    /// Panics inside the charge step, after the provider call and before the recording.
    PanicBeforeRecording,
    /// Waits for the gate before finishing.
    Wait,
}

struct Work {
    provider: Provider,
    after: Mutex<After>,
    gate: tokio::sync::Notify,
    runs: AtomicUsize,
    keys_seen: Mutex<Vec<String>>,
}

impl Work {
    fn new(after: After) -> Arc<Self> {
        Arc::new(Self {
            provider: Provider::default(),
            after: Mutex::new(after),
            gate: tokio::sync::Notify::new(),
            runs: AtomicUsize::new(0),
            keys_seen: Mutex::new(Vec::new()),
        })
    }

    fn set(&self, after: After) {
        *self.after.lock().unwrap() = after;
    }

    fn after(&self) -> After {
        *self.after.lock().unwrap()
    }
}

async fn pay<DB: TestDb>(
    work: Arc<Work>,
    attempt: Attempt<DB>,
    amount: u64,
) -> Result<Finished, StepError> {
    work.runs.fetch_add(1, Ordering::SeqCst);
    let w = &work;
    let charge: String = attempt
        .step("charge", async |provider_key| {
            w.keys_seen.lock().unwrap().push(provider_key.clone());
            let charge = w.provider.charge(&provider_key);
            if w.after() == After::PanicBeforeRecording {
                panic!("died between the provider's answer and the recording");
            }
            if amount == 402 {
                let record =
                    Record::json(StatusCode::PAYMENT_REQUIRED, &json!({"declined": true})).unwrap();
                return Err(StepError::permanent(record));
            }
            Ok(charge)
        })
        .await?;
    match work.after() {
        After::Interrupt => return Err(StepError::retryable("the network blinked")),
        After::Wait => work.gate.notified().await,
        _ => {}
    }
    attempt
        .finish(async |tx| {
            DB::write_effect(&mut **tx, "payment").await;
            Ok(Record::json(
                StatusCode::CREATED,
                &json!({ "charge": charge, "amount": amount }),
            )
            .unwrap())
        })
        .await
}

async fn run<DB: TestDb>(
    idem: &idem_runtime::Idem<DB>,
    spec: &OperationSpec,
    work: &Arc<Work>,
    k: &IdempotencyKey,
    amount: u64,
) -> Result<idem_runtime::protocol::Outcome, Error> {
    let work = Arc::clone(work);
    let acme = Scope::new(ScopeKind::Tenant, Some("acme")).unwrap();
    idem.staged(spec, &acme, k, &amount, move |attempt| {
        pay::<DB>(work, attempt, amount)
    })
    .await
}

/// Waits until the charge of key `k` is recorded.
async fn recorded<DB: TestDb>(h: &Harness<DB>, k: &str) {
    while h
        .idem
        .lookup(key_ref(k))
        .await
        .unwrap()
        .and_then(|row| row.recovery_point)
        .is_none()
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The reservation commits before the work runs; the key is processing with a live lease
/// while it runs, and a duplicate meanwhile gets 409 without running anything.
async fn reservation_commits_at_once<DB: TestDb, H: Holding>() {
    let h = Harness::<DB>::with_config(H::config()).await;
    let work = Work::new(After::Wait);
    let k = key("p-1");
    let first = {
        let (idem, work, k) = (h.idem.clone(), Arc::clone(&work), k.clone());
        tokio::spawn(async move { run(&idem, &SPEC, &work, &k, 100).await })
    };
    recorded(&h, "p-1").await;
    let row = h.idem.lookup(key_ref("p-1")).await.unwrap().unwrap();
    assert_eq!(row.status, KeyStatus::Processing);
    assert_eq!(row.attempt, 1);
    assert_eq!(row.recovery_point.as_deref(), Some("charge"));
    assert!(row.locked_until_ms.unwrap() > h.idem.now_millis());
    let duplicate = run(&h.idem, &SPEC, &work, &k, 100).await;
    assert!(
        matches!(duplicate, Err(Error::InFlight { .. })),
        "{duplicate:?}"
    );
    work.gate.notify_one();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.kind, OutcomeKind::Executed);
    assert_eq!(first.record.status, 201);
    let replay = run(&h.idem, &SPEC, &work, &k, 100).await.unwrap();
    assert_eq!(replay.kind, OutcomeKind::Replayed);
    assert_eq!(replay.record.body, first.record.body);
    assert_eq!(work.runs.load(Ordering::SeqCst), 1);
    assert_eq!(work.provider.calls(), 1);
    assert_eq!(h.effects().await, 1);
    let other = run(&h.idem, &SPEC, &work, &k, 101).await;
    assert!(matches!(other, Err(Error::Mismatch(_))), "{other:?}");
}

/// With `on_in_flight = wait`, a duplicate waits for the running attempt and answers with
/// its response, without running anything.
async fn waiting_duplicate_gets_the_response<DB: TestDb, H: Holding>() {
    let h = Harness::<DB>::with_config(H::config().in_flight_wait(Duration::from_secs(20))).await;
    let spec = SPEC.on_in_flight(InFlightPolicy::Wait);
    let work = Work::new(After::Wait);
    let k = key("p-wait");
    let first = {
        let (idem, work, k) = (h.idem.clone(), Arc::clone(&work), k.clone());
        tokio::spawn(async move { run(&idem, &spec, &work, &k, 100).await })
    };
    while work.provider.calls() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lookups = signals::Lookups::default();
    let mut duplicate = {
        let (idem, work, k) = (h.idem.clone(), Arc::clone(&work), k.clone());
        tokio::spawn(lookups.watch(async move { run(&idem, &spec, &work, &k, 100).await }))
    };
    // It found the first processing, paused and looked again: it waits rather than answering.
    tokio::select! {
        () = lookups.until("processing", 2) => {}
        answered = &mut duplicate => panic!("the duplicate answered at once: {answered:?}"),
    }
    assert!(!duplicate.is_finished());
    work.gate.notify_one();
    let first = first.await.unwrap().unwrap();
    let duplicate = duplicate.await.unwrap().unwrap();
    assert_eq!(duplicate.kind, OutcomeKind::Replayed);
    assert_eq!(duplicate.record.body, first.record.body);
    assert_eq!(work.runs.load(Ordering::SeqCst), 1);
}

/// A retryable failure answers 503 with Retry-After and keeps the recorded step: the retry
/// resumes after it, and the provider is called once.
async fn retryable_failure_resumes_after_recorded_steps<DB: TestDb, H: Holding>() {
    let h = Harness::<DB>::with_config(H::config()).await;
    let work = Work::new(After::Interrupt);
    let k = key("p-2");
    let first = run(&h.idem, &SPEC, &work, &k, 100).await;
    let Err(Error::Interrupted { retry_after, .. }) = first else {
        panic!("{first:?}")
    };
    assert_eq!(retry_after, Config::default().retry_after);
    assert_eq!(
        Error::Interrupted {
            reason: String::new(),
            retry_after
        }
        .status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    let row = h.idem.lookup(key_ref("p-2")).await.unwrap().unwrap();
    assert_eq!(row.status, KeyStatus::Stuck, "released: the lease ends now");
    work.set(After::Finish);
    let retry = run(&h.idem, &SPEC, &work, &k, 100).await.unwrap();
    assert_eq!(retry.kind, OutcomeKind::Executed);
    assert_eq!(work.runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        work.provider.calls(),
        1,
        "the recorded step did not run again"
    );
    let row = h.idem.lookup(key_ref("p-2")).await.unwrap().unwrap();
    assert_eq!(row.status, KeyStatus::Completed);
    assert_eq!(row.attempt, 2);
    assert_eq!(h.effects().await, 1);
}

/// An attempt that dies between the provider's answer and the recording: the next attempt
/// calls the provider again with the same provider key, and the provider charges once.
async fn unrecorded_step_runs_again_with_the_same_provider_key<DB: TestDb, H: Holding>() {
    let h = Harness::<DB>::with_config(H::config()).await;
    let work = Work::new(After::PanicBeforeRecording);
    let k = key("p-3");
    let first = run(&h.idem, &SPEC, &work, &k, 100).await;
    assert!(matches!(first, Err(Error::Panicked)), "{first:?}");
    work.set(After::Finish);
    let retry = run(&h.idem, &SPEC, &work, &k, 100).await.unwrap();
    assert_eq!(retry.kind, OutcomeKind::Executed);
    let seen = work.keys_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], seen[1], "same provider key on both attempts");
    assert_eq!(work.provider.charges(), 1);
    assert_eq!(h.effects().await, 1);
}

/// A permanent failure is stored and replayed; nothing else is written.
async fn permanent_failure_is_stored_and_replayed<DB: TestDb, H: Holding>() {
    let h = Harness::<DB>::with_config(H::config()).await;
    let work = Work::new(After::Finish);
    let k = key("p-402");
    let first = run(&h.idem, &SPEC, &work, &k, 402).await.unwrap();
    assert_eq!(first.kind, OutcomeKind::Executed);
    assert_eq!(first.record.status, 402);
    let again = run(&h.idem, &SPEC, &work, &k, 402).await.unwrap();
    assert_eq!(again.kind, OutcomeKind::Replayed);
    assert_eq!(again.record.status, 402);
    assert_eq!(work.runs.load(Ordering::SeqCst), 1);
    assert_eq!(h.effects().await, 0);
}

/// An attempt whose lease ran out is taken over by a retry; the old attempt's writes are
/// refused (fenced) when it wakes up, and its client is told the final answer (the new
/// attempt's response).
async fn takeover_fences_the_old_attempt<DB: TestDb, H: Holding>() {
    let h = Harness::<DB>::with_config(H::config()).await;
    let work = Work::new(After::Wait);
    let k = key("p-4");
    let old = {
        let (idem, work, k) = (h.idem.clone(), Arc::clone(&work), k.clone());
        tokio::spawn(async move { run(&idem, &SPEC, &work, &k, 100).await })
    };
    recorded(&h, "p-4").await;
    h.advance(LEASE + Duration::from_secs(1));
    let row = h.idem.lookup(key_ref("p-4")).await.unwrap().unwrap();
    assert_eq!(row.status, KeyStatus::Stuck);
    // The new attempt does not wait at the gate.
    let fresh = Work::new(After::Finish);
    let new = run(&h.idem, &SPEC, &fresh, &k, 100).await.unwrap();
    assert_eq!(new.kind, OutcomeKind::Executed);
    assert_eq!(fresh.provider.calls(), 0, "the recorded charge was reused");
    work.gate.notify_one();
    let old = old.await.unwrap().unwrap();
    assert_eq!(old.kind, OutcomeKind::Replayed);
    assert_eq!(old.record.body, new.record.body);
    assert_eq!(
        h.effects().await,
        1,
        "the old attempt's writes were refused"
    );
    let row = h.idem.lookup(key_ref("p-4")).await.unwrap().unwrap();
    assert_eq!(row.attempt, 2);
    assert_eq!(
        Record::from_stored(row.response.unwrap()).body,
        new.record.body
    );
}

/// A duplicate of an attempt that holds the key is told to come back when the attempt's lease
/// ends (rounded up to whole seconds), not after the configured pause: a retry any sooner
/// would be refused too. The attempt's process dies (its task aborted, its lease left
/// running); a retry at the time said takes the key over and succeeds.
async fn in_flight_says_when_the_lease_ends<DB: TestDb, H: Holding>() {
    let h = Harness::<DB>::with_config(H::config()).await;
    let work = Work::new(After::Wait);
    let k = key("p-lease");
    let first = {
        let (idem, work, k) = (h.idem.clone(), Arc::clone(&work), k.clone());
        tokio::spawn(async move { run(&idem, &SPEC, &work, &k, 100).await })
    };
    recorded(&h, "p-lease").await;
    let row = h.idem.lookup(key_ref("p-lease")).await.unwrap().unwrap();
    let left = row.locked_until_ms.unwrap() - h.idem.now_millis();
    let duplicate = run(&h.idem, &SPEC, &work, &k, 100).await;
    let Err(Error::InFlight { retry_after }) = duplicate else {
        panic!("{duplicate:?}");
    };
    let said = i64::try_from(retry_after.as_millis()).unwrap();
    assert!(
        said >= left && said < left + 1000,
        "{said} ms for {left} ms left"
    );
    first.abort();
    let _ = first.await;
    h.advance(retry_after);
    let fresh = Work::new(After::Finish);
    let retry = run(&h.idem, &SPEC, &fresh, &k, 100).await.unwrap();
    assert_eq!(retry.kind, OutcomeKind::Executed);
    assert_eq!(fresh.provider.calls(), 0, "the recorded charge was reused");
    assert_eq!(h.effects().await, 1);
}

/// Two processes race to take over one expired lease: one wins and runs, the other gets
/// 409 and runs nothing.
async fn one_of_two_racing_takeovers_wins<DB: TestDb, H: Holding>() {
    let h = Harness::<DB>::with_config(H::config()).await;
    let work = Work::new(After::Interrupt);
    let k = key("p-5");
    assert!(run(&h.idem, &SPEC, &work, &k, 100).await.is_err());
    work.set(After::Wait);
    let other = h.reopen(H::config()).await;
    let (answers, mut answered) = tokio::sync::mpsc::unbounded_channel();
    for idem in [h.idem.clone(), other] {
        let (work, k, answers) = (Arc::clone(&work), k.clone(), answers.clone());
        tokio::spawn(async move { answers.send(run(&idem, &SPEC, &work, &k, 100).await) });
    }
    // One racer runs and waits at the gate; the gate opens once the other answered.
    let first = tokio::time::timeout(signals::DEADLINE, answered.recv())
        .await
        .expect("a racer answers while the other runs");
    work.gate.notify_one();
    let second = answered.recv().await;
    let mut executed = 0;
    let mut in_flight = 0;
    for answer in [first, second] {
        match answer.unwrap() {
            Ok(outcome) if outcome.kind == OutcomeKind::Executed => executed += 1,
            Err(Error::InFlight { .. }) => in_flight += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((executed, in_flight), (1, 1));
    assert_eq!(
        work.runs.load(Ordering::SeqCst),
        2,
        "first attempt + one takeover"
    );
    assert_eq!(h.effects().await, 1);
}

/// The reconciler resumes a stuck key with its stored request, with nobody retrying.
async fn reconciler_resumes_stuck_keys<DB: TestDb, H: Holding>() {
    let h = Harness::<DB>::with_config(H::config()).await;
    let work = Work::new(After::Interrupt);
    let k = key("p-6");
    assert!(run(&h.idem, &SPEC, &work, &k, 250).await.is_err());
    work.set(After::Finish);
    let resumer = Arc::clone(&work);
    let reconciler = Reconciler::new(h.idem.clone()).resumable(SPEC, move |attempt, amount| {
        pay::<DB>(Arc::clone(&resumer), attempt, amount)
    });
    let done = reconciler.run_once().await.unwrap();
    assert_eq!((done.stuck, done.completed), (1, 1));
    let row = h.idem.lookup(key_ref("p-6")).await.unwrap().unwrap();
    assert_eq!(row.status, KeyStatus::Completed);
    let body: serde_json::Value = serde_json::from_slice(&row.response.unwrap().body).unwrap();
    assert_eq!(body["amount"], 250, "resumed with the stored request");
    assert_eq!(work.provider.calls(), 1);
    assert_eq!(h.effects().await, 1);
    // Nothing left to do.
    assert_eq!(reconciler.run_once().await.unwrap().stuck, 0);
    // The client's retry replays.
    let replay = run(&h.idem, &SPEC, &work, &k, 250).await.unwrap();
    assert_eq!(replay.kind, OutcomeKind::Replayed);
}

/// A staged key's stored request and journal are sealed (`Config::storage_keys`); a
/// reconciler without the key they are sealed under resumes nothing and changes neither; one
/// given a newer first key as well resumes the key with its stored request, and seals what it
/// writes under the newer key.
async fn reconciler_resumes_a_sealed_request<DB: TestDb, H: Holding>() {
    fn ring(ids: &[&str]) -> Keyring {
        Keyring::new(ids.iter().map(|id| (*id, [id.as_bytes()[1]; 32]))).unwrap()
    }
    let h = Harness::<DB>::with_config(H::config().storage_keys(ring(&["k1"]))).await;
    let work = Work::new(After::Interrupt);
    let k = key("p-sealed");
    assert!(run(&h.idem, &SPEC, &work, &k, 4242).await.is_err());
    work.set(After::Finish);
    let columns = async || {
        let p = if DB::DIALECT.positional { "?" } else { "$1" };
        let sql = format!(
            "SELECT request, journal, fingerprint FROM idempotency_keys WHERE idempotency_key = {p}"
        );
        let mut conn = h.idem.pool().acquire().await.unwrap();
        let row = DB::fetch_optional(&mut conn, &sql, &[Arg::Text("p-sealed")]).await;
        let row = row.unwrap().unwrap();
        let (request, journal) = (DB::text(&row, 0).unwrap(), DB::text(&row, 1).unwrap());
        (request, journal, DB::bytes(&row, 2).unwrap())
    };
    let (request, journal, fingerprint) = columns().await;
    for value in [request.as_bytes(), journal.as_bytes(), &fingerprint] {
        assert_eq!(Sealed::key_of(value), Some("k1"));
        assert!(!String::from_utf8_lossy(value).contains("4242"));
    }
    let reconciler = |idem| {
        let resumer = Arc::clone(&work);
        Reconciler::new(idem).resumable(SPEC, move |attempt, amount| {
            pay::<DB>(Arc::clone(&resumer), attempt, amount)
        })
    };
    // Without k1: nothing resumed, nothing charged, the request and journal as they were.
    let lacking = reconciler(h.reopen(H::config().storage_keys(ring(&["k2"]))).await);
    let done = lacking.run_once().await.unwrap();
    assert_eq!((done.stuck, done.completed), (1, 0));
    assert_eq!(work.provider.calls(), 1);
    assert_eq!(columns().await, (request, journal, fingerprint));
    // Its lease, taken for nothing, runs out; a reconciler with both keys resumes it.
    h.advance(LEASE + Duration::from_secs(1));
    let rotated = h
        .reopen(H::config().storage_keys(ring(&["k2", "k1"])))
        .await;
    let done = reconciler(rotated.clone()).run_once().await.unwrap();
    assert_eq!((done.stuck, done.completed), (1, 1));
    assert_eq!(
        work.provider.calls(),
        1,
        "the charge was journaled: not made again"
    );
    let row = rotated.lookup(key_ref("p-sealed")).await.unwrap().unwrap();
    let body: serde_json::Value = serde_json::from_slice(&row.response.unwrap().body).unwrap();
    assert_eq!(body["amount"], 4242, "resumed with the stored request");
    // What the resumed attempt wrote is sealed under the newer key.
    let mut conn = h.idem.pool().acquire().await.unwrap();
    let p = if DB::DIALECT.positional { "?" } else { "$1" };
    let sql = format!("SELECT response_headers FROM idempotency_keys WHERE idempotency_key = {p}");
    let row = DB::fetch_optional(&mut conn, &sql, &[Arg::Text("p-sealed")]).await;
    let headers = DB::text(&row.unwrap().unwrap(), 0).unwrap();
    drop(conn);
    assert_eq!(Sealed::key_of(headers.as_bytes()), Some("k2"));
    let replay = run(&rotated, &SPEC, &work, &k, 4242).await.unwrap();
    assert_eq!(replay.kind, OutcomeKind::Replayed);
    assert_eq!(h.effects().await, 1);
}

/// Operators on staged keys, through the key table the runtime hands out: a stuck key is
/// listed; `complete` makes retries replay the operator's response; `release` of a running
/// attempt fences it out and lets the next retry resume; every action is audited.
async fn operators_act_on_staged_keys<DB: TestDb, H: Holding>() {
    use idem_runtime::store::{Action, Actor, AuditFilter, KeyFilter, StoredResponse};
    let h = Harness::<DB>::with_config(H::config()).await;
    let table = h.idem.keys();
    let work = Work::new(After::Interrupt);
    let stuck = key("p-op-1");
    assert!(run(&h.idem, &SPEC, &work, &stuck, 100).await.is_err());
    let listed = table
        .list(
            &KeyFilter::new().status(KeyStatus::Stuck),
            h.idem.now_millis(),
        )
        .await
        .unwrap();
    assert_eq!(listed.keys.len(), 1);
    let row = &listed.keys[0];
    assert_eq!(row.key, "p-op-1");
    let response = StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body: bytes::Bytes::from_static(br#"{"settled":"by hand"}"#),
    };
    let actor = Actor::new("alice").reason("charge confirmed with the provider");
    table
        .act(
            row.key_ref(),
            row,
            &Action::Complete(response),
            &actor,
            h.idem.now_millis(),
        )
        .await
        .unwrap();
    let replay = run(&h.idem, &SPEC, &work, &stuck, 100).await.unwrap();
    assert_eq!(replay.kind, OutcomeKind::Replayed);
    assert_eq!(replay.record.body.as_ref(), br#"{"settled":"by hand"}"#);
    assert_eq!(
        work.runs.load(Ordering::SeqCst),
        1,
        "completed by hand, not run"
    );

    // A running attempt released by an operator: it is fenced out, the next retry resumes.
    work.set(After::Wait);
    let running = key("p-op-2");
    let first = {
        let (idem, work, k) = (h.idem.clone(), Arc::clone(&work), running.clone());
        tokio::spawn(async move { run(&idem, &SPEC, &work, &k, 100).await })
    };
    recorded(&h, "p-op-2").await;
    let row = table
        .get(key_ref("p-op-2"), h.idem.now_millis())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.status, KeyStatus::Processing);
    table
        .act(
            row.key_ref(),
            &row,
            &Action::Release,
            &Actor::new("bob").force(),
            h.idem.now_millis(),
        )
        .await
        .unwrap();
    let fresh = Work::new(After::Finish);
    let resumed = run(&h.idem, &SPEC, &fresh, &running, 100).await.unwrap();
    assert_eq!(resumed.kind, OutcomeKind::Executed);
    assert_eq!(
        fresh.provider.calls(),
        0,
        "resumed after the recorded charge"
    );
    work.gate.notify_one();
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.kind, OutcomeKind::Replayed, "the final answer");
    assert_eq!(first.record.body, resumed.record.body);
    assert_eq!(h.effects().await, 1);
    let audit = table.audit(&AuditFilter::new()).await.unwrap();
    let actions: Vec<(&str, &str)> = audit
        .iter()
        .map(|e| (e.operator.as_str(), e.action.as_str()))
        .collect();
    assert_eq!(actions, [("bob", "release"), ("alice", "complete")]);
}

/// One rule for a key's life: a key that is not final never expires. A stuck key whose TTL
/// ran out is resumed by the retry (never `410`), and the completed key's TTL counts from its
/// completion; the sweeper leaves a stuck key alone.
async fn a_key_that_is_not_final_never_expires<DB: TestDb, H: Holding>() {
    let h = Harness::<DB>::with_config(H::config()).await;
    let spec = SPEC.ttl(Duration::from_secs(7200));
    let work = Work::new(After::Interrupt);
    let k = key("p-ttl");
    assert!(matches!(
        run(&h.idem, &spec, &work, &k, 100).await,
        Err(Error::Interrupted { .. })
    ));
    // Past the TTL (two hours) and the lease (one hour) alike.
    h.advance(Duration::from_secs(3 * 3600));
    let row = h.idem.lookup(key_ref("p-ttl")).await.unwrap().unwrap();
    assert_eq!(row.status, KeyStatus::Stuck, "not expired: not final");
    assert_eq!(
        h.idem
            .sweep_expired(Duration::ZERO, 100, Duration::ZERO)
            .await
            .unwrap(),
        0,
        "the sweeper never deletes a key that is not final"
    );
    work.set(After::Finish);
    let done = run(&h.idem, &spec, &work, &k, 100).await.unwrap();
    assert_eq!(done.kind, OutcomeKind::Executed, "resumed, never 410");
    assert_eq!(work.provider.charges(), 1);
    let row = h.idem.lookup(key_ref("p-ttl")).await.unwrap().unwrap();
    let completed = row.completed_at_ms.unwrap();
    assert_eq!(
        row.expires_at_ms - completed,
        7_200_000,
        "the TTL counts from completion"
    );
    // Replayed for the whole TTL from completion, gone after it.
    h.advance(Duration::from_secs(7100));
    let replay = run(&h.idem, &spec, &work, &k, 100).await.unwrap();
    assert_eq!(replay.kind, OutcomeKind::Replayed);
    h.advance(Duration::from_secs(200));
    assert!(matches!(
        run(&h.idem, &spec, &work, &k, 100).await,
        Err(Error::Expired)
    ));
}

/// A fenced attempt's client is told the final answer: an operator completed the key while
/// the attempt was running.
async fn a_fenced_client_gets_the_final_answer<DB: TestDb, H: Holding>() {
    use idem_runtime::store::{Action, Actor, StoredResponse};
    let h = Harness::<DB>::with_config(H::config()).await;
    let work = Work::new(After::Wait);
    let k = key("p-fenced");
    let running = {
        let idem = h.idem.clone();
        let work = Arc::clone(&work);
        let k = k.clone();
        tokio::spawn(async move { run(&idem, &SPEC, &work, &k, 100).await })
    };
    recorded(&h, "p-fenced").await;
    let table = h.idem.keys();
    let row = table
        .get(key_ref("p-fenced"), h.idem.now_millis())
        .await
        .unwrap()
        .unwrap();
    let response = StoredResponse {
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body: bytes::Bytes::from_static(br#"{"settled":"by hand"}"#),
    };
    let forced = table
        .act(
            row.key_ref(),
            &row,
            &Action::Complete(response),
            &Actor::new("alice")
                .reason("settled with the provider")
                .force(),
            h.idem.now_millis(),
        )
        .await;
    assert!(forced.is_ok(), "{forced:?}");
    work.gate.notify_one();
    let answer = running.await.unwrap().unwrap();
    assert_eq!(answer.kind, OutcomeKind::Replayed);
    assert_eq!(answer.record.body.as_ref(), br#"{"settled":"by hand"}"#);
    assert_eq!(h.effects().await, 0, "the fenced attempt committed nothing");
}

/// An attempt whose owner died (a process of its own, stopped mid-attempt and its
/// connections closed, as a killed process's are) while its lease is live: where attempts
/// hold their number (PostgreSQL), the retry proves the owner gone and takes the key over at
/// once, reusing the recorded charge; elsewhere, or with `attempt_holds` off, it gets 409
/// until the lease runs out.
async fn an_attempt_whose_owner_is_gone_is_taken_over_at_once<DB: TestDb>() {
    let h = Harness::<DB>::new().await;
    let work = Work::new(After::Wait);
    let k = key("p-gone");
    let holding = Config::default().attempt_holds(true);
    let process = h.reopen(holding.clone()).await;
    let owner = {
        let (idem, work, k) = (process.clone(), Arc::clone(&work), k.clone());
        tokio::spawn(async move { run(&idem, &SPEC, &work, &k, 100).await })
    };
    recorded(&h, "p-gone").await;
    owner.abort();
    assert!(owner.await.unwrap_err().is_cancelled());
    process.close().await;
    let row = h.idem.lookup(key_ref("p-gone")).await.unwrap().unwrap();
    assert_eq!(
        row.status,
        KeyStatus::Processing,
        "the lease (an hour) is live"
    );

    let fresh = Work::new(After::Finish);
    // Without holds (the default), the lease alone decides.
    assert!(
        matches!(
            run(&h.idem, &SPEC, &fresh, &k, 100).await,
            Err(Error::InFlight { .. })
        ),
        "taken over without proof"
    );
    let retrier = h.reopen(holding.clone()).await;
    // Behind a transaction pooler holds are off (`Config::transaction_pooler`): as on SQLite.
    if !idem_runtime::store::staged::holds::<DB>() || idem_testkit::harness::pooled().is_some() {
        assert!(matches!(
            run(&retrier, &SPEC, &fresh, &k, 100).await,
            Err(Error::InFlight { .. })
        ));
        assert_eq!(fresh.runs.load(Ordering::SeqCst), 0);
        return;
    }
    // The server ends the closed sessions' holds as their server processes exit: soon.
    let mut outcome = None;
    for _ in 0..500 {
        match run(&retrier, &SPEC, &fresh, &k, 100).await {
            Err(Error::InFlight { .. }) => tokio::time::sleep(Duration::from_millis(10)).await,
            other => {
                outcome = Some(other.unwrap());
                break;
            }
        }
    }
    let outcome = outcome.expect("the key was never taken over");
    assert_eq!(outcome.kind, OutcomeKind::Executed);
    assert_eq!(fresh.provider.calls(), 0, "the recorded charge was reused");
    assert_eq!(h.effects().await, 1);
    let row = h.idem.lookup(key_ref("p-gone")).await.unwrap().unwrap();
    assert_eq!((row.status, row.attempt), (KeyStatus::Completed, 2));
    // A live attempt is never taken over: its duplicate gets 409.
    let live = Work::new(After::Wait);
    let k2 = key("p-live");
    let running = {
        let (idem, live, k2) = (retrier.clone(), Arc::clone(&live), k2.clone());
        tokio::spawn(async move { run(&idem, &SPEC, &live, &k2, 100).await })
    };
    recorded(&h, "p-live").await;
    let other = h.reopen(holding).await;
    assert!(matches!(
        run(&other, &SPEC, &fresh, &k2, 100).await,
        Err(Error::InFlight { .. })
    ));
    live.gate.notify_one();
    assert_eq!(running.await.unwrap().unwrap().kind, OutcomeKind::Executed);
}

/// Whether a case's `Idem` holds attempts ([`Config::attempt_holds`]).
trait Holding {
    fn config() -> Config;
}

/// The default: no holds.
struct Unheld;

impl Holding for Unheld {
    fn config() -> Config {
        Config::default()
    }
}

/// Attempts hold their number (PostgreSQL; nothing changes on SQLite).
struct Held;

impl Holding for Held {
    fn config() -> Config {
        Config::default().attempt_holds(true)
    }
}

// Every case on every store without holds, and on PostgreSQL with holds too (`postgres_held`:
// attempt holds are PostgreSQL's alone; on the other stores the lease decides).
idem_testkit::on_every_store!(
    #[with(super::Unheld)]
    #[also postgres_held = postgres(super::Held)]
    reservation_commits_at_once,
    waiting_duplicate_gets_the_response,
    retryable_failure_resumes_after_recorded_steps,
    unrecorded_step_runs_again_with_the_same_provider_key,
    permanent_failure_is_stored_and_replayed,
    takeover_fences_the_old_attempt,
    in_flight_says_when_the_lease_ends,
    one_of_two_racing_takeovers_wins,
    reconciler_resumes_stuck_keys,
    reconciler_resumes_a_sealed_request,
    operators_act_on_staged_keys,
    a_key_that_is_not_final_never_expires,
    a_fenced_client_gets_the_final_answer,
);

mod owner_gone {
    use super::an_attempt_whose_owner_is_gone_is_taken_over_at_once;
    idem_testkit::on_every_store!(an_attempt_whose_owner_is_gone_is_taken_over_at_once);
}

/// The attribute in staged mode: `#[idempotent(mode = "staged", lease = …)]` on a handler
/// that takes an `Attempt`, over HTTP.
mod attribute {
    use super::*;
    use axum::Router;
    use axum::body::Body;
    use axum::extract::State;
    use axum::http::Request;
    use axum::routing::post;
    use http_body_util::BodyExt as _;
    use idem_runtime::{Anonymous, Idem, IdemState, JsonBody, idempotent};
    use tower::ServiceExt as _;

    struct App<DB: TestDb> {
        idem: Idem<DB>,
        work: Arc<Work>,
    }

    impl<DB: TestDb> Clone for App<DB> {
        fn clone(&self) -> Self {
            Self {
                idem: self.idem.clone(),
                work: Arc::clone(&self.work),
            }
        }
    }

    impl<DB: TestDb> IdemState<DB> for App<DB> {
        type Principal = Anonymous;
        fn idem(&self) -> &Idem<DB> {
            &self.idem
        }
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Payment {
        amount: u64,
    }

    #[idempotent(scope = "global", mode = "staged", lease = "1h", operation = "pay")]
    async fn create_payment<DB: TestDb>(
        #[not_input] State(app): State<App<DB>>,
        attempt: Attempt<DB>,
        JsonBody(payment): JsonBody<Payment>,
    ) -> Result<Finished, StepError> {
        pay::<DB>(app.work, attempt, payment.amount).await
    }

    async fn send<DB: TestDb>(
        app: &Router,
        key: Option<&str>,
        amount: u64,
    ) -> (StatusCode, Option<String>, serde_json::Value) {
        let mut request = Request::post("/payments").header("content-type", "application/json");
        if let Some(key) = key {
            request = request.header("idempotency-key", format!("\"{key}\""));
        }
        let response = app
            .clone()
            .oneshot(
                request
                    .body(Body::from(json!({ "amount": amount }).to_string()))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            replayed,
            serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
        )
    }

    async fn staged_attribute_over_http<DB: TestDb>() {
        let h = Harness::<DB>::new().await;
        let work = Work::new(After::Interrupt);
        let app = Router::new()
            .route("/payments", post(create_payment::<DB>))
            .with_state(App {
                idem: h.idem.clone(),
                work: Arc::clone(&work),
            });
        let (status, _, body) = send::<DB>(&app, Some("h-1"), 70).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert_eq!(body["type"], "urn:idem:problem:interrupted");
        work.set(After::Finish);
        let (status, replayed, first) = send::<DB>(&app, Some("h-1"), 70).await;
        assert_eq!(status, StatusCode::CREATED, "{first}");
        assert_eq!(replayed, None);
        assert_eq!(
            work.provider.calls(),
            1,
            "resumed after the recorded charge"
        );
        let (status, replayed, again) = send::<DB>(&app, Some("h-1"), 70).await;
        assert_eq!(status, StatusCode::CREATED);
        assert_eq!(replayed.as_deref(), Some("true"));
        assert_eq!(again, first);
        let (status, _, _) = send::<DB>(&app, Some("h-1"), 71).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        let (status, _, _) = send::<DB>(&app, None, 70).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let (status, _, declined) = send::<DB>(&app, Some("h-402"), 402).await;
        assert_eq!(status, StatusCode::PAYMENT_REQUIRED, "{declined}");
        let row = h
            .idem
            .lookup(KeyRef {
                scope: "global",
                operation: "pay:v1",
                key: "h-402",
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.status, KeyStatus::Completed);
        assert_eq!(work.runs.load(Ordering::SeqCst), 3);
        assert_eq!(h.effects().await, 1);
    }

    /// A stuck key of the attribute's handler, nobody retrying: the reconciler takes it over
    /// and sends the stored request through the router; the handler resumes after the
    /// recorded charge. The stored request holds the body and no header but its type.
    async fn reconciler_resumes_the_attribute_through_the_router<DB: TestDb>() {
        let h = Harness::<DB>::new().await;
        let work = Work::new(After::Interrupt);
        let app = Router::new()
            .route("/payments", post(create_payment::<DB>))
            .with_state(App {
                idem: h.idem.clone(),
                work: Arc::clone(&work),
            });
        let (status, _, _) = send::<DB>(&app, Some("r-1"), 75).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let key = KeyRef {
            scope: "global",
            operation: "pay:v1",
            key: "r-1",
        };
        let stored = stored_request(&h.idem, key).await;
        assert_eq!(stored["method"], "POST");
        assert_eq!(stored["uri"], "/payments");
        assert_eq!(stored["content_type"], "application/json");
        assert_eq!(stored["body"], json!({ "amount": 75 }).to_string());
        assert!(stored.get("headers").is_none());

        work.set(After::Finish);
        let reconciler = Reconciler::new(h.idem.clone()).router(app.clone());
        assert_eq!(reconciler.operations(), vec!["pay:v1"]);
        let done = reconciler.run_once().await.unwrap();
        assert_eq!((done.stuck, done.completed, done.taken), (1, 1, 0));
        assert_eq!(
            work.provider.calls(),
            1,
            "the recorded charge was not asked again"
        );
        assert_eq!(h.effects().await, 1);
        let row = h.idem.lookup(key).await.unwrap().unwrap();
        assert_eq!(row.status, KeyStatus::Completed);
        let body: serde_json::Value = serde_json::from_slice(&row.response.unwrap().body).unwrap();
        assert_eq!(body["amount"], 75);
        // The client's retry replays what the reconciler stored.
        let (status, replayed, _) = send::<DB>(&app, Some("r-1"), 75).await;
        assert_eq!(status, StatusCode::CREATED);
        assert_eq!(replayed.as_deref(), Some("true"));
        assert_eq!(reconciler.run_once().await.unwrap().stuck, 0);
    }

    /// A hand-written staged handler: `IdempotencyKey` is an extractor (400 problem+json),
    /// `Idem::staged` takes `Idem::once`'s arguments, `Outcome` and `Error` are responses.
    async fn hand_written<DB: TestDb>(
        State(app): State<App<DB>>,
        key: IdempotencyKey,
        JsonBody(payment): JsonBody<Payment>,
    ) -> Result<idem_runtime::protocol::Outcome, Error> {
        let amount = payment.amount;
        app.idem
            .staged(
                &HAND,
                &idem_runtime::spec::Scope::global(),
                &key,
                &payment,
                |attempt| pay::<DB>(app.work, attempt, amount),
            )
            .await
    }

    async fn stored_request<DB: TestDb>(idem: &Idem<DB>, key: KeyRef<'_>) -> serde_json::Value {
        idem.keys()
            .journal(key)
            .await
            .unwrap()
            .unwrap()
            .request
            .unwrap()
    }

    const HAND: OperationSpec = OperationSpec::new("hand:v1")
        .mode(Mode::Staged)
        .lease(LEASE);

    async fn hand_written_handler<DB: TestDb>() {
        let h = Harness::<DB>::new().await;
        let work = Work::new(After::Finish);
        let app = Router::new()
            .route("/payments", post(hand_written::<DB>))
            .with_state(App {
                idem: h.idem.clone(),
                work: Arc::clone(&work),
            });
        let (status, _, problem) = send::<DB>(&app, None, 5).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(problem["type"], "urn:idem:problem:missing-key", "{problem}");
        let (status, replayed, first) = send::<DB>(&app, Some("w-1"), 5).await;
        assert_eq!(status, StatusCode::CREATED, "{first}");
        assert_eq!(replayed, None);
        let (status, replayed, again) = send::<DB>(&app, Some("w-1"), 5).await;
        assert_eq!(status, StatusCode::CREATED);
        assert_eq!(replayed.as_deref(), Some("true"));
        assert_eq!(again, first);
        let (status, _, _) = send::<DB>(&app, Some("w-1"), 6).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(work.provider.calls(), 1);
        // Stored with its input, which a reconciler reads back.
        let stored = stored_request(
            &h.idem,
            KeyRef {
                scope: "global",
                operation: "hand:v1",
                key: "w-1",
            },
        )
        .await;
        assert_eq!(stored, json!({ "amount": 5 }));
    }

    idem_testkit::on_every_store!(
        staged_attribute_over_http,
        reconciler_resumes_the_attribute_through_the_router,
        hand_written_handler,
    );
}
