//! Where an operation's idempotency key comes from: the `Idempotency-Key` header (the
//! default), or parts of the request itself — a webhook's event id in a header or in the
//! body.

use std::fmt;

/// One part of a key taken from the request ([`KeySource::Parts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyPart {
    /// A request header's value, taken verbatim (`header("webhook-id")`). The name is
    /// lower-case.
    Header(&'static str),
    /// A field of the JSON body, named by a JSON pointer (RFC 6901, `body("/id")`): a string
    /// is taken as its text, a number or boolean as its JSON text.
    Body(&'static str),
}

impl KeyPart {
    /// The part as the attribute spells it: `header("webhook-id")`, `body("/id")`.
    #[must_use]
    pub fn spelling(&self) -> String {
        match self {
            Self::Header(name) => format!("header({name:?})"),
            Self::Body(pointer) => format!("body({pointer:?})"),
        }
    }
}

impl fmt::Display for KeyPart {
    /// In words: ``the `webhook-id` header``, ``the body's `/id` ``.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(name) => write!(f, "the `{name}` header"),
            Self::Body(pointer) => write!(f, "the body's `{pointer}`"),
        }
    }
}

/// Where an operation's key comes from.
///
/// ```
/// use idem_spec::{KeyPart, KeySource};
///
/// assert_eq!(KeySource::default(), KeySource::IdempotencyKey);
/// let webhook = KeySource::Parts(&[KeyPart::Header("webhook-id")]);
/// assert_eq!(webhook.to_string(), "the `webhook-id` header");
/// let adyen = KeySource::Parts(&[KeyPart::Body("/pspReference"), KeyPart::Body("/eventCode")]);
/// assert_eq!(
///     adyen.to_string(),
///     "the body's `/pspReference` and the body's `/eventCode`, joined with `:`"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum KeySource {
    /// The `Idempotency-Key` header, a structured-field string (IETF httpapi draft). The
    /// default.
    #[default]
    IdempotencyKey,
    /// Parts of the request, each taken verbatim and percent-encoded where it is not
    /// visible ASCII (and `%`, and `:` when there are several), joined with `:`. A key
    /// taken this way is always required: a request missing a part is refused (400).
    Parts(&'static [KeyPart]),
}

impl KeySource {
    /// The parts, empty for [`KeySource::IdempotencyKey`].
    #[must_use]
    pub fn parts(&self) -> &'static [KeyPart] {
        match self {
            Self::IdempotencyKey => &[],
            Self::Parts(parts) => parts,
        }
    }

    /// Whether a part is read from the body.
    #[must_use]
    pub fn reads_body(&self) -> bool {
        self.parts().iter().any(|p| matches!(p, KeyPart::Body(_)))
    }

    /// The headers the key is read from, in order (`Idempotency-Key` by default).
    pub fn headers(&self) -> impl Iterator<Item = &'static str> {
        let default = matches!(self, Self::IdempotencyKey).then_some("Idempotency-Key");
        default
            .into_iter()
            .chain(self.parts().iter().filter_map(|p| match p {
                KeyPart::Header(name) => Some(*name),
                KeyPart::Body(_) => None,
            }))
    }
}

impl fmt::Display for KeySource {
    /// In words: ``the `Idempotency-Key` header``, ``the `webhook-id` header``, or the parts
    /// and how they are joined.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = match self {
            Self::IdempotencyKey => return f.write_str("the `Idempotency-Key` header"),
            Self::Parts(parts) => parts,
        };
        for (i, part) in parts.iter().enumerate() {
            match i {
                0 => {}
                i if i + 1 == parts.len() => f.write_str(" and ")?,
                _ => f.write_str(", ")?,
            }
            write!(f, "{part}")?;
        }
        if parts.len() > 1 {
            f.write_str(", joined with `:`")?;
        }
        Ok(())
    }
}

/// Why a key part's spelling was refused ([`check_header_name`], [`check_pointer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPartError(pub String);

impl fmt::Display for KeyPartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for KeyPartError {}

/// Checks a header name for [`KeyPart::Header`]: an HTTP token in lower case.
///
/// # Errors
/// When it is empty, not a token, or has upper-case letters.
pub fn check_header_name(name: &str) -> Result<(), KeyPartError> {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(token) {
        return Err(KeyPartError(format!(
            "`{name}` is not a header name (letters, digits and `-`, such as `webhook-id`)"
        )));
    }
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err(KeyPartError(format!(
            "write header names in lower case: `{}`",
            name.to_ascii_lowercase()
        )));
    }
    if name.eq_ignore_ascii_case("idempotency-key") {
        return Err(KeyPartError(
            "`Idempotency-Key` is the default source, parsed as a structured field: leave \
             `key` out (or write `key = \"required\"`)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Checks a JSON pointer for [`KeyPart::Body`] (RFC 6901): empty (the whole body, refused
/// here: a key is one value) or `/`-separated tokens where `~` is followed by `0` or `1`.
///
/// # Errors
/// When it does not start with `/` or has a bad `~` escape.
pub fn check_pointer(pointer: &str) -> Result<(), KeyPartError> {
    if !pointer.starts_with('/') {
        return Err(KeyPartError(format!(
            "`{pointer}` is not a JSON pointer to a field: start it with `/`, such as `/id` or \
             `/data/object/id`"
        )));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(KeyPartError(format!(
                "`{pointer}`: in a JSON pointer `~` is written `~0` and `/` inside a name `~1`"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_read_in_words() {
        assert_eq!(
            KeySource::IdempotencyKey.to_string(),
            "the `Idempotency-Key` header"
        );
        let three = KeySource::Parts(&[
            KeyPart::Body("/a"),
            KeyPart::Header("x-b"),
            KeyPart::Body("/c"),
        ]);
        assert_eq!(
            three.to_string(),
            "the body's `/a`, the `x-b` header and the body's `/c`, joined with `:`"
        );
        assert!(three.reads_body());
        assert_eq!(three.headers().collect::<Vec<_>>(), ["x-b"]);
        assert_eq!(
            KeySource::IdempotencyKey.headers().collect::<Vec<_>>(),
            ["Idempotency-Key"]
        );
        assert_eq!(KeyPart::Body("/id").spelling(), "body(\"/id\")");
    }

    #[test]
    fn spellings_are_checked() {
        assert!(check_header_name("webhook-id").is_ok());
        assert!(check_header_name("X-GitHub-Delivery").is_err());
        assert!(check_header_name("a b").is_err());
        assert!(check_header_name("").is_err());
        assert!(check_header_name("idempotency-key").is_err());
        assert!(check_pointer("/id").is_ok());
        assert!(check_pointer("/data/a~1b/~0c").is_ok());
        assert!(check_pointer("id").is_err());
        assert!(check_pointer("").is_err());
        assert!(check_pointer("/a~2").is_err());
        assert!(check_pointer("/a~").is_err());
    }
}
