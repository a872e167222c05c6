//! Every statement of the store, as each database is sent it: [`Sql`] says what each
//! statement does, and each backend writes all of them out in full, in its own words, one
//! file a statement named after its field: `sql/<store>/<field>.sql` in the crate
//! (`postgres::SQL`, `sqlite::SQL` and `mysql::SQL` embed them). `sql/<store>.snap` records
//! every statement of a store by field, so that a change to one shows as a change of SQL.
//! A few are written in code instead, beside what they serve, where values are written into
//! the text: PostgreSQL's `BEGIN` with its `SET LOCAL` timeouts and the key's lock
//! (`idem_lock_key`), its merged `INSERT …; COMMIT; BEGIN` (as fast as a hand-written
//! statement can be: through the general literal writer it measured 3–4% slower on new keys),
//! and the `ROLLBACK` after a failed `BEGIN`; MySQL's `SELECT VERSION()`, its `READ COMMITTED`
//! `BEGIN` and the upsert of a key's lock row, its lock wait written in.
//!
//! **Parameters** stand in the order of the arguments a statement is run with, one argument
//! each: `$1`, `$2`, … on PostgreSQL and SQLite, `?` on MySQL, so that one argument list
//! serves every backend. (A statement MySQL never runs may use one parameter twice.)
//!
//! **Times** cross as milliseconds since the Unix epoch, each database converting them its
//! own way ([the key table](crate#the-key-table)): PostgreSQL `to_timestamp(ms / 1000)` and
//! `extract(epoch …) * 1000`; SQLite `strftime`, read back through
//! `unixepoch(…, 'auto', 'subsec')` (so SQLite compares milliseconds, not columns); MySQL by
//! arithmetic from `1970-01-01`. SQLite needs no `FOR UPDATE` ([`KeySql::begin_write`]); what
//! MySQL's statements do differently is told in [MySQL and MariaDB](crate#mysql-and-mariadb).

use crate::key::KeyRef;

/// A value bound to a statement's parameter, in the SQL type idem's columns hold it in.
#[derive(Debug, Clone, Copy)]
pub enum Arg<'a> {
    /// `text`.
    Text(&'a str),
    /// `text` or `NULL`.
    OptText(Option<&'a str>),
    /// `bigint`.
    Int(i64),
    /// `bigint` or `NULL`.
    OptInt(Option<i64>),
    /// `integer`.
    Int32(i32),
    /// `bytea` / `blob`.
    Bytes(&'a [u8]),
    /// `bytea` / `blob` or `NULL`.
    OptBytes(Option<&'a [u8]>),
    /// `boolean`.
    Bool(bool),
}

impl<'a> Arg<'a> {
    /// The key's three parts, the first three parameters of statements on one key.
    pub(crate) fn key(key: KeyRef<'a>) -> [Self; 3] {
        [
            Self::Text(key.scope),
            Self::Text(key.operation),
            Self::Text(key.key),
        ]
    }
}

/// Every statement of the store on one database, by concern. A key row's columns are read in
/// the order of [`crate::list::RawRow`]'s fields (times in milliseconds), the tools' with the
/// row's `reservation` after them; an outbox row's in the order of `OutboxRow`'s; "the key" is
/// the first three parameters ([`Arg::key`]), unless a statement says where.
///
/// Public only as the sealed [`crate::Backend`]'s vocabulary: not nameable outside the crate.
#[derive(Debug, Clone, Copy)]
pub struct Sql {
    /// The execution protocol on one key, and what a session asks once.
    pub keys: KeySql,
    /// What the operator's tools read and sweep, and the operation registry.
    pub tools: ToolSql,
    /// Operator actions, their audit trail, and the key table's reseal.
    pub operator: OperatorSql,
    /// Staged mode (its fencing: `staged`).
    pub staged: StagedSql,
    /// The outbox, and its reseal (a payload never changes once written, so a batch needs no lock).
    pub outbox: OutboxSql,
    /// The inbox of events not applied, `idempotency_inbox` ([`crate::Inbox`]), and its reseal.
    pub inbox: InboxSql,
    /// The migration runner's history, `idem_schema_migrations`, and its lock.
    pub migrations: MigrationSql,
}

/// The execution protocol on one key, and what a session asks once. ([`Sql::keys`])
#[derive(Debug, Clone, Copy)]
pub struct KeySql {
    /// The columns of the key's row a request needs.
    pub lookup: &'static str,
    /// The key's `expires_at`, looked at again under its lock.
    pub expires_at: &'static str,
    /// The completed row with its response (the key; fingerprint, status, headers, body;
    /// created, completed, expires; the field digests); nothing where the key has a row.
    pub insert_completed: &'static str,
    /// The same, replacing a completed row that had expired by the new row's start (`$8`),
    /// never a processing row ([`crate::KeyStatus::at`]). MySQL: the plain insert, after
    /// [`StagedSql::clear_expired`].
    pub insert_completed_or_replace_expired: &'static str,
    /// The key's field digests (a `422`'s detail), read only when a request differs.
    pub field_digests: &'static str,
    /// How a transaction that writes begins where `BEGIN` would take its write locks too late
    /// (SQLite); `None`: `BEGIN`, rows read `FOR UPDATE`.
    pub begin_write: Option<&'static str>,
    /// What tells this key table's locks from those of other key tables in the database
    /// (PostgreSQL: the schema; MySQL: the database); `None`: nothing, the empty string.
    pub namespace: Option<&'static str>,
    /// PostgreSQL: the server session a connection is on ([`crate::Backend::shared_sessions`]).
    pub session_id: Option<&'static str>,
    /// Where writes return nothing (MySQL): the id the last `INSERT` generated.
    pub last_insert_id: Option<&'static str>,
    /// Whether another transaction holds the key's lock (the lock id), without waiting:
    /// PostgreSQL answers `false` when it is held, MySQL fails with a lock error; `None`: no
    /// telling (SQLite, whose key lock is the database's write lock).
    pub key_lock_taken: Option<&'static str>,
}

/// What the operator's tools read and sweep, and the operation registry. ([`Sql::tools`])
#[derive(Debug, Clone, Copy)]
pub struct ToolSql {
    /// The key's row.
    pub get: &'static str,
    /// The key's row, held for this transaction.
    pub get_for_update: &'static str,
    /// Every key row; the filters follow as `AND …` ([`ToolSql::list_completed`] and the like
    /// first, taking the first parameter).
    pub list: &'static str,
    /// A listing's filter on completed keys not expired at its first parameter.
    pub list_completed: &'static str,
    /// A listing's filter on completed keys expired at its first parameter.
    pub list_expired: &'static str,
    /// A listing's filter on processing keys whose lease runs past its first parameter.
    pub list_processing: &'static str,
    /// A listing's filter on processing keys whose lease ran out at its first parameter.
    pub list_stuck: &'static str,
    /// Expiry moved to now, never later than it was (now; the key; now again).
    pub expire: &'static str,
    /// The key's row deleted (and returned, where writes return rows).
    pub delete: &'static str,
    /// Up to `$2` expired keys deleted: completed rows past `expires_at` at `$1`, never a
    /// processing row.
    pub sweep: &'static str,
    /// How many keys [`ToolSql::sweep`] would delete at `$1`.
    pub count_sweepable: &'static str,
    /// Keys per operation and state ([`crate::KeyStatus::at`]) at the time given (twice), with
    /// the earliest `created_at` of each group.
    pub counts: &'static str,
    /// The key table's size on disk with its indexes.
    pub table_bytes: &'static str,
    /// An operation registered or registered again: operation, scope, ttl, mode, lease,
    /// document, now.
    pub register: &'static str,
    /// Every registered operation.
    pub registrations: &'static str,
}

/// Operator actions, their audit trail, and the key table's reseal. ([`Sql::operator`])
#[derive(Debug, Clone, Copy)]
pub struct OperatorSql {
    /// The lease run out at the first parameter, the running attempt fenced out; then the key.
    pub release: &'static str,
    /// Completed with the operator's response (status, headers, body; now, twice; the
    /// operation), the running attempt fenced out, its TTL counted from now: the operation's
    /// registered `ttl_ms`, or for an operation not in the registry the row's own; then the
    /// key.
    pub complete: &'static str,
    /// The key's row deleted, nothing returned.
    pub delete_only: &'static str,
    /// One entry of the audit trail: at, operator, scope, operation, key, action, reason,
    /// the row before and after (JSON), forced.
    pub insert_audit: &'static str,
    /// The audit trail; the filters follow as `AND …`.
    pub audit: &'static str,
    /// The key's recovery point, journal and request.
    pub journal: &'static str,
    /// How a transaction that holds a batch of key rows begins ([`crate::KeyTable::reseal`]):
    /// SQLite's write lock; MySQL's `READ COMMITTED`, which locks the rows read and no gap
    /// between them; `None`: `BEGIN`, rows read `FOR UPDATE`.
    pub begin_batch: Option<&'static str>,
    /// The first `$1` key rows in primary-key order, with their field digests, journal and
    /// request, held for this transaction.
    pub reseal_first: &'static str,
    /// The same after a key: its scope twice, its operation twice and the key, then the
    /// batch. MySQL writes the row comparison out, each part once (MariaDB scans a range of
    /// the primary key for that form only); PostgreSQL and SQLite compare rows, leaving `$2`
    /// and `$4` unused.
    pub reseal_next: &'static str,
    /// A key row's sealed columns written again (fingerprint, field digests, request,
    /// journal, response headers and body); then the key.
    pub reseal: &'static str,
}

/// Staged mode (its fencing: `staged`). ([`Sql::staged`])
#[derive(Debug, Clone, Copy)]
pub struct StagedSql {
    /// A staged key reserved: processing, attempt 1, leased (the key; fingerprint, request,
    /// created, expires, locked until, reservation); nothing where the key has a row.
    pub reserve: &'static str,
    /// The same, replacing a completed row that had expired by the reservation's start. MySQL:
    /// the plain reservation, after [`StagedSql::reopen_expired`].
    pub reserve_or_replace_expired: &'static str,
    /// PostgreSQL: [`StagedSql::reserve`] with the attempt's hold taken in the same statement.
    pub reserve_held: Option<&'static str>,
    /// PostgreSQL: an attempt's hold, a session advisory lock.
    pub hold: Option<&'static str>,
    /// PostgreSQL: an attempt's hold let go.
    pub let_go: Option<&'static str>,
    /// PostgreSQL: whether an attempt's hold is free (its owner gone).
    pub owner_gone: Option<&'static str>,
    /// MySQL: the key's completed row that had expired by the new execution's start (`$4`)
    /// deleted, so that the insert that follows writes the key's row again.
    pub clear_expired: Option<&'static str>,
    /// MySQL: a completed row that had expired by the reservation's start reserved again, its
    /// attempt moved on (fingerprint, request, created, locked until, expires, reservation;
    /// the key; the start again). One row changed: reserved.
    pub reopen_expired: Option<&'static str>,
    /// MySQL: up to `$2` lock rows no execution took since `$1`.
    pub sweep_locks: Option<&'static str>,
    /// A staged key's lease, read after a takeover where writes return nothing.
    pub lease_of: &'static str,
    /// An expired lease taken over (locked until; the key; the reservation and attempt seen;
    /// now), fencing
    /// out the attempt that had it; returns the lease where writes return rows.
    pub take_over: &'static str,
    /// An attempt's lease renewed (locked until; the key; the reservation and attempt).
    pub renew: &'static str,
    /// A step journaled (recovery point, journal, locked until; the key; the reservation
    /// and attempt).
    pub step: &'static str,
    /// Completed (status, headers, body, completed, expires; the key; the reservation
    /// and attempt).
    pub finish: &'static str,
    /// The lease given back (locked until; the key; the reservation and attempt).
    pub give_back: &'static str,
    /// Up to `$5` stuck keys of operation `$1` and `$2` (processing, lease run out at `$3`,
    /// whatever `expires_at` says, attempt below `$4`), oldest lease first.
    pub stuck: &'static str,
}

/// The outbox, and its reseal (a payload never changes once written, so a batch needs no lock). ([`Sql::outbox`])
#[derive(Debug, Clone, Copy)]
pub struct OutboxSql {
    /// A message (dedup id, topic, payload), due at once (now, twice); nothing if the dedup
    /// id exists.
    pub enqueue: &'static str,
    /// A batch of due, unleased pending messages in `id` order, leased and returned.
    pub claim: Claim,
    /// A message delivered (now; the id), if still pending.
    pub mark_delivered: &'static str,
    /// A failed delivery (the error; dead?, twice; when dead; the next attempt; the id), if
    /// still pending.
    pub mark_failed: &'static str,
    /// A message by dedup id.
    pub outbox_get: &'static str,
    /// A message by id.
    pub outbox_find: &'static str,
    /// A message by id, held for this transaction.
    pub outbox_find_for_update: &'static str,
    /// Up to `$1` messages, by id.
    pub outbox_list: &'static str,
    /// Up to `$2` messages of status `$1`, by id.
    pub outbox_list_status: &'static str,
    /// Per status: how many, the oldest, and how many are leased at `$1` (in flight).
    pub outbox_counts: &'static str,
    /// An operator's retry of a row this transaction holds and has checked (attempts, due
    /// when; the id): pending, unleased.
    pub outbox_retry: &'static str,
    /// What a retry of all retries, after an id: dead rows, and pending rows waiting for
    /// their backoff (not due, not leased) at now (twice); then the id after which, and the
    /// batch.
    pub outbox_retryable: &'static str,
    /// Up to `$2` delivered messages, delivered by `$1`, deleted.
    pub sweep_delivered: &'static str,
    /// Up to `$2` messages after id `$1`, in id order: id, dedup id, topic, payload.
    pub outbox_reseal_batch: &'static str,
    /// A message's payload written again (the payload; the id).
    pub outbox_reseal: &'static str,
}

/// The inbox of events not applied, `idempotency_inbox` ([`crate::Inbox`]), and its reseal. ([`Sql::inbox`])
#[derive(Debug, Clone, Copy)]
pub struct InboxSql {
    /// A delivery noted (source, event id, status, reason, body; now, twice): a new row, or
    /// one more delivery of a known one, whose status only ever goes to `unmatched`.
    pub inbox_note: &'static str,
    /// When an event (source, event id) was first noted, in ms.
    pub inbox_first_seen: &'static str,
    /// An event (source, event id) removed: applied after all.
    pub inbox_remove: &'static str,
    /// Up to `$1` events, first noted first.
    pub inbox_list: &'static str,
    /// Up to `$2` events of status `$1`, first noted first.
    pub inbox_list_status: &'static str,
    /// The events of id `$1`, one per source.
    pub inbox_get: &'static str,
    /// Up to `$2` events after id `$1`, in id order: id, source, event id, body.
    pub inbox_reseal_batch: &'static str,
    /// An event's body written again (the body; the id).
    pub inbox_reseal: &'static str,
}

/// The migration runner's history, `idem_schema_migrations`, and its lock. ([`Sql::migrations`])
#[derive(Debug, Clone, Copy)]
pub struct MigrationSql {
    /// One migration's recorded checksum.
    pub applied_one: &'static str,
    /// A migration recorded: version, description, checksum.
    pub record: &'static str,
    /// idem 0.1's row in sqlx's `_sqlx_migrations` deleted.
    pub forget_sqlx_version: &'static str,
    /// `idem_schema_migrations`, created if missing.
    pub history: &'static str,
    /// Whether idem 0.1's history (sqlx's `_sqlx_migrations`) is where unqualified names go.
    pub has_sqlx_history: &'static str,
    /// How a migration's transaction begins where `BEGIN` will not do: with the lock that
    /// makes one process at a time migrate, where it is transaction-scoped (PostgreSQL), or
    /// with the write lock (SQLite).
    pub begin_migration: Option<&'static str>,
    /// MySQL: the session lock one process at a time migrates under (`GET_LOCK`).
    pub lock_migrations: Option<&'static str>,
    /// MySQL: that lock let go.
    pub unlock_migrations: Option<&'static str>,
}

/// A statement put together at run time (a listing and its filters), its parameters
/// numbered as they are bound.
#[derive(Debug)]
pub(crate) struct Statement<'a> {
    pub(crate) sql: String,
    pub(crate) args: Vec<Arg<'a>>,
    /// Whether parameters are `?` ([`crate::Backend::POSITIONAL`]).
    positional: bool,
}

impl<'a> Statement<'a> {
    /// A statement starting with `start`, its parameters `?` if `positional`, else `$n`.
    pub(crate) fn new(start: &str, positional: bool) -> Self {
        Self {
            sql: start.to_owned(),
            args: Vec::new(),
            positional,
        }
    }

    pub(crate) fn push(&mut self, sql: &str) -> &mut Self {
        self.sql.push_str(sql);
        self
    }

    /// Binds `arg` to the next parameter, and returns its name to write where it goes.
    pub(crate) fn param(&mut self, arg: Arg<'a>) -> String {
        self.args.push(arg);
        if self.positional {
            "?".to_owned()
        } else {
            format!("${}", self.args.len())
        }
    }

    /// Binds `arg` where the statement ends now.
    pub(crate) fn bind(&mut self, arg: Arg<'a>) -> &mut Self {
        let name = self.param(arg);
        self.push(&name)
    }
}

/// How a batch of outbox messages is claimed ([`OutboxSql::claim`]).
#[derive(Debug, Clone, Copy)]
pub enum Claim {
    /// One `UPDATE … RETURNING`: due at `$1`, leased until `$2`, up to `$3`; rows other
    /// transactions hold are skipped where the database can.
    Returning(&'static str),
    /// Where writes return nothing (MySQL): three statements of one transaction.
    Reread {
        /// The ids to lease (due and unleased at now, twice; up to the batch), held for
        /// this transaction, skipping rows others hold.
        pick: &'static str,
        /// Those ids leased until the first parameter; the ids follow, then `)`.
        lease: &'static str,
        /// The messages by id; the ids follow, then `)`.
        read: &'static str,
    },
}

/// Every migration recorded, in order.
pub(crate) const APPLIED: &str =
    "SELECT version, checksum FROM idem_schema_migrations ORDER BY version";
pub(crate) const SAVEPOINT: &str = "SAVEPOINT idem_handler";
pub(crate) const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO SAVEPOINT idem_handler";

#[cfg(test)]
impl Sql {
    /// Every statement of `sql` as it is sent, one a line behind its field's name, in the
    /// order [`Sql`] declares them (`None`: the database has no such statement).
    pub(crate) fn listing(&self) -> String {
        let debug = format!("{self:#?}");
        let mut out = String::new();
        let (mut prefix, mut field) = ("", "");
        for line in debug.lines().map(str::trim) {
            let value = match line.split_once(": ") {
                Some((name, value)) if !line.starts_with('"') => {
                    field = name;
                    value
                }
                _ => line,
            };
            let value = value.trim_end_matches(',');
            if value.ends_with("Sql {") {
                // A group of statements (`KeySql`, …): listed by their own names.
                continue;
            }
            if value.ends_with(" {") {
                // An enum's fields (`Claim::Reread`): named after it.
                prefix = field;
                continue;
            }
            if value == "}" {
                prefix = "";
                continue;
            }
            if value.ends_with('(') || value == ")" || value == "Sql {" {
                continue;
            }
            if !prefix.is_empty() {
                out.push_str(prefix);
                out.push('.');
            }
            let sql = match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                Some(quoted) => quoted
                    .replace("\\n", "\n")
                    .replace("\\\"", "\"")
                    .replace("\\\\", "\\"),
                None => value.to_owned(),
            };
            out.push_str("-- ");
            out.push_str(field);
            out.push('\n');
            out.push_str(sql.trim_end());
            out.push_str("\n\n");
        }
        out
    }
}
