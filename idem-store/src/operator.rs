//! [Operator actions](crate#operator-actions) on keys ([`KeyTable::act`]), the audit trail
//! ([`KeyTable::audit`], in [`audit`]), a staged key's journal ([`KeyTable::journal`]) and a
//! key's field digests ([`KeyTable::field_digests`]).

use serde_json::{Map, Value, json};

use sqlx::Pool;

use crate::backend::{Backend, begin_write};
use crate::error::{Hazard, NotApplicable, StoreError};
use crate::glue::Arg;
use crate::key::KeyRef;
use crate::list;
use crate::row::{KeyRow, KeyStatus, StoredResponse, StoredStatus};
use crate::seal::{self, Column, Keyring, Place, SealError, Sealing};
use crate::table::{KeyTable, key_row, write_key};

mod audit;

pub use audit::{AuditEntry, AuditFilter};

/// Who acts on a key, and why: recorded with every action in the audit trail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// The operator's name (a login, an email, `reconciler`…); not empty.
    pub operator: String,
    /// Why, in the operator's words (a ticket, an incident).
    pub reason: Option<String>,
    /// Whether the actor overrides the refusals of actions that could do harm
    /// ([`StoreError::NeedsForce`]), and nothing else: a row that changed or an action that
    /// does not apply is refused all the same.
    pub forced: bool,
}

impl Actor {
    /// `operator`, with no reason given.
    #[must_use]
    pub fn new(operator: impl Into<String>) -> Self {
        Self {
            operator: operator.into(),
            reason: None,
            forced: false,
        }
    }

    /// Sets [`Actor::reason`].
    #[must_use]
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Sets [`Actor::forced`].
    #[must_use]
    pub fn force(mut self) -> Self {
        self.forced = true;
        self
    }
}

/// What an operator does to a key ([`KeyTable::act`]).
///
/// | action | applies to | forced only | the row after |
/// |---|---|---|---|
/// | `Release` | processing and stuck keys | processing (a live lease) | `attempt` + 1, `locked_until` = now |
/// | `Complete(r)` | processing and stuck keys | processing (a live lease) | `completed` with `r`, `completed_at` = now, `expires_at` = now + the TTL, no lease, `attempt` + 1 |
/// | `Fail(r)` | processing and stuck keys; `r.status` >= 400 | processing (a live lease) | as `Complete(r)` |
/// | `Expire` | completed keys not expired yet | — | `expires_at` = now |
/// | `Delete` | any key | processing (a live lease); completed staged keys (`attempt` > 0 or a recovery point) | none: the key is unknown |
///
/// "Forced only": refused ([`StoreError::NeedsForce`]) unless forced; see [`Hazard`].
/// `Complete(r)` and `Fail(r)` write `r`'s headers and body sealed under the current key of
/// the table's keyring ([`KeyTable::with_keyring`]); without one, clear, and on a row whose
/// fingerprint or response is sealed ([`KeyRow::sealed`]) only a status alone (no headers,
/// an empty body: nothing to seal), any other response refused
/// ([`StoreError::NeedsStorageKeys`]). The other actions never need the storage keys. The
/// TTL is the operation's registered one (`idempotency_operations.ttl_ms`), or, for one not
/// registered, the row's own (`expires_at - created_at`), counted from the completion. Only
/// `Delete` removes the key's journal and request.
///
/// Moving `attempt` on fences the running attempt out ([the key table](crate#the-key-table)),
/// and so does `Delete`: a new execution of the key is a new reservation (its attempts count
/// from 1 again), and the old attempt's writes name the old one. What the attempt has under
/// way outside the database goes on all the same ([`Hazard::risk`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Action {
    /// Hands a processing or stuck key back, its lease run out: the next retry (or the
    /// reconciler) takes it over at once and resumes from its recovery point.
    Release,
    /// Completes a processing or stuck key with this response, which retries replay from
    /// then on: for an operator who finished the work by hand.
    Complete(StoredResponse),
    /// As `Complete`, with a failure: for work that must not be resumed.
    Fail(StoredResponse),
    /// Expires a completed key now ([`KeyStatus::Expired`]). A processing or stuck key never
    /// expires (it is resumed, or answered `409` while its lease is live), forced or not:
    /// `Fail`, `Complete` or `Release` end it or hand it on.
    Expire,
    /// Deletes the key's row: the next request with the key runs as a first one.
    Delete,
}

impl Action {
    /// What doing this to `row` (its state as read) risks: why the store refuses it unless
    /// forced ([`StoreError::NeedsForce`]); `None` when nothing. The operator tool says it
    /// before a forced action.
    #[must_use]
    pub fn hazard(&self, row: &KeyRow) -> Option<Hazard> {
        let processing = row.status.stored() == StoredStatus::Processing;
        match self {
            _ if row.status == KeyStatus::Processing => Some(Hazard::LeaseLive {
                locked_until_ms: row.locked_until_ms,
            }),
            Self::Delete if !processing && (row.attempt > 0 || row.recovery_point.is_some()) => {
                Some(Hazard::EffectsExist {
                    attempt: row.attempt,
                    recovery_point: row.recovery_point.clone(),
                })
            }
            _ => None,
        }
    }

    /// Why this action does not apply to `row` (its state as read) at `now_ms`, forced or
    /// not ([`StoreError::NotApplicable`]); `None` when it applies. [`KeyTable::act`] decides
    /// by this on the row it reads under its lock, before it weighs the [hazard](Self::hazard).
    #[must_use]
    pub fn not_applicable(&self, row: &KeyRow, now_ms: i64) -> Option<NotApplicable> {
        let processing = row.status.stored() == StoredStatus::Processing;
        match self {
            Self::Release | Self::Complete(_) | Self::Fail(_) if !processing => {
                Some(NotApplicable::NotRunning {
                    action: self.name(),
                    status: row.status,
                })
            }
            Self::Expire if processing => Some(NotApplicable::NotFinal { status: row.status }),
            Self::Expire if row.expires_at_ms <= now_ms => Some(NotApplicable::ExpiredAlready {
                expired_at_ms: row.expires_at_ms,
            }),
            _ => None,
        }
    }

    /// The action's name in the audit trail: `release`, `complete`, `fail`, `expire`, `delete`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Self::Release => "release",
            Self::Complete(_) => "complete",
            Self::Fail(_) => "fail",
            Self::Expire => "expire",
            Self::Delete => "delete",
        }
    }
}

/// What [`KeyTable::act`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acted {
    /// The row before: the row the operator saw, with its state at the action's `now_ms`.
    pub before: KeyRow,
    /// The row after; `None` for [`Action::Delete`].
    pub after: Option<KeyRow>,
    /// The action's row in the audit trail (`idempotency_audit.id`).
    pub audit_id: i64,
    /// Whether the action was applied only because it was forced ([`AuditEntry::forced`]).
    pub forced: bool,
}

/// A staged key's journal and request ([`KeyTable::journal`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Journal {
    /// The last step journaled (`recovery_point`).
    pub recovery_point: Option<String>,
    /// The `journal` column: each step journaled so far, by name, with its result (empty for
    /// atomic mode's keys and a staged key before its first step), in `serde_json`'s map
    /// order (by name, unless its `preserve_order` feature is on).
    pub steps: Map<String, Value>,
    /// The `request` column ([the key table](crate#the-key-table)); `None` for atomic mode's keys.
    pub request: Option<Value>,
    /// Whether the journal or the request is sealed, under which key (the journal's, else
    /// the request's), and whether the table's keyring opened both; `None`: both are clear.
    /// One sealed under a key the table was not given is left out: no steps, no request.
    pub sealed: Option<Sealing>,
}

impl<DB: Backend> KeyTable<DB> {
    /// Acts on `key` as `by`, at `now_ms`, provided its row is still `expected` (the row
    /// the operator looked at, from [`KeyTable::get`] or [`KeyTable::list`]): see
    /// [operator actions](crate#operator-actions). The transaction holds the key's row
    /// (PostgreSQL and MySQL: `SELECT … FOR UPDATE`; SQLite: `BEGIN IMMEDIATE`), and writes
    /// the action and its [`AuditEntry`] together or not at all.
    ///
    /// The comparison is column for column, the status as its `status` column: a processing
    /// key whose lease ran out since the operator looked is the same row, now stuck.
    ///
    /// ```no_run
    /// # use idem_store::{Action, Actor, KeyFilter, KeyStatus, KeyTable, StoreError};
    /// # async fn demo<DB: idem_store::Backend>(table: KeyTable<DB>, now_ms: i64) -> Result<(), StoreError> {
    /// let stuck = table.list(&KeyFilter::new().status(KeyStatus::Stuck), now_ms).await?;
    /// let by = Actor::new("alice").reason("INC-42: the payment provider is back");
    /// for row in &stuck.keys {
    ///     match table.act(row.key_ref(), row, &Action::Release, &by, now_ms).await {
    ///         Ok(acted) => println!("released {} (audit #{})", row.key, acted.audit_id),
    ///         // A retry took it over meanwhile: leave it.
    ///         Err(StoreError::Changed { .. }) => println!("{} moved on", row.key),
    ///         Err(other) => return Err(other),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Nothing is changed nor audited on any error.
    /// - [`StoreError::InvalidArgument`], checked first: an empty [`Actor::operator`],
    ///   [`Action::Fail`] below 400, `expected` of another key.
    /// - [`StoreError::Changed`]: the row is gone or differs from `expected`.
    /// - [`StoreError::NotApplicable`]: the action does not apply to the row ([`Action`]).
    /// - [`StoreError::NeedsForce`]: the action could do harm ([`Hazard`]), not forced.
    /// - [`StoreError::NeedsStorageKeys`]: [`Action::Complete`] or [`Action::Fail`] with
    ///   headers or a body, of a sealed row ([`KeyRow::sealed`]), by a table without the
    ///   storage keys ([`KeyTable::with_keyring`]).
    /// - [`StoreError::LockTimeout`]; [`StoreError::Corrupt`] (an unreadable row); database
    ///   errors.
    pub async fn act(
        &self,
        key: KeyRef<'_>,
        expected: &KeyRow,
        action: &Action,
        by: &Actor,
        now_ms: i64,
    ) -> Result<Acted, StoreError> {
        validate(key, expected, action, by)?;
        act::<DB>(self, key, expected, action, by, now_ms)
            .await
            .map_err(StoreError::refine::<DB>)
    }

    /// `key`'s [`Journal`], opened with the table's keyring where it is sealed
    /// ([`Journal::sealed`]); `None` if the key has no row.
    ///
    /// ```no_run
    /// # use idem_store::{KeyRef, KeyTable};
    /// # async fn demo<DB: idem_store::Backend>(table: KeyTable<DB>) -> Result<(), idem_store::StoreError> {
    /// let key = KeyRef { scope: "tenant:acme", operation: "create_order:v1", key: "order-1" };
    /// if let Some(journal) = table.journal(key).await? {
    ///     for (step, result) in &journal.steps {
    ///         println!("{step}: {result}");
    ///     }
    ///     println!("recovery point: {:?}", journal.recovery_point);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] when the journal is not a JSON object, the request is not
    /// JSON, or either is sealed and fails its check under a key of the keyring; database
    /// errors.
    pub async fn journal(&self, key: KeyRef<'_>) -> Result<Option<Journal>, StoreError> {
        read_journal::<DB>(self.pool(), key, self.keyring())
            .await
            .map_err(StoreError::refine::<DB>)
    }

    /// `key`'s `field_digests` column as stored ([the key table](crate#the-key-table)): the
    /// digests of its first request's fields, which the runtime's `fields::FieldDigests`
    /// reads. `None` when the row has none (written before migration 11, or with the
    /// runtime's mismatch detail off), or the key has no row. Sealed
    /// ([sealed at rest](crate#storage-sealed-at-rest)), they are opened with the table's
    /// keyring.
    ///
    /// ```no_run
    /// # use idem_store::{KeyRef, KeyTable};
    /// # async fn demo<DB: idem_store::Backend>(table: KeyTable<DB>) -> Result<(), idem_store::StoreError> {
    /// let key = KeyRef { scope: "tenant:acme", operation: "create_order:v1", key: "order-1" };
    /// match table.field_digests(key).await? {
    ///     Some(bytes) => println!("{} bytes of field digests", bytes.len()),
    ///     None => println!("no field digests kept for this key"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`StoreError::NeedsStorageKeys`]: they are sealed under a key the table was not given;
    /// [`StoreError::Corrupt`]: they are sealed and fail their check; database errors.
    pub async fn field_digests(&self, key: KeyRef<'_>) -> Result<Option<Vec<u8>>, StoreError> {
        async {
            let mut conn = self.pool().acquire().await?;
            let digests =
                crate::protocol::field_digests::<DB>(&mut conn, key, self.keyring()).await;
            digests.map_err(|error| match SealError::of(&error) {
                Some(SealError::UnknownKey(id)) => StoreError::NeedsStorageKeys(format!(
                    "the key's field digests are sealed under storage key `{id}`, which was \
                     not given"
                )),
                Some(tampered) => list::unopened(key, "the field digests", tampered),
                None => StoreError::Database(error),
            })
        }
        .await
        .map_err(StoreError::refine::<DB>)
    }
}

/// What [`KeyTable::act`] refuses before it reads anything.
fn validate(
    key: KeyRef<'_>,
    expected: &KeyRow,
    action: &Action,
    by: &Actor,
) -> Result<(), StoreError> {
    if by.operator.trim().is_empty() {
        return Err(StoreError::InvalidArgument(
            "an operator action needs the operator's name".to_owned(),
        ));
    }
    if expected.key_ref() != key {
        return Err(StoreError::InvalidArgument(format!(
            "the expected row is the key ({:?}, {:?}, {:?}), not ({:?}, {:?}, {:?})",
            expected.scope, expected.operation, expected.key, key.scope, key.operation, key.key
        )));
    }
    if let Action::Fail(response) = action
        && response.status < 400
    {
        return Err(StoreError::InvalidArgument(format!(
            "fail stores a failure: status {} is not 400 or more (complete stores any \
             response)",
            response.status
        )));
    }
    Ok(())
}

/// [`KeyTable::act`]'s checks of the row read under its lock: the row before and whether the
/// action is applied only because `forced`, or why it is refused.
pub(crate) fn check(
    expected: &KeyRow,
    current: Option<KeyRow>,
    action: &Action,
    forced: bool,
    now_ms: i64,
) -> Result<(KeyRow, bool), StoreError> {
    let Some(current) = current else {
        return Err(StoreError::Changed { current: None });
    };
    if !same_row(expected, &current) {
        return Err(StoreError::Changed {
            current: Some(Box::new(current)),
        });
    }
    if let Some(why) = action.not_applicable(&current, now_ms) {
        return Err(StoreError::NotApplicable(why));
    }
    match action.hazard(&current) {
        Some(hazard) if !forced => Err(StoreError::NeedsForce {
            action: action.name(),
            hazard,
        }),
        Some(_) => Ok((current, true)),
        None => Ok((current, false)),
    }
}

/// Whether `current` is the row `expected` shows, as [`KeyTable::act`] compares them.
fn same_row(expected: &KeyRow, current: &KeyRow) -> bool {
    expected.status.stored() == current.status.stored()
        && *expected
            == (KeyRow {
                status: expected.status,
                ..current.clone()
            })
}

/// A row as the audit trail records it (see [`AuditEntry`]): without what it holds sealed
/// when `sealed` (a sealed row, or one a reseal seals), whether or not it was opened.
pub(crate) fn row_json(row: &KeyRow, sealed: bool) -> String {
    let response = row.response.as_ref().map(|response| {
        let mut object = Map::new();
        object.insert("status".to_owned(), Value::from(response.status));
        if sealed {
            return object;
        }
        let body = match std::str::from_utf8(&response.body) {
            Ok(text) => ("body", Value::from(text)),
            Err(_) => ("body_hex", Value::from(hex::encode(&response.body))),
        };
        object.insert("headers".to_owned(), json!(response.headers));
        object.insert(body.0.to_owned(), body.1);
        object
    });
    let mut object = json!({
        "scope": row.scope,
        "operation": row.operation,
        "key": row.key,
        "status": row.status.as_str(),
        "attempt": row.attempt,
        "locked_until_ms": row.locked_until_ms,
        "recovery_point": row.recovery_point,
        "created_at_ms": row.created_at_ms,
        "expires_at_ms": row.expires_at_ms,
        "completed_at_ms": row.completed_at_ms,
        "response": response,
        "sealed": row.sealed.as_ref().map(|sealing| &sealing.key),
    });
    if !sealed && let Value::Object(object) = &mut object {
        let fingerprint = Value::from(hex::encode(&row.fingerprint));
        object.insert("fingerprint".to_owned(), fingerprint);
    }
    object.to_string()
}

/// Refuses to write an operator's response with headers or a body for `action` into `row`,
/// a sealed row, without `ring`: they would be written clear
/// ([`StoreError::NeedsStorageKeys`]). A status alone has nothing to seal.
fn keys_for(action: &Action, row: &KeyRow, ring: Option<&Keyring>) -> Result<(), StoreError> {
    let (Action::Complete(response) | Action::Fail(response)) = action else {
        return Ok(());
    };
    match (&row.sealed, ring) {
        (Some(sealing), None) if !response.headers.is_empty() || !response.body.is_empty() => {
            Err(StoreError::NeedsStorageKeys(format!(
                "{}: the key's row is sealed (storage key `{}`), and the response's headers and \
                 body would be written into it clear: give the storage keys to store them \
                 sealed, or store the status alone",
                action.name(),
                sealing.key
            )))
        }
        _ => Ok(()),
    }
}

/// Writes one entry of the audit trail in `conn`'s transaction; returns its id.
pub(crate) async fn record<DB: Backend>(
    conn: &mut DB::Connection,
    now_ms: i64,
    by: &Actor,
    (key, action): (KeyRef<'_>, &str),
    (before, after): (&str, Option<&str>),
    forced: bool,
) -> Result<i64, sqlx::Error> {
    let sql = DB::SQL;
    let audit = [
        Arg::Int(now_ms),
        Arg::Text(&by.operator),
        Arg::Text(key.scope),
        Arg::Text(key.operation),
        Arg::Text(key.key),
        Arg::Text(action),
        Arg::OptText(by.reason.as_deref()),
        Arg::Text(before),
        Arg::OptText(after),
        Arg::Bool(forced),
    ];
    let row = match sql.keys.last_insert_id {
        None => DB::fetch_optional(conn, sql.operator.insert_audit, &audit).await?,
        Some(last_insert_id) => {
            DB::execute(conn, sql.operator.insert_audit, &audit).await?;
            DB::fetch_optional(conn, last_insert_id, &[]).await?
        }
    };
    DB::int(&row.ok_or(sqlx::Error::RowNotFound)?, 0)
}

/// [`KeyTable::act`], its arguments validated.
async fn act<DB: Backend>(
    table: &KeyTable<DB>,
    key: KeyRef<'_>,
    expected: &KeyRow,
    action: &Action,
    by: &Actor,
    now_ms: i64,
) -> Result<Acted, StoreError> {
    let (sql, ring) = (DB::SQL, table.keyring());
    let mut conn = table.pool().acquire().await?;
    // The row's lock: the running attempt, a takeover, another operator wait for this
    // transaction, and then see what it did.
    let mut tx = begin_write::<DB>(&mut conn).await?;
    let current = DB::fetch_optional(&mut tx, sql.tools.get_for_update, &Arg::key(key)).await?;
    let current = (current.map(|row| key_row::<DB>(&row, now_ms, ring))).transpose()?;
    // Refused: dropping `tx` rolls back.
    let (before, forced) = check(expected, current, action, by.forced, now_ms)?;
    keys_for(action, &before, ring)?;
    let headers_json = match action {
        Action::Complete(response) | Action::Fail(response) => response.headers_json(),
        _ => String::new(),
    };
    let body: &[u8] = match action {
        Action::Complete(response) | Action::Fail(response) => &response.body,
        _ => &[],
    };
    let (headers, body) = seal::seal_response(ring, key, &headers_json, body);
    let now = Arg::Int(now_ms);
    let (statement, leading, trailing) = match action {
        Action::Release => (Some(sql.operator.release), vec![now], vec![]),
        Action::Complete(response) | Action::Fail(response) => (
            Some(sql.operator.complete),
            vec![
                Arg::Int32(i32::from(response.status)),
                Arg::Text(&headers),
                Arg::Bytes(&body),
                now,
                now,
                Arg::Text(key.operation),
            ],
            vec![],
        ),
        Action::Expire => (Some(sql.tools.expire), vec![now], vec![now]),
        Action::Delete => (None, Vec::new(), Vec::new()),
    };
    let after = match statement {
        Some(statement) => {
            let args = Arg::around_key(&leading, key, &trailing);
            let row = write_key::<DB>(&mut tx, statement, &args, (key, now_ms, ring)).await?;
            Some(row.ok_or(sqlx::Error::RowNotFound)?)
        }
        None => {
            DB::execute(&mut tx, sql.operator.delete_only, &Arg::key(key)).await?;
            None
        }
    };
    let audited = |row: &KeyRow| row_json(row, row.sealed.is_some());
    let (before_json, after_json) = (audited(&before), after.as_ref().map(audited));
    let audit_id = record::<DB>(
        &mut tx,
        now_ms,
        by,
        (key, action.name()),
        (&before_json, after_json.as_deref()),
        forced,
    )
    .await?;
    tx.commit().await?;
    Ok(Acted {
        before,
        after,
        audit_id,
        forced,
    })
}

/// [`KeyTable::journal`], opened with `ring`.
async fn read_journal<DB: Backend>(
    pool: &Pool<DB>,
    key: KeyRef<'_>,
    ring: Option<&Keyring>,
) -> Result<Option<Journal>, StoreError> {
    let mut conn = pool.acquire().await?;
    let row = DB::fetch_optional(&mut conn, DB::SQL.operator.journal, &Arg::key(key)).await?;
    let Some(row) = row else { return Ok(None) };
    let recovery_point = DB::opt_text(&row, 0)?;
    let read = |column, what, text: Option<String>| match text {
        None => Ok((None, None)),
        Some(text) => seal::read_text(ring, Place::key(column, key), text)
            .map_err(|e| list::unopened(key, what, &e)),
    };
    let (journal, journal_sealed) = read(Column::Journal, "the journal", DB::opt_text(&row, 1)?)?;
    let (request, request_sealed) = read(Column::Request, "the request", DB::opt_text(&row, 2)?)?;
    let sealed = match (journal_sealed, request_sealed) {
        (Some(journal), Some(request)) => Some(Sealing {
            opened: journal.opened && request.opened,
            ..journal
        }),
        (journal, request) => journal.or(request),
    };
    let corrupt = |what: String| list::corrupt(key, &what);
    let steps = match journal {
        None => Map::new(),
        Some(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(steps)) => steps,
            Ok(_) => return Err(corrupt("the journal is not a JSON object".to_owned())),
            Err(e) => return Err(corrupt(format!("the journal is not JSON: {e}"))),
        },
    };
    let request = (request.map(|text| serde_json::from_str::<Value>(&text)))
        .transpose()
        .map_err(|e| corrupt(format!("the request is not JSON: {e}")))?;
    Ok(Some(Journal {
        recovery_point,
        steps,
        request,
        sealed,
    }))
}
