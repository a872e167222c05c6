//! [`ProblemDoc`]: a problem the application itself answers, as the documents list it.

use serde::{Deserialize, Serialize};

/// A problem the operation itself answers (a version conflict, an invalid transition), not
/// one of idem's: its status, its problem `type`, its `title`, and whether it carries
/// `Retry-After`. Declared with the attribute's `problems = [problem(409, "urn:…", "…")]`,
/// or added with [`OperationDoc::problem`](crate::OperationDoc::problem).
///
/// The documents list it under its status with its type, so that a client tells it from
/// idem's problems of the same status, and give retry advice for it only when it carries
/// `Retry-After`.
///
/// Serialised as `{"status": 409, "type": "urn:…", "title": "…"}`, with
/// `"retry_after": true` when it carries the header.
///
/// ```
/// use idem_docs::ProblemDoc;
///
/// let problem = ProblemDoc::new(503, "urn:example:stock-down", "stock service down").retry_after();
/// let json = serde_json::to_value(&problem).unwrap();
/// assert_eq!(json["type"], "urn:example:stock-down");
/// assert_eq!(json["retry_after"], true);
/// assert_eq!(serde_json::from_value::<ProblemDoc>(json).unwrap(), problem);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ProblemDoc {
    /// The status it is answered with (`409`).
    pub status: u16,
    /// Its problem `type`, a URI (`urn:example:version-conflict`).
    #[serde(rename = "type")]
    pub type_uri: String,
    /// Its `title`, a short, fixed summary of the type.
    pub title: String,
    /// It carries `Retry-After`: the documents tell the client to wait that long and retry.
    /// Serialised only when set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retry_after: bool,
}

impl ProblemDoc {
    /// A problem of `status` with its `type` and `title`, without `Retry-After`.
    #[must_use]
    pub fn new(status: u16, type_uri: &str, title: &str) -> Self {
        Self {
            status,
            type_uri: type_uri.to_owned(),
            title: title.to_owned(),
            retry_after: false,
        }
    }

    /// The same, carrying `Retry-After`.
    #[must_use]
    pub fn retry_after(mut self) -> Self {
        self.retry_after = true;
        self
    }
}
