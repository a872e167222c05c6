//! `fake-provider`: a stand-in payment provider that misbehaves on demand.
//!
//! A service calling a payment provider has to survive the provider being slow, failing, and
//! — the hard case — taking the charge and then losing the answer. This server does all three
//! when told to, so the caller's retries can be tested against it. Everything is in memory:
//! a restart forgets every charge, key and setting.
//!
//! # Charges
//!
//! `POST /charges` with an `Idempotency-Key` header (any value of 1 to 255 printable ASCII
//! characters, taken verbatim) and the body
//! `{"amount": <integer ≥ 1>, "currency": "<non-empty>", "customer": "<non-empty>"}` answers
//! `201 {"id": "ch_…", "amount", "currency", "customer"}`.
//!
//! - The key names the charge: the same key with the same body (compared as parsed fields,
//!   not bytes) answers `201` with the same charge again; the same key with another body
//!   answers `422`.
//! - `amount: 402` is declined: `402`, no charge; the key remembers the decline, so the same
//!   request again is declined again.
//! - No key: `400`. A body that is not JSON: `400`. JSON of the wrong shape, or an invalid
//!   value: `422`. None of these creates a charge or binds the key.
//!
//! Each request goes through these steps, with the settings below:
//!
//! 1. it is counted, and its key (if any) recorded, then waits `delay_ms`;
//! 2. the key and body are checked (`400`/`422` as above);
//! 3. with probability `fail_rate` it fails: `500`, no charge, the key stays unbound;
//! 4. otherwise the key's charge is looked up or created, atomically (under one mutex, so
//!    concurrent requests with one key create one charge); a charge created now also creates
//!    its webhook event ([Webhooks](#webhooks));
//! 5. with probability `drop_response_rate` the answer is then dropped: whatever happened
//!    stands, and the connection is closed without a single byte of response, so the client
//!    sees a connection error. Served by [`serve`] only; see [`router`] otherwise.
//!
//! # Control and inspection
//!
//! - `POST /control {"fail_rate": 0..=1, "drop_response_rate": 0..=1, "delay_ms": n,
//!   "webhook_duplicate_rate": 0..=1, "webhook_status": 0 | 100..=599}`: every field is
//!   optional and a missing (or `null`) one keeps its value; an out-of-range value, an
//!   unknown field or a body that is not such an object answers `400` and changes nothing.
//!   Answers `200` with all current settings; `GET /control` reads them. All start at zero.
//!   The last two are described under [Webhooks](#webhooks).
//! - `GET /stats` → `{"requests", "charges", "distinct_keys", "webhook_events",
//!   "webhooks_sent", "webhooks_acknowledged"}`: `POST /charges` requests received (failed,
//!   rejected and dropped ones included), charges created, and distinct `Idempotency-Key`
//!   values seen on them; then the webhook counters described under
//!   [Webhooks](#webhooks).
//!
//! # Webhooks
//!
//! ## Sending
//!
//! Given a [`WebhookConfig`] ([`Provider::with_webhooks`]; the `fake-provider` binary
//! always has one, from `PROVIDER_WEBHOOK_URL` and `PROVIDER_WEBHOOK_SECRET`, defaults
//! [`DEFAULT_WEBHOOK_URL`] and [`DEFAULT_WEBHOOK_SECRET`]), the provider announces every
//! charge it creates. Without one ([`Provider::new`], [`app`]) it sends nothing and the
//! three webhook counters stay at zero.
//!
//! - **One event per new charge.** The request that creates a charge creates one event,
//!   `{"id": "evt_<32 hex digits>", "type": "charge.succeeded", "data": {"charge_id":
//!   "ch_…", "amount", "currency"}}` (in that order, as the charge has them). A replay of a
//!   key's charge, a decline, a refused or failed request creates none. A charge whose
//!   answer is dropped (`drop_response_rate`) was created, so it has its event.
//! - **Sent at once, in the background.** The event is created with the charge, under the
//!   same lock, and its delivery starts on its own task: the charge's answer does not wait
//!   for it, and the event may well reach the receiver before the caller has the answer.
//! - **Each delivery** is `POST <url>` with the event as its body,
//!   `Content-Type: application/json`, and the [Standard Webhooks] headers: `webhook-id`
//!   (the event's `id`), `webhook-timestamp` (Unix seconds when this attempt is sent) and
//!   `webhook-signature` (`v1,` and the base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`,
//!   keyed with the secret's bytes: the base64 after `whsec_`), made by the reference
//!   library, `standardwebhooks`.
//! - **Retried until a `2xx`.** Any other status (redirects are not followed), a connection
//!   error, or no complete answer within [`WEBHOOK_TIMEOUT`] fails the attempt; the delivery
//!   waits [`WEBHOOK_FIRST_BACKOFF`], doubling after each failure up to
//!   [`WEBHOOK_MAX_BACKOFF`], plus a random jitter of up to a tenth of it, and tries again,
//!   with no limit on the number of attempts. Every attempt is signed anew, with its own
//!   timestamp: the same `id`, the same body bytes. Deliveries stop only when the process
//!   exits (or, in process, when the tokio runtime ends or every handle on the [`Provider`]
//!   is gone).
//! - **Duplicates.** With `webhook_duplicate_rate` = p, as set when the event is created,
//!   each of up to [`MAX_WEBHOOK_DUPLICATES`] (3) extra copies of the event is sent with
//!   probability p: the first at once, alongside the original; the second after a random 1
//!   to 100 ms; the third after a random 200 to 1000 ms. A copy is the same event (same
//!   `id`, same body) delivered independently: it is signed afresh and retried until its
//!   own `2xx`, like the original, whatever became of the others. At 1 every event is
//!   delivered four times; at 0 (the default) once.
//!
//! `GET /stats` counts:
//!
//! - `webhook_events`: events created, one per new charge (duplicates and retries
//!   excluded). Counted with the charge, so it is up to date when the charge's answer is.
//! - `webhooks_sent`: HTTP requests sent to the webhook URL, every attempt counted: each
//!   copy, each retry, whatever its outcome. An attempt is counted just before its request
//!   goes out, so it is never below what a receiver has seen.
//! - `webhooks_acknowledged`: distinct events that got a `2xx` at least once (on any copy
//!   or attempt), counted when the first `2xx` arrives: at most `webhook_events`.
//!
//! [Standard Webhooks]: https://www.standardwebhooks.com/
//!
//! ## Receiving
//!
//! The provider also plays the receiving end of webhooks: `POST /webhooks` takes any JSON
//! object with a non-null `id` and answers `204` (`400` otherwise); `GET /events` lists the
//! deliveries received, duplicates included, in arrival order, each as
//! `{"id": <its id>, "body": <the whole object>}`. Signatures are not checked.
//!
//! With `webhook_status` set to a status other than `0`, `POST /webhooks` answers that
//! status instead, whatever the request, and records nothing: a problem (below) for a `4xx`
//! or `5xx`, an empty body otherwise (a `1xx` cannot end an HTTP exchange: the server sends
//! `500` for it). `0`, the default, receives as above. Pointing the provider's own
//! `PROVIDER_WEBHOOK_URL` at its `/webhooks` lets one process both send and fail to
//! receive.
//!
//! # Errors
//!
//! Every error answer, unknown routes included, is an RFC 9457 problem,
//! `Content-Type: application/problem+json`:
//! `{"type": "about:blank", "title", "status", "detail"}`, except axum's own plain-text
//! `413` for a body over 2 MB and hyper's empty `400`/`414`/`431` for a malformed or
//! oversized request head. Served by [`serve`], a stalled body answers `408` and a request
//! over the request timeout `503`, as problems with their own `type`
//! ([`crate::server`]).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper::body::Incoming;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt as _;
use uuid::Uuid;

use crate::server;

/// The longest `Idempotency-Key` accepted, in bytes.
pub const MAX_KEY_LEN: usize = 255;

/// The amount that is always declined.
pub const DECLINED_AMOUNT: i64 = 402;

/// `PROVIDER_WEBHOOK_URL`'s default: the `payments` example's receiver of provider events.
pub const DEFAULT_WEBHOOK_URL: &str = "http://127.0.0.1:3001/webhooks/provider";

/// `PROVIDER_WEBHOOK_SECRET`'s default, as `payments` expects it: `whsec_` and the base64
/// of the key's bytes.
pub const DEFAULT_WEBHOOK_SECRET: &str = "whsec_aWRlbS1leGFtcGxlLXNlY3JldA==";

/// How long one webhook delivery attempt may take, connecting included, before it counts as
/// failed.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// The wait after a delivery's first failed attempt; it doubles after each further failure.
pub const WEBHOOK_FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// The longest wait between two attempts of a delivery (before jitter).
pub const WEBHOOK_MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The most extra copies of one event that `webhook_duplicate_rate` sends.
pub const MAX_WEBHOOK_DUPLICATES: usize = 3;

/// The fault settings, as `POST /control` and `GET /control` show them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Settings {
    /// Probability that a charge request fails with `500` before touching any charge.
    pub fail_rate: f64,
    /// Probability that a charge request's answer is dropped after its charge was looked up
    /// or created.
    pub drop_response_rate: f64,
    /// How long every charge request waits before anything else.
    pub delay_ms: u64,
    /// Probability that each of an event's [`MAX_WEBHOOK_DUPLICATES`] extra copies is sent.
    pub webhook_duplicate_rate: f64,
    /// The status the provider's own `POST /webhooks` answers instead of receiving; `0`
    /// receives normally.
    pub webhook_status: u16,
}

/// The counters `GET /stats` shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// `POST /charges` requests received, whatever became of them.
    pub requests: u64,
    /// Charges created.
    pub charges: u64,
    /// Distinct `Idempotency-Key` values seen on `POST /charges`.
    pub distinct_keys: u64,
    /// Webhook events created: one per charge created while webhooks are configured.
    pub webhook_events: u64,
    /// Webhook HTTP requests sent: every attempt of every copy, counted just before it goes
    /// out, whatever its outcome.
    pub webhooks_sent: u64,
    /// Distinct webhook events that got a `2xx` at least once.
    pub webhooks_acknowledged: u64,
}

/// Where and with which secret the provider sends its webhooks; see the module's
/// [Webhooks](self#webhooks).
#[derive(Clone)]
pub struct WebhookConfig {
    url: reqwest::Url,
    signer: Arc<standardwebhooks::Webhook>,
    http: reqwest::Client,
}

impl WebhookConfig {
    /// Webhooks to `url` (`http:` only), signed with `secret` (`whsec_` and base64, or just
    /// the base64).
    ///
    /// # Errors
    /// When `url` is not an `http:` URL or `secret` is not base64.
    pub fn new(url: &str, secret: &str) -> Result<Self, WebhookConfigError> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| WebhookConfigError::Url(format!("{url:?} is not a URL: {e}")))?;
        if url.scheme() != "http" || !url.has_host() {
            return Err(WebhookConfigError::Url(format!(
                "{url} is not an http: URL with a host"
            )));
        }
        let signer = standardwebhooks::Webhook::new(secret)
            .map_err(|e| WebhookConfigError::Secret(format!("not `whsec_` and base64 ({e})")))?;
        let http = reqwest::Client::builder()
            .timeout(WEBHOOK_TIMEOUT)
            .connect_timeout(WEBHOOK_TIMEOUT)
            // A redirect is not a `2xx`: the attempt failed.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| WebhookConfigError::Client(format!("no HTTP client: {e}")))?;
        Ok(Self {
            url,
            signer: Arc::new(signer),
            http,
        })
    }

    /// The URL webhooks are sent to.
    pub fn url(&self) -> &str {
        self.url.as_str()
    }
}

impl fmt::Debug for WebhookConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret stays out of logs.
        f.debug_struct("WebhookConfig")
            .field("url", &self.url.as_str())
            .finish_non_exhaustive()
    }
}

/// Why a [`WebhookConfig`] could not be made; each says why in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookConfigError {
    /// The URL is not an `http:` URL with a host.
    Url(String),
    /// The secret is not base64 (after an optional `whsec_`).
    Secret(String),
    /// The HTTP client could not be built.
    Client(String),
}

impl fmt::Display for WebhookConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url(why) | Self::Secret(why) | Self::Client(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for WebhookConfigError {}

/// A charge, as `POST /charges` answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Charge {
    /// `ch_` and 32 hex digits.
    pub id: String,
    /// In the currency's smallest unit.
    pub amount: i64,
    /// As the request gave it.
    pub currency: String,
    /// As the request gave it.
    pub customer: String,
}

/// The provider's whole state; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Provider {
    inner: Arc<Mutex<Inner>>,
    webhooks: Option<WebhookConfig>,
}

#[derive(Debug, Default)]
struct Inner {
    settings: Settings,
    stats: Stats,
    /// Every key seen on `POST /charges`, bound or not.
    seen_keys: HashSet<String>,
    /// Keys bound to a request and its outcome.
    bound: HashMap<String, Bound>,
    /// Webhook deliveries, in arrival order.
    events: Vec<Value>,
    rng: Rng,
}

#[derive(Debug)]
struct Bound {
    request: ChargeRequest,
    outcome: Outcome,
}

#[derive(Debug, Clone)]
enum Outcome {
    Charged(Charge),
    Declined,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct ChargeRequest {
    amount: i64,
    currency: String,
    customer: String,
}

/// A `POST /control` body: a missing field keeps its value.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsPatch {
    fail_rate: Option<f64>,
    drop_response_rate: Option<f64>,
    delay_ms: Option<u64>,
    webhook_duplicate_rate: Option<f64>,
    webhook_status: Option<u16>,
}

impl Provider {
    /// A provider with no charges and every setting at zero, that sends no webhooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// A provider with no charges and every setting at zero, that sends a webhook for each
    /// charge it creates as `webhooks` says.
    pub fn with_webhooks(webhooks: WebhookConfig) -> Self {
        Self {
            inner: Arc::default(),
            webhooks: Some(webhooks),
        }
    }

    /// Where the provider sends its webhooks, if anywhere.
    pub fn webhooks(&self) -> Option<&WebhookConfig> {
        self.webhooks.as_ref()
    }

    /// The current fault settings.
    pub fn settings(&self) -> Settings {
        self.lock().settings
    }

    /// The current counters.
    pub fn stats(&self) -> Stats {
        self.lock().stats
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }
}

fn lock(inner: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // Nothing panics while holding the lock; if something did, the counters are still worth
    // reading.
    inner.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The provider's routes on a fresh [`Provider`], which sends no webhooks.
pub fn app() -> Router {
    router(Provider::new())
}

/// The provider's routes on `provider`.
///
/// Dropping an answer needs the connection: served by [`serve`], the connection is closed
/// before any byte of the response is written. Served any other way, the answer's head may
/// go out before its body fails, so the client sees an incomplete message instead.
pub fn router(provider: Provider) -> Router {
    Router::new()
        .route("/charges", post(create_charge))
        .route("/control", get(read_control).post(control))
        .route("/stats", get(stats))
        .route("/webhooks", post(receive_webhook))
        .route("/events", get(events))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(provider)
}

/// Serves `provider` on `listener` until `shutdown` completes, then finishes the requests in
/// flight, with [`server::Limits`]' defaults. Dropped answers close their connection without
/// writing anything.
///
/// # Errors
/// As [`server::serve`].
pub async fn serve(
    listener: TcpListener,
    provider: Provider,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    serve_within(listener, provider, &server::Limits::default(), shutdown).await
}

/// [`serve`] within `limits` (a `delay_ms` longer than the request timeout answers its
/// `503`).
///
/// # Errors
/// As [`server::serve`].
pub async fn serve_within(
    listener: TcpListener,
    provider: Provider,
    limits: &server::Limits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let app = server::harden(router(provider), limits);
    server::serve_connections(listener, limits, shutdown, move |stream| {
        let abort = ConnectionAbort::default();
        let io = AbortableStream {
            inner: stream,
            abort: abort.clone(),
        };
        // Each request on the connection carries its kill switch.
        let service = app
            .clone()
            .map_request(move |mut request: Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(abort.clone()));
                request
            });
        (io, service)
    })
    .await
}

async fn create_charge(
    State(provider): State<Provider>,
    abort: Option<Extension<ConnectInfo<ConnectionAbort>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // 1. Count the request and its key, then wait.
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .filter(|k| !k.trim().is_empty() && k.len() <= MAX_KEY_LEN)
        .map(str::to_owned);
    let delay = {
        let mut inner = provider.lock();
        inner.stats.requests += 1;
        if let Some(key) = &key
            && inner.seen_keys.insert(key.clone())
        {
            inner.stats.distinct_keys += 1;
        }
        Duration::from_millis(inner.settings.delay_ms)
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }

    // 2. Check the request.
    let Some(key) = key else {
        return problem(
            StatusCode::BAD_REQUEST,
            "Idempotency-Key required",
            format!(
                "send an `Idempotency-Key` header of 1 to {MAX_KEY_LEN} printable ASCII characters"
            ),
        );
    };
    let request = match parse_charge_request(&body) {
        Ok(request) => request,
        Err(problem) => return problem.into_response(),
    };

    // 3–5. Fail, or look up or create the key's charge; then maybe drop the answer.
    let (outcome, drop_answer) = {
        let mut inner = provider.lock();
        let fail_rate = inner.settings.fail_rate;
        if inner.rng.chance(fail_rate) {
            drop(inner);
            tracing::info!(key, "injected failure");
            return problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Injected failure",
                "the provider failed before touching any charge (fail_rate); retrying is safe",
            );
        }
        let outcome = inner.charge(&key, request).map(|(outcome, created)| {
            if created
                && let Outcome::Charged(charge) = &outcome
                && let Some(webhooks) = &provider.webhooks
            {
                inner.announce(charge, webhooks, Arc::downgrade(&provider.inner));
            }
            outcome
        });
        let drop_rate = inner.settings.drop_response_rate;
        (outcome, inner.rng.chance(drop_rate))
    };
    let response = match outcome {
        Ok(Outcome::Charged(charge)) => (StatusCode::CREATED, Json(charge)).into_response(),
        Ok(Outcome::Declined) => problem(
            StatusCode::PAYMENT_REQUIRED,
            "Card declined",
            format!("charges of {DECLINED_AMOUNT} are always declined; no charge was created"),
        ),
        Err(KeyReused) => problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Idempotency-Key reused",
            "this Idempotency-Key was first used with another request body",
        ),
    };
    if !drop_answer {
        return response;
    }
    tracing::info!(
        key,
        status = response.status().as_u16(),
        "dropping the answer"
    );
    match abort {
        Some(Extension(ConnectInfo(abort))) => {
            // Every read and write on the connection fails from now on, so hyper closes it
            // when it tries to write this response.
            abort.abort();
            response
        }
        None => failing_body(response.status()),
    }
}

/// The key was bound to another request.
#[derive(Debug)]
struct KeyReused;

impl Inner {
    /// Looks up `key`'s outcome, or binds the key to `request` and decides one; `true` when
    /// the outcome was decided now.
    fn charge(&mut self, key: &str, request: ChargeRequest) -> Result<(Outcome, bool), KeyReused> {
        if let Some(bound) = self.bound.get(key) {
            return if bound.request == request {
                Ok((bound.outcome.clone(), false))
            } else {
                Err(KeyReused)
            };
        }
        let outcome = if request.amount == DECLINED_AMOUNT {
            Outcome::Declined
        } else {
            self.stats.charges += 1;
            Outcome::Charged(Charge {
                id: format!("ch_{}", Uuid::new_v4().simple()),
                amount: request.amount,
                currency: request.currency.clone(),
                customer: request.customer.clone(),
            })
        };
        self.bound.insert(
            key.to_owned(),
            Bound {
                request,
                outcome: outcome.clone(),
            },
        );
        Ok((outcome, true))
    }

    /// Creates `charge`'s event and starts its deliveries: the original and the duplicates
    /// `webhook_duplicate_rate` rolls, each on its own task.
    fn announce(&mut self, charge: &Charge, webhooks: &WebhookConfig, state: Weak<Mutex<Self>>) {
        let id = format!("evt_{}", Uuid::new_v4().simple());
        let body = EventBody {
            id: &id,
            kind: "charge.succeeded",
            data: EventData {
                charge_id: &charge.id,
                amount: charge.amount,
                currency: &charge.currency,
            },
        };
        let body = match serde_json::to_vec(&body) {
            Ok(body) => Bytes::from(body),
            // Strings and an integer always serialize.
            Err(e) => {
                tracing::error!(id, "webhook event not serialized: {e}");
                return;
            }
        };
        self.stats.webhook_events += 1;
        let event = Arc::new(Event {
            id,
            body,
            acknowledged: AtomicBool::new(false),
        });
        let mut starts = vec![Duration::ZERO];
        let rate = self.settings.webhook_duplicate_rate;
        for copy in 0..MAX_WEBHOOK_DUPLICATES {
            if self.rng.chance(rate) {
                starts.push(match copy {
                    0 => Duration::ZERO,
                    1 => Duration::from_millis(self.rng.between(1, 100)),
                    _ => Duration::from_millis(self.rng.between(200, 1_000)),
                });
            }
        }
        tracing::info!(
            id = event.id,
            charge_id = charge.id,
            deliveries = starts.len(),
            "webhook event created"
        );
        for start in starts {
            tokio::spawn(deliver(
                state.clone(),
                webhooks.clone(),
                Arc::clone(&event),
                start,
            ));
        }
    }
}

/// A `charge.succeeded` event, as its deliveries send it.
#[derive(Serialize)]
struct EventBody<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    data: EventData<'a>,
}

#[derive(Serialize)]
struct EventData<'a> {
    charge_id: &'a str,
    amount: i64,
    currency: &'a str,
}

/// An event being delivered, shared by its copies.
#[derive(Debug)]
struct Event {
    id: String,
    body: Bytes,
    /// Whether any attempt of any copy got a `2xx`.
    acknowledged: AtomicBool,
}

/// Delivers one copy of `event` after `start_after`, retrying until a `2xx`, or until the
/// provider is gone.
async fn deliver(
    state: Weak<Mutex<Inner>>,
    webhooks: WebhookConfig,
    event: Arc<Event>,
    start_after: Duration,
) {
    if !start_after.is_zero() {
        tokio::time::sleep(start_after).await;
    }
    let mut rng = Rng::default();
    let mut backoff = WEBHOOK_FIRST_BACKOFF;
    let mut attempt: u64 = 0;
    loop {
        attempt += 1;
        {
            let Some(state) = state.upgrade() else { return };
            lock(&state).stats.webhooks_sent += 1;
        }
        let failure = match send_once(&webhooks, &event).await {
            Ok(()) => {
                let Some(state) = state.upgrade() else { return };
                let mut inner = lock(&state);
                if !event.acknowledged.swap(true, Ordering::AcqRel) {
                    inner.stats.webhooks_acknowledged += 1;
                }
                drop(inner);
                if attempt > 1 {
                    tracing::info!(id = event.id, attempt, "webhook delivered");
                } else {
                    tracing::debug!(id = event.id, "webhook delivered");
                }
                return;
            }
            Err(failure) => failure,
        };
        // Up to a tenth more, so that copies failing together do not retry in lockstep.
        let jitter_ms = rng.between(0, (backoff.as_millis() / 10).try_into().unwrap_or(0));
        let wait = backoff + Duration::from_millis(jitter_ms);
        if attempt == 1 {
            tracing::warn!(
                id = event.id,
                url = webhooks.url(),
                "webhook delivery failed ({failure}); retrying until a 2xx"
            );
        } else {
            tracing::debug!(
                id = event.id,
                attempt,
                ?wait,
                "webhook delivery failed ({failure})"
            );
        }
        tokio::time::sleep(wait).await;
        backoff = (backoff * 2).min(WEBHOOK_MAX_BACKOFF);
    }
}

/// One attempt: signed now, `Ok` on a `2xx`.
async fn send_once(webhooks: &WebhookConfig, event: &Event) -> Result<(), String> {
    let timestamp = unix_seconds();
    let signature = webhooks
        .signer
        .sign(&event.id, timestamp, &event.body)
        .map_err(|e| format!("not signed: {e}"))?;
    let response = webhooks
        .http
        .post(webhooks.url.clone())
        .header(header::CONTENT_TYPE, "application/json")
        .header(standardwebhooks::HEADER_WEBHOOK_ID, &event.id)
        .header(
            standardwebhooks::HEADER_WEBHOOK_TIMESTAMP,
            timestamp.to_string(),
        )
        .header(standardwebhooks::HEADER_WEBHOOK_SIGNATURE, signature)
        .body(event.body.clone())
        .send()
        .await
        .map_err(|e| error_chain(&e))?;
    let status = response.status();
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("answered {status}"))
    }
}

/// Now, in Unix seconds, for `webhook-timestamp`: the receiver checks it against its own
/// wall clock, so this reads the wall clock too.
#[allow(clippy::disallowed_methods)] // the one place the provider reads the wall clock
fn unix_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}

/// `error` and its sources, for logs.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn parse_charge_request(body: &[u8]) -> Result<ChargeRequest, Problem> {
    let value: Value = serde_json::from_slice(body).map_err(|e| Problem {
        status: StatusCode::BAD_REQUEST,
        title: "Malformed JSON",
        detail: format!("the body is not JSON: {e}"),
    })?;
    let invalid = |detail: String| Problem {
        status: StatusCode::UNPROCESSABLE_ENTITY,
        title: "Invalid charge",
        detail,
    };
    let expected = "expected {\"amount\": integer, \"currency\": string, \"customer\": string}";
    // Checked first: serde would also take the fields as an array.
    if !value.is_object() {
        return Err(invalid(format!("{expected}, got {}", kind(&value))));
    }
    let request: ChargeRequest =
        serde_json::from_value(value).map_err(|e| invalid(format!("{expected}: {e}")))?;
    if request.amount < 1 {
        return Err(invalid("`amount` must be at least 1".to_owned()));
    }
    if request.currency.trim().is_empty() || request.customer.trim().is_empty() {
        return Err(invalid(
            "`currency` and `customer` must not be empty".to_owned(),
        ));
    }
    Ok(request)
}

async fn read_control(State(provider): State<Provider>) -> Json<Settings> {
    Json(provider.settings())
}

async fn control(State(provider): State<Provider>, body: Bytes) -> Response {
    let bad = |detail: String| problem(StatusCode::BAD_REQUEST, "Invalid settings", detail);
    let expected = "expected {\"fail_rate\": 0..1, \"drop_response_rate\": 0..1, \"delay_ms\": \
                    integer ≥ 0, \"webhook_duplicate_rate\": 0..1, \"webhook_status\": 0 or \
                    100..599}, every field optional";
    let patch = match serde_json::from_slice::<Value>(&body) {
        // Checked first: serde would also take the fields as an array.
        Ok(value) if !value.is_object() => {
            return bad(format!("{expected}, got {}", kind(&value)));
        }
        Ok(value) => serde_json::from_value::<SettingsPatch>(value),
        Err(e) => Err(e),
    };
    let patch = match patch {
        Ok(patch) => patch,
        Err(e) => return bad(format!("{expected}: {e}")),
    };
    for (name, rate) in [
        ("fail_rate", patch.fail_rate),
        ("drop_response_rate", patch.drop_response_rate),
        ("webhook_duplicate_rate", patch.webhook_duplicate_rate),
    ] {
        if let Some(rate) = rate
            && !(0.0..=1.0).contains(&rate)
        {
            return bad(format!("`{name}` must be between 0 and 1, got {rate}"));
        }
    }
    if let Some(status) = patch.webhook_status
        && status != 0
        && !(100..=599).contains(&status)
    {
        return bad(format!(
            "`webhook_status` must be 0 or a status from 100 to 599, got {status}"
        ));
    }
    let settings = {
        let mut inner = provider.lock();
        let settings = &mut inner.settings;
        settings.fail_rate = patch.fail_rate.unwrap_or(settings.fail_rate);
        settings.drop_response_rate = patch
            .drop_response_rate
            .unwrap_or(settings.drop_response_rate);
        settings.delay_ms = patch.delay_ms.unwrap_or(settings.delay_ms);
        settings.webhook_duplicate_rate = patch
            .webhook_duplicate_rate
            .unwrap_or(settings.webhook_duplicate_rate);
        settings.webhook_status = patch.webhook_status.unwrap_or(settings.webhook_status);
        *settings
    };
    tracing::info!(?settings, "settings changed");
    Json(settings).into_response()
}

async fn stats(State(provider): State<Provider>) -> Json<Stats> {
    Json(provider.stats())
}

async fn receive_webhook(State(provider): State<Provider>, body: Bytes) -> Response {
    let status = provider.settings().webhook_status;
    if status != 0 {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        tracing::debug!(%status, "webhook refused (webhook_status)");
        if status.is_client_error() || status.is_server_error() {
            return problem(
                status,
                "Webhook refused",
                format!(
                    "this receiver answers {} (webhook_status); the delivery was not recorded",
                    status.as_u16()
                ),
            );
        }
        return status.into_response();
    }
    let delivery: Value = match serde_json::from_slice(&body) {
        Ok(value @ Value::Object(_)) if !value["id"].is_null() => value,
        Ok(_) => {
            return problem(
                StatusCode::BAD_REQUEST,
                "Invalid delivery",
                "a delivery is a JSON object with a non-null `id`",
            );
        }
        Err(e) => {
            return problem(
                StatusCode::BAD_REQUEST,
                "Malformed JSON",
                format!("the body is not JSON: {e}"),
            );
        }
    };
    tracing::debug!(id = %delivery["id"], "webhook received");
    provider.lock().events.push(delivery);
    StatusCode::NO_CONTENT.into_response()
}

async fn events(State(provider): State<Provider>) -> Json<Vec<Value>> {
    let inner = provider.lock();
    Json(
        inner
            .events
            .iter()
            .map(|body| serde_json::json!({"id": body["id"], "body": body}))
            .collect(),
    )
}

async fn not_found() -> Response {
    problem(
        StatusCode::NOT_FOUND,
        "Not found",
        "routes: POST /charges, GET|POST /control, GET /stats, POST /webhooks, GET /events",
    )
}

async fn method_not_allowed() -> Response {
    problem(
        StatusCode::METHOD_NOT_ALLOWED,
        "Method not allowed",
        "routes: POST /charges, GET|POST /control, GET /stats, POST /webhooks, GET /events",
    )
}

/// What kind of JSON value `value` is, for error messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// An RFC 9457 problem answer.
fn problem(status: StatusCode, title: &'static str, detail: impl Into<String>) -> Response {
    Problem {
        status,
        title,
        detail: detail.into(),
    }
    .into_response()
}

/// An RFC 9457 problem: `{"type": "about:blank", "title", "status", "detail"}` as
/// `application/problem+json`.
#[derive(Debug)]
struct Problem {
    status: StatusCode,
    title: &'static str,
    detail: String,
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "type": "about:blank",
            "title": self.title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        let mut response = Response::new(Body::from(body.to_string()));
        *response.status_mut() = self.status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

/// The fallback for dropping an answer without a [`ConnectionAbort`]: a response of unknown
/// length whose body fails at once, so hyper closes the connection mid-message.
fn failing_body(status: StatusCode) -> Response {
    let stream = futures_util::stream::once(async {
        Err::<Bytes, _>(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "answer dropped on purpose",
        ))
    });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = status;
    response
}

/// A connection's kill switch, handed to handlers as [`ConnectInfo`] by [`serve`]: once
/// [`abort`](Self::abort)ed, every read and write on the connection fails, so the server
/// closes it without writing what it was about to.
#[derive(Debug, Clone, Default)]
pub struct ConnectionAbort(Arc<AtomicBool>);

impl ConnectionAbort {
    /// Fails every later read and write on the connection.
    pub fn abort(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn check(&self) -> io::Result<()> {
        if self.0.load(Ordering::Acquire) {
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection aborted on purpose",
            ))
        } else {
            Ok(())
        }
    }
}

/// A TCP stream that fails every read and write once its [`ConnectionAbort`] fires.
#[derive(Debug)]
pub struct AbortableStream {
    inner: TcpStream,
    abort: ConnectionAbort,
}

impl AsyncRead for AbortableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.abort.check()?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for AbortableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.abort.check()?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.abort.check()?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.abort.check()?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// SplitMix64: small, fast and plenty for rolling dice; seeded from the OS.
#[derive(Debug)]
struct Rng(u64);

impl Default for Rng {
    fn default() -> Self {
        // A v4 UUID is 122 bits from the operating system's random source.
        Self(Uuid::new_v4().as_u128() as u64)
    }
}

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer from `low` to `high`, both included (`low` when `high < low`).
    fn between(&mut self, low: u64, high: u64) -> u64 {
        match (high.saturating_sub(low)).checked_add(1) {
            Some(span) => low + self.next_u64() % span,
            None => self.next_u64(),
        }
    }

    /// True with probability `p`: never for 0, always for 1.
    fn chance(&mut self, p: f64) -> bool {
        // 53 random bits: a uniform float in [0, 1).
        let roll = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        roll < p
    }
}
