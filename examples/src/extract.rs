//! Extractors whose rejections are problems (`application/problem+json`), like everything
//! else the examples answer.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use idem_runtime::Problem;
use serde::de::DeserializeOwned;

/// [`Path`] whose rejection is a `400` problem instead of axum's plain text, e.g. for a path
/// segment whose percent-encoding is not UTF-8 (`/orders/%FF`).
#[derive(Debug, Clone)]
pub struct ProblemPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ProblemPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Self(value)),
            Err(rejection) => {
                let status = rejection.status();
                let problem = if status.is_client_error() {
                    Problem::new(status, "urn:idem:example:invalid-path", "invalid path")
                } else {
                    // A route whose parameters do not match its extractor: a bug here.
                    tracing::error!(%rejection, "path parameters could not be extracted");
                    Problem::new(status, "urn:idem:example:internal", "internal error")
                };
                Err(problem.with_detail(rejection.body_text()))
            }
        }
    }
}
