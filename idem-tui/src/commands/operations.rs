//! `operations`: every operation seen in the key table or registered, with its counts and,
//! when registered, its settings.

use idem_store::Registration;
use serde_json::{Value, json};

use super::context::Context;
use crate::error::CommandError;
use crate::format::{self, counts_json, span};
use crate::output::{Report, Table};

/// Every operation, with its counts and registration.
pub(super) async fn operations(context: &Context) -> Result<Report, CommandError> {
    let now = format::now_ms();
    let operations = context.db.operations(now).await?;
    let json = json!({
        "operations": operations
            .iter()
            .map(|info| json!({
                "operation": info.operation,
                "counts": counts_json(&info.counts),
                "registered": info.registered.as_ref().map_or(Value::Null, registration_json),
            }))
            .collect::<Vec<_>>(),
    });
    if operations.is_empty() {
        let text = "no operation seen or registered\n".to_owned();
        return Ok(Report { json, text });
    }
    let mut table = Table::new(&[
        "OPERATION",
        "MODE",
        "SCOPE",
        "TTL",
        "LEASE",
        "KEYS",
        "STUCK",
        "EXPIRED",
    ]);
    for i in 5..=7 {
        table = table.right(i);
    }
    for info in &operations {
        let (mode, scope, ttl, lease) = match &info.registered {
            Some(r) => (
                r.mode.to_string(),
                r.scope.to_string(),
                span(r.ttl_ms),
                r.lease_ms.map(span).unwrap_or_default(),
            ),
            None => (
                "-".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                String::new(),
            ),
        };
        table.row(vec![
            info.operation.clone(),
            mode,
            scope,
            ttl,
            lease,
            info.counts.total().to_string(),
            info.counts.stuck.to_string(),
            info.counts.expired.to_string(),
        ]);
    }
    let mut text = table.render();
    if operations.iter().any(|info| info.registered.is_none()) {
        text.push_str("(-: seen in the key table, not registered by a service)\n");
    }
    Ok(Report { json, text })
}

/// How a service registered an operation.
fn registration_json(registration: &Registration) -> Value {
    json!({
        "scope": registration.scope.as_str(),
        "ttl_ms": registration.ttl_ms,
        "ttl": span(registration.ttl_ms),
        "mode": registration.mode.as_str(),
        "lease_ms": registration.lease_ms,
        "registered_at": format::rfc3339(registration.registered_at_ms),
    })
}
