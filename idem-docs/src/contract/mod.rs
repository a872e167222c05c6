//! The client's contract in words: every sentence the Markdown and the OpenAPI documents say
//! about an operation is written here, once, so that the two always agree.
//!
//! Each situation a request can be in is a [`Case`]; [`cases`] lists an operation's, gathered
//! by concern: the key protocol's (a first run, its replay, the key missing, invalid, in
//! flight, expired or reused), the request's (a body idem cannot read), the principal's, a
//! verified webhook's, the failures' (of the operation, of the store, of a stored answer),
//! and the operation's own responses.

mod case;
mod failures;
mod key;
mod own;
mod principal;
mod protocol;
mod request;
mod webhook;
mod words;

pub use case::{Case, IDEM_PROBLEM_PREFIX, PROBLEM_MEDIA_TYPE};
pub use key::{
    EXAMPLE_KEY, KEY_DIGEST_PREFIX, KEY_HEADER, KEY_MAX_LEN, KEY_MIN_LEN, KEY_PATTERN,
    KEY_STORED_MAX_LEN, LENIENT_KEY_PATTERN, key_format, key_parameter, key_part, key_pattern,
    key_requirement, key_source, key_syntax, send_keys,
};
pub(crate) use key::{example_key, example_values, key_required, key_word};
pub use own::own_failure;
pub use protocol::IN_FLIGHT;
pub use request::INVALID_BODY;
pub use webhook::{WEBHOOK_HEADERS, WEBHOOK_UNVERIFIED, webhook_verification};
pub use words::{
    REPLAYED_HEADER, namespace, replayed_header, retry_after_header, staged_calls, summary, window,
};

use crate::OperationDoc;

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
    let mut cases = protocol::cases(doc);
    cases.extend(request::cases());
    cases.extend(principal::cases(doc));
    cases.extend(webhook::unverified(doc));
    cases.extend(failures::cases(doc));
    cases.extend(own::cases(doc));
    // Stable: cases of one status keep their order above.
    cases.sort_by(|a, b| a.status.cmp(&b.status));
    cases
}

/// Every status of [`cases`], once each, in order.
#[must_use]
pub fn statuses(doc: &OperationDoc) -> Vec<String> {
    let mut statuses: Vec<String> = cases(doc).into_iter().map(|c| c.status).collect();
    statuses.dedup();
    statuses
}
