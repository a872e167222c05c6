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
//! column holds the bare prefix naming the key: a clear body may start with anything, the
//! headers say whether it is sealed, and a replay opens one value, not two.
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

/// The storage keys: the first seals, every one opens. Set with
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

/// Why a sealed value did not open. Nothing is changed on either: the row stays as it is.
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
}

impl SealError {
    /// The key the value names.
    #[must_use]
    pub fn key(&self) -> &str {
        match self {
            Self::UnknownKey(key) | Self::Tampered(key) => key,
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
/// # Errors
/// As [`open`]; a sealed response whose headers column is not the bare head, or whose body
/// is missing or too short, is [`SealError::Tampered`].
pub(crate) fn open_response(
    ring: Option<&Keyring>,
    key: KeyRef<'_>,
    headers: Option<String>,
    body: Option<Vec<u8>>,
) -> Result<(Option<String>, Option<Vec<u8>>), SealError> {
    let Some(head) = headers.as_deref().and_then(|h| Sealed::split(h.as_bytes())) else {
        return Ok((headers, body));
    };
    let tampered = || SealError::Tampered(head.0.key.to_owned());
    let Some(body) = body.filter(|_| head.1.is_empty()) else {
        return Err(match ring {
            Some(ring) if ring.has(head.0.key) => tampered(),
            _ => SealError::UnknownKey(head.0.key.to_owned()),
        });
    };
    let mut both = open(ring, Place::key(Column::Response, key), body)?;
    let (len, rest) = both.split_first_chunk::<4>().ok_or_else(tampered)?;
    let len = usize::try_from(u32::from_be_bytes(*len)).map_err(|_| tampered())?;
    let headers = rest.get(..len).ok_or_else(tampered)?;
    let headers = String::from_utf8(headers.to_vec()).map_err(|_| tampered())?;
    both.drain(..4 + len);
    Ok((Some(headers), Some(both)))
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
        // Clear: as it is, whatever the body starts with.
        let clear = open_response(
            None,
            KEY,
            Some("[]".into()),
            Some(b"idem-sealed:v1:k9:".to_vec()),
        );
        assert_eq!(
            clear.unwrap().1.as_deref(),
            Some(&b"idem-sealed:v1:k9:"[..])
        );
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
