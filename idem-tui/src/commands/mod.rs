//! The commands: each reads (or acts on) the database and returns a [`Report`], or a
//! [`CommandError`] with its exit code.

mod actions;
mod context;
mod docs;
mod inbox;
mod input;
mod keys;
mod operations;
mod outbox;
mod reseal;
mod stats;
mod sweep;

pub use context::Context;

use crate::cli::{Command, InboxCommand, KeysCommand, ListArgs, OutboxCommand};
use crate::error::CommandError;
use crate::output::Report;

/// Runs `command`.
///
/// # Errors
/// The command's [`CommandError`].
pub async fn run(context: &Context, command: Command) -> Result<Report, CommandError> {
    match command {
        Command::Keys(KeysCommand::List(args)) => keys::list(context, args).await,
        Command::Keys(KeysCommand::Show(args)) | Command::Show(args) => {
            keys::show(context, &args).await
        }
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
        Command::Keys(KeysCommand::Reseal(args)) => reseal::reseal(context, args).await,
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
        Command::Inbox(InboxCommand::List(args)) => inbox::list(context, args).await,
        Command::Inbox(InboxCommand::Show(args)) => inbox::show(context, &args).await,
    }
}
