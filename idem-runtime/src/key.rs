//! The `Idempotency-Key` request header.
//!
//! The IETF httpapi draft defines the header as a structured-field *item* whose value is a
//! string: `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`. Many clients follow
//! Stripe's convention and send the key unquoted (`Idempotency-Key: 8e03978e-…`); those
//! *bare* keys are accepted unless [`KeyFormat::Strict`] is configured: a bare key is what
//! could have been the content of a structured-field string, so it has no `"` and no `\`
//! (`a\"b` is refused rather than guessed at).
//!
//! Either way a key is 1 to 8192 visible ASCII characters (`!` to `~`): no spaces, no
//! control characters. The same holds for a key taken from the request
//! (`key = header("webhook-id")`, `key = body("/id")`), once percent-encoded and joined.
//!
//! # Long keys
//!
//! The store keeps keys of up to [`MAX_LEN`] (255) characters as they are. A longer key is
//! stored as its digest: [`DIGEST_PREFIX`] (`sha256:`) followed by the 64 lowercase
//! hexadecimal digits of the SHA-256 of the whole key, 71 characters in all. The same long
//! key always has the same digest, so its retries find the key its first request stored,
//! and two long keys that differ anywhere have different ones. Every key goes through
//! [`IdempotencyKey::new`], whether it comes from the `Idempotency-Key` header, from a
//! header or body field the operation names, or from the plain function API, so the rule
//! is the same for all of them; the key an operator types into `idem keys show` is the
//! stored one (`sha256:…` for a long key).
//!
//! ```
//! use idem_runtime::IdempotencyKey;
//!
//! let long = "k".repeat(300);
//! let key = IdempotencyKey::new(long.as_str()).unwrap();
//! assert_eq!(
//!     key.as_str(),
//!     "sha256:17b16d8ef494060fefa36a6a41567b8c32d213a17e02b7eeae86158cc4495461"
//! );
//! assert_eq!(IdempotencyKey::new(long.as_str()).unwrap(), key);
//! ```
//!
//! A key of [`MAX_LEN`] characters or fewer is never digested, so `sha256:…` sent as a key
//! names the same record as the long key it is the digest of (in the same scope and
//! operation). Two different keys meet only if SHA-256 collides.
//!
//! Keys longer than [`MAX_RECEIVED_LEN`] (8192 characters, 8 KiB) are refused
//! (`400 invalid-key`): an explicit bound, whatever the server's header size limit, that
//! also holds for keys taken from a body field.

use std::borrow::Cow;
use std::fmt;

use sha2::{Digest, Sha256};

use crate::spec::{KeyPart, KeySource};

/// Name of the request header that carries the key.
pub const HEADER: &str = "idempotency-key";

/// Longest key stored as it is, in characters; a longer one is stored as its digest
/// ([`DIGEST_PREFIX`], see [the module](self#long-keys)). Every stored key is 1 to
/// `MAX_LEN` characters: the store's key columns hold 255.
pub const MAX_LEN: usize = 255;

/// Longest key accepted, in characters (8 KiB): a longer one is refused. One longer than
/// [`MAX_LEN`] is stored as its digest.
pub const MAX_RECEIVED_LEN: usize = 8192;

/// What a key longer than [`MAX_LEN`] is stored as: this prefix, then the 64 lowercase
/// hexadecimal digits of the SHA-256 of the key.
pub const DIGEST_PREFIX: &str = "sha256:";

/// `id` as idem stores it: itself up to [`MAX_LEN`] characters, else its digest
/// ([`DIGEST_PREFIX`] and the 64 lowercase hexadecimal digits of its SHA-256): the rule of
/// keys ([long keys](self#long-keys)), and of the inbox's event ids. Tools take either form
/// through it.
///
/// ```
/// use idem_runtime::key::stored;
///
/// assert_eq!(stored("order-1"), "order-1");
/// assert!(stored(&"k".repeat(300)).starts_with("sha256:"));
/// ```
#[must_use]
pub fn stored(id: &str) -> Cow<'_, str> {
    if id.len() <= MAX_LEN {
        return Cow::Borrowed(id);
    }
    let digest = Sha256::digest(id.as_bytes());
    Cow::Owned(format!("{DIGEST_PREFIX}{}", crate::hex::encode(&digest)))
}

/// Which spellings of the header are accepted: [`KeyFormat::Lenient`] (the default) or
/// [`KeyFormat::Strict`]. The generated documents describe the server's format
/// ([`crate::docs::Operations::served_by`]).
pub use crate::spec::KeyFormat;

/// A validated idempotency key.
///
/// ```
/// use idem_runtime::IdempotencyKey;
/// use idem_runtime::key::KeyFormat;
///
/// let quoted = IdempotencyKey::parse(b"\"order-42\"", KeyFormat::Strict).unwrap();
/// let bare = IdempotencyKey::parse(b"order-42", KeyFormat::Lenient).unwrap();
/// assert_eq!(quoted, bare);
/// assert_eq!(bare.as_str(), "order-42");
/// assert!(IdempotencyKey::parse(b"order-42", KeyFormat::Strict).is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Parses the raw value of one `Idempotency-Key` header.
    ///
    /// # Errors
    /// [`KeyError`] says what is wrong with the value.
    pub fn parse(raw: &[u8], format: KeyFormat) -> Result<Self, KeyError> {
        let trimmed = raw.trim_ascii();
        if trimmed.is_empty() {
            return Err(KeyError::Empty);
        }
        let key = if trimmed[0] == b'"' {
            let item: sfv::Item = sfv::Parser::new(trimmed)
                .parse_item()
                .map_err(|_| KeyError::NotStructured)?;
            // Parameters are ignored, but only those the documents' pattern describes are
            // accepted: byte sequences, dates and display strings are refused with the rest.
            if !item.params.values().all(|value| {
                matches!(
                    value,
                    sfv::BareItem::Integer(_)
                        | sfv::BareItem::Decimal(_)
                        | sfv::BareItem::String(_)
                        | sfv::BareItem::Token(_)
                        | sfv::BareItem::Boolean(_)
                )
            }) {
                return Err(KeyError::NotStructured);
            }
            item.bare_item
                .as_string()
                .ok_or(KeyError::NotStructured)?
                .as_str()
                .to_owned()
        } else if format == KeyFormat::Strict {
            return Err(KeyError::Unquoted);
        } else if trimmed.iter().any(|b| matches!(b, b'"' | b'\\')) {
            return Err(KeyError::InvalidCharacter);
        } else {
            String::from_utf8(trimmed.to_vec()).map_err(|_| KeyError::InvalidCharacter)?
        };
        Self::new(key)
    }

    /// The key of a request's headers: `None` without the header, [`KeyError::Repeated`] when
    /// it appears more than once.
    ///
    /// # Errors
    /// [`KeyError`] says what is wrong with the value.
    pub fn from_headers(
        headers: &http::HeaderMap,
        format: KeyFormat,
    ) -> Result<Option<Self>, KeyError> {
        let mut values = headers.get_all(HEADER).iter();
        match (values.next(), values.next()) {
            (None, _) => Ok(None),
            (Some(_), Some(_)) => Err(KeyError::Repeated),
            (Some(raw), None) => Self::parse(raw.as_bytes(), format).map(Some),
        }
    }

    /// Validates an already unquoted key, e.g. one given to the plain function API: the key
    /// as it is stored, the key itself when it has at most [`MAX_LEN`] characters, its
    /// digest when longer (`sha256:` and 64 hexadecimal digits, see
    /// [the module](self#long-keys)).
    ///
    /// Every key idem takes from a request goes through here.
    ///
    /// # Errors
    /// [`KeyError`] if the key is empty, longer than [`MAX_RECEIVED_LEN`] characters or has a
    /// character outside visible ASCII.
    pub fn new(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > MAX_RECEIVED_LEN {
            return Err(KeyError::TooLong);
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(KeyError::InvalidCharacter);
        }
        Ok(Self(match stored(&key) {
            Cow::Borrowed(_) => key,
            Cow::Owned(digest) => digest,
        }))
    }

    /// The key as stored, without quotes: as sent, or its digest when it is longer than
    /// [`MAX_LEN`] characters.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("IdempotencyKey").field(&self.0).finish()
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why an `Idempotency-Key` value was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The header is present but empty (or the string inside it is).
    #[error("the key is empty")]
    Empty,
    /// Longer than [`MAX_RECEIVED_LEN`] (8192) characters.
    #[error("the key is longer than 8192 characters")]
    TooLong,
    /// A space, control character or non-ASCII character; in a bare key, a `"` or `\`.
    #[error(
        "the key may only contain visible ASCII characters (no spaces); unquoted, no `\"` or `\\`"
    )]
    InvalidCharacter,
    /// Starts with a quote but is not a valid structured-field string item.
    #[error("the key is not a valid structured-field string, e.g. \"8e03978e-40d5\"")]
    NotStructured,
    /// A bare key where [`KeyFormat::Strict`] requires a quoted string.
    #[error("the key must be a quoted structured-field string, e.g. \"8e03978e-40d5\"")]
    Unquoted,
    /// The header appears more than once.
    #[error("the request has more than one Idempotency-Key header")]
    Repeated,
}

/// The key of an operation that takes it from the request ([`KeySource::Parts`]): each part
/// verbatim (a header's value; a body field's text when it is a string, its JSON text when it
/// is a number or a boolean), percent-encoded where it is not visible ASCII (and `%`, and
/// `:` when there are several parts), the parts joined with `:`.
///
/// `headers` are the request's; `body` its bytes, when a part is in the body. `Ok(None)`
/// for [`KeySource::IdempotencyKey`].
///
/// # Errors
/// [`PartError`]: a part is missing (a header that is absent, a field the body does not
/// have, or `null`), or cannot be a key (a header sent twice; not a string, number or
/// boolean; a body that is not JSON; a key longer than [`MAX_RECEIVED_LEN`] characters). A
/// key longer than [`MAX_LEN`] is its digest ([`IdempotencyKey::new`]).
pub(crate) fn from_parts(
    source: KeySource,
    headers: &http::HeaderMap,
    body: Option<&[u8]>,
) -> Result<Option<IdempotencyKey>, PartError> {
    let parts = source.parts();
    if parts.is_empty() {
        return Ok(None);
    }
    let refuse = |missing: bool, reason: &'static str| PartError { missing, reason };
    let json = if source.reads_body() {
        let body = body.ok_or_else(|| refuse(true, "the request has no body"))?;
        Some(
            serde_json::from_slice::<serde_json::Value>(body)
                .map_err(|_| refuse(false, "the body is not JSON"))?,
        )
    } else {
        None
    };
    let several = parts.len() > 1;
    let mut key = String::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            key.push(':');
        }
        match part {
            KeyPart::Header(name) => {
                let mut values = headers.get_all(*name).iter();
                let value = match (values.next(), values.next()) {
                    (Some(value), None) => value,
                    (None, _) => return Err(refuse(true, "the request has no such header")),
                    (Some(_), Some(_)) => {
                        return Err(refuse(false, "the header appears more than once"));
                    }
                };
                let value = value.as_bytes().trim_ascii();
                if value.is_empty() {
                    return Err(refuse(true, "the header is empty"));
                }
                encode_into(&mut key, value, several);
            }
            KeyPart::Body(pointer) => {
                let value = json.as_ref().and_then(|json| json.pointer(pointer));
                match value {
                    None | Some(serde_json::Value::Null) => {
                        return Err(refuse(true, "the body has no such field"));
                    }
                    Some(serde_json::Value::String(text)) if text.is_empty() => {
                        return Err(refuse(true, "the field is empty"));
                    }
                    Some(serde_json::Value::String(text)) => {
                        encode_into(&mut key, text.as_bytes(), several);
                    }
                    Some(value @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                        encode_into(&mut key, value.to_string().as_bytes(), several);
                    }
                    Some(_) => {
                        return Err(refuse(
                            false,
                            "the field is not a string, a number or a boolean",
                        ));
                    }
                }
            }
        }
        if key.len() > MAX_RECEIVED_LEN {
            break;
        }
    }
    IdempotencyKey::new(key)
        .map(Some)
        .map_err(|_| refuse(false, "the key is longer than 8192 characters"))
}

/// Why a key could not be taken from the request ([`from_parts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PartError {
    /// The part is absent, rather than unusable.
    pub(crate) missing: bool,
    /// What is wrong, in words.
    pub(crate) reason: &'static str,
}

/// Appends `bytes` to `key`, percent-encoding what is not visible ASCII, `%`, and `:` with
/// `colon`.
fn encode_into(key: &mut String, bytes: &[u8], colon: bool) {
    for &b in bytes {
        if b.is_ascii_graphic() && b != b'%' && !(colon && b == b':') {
            key.push(char::from(b));
        } else {
            key.push_str(&format!("%{b:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(
        source: KeySource,
        headers: &[(&'static str, &'static str)],
        body: Option<&str>,
    ) -> Result<Option<String>, String> {
        let mut map = http::HeaderMap::new();
        for (name, value) in headers {
            map.append(*name, http::HeaderValue::from_static(value));
        }
        from_parts(source, &map, body.map(str::as_bytes))
            .map(|key| key.map(|k| k.as_str().to_owned()))
            .map_err(|e| e.reason.to_owned())
    }

    #[test]
    fn keys_come_from_headers_and_body_fields() {
        let hook = KeySource::Parts(&[KeyPart::Header("webhook-id")]);
        assert_eq!(
            from(hook, &[("webhook-id", "msg_2KWP:1")], None),
            Ok(Some("msg_2KWP:1".to_owned()))
        );
        assert_eq!(
            from(hook, &[("webhook-id", "a b%")], None),
            Ok(Some("a%20b%25".to_owned()))
        );
        let id = KeySource::Parts(&[KeyPart::Body("/id")]);
        assert_eq!(
            from(id, &[], Some(r#"{"id": "evt_1"}"#)),
            Ok(Some("evt_1".to_owned()))
        );
        assert_eq!(
            from(id, &[], Some(r#"{"id": 42}"#)),
            Ok(Some("42".to_owned()))
        );
        assert_eq!(
            from(id, &[], Some(r#"{"id": "clé"}"#)),
            Ok(Some("cl%C3%A9".to_owned()))
        );
        let adyen = KeySource::Parts(&[
            KeyPart::Body("/notification/psp"),
            KeyPart::Body("/notification/code"),
            KeyPart::Header("x-account"),
        ]);
        assert_eq!(
            from(
                adyen,
                &[("x-account", "acme")],
                Some(r#"{"notification": {"psp": "a:b", "code": true}}"#)
            ),
            Ok(Some("a%3Ab:true:acme".to_owned()))
        );
        assert_eq!(from(KeySource::IdempotencyKey, &[], None), Ok(None));
    }

    #[test]
    fn missing_and_unusable_parts_are_refused() {
        let hook = KeySource::Parts(&[KeyPart::Header("webhook-id")]);
        let id = KeySource::Parts(&[KeyPart::Body("/id")]);
        let missing = |r: Result<Option<String>, String>| {
            r.unwrap_err();
        };
        missing(from(hook, &[], None));
        missing(from(
            hook,
            &[("webhook-id", "a"), ("webhook-id", "b")],
            None,
        ));
        missing(from(id, &[], None));
        missing(from(id, &[], Some("{}")));
        missing(from(id, &[], Some(r#"{"id": null}"#)));
        missing(from(id, &[], Some(r#"{"id": ""}"#)));
        missing(from(id, &[], Some(r#"{"id": {"a": 1}}"#)));
        missing(from(id, &[], Some("not json")));
        let long = format!(r#"{{"id": "{}"}}"#, "k".repeat(MAX_RECEIVED_LEN + 1));
        let error = from_parts(id, &http::HeaderMap::new(), Some(long.as_bytes())).unwrap_err();
        assert!(!error.missing, "{error:?}");
        assert_eq!(error.reason, "the key is longer than 8192 characters");
        let error = from_parts(id, &http::HeaderMap::new(), Some(b"{}")).unwrap_err();
        assert_eq!(
            error,
            PartError {
                missing: true,
                reason: "the body has no such field"
            }
        );
    }

    fn lenient(raw: &str) -> Result<IdempotencyKey, KeyError> {
        IdempotencyKey::parse(raw.as_bytes(), KeyFormat::Lenient)
    }

    #[test]
    fn quoted_and_bare_keys_are_the_same_key() {
        assert_eq!(lenient("\"abc-123\"").unwrap(), lenient("abc-123").unwrap());
        assert_eq!(lenient("  \"abc\"  ").unwrap().as_str(), "abc");
    }

    #[test]
    fn strict_mode_refuses_bare_keys_only() {
        let strict = |raw: &str| IdempotencyKey::parse(raw.as_bytes(), KeyFormat::Strict);
        assert_eq!(strict("abc"), Err(KeyError::Unquoted));
        assert_eq!(strict("\"abc\"").unwrap().as_str(), "abc");
    }

    #[test]
    fn length_limits() {
        assert_eq!(lenient(""), Err(KeyError::Empty));
        assert_eq!(lenient("\"\""), Err(KeyError::Empty));
        let longest = "k".repeat(MAX_LEN);
        assert_eq!(lenient(&longest).unwrap().as_str(), longest);
        assert_eq!(
            IdempotencyKey::new(longest.as_str()).unwrap().as_str(),
            longest
        );
        assert!(lenient(&"k".repeat(MAX_RECEIVED_LEN)).is_ok());
        let too_long = "k".repeat(MAX_RECEIVED_LEN + 1);
        assert_eq!(lenient(&too_long), Err(KeyError::TooLong));
        assert_eq!(lenient(&format!("\"{too_long}\"")), Err(KeyError::TooLong));
        assert!(
            KeyError::TooLong
                .to_string()
                .contains(&MAX_RECEIVED_LEN.to_string())
        );
    }

    #[test]
    fn a_long_key_is_stored_as_its_digest() {
        let long = "k".repeat(300);
        let key = IdempotencyKey::new(long.as_str()).unwrap();
        // `sha256:` and the SHA-256 of the whole key (`printf 'k%.0s' {1..300} | sha256sum`).
        assert_eq!(
            key.as_str(),
            "sha256:17b16d8ef494060fefa36a6a41567b8c32d213a17e02b7eeae86158cc4495461"
        );
        assert!(key.as_str().len() <= MAX_LEN);
        // Stable, and the same from a header, quoted or bare.
        assert_eq!(IdempotencyKey::new(long.as_str()).unwrap(), key);
        assert_eq!(lenient(&long).unwrap(), key);
        assert_eq!(lenient(&format!("\"{long}\"")).unwrap(), key);
        // The digest is a key of its own that names the same row.
        assert_eq!(IdempotencyKey::new(key.as_str()).unwrap(), key);
        // Long keys that differ anywhere, even only in their last character, differ.
        let mut other = long.clone();
        other.replace_range(299.., "j");
        assert_ne!(IdempotencyKey::new(other).unwrap(), key);
        assert_eq!(
            IdempotencyKey::new("k".repeat(256)).unwrap().as_str(),
            "sha256:ce16fe78208a4e93f7158e62393680e025b2ad584f4e875ce903a654bb74cf93"
        );
        // Still visible ASCII only.
        let spaced = format!("{} ", "k".repeat(300));
        assert_eq!(IdempotencyKey::new(spaced), Err(KeyError::InvalidCharacter));
    }

    #[test]
    fn a_long_key_from_the_request_is_stored_as_its_digest() {
        let hook = KeySource::Parts(&[KeyPart::Header("webhook-id")]);
        let long = format!("msg_{}", "x".repeat(296));
        let mut headers = http::HeaderMap::new();
        headers.insert("webhook-id", http::HeaderValue::from_str(&long).unwrap());
        let key = from_parts(hook, &headers, None).unwrap().unwrap();
        assert_eq!(key, IdempotencyKey::new(long.as_str()).unwrap());
        assert!(key.as_str().starts_with(DIGEST_PREFIX), "{key:?}");
        assert_eq!(key.as_str().len(), DIGEST_PREFIX.len() + 64);
        // The key is encoded and joined first, then digested.
        let id = KeySource::Parts(&[KeyPart::Body("/id")]);
        let body = format!(r#"{{"id": "{} "}}"#, "x".repeat(300));
        let key = from_parts(id, &http::HeaderMap::new(), Some(body.as_bytes()))
            .unwrap()
            .unwrap();
        let encoded = format!("{}%20", "x".repeat(300));
        assert_eq!(key, IdempotencyKey::new(encoded).unwrap());
        let exactly = "x".repeat(MAX_LEN);
        let body = format!(r#"{{"id": "{exactly}"}}"#);
        let key = from_parts(id, &http::HeaderMap::new(), Some(body.as_bytes()))
            .unwrap()
            .unwrap();
        assert_eq!(key.as_str(), exactly);
    }

    #[test]
    fn invisible_and_non_ascii_characters_are_refused() {
        assert_eq!(lenient("a b"), Err(KeyError::InvalidCharacter));
        assert_eq!(lenient("\"a b\""), Err(KeyError::InvalidCharacter));
        assert_eq!(lenient("a\tb"), Err(KeyError::InvalidCharacter));
        assert_eq!(lenient("clé"), Err(KeyError::InvalidCharacter));
        assert_eq!(lenient("ab\"c"), Err(KeyError::InvalidCharacter));
    }

    #[test]
    fn malformed_structured_values_are_refused() {
        assert_eq!(lenient("\"unterminated"), Err(KeyError::NotStructured));
        assert_eq!(lenient("\"a\", \"b\""), Err(KeyError::NotStructured));
        assert_eq!(lenient("\"a\" trailing"), Err(KeyError::NotStructured));
    }

    #[test]
    fn escaped_quotes_are_allowed_inside_quoted_keys() {
        assert_eq!(lenient(r#""a\"b""#).unwrap().as_str(), "a\"b");
    }

    #[test]
    fn structured_parameters_are_ignored() {
        assert_eq!(lenient("\"abc\";v=1").unwrap().as_str(), "abc");
        assert_eq!(
            lenient("\"abc\";a;b=?0;c=tok;d=\"s t\";e=-1.5")
                .unwrap()
                .as_str(),
            "abc"
        );
        // Those the documents' pattern does not describe are refused.
        assert_eq!(lenient("\"abc\";v=:AAAA:"), Err(KeyError::NotStructured));
        assert_eq!(lenient("\"abc\";v=@1"), Err(KeyError::NotStructured));
    }

    #[test]
    fn a_bare_key_is_what_a_string_could_have_held() {
        // Neither `"` nor `\` in a bare key: it would be a string that was malformed.
        for raw in ["a\\b", "\\", "0\"\"\"\"\\M\"", "ab\""] {
            assert_eq!(lenient(raw), Err(KeyError::InvalidCharacter), "{raw}");
        }
        assert_eq!(lenient("\"0"), Err(KeyError::NotStructured));
        assert_eq!(lenient("\"\""), Err(KeyError::Empty));
        assert_eq!(lenient("order-42;v=1").unwrap().as_str(), "order-42;v=1");
    }
}
