//! The typed plain function API, [`Idem::once`], on every store: executed then
//! replayed with the same typed value, failures that roll back and free the key, mismatches,
//! values that cannot be read back, `?` on sqlx errors, scopes from a principal, panics, and
//! concurrent calls on one key.
#![allow(clippy::unwrap_used)]

mod common;
mod signals;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Harness, TestDb};
use idem_runtime::spec::{OperationSpec, Scope, ScopeKind};
use idem_runtime::sqlx::{self, Transaction};
use idem_runtime::store::{Arg, KeyRef};
use idem_runtime::{Config, Done, Error, IdempotencyKey, OnceError, Principal};
use serde::{Deserialize, Serialize};
use serde_json::json;

const SPEC: OperationSpec = OperationSpec::new("once-test:v1");
const TENANT_SPEC: OperationSpec = OperationSpec::new("once-tenant:v1").scope(ScopeKind::Tenant);

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

/// What the work returns: `nonce` differs between executions, so a replay is recognised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Receipt {
    invoice: i64,
    nonce: String,
    lines: Vec<String>,
}

impl Receipt {
    fn new(invoice: i64) -> Self {
        Self {
            invoice,
            nonce: uuid::Uuid::new_v4().to_string(),
            lines: vec!["a".to_owned(), "é".to_owned()],
        }
    }
}

/// An error of the application's own.
#[derive(Debug, PartialEq, Eq)]
struct Declined(&'static str);

/// The work's queries, written once for every store.
trait Sql: TestDb {
    /// Inserts an effect; its rows affected.
    fn insert(
        tx: &mut Transaction<'_, Self>,
        note: &str,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send {
        let sql = if Self::DIALECT.positional {
            "INSERT INTO effects (note) VALUES (?)"
        } else {
            "INSERT INTO effects (note) VALUES ($1)"
        };
        async move { Self::execute(&mut **tx, sql, &[Arg::Text(note)]).await }
    }

    /// A query on a table that does not exist.
    fn broken(
        tx: &mut Transaction<'_, Self>,
    ) -> impl Future<Output = Result<u64, sqlx::Error>> + Send {
        let sql = "INSERT INTO no_such_table (note) VALUES ('x')";
        async move { Self::execute(&mut **tx, sql, &[]).await }
    }
}

impl<DB: TestDb> Sql for DB {}

/// `once` with the global scope, writing one effect and returning a new receipt.
async fn receipt<DB: Sql>(
    h: &Harness<DB>,
    k: &IdempotencyKey,
    input: &serde_json::Value,
) -> Result<Done<Receipt>, OnceError<sqlx::Error>> {
    let invoice = input["invoice"].as_i64().unwrap_or(0);
    h.idem
        .once(&SPEC, &Scope::global(), k, input, move |tx| {
            Box::pin(async move {
                DB::insert(tx, "receipt").await?;
                Ok(Receipt::new(invoice))
            })
        })
        .await
}

async fn executed_then_replayed_with_the_same_value<DB: Sql>() {
    let h = Harness::<DB>::new().await;
    let k = key("k1");
    let input = json!({"invoice": 42, "lines": 2});
    let first = receipt(&h, &k, &input).await.unwrap();
    assert!(!first.replayed);
    assert_eq!(first.value.invoice, 42);
    // The input in another key order is the same input.
    let reordered: serde_json::Value = serde_json::from_str(r#"{"lines":2,"invoice":42}"#).unwrap();
    for input in [&input, &reordered] {
        let again = receipt(&h, &k, input).await.unwrap();
        assert!(again.replayed);
        assert_eq!(again.value, first.value, "the stored value, typed");
    }
    assert_eq!(h.effects().await, 1, "the work ran once");
    assert_eq!(h.keys().await, 1);
    // The stored value is the work's, as JSON.
    let row = h
        .idem
        .lookup(KeyRef {
            scope: "global",
            operation: SPEC.id,
            key: "k1",
        })
        .await
        .unwrap()
        .unwrap();
    let stored: Receipt = serde_json::from_slice(&row.response.unwrap().body).unwrap();
    assert_eq!(stored, first.value);
}

async fn failed_work_rolls_back_and_frees_the_key<DB: Sql>() {
    let h = Harness::<DB>::new().await;
    let k = key("k1");
    let input = json!({"invoice": 1});
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let error = h
        .idem
        .once(&SPEC, &Scope::global(), &k, &input, move |tx| {
            Box::pin(async move {
                counter.fetch_add(1, Ordering::SeqCst);
                DB::write_effect(&mut **tx, "written, then rolled back").await;
                Err::<Receipt, _>(Declined("card declined"))
            })
        })
        .await
        .unwrap_err();
    match error {
        OnceError::Failed(e) => assert_eq!(e, Declined("card declined")),
        other => panic!("expected Failed, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(h.effects().await, 0, "the work's writes were rolled back");
    assert_eq!(h.keys().await, 0, "nothing stored");
    // The key is free: the next call executes.
    let next = receipt(&h, &k, &input).await.unwrap();
    assert!(!next.replayed);
    assert_eq!(h.effects().await, 1);
}

async fn same_key_other_input_is_a_mismatch<DB: Sql>() {
    let h = Harness::<DB>::new().await;
    let k = key("k1");
    receipt(&h, &k, &json!({"invoice": 1})).await.unwrap();
    let error = receipt(&h, &k, &json!({"invoice": 2})).await.unwrap_err();
    assert!(
        matches!(error, OnceError::Idem(Error::Mismatch(_))),
        "{error:?}"
    );
    assert_eq!(h.effects().await, 1);
}

async fn stored_value_of_another_type_is_a_decode_error<DB: Sql>() {
    let h = Harness::<DB>::new().await;
    let k = key("k1");
    let input = json!({"invoice": 1});
    let first = receipt(&h, &k, &input).await.unwrap();
    assert!(!first.replayed);
    // The same operation, key and input, read as another type: the work does not run.
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let error = h
        .idem
        .once(&SPEC, &Scope::global(), &k, &input, move |_tx| {
            Box::pin(async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<u64, sqlx::Error>(7)
            })
        })
        .await
        .unwrap_err();
    assert!(matches!(error, OnceError::Decode(_)), "{error:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(h.effects().await, 1);
    // The right type still reads it.
    assert_eq!(receipt(&h, &k, &input).await.unwrap().value, first.value);
}

async fn question_mark_on_sqlx_errors<DB: Sql>() {
    let h = Harness::<DB>::new().await;
    let k = key("k1");
    let input = json!({"invoice": 1});
    // `?` on a successful query.
    let done = h
        .idem
        .once(&SPEC, &Scope::global(), &k, &input, |tx| {
            Box::pin(async move {
                let rows = DB::insert(tx, "one").await? + DB::insert(tx, "two").await?;
                Ok::<_, sqlx::Error>(rows)
            })
        })
        .await
        .unwrap();
    assert_eq!(
        done,
        Done {
            value: 2,
            replayed: false
        }
    );
    // `?` on a failing one, after a write: the error comes back, the write is gone.
    let k2 = key("k2");
    let error = h
        .idem
        .once(&SPEC, &Scope::global(), &k2, &input, |tx| {
            Box::pin(async move {
                DB::insert(tx, "three").await?;
                DB::broken(tx).await?;
                Ok::<u64, sqlx::Error>(0)
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(error, OnceError::Failed(sqlx::Error::Database(_))),
        "{error:?}"
    );
    // `OnceError` is an error with the work's as its source.
    let source = std::error::Error::source(&error).unwrap();
    assert!(source.is::<sqlx::Error>());
    assert_eq!(h.effects().await, 2);
    assert_eq!(h.keys().await, 1);
}

/// An authenticated caller, as an application's extractor would give it.
struct Caller {
    tenant: Option<String>,
}

impl Principal for Caller {
    fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }
}

/// `once` of the tenant operation in `scope`, returning a new nonce.
async fn tenant_once<DB: Sql>(
    h: &Harness<DB>,
    scope: &Scope,
    k: &IdempotencyKey,
    input: &serde_json::Value,
) -> Result<Done<String>, OnceError<sqlx::Error>> {
    h.idem
        .once(&TENANT_SPEC, scope, k, input, |tx| {
            Box::pin(async move {
                DB::insert(tx, "tenant").await?;
                Ok(uuid::Uuid::new_v4().to_string())
            })
        })
        .await
}

async fn scope_from_a_principal<DB: Sql>() {
    let h = Harness::<DB>::new().await;
    let k = key("k1");
    let input = json!({"invoice": 1});
    let t1 = Caller {
        tenant: Some("t1".to_owned()),
    };
    let scope = t1.scope_for(&TENANT_SPEC).unwrap();
    assert_eq!(scope.as_str(), "tenant:t1");
    let first = tenant_once(&h, &scope, &k, &input).await.unwrap();
    assert!(!first.replayed);
    assert_eq!(
        tenant_once(&h, &scope, &k, &input).await.unwrap(),
        Done {
            value: first.value.clone(),
            replayed: true
        }
    );
    let row = h
        .idem
        .lookup(KeyRef {
            scope: "tenant:t1",
            operation: TENANT_SPEC.id,
            key: "k1",
        })
        .await
        .unwrap();
    assert!(row.is_some(), "keyed by the principal's tenant");
    // Another tenant's same key is its own.
    let t2 = Caller {
        tenant: Some("t2".to_owned()),
    };
    let other = tenant_once(&h, &t2.scope_for(&TENANT_SPEC).unwrap(), &k, &input)
        .await
        .unwrap();
    assert!(!other.replayed);
    assert_ne!(other.value, first.value);
    // A principal without a tenant has no scope for a tenant operation.
    let nobody = Caller { tenant: None };
    assert!(matches!(
        nobody.scope_for(&TENANT_SPEC),
        Err(Error::NoScope("tenant"))
    ));
    let empty = Caller {
        tenant: Some(String::new()),
    };
    assert!(matches!(
        empty.scope_for(&TENANT_SPEC),
        Err(Error::NoScope(_))
    ));
    // A global operation needs nothing.
    assert_eq!(nobody.scope_for(&SPEC).unwrap().as_str(), "global");
    assert_eq!(h.effects().await, 2);
}

async fn panicking_work_stores_nothing<DB: Sql>() {
    let h = Harness::<DB>::new().await;
    let k = key("k1");
    let input = json!({"invoice": 1});
    let error = h
        .idem
        .once(&SPEC, &Scope::global(), &k, &input, |tx| {
            Box::pin(async move {
                let rows = DB::insert(tx, "before the panic").await?;
                assert!(rows == 0, "work bug");
                Ok::<_, sqlx::Error>(Receipt::new(1))
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(error, OnceError::Idem(Error::Panicked)),
        "{error:?}"
    );
    assert_eq!((h.effects().await, h.keys().await), (0, 0));
    // The key is free.
    assert!(!receipt(&h, &k, &input).await.unwrap().replayed);
}

async fn value_that_cannot_be_stored_is_an_encode_error<DB: Sql>() {
    let h = Harness::<DB>::new().await;
    let k = key("k1");
    let error = h
        .idem
        .once(&SPEC, &Scope::global(), &k, &json!({}), |tx| {
            Box::pin(async move {
                DB::insert(tx, "rolled back").await?;
                // JSON object keys must be strings.
                Ok::<_, sqlx::Error>(HashMap::from([((1_u8, 2_u8), 3_u8)]))
            })
        })
        .await
        .unwrap_err();
    assert!(matches!(error, OnceError::Encode(_)), "{error:?}");
    assert_eq!((h.effects().await, h.keys().await), (0, 0));
}

async fn input_that_cannot_be_fingerprinted_is_refused<DB: Sql>() {
    let h = Harness::<DB>::new().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let input = HashMap::from([((1_u8, 2_u8), 3_u8)]);
    let error = h
        .idem
        .once(&SPEC, &Scope::global(), &key("k1"), &input, move |_tx| {
            Box::pin(async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, sqlx::Error>(1)
            })
        })
        .await
        .unwrap_err();
    assert!(
        matches!(error, OnceError::Idem(Error::Input(_))),
        "{error:?}"
    );
    // A number that is not finite (`json!` would have turned it into `null`).
    let nan = h
        .idem
        .once(&SPEC, &Scope::global(), &key("k3"), &[f64::NAN], |_tx| {
            Box::pin(async move { Ok::<_, sqlx::Error>(1) })
        })
        .await
        .unwrap_err();
    assert!(matches!(nan, OnceError::Idem(Error::Input(_))), "{nan:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(h.keys().await, 0);
}

async fn concurrent_calls_on_one_key_commit_once<DB: Sql>() {
    let config = Config::default().in_flight_wait(Duration::from_secs(30));
    let h = Harness::<DB>::with_config(config.clone()).await;
    let other = h.reopen(config).await;
    let handles = [h.idem.clone(), other];
    let runs = Arc::new(AtomicUsize::new(0));
    let input = json!({"invoice": 9});
    let lookups = signals::Lookups::default();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..16 {
        let idem = handles[i % 2].clone();
        let runs = Arc::clone(&runs);
        let input = input.clone();
        let everyone = lookups.clone();
        let url = h.url.clone();
        tasks.spawn(lookups.watch(async move {
            idem.once(&SPEC, &Scope::global(), &key("shared"), &input, move |tx| {
                Box::pin(async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    DB::insert(tx, "concurrent").await?;
                    // Every call arrives while this one holds the key.
                    let backend = <DB as sqlx::Database>::NAME;
                    signals::until_all_met_it_new(backend, &url, &everyone, 16).await;
                    Ok::<_, sqlx::Error>(Receipt::new(9))
                })
            })
            .await
        }));
    }
    let mut done = Vec::new();
    while let Some(result) = tasks.join_next().await {
        done.push(result.unwrap().unwrap());
    }
    assert_eq!(done.len(), 16);
    assert_eq!(h.effects().await, 1, "one committed execution");
    assert_eq!(
        done.iter().filter(|d| !d.replayed).count(),
        1,
        "one execution, fifteen answers from it"
    );
    assert!(done.iter().all(|d| d.value == done[0].value), "{done:?}");
    // The work itself ran at least once. A waiter that gets the key's lock after the first
    // committed still runs it (rolled back, then answered from the store): exactly-once for
    // effects inside the transaction, as documented. Making the work itself run once is the
    // staged-mode issue's first point.
    assert!(runs.load(Ordering::SeqCst) >= 1);
}

idem_testkit::on_every_store!(
    executed_then_replayed_with_the_same_value,
    failed_work_rolls_back_and_frees_the_key,
    same_key_other_input_is_a_mismatch,
    stored_value_of_another_type_is_a_decode_error,
    question_mark_on_sqlx_errors,
    scope_from_a_principal,
    panicking_work_stores_nothing,
    value_that_cannot_be_stored_is_an_encode_error,
    input_that_cannot_be_fingerprinted_is_refused,
    concurrent_calls_on_one_key_commit_once,
);
