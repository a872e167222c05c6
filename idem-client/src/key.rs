//! The `Idempotency-Key` header's value: a structured-field string, as the IETF httpapi draft
//! specifies (`Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`).

use http::HeaderValue;

/// Name of the request header that carries the key.
pub const HEADER: &str = "idempotency-key";

/// Longest key idem's servers accept, in characters (8 KiB). A server stores a key longer
/// than 255 characters as its SHA-256 digest, so a long key is retried as safely as a short
/// one.
pub const MAX_LEN: usize = 8192;

/// A key the generator returned that no server following the draft would accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidKey {
    /// The key is empty.
    #[error("the generated idempotency key is empty")]
    Empty,
    /// The key is longer than [`MAX_LEN`] characters.
    #[error("the generated idempotency key is longer than {MAX_LEN} characters")]
    TooLong,
    /// The key has a character outside visible ASCII (`!` to `~`), such as a space.
    #[error("the generated idempotency key has a character outside visible ASCII")]
    InvalidCharacter,
}

/// A fresh key: a random (v4) UUID, e.g. `8e03978e-40d5-43e8-bc93-6894a57f9324`.
///
/// The middleware's default generator. Generate the key yourself (and send it as
/// [`header_value`]) when you need to know it even if every attempt fails.
#[must_use]
pub fn generate() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The header value of `key`, as a structured-field string: `"key"`.
///
/// # Errors
/// [`InvalidKey`] unless the key is 1 to 8192 visible ASCII characters, as idem's servers
/// require. (A structured-field string could carry `"` and `\` escaped, and spaces; idem's
/// keys may hold the first two, escaped here, but not spaces.)
pub fn header_value(key: &str) -> Result<HeaderValue, InvalidKey> {
    if key.is_empty() {
        return Err(InvalidKey::Empty);
    }
    if key.len() > MAX_LEN {
        return Err(InvalidKey::TooLong);
    }
    if !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(InvalidKey::InvalidCharacter);
    }
    let mut quoted = String::with_capacity(key.len() + 2);
    quoted.push('"');
    for c in key.chars() {
        if matches!(c, '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    HeaderValue::from_str(&quoted).map_err(|_| InvalidKey::InvalidCharacter)
}

/// The key a header value names: a structured-field string unquoted, a bare key (Stripe's
/// convention, which idem accepts unless configured strict) as it is.
pub(crate) fn from_header(value: &HeaderValue) -> String {
    let raw = String::from_utf8_lossy(value.as_bytes());
    let trimmed = raw.trim();
    let Some(inner) = trimmed
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    else {
        return trimmed.to_owned();
    };
    let mut key = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(escaped) = chars.next() {
                key.push(escaped);
            }
        } else {
            key.push(c);
        }
    }
    key
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn generated_keys_are_uuids_sent_quoted() {
        let key = generate();
        assert_eq!(key.len(), 36);
        assert!(uuid::Uuid::parse_str(&key).is_ok());
        assert_ne!(generate(), key);
        let value = header_value(&key).unwrap();
        assert_eq!(value.to_str().unwrap(), format!("\"{key}\""));
        assert_eq!(from_header(&value), key);
    }

    #[test]
    fn quotes_and_backslashes_are_escaped_and_round_trip() {
        let value = header_value(r#"a"b\c"#).unwrap();
        assert_eq!(value.to_str().unwrap(), r#""a\"b\\c""#);
        assert_eq!(from_header(&value), r#"a"b\c"#);
    }

    #[test]
    fn keys_a_server_would_refuse_are_refused() {
        assert_eq!(header_value(""), Err(InvalidKey::Empty));
        assert_eq!(
            header_value(&"k".repeat(MAX_LEN + 1)),
            Err(InvalidKey::TooLong)
        );
        assert!(header_value(&"k".repeat(MAX_LEN)).is_ok());
        for bad in ["a b", "tab\there", "é", "line\n"] {
            assert_eq!(
                header_value(bad),
                Err(InvalidKey::InvalidCharacter),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn bare_keys_are_read_as_they_are() {
        assert_eq!(from_header(&HeaderValue::from_static("order-1")), "order-1");
        assert_eq!(
            from_header(&HeaderValue::from_static(" \"order-1\" ")),
            "order-1"
        );
    }
}
