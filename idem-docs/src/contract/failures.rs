//! The failures' cases: the operation failing unexpectedly or interrupted, the store failing
//! or busy, a stored answer that cannot be read.

use idem_spec::Mode;

use super::case::Case;
use crate::OperationDoc;

/// The failures' cases, in the order they are listed within a status.
pub(super) fn cases(doc: &OperationDoc) -> Vec<Case> {
    let mut cases = execution(doc);
    cases.extend(store());
    cases.extend(stored(doc));
    cases
}

/// The operation failing: `500 handler-failed`, and staged mode's `503 interrupted`.
fn execution(doc: &OperationDoc) -> Vec<Case> {
    if doc.mode != Mode::Staged {
        return vec![Case::problem(
            500,
            "urn:idem:problem:handler-failed",
            "The operation failed unexpectedly (a panic), or its response was too large to \
             store (`urn:idem:problem:response-too-large`). Its writes were rolled back and \
             nothing is stored."
                .to_owned(),
            "Retry with the same key: the operation runs again.",
        )];
    }
    vec![
        Case::problem(
            500,
            "urn:idem:problem:handler-failed",
            "The operation failed unexpectedly (a panic, a recorded step that cannot be read \
             back). The steps it completed stay recorded."
                .to_owned(),
            "Retry with the same key: the operation resumes after its last recorded step.",
        ),
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
    ]
}

/// The store failing or busy, and a commit whose outcome is unknown: retried after
/// `Retry-After`.
fn store() -> Vec<Case> {
    vec![
        Case::problem(
            503,
            "urn:idem:problem:store-unavailable",
            "The idempotency store failed before anything was committed.".to_owned(),
            "Retry with the same key after `Retry-After`.",
        )
        .retry_after(),
        Case::problem(
            503,
            "urn:idem:problem:store-busy",
            "The request waited too long for a lock another transaction held (a table locked \
             for maintenance, another writer); nothing was committed."
                .to_owned(),
            "Retry with the same key after `Retry-After`.",
        )
        .retry_after(),
        Case::problem(
            503,
            "urn:idem:problem:outcome-unknown",
            "The commit failed and its outcome is unknown.".to_owned(),
            "Retry with the same key after `Retry-After`: you get the stored response if the \
             commit happened, or a single new execution if it did not.",
        )
        .retry_after(),
    ]
}

/// A key's stored answer that cannot be read: `500 sealed-unreadable` (a server that seals
/// what it stores), `500 stored-unreadable` and `503 storage-key-unknown`.
fn stored(doc: &OperationDoc) -> Vec<Case> {
    let mut cases = Vec::new();
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
    cases
}
