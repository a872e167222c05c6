//! The client side of idempotency: a [`reqwest_middleware`] middleware that sends an
//! `Idempotency-Key` with every unsafe request and retries it — with the same key — when
//! retrying can help.
//!
//! A retry of a `POST` is only safe when the server can tell it from a new request; the key
//! is how it tells. [`IdempotencyMiddleware`] generates one key per logical request (a v4
//! UUID, sent as the structured-field string the IETF httpapi draft specifies:
//! `Idempotency-Key: "8e03978e-…"`), keeps it across every attempt, and retries:
//!
//! - when no response came back: the connection was refused, reset or closed before the
//!   response, or the request timed out. The server may have done the work — that is what
//!   the key is for: the retry gets the stored response (`Idempotent-Replayed: true`);
//! - `503` (the store or database is unavailable, or the outcome is unknown), `502` and
//!   `504` (a gateway lost its way to the server: the request may or may not have run), and
//!   `429`;
//! - `409` *with* `Retry-After`: a request with the same key is still running (idem's
//!   `urn:idem:problem:in-flight`). A `409` without `Retry-After` is the application's own
//!   conflict, which waiting does not resolve: returned as it is.
//!
//! It never retries anything else: not `422` (the key was used with another request: a bug
//! to fix, nothing ran), nor `400` or other `4xx`, nor `2xx` and `3xx`, nor `500`. A `500`
//! from idem means the handler failed and its transaction rolled back; a retry would run the
//! handler again, which is safe, but a handler that failed on this input is likely to fail
//! again, and whether it is worth it is the caller's decision.
//!
//! The waits grow exponentially with *full jitter* — a random wait between zero and
//! `min(max_delay, base_delay · 2^(n-1))` after the `n`-th attempt — so that clients that
//! failed together do not come back together. A `Retry-After` (delta-seconds or HTTP-date)
//! is a floor under that wait: never retried sooner than the server asked. Two bounds end
//! the retries: the number of attempts and the time budget (no attempt starts after it, and
//! no wait is begun that would end past it). Then the last response is returned as it is —
//! the caller sees the `503` or `409` and its `Retry-After` — or the last error.
//!
//! Requests are retried only if they can be sent again unchanged and safely:
//!
//! - the body must be replayable ([`reqwest::Request::try_clone`]): a streaming body is
//!   sent once and its response or error returned as it is;
//! - the request carries an `Idempotency-Key` (the middleware's or the caller's own), or its
//!   method is idempotent by HTTP's definition (`GET`, `HEAD`, `OPTIONS`, `TRACE`, `PUT`,
//!   `DELETE`). A method that gets no key and is not idempotent (by default any other than
//!   `POST` and `PATCH`, which get one) is sent once.
//!
//! A caller's own `Idempotency-Key` header is kept, never replaced. Every response carries
//! an [`IdempotencyInfo`] extension: the key sent and how many attempts it took. To know the
//! key even when every attempt fails, generate it yourself ([`key::generate`],
//! [`key::header_value`]) and set the header.
//!
//! Each attempt is bounded by the `reqwest::Client`'s own timeouts, which the budget does not
//! cut short: set them (`ClientBuilder::timeout`) so that one attempt cannot take the whole
//! budget.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use idem_client::reqwest_middleware::ClientBuilder;
//! use idem_client::{IdempotencyInfo, IdempotencyMiddleware};
//!
//! # async fn place_order() -> Result<(), Box<dyn std::error::Error>> {
//! let http = reqwest::Client::builder()
//!     .timeout(Duration::from_secs(10))
//!     .build()?;
//! let client = ClientBuilder::new(http)
//!     .with(
//!         IdempotencyMiddleware::builder()
//!             .max_attempts(5)
//!             .base_delay(Duration::from_millis(100))
//!             .max_delay(Duration::from_secs(5))
//!             .budget(Duration::from_secs(30))
//!             .build(),
//!     )
//!     .build();
//!
//! // One logical request: one key, however many attempts it takes.
//! let response = client
//!     .post("http://127.0.0.1:3000/orders")
//!     .bearer_auth("acme")
//!     .header("content-type", "application/json")
//!     .body(r#"{"sku": "BOOK-1", "quantity": 2}"#)
//!     .send()
//!     .await?;
//! if let Some(info) = response.extensions().get::<IdempotencyInfo>() {
//!     tracing::info!(key = info.key(), attempts = info.attempts(), "order sent");
//! }
//! let replayed = response.headers().contains_key("idempotent-replayed");
//! # let _ = replayed;
//! # Ok(())
//! # }
//! ```
#![warn(missing_docs, unreachable_pub)]

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Extensions, Method, StatusCode};
use reqwest::{Request, Response};
use reqwest_middleware::{Error, Middleware, Next, Result};

pub mod backoff;
pub mod key;
mod reused;

pub use backoff::Jitter;
pub use key::InvalidKey;
/// The `reqwest` this crate is built against.
pub use reqwest;
/// The `reqwest-middleware` this crate is built against: its `ClientBuilder` takes the
/// middleware.
pub use reqwest_middleware;
pub use reused::KeyReused;

/// Sends an `Idempotency-Key` with unsafe requests and retries them safely; see the
/// [crate documentation](crate) for the policy.
///
/// [`IdempotencyMiddleware::default`] is [`IdempotencyMiddleware::builder`]'s defaults.
#[derive(Clone)]
pub struct IdempotencyMiddleware {
    settings: Settings,
}

#[derive(Clone)]
struct Settings {
    max_attempts: u32,
    base_delay: Duration,
    max_delay: Duration,
    budget: Duration,
    jitter: Jitter,
    methods: Vec<Method>,
    keys: Arc<dyn Fn() -> String + Send + Sync>,
}

impl fmt::Debug for IdempotencyMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.settings.fmt(f)
    }
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyMiddleware")
            .field("max_attempts", &self.max_attempts)
            .field("base_delay", &self.base_delay)
            .field("max_delay", &self.max_delay)
            .field("budget", &self.budget)
            .field("jitter", &self.jitter)
            .field("methods", &self.methods)
            .finish_non_exhaustive()
    }
}

impl Default for IdempotencyMiddleware {
    fn default() -> Self {
        Self::builder().build()
    }
}

impl IdempotencyMiddleware {
    /// The defaults: 5 attempts, waits from 100 ms growing to at most 5 s, a 30 s budget,
    /// full jitter, keys for `POST` and `PATCH`, generated by [`key::generate`].
    pub fn builder() -> Builder {
        Builder {
            settings: Settings {
                max_attempts: 5,
                base_delay: Duration::from_millis(100),
                max_delay: Duration::from_secs(5),
                budget: Duration::from_secs(30),
                jitter: Jitter::Full,
                methods: vec![Method::POST, Method::PATCH],
                keys: Arc::new(key::generate),
            },
        }
    }
}

/// Builds an [`IdempotencyMiddleware`]; from [`IdempotencyMiddleware::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct Builder {
    settings: Settings,
}

impl Builder {
    /// How many times a request is sent at most, the first included (default 5). `1` sends
    /// a key but never retries; `0` counts as `1`.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.settings.max_attempts = attempts.max(1);
        self
    }

    /// The ceiling of the first wait (default 100 ms); it doubles after every attempt.
    pub fn base_delay(mut self, delay: Duration) -> Self {
        self.settings.base_delay = delay;
        self
    }

    /// The largest ceiling of a wait (default 5 s). A `Retry-After` may ask for longer: it
    /// is honoured, within the budget.
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.settings.max_delay = delay;
        self
    }

    /// The time from the first attempt after which no attempt starts (default 30 s). A wait
    /// that would end past it is not begun: the last response or error is returned at once.
    pub fn budget(mut self, budget: Duration) -> Self {
        self.settings.budget = budget;
        self
    }

    /// How the waits are spread (default [`Jitter::Full`]).
    pub fn jitter(mut self, jitter: Jitter) -> Self {
        self.settings.jitter = jitter;
        self
    }

    /// Which methods get a key when the request has none (default `POST` and `PATCH`).
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.settings.methods = methods.into_iter().collect();
        self
    }

    /// Where keys come from (default [`key::generate`], a v4 UUID). Called once per logical
    /// request; the key is sent quoted ([`key::header_value`]). A key that is not 1 to 8192
    /// visible ASCII characters fails the request with [`InvalidKey`], before it is sent.
    pub fn key_generator(mut self, keys: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.settings.keys = Arc::new(keys);
        self
    }

    /// The middleware.
    #[must_use]
    pub fn build(self) -> IdempotencyMiddleware {
        IdempotencyMiddleware {
            settings: self.settings,
        }
    }
}

/// What the middleware did for a response: an extension on every response it returns
/// (`response.extensions().get::<IdempotencyInfo>()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyInfo {
    key: Option<String>,
    attempts: u32,
}

impl IdempotencyInfo {
    /// The key sent, unquoted (as servers store it and operators look it up); `None` if the
    /// request had none.
    #[must_use]
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// How many times the request was sent: 1 if it was not retried.
    #[must_use]
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// Why an outcome is worth another attempt, and the server's `Retry-After`, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    Status(StatusCode, Option<Duration>),
    NoResponse,
}

impl Retry {
    fn of(outcome: &Result<Response>) -> Option<Self> {
        match outcome {
            Ok(response) => {
                let status = response.status();
                let after = backoff::retry_after(response.headers(), backoff::wall_clock());
                match status {
                    StatusCode::SERVICE_UNAVAILABLE
                    | StatusCode::BAD_GATEWAY
                    | StatusCode::GATEWAY_TIMEOUT
                    | StatusCode::TOO_MANY_REQUESTS => Some(Self::Status(status, after)),
                    StatusCode::CONFLICT if after.is_some() => Some(Self::Status(status, after)),
                    _ => None,
                }
            }
            // Nothing came back: the server may or may not have run the request.
            Err(Error::Reqwest(e)) if e.is_connect() || e.is_timeout() || e.is_request() => {
                Some(Self::NoResponse)
            }
            // Another middleware's error, a redirect loop, a bad URL: not a network fault.
            Err(_) => None,
        }
    }

    fn retry_after(self) -> Option<Duration> {
        match self {
            Self::Status(_, after) => after,
            Self::NoResponse => None,
        }
    }
}

/// Methods that RFC 9110 defines as idempotent: retried even without a key.
fn idempotent_method(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

#[async_trait::async_trait]
impl Middleware for IdempotencyMiddleware {
    async fn handle(
        &self,
        mut req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let s = &self.settings;
        let key = match req.headers().get(key::HEADER) {
            Some(existing) => Some(key::from_header(existing)),
            None if s.methods.contains(req.method()) => {
                let key = (s.keys)();
                let value = key::header_value(&key).map_err(Error::middleware)?;
                req.headers_mut().insert(key::HEADER, value);
                Some(key)
            }
            None => None,
        };
        let retryable = key.is_some() || idempotent_method(req.method());
        let method = req.method().clone();
        let started = Instant::now();
        let mut rng = fastrand::Rng::new();
        let mut attempts = 0;
        let mut pending = req;
        loop {
            attempts += 1;
            let spare = if retryable && attempts < s.max_attempts {
                pending.try_clone()
            } else {
                None
            };
            let outcome = next.clone().run(pending, extensions).await;
            let Some(retry) = Retry::of(&outcome) else {
                return finish(outcome, key, attempts);
            };
            let Some(spare) = spare else {
                if retryable && attempts < s.max_attempts {
                    tracing::debug!(%method, attempts, ?retry, "not retried: the body cannot be sent again");
                }
                return finish(outcome, key, attempts);
            };
            let backoff = backoff::backoff(s.base_delay, s.max_delay, attempts, s.jitter, &mut rng);
            let delay = backoff::delay(backoff, retry.retry_after());
            if started.elapsed().saturating_add(delay) > s.budget {
                tracing::debug!(%method, attempts, ?retry, ?delay, "not retried: past the budget");
                return finish(outcome, key, attempts);
            }
            tracing::debug!(%method, attempts, ?retry, ?delay, "retrying with the same key");
            drop(outcome);
            tokio::time::sleep(delay).await;
            pending = spare;
        }
    }
}

/// The outcome as the caller gets it: a response with its [`IdempotencyInfo`], or the error.
fn finish(outcome: Result<Response>, key: Option<String>, attempts: u32) -> Result<Response> {
    outcome.map(|mut response| {
        response
            .extensions_mut()
            .insert(IdempotencyInfo { key, attempts });
        response
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn idempotent_methods_are_the_rfcs() {
        for m in [
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::TRACE,
            Method::PUT,
            Method::DELETE,
        ] {
            assert!(idempotent_method(&m), "{m}");
        }
        for m in [Method::POST, Method::PATCH, Method::CONNECT] {
            assert!(!idempotent_method(&m), "{m}");
        }
    }

    #[test]
    fn the_builder_sets_what_it_says_and_clamps_attempts() {
        let m = IdempotencyMiddleware::builder()
            .max_attempts(0)
            .base_delay(Duration::from_millis(7))
            .max_delay(Duration::from_millis(70))
            .budget(Duration::from_secs(3))
            .jitter(Jitter::None)
            .methods([Method::PUT])
            .key_generator(|| "fixed".to_owned())
            .build();
        assert_eq!(m.settings.max_attempts, 1);
        assert_eq!(m.settings.base_delay, Duration::from_millis(7));
        assert_eq!(m.settings.max_delay, Duration::from_millis(70));
        assert_eq!(m.settings.budget, Duration::from_secs(3));
        assert_eq!(m.settings.jitter, Jitter::None);
        assert_eq!(m.settings.methods, [Method::PUT]);
        assert_eq!((m.settings.keys)(), "fixed");
        let shown = format!("{m:?}");
        assert!(shown.contains("max_attempts: 1"), "{shown}");
        let d = IdempotencyMiddleware::default();
        assert_eq!(d.settings.max_attempts, 5);
        assert_eq!(d.settings.methods, [Method::POST, Method::PATCH]);
    }

    fn response(status: u16, retry_after: Option<&str>) -> Result<Response> {
        let mut builder = http::Response::builder().status(status);
        if let Some(value) = retry_after {
            builder = builder.header(http::header::RETRY_AFTER, value);
        }
        builder
            .body("")
            .map(Response::from)
            .map_err(Error::middleware)
    }

    #[test]
    fn which_statuses_are_retried() {
        let second = Some(Duration::from_secs(1));
        for status in [503, 502, 504, 429] {
            let code = StatusCode::from_u16(status).unwrap();
            assert_eq!(
                Retry::of(&response(status, None)),
                Some(Retry::Status(code, None)),
                "{status}"
            );
            assert_eq!(
                Retry::of(&response(status, Some("1"))),
                Some(Retry::Status(code, second)),
                "{status}"
            );
        }
        // idem's in-flight 409 says when to come back; an application's conflict does not.
        assert_eq!(
            Retry::of(&response(409, Some("1"))),
            Some(Retry::Status(StatusCode::CONFLICT, second))
        );
        assert_eq!(Retry::of(&response(409, None)), None);
        for status in [
            200, 201, 204, 301, 304, 400, 401, 403, 404, 410, 413, 422, 500, 501,
        ] {
            assert_eq!(Retry::of(&response(status, Some("1"))), None, "{status}");
        }
        // Another middleware's error is not a network fault.
        let other: Result<Response> = Err(Error::middleware(InvalidKey::Empty));
        assert_eq!(Retry::of(&other), None);
    }
}
