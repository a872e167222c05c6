//! What a log line says of a request: its request id, cut, its key as a hash, its scope
//! as a kind.

use std::fmt;

use sha2::{Digest as _, Sha256};

use super::REQUEST_ID_HEADER;

/// The longest request id recorded; longer ones are cut.
const REQUEST_ID_MAX: usize = 128;

/// A request id the application chose, as a request extension: the span's `request_id`,
/// ahead of the [`REQUEST_ID_HEADER`] header. Insert it in a middleware before the handler.
///
/// ```
/// use idem_runtime::telemetry::RequestId;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(RequestId::new("req-7f3a"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(String);

impl RequestId {
    /// A request id (at most 128 characters are recorded).
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    /// The id.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The request id of a request: its [`RequestId`] extension, or else its
/// [`REQUEST_ID_HEADER`] header when that is visible ASCII. Allocates only when there is one.
pub(crate) fn request_id_of(parts: &http::request::Parts) -> Option<String> {
    if let Some(id) = parts.extensions.get::<RequestId>() {
        return Some(id.0.clone());
    }
    let header = parts.headers.get(REQUEST_ID_HEADER)?;
    header.to_str().ok().map(str::to_owned)
}

/// The hash that stands for a key in logs: see [`key_hash`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyHash([u8; 12]);

impl KeyHash {
    /// The 12 lower-case hexadecimal digits.
    #[must_use]
    pub fn as_str(&self) -> &str {
        // Only ASCII digits are ever written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl fmt::Display for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for KeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What logs write for a key: the first 12 hexadecimal digits (48 bits) of SHA-256 over
/// `scope` (the stored form: `global`, `tenant:<id>`, `user:<id>`), a line feed, and `key`
/// (unquoted, as the key table stores it). A key never has a line feed, so no two pairs
/// share their input. See [the module](crate::telemetry) for the shell equivalent.
#[must_use]
pub fn key_hash(scope: &str, key: &str) -> KeyHash {
    let digest = Sha256::new()
        .chain_update(scope.as_bytes())
        .chain_update(b"\n")
        .chain_update(key.as_bytes())
        .finalize();
    let mut out = [0; 12];
    for (pair, byte) in out.chunks_exact_mut(2).zip(digest.iter()) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xf)];
    }
    KeyHash(out)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A key's [`key_hash`], computed when it is written: a span no subscriber records never
/// hashes.
pub(super) struct LazyKeyHash<'a> {
    pub(super) scope: &'a str,
    pub(super) key: &'a str,
}

impl fmt::Display for LazyKeyHash<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(key_hash(self.scope, self.key).as_str())
    }
}

/// `id`'s first [`REQUEST_ID_MAX`] characters.
pub(super) fn cut_request_id(id: &str) -> &str {
    if id.len() <= REQUEST_ID_MAX {
        return id; // no more characters than bytes
    }
    let end = id
        .char_indices()
        .nth(REQUEST_ID_MAX)
        .map_or(id.len(), |(at, _)| at);
    &id[..end]
}

/// The kind of a scope's stored form, never its owner.
pub(super) fn scope_kind(scope: &str) -> &'static str {
    match scope.split(':').next() {
        Some("global") => "global",
        Some("tenant") => "tenant",
        Some("user") => "user",
        _ => "other",
    }
}
