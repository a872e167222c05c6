//! Replays read on a standby first ([`Config::replica`]), on a real primary and its streaming
//! standby (`.ci/failover`): what the standby answers, what it leaves to the primary while
//! its replay is paused, and a standby that does not answer at all.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use idem_runtime::fingerprint::Fingerprint;
use idem_runtime::protocol::{Call, OutcomeKind, Record, Work, work_fn};
use idem_runtime::spec::OperationSpec;
use idem_runtime::sqlx::{self, PgPool, Postgres, Transaction};
use idem_runtime::{Config, Error, Idem, IdempotencyKey};
use idem_testkit::failover::Failover;
use serde_json::json;

const SPEC: OperationSpec = OperationSpec::new("standby-op:v1");

fn call<'k>(key: &'k IdempotencyKey, input: &serde_json::Value) -> Call<'k> {
    Call {
        scope: "global",
        key,
        fingerprint: Fingerprint::of(SPEC.id, input, &[]).unwrap(),
        request: None,
    }
}

/// Answers `201` with a body no other execution has.
fn fresh() -> impl for<'t, 'c> FnOnce(&'t mut Transaction<'c, Postgres>) -> Work<'t> + Send {
    work_fn::<Postgres, _>(|_tx| {
        Box::pin(async {
            Record::json(StatusCode::CREATED, &json!({"id": uuid::Uuid::new_v4()})).unwrap()
        })
    })
}

async fn scalar(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// Stops the standby's replay, and waits until it has: a pause is only requested at first,
/// and what the primary writes meanwhile may still be replayed.
async fn pause_replay(standby: &PgPool) {
    sqlx::query("SELECT pg_wal_replay_pause()")
        .execute(standby)
        .await
        .unwrap();
    let started = Instant::now();
    loop {
        let state: String = sqlx::query_scalar("SELECT pg_get_wal_replay_pause_state()")
            .fetch_one(standby)
            .await
            .unwrap();
        if state == "paused" {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "replay never paused"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Until the standby has as many rows of `key` as `rows`.
async fn replicated(standby: &PgPool, key: &str, rows: i64) {
    let sql = format!("SELECT count(*) FROM idempotency_keys WHERE idempotency_key = '{key}'");
    let started = Instant::now();
    while scalar(standby, &sql).await != rows {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{key} never replicated"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A primary and an asynchronous standby, idem on the primary reading replays on the standby
/// first (migrated), and a pool on each server for the test's own looks.
async fn with_replica() -> (Failover, Idem<Postgres>, PgPool, PgPool) {
    let rig = Failover::start(false);
    let primary_url = Failover::url_of(rig.primary_port, "test");
    let standby_url = Failover::url_of(rig.standby_port, "test");
    // A standby slower than the acquire timeout is passed over: under a loaded machine the
    // default (500 ms) can run out on a first connection, and the primary would answer.
    let config = Config::default()
        .replica(&standby_url)
        .acquire_timeout(Duration::from_secs(5));
    let idem = Idem::<Postgres>::connect(&primary_url, config)
        .await
        .unwrap();
    idem.migrate().await.unwrap();
    let primary = PgPool::connect(&primary_url).await.unwrap();
    let standby = PgPool::connect(&standby_url).await.unwrap();
    // The tables on the standby before the first lookup there: a standby that fails one (no
    // such table yet) is passed over for five seconds, and the primary answers meanwhile.
    let applied = "SELECT count(*) FROM idem_schema_migrations";
    let migrations = scalar(&primary, applied).await;
    let started = Instant::now();
    while sqlx::query_scalar::<_, i64>(applied)
        .fetch_one(&standby)
        .await
        .ok()
        != Some(migrations)
    {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the migrations never replicated"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (rig, idem, primary, standby)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lagging_standby_answers_only_what_it_can() {
    let (_rig, idem, primary, standby) = with_replica().await;

    let (k1, k2) = (
        IdempotencyKey::new("k1").unwrap(),
        IdempotencyKey::new("k2").unwrap(),
    );
    let (a, b) = (json!({"a": 1}), json!({"b": 2}));
    let first = idem.execute(&SPEC, call(&k1, &a), fresh()).await.unwrap();
    assert_eq!(first.kind, OutcomeKind::Executed);
    replicated(&standby, "k1", 1).await;
    // Replays make the operation's lookup come first (`first_step`): where the standby is
    // asked.
    for _ in 0..2 {
        let replay = idem.execute(&SPEC, call(&k1, &a), fresh()).await.unwrap();
        assert_eq!(replay.kind, OutcomeKind::Replayed);
    }

    // The standby stops replaying; the key is deleted on the primary.
    pause_replay(&standby).await;
    sqlx::query("DELETE FROM idempotency_keys WHERE idempotency_key = 'k1'")
        .execute(&primary)
        .await
        .unwrap();
    // The retry is answered from the standby, which still has the key (the staleness an
    // operator's delete can meet there): the primary has no row and would have run it.
    let again = idem.execute(&SPEC, call(&k1, &a), fresh()).await.unwrap();
    assert_eq!(again.kind, OutcomeKind::Replayed);
    assert_eq!(again.record.body, first.record.body);
    // Another request under the key is not answered from the standby (its 422 would be
    // stale): the primary runs it.
    let other = idem.execute(&SPEC, call(&k1, &b), fresh()).await.unwrap();
    assert_eq!(other.kind, OutcomeKind::Executed);
    // A key the standby does not have yet: the primary answers, replays included.
    let new = idem.execute(&SPEC, call(&k2, &a), fresh()).await.unwrap();
    assert_eq!(new.kind, OutcomeKind::Executed);
    for _ in 0..3 {
        let replay = idem.execute(&SPEC, call(&k2, &a), fresh()).await.unwrap();
        assert_eq!(replay.kind, OutcomeKind::Replayed);
        assert_eq!(replay.record.body, new.record.body);
    }
    assert_eq!(
        scalar(
            &standby,
            "SELECT count(*) FROM idempotency_keys WHERE idempotency_key = 'k2'"
        )
        .await,
        0
    );

    // Caught up, the standby has what the primary has.
    sqlx::query("SELECT pg_wal_replay_resume()")
        .execute(&standby)
        .await
        .unwrap();
    replicated(&standby, "k2", 1).await;
    let replay = idem.execute(&SPEC, call(&k1, &b), fresh()).await.unwrap();
    assert_eq!(replay.kind, OutcomeKind::Replayed);
    assert_eq!(replay.record.body, other.record.body);
    let mismatch = idem.execute(&SPEC, call(&k1, &a), fresh()).await;
    assert!(matches!(mismatch, Err(Error::Mismatch(_))), "{mismatch:?}");
    assert_eq!(
        scalar(&primary, "SELECT count(*) FROM idempotency_keys").await,
        2
    );
    idem.close().await;
}

/// A staged key: a retry is answered from the standby once it has the completed key, before
/// any hold or lookup on the primary; while the standby lags, the primary answers.
#[tokio::test(flavor = "multi_thread")]
async fn staged_replays_from_the_standby() {
    use idem_runtime::spec::{Mode, Scope};
    use std::sync::atomic::{AtomicUsize, Ordering};

    const STAGED: OperationSpec = OperationSpec::new("staged-op:v1").mode(Mode::Staged);
    let (_rig, idem, primary, standby) = with_replica().await;
    let runs = AtomicUsize::new(0);
    let pay = async |k: &str| {
        let key = IdempotencyKey::new(k).unwrap();
        let work = async |attempt: idem_runtime::staged::Attempt<Postgres>| {
            runs.fetch_add(1, Ordering::SeqCst);
            let id = attempt.provider_key("charge");
            attempt
                .finish(async |_tx| {
                    Ok(Record::json(StatusCode::CREATED, &json!({"charge": id})).unwrap())
                })
                .await
        };
        idem.staged(&STAGED, &Scope::global(), &key, &json!({"amount": 5}), work)
            .await
            .unwrap()
    };
    let first = pay("s1").await;
    assert_eq!(first.kind, OutcomeKind::Executed);
    replicated(&standby, "s1", 1).await;
    pause_replay(&standby).await;
    sqlx::query("DELETE FROM idempotency_keys WHERE idempotency_key = 's1'")
        .execute(&primary)
        .await
        .unwrap();
    // Answered from the standby: the primary no longer has the key, and would have run it.
    let again = pay("s1").await;
    assert_eq!(again.kind, OutcomeKind::Replayed);
    assert_eq!(again.record.body, first.record.body);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // A key the lagging standby does not have: the primary runs it once and replays it.
    let new = pay("s2").await;
    assert_eq!(new.kind, OutcomeKind::Executed);
    let replay = pay("s2").await;
    assert_eq!(replay.kind, OutcomeKind::Replayed);
    assert_eq!(replay.record.body, new.record.body);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    idem.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_that_does_not_answer_leaves_every_answer_to_the_primary() {
    let rig = Failover::start(false);
    let primary_url = Failover::url_of(rig.primary_port, "test");
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(200))
        .connect_lazy(&Failover::url_of(closed, "test"))
        .unwrap();
    let idem = Idem::<Postgres>::connect(&primary_url, Config::default())
        .await
        .unwrap()
        .with_replica(gone);
    idem.migrate().await.unwrap();
    let k = IdempotencyKey::new("k").unwrap();
    let first = idem
        .execute(&SPEC, call(&k, &json!({})), fresh())
        .await
        .unwrap();
    assert_eq!(first.kind, OutcomeKind::Executed);
    for _ in 0..5 {
        let started = Instant::now();
        let replay = idem
            .execute(&SPEC, call(&k, &json!({})), fresh())
            .await
            .unwrap();
        assert_eq!(replay.kind, OutcomeKind::Replayed);
        assert_eq!(replay.record.body, first.record.body);
        // The first try waits for the standby up to `acquire_timeout`; then it is passed over.
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    let mismatch = idem
        .execute(&SPEC, call(&k, &json!({"x": 1})), fresh())
        .await;
    assert!(matches!(mismatch, Err(Error::Mismatch(_))), "{mismatch:?}");
    idem.close().await;
}
