//! What a key row holds, as the protocol and tools read it.

use std::fmt;

use bytes::Bytes;

use crate::key::KeyRef;
use crate::seal::{SealError, Sealing};
use crate::staged::Fence;

/// A stored response: status, headers and body, without HTTP types (the `response_*`
/// columns of [the key table](crate#the-key-table)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredResponse {
    /// The HTTP status (or any status of the plain function API).
    pub status: u16,
    /// The stored headers, in the order they were stored; names are lowercase when they
    /// come from `http`'s header names.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Bytes,
}

impl StoredResponse {
    /// The `response_headers` column for `pairs`: a JSON array of `[name, value]` arrays.
    ///
    /// ```
    /// use idem_store::StoredResponse;
    ///
    /// let json = StoredResponse::encode_headers([("location", "/orders/7")]);
    /// assert_eq!(json, r#"[["location","/orders/7"]]"#);
    /// ```
    #[must_use]
    pub fn encode_headers<'h>(pairs: impl IntoIterator<Item = (&'h str, &'h str)>) -> String {
        let pairs: Vec<(&str, &str)> = pairs.into_iter().collect();
        serde_json::to_string(&pairs).unwrap_or_else(|_| "[]".to_owned())
    }

    /// [`StoredResponse::encode_headers`] of this response's headers.
    #[must_use]
    pub fn headers_json(&self) -> String {
        Self::encode_headers(self.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())))
    }

    /// The response as its columns hold it (opened, if sealed), as the protocol replays it
    /// and tools read it. What idem does not write there is refused, never replayed in part:
    /// a status outside `u16`, headers that are not a JSON array of `[name, value]` pairs
    /// ([`SealError::Unreadable`] naming the column).
    pub(crate) fn strict(
        status: i32,
        headers: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Result<Self, SealError> {
        let status = u16::try_from(status).map_err(|_| SealError::Unreadable("response_status"))?;
        let headers = match headers {
            None => Vec::new(),
            Some(json) => {
                serde_json::from_str(json).map_err(|_| SealError::Unreadable("response_headers"))?
            }
        };
        Ok(Self {
            status,
            headers,
            body: body.map(Bytes::from).unwrap_or_default(),
        })
    }
}

/// The `status` column: what the row says, before expiry is taken into account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoredStatus {
    /// `completed`: the response is stored.
    Completed,
    /// `processing`: a staged execution holds the key. A status this version does not know,
    /// written by a newer one, reads as this too: someone else holds the key.
    Processing,
}

impl StoredStatus {
    /// Whether a row with this `status` is final (`completed`): only a final row expires
    /// ([`KeyStatus::at`]).
    #[must_use]
    pub fn is_final(self) -> bool {
        self == Self::Completed
    }

    /// `completed` or `processing`, as in the column.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Processing => "processing",
        }
    }

    pub(crate) fn from_column(status: &str) -> Self {
        if status == "completed" {
            Self::Completed
        } else {
            Self::Processing
        }
    }
}

impl fmt::Display for StoredStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for StoredStatus {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for StoredStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// What the protocol's lookup ([`lookup`](crate::protocol::lookup)) finds for a key.
#[derive(Debug, Clone)]
pub struct StoredKey {
    /// The fingerprint of the request that stored the row (SHA-256, 32 bytes).
    pub fingerprint: Vec<u8>,
    /// The `status` column.
    pub status: StoredStatus,
    /// The stored response: `Some` for a completed row that has one.
    pub response: Option<StoredResponse>,
    /// `expires_at`: it counts for a completed row only ([`StoredKey::status_at`]).
    pub expires_at_ms: i64,
    /// `locked_until`: the lease of the attempt running a staged key.
    pub locked_until_ms: Option<i64>,
    /// `reservation` and `attempt`: what fences a staged key's running attempt (both 0 for
    /// atomic-mode rows).
    pub fence: Fence,
    /// Why the sealed fingerprint or response did not open
    /// ([sealed at rest](crate#storage-sealed-at-rest)), leaving `fingerprint` empty and
    /// `response` out: the row can be told expired, never compared or replayed.
    pub unopened: Option<crate::SealError>,
}

impl StoredKey {
    /// The key's state at `now_ms` ([`KeyStatus::at`], whose example shows the rule).
    #[must_use]
    pub fn status_at(&self, now_ms: i64) -> KeyStatus {
        KeyStatus::at(
            self.status,
            self.expires_at_ms,
            self.locked_until_ms,
            now_ms,
        )
    }

    /// Whether the row is final (`completed`).
    #[must_use]
    pub fn is_final(&self) -> bool {
        self.status.is_final()
    }
}

/// The state of a key at a given time, as tools show and filter it: computed when the row
/// is read, by [`KeyStatus::at`] — the one rule of a key's life:
///
/// | `KeyStatus` | row |
/// |---|---|
/// | `Completed` | `completed`, `expires_at > now` |
/// | `Expired` | `completed`, `expires_at <= now`: answered `410` or run again, per operation, until swept |
/// | `Processing` | `processing` (staged mode), lease live (`locked_until > now`, or no lease), whatever `expires_at` says |
/// | `Stuck` | `processing` whose lease ran out (`locked_until <= now`), whatever `expires_at` says |
///
/// A key that is not final never expires: a `processing` row (staged mode's) whose
/// `expires_at` passed (an execution killed mid-way and resumed late) is never answered
/// `410`, run again, swept or replaced; it is resumed, and its TTL starts when it completes.
/// Listings of `Processing` or `Stuck` keys start from `idempotency_processing` ([the key
/// table](crate#the-key-table)): on PostgreSQL a processing row inserted by hand must be
/// added there too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyStatus {
    /// The response is stored and replayed.
    Completed,
    /// An execution holds the key.
    Processing,
    /// An execution held the key and its lease ran out: nobody is running it. The next retry
    /// (or the reconciler) takes it over; an operator may act on it.
    Stuck,
    /// The stored response has expired.
    Expired,
}

impl KeyStatus {
    /// Every status, in this order: `completed`, `processing`, `stuck`, `expired`.
    pub const ALL: [Self; 4] = [
        Self::Completed,
        Self::Processing,
        Self::Stuck,
        Self::Expired,
    ];

    /// `completed`, `processing`, `stuck` or `expired`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Processing => "processing",
            Self::Stuck => "stuck",
            Self::Expired => "expired",
        }
    }

    /// The `status` column of a row in this state.
    ///
    /// ```
    /// use idem_store::{KeyStatus, StoredStatus};
    ///
    /// assert_eq!(KeyStatus::Expired.stored(), StoredStatus::Completed);
    /// assert_eq!(KeyStatus::Stuck.stored(), StoredStatus::Processing);
    /// ```
    #[must_use]
    pub fn stored(self) -> StoredStatus {
        match self {
            Self::Completed | Self::Expired => StoredStatus::Completed,
            Self::Processing | Self::Stuck => StoredStatus::Processing,
        }
    }

    /// Whether a key in this state is final: completed or expired.
    #[must_use]
    pub fn is_final(self) -> bool {
        self.stored().is_final()
    }

    /// The state at `now_ms` of a row with these columns: the rule of a key's life
    /// ([`KeyStatus`]), written once. Every statement that filters, counts, sweeps or replaces
    /// keys by state states the same conditions; the conformance kit pins each branch.
    ///
    /// ```
    /// use idem_store::{KeyStatus, StoredStatus};
    ///
    /// // Expired a while ago, lease live: still processing.
    /// assert_eq!(KeyStatus::at(StoredStatus::Processing, 10, Some(100), 50), KeyStatus::Processing);
    /// // Lease run out: stuck, not expired.
    /// assert_eq!(KeyStatus::at(StoredStatus::Processing, 10, Some(20), 50), KeyStatus::Stuck);
    /// // Only a completed row expires.
    /// assert_eq!(KeyStatus::at(StoredStatus::Completed, 10, None, 50), KeyStatus::Expired);
    /// ```
    #[must_use]
    pub fn at(
        stored: StoredStatus,
        expires_at_ms: i64,
        locked_until_ms: Option<i64>,
        now_ms: i64,
    ) -> Self {
        match stored {
            StoredStatus::Completed if expires_at_ms <= now_ms => Self::Expired,
            StoredStatus::Completed => Self::Completed,
            StoredStatus::Processing => match locked_until_ms {
                Some(until) if until <= now_ms => Self::Stuck,
                _ => Self::Processing,
            },
        }
    }
}

impl fmt::Display for KeyStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One key row, as tools read it ([`crate::KeyTable::get`], [`crate::KeyTable::list`]); its
/// columns are those of [the key table](crate#the-key-table). On SQLite, a timestamp an
/// operator wrote by hand as a plain number is read as Unix seconds.
///
/// A row whose fingerprint or response is sealed
/// ([sealed at rest](crate#storage-sealed-at-rest)) is read with the table's keyring
/// ([`crate::KeyTable::with_keyring`]): opened when the keyring has every key they are
/// sealed under, else as sealed, never an error ([`KeyRow::sealed`] says which). A sealed
/// value that fails its check under a key the keyring has is
/// [`crate::StoreError::Corrupt`], naming the key and the column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRow {
    /// `global`, `tenant:<id>` or `user:<id>`.
    pub scope: String,
    /// The operation id, `<name>:v<version>`.
    pub operation: String,
    /// The client's key.
    pub key: String,
    /// The state of the key at the `now_ms` of the read.
    pub status: KeyStatus,
    /// The fingerprint of the request that stored the row; sealed and not opened
    /// ([`KeyRow::sealed`]), the column as stored.
    pub fingerprint: Vec<u8>,
    /// The stored response: `Some` for completed (and expired) rows. Sealed and not opened
    /// ([`KeyRow::sealed`]), its status only: no headers, an empty body.
    pub response: Option<StoredResponse>,
    /// Whether the fingerprint or the response is sealed, under which key (the response's,
    /// if it is sealed, else the fingerprint's), and whether the table's keyring opened
    /// both; `None`: both are clear.
    pub sealed: Option<Sealing>,
    /// When the execution that stored the row began.
    pub created_at_ms: i64,
    /// When its response was stored.
    pub completed_at_ms: Option<i64>,
    /// After this, a completed key is expired ([`KeyStatus::at`]).
    pub expires_at_ms: i64,
    /// Staged mode: the lease of the running attempt; past it, the key is stuck.
    pub locked_until_ms: Option<i64>,
    /// Staged mode: the fencing number (0 for atomic-mode rows).
    pub attempt: i64,
    /// Staged mode: the reservation, one life of the key's row for one request, from which
    /// each step's provider key is derived (`idem_runtime::staged::provider_key`); `None` for
    /// atomic-mode rows, `Some(0)` for staged rows reserved before idem had reservations.
    pub reservation: Option<i64>,
    /// Staged mode: the last step journaled.
    pub recovery_point: Option<String>,
}

impl KeyRow {
    /// The row's identity.
    #[must_use]
    pub fn key_ref(&self) -> KeyRef<'_> {
        KeyRef {
            scope: &self.scope,
            operation: &self.operation,
            key: &self.key,
        }
    }
}
