//! The operation's contract in sentences: its summary, its window, its headers.

use idem_spec::{ExpiryPolicy, Mode, ScopeKind, describe_duration};

use super::key::{KEY_HEADER, key_source, key_word};
use super::own::own_failure;
use super::protocol::IN_FLIGHT;
use crate::OperationDoc;

/// Header idem sets on every replayed response.
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// The word for whose keys share a namespace: `tenant`, `user`, `operation`.
#[must_use]
pub fn namespace(scope: ScopeKind) -> &'static str {
    match scope {
        ScopeKind::Tenant => "tenant",
        ScopeKind::User => "user",
        _ => "operation",
    }
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
         `{IN_FLIGHT}` with `Retry-After`. {} After {ttl} {expired}.",
        doc.mode,
        key_word(doc),
        own_failure(doc),
    )
}

/// How long a key is kept, and from when, as the runtime counts it: the one wording of the
/// window ([`window`]) and of the `410` of an expired key.
///
/// An atomic operation's key expires its TTL after the arrival of the request that ran the
/// operation (its response is stored with the key when that request ends); a staged one's,
/// its TTL after the operation completes (while it runs or waits to be resumed it is kept,
/// whatever the time).
pub(super) fn kept_for(doc: &OperationDoc) -> String {
    let ttl = describe_duration(doc.ttl);
    match doc.mode {
        Mode::Staged => format!("kept for {ttl} after the operation completes"),
        _ => format!("kept for {ttl} from the arrival of the request that ran the operation"),
    }
}

/// What happens when the key's window lapses.
#[must_use]
pub fn window(doc: &OperationDoc) -> String {
    let ttl = describe_duration(doc.ttl);
    let kept = match doc.mode {
        Mode::Staged => format!(
            "A key is {} (while it runs or waits to be resumed, whatever the time).",
            kept_for(doc)
        ),
        _ => format!("A key is {}.", kept_for(doc)),
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
    "`Retry-After` (whole seconds) comes with the problems of idem that a retry resolves: \
     `urn:idem:problem:in-flight` (409), and `urn:idem:problem:interrupted`, \
     `urn:idem:problem:store-unavailable`, `urn:idem:problem:store-busy`, \
     `urn:idem:problem:outcome-unknown` and `urn:idem:problem:storage-key-unknown` (503). For \
     these `type`s only, wait that long, then send the same request with the same key. A \
     response of the same status with another `type` is the operation's own: do what the \
     operation documents for it."
}
