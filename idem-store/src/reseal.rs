//! [`KeyTable::reseal`]: the key table's sealed columns written again under the current
//! storage key, batch by batch, so that an old key can be retired ([`crate::seal`]).

use std::collections::BTreeMap;

use sqlx::{Pool, Transaction};

use crate::backend::Backend;
use crate::error::StoreError;
use crate::glue::{Arg, Glue};
use crate::inbox::Inbox;
use crate::list::{self, Cursor, RawRow};
use crate::operator::{Actor, record, row_json};
use crate::outbox::Outbox;
use crate::row::{KeyRow, StoredResponse};
use crate::seal::{self, Column, Keyring, Place, Sealed, Sealing};
use crate::table::{KeyTable, raw_row};

/// What one batch of [`KeyTable::reseal`] did, or, [`Resealed::add`]ed up, a whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resealed {
    /// Rows written again under the keyring's current key, each with its entry in the audit
    /// trail.
    pub resealed: u64,
    /// Rows whose every sealable column was sealed under the current key already: left as
    /// they are.
    pub current: u64,
    /// Rows left as they are because a column is sealed under a key the keyring lacks, by
    /// that key's id: they stay readable only with it.
    pub unknown_keys: BTreeMap<String, u64>,
    /// Rows left as they are because they cannot be read (a sealed value that fails its
    /// check, a status this version does not know, …): what is wrong with each, naming its
    /// key, never a value ([`StoreError::Corrupt`]'s words).
    pub unreadable: Vec<String>,
    /// Where the next batch starts (its `after`); `None`: this batch reached the end of the
    /// key table.
    pub next: Option<Cursor>,
}

impl Resealed {
    /// The most rows one batch reads; larger batches are lowered to this.
    pub const MAX_BATCH: u32 = 1000;

    /// Rows left as they are for want of a key: [`Resealed::unknown_keys`], summed.
    #[must_use]
    pub fn skipped(&self) -> u64 {
        self.unknown_keys.values().sum()
    }

    /// Adds `later`, the batch after this one (or after the batches summed here): its counts
    /// added, its unreadable rows after these, its `next` in place of this one's.
    pub fn add(&mut self, later: Self) {
        self.resealed += later.resealed;
        self.current += later.current;
        for (key, n) in later.unknown_keys {
            *self.unknown_keys.entry(key).or_default() += n;
        }
        self.unreadable.extend(later.unreadable);
        self.next = later.next;
    }
}

impl<DB: Backend> KeyTable<DB> {
    /// Writes the sealed columns of up to `batch` key rows (1 to [`Resealed::MAX_BATCH`]),
    /// those after `after` in primary-key order (`None`: from the first), again under the
    /// current key of the table's keyring ([`KeyTable::with_keyring`]), as `by`, at `now_ms`:
    /// what lets an old storage key be retired. Call it again with [`Resealed::next`] until
    /// that is `None`; a run interrupted resumes from the last `next` it returned, and a run
    /// from the start again changes only what is not sealed under the current key yet.
    ///
    /// Each batch is one transaction holding the rows it reads (PostgreSQL and MySQL:
    /// `SELECT … FOR UPDATE`, MySQL in `READ COMMITTED`; SQLite: `BEGIN IMMEDIATE`), so
    /// that no other write of theirs comes in between. A row's fingerprint, field digests,
    /// request, journal, and response headers and body are opened and sealed again, clear
    /// ones sealed for the first time (a key table from before the keyring ends up sealed
    /// throughout), with one entry in the audit trail per row written, action `reseal`,
    /// holding no sealed value ([`crate::AuditEntry`]). What a row holds is unchanged: the
    /// protocol reads it as before. A row with a column sealed under a key the keyring
    /// lacks, or one that cannot be read, is left as it is, and counted.
    ///
    /// Give the services the new keyring (the new key first) before resealing: a service
    /// that still seals under the old key goes on writing rows under it.
    ///
    /// ```no_run
    /// # use idem_store::{Actor, KeyTable, Keyring, Resealed};
    /// # async fn demo<DB: idem_store::Backend>(table: KeyTable<DB>, now_ms: i64) -> Result<(), Box<dyn std::error::Error>> {
    /// // k2 seals from now on; k1 opens what it sealed until every row is resealed.
    /// let table = table.with_keyring(Keyring::parse(&std::env::var("IDEM_STORAGE_KEYS")?)?);
    /// let by = Actor::new("alice").reason("CHG-7: retire storage key k1");
    /// let mut total = Resealed::default();
    /// loop {
    ///     let batch = table.reseal(total.next.as_ref(), 200, &by, now_ms).await?;
    ///     total.add(batch);
    ///     if total.next.is_none() {
    ///         break;
    ///     }
    /// }
    /// println!("{} resealed, {} left under keys not given", total.resealed, total.skipped());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// Nothing of the batch is changed nor audited on any error.
    /// - [`StoreError::NeedsStorageKeys`]: the table has no keyring.
    /// - [`StoreError::InvalidArgument`]: an empty [`Actor::operator`].
    /// - [`StoreError::LockTimeout`]; database errors.
    pub async fn reseal(
        &self,
        after: Option<&Cursor>,
        batch: u32,
        by: &Actor,
        now_ms: i64,
    ) -> Result<Resealed, StoreError> {
        let Some(ring) = self.keyring() else {
            return Err(StoreError::NeedsStorageKeys(
                "reseal: the table has no keyring to seal under".to_owned(),
            ));
        };
        if by.operator.trim().is_empty() {
            return Err(StoreError::InvalidArgument(
                "a reseal needs the operator's name".to_owned(),
            ));
        }
        let batch = batch.clamp(1, Resealed::MAX_BATCH);
        reseal::<DB>(self.pool(), ring, after, batch, (by, now_ms))
            .await
            .map_err(StoreError::refine::<DB>)
    }
}

/// [`KeyTable::reseal`], its arguments checked.
async fn reseal<DB: Backend>(
    pool: &Pool<DB>,
    ring: &Keyring,
    after: Option<&Cursor>,
    batch: u32,
    (by, now_ms): (&Actor, i64),
) -> Result<Resealed, StoreError> {
    let sql = DB::SQL;
    let mut conn = pool.acquire().await?;
    let begin = sql.operator.begin_batch.map(Into::into);
    let mut tx = Transaction::<DB>::begin(&mut *conn, begin).await?;
    let limit = Arg::Int(i64::from(batch));
    let rows = match after.map(Cursor::key) {
        None => DB::fetch_all(&mut tx, sql.operator.reseal_first, &[limit]).await?,
        Some(key) => {
            let (scope, operation) = (Arg::Text(key.scope), Arg::Text(key.operation));
            let args = [
                scope,
                scope,
                operation,
                operation,
                Arg::Text(key.key),
                limit,
            ];
            DB::fetch_all(&mut tx, sql.operator.reseal_next, &args).await?
        }
    };
    let mut done = Resealed::default();
    let mut last = None;
    for row in &rows {
        let stored = Stored::read::<DB>(row)?;
        last = Some(Cursor::at(stored.row.key_ref()));
        match stored.verdict(ring) {
            Verdict::Current => done.current += 1,
            Verdict::Unknown(key) => *done.unknown_keys.entry(key).or_default() += 1,
            Verdict::Reseal => match stored.resealed(ring, now_ms) {
                Ok(resealed) => {
                    resealed.write::<DB>(&mut tx, by, now_ms).await?;
                    done.resealed += 1;
                }
                Err(StoreError::Corrupt(why)) => done.unreadable.push(why),
                Err(other) => return Err(other),
            },
        }
    }
    tx.commit().await?;
    done.next = last.filter(|_| rows.len() == usize::try_from(batch).unwrap_or(usize::MAX));
    Ok(done)
}

/// A key row as a reseal reads it: the columns tools read, then its other sealable ones.
struct Stored {
    row: RawRow,
    field_digests: Option<Vec<u8>>,
    journal: Option<String>,
    request: Option<String>,
}

/// What a reseal does with a row.
enum Verdict {
    /// Every sealable column is sealed under the current key: nothing.
    Current,
    /// A column is sealed under this key, which the keyring lacks: nothing.
    Unknown(String),
    /// Seal every sealable column under the current key.
    Reseal,
}

/// A row's sealable columns sealed under the current key, ready to be written, and the row
/// before and after, as the audit trail records them.
struct Rewrite {
    before: KeyRow,
    after: KeyRow,
    fingerprint: Vec<u8>,
    field_digests: Option<Vec<u8>>,
    request: Option<String>,
    journal: Option<String>,
    headers: Option<String>,
    body: Option<Vec<u8>>,
}

impl Stored {
    /// [`OperatorSql::reseal_first`](crate::sql::OperatorSql::reseal_first)'s row.
    fn read<DB: Glue>(row: &DB::Row) -> Result<Self, sqlx::Error> {
        Ok(Self {
            row: raw_row::<DB>(row)?,
            field_digests: DB::opt_bytes(row, 14)?,
            journal: DB::opt_text(row, 15)?,
            request: DB::opt_text(row, 16)?,
        })
    }

    /// Whether the row is sealed under `ring`'s current key throughout, has a column sealed
    /// under a key `ring` lacks, or is to be resealed. A response's headers and body are
    /// sealed as one value, whose key the headers column names ([`crate::seal`]).
    fn verdict(&self, ring: &Keyring) -> Verdict {
        // A response whose two columns disagree is read in full, and reported.
        let headers = self.row.response_headers.as_deref();
        if !seal::response_agrees(headers, self.row.response_body.as_deref()) {
            return Verdict::Reseal;
        }
        let texts = [&self.request, &self.journal, &self.row.response_headers];
        let values = (texts.into_iter().flatten().map(String::as_bytes))
            .chain([self.row.fingerprint.as_slice()])
            .chain(self.row.response_body.as_deref())
            .chain(self.field_digests.as_deref());
        let mut current = true;
        for value in values {
            match Sealed::key_of(value) {
                None => current = false,
                Some(key) if !ring.has(key) => return Verdict::Unknown(key.to_owned()),
                Some(key) => current &= key == ring.current(),
            }
        }
        if current {
            Verdict::Current
        } else {
            Verdict::Reseal
        }
    }

    /// The row's sealable columns opened with `ring` and sealed again under its current key,
    /// with the row before and after for the audit trail (at `now_ms`). Each value is opened
    /// and read as what its column holds before it is written again (the response as a
    /// response, the request and the journal as JSON): a value that does not open or does
    /// not read, or a row that cannot be read, is [`StoreError::Corrupt`], and nothing is
    /// sealed that idem would not answer.
    fn resealed(mut self, ring: &Keyring, now_ms: i64) -> Result<Rewrite, StoreError> {
        let sealed_by = self.row.sealed_by().map(str::to_owned);
        let code = self.row.response_status;
        let fingerprint = std::mem::take(&mut self.row.fingerprint);
        let (headers, body) = (
            self.row.response_headers.take(),
            self.row.response_body.take(),
        );
        // What the audit trail records of a row: nothing sealed, opened or not.
        let mut before = self.row.into_row(now_ms, None)?;
        before.sealed = sealed_by.map(|key| Sealing { key, opened: false });
        let after = KeyRow {
            sealed: Some(Sealing {
                key: ring.current().to_owned(),
                opened: false,
            }),
            ..before.clone()
        };
        let key = before.key_ref();
        let ring = Some(ring);
        let again = |column, what, value: Vec<u8>| -> Result<Vec<u8>, StoreError> {
            let place = Place::key(column, key);
            let plain =
                seal::open(ring, place, value).map_err(|e| list::unopened(key, what, &e))?;
            Ok(seal::seal(ring, place, &plain).into_owned())
        };
        let again_text = |column, what, value: String| -> Result<String, StoreError> {
            let place = Place::key(column, key);
            let plain =
                seal::open_text(ring, place, value).map_err(|e| list::unopened(key, what, &e))?;
            if serde_json::from_str::<serde_json::Value>(&plain).is_err() {
                return Err(list::corrupt(key, &format!("{what} is not JSON")));
            }
            Ok(seal::seal_text(ring, place, &plain).into_owned())
        };
        let (headers, body) = seal::open_response(ring, key, headers, body)
            .map_err(|e| list::unopened(key, "the stored response", &e))?;
        if let Some(code) = code {
            StoredResponse::strict(code, headers.as_deref(), body.clone())
                .map_err(|e| list::unopened(key, "the stored response", &e))?;
        }
        // A body is sealed with its headers; without them, it is read as it is.
        let (headers, body) = match headers {
            None => (None, body),
            Some(headers) => {
                let plain = body.as_deref().unwrap_or_default();
                let (headers, sealed) = seal::seal_response(ring, key, &headers, plain);
                let sealed = body.is_some().then(|| sealed.into_owned());
                (Some(headers.into_owned()), sealed)
            }
        };
        Ok(Rewrite {
            fingerprint: again(Column::Fingerprint, "the fingerprint", fingerprint)?,
            field_digests: (self.field_digests)
                .map(|d| again(Column::FieldDigests, "the field digests", d))
                .transpose()?,
            request: (self.request)
                .map(|r| again_text(Column::Request, "the request", r))
                .transpose()?,
            journal: (self.journal)
                .map(|j| again_text(Column::Journal, "the journal", j))
                .transpose()?,
            headers,
            body,
            before,
            after,
        })
    }
}

impl Rewrite {
    /// Writes the row and its entry in the audit trail in `tx`, which holds the row.
    async fn write<DB: Backend>(
        &self,
        tx: &mut DB::Connection,
        by: &Actor,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let key = self.before.key_ref();
        let set = [
            Arg::Bytes(&self.fingerprint),
            Arg::OptBytes(self.field_digests.as_deref()),
            Arg::OptText(self.request.as_deref()),
            Arg::OptText(self.journal.as_deref()),
            Arg::OptText(self.headers.as_deref()),
            Arg::OptBytes(self.body.as_deref()),
        ];
        let args = Arg::around_key(&set, key, &[]);
        DB::execute(tx, DB::SQL.operator.reseal, &args).await?;
        let (before, after) = (row_json(&self.before, true), row_json(&self.after, true));
        let entry = (before.as_str(), Some(after.as_str()));
        record::<DB>(tx, now_ms, by, (key, "reseal"), entry, false).await?;
        Ok(())
    }
}

/// What one batch of [`Outbox::reseal`] or [`Inbox::reseal`] did, or, [`ResealedRows::add`]ed
/// up, a whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResealedRows {
    /// Rows whose value was written again under the keyring's current key.
    pub resealed: u64,
    /// Rows whose value was sealed under the current key already.
    pub current: u64,
    /// Rows left as they are, their value sealed under a key the keyring lacks, by key id.
    pub unknown_keys: BTreeMap<String, u64>,
    /// Rows left as they are because their value fails its check: which, never a value.
    pub unreadable: Vec<String>,
    /// The id the next batch starts after; `None`: this batch reached the end.
    pub next: Option<i64>,
}

impl ResealedRows {
    /// Adds `later`, the batch after this one: its counts added, its `next` in place of
    /// this one's.
    pub fn add(&mut self, later: Self) {
        self.resealed += later.resealed;
        self.current += later.current;
        for (key, n) in later.unknown_keys {
            *self.unknown_keys.entry(key).or_default() += n;
        }
        self.unreadable.extend(later.unreadable);
        self.next = later.next;
    }
}

impl<DB: Backend> Outbox<DB> {
    /// Writes the payloads of up to `batch` messages (1 to [`Resealed::MAX_BATCH`]) after
    /// id `after` (0: from the first) again under the current key of the outbox's keyring
    /// ([`Outbox::with_keyring`]), clear ones sealed for the first time, so that an old
    /// storage key can be retired with pending and dead messages still in the outbox. Call
    /// it again with [`ResealedRows::next`] until that is `None`. A payload never changes
    /// once enqueued, so a batch holds no lock; nothing is audited (a message's topic, dedup
    /// id and status are unchanged). A payload sealed under a key the keyring lacks, or that
    /// fails its check, is left as it is, and counted.
    ///
    /// # Errors
    /// [`StoreError::NeedsStorageKeys`]: the outbox has no keyring; database errors.
    pub async fn reseal(&self, after: i64, batch: u32) -> Result<ResealedRows, StoreError> {
        let sql = DB::SQL;
        let statements = (sql.outbox.outbox_reseal_batch, sql.outbox.outbox_reseal);
        let place = crate::outbox::payload_place;
        let ring = self.keyring().ok_or_else(|| needs_keys("the outbox"))?;
        reseal_texts::<DB>(
            self.pool(),
            ring,
            statements,
            place,
            (after, batch),
            "outbox message",
        )
        .await
    }
}

impl<DB: Backend> Inbox<DB> {
    /// [`Outbox::reseal`] for the bodies of the inbox's events ([`Inbox::with_keyring`]).
    ///
    /// # Errors
    /// [`StoreError::NeedsStorageKeys`]: the inbox has no keyring; database errors.
    pub async fn reseal(&self, after: i64, batch: u32) -> Result<ResealedRows, StoreError> {
        let sql = DB::SQL;
        let statements = (sql.inbox.inbox_reseal_batch, sql.inbox.inbox_reseal);
        let place = crate::inbox::body_place;
        let ring = self.keyring().ok_or_else(|| needs_keys("the inbox"))?;
        reseal_texts::<DB>(
            self.pool(),
            ring,
            statements,
            place,
            (after, batch),
            "inbox event",
        )
        .await
    }
}

fn needs_keys(what: &str) -> StoreError {
    StoreError::NeedsStorageKeys(format!("reseal: {what} has no keyring to seal under"))
}

/// A batch of [`Outbox::reseal`] or [`Inbox::reseal`]: `select` reads (id, two parts of the
/// row's identity, the value) after an id, `write` sets the value of an id; `place` is where
/// a row's value is sealed.
async fn reseal_texts<DB: Backend>(
    pool: &Pool<DB>,
    ring: &Keyring,
    (select, write): (&str, &str),
    place: for<'a> fn(&'a str, &'a str) -> Place<'a>,
    (after, batch): (i64, u32),
    what: &str,
) -> Result<ResealedRows, StoreError> {
    let batch = batch.clamp(1, Resealed::MAX_BATCH);
    let mut conn = pool.acquire().await?;
    let args = [Arg::Int(after), Arg::Int(i64::from(batch))];
    let rows = DB::fetch_all(&mut conn, select, &args).await?;
    let mut done = ResealedRows::default();
    let mut last = None;
    for row in &rows {
        let id = DB::int(row, 0)?;
        last = Some(id);
        let (a, b, value) = (DB::text(row, 1)?, DB::text(row, 2)?, DB::text(row, 3)?);
        let place = place(&a, &b);
        match Sealed::key_of(value.as_bytes()) {
            Some(key) if key == ring.current() => done.current += 1,
            Some(key) if !ring.has(key) => {
                *done.unknown_keys.entry(key.to_owned()).or_default() += 1;
            }
            _ => match seal::open_text(Some(ring), place, value) {
                Ok(plain) => {
                    let sealed = ring.seal_text(place, &plain);
                    DB::execute(&mut conn, write, &[Arg::Text(&sealed), Arg::Int(id)]).await?;
                    done.resealed += 1;
                }
                Err(error) => done.unreadable.push(format!("{what} {id}: {error}")),
            },
        }
    }
    done.next = last.filter(|_| rows.len() == usize::try_from(batch).unwrap_or(usize::MAX));
    Ok(done)
}
