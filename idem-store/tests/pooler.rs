//! Behind a transaction pooler ([`idem_store::pooler`]), on PostgreSQL: once
//! [`behind_transaction_pooler`] is called, idem's statements go as simple queries, their
//! parameters written into the SQL as typed literals. Each test turns the switch on (it is
//! for the whole process: this binary's tests all run that way) and connects to the server
//! directly, which takes literal statements as well.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bytes::Bytes;
use idem_spec::{Mode, ScopeKind};
use idem_store::pooler::{behind_transaction_pooler, is_behind_transaction_pooler};
use idem_store::sqlx::{self, Connection as _, Executor as _, Postgres, Row as _};
use idem_store::staged::Reservation;
use idem_store::{Action, Actor, AuditFilter, KeyRef, KeyTable, Registration, StoredResponse};
use idem_testkit::conformance::put;
use idem_testkit::harness::{HOUR, NOW, TestBackend as _, settings};

/// A migrated table on a new schema, through a pool of one connection, with statements sent
/// as a transaction pooler needs them.
async fn table() -> (String, KeyTable<Postgres>) {
    behind_transaction_pooler();
    assert!(is_behind_transaction_pooler());
    let url = Postgres::fresh_url().await;
    let table = KeyTable::new(
        idem_store::connect::connect::<Postgres>(&url, 1, &settings())
            .await
            .unwrap(),
    );
    table.migrate().await.unwrap();
    (url, table)
}

/// Every kind of parameter reaches the server as a value of its type, whatever it holds:
/// text with quotes, backslashes and dollar signs (never read as parameters), bytes of any
/// value, `int4` and `int8` (at its extremes), `bool` (as the tenth parameter of the audit
/// row, `$10`), `NULL` as text or `int8`; `int8` parameters cast again in the statements
/// (`($1)::float8`) keep their value. The pool's one session prepared no statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parameters_become_typed_literals() {
    let (_, table) = table().await;
    let k = KeyRef {
        scope: "tenant:o'brien\\",
        operation: "op:v1",
        key: "a'b $1 $ $x $10 $$ \\x41",
    };
    let mut conn = table.pool().acquire().await.unwrap();
    let reservation = Reservation {
        key: k,
        fingerprint: &[0, 255],
        request: r#"{"q":"'\\"}"#,
        created_ms: NOW - 1,
        expires_ms: NOW + HOUR,
        locked_until_ms: NOW + HOUR,
        replace_expired: false,
        id: 7,
        field_digests: None,
    };
    assert!(
        idem_store::staged::reserve::<Postgres>(&mut conn, reservation, None)
            .await
            .unwrap()
    );
    drop(conn);
    let seen = table.get(k, NOW).await.unwrap().unwrap();
    assert_eq!((seen.scope.as_str(), seen.key.as_str()), (k.scope, k.key));
    assert_eq!(seen.fingerprint, [0, 255]);
    assert_eq!(
        (seen.created_at_ms, seen.expires_at_ms, seen.locked_until_ms),
        (NOW - 1, NOW + HOUR, Some(NOW + HOUR))
    );
    let journal = table.journal(k).await.unwrap().unwrap();
    assert_eq!(journal.request, Some(serde_json::json!({"q": "'\\"})));

    let response = StoredResponse {
        status: 201,
        headers: vec![("location".to_owned(), "/x?a='b'&c=$1".to_owned())],
        body: Bytes::from_static(&[0, 255, b'\'', b'\\', b'$', b'1']),
    };
    let by = Actor::new("o'brien").force();
    let acted = table
        .act(k, &seen, &Action::Complete(response.clone()), &by, NOW)
        .await
        .unwrap();
    assert!(acted.forced);
    let after = acted.after.unwrap();
    assert_eq!(after.response, Some(response));
    assert_eq!(after.completed_at_ms, Some(NOW));
    let entries = table.audit(&AuditFilter::new().key(k)).await.unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    assert_eq!(entry.id, acted.audit_id);
    assert_eq!(
        (entry.operator.as_str(), entry.action.as_str(), entry.at_ms),
        ("o'brien", "complete", NOW)
    );
    assert_eq!(entry.reason, None);
    assert!(entry.forced);
    // `int8` at its extremes.
    let none = table
        .audit(&AuditFilter::new().before_id(i64::MIN))
        .await
        .unwrap();
    assert!(none.is_empty(), "{none:?}");
    let all = table
        .audit(&AuditFilter::new().before_id(i64::MAX))
        .await
        .unwrap();
    assert_eq!(all, entries);

    // A lease of none or 3 ms, a doc of none or text.
    let registrations = [
        Registration {
            operation: "atomic:v1".to_owned(),
            scope: ScopeKind::Global,
            ttl_ms: i64::MAX / 4,
            mode: Mode::Atomic,
            lease_ms: None,
            registered_at_ms: NOW,
            doc: Some(r#"{"q":"'"}"#.to_owned()),
        },
        Registration {
            operation: "op:v1".to_owned(),
            scope: ScopeKind::Tenant,
            ttl_ms: HOUR,
            mode: Mode::Staged,
            lease_ms: Some(3),
            registered_at_ms: NOW,
            doc: None,
        },
    ];
    table.register(&registrations).await.unwrap();
    assert_eq!(table.registrations().await.unwrap(), registrations);

    // The one session prepared nothing (a simple query, this one too, prepares nothing).
    let mut conn = table.pool().acquire().await.unwrap();
    let row = (&mut *conn)
        .fetch_one("SELECT count(*) FROM pg_prepared_statements")
        .await
        .unwrap();
    assert_eq!(row.get::<i64, _>(0), 0);
}

/// Values longer than the buffer literals are written through come out whole: a body of
/// every byte value twice and one more, a key of two-byte characters ending in a quote; on
/// the protocol's insert and through an operator's action alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_values_are_written_whole() {
    let (_, table) = table().await;
    let body: Vec<u8> = (0..=255u8).chain(0..=255u8).chain([7]).collect();
    let text = "é".repeat(100) + "'";
    let k = KeyRef {
        scope: &text,
        operation: "op:v1",
        key: &text,
    };
    assert!(put(table.pool(), k, NOW, NOW + HOUR, &body).await);
    let row = table.get(k, NOW).await.unwrap().unwrap();
    assert_eq!((row.scope.as_str(), row.key.as_str()), (k.scope, k.key));
    let stored = row.response.clone().unwrap();
    assert_eq!(stored.body.as_ref(), body.as_slice());

    let reversed: Vec<u8> = body.iter().rev().copied().collect();
    let response = StoredResponse {
        body: Bytes::from(reversed),
        ..stored
    };
    let by = Actor::new("alice").reason(text.clone());
    let acted = table.act(k, &row, &Action::Expire, &by, NOW).await.unwrap();
    let entry = table
        .audit(&AuditFilter::new().key(k))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(entry.id, acted.audit_id);
    assert_eq!(entry.reason.as_deref(), Some(text.as_str()));
    assert_eq!(entry.key, text);

    // A processing key completed by an operator with the long body.
    let other = KeyRef { key: "staged", ..k };
    let mut conn = table.pool().acquire().await.unwrap();
    let reservation = Reservation {
        key: other,
        fingerprint: &body,
        request: "{}",
        created_ms: NOW - HOUR,
        expires_ms: NOW + HOUR,
        locked_until_ms: NOW - 1,
        replace_expired: false,
        id: 7,
        field_digests: None,
    };
    assert!(
        idem_store::staged::reserve::<Postgres>(&mut conn, reservation, None)
            .await
            .unwrap()
    );
    drop(conn);
    let seen = table.get(other, NOW).await.unwrap().unwrap();
    assert_eq!(seen.fingerprint, body);
    let acted = table
        .act(other, &seen, &Action::Complete(response.clone()), &by, NOW)
        .await
        .unwrap();
    assert_eq!(acted.after.unwrap().response, Some(response.clone()));
    let read = table.get(other, NOW).await.unwrap().unwrap();
    assert_eq!(read.response, Some(response));
}

/// A statement as the server runs it carries its values as literals, not as parameters:
/// the operator's read of a key's row, caught waiting for the row's lock, names the key as
/// `text` literals of hexadecimal escapes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_carry_their_values_as_literals() {
    let (url, table) = table().await;
    let k = KeyRef {
        scope: "global",
        operation: "op:v1",
        key: "k'1",
    };
    assert!(put(table.pool(), k, NOW, NOW + HOUR, b"{}").await);
    let row = table.get(k, NOW).await.unwrap().unwrap();
    // Another session of this test holds the key's row.
    let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut watcher = sqlx::PgConnection::connect(&url).await.unwrap();
    holder.execute("BEGIN").await.unwrap();
    holder
        .execute("SELECT 1 FROM idempotency_keys FOR UPDATE")
        .await
        .unwrap();
    let act = tokio::spawn({
        let table = table.clone();
        async move {
            table
                .act(k, &row, &Action::Expire, &Actor::new("alice"), NOW)
                .await
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let waiting = loop {
        // From another session: inside the holder's transaction `pg_stat_activity` would
        // answer the snapshot of its first read every time.
        let found = (&mut watcher)
            .fetch_optional(
                "SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND datname = current_database() \
                 AND query LIKE '%FROM idempotency_keys%FOR UPDATE%'",
            )
            .await
            .unwrap();
        if let Some(found) = found {
            break found.get::<String, _>(0);
        }
        assert!(!act.is_finished(), "the action did not wait");
        assert!(std::time::Instant::now() < deadline, "nothing waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    holder.execute("ROLLBACK").await.unwrap();
    act.await.unwrap().unwrap();
    // "global", "op:v1", "k'1".
    for literal in [
        r"(E'\x67\x6c\x6f\x62\x61\x6c'::text)",
        r"(E'\x6f\x70\x3a\x76\x31'::text)",
        r"(E'\x6b\x27\x31'::text)",
    ] {
        assert!(waiting.contains(literal), "{literal} in {waiting}");
    }
    assert!(!waiting.contains('$'), "{waiting}");
}
