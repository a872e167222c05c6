//! Fixed rows and a fixed clock for the tests of the UI. (Object keys are written in sorted
//! order: serde_json's map order depends on its features, which the workspace unifies.)

use bytes::Bytes;
use idem_store::{
    AuditEntry, Counts, InboxEvent, InboxStatus, Journal, KeyRow, KeyStatus, OperationInfo,
    OutboxCounts, OutboxRow, OutboxStatus, Page, Registration, StatusCounts, StoredResponse,
};
use jiff::tz::TimeZone;
use serde_json::json;

use super::app::{App, View, update};
use super::views::inbox::EVENTS;
use super::views::outbox::MESSAGES;
use super::work::{DetailData, InboxQuery, MessageData, Msg, OutboxQuery, Refreshed};
use super::worker::operations_from_counts;

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
        sealed: None,
        created_at_ms: NOW - 2 * HOUR,
        completed_at_ms: Some(NOW - 2 * HOUR + 150),
        expires_at_ms: NOW + 22 * HOUR,
        locked_until_ms: None,
        attempt: 0,
        reservation: None,
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
        reservation: Some(7),
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
            outbox_counts: Some(OutboxCounts::default()),
            outbox: None,
            message: None,
            inbox: None,
            event: None,
        })),
    }
}

/// A message of the outbox, pending and due, enqueued a second ago.
pub fn message(id: i64, dedup_id: &str) -> OutboxRow {
    OutboxRow {
        id,
        dedup_id: dedup_id.into(),
        topic: "order.paid".into(),
        payload: json!({"amount": {"currency": "EUR", "value": 1250}, "order": dedup_id}),
        sealed: None,
        status: OutboxStatus::Pending,
        attempts: 0,
        next_attempt_at_ms: NOW - 1_000,
        locked_until_ms: None,
        last_error: None,
        created_at_ms: NOW - 1_000,
        delivered_at_ms: None,
    }
}

/// The fixed messages, in id order: dead after ten attempts, waiting for its next attempt,
/// in flight, due, delivered, dead at once (a permanent failure).
pub fn messages() -> Vec<OutboxRow> {
    let dead = OutboxRow {
        status: OutboxStatus::Dead,
        attempts: 10,
        next_attempt_at_ms: NOW - 2 * HOUR,
        last_error: Some("HTTP 503 Service Unavailable: upstream maintenance".into()),
        created_at_ms: NOW - 5 * HOUR,
        ..message(1, "order-7/paid")
    };
    let backoff = OutboxRow {
        attempts: 3,
        next_attempt_at_ms: NOW + 4 * MIN,
        last_error: Some("HTTP 429 Too Many Requests".into()),
        created_at_ms: NOW - 20 * MIN,
        ..message(2, "order-8/paid")
    };
    let in_flight = OutboxRow {
        next_attempt_at_ms: NOW - 5_000,
        locked_until_ms: Some(NOW + 25_000),
        created_at_ms: NOW - 5_000,
        ..message(3, "order-9/paid")
    };
    let due = message(4, "order-10/paid");
    let delivered = OutboxRow {
        topic: "refund.issued".into(),
        status: OutboxStatus::Delivered,
        attempts: 1,
        next_attempt_at_ms: NOW - HOUR,
        last_error: Some("timed out after 10s".into()),
        created_at_ms: NOW - HOUR - 30_000,
        delivered_at_ms: Some(NOW - HOUR),
        ..message(5, "refund-3/issued")
    };
    let permanent = OutboxRow {
        status: OutboxStatus::Dead,
        attempts: 1,
        next_attempt_at_ms: NOW - 3 * MIN,
        last_error: Some("HTTP 422 Unprocessable Entity: unknown customer".into()),
        created_at_ms: NOW - 3 * MIN,
        ..message(6, "order-11/paid")
    };
    vec![dead, backoff, in_flight, due, delivered, permanent]
}

/// The counts of [`messages`].
pub fn outbox_counts() -> OutboxCounts {
    OutboxCounts {
        pending: 3,
        in_flight: 1,
        delivered: 1,
        dead: 2,
        oldest_pending_ms: Some(NOW - 20 * MIN),
    }
}

/// A refresh result with [`rows`] and, for the outbox view, `messages`.
pub fn outbox_refreshed(messages: Vec<OutboxRow>) -> Msg {
    let mut msg = refreshed(rows(), None);
    if let Msg::Refreshed {
        result: Ok(refreshed),
        ..
    } = &mut msg
    {
        refreshed.outbox_counts = Some(outbox_counts());
        refreshed.outbox = Some((
            OutboxQuery {
                status: None,
                limit: MESSAGES,
            },
            Ok(messages),
        ));
    }
    msg
}

/// [`loaded_app`] in the outbox view, with [`messages`] loaded.
pub fn outbox_app() -> App {
    let mut app = loaded_app();
    app.view = View::Outbox;
    let _ = update(&mut app, outbox_refreshed(messages()));
    app
}

/// The detail of `row`: one retry in its audit history.
pub fn message_data(row: &OutboxRow) -> MessageData {
    MessageData {
        row: Some(row.clone()),
        audit: Ok(vec![AuditEntry {
            id: 9,
            at_ms: NOW - 3 * HOUR,
            operator: "bob".into(),
            scope: "outbox".into(),
            operation: row.topic.clone(),
            key: row.dedup_id.clone(),
            action: "outbox-retry".into(),
            reason: Some("INC-51: the receiver was down".into()),
            before: None,
            after: None,
            forced: false,
        }]),
    }
}

/// The fixed inbox events, the longest noted first: an event kept as unmatched a day ago
/// (its body not JSON), one kept as unmatched after three deliveries, one still waiting.
pub fn events() -> Vec<InboxEvent> {
    let orphan = InboxEvent {
        id: 2,
        source: "provider_event:v1".into(),
        event_id: "evt_orphan".into(),
        status: InboxStatus::Unmatched,
        reason: "no payment names the charge ch_1".into(),
        body: r#"{"data":{"amount":1250,"charge":"ch_1"},"type":"charge.succeeded"}"#.into(),
        sealed: None,
        deliveries: 3,
        first_seen_at_ms: NOW - 2 * HOUR,
        last_seen_at_ms: NOW - 62 * MIN,
    };
    let old = InboxEvent {
        id: 1,
        event_id: "evt_old".into(),
        reason: "no payment names the charge ch_9".into(),
        body: "charge=ch_9; amount=500".into(),
        sealed: None,
        deliveries: 1,
        first_seen_at_ms: NOW - 26 * HOUR,
        last_seen_at_ms: NOW - 26 * HOUR,
        ..orphan.clone()
    };
    let early = InboxEvent {
        id: 3,
        event_id: "evt_early".into(),
        status: InboxStatus::Waiting,
        reason: "no payment names the charge ch_2".into(),
        body: r#"{"data":{"charge":"ch_2"},"type":"charge.succeeded"}"#.into(),
        sealed: None,
        deliveries: 1,
        first_seen_at_ms: NOW - 5 * MIN,
        last_seen_at_ms: NOW - 5 * MIN,
        ..orphan.clone()
    };
    vec![old, orphan, early]
}

/// A refresh result with [`rows`] and, for the inbox view, `events` of every status.
pub fn inbox_refreshed(events: Vec<InboxEvent>) -> Msg {
    let mut msg = refreshed(rows(), None);
    if let Msg::Refreshed {
        result: Ok(refreshed),
        ..
    } = &mut msg
    {
        refreshed.inbox = Some((
            InboxQuery {
                status: None,
                limit: EVENTS,
            },
            Ok(events),
        ));
    }
    msg
}

/// [`loaded_app`] in the inbox view, with [`events`] loaded.
pub fn inbox_app() -> App {
    let mut app = loaded_app();
    app.view = View::Inbox;
    let _ = update(&mut app, inbox_refreshed(events()));
    app
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
            sealed: None,
        })),
    }
}
