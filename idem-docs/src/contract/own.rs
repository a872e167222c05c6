//! The operation's own responses: whether its failures are stored, and what a client does
//! with them.

use idem_spec::Mode;

use super::case::Case;
use crate::OperationDoc;

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

/// The operation's own failure responses ([`OperationDoc::responds`]), as it describes them.
pub(super) fn cases(doc: &OperationDoc) -> Vec<Case> {
    doc.responses
        .iter()
        .filter(|(status, _)| !(200..300).contains(status))
        .map(|(status, description)| Case {
            status: status.to_string(),
            problem: None,
            when: description.clone(),
            then: own_response(doc),
            retry_after: false,
            replayed: false,
        })
        .collect()
}
