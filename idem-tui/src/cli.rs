//! The command line's grammar: global options, commands and their arguments (clap).

use std::path::PathBuf;

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

use clap::{Args, Parser, Subcommand};
use idem_store::{AuditFilter, KeyFilter, KeyRef, Resealed};

/// The most messages one outbox listing shows: the store's own bound (the same on every
/// store).
const OUTBOX_MAX: u32 = idem_store::Outbox::<idem_store::sqlx::Sqlite>::MAX_BATCH;

/// The most events one inbox listing shows: the store's own bound (the same on every store).
pub const INBOX_MAX: u32 = idem_store::Inbox::<idem_store::sqlx::Sqlite>::MAX_LIST;

/// idem's operator tool: inspect and manage the idempotency keys of a live database.
///
/// Without a command, on a terminal, opens the terminal UI. Exit codes: 0 done, 1 error,
/// 2 usage, 3 key, message or event not found, 4 refused (the key changed, the key or message is
/// not in a state the action allows, the action needs --force, or --read-only).
#[derive(Debug, Parser)]
#[command(name = "idem", version)]
pub struct Cli {
    /// The database: `postgres://user:password@host/db`, `mysql://user:password@host/db` (or
    /// `mariadb://…`) or `sqlite:path/to/app.db`.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,

    /// PostgreSQL schema holding idem's tables, when not the default search path (sent as the
    /// startup `options`, which a transaction pooler refuses or drops: give a direct URL).
    #[arg(long, global = true)]
    pub schema: Option<String>,

    /// Who acts, for the audit trail [default: the OS user, else `unknown`].
    #[arg(long, global = true)]
    pub operator: Option<String>,

    /// The storage keys, as the services are given them: comma-separated `ID:BASE64`
    /// entries, the first sealing. With them, sealed bodies are shown and operators'
    /// responses are stored sealed; without them, sealed keys are listed and acted on all
    /// the same, their bodies shown as `sealed (key ID)`. Never printed.
    #[arg(
        long,
        env = "IDEM_STORAGE_KEYS",
        global = true,
        hide_env_values = true,
        value_name = "KEYS"
    )]
    pub storage_keys: Option<StorageKeys>,

    /// Refuse every action: only read (actions exit with 4).
    #[arg(long, global = true)]
    pub read_only: bool,

    /// Print one JSON document on stdout instead of tables.
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do; without one, the terminal UI.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List, inspect and act on keys.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Stuck keys: staged executions whose lease ran out (`keys list --status stuck`).
    Stuck(ListFilter),
    /// Everything about one key (`keys show`).
    Show(ShowArgs),
    /// Keys by status and by operation, the oldest stuck key, the table's size.
    Stats,
    /// The audit trail of operator actions, newest first.
    Audit(AuditArgs),
    /// Delete keys that expired more than a grace period ago, batch by batch.
    Sweep(SweepArgs),
    /// Every operation seen in the key table or registered, with its counts and settings.
    Operations,
    /// The client's contract of every registered operation, as services document it.
    Docs(DocsArgs),
    /// The transactional outbox: list and inspect messages, retry dead ones.
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// The inbox of incoming events that could not be applied: list and inspect them
    /// (read-only).
    #[command(subcommand)]
    Inbox(InboxCommand),
}

/// `idem inbox …`.
#[derive(Debug, Subcommand)]
pub enum InboxCommand {
    /// List events, the longest noted first: those waiting to be delivered again and those
    /// kept as unmatched.
    List(InboxListArgs),
    /// Everything about one event (every source that noted its id): its columns and body.
    Show(InboxShowArgs),
}

/// `inbox list`.
#[derive(Debug, Args)]
pub struct InboxListArgs {
    /// Only events in this state: `waiting` (its sender is told to deliver it again),
    /// `unmatched` (acknowledged without being applied, kept for an operator) or
    /// `unparseable` (signed, but its body does not read: refused, kept for an operator).
    #[arg(long, value_parser = ["waiting", "unmatched", "unparseable"])]
    pub status: Option<String>,
    /// Events at most (1 to 1000), the longest noted first.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(INBOX_MAX)))]
    pub limit: u32,
}

/// `inbox show`.
#[derive(Debug, Args)]
pub struct InboxShowArgs {
    /// The event's id, as its sender gave it (a webhook's `webhook-id`).
    #[arg(value_name = "ID")]
    pub id: String,
}

/// `--storage-keys` as given, read by [`idem_store::Keyring::parse`] once the command line
/// is read: text that is never printed, not even by `Debug`.
#[derive(Clone)]
pub struct StorageKeys(pub String);

impl FromStr for StorageKeys {
    type Err = Infallible;

    /// Any text: it is checked by [`idem_store::Keyring::parse`], whose errors never show a
    /// key, where clap's would show the value.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self(text.to_owned()))
    }
}

impl fmt::Debug for StorageKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StorageKeys(***)")
    }
}

/// `idem outbox …`.
#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// List messages in id order (the order they were enqueued), with the outbox's counts.
    List(OutboxListArgs),
    /// Everything about one message: its columns, payload and audit history.
    Show(OutboxShowArgs),
    /// Send a dead message again (pending, due now, attempts reset), or one waiting for its
    /// backoff now; audited. `--all`: every such message.
    Retry(OutboxRetryArgs),
}

/// `outbox list`.
#[derive(Debug, Args)]
pub struct OutboxListArgs {
    /// Only dead messages: given up on, waiting for an operator.
    #[arg(long)]
    pub dead: bool,
    /// Messages at most (1 to 1000), oldest first.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(OUTBOX_MAX)))]
    pub limit: u32,
}

/// `outbox show`.
#[derive(Debug, Args)]
pub struct OutboxShowArgs {
    /// The message: its numeric id, or else its dedup id.
    #[arg(value_name = "ID")]
    pub id: String,
}

/// `outbox retry`.
#[derive(Debug, Args)]
pub struct OutboxRetryArgs {
    /// The message: its numeric id, or else its dedup id.
    #[arg(
        value_name = "ID",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    pub id: Option<String>,
    /// Every dead message, and every pending one waiting for its backoff.
    #[arg(long)]
    pub all: bool,
    /// Why (a ticket, an incident), for the audit trail.
    #[arg(long)]
    pub reason: Option<String>,
}

/// `docs`: which document.
#[derive(Debug, Args)]
pub struct DocsArgs {
    /// `markdown` (the policy and each operation's contract) or `openapi` (OpenAPI 3.1, JSON).
    #[arg(long, value_enum, default_value_t = DocsFormat::Markdown)]
    pub format: DocsFormat,
}

/// The formats of `docs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DocsFormat {
    /// Markdown.
    Markdown,
    /// OpenAPI 3.1, JSON.
    Openapi,
}

/// `idem keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// List keys, one page at a time, in (scope, operation, key) order.
    List(ListArgs),
    /// Everything about one key: its columns, stored response, journal and audit history;
    /// with --body, how a body differs from the one the key was first used with.
    Show(ShowArgs),
    /// Expire a completed key now: it answers 410 (or runs again) until swept.
    Expire(ActionArgs),
    /// Hand a processing or stuck key back: the next retry resumes it at once (a live lease:
    /// --force).
    Release(ActionArgs),
    /// Complete a processing or stuck key with a response retries will replay (a live lease:
    /// --force).
    Complete(ResponseArgs),
    /// Complete a processing or stuck key with a failure (status 400 or more; a live lease:
    /// --force).
    Fail(ResponseArgs),
    /// Delete a key: the next request with it runs as a first one (a live lease or a
    /// completed staged key: --force).
    Delete(ActionArgs),
    /// Write every key's sealed values again under the current storage key (the first of
    /// --storage-keys), batch by batch, then the outbox's payloads and the inbox's bodies, so
    /// that an old key can be retired; clear values are sealed too. Keys audited; resumable
    /// with --after.
    Reseal(ResealArgs),
}

/// `keys reseal`.
#[derive(Debug, Args)]
pub struct ResealArgs {
    /// Keys read (and held) per transaction (1 to 1000).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=i64::from(Resealed::MAX_BATCH)))]
    pub batch: u32,
    /// Start after this position: the cursor an interrupted run printed last.
    #[arg(long)]
    pub after: Option<String>,
    /// Why (a ticket, a key's retirement), for the audit trail.
    #[arg(long)]
    pub reason: Option<String>,
}

/// `keys list`: the filters, plus the status.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only keys in this state: completed, processing, stuck or expired.
    #[arg(long)]
    pub status: Option<String>,
    /// The other filters.
    #[command(flatten)]
    pub filter: ListFilter,
}

/// Filters shared by `keys list` and `stuck`.
#[derive(Debug, Args)]
pub struct ListFilter {
    /// Only this operation id (exact), e.g. `create_order:v1`.
    #[arg(long)]
    pub operation: Option<String>,
    /// Only this scope (exact): `global`, `tenant:<id>` or `user:<id>`.
    #[arg(long)]
    pub scope: Option<String>,
    /// Only keys starting with this text (case-sensitive).
    #[arg(long)]
    pub key_prefix: Option<String>,
    /// Keys per page (1 to 1000).
    #[arg(long, default_value_t = KeyFilter::DEFAULT_LIMIT, value_parser = clap::value_parser!(u32).range(1..=i64::from(KeyFilter::MAX_LIMIT)))]
    pub limit: u32,
    /// Start after this position: the `next` of the previous page.
    #[arg(long)]
    pub after: Option<String>,
}

/// One key, named by its triple.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The key's scope: `global`, `tenant:<id>` or `user:<id>`.
    #[arg(long)]
    pub scope: String,
    /// The key's operation id, e.g. `create_order:v1`.
    #[arg(long)]
    pub operation: String,
    /// The client's idempotency key, as stored and listed or as the client sent it: a key
    /// longer than 255 characters is stored (and looked up) as `sha256:` and the 64 hex
    /// digits of its SHA-256.
    #[arg(long, value_parser = stored_key)]
    pub key: String,
}

/// `--key` as idem stores it ([`idem_runtime::key::stored`]).
fn stored_key(key: &str) -> Result<String, std::convert::Infallible> {
    Ok(idem_runtime::key::stored(key).into_owned())
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

/// `keys show`: the key, and a body to compare with its first request's.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The key.
    #[command(flatten)]
    pub key: KeyArgs,
    /// A request body to compare with the body the key was first used with (a JSON file, `-`
    /// for stdin): shows the fields it changes, adds and removes, by name (JSON pointers such
    /// as `/body/amount`), never a value: the key keeps a salted digest per field. Only body
    /// fields are compared, not the path, query or headers; the file is read as JSON, not as
    /// the handler's type reads it: a field the type ignores or fills with a default shows
    /// as added or removed. Only reads (works with --read-only).
    #[arg(long, value_name = "FILE")]
    pub body: Option<PathBuf>,
}

/// An action on one key.
#[derive(Debug, Args)]
pub struct ActionArgs {
    /// The key.
    #[command(flatten)]
    pub key: KeyArgs,
    /// Why (a ticket, an incident), for the audit trail.
    #[arg(long)]
    pub reason: Option<String>,
    /// Act even when the store refuses because the action could do harm: the key's lease is
    /// live (an attempt is running; the action fences it out), or `delete` of a completed
    /// staged key (its steps would run again). Recorded as forced in the audit trail.
    #[arg(long)]
    pub force: bool,
}

/// `complete` and `fail`: an action with the response to store.
#[derive(Debug, Args)]
pub struct ResponseArgs {
    /// The key and the reason.
    #[command(flatten)]
    pub action: ActionArgs,
    /// The status retries will get (`fail`: 400 or more).
    #[arg(long, value_parser = clap::value_parser!(u16).range(100..=599))]
    pub status: u16,
    /// A file holding the body, `-` for stdin [default: an empty body].
    #[arg(long)]
    pub body: Option<PathBuf>,
    /// A stored header, `Name: value`; repeat for several.
    #[arg(long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
}

/// `idem audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Entries at most (1 to 1000).
    #[arg(long, default_value_t = AuditFilter::DEFAULT_LIMIT, value_parser = clap::value_parser!(u32).range(1..=i64::from(AuditFilter::MAX_LIMIT)))]
    pub limit: u32,
    /// Only actions by this operator.
    #[arg(long = "by", value_name = "OPERATOR")]
    pub by: Option<String>,
    /// Only actions on keys of this scope.
    #[arg(long)]
    pub scope: Option<String>,
    /// Only actions on keys of this operation.
    #[arg(long)]
    pub operation: Option<String>,
    /// Only actions on this client key.
    #[arg(long)]
    pub key: Option<String>,
    /// Only entries older than this id (the last id of the previous page).
    #[arg(long)]
    pub before_id: Option<i64>,
}

/// `idem sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Delete keys that expired more than this long ago: `7d`, `12h`, `30m`, `90s`, `1d12h`.
    #[arg(long)]
    pub grace: String,
    /// Keys deleted per statement.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch: u32,
    /// Only count the keys a sweep would delete.
    #[arg(long)]
    pub dry_run: bool,
}
