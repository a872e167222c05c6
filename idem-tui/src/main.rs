//! `idem`: the operator's terminal UI and command line for idem's key table, outbox and
//! inbox.
//!
//! `idem` with no command, on a terminal, opens the UI. Every command works without a
//! terminal and prints aligned columns, or one JSON document on stdout with `--json`:
//!
//! | command | what it does |
//! |---|---|
//! | `keys list [--status S] [--operation OP] [--scope S] [--key-prefix P] [--limit N] [--after CURSOR]` | one page of keys; `next` is the cursor of the following page |
//! | `keys show --scope S --operation OP --key K [--body FILE\|-]` | every column, the stored response, the journal and request, each recorded step's provider key, the audit history; `--body`: the fields a JSON body changes, adds and removes against the key's first request's body (names only) |
//! | `keys expire\|release\|delete … [--reason R] [--force]` | an operator action, fenced by the row as read, audited |
//! | `keys complete\|fail … --status N [--body FILE\|-] [--header 'Name: value']… [--reason R] [--force]` | completes a processing or stuck key with a response |
//! | `keys reseal [--batch N] [--after CURSOR] [--reason R]` | every key's sealed values written again under the first storage key, batch by batch, audited, then the outbox's payloads and the inbox's bodies; needs `--storage-keys` |
//! | `stuck` | `keys list --status stuck` |
//! | `show KEY` | `keys show` |
//! | `stats` | counts by status and operation, the oldest stuck key, the table's size |
//! | `audit [--limit N] [--by OPERATOR] [--scope S] [--operation OP] [--key K] [--before-id ID]` | operator actions, newest first |
//! | `sweep --grace 7d [--batch N] [--dry-run]` | deletes keys that expired more than the grace period ago |
//! | `operations` | every operation seen or registered, with its counts and settings |
//! | `docs [--format markdown\|openapi]` | the client's contract of the operations whose service registered its document |
//! | `outbox list [--dead] [--limit N]` | the outbox's messages, oldest first, with its counts (pending, in flight, delivered, dead) |
//! | `outbox show ID` | one message (its numeric id, else its dedup id): every column, the payload, the audit history |
//! | `outbox retry ID\|--all [--reason R]` | sends a dead message again, or one waiting for its backoff now; audited |
//! | `inbox list [--status waiting\|unmatched] [--limit N]` | incoming events not applied, the longest noted first: waiting ones (their sender delivers them again) and unmatched ones (kept for an operator) |
//! | `inbox show ID` | the events of that event id (one per source): every column and the body; read-only |
//!
//! Global options: `--database-url` (or `DATABASE_URL`), `--schema`, `--operator`,
//! `--storage-keys` (or `IDEM_STORAGE_KEYS`: without them, sealed values are shown as
//! `sealed (key k1)`), `--read-only`, `--json`. Exit codes: 0 done, 1 error, 2 usage (the
//! storage keys malformed, or needed and not given among them), 3 key, message or event not
//! found, 4 refused (the key changed, the action does not apply to the key's or message's
//! state, it needs `--force` — a live lease, deleting a completed staged key — or
//! `--read-only`).
//! Errors are one line on stderr; with `--json`, stdout also gets `{"error", "code"}`.

mod cli;
mod commands;
mod db;
mod error;
mod format;
mod message;
mod output;
mod provider;
mod refusal;
mod ui;

use std::io::IsTerminal as _;

use clap::{CommandFactory as _, Parser as _};
use idem_store::Keyring;

use crate::cli::{Cli, StorageKeys};
use crate::commands::Context;
use crate::db::Db;
use crate::error::CommandError;

fn main() {
    let cli = Cli::parse();
    let as_json = cli.json;
    let code = match run(cli) {
        Ok(code) => code,
        Err(failure) => {
            output::print_failure(&failure, as_json);
            failure.code
        }
    };
    std::process::exit(code);
}

/// Runs the command line; the exit code.
fn run(cli: Cli) -> Result<i32, CommandError> {
    if cli.command.is_none() && !std::io::stdout().is_terminal() {
        // Not a terminal, no command: nothing to open.
        let help = Cli::command().render_help();
        eprintln!("{help}");
        return Ok(CommandError::USAGE);
    }
    let url = cli.database_url.clone().ok_or_else(|| {
        CommandError::usage("no database: pass --database-url or set DATABASE_URL")
    })?;
    check_url(&url, cli.schema.as_deref())?;
    let operator = operator(cli.operator.as_deref())?;
    let keys = cli.storage_keys.as_ref().map(keyring).transpose()?;
    // Two workers: the UI draws on one while its database calls run on the other.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CommandError::error(format!("cannot start: {e}")))?;
    runtime.block_on(async move {
        let mut db = Db::connect(&url, cli.schema.as_deref())
            .await
            .map_err(|e| CommandError::error(e.to_string()))?;
        if let Some(keys) = keys {
            db = db.with_keyring(keys);
        }
        let Some(command) = cli.command else {
            let options = ui::Options {
                database: db::redact(&url),
                operator,
                read_only: cli.read_only,
            };
            return Ok(open_ui(db, options).await);
        };
        let context = Context {
            db,
            operator,
            read_only: cli.read_only,
            json: cli.json,
        };
        let report = commands::run(&context, command).await?;
        output::print(&report, cli.json);
        Ok(0)
    })
}

/// Refuses, as usage errors, a URL of an unknown scheme and `--schema` with SQLite or
/// MySQL.
fn check_url(url: &str, schema: Option<&str>) -> Result<(), CommandError> {
    let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let mysql = url.starts_with("mysql://") || url.starts_with("mariadb://");
    let sqlite = url.starts_with("sqlite:");
    if !(postgres || mysql || sqlite) {
        return Err(CommandError::usage(format!(
            "{}: unknown database URL: expected postgres://…, mysql://… or sqlite:…",
            db::redact(url)
        )));
    }
    if !postgres && schema.is_some() {
        return Err(CommandError::usage(if sqlite {
            "--schema applies to PostgreSQL only; SQLite has no schemas"
        } else {
            "--schema applies to PostgreSQL only; on MySQL name the database in the URL"
        }));
    }
    Ok(())
}

/// `--operator`, else the OS user (`USER`, `USERNAME`), else `unknown`.
fn operator(given: Option<&str>) -> Result<String, CommandError> {
    let name = match given {
        Some(name) => name.trim().to_owned(),
        None => ["USER", "USERNAME"]
            .into_iter()
            .find_map(|var| std::env::var(var).ok().filter(|v| !v.trim().is_empty()))
            .unwrap_or_else(|| "unknown".to_owned()),
    };
    if name.is_empty() {
        return Err(CommandError::usage("--operator is empty: name who acts"));
    }
    Ok(name)
}

/// `--storage-keys` (or `IDEM_STORAGE_KEYS`) as a keyring; what is wrong with it, never a
/// key, as a usage error.
fn keyring(given: &StorageKeys) -> Result<Keyring, CommandError> {
    Keyring::parse(&given.0).map_err(|error| {
        CommandError::usage(format!("--storage-keys (or IDEM_STORAGE_KEYS): {error}"))
    })
}

/// Opens the terminal UI on `db`; the exit code.
async fn open_ui(db: Db, options: ui::Options) -> i32 {
    match ui::run(db, options).await {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("idem: the terminal UI failed: {error}");
            CommandError::ERROR
        }
    }
}
