//! How an `#[idempotent(mode = "staged")]` handler is resumed without its client.
//!
//! A staged key whose attempt died (the process was killed, the client went away) stays
//! `processing`; once its lease has run out the [`Reconciler`](crate::staged::Reconciler)
//! takes it over. For a hand-written staged function it calls the function with the stored
//! request. For an attribute handler it re-enters the handler **through the application's
//! router**, so that every extractor, layer and piece of state the handler uses is the one it
//! is served with:
//!
//! 1. When the key is reserved, the request is stored with it as a [`StoredRequest`]: the
//!    method, the path and query, the `Content-Type`, the body exactly as received, and the
//!    principal the state's `IdemState::Principal` extracted (serialised with serde: the
//!    identity it verified, **never the credentials** — no `Authorization` or `Cookie`
//!    header, no other header is stored).
//! 2. The reconciler takes the key over (a new attempt number, a new lease), rebuilds that
//!    request and sends it through the router with a [`Resumption`] in its extensions.
//! 3. The handler's context sees the resumption: it takes the scope and key from it and the
//!    principal from the stored value (the authentication extractor does not run: there are
//!    no credentials to check), the handler's other extractors run on the rebuilt request
//!    as on the first one, and the attempt runs with the lease the reconciler holds —
//!    recorded steps return their recorded results, as on a client's retry.
//!
//! An extractor that reads a header other than `Content-Type` sees none on a resumption;
//! a route that no longer leads to the handler answers without running it: the reconciler
//! logs the status and the key stays stuck (resumed by the client's retry, or handled by an
//! operator with `idem`).

use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::extract::Request;
use bytes::Bytes;
use http::{HeaderValue, Method, Uri, header};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Error;
use crate::record::Outcome;
use crate::store::staged::Lease;

/// The request an attribute handler's staged key was reserved with: what the reconciler
/// needs to send it through the router again. Stored as JSON in the key's `request` column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredRequest {
    /// The method.
    pub method: String,
    /// The path and query, as received.
    pub uri: String,
    /// The `Content-Type` header, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// The body when it is UTF-8 (a JSON body, a form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The body in hexadecimal when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_hex: Option<String>,
    /// The principal (`IdemState::Principal`) serialised, for tenant and user scopes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<Value>,
}

impl StoredRequest {
    /// The request as it arrived, without headers but `Content-Type`.
    pub(crate) fn new(
        method: &Method,
        uri: &Uri,
        content_type: Option<&HeaderValue>,
        body: &[u8],
        principal: Option<Value>,
    ) -> Self {
        let mut stored = Self {
            method: method.as_str().to_owned(),
            uri: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned()),
            content_type: content_type
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
            body: None,
            body_hex: None,
            principal,
        };
        stored.set_body(body);
        stored
    }

    /// Sets the body, as received.
    pub(crate) fn set_body(&mut self, body: &[u8]) {
        (self.body, self.body_hex) = match std::str::from_utf8(body) {
            Ok("") => (None, None),
            Ok(text) => (Some(text.to_owned()), None),
            Err(_) => (None, Some(crate::hex::encode(body))),
        };
    }

    /// The request to send through the router, carrying `resumption`.
    ///
    /// # Errors
    /// When the stored method, URI, content type or body do not read back.
    pub(crate) fn into_request(self, resumption: Resumption) -> Result<Request, UnreadableRequest> {
        let method = Method::from_bytes(self.method.as_bytes())
            .map_err(|_| UnreadableRequest::Method(self.method.clone()))?;
        let uri: Uri = self
            .uri
            .parse()
            .map_err(|_| UnreadableRequest::Uri(self.uri.clone()))?;
        let body = match (self.body, self.body_hex) {
            (Some(text), _) => Bytes::from(text),
            (None, Some(hex)) => {
                Bytes::from(crate::hex::decode(&hex).ok_or(UnreadableRequest::Body)?)
            }
            (None, None) => Bytes::new(),
        };
        let mut builder = Request::builder()
            .method(method)
            .uri(uri)
            .extension(resumption);
        if let Some(content_type) = &self.content_type {
            let value =
                HeaderValue::from_str(content_type).map_err(|_| UnreadableRequest::ContentType)?;
            builder = builder.header(header::CONTENT_TYPE, value);
        }
        builder
            .body(Body::from(body))
            .map_err(UnreadableRequest::Request)
    }
}

/// Why a stored request does not read back as a request ([`StoredRequest::into_request`]).
#[derive(Debug, thiserror::Error)]
pub(crate) enum UnreadableRequest {
    /// The stored method is not a method.
    #[error("stored method {0:?} is not a method")]
    Method(String),
    /// The stored URI is not a URI.
    #[error("stored URI {0:?} is not a URI")]
    Uri(String),
    /// The stored body is neither text nor hexadecimal.
    #[error("the stored body is not hexadecimal")]
    Body,
    /// The stored content type is not a header value.
    #[error("the stored content type is not a header value")]
    ContentType,
    /// The parts do not make a request.
    #[error("{0}")]
    Request(#[source] http::Error),
    /// The stored request is not the JSON the runtime writes.
    #[error("its stored request does not read back: {0}")]
    Json(#[source] serde_json::Error),
}

/// What the reconciler hands the handler it resumes through the router: the key, the lease
/// it took over and the stored principal; and where the handler leaves the outcome.
///
/// In the request's extensions. Not constructible outside idem: a request from a client
/// cannot carry one.
#[derive(Clone)]
pub struct Resumption(Arc<Mutex<Ticket>>);

impl std::fmt::Debug for Resumption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resumption").finish_non_exhaustive()
    }
}

pub(crate) struct Ticket {
    /// The scope's stored form.
    pub(crate) scope: String,
    /// The operation the key belongs to: the handler checks it is its own.
    pub(crate) operation: String,
    /// The client's key.
    pub(crate) key: String,
    /// The lease the reconciler took; the handler runs its attempt with it (taken once).
    pub(crate) lease: Option<Lease>,
    /// The stored principal.
    pub(crate) principal: Option<Value>,
    /// The attempt's outcome, once the handler ran.
    pub(crate) outcome: Option<Result<Outcome, Error>>,
}

impl Resumption {
    pub(crate) fn new(
        scope: String,
        operation: String,
        key: String,
        lease: Lease,
        principal: Option<Value>,
    ) -> Self {
        Self(Arc::new(Mutex::new(Ticket {
            scope,
            operation,
            key,
            lease: Some(lease),
            principal,
            outcome: None,
        })))
    }

    /// Runs `f` on the ticket.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Ticket) -> R) -> R {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The body of a staged request, kept by the handler's body extractor ([`crate::handler`])
/// for [`StoredRequest`]: the extractor reads the bytes, keeps a copy here and hands the
/// same bytes on.
#[derive(Clone, Default)]
pub(crate) struct CapturedBody(Arc<Mutex<Option<Bytes>>>);

impl CapturedBody {
    pub(crate) fn set(&self, bytes: Bytes) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(bytes);
    }

    /// The body, if the extractor read it, left in place.
    pub(crate) fn peek(&self) -> Option<Bytes> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn take(&self) -> Bytes {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_requests_read_back() {
        let content_type = HeaderValue::from_static("application/json");
        let uri: Uri = "/payments/7?dry=1".parse().unwrap();
        let stored = StoredRequest::new(
            &Method::POST,
            &uri,
            Some(&content_type),
            br#"{"amount":1}"#,
            Some(Value::String("acme".into())),
        );
        let json = serde_json::to_string(&stored).unwrap();
        assert_eq!(
            json,
            r#"{"method":"POST","uri":"/payments/7?dry=1","content_type":"application/json","body":"{\"amount\":1}","principal":"acme"}"#
        );
        let binary = StoredRequest::new(&Method::PUT, &uri, None, &[0xff, 0x00], None);
        assert_eq!(binary.body_hex.as_deref(), Some("ff00"));
        assert_eq!(binary.body, None);
        let back: StoredRequest = serde_json::from_str(&json).unwrap();
        assert_eq!(back, stored);
    }
}
