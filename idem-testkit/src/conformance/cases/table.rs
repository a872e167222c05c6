//! The tools' API on [`KeyTable`]: get, expire, delete, list with every filter, keyset
//! pagination, counts, sweeps, unreadable rows.

use std::collections::BTreeSet;

use idem_store::sqlx::Pool;
use idem_store::staged::Reservation;
use idem_store::{
    Backend, Cursor, KeyFilter, KeyRef, KeyRow, KeyStatus, KeyTable, NewRow, Page, StatusCounts,
    StoreError,
};

use crate::conformance::sql::ConformanceSql;
use crate::conformance::support::{Must as _, RESERVATION, fresh, put, settings};
use crate::harness::{HOUR, NOW};

fn kr<'a>(scope: &'a str, operation: &'a str, key: &'a str) -> KeyRef<'a> {
    KeyRef {
        scope,
        operation,
        key,
    }
}

fn keys_of(page: &Page) -> Vec<String> {
    page.keys.iter().map(|row| row.key.clone()).collect()
}

/// `n` completed keys `bulk-00000`… of `operation` in scope `global`, in one transaction.
async fn insert_many<DB: Backend>(pool: &Pool<DB>, operation: &str, n: usize, expires_ms: i64) {
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let mut tx = DB::begin(&mut conn, &settings(), None)
        .await
        .must("begin")
        .free()
        .must("begin without a lock");
    for i in 0..n {
        let name = format!("bulk-{i:05}");
        let row = NewRow {
            field_digests: None,
            key: kr("global", operation, &name),
            fingerprint: &[0],
            status: 200,
            headers_json: "[]",
            body: b"",
            created_ms: NOW - HOUR,
            completed_ms: NOW - HOUR,
            expires_ms,
            replace_expired: false,
        };
        let inserted = idem_store::protocol::insert_completed::<DB>(&mut tx, row, None)
            .await
            .must("insert_completed");
        assert!(inserted, "inserting {name}");
    }
    tx.commit().await.must("commit");
}

/// [`KeyTable::get`], [`KeyTable::expire`] and [`KeyTable::delete`] of one key: nothing for
/// an absent key; the row as stored (expired later on); expiring sets the expiry to now and
/// never postpones it; deleting returns the row and frees the key.
pub async fn get_expire_delete<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let k = kr("tenant:t1", "create_order:v1", "k-1");
    assert!(table.get(k, NOW).await.must("get").is_none());
    assert!(table.expire(k, NOW).await.must("expire").is_none());
    assert!(table.delete(k, NOW).await.must("delete").is_none());

    let created = NOW - HOUR;
    assert!(put(table.pool(), k, created, NOW + HOUR, b"\x00\xffbody").await);
    // The protocol refuses a second row for the key.
    assert!(!put(table.pool(), k, created, NOW + HOUR, b"other").await);
    let row = table.get(k, NOW).await.must("get").must("the key's row");
    assert_eq!(row.key_ref(), k);
    assert_eq!(row.status, KeyStatus::Completed);
    assert_eq!(row.fingerprint, [7; 32]);
    assert_eq!(row.created_at_ms, created);
    assert_eq!(row.completed_at_ms, Some(created + 5));
    assert_eq!(row.expires_at_ms, NOW + HOUR);
    let response = row.response.clone().must("the stored response");
    assert_eq!(response.status, 201);
    assert_eq!(response.body.as_ref(), b"\x00\xffbody");
    // The same row is expired later on.
    assert_eq!(
        table
            .get(k, NOW + HOUR)
            .await
            .must("get")
            .must("the key's row")
            .status,
        KeyStatus::Expired
    );

    let (before, after) = table
        .expire(k, NOW)
        .await
        .must("expire")
        .must("expiring a present key");
    assert_eq!(before, row);
    assert_eq!(after.status, KeyStatus::Expired);
    assert_eq!(after.expires_at_ms, NOW);
    assert_eq!(
        after,
        KeyRow {
            status: KeyStatus::Expired,
            expires_at_ms: NOW,
            ..row.clone()
        }
    );
    assert_eq!(
        table.get(k, NOW).await.must("get").must("the key's row"),
        after
    );
    let mut conn = table.pool().acquire().await.must("acquire");
    assert_eq!(
        idem_store::protocol::lookup::<DB>(&mut conn, k, None)
            .await
            .must("lookup")
            .must("list")
            .expires_at_ms,
        NOW
    );
    drop(conn);
    // Expiring again later does not postpone the expiry.
    let (before, again) = table
        .expire(k, NOW + HOUR)
        .await
        .must("expire")
        .must("expiring a present key");
    assert_eq!(before, again);
    assert_eq!(again.expires_at_ms, NOW);

    let deleted = table
        .delete(k, NOW)
        .await
        .must("delete")
        .must("deleting a present key");
    assert_eq!(deleted, after);
    assert!(table.get(k, NOW).await.must("get").is_none());
    assert!(table.delete(k, NOW).await.must("delete").is_none());
    // The key is free again.
    assert!(put(table.pool(), k, NOW, NOW + HOUR, b"again").await);
}

/// Keys in every state, several scopes and operations.
async fn populate<DB: Backend>(table: &KeyTable<DB>) {
    let pool = table.pool();
    for (scope, operation, k, expires) in [
        ("global", "create_order:v1", "a-1", NOW + HOUR),
        ("global", "create_order:v1", "a-2", NOW - 1),
        ("global", "create_order:v1", "b-1", NOW),
        ("global", "refund:v1", "a-1", NOW + HOUR),
        ("tenant:t1", "create_order:v1", "a-1", NOW + HOUR),
        ("tenant:t1", "create_order:v1", "a-3", NOW - HOUR),
        ("tenant:t2", "refund:v1", "c-1", NOW + 1),
    ] {
        assert!(
            put(
                pool,
                kr(scope, operation, k),
                NOW - 2 * HOUR,
                expires,
                b"{}"
            )
            .await
        );
    }
    let mut conn = pool.acquire().await.must("acquiring a connection");
    let reserved = idem_store::staged::reserve::<DB>(
        &mut conn,
        Reservation {
            key: kr("tenant:t1", "create_order:v1", "p-1"),
            fingerprint: &[0],
            request: "{}",
            created_ms: NOW - HOUR,
            expires_ms: NOW + HOUR,
            // Still processing at NOW + HOUR, where cases look again.
            locked_until_ms: NOW + 2 * HOUR,
            replace_expired: false,
            id: RESERVATION,
            field_digests: None,
        },
        None,
    )
    .await
    .must("reserve");
    assert!(reserved, "reserving p-1");
}

/// [`KeyTable::list`] with each filter (status at now, operation, scope, key prefix) and all
/// at once, in (scope, operation, key) order; operation and scope match exactly.
pub async fn list_filters<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    populate(&table).await;
    let list = |filter: KeyFilter| {
        let table = table.clone();
        async move {
            let page = table.list(&filter, NOW).await.must("list");
            assert!(page.next.is_none());
            page.keys
                .iter()
                .map(|row| format!("{} {} {} {}", row.scope, row.operation, row.key, row.status))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        list(KeyFilter::new()).await,
        [
            "global create_order:v1 a-1 completed",
            "global create_order:v1 a-2 expired",
            "global create_order:v1 b-1 expired",
            "global refund:v1 a-1 completed",
            "tenant:t1 create_order:v1 a-1 completed",
            "tenant:t1 create_order:v1 a-3 expired",
            "tenant:t1 create_order:v1 p-1 processing",
            "tenant:t2 refund:v1 c-1 completed",
        ]
    );
    assert_eq!(
        list(KeyFilter::new().status(KeyStatus::Expired)).await,
        [
            "global create_order:v1 a-2 expired",
            "global create_order:v1 b-1 expired",
            "tenant:t1 create_order:v1 a-3 expired",
        ]
    );
    assert_eq!(
        list(KeyFilter::new().status(KeyStatus::Completed)).await,
        [
            "global create_order:v1 a-1 completed",
            "global refund:v1 a-1 completed",
            "tenant:t1 create_order:v1 a-1 completed",
            "tenant:t2 refund:v1 c-1 completed",
        ]
    );
    assert_eq!(
        list(KeyFilter::new().status(KeyStatus::Processing)).await,
        ["tenant:t1 create_order:v1 p-1 processing"]
    );
    assert!(
        list(KeyFilter::new().status(KeyStatus::Stuck))
            .await
            .is_empty()
    );
    assert_eq!(
        list(KeyFilter::new().operation("refund:v1")).await,
        [
            "global refund:v1 a-1 completed",
            "tenant:t2 refund:v1 c-1 completed",
        ]
    );
    assert_eq!(
        list(KeyFilter::new().scope("tenant:t1")).await,
        [
            "tenant:t1 create_order:v1 a-1 completed",
            "tenant:t1 create_order:v1 a-3 expired",
            "tenant:t1 create_order:v1 p-1 processing",
        ]
    );
    assert_eq!(
        list(KeyFilter::new().key_prefix("a-")).await.len(),
        5,
        "a-1 ×3, a-2, a-3"
    );
    // Exact matches only: no prefix match on operation or scope.
    assert!(list(KeyFilter::new().operation("refund")).await.is_empty());
    assert!(list(KeyFilter::new().scope("tenant")).await.is_empty());
    // Everything at once.
    assert_eq!(
        list(
            KeyFilter::new()
                .status(KeyStatus::Expired)
                .scope("global")
                .operation("create_order:v1")
                .key_prefix("a")
        )
        .await,
        ["global create_order:v1 a-2 expired"]
    );
    // The same rows later: everything completed has expired.
    let later = table
        .list(&KeyFilter::new().status(KeyStatus::Expired), NOW + HOUR)
        .await
        .must("list");
    assert_eq!(later.keys.len(), 7);
    assert!(later.keys.iter().all(|r| r.status == KeyStatus::Expired));
}

/// Key prefixes are literal and case-sensitive: `%`, `_`, `[`, `*`, `?`, `!` and `\\` match
/// themselves only.
pub async fn prefixes_are_literal<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let keys = [
        "a%b1", "a%b2", "axb1", "a_c", "abc", "A%b3", "a[1]", "a1]", "a*1", "a?1", "a!1", "a\\1",
        "a\\\\",
    ];
    for k in keys {
        assert!(put(table.pool(), kr("global", "op:v1", k), NOW, NOW + HOUR, b"").await);
    }
    let with = |prefix: &str| {
        let table = table.clone();
        let filter = KeyFilter::new().key_prefix(prefix);
        async move {
            let mut found = keys_of(&table.list(&filter, NOW).await.must("list"));
            found.sort();
            found
        }
    };
    assert_eq!(with("a%").await, ["a%b1", "a%b2"]);
    assert_eq!(with("a%b1").await, ["a%b1"]);
    assert_eq!(with("a_").await, ["a_c"]);
    assert_eq!(with("A").await, ["A%b3"], "case-sensitive");
    assert_eq!(with("a[").await, ["a[1]"]);
    assert_eq!(with("a1]").await, ["a1]"]);
    assert_eq!(with("a*").await, ["a*1"]);
    assert_eq!(with("a?").await, ["a?1"]);
    assert_eq!(with("a!").await, ["a!1"]);
    assert_eq!(with("a\\").await, ["a\\1", "a\\\\"]);
    assert_eq!(with("a\\\\").await, ["a\\\\"]);
    assert_eq!(with("").await.len(), keys.len());
    assert!(with("zz").await.is_empty());
}

/// Keyset pagination: pages in (scope, operation, key) order without duplicates or gaps, also
/// when keys are added and deleted behind and ahead of the cursor between pages; cursors
/// survive being written out; the last page has no next cursor.
pub async fn pagination<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let mut all = BTreeSet::new();
    for scope in ["global", "tenant:t1"] {
        for operation in ["op:v1", "op:v2"] {
            for i in 0..6 {
                let k = format!("k-{i:02}");
                assert!(put(table.pool(), kr(scope, operation, &k), NOW, NOW + HOUR, b"").await);
                all.insert((scope.to_owned(), operation.to_owned(), k));
            }
        }
    }
    let everything = table
        .list(&KeyFilter::new().limit(1000), NOW)
        .await
        .must("list");
    assert_eq!(everything.keys.len(), 24);
    assert!(everything.next.is_none());
    let order: Vec<_> = everything
        .keys
        .iter()
        .map(|r| (r.scope.clone(), r.operation.clone(), r.key.clone()))
        .collect();
    // (scope, operation, key) order, which for these values is also byte order.
    assert_eq!(order, all.iter().cloned().collect::<Vec<_>>());

    let mut filter = KeyFilter::new().limit(5);
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = table.list(&filter, NOW).await.must("list");
        pages += 1;
        assert!(page.keys.len() <= 5);
        seen.extend(
            page.keys
                .iter()
                .map(|r| (r.scope.clone(), r.operation.clone(), r.key.clone())),
        );
        if pages == 2 {
            // Changes behind and ahead of the cursor meanwhile: the pages go on from where
            // they were, neither repeating nor skipping the keys that stayed.
            assert!(
                put(
                    table.pool(),
                    kr("global", "op:v1", "k-00a"),
                    NOW,
                    NOW + HOUR,
                    b""
                )
                .await
            );
            assert!(
                put(
                    table.pool(),
                    kr("tenant:t1", "op:v2", "k-99"),
                    NOW,
                    NOW + HOUR,
                    b""
                )
                .await
            );
            let cursor = page.next.clone().must("the next page's cursor");
            table
                .delete(cursor.key(), NOW)
                .await
                .must("delete")
                .must("deleting a present key");
        }
        match page.next {
            Some(next) => {
                // Cursors survive being written out and read back.
                let next: Cursor = next
                    .to_string()
                    .parse()
                    .must("parsing a cursor written out");
                filter.after = Some(next);
            }
            None => break,
        }
    }
    assert_eq!(pages, 5, "24 + 1 keys, 5 a page");
    let mut expected = order.clone();
    expected.push(("tenant:t1".into(), "op:v2".into(), "k-99".into()));
    assert_eq!(seen, expected);
    // Exactly a page's worth left: the last full page says there is no next.
    let mut filter = KeyFilter::new().limit(4).scope("global");
    let mut count = 0;
    loop {
        let page = table.list(&filter, NOW).await.must("list");
        count += page.keys.len();
        match page.next {
            Some(next) => filter.after = Some(next),
            None => break,
        }
    }
    assert_eq!(
        count, 12,
        "7 keys of op:v1 (one added), 5 of op:v2 (one deleted)"
    );
}

/// Page sizes: at most 1000, at least 1, 50 by default.
pub async fn limits_are_clamped<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    insert_many(table.pool(), "bulk:v1", 1005, NOW + HOUR).await;
    let page = table
        .list(&KeyFilter::new().limit(5000), NOW)
        .await
        .must("list");
    assert_eq!(page.keys.len(), 1000);
    assert_eq!(page.keys[999].key, "bulk-00999");
    let rest = table
        .list(&KeyFilter::new().limit(5000).after(page.next), NOW)
        .await
        .must("list");
    assert_eq!(rest.keys.len(), 5);
    assert!(rest.next.is_none());
    let one = table
        .list(&KeyFilter::new().limit(0), NOW)
        .await
        .must("list");
    assert_eq!(keys_of(&one), ["bulk-00000"]);
    assert!(one.next.is_some());
    let default = table.list(&KeyFilter::new(), NOW).await.must("list");
    assert_eq!(default.keys.len(), 50);
}

/// [`KeyTable::counts`]: keys by state and by operation at a given time.
pub async fn counts<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let empty = table.counts(NOW).await.must("counts");
    assert_eq!(empty.by_status.total(), 0);
    assert!(empty.by_operation.is_empty());
    populate(&table).await;
    let counts = table.counts(NOW).await.must("counts");
    assert_eq!(
        counts.by_status,
        StatusCounts {
            completed: 4,
            processing: 1,
            stuck: 0,
            expired: 3,
        }
    );
    assert_eq!(counts.by_operation.len(), 2);
    let orders = counts.by_operation["create_order:v1"];
    assert_eq!(
        (orders.completed, orders.processing, orders.expired),
        (2, 1, 3)
    );
    let refunds = counts.by_operation["refund:v1"];
    assert_eq!((refunds.completed, refunds.expired), (2, 0));
    assert_eq!(refunds.get(KeyStatus::Completed), 2);
    assert_eq!(counts.oldest_stuck_created_at_ms, None);
    // The size where the backend can tell.
    assert!(counts.table_bytes != Some(0), "{counts:?}");
    // Later, everything completed has expired.
    let later = table.counts(NOW + HOUR).await.must("counts");
    assert_eq!(later.by_status.expired, 7);
    assert_eq!(later.by_status.processing, 1);
}

/// [`KeyTable::sweep_batch`] deletes keys expired at or before its time, at most a batch
/// (at least one) per call.
pub async fn sweep_deletes_only_expired<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    populate(&table).await;
    // Expired by NOW - 1: a-2 (NOW - 1), a-3 (NOW - HOUR). Not b-1 (NOW).
    assert_eq!(table.sweep_batch(NOW - 1, 1).await.must("sweep_batch"), 1);
    assert_eq!(
        table.sweep_batch(NOW - 1, 0).await.must("sweep_batch"),
        1,
        "batch 0 is 1"
    );
    assert_eq!(table.sweep_batch(NOW - 1, 10).await.must("sweep_batch"), 0);
    let left = table.list(&KeyFilter::new(), NOW).await.must("list");
    assert_eq!(left.keys.len(), 6);
    assert!(
        left.keys
            .iter()
            .all(|r| r.expires_at_ms > NOW - 1 && r.key != "a-2" && r.key != "a-3")
    );
    assert_eq!(
        table.sweep_batch(NOW, 10).await.must("sweep_batch"),
        1,
        "b-1"
    );
    let counts = table.counts(NOW).await.must("counts");
    assert_eq!(counts.by_status.expired, 0);
    assert_eq!(counts.by_status.total(), 5);
}

/// A row whose headers are not JSON: the tools are told ([`StoreError::Corrupt`]), the
/// protocol refuses it (never replays the body without its headers), and the row can still
/// be deleted.
pub async fn unreadable_rows<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let k = kr("global", "op:v1", "k");
    assert!(put(table.pool(), k, NOW, NOW + HOUR, b"body").await);
    DB::corrupt_headers(table.pool(), k)
        .await
        .must("corrupting the headers");
    // Tools are told…
    match table.get(k, NOW).await {
        Err(StoreError::Corrupt(what)) => assert!(what.contains("headers"), "{what}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        table.list(&KeyFilter::new(), NOW).await,
        Err(StoreError::Corrupt(_))
    ));
    // …the protocol refuses it, naming the column…
    let mut conn = table.pool().acquire().await.must("acquire");
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup")
        .must("the key's row");
    drop(conn);
    assert!(stored.response.is_none(), "{:?}", stored.response);
    assert_eq!(
        stored.unopened,
        Some(idem_store::SealError::Unreadable("response_headers"))
    );
    // …and the row can still be deleted.
    assert!(table.delete(k, NOW).await.is_err());
    assert!(table.get(k, NOW).await.must("get").is_none());
}

/// Cursors are checked when parsed: text that is not one is [`StoreError::InvalidCursor`];
/// one written out reads back as the same position, whatever the key holds.
pub async fn invalid_cursor_is_an_error<DB: ConformanceSql>() {
    for text in ["not a cursor", "0", "00000001", "0000000161"] {
        match text.parse::<Cursor>() {
            Err(StoreError::InvalidCursor) => {}
            other => panic!("parsing {text:?} as a cursor: {other:?}"),
        }
    }
    let table = fresh::<DB>().await;
    let odd = kr("tenant:ä", "op:v1", "k'%\\é");
    assert!(put(table.pool(), odd, NOW, NOW + HOUR, b"").await);
    assert!(
        put(
            table.pool(),
            kr("tenant:ä", "op:v1", "z"),
            NOW,
            NOW + HOUR,
            b""
        )
        .await
    );
    let cursor: Cursor = Cursor::at(odd)
        .to_string()
        .parse()
        .must("parsing a cursor written out");
    assert_eq!(cursor.key(), odd, "the cursor's key");
    let page = table
        .list(&KeyFilter::new().after(Some(cursor)), NOW)
        .await
        .must("list");
    assert_eq!(keys_of(&page), ["z"], "the keys after the cursor");
}
