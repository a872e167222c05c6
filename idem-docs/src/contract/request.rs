//! The request's own cases: a body or a value idem cannot read, before anything runs.

use super::case::Case;

/// When `422 urn:idem:problem:invalid-body` is the answer: a JSON body that does not
/// deserialise into the type the operation reads, or that fails the `validator` or `garde`
/// rules of that type (the runtime's `Validated` and `Garde` extractors). An application's
/// own check of the body (the runtime's `Check`, run by `Checked`) answers the problem it
/// returns as is — the application's status and `type` — and the documents list it only
/// when the application documents it (with
/// [`OperationDoc::responds`](crate::OperationDoc::responds), or in its `utoipa`
/// document).
pub const INVALID_BODY: &str = "The body is JSON but not of the shape the operation reads (a \
    field missing or of the wrong type), or it breaks a validation rule declared with the \
    body's type. The application's own checks of the body do not answer this: they answer the \
    application's own problem, with the status and `type` it gives it (listed among the \
    operation's own responses when the application documents them).";

/// The request's cases, in the order they are listed within a status.
pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::problem(
            400,
            "urn:idem:problem:invalid-input",
            "The request has a value that cannot be compared with a retry's (a number that is \
             not finite, a map whose keys are not strings)."
                .to_owned(),
            "Fix the request; nothing ran.",
        ),
        Case::problem(
            400,
            "urn:idem:problem:malformed-json",
            "A JSON body is not valid JSON.".to_owned(),
            "Fix the body; nothing ran and the key is still unused.",
        ),
        Case::problem(
            400,
            "urn:idem:problem:body-unreadable",
            "The body could not be read (the connection broke while it was sent).".to_owned(),
            "Send the request again with the same key; nothing ran.",
        ),
        Case::problem(
            413,
            "urn:idem:problem:body-too-large",
            "The body is larger than the operation accepts.".to_owned(),
            "Send a smaller body; nothing ran and the key is still unused.",
        ),
        Case::problem(
            415,
            "urn:idem:problem:unsupported-media-type",
            "A JSON body is sent without `Content-Type: application/json`.".to_owned(),
            "Send it as `application/json`; nothing ran and the key is still unused.",
        ),
        Case::problem(
            422,
            "urn:idem:problem:invalid-body",
            INVALID_BODY.to_owned(),
            "Fix the body; nothing ran, and this request did not use the key.",
        ),
    ]
}
