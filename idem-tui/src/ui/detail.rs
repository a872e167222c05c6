//! The detail panes' lines: a key's row, its response, its journal, its provider keys and
//! its audit history; an outbox message's row, its payload and its audit history; an inbox
//! event's row, its reason and its body. The view draws them; the key handler scrolls
//! within them.

use idem_store::{AuditEntry, InboxEvent, InboxStatus, Journal, KeyRow, OutboxRow};
use jiff::tz::TimeZone;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::format::{self, Body, Expiry, event_style, message_style, status_style};
use super::note::Failure;
use crate::format::{sealed, unopened};
use crate::message::{self, Payload};
use crate::provider::ProviderKeys;

fn label(name: &str) -> Span<'static> {
    Span::styled(format!("{name:<15}"), Style::new().bold())
}

fn field(name: &str, value: String) -> Line<'static> {
    Line::from(vec![label(name), Span::raw(value)])
}

fn section(name: &str) -> Line<'static> {
    Line::from(Span::styled(
        name.to_owned(),
        Style::new().bold().underlined(),
    ))
}

/// The audit history's section: `audit` (`None`: not read yet), newest first, or
/// `nobody` when no operator acted.
fn audit_section(
    lines: &mut Vec<Line<'static>>,
    audit: Option<&Result<Vec<AuditEntry>, Failure>>,
    nobody: &str,
    now_ms: i64,
    tz: &TimeZone,
) {
    lines.push(section("Audit"));
    match audit {
        None => lines.push(Line::raw("loading…")),
        Some(Err(e)) => lines.push(Line::styled(format!("unreadable: {e}"), Style::new().red())),
        Some(Ok(entries)) if entries.is_empty() => lines.push(Line::raw(nobody.to_owned())),
        Some(Ok(entries)) => {
            for entry in entries {
                lines.push(Line::from(vec![
                    Span::styled(format!("#{} ", entry.id), Style::new().dim()),
                    Span::raw(format!("{} ", format::when(entry.at_ms, now_ms, tz))),
                    Span::styled(crate::format::audit_action(entry), Style::new().bold()),
                    Span::raw(format!(" by {}", entry.operator)),
                ]));
                if let Some(reason) = &entry.reason {
                    lines.push(Line::raw(format!("    reason: {reason}")));
                }
            }
        }
    }
}

/// A body's lines: a `body` line saying what it is (JSON, text, binary) and its size, then
/// the body (JSON highlighted, binary as a hex head).
fn body_lines(lines: &mut Vec<Line<'static>>, body: &[u8]) {
    match format::body(body) {
        Body::Empty => lines.push(field("body", "empty".to_owned())),
        Body::Json(pretty) => {
            lines.push(field("body", format!("JSON, {} bytes", body.len())));
            lines.extend(format::highlight_json(&pretty));
        }
        Body::Text(text) => {
            lines.push(field("body", format!("text, {} bytes", body.len())));
            lines.extend(text.lines().map(|l| Line::raw(l.to_owned())));
        }
        Body::Binary { len, head } => {
            let shown = len.min(format::HEX_HEAD);
            lines.push(field(
                "body",
                format!("binary, {len} bytes (first {shown} in hex)"),
            ));
            lines.extend(
                head.into_iter()
                    .map(|l| Line::styled(l, Style::new().dim())),
            );
        }
    }
}

/// A staged key's journal, its recovery point marked; or that it and the request are
/// sealed under a key the tool was not given.
fn journal_lines(lines: &mut Vec<Line<'static>>, journal: &Journal) {
    if let Some(key) = unopened(journal.sealed.as_ref()) {
        lines.push(Line::raw(format!("journal and request {}", sealed(key))));
        return;
    }
    if journal.steps.is_empty() {
        lines.push(Line::raw("no steps journaled"));
    }
    for (step, value) in &journal.steps {
        let here = journal.recovery_point.as_deref() == Some(step.as_str());
        lines.push(Line::from(vec![
            Span::styled(
                format!("{}{step}: ", if here { "▸ " } else { "  " }),
                Style::new().cyan(),
            ),
            Span::raw(value.to_string()),
        ]));
    }
}

/// A staged key's provider keys, as `idem keys show` lists them: each recorded step's, to
/// search the provider's dashboard with; or that there is none yet, or that the steps are
/// sealed. Nothing for an atomic key; the journal as read (`None`: not read yet).
fn provider_section(
    lines: &mut Vec<Line<'static>>,
    row: &KeyRow,
    journal: Option<&Result<Option<Journal>, Failure>>,
) {
    if row.reservation.is_none() {
        return;
    }
    lines.push(Line::raw(""));
    lines.push(section("Provider keys"));
    let journal = match journal {
        None => return lines.push(Line::raw("loading…")),
        Some(Err(_)) => return lines.push(Line::raw("unknown: the journal did not read")),
        Some(Ok(journal)) => journal.as_ref(),
    };
    let keys = ProviderKeys::of(row, journal);
    if let Some(instead) = keys.instead() {
        return lines.push(Line::raw(instead));
    }
    for (step, key) in keys.steps() {
        lines.push(Line::from(vec![
            Span::styled(format!("  {step}: "), Style::new().cyan()),
            Span::raw(key.clone()),
        ]));
    }
}

/// A staged key's request, when it was read (clear, or opened).
fn request_lines(lines: &mut Vec<Line<'static>>, journal: &Journal) {
    if let Some(request) = &journal.request {
        lines.push(Line::raw(""));
        lines.push(section("Request"));
        let text = request.to_string();
        lines.extend(format::highlight_json(&format::pretty_json(&text)));
    }
}

/// A key's columns: its identity, status, fingerprint (and what sealed it), times, lease,
/// attempt and recovery point.
fn key_fields(lines: &mut Vec<Line<'static>>, row: &KeyRow, now_ms: i64, tz: &TimeZone) {
    let when = |ms: i64| format::when(ms, now_ms, tz);
    lines.push(field("scope", row.scope.clone()));
    lines.push(field("operation", row.operation.clone()));
    lines.push(field("key", row.key.clone()));
    // The column only when it says otherwise (a stuck key is `processing` in it).
    let stored = row.status.stored().to_string();
    let column = if stored == row.status.as_str() {
        String::new()
    } else {
        format!(" (column: {stored})")
    };
    lines.push(Line::from(vec![
        label("status"),
        Span::styled(row.status.as_str(), status_style(row.status)),
        Span::raw(column),
    ]));
    lines.push(field(
        "fingerprint",
        unopened(row.sealed.as_ref()).map_or_else(|| format::hex(&row.fingerprint), sealed),
    ));
    if let Some(sealing) = &row.sealed {
        let opened = if sealing.opened {
            "opened"
        } else {
            "not opened: not among the storage keys given"
        };
        lines.push(field("sealed", format!("key {} ({opened})", sealing.key)));
    }
    lines.push(field("created", when(row.created_at_ms)));
    lines.push(field(
        "completed",
        row.completed_at_ms.map_or_else(|| "-".to_owned(), when),
    ));
    lines.push(field(
        "expires",
        Expiry::of(row, now_ms)
            .at_ms()
            .map_or_else(|| Expiry::NOT_FINAL.to_owned(), when),
    ));
    lease_fields(lines, row, now_ms, tz);
}

/// A key's lease, attempt and recovery point.
fn lease_fields(lines: &mut Vec<Line<'static>>, row: &KeyRow, now_ms: i64, tz: &TimeZone) {
    let lease = |until: i64| {
        let state = if until <= now_ms { "ran out" } else { "held" };
        let at = format::when(until, now_ms, tz);
        format!("{at} (attempt {}'s lease, {state})", row.attempt)
    };
    lines.push(field(
        "locked until",
        row.locked_until_ms
            .map_or_else(|| "- (no lease)".to_owned(), lease),
    ));
    lines.push(field(
        "attempt",
        if row.attempt == 0 {
            "0 (atomic mode)".to_owned()
        } else {
            row.attempt.to_string()
        },
    ));
    lines.push(field(
        "recovery point",
        row.recovery_point.clone().unwrap_or_else(|| "-".to_owned()),
    ));
}

/// A key's response section: none, its status and that its body is sealed, or its status,
/// headers and body.
fn response_section(lines: &mut Vec<Line<'static>>, row: &KeyRow) {
    lines.push(section("Response"));
    match (&row.response, unopened(row.sealed.as_ref())) {
        (None, _) => lines.push(Line::raw("none stored")),
        (Some(response), Some(key)) => {
            lines.push(field("status", response.status.to_string()));
            lines.push(field("body", sealed(key)));
        }
        (Some(response), None) => {
            lines.push(field("status", response.status.to_string()));
            if response.headers.is_empty() {
                lines.push(field("headers", "none".to_owned()));
            }
            for (name, value) in &response.headers {
                lines.push(Line::from(vec![
                    label("header"),
                    Span::styled(format!("{name}: "), Style::new().cyan()),
                    Span::raw(value.clone()),
                ]));
            }
            body_lines(lines, &response.body);
        }
    }
}

/// The lines of the detail pane of a key: its `row` (`None`: it has none any more), its
/// `journal` (and from it, a staged key's provider keys) and its `audit` history (`None`:
/// not read yet), times shown in `tz` and relative to `now_ms`.
#[must_use]
pub fn lines(
    row: Option<&KeyRow>,
    journal: Option<&Result<Option<Journal>, Failure>>,
    audit: Option<&Result<Vec<AuditEntry>, Failure>>,
    now_ms: i64,
    tz: &TimeZone,
) -> Vec<Line<'static>> {
    let Some(row) = row else {
        return vec![Line::from(Span::styled(
            "this key has no row (any more): deleted or swept",
            Style::new().yellow(),
        ))];
    };
    let mut lines = Vec::new();
    key_fields(&mut lines, row, now_ms, tz);
    lines.push(Line::raw(""));
    response_section(&mut lines, row);
    lines.push(Line::raw(""));
    lines.push(section("Journal"));
    match journal {
        None => lines.push(Line::raw("loading…")),
        Some(Err(e)) => lines.push(Line::styled(format!("unreadable: {e}"), Style::new().red())),
        Some(Ok(None)) => lines.push(Line::raw("none (atomic mode)")),
        Some(Ok(Some(journal))) => journal_lines(&mut lines, journal),
    }
    provider_section(&mut lines, row, journal);
    if let Some(Ok(Some(journal))) = journal {
        request_lines(&mut lines, journal);
    }
    lines.push(Line::raw(""));
    audit_section(
        &mut lines,
        audit,
        "no operator has acted on this key",
        now_ms,
        tz,
    );
    lines
}

/// The lines of the detail pane of an outbox message: its `row` (`None`: it has none any
/// more) and its `audit` history (`None`: not read yet), times shown in `tz` and relative
/// to `now_ms`. The columns, the last error and the payload as [`message`] words them for
/// `idem outbox show` too.
#[must_use]
pub fn message_lines(
    row: Option<&OutboxRow>,
    audit: Option<&Result<Vec<AuditEntry>, Failure>>,
    now_ms: i64,
    tz: &TimeZone,
) -> Vec<Line<'static>> {
    let Some(row) = row else {
        return vec![Line::from(Span::styled(
            "this message has no row (any more): delivered and swept",
            Style::new().yellow(),
        ))];
    };
    let mut lines: Vec<Line<'static>> =
        message::fields(row, now_ms, |ms| format::when(ms, now_ms, tz))
            .into_iter()
            .map(|(name, value)| {
                if name != message::STATUS {
                    return field(name, value);
                }
                // The status word coloured, how it stands after it.
                let (status, rest) = value.split_at(row.status.as_str().len().min(value.len()));
                Line::from(vec![
                    label(name),
                    Span::styled(status.to_owned(), message_style(row, now_ms)),
                    Span::raw(rest.to_owned()),
                ])
            })
            .collect();
    lines.push(Line::raw(""));
    lines.push(section("Last error"));
    let error = Style::new().red();
    match &row.last_error {
        None => lines.push(Line::raw(message::NONE)),
        Some(text) => lines.extend(text.lines().map(|l| Line::styled(l.to_owned(), error))),
    }
    lines.push(Line::raw(""));
    lines.push(section("Payload"));
    match Payload::of(row) {
        Payload::Sealed(text) => lines.push(Line::raw(text)),
        Payload::Json(pretty) => lines.extend(format::highlight_json(&pretty)),
    }
    lines.push(Line::raw(""));
    audit_section(
        &mut lines,
        audit,
        "no operator has acted on this message",
        now_ms,
        tz,
    );
    lines
}

/// The lines of the detail pane of an inbox event: its `row` (`None`: it left the inbox),
/// times shown in `tz` and relative to `now_ms`.
#[must_use]
pub fn event_lines(row: Option<&InboxEvent>, now_ms: i64, tz: &TimeZone) -> Vec<Line<'static>> {
    let when = |ms: i64| format::when(ms, now_ms, tz);
    let mut lines = Vec::new();
    let Some(row) = row else {
        lines.push(Line::from(Span::styled(
            "this event is not in the inbox any more: applied after all",
            Style::new().yellow(),
        )));
        return lines;
    };
    lines.push(field("event id", row.event_id.clone()));
    lines.push(field("row id", row.id.to_string()));
    lines.push(field("source", row.source.clone()));
    lines.push(Line::from(vec![
        label("status"),
        Span::styled(row.status.as_str(), event_style(row.status)),
        Span::raw(match row.status {
            InboxStatus::Waiting => " (its sender is told to deliver it again)",
            InboxStatus::Unmatched => " (acknowledged without being applied)",
            InboxStatus::Unparseable => " (signed, but its body does not read: refused)",
        }),
    ]));
    lines.push(field("deliveries", row.deliveries.to_string()));
    lines.push(field("first seen", when(row.first_seen_at_ms)));
    lines.push(field("last seen", when(row.last_seen_at_ms)));
    if row.status != InboxStatus::Waiting {
        lines.push(Line::styled(
            "read-only: settle it with its sender, or by hand",
            Style::new().yellow(),
        ));
    }
    lines.push(Line::raw(""));
    lines.push(section("Reason"));
    lines.extend(row.reason.lines().map(|l| Line::raw(l.to_owned())));
    lines.push(Line::raw(""));
    lines.push(section("Body"));
    match unopened(row.sealed.as_ref()) {
        Some(key) => lines.push(field("body", sealed(key))),
        None => body_lines(&mut lines, row.body.as_bytes()),
    }
    lines
}
