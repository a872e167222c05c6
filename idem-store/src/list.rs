//! Listing keys: filters, pages, cursors, and counts.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::error::StoreError;
use crate::key::KeyRef;
use crate::row::{KeyRow, KeyStatus, StoredResponse, StoredStatus};
use crate::seal::{self, Column, Keyring, Place, SealError, Sealed, Sealing};

/// Which keys [`crate::KeyTable::list`] returns, and how many: every filter is applied in
/// SQL, and filters combine with AND.
///
/// ```
/// use idem_store::{KeyFilter, KeyStatus};
///
/// let filter = KeyFilter::new()
///     .status(KeyStatus::Expired)
///     .operation("create_order:v1")
///     .key_prefix("batch-7/")
///     .limit(200);
/// assert_eq!(filter.effective_limit(), 200);
/// assert_eq!(KeyFilter::new().limit(5000).effective_limit(), KeyFilter::MAX_LIMIT);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyFilter {
    /// Only keys in this state at the listing's `now_ms`.
    pub status: Option<KeyStatus>,
    /// Only this operation id (exact).
    pub operation: Option<String>,
    /// Only this scope (exact): `global`, `tenant:<id>` or `user:<id>`.
    pub scope: Option<String>,
    /// Only keys that start with this text, byte for byte (case-sensitive; `%`, `_`, `*`,
    /// `?` and `[` are plain characters).
    pub key_prefix: Option<String>,
    /// Keys per page ([`KeyFilter::effective_limit`]).
    pub limit: u32,
    /// Start after this position: the [`Page::next`] of the previous page.
    pub after: Option<Cursor>,
}

impl Default for KeyFilter {
    fn default() -> Self {
        Self {
            status: None,
            operation: None,
            scope: None,
            key_prefix: None,
            limit: Self::DEFAULT_LIMIT,
            after: None,
        }
    }
}

impl KeyFilter {
    /// Keys per page unless [`KeyFilter::limit`] says otherwise.
    pub const DEFAULT_LIMIT: u32 = 50;
    /// The most keys one page holds.
    pub const MAX_LIMIT: u32 = 1000;

    /// Every key, [`KeyFilter::DEFAULT_LIMIT`] at a time.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`KeyFilter::status`].
    #[must_use]
    pub fn status(mut self, status: KeyStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Sets [`KeyFilter::operation`].
    #[must_use]
    pub fn operation(mut self, operation: impl Into<String>) -> Self {
        self.operation = Some(operation.into());
        self
    }

    /// Sets [`KeyFilter::scope`].
    #[must_use]
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// Sets [`KeyFilter::key_prefix`].
    #[must_use]
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// Sets [`KeyFilter::limit`].
    #[must_use]
    pub fn limit(mut self, limit: u32) -> Self {
        self.limit = limit;
        self
    }

    /// Sets [`KeyFilter::after`].
    #[must_use]
    pub fn after(mut self, cursor: Option<Cursor>) -> Self {
        self.after = cursor;
        self
    }

    /// The page size used: [`KeyFilter::limit`] within `1..=`[`KeyFilter::MAX_LIMIT`].
    #[must_use]
    pub fn effective_limit(&self) -> u32 {
        self.limit.clamp(1, Self::MAX_LIMIT)
    }
}

/// One page of keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The keys, ordered by (scope, operation, key).
    pub keys: Vec<KeyRow>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// A position in the listing order, as opaque text for command lines and URLs
/// ([`fmt::Display`], [`FromStr`]): a listing after it starts with the first key after that
/// position, whether or not the key there still exists.
///
/// ```
/// use idem_store::{Cursor, KeyRef};
///
/// let cursor = Cursor::at(KeyRef { scope: "global", operation: "op:v1", key: "k-9" });
/// let text = cursor.to_string();
/// assert_eq!(text.parse::<Cursor>().ok(), Some(cursor));
/// assert!("zz".parse::<Cursor>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cursor {
    scope: String,
    operation: String,
    key: String,
}

impl Cursor {
    /// The position of `key`.
    #[must_use]
    pub fn at(key: KeyRef<'_>) -> Self {
        Self {
            scope: key.scope.to_owned(),
            operation: key.operation.to_owned(),
            key: key.key.to_owned(),
        }
    }

    /// The key this cursor stands at.
    #[must_use]
    pub fn key(&self) -> KeyRef<'_> {
        KeyRef {
            scope: &self.scope,
            operation: &self.operation,
            key: &self.key,
        }
    }
}

/// Each part as eight hexadecimal digits of its length in bytes (big-endian `u32`), then its
/// bytes in hexadecimal.
impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in [&self.scope, &self.operation, &self.key] {
            let len = u32::try_from(part.len()).map_err(|_| fmt::Error)?;
            f.write_str(&hex::encode(len.to_be_bytes()))?;
            f.write_str(&hex::encode(part))?;
        }
        Ok(())
    }
}

impl FromStr for Cursor {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = hex::decode(s).map_err(|_| StoreError::InvalidCursor)?;
        let mut rest = bytes.as_slice();
        let mut part = || -> Result<String, StoreError> {
            let (len, tail) = rest
                .split_first_chunk::<4>()
                .ok_or(StoreError::InvalidCursor)?;
            let len =
                usize::try_from(u32::from_be_bytes(*len)).map_err(|_| StoreError::InvalidCursor)?;
            if tail.len() < len {
                return Err(StoreError::InvalidCursor);
            }
            let (text, tail) = tail.split_at(len);
            rest = tail;
            String::from_utf8(text.to_vec()).map_err(|_| StoreError::InvalidCursor)
        };
        let cursor = Self {
            scope: part()?,
            operation: part()?,
            key: part()?,
        };
        if !rest.is_empty() {
            return Err(StoreError::InvalidCursor);
        }
        Ok(cursor)
    }
}

/// How many keys are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusCounts {
    /// [`KeyStatus::Completed`] keys.
    pub completed: u64,
    /// [`KeyStatus::Processing`] keys.
    pub processing: u64,
    /// [`KeyStatus::Stuck`] keys.
    pub stuck: u64,
    /// [`KeyStatus::Expired`] keys, waiting for the sweeper.
    pub expired: u64,
}

impl StatusCounts {
    /// The count of `status`.
    #[must_use]
    pub fn get(&self, status: KeyStatus) -> u64 {
        match status {
            KeyStatus::Completed => self.completed,
            KeyStatus::Processing => self.processing,
            KeyStatus::Stuck => self.stuck,
            KeyStatus::Expired => self.expired,
        }
    }

    /// All keys.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.completed + self.processing + self.stuck + self.expired
    }

    pub(crate) fn add(&mut self, status: KeyStatus, n: u64) {
        let slot = match status {
            KeyStatus::Completed => &mut self.completed,
            KeyStatus::Processing => &mut self.processing,
            KeyStatus::Stuck => &mut self.stuck,
            KeyStatus::Expired => &mut self.expired,
        };
        *slot += n;
    }
}

/// The key table at a glance ([`crate::KeyTable::counts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Keys by state.
    pub by_status: StatusCounts,
    /// Keys by operation id, then state; operations without keys are absent.
    pub by_operation: BTreeMap<String, StatusCounts>,
    /// When the oldest [`KeyStatus::Stuck`] key's execution began (milliseconds since the
    /// Unix epoch); `None` when no key is stuck.
    pub oldest_stuck_created_at_ms: Option<i64>,
    /// The key table's size on disk in bytes, indexes included, where the database can tell
    /// (SQLite: only when it was built with `dbstat`).
    pub table_bytes: Option<u64>,
}

impl Counts {
    /// Adds `n` keys of `operation` in `status`, the earliest created at `oldest_ms`.
    pub(crate) fn add(
        &mut self,
        operation: String,
        status: KeyStatus,
        n: u64,
        oldest_ms: Option<i64>,
    ) {
        if status == KeyStatus::Stuck
            && let Some(oldest) = oldest_ms
        {
            self.oldest_stuck_created_at_ms = Some(
                self.oldest_stuck_created_at_ms
                    .map_or(oldest, |known| known.min(oldest)),
            );
        }
        self.by_status.add(status, n);
        self.by_operation
            .entry(operation)
            .or_default()
            .add(status, n);
    }
}

/// Parses `completed`, `processing`, `stuck` or `expired`.
///
/// ```
/// use idem_store::KeyStatus;
///
/// assert_eq!("stuck".parse::<KeyStatus>().ok(), Some(KeyStatus::Stuck));
/// assert!("done".parse::<KeyStatus>().is_err());
/// ```
impl FromStr for KeyStatus {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| StoreError::InvalidStatus(s.to_owned()))
    }
}

/// A key row's columns as every backend reads them, before they are checked: those every
/// reader of a key row reads, a reseal's too. The tools' reads add the reservation
/// ([`ToolRow`]).
pub(crate) struct RawRow {
    pub(crate) scope: String,
    pub(crate) operation: String,
    pub(crate) key: String,
    pub(crate) fingerprint: Vec<u8>,
    pub(crate) status: String,
    pub(crate) response_status: Option<i32>,
    pub(crate) response_headers: Option<String>,
    pub(crate) response_body: Option<Vec<u8>>,
    pub(crate) created_at_ms: i64,
    pub(crate) completed_at_ms: Option<i64>,
    pub(crate) expires_at_ms: i64,
    pub(crate) locked_until_ms: Option<i64>,
    pub(crate) attempt: i64,
    pub(crate) recovery_point: Option<String>,
}

impl RawRow {
    /// The row at `now_ms`, its sealed values opened with `ring` ([`KeyRow`]), or
    /// [`StoreError::Corrupt`] naming the key; without its reservation, which these columns
    /// leave out ([`ToolRow::into_row`] adds it).
    pub(crate) fn into_row(
        mut self,
        now_ms: i64,
        ring: Option<&Keyring>,
    ) -> Result<KeyRow, StoreError> {
        let sealed = self.open(ring)?;
        // (The closure borrows the key's fields only: the response's are moved out below.)
        let key = KeyRef {
            scope: &self.scope,
            operation: &self.operation,
            key: &self.key,
        };
        let corrupt = |what: String| corrupt(key, &what);
        let stored = match self.status.as_str() {
            "completed" => StoredStatus::Completed,
            "processing" => StoredStatus::Processing,
            other => return Err(corrupt(format!("unknown status {other:?}"))),
        };
        let response = match self.response_status {
            Some(code) if stored == StoredStatus::Completed => Some(
                StoredResponse::strict(code, self.response_headers.as_deref(), self.response_body)
                    .map_err(|e| corrupt(e.to_string()))?,
            ),
            _ => None,
        };
        Ok(KeyRow {
            status: KeyStatus::at(stored, self.expires_at_ms, self.locked_until_ms, now_ms),
            scope: self.scope,
            operation: self.operation,
            key: self.key,
            fingerprint: self.fingerprint,
            response,
            sealed,
            created_at_ms: self.created_at_ms,
            completed_at_ms: self.completed_at_ms,
            expires_at_ms: self.expires_at_ms,
            locked_until_ms: self.locked_until_ms,
            attempt: self.attempt,
            reservation: None,
            recovery_point: self.recovery_point,
        })
    }

    /// Opens the fingerprint and the response in place with `ring`, when they are sealed
    /// and `ring` has every key they are sealed under; leaves only the response's status
    /// when it lacks one. Their [`Sealing`]; `None`: both are clear.
    fn open(&mut self, ring: Option<&Keyring>) -> Result<Option<Sealing>, StoreError> {
        let Some(key) = self.sealed_by().map(str::to_owned) else {
            return Ok(None);
        };
        let headers = self.response_headers.as_deref().map(str::as_bytes);
        let keys = [
            headers.and_then(Sealed::key_of),
            self.response_body.as_deref().and_then(Sealed::key_of),
            Sealed::key_of(&self.fingerprint),
        ];
        let opened = (keys.into_iter().flatten()).all(|k| ring.is_some_and(|ring| ring.has(k)));
        if !opened {
            (self.response_headers, self.response_body) = (None, None);
            return Ok(Some(Sealing { key, opened }));
        }
        let row = KeyRef {
            scope: &self.scope,
            operation: &self.operation,
            key: &self.key,
        };
        let fingerprint = std::mem::take(&mut self.fingerprint);
        let place = Place::key(Column::Fingerprint, row);
        self.fingerprint = (seal::open(ring, place, fingerprint))
            .map_err(|e| unopened(row, "the fingerprint", &e))?;
        let (headers, body) = (self.response_headers.take(), self.response_body.take());
        (self.response_headers, self.response_body) = seal::open_response(ring, row, headers, body)
            .map_err(|e| unopened(row, "the stored response", &e))?;
        Ok(Some(Sealing { key, opened }))
    }

    /// The id of the key that sealed the row ([`Sealing::key`]): its response's, else its
    /// fingerprint's; `None`: both are clear.
    pub(crate) fn sealed_by(&self) -> Option<&str> {
        let headers = self.response_headers.as_deref().map(str::as_bytes);
        (self.response_body.as_deref().and_then(Sealed::key_of))
            .or_else(|| headers.and_then(Sealed::key_of))
            .or_else(|| Sealed::key_of(&self.fingerprint))
    }

    /// The row's identity.
    pub(crate) fn key_ref(&self) -> KeyRef<'_> {
        KeyRef {
            scope: &self.scope,
            operation: &self.operation,
            key: &self.key,
        }
    }
}

/// A key row as the tools' statements read it ([`crate::KeyTable::get`],
/// [`crate::KeyTable::list`], the operator's actions): [`RawRow`]'s columns, then
/// `reservation`.
pub(crate) struct ToolRow {
    /// The columns every reader of a key row reads.
    pub(crate) columns: RawRow,
    /// The `reservation` column: `None` for atomic-mode rows.
    pub(crate) reservation: Option<i64>,
}

impl ToolRow {
    /// [`RawRow::into_row`], with the reservation.
    pub(crate) fn into_row(
        self,
        now_ms: i64,
        ring: Option<&Keyring>,
    ) -> Result<KeyRow, StoreError> {
        let row = self.columns.into_row(now_ms, ring)?;
        Ok(KeyRow {
            reservation: self.reservation,
            ..row
        })
    }
}

/// [`StoreError::Corrupt`] naming `key` and saying `what`.
pub(crate) fn corrupt(key: KeyRef<'_>, what: &str) -> StoreError {
    StoreError::Corrupt(format!(
        "({:?}, {:?}, {:?}): {what}",
        key.scope, key.operation, key.key
    ))
}

/// [`StoreError::Corrupt`] for `key`'s sealed value `what` that did not open under a key of
/// the keyring ([`SealError::Tampered`]): the key and the column, never a value.
pub(crate) fn unopened(key: KeyRef<'_>, what: &str, error: &SealError) -> StoreError {
    match error.key() {
        Some(id) => corrupt(
            key,
            &format!(
                "{what}: {error} (or the storage key given as `{id}` is not the one that sealed it)"
            ),
        ),
        None => corrupt(key, &format!("{what}: {error}")),
    }
}

/// A page from up to `limit + 1` rows read in listing order, opened with `ring`: the extra
/// row only tells that there is a next page.
pub(crate) fn page_of(
    mut rows: Vec<ToolRow>,
    limit: u32,
    now_ms: i64,
    ring: Option<&Keyring>,
) -> Result<Page, StoreError> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let more = rows.len() > limit;
    rows.truncate(limit);
    let keys = rows
        .into_iter()
        .map(|row| row.into_row(now_ms, ring))
        .collect::<Result<Vec<_>, _>>()?;
    let next = if more {
        keys.last().map(|row| Cursor::at(row.key_ref()))
    } else {
        None
    };
    Ok(Page { keys, next })
}

/// `status` as the `counts` queries spell it, into a [`KeyStatus`].
pub(crate) fn counted_status(status: &str) -> Result<KeyStatus, StoreError> {
    (status.parse())
        .map_err(|_| StoreError::Corrupt(format!("a key row has the unknown status {status:?}")))
}

/// A count from the database (never negative).
pub(crate) fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}
