//! RFC 9457 problem details: every error idem answers is `application/problem+json`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde::Serialize;

use crate::record::Record;

/// Media type of problem details.
pub(crate) const CONTENT_TYPE: &str = "application/problem+json";

/// An RFC 9457 problem: `{"type", "title", "status", "detail"}`.
///
/// idem's own problem types are URNs under `urn:idem:problem:` (listed in the crate docs);
/// applications can use any URI for theirs.
///
/// ```
/// use axum::http::StatusCode;
/// use idem_runtime::Problem;
///
/// let problem = Problem::new(StatusCode::UNPROCESSABLE_ENTITY, "urn:shop:problem:sku", "invalid sku")
///     .with_detail("`sku` must match ^[A-Z0-9-]{1,32}$");
/// assert_eq!(problem.status(), StatusCode::UNPROCESSABLE_ENTITY);
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    #[serde(rename = "type")]
    type_uri: String,
    title: String,
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    /// A `422` key-reused's fields that differ ([`crate::fields`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    mismatch: Option<Box<crate::fields::Mismatch>>,
    #[serde(skip)]
    retry_after: Option<Duration>,
    /// The body of a request one of idem's body extractors refused, as JSON: never answered,
    /// kept beside the answer for the key check that comes before it
    /// ([`crate::handler::refused`]).
    #[serde(skip)]
    refused_body: Option<Arc<serde_json::Value>>,
}

/// The JSON body of a request idem's body extractor refused, in the refusal's extensions.
#[derive(Debug, Clone)]
pub(crate) struct RefusedBody(pub(crate) Arc<serde_json::Value>);

impl Problem {
    /// A problem with a type URI and a short, fixed title: any string, a literal or one made
    /// for the occasion (`&format!(…)`).
    ///
    /// ```
    /// use axum::http::StatusCode;
    /// use idem_runtime::Problem;
    ///
    /// let shop = "shop";
    /// let problem = Problem::new(StatusCode::CONFLICT, &format!("urn:{shop}:problem:sold-out"), "sold out");
    /// assert_eq!(problem.type_uri(), "urn:shop:problem:sold-out");
    /// ```
    #[must_use]
    pub fn new(status: StatusCode, type_uri: impl Into<String>, title: impl Into<String>) -> Self {
        Self {
            type_uri: type_uri.into(),
            title: title.into(),
            status: status.as_u16(),
            detail: None,
            mismatch: None,
            retry_after: None,
            refused_body: None,
        }
    }

    /// Adds the member `mismatch`: the fields a request under a reused key changed, added or
    /// removed (names only, never values).
    #[must_use]
    pub fn with_mismatch(mut self, mismatch: crate::fields::Mismatch) -> Self {
        self.mismatch = Some(Box::new(mismatch));
        self
    }

    /// The member `mismatch`, if any.
    #[must_use]
    pub fn mismatch(&self) -> Option<&crate::fields::Mismatch> {
        self.mismatch.as_deref()
    }

    /// Adds the occurrence-specific explanation.
    #[must_use]
    pub fn with_detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Adds a `Retry-After` header (whole seconds, at least 1).
    #[must_use]
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// The answer to a database error of the application's own queries, in a handler or
    /// outside one: `503` `urn:idem:problem:database-unavailable` with `Retry-After` for what
    /// passes (the connection lost or none free, a lock or statement timeout, a
    /// serialization failure or deadlock, SQLite's busy database), `500`
    /// `urn:idem:problem:database-error` for anything else. No database text reaches the
    /// client: log the error first.
    ///
    /// In an idempotent handler either rolls back with the key, so a retry with the same
    /// key runs the handler again.
    ///
    /// ```
    /// use axum::http::StatusCode;
    /// use idem_runtime::Problem;
    ///
    /// let problem = Problem::from_database(&sqlx::Error::PoolTimedOut);
    /// assert_eq!(problem.status(), StatusCode::SERVICE_UNAVAILABLE);
    /// let problem = Problem::from_database(&sqlx::Error::RowNotFound);
    /// assert_eq!(problem.status(), StatusCode::INTERNAL_SERVER_ERROR);
    /// ```
    #[must_use]
    pub fn from_database(error: &sqlx::Error) -> Self {
        if is_transient(error) {
            Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "urn:idem:problem:database-unavailable",
                "database temporarily unavailable",
            )
            .with_detail("nothing was committed; retry (with the same Idempotency-Key)")
            .with_retry_after(Duration::from_secs(1))
        } else {
            Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "urn:idem:problem:database-error",
                "database error",
            )
        }
    }

    /// The refusal of `body` by a body extractor: the body is kept (when it is JSON) for the
    /// key check that comes first.
    #[must_use]
    pub(crate) fn refusing(mut self, body: &[u8]) -> Self {
        self.refused_body = serde_json::from_slice(body).ok().map(Arc::new);
        self
    }

    /// The HTTP status.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The type URI.
    #[must_use]
    pub fn type_uri(&self) -> &str {
        &self.type_uri
    }

    /// The detail, if any.
    #[must_use]
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.title)?;
        if let Some(detail) = &self.detail {
            write!(f, ": {detail}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problem {}

impl IntoResponse for Problem {
    fn into_response(mut self) -> Response {
        let refused = self.refused_body.take();
        let mut response = Record::from(self).into_response();
        if let Some(body) = refused {
            response.extensions_mut().insert(RefusedBody(body));
        }
        response
    }
}

/// The problem as a response to store: a staged step's final failure
/// ([`StepError::permanent`](crate::staged::StepError::permanent)), say.
impl From<Problem> for Record {
    fn from(problem: Problem) -> Self {
        let body = serde_json::to_vec(&problem).unwrap_or_default();
        let mut headers = http::HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
        if let Some(after) = problem.retry_after {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from(after.as_secs().max(1)),
            );
        }
        Self {
            status: problem.status(),
            headers,
            body: body.into(),
        }
    }
}

/// Whether a database error is worth retrying as it is ([`Problem::from_database`]).
fn is_transient(error: &sqlx::Error) -> bool {
    use sqlx::Error as E;
    match error {
        E::Io(_) | E::Tls(_) | E::Protocol(_) | E::PoolTimedOut | E::PoolClosed => true,
        E::WorkerCrashed => true,
        E::Database(db) => {
            let code = db.code().unwrap_or_default();
            // PostgreSQL: lock_not_available, query_canceled, serialization_failure,
            // deadlock_detected, too_many_connections, connection exceptions, shutdowns.
            let postgres = matches!(&*code, "55P03" | "57014" | "40001" | "40P01" | "53300")
                || code.starts_with("08")
                || code.starts_with("57P");
            // SQLite: SQLITE_BUSY (5), SQLITE_LOCKED (6) and their extended codes.
            // ("database is locked" is SQLITE_BUSY's text: its code says so.)
            let sqlite = code.parse::<i32>().is_ok_and(|c| matches!(c & 0xff, 5 | 6));
            postgres || sqlite
        }
        _ => false,
    }
}

/// `Problem` in an application's `utoipa` document: the `Problem` schema of idem's own
/// documents ([`idem_docs::problem_schema`]), so that `body = Problem` in `#[utoipa::path]`
/// and idem's merged contract name one schema.
///
/// ```
/// use utoipa::ToSchema;
/// use idem_runtime::Problem;
///
/// assert_eq!(Problem::name(), "Problem");
/// let schema = serde_json::to_value(<Problem as utoipa::PartialSchema>::schema()).unwrap();
/// assert_eq!(schema, idem_runtime::docs::problem_schema());
/// ```
#[cfg(feature = "utoipa")]
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
impl utoipa::PartialSchema for Problem {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        // A fixed document of utoipa's own shape: it always reads back.
        serde_json::from_value(idem_docs::problem_schema()).unwrap_or_default()
    }
}

#[cfg(feature = "utoipa")]
#[cfg_attr(docsrs, doc(cfg(feature = "utoipa")))]
impl utoipa::ToSchema for Problem {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("Problem")
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use super::*;

    /// A type URI or a title made for the occasion is taken as well as a literal.
    #[test]
    #[allow(
        clippy::needless_borrows_for_generic_args,
        reason = "the call as applications write it"
    )]
    fn any_string_makes_a_problem() {
        let shop = String::from("shop");
        let made = Problem::new(
            StatusCode::CONFLICT,
            &format!("urn:{shop}:problem:sold-out"),
            &format!("{shop}: sold out"),
        );
        assert_eq!(made.type_uri(), "urn:shop:problem:sold-out");
        assert_eq!(made.to_string(), "409 shop: sold out");
        let owned = Problem::new(StatusCode::GONE, shop.clone(), Cow::Borrowed("gone"));
        let borrowed = Problem::new(StatusCode::GONE, shop.as_str(), String::from("gone"))
            .with_detail(&format!("{shop} left"));
        assert_eq!(owned.type_uri(), borrowed.type_uri());
        assert_eq!(borrowed.detail(), Some("shop left"));
    }
}
