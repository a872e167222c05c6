//! The commands: each reads (or acts on) the database and returns a [`Report`], or a
//! [`CommandError`] with its exit code.

mod actions;
mod docs;
mod keys;
mod operations;
mod outbox;
mod stats;
mod sweep;

use crate::cli::{Command, KeyArgs, KeysCommand, ListArgs, OutboxCommand};
use crate::db::Db;
use crate::error::CommandError;
use crate::output::Report;
use idem_store::KeyRef;

/// What every command runs with.
#[derive(Debug)]
pub struct Context {
    /// The database.
    pub db: Db,
    /// Who acts (`--operator`).
    pub operator: String,
    /// `--read-only`: actions are refused.
    pub read_only: bool,
    /// `--json`: the report is printed as JSON (commands with progress output check it).
    pub json: bool,
}

impl Context {
    /// Refuses `what` when the tool runs `--read-only`.
    ///
    /// # Errors
    /// [`CommandError::REFUSED`] under `--read-only`.
    pub fn writable(&self, what: &str) -> Result<(), CommandError> {
        if self.read_only {
            Err(CommandError::read_only(what))
        } else {
            Ok(())
        }
    }
}

/// Runs `command`.
///
/// # Errors
/// The command's [`CommandError`].
pub async fn run(context: &Context, command: Command) -> Result<Report, CommandError> {
    match command {
        Command::Keys(KeysCommand::List(args)) => keys::list(context, args).await,
        Command::Keys(KeysCommand::Show(key)) => keys::show(context, &key).await,
        Command::Keys(KeysCommand::Expire(args)) => {
            actions::act(context, actions::Kind::Expire, args).await
        }
        Command::Keys(KeysCommand::Release(args)) => {
            actions::act(context, actions::Kind::Release, args).await
        }
        Command::Keys(KeysCommand::Delete(args)) => {
            actions::act(context, actions::Kind::Delete, args).await
        }
        Command::Keys(KeysCommand::Complete(args)) => {
            actions::respond(context, actions::Kind::Complete, args).await
        }
        Command::Keys(KeysCommand::Fail(args)) => {
            actions::respond(context, actions::Kind::Fail, args).await
        }
        Command::Stuck(filter) => {
            let args = ListArgs {
                status: Some("stuck".to_owned()),
                filter,
            };
            keys::list(context, args).await
        }
        Command::Stats => stats::stats(context).await,
        Command::Audit(args) => stats::audit(context, args).await,
        Command::Sweep(args) => sweep::sweep(context, args).await,
        Command::Operations => operations::operations(context).await,
        Command::Docs(args) => docs::docs(context, args).await,
        Command::Outbox(OutboxCommand::List(args)) => outbox::list(context, args).await,
        Command::Outbox(OutboxCommand::Show(args)) => outbox::show(context, &args).await,
        Command::Outbox(OutboxCommand::Retry(args)) => outbox::retry(context, args).await,
    }
}

impl KeyArgs {
    /// The key, as the store names it.
    pub fn key_ref(&self) -> KeyRef<'_> {
        KeyRef {
            scope: &self.scope,
            operation: &self.operation,
            key: &self.key,
        }
    }
}

/// A key's or an outbox message's audit trail, as `show` prints it: a table, newest first.
fn audit_text(audit: &[idem_store::AuditEntry]) -> String {
    if audit.is_empty() {
        return "audit: no operator action\n".to_owned();
    }
    let mut table =
        crate::output::Table::new(&["ID", "AT (UTC)", "OPERATOR", "ACTION", "REASON"]).right(0);
    for entry in audit {
        table.row(vec![
            entry.id.to_string(),
            crate::format::short_time(entry.at_ms),
            entry.operator.clone(),
            crate::format::audit_action(entry),
            entry.reason.clone().unwrap_or_default(),
        ]);
    }
    format!("audit (newest first):\n{}", table.render())
}
