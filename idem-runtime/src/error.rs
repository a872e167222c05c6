//! What can go wrong around an idempotent operation, and the problem each answers.

use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::StatusCode;

use crate::key::KeyError;
use crate::problem::Problem;
use crate::store::SealError;

/// Why idem answered instead of the handler.
///
/// Every variant maps to one RFC 9457 problem ([`Error::problem`]); the type URIs are stable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operation requires a key and the request has none. `400`.
    #[error("this operation requires an Idempotency-Key header")]
    MissingKey,
    /// The key is taken from the request (`key = header(…)`, `body(…)`) and a part of it is
    /// missing or cannot be a key. `400`, as [`Error::MissingKey`] (`missing`) or
    /// [`Error::InvalidKey`].
    #[error("the idempotency key is {from}: {reason}")]
    KeyFromRequest {
        /// Where the key comes from.
        from: crate::spec::KeySource,
        /// Whether the part is absent (rather than unusable).
        missing: bool,
        /// What is wrong.
        reason: &'static str,
    },
    /// The key is malformed. `400`.
    #[error("invalid Idempotency-Key: {0}")]
    InvalidKey(#[from] KeyError),
    /// The scope needs a tenant or user that the authenticated principal does not have. `403`.
    #[error("the authenticated principal has no {0}, which this operation's scope needs")]
    NoScope(&'static str),
    /// The input could not be written canonically for the fingerprint (a float that is not
    /// a number, a map whose keys are not strings). `400`.
    #[error("the request input cannot be fingerprinted: {0}")]
    Input(#[source] crate::fingerprint::FingerprintError),
    /// Same key, different request. `422`; nothing ran. With the fields that differ, where
    /// the key's row keeps their digests ([`crate::fields`]).
    #[error("this Idempotency-Key was already used with a different request")]
    Mismatch(Option<Box<crate::fields::Mismatch>>),
    /// A request with the same key is still running. `409` with `Retry-After`.
    #[error("a request with this Idempotency-Key is still in progress")]
    InFlight {
        /// When to try again.
        retry_after: Duration,
    },
    /// The key expired and the operation's policy is `gone`. `410`.
    #[error("this Idempotency-Key has expired")]
    Expired,
    /// The handler's response body exceeded the configured limit; everything rolled back. `500`.
    #[error("the response is larger than the {limit} bytes that can be stored")]
    ResponseTooLarge {
        /// The configured limit, in bytes.
        limit: usize,
    },
    /// The handler panicked; everything rolled back. `500`.
    #[error("the handler panicked; nothing was committed")]
    Panicked,
    /// COMMIT failed and its outcome is unknown. `503` with `Retry-After`: retry with the
    /// same key, which replays if the commit happened and executes if it did not.
    #[error("the outcome of the commit is unknown: {0}")]
    CommitUnknown(#[source] sqlx::Error),
    /// The store failed before anything was committed: unreachable, no connection within
    /// [`Config::acquire_timeout`](crate::Config::acquire_timeout), or it refused a
    /// statement. `503` with `Retry-After`.
    ///
    /// A stored value that does not open ([`SealError`] in [`sqlx::Error::Decode`],
    /// [`Config::storage_keys`](crate::Config::storage_keys)) answers its own problem, and
    /// the row is left as it is: sealed under a storage key this server does not have,
    /// `503` `storage-key-unknown` with `Retry-After` (a server given the key answers);
    /// failing its check (changed, or moved from another row), `500` `sealed-unreadable`; a
    /// clear stored answer that is not what idem writes (edited by hand), `500`
    /// `stored-unreadable`.
    #[error("the idempotency store failed: {0}")]
    Store(#[source] sqlx::Error),
    /// A lock wait ran out on something other than the key (a table locked from outside,
    /// SQLite's write lock held by another writer, a statement timeout): nothing was
    /// committed. `503` with `Retry-After`.
    #[error("the idempotency store is busy: {0}")]
    StoreBusy(#[source] sqlx::Error),
    /// Staged mode: the operation stopped midway on a failure worth retrying (a provider
    /// that timed out, say); its recorded steps stand and a retry with the same key resumes
    /// after them. `503` with `Retry-After`.
    #[error("the operation was interrupted and can be resumed: {reason}")]
    Interrupted {
        /// What interrupted it (for logs; clients get a generic detail).
        reason: String,
        /// When to try again.
        retry_after: Duration,
    },
    /// Staged mode: a step's recorded result or the stored request could not be written or
    /// read back as its type. `500`.
    #[error("a staged operation's recorded state could not be (de)serialized: {0}")]
    Journal(#[source] serde_json::Error),
    /// A fault injected by a test (feature `failpoints`). `500`.
    #[error("fault injected at {0}")]
    Injected(&'static str),
}

const RETRY_SOON: Duration = Duration::from_secs(1);

impl Error {
    /// The stored value that did not open, if that is what this is ([`Error::Store`]).
    fn sealed(&self) -> Option<&SealError> {
        match self {
            Self::Store(error) => SealError::of(error),
            _ => None,
        }
    }

    /// The HTTP status this error answers with.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self.sealed() {
            Some(SealError::UnknownKey(_)) => return StatusCode::SERVICE_UNAVAILABLE,
            Some(_) => return StatusCode::INTERNAL_SERVER_ERROR,
            None => {}
        }
        match self {
            Self::MissingKey
            | Self::InvalidKey(_)
            | Self::KeyFromRequest { .. }
            | Self::Input(_) => StatusCode::BAD_REQUEST,
            Self::NoScope(_) => StatusCode::FORBIDDEN,
            Self::Mismatch(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::InFlight { .. } => StatusCode::CONFLICT,
            Self::Expired => StatusCode::GONE,
            Self::ResponseTooLarge { .. }
            | Self::Panicked
            | Self::Injected(_)
            | Self::Journal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::CommitUnknown(_)
            | Self::Store(_)
            | Self::StoreBusy(_)
            | Self::Interrupted { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The problem details this error answers with.
    #[must_use]
    pub fn problem(&self) -> Problem {
        if let Some(sealed) = self.sealed() {
            return sealed_problem(self.status(), sealed);
        }
        let (type_uri, title) = self.kind();
        let problem = Problem::new(self.status(), type_uri, title).with_detail(self.detail());
        match self {
            Self::InFlight { retry_after } | Self::Interrupted { retry_after, .. } => {
                problem.with_retry_after(*retry_after)
            }
            Self::CommitUnknown(_) | Self::Store(_) | Self::StoreBusy(_) => {
                problem.with_retry_after(RETRY_SOON)
            }
            Self::Mismatch(Some(mismatch)) => problem.with_mismatch((**mismatch).clone()),
            _ => problem,
        }
    }

    /// The problem type URI and title of an error that is not a sealed value's.
    fn kind(&self) -> (&'static str, &'static str) {
        match self {
            Self::MissingKey => ("urn:idem:problem:missing-key", "Idempotency-Key required"),
            Self::InvalidKey(_) => ("urn:idem:problem:invalid-key", "invalid Idempotency-Key"),
            Self::KeyFromRequest { missing: true, .. } => {
                ("urn:idem:problem:missing-key", "idempotency key required")
            }
            Self::KeyFromRequest { .. } => {
                ("urn:idem:problem:invalid-key", "invalid idempotency key")
            }
            Self::NoScope(_) => ("urn:idem:problem:no-scope", "no scope for this key"),
            Self::Input(_) => ("urn:idem:problem:invalid-input", "invalid request input"),
            Self::Mismatch(_) => (
                "urn:idem:problem:key-reused",
                "Idempotency-Key reused with a different request",
            ),
            Self::InFlight { .. } => (
                "urn:idem:problem:in-flight",
                "request with this Idempotency-Key in progress",
            ),
            Self::Expired => ("urn:idem:problem:key-expired", "Idempotency-Key expired"),
            Self::ResponseTooLarge { .. } => (
                "urn:idem:problem:response-too-large",
                "response too large to store",
            ),
            Self::Panicked | Self::Injected(_) | Self::Journal(_) => {
                ("urn:idem:problem:handler-failed", "the operation failed")
            }
            Self::Interrupted { .. } => (
                "urn:idem:problem:interrupted",
                "interrupted: retry with the same Idempotency-Key to resume",
            ),
            Self::CommitUnknown(_) => (
                "urn:idem:problem:outcome-unknown",
                "outcome unknown: retry with the same Idempotency-Key",
            ),
            Self::Store(_) => (
                "urn:idem:problem:store-unavailable",
                "idempotency store unavailable",
            ),
            Self::StoreBusy(_) => ("urn:idem:problem:store-busy", "idempotency store busy"),
        }
    }

    /// The problem's detail: never a database's text (that is logged instead).
    fn detail(&self) -> String {
        match self {
            Self::CommitUnknown(_) => {
                "the commit may or may not have happened; retry with the same Idempotency-Key \
                 and you get the stored response or a single new execution"
                    .to_owned()
            }
            Self::Store(_) => {
                "nothing was committed; retry with the same Idempotency-Key".to_owned()
            }
            Self::StoreBusy(_) => {
                "the request waited too long for a lock held by another transaction; nothing \
                 was committed; retry with the same Idempotency-Key"
                    .to_owned()
            }
            Self::Interrupted { .. } => {
                "the operation stopped midway on a temporary failure; what it completed is \
                 recorded, and a retry with the same Idempotency-Key resumes after it"
                    .to_owned()
            }
            Self::Journal(_) => "the operation's recorded state could not be read".to_owned(),
            Self::Input(_) => {
                "the request input has a value that cannot be compared with a retry's (a \
                 number that is not finite, a map whose keys are not strings)"
                    .to_owned()
            }
            other => other.to_string(),
        }
    }
}

/// [`Error::problem`] of a stored value that did not open: it names the storage key, never
/// a value.
fn sealed_problem(status: StatusCode, sealed: &SealError) -> Problem {
    match sealed {
        SealError::UnknownKey(key) => Problem::new(
            status,
            "urn:idem:problem:storage-key-unknown",
            "stored answer sealed under an unknown storage key",
        )
        .with_detail(format!(
            "this Idempotency-Key's stored request or answer is sealed under storage key \
             `{key}`, which this server was not given; nothing was changed; retry with the \
             same Idempotency-Key"
        ))
        .with_retry_after(RETRY_SOON),
        SealError::Unreadable(column) => Problem::new(
            status,
            "urn:idem:problem:stored-unreadable",
            "stored answer unreadable",
        )
        .with_detail(format!(
            "this Idempotency-Key's stored answer (its `{column}`) is not what idem writes: it \
             was changed outside idem; it is never replayed, and nothing was changed"
        )),
        _ => Problem::new(
            status,
            "urn:idem:problem:sealed-unreadable",
            "stored answer unreadable",
        )
        .with_detail(format!(
            "this Idempotency-Key's stored request or answer, sealed under storage key \
             `{}`, fails its integrity check; it is never replayed, and nothing was changed",
            sealed.key().unwrap_or_default()
        )),
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        match &self {
            Self::CommitUnknown(_) | Self::Store(_) | Self::Panicked | Self::Injected(_) => {
                tracing::error!(error = %self, "idempotent operation failed");
            }
            Self::StoreBusy(_) => tracing::warn!(error = %self, "idempotent request shed"),
            _ => tracing::debug!(error = %self, "idempotent request refused"),
        }
        self.problem().into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(error: Error) -> (StatusCode, http::HeaderMap, serde_json::Value) {
        let response = error.problem().into_response();
        let status = response.status();
        let headers = response.headers().clone();
        let body = futures_util::FutureExt::now_or_never(axum::body::to_bytes(
            response.into_body(),
            usize::MAX,
        ))
        .and_then(Result::ok)
        .unwrap_or_default();
        (
            status,
            headers,
            serde_json::from_slice(&body).unwrap_or_default(),
        )
    }

    #[test]
    fn in_flight_is_409_with_retry_after() {
        let (status, headers, body) = parts(Error::InFlight {
            retry_after: Duration::from_secs(3),
        });
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(headers[http::header::RETRY_AFTER], "3");
        assert_eq!(
            headers[http::header::CONTENT_TYPE],
            "application/problem+json"
        );
        assert_eq!(body["type"], "urn:idem:problem:in-flight");
        assert_eq!(body["status"], 409);
    }

    #[test]
    fn unknown_commit_is_503_with_retry_after_and_no_database_text() {
        let (status, headers, body) = parts(Error::CommitUnknown(sqlx::Error::PoolClosed));
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(headers[http::header::RETRY_AFTER], "1");
        let detail = body["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("same Idempotency-Key"), "{detail}");
        assert!(!detail.contains("pool"), "{detail}");
    }

    #[test]
    fn every_error_is_a_problem_with_its_status() {
        let errors = [
            (Error::MissingKey, 400),
            (Error::InvalidKey(KeyError::TooLong), 400),
            (Error::NoScope("tenant"), 403),
            (Error::Mismatch(None), 422),
            (Error::Expired, 410),
            (Error::ResponseTooLarge { limit: 1 }, 500),
            (Error::Panicked, 500),
            (Error::Store(sqlx::Error::PoolTimedOut), 503),
            (Error::StoreBusy(sqlx::Error::PoolTimedOut), 503),
        ];
        for (error, expected) in errors {
            let (status, headers, body) = parts(error);
            assert_eq!(status.as_u16(), expected);
            assert_eq!(
                headers[http::header::CONTENT_TYPE],
                "application/problem+json"
            );
            assert_eq!(body["status"], expected);
            assert!(
                body["type"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("urn:idem:problem:"))
            );
        }
    }
}
