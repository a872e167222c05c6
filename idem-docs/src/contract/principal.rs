//! The principal's cases: tenant and user scopes, whose keys need an authenticated owner.

use idem_spec::ScopeKind;

use super::case::Case;
use super::words::namespace;
use crate::OperationDoc;

/// `401` of the application's authentication and `403 no-scope`, for tenant and user
/// scopes; nothing for a global one.
pub(super) fn cases(doc: &OperationDoc) -> Vec<Case> {
    if doc.scope == ScopeKind::Global {
        return Vec::new();
    }
    let who = namespace(doc.scope);
    vec![
        Case {
            status: "401".to_owned(),
            problem: None,
            own_problem: None,
            when: format!(
                "The application's authentication refused the request, before any key was \
                 looked at (keys are unique per {who})."
            ),
            then: format!(
                "Authenticate, then send the request with the same key, as the same {who}."
            ),
            retry_after: false,
            replayed: false,
        },
        Case::problem(
            403,
            "urn:idem:problem:no-scope",
            format!("The authenticated principal has no {who}, which this operation's keys need."),
            "Call as a principal that has one; nothing ran.",
        ),
    ]
}
