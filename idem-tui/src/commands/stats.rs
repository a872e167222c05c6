//! `stats` and `audit`: the key table at a glance, and the operators' actions.

use idem_store::AuditFilter;
use serde_json::{Value, json};

use super::context::Context;
use crate::cli::AuditArgs;
use crate::error::CommandError;
use crate::format::{self, counts_json, short_time, span};
use crate::output::{Report, Table, fields};

/// Counts by status and operation, the oldest stuck key, the table's size.
pub(super) async fn stats(context: &Context) -> Result<Report, CommandError> {
    let now = format::now_ms();
    let counts = context.db.counts(now).await?;
    let oldest = counts.oldest_stuck_created_at_ms.map(|at| {
        json!({
            "created_at": format::rfc3339(at),
            "age_seconds": (now - at).max(0) / 1000,
            "age": span(now - at),
        })
    });
    let json = json!({
        "backend": context.db.backend(),
        "by_status": counts_json(&counts.by_status),
        "by_operation": counts
            .by_operation
            .iter()
            .map(|(operation, c)| (operation.clone(), counts_json(c)))
            .collect::<serde_json::Map<_, _>>(),
        "oldest_stuck": oldest.unwrap_or(Value::Null),
        "table_bytes": counts.table_bytes,
    });

    let status = &counts.by_status;
    let mut text = fields(&[
        ("backend", context.db.backend().to_owned()),
        ("keys", status.total().to_string()),
        ("completed", status.completed.to_string()),
        ("processing", status.processing.to_string()),
        ("stuck", status.stuck.to_string()),
        ("expired", status.expired.to_string()),
        (
            "oldest stuck",
            counts.oldest_stuck_created_at_ms.map_or_else(
                || "none".to_owned(),
                |at| format!("created {} UTC, {} ago", short_time(at), span(now - at)),
            ),
        ),
        (
            "table size",
            counts
                .table_bytes
                .map_or_else(|| "unknown".to_owned(), format::bytes),
        ),
    ]);
    if !counts.by_operation.is_empty() {
        text.push('\n');
        let mut table = Table::new(&[
            "OPERATION",
            "COMPLETED",
            "PROCESSING",
            "STUCK",
            "EXPIRED",
            "TOTAL",
        ]);
        for i in 1..=5 {
            table = table.right(i);
        }
        for (operation, c) in &counts.by_operation {
            table.row(vec![
                operation.clone(),
                c.completed.to_string(),
                c.processing.to_string(),
                c.stuck.to_string(),
                c.expired.to_string(),
                c.total().to_string(),
            ]);
        }
        text.push_str(&table.render());
    }
    Ok(Report { json, text })
}

/// The audit trail, newest first.
pub(super) async fn audit(context: &Context, args: AuditArgs) -> Result<Report, CommandError> {
    let mut filter = AuditFilter::new().limit(args.limit);
    filter.scope = args.scope;
    filter.operation = args.operation;
    filter.key = args.key;
    if let Some(by) = args.by {
        filter = filter.operator(by);
    }
    if let Some(id) = args.before_id {
        filter = filter.before_id(id);
    }
    let entries = context.db.audit(&filter).await?;
    let json = json!({
        "audit": entries.iter().map(format::audit_json).collect::<Vec<_>>(),
    });
    let text = if entries.is_empty() {
        "no operator action\n".to_owned()
    } else {
        let mut table = Table::new(&[
            "ID",
            "AT (UTC)",
            "OPERATOR",
            "ACTION",
            "SCOPE",
            "OPERATION",
            "KEY",
            "REASON",
        ])
        .right(0);
        for entry in &entries {
            table.row(vec![
                entry.id.to_string(),
                short_time(entry.at_ms),
                entry.operator.clone(),
                crate::format::audit_action(entry),
                entry.scope.clone(),
                entry.operation.clone(),
                entry.key.clone(),
                entry.reason.clone().unwrap_or_default(),
            ]);
        }
        table.render()
    };
    Ok(Report { json, text })
}
