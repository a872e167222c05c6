//! The key: its header and its syntax, or the parts of the request it is taken from, in
//! words and as patterns.

use std::fmt::Write as _;

use idem_spec::{KeyFormat, KeyRequirement};

use crate::{KeyPartDoc, OperationDoc};

/// Name of the request header that carries the key.
pub const KEY_HEADER: &str = "Idempotency-Key";

/// Shortest key, in characters (unquoted).
pub const KEY_MIN_LEN: usize = 1;

/// Longest key, in characters (unquoted), as the runtime's key parser accepts.
pub const KEY_MAX_LEN: usize = 8192;

/// Longest key stored as it is; a longer one is stored as [`KEY_DIGEST_PREFIX`] and the
/// SHA-256 of the key, in 64 lowercase hexadecimal digits (the runtime's `key` module).
pub const KEY_STORED_MAX_LEN: usize = 255;

/// What a key longer than [`KEY_STORED_MAX_LEN`] is stored as: this prefix, then the 64
/// lowercase hexadecimal digits of the key's SHA-256.
pub const KEY_DIGEST_PREFIX: &str = "sha256:";

/// The key used in the documents' examples (and the value of the first part of a key taken
/// from the request).
pub const EXAMPLE_KEY: &str = "8e03978e-40d5-43e8-bc93-6894a57f9324";

/// A pattern (ECMA-262, as OpenAPI uses) for the header's value in the strict format
/// ([`KeyFormat::Strict`]): a structured-field string of 1 to 8192 visible ASCII characters,
/// `"` and `\` escaped with `\`, with the parameters an item may carry (ignored): each
/// `;key` or `;key=value`, the value an integer, a decimal, a string, a token or a boolean.
pub const KEY_PATTERN: &str = concat!(
    r#"^"([!#-\[\]-~]|\\["\\]){1,8192}""#,
    r#"(; *[a-z*][a-z0-9_.*-]*(=(-?[0-9]{1,12}\.[0-9]{1,3}|-?[0-9]{1,15}|"([ !#-\[\]-~]|\\["\\])*"|[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*|\?[01]))?)*$"#,
);

/// A pattern for the header's value in the lenient format ([`KeyFormat::Lenient`], the
/// default): [`KEY_PATTERN`]'s structured-field string, or a bare key of 1 to 8192 visible
/// ASCII characters without `"` or `\`.
pub const LENIENT_KEY_PATTERN: &str = concat!(
    r#"^("([!#-\[\]-~]|\\["\\]){1,8192}""#,
    r#"(; *[a-z*][a-z0-9_.*-]*(=(-?[0-9]{1,12}\.[0-9]{1,3}|-?[0-9]{1,15}|"([ !#-\[\]-~]|\\["\\])*"|[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*|\?[01]))?)*"#,
    r#"|[!#-\[\]-~]{1,8192})$"#,
);

/// The pattern of the header's value in `format`: [`KEY_PATTERN`] or
/// [`LENIENT_KEY_PATTERN`].
#[must_use]
pub const fn key_pattern(format: KeyFormat) -> &'static str {
    match format {
        KeyFormat::Strict => KEY_PATTERN,
        KeyFormat::Lenient => LENIENT_KEY_PATTERN,
    }
}

/// What becomes of a long key, for the key's paragraph, whatever its source.
fn long_keys() -> String {
    format!(
        "A key longer than {KEY_STORED_MAX_LEN} characters is kept as its digest, \
         `{KEY_DIGEST_PREFIX}` followed by the 64 lowercase hexadecimal digits of its SHA-256: \
         every retry with the same key finds what the first request stored."
    )
}

/// How the `Idempotency-Key` header is written in `format`, in one paragraph.
///
/// ```
/// use idem_docs::contract::key_syntax;
/// use idem_spec::KeyFormat;
///
/// assert!(key_syntax(KeyFormat::Lenient).contains("without quotes"));
/// assert!(key_syntax(KeyFormat::Strict).contains("refuses a key without quotes"));
/// ```
#[must_use]
pub fn key_syntax(format: KeyFormat) -> String {
    let quotes = match format {
        KeyFormat::Lenient => {
            "This server also accepts the key without quotes (`Idempotency-Key: 8e03978e-…`) \
             when it has no `\"` and no `\\`."
        }
        KeyFormat::Strict => "This server refuses a key without quotes (400).",
    };
    format!(
        "`{KEY_HEADER}` is a structured-field string (IETF httpapi draft): the key in double \
         quotes, such as `{KEY_HEADER}: \"{EXAMPLE_KEY}\"`. A key is {KEY_MIN_LEN} to \
         {KEY_MAX_LEN} visible ASCII characters (`!` to `~`, no spaces); a `\"` or `\\` in it \
         is escaped with `\\`. {} Use a new random key (a UUID) for each intent, and the same \
         key for every retry of it. {quotes}",
        long_keys()
    )
}

/// Whether the key is required, in one sentence.
///
/// A key taken from the request is always required; the sentence names what is missing.
#[must_use]
pub fn key_requirement(doc: &OperationDoc) -> &'static str {
    match doc.key_from.as_slice() {
        [] if doc.key == KeyRequirement::Required => {
            "Required: a request without it is refused (400)."
        }
        [] => {
            "Optional: a request without it runs once, with no protection against being run \
             again by a retry."
        }
        [KeyPartDoc::Header(_)] => "Required: a request without the header is refused (400).",
        [KeyPartDoc::Body(_)] => "Required: a request whose body lacks the field is refused (400).",
        _ => "Required: a request missing any of the parts is refused (400).",
    }
}

/// Whether the key is required: as [`OperationDoc::key`] says, and always when it is taken
/// from the request.
pub(crate) fn key_required(doc: &OperationDoc) -> bool {
    doc.key == KeyRequirement::Required || !doc.key_from.is_empty()
}

/// The key's requirement as the attribute spells it (`required`, `optional`).
pub(crate) fn key_word(doc: &OperationDoc) -> &'static str {
    if key_required(doc) {
        KeyRequirement::Required.as_str()
    } else {
        KeyRequirement::Optional.as_str()
    }
}

/// One part of a key taken from the request, in words: ``the `webhook-id` header``,
/// ``the body's `/id` `` (as [`idem_spec::KeyPart`] writes itself).
#[must_use]
pub fn key_part(part: &KeyPartDoc) -> String {
    match part {
        KeyPartDoc::Header(name) => format!("the `{name}` header"),
        KeyPartDoc::Body(pointer) => format!("the body's `{pointer}`"),
    }
}

/// Where the key comes from, in words (as [`idem_spec::KeySource`] writes itself):
/// ``the `Idempotency-Key` header``, ``the `webhook-id` header``, or the parts and how they
/// are joined.
///
/// ```
/// use idem_docs::{OperationDoc, contract};
/// use idem_spec::{KeyPart, KeySource, OperationSpec};
///
/// let adyen = KeySource::Parts(&[KeyPart::Body("/pspReference"), KeyPart::Body("/eventCode")]);
/// let doc = OperationDoc::from_spec(&OperationSpec::new("adyen:v1").key_from(adyen));
/// assert_eq!(
///     contract::key_source(&doc),
///     "the body's `/pspReference` and the body's `/eventCode`, joined with `:`"
/// );
/// ```
#[must_use]
pub fn key_source(doc: &OperationDoc) -> String {
    let parts: Vec<String> = doc.key_from.iter().map(key_part).collect();
    match parts.as_slice() {
        [] => format!("the `{KEY_HEADER}` header"),
        [one] => one.clone(),
        [first @ .., last] => format!("{} and {last}, joined with `:`", first.join(", ")),
    }
}

/// How the key is made and written, in one paragraph: [`key_syntax`] for the
/// `Idempotency-Key` header, otherwise where each part comes from, how it is taken and
/// encoded, and how the parts are joined.
///
/// ```
/// use idem_docs::{OperationDoc, contract};
/// use idem_spec::{KeyPart, KeySource, OperationSpec};
///
/// let spec = OperationSpec::new("hook:v1").key_from(KeySource::Parts(&[KeyPart::Header("webhook-id")]));
/// let text = contract::key_format(&OperationDoc::from_spec(&spec));
/// assert!(text.starts_with("The key is the `webhook-id` header's value, taken verbatim"), "{text}");
/// ```
#[must_use]
pub fn key_format(doc: &OperationDoc) -> String {
    let parts = doc.key_from.as_slice();
    let several = parts.len() > 1;
    let headers = parts.iter().any(|p| matches!(p, KeyPartDoc::Header(_)));
    let bodies = parts.iter().any(|p| matches!(p, KeyPartDoc::Body(_)));
    let mut text = match parts {
        [] => return key_syntax(doc.key_format),
        [KeyPartDoc::Header(name)] => format!(
            "The key is the `{name}` header's value, taken verbatim: quotes, if any, are part \
             of it (it is not a structured-field string like `{KEY_HEADER}`)."
        ),
        [KeyPartDoc::Body(pointer)] => format!("The key is the body's `{pointer}`."),
        _ => format!("The key is {}.", key_source(doc)),
    };
    if several && headers {
        text.push_str(" A header's value is taken verbatim (quotes, if any, are part of it).");
    }
    if bodies {
        text.push_str(
            " The body must be JSON; a field that is a string is taken as its text, a number \
             or a boolean as its JSON text (`42`, `true`); an object, an array or `null` \
             cannot be a key.",
        );
    }
    if several {
        text.push_str(
            " In each part, bytes outside visible ASCII (`!` to `~`), `%` and `:` are \
             percent-encoded (`%` is `%25`, `:` is `%3A`, a space `%20`), so that the `:` \
             joining the parts is never part of one.",
        );
    } else {
        text.push_str(
            " Bytes outside visible ASCII (`!` to `~`), and `%`, are percent-encoded (`%` is \
             `%25`, a space `%20`).",
        );
    }
    let _ = write!(
        text,
        " The key, once encoded{}, is {KEY_MIN_LEN} to {KEY_MAX_LEN} characters. {}",
        if several { " and joined" } else { "" },
        long_keys()
    );
    text.push_str(if several {
        " A retry of a request carries the same values, and a new request different ones."
    } else {
        " A retry of a request carries the same value, and a new request a new one."
    });
    text
}

/// The key parameter's description, for OpenAPI: whether it is required, then
/// [`key_format`]. The `Idempotency-Key` header's, or each header a key is taken from.
#[must_use]
pub fn key_parameter(doc: &OperationDoc) -> String {
    format!("{} {}", key_requirement(doc), key_format(doc))
}

/// How a client makes the documents' operations safe to retry, as a phrase for their
/// introductions: "send an `Idempotency-Key` header" when every operation reads that header,
/// otherwise where the key goes.
#[must_use]
pub fn send_keys(docs: &[OperationDoc]) -> &'static str {
    let sourced = docs.iter().filter(|d| !d.key_from.is_empty()).count();
    match sourced {
        0 => "send an `Idempotency-Key` header",
        n if n == docs.len() => {
            "send the key where the operation takes it from (a header or a field of the body)"
        }
        _ => {
            "send an `Idempotency-Key` header, or the key where the operation takes it from \
             (a header or a field of the body)"
        }
    }
}

/// The example value of each part of a key taken from the request: [`EXAMPLE_KEY`] for the
/// first, `example-2`, `example-3`… for the others.
pub(crate) fn example_values(doc: &OperationDoc) -> Vec<(&KeyPartDoc, String)> {
    doc.key_from
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let value = if i == 0 {
                EXAMPLE_KEY.to_owned()
            } else {
                format!("example-{}", i + 1)
            };
            (part, value)
        })
        .collect()
}

/// The key the example request makes: its parts' example values (visible ASCII without `%`
/// or `:`, so not encoded) joined with `:`; [`EXAMPLE_KEY`] for the `Idempotency-Key`
/// header.
pub(crate) fn example_key(doc: &OperationDoc) -> String {
    if doc.key_from.is_empty() {
        return EXAMPLE_KEY.to_owned();
    }
    let values: Vec<String> = example_values(doc).into_iter().map(|(_, v)| v).collect();
    values.join(":")
}
