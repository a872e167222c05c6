//! Operator actions ([`KeyTable::act`]) decided on the row the operator saw, on every store
//! whose feature is on: which differences from that row refuse an action, which actions
//! apply to which states and which need force, what is refused before the row is read; the
//! key's row in the audit trail as JSON ([`KeyTable::audit`]); journals as tools read them
//! ([`KeyTable::journal`]). Staged keys are written through staged mode's own statements
//! (`Backend::reserve`, `journal`, `renew`, `take_over`, `finish`).
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use idem_store::staged::{Ending, Fence, Reservation};
use idem_store::{
    Action, Actor, AuditFilter, Backend, Hazard, KeyRef, KeyRow, KeyStatus, KeyTable, StoreError,
    StoredResponse,
};
use idem_testkit::conformance::put;
use idem_testkit::harness::{HOUR, NOW, TestBackend};
use serde_json::{Value, json};

/// The reservation the staged keys here are reserved with.
const RESERVATION: i64 = 7;

/// Attempt `attempt` of [`RESERVATION`].
fn at(attempt: i64) -> Fence {
    Fence {
        reservation: RESERVATION,
        attempt,
    }
}

/// When [`running`] reserves its keys.
const CREATED: i64 = NOW - 1_000;
/// The lease of [`running`]'s attempt: live at [`NOW`], run out from then on.
const LEASE: i64 = NOW + 5_000;
/// The journal of [`running`]'s keys: one step.
const JOURNAL: &str = r#"{"reserve":{"hold":"h-1"}}"#;

fn key(key: &str) -> KeyRef<'_> {
    KeyRef {
        scope: "global",
        operation: "op:v1",
        key,
    }
}

fn alice() -> Actor {
    Actor::new("alice").reason("INC-42")
}

fn response(status: u16, headers: &[(&str, &str)], body: &'static [u8]) -> StoredResponse {
    StoredResponse {
        status,
        headers: headers
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect(),
        body: Bytes::from_static(body),
    }
}

async fn get<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>, now_ms: i64) -> KeyRow {
    table.get(k, now_ms).await.unwrap().unwrap()
}

/// A staged key whose attempt 1 runs: reserved at [`CREATED`] with fingerprint `ab01`, step
/// `reserve` journaled, leased until [`LEASE`]. Its row at [`NOW`]: processing.
async fn running<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>) -> KeyRow {
    let mut conn = table.pool().acquire().await.unwrap();
    let reservation = Reservation {
        key: k,
        fingerprint: &[0xab, 0x01],
        request: r#"{"amount":5}"#,
        created_ms: CREATED,
        expires_ms: CREATED + HOUR,
        locked_until_ms: LEASE,
        replace_expired: false,
        id: RESERVATION,
        field_digests: None,
    };
    assert!(
        idem_store::staged::reserve::<DB>(&mut conn, reservation, None)
            .await
            .unwrap()
    );
    assert!(
        idem_store::staged::journal::<DB>(&mut conn, k, at(1), "reserve", JOURNAL, LEASE, None)
            .await
            .unwrap()
    );
    drop(conn);
    let row = get(table, k, NOW).await;
    assert_eq!(row.status, KeyStatus::Processing);
    assert_eq!(row.fingerprint, [0xab, 0x01]);
    assert_eq!(row.locked_until_ms, Some(LEASE));
    assert_eq!(row.attempt, 1);
    assert_eq!(row.recovery_point.as_deref(), Some("reserve"));
    row
}

/// A staged key that ran its step and completed at [`NOW`] (attempt 1, recovery point
/// `reserve`, no lease), expiring an hour later. Its row at [`NOW`]: completed.
async fn finished<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>) -> KeyRow {
    running(table, k).await;
    let mut conn = table.pool().acquire().await.unwrap();
    let ending = Ending {
        status: 201,
        headers_json: "[]",
        body: b"{}",
        completed_ms: NOW,
        expires_ms: NOW + HOUR,
    };
    assert!(
        idem_store::staged::finish::<DB>(&mut conn, k, at(1), ending, None)
            .await
            .unwrap()
    );
    drop(conn);
    let row = get(table, k, NOW).await;
    assert_eq!(row.status, KeyStatus::Completed);
    assert_eq!(row.locked_until_ms, None);
    assert_eq!(row.attempt, 1);
    assert_eq!(row.recovery_point.as_deref(), Some("reserve"));
    row
}

/// The audit trail's entries of `k`, newest first.
async fn audited<DB: Backend>(table: &KeyTable<DB>, k: KeyRef<'_>) -> Vec<idem_store::AuditEntry> {
    table.audit(&AuditFilter::new().key(k)).await.unwrap()
}

/// A processing key whose lease ran out since the operator looked is the same row, now
/// stuck: the action applies, and needs no force.
async fn a_lease_running_out_is_no_change<DB: TestBackend>() {
    let (_, table) = common::fresh::<DB>().await;
    let k = key("k");
    let seen = running(&table, k).await;
    let acted = table
        .act(k, &seen, &Action::Release, &alice(), LEASE + 1_000)
        .await
        .unwrap();
    assert_eq!(acted.before.status, KeyStatus::Stuck);
    assert!(!acted.forced);
}

/// Any column that differs from the row the operator saw refuses the action with
/// [`StoreError::Changed`] and the row as it is now: whether the operator saw another row,
/// or the row moved since (the running attempt renewed its lease or journaled a step, a
/// retry took it over, it completed, another operator expired it); a row gone is
/// `Changed { current: None }`. Nothing is audited.
async fn any_column_that_moved_is_a_change<DB: TestBackend>() {
    let (_, table) = common::fresh::<DB>().await;
    let k = key("k");
    let current = running(&table, k).await;
    let changed = async |seen: &KeyRow| {
        table
            .act(k, seen, &Action::Delete, &alice(), NOW)
            .await
            .map(|acted| acted.audit_id)
    };

    // The operator saw a row that differs from the key's in one column.
    let changes: [fn(&mut KeyRow); 6] = [
        |r| r.attempt += 1,
        |r| r.locked_until_ms = Some(LEASE + 4_000),
        |r| r.recovery_point = Some("charge".to_owned()),
        |r| r.expires_at_ms -= 1,
        |r| {
            r.status = KeyStatus::Completed;
            r.completed_at_ms = Some(NOW);
        },
        |r| r.fingerprint = vec![0],
    ];
    for change in changes {
        let mut seen = current.clone();
        change(&mut seen);
        match changed(&seen).await {
            Err(StoreError::Changed { current: Some(now) }) => assert_eq!(*now, current),
            other => panic!("{other:?}"),
        }
    }

    // The row moves on after the operator looked at it.
    let mut seen = current;
    let moves: [&str; 5] = ["renew", "journal", "take over", "finish", "expire"];
    for step in moves {
        let mut conn = table.pool().acquire().await.unwrap();
        match step {
            // The running attempt renews its lease...
            "renew" => assert!(
                idem_store::staged::renew::<DB>(&mut conn, k, at(1), LEASE + 4_000)
                    .await
                    .unwrap()
            ),
            // ... journals a step, its lease as it was...
            "journal" => assert!(
                idem_store::staged::journal::<DB>(
                    &mut conn,
                    k,
                    at(1),
                    "charge",
                    JOURNAL,
                    LEASE + 4_000,
                    None
                )
                .await
                .unwrap()
            ),
            // ... a retry takes it over once the lease ran out, the lease as it was...
            "take over" => {
                let lease = idem_store::staged::take_over::<DB>(
                    &mut conn,
                    k,
                    at(1),
                    LEASE + 4_000,
                    LEASE + 4_000,
                    None,
                )
                .await
                .unwrap()
                .unwrap();
                assert_eq!(lease.fence.attempt, 2);
            }
            // ... and completes it...
            "finish" => {
                let ending = Ending {
                    status: 201,
                    headers_json: "[]",
                    body: b"{}",
                    completed_ms: NOW,
                    expires_ms: NOW + HOUR,
                };
                assert!(
                    idem_store::staged::finish::<DB>(&mut conn, k, at(2), ending, None)
                        .await
                        .unwrap()
                );
            }
            // ... and another operator expires it.
            _ => {
                let (_, after) = table.expire(k, NOW).await.unwrap().unwrap();
                assert_eq!(after.expires_at_ms, NOW);
            }
        }
        drop(conn);
        let now = get(&table, k, NOW).await;
        assert_ne!(now, seen, "{step}");
        match changed(&seen).await {
            Err(StoreError::Changed {
                current: Some(found),
            }) => assert_eq!(*found, now, "{step}"),
            other => panic!("{step}: {other:?}"),
        }
        seen = now;
    }

    // Gone.
    assert!(table.delete(k, NOW).await.unwrap().is_some());
    assert!(matches!(
        changed(&seen).await,
        Err(StoreError::Changed { current: None })
    ));
    let entries = audited(&table, k).await;
    assert!(entries.is_empty(), "{entries:?}");
}

/// Releasing, completing and failing apply to keys that are not final; expiring to
/// completed keys not expired yet; deleting to any key, a completed staged key (its steps
/// ran) only when forced, an atomic one as it is.
async fn actions_apply_to_some_states<DB: TestBackend>() {
    let (_, table) = common::fresh::<DB>().await;
    let k = key("staged");
    let completed = finished(&table, k).await;
    let failure = response(500, &[], b"");
    for action in [
        Action::Release,
        Action::Complete(failure.clone()),
        Action::Fail(failure),
    ] {
        assert!(matches!(
            table.act(k, &completed, &action, &alice(), NOW).await,
            Err(StoreError::NotApplicable(_))
        ));
    }
    // An expired key expires no more.
    assert!(matches!(
        table
            .act(
                k,
                &completed,
                &Action::Expire,
                &alice(),
                completed.expires_at_ms
            )
            .await,
        Err(StoreError::NotApplicable(_))
    ));
    // A completed staged key: its steps ran, deleting it is forced only.
    let later = completed.expires_at_ms + HOUR;
    assert!(matches!(
        table
            .act(k, &completed, &Action::Delete, &alice(), later)
            .await,
        Err(StoreError::NeedsForce {
            action: "delete",
            hazard: Hazard::EffectsExist { attempt: 1, .. }
        })
    ));
    // Refused, they changed nothing.
    assert_eq!(get(&table, k, NOW).await, completed);
    let entries = audited(&table, k).await;
    assert!(entries.is_empty(), "{entries:?}");
    let expired = table
        .act(k, &completed, &Action::Expire, &alice(), NOW)
        .await
        .unwrap();
    assert!(!expired.forced);
    let after = expired.after.unwrap();
    assert_eq!(after.expires_at_ms, NOW);
    let deleted = table
        .act(k, &after, &Action::Delete, &alice().force(), later)
        .await
        .unwrap();
    assert!(deleted.forced);
    assert!(table.get(k, later).await.unwrap().is_none());

    // An atomic one (attempt 0, no journal) is deleted as it is.
    let atomic = key("atomic");
    assert!(put(table.pool(), atomic, NOW - HOUR, NOW + HOUR, b"{}").await);
    let row = get(&table, atomic, NOW).await;
    assert_eq!((row.attempt, row.recovery_point.as_deref()), (0, None));
    let deleted = table
        .act(atomic, &row, &Action::Delete, &alice(), NOW)
        .await
        .unwrap();
    assert!(!deleted.forced);
    assert!(table.get(atomic, NOW).await.unwrap().is_none());
}

/// Acting on a key whose lease is live is forced only ([`Hazard::LeaseLive`]), and a forced
/// action is recorded as such; once the lease ran out, no force is needed and none is
/// recorded. A key that is not final never expires, forced or not.
async fn a_live_lease_is_forced_only_and_a_key_not_final_never_expires<DB: TestBackend>() {
    let (_, table) = common::fresh::<DB>().await;
    let ok = response(200, &[], b"");
    for action in [
        Action::Release,
        Action::Complete(ok.clone()),
        Action::Fail(StoredResponse {
            status: 500,
            ..ok.clone()
        }),
        Action::Delete,
    ] {
        let live_key = format!("live-{}", action.name());
        let k = key(&live_key);
        let live = running(&table, k).await;
        let error = table
            .act(k, &live, &action, &alice(), NOW)
            .await
            .unwrap_err();
        match &error {
            StoreError::NeedsForce {
                action: name,
                hazard,
            } => {
                assert_eq!(*name, action.name());
                assert_eq!(
                    *hazard,
                    Hazard::LeaseLive {
                        locked_until_ms: Some(LEASE)
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        let message = error.to_string();
        assert!(
            message.contains(&format!("live until {LEASE}")),
            "{message}"
        );
        assert!(message.contains("forced action overrides"), "{message}");
        assert_eq!(get(&table, k, NOW).await, live);
        let acted = table
            .act(k, &live, &action, &alice().force(), NOW)
            .await
            .unwrap();
        assert!(acted.forced);
        let entries = audited(&table, k).await;
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert!(entries[0].forced);

        // Stuck (the lease ran out): no force needed, none recorded.
        let stuck_key = format!("stuck-{}", action.name());
        let k = key(&stuck_key);
        let seen = running(&table, k).await;
        let acted = table
            .act(k, &seen, &action, &alice().force(), LEASE)
            .await
            .unwrap();
        assert_eq!(acted.before.status, KeyStatus::Stuck);
        assert!(!acted.forced);
        let entries = audited(&table, k).await;
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert!(!entries[0].forced);
    }
    let k = key("expire");
    let live = running(&table, k).await;
    for (now, forced) in [(NOW, false), (NOW, true), (LEASE + 4_000, false)] {
        let by = if forced { alice().force() } else { alice() };
        match table.act(k, &live, &Action::Expire, &by, now).await {
            Err(StoreError::NotApplicable(why)) => {
                let why = why.to_string();
                assert!(why.contains("never expires"), "{why}");
                assert!(why.contains("release"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
    let entries = audited(&table, k).await;
    assert!(entries.is_empty(), "{entries:?}");
}

/// A blank operator, a failure that is not one and a row of another key are refused before
/// the key's row is read (read, the row would refuse the action otherwise: its lease is
/// live, the other key has no row): nothing changes, nothing is audited.
async fn refused_before_reading<DB: TestBackend>() {
    let (_, table) = common::fresh::<DB>().await;
    let expected = running(&table, key("k")).await;
    let ok = response(200, &[], b"");
    for (k, action, by) in [
        (expected.key_ref(), Action::Release, Actor::new(" ")),
        (expected.key_ref(), Action::Fail(ok), alice()),
        (
            KeyRef {
                key: "other",
                ..expected.key_ref()
            },
            Action::Release,
            alice(),
        ),
    ] {
        assert!(matches!(
            table.act(k, &expected, &action, &by, NOW).await,
            Err(StoreError::InvalidArgument(_))
        ));
    }
    assert_eq!(get(&table, expected.key_ref(), NOW).await, expected);
    let entries = table.audit(&AuditFilter::new()).await.unwrap();
    assert!(entries.is_empty(), "{entries:?}");
}

/// The audit trail records the key's row as JSON: the fingerprint in hexadecimal, the state,
/// the lease, `response` null without one; a body that is UTF-8 as the text `body`, any
/// other as `body_hex`.
async fn bodies_in_the_audit_trail<DB: TestBackend>() {
    let (_, table) = common::fresh::<DB>().await;
    let text = key("text");
    let seen = running(&table, text).await;
    let complete = Action::Complete(response(201, &[("location", "/x")], b"{\"id\":7}"));
    table
        .act(text, &seen, &complete, &alice().force(), NOW)
        .await
        .unwrap();
    let entry = audited(&table, text).await.remove(0);
    let before = entry.before.unwrap();
    assert_eq!(before["fingerprint"], "ab01");
    assert_eq!(before["status"], "processing");
    assert_eq!(before["locked_until_ms"], LEASE);
    assert_eq!(before["response"], Value::Null);
    let after = entry.after.unwrap();
    assert_eq!(after["response"]["body"], "{\"id\":7}");
    assert_eq!(after["response"]["headers"], json!([["location", "/x"]]));
    assert!(after["response"].get("body_hex").is_none(), "{after}");

    let binary = key("binary");
    let seen = running(&table, binary).await;
    let fail = Action::Fail(response(502, &[], &[0xff, 0x00]));
    table
        .act(binary, &seen, &fail, &alice().force(), NOW)
        .await
        .unwrap();
    let after = audited(&table, binary).await.remove(0).after.unwrap();
    assert_eq!(after["response"]["body_hex"], "ff00");
    assert!(after["response"].get("body").is_none(), "{after}");
}

/// A key's journal reads as its steps (a JSON object) and its request (JSON); a key without
/// them has none; a journal that is not an object, or a request that is not JSON, is
/// [`StoreError::Corrupt`].
async fn journals_are_objects<DB: TestBackend>() {
    let (_, table) = common::fresh::<DB>().await;
    let reserve = async |k: KeyRef<'_>, request: &str, journal: &str| {
        let mut conn = table.pool().acquire().await.unwrap();
        let reservation = Reservation {
            key: k,
            fingerprint: &[0xab, 0x01],
            request,
            created_ms: CREATED,
            expires_ms: CREATED + HOUR,
            locked_until_ms: LEASE,
            replace_expired: false,
            id: RESERVATION,
            field_digests: None,
        };
        assert!(
            idem_store::staged::reserve::<DB>(&mut conn, reservation, None)
                .await
                .unwrap()
        );
        assert!(
            idem_store::staged::journal::<DB>(&mut conn, k, at(1), "b", journal, LEASE, None)
                .await
                .unwrap()
        );
    };
    let k = key("staged");
    reserve(k, r#"{"amount":5}"#, r#"{"a":1,"b":{"x":2}}"#).await;
    let journal = table.journal(k).await.unwrap().unwrap();
    assert_eq!(journal.steps.len(), 2);
    assert_eq!(journal.steps["b"], json!({"x": 2}));
    assert_eq!(journal.recovery_point.as_deref(), Some("b"));
    assert_eq!(journal.request, Some(json!({"amount": 5})));

    // An atomic key: no journal, no request.
    let atomic = key("atomic");
    assert!(put(table.pool(), atomic, NOW - HOUR, NOW + HOUR, b"{}").await);
    assert!(
        table
            .journal(atomic)
            .await
            .unwrap()
            .is_some_and(|j| j.steps.is_empty() && j.request.is_none())
    );
    assert!(table.journal(key("none")).await.unwrap().is_none());

    let list = key("list");
    reserve(list, r#"{"amount":5}"#, "[1]").await;
    assert!(matches!(
        table.journal(list).await,
        Err(StoreError::Corrupt(_))
    ));
    let brace = key("brace");
    reserve(brace, "{", r#"{"b":1}"#).await;
    assert!(matches!(
        table.journal(brace).await,
        Err(StoreError::Corrupt(_))
    ));
}

idem_testkit::on_every_store!(
    a_lease_running_out_is_no_change,
    any_column_that_moved_is_a_change,
    actions_apply_to_some_states,
    a_live_lease_is_forced_only_and_a_key_not_final_never_expires,
    refused_before_reading,
    bodies_in_the_audit_trail,
    journals_are_objects,
);
