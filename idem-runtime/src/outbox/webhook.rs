//! [`WebhookSink`]: outbox messages POSTed to a URL, signed as Standard Webhooks.

use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};

use super::{Claimed, DeliveryError, Sink};
use crate::key::IdempotencyKey;
use crate::webhooks::{
    HEADER_WEBHOOK_ID, HEADER_WEBHOOK_SIGNATURE, HEADER_WEBHOOK_TIMESTAMP, WebhookSecret,
};

/// How much of an error response's body `last_error` keeps.
const ERROR_BODY_LIMIT: usize = 512;

/// A [`Sink`] that POSTs each message to one URL, as JSON, with
/// [Standard Webhooks](https://www.standardwebhooks.com/) headers:
///
/// ```text
/// POST /hooks/orders HTTP/1.1
/// content-type: application/json
/// idempotency-key: "order-42/created"
/// webhook-id: order-42/created
/// webhook-timestamp: 1764672000
/// webhook-signature: v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=
///
/// {"id":"order-42/created","type":"order.created","data":{"id":42}}
/// ```
///
/// `id` is the message's dedup id, `type` its topic, `data` its payload. The dedup id is
/// what receivers deduplicate on, and it goes out twice: as `webhook-id`, as Standard
/// Webhooks receivers expect, and as `Idempotency-Key`, a structured-field string, so
/// that an idem-powered receiver replays its first response to a repeated delivery
/// instead of acting twice. `webhook-timestamp` is when this attempt was sent (seconds
/// since the Unix epoch), and `webhook-signature` is sent when the sink has a
/// [`signing_secret`](WebhookSink::signing_secret). A dedup id that cannot be a key
/// (1 to 8192 visible ASCII characters, [`crate::key`]) fails permanently.
///
/// The outcome, by the response:
///
/// | response | outcome |
/// |---|---|
/// | `2xx` | delivered |
/// | any other status, no response, a timeout, a refused connection | transient: retried with backoff, until the dispatcher's last attempt parks it as dead |
/// | `4xx` but `408`, `409`, `423`, `425`, `429`, with [`WebhookSink::permanent_client_errors`] | permanent: parked as dead at once |
///
/// Every failure is retried by default, a `404` or `410` too: a receiver that is being
/// deployed or misrouted answers them for a while, and a dead-lettered message waits for
/// an operator. Redirects are not followed (a client of the application's,
/// [`WebhookSink::with_client`], follows its own policy). Each request times out after
/// [`WebhookSink::timeout`] (default 10 s), from connecting to the end of the response.
/// Error messages say why a request failed (the whole chain of causes), and never hold
/// the URL, which may carry a secret.
///
/// `https` URLs need one of reqwest's TLS features, which idem does not enable: add
/// `reqwest` to the application's dependencies with, say, `features = ["rustls-tls"]`
/// (Cargo unifies the features, so this sink's client gets TLS too).
///
/// ```no_run
/// use std::time::Duration;
/// use idem_runtime::outbox::WebhookSink;
/// use idem_runtime::webhooks::WebhookSecret;
///
/// # fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let sink = WebhookSink::new("http://billing.internal/hooks")?
///     .timeout(Duration::from_secs(5))
///     .signing_secret(WebhookSecret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?);
/// # let _ = sink; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct WebhookSink {
    client: reqwest::Client,
    url: reqwest::Url,
    timeout: Duration,
    headers: HeaderMap,
    permanent_client_errors: bool,
    secret: Option<WebhookSecret>,
}

impl WebhookSink {
    /// The default [`WebhookSink::timeout`].
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    /// POSTs to `url`, with a client of its own (no redirects).
    ///
    /// # Errors
    /// When `url` is not a valid URL, or the client cannot be built.
    pub fn new(url: impl reqwest::IntoUrl) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("idem/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Self::with_client(client, url)
    }

    /// POSTs to `url` with the application's `client` (its TLS, proxy and redirect
    /// settings).
    ///
    /// # Errors
    /// When `url` is not a valid URL.
    pub fn with_client(
        client: reqwest::Client,
        url: impl reqwest::IntoUrl,
    ) -> Result<Self, reqwest::Error> {
        Ok(Self {
            client,
            url: url.into_url()?,
            timeout: Self::DEFAULT_TIMEOUT,
            headers: HeaderMap::new(),
            permanent_client_errors: false,
            secret: None,
        })
    }

    /// How long one request may take, from connecting to the end of the response.
    /// Default 10 s.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// A header sent with every request (authorization, …). `content-type`,
    /// `idempotency-key` and the `webhook-*` headers are the sink's own.
    #[must_use]
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }

    /// Whether a `4xx` other than `408`, `409`, `423`, `425` and `429` parks the message
    /// as dead at once, or is retried like any failure (default).
    #[must_use]
    pub fn permanent_client_errors(mut self, permanent: bool) -> Self {
        self.permanent_client_errors = permanent;
        self
    }

    /// Signs every delivery with `secret` (`webhook-signature`, Standard Webhooks).
    #[must_use]
    pub fn signing_secret(mut self, secret: WebhookSecret) -> Self {
        self.secret = Some(secret);
        self
    }

    /// The URL.
    #[must_use]
    pub fn url(&self) -> &reqwest::Url {
        &self.url
    }

    fn is_permanent(&self, status: StatusCode) -> bool {
        self.permanent_client_errors
            && status.is_client_error()
            && !matches!(status.as_u16(), 408 | 409 | 423 | 425 | 429)
    }
}

/// The body: `{"id": …, "type": …, "data": …}`.
#[derive(serde::Serialize)]
struct Envelope<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    topic: &'a str,
    data: &'a serde_json::Value,
}

/// `dedup_id` as a structured-field string: quoted, `\` and `"` escaped. As it is, even
/// when it is long: the receiver stores a long key as its digest itself.
fn idempotency_key(dedup_id: &str) -> Result<HeaderValue, DeliveryError> {
    IdempotencyKey::new(dedup_id).map_err(|e| {
        DeliveryError::permanent(format!(
            "the dedup id cannot be sent as an Idempotency-Key: {e}"
        ))
    })?;
    let mut quoted = String::with_capacity(dedup_id.len() + 2);
    quoted.push('"');
    for c in dedup_id.chars() {
        if matches!(c, '"' | '\\') {
            quoted.push('\\');
        }
        quoted.push(c);
    }
    quoted.push('"');
    HeaderValue::from_str(&quoted)
        .map_err(|e| DeliveryError::permanent(format!("invalid Idempotency-Key: {e}")))
}

/// The start of a response's body, as text, for `last_error`.
async fn body_start(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < ERROR_BODY_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    let truncated = body.len() > ERROR_BODY_LIMIT;
    body.truncate(ERROR_BODY_LIMIT);
    let mut text = String::from_utf8_lossy(&body).trim().to_owned();
    if truncated {
        text.push('…');
    }
    text
}

/// An error and its causes: reqwest's own message leaves out why a request failed (a
/// refused connection, a timeout, a connection closed before the answer).
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text.push_str(": ");
            text.push_str(&line);
        }
        source = cause.source();
    }
    text
}

impl Sink for WebhookSink {
    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }

    async fn deliver(&self, message: &Claimed) -> Result<(), DeliveryError> {
        let key = idempotency_key(&message.dedup_id)?;
        let body = serde_json::to_vec(&Envelope {
            id: &message.dedup_id,
            topic: &message.topic,
            data: &message.payload,
        })
        .map_err(|e| DeliveryError::permanent(format!("the payload cannot be sent: {e}")))?;
        // The receiver checks it against its own clock (Standard Webhooks' tolerance):
        // the wall clock, not the dispatcher's.
        #[allow(clippy::disallowed_methods)]
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        let mut request = self
            .client
            .post(self.url.clone())
            .timeout(self.timeout)
            .headers(self.headers.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(HeaderName::from_static(crate::key::HEADER), key)
            // The dedup id is a valid key: visible ASCII, a valid header value.
            .header(HEADER_WEBHOOK_ID, message.dedup_id.as_str())
            .header(HEADER_WEBHOOK_TIMESTAMP, timestamp.to_string());
        if let Some(secret) = &self.secret {
            let signature = secret
                .sign(&message.dedup_id, timestamp, &body)
                .ok_or_else(|| DeliveryError::permanent("the payload cannot be signed"))?;
            request = request.header(HEADER_WEBHOOK_SIGNATURE, signature);
        }
        let response = request
            .body(body)
            .send()
            .await
            .map_err(|e| DeliveryError::transient(causes(&e.without_url())))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let body = body_start(response).await;
        let message = if body.is_empty() {
            format!("HTTP {status}")
        } else {
            format!("HTTP {status}: {body}")
        };
        if self.is_permanent(status) {
            Err(DeliveryError::permanent(message))
        } else {
            Err(DeliveryError::transient(message))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_structured_field_strings() {
        let value = idempotency_key(r#"a"b\c"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(value.to_str().ok(), Some(r#""a\"b\\c""#));
        let parsed = IdempotencyKey::parse(value.as_bytes(), crate::key::KeyFormat::Strict)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parsed.as_str(), r#"a"b\c"#);
        assert!(idempotency_key("with space").unwrap_err().is_permanent());
        assert!(idempotency_key("").unwrap_err().is_permanent());
        assert!(idempotency_key("é").unwrap_err().is_permanent());
        // A long one goes out as it is: the receiver digests it.
        let long = "d".repeat(300);
        let value = idempotency_key(&long).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(value.to_str().ok(), Some(format!("\"{long}\"").as_str()));
    }

    #[test]
    fn client_errors_are_retried_unless_told_otherwise() {
        let lenient = WebhookSink::new("http://127.0.0.1:9/").unwrap_or_else(|e| panic!("{e}"));
        for code in [400, 404, 410, 422, 500] {
            assert!(!lenient.is_permanent(StatusCode::from_u16(code).unwrap_or_default()));
        }
        let sink = lenient.permanent_client_errors(true);
        for code in [400, 401, 403, 404, 410, 413, 422] {
            assert!(sink.is_permanent(StatusCode::from_u16(code).unwrap_or_default()));
        }
        for code in [300, 302, 408, 409, 423, 425, 429, 500, 502, 503, 504] {
            assert!(!sink.is_permanent(StatusCode::from_u16(code).unwrap_or_default()));
        }
    }
}
