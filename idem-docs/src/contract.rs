//! The client's contract in words: every sentence the Markdown and the OpenAPI documents say
//! about an operation is written here, once, so that the two always agree.

use idem_spec::{ExpiryPolicy, InFlightPolicy, KeyRequirement, Mode, ScopeKind, describe_duration};

use crate::OperationDoc;

/// Name of the request header that carries the key.
pub const KEY_HEADER: &str = "Idempotency-Key";

/// Header idem sets on every replayed response.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// Shortest key, in characters (unquoted).
pub const KEY_MIN_LEN: usize = 1;

/// Longest key, in characters (unquoted), as the runtime's key parser accepts.
pub const KEY_MAX_LEN: usize = 255;

/// Media type of idem's error bodies.
pub const PROBLEM_MEDIA_TYPE: &str = "application/problem+json";

/// The key used in the documents' examples.
pub const EXAMPLE_KEY: &str = "8e03978e-40d5-43e8-bc93-6894a57f9324";

/// A pattern (ECMA-262, as OpenAPI uses) for the header's value: a structured-field string of
/// 1 to 255 visible ASCII characters, `"` and `\` escaped with `\`.
pub const KEY_PATTERN: &str = r#"^"([!#-\[\]-~]|\\["\\]){1,255}"$"#;

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

/// How the header is written, in one paragraph.
#[must_use]
pub fn key_syntax() -> String {
    format!(
        "`{KEY_HEADER}` is a structured-field string (IETF httpapi draft): the key in double \
         quotes, such as `{KEY_HEADER}: \"{EXAMPLE_KEY}\"`. A key is {KEY_MIN_LEN} to \
         {KEY_MAX_LEN} visible ASCII characters (`!` to `~`, no spaces); a `\"` or `\\` in it \
         is escaped with `\\`. Use a new random key (a UUID) for each intent, and the same key \
         for every retry of it. Servers in their default mode also accept the key without \
         quotes; those configured strictly refuse it (400)."
    )
}

/// Whether the key is required, in one sentence.
#[must_use]
pub fn key_requirement(doc: &OperationDoc) -> &'static str {
    match doc.key {
        KeyRequirement::Required => "Required: a request without it is refused (400).",
        _ => {
            "Optional: a request without it runs once, with no protection against being run \
             again by a retry."
        }
    }
}

/// The header parameter's description, for OpenAPI.
#[must_use]
pub fn key_parameter(doc: &OperationDoc) -> String {
    format!("{} {}", key_requirement(doc), key_syntax())
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

    if doc.key == KeyRequirement::Required {
        cases.push(Case::problem(
            400,
            "urn:idem:problem:missing-key",
            format!("The request has no `{KEY_HEADER}` header."),
            "Add a new key and send the request again; nothing ran.",
        ));
    }
    cases.push(Case::problem(
        400,
        "urn:idem:problem:invalid-key",
        format!("The `{KEY_HEADER}` header is not a valid key (see its syntax)."),
        "Fix the key; nothing ran.",
    ));
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
    cases.push(Case::problem(
        422,
        "urn:idem:problem:key-reused",
        format!(
            "The key was already used with a different request (another body, path or query{excluded})."
        ),
        "A client bug: a new request needs a new key. Do not retry; nothing ran.",
    ));
    cases.push(Case::problem(
        422,
        "urn:idem:problem:invalid-body",
        "The body does not pass the operation's validation.".to_owned(),
        "Fix the body; nothing ran and the key is still unused.",
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
                 after the recorded steps, and calls made are not made again.",
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
    for (status, description) in &doc.responses {
        if !(200..300).contains(status) {
            cases.push(Case {
                status: status.to_string(),
                problem: None,
                when: description.clone(),
                then: own_failure(doc).to_owned(),
                retry_after: false,
                replayed: false,
            });
        }
    }
    // Stable: cases of one status keep their order above.
    cases.sort_by(|a, b| a.status.cmp(&b.status));
    cases
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
#[must_use]
pub fn summary(doc: &OperationDoc) -> String {
    let ttl = describe_duration(doc.ttl);
    let who = namespace(doc.scope);
    let how = if doc.mode == Mode::Staged {
        " The key is reserved when the request arrives and the operation runs in recorded \
         steps, so that calls to other systems are never repeated; an interrupted request \
         (503) is resumed by a retry with the same key."
    } else {
        " The operation's writes, its key and its response commit in one transaction."
    };
    let expired = match doc.on_expired {
        ExpiryPolicy::Gone => "the key is gone (410) and nothing runs",
        _ => "the key is free again and a request with it runs anew",
    };
    format!(
        "Safe to retry with the same `{KEY_HEADER}` (mode `{}`, key {}). Keys are unique per \
         {who} and kept for {ttl}.{how} A retry with the same key and the same request replays \
         the stored response (`{REPLAYED_HEADER}: true`); the same key with a different \
         request is refused (422); a retry while the first is still running is answered 409 \
         with `Retry-After`. {} After {ttl} {expired}.",
        doc.mode,
        doc.key,
        own_failure(doc),
    )
}
