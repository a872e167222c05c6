//! The detail pane's lines: a key's row, its response, its journal and its audit history.
//! [`view`](super::view) draws them; [`update`](super::app::update) scrolls within them.

use idem_store::{AuditEntry, Journal, KeyRow};
use jiff::tz::TimeZone;
use ratatui::style::Style;
use ratatui::text::{Line, Span};

use super::format::{self, Body, status_style};

/// The lines of the detail pane of a key: its `row` (`None`: it has none any more), its
/// `journal` and its `audit` history (`None`: not read yet), times shown in `tz` and
/// relative to `now_ms`.
#[must_use]
pub fn lines(
    row: Option<&KeyRow>,
    journal: Option<&Result<Option<Journal>, String>>,
    audit: Option<&Result<Vec<AuditEntry>, String>>,
    now_ms: i64,
    tz: &TimeZone,
) -> Vec<Line<'static>> {
    let label = |name: &str| Span::styled(format!("{name:<15}"), Style::new().bold());
    let field = |name: &str, value: String| Line::from(vec![label(name), Span::raw(value)]);
    let section = |name: &str| {
        Line::from(Span::styled(
            name.to_owned(),
            Style::new().bold().underlined(),
        ))
    };
    let when = |ms: i64| format::when(ms, now_ms, tz);
    let mut lines = Vec::new();
    let Some(row) = row else {
        lines.push(Line::from(Span::styled(
            "this key has no row (any more): deleted or swept",
            Style::new().yellow(),
        )));
        return lines;
    };
    lines.push(field("scope", row.scope.clone()));
    lines.push(field("operation", row.operation.clone()));
    lines.push(field("key", row.key.clone()));
    lines.push(Line::from(vec![
        label("status"),
        Span::styled(row.status.as_str(), status_style(row.status)),
        Span::raw(format!(" (column: {})", row.status.stored())),
    ]));
    lines.push(field("fingerprint", format::hex(&row.fingerprint)));
    lines.push(field("created", when(row.created_at_ms)));
    lines.push(field(
        "completed",
        row.completed_at_ms.map_or_else(|| "-".to_owned(), when),
    ));
    lines.push(field(
        "expires",
        if row.status.is_final() {
            when(row.expires_at_ms)
        } else {
            "- (not final: its TTL counts from its completion)".to_owned()
        },
    ));
    lines.push(field(
        "locked until",
        row.locked_until_ms.map_or_else(
            || "- (no lease)".to_owned(),
            |until| {
                let state = if until <= now_ms { "ran out" } else { "held" };
                format!("{} (attempt {}'s lease, {state})", when(until), row.attempt)
            },
        ),
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
    lines.push(Line::raw(""));
    lines.push(section("Response"));
    match &row.response {
        None => lines.push(Line::raw("none stored")),
        Some(response) => {
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
            match format::body(&response.body) {
                Body::Empty => lines.push(field("body", "empty".to_owned())),
                Body::Json(pretty) => {
                    lines.push(field(
                        "body",
                        format!("JSON, {} bytes", response.body.len()),
                    ));
                    lines.extend(format::highlight_json(&pretty));
                }
                Body::Text(text) => {
                    lines.push(field(
                        "body",
                        format!("text, {} bytes", response.body.len()),
                    ));
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
    }
    lines.push(Line::raw(""));
    lines.push(section("Journal"));
    match journal {
        None => lines.push(Line::raw("loading…")),
        Some(Err(e)) => lines.push(Line::styled(format!("unreadable: {e}"), Style::new().red())),
        Some(Ok(None)) => lines.push(Line::raw("none (atomic mode)")),
        Some(Ok(Some(journal))) => {
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
            if let Some(request) = &journal.request {
                lines.push(field("request", request.to_string()));
            }
        }
    }
    lines.push(Line::raw(""));
    lines.push(section("Audit"));
    match audit {
        None => lines.push(Line::raw("loading…")),
        Some(Err(e)) => lines.push(Line::styled(format!("unreadable: {e}"), Style::new().red())),
        Some(Ok(entries)) if entries.is_empty() => {
            lines.push(Line::raw("no operator has acted on this key"));
        }
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
    lines
}
