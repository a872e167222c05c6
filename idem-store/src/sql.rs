//! Every statement of the store, written once as a template ([`Sql::STANDARD`]) that each
//! database renders in its own words (`crate::dialect::render`), and overrides where it has
//! a better statement of its own (PostgreSQL's `FOR UPDATE SKIP LOCKED` sweeps, say).
//!
//! Parameters are `$1`, `$2`, … on every database. A template's words in braces are the
//! places where databases differ, rendered innermost first:
//!
//! | in the template | meaning | PostgreSQL | SQLite |
//! |---|---|---|---|
//! | `{key_columns}` | a key row's columns, in the order `RawRow` is read | | |
//! | `{outbox_columns}` | an outbox row's columns, likewise | | |
//! | `{ms COLUMN}` | a timestamp column in milliseconds since the epoch | `extract(epoch …)` | `julianday(…)`, or a number written by hand as seconds |
//! | `{ts EXPR}` | milliseconds as a timestamp column's value | `to_timestamp(…)` | `strftime(…)` text |
//! | `{cmp COLUMN OP EXPR}` | a timestamp column compared with milliseconds | on the column (indexes serve it) | on `{ms COLUMN}` |
//! | `{greatest A, B}` | the larger of two values | `GREATEST` | `max` |
//! | `{pick SUBQUERY}` | rows a batch takes, skipping rows others hold | `= ANY(ARRAY(… FOR UPDATE SKIP LOCKED))` | `IN (…)` (one writer) |
//! | `{for_update}` | read a row to change it in this transaction | `FOR UPDATE` | nothing (`BEGIN IMMEDIATE` holds the database) |
//! | `{returning COLUMNS}` | the rows a write changed | `RETURNING COLUMNS` | `RETURNING COLUMNS` |
//! | `{quoted NAME}` | a column named with a word some database reserves | `"NAME"` | `"NAME"` |
//!
//! MySQL has no `RETURNING` (`{returning …}` renders as nothing there) and no
//! `ON CONFLICT`: the generic code reads the rows again, and takes a duplicate key's error
//! for "exists already"; its statements that differ are in its own file.

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

/// The statements of the store: templates (`Sql<&'static str>`), or rendered for one
/// database (`Sql<String>`). Staged mode's holds exist only where sessions can vouch for
/// their process (`None` elsewhere).
///
/// Public only as the sealed `Dialect` trait's vocabulary: not nameable outside the crate.
#[derive(Debug, Clone)]
#[allow(missing_docs)] // Each field is the statement it names; the templates say what it does.
pub struct Sql<S> {
    // The protocol.
    pub lookup: S,
    pub expires_at: S,
    pub insert_completed: S,
    pub insert_completed_or_replace_expired: S,
    // Tools.
    pub get: S,
    pub get_for_update: S,
    pub list: S,
    pub expire: S,
    pub delete: S,
    pub sweep: S,
    pub count_sweepable: S,
    pub counts: S,
    // Operator actions and their audit trail.
    pub release: S,
    pub complete: S,
    pub delete_only: S,
    pub insert_audit: S,
    pub audit: S,
    pub journal: S,
    // The operation registry.
    pub register: S,
    pub registrations: S,
    // Staged mode.
    pub reserve: S,
    pub reserve_or_replace_expired: S,
    pub reserve_held: Option<S>,
    pub hold: Option<S>,
    pub let_go: Option<S>,
    pub owner_gone: Option<S>,
    // Where the database cannot replace an expired row in the inserting statement itself
    // (MySQL): deleting the expired completed row first, and a staged key's reopening.
    pub clear_expired: Option<S>,
    pub reopen_expired: Option<S>,
    // Where a key's lock is a row of its own (MySQL): the lock rows the sweeper deletes.
    pub sweep_locks: Option<S>,
    // Where writes return nothing (MySQL): a staged key's lease, read after a takeover, and
    // the outbox's claimable rows, picked before they are leased.
    pub lease_of: S,
    pub claimable: S,
    pub take_over: S,
    pub renew: S,
    pub step: S,
    pub finish: S,
    pub give_back: S,
    pub stuck: S,
    // The outbox.
    pub enqueue: S,
    pub claim: S,
    pub mark_delivered: S,
    pub mark_failed: S,
    pub outbox_get: S,
    pub outbox_find: S,
    pub outbox_find_for_update: S,
    pub outbox_list: S,
    pub outbox_list_status: S,
    pub outbox_counts: S,
    pub outbox_retry: S,
    pub outbox_retryable: S,
    pub sweep_delivered: S,
}

/// `WHERE` on a key row's primary key.
macro_rules! by_key {
    () => {
        " WHERE scope = $1 AND operation = $2 AND idempotency_key = $3"
    };
}

/// `WHERE` on a staged attempt: the key, still processing, still attempt `$4`.
macro_rules! by_attempt {
    () => {
        concat!(by_key!(), " AND status = 'processing' AND attempt = $4")
    };
}

/// The columns of a completed key row as the protocol inserts it.
macro_rules! insert_completed {
    () => {
        "INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
         response_status, response_headers, response_body, created_at, completed_at, \
         expires_at) VALUES ($1, $2, $3, $4, 'completed', $5, $6, $7, {ts $8}, {ts $9}, \
         {ts $10})"
    };
}

/// What the key's row existing already makes of an insert (PostgreSQL, SQLite).
macro_rules! on_key_conflict {
    () => {
        " ON CONFLICT (scope, operation, idempotency_key) DO "
    };
}

/// A staged key reserved: processing, attempt 1, leased.
macro_rules! reserve {
    () => {
        "INSERT INTO idempotency_keys (scope, operation, idempotency_key, fingerprint, status, \
         request, created_at, expires_at, locked_until, attempt) \
         VALUES ($1, $2, $3, $4, 'processing', $5, {ts $6}, {ts $7}, {ts $8}, 1)"
    };
}

/// What a completed row that had expired by `excluded.created_at` becomes when staged mode
/// reserves its key again.
macro_rules! reopen {
    () => {
        "UPDATE SET fingerprint = excluded.fingerprint, status = 'processing', \
         request = excluded.request, created_at = excluded.created_at, \
         expires_at = excluded.expires_at, locked_until = excluded.locked_until, \
         attempt = idempotency_keys.attempt + 1, journal = NULL, recovery_point = NULL, \
         response_status = NULL, response_headers = NULL, response_body = NULL, \
         completed_at = NULL WHERE idempotency_keys.status = 'completed' \
         AND idempotency_keys.expires_at <= excluded.created_at"
    };
}
#[cfg(feature = "mysql")]
pub(crate) use insert_completed;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use reserve;
#[cfg(feature = "postgres")]
pub(crate) use {on_key_conflict, reopen};

impl Sql<&'static str> {
    /// The statements as every database idem supports reads them, up to the words in braces.
    pub(crate) const STANDARD: Self = Self {
        lookup: concat!(
            "SELECT fingerprint, status, response_status, response_headers, response_body, \
             {ms expires_at}, {ms locked_until}, attempt FROM idempotency_keys",
            by_key!()
        ),
        expires_at: concat!("SELECT {ms expires_at} FROM idempotency_keys", by_key!()),
        insert_completed: concat!(insert_completed!(), on_key_conflict!(), "NOTHING"),
        // A processing row is never replaced (`KeyStatus::at`: a key that is not final never
        // expires).
        insert_completed_or_replace_expired: concat!(
            insert_completed!(),
            on_key_conflict!(),
            "UPDATE SET fingerprint = excluded.fingerprint, status = 'completed', \
             response_status = excluded.response_status, \
             response_headers = excluded.response_headers, \
             response_body = excluded.response_body, created_at = excluded.created_at, \
             completed_at = excluded.completed_at, expires_at = excluded.expires_at \
             WHERE idempotency_keys.status = 'completed' \
             AND {cmp idempotency_keys.expires_at <= $8}"
        ),

        get: concat!("SELECT {key_columns} FROM idempotency_keys", by_key!()),
        get_for_update: concat!(
            "SELECT {key_columns} FROM idempotency_keys",
            by_key!(),
            "{for_update}"
        ),
        // The filters follow as `AND …`.
        list: "SELECT {key_columns} FROM idempotency_keys WHERE 1 = 1",
        // Expiry now, never later than it was.
        expire: concat!(
            "UPDATE idempotency_keys SET expires_at = {ts $4}",
            by_key!(),
            " AND {ms expires_at} > $4{returning {key_columns}}"
        ),
        delete: concat!(
            "DELETE FROM idempotency_keys",
            by_key!(),
            "{returning {key_columns}}"
        ),
        // Expired keys only (`KeyStatus::at`): completed rows past `expires_at`, never a
        // processing row.
        sweep: "DELETE FROM idempotency_keys WHERE (scope, operation, idempotency_key) IN (\
                SELECT scope, operation, idempotency_key FROM idempotency_keys \
                WHERE status = 'completed' AND expires_at <= {ts $1} LIMIT $2)",
        count_sweepable: "SELECT count(*) FROM idempotency_keys \
                          WHERE status = 'completed' AND expires_at <= {ts $1}",
        // Keys per operation and state (`KeyStatus::at`, in SQL: only a completed row
        // expires; a processing row is stuck once its lease ran out, whatever `expires_at`
        // says), with the earliest `created_at` of each group (the stuck groups' give the
        // oldest stuck key).
        counts: "SELECT operation, CASE \
                 WHEN status = 'completed' AND {cmp expires_at <= $1} THEN 'expired' \
                 WHEN status = 'processing' AND {cmp locked_until <= $1} THEN 'stuck' \
                 ELSE status END AS state, count(*), {ms min(created_at)} \
                 FROM idempotency_keys GROUP BY 1, 2",

        // The lease run out now, and the running attempt, if any, fenced out.
        release: concat!(
            "UPDATE idempotency_keys SET attempt = attempt + 1, locked_until = {ts $4}",
            by_key!(),
            "{returning {key_columns}}"
        ),
        // Completed with the operator's response, the running attempt fenced out, its TTL
        // counted from now: the operation's registered `ttl_ms`, or for an operation not in
        // the registry the row's own (`expires_at - created_at`, what its reservation set).
        complete: concat!(
            "UPDATE idempotency_keys SET status = 'completed', response_status = $4, \
             response_headers = $5, response_body = $6, completed_at = {ts $7}, \
             expires_at = {ts $7 + COALESCE(\
             (SELECT ttl_ms FROM idempotency_operations WHERE operation = $2), \
             {greatest {ms expires_at} - {ms created_at}, 0})}, \
             locked_until = NULL, attempt = attempt + 1",
            by_key!(),
            "{returning {key_columns}}"
        ),
        delete_only: concat!("DELETE FROM idempotency_keys", by_key!()),
        insert_audit: "INSERT INTO idempotency_audit (at, operator, scope, operation, \
                       idempotency_key, action, reason, {quoted before}, {quoted after}, forced) \
                       VALUES ({ts $1}, $2, $3, $4, $5, $6, $7, $8, $9, $10){returning id}",
        // The filters follow as `AND …`.
        audit: "SELECT id, {ms at}, operator, scope, operation, idempotency_key, action, \
                reason, {quoted before}, {quoted after}, forced FROM idempotency_audit \
                WHERE 1 = 1",
        journal: concat!(
            "SELECT recovery_point, journal, request FROM idempotency_keys",
            by_key!()
        ),

        register: "INSERT INTO idempotency_operations \
                   (operation, scope, ttl_ms, mode, lease_ms, doc, registered_at) \
                   VALUES ($1, $2, $3, $4, $5, $7, {ts $6}) \
                   ON CONFLICT (operation) DO UPDATE SET scope = excluded.scope, \
                   ttl_ms = excluded.ttl_ms, mode = excluded.mode, \
                   lease_ms = excluded.lease_ms, doc = excluded.doc, \
                   registered_at = excluded.registered_at",
        registrations: "SELECT operation, scope, ttl_ms, mode, lease_ms, doc, \
                        {ms registered_at} FROM idempotency_operations ORDER BY operation",

        // The key table's triggers keep `idempotency_processing` in step.
        reserve: concat!(reserve!(), on_key_conflict!(), "NOTHING"),
        // Replacing a completed row that had expired by the reservation's start; a
        // processing row, whatever its `expires_at`, is never replaced (`KeyStatus::at`).
        reserve_or_replace_expired: concat!(reserve!(), on_key_conflict!(), reopen!()),
        reserve_held: None,
        hold: None,
        let_go: None,
        owner_gone: None,
        clear_expired: None,
        reopen_expired: None,
        sweep_locks: None,
        lease_of: concat!(
            "SELECT attempt, journal, request, fingerprint FROM idempotency_keys",
            by_key!()
        ),
        claimable: "SELECT id FROM idempotency_outbox WHERE status = 'pending' \
                    AND next_attempt_at <= {ts $1} \
                    AND (locked_until IS NULL OR locked_until <= {ts $1}) \
                    ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED",
        take_over: concat!(
            "UPDATE idempotency_keys SET attempt = attempt + 1, locked_until = {ts $6}",
            by_attempt!(),
            " AND (locked_until IS NULL OR locked_until <= {ts $5})\
             {returning attempt, journal, request, fingerprint}"
        ),
        renew: concat!(
            "UPDATE idempotency_keys SET locked_until = {ts $5}",
            by_attempt!()
        ),
        step: concat!(
            "UPDATE idempotency_keys SET recovery_point = $5, journal = $6, \
             locked_until = {ts $7}",
            by_attempt!()
        ),
        // Completed, its TTL counted from now: `expires_at` is `Ending::expires_ms`.
        finish: concat!(
            "UPDATE idempotency_keys SET status = 'completed', response_status = $5, \
             response_headers = $6, response_body = $7, completed_at = {ts $8}, \
             expires_at = {ts $9}, locked_until = NULL",
            by_attempt!()
        ),
        give_back: concat!(
            "UPDATE idempotency_keys SET locked_until = {ts $5}",
            by_attempt!()
        ),
        // `KeyStatus::Stuck` keys of an operation: processing, lease run out, whatever
        // `expires_at` says.
        stuck: "SELECT scope, operation, idempotency_key, attempt FROM idempotency_keys \
                WHERE (scope, operation, idempotency_key) IN (SELECT scope, operation, \
                idempotency_key FROM idempotency_processing WHERE operation = $1) \
                AND status = 'processing' AND operation = $1 AND locked_until <= {ts $2} \
                ORDER BY locked_until LIMIT $3",

        // Due at once; nothing if the dedup id exists.
        enqueue: "INSERT INTO idempotency_outbox \
                  (dedup_id, topic, payload, status, attempts, next_attempt_at, created_at) \
                  VALUES ($1, $2, $3, 'pending', 0, {ts $4}, {ts $4}) \
                  ON CONFLICT (dedup_id) DO NOTHING",
        // Due, unleased pending rows in `id` order, leased until `$2`.
        claim: "UPDATE idempotency_outbox SET locked_until = {ts $2} WHERE id {pick \
                SELECT id FROM idempotency_outbox WHERE status = 'pending' \
                AND next_attempt_at <= {ts $1} \
                AND (locked_until IS NULL OR locked_until <= {ts $1}) ORDER BY id LIMIT $3}\
                {returning {outbox_columns}}",
        mark_delivered: "UPDATE idempotency_outbox SET status = 'delivered', \
                         delivered_at = {ts $2}, locked_until = NULL \
                         WHERE id = $1 AND status = 'pending'",
        // `$4`: dead; then `next_attempt_at` records when (`$5`).
        mark_failed: "UPDATE idempotency_outbox SET attempts = attempts + 1, last_error = $2, \
                      status = CASE WHEN $4 THEN 'dead' ELSE 'pending' END, \
                      next_attempt_at = {ts CASE WHEN $4 THEN $5 ELSE $3 END}, \
                      locked_until = NULL WHERE id = $1 AND status = 'pending'",
        outbox_get: "SELECT {outbox_columns} FROM idempotency_outbox WHERE dedup_id = $1",
        outbox_find: "SELECT {outbox_columns} FROM idempotency_outbox WHERE id = $1",
        outbox_find_for_update: "SELECT {outbox_columns} FROM idempotency_outbox WHERE id = $1\
                                 {for_update}",
        outbox_list: "SELECT {outbox_columns} FROM idempotency_outbox ORDER BY id LIMIT $1",
        outbox_list_status: "SELECT {outbox_columns} FROM idempotency_outbox \
                             WHERE status = $1 ORDER BY id LIMIT $2",
        // Per status: how many, the oldest, and how many are leased at `$1` (in flight).
        outbox_counts: "SELECT status, count(*), {ms min(created_at)}, \
                        count(CASE WHEN locked_until > {ts $1} THEN 1 END) \
                        FROM idempotency_outbox GROUP BY status",
        // An operator's retry of a row this transaction holds and has checked: pending, due
        // at `$2`, unleased, with `$3` attempts (0 for a dead message, kept otherwise).
        outbox_retry: "UPDATE idempotency_outbox SET status = 'pending', attempts = $3, \
                       next_attempt_at = {ts $2}, locked_until = NULL WHERE id = $1\
                       {returning {outbox_columns}}",
        // What `Outbox::retry_all` retries, after id `$2`: dead rows, and pending rows waiting
        // for their backoff at `$1` (not due, not leased).
        outbox_retryable: "SELECT id FROM idempotency_outbox WHERE id > $2 \
                           AND (status = 'dead' OR (status = 'pending' \
                           AND next_attempt_at > {ts $1} \
                           AND (locked_until IS NULL OR locked_until <= {ts $1}))) \
                           ORDER BY id LIMIT $3",
        sweep_delivered: "DELETE FROM idempotency_outbox WHERE id {pick \
                          SELECT id FROM idempotency_outbox WHERE status = 'delivered' \
                          AND delivered_at <= {ts $1} LIMIT $2}",
    };
}

/// A key row's columns, in the order `RawRow` is read.
pub(crate) const KEY_COLUMNS: &str = "scope, operation, idempotency_key, fingerprint, status, \
     response_status, response_headers, response_body, {ms created_at}, {ms completed_at}, \
     {ms expires_at}, {ms locked_until}, attempt, recovery_point";

/// An outbox row's columns, in the order `RawOutboxRow` is read.
pub(crate) const OUTBOX_COLUMNS: &str = "id, dedup_id, topic, payload, status, attempts, \
     {ms next_attempt_at}, {ms locked_until}, last_error, {ms created_at}, {ms delivered_at}";

/// Processing and stuck keys are looked for in `idempotency_processing`, which holds staged
/// mode's processing keys only, instead of among all keys.
pub(crate) const IN_PROCESSING: &str = " AND (scope, operation, idempotency_key) IN \
     (SELECT scope, operation, idempotency_key FROM idempotency_processing)";

/// A completed row that had expired by `$4` (the new execution's start), deleted so that
/// the new execution inserts its own: where an insert cannot replace it (MySQL).
pub(crate) const CLEAR_EXPIRED: &str = concat!(
    "DELETE FROM idempotency_keys",
    by_key!(),
    " AND status = 'completed' AND expires_at <= {ts $4}"
);

/// A completed row that had expired by the reservation's start (`$6`) reserved again by
/// staged mode, its attempt moved on (fencing out anything of its earlier life): where an
/// insert cannot do it (MySQL). One row changed: reserved.
pub(crate) const REOPEN_EXPIRED: &str = concat!(
    "UPDATE idempotency_keys SET fingerprint = $4, request = $5, created_at = {ts $6}, \
     locked_until = {ts $8}, attempt = attempt + 1, journal = NULL, recovery_point = NULL, \
     response_status = NULL, response_headers = NULL, response_body = NULL, \
     completed_at = NULL, status = 'processing', expires_at = {ts $7}",
    by_key!(),
    " AND status = 'completed' AND expires_at <= {ts $6}"
);

pub(crate) const SAVEPOINT: &str = "SAVEPOINT idem_handler";
pub(crate) const ROLLBACK_TO_SAVEPOINT: &str = "ROLLBACK TO SAVEPOINT idem_handler";

// The migration runner's statements on `idem_schema_migrations` (its `CREATE TABLE` is each
// database's own: `Dialect::HISTORY`).
pub(crate) const APPLIED: &str =
    "SELECT version, checksum FROM idem_schema_migrations ORDER BY version";
pub(crate) const APPLIED_ONE: &str =
    "SELECT checksum FROM idem_schema_migrations WHERE version = $1";
pub(crate) const RECORD: &str =
    "INSERT INTO idem_schema_migrations (version, description, checksum) VALUES ($1, $2, $3)";
pub(crate) const FORGET_SQLX_VERSION: &str = "DELETE FROM _sqlx_migrations WHERE version = $1";

impl<S> Sql<S> {
    /// Every statement through `f` (templates into rendered statements).
    pub(crate) fn map<T>(self, mut f: impl FnMut(S) -> T) -> Sql<T> {
        let mut f = |s| f(s);
        Sql {
            lookup: f(self.lookup),
            expires_at: f(self.expires_at),
            insert_completed: f(self.insert_completed),
            insert_completed_or_replace_expired: f(self.insert_completed_or_replace_expired),
            get: f(self.get),
            get_for_update: f(self.get_for_update),
            list: f(self.list),
            expire: f(self.expire),
            delete: f(self.delete),
            sweep: f(self.sweep),
            count_sweepable: f(self.count_sweepable),
            counts: f(self.counts),
            release: f(self.release),
            complete: f(self.complete),
            delete_only: f(self.delete_only),
            insert_audit: f(self.insert_audit),
            audit: f(self.audit),
            journal: f(self.journal),
            register: f(self.register),
            registrations: f(self.registrations),
            reserve: f(self.reserve),
            reserve_or_replace_expired: f(self.reserve_or_replace_expired),
            reserve_held: self.reserve_held.map(&mut f),
            hold: self.hold.map(&mut f),
            let_go: self.let_go.map(&mut f),
            owner_gone: self.owner_gone.map(&mut f),
            clear_expired: self.clear_expired.map(&mut f),
            reopen_expired: self.reopen_expired.map(&mut f),
            sweep_locks: self.sweep_locks.map(&mut f),
            lease_of: f(self.lease_of),
            claimable: f(self.claimable),
            take_over: f(self.take_over),
            renew: f(self.renew),
            step: f(self.step),
            finish: f(self.finish),
            give_back: f(self.give_back),
            stuck: f(self.stuck),
            enqueue: f(self.enqueue),
            claim: f(self.claim),
            mark_delivered: f(self.mark_delivered),
            mark_failed: f(self.mark_failed),
            outbox_get: f(self.outbox_get),
            outbox_find: f(self.outbox_find),
            outbox_find_for_update: f(self.outbox_find_for_update),
            outbox_list: f(self.outbox_list),
            outbox_list_status: f(self.outbox_list_status),
            outbox_counts: f(self.outbox_counts),
            outbox_retry: f(self.outbox_retry),
            outbox_retryable: f(self.outbox_retryable),
            sweep_delivered: f(self.sweep_delivered),
        }
    }
}
