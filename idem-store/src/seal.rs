//! Storage sealed at rest: the [`Keyring`] and the sealed form of a column.
//!
//! With a keyring, every column that holds what a client sent or was answered is written
//! sealed: a key's fingerprint, field digests, stored request, journal, response headers and
//! body, an outbox message's payload, an inbox event's body. What stays clear is what the
//! operator's tool searches and acts on: scope, operation, key, status, times, attempts.
//!
//! **The cipher** is XChaCha20-Poly1305 (RustCrypto's `chacha20poly1305`) with a random
//! 24-byte nonce per value, under the keyring's first key. **The associated data** binds each
//! value to its column and its row (the key's scope, operation and key; an outbox message's
//! dedup id and topic; an inbox event's source and id), so a value copied onto another row,
//! or into another column, fails to open.
//!
//! **A sealed value describes itself**: `idem-sealed:v1:<key id>:` and then the nonce and the
//! ciphertext with its tag, raw in a binary column, base64 in a text column. A value without
//! that prefix is clear: a table written before the keyring was set stays readable, and
//! [`Sealed::key_of`] tells which key sealed a value without any key. No JSON text starts
//! with the prefix, and a clear fingerprint is 32 bytes, shorter than any sealed one. A
//! response's headers and body are sealed as one value, in the body column, and the headers
//! column holds the bare prefix naming the key, so a replay opens one value, not two. A
//! value that starts with the prefix is sealed whatever its neighbour says: a response
//! whose body or headers start with it must be sealed throughout, or it is refused
//! ([`open_response`]); the prefix and the column are part of what the tag authenticates.
//!
//! **Rotation.** Values are sealed under the first key and opened under whichever key sealed
//! them; `KeyTable::reseal`, `Outbox::reseal` and `Inbox::reseal` rewrite them under the
//! first. A value sealed under a key the keyring lacks is a [`SealError::UnknownKey`]: the
//! runtime answers `503` and changes nothing.

use std::borrow::Cow;
use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chacha20poly1305::aead::{AeadInOut, Generate, KeyInit};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use zeroize::Zeroizing;

use crate::key::KeyRef;

/// What every sealed value starts with, then the key id and `:`.
const PREFIX: &str = "idem-sealed:v1:";
/// The nonce's length (XChaCha20).
const NONCE: usize = 24;
/// The tag's length (Poly1305).
const TAG: usize = 16;
/// The longest key id.
const MAX_ID: usize = 32;

/// The storage keys: the first seals, every one opens (so a key after the first only opens:
/// how a new key is rolled out before it seals, in two phases). Set with
/// `idem_runtime::Config::storage_keys`; read from the environment by the examples and the
/// operator's tool as `IDEM_STORAGE_KEYS` ([`Keyring::parse`]).
///
/// Its `Debug` shows the key ids, never a key.
#[derive(Clone)]
pub struct Keyring {
    keys: Vec<(String, XChaCha20Poly1305)>,
}

/// What [`Keyring::parse`] and [`Keyring::new`] refuse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyringError {
    /// No key at all.
    #[error("no storage key: expected ID:BASE64 entries separated by commas")]
    Empty,
    /// An entry that is not `ID:BASE64`.
    #[error("storage key entry {0}: expected ID:BASE64")]
    Entry(usize),
    /// Entry number `n` (from 1) has an id outside `[A-Za-z0-9_-]{1,32}`: not named, since
    /// an entry written key first would be named by its key.
    #[error(
        "storage key entry {0}: expected an id of 1 to 32 of A-Z, a-z, 0-9, `_` and `-`, then `:` and the key"
    )]
    Id(usize),
    /// The key of this id is not 32 bytes of standard base64.
    #[error("storage key `{0}`: expected 32 bytes in standard base64")]
    Key(String),
    /// Two keys with one id.
    #[error("storage key id `{0}` is given twice")]
    Duplicate(String),
}

impl Keyring {
    /// A keyring of `keys`, the first sealing.
    ///
    /// # Errors
    /// No key, a key id outside `[A-Za-z0-9_-]{1,32}`, or an id given twice.
    pub fn new<I, S>(keys: I) -> Result<Self, KeyringError>
    where
        I: IntoIterator<Item = (S, [u8; 32])>,
        S: Into<String>,
    {
        let mut ring = Vec::new();
        for (i, (id, secret)) in keys.into_iter().enumerate() {
            let (id, secret) = (id.into(), Zeroizing::new(secret));
            if !is_id(&id) {
                return Err(KeyringError::Id(i + 1));
            }
            if ring.iter().any(|(have, _)| *have == id) {
                return Err(KeyringError::Duplicate(id));
            }
            let cipher = XChaCha20Poly1305::new(&Key::from(*secret));
            ring.push((id, cipher));
        }
        if ring.is_empty() {
            return Err(KeyringError::Empty);
        }
        Ok(Self { keys: ring })
    }

    /// The keyring written as `IDEM_STORAGE_KEYS` holds it: comma-separated `ID:BASE64`
    /// entries (32 bytes each, standard base64), the first sealing. Spaces around entries are
    /// ignored.
    ///
    /// ```
    /// use idem_store::Keyring;
    ///
    /// let a = "k2:".to_owned() + &"A".repeat(43) + "=";
    /// let b = "k1:".to_owned() + &"B".repeat(42) + "A=";
    /// let ring = Keyring::parse(&format!("{a}, {b}")).unwrap();
    /// assert_eq!(ring.current(), "k2");
    /// assert_eq!(ring.ids().collect::<Vec<_>>(), ["k2", "k1"]);
    /// assert!(Keyring::parse("k1:c2hvcnQ=").is_err());
    /// ```
    ///
    /// # Errors
    /// [`KeyringError`]: what is wrong, never a key.
    pub fn parse(text: &str) -> Result<Self, KeyringError> {
        let mut keys = Vec::new();
        for (i, entry) in text.split(',').map(str::trim).enumerate() {
            if entry.is_empty() && text.trim().is_empty() {
                return Err(KeyringError::Empty);
            }
            let (id, key) = entry.split_once(':').ok_or(KeyringError::Entry(i + 1))?;
            let id = id.trim();
            if !is_id(id) {
                return Err(KeyringError::Id(i + 1));
            }
            let bytes = Zeroizing::new(
                BASE64
                    .decode(key.trim())
                    .map_err(|_| KeyringError::Key(id.to_owned()))?,
            );
            let secret: [u8; 32] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| KeyringError::Key(id.to_owned()))?;
            keys.push((id.to_owned(), secret));
        }
        Self::new(keys)
    }

    /// A new random key, written as one `IDEM_STORAGE_KEYS` entry: `ID:BASE64`.
    #[must_use]
    pub fn generate_entry(id: &str) -> String {
        let key = Zeroizing::new(<[u8; 32]>::from(Key::generate()));
        format!("{id}:{}", BASE64.encode(key.as_slice()))
    }

    /// The id of the key that seals: the first.
    #[must_use]
    pub fn current(&self) -> &str {
        &self.keys[0].0
    }

    /// Every key id, the sealing one first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.keys.iter().map(|(id, _)| id.as_str())
    }

    /// Whether the keyring has the key `id`.
    #[must_use]
    pub fn has(&self, id: &str) -> bool {
        self.keys.iter().any(|(have, _)| have == id)
    }

    /// `plain` sealed under the first key for `place`, in a binary column's form.
    pub(crate) fn seal(&self, place: Place<'_>, plain: &[u8]) -> Vec<u8> {
        let (id, cipher) = &self.keys[0];
        let nonce = XNonce::generate();
        let mut out = Vec::with_capacity(PREFIX.len() + id.len() + 1 + NONCE + plain.len() + TAG);
        out.extend_from_slice(PREFIX.as_bytes());
        out.extend_from_slice(id.as_bytes());
        out.push(b':');
        out.extend_from_slice(&nonce);
        let start = out.len();
        out.extend_from_slice(plain);
        let tag = cipher
            .encrypt_inout_detached(&nonce, &place.aad(), (&mut out[start..]).into())
            .expect("a value of a row is far below XChaCha20's limit");
        out.extend_from_slice(&tag);
        out
    }

    /// `plain` sealed under the first key for `place`, in a text column's form.
    pub(crate) fn seal_text(&self, place: Place<'_>, plain: &str) -> String {
        let sealed = self.seal(place, plain.as_bytes());
        let head = PREFIX.len() + self.current().len() + 1;
        let mut text = String::from_utf8_lossy(&sealed[..head]).into_owned();
        BASE64.encode_string(&sealed[head..], &mut text);
        text
    }

    /// Opens the sealed value `sealed` (a binary column's form) of `place`.
    /// Opens, in place, the sealed value `data` of `place` (a binary column's form, or a
    /// text column's decoded): its plaintext, in the same allocation.
    fn open(&self, place: Place<'_>, mut data: Vec<u8>) -> Result<Vec<u8>, SealError> {
        let Some((head, rest)) = Sealed::split(&data) else {
            return Ok(data);
        };
        let Some((_, cipher)) = self.keys.iter().find(|(id, _)| id == head.key) else {
            return Err(SealError::UnknownKey(head.key.to_owned()));
        };
        let key = head.key.to_owned();
        let tampered = || SealError::Tampered(key.clone());
        let start = data.len() - rest.len();
        if rest.len() < NONCE + TAG {
            return Err(tampered());
        }
        let tag_at = data.len() - TAG;
        let nonce = XNonce::try_from(&data[start..start + NONCE]).map_err(|_| tampered())?;
        let tag = chacha20poly1305::Tag::try_from(&data[tag_at..]).map_err(|_| tampered())?;
        let ciphertext = &mut data[start + NONCE..tag_at];
        cipher
            .decrypt_inout_detached(&nonce, &place.aad(), ciphertext.into(), &tag)
            .map_err(|_| tampered())?;
        data.truncate(tag_at);
        data.drain(..start + NONCE);
        Ok(data)
    }
}

/// Whether `id` can be a key id: `[A-Za-z0-9_-]{1,32}`.
fn is_id(id: &str) -> bool {
    (1..=MAX_ID).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("ids", &self.ids().collect::<Vec<_>>())
            .finish()
    }
}

/// Why a stored value did not open: a sealed one, or a clear one that is not what idem
/// writes. Nothing is changed on either: the row stays as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// Sealed under a key the keyring lacks (or there is no keyring).
    #[error("sealed under storage key `{0}`, which is not among the storage keys given")]
    UnknownKey(String),
    /// The key is there and the value does not open under it: changed, cut, or moved from
    /// another row or column.
    #[error(
        "a value sealed under storage key `{0}` fails its check: changed, or moved from another row"
    )]
    Tampered(String),
    /// A clear value of this column that does not read as what idem writes there (headers
    /// that are not JSON `[name, value]` pairs, a status out of range, a marker of sealing
    /// that names no key): edited by hand, never answered as it is.
    #[error("the stored `{0}` is not what idem writes there: edited outside idem")]
    Unreadable(&'static str),
}

impl SealError {
    /// The storage key the value names; `None` for a clear value
    /// ([`SealError::Unreadable`]).
    #[must_use]
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::UnknownKey(key) | Self::Tampered(key) => Some(key),
            Self::Unreadable(_) => None,
        }
    }

    /// The `SealError` a primitive's [`sqlx::Error`] carries ([`sqlx::Error::Decode`]), if
    /// that is what it is.
    #[must_use]
    pub fn of(error: &sqlx::Error) -> Option<&Self> {
        match error {
            sqlx::Error::Decode(source) => source.downcast_ref(),
            _ => None,
        }
    }
}

impl From<SealError> for sqlx::Error {
    fn from(error: SealError) -> Self {
        Self::Decode(Box::new(error))
    }
}

/// A sealed value's head, read without a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sealed<'a> {
    /// The id of the key that sealed it.
    pub key: &'a str,
}

impl<'a> Sealed<'a> {
    /// The head of `stored` and the rest, if `stored` is sealed.
    fn split(stored: &'a [u8]) -> Option<(Self, &'a [u8])> {
        let rest = stored.strip_prefix(PREFIX.as_bytes())?;
        let end = rest.iter().take(MAX_ID + 1).position(|&b| b == b':')?;
        let key = std::str::from_utf8(&rest[..end]).ok()?;
        Some((Self { key }, &rest[end + 1..]))
    }

    /// Which key sealed the column value `stored` (binary or text form); `None` when it is
    /// clear.
    ///
    /// ```
    /// use idem_store::Sealed;
    ///
    /// assert_eq!(Sealed::key_of(b"idem-sealed:v1:k1:AAAA"), Some("k1"));
    /// assert_eq!(Sealed::key_of(br#"{"amount":1}"#), None);
    /// ```
    #[must_use]
    pub fn key_of(stored: &'a [u8]) -> Option<&'a str> {
        Self::split(stored).map(|(head, _)| head.key)
    }
}

/// How a row's sealed values were read: which storage key sealed them, and whether the
/// reader had it ([`crate::KeyRow::sealed`], [`crate::Journal::sealed`],
/// [`crate::OutboxRow::sealed`], [`crate::InboxEvent::sealed`]).
///
/// ```
/// # use idem_store::{KeyRow, Sealing};
/// # fn show(row: &KeyRow) {
/// match &row.sealed {
///     None => println!("clear"),
///     Some(Sealing { key, opened: true }) => println!("sealed under {key}, opened"),
///     Some(Sealing { key, opened: false }) => println!("sealed (key {key})"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealing {
    /// The id of the storage key that sealed the value.
    pub key: String,
    /// Whether it was opened: `false` when the reader was not given that key, and the value
    /// is left out.
    pub opened: bool,
}

/// A text column value read for a tool: opened where `ring` has its key, and otherwise
/// `None` with the [`Sealing`] that says so. A value sealed under a key `ring` has that fails
/// its check is an error.
pub(crate) fn read_text(
    ring: Option<&Keyring>,
    place: Place<'_>,
    stored: String,
) -> Result<(Option<String>, Option<Sealing>), SealError> {
    let Some(key) = Sealed::key_of(stored.as_bytes()).map(str::to_owned) else {
        return Ok((Some(stored), None));
    };
    match open_text(ring, place, stored) {
        Ok(text) => Ok((Some(text), Some(Sealing { key, opened: true }))),
        Err(SealError::UnknownKey(_)) => Ok((None, Some(Sealing { key, opened: false }))),
        Err(error) => Err(error),
    }
}

/// How many of the newest key rows [`newest_sealed`] looks at.
const NEWEST: i64 = 64;

/// The id of the storage key that sealed one of the key table's newest rows (by
/// `expires_at`, through its index), `None` when they are all clear or there are none: what
/// a server given no storage keys checks at start, so that it does not write clear rows and
/// answer `503` for sealed ones in a fleet that seals
/// (`idem_runtime::Config::clear_beside_sealed`).
///
/// # Errors
/// Database errors (the key table missing among them: call it after the migrations).
pub async fn newest_sealed<DB: crate::Backend>(
    pool: &sqlx::Pool<DB>,
) -> Result<Option<String>, sqlx::Error> {
    let sql = if DB::DIALECT.positional {
        "SELECT fingerprint FROM idempotency_keys ORDER BY expires_at DESC LIMIT ?"
    } else {
        "SELECT fingerprint FROM idempotency_keys ORDER BY expires_at DESC LIMIT $1"
    };
    let mut conn = pool.acquire().await?;
    let rows = DB::fetch_all(&mut conn, sql, &[crate::Arg::Int(NEWEST)]).await?;
    for row in &rows {
        if let Some(key) = Sealed::key_of(&DB::bytes(row, 0)?) {
            return Ok(Some(key.to_owned()));
        }
    }
    Ok(None)
}

/// The column a sealed value is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    Fingerprint,
    FieldDigests,
    Request,
    Journal,
    /// A response's headers and body, sealed together ([`open_response`]).
    Response,
    OutboxPayload,
    InboxBody,
}

impl Column {
    fn name(self) -> &'static str {
        match self {
            Self::Fingerprint => "fingerprint",
            Self::FieldDigests => "field_digests",
            Self::Request => "request",
            Self::Journal => "journal",
            Self::Response => "response",
            Self::OutboxPayload => "outbox.payload",
            Self::InboxBody => "inbox.body",
        }
    }
}

/// Where a sealed value lives: its column and its row's identity, the associated data.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'a> {
    column: Column,
    row: [&'a str; 3],
}

impl<'a> Place<'a> {
    /// `column` of `key`'s row.
    pub(crate) fn key(column: Column, key: KeyRef<'a>) -> Self {
        Self {
            column,
            row: [key.scope, key.operation, key.key],
        }
    }

    /// `column` of the row named by `parts` (an outbox message's dedup id; an inbox event's
    /// source and id).
    pub(crate) fn other(column: Column, parts: [&'a str; 3]) -> Self {
        Self { column, row: parts }
    }

    /// The associated data: `idem/v1`, the column and the row's parts, each prefixed by its
    /// length, so no two places share it.
    fn aad(&self) -> Vec<u8> {
        let mut aad = Vec::with_capacity(64);
        for part in [PREFIX, self.column.name()].into_iter().chain(self.row) {
            aad.extend_from_slice(&(part.len() as u64).to_be_bytes());
            aad.extend_from_slice(part.as_bytes());
        }
        aad
    }
}

/// `plain` as written to `place`: sealed when there is a keyring.
pub(crate) fn seal<'v>(ring: Option<&Keyring>, place: Place<'_>, plain: &'v [u8]) -> Cow<'v, [u8]> {
    match ring {
        Some(ring) => Cow::Owned(ring.seal(place, plain)),
        None => Cow::Borrowed(plain),
    }
}

/// Text `plain` as written to `place`: sealed when there is a keyring.
pub(crate) fn seal_text<'v>(
    ring: Option<&Keyring>,
    place: Place<'_>,
    plain: &'v str,
) -> Cow<'v, str> {
    match ring {
        Some(ring) => Cow::Owned(ring.seal_text(place, plain)),
        None => Cow::Borrowed(plain),
    }
}

/// The binary column value `stored` of `place`, opened if it is sealed.
///
/// # Errors
/// [`SealError`]: sealed under a key `ring` lacks, or not opening under its key.
pub(crate) fn open(
    ring: Option<&Keyring>,
    place: Place<'_>,
    stored: Vec<u8>,
) -> Result<Vec<u8>, SealError> {
    match (Sealed::key_of(&stored), ring) {
        (None, _) => Ok(stored),
        (Some(_), Some(ring)) => ring.open(place, stored),
        (Some(key), None) => Err(SealError::UnknownKey(key.to_owned())),
    }
}

/// The text column value `stored` of `place`, opened if it is sealed.
///
/// # Errors
/// As [`open`]; a sealed value that is not base64, or opens to text that is not UTF-8, is
/// [`SealError::Tampered`].
pub(crate) fn open_text(
    ring: Option<&Keyring>,
    place: Place<'_>,
    stored: String,
) -> Result<String, SealError> {
    let Some((head, body)) = Sealed::split(stored.as_bytes()) else {
        return Ok(stored);
    };
    let Some(ring) = ring else {
        return Err(SealError::UnknownKey(head.key.to_owned()));
    };
    let tampered = || SealError::Tampered(head.key.to_owned());
    // The head as it is, the rest decoded: the binary column's form.
    let mut data = stored.as_bytes()[..stored.len() - body.len()].to_vec();
    BASE64.decode_vec(body, &mut data).map_err(|_| tampered())?;
    let plain = ring.open(place, data)?;
    String::from_utf8(plain).map_err(|_| tampered())
}

/// A response's headers and body as stored, opened. Sealed, the two are one value in the
/// body column (the headers' length, 4 bytes big-endian, the headers, the body), and the
/// headers column holds only the head naming the key: one open per replay, not two.
///
/// **Whether a response is sealed is read from both columns, and neither alone can make it
/// clear**: a body or headers value that starts with the sealed prefix makes the response
/// sealed, and then the headers column must be exactly the head naming the body's key. The
/// headers column is not authenticated, so a marker changed by a byte (`v2`, a `;` for the
/// `:`, emptied, NULL) fails here instead of turning the sealed body into a clear one. (So a
/// clear body that itself starts with the prefix reads as unreadable, never as a response.)
///
/// # Errors
/// As [`open`]; a sealed response whose headers column is not the bare head of its body's
/// key, or whose body is missing or too short, is [`SealError::Tampered`] (or
/// [`SealError::UnknownKey`] for a reader without that key, which cannot tell).
pub(crate) fn open_response(
    ring: Option<&Keyring>,
    key: KeyRef<'_>,
    headers: Option<String>,
    body: Option<Vec<u8>>,
) -> Result<(Option<String>, Option<Vec<u8>>), SealError> {
    if !response_agrees(headers.as_deref(), body.as_deref()) {
        // The key the row names: the body's, which is what would be opened, else the headers'.
        let named = (body.as_deref().and_then(Sealed::key_of)).or_else(|| {
            headers
                .as_deref()
                .and_then(|h| Sealed::key_of(h.as_bytes()))
        });
        return Err(match (named, ring) {
            (None, _) => SealError::Unreadable("response_headers"),
            (Some(named), Some(ring)) if ring.has(named) => SealError::Tampered(named.to_owned()),
            (Some(named), _) => SealError::UnknownKey(named.to_owned()),
        });
    }
    let sealed_by = headers
        .as_deref()
        .and_then(|h| Sealed::key_of(h.as_bytes()));
    let Some(named) = sealed_by.map(str::to_owned) else {
        return Ok((headers, body));
    };
    // (They agree: the body is there, sealed under that key.)
    let body = body.ok_or_else(|| SealError::Tampered(named.clone()))?;
    let tampered = || SealError::Tampered(named.clone());
    let mut both = open(ring, Place::key(Column::Response, key), body)?;
    let (len, rest) = both.split_first_chunk::<4>().ok_or_else(tampered)?;
    let len = usize::try_from(u32::from_be_bytes(*len)).map_err(|_| tampered())?;
    let headers = rest.get(..len).ok_or_else(tampered)?;
    let headers = String::from_utf8(headers.to_vec()).map_err(|_| tampered())?;
    both.drain(..4 + len);
    Ok((Some(headers), Some(both)))
}

/// Whether a response's two columns agree on whether it is sealed, as [`open_response`]
/// reads them: both clear, or the headers the bare head naming the sealed body's key.
pub(crate) fn response_agrees(headers: Option<&str>, body: Option<&[u8]>) -> bool {
    let is_sealed = |value: &[u8]| value.starts_with(PREFIX.as_bytes());
    match (headers, body.and_then(Sealed::key_of)) {
        (headers, None) => {
            !body.is_some_and(is_sealed) && !headers.is_some_and(|h| is_sealed(h.as_bytes()))
        }
        (Some(headers), Some(key)) => Sealed::split(headers.as_bytes())
            .is_some_and(|(head, rest)| head.key == key && rest.is_empty()),
        (None, Some(_)) => false,
    }
}

/// [`open_response`]'s other half: a response's headers and body as written.
pub(crate) fn seal_response<'v>(
    ring: Option<&Keyring>,
    key: KeyRef<'_>,
    headers: &'v str,
    body: &'v [u8],
) -> (Cow<'v, str>, Cow<'v, [u8]>) {
    let Some(ring) = ring else {
        return (Cow::Borrowed(headers), Cow::Borrowed(body));
    };
    let len = u32::try_from(headers.len())
        .unwrap_or(u32::MAX)
        .to_be_bytes();
    let mut both = Vec::with_capacity(4 + headers.len() + body.len());
    both.extend_from_slice(&len);
    both.extend_from_slice(headers.as_bytes());
    both.extend_from_slice(body);
    let head = format!("{PREFIX}{}:", ring.current());
    (
        Cow::Owned(head),
        Cow::Owned(ring.seal(Place::key(Column::Response, key), &both)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(ids: &[&str]) -> Keyring {
        Keyring::new(
            ids.iter()
                .enumerate()
                .map(|(i, id)| (*id, [i as u8 + 1; 32])),
        )
        .unwrap()
    }

    const KEY: KeyRef<'static> = KeyRef {
        scope: "global",
        operation: "op:v1",
        key: "k",
    };

    #[test]
    fn seals_and_opens_by_place() {
        let ring = ring(&["k2", "k1"]);
        let place = Place::key(Column::Request, KEY);
        let sealed = ring.seal_text(place, r#"{"card":"4242"}"#);
        assert!(sealed.starts_with("idem-sealed:v1:k2:"), "{sealed}");
        assert!(!sealed.contains("4242"));
        assert_eq!(
            open_text(Some(&ring), place, sealed.clone()).unwrap(),
            r#"{"card":"4242"}"#
        );
        // Another column, another row: refused.
        let journal = Place::key(Column::Journal, KEY);
        assert_eq!(
            open_text(Some(&ring), journal, sealed.clone()),
            Err(SealError::Tampered("k2".into()))
        );
        let other = Place::key(Column::Request, KeyRef { key: "k'", ..KEY });
        assert!(open_text(Some(&ring), other, sealed.clone()).is_err());
        // No keyring, or not that key.
        assert_eq!(
            open_text(None, place, sealed.clone()),
            Err(SealError::UnknownKey("k2".into()))
        );
        assert_eq!(
            open_text(Some(&self::ring(&["k1"])), place, sealed),
            Err(SealError::UnknownKey("k2".into()))
        );
        // Clear values read as they are.
        assert_eq!(open_text(Some(&ring), place, "{}".into()).unwrap(), "{}");
    }

    #[test]
    fn old_keys_open_and_every_flipped_byte_is_refused() {
        let old = ring(&["k1"]);
        let place = Place::key(Column::Response, KEY);
        let sealed = old.seal(place, b"body");
        let both = ring(&["k2", "k1"]);
        // The ring's second key is k1 here only by id: its bytes differ.
        assert!(matches!(
            open(Some(&both), place, sealed.clone()),
            Err(SealError::Tampered(_))
        ));
        let both = Keyring::new([("k2", [9; 32]), ("k1", [1; 32])]).unwrap();
        assert_eq!(open(Some(&both), place, sealed.clone()).unwrap(), b"body");
        for i in PREFIX.len() + 3..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert!(open(Some(&both), place, bad).is_err(), "byte {i}");
        }
        let mut cut = sealed.clone();
        cut.truncate(PREFIX.len() + 10);
        assert!(open(Some(&both), place, cut).is_err());
    }

    #[test]
    fn a_response_is_one_value() {
        let ring = ring(&["k1"]);
        let (headers, body) = seal_response(Some(&ring), KEY, r#"[["location","/a"]]"#, b"{}");
        assert_eq!(headers, "idem-sealed:v1:k1:");
        let opened = open_response(
            Some(&ring),
            KEY,
            Some(headers.to_string()),
            Some(body.to_vec()),
        );
        let opened = opened.unwrap();
        assert_eq!(opened.0.as_deref(), Some(r#"[["location","/a"]]"#));
        assert_eq!(opened.1.as_deref(), Some(&b"{}"[..]));
        // Without the keys, or without the body, or on another key's row: not opened.
        let head = Some(headers.to_string());
        let unknown = open_response(None, KEY, head.clone(), Some(body.to_vec()));
        assert_eq!(unknown, Err(SealError::UnknownKey("k1".into())));
        let missing = open_response(Some(&ring), KEY, head.clone(), None);
        assert_eq!(missing, Err(SealError::Tampered("k1".into())));
        let other = KeyRef {
            key: "other",
            ..KEY
        };
        assert!(open_response(Some(&ring), other, head, Some(body.to_vec())).is_err());
        // A body that starts with the prefix is sealed, whatever the headers say.
        let clear = open_response(
            None,
            KEY,
            Some("[]".into()),
            Some(b"idem-sealed:v1:k9:".to_vec()),
        );
        assert_eq!(clear, Err(SealError::UnknownKey("k9".into())));
        // Clear headers and body: as they are.
        let clear = open_response(None, KEY, Some("[]".into()), Some(b"{}".to_vec()));
        assert_eq!(clear.unwrap().1.as_deref(), Some(&b"{}"[..]));
    }

    /// The headers column is not authenticated: its marker changed by a byte, emptied or
    /// NULL, the sealed body is refused, never read as a clear one.
    #[test]
    fn a_changed_marker_never_makes_a_sealed_body_clear() {
        let ring = ring(&["k2", "k1"]);
        let (_, body) = seal_response(Some(&ring), KEY, "[]", b"{\"id\":1}");
        let markers = [
            Some("idem-sealed:v1:k2;"),
            Some("idem-sealed:v2:k2:"),
            Some("idem-sealed:v1:k1:"),
            Some("idem-sealed:v1:k2:x"),
            Some("jdem-sealed:v1:k2:"),
            Some("[]"),
            Some(""),
            None,
        ];
        for marker in markers {
            let opened = open_response(
                Some(&ring),
                KEY,
                marker.map(str::to_owned),
                Some(body.to_vec()),
            );
            assert!(
                matches!(opened, Err(SealError::Tampered(_))),
                "{marker:?}: {opened:?}"
            );
            let without = open_response(None, KEY, marker.map(str::to_owned), Some(body.to_vec()));
            assert!(without.is_err(), "{marker:?}");
        }
        // Headers that say sealed over a clear body, or a marker naming no key: refused.
        let clear_body = Some(b"{}".to_vec());
        let opened = open_response(
            Some(&ring),
            KEY,
            Some("idem-sealed:v1:k2:".into()),
            clear_body,
        );
        assert_eq!(opened, Err(SealError::Tampered("k2".into())));
        let opened = open_response(Some(&ring), KEY, Some("idem-sealed:v1:".into()), None);
        assert_eq!(opened, Err(SealError::Unreadable("response_headers")));
    }

    #[test]
    fn parse_refuses_what_is_not_a_keyring() {
        let key = BASE64.encode([7u8; 32]);
        assert!(Keyring::parse(&format!("a:{key},b:{key}")).is_ok());
        assert_eq!(Keyring::parse("").err(), Some(KeyringError::Empty));
        assert_eq!(
            Keyring::parse(&format!("a:{key},a:{key}")).err(),
            Some(KeyringError::Duplicate("a".into()))
        );
        assert_eq!(
            Keyring::parse(&format!("a b:{key}")).err(),
            Some(KeyringError::Id(1))
        );
        assert_eq!(
            Keyring::parse("a:AAAA").err(),
            Some(KeyringError::Key("a".into()))
        );
        assert_eq!(Keyring::parse(&key).err(), Some(KeyringError::Entry(1)));
        let entry = Keyring::generate_entry("fresh");
        assert_eq!(Keyring::parse(&entry).unwrap().current(), "fresh");
        assert!(!format!("{:?}", Keyring::parse(&entry).unwrap()).contains(&entry[6..]));
    }
}
