//! `keys expire|release|complete|fail|delete`: one operator action on one key, fenced by the
//! row as it was read and recorded in the audit trail.

use idem_store::{Action, Actor, StoreError, StoredResponse};
use serde_json::{Value, json};

use super::context::Context;
use super::input::read_body;
use crate::cli::{ActionArgs, ResponseArgs};
use crate::error::CommandError;
use crate::format::{self, row_text};
use crate::output::Report;

/// Which action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Expire,
    Release,
    Complete,
    Fail,
    Delete,
}

/// An action without a response: expire, release, delete.
pub(super) async fn act(
    context: &Context,
    kind: Kind,
    args: ActionArgs,
) -> Result<Report, CommandError> {
    let action = match kind {
        Kind::Expire => Action::Expire,
        Kind::Release => Action::Release,
        Kind::Delete => Action::Delete,
        // (Reached through `respond` only.)
        Kind::Complete | Kind::Fail => {
            return Err(CommandError::usage("complete and fail need --status"));
        }
    };
    perform(context, &args, action).await
}

/// `complete` or `fail`: stores the response given on the command line.
pub(super) async fn respond(
    context: &Context,
    kind: Kind,
    args: ResponseArgs,
) -> Result<Report, CommandError> {
    if kind == Kind::Fail && args.status < 400 {
        return Err(CommandError::usage(format!(
            "fail needs a failure status (400 or more), not {}; use complete for a success",
            args.status
        )));
    }
    let headers = args
        .headers
        .iter()
        .map(|line| parse_header(line))
        .collect::<Result<Vec<_>, _>>()?;
    context.writable(if kind == Kind::Fail {
        "fail"
    } else {
        "complete"
    })?;
    let body = match &args.body {
        None => Vec::new(),
        Some(path) => read_body(path)?,
    };
    let response = StoredResponse {
        status: args.status,
        headers,
        body: body.into(),
    };
    let action = if kind == Kind::Fail {
        Action::Fail(response)
    } else {
        Action::Complete(response)
    };
    perform(context, &args.action, action).await
}

/// Reads the row, acts with it as the expected one, and reports the row before and after.
async fn perform(
    context: &Context,
    args: &ActionArgs,
    action: Action,
) -> Result<Report, CommandError> {
    context.writable(action.name())?;
    let key = &args.key;
    let now = format::now_ms();
    let row = context
        .db
        .get(key.key_ref(), now)
        .await?
        .ok_or_else(|| CommandError::not_found(key))?;
    // An action that does not apply is refused as the store would refuse it, forced or not:
    // why, and what would apply; never what forcing it would risk.
    if let Some(why) = action.not_applicable(&row, now) {
        return Err(StoreError::NotApplicable(why).into());
    }
    let mut actor = Actor::new(context.operator.clone());
    if let Some(reason) = &args.reason {
        actor = actor.reason(reason.clone());
    }
    // What forcing risks, said before acting (and in the report).
    let risk = args
        .force
        .then(|| action.hazard(&row))
        .flatten()
        .map(|hazard| hazard.risk());
    if args.force {
        actor = actor.force();
    }
    if let Some(risk) = &risk {
        eprintln!("warning: forcing {}: {risk}", action.name());
    }
    let acted = context
        .db
        .act(key.key_ref(), &row, &action, &actor, now)
        .await?;
    let json = json!({
        "action": action.name(),
        "before": format::row_json(&acted.before, now),
        "after": acted
            .after
            .as_ref()
            .map_or(Value::Null, |after| format::row_json(after, now)),
        "audit_id": acted.audit_id,
        "operator": context.operator,
        "reason": args.reason,
        "forced": acted.forced,
        "risk": risk,
    });
    let mut text = format!(
        "{}{}: {} (audit #{}, by {})\n\nbefore:\n{}",
        action.name(),
        if acted.forced { " (forced)" } else { "" },
        key.key,
        acted.audit_id,
        context.operator,
        row_text(&acted.before, now)
    );
    match &acted.after {
        Some(after) => text.push_str(&format!("\nafter:\n{}", row_text(after, now))),
        None => text.push_str("\nafter: deleted\n"),
    }
    if let (Some(risk), true) = (&risk, acted.forced) {
        text.push_str(&format!("\nforced over: {risk}\n"));
    }
    Ok(Report { json, text })
}

/// `Name: value` into a stored header: a name of token characters (lowercased, as the
/// runtime stores them) and a value without control characters.
fn parse_header(line: &str) -> Result<(String, String), CommandError> {
    let bad = |why: &str| CommandError::usage(format!("invalid --header {line:?}: {why}"));
    let (name, value) = line
        .split_once(':')
        .ok_or_else(|| bad("expected `Name: value`"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(bad("the name is empty"));
    }
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if !name.chars().all(token) {
        return Err(bad(
            "the name may hold letters, digits and !#$%&'*+-.^_`|~ only",
        ));
    }
    let value = value.trim();
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(bad("the value holds a control character"));
    }
    Ok((name.to_ascii_lowercase(), value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::parse_header;

    #[test]
    fn headers_are_validated() {
        assert_eq!(
            parse_header("Content-Type: application/json").ok(),
            Some(("content-type".into(), "application/json".into()))
        );
        assert_eq!(
            parse_header("location:/orders/7").ok(),
            Some(("location".into(), "/orders/7".into()))
        );
        for bad in ["no colon", ": empty name", "bad name: x", "x-a: b\r\nc"] {
            assert!(parse_header(bad).is_err(), "{bad}");
        }
    }
}
