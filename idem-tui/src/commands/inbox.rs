//! `inbox list|show`: the incoming events a receiver could not apply, for an operator to
//! settle. Read-only: the tool changes nothing in the inbox.

use idem_store::{InboxEvent, InboxStatus};
use serde_json::{Value, json};

use super::context::Context;
use crate::cli::{INBOX_MAX, InboxListArgs, InboxShowArgs};
use crate::error::CommandError;
use crate::format::{self, relative, span};
use crate::output::{Report, Table, fields};

/// The longest reason a listing shows (`inbox show` shows all of it).
const REASON_WIDTH: usize = 60;

/// `inbox list [--status waiting|unmatched|unparseable] [--limit N]`: events, the longest
/// noted first.
pub(super) async fn list(context: &Context, args: InboxListArgs) -> Result<Report, CommandError> {
    let now = format::now_ms();
    let status = args
        .status
        .as_deref()
        .map(str::parse::<InboxStatus>)
        .transpose()
        .map_err(CommandError::usage)?;
    let events = context.db.inbox_list(status, args.limit).await?;
    let json = events_json(&events, now);
    let mut text = if events.is_empty() {
        match status {
            None => "no events in the inbox\n".to_owned(),
            Some(status) => format!("no {status} events in the inbox\n"),
        }
    } else {
        events_table(&events, now)
    };
    if events.len() >= args.limit as usize {
        text.push_str(&format!(
            "the first {} shown, there may be more; --limit shows up to {INBOX_MAX}\n",
            events.len()
        ));
    }
    Ok(Report { json, text })
}

/// `{"events": [event…]}`.
fn events_json(events: &[InboxEvent], now: i64) -> Value {
    json!({
        "events": events
            .iter()
            .map(|event| format::inbox_event_json(event, now))
            .collect::<Vec<_>>(),
    })
}

/// The table of a listing.
fn events_table(events: &[InboxEvent], now: i64) -> String {
    let mut table = Table::new(&[
        "EVENT ID",
        "SOURCE",
        "STATUS",
        "AGE",
        "DELIVERIES",
        "REASON",
    ])
    .right(4);
    for event in events {
        table.row(vec![
            event.event_id.clone(),
            event.source.clone(),
            event.status.to_string(),
            span(event.age_ms(now)),
            event.deliveries.to_string(),
            format::one_line(&event.reason, REASON_WIDTH),
        ]);
    }
    table.render()
}

/// `inbox show ID`: every event of that id (one per source that noted it), with its body;
/// exit 3 when there is none.
pub(super) async fn show(context: &Context, args: &InboxShowArgs) -> Result<Report, CommandError> {
    let now = format::now_ms();
    // A long id is kept as its digest, as a key is: either form finds it.
    let events = context
        .db
        .inbox_get(&idem_runtime::key::stored(&args.id))
        .await?;
    if events.is_empty() {
        return Err(CommandError::new(
            CommandError::NOT_FOUND,
            format!("no inbox event with id {:?}", args.id),
        ));
    }
    let text = events
        .iter()
        .map(|event| event_text(event, now))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Report {
        json: events_json(&events, now),
        text,
    })
}

/// An event as `name: value` lines, then its body (pretty-printed when it is JSON).
fn event_text(event: &InboxEvent, now: i64) -> String {
    let at = |ms: i64| format!("{} ({})", format::rfc3339(ms), relative(ms, now));
    let status = match event.status {
        InboxStatus::Waiting => "waiting (its sender is told to deliver it again)",
        InboxStatus::Unmatched => {
            "unmatched (acknowledged without being applied: settle it with its sender or by \
             hand; the inbox is read-only)"
        }
        InboxStatus::Unparseable => {
            "unparseable (signed by its sender, but its body does not read as the receiver's \
             event: refused without being applied; settle it with its sender or by hand)"
        }
    };
    let mut text = fields(&[
        ("event id", event.event_id.clone()),
        ("row id", event.id.to_string()),
        ("source", event.source.clone()),
        ("status", status.to_owned()),
        ("deliveries", event.deliveries.to_string()),
        ("first seen", at(event.first_seen_at_ms)),
        ("last seen", at(event.last_seen_at_ms)),
        ("reason", event.reason.clone()),
    ]);
    let body = match format::unopened(event.sealed.as_ref()) {
        Some(key) => format::sealed(key),
        None => serde_json::from_str::<Value>(&event.body)
            .ok()
            .and_then(|value| serde_json::to_string_pretty(&value).ok())
            .unwrap_or_else(|| event.body.clone()),
    };
    text.push_str(&format!("\nbody:\n{body}\n"));
    text
}
