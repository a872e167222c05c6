//! The client's contract in words: every sentence the Markdown and the OpenAPI documents say
//! about an operation is written here, once, so that the two always agree.

use std::fmt::Write as _;

use idem_spec::{
    ExpiryPolicy, InFlightPolicy, KeyFormat, KeyRequirement, Mode, ScopeKind, describe_duration,
};

use crate::{KeyPartDoc, OperationDoc};

/// Name of the request header that carries the key.
pub const KEY_HEADER: &str = "Idempotency-Key";

/// Header idem sets on every replayed response.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

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

/// Media type of idem's error bodies.
pub const PROBLEM_MEDIA_TYPE: &str = "application/problem+json";

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

/// The problem type of a Standard Webhooks delivery whose signature does not verify (`401`),
/// as the runtime's `webhooks::Verified` answers it.
pub const WEBHOOK_UNVERIFIED: &str = "urn:idem:problem:webhook-unverified";

/// The request headers of a Standard Webhooks delivery, as the documents of an operation
/// that verifies them ([`OperationDoc::verified_webhook`]) list them: each name (lower case)
/// and what it carries.
pub const WEBHOOK_HEADERS: [(&str, &str); 3] = [
    (
        "webhook-id",
        "The event's id, the same on every delivery of the event; part of what is signed.",
    ),
    (
        "webhook-timestamp",
        "When the delivery was signed, in whole seconds since the Unix epoch; a delivery \
         signed more than 5 minutes before or after the server's clock is refused (401).",
    ),
    (
        "webhook-signature",
        "`v1,` followed by the base64 HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.{body}` \
         with the shared secret; several, separated by spaces, while a secret is rotated.",
    ),
];

/// How the deliveries of an operation that verifies them ([`OperationDoc::verified_webhook`])
/// are signed and checked, in one paragraph.
#[must_use]
pub fn webhook_verification() -> String {
    format!(
        "Requests are Standard Webhooks deliveries, signed with a secret shared with the \
         sender: the `webhook-id`, `webhook-timestamp` and `webhook-signature` headers are \
         required. A delivery whose signature does not verify is refused (401 \
         `{WEBHOOK_UNVERIFIED}`) before its body is read as the operation's input and before \
         its key is looked at: nothing runs and nothing is stored."
    )
}

/// When `422 urn:idem:problem:invalid-body` is the answer: a JSON body that does not
/// deserialise into the type the operation reads, or that fails the `validator` or `garde`
/// rules of that type (the runtime's `Validated` and `Garde` extractors). An application's
/// own check of the body (the runtime's `Check`, run by `Checked`) answers the problem it
/// returns as is — the application's status and `type` — and the documents list it only
/// when the application documents it (with [`OperationDoc::responds`], or in its `utoipa`
/// document).
pub const INVALID_BODY: &str = "The body is JSON but not of the shape the operation reads (a \
    field missing or of the wrong type), or it breaks a validation rule declared with the \
    body's type. The application's own checks of the body do not answer this: they answer the \
    application's own problem, with the status and `type` it gives it (listed among the \
    operation's own responses when the application documents them).";

/// One situation a request of the operation can be in, and what it is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Case {
    /// The status, as OpenAPI keys responses: `"409"`, or `"2XX"` for the operation's own
    /// success when its exact status is not documented.
    pub status: String,
    /// The problem type (`urn:idem:problem:…`) of the body, when the body is a problem.
    pub problem: Option<&'static str>,
    /// When this is the answer.
    pub when: String,
    /// What the client should do.
    pub then: String,
    /// The response carries `Retry-After`.
    pub retry_after: bool,
    /// The response carries `Idempotent-Replayed: true`.
    pub replayed: bool,
}

impl Case {
    fn problem(status: u16, problem: &'static str, when: String, then: &str) -> Self {
        Self {
            status: status.to_string(),
            problem: Some(problem),
            when,
            then: then.to_owned(),
            retry_after: false,
            replayed: false,
        }
    }

    fn retry_after(mut self) -> Self {
        self.retry_after = true;
        self
    }
}

/// The word for whose keys share a namespace: `tenant`, `user`, `operation`.
#[must_use]
pub fn namespace(scope: ScopeKind) -> &'static str {
    match scope {
        ScopeKind::Tenant => "tenant",
        ScopeKind::User => "user",
        _ => "operation",
    }
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

/// What happens when the key's window lapses.
#[must_use]
pub fn window(doc: &OperationDoc) -> String {
    let ttl = describe_duration(doc.ttl);
    // Staged keys count their TTL from completion: one still running, or waiting to be
    // resumed, is kept whatever the time.
    let kept = match doc.mode {
        Mode::Staged => format!(
            "A key is kept for {ttl} after the operation completes (while it runs or waits to \
             be resumed, whatever the time)."
        ),
        _ => format!("A key is kept for {ttl} after its first request."),
    };
    match doc.on_expired {
        ExpiryPolicy::Gone => format!(
            "{kept} Past that, a request with it is \
             refused (410) and nothing runs: retry within {ttl}, and past it check whether the \
             first request took effect before sending the operation again with a new key."
        ),
        _ => format!(
            "{kept} Past that, the key is free again: \
             a request with it runs the operation anew, as if the key were new. Retry within \
             {ttl}; a retry after it may repeat the operation."
        ),
    }
}

/// What `Idempotent-Replayed` says.
#[must_use]
pub fn replayed_header() -> String {
    format!(
        "`{REPLAYED_HEADER}: true` marks a response replayed from the stored record of an \
         earlier request with the same key: same status, body and stored headers. A first \
         execution's response does not carry it."
    )
}

/// What staged mode does, and does not do, for calls to other systems: the summary of a
/// staged operation says it. A step whose result was recorded does not run again; a step
/// interrupted before its result was recorded runs again, with the same provider key, so that
/// one effect needs a system that deduplicates on that key.
///
/// ```
/// let text = idem_docs::contract::staged_calls();
/// assert!(text.contains("runs again, with the same provider key"));
/// assert!(!text.contains("never"));
/// ```
#[must_use]
pub fn staged_calls() -> &'static str {
    "The operation runs in recorded steps, its calls to other systems among them. A step whose \
     result was recorded does not run again; a step interrupted before its result was \
     recorded runs again, with the same provider key (the idempotency key sent to the other \
     system): its call takes effect once if that system deduplicates on that key, and may take \
     effect twice if it does not."
}

/// What `Retry-After` says.
#[must_use]
pub fn retry_after_header() -> &'static str {
    "`Retry-After` (whole seconds) comes with 409 and 503: wait that long, then send the same \
     request with the same key."
}

/// Every situation of the operation, in status order (stable within a status).
///
/// ```
/// use idem_docs::{OperationDoc, contract};
/// use idem_spec::{ExpiryPolicy, OperationSpec};
///
/// let gone = OperationDoc::from_spec(&OperationSpec::new("x:v1"));
/// let again = OperationDoc::from_spec(&OperationSpec::new("x:v1").on_expired(ExpiryPolicy::Reexecute));
/// let has_410 = |doc| contract::cases(doc).iter().any(|c| c.status == "410");
/// assert!(has_410(&gone));
/// assert!(!has_410(&again));
/// ```
#[must_use]
pub fn cases(doc: &OperationDoc) -> Vec<Case> {
    let staged = doc.mode == Mode::Staged;
    let ttl = describe_duration(doc.ttl);
    let mut cases = success(doc, &ttl);

    if key_required(doc) {
        cases.push(missing_key(doc));
    }
    cases.push(invalid_key(doc));
    cases.push(Case::problem(
        400,
        "urn:idem:problem:invalid-input",
        "The request has a value that cannot be compared with a retry's (a number that is not \
         finite, a map whose keys are not strings)."
            .to_owned(),
        "Fix the request; nothing ran.",
    ));
    cases.push(Case::problem(
        400,
        "urn:idem:problem:malformed-json",
        "A JSON body is not valid JSON.".to_owned(),
        "Fix the body; nothing ran and the key is still unused.",
    ));
    cases.push(Case::problem(
        400,
        "urn:idem:problem:body-unreadable",
        "The body could not be read (the connection broke while it was sent).".to_owned(),
        "Send the request again with the same key; nothing ran.",
    ));
    if doc.scope != ScopeKind::Global {
        let who = namespace(doc.scope);
        cases.push(Case {
            status: "401".to_owned(),
            problem: None,
            when: format!(
                "The application's authentication refused the request, before any key was \
                 looked at (keys are unique per {who})."
            ),
            then: format!(
                "Authenticate, then send the request with the same key, as the same {who}."
            ),
            retry_after: false,
            replayed: false,
        });
        cases.push(Case::problem(
            403,
            "urn:idem:problem:no-scope",
            format!("The authenticated principal has no {who}, which this operation's keys need."),
            "Call as a principal that has one; nothing ran.",
        ));
    }
    if doc.verified_webhook {
        cases.push(Case::problem(
            401,
            WEBHOOK_UNVERIFIED,
            "The delivery's Standard Webhooks signature is missing or wrong, or its \
             `webhook-timestamp` is more than 5 minutes from the server's clock."
                .to_owned(),
            "Nothing ran and the key is still unused: send the delivery again, signed with \
             the shared secret and a current timestamp.",
        ));
    }
    cases.push(in_flight(doc));
    if staged {
        cases.push(
            Case::problem(
                409,
                "urn:idem:problem:in-flight",
                format!(
                    "This request's attempt stopped renewing its lease of {} and was taken \
                     over by a retry or the server's reconciler.",
                    describe_duration(doc.lease)
                ),
                "Retry with the same key and the same request: you get the outcome of the \
                 attempt that took over.",
            )
            .retry_after(),
        );
    }
    if doc.on_expired == ExpiryPolicy::Gone {
        cases.push(Case::problem(
            410,
            "urn:idem:problem:key-expired",
            format!("The key's response was stored more than {ttl} ago; its record is gone."),
            "Do not retry with this key. Check whether the first request took effect before \
             sending the operation again with a new key.",
        ));
    }
    cases.push(Case::problem(
        413,
        "urn:idem:problem:body-too-large",
        "The body is larger than the operation accepts.".to_owned(),
        "Send a smaller body; nothing ran and the key is still unused.",
    ));
    cases.push(Case::problem(
        415,
        "urn:idem:problem:unsupported-media-type",
        "A JSON body is sent without `Content-Type: application/json`.".to_owned(),
        "Send it as `application/json`; nothing ran and the key is still unused.",
    ));
    let excluded = if doc.fingerprint_exclude.is_empty() {
        String::new()
    } else {
        let paths: Vec<String> = doc
            .fingerprint_exclude
            .iter()
            .map(|p| format!("`{p}`"))
            .collect();
        format!("; {} left out of the comparison", paths.join(", "))
    };
    let named = if doc.mismatch_detail {
        " The problem's `mismatch` member names the fields that differ (`changed`, `added`, \
         `removed`: JSON pointers such as `/body/amount`, never their values). A body this \
         operation refuses as invalid, under a key already used with a body that differs, \
         gets this answer too, naming the body fields only."
    } else {
        " The problem does not say which fields differ."
    };
    cases.push(Case::problem(
        422,
        "urn:idem:problem:key-reused",
        format!(
            "The key was already used with a different request (another body, path or query{excluded}).{named}"
        ),
        "A client bug: a new request needs a new key. Do not retry; nothing ran.",
    ));
    cases.push(Case::problem(
        422,
        "urn:idem:problem:invalid-body",
        INVALID_BODY.to_owned(),
        "Fix the body; nothing ran, and this request did not use the key.",
    ));
    cases.push(if staged {
        Case::problem(
            500,
            "urn:idem:problem:handler-failed",
            "The operation failed unexpectedly (a panic, a recorded step that cannot be read \
             back). The steps it completed stay recorded."
                .to_owned(),
            "Retry with the same key: the operation resumes after its last recorded step.",
        )
    } else {
        Case::problem(
            500,
            "urn:idem:problem:handler-failed",
            "The operation failed unexpectedly (a panic), or its response was too large to \
             store (`urn:idem:problem:response-too-large`). Its writes were rolled back and \
             nothing is stored."
                .to_owned(),
            "Retry with the same key: the operation runs again.",
        )
    });
    if staged {
        cases.push(
            Case::problem(
                503,
                "urn:idem:problem:interrupted",
                "The operation stopped midway on a temporary failure (another system timed \
                 out). The steps it completed are recorded."
                    .to_owned(),
                "Retry with the same key and the same request after `Retry-After`: it resumes \
                 after the recorded steps; a step interrupted before its result was recorded \
                 runs again, with the same provider key.",
            )
            .retry_after(),
        );
    }
    cases.push(
        Case::problem(
            503,
            "urn:idem:problem:store-unavailable",
            "The idempotency store failed before anything was committed.".to_owned(),
            "Retry with the same key after `Retry-After`.",
        )
        .retry_after(),
    );
    cases.push(
        Case::problem(
            503,
            "urn:idem:problem:store-busy",
            "The request waited too long for a lock another transaction held (a table locked \
             for maintenance, another writer); nothing was committed."
                .to_owned(),
            "Retry with the same key after `Retry-After`.",
        )
        .retry_after(),
    );
    cases.push(
        Case::problem(
            503,
            "urn:idem:problem:outcome-unknown",
            "The commit failed and its outcome is unknown.".to_owned(),
            "Retry with the same key after `Retry-After`: you get the stored response if the \
             commit happened, or a single new execution if it did not.",
        )
        .retry_after(),
    );
    if doc.sealed_at_rest {
        cases.push(Case::problem(
            500,
            "urn:idem:problem:sealed-unreadable",
            "The key's stored request or response, sealed at rest, fails its integrity check \
             (changed in the database, or copied from another key). It is never replayed."
                .to_owned(),
            "Do not retry with this key: report it to the server's operators; nothing was \
             changed.",
        ));
    }
    // Listed by every server: any stored answer can be edited outside idem.
    cases.push(Case::problem(
        500,
        "urn:idem:problem:stored-unreadable",
        "The key's stored response is not what idem writes (changed in the database outside \
         idem). It is never replayed."
            .to_owned(),
        "Do not retry with this key: report it to the server's operators; nothing was changed.",
    ));
    // Listed by every server: one given no storage keys answers it too, for a key another
    // instance of the service sealed.
    cases.push(
        Case::problem(
            503,
            "urn:idem:problem:storage-key-unknown",
            "The key's stored request or response is sealed at rest under a storage key this \
             server instance was not given (another instance has it, or it is being rolled \
             out); only a service that seals what it stores answers this. Nothing was changed."
                .to_owned(),
            "Retry with the same key after `Retry-After`: an instance that has the storage key \
             answers.",
        )
        .retry_after(),
    );
    for (status, description) in &doc.responses {
        if !(200..300).contains(status) {
            cases.push(Case {
                status: status.to_string(),
                problem: None,
                when: description.clone(),
                then: own_response(doc),
                retry_after: false,
                replayed: false,
            });
        }
    }
    // Stable: cases of one status keep their order above.
    cases.sort_by(|a, b| a.status.cmp(&b.status));
    cases
}

/// `400 missing-key`: the header, or a part of the key taken from the request, is missing.
fn missing_key(doc: &OperationDoc) -> Case {
    let problem = "urn:idem:problem:missing-key";
    let (when, then) = match doc.key_from.as_slice() {
        [] => (
            format!("The request has no `{KEY_HEADER}` header."),
            "Add a new key and send the request again; nothing ran.",
        ),
        [one] => (
            format!("{} is missing.", capitalised(&key_part(one))),
            "Add it and send the request again; nothing ran.",
        ),
        parts => {
            let parts: Vec<String> = parts.iter().map(key_part).collect();
            (
                format!("A part of the key is missing: {}.", or_list(&parts)),
                "Add it and send the request again; nothing ran.",
            )
        }
    };
    Case::problem(400, problem, when, then)
}

/// `400 invalid-key`: the header is not a valid key, or the parts cannot make one.
fn invalid_key(doc: &OperationDoc) -> Case {
    let problem = "urn:idem:problem:invalid-key";
    let parts = doc.key_from.as_slice();
    if parts.is_empty() {
        return Case::problem(
            400,
            problem,
            format!("The `{KEY_HEADER}` header is not a valid key (see its syntax)."),
            "Fix the key; nothing ran.",
        );
    }
    let several = parts.len() > 1;
    let mut reasons = Vec::new();
    if parts.iter().any(|p| matches!(p, KeyPartDoc::Body(_))) {
        reasons.push("the body is not JSON".to_owned());
        reasons.push(format!(
            "{} an object, an array or `null`",
            if several {
                "a field is"
            } else {
                "the field is"
            }
        ));
    }
    reasons.push(if several {
        format!("the key is longer than {KEY_MAX_LEN} characters once encoded and joined")
    } else {
        format!("it is empty or longer than {KEY_MAX_LEN} characters once percent-encoded")
    });
    let subject = if several {
        let parts: Vec<String> = parts.iter().map(key_part).collect();
        format!(
            "The parts of the key ({}) cannot make one",
            parts.join(", ")
        )
    } else {
        format!("{} cannot be a key", capitalised(&key_source(doc)))
    };
    // A serial comma: a reason lists alternatives of its own.
    let reasons = match reasons.split_last() {
        Some((last, first)) if !first.is_empty() => format!("{}, or {last}", first.join(", ")),
        _ => reasons.concat(),
    };
    Case::problem(
        400,
        problem,
        format!("{subject}: {reasons}."),
        "Fix the request; nothing ran.",
    )
}

/// `a`, `a or b`, `a, b or c`.
fn or_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [first @ .., last] => format!("{} or {last}", first.join(", ")),
    }
}

/// The text with its first letter upper-cased (``The `webhook-id` header``).
fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|first| first.to_uppercase().collect::<String>() + chars.as_str())
        .unwrap_or_default()
}

/// The success cases: the operation's own 2xx responses (or `2XX`), first run and replay.
fn success(doc: &OperationDoc, ttl: &str) -> Vec<Case> {
    let mut own: Vec<(String, String)> = doc
        .responses
        .iter()
        .filter(|(s, _)| (200..300).contains(s))
        .map(|(s, d)| (s.to_string(), format!("{d}. ")))
        .collect();
    if own.is_empty() {
        own.push(("2XX".to_owned(), String::new()));
    }
    let first = if doc.mode == Mode::Staged {
        "The operation completed: its response is stored with the key."
    } else {
        "The operation ran: its writes and its response committed with the key, together."
    };
    let mut cases = Vec::new();
    for (status, description) in own {
        cases.push(Case {
            status: status.clone(),
            problem: None,
            when: format!("{description}{first}"),
            then: format!("Done. Retries with the same key within {ttl} replay this response."),
            retry_after: false,
            replayed: false,
        });
        cases.push(Case {
            status,
            problem: None,
            when: format!(
                "A retry with the same key and the same request, after the first completed: \
                 the stored response, with `{REPLAYED_HEADER}: true`; nothing runs again."
            ),
            then: "Done: treat it as the first request's response.".to_owned(),
            retry_after: false,
            replayed: true,
        });
    }
    cases
}

fn in_flight(doc: &OperationDoc) -> Case {
    let when = match (doc.mode, doc.on_in_flight) {
        (Mode::Staged, InFlightPolicy::Wait) => {
            "A request with the same key is still running; this one waited for it up to the \
             server's in-flight wait, and it did not finish."
        }
        (Mode::Staged, _) => {
            "A request with the same key is still running (a staged operation answers at \
             once, without waiting)."
        }
        _ => {
            "A request with the same key is still running; this one waited for it up to the \
             server's in-flight wait, and it did not finish (one that finishes in time is \
             replayed instead)."
        }
    };
    Case::problem(
        409,
        "urn:idem:problem:in-flight",
        when.to_owned(),
        "Wait `Retry-After` seconds, then retry with the same key and the same request.",
    )
    .retry_after()
}

/// Whether the operation's own failures are stored, in one sentence.
#[must_use]
pub fn own_failure(doc: &OperationDoc) -> &'static str {
    match (doc.mode, doc.store_client_errors) {
        (Mode::Staged, _) => {
            "A definitive failure of the operation is stored and replayed like a success."
        }
        (_, true) => {
            "A 4xx of the operation is stored (its writes rolled back) and replayed to retries \
             with the same key; a 5xx is not stored."
        }
        _ => {
            "The operation's failure is not stored: its writes were rolled back, and a retry \
             with the same key runs it again."
        }
    }
}

/// What a client does with one of the operation's own failure responses (those it
/// [`OperationDoc::responds`] with): [`own_failure`], and, where that stores the failure,
/// that a request refused before the operation ran (its input, its authentication) is not.
fn own_response(doc: &OperationDoc) -> String {
    match (doc.mode, doc.store_client_errors) {
        (Mode::Atomic, false) => own_failure(doc).to_owned(),
        _ => format!(
            "{} A request refused before the operation ran (its input, its authentication) is \
             not stored: fix it and send it again with the same key.",
            own_failure(doc)
        ),
    }
}

/// Every status of [`cases`], once each, in order.
#[must_use]
pub fn statuses(doc: &OperationDoc) -> Vec<String> {
    let mut statuses: Vec<String> = cases(doc).into_iter().map(|c| c.status).collect();
    statuses.dedup();
    statuses
}

/// The operation's contract in one paragraph: the Markdown's summary, the OpenAPI
/// description and the handler's rustdoc.
///
/// ```
/// use idem_docs::{OperationDoc, contract};
/// use idem_spec::{OperationSpec, ScopeKind};
///
/// let doc = OperationDoc::from_spec(&OperationSpec::new("x:v1").scope(ScopeKind::Tenant));
/// assert!(contract::summary(&doc).starts_with("Safe to retry with the same `Idempotency-Key`"));
/// ```
///
/// A key taken from the request is named instead of the header: "Safe to retry with the same
/// key, taken from the `webhook-id` header (mode `atomic`, key required). …"
#[must_use]
pub fn summary(doc: &OperationDoc) -> String {
    let ttl = describe_duration(doc.ttl);
    let who = namespace(doc.scope);
    let how = if doc.mode == Mode::Staged {
        format!(
            " The key is reserved when the request arrives. {} An interrupted request (503) is \
             resumed by a retry with the same key, after its last recorded step.",
            staged_calls()
        )
    } else {
        " The operation's writes, its key and its response commit in one transaction.".to_owned()
    };
    let expired = match doc.on_expired {
        ExpiryPolicy::Gone => "the key is gone (410) and nothing runs",
        _ => "the key is free again and a request with it runs anew",
    };
    let key = if doc.key_from.is_empty() {
        format!("`{KEY_HEADER}`")
    } else {
        format!("key, taken from {}", key_source(doc))
    };
    format!(
        "Safe to retry with the same {key} (mode `{}`, key {}). Keys are unique per \
         {who} and kept for {ttl}.{how} A retry with the same key and the same request replays \
         the stored response (`{REPLAYED_HEADER}: true`); the same key with a different \
         request is refused (422); a retry while the first is still running is answered 409 \
         with `Retry-After`. {} After {ttl} {expired}.",
        doc.mode,
        key_word(doc),
        own_failure(doc),
    )
}
