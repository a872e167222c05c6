//! The key protocol's cases: a first run and its replay, a key missing or invalid, a retry
//! while the first runs, an expired key, a key reused with another request.

use idem_spec::{ExpiryPolicy, InFlightPolicy, Mode, describe_duration};

use super::case::Case;
use super::key::{KEY_HEADER, KEY_MAX_LEN, key_part, key_required, key_source};
use super::words::{REPLAYED_HEADER, kept_for};
use crate::{KeyPartDoc, OperationDoc};

/// The problem type of a retry while a request with the same key is still running (`409`),
/// as the runtime answers it: the one `409` a client retries on idem's advice.
pub const IN_FLIGHT: &str = "urn:idem:problem:in-flight";

/// The key protocol's cases, in the order they are listed within a status.
pub(super) fn cases(doc: &OperationDoc) -> Vec<Case> {
    let ttl = describe_duration(doc.ttl);
    let mut cases = success(doc, &ttl);
    if key_required(doc) {
        cases.push(missing_key(doc));
    }
    cases.push(invalid_key(doc));
    cases.push(in_flight(doc));
    if doc.mode == Mode::Staged {
        cases.push(taken_over(doc));
    }
    if doc.on_expired == ExpiryPolicy::Gone {
        cases.push(Case::problem(
            410,
            "urn:idem:problem:key-expired",
            format!(
                "The key was {}, and that time is over; its record is gone.",
                kept_for(doc)
            ),
            "Do not retry with this key. Check whether the first request took effect before \
             sending the operation again with a new key.",
        ));
    }
    cases.push(key_reused(doc));
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
            own_problem: None,
            when: format!("{description}{first}"),
            then: format!("Done. Retries with the same key within {ttl} replay this response."),
            retry_after: false,
            replayed: false,
        });
        cases.push(Case {
            status,
            problem: None,
            own_problem: None,
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
        IN_FLIGHT,
        when.to_owned(),
        &format!(
            "For this `type` only (`{IN_FLIGHT}`): wait `Retry-After` seconds, then retry with \
             the same key and the same request."
        ),
    )
    .retry_after()
}

/// Staged mode's `409` of an attempt taken over after it stopped renewing its lease.
fn taken_over(doc: &OperationDoc) -> Case {
    Case::problem(
        409,
        IN_FLIGHT,
        format!(
            "This request's attempt stopped renewing its lease of {} and was taken \
             over by a retry or the server's reconciler.",
            describe_duration(doc.lease)
        ),
        &format!(
            "For this `type` only (`{IN_FLIGHT}`): retry with the same key and the same \
             request, and you get the outcome of the attempt that took over."
        ),
    )
    .retry_after()
}

/// `422 key-reused`: the key was used with another request; what the problem names.
fn key_reused(doc: &OperationDoc) -> Case {
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
    Case::problem(
        422,
        "urn:idem:problem:key-reused",
        format!(
            "The key was already used with a different request (another body, path or query{excluded}).{named}"
        ),
        "A client bug: a new request needs a new key. Do not retry; nothing ran.",
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
