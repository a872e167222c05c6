//! `outbox list|show|retry`: the transactional outbox's messages, and the operator's one
//! action on them, an audited retry.

use idem_store::{Actor, AuditFilter, OutboxRow, OutboxStatus};
use serde_json::{Value, json};

use super::context::Context;
use super::keys::audit_text;
use crate::cli::{OutboxListArgs, OutboxRetryArgs, OutboxShowArgs};
use crate::error::CommandError;
use crate::format::{self, relative, span};
use crate::message::{self, Payload};
use crate::output::{Report, Table, fields};

/// The longest last error a listing shows (`outbox show` shows all of it).
const ERROR_WIDTH: usize = 60;

/// `outbox list [--dead] [--limit N]`: messages in id order, with the counts.
pub(super) async fn list(context: &Context, args: OutboxListArgs) -> Result<Report, CommandError> {
    let now = format::now_ms();
    let status = args.dead.then_some(OutboxStatus::Dead);
    let messages = context.db.outbox_list(status, args.limit).await?;
    let counts = context.db.outbox_counts(now).await?;
    let matching = if args.dead {
        counts.dead
    } else {
        counts.total()
    };
    let more = matching > messages.len() as u64;
    let json = json!({
        "messages": messages
            .iter()
            .map(|row| format::message_json(row, now))
            .collect::<Vec<_>>(),
        "counts": format::outbox_counts_json(&counts),
        "more": more,
    });
    let mut text = format!("outbox: {}", format::outbox_counts_text(&counts));
    if let Some(oldest) = counts.oldest_pending_ms {
        text.push_str(&format!(
            "; oldest pending enqueued {}",
            relative(oldest, now)
        ));
    }
    text.push('\n');
    if messages.is_empty() {
        text.push_str(if args.dead {
            "no dead messages\n"
        } else {
            "no messages\n"
        });
    } else {
        text.push_str(&messages_table(&messages, now));
    }
    if more {
        text.push_str(&format!(
            "more: {matching} in all, the first {} shown; --limit shows up to {}\n",
            messages.len(),
            idem_store::Outbox::<idem_store::sqlx::Sqlite>::MAX_BATCH
        ));
    }
    Ok(Report { json, text })
}

/// The table of a listing.
fn messages_table(messages: &[OutboxRow], now: i64) -> String {
    let mut table = Table::new(&[
        "ID",
        "DEDUP ID",
        "TOPIC",
        "STATUS",
        "ATTEMPTS",
        "NEXT ATTEMPT",
        "AGE",
        "LAST ERROR",
    ])
    .right(0)
    .right(4);
    for row in messages {
        table.row(vec![
            row.id.to_string(),
            row.dedup_id.clone(),
            row.topic.clone(),
            row.status.to_string(),
            row.attempts.to_string(),
            format::next_attempt(row, now),
            span(now - row.created_at_ms),
            row.last_error
                .as_deref()
                .map(|e| format::one_line(e, ERROR_WIDTH))
                .unwrap_or_default(),
        ]);
    }
    table.render()
}

/// The message `name` names (its id, or else its dedup id), or exit 3.
async fn lookup(context: &Context, name: &str) -> Result<OutboxRow, CommandError> {
    context.db.outbox_lookup(name).await?.ok_or_else(|| {
        let what = if name.trim().parse::<i64>().is_ok() {
            "id or dedup id"
        } else {
            "dedup id"
        };
        CommandError::new(
            CommandError::NOT_FOUND,
            format!("no outbox message with {what} {name:?}"),
        )
    })
}

/// `outbox show ID`: every column, the payload, the audit history.
pub(super) async fn show(context: &Context, args: &OutboxShowArgs) -> Result<Report, CommandError> {
    let now = format::now_ms();
    let row = lookup(context, &args.id).await?;
    let audit = context
        .db
        .audit(&AuditFilter::new().key(row.audit_key()))
        .await?;
    let mut json = format::message_json(&row, now);
    if let Value::Object(object) = &mut json {
        object.insert("payload".into(), row.payload.clone());
        object.insert(
            "audit".into(),
            Value::Array(audit.iter().map(format::audit_json).collect()),
        );
    }
    let mut text = message_text(&row, now);
    let payload = Payload::of(&row);
    text.push_str(&format!("\npayload:\n{}\n\n", payload.text()));
    text.push_str(&audit_text(&audit));
    Ok(Report { json, text })
}

/// `outbox retry ID` or `outbox retry --all`, as the operator, audited.
pub(super) async fn retry(
    context: &Context,
    args: OutboxRetryArgs,
) -> Result<Report, CommandError> {
    context.writable("outbox retry")?;
    let mut actor = Actor::new(context.operator.clone());
    if let Some(reason) = &args.reason {
        actor = actor.reason(reason.clone());
    }
    let now = format::now_ms();
    let Some(name) = args.id.as_deref().filter(|_| !args.all) else {
        let retried = context.db.outbox_retry_all(now, &actor).await?;
        let json = json!({
            "action": "outbox-retry",
            "all": true,
            "retried": retried,
            "operator": context.operator,
            "reason": args.reason,
        });
        let text = match retried {
            0 => "outbox-retry: nothing to retry (no dead message, none waiting for its \
                  backoff)\n"
                .to_owned(),
            1 => format!(
                "outbox-retry: 1 message retried (by {})\n",
                context.operator
            ),
            n => format!(
                "outbox-retry: {n} messages retried (by {})\n",
                context.operator
            ),
        };
        return Ok(Report { json, text });
    };
    let row = lookup(context, name).await?;
    let after = context.db.outbox_retry(row.id, now, &actor).await?;
    let json = json!({
        "action": "outbox-retry",
        "message": format::message_json(&after, now),
        "operator": context.operator,
        "reason": args.reason,
    });
    let text = format!(
        "outbox-retry: message {} ({}) (by {})\n\nafter:\n{}",
        after.id,
        after.dedup_id,
        context.operator,
        message_text(&after, now)
    );
    Ok(Report { json, text })
}

/// A message's columns and its last error, but its payload, as `name: value` lines.
fn message_text(row: &OutboxRow, now: i64) -> String {
    let at = |ms: i64| format!("{} ({})", format::rfc3339(ms), relative(ms, now));
    let mut pairs = message::fields(row, now, at);
    pairs.push(("last error", message::last_error(row).to_owned()));
    fields(&pairs)
}
