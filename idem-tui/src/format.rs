//! How keys, outbox messages, inbox events, responses, times and audit entries are written:
//! the JSON shapes of the command line's contract, and the short forms of its tables.

use base64::Engine as _;
use idem_store::{
    AuditEntry, InboxEvent, KeyRow, OutboxCounts, OutboxRow, OutboxStatus, Sealing, StatusCounts,
    StoredResponse,
};
use jiff::Timestamp;
use serde_json::{Map, Value, json};

use crate::output::fields;

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    Timestamp::now().as_millisecond()
}

/// `ms` as RFC 3339 UTC with milliseconds: `2026-12-01T06:35:00.123Z`.
pub fn rfc3339(ms: i64) -> String {
    match Timestamp::from_millisecond(ms) {
        Ok(at) => at.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        // Beyond jiff's range (a hand-edited row): the number itself.
        Err(_) => ms.to_string(),
    }
}

/// `ms` for tables: `2026-12-01 06:35:00` (UTC).
pub fn short_time(ms: i64) -> String {
    match Timestamp::from_millisecond(ms) {
        Ok(at) => at.strftime("%Y-%m-%d %H:%M:%S").to_string(),
        Err(_) => ms.to_string(),
    }
}

/// A length of time in its two largest units, the tool's one rule for every span it shows
/// (tables, details, the terminal UI, the JSON's `age`): `3d4h`, `2h5m`, `12m30s`, `45s`,
/// `0s` (under a second); a negative one with a `-`.
pub fn span(ms: i64) -> String {
    let sign = if ms < 0 { "-" } else { "" };
    let secs = ms.unsigned_abs() / 1000;
    let units = [(86_400, 'd'), (3600, 'h'), (60, 'm'), (1, 's')];
    let mut parts = Vec::new();
    let mut rest = secs;
    for (size, unit) in units {
        if rest >= size || (parts.is_empty() && size == 1) {
            parts.push(format!("{}{unit}", rest / size));
            rest %= size;
        } else if !parts.is_empty() {
            // Keep the two units adjacent: `1d` then hours, even if zero hours.
            parts.push(String::new());
        }
        if parts.len() == 2 {
            break;
        }
    }
    format!("{sign}{}", parts.concat())
}

/// `at_ms` relative to `now_ms`: `in 23h59m`, `2d3h ago`, or `now` within a second.
pub fn relative(at_ms: i64, now_ms: i64) -> String {
    let delta = at_ms.saturating_sub(now_ms);
    if delta.abs() < 1_000 {
        "now".to_owned()
    } else if delta > 0 {
        format!("in {}", span(delta))
    } else {
        format!("{} ago", span(-delta))
    }
}

/// When a key expires, as every surface of the tool shows it (the tables, `keys show`, the
/// JSON, the terminal UI): [`Expiry::of`] is the one rule. Only a final key (completed, or
/// expired) expires; a key that is not final (processing or stuck) does not, whatever its
/// `expires_at` column says: its TTL counts from its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Processing or stuck: no expiry.
    NotFinal,
    /// Final, `expires_at` not reached: it expires in `in_ms`, at `at_ms`.
    In {
        /// `expires_at`.
        at_ms: i64,
        /// How long until then (above 0).
        in_ms: i64,
    },
    /// Final, `expires_at` reached: it expired `ago_ms` ago, at `at_ms`.
    Expired {
        /// `expires_at`.
        at_ms: i64,
        /// How long since then (0 or more).
        ago_ms: i64,
    },
}

impl Expiry {
    /// What a key that is not final shows where a final key shows when it expires.
    pub const NOT_FINAL: &'static str = "- (not final: its TTL counts from its completion)";

    /// When `row` expires, seen at `now_ms`.
    #[must_use]
    pub fn of(row: &KeyRow, now_ms: i64) -> Self {
        let at_ms = row.expires_at_ms;
        if !row.status.is_final() {
            Self::NotFinal
        } else if at_ms > now_ms {
            Self::In {
                at_ms,
                in_ms: at_ms - now_ms,
            }
        } else {
            Self::Expired {
                at_ms,
                ago_ms: now_ms.saturating_sub(at_ms),
            }
        }
    }

    /// When the key expires (or expired); `None` when it is not final.
    #[must_use]
    pub fn at_ms(self) -> Option<i64> {
        match self {
            Self::NotFinal => None,
            Self::In { at_ms, .. } | Self::Expired { at_ms, .. } => Some(at_ms),
        }
    }

    /// How long until the key expires, negative once it has (the JSON's `expires_in_ms`);
    /// `None` when it is not final.
    #[must_use]
    pub fn in_ms(self) -> Option<i64> {
        match self {
            Self::NotFinal => None,
            Self::In { in_ms, .. } => Some(in_ms),
            Self::Expired { ago_ms, .. } => Some(-ago_ms),
        }
    }

    /// For the command line's tables: `in 23h59m`, `2h ago`, or `-` (not final).
    #[must_use]
    pub fn cell(self) -> String {
        match self {
            Self::NotFinal => "-".to_owned(),
            Self::In { in_ms, .. } => format!("in {}", span(in_ms)),
            Self::Expired { ago_ms, .. } => format!("{} ago", span(ago_ms)),
        }
    }
}

/// Bytes as lowercase hexadecimal.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A key's columns and stored response, as `name: value` lines.
pub fn row_text(row: &KeyRow, now: i64) -> String {
    let at = |ms: i64| format!("{} ({})", rfc3339(ms), relative(ms, now));
    let mut pairs = vec![
        ("scope", row.scope.clone()),
        ("operation", row.operation.clone()),
        ("key", row.key.clone()),
        ("status", row.status.to_string()),
        ("created", at(row.created_at_ms)),
        ("completed", row.completed_at_ms.map(at).unwrap_or_default()),
        (
            "expires",
            Expiry::of(row, now)
                .at_ms()
                .map_or_else(|| Expiry::NOT_FINAL.to_owned(), at),
        ),
        (
            "locked until",
            row.locked_until_ms.map(at).unwrap_or_default(),
        ),
        ("attempt", row.attempt.to_string()),
        (
            "recovery point",
            row.recovery_point.clone().unwrap_or_default(),
        ),
    ];
    let unopened = unopened(row.sealed.as_ref());
    pairs.push((
        "fingerprint",
        unopened.map_or_else(|| hex(&row.fingerprint), sealed),
    ));
    if let Some(sealing) = &row.sealed {
        let opened = if sealing.opened {
            ""
        } else {
            ", not opened: not among the storage keys given"
        };
        pairs.push(("sealed", format!("key {}{opened}", sealing.key)));
    }
    match (&row.response, unopened) {
        (None, _) => pairs.push(("response", "none".to_owned())),
        (Some(response), Some(key)) => {
            pairs.push(("response", response.status.to_string()));
            pairs.push(("  body", sealed(key)));
        }
        (Some(response), None) => {
            pairs.push(("response", response.status.to_string()));
            for (name, value) in &response.headers {
                pairs.push(("  header", format!("{name}: {value}")));
            }
            let body = match std::str::from_utf8(&response.body) {
                Ok(text) => text.to_owned(),
                Err(_) => format!(
                    "({} bytes, base64) {}",
                    response.body.len(),
                    base64::engine::general_purpose::STANDARD.encode(&response.body)
                ),
            };
            pairs.push(("  body", body));
        }
    }
    fields(&pairs)
}

/// An optional time as RFC 3339 or `null`.
fn opt_time(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, |ms| Value::String(rfc3339(ms)))
}

/// A key in a listing at `now_ms`: its identity, state, times, lease and stored status.
/// `expires_at` is the column as stored; `expires_in_ms` says when the key expires by the
/// one rule ([`Expiry`]): `null` for a key that is not final.
pub fn summary_json(row: &KeyRow, now_ms: i64) -> Value {
    json!({
        "scope": row.scope,
        "operation": row.operation,
        "key": row.key,
        "status": row.status.as_str(),
        "created_at": rfc3339(row.created_at_ms),
        "completed_at": opt_time(row.completed_at_ms),
        "expires_at": rfc3339(row.expires_at_ms),
        "expires_in_ms": Expiry::of(row, now_ms).in_ms(),
        "locked_until": opt_time(row.locked_until_ms),
        "attempt": row.attempt,
        "recovery_point": row.recovery_point,
        "response_status": row.response.as_ref().map(|r| r.status),
        "sealed": row.sealed.as_ref().map(|sealing| &sealing.key),
    })
}

/// A key with every column at `now_ms`: the summary, the fingerprint and the stored
/// response, and whether they were opened (`opened`: `true` unless they are sealed under a
/// key the tool was not given, when the fingerprint is `null` and the response its status).
pub fn row_json(row: &KeyRow, now_ms: i64) -> Value {
    let mut value = summary_json(row, now_ms);
    let opened = row.sealed.as_ref().is_none_or(|sealing| sealing.opened);
    if let Value::Object(fields) = &mut value {
        let fingerprint = opened.then(|| hex(&row.fingerprint));
        fields.insert("fingerprint".into(), json!(fingerprint));
        let response = row.response.as_ref().map_or(Value::Null, |response| {
            if opened {
                response_json(response)
            } else {
                json!({"status": response.status})
            }
        });
        fields.insert("response".into(), response);
        fields.insert("opened".into(), Value::Bool(opened));
    }
    value
}

/// What stands where a value sealed under a key the tool was not given would be shown:
/// `sealed (key k1)`.
pub fn sealed(key: &str) -> String {
    format!("sealed (key {key})")
}

/// `sealing`'s key when it was not opened: the value is to be shown as [`sealed`].
pub fn unopened(sealing: Option<&Sealing>) -> Option<&str> {
    sealing
        .filter(|sealing| !sealing.opened)
        .map(|sealing| sealing.key.as_str())
}

/// A stored response: `{"status", "headers": [[name, value]…], "body"}` with `body` the
/// text when it is UTF-8, else `body_base64` (standard alphabet, padded).
pub fn response_json(response: &StoredResponse) -> Value {
    let mut fields = Map::new();
    fields.insert("status".into(), json!(response.status));
    fields.insert("headers".into(), json!(response.headers));
    match std::str::from_utf8(&response.body) {
        Ok(text) => fields.insert("body".into(), Value::String(text.to_owned())),
        Err(_) => fields.insert(
            "body_base64".into(),
            Value::String(base64::engine::general_purpose::STANDARD.encode(&response.body)),
        ),
    };
    fields.insert("body_bytes".into(), json!(response.body.len()));
    Value::Object(fields)
}

/// An audit entry; `before` and `after` are the store's JSON of the row (times in
/// milliseconds, as recorded).
pub fn audit_json(entry: &AuditEntry) -> Value {
    json!({
        "id": entry.id,
        "at": rfc3339(entry.at_ms),
        "operator": entry.operator,
        "action": entry.action,
        "scope": entry.scope,
        "operation": entry.operation,
        "key": entry.key,
        "reason": entry.reason,
        "before": entry.before,
        "after": entry.after,
        "forced": entry.forced,
    })
}

/// An audit entry's action for tables: `delete`, or `delete (forced)` when the operator
/// forced it over a refusal.
pub fn audit_action(entry: &AuditEntry) -> String {
    if entry.forced {
        format!("{} (forced)", entry.action)
    } else {
        entry.action.clone()
    }
}

/// Counts by status, with their total.
pub fn counts_json(counts: &StatusCounts) -> Value {
    json!({
        "completed": counts.completed,
        "processing": counts.processing,
        "stuck": counts.stuck,
        "expired": counts.expired,
        "total": counts.total(),
    })
}

/// An outbox message in a listing: every column but the payload.
pub fn message_json(row: &OutboxRow, now_ms: i64) -> Value {
    json!({
        "id": row.id,
        "dedup_id": row.dedup_id,
        "topic": row.topic,
        "status": row.status.as_str(),
        "in_flight": row.in_flight(now_ms),
        "attempts": row.attempts,
        "next_attempt_at": rfc3339(row.next_attempt_at_ms),
        "locked_until": opt_time(row.locked_until_ms),
        "last_error": row.last_error,
        "created_at": rfc3339(row.created_at_ms),
        "delivered_at": opt_time(row.delivered_at_ms),
        "sealed": row.sealed.as_ref().map(|sealing| &sealing.key),
    })
}

/// An inbox event at `now_ms`: `id` is the event's id (its sender's), `row_id` the inbox
/// row's; `body` is the body as JSON when it parses, else its text (`null` when it is sealed
/// under a key the tool was not given); `sealed` the key that sealed it.
pub fn inbox_event_json(event: &InboxEvent, now_ms: i64) -> Value {
    let age_ms = event.age_ms(now_ms);
    let body = match unopened(event.sealed.as_ref()) {
        Some(_) => Value::Null,
        None => serde_json::from_str::<Value>(&event.body)
            .unwrap_or_else(|_| Value::String(event.body.clone())),
    };
    json!({
        "id": event.event_id,
        "row_id": event.id,
        "source": event.source,
        "status": event.status.as_str(),
        "first_seen_at": rfc3339(event.first_seen_at_ms),
        "last_seen_at": rfc3339(event.last_seen_at_ms),
        "age_ms": age_ms,
        "age_seconds": age_ms / 1000,
        "age": span(age_ms),
        "deliveries": event.deliveries,
        "reason": event.reason,
        "body": body,
        "sealed": event.sealed.as_ref().map(|sealing| &sealing.key),
    })
}

/// The outbox's counts, with their total.
pub fn outbox_counts_json(counts: &OutboxCounts) -> Value {
    json!({
        "pending": counts.pending,
        "in_flight": counts.in_flight,
        "delivered": counts.delivered,
        "dead": counts.dead,
        "total": counts.total(),
        "oldest_pending_at": opt_time(counts.oldest_pending_ms),
    })
}

/// The outbox's counts in one line: `3 pending (1 in flight), 10 delivered, 2 dead`.
pub fn outbox_counts_text(counts: &OutboxCounts) -> String {
    let in_flight = if counts.in_flight > 0 {
        format!(" ({} in flight)", counts.in_flight)
    } else {
        String::new()
    };
    format!(
        "{} pending{in_flight}, {} delivered, {} dead",
        counts.pending, counts.delivered, counts.dead
    )
}

/// When a message is next attempted, for tables: `in 4m` (waiting for its backoff), `due`,
/// `in flight` (a dispatcher holds it), or `-` (dead or delivered: never).
pub fn next_attempt(row: &OutboxRow, now_ms: i64) -> String {
    match row.status {
        OutboxStatus::Dead | OutboxStatus::Delivered => "-".to_owned(),
        OutboxStatus::Pending if row.in_flight(now_ms) => "in flight".to_owned(),
        OutboxStatus::Pending if row.next_attempt_at_ms <= now_ms => "due".to_owned(),
        OutboxStatus::Pending => format!("in {}", span(row.next_attempt_at_ms - now_ms)),
    }
}

/// `text` on one line and at most `max` characters (`…` marks a cut).
pub fn one_line(text: &str, max: usize) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if line.chars().count() <= max {
        line
    } else {
        let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    }
}

/// A size in bytes for people: `812 B`, `1.5 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    #[allow(clippy::cast_precision_loss)] // Shown with one decimal.
    let mut size = n as f64 / 1024.0;
    let mut unit = 0;
    while size >= 1024.0 && unit < UNITS.len() - 1 {
        size /= 1024.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use idem_store::KeyStatus;

    use super::*;

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(rfc3339(1_796_107_500_123), "2026-12-01T06:45:00.123Z");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(short_time(1_796_107_500_123), "2026-12-01 06:45:00");
        assert_eq!(rfc3339(i64::MAX), i64::MAX.to_string());
    }

    #[test]
    fn only_a_final_key_expires() {
        let row = |status: KeyStatus| KeyRow {
            scope: "global".into(),
            operation: "orders:v1".into(),
            key: "k".into(),
            status,
            fingerprint: vec![0; 32],
            response: None,
            sealed: None,
            created_at_ms: 0,
            completed_at_ms: None,
            expires_at_ms: 100_000_000,
            locked_until_ms: None,
            attempt: 0,
            reservation: None,
            recovery_point: None,
        };
        let now = 100_000_000 - 86_340_000;
        for status in [KeyStatus::Processing, KeyStatus::Stuck] {
            let expiry = Expiry::of(&row(status), now);
            assert_eq!(expiry, Expiry::NotFinal, "{status}");
            assert_eq!((expiry.at_ms(), expiry.in_ms()), (None, None));
            assert_eq!(expiry.cell(), "-");
        }
        let completed = Expiry::of(&row(KeyStatus::Completed), now);
        assert_eq!(completed.in_ms(), Some(86_340_000));
        assert_eq!(completed.at_ms(), Some(100_000_000));
        assert_eq!(completed.cell(), "in 23h59m");
        // Past `expires_at`: expired, whatever the status read earlier said.
        let expired = Expiry::of(&row(KeyStatus::Completed), 100_000_000 + 7_200_000);
        assert_eq!(expired.in_ms(), Some(-7_200_000));
        assert_eq!(expired.cell(), "2h ago");
        assert_eq!(
            Expiry::of(&row(KeyStatus::Expired), 100_000_000).cell(),
            "0s ago"
        );
        // The JSON keeps the column and says when the key expires by the same rule.
        let stuck = summary_json(&row(KeyStatus::Stuck), now);
        assert_eq!(stuck["expires_at"], "1970-01-02T03:46:40.000Z");
        assert_eq!(stuck["expires_in_ms"], Value::Null);
        let completed = row_json(&row(KeyStatus::Completed), now);
        assert_eq!(completed["expires_in_ms"], 86_340_000);
    }

    #[test]
    fn spans_show_two_units() {
        assert_eq!(span(0), "0s");
        assert_eq!(span(45_000), "45s");
        assert_eq!(span(750_000), "12m30s");
        assert_eq!(span(3 * 86_400_000 + 4 * 3_600_000 + 5_000), "3d4h");
        assert_eq!(span(86_400_000 + 60_000), "1d");
        assert_eq!(span(850), "0s");
        assert_eq!(span(-3 * 3_600_000), "-3h");
        assert_eq!(span(12 * 86_400_000), "12d");
        assert_eq!(relative(10_000, 0), "in 10s");
        assert_eq!(relative(0, 120_000), "2m ago");
        assert_eq!(relative(10_000, 10_500), "now");
        assert_eq!(relative(70_000, 10_000), "in 1m");
    }

    #[test]
    fn messages_on_one_line() {
        assert_eq!(
            one_line("HTTP 503\nretry later", 40),
            "HTTP 503 retry later"
        );
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(one_line("abcd", 4), "abcd");
        let counts = OutboxCounts {
            pending: 3,
            in_flight: 1,
            delivered: 10,
            dead: 2,
            oldest_pending_ms: None,
        };
        assert_eq!(
            outbox_counts_text(&counts),
            "3 pending (1 in flight), 10 delivered, 2 dead"
        );
    }

    #[test]
    fn inbox_events_in_json() {
        let event = InboxEvent {
            id: 7,
            source: "provider_event:v1".into(),
            event_id: "evt_1".into(),
            status: idem_store::InboxStatus::Unmatched,
            reason: "no payment names the charge".into(),
            body: r#"{"charge":"ch_1"}"#.into(),
            sealed: None,
            deliveries: 3,
            first_seen_at_ms: 1_796_107_500_123,
            last_seen_at_ms: 1_796_107_560_123,
        };
        let now = event.first_seen_at_ms + 3_725_000;
        let json = inbox_event_json(&event, now);
        assert_eq!((&json["id"], &json["row_id"]), (&json!("evt_1"), &json!(7)));
        assert_eq!(json["status"], "unmatched");
        assert_eq!(json["first_seen_at"], "2026-12-01T06:45:00.123Z");
        assert_eq!(json["last_seen_at"], "2026-12-01T06:46:00.123Z");
        assert_eq!(
            (&json["age_ms"], &json["age_seconds"]),
            (&json!(3_725_000), &json!(3725))
        );
        assert_eq!(json["age"], "1h2m");
        assert_eq!(json["body"], json!({"charge": "ch_1"}));
        let text = InboxEvent {
            body: "charge=ch_1".into(),
            ..event
        };
        assert_eq!(inbox_event_json(&text, now)["body"], "charge=ch_1");
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}
