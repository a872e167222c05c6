//! Webhooks signed per [Standard Webhooks](https://www.standardwebhooks.com/): verifying the
//! ones a provider sends ([`Verified`]) and signing the ones the outbox sends
//! ([`WebhookSecret::sign`], used by `outbox::WebhookSink::signing_secret`).
//!
//! A Standard Webhooks delivery carries three headers:
//!
//! - `webhook-id`: the event's id, the same on every delivery of it — the receiver's
//!   idempotency key (`#[idempotent(key = header("webhook-id"))]`);
//! - `webhook-timestamp`: when it was sent, in seconds since the Unix epoch;
//! - `webhook-signature`: `v1,<base64 HMAC-SHA256>` of `"{webhook-id}.{webhook-timestamp}.{body}"`
//!   with the shared secret (`whsec_` and the key in base64), several space-separated while a
//!   secret is rotated.
//!
//! The signatures are computed and compared by the `standardwebhooks` crate, the format's
//! reference implementation (constant-time comparison, a tolerance of 5 minutes either way
//! on the timestamp, which refuses replays of old deliveries).
//!
//! A receiver that applies each event once:
//!
//! ```
//! use axum::extract::FromRef;
//! use idem_runtime::webhooks::{Verified, WebhookSecret};
//! use idem_runtime::{Idem, IdemState, JsonBody, idempotent};
//! use idem_runtime::sqlx::{Sqlite, Transaction};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Clone)]
//! struct AppState {
//!     idem: Idem<Sqlite>,
//!     provider: WebhookSecret,
//! }
//!
//! impl IdemState<Sqlite> for AppState {
//!     type Principal = idem_runtime::Anonymous;
//!     fn idem(&self) -> &Idem<Sqlite> {
//!         &self.idem
//!     }
//! }
//!
//! impl FromRef<AppState> for WebhookSecret {
//!     fn from_ref(state: &AppState) -> Self {
//!         state.provider.clone()
//!     }
//! }
//!
//! #[derive(Deserialize, Serialize)]
//! struct Event {
//!     id: String,
//!     #[serde(rename = "type")]
//!     kind: String,
//! }
//!
//! /// Verified before anything else (401 otherwise), then applied once per `webhook-id`.
//! #[idempotent(scope = "global", key = header("webhook-id"))]
//! async fn provider_event(
//!     tx: &mut Transaction<'_, Sqlite>,
//!     Verified(JsonBody(event)): Verified<JsonBody<Event>>,
//! ) -> axum::http::StatusCode {
//!     // … apply `event` in `tx` …
//!     axum::http::StatusCode::NO_CONTENT
//! }
//!
//! # fn main() -> Result<(), idem_runtime::webhooks::InvalidSecret> {
//! let secret = WebhookSecret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
//! # Ok(()) }
//! ```
//!
//! # A signed event that does not read
//!
//! A delivery whose signature verifies but whose body the receiver's extractor refuses (its
//! sender renamed a field, say) is answered with the extractor's refusal (`422`, whose
//! detail names no value of the body). Its sender may give up on a `4xx`: with
//! [`WebhookSecret::keep_unparseable`] the event is kept first, in the inbox as
//! `unparseable` ([`crate::inbox`], `idem inbox list --status unparseable`) with its
//! `webhook-id`, its body as sent (sealed with the storage keys) and the refusal's reason,
//! and logged at `WARN`; a redelivery counts on the same row. When it cannot be kept the
//! answer is `503` with `Retry-After` instead: deliver it again.
//!
//! ```no_run
//! # use idem_runtime::Idem;
//! # use idem_runtime::webhooks::WebhookSecret;
//! # fn secret(idem: &Idem<idem_runtime::sqlx::Sqlite>) -> Result<WebhookSecret, idem_runtime::webhooks::InvalidSecret> {
//! let secret = WebhookSecret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?
//!     .keep_unparseable(idem, "provider_event:v1");
//! # Ok(secret) }
//! ```

mod unparseable;

use std::fmt;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRef, FromRequest, Request};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};

use crate::fingerprint::{FingerprintError, Input, InputWriter};
use crate::problem::Problem;
use crate::protocol::Idem;
use crate::store::Backend;
use unparseable::Keeper;

pub use standardwebhooks::{HEADER_WEBHOOK_ID, HEADER_WEBHOOK_SIGNATURE, HEADER_WEBHOOK_TIMESTAMP};

/// The problem type of a delivery whose signature does not verify (`401`), as the generated
/// documents of a handler that takes [`Verified`] list it.
pub const UNVERIFIED: &str = idem_docs::contract::WEBHOOK_UNVERIFIED;

/// A Standard Webhooks secret (`whsec_` and the key in base64), or several while one is
/// rotated: a delivery verifies when its signature matches any of them; the first signs.
/// With [`WebhookSecret::keep_unparseable`], also where [`Verified`] keeps a delivery that
/// verifies but does not read. Cheap to clone.
#[derive(Clone)]
pub struct WebhookSecret {
    keys: Arc<[Arc<standardwebhooks::Webhook>]>,
    unparseable: Option<Keeper>,
}

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the key.
        write!(f, "WebhookSecret({} key(s)", self.keys.len())?;
        if let Some(keeper) = &self.unparseable {
            write!(f, ", {keeper:?}")?;
        }
        f.write_str(")")
    }
}

/// The secret is not `whsec_` and base64 (or plain base64).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a webhook secret is `whsec_` followed by the key in base64")]
pub struct InvalidSecret;

impl WebhookSecret {
    /// The secret `whsec_…` (the prefix may be left out).
    ///
    /// # Errors
    /// When the key is not base64 or is empty.
    pub fn new(secret: &str) -> Result<Self, InvalidSecret> {
        Ok(Self {
            keys: Arc::new([Arc::new(Self::key(secret)?)]),
            unparseable: None,
        })
    }

    /// Also accepts deliveries signed with `secret` (rotation: the new secret first, the old
    /// one until every sender has moved on).
    ///
    /// # Errors
    /// As [`WebhookSecret::new`].
    pub fn or(self, secret: &str) -> Result<Self, InvalidSecret> {
        let added = Arc::new(Self::key(secret)?);
        Ok(Self {
            keys: self.keys.iter().cloned().chain([added]).collect(),
            unparseable: self.unparseable,
        })
    }

    /// Keeps the deliveries that verify with this secret but whose body the receiver's
    /// extractor refuses ([`Verified`]): in `idem`'s inbox as `unparseable`, from `source`
    /// (the receiving operation's id, `provider_event:v1`), before the refusal is answered
    /// ([`Idem::unparseable`]). See [the module](self#a-signed-event-that-does-not-read).
    #[must_use]
    pub fn keep_unparseable<DB: Backend>(mut self, idem: &Idem<DB>, source: &str) -> Self {
        self.unparseable = Some(Keeper::new(idem, source));
        self
    }

    fn key(secret: &str) -> Result<standardwebhooks::Webhook, InvalidSecret> {
        let bare = secret.strip_prefix("whsec_").unwrap_or(secret);
        if bare.is_empty() {
            return Err(InvalidSecret);
        }
        standardwebhooks::Webhook::new(secret).map_err(|_| InvalidSecret)
    }

    /// The `webhook-signature` value of a delivery: `v1,<base64 HMAC-SHA256>` of
    /// `"{id}.{timestamp}.{body}"`, with the first secret.
    ///
    /// ```
    /// use idem_runtime::webhooks::WebhookSecret;
    ///
    /// let secret = WebhookSecret::new("whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD").unwrap();
    /// assert_eq!(
    ///     secret.sign("msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", 1649367553,
    ///                 br#"{"email":"test@example.com","username":"test_user"}"#).as_deref(),
    ///     Some("v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="),
    /// );
    /// ```
    ///
    /// `None` when `body` is not UTF-8 (Standard Webhooks signs text).
    #[must_use]
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
        self.keys.first()?.sign(id, timestamp, body).ok()
    }

    /// Verifies a delivery: its `webhook-id`, `webhook-timestamp` (within 5 minutes of now)
    /// and `webhook-signature` headers against `body`.
    ///
    /// # Errors
    /// What is wrong, as the last secret tried found it (a header missing, the timestamp too
    /// old or too far in the future, no signature matching).
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        let mut last = VerifyError::NoSecret;
        for key in self.keys.iter() {
            match key.verify(body, headers) {
                Ok(()) => return Ok(()),
                Err(error) => last = VerifyError::from(error),
            }
        }
        Err(last)
    }
}

/// Why a delivery does not verify ([`WebhookSecret::verify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// No secret to verify with.
    #[error("no secret")]
    NoSecret,
    /// A header the delivery needs is missing.
    #[error("missing header {0}")]
    MissingHeader(&'static str),
    /// A header does not read.
    #[error("invalid header {0}")]
    InvalidHeader(&'static str),
    /// `webhook-timestamp` is not a number of seconds.
    #[error("failed to parse timestamp")]
    InvalidTimestamp,
    /// `webhook-timestamp` is more than 5 minutes old.
    #[error("signature timestamp too old")]
    TimestampTooOld,
    /// `webhook-timestamp` is more than 5 minutes ahead.
    #[error("signature timestamp too far in future")]
    TimestampInFuture,
    /// No signature matches the body.
    #[error("signature invalid")]
    InvalidSignature,
    /// The body is not what Standard Webhooks signs (text).
    #[error("payload invalid")]
    InvalidPayload,
    /// The secret is not a key.
    #[error("invalid secret")]
    InvalidSecret,
}

impl From<standardwebhooks::WebhookError> for VerifyError {
    fn from(error: standardwebhooks::WebhookError) -> Self {
        use standardwebhooks::WebhookError as E;
        match error {
            E::InvalidTimestamp => Self::InvalidTimestamp,
            E::InvalidSecret(_) => Self::InvalidSecret,
            E::InvalidHeader(name) => Self::InvalidHeader(name),
            E::TimestampTooOldError => Self::TimestampTooOld,
            E::FutureTimestampError => Self::TimestampInFuture,
            E::MissingHeader(name) => Self::MissingHeader(name),
            E::InvalidSignature => Self::InvalidSignature,
            E::InvalidPayload => Self::InvalidPayload,
        }
    }
}

/// A state that gives [`Verified`] its [`WebhookSecret`]: every state `S` with
/// `impl FromRef<S> for WebhookSecret` (`axum::extract::FromRef`).
///
/// A trait of its own, rather than the `FromRef` bound, so that a state without the secret
/// is reported in these words — at the extractor, with `#[idempotent(state = AppState)]` —
/// and that axum does not take `WebhookSecret` itself for the router's state (the one state
/// `FromRef` would otherwise find).
#[diagnostic::on_unimplemented(
    message = "the state `{Self}` does not give `Verified` a `WebhookSecret`",
    label = "`Verified` checks deliveries with the state's `WebhookSecret`",
    note = "implement `axum::extract::FromRef<{Self}>` for `idem_runtime::webhooks::WebhookSecret`, returning the secret the provider signs with (or `#[derive(FromRef)]` on the state with a `WebhookSecret` field)"
)]
pub trait WebhookState: Send + Sync {
    /// The secret deliveries are verified with.
    fn webhook_secret(&self) -> WebhookSecret;
}

/// (Not recommended: the error names `WebhookState`, whose note says what to implement.)
#[diagnostic::do_not_recommend]
impl<S> WebhookState for S
where
    S: Send + Sync,
    WebhookSecret: FromRef<S>,
{
    fn webhook_secret(&self) -> WebhookSecret {
        WebhookSecret::from_ref(self)
    }
}

/// A body extractor `E` (`JsonBody<T>`, `Checked<T>`, …) whose request was verified first as
/// a Standard Webhooks delivery, with the [`WebhookSecret`] of the application's state
/// (`impl FromRef<AppState> for WebhookSecret`: [`WebhookState`]).
///
/// A delivery whose signature is missing, wrong or more than 5 minutes old is refused with
/// `401` `application/problem+json` ([`UNVERIFIED`]) before its body is parsed and before
/// any idempotency key is looked at: it changes nothing. The body is read within idem's
/// limits, as idem's body extractors read it. A delivery that verifies but that `E` refuses
/// is answered with `E`'s refusal, and kept first where the secret says
/// ([`WebhookSecret::keep_unparseable`]). The fingerprint is `E`'s: the signature
/// headers, different on each delivery, are not part of it, so a repeated delivery of an
/// event replays the stored response.
#[derive(Debug, Clone, Copy, Default)]
pub struct Verified<E>(pub E);

impl<S, E> FromRequest<S> for Verified<E>
where
    S: WebhookState,
    E: FromRequest<S>,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &S) -> Result<Self, Response> {
        let (parts, body) = req.into_parts();
        let headers = parts.headers.clone();
        let mut read = Request::new(body);
        read.extensions_mut().clone_from(&parts.extensions);
        *read.headers_mut() = headers.clone();
        let bytes = crate::extract::read_body(read)
            .await
            .map_err(IntoResponse::into_response)?;
        let secret = state.webhook_secret();
        if let Err(reason) = secret.verify(&headers, &bytes) {
            tracing::warn!(%reason, "webhook refused: its signature does not verify");
            return Err(Problem::new(
                StatusCode::UNAUTHORIZED,
                UNVERIFIED,
                "webhook signature not verified",
            )
            .with_detail(format!(
                "{reason}; nothing was applied (Standard Webhooks: `webhook-id`, \
                 `webhook-timestamp` within 5 minutes, `webhook-signature`)"
            ))
            .into_response());
        }
        let request = Request::from_parts(parts, Body::from(bytes.clone()));
        let refusal = match E::from_request(request, state).await {
            Ok(value) => return Ok(Self(value)),
            Err(refusal) => refusal.into_response(),
        };
        let keeper = secret.unparseable.as_ref();
        Err(unparseable::refused(keeper, &headers, &bytes, refusal).await)
    }
}

impl<E: Input> Input for Verified<E> {
    type Part = E::Part;

    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        self.0.write(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // Standard Webhooks checks timestamps against the wall clock.
    #[allow(clippy::disallowed_methods)]
    fn secrets_sign_and_verify() {
        let secret = WebhookSecret::new("whsec_aWRlbS1leGFtcGxlLXNlY3JldA==").unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
        let body = br#"{"id":"evt_1"}"#;
        let headers = |ts: i64, signature: &str| {
            let mut map = HeaderMap::new();
            map.insert(HEADER_WEBHOOK_ID, "evt_1".parse().unwrap());
            map.insert(HEADER_WEBHOOK_TIMESTAMP, ts.to_string().parse().unwrap());
            map.insert(HEADER_WEBHOOK_SIGNATURE, signature.parse().unwrap());
            map
        };
        let good = secret.sign("evt_1", now, body).unwrap();
        assert_eq!(secret.verify(&headers(now, &good), body), Ok(()));
        // Several signatures: one matching is enough.
        let both = format!("v1,AAAA {good}");
        assert_eq!(secret.verify(&headers(now, &both), body), Ok(()));
        let tampered = secret.verify(&headers(now, &good), b"{}");
        assert_eq!(tampered, Err(VerifyError::InvalidSignature));
        assert_eq!(tampered.unwrap_err().to_string(), "signature invalid");
        let old = secret.sign("evt_1", now - 600, body).unwrap();
        let late = secret.verify(&headers(now - 600, &old), body).unwrap_err();
        assert_eq!(late, VerifyError::TimestampTooOld);
        assert_eq!(late.to_string(), "signature timestamp too old");
        let other = WebhookSecret::new("whsec_b3RoZXI=").unwrap();
        assert!(other.verify(&headers(now, &good), body).is_err());
        let missing = secret.verify(&HeaderMap::new(), body).unwrap_err();
        assert_eq!(missing, VerifyError::MissingHeader("id"));
        // Rotation: the old secret still verifies.
        let rotated = other.or("whsec_aWRlbS1leGFtcGxlLXNlY3JldA==").unwrap();
        assert_eq!(rotated.verify(&headers(now, &good), body), Ok(()));
        assert!(WebhookSecret::new("whsec_").is_err());
        assert!(WebhookSecret::new("whsec_!!!").is_err());
        assert_eq!(format!("{rotated:?}"), "WebhookSecret(2 key(s))");
    }
}
