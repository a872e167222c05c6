//! Operator actions ([`KeyTable::act`]) with their fencing and audit trail, journals for
//! tools, and the operation registry.
//!
//! Staged keys are written through staged mode's own statements ([`super::staged`]).

use idem_spec::{Mode, ScopeKind};
use idem_store::{
    Acted, Action, Actor, AuditFilter, Backend, KeyFilter, KeyRef, KeyRow, KeyStatus, KeyTable,
    NewRow, NotApplicable, Registration, StoreError, StoredResponse,
};
use serde_json::json;

use super::staged::{JOURNAL, staged_key};
use crate::conformance::sql::ConformanceSql;
use crate::conformance::support::{Must as _, RESERVATION, at, fresh, settings};
use crate::harness::{HOUR, NOW};

fn key(key: &str) -> KeyRef<'_> {
    KeyRef {
        scope: "tenant:acme",
        operation: "pay:v1",
        key,
    }
}

fn alice() -> Actor {
    Actor::new("alice").reason("INC-42")
}

fn response(status: u16, body: &'static [u8]) -> StoredResponse {
    StoredResponse {
        status,
        headers: vec![("content-type".to_owned(), "application/json".to_owned())],
        body: bytes::Bytes::from_static(body),
    }
}

/// Entries in the audit trail.
async fn audit_rows<DB: Backend>(table: &KeyTable<DB>) -> i64 {
    let entries = table
        .audit(&AuditFilter::new().limit(1000))
        .await
        .must("audit");
    i64::try_from(entries.len()).unwrap_or(i64::MAX)
}

/// A takeover: the attempt number moves on, the lease stays as it was.
async fn bump_attempt<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>) {
    let seen = row(table, k, NOW).await;
    let lease = seen.locked_until_ms.must("the key's lease");
    let mut conn = table.pool().acquire().await.must("acquiring a connection");
    idem_store::staged::take_over::<DB>(&mut conn, k, at(seen.attempt), lease, lease, None)
        .await
        .must("take_over")
        .must("taking the key over");
}

/// The running attempt renews its lease.
async fn renew_lease<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>, until_ms: i64) {
    let seen = row(table, k, NOW).await;
    let mut conn = table.pool().acquire().await.must("acquiring a connection");
    let renewed = idem_store::staged::renew::<DB>(&mut conn, k, at(seen.attempt), until_ms)
        .await
        .must("renew");
    assert!(renewed, "renewing the running attempt's lease");
}

/// The running attempt journals a step, its lease unchanged.
async fn journal_step<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>, step: &str) {
    let seen = row(table, k, NOW).await;
    let lease = seen.locked_until_ms.must("the key's lease");
    let mut conn = table.pool().acquire().await.must("acquiring a connection");
    let journaled = idem_store::staged::journal::<DB>(
        &mut conn,
        k,
        at(seen.attempt),
        step,
        JOURNAL,
        lease,
        None,
    )
    .await
    .must("journal");
    assert!(journaled, "journaling the running attempt");
}

/// A completed key, stored through the protocol's primitives as the runtime does.
async fn store<DB: Backend>(table: &KeyTable<DB>, key: KeyRef<'_>, expires_ms: i64) {
    let mut conn = table.pool().acquire().await.must("acquire");
    let tx = DB::begin(&mut conn, &settings(), None)
        .await
        .must("the store")
        .free()
        .must("the store");
    let headers = StoredResponse::encode_headers([("content-type", "application/json")]);
    let row = NewRow {
        field_digests: None,
        key,
        fingerprint: &[7; 32],
        status: 201,
        headers_json: &headers,
        body: b"{\"id\":1}",
        created_ms: NOW - HOUR,
        completed_ms: NOW - HOUR + 5,
        expires_ms,
        replace_expired: false,
    };
    assert!(
        idem_store::protocol::insert_completed_and_commit::<DB>(tx, row, None)
            .await
            .must("the store")
    );
}

async fn row<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>, now_ms: i64) -> KeyRow {
    table.get(k, now_ms).await.must("get").must("the key's row")
}

/// The one audit entry of `k`, checked against what `act` returned.
async fn audited<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>, acted: &Acted, action: &str) {
    let entries = table
        .audit(&AuditFilter::new().key(k))
        .await
        .must("the store");
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];
    assert_eq!(entry.id, acted.audit_id);
    assert_eq!(entry.at_ms, NOW);
    assert_eq!(entry.operator, "alice");
    assert_eq!(entry.reason.as_deref(), Some("INC-42"));
    assert_eq!(
        (
            entry.scope.as_str(),
            entry.operation.as_str(),
            entry.key.as_str()
        ),
        (k.scope, k.operation, k.key)
    );
    assert_eq!(entry.action, action);
    let before = entry.before.as_ref().must("the audit entry's row");
    assert_json_is_row(before, &acted.before);
    match (&entry.after, &acted.after) {
        (Some(json), Some(after)) => assert_json_is_row(json, after),
        (None, None) => {}
        other => panic!("{other:?}"),
    }
}

/// The audit trail's JSON of a row.
fn assert_json_is_row(json: &serde_json::Value, row: &KeyRow) {
    assert_eq!(json["scope"], row.scope.as_str());
    assert_eq!(json["operation"], row.operation.as_str());
    assert_eq!(json["key"], row.key.as_str());
    assert_eq!(json["status"], row.status.as_str());
    assert_eq!(json["attempt"], row.attempt);
    assert_eq!(json["locked_until_ms"], json!(row.locked_until_ms));
    assert_eq!(json["recovery_point"], json!(row.recovery_point));
    assert_eq!(json["created_at_ms"], row.created_at_ms);
    assert_eq!(json["expires_at_ms"], row.expires_at_ms);
    assert_eq!(json["completed_at_ms"], json!(row.completed_at_ms));
    match &row.response {
        None => assert!(json["response"].is_null(), "{json}"),
        Some(response) => {
            assert_eq!(json["response"]["status"], response.status);
            assert_eq!(json["response"]["headers"], json!(response.headers));
            match std::str::from_utf8(&response.body) {
                Ok(text) => assert_eq!(json["response"]["body"], text),
                Err(_) => assert!(json["response"]["body_hex"].is_string(), "{json}"),
            }
        }
    }
}

/// Processing keys whose lease ran out are stuck: listed as such, counted, the oldest one's
/// creation reported.
pub async fn stuck_keys_are_listed_and_counted<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    staged_key(pool, key("s-1"), NOW - 3 * HOUR, NOW - 1_000, 1).await;
    // A lease that runs out exactly now has run out.
    staged_key(pool, key("s-2"), NOW - 2 * HOUR, NOW, 2).await;
    staged_key(pool, key("p-1"), NOW - 5 * HOUR, NOW + 30_000, 1).await;
    store(&table, key("c-1"), NOW + HOUR).await;

    let keys = |status| {
        let table = table.clone();
        async move {
            let page = table
                .list(&KeyFilter::new().status(status), NOW)
                .await
                .must("the store");
            page.keys.into_iter().map(|r| r.key).collect::<Vec<_>>()
        }
    };
    assert_eq!(keys(KeyStatus::Stuck).await, ["s-1", "s-2"]);
    assert_eq!(keys(KeyStatus::Processing).await, ["p-1"]);
    assert_eq!(keys(KeyStatus::Completed).await, ["c-1"]);
    let s1 = row(&table, key("s-1"), NOW).await;
    assert_eq!(s1.status, KeyStatus::Stuck);
    assert_eq!(s1.locked_until_ms, Some(NOW - 1_000));
    assert_eq!(s1.attempt, 1);
    assert_eq!(s1.recovery_point.as_deref(), Some("charge"));
    assert_eq!(s1.reservation, Some(RESERVATION));
    assert_eq!(s1.response, None);
    let c1 = row(&table, key("c-1"), NOW).await;
    assert_eq!(c1.reservation, None, "an atomic row has no reservation");

    let counts = table.counts(NOW).await.must("counts");
    assert_eq!(
        (
            counts.by_status.stuck,
            counts.by_status.processing,
            counts.by_status.completed
        ),
        (2, 1, 1)
    );
    assert_eq!(counts.by_operation["pay:v1"].stuck, 2);
    // s-1's; p-1 is older but not stuck.
    assert_eq!(counts.oldest_stuck_created_at_ms, Some(NOW - 3 * HOUR));
    let later = table.counts(NOW + 60_000).await.must("counts");
    assert_eq!(later.by_status.stuck, 3);
    assert_eq!(later.oldest_stuck_created_at_ms, Some(NOW - 5 * HOUR));
    let earlier = table.counts(NOW - 2_000).await.must("counts");
    assert_eq!(earlier.by_status.stuck, 0);
    assert_eq!(earlier.oldest_stuck_created_at_ms, None);
}

/// Releasing a stuck key makes it takeable at once, one attempt on; releasing a live one
/// fences its running attempt out.
pub async fn act_release<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let stuck = key("stuck");
    staged_key(table.pool(), stuck, NOW - HOUR, NOW - 1_000, 1).await;
    let seen = row(&table, stuck, NOW).await;
    let acted = table
        .act(stuck, &seen, &Action::Release, &alice(), NOW)
        .await
        .must("act");
    assert_eq!(acted.before, seen);
    let after = acted.after.clone().must("the row after the action");
    assert_eq!(after, row(&table, stuck, NOW).await);
    assert_eq!(after.attempt, 2);
    assert_eq!(after.reservation, Some(RESERVATION), "the same reservation");
    assert_eq!(after.locked_until_ms, Some(NOW));
    // Takeable: its lease has run out, and it resumes from where it was.
    assert_eq!(after.status, KeyStatus::Stuck);
    assert_eq!(after.recovery_point.as_deref(), Some("charge"));
    assert_eq!(after.response, None);
    assert_eq!(after.expires_at_ms, seen.expires_at_ms);
    let journal = table
        .journal(stuck)
        .await
        .must("journal")
        .must("the key's journal");
    assert_eq!(journal.steps.len(), 2);
    audited(&table, stuck, &acted, "release").await;
    let entry = &table.audit(&AuditFilter::new()).await.must("audit")[0];
    assert_eq!(
        entry.before.as_ref().must("the audit entry's row")["attempt"],
        1
    );
    assert_eq!(
        entry.before.as_ref().must("the audit entry's row")["status"],
        "stuck"
    );
    assert_eq!(
        entry.after.as_ref().must("the audit entry's row")["attempt"],
        2
    );
    assert_eq!(
        entry.after.as_ref().must("the audit entry's row")["locked_until_ms"],
        NOW
    );

    // Stuck needed no force: none recorded.
    assert!(!acted.forced);
    assert!(!entry.forced);

    let live = key("live");
    staged_key(table.pool(), live, NOW - HOUR, NOW + 30_000, 3).await;
    let seen = row(&table, live, NOW).await;
    assert_eq!(seen.status, KeyStatus::Processing);
    let acted = table
        .act(live, &seen, &Action::Release, &alice().force(), NOW)
        .await
        .must("act");
    assert!(acted.forced);
    let after = acted.after.must("the row after the action");
    assert_eq!((after.attempt, after.locked_until_ms), (4, Some(NOW)));
    assert_eq!(after.status, KeyStatus::Stuck);
    assert_eq!(audit_rows(&table).await, 2);
}

/// Completing a processing or stuck key stores the operator's response: replayed from then
/// on, the lease gone, the running attempt fenced out.
pub async fn act_complete<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let k = key("k");
    staged_key(table.pool(), k, NOW - HOUR, NOW - 1_000, 1).await;
    let seen = row(&table, k, NOW).await;
    let given = response(201, b"{\"id\":\"order-7\"}");
    let acted = table
        .act(k, &seen, &Action::Complete(given.clone()), &alice(), NOW)
        .await
        .must("the store");
    let after = acted.after.clone().must("the row after the action");
    assert_eq!(after, row(&table, k, NOW).await);
    assert_eq!(after.status, KeyStatus::Completed);
    assert_eq!(after.response.as_ref(), Some(&given));
    assert_eq!(after.completed_at_ms, Some(NOW));
    assert_eq!(after.locked_until_ms, None);
    assert_eq!(after.attempt, 2);
    // The TTL counts from the completion: `pay:v1` is not registered, so the row's own
    // (`expires_at - created_at`, a day).
    assert_eq!(after.expires_at_ms, NOW + 24 * HOUR);
    assert_eq!(after.fingerprint, seen.fingerprint);
    // The protocol replays it.
    let mut conn = table.pool().acquire().await.must("acquire");
    let stored = idem_store::protocol::lookup::<DB>(&mut conn, k, None)
        .await
        .must("lookup")
        .must("the key's row");
    drop(conn);
    assert_eq!(stored.response, Some(given));
    audited(&table, k, &acted, "complete").await;
    let entry = &table.audit(&AuditFilter::new()).await.must("audit")[0];
    let after_json = entry.after.as_ref().must("the audit entry's row");
    assert_eq!(after_json["status"], "completed");
    assert_eq!(after_json["response"]["body"], "{\"id\":\"order-7\"}");
    assert_eq!(after_json["locked_until_ms"], serde_json::Value::Null);
    assert!(entry.before.as_ref().must("the audit entry's row")["response"].is_null());
}

/// Failing stores a failure, any body (a binary one is hexadecimal in the audit trail), and
/// refuses a success.
pub async fn act_fail<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let k = key("k");
    staged_key(table.pool(), k, NOW - HOUR, NOW + 30_000, 1).await;
    let seen = row(&table, k, NOW).await;
    for status in [200, 204, 399] {
        match table
            .act(
                k,
                &seen,
                &Action::Fail(response(status, b"")),
                &alice(),
                NOW,
            )
            .await
        {
            Err(StoreError::InvalidArgument(why)) => assert!(why.contains("400"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(row(&table, k, NOW).await, seen);
    assert_eq!(audit_rows(&table).await, 0);

    let given = response(502, &[0xff, 0xfe, 0x00]);
    let acted = table
        .act(
            k,
            &seen,
            &Action::Fail(given.clone()),
            &alice().force(),
            NOW,
        )
        .await
        .must("the store");
    let after = acted.after.clone().must("the row after the action");
    assert_eq!(after.status, KeyStatus::Completed);
    assert_eq!(after.response.as_ref(), Some(&given));
    assert_eq!((after.attempt, after.locked_until_ms), (2, None));
    audited(&table, k, &acted, "fail").await;
    let entry = &table.audit(&AuditFilter::new()).await.must("audit")[0];
    let json = &entry.after.as_ref().must("the audit entry's row")["response"];
    assert_eq!(json["body_hex"], "fffe00");
    assert!(json.get("body").is_none(), "{json}");
    assert_eq!(json["status"], 502);
}

/// Expiring sets `expires_at` to now, once; deleting removes the row.
pub async fn act_expire_and_delete<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let k = key("c");
    store(&table, k, NOW + HOUR).await;
    let seen = row(&table, k, NOW).await;
    let acted = table
        .act(k, &seen, &Action::Expire, &alice(), NOW)
        .await
        .must("act");
    let after = acted.after.clone().must("the row after the action");
    assert_eq!(after, row(&table, k, NOW).await);
    assert_eq!(after.expires_at_ms, NOW);
    assert_eq!(after.status, KeyStatus::Expired);
    assert_eq!(after.attempt, seen.attempt);
    assert_eq!(after.response, seen.response);
    audited(&table, k, &acted, "expire").await;
    // Expired already: refused, even with the row as it is now.
    match table.act(k, &after, &Action::Expire, &alice(), NOW).await {
        Err(StoreError::NotApplicable(NotApplicable::ExpiredAlready { expired_at_ms })) => {
            assert_eq!(expired_at_ms, after.expires_at_ms);
        }
        other => panic!("{other:?}"),
    }

    // A staged key that is not final never expires, running or stuck, forced or not.
    let staged = key("s");
    staged_key(table.pool(), staged, NOW - HOUR, NOW - 1_000, 1).await;
    let seen = row(&table, staged, NOW).await;
    assert_eq!(seen.status, KeyStatus::Stuck);
    for by in [alice(), alice().force()] {
        match table.act(staged, &seen, &Action::Expire, &by, NOW).await {
            Err(StoreError::NotApplicable(NotApplicable::NotFinal { status })) => {
                assert_eq!(status, KeyStatus::Stuck);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(row(&table, staged, NOW).await, seen);

    // A stuck key is deleted without force: gone, its journal with it; the audit trail keeps
    // the row.
    let acted = table
        .act(staged, &seen, &Action::Delete, &alice(), NOW)
        .await
        .must("act");
    assert!(!acted.forced);
    assert_eq!(acted.before, seen);
    assert_eq!(acted.after, None);
    assert!(table.get(staged, NOW).await.must("get").is_none());
    assert!(table.journal(staged).await.must("journal").is_none());
    let entries = table
        .audit(&AuditFilter::new().key(staged))
        .await
        .must("the store");
    assert_eq!(
        entries
            .iter()
            .map(|e| e.action.as_str())
            .collect::<Vec<_>>(),
        ["delete"]
    );
    assert_eq!(entries[0].after, None);
    assert_eq!(
        entries[0].before.as_ref().must("the audit entry's row")["attempt"],
        1
    );
    assert_eq!(entries[0].id, acted.audit_id);
    // An expired key is deleted as well.
    let seen = row(&table, k, NOW).await;
    table
        .act(k, &seen, &Action::Delete, &alice(), NOW)
        .await
        .must("act");
    assert_eq!(table.counts(NOW).await.must("counts").by_status.total(), 0);
    assert_eq!(audit_rows(&table).await, 3);
}

/// Releasing, completing or failing a completed (or expired) key does not apply.
pub async fn act_not_applicable<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let completed = key("c");
    let expired = key("e");
    store(&table, completed, NOW + HOUR).await;
    store(&table, expired, NOW - 1).await;
    for k in [completed, expired] {
        let seen = row(&table, k, NOW).await;
        for action in [
            Action::Release,
            Action::Complete(response(200, b"{}")),
            Action::Fail(response(500, b"")),
        ] {
            match table.act(k, &seen, &action, &alice(), NOW).await {
                Err(StoreError::NotApplicable(NotApplicable::NotRunning {
                    action: refused,
                    status,
                })) => {
                    assert_eq!((refused, status), (action.name(), seen.status));
                }
                other => panic!("{} on {}: {other:?}", action.name(), seen.status),
            }
        }
        assert_eq!(row(&table, k, NOW).await, seen);
    }
    let seen = row(&table, expired, NOW).await;
    assert!(matches!(
        table
            .act(expired, &seen, &Action::Expire, &alice(), NOW)
            .await,
        Err(StoreError::NotApplicable(_))
    ));
    assert_eq!(audit_rows(&table).await, 0);
    assert!(
        table
            .audit(&AuditFilter::new())
            .await
            .must("audit")
            .is_empty()
    );
}

/// A row that moved between the operator's read and the action refuses the action, changes
/// nothing and audits nothing.
pub async fn act_fenced_refusals<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let pool = table.pool();
    let k = key("k");
    staged_key(pool, k, NOW - HOUR, NOW - 1_000, 1).await;

    // A retry took the key over.
    let seen = row(&table, k, NOW).await;
    bump_attempt(&table, k).await;
    let now = row(&table, k, NOW).await;
    match table.act(k, &seen, &Action::Release, &alice(), NOW).await {
        Err(StoreError::Changed {
            current: Some(current),
        }) => {
            assert_eq!(*current, now);
            assert_eq!(current.attempt, 2);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(row(&table, k, NOW).await, now);

    // The running attempt renewed its lease.
    let seen = row(&table, k, NOW).await;
    renew_lease(&table, k, NOW + 30_000).await;
    let error = table
        .act(
            k,
            &seen,
            &Action::Complete(response(200, b"")),
            &alice(),
            NOW,
        )
        .await
        .expect_err("an error");
    assert!(error.is_changed(), "{error:?}");
    let StoreError::Changed {
        current: Some(current),
    } = error
    else {
        unreachable!()
    };
    assert_eq!(current.status, KeyStatus::Processing);
    assert_eq!(current.locked_until_ms, Some(NOW + 30_000));

    // It journaled a step.
    let seen = row(&table, k, NOW).await;
    journal_step(&table, k, "ship").await;
    assert!(
        table
            .act(k, &seen, &Action::Fail(response(500, b"")), &alice(), NOW)
            .await
            .expect_err("an error")
            .is_changed()
    );

    // Another operator released it (forced: its lease is live).
    let seen = row(&table, k, NOW).await;
    table
        .act(k, &seen, &Action::Release, &Actor::new("bob").force(), NOW)
        .await
        .must("act");
    assert!(
        table
            .act(k, &seen, &Action::Delete, &alice(), NOW)
            .await
            .expect_err("an error")
            .is_changed()
    );
    let seen_by_bob = row(&table, k, NOW).await;

    // Someone deleted it.
    table
        .delete(k, NOW)
        .await
        .must("delete")
        .must("deleting a present key");
    match table
        .act(k, &seen_by_bob, &Action::Delete, &alice(), NOW)
        .await
    {
        Err(StoreError::Changed { current: None }) => {}
        other => panic!("{other:?}"),
    }
    // Only bob's action is in the trail.
    let entries = table.audit(&AuditFilter::new()).await.must("audit");
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].operator, "bob");
    assert_eq!(entries[0].reason, None);

    // A lease that ran out since the read is not a change: the same row, now stuck.
    let k = key("lapsed");
    staged_key(pool, k, NOW - HOUR, NOW - 5_000, 1).await;
    let seen = row(&table, k, NOW - 10_000).await;
    assert_eq!(seen.status, KeyStatus::Processing);
    let acted = table
        .act(k, &seen, &Action::Release, &alice(), NOW)
        .await
        .must("act");
    assert_eq!(acted.before.status, KeyStatus::Stuck);
}

/// Every staged write of `attempt` is refused (returns false) and changes nothing: the
/// attempt was fenced out.
async fn assert_fenced<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>, attempt: i64) {
    let before = table.get(k, NOW).await.must("get");
    let mut conn = table.pool().acquire().await.must("acquiring a connection");
    let ending = idem_store::staged::Ending {
        status: 201,
        headers_json: "[]",
        body: b"{\"charged\":true}",
        completed_ms: NOW + 1,
        expires_ms: NOW + 1 + HOUR,
    };
    let journal = idem_store::staged::journal::<DB>(
        &mut conn,
        k,
        at(attempt),
        "ship",
        JOURNAL,
        NOW + 60_000,
        None,
    )
    .await
    .must("journal");
    assert!(!journal, "{}: a fenced attempt journaled a step", k.key);
    let renewed = idem_store::staged::renew::<DB>(&mut conn, k, at(attempt), NOW + 60_000)
        .await
        .must("renew");
    assert!(!renewed, "{}: a fenced attempt renewed its lease", k.key);
    let released = idem_store::staged::release::<DB>(&mut conn, k, at(attempt), NOW + 1)
        .await
        .must("release");
    assert!(!released, "{}: a fenced attempt released the key", k.key);
    let finished = idem_store::staged::finish::<DB>(&mut conn, k, at(attempt), ending, None)
        .await
        .must("finish");
    assert!(!finished, "{}: a fenced attempt finished the key", k.key);
    drop(conn);
    assert_eq!(table.get(k, NOW).await.must("get"), before, "{}", k.key);
}

/// The one audit entry of `k` says whether the action was forced.
async fn audited_forced<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>, forced: bool) {
    let entries = table.audit(&AuditFilter::new().key(k)).await.must("audit");
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].forced, forced, "{}: {entries:?}", k.key);
}

/// An action on a key whose lease is live (an attempt is running) is refused unless forced:
/// release, complete, fail and delete; forced, it fences the running attempt out (its
/// staged writes change nothing afterwards) and the audit trail says it was forced. Expire
/// does not apply to a key that is not final, forced or not; a stuck key needs no force.
pub async fn act_live_lease_needs_force<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let lease = NOW + 30_000;
    let actions = [
        ("l-release", Action::Release),
        ("l-complete", Action::Complete(response(201, b"{\"id\":7}"))),
        ("l-fail", Action::Fail(response(502, b"provider down"))),
        ("l-delete", Action::Delete),
    ];
    for (name, action) in &actions {
        let k = key(name);
        staged_key(table.pool(), k, NOW - HOUR, lease, 2).await;
        let seen = row(&table, k, NOW).await;
        assert_eq!(seen.status, KeyStatus::Processing);
        match table.act(k, &seen, action, &alice(), NOW).await {
            Err(StoreError::NeedsForce {
                action: refused,
                hazard,
            }) => {
                assert_eq!(refused, action.name());
                assert_eq!(
                    hazard,
                    idem_store::Hazard::LeaseLive {
                        locked_until_ms: Some(lease)
                    }
                );
            }
            other => panic!("{} unforced: {other:?}", action.name()),
        }
        let error = table
            .act(k, &seen, action, &alice(), NOW)
            .await
            .expect_err("refused");
        assert!(error.needs_force(), "{error:?}");
        assert!(error.to_string().contains("live until"), "{error}");
        match table
            .act(k, &seen, &Action::Expire, &alice().force(), NOW)
            .await
        {
            Err(StoreError::NotApplicable(NotApplicable::NotFinal { status })) => {
                assert_eq!(status, KeyStatus::Processing);
            }
            other => panic!("expire: {other:?}"),
        }
        assert_eq!(
            row(&table, k, NOW).await,
            seen,
            "{name}: refused, unchanged"
        );
    }
    assert_eq!(audit_rows(&table).await, 0, "refusals are not audited");

    for (name, action) in &actions {
        let k = key(name);
        let seen = row(&table, k, NOW).await;
        let acted = table
            .act(k, &seen, action, &alice().force(), NOW)
            .await
            .must("a forced action");
        assert!(acted.forced, "{name}");
        match (&acted.after, action) {
            (None, Action::Delete) => assert!(table.get(k, NOW).await.must("get").is_none()),
            (Some(after), Action::Release) => {
                assert_eq!((after.attempt, after.status), (3, KeyStatus::Stuck));
            }
            (Some(after), Action::Complete(r) | Action::Fail(r)) => {
                assert_eq!((after.attempt, after.status), (3, KeyStatus::Completed));
                assert_eq!(after.response.as_ref(), Some(r));
            }
            other => panic!("{other:?}"),
        }
        // The running attempt (2) commits nothing more.
        assert_fenced(&table, k, seen.attempt).await;
        audited_forced(&table, k, true).await;
    }
    let entry = &table
        .audit(&AuditFilter::new().key(key("l-complete")))
        .await
        .must("audit")[0];
    assert_eq!(entry.action, "complete");
    assert_eq!(
        entry.before.as_ref().must("the audit entry's row")["status"],
        "processing"
    );

    // Stuck: no force needed; an actor's force that overrode nothing is not recorded.
    let stuck = key("stuck");
    staged_key(table.pool(), stuck, NOW - HOUR, NOW - 1_000, 1).await;
    let seen = row(&table, stuck, NOW).await;
    let acted = table
        .act(
            stuck,
            &seen,
            &Action::Fail(response(500, b"")),
            &alice().force(),
            NOW,
        )
        .await
        .must("act");
    assert!(!acted.forced);
    audited_forced(&table, stuck, false).await;
    assert_fenced(&table, stuck, 1).await;
}

/// Deleting a completed staged key (its steps' effects exist; a new execution would run them
/// again) is refused unless forced, and the forced delete is audited as such; a completed
/// atomic key (attempt 0, no journal) is deleted as before.
pub async fn act_delete_completed_staged_needs_force<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let staged = key("staged");
    staged_key(table.pool(), staged, NOW - HOUR, NOW + 30_000, 1).await;
    let mut conn = table.pool().acquire().await.must("acquire");
    let ending = idem_store::staged::Ending {
        status: 201,
        headers_json: "[]",
        body: b"{\"id\":7}",
        completed_ms: NOW - 10,
        expires_ms: NOW - 10 + HOUR,
    };
    assert!(
        idem_store::staged::finish::<DB>(&mut conn, staged, at(1), ending, None)
            .await
            .must("finish")
    );
    drop(conn);
    let seen = row(&table, staged, NOW).await;
    assert_eq!(seen.status, KeyStatus::Completed);
    match table
        .act(staged, &seen, &Action::Delete, &alice(), NOW)
        .await
    {
        Err(StoreError::NeedsForce { action, hazard }) => {
            assert_eq!(action, "delete");
            assert_eq!(
                hazard,
                idem_store::Hazard::EffectsExist {
                    attempt: 1,
                    recovery_point: Some("charge".to_owned())
                }
            );
            let message = StoreError::NeedsForce { action, hazard }.to_string();
            assert!(message.contains("run them again"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(row(&table, staged, NOW).await, seen);
    assert_eq!(audit_rows(&table).await, 0);
    // Expired as well: the sweeper's business, not a delete's.
    let expired = row(&table, staged, seen.expires_at_ms).await;
    assert!(
        table
            .act(
                staged,
                &expired,
                &Action::Delete,
                &alice(),
                seen.expires_at_ms
            )
            .await
            .expect_err("refused")
            .needs_force()
    );

    let acted = table
        .act(staged, &seen, &Action::Delete, &alice().force(), NOW)
        .await
        .must("a forced delete");
    assert!(acted.forced);
    assert_eq!(acted.after, None);
    assert!(table.get(staged, NOW).await.must("get").is_none());
    audited_forced(&table, staged, true).await;

    let atomic = key("atomic");
    store(&table, atomic, NOW + HOUR).await;
    let seen = row(&table, atomic, NOW).await;
    assert_eq!((seen.attempt, seen.recovery_point.as_ref()), (0, None));
    let acted = table
        .act(atomic, &seen, &Action::Delete, &alice(), NOW)
        .await
        .must("delete");
    assert!(!acted.forced);
    audited_forced(&table, atomic, false).await;
}

/// What the store refuses before reading anything.
pub async fn act_invalid_arguments<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let k = key("k");
    staged_key(table.pool(), k, NOW - HOUR, NOW - 1_000, 1).await;
    let seen = row(&table, k, NOW).await;
    for nobody in ["", "  "] {
        match table
            .act(k, &seen, &Action::Release, &Actor::new(nobody), NOW)
            .await
        {
            Err(StoreError::InvalidArgument(why)) => assert!(why.contains("operator"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(
        table
            .act(key("other"), &seen, &Action::Release, &alice(), NOW)
            .await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(row(&table, k, NOW).await, seen);
    assert_eq!(audit_rows(&table).await, 0);
}

/// The audit trail, newest first, by key and by operator, page by page.
pub async fn audit_filters<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let (a, b) = (key("a"), key("b"));
    store(&table, a, NOW + HOUR).await;
    store(&table, b, NOW + HOUR).await;
    let bob = Actor::new("bob").reason("cleanup");
    let act = |k: KeyRef<'static>, action: Action, by: Actor, at: i64| {
        let table = table.clone();
        async move {
            let seen = row(&table, k, at).await;
            table
                .act(k, &seen, &action, &by, at)
                .await
                .must("act")
                .audit_id
        }
    };
    let first = act(a, Action::Expire, alice(), NOW).await;
    let second = act(b, Action::Expire, bob.clone(), NOW + 1).await;
    let third = act(a, Action::Delete, bob.clone(), NOW + 2).await;
    let fourth = act(b, Action::Delete, alice(), NOW + 3).await;
    assert!(first < second && second < third && third < fourth);

    let ids = |filter: AuditFilter| {
        let table = table.clone();
        async move {
            let entries = table.audit(&filter).await.must("audit");
            entries.into_iter().map(|e| e.id).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        ids(AuditFilter::new()).await,
        [fourth, third, second, first]
    );
    assert_eq!(ids(AuditFilter::new().key(a)).await, [third, first]);
    assert_eq!(
        ids(AuditFilter::new().operator("alice")).await,
        [fourth, first]
    );
    assert_eq!(
        ids(AuditFilter::new().key(b).operator("bob")).await,
        [second]
    );
    assert!(ids(AuditFilter::new().operator("carol")).await.is_empty());
    let other_scope = AuditFilter::new().key(KeyRef {
        scope: "global",
        ..a
    });
    assert!(ids(other_scope).await.is_empty());
    // Pages.
    assert_eq!(
        ids(AuditFilter::new().limit(3)).await,
        [fourth, third, second]
    );
    assert_eq!(
        ids(AuditFilter::new().limit(3).before_id(second)).await,
        [first]
    );
    assert_eq!(ids(AuditFilter::new().limit(0)).await, [fourth]);

    let entries = table.audit(&AuditFilter::new()).await.must("audit");
    let at: Vec<i64> = entries.iter().map(|e| e.at_ms).collect();
    assert_eq!(at, [NOW + 3, NOW + 2, NOW + 1, NOW]);
    let actions: Vec<&str> = entries.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["delete", "delete", "expire", "expire"]);
    assert_eq!(entries[1].reason.as_deref(), Some("cleanup"));
    assert_eq!(entries[1].key, "a");
    assert_eq!(entries[1].after, None);
    assert_eq!(
        entries[3].after.as_ref().must("the audit entry's row")["expires_at_ms"],
        NOW
    );
    assert_eq!(
        entries[3].after.as_ref().must("the audit entry's row")["status"],
        "expired"
    );
}

/// A staged key's journal and request, for tools.
pub async fn journal_for_tools<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let staged = key("s");
    staged_key(table.pool(), staged, NOW - HOUR, NOW + 30_000, 1).await;
    let journal = table
        .journal(staged)
        .await
        .must("journal")
        .must("the key's journal");
    assert_eq!(journal.recovery_point.as_deref(), Some("charge"));
    assert_eq!(
        serde_json::Value::Object(journal.steps),
        serde_json::from_str::<serde_json::Value>(JOURNAL).must("the journal's JSON")
    );
    assert_eq!(
        journal.request,
        Some(json!({"amount": 5, "currency": "EUR"}))
    );
    // An atomic-mode key has none.
    let atomic = key("a");
    store(&table, atomic, NOW + HOUR).await;
    let journal = table
        .journal(atomic)
        .await
        .must("journal")
        .must("the key's journal");
    assert!(journal.steps.is_empty());
    assert_eq!((journal.recovery_point, journal.request), (None, None));
    assert!(table.journal(key("none")).await.must("journal").is_none());
}

/// Two operators act on one row at once: one succeeds, the other is told the row changed.
pub async fn concurrent_acts<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    let k = key("k");
    staged_key(table.pool(), k, NOW - HOUR, NOW - 1_000, 1).await;
    const ROUNDS: i64 = 5;
    for round in 0..ROUNDS {
        let seen = row(&table, k, NOW).await;
        assert_eq!(seen.attempt, 1 + round);
        let (alice, bob) = (Actor::new("alice"), Actor::new("bob"));
        let (first, second) = tokio::join!(
            table.act(k, &seen, &Action::Release, &alice, NOW),
            table.act(k, &seen, &Action::Release, &bob, NOW),
        );
        let mut done = 0;
        let mut changed = 0;
        for outcome in [first, second] {
            match outcome {
                Ok(acted) => {
                    let after = acted.after.must("the row after the action");
                    assert_eq!(after.attempt, seen.attempt + 1, "round {round}: attempt");
                    done += 1;
                }
                Err(StoreError::Changed {
                    current: Some(current),
                }) => {
                    assert_eq!(current.attempt, seen.attempt + 1, "round {round}: attempt");
                    changed += 1;
                }
                Err(other) => panic!("round {round}: {other:?}"),
            }
        }
        assert_eq!(
            (done, changed),
            (1, 1),
            "round {round}: acted, refused as changed"
        );
    }
    assert_eq!(row(&table, k, NOW).await.attempt, 1 + ROUNDS);
    assert_eq!(audit_rows(&table).await, ROUNDS);
}

/// Registered operations and operations seen in the key table, merged by id; the sweep's
/// count matches what the sweep deletes.
pub async fn operations_registry<DB: ConformanceSql>() {
    let table = fresh::<DB>().await;
    store(&table, key("o-live"), NOW + HOUR).await;
    store(&table, key("o-old"), NOW - 2 * HOUR).await;
    let staged = Registration {
        operation: "charge:v1".into(),
        scope: ScopeKind::Tenant,
        ttl_ms: 24 * HOUR,
        mode: Mode::Staged,
        lease_ms: Some(30_000),
        registered_at_ms: NOW - HOUR,
        doc: None,
    };
    table
        .register(std::slice::from_ref(&staged))
        .await
        .must("register");
    // A service registering again replaces its row.
    let staged = Registration {
        ttl_ms: 48 * HOUR,
        registered_at_ms: NOW,
        doc: Some(r#"{"id":"charge:v1"}"#.into()),
        ..staged
    };
    table
        .register(std::slice::from_ref(&staged))
        .await
        .must("register");

    let operations = table.operations(NOW).await.must("operations");
    let ids: Vec<&str> = operations.iter().map(|o| o.operation.as_str()).collect();
    assert_eq!(ids, ["charge:v1", "pay:v1"]);
    assert_eq!(operations[0].registered.as_ref(), Some(&staged));
    assert_eq!(operations[0].counts.total(), 0);
    assert!(operations[1].registered.is_none(), "seen, not registered");
    assert_eq!(
        (operations[1].counts.completed, operations[1].counts.expired),
        (1, 1)
    );
    // Several at once, in one call; an empty operation id is refused.
    let atomic = Registration {
        operation: "refund:v2".into(),
        scope: ScopeKind::Global,
        ttl_ms: HOUR,
        mode: Mode::Atomic,
        lease_ms: None,
        registered_at_ms: NOW,
        doc: None,
    };
    let user = Registration {
        operation: "profile:v1".into(),
        scope: ScopeKind::User,
        ..atomic.clone()
    };
    table
        .register(&[atomic.clone(), user.clone()])
        .await
        .must("register");
    let nameless = Registration {
        operation: String::new(),
        ..atomic.clone()
    };
    assert!(
        matches!(
            table.register(&[nameless]).await,
            Err(StoreError::InvalidArgument(_))
        ),
        "registering an empty operation id"
    );
    let registrations = table.registrations().await.must("registrations");
    assert_eq!(
        registrations,
        [staged.clone(), user, atomic],
        "every registration, by operation id"
    );
    let counts = table.counts(NOW).await.must("counts");
    assert_eq!(
        idem_store::OperationInfo::merge(&counts, registrations),
        table.operations(NOW).await.must("operations"),
        "OperationInfo::merge of the counts and registrations is KeyTable::operations"
    );

    assert_eq!(
        table
            .count_sweepable(NOW - 3 * HOUR)
            .await
            .must("count_sweepable"),
        0
    );
    assert_eq!(table.count_sweepable(NOW).await.must("count_sweepable"), 1);
    assert_eq!(
        table
            .count_sweepable(NOW + 2 * HOUR)
            .await
            .must("count_sweepable"),
        2
    );
    assert_eq!(table.sweep_batch(NOW, 100).await.must("sweep_batch"), 1);
    assert_eq!(table.count_sweepable(NOW).await.must("count_sweepable"), 0);
}

/// `idempotency_processing` holds exactly the keys in `processing`: a reservation adds the
/// key (also one replacing an expired key), and finishing, an operator's complete, fail or
/// delete take it out; the sweep never sees it (a processing key does not expire).
pub async fn processing_table_follows_the_keys<DB: ConformanceSql>() {
    use idem_store::staged::{Ending, Reservation};

    let table = fresh::<DB>().await;
    let mut conn = table.pool().acquire().await.must("acquire");
    let keys = [
        "pr-finish",
        "pr-complete",
        "pr-fail",
        "pr-delete",
        "pr-sweep",
    ];
    for k in keys {
        let expires_ms = if k == "pr-sweep" {
            NOW - HOUR
        } else {
            NOW + HOUR
        };
        let reserved = idem_store::staged::reserve::<DB>(
            &mut conn,
            Reservation {
                key: key(k),
                fingerprint: &[1; 32],
                request: "{}",
                created_ms: NOW - 2 * HOUR,
                expires_ms,
                locked_until_ms: NOW + 30_000,
                replace_expired: false,
                id: RESERVATION,
                field_digests: None,
            },
            None,
        )
        .await
        .must("the store");
        assert!(reserved, "{k}");
    }
    let processing = |table: KeyTable<DB>| async move {
        let mut page = table
            .list(&KeyFilter::new().status(KeyStatus::Processing), NOW)
            .await
            .must("the store")
            .keys
            .into_iter()
            .map(|row| row.key)
            .collect::<Vec<_>>();
        page.sort();
        page
    };
    assert_eq!(processing(table.clone()).await.len(), keys.len());

    let ending = Ending {
        status: 201,
        headers_json: "[]",
        body: b"{}",
        completed_ms: NOW,
        expires_ms: NOW + HOUR,
    };
    assert!(
        idem_store::staged::finish::<DB>(&mut conn, key("pr-finish"), at(1), ending, None)
            .await
            .must("the store")
    );
    for (k, action) in [
        ("pr-complete", Action::Complete(response(200, b"done"))),
        ("pr-fail", Action::Fail(response(402, b"declined"))),
        ("pr-delete", Action::Delete),
    ] {
        let before = row(&table, key(k), NOW).await;
        table
            .act(key(k), &before, &action, &alice().force(), NOW)
            .await
            .must("the store");
    }
    // A processing key past its `expires_at` is not expired: the sweep leaves it.
    assert_eq!(processing(table.clone()).await, ["pr-sweep"]);
    assert_eq!(table.sweep_batch(NOW, 100).await.must("sweep_batch"), 0);
    assert_eq!(processing(table.clone()).await, ["pr-sweep"]);
    let before = row(&table, key("pr-sweep"), NOW).await;
    table
        .act(
            key("pr-sweep"),
            &before,
            &Action::Delete,
            &alice().force(),
            NOW,
        )
        .await
        .must("the store");
    assert!(processing(table.clone()).await.is_empty());

    // An expired key reserved again is processing again.
    store(&table, key("pr-again"), NOW - HOUR).await;
    let reserved = idem_store::staged::reserve::<DB>(
        &mut conn,
        Reservation {
            key: key("pr-again"),
            fingerprint: &[2; 32],
            request: "{}",
            created_ms: NOW,
            expires_ms: NOW + HOUR,
            locked_until_ms: NOW + 30_000,
            replace_expired: true,
            id: RESERVATION,
            field_digests: None,
        },
        None,
    )
    .await
    .must("the store");
    assert!(reserved);
    assert_eq!(processing(table.clone()).await, ["pr-again"]);
}
