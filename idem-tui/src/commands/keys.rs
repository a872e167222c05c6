//! `keys list`, `stuck` and `keys show` (whose audit table `outbox show` prints too).

use base64::Engine as _;
use idem_store::{AuditEntry, AuditFilter, Cursor, KeyFilter, KeyRow, KeyStatus};
use serde_json::{Value, json};

use super::context::Context;
use crate::cli::{KeyArgs, ListArgs};
use crate::error::CommandError;
use crate::format::{self, Expiry, relative, short_time};
use crate::output::{Report, Table, fields};

/// One page of keys.
pub(super) async fn list(context: &Context, args: ListArgs) -> Result<Report, CommandError> {
    let mut filter = KeyFilter::new().limit(args.filter.limit);
    if let Some(status) = &args.status {
        let status: KeyStatus = status.parse().map_err(|_| {
            CommandError::usage(format!(
                "unknown --status {status:?}: expected completed, processing, stuck or expired"
            ))
        })?;
        filter = filter.status(status);
    }
    if let Some(operation) = args.filter.operation {
        filter = filter.operation(operation);
    }
    if let Some(scope) = args.filter.scope {
        filter = filter.scope(scope);
    }
    if let Some(prefix) = args.filter.key_prefix {
        filter = filter.key_prefix(prefix);
    }
    if let Some(after) = &args.filter.after {
        let cursor: Cursor = after.parse().map_err(|_| {
            CommandError::usage(format!(
                "invalid --after {after:?}: not a cursor a listing returned as `next`"
            ))
        })?;
        filter = filter.after(Some(cursor));
    }
    let now = format::now_ms();
    let page = context.db.list(&filter, now).await?;
    let next = page.next.as_ref().map(ToString::to_string);
    let json = json!({
        "keys": page
            .keys
            .iter()
            .map(|row| format::summary_json(row, now))
            .collect::<Vec<_>>(),
        "next": next,
    });
    let mut text = keys_table(&page.keys, now);
    if let Some(next) = next {
        text.push_str(&format!("more: --after {next}\n"));
    }
    Ok(Report { json, text })
}

/// The table of a listing.
fn keys_table(keys: &[KeyRow], now: i64) -> String {
    if keys.is_empty() {
        return "no keys\n".to_owned();
    }
    let mut table = Table::new(&[
        "STATUS",
        "SCOPE",
        "OPERATION",
        "KEY",
        "CREATED (UTC)",
        "EXPIRES",
        "RESP",
    ]);
    for row in keys {
        table.row(vec![
            row.status.to_string(),
            row.scope.clone(),
            row.operation.clone(),
            row.key.clone(),
            short_time(row.created_at_ms),
            Expiry::of(row, now).cell(),
            row.response
                .as_ref()
                .map(|r| r.status.to_string())
                .unwrap_or_default(),
        ]);
    }
    table.render()
}

/// Everything about one key.
pub(super) async fn show(context: &Context, key: &KeyArgs) -> Result<Report, CommandError> {
    let now = format::now_ms();
    let row = context
        .db
        .get(key.key_ref(), now)
        .await?
        .ok_or_else(|| CommandError::not_found(key))?;
    let journal = context.db.journal(key.key_ref()).await?;
    let audit = context
        .db
        .audit(&AuditFilter::new().key(key.key_ref()))
        .await?;

    let mut json = format::row_json(&row, now);
    let steps = journal
        .as_ref()
        .filter(|j| !j.steps.is_empty())
        .map_or(Value::Null, |j| Value::Object(j.steps.clone()));
    let request = journal
        .as_ref()
        .and_then(|j| j.request.clone())
        .unwrap_or(Value::Null);
    if let Value::Object(object) = &mut json {
        object.insert("journal".into(), steps.clone());
        object.insert("request".into(), request.clone());
        object.insert(
            "audit".into(),
            Value::Array(audit.iter().map(format::audit_json).collect()),
        );
    }

    let mut text = row_text(&row, now);
    if let Value::Object(steps) = &steps {
        text.push_str("\njournal:\n");
        for (step, result) in steps {
            text.push_str(&format!("  {step}: {result}\n"));
        }
    }
    if !request.is_null() {
        text.push_str(&format!("\nrequest: {request}\n"));
    }
    text.push('\n');
    text.push_str(&audit_text(&audit));
    Ok(Report { json, text })
}

/// A key's columns and stored response, as `name: value` lines.
pub(super) fn row_text(row: &KeyRow, now: i64) -> String {
    let at = |ms: i64| format!("{} ({})", format::rfc3339(ms), relative(ms, now));
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
        ("fingerprint", format::hex(&row.fingerprint)),
    ];
    match &row.response {
        None => pairs.push(("response", "none".to_owned())),
        Some(response) => {
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

/// A key's or an outbox message's audit trail, as `show` prints it: a table, newest first.
pub(super) fn audit_text(audit: &[AuditEntry]) -> String {
    if audit.is_empty() {
        return "audit: no operator action\n".to_owned();
    }
    let mut table = Table::new(&["ID", "AT (UTC)", "OPERATOR", "ACTION", "REASON"]).right(0);
    for entry in audit {
        table.row(vec![
            entry.id.to_string(),
            short_time(entry.at_ms),
            entry.operator.clone(),
            format::audit_action(entry),
            entry.reason.clone().unwrap_or_default(),
        ]);
    }
    format!("audit (newest first):\n{}", table.render())
}
