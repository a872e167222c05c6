//! `keys list`, `stuck` and `keys show` (whose audit table `outbox show` prints too), with
//! `--body` how a body differs from a key's first request's.

use std::path::Path;

use idem_runtime::fields::{FieldDigests, MAX_REPORTED, Mismatch};
use idem_store::{
    AuditEntry, AuditFilter, Cursor, Journal, KeyFilter, KeyRow, KeyStatus, StoreError,
};
use serde_json::{Value, json};

use super::context::Context;
use super::input::read_body;
use crate::cli::{KeyArgs, ListArgs, ShowArgs};
use crate::error::CommandError;
use crate::format::{self, Expiry, row_text, short_time};
use crate::output::{Report, Table};
use crate::provider::ProviderKeys;

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

/// Everything about one key; with `--body`, how that body differs from the key's first
/// request's.
pub(super) async fn show(context: &Context, args: &ShowArgs) -> Result<Report, CommandError> {
    // The body first: a file that cannot be read or is not JSON fails before any query.
    let body = args.body.as_deref().map(read_json_body).transpose()?;
    let key = &args.key;
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
    let mut report = shown_key(&row, journal.as_ref(), &audit, now);
    if let Some(body) = &body {
        compare_body(context, key, body, &mut report).await?;
    }
    Ok(report)
}

/// A key's row, its journal and request, each recorded step's provider key, and its audit
/// trail, as `keys show` reports them.
fn shown_key(row: &KeyRow, journal: Option<&Journal>, audit: &[AuditEntry], now: i64) -> Report {
    let mut json = format::row_json(row, now);
    let provider_keys = ProviderKeys::of(row, journal);
    let steps = journal
        .filter(|j| !j.steps.is_empty())
        .map_or(Value::Null, |j| Value::Object(j.steps.clone()));
    let request = journal
        .and_then(|j| j.request.clone())
        .unwrap_or(Value::Null);
    if let Value::Object(object) = &mut json {
        object.insert("journal".into(), steps.clone());
        object.insert("request".into(), request.clone());
        object.insert("provider_keys".into(), provider_keys.json());
        object.insert(
            "provider_keys_sealed".into(),
            provider_keys.sealed_by().into(),
        );
        object.insert(
            "audit".into(),
            Value::Array(audit.iter().map(format::audit_json).collect()),
        );
    }
    let mut text = row_text(row, now);
    if let Some(key) = format::unopened(journal.and_then(|j| j.sealed.as_ref())) {
        text.push_str(&format!("\njournal and request: {}\n", format::sealed(key)));
    }
    if let Value::Object(steps) = &steps {
        text.push_str("\njournal:\n");
        for (step, result) in steps {
            text.push_str(&format!("  {step}: {result}\n"));
        }
    }
    text.push_str(&provider_keys.text());
    if !request.is_null() {
        text.push_str(&format!("\nrequest: {request}\n"));
    }
    text.push('\n');
    text.push_str(&audit_text(audit));
    Report { json, text }
}

/// `--body`: how `body` differs from `key`'s first request's body, added to `report`
/// (`mismatch` in its JSON).
async fn compare_body(
    context: &Context,
    key: &KeyArgs,
    body: &Value,
    report: &mut Report,
) -> Result<(), CommandError> {
    let stored = (context.db.field_digests(key.key_ref()).await).map_err(|error| {
        let sealed = matches!(error, StoreError::NeedsStorageKeys(_));
        let mut error = CommandError::from(error);
        if sealed {
            error.message = format!("--body: {}", error.message);
        }
        error
    })?;
    let stored = stored
        .map(|bytes| {
            FieldDigests::from_bytes(&bytes).ok_or_else(|| {
                CommandError::error(format!(
                    "unreadable row: the field digests of key {:?} are not in a form this \
                     tool reads (written by another version of idem?)",
                    key.key
                ))
            })
        })
        .transpose()?;
    let exclude = registered_exclusions(context, &key.operation).await?;
    let exclude: Vec<&str> = exclude.iter().map(String::as_str).collect();
    let mismatch = stored
        .as_ref()
        .map(|stored| stored.compare_body(body, &exclude));
    if let Value::Object(object) = &mut report.json {
        let value = mismatch
            .as_ref()
            .map_or(Ok(Value::Null), serde_json::to_value)
            .map_err(|e| CommandError::error(format!("cannot write the mismatch: {e}")))?;
        object.insert("mismatch".into(), value);
    }
    report.text.push('\n');
    report
        .text
        .push_str(&mismatch_text(stored.as_ref(), mismatch.as_ref()));
    Ok(())
}

/// The paths `operation`'s registered document leaves out of the fingerprint
/// (`fingerprint_exclude`): fields never digested, so not compared. None without a readable
/// registered document.
async fn registered_exclusions(
    context: &Context,
    operation: &str,
) -> Result<Vec<String>, CommandError> {
    let registrations = context.db.registrations().await?;
    Ok(registrations
        .into_iter()
        .find(|r| r.operation == operation)
        .and_then(|r| r.doc)
        .and_then(|doc| serde_json::from_str::<idem_docs::OperationDoc>(&doc).ok())
        .map(|doc| doc.fingerprint_exclude)
        .unwrap_or_default())
}

/// `--body`'s file (`-`: stdin) read as JSON.
fn read_json_body(path: &Path) -> Result<Value, CommandError> {
    let bytes = read_body(path)?;
    serde_json::from_slice(&bytes).map_err(|e| {
        let from = if path == Path::new("-") {
            "stdin".to_owned()
        } else {
            path.display().to_string()
        };
        CommandError::usage(format!("--body {from}: not JSON: {e}"))
    })
}

/// How `--body` differs from the first request's body, for people: one line per field name,
/// or why there is nothing to compare.
fn mismatch_text(stored: Option<&FieldDigests>, mismatch: Option<&Mismatch>) -> String {
    let (Some(stored), Some(mismatch)) = (stored, mismatch) else {
        return "--body: no field digests kept for this key (written before idem kept them, \
                with mismatch detail off, or without its request): nothing to compare it with\n"
            .to_owned();
    };
    let mut text = String::new();
    if mismatch.is_empty() {
        text.push_str("--body: no field differs from the first request's body\n");
    } else {
        text.push_str(
            "--body: fields that differ from the first request's body (names only: the key \
             keeps no value):\n",
        );
        for (how, names) in [
            ("changed", &mismatch.changed),
            ("added", &mismatch.added),
            ("removed", &mismatch.removed),
        ] {
            for name in names {
                text.push_str(&format!("  {how:<7}  {}\n", shown(name)));
            }
        }
        if mismatch.omitted > 0 {
            text.push_str(&format!(
                "  and {} more, not named (at most {MAX_REPORTED} names are)\n",
                mismatch.omitted
            ));
        }
    }
    let in_body = |name: &str| name == "/body" || name.starts_with("/body/");
    if !stored.names().any(in_body) {
        text.push_str(
            "  note: the first request kept no body field (it had no body, or its key was \
             written by `Idem::once` or `Idem::staged`, whose input is not a request body): \
             every field of this one shows as added\n",
        );
    }
    text
}

/// A field name as printed: control characters escaped, so a name cannot break a line.
fn shown(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use idem_runtime::fields::FieldDigests;
    use serde_json::json;

    use super::mismatch_text;

    fn compared(first: &[u8], body: &serde_json::Value) -> String {
        let stored = FieldDigests::of_canonical(first, [9; 8]).unwrap();
        let mismatch = stored.compare_body(body, &[]);
        mismatch_text(Some(&stored), Some(&mismatch))
    }

    #[test]
    fn names_past_the_bound_are_counted() {
        let first = br#"{"body":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18}}"#;
        let body = json!({"a":0,"b":0,"c":0,"d":0,"e":0,"f":0,"g":0,"h":0,"i":0,"j":0,"k":0,"l":0,"m":0,"n":0,"o":0,"p":0,"q":0,"r":0});
        let text = compared(first, &body);
        assert_eq!(text.matches("\n  changed  /body/").count(), 16, "{text}");
        assert!(
            text.ends_with("  and 2 more, not named (at most 16 names are)\n"),
            "{text}"
        );
    }

    #[test]
    fn a_first_request_without_body_fields_is_said() {
        // `Idem::once`'s canonical input is the input itself, not under `/body`.
        let text = compared(br#"{"invoice":1}"#, &json!({"invoice": 1}));
        assert!(text.contains("\n  added    /body/invoice\n"), "{text}");
        assert!(!text.contains("removed"), "{text}");
        assert!(
            text.contains("note: the first request kept no body field"),
            "{text}"
        );
        let text = compared(br#"{"body":{"invoice":1}}"#, &json!({"invoice": 1}));
        assert!(!text.contains("note:"), "{text}");
    }

    #[test]
    fn names_cannot_break_lines() {
        let text = compared(br#"{"body":{"a\nb":1}}"#, &json!({}));
        assert!(text.contains("\n  removed  /body/a\\nb\n"), "{text}");
    }
}
