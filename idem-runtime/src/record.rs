//! [`Record`]: a response as the protocol buffers, stores and replays it; [`Outcome`]: the
//! record an execution answers with, and how it came about.

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use idem_store::StoredResponse;

/// Response header set on every replay.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// [`REPLAYED_HEADER`] as a header name, made once: a name `http` does not know is copied
/// into every map it is inserted into as a string.
const REPLAYED: HeaderName = HeaderName::from_static(REPLAYED_HEADER);

/// A response as the protocol stores and replays it: status, headers and body.
///
/// Only the headers in the configured allow-list are stored; a replay answers with those.
#[derive(Debug, Clone)]
pub struct Record {
    /// HTTP status. `>= 400` counts as failure: rolled back and not stored, except `4xx`
    /// for operations with `store_client_errors`.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Bytes,
}

impl Record {
    /// A `status` record with a JSON body.
    ///
    /// # Errors
    /// When `value` cannot be serialised.
    pub fn json(
        status: StatusCode,
        value: &(impl serde::Serialize + ?Sized),
    ) -> Result<Self, serde_json::Error> {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(Self {
            status,
            headers,
            body: serde_json::to_vec(value)?.into(),
        })
    }

    /// An empty `500` record: a failure, never stored.
    #[must_use]
    pub fn failure() -> Self {
        Self {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            headers: HeaderMap::new(),
            body: Bytes::new(),
        }
    }

    /// Whether the record is a failure (`status >= 400`).
    #[must_use]
    pub fn is_failure(&self) -> bool {
        self.status.as_u16() >= 400
    }

    /// The headers of `allow` this record has, in `allow`'s order, as name-value pairs.
    /// Values that are not visible ASCII are left out.
    fn stored_headers<'a>(
        &'a self,
        allow: &'a [HeaderName],
    ) -> impl Iterator<Item = (&'a str, &'a str)> {
        allow.iter().flat_map(move |name| {
            self.headers
                .get_all(name)
                .iter()
                .filter_map(move |v| Some((name.as_str(), v.to_str().ok()?)))
        })
    }

    /// The `response_headers` column for this record: the headers of `allow` it has.
    pub(crate) fn headers_json(&self, allow: &[HeaderName]) -> String {
        StoredResponse::encode_headers(self.stored_headers(allow))
    }

    /// The record as the store keeps it: status, the headers of `allow` it has, body (shared,
    /// not copied).
    #[must_use]
    pub fn to_stored(&self, allow: &[HeaderName]) -> StoredResponse {
        StoredResponse {
            status: self.status.as_u16(),
            headers: self
                .stored_headers(allow)
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
            body: self.body.clone(),
        }
    }

    /// A stored response as a record, for a replay. Headers that are not valid HTTP headers
    /// (a row edited by hand) are left out; a status that is not an HTTP status is `500`.
    #[must_use]
    pub fn from_stored(stored: StoredResponse) -> Self {
        let mut headers = HeaderMap::new();
        for (name, value) in stored.headers {
            // (The value's string becomes the header's bytes as it is, not copied.)
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_maybe_shared(Bytes::from(value)),
            ) {
                headers.append(name, value);
            }
        }
        Self {
            status: StatusCode::from_u16(stored.status)
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            headers,
            body: stored.body,
        }
    }
}

impl IntoResponse for Record {
    fn into_response(self) -> Response {
        let mut response = Response::new(Body::from(self.body));
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}

/// How an execution ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutcomeKind {
    /// The work ran now and its record was stored and committed.
    Executed,
    /// The key was already completed: this is the stored record; nothing ran.
    Replayed,
    /// The work ran and failed (`status >= 400`, not stored): everything rolled back and the
    /// key is free again.
    Failed,
}

/// The record to answer with, and how it came about.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What happened.
    pub kind: OutcomeKind,
    /// The response.
    pub record: Record,
}

/// The record as the response; a replay carries `Idempotent-Replayed: true`
/// ([`crate::REPLAYED_HEADER`]). With [`Error`](crate::Error) being a response too, a
/// hand-written handler returns `Result<Outcome, Error>` as it gets it.
impl IntoResponse for Outcome {
    fn into_response(self) -> Response {
        let replayed = self.kind == OutcomeKind::Replayed;
        let mut response = self.record.into_response();
        if replayed {
            response
                .headers_mut()
                .insert(REPLAYED, HeaderValue::from_static("true"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_and_back() {
        let mut record = Record::json(StatusCode::CREATED, &serde_json::json!({"id": 7})).unwrap();
        record.headers.insert(
            http::header::LOCATION,
            HeaderValue::from_static("/orders/7"),
        );
        record
            .headers
            .insert("x-request-id", HeaderValue::from_static("r-1"));
        let allow = [http::header::CONTENT_TYPE, http::header::LOCATION];
        let stored = record.to_stored(&allow);
        assert_eq!(stored.headers_json(), record.headers_json(&allow));
        assert_eq!(
            record.headers_json(&allow),
            r#"[["content-type","application/json"],["location","/orders/7"]]"#
        );
        let back = Record::from_stored(stored);
        assert_eq!(back.status, StatusCode::CREATED);
        assert_eq!(back.body, record.body);
        assert_eq!(back.headers.len(), 2);
        assert_eq!(back.headers[http::header::LOCATION], "/orders/7");
        assert!(back.headers.get("x-request-id").is_none());
    }

    #[test]
    fn invalid_stored_headers_are_left_out() {
        let back = Record::from_stored(StoredResponse {
            status: 200,
            headers: vec![
                ("bad name".into(), "v".into()),
                ("ok".into(), "line\nbreak".into()),
                ("content-type".into(), "text/plain".into()),
            ],
            body: Bytes::new(),
        });
        assert_eq!(back.headers.len(), 1);
    }
}
