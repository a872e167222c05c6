//! The operation's own responses and problems: whether its failures are stored, and what a
//! client does with them.

use idem_spec::Mode;

use super::case::Case;
use crate::{OperationDoc, ProblemDoc};

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

/// The operation's own failure responses ([`OperationDoc::responds`]) and problems
/// ([`OperationDoc::problem`]), as it describes them. A response whose description names a
/// problem's type (in backticks, as `#[utoipa::path]` descriptions do) is that problem's
/// row: listed once, with its type.
pub(super) fn cases(doc: &OperationDoc) -> Vec<Case> {
    let mut problems: Vec<&ProblemDoc> = doc.problems.iter().collect();
    let mut cases = Vec::new();
    for (status, description) in &doc.responses {
        if (200..300).contains(status) {
            continue;
        }
        let named = problems.iter().position(|p| {
            p.status == *status && description.contains(&format!("`{}`", p.type_uri))
        });
        match named.map(|at| problems.remove(at)) {
            Some(problem) => cases.push(problem_case(doc, problem, description.clone())),
            None => cases.push(Case {
                status: status.to_string(),
                problem: None,
                own_problem: None,
                when: description.clone(),
                then: own_response(doc),
                retry_after: false,
                replayed: false,
            }),
        }
    }
    cases.extend(problems.into_iter().map(|problem| {
        let when = format!(
            "The operation's own problem \"{}\", not one of idem's.",
            problem.title
        );
        problem_case(doc, problem, when)
    }));
    cases
}

/// One of the operation's own problems, under its status with its type.
fn problem_case(doc: &OperationDoc, problem: &ProblemDoc, when: String) -> Case {
    Case {
        status: problem.status.to_string(),
        problem: None,
        own_problem: Some(problem.type_uri.clone()),
        when,
        then: problem_advice(doc, problem),
        retry_after: problem.retry_after,
        replayed: false,
    }
}

/// What a client does with one of the operation's own problems: as with its other failures
/// ([`own_response`]), unless the problem carries `Retry-After`; then, for its type only,
/// wait and retry — with the same key when the failure is not stored, with a new one when
/// it is (a retry with the same key would replay it).
fn problem_advice(doc: &OperationDoc, problem: &ProblemDoc) -> String {
    let problem_type = &problem.type_uri;
    let stored = doc.mode == Mode::Staged
        || (doc.store_client_errors && (400..500).contains(&problem.status));
    match (problem.retry_after, stored) {
        (false, _) => own_response(doc),
        (true, false) => format!(
            "For this `type` only (`{problem_type}`): wait `Retry-After` seconds, then retry \
             with the same key and the same request; the operation runs again (this answer \
             is not stored)."
        ),
        (true, true) => format!(
            "For this `type` only (`{problem_type}`): this answer is stored with the key and \
             replayed to retries with it; wait `Retry-After` seconds, then send the operation \
             again with a new key."
        ),
    }
}
