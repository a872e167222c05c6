//! Standard Webhooks deliveries verified before the operation runs: their headers, how they
//! are checked, and the `401` of one that does not verify.

use super::case::Case;
use crate::OperationDoc;

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

/// The `401` of a delivery whose signature does not verify, for an operation that verifies
/// them ([`OperationDoc::verified_webhook`]).
pub(super) fn unverified(doc: &OperationDoc) -> Option<Case> {
    doc.verified_webhook.then(|| {
        Case::problem(
            401,
            WEBHOOK_UNVERIFIED,
            "The delivery's Standard Webhooks signature is missing or wrong, or its \
             `webhook-timestamp` is more than 5 minutes from the server's clock."
                .to_owned(),
            "Nothing ran and the key is still unused: send the delivery again, signed with \
             the shared secret and a current timestamp.",
        )
    })
}
