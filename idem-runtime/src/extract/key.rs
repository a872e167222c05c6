//! The request's `Idempotency-Key` as an extractor.

use crate::error::Error;
use crate::key::{IdempotencyKey, KeyFormat};

/// The request's `Idempotency-Key`, for hand-written handlers: required, `400`
/// problem+json when it is missing, repeated or malformed (`Option<IdempotencyKey>` for an
/// optional key: `None` without the header, `400` when it is malformed). Read in the format a
/// [`KeyFormat`] in the request's extensions says (`.layer(Extension(KeyFormat::Strict))`),
/// else [`KeyFormat::Lenient`], the default of [`crate::Config::key_format`].
///
/// ```
/// use axum::routing::post;
/// use idem_runtime::IdempotencyKey;
///
/// async fn send(key: IdempotencyKey) -> String {
///     format!("key {key}")
/// }
/// let app: axum::Router = axum::Router::new().route("/send", post(send));
/// ```
impl<S: Send + Sync> axum::extract::FromRequestParts<S> for IdempotencyKey {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut http::request::Parts, _: &S) -> Result<Self, Error> {
        let format = parts
            .extensions
            .get::<KeyFormat>()
            .copied()
            .unwrap_or_default();
        Self::from_headers(&parts.headers, format)?.ok_or(Error::MissingKey)
    }
}

impl<S: Send + Sync> axum::extract::OptionalFromRequestParts<S> for IdempotencyKey {
    type Rejection = Error;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _: &S,
    ) -> Result<Option<Self>, Error> {
        let format = parts
            .extensions
            .get::<KeyFormat>()
            .copied()
            .unwrap_or_default();
        Ok(Self::from_headers(&parts.headers, format)?)
    }
}
