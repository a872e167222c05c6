//! Fixed rows and a fixed clock for the tests of the UI. (Object keys are written in sorted
//! order: serde_json's map order depends on its features, which the workspace unifies.)

use bytes::Bytes;
use idem_store::{
    AuditEntry, Counts, Journal, KeyRow, KeyStatus, OperationInfo, Page, Registration,
    StatusCounts, StoredResponse,
};
use jiff::tz::TimeZone;
use serde_json::json;

use super::app::{App, DetailData, Msg, Refreshed, operations_from_counts, update};

/// The fixed "now": 2027-01-15 08:00:00 UTC.
pub const NOW: i64 = 1_800_000_000_000;
pub const MIN: i64 = 60_000;
pub const HOUR: i64 = 3_600_000;

/// A completed key with a JSON body.
pub fn completed(scope: &str, operation: &str, key: &str) -> KeyRow {
    KeyRow {
        scope: scope.into(),
        operation: operation.into(),
        key: key.into(),
        status: KeyStatus::Completed,
        fingerprint: vec![0xab; 32],
        response: Some(StoredResponse {
            status: 201,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("location".into(), "/orders/7".into()),
            ],
            body: Bytes::from_static(
                br#"{"id":7,"note":null,"paid":true,"total":{"amount":1250,"currency":"EUR"}}"#,
            ),
        }),
        created_at_ms: NOW - 2 * HOUR,
        completed_at_ms: Some(NOW - 2 * HOUR + 150),
        expires_at_ms: NOW + 22 * HOUR,
        locked_until_ms: None,
        attempt: 0,
        recovery_point: None,
    }
}

/// A stuck staged key.
pub fn stuck(scope: &str, operation: &str, key: &str) -> KeyRow {
    KeyRow {
        status: KeyStatus::Stuck,
        response: None,
        completed_at_ms: None,
        created_at_ms: NOW - 30 * MIN,
        locked_until_ms: Some(NOW - 5 * MIN),
        attempt: 2,
        recovery_point: Some("charge".into()),
        ..completed(scope, operation, key)
    }
}

/// An expired key with a binary body.
pub fn expired_binary(scope: &str, operation: &str, key: &str) -> KeyRow {
    let mut row = completed(scope, operation, key);
    row.status = KeyStatus::Expired;
    row.expires_at_ms = NOW - 10 * MIN;
    row.created_at_ms = NOW - 25 * HOUR;
    row.response = Some(StoredResponse {
        status: 200,
        headers: vec![("content-type".into(), "application/octet-stream".into())],
        body: Bytes::from((0u8..=255).cycle().take(300).collect::<Vec<u8>>()),
    });
    row
}

/// The fixed rows, in database order.
pub fn rows() -> Vec<KeyRow> {
    vec![
        completed("global", "sync:v1", "msg-0001"),
        expired_binary("global", "sync:v1", "msg-0002"),
        completed("tenant:acme", "create_order:v1", "order-1"),
        stuck("tenant:acme", "create_order:v1", "order-2"),
        completed("tenant:acme", "refund:v2", "refund-9"),
        completed("user:42", "create_order:v1", "order-3"),
    ]
}

/// The counts of `rows`.
pub fn counts_of(rows: &[KeyRow]) -> Counts {
    let mut counts = Counts::default();
    for row in rows {
        let slot = |c: &mut StatusCounts| match row.status {
            KeyStatus::Completed => c.completed += 1,
            KeyStatus::Processing => c.processing += 1,
            KeyStatus::Stuck => c.stuck += 1,
            KeyStatus::Expired => c.expired += 1,
        };
        slot(&mut counts.by_status);
        slot(
            counts
                .by_operation
                .entry(row.operation.clone())
                .or_default(),
        );
        if row.status == KeyStatus::Stuck {
            counts.oldest_stuck_created_at_ms = Some(row.created_at_ms);
        }
    }
    counts
}

/// A refresh result with `rows` and `next`.
pub fn refreshed(rows: Vec<KeyRow>, next: Option<idem_store::Cursor>) -> Msg {
    let counts = counts_of(&rows);
    let mut operations = operations_from_counts(&counts);
    // Two registered operations: one with keys, one without.
    if let Some(line) = operations
        .iter_mut()
        .find(|l| l.operation == "create_order:v1")
    {
        line.registered = Some(Registration {
            operation: line.operation.clone(),
            scope: idem_spec::ScopeKind::Tenant,
            ttl_ms: 24 * HOUR,
            mode: idem_spec::Mode::Staged,
            lease_ms: Some(30_000),
            registered_at_ms: NOW - HOUR,
            doc: None,
        });
    }
    operations.push(OperationInfo {
        operation: "payout:v1".into(),
        counts: StatusCounts::default(),
        registered: Some(Registration {
            operation: "payout:v1".into(),
            scope: idem_spec::ScopeKind::Global,
            ttl_ms: 7 * 24 * HOUR,
            mode: idem_spec::Mode::Atomic,
            lease_ms: None,
            registered_at_ms: NOW - HOUR,
            doc: None,
        }),
    });
    Msg::Refreshed {
        generation: 0,
        result: Ok(Box::new(Refreshed {
            operations: Some(operations),
            counts: Some(counts),
            page: Page { keys: rows, next },
            detail: None,
        })),
    }
}

/// An app at [`NOW`] in UTC with [`rows`] loaded.
pub fn loaded_app() -> App {
    let mut app = App::new(
        "sqlite:///var/lib/app/orders.db".into(),
        "alice".into(),
        false,
        TimeZone::UTC,
    );
    let _ = update(&mut app, Msg::Tick { now_ms: NOW });
    let _ = update(&mut app, refreshed(rows(), None));
    app
}

/// The detail of `row`: one audit entry, a journal for staged rows.
pub fn detail_data(row: &KeyRow) -> DetailData {
    DetailData {
        row: Some(row.clone()),
        audit: Ok(vec![AuditEntry {
            id: 3,
            at_ms: NOW - 20 * MIN,
            operator: "bob".into(),
            scope: row.scope.clone(),
            operation: row.operation.clone(),
            key: row.key.clone(),
            action: "release".into(),
            reason: Some("INC-42: provider back".into()),
            before: None,
            after: None,
            forced: false,
        }]),
        journal: Ok((row.attempt > 0).then(|| Journal {
            recovery_point: row.recovery_point.clone(),
            steps: json!({"charge": {"payment": "p-9"}, "reserve": {"hold": "h-1"}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            request: Some(json!({"amount": 5, "currency": "EUR"})),
        })),
    }
}
