//! Tracing and metrics on real databases: the span of each execution and its outcome, the
//! step events, the request id, the counters and histograms, the stuck-keys gauge — and no
//! key, tenant or body written as it is. Every case runs on every store.
//!
//! Each test runs on a current-thread runtime with a capturing `tracing` subscriber and a
//! `DebuggingRecorder` set as the thread's defaults, so that tests running in parallel never
//! see each other's spans or metrics.
#![allow(clippy::unwrap_used)]

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use common::{Harness, TestDb};
use http_body_util::BodyExt as _;
use idem_runtime::protocol::{OutcomeKind, Record};
use idem_runtime::spec::{Mode, OperationSpec, Scope, ScopeKind};
use idem_runtime::sqlx::Transaction;
use idem_runtime::staged::{Attempt, Finished, Reconciler, StepError};
use idem_runtime::store::{KeyRef, KeyStatus};
use idem_runtime::telemetry::{self, RequestId, key_hash};
use idem_runtime::{Idem, IdemState, IdempotencyKey, JsonBody, Principal, idempotent};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use serde::{Deserialize, Serialize};
use tower::ServiceExt as _;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record as SpanRecord};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

// ---------------------------------------------------------------------------------------
// Capturing spans and events.

/// A span as created and recorded to.
#[derive(Debug, Clone, Default)]
struct SpanData {
    name: String,
    fields: BTreeMap<String, String>,
}

/// An event, with the spans it was in (innermost first) as they were then.
#[derive(Debug, Clone)]
struct EventData {
    level: tracing::Level,
    message: String,
    fields: BTreeMap<String, String>,
    spans: Vec<SpanData>,
}

impl EventData {
    /// A field of the event or of the nearest span that has it.
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .get(name)
            .or_else(|| self.spans.iter().find_map(|span| span.fields.get(name)))
            .map(String::as_str)
    }
}

#[derive(Debug, Default)]
struct Captured {
    spans: Vec<SpanData>,
    events: Vec<EventData>,
}

/// The index of a span in [`Captured::spans`], kept in the span's extensions.
struct Index(usize);

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Captured>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut data = SpanData {
            name: attrs.metadata().name().to_owned(),
            fields: BTreeMap::new(),
        };
        attrs.record(&mut Fields(&mut data.fields));
        let mut captured = self.0.lock().unwrap();
        captured.spans.push(data);
        let index = captured.spans.len() - 1;
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Index(index));
        }
    }

    fn on_record(&self, id: &Id, values: &SpanRecord<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let extensions = span.extensions();
        let Some(Index(index)) = extensions.get::<Index>() else {
            return;
        };
        let mut captured = self.0.lock().unwrap();
        values.record(&mut Fields(&mut captured.spans[*index].fields));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let message = fields.remove("message").unwrap_or_default();
        let mut captured = self.0.lock().unwrap();
        let spans = ctx
            .event_scope(event)
            .into_iter()
            .flatten()
            .filter_map(|span| {
                let extensions = span.extensions();
                let Index(index) = extensions.get::<Index>()?;
                Some(captured.spans[*index].clone())
            })
            .collect();
        captured.events.push(EventData {
            level: *event.metadata().level(),
            message,
            fields,
            spans,
        });
    }
}

impl Capture {
    fn spans(&self, name: &str) -> Vec<SpanData> {
        let captured = self.0.lock().unwrap();
        captured
            .spans
            .iter()
            .filter(|span| span.name == name)
            .cloned()
            .collect()
    }

    fn events(&self) -> Vec<EventData> {
        self.0.lock().unwrap().events.clone()
    }

    fn events_named(&self, message: &str) -> Vec<EventData> {
        self.events()
            .into_iter()
            .filter(|event| event.message == message)
            .collect()
    }

    /// Everything written: span names and fields, event messages and fields.
    fn all_text(&self) -> String {
        let captured = self.0.lock().unwrap();
        let mut text = String::new();
        for span in &captured.spans {
            text.push_str(&format!("{} {:?}\n", span.name, span.fields));
        }
        for event in &captured.events {
            text.push_str(&format!("{} {:?}\n", event.message, event.fields));
        }
        text
    }
}

/// What one test observes: its spans and events, its metrics.
struct Observed {
    capture: Capture,
    snapshotter: Snapshotter,
    /// Every snapshot so far, merged: a snapshot resets what it reads.
    metrics: RefCell<Vec<(CompositeKey, DebugValue)>>,
}

impl Observed {
    /// The metrics since the test began: counters summed, histograms' values all kept,
    /// gauges as last set before this snapshot (0 when not set since the one before).
    fn metrics(&self) -> Vec<(CompositeKey, DebugValue)> {
        let mut all = self.metrics.borrow_mut();
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            match all.iter_mut().find(|(known, _)| *known == key) {
                None => all.push((key, value)),
                Some((_, known)) => match (known, value) {
                    (DebugValue::Counter(sum), DebugValue::Counter(n)) => *sum += n,
                    (DebugValue::Histogram(values), DebugValue::Histogram(more)) => {
                        values.extend(more);
                    }
                    (known, value) => *known = value,
                },
            }
        }
        all.iter()
            .map(|(key, value)| {
                let value = match value {
                    DebugValue::Counter(n) => DebugValue::Counter(*n),
                    DebugValue::Gauge(v) => DebugValue::Gauge(*v),
                    DebugValue::Histogram(values) => DebugValue::Histogram(values.clone()),
                };
                (key.clone(), value)
            })
            .collect()
    }
}

/// The value of the metric `name` whose labels are exactly `labels`, from `metrics`.
fn metric<'a>(
    metrics: &'a [(CompositeKey, DebugValue)],
    kind: MetricKind,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<&'a DebugValue> {
    metrics.iter().find_map(|(key, value)| {
        let (k, key) = (key.kind(), key.key());
        let mut have: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        let mut want = labels.to_vec();
        have.sort_unstable();
        want.sort_unstable();
        (k == kind && key.name() == name && have == want).then_some(value)
    })
}

fn counter(metrics: &[(CompositeKey, DebugValue)], name: &str, labels: &[(&str, &str)]) -> u64 {
    match metric(metrics, MetricKind::Counter, name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        _ => 0,
    }
}

fn histogram(
    metrics: &[(CompositeKey, DebugValue)],
    name: &str,
    labels: &[(&str, &str)],
) -> Vec<f64> {
    match metric(metrics, MetricKind::Histogram, name, labels) {
        Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.into_inner()).collect(),
        _ => Vec::new(),
    }
}

fn gauge(metrics: &[(CompositeKey, DebugValue)], name: &str, labels: &[(&str, &str)]) -> f64 {
    match metric(metrics, MetricKind::Gauge, name, labels) {
        Some(DebugValue::Gauge(value)) => value.into_inner(),
        _ => f64::NAN,
    }
}

/// Runs `test` on a current-thread runtime with a capturing subscriber and a debugging
/// recorder as this thread's defaults.
fn observed<F, Fut>(test: F)
where
    F: FnOnce(Observed) -> Fut,
    Fut: Future<Output = ()>,
{
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _tracing = tracing::subscriber::set_default(subscriber);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = metrics::set_default_local_recorder(&recorder);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(test(Observed {
        capture,
        snapshotter,
        metrics: RefCell::default(),
    }));
}

// ---------------------------------------------------------------------------------------
// An application.

/// Never to be written anywhere as they are.
const TENANT: &str = "tenant-secret-4711";
const KEY: &str = "key-secret-0815";
const BODY: &str = "body-secret-2342";

struct State<DB: TestDb> {
    idem: Idem<DB>,
}

impl<DB: TestDb> Clone for State<DB> {
    fn clone(&self) -> Self {
        Self {
            idem: self.idem.clone(),
        }
    }
}

impl<DB: TestDb> IdemState<DB> for State<DB> {
    type Principal = Tenant;
    fn idem(&self) -> &Idem<DB> {
        &self.idem
    }
}

/// The `x-tenant` header, standing in for authentication.
struct Tenant(String);

impl<S: Send + Sync> FromRequestParts<S> for Tenant {
    type Rejection = StatusCode;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, StatusCode> {
        parts
            .headers
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .map(|t| Self(t.to_owned()))
            .ok_or(StatusCode::UNAUTHORIZED)
    }
}

impl Principal for Tenant {
    fn tenant(&self) -> Option<&str> {
        Some(&self.0)
    }
}

#[derive(Debug, Deserialize, Serialize)]
struct Item {
    name: String,
}

const OPERATION: &str = "telemetry_items:v1";

#[idempotent(
    scope = "tenant",
    operation = "telemetry_items",
    path = "POST /telemetry/items"
)]
async fn create_item<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(item): JsonBody<Item>,
) -> Response {
    DB::write_effect(&mut **tx, "item").await;
    assert!(item.name != "boom", "handler bug");
    (StatusCode::CREATED, format!("created {}", item.name)).into_response()
}

async fn app<DB: TestDb>() -> (Harness<DB>, Router) {
    let h = Harness::<DB>::new().await;
    let router = Router::new()
        .route("/telemetry/items", post(create_item::<DB>))
        .with_state(State {
            idem: h.idem.clone(),
        });
    (h, router)
}

fn request(key: Option<&str>, name: &str, request_id: Option<&str>) -> Request<Body> {
    let mut builder = Request::post("/telemetry/items")
        .header("content-type", "application/json")
        .header("x-tenant", TENANT);
    if let Some(key) = key {
        builder = builder.header("idempotency-key", format!("\"{key}\""));
    }
    if let Some(id) = request_id {
        builder = builder.header("x-request-id", id);
    }
    builder
        .body(Body::from(
            serde_json::to_vec(&Item {
                name: name.to_owned(),
            })
            .unwrap(),
        ))
        .unwrap()
}

async fn send(app: &Router, request: Request<Body>) -> (StatusCode, String) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

// ---------------------------------------------------------------------------------------
// The tests.

/// Executed, replayed, mismatch and a missing key: one span each with its outcome, the
/// counters by outcome, the histograms; the key, the tenant and the body nowhere.
async fn outcomes_spans_and_counters<DB: TestDb>(seen: Observed) {
    let (_h, app) = app::<DB>().await;
    let first = send(&app, request(Some(KEY), BODY, Some("req-first"))).await;
    assert_eq!(first.0, StatusCode::CREATED);
    let replay = send(&app, request(Some(KEY), BODY, Some("req-retry"))).await;
    assert_eq!(replay, first);
    let other = send(&app, request(Some(KEY), "another", None)).await;
    assert_eq!(other.0, StatusCode::UNPROCESSABLE_ENTITY);
    let keyless = send(&app, request(None, BODY, None)).await;
    assert_eq!(keyless.0, StatusCode::BAD_REQUEST);

    // One span per execution, with its outcome, the hashed key and the request id.
    let spans = seen.capture.spans(telemetry::SPAN_NAME);
    let outcomes: Vec<&str> = spans.iter().map(|s| s.fields["outcome"].as_str()).collect();
    assert_eq!(outcomes, ["executed", "replayed", "mismatch", "rejected"]);
    let hash = key_hash(&format!("tenant:{TENANT}"), KEY).to_string();
    for span in &spans[..3] {
        assert_eq!(span.fields["operation"], OPERATION);
        assert_eq!(span.fields["scope"], "tenant");
        assert_eq!(span.fields["key"], hash);
    }
    assert!(!spans[3].fields.contains_key("key"), "{:?}", spans[3]);
    assert_eq!(spans[0].fields["request_id"], "req-first");
    assert_eq!(spans[1].fields["request_id"], "req-retry");
    assert!(!spans[2].fields.contains_key("request_id"));

    // The steps of the first execution, inside its span.
    for step in [
        "key looked up",
        "key lock taken",
        "work done",
        "response stored",
    ] {
        let events = seen.capture.events_named(step);
        let event = events
            .first()
            .unwrap_or_else(|| panic!("no `{step}` event"));
        assert_eq!(event.level, tracing::Level::DEBUG);
        assert_eq!(event.field("request_id"), Some("req-first"), "{event:?}");
        assert_eq!(event.field("key"), Some(hash.as_str()), "{event:?}");
    }
    let looked_up = seen.capture.events_named("key looked up");
    let found: Vec<_> = looked_up.iter().filter_map(|e| e.field("found")).collect();
    assert_eq!(found, ["none", "completed", "completed"]);
    // Every execution ends with an event: routine outcomes at DEBUG, the others at INFO.
    let finished = seen.capture.events_named("idempotent request finished");
    let ended = |outcome| {
        finished
            .iter()
            .find(|e| e.field("outcome") == Some(outcome))
            .unwrap_or_else(|| panic!("no end of a `{outcome}` execution"))
    };
    assert_eq!(ended("replayed").level, tracing::Level::DEBUG);
    assert_eq!(ended("replayed").field("request_id"), Some("req-retry"));
    assert_eq!(ended("mismatch").level, tracing::Level::INFO);
    assert_eq!(ended("rejected").level, tracing::Level::INFO);
    // idem's refusal line carries the span's fields.
    let refused = seen.capture.events_named("idempotent request refused");
    let mismatch = refused
        .iter()
        .find(|e| e.field("outcome") == Some("mismatch"))
        .unwrap();
    assert_eq!(mismatch.field("key"), Some(hash.as_str()));
    assert_eq!(mismatch.field("operation"), Some(OPERATION));

    // Counters by outcome, labelled with the operation id.
    let metrics = seen.metrics();
    let requests = |outcome| {
        counter(
            &metrics,
            telemetry::REQUESTS_TOTAL,
            &[("operation", OPERATION), ("outcome", outcome)],
        )
    };
    assert_eq!(requests("executed"), 1);
    assert_eq!(requests("replayed"), 1);
    assert_eq!(requests("mismatch"), 1);
    assert_eq!(requests("failed"), 0);
    assert_eq!(
        counter(
            &metrics,
            telemetry::REJECTED_TOTAL,
            &[("operation", OPERATION), ("reason", "missing_key")]
        ),
        1
    );
    // The lock was waited for by the first execution and, where the lock may come before
    // the lookup (`Backend::LOCK_FIRST`), by the replay, which followed a new key; the
    // mismatch, after a key that existed, looked it up first and never took the lock. One
    // response of the first body's size was stored, each execution was timed.
    let waits = histogram(
        &metrics,
        telemetry::LOCK_WAIT_SECONDS,
        &[("operation", OPERATION)],
    );
    let lock_first = <DB as idem_runtime::store::Backend>::DIALECT.lock_first;
    assert_eq!(waits.len(), if lock_first { 2 } else { 1 }, "{waits:?}");
    assert!(waits.iter().all(|w| (0.0..30.0).contains(w)), "{waits:?}");
    let stored = histogram(
        &metrics,
        telemetry::STORED_RESPONSE_BYTES,
        &[("operation", OPERATION)],
    );
    #[allow(clippy::cast_precision_loss)]
    let first_len = first.1.len() as f64;
    assert_eq!(stored, [first_len]);
    for outcome in ["executed", "replayed", "mismatch"] {
        let timed = histogram(
            &metrics,
            telemetry::EXECUTION_SECONDS,
            &[("operation", OPERATION), ("outcome", outcome)],
        );
        assert_eq!(timed.len(), 1, "{outcome}: {timed:?}");
    }

    // Nothing raw, anywhere.
    let text = seen.capture.all_text();
    assert!(text.contains(&hash), "the hash is written");
    for secret in [TENANT, KEY, BODY] {
        assert!(!text.contains(secret), "`{secret}` written:\n{text}");
    }
}

/// A panicking handler: idem's error line is in the span (operation, hashed key, request
/// id), and the execution counts as `error`.
async fn error_lines_carry_the_span<DB: TestDb>(seen: Observed) {
    let (_h, app) = app::<DB>().await;
    let (status, _) = send(&app, request(Some(KEY), "boom", Some("req-boom"))).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    let errors: Vec<_> = seen
        .capture
        .events()
        .into_iter()
        .filter(|e| e.level == tracing::Level::ERROR)
        .collect();
    let line = errors
        .iter()
        .find(|e| e.message == "idempotent operation failed")
        .unwrap_or_else(|| panic!("no error line: {errors:?}"));
    let hash = key_hash(&format!("tenant:{TENANT}"), KEY).to_string();
    assert_eq!(line.field("operation"), Some(OPERATION));
    assert_eq!(line.field("key"), Some(hash.as_str()));
    assert_eq!(line.field("request_id"), Some("req-boom"));
    assert_eq!(line.field("outcome"), Some("error"));
    let metrics = seen.metrics();
    assert_eq!(
        counter(
            &metrics,
            telemetry::REQUESTS_TOTAL,
            &[("operation", OPERATION), ("outcome", "error")]
        ),
        1
    );
    let text = seen.capture.all_text();
    for secret in [TENANT, KEY] {
        assert!(!text.contains(secret), "`{secret}` written:\n{text}");
    }
}

/// A `RequestId` extension wins over the header.
async fn request_id_extension_wins<DB: TestDb>(seen: Observed) {
    let (_h, app) = app::<DB>().await;
    let mut request = request(Some(KEY), BODY, Some("from-header"));
    request
        .extensions_mut()
        .insert(RequestId::new("from-extension"));
    let (status, _) = send(&app, request).await;
    assert_eq!(status, StatusCode::CREATED);
    let spans = seen.capture.spans(telemetry::SPAN_NAME);
    assert_eq!(spans.len(), 1);
    assert_eq!(spans[0].fields["request_id"], "from-extension");
}

const STAGED: OperationSpec = OperationSpec::new("telemetry_pay:v1")
    .mode(Mode::Staged)
    .lease(Duration::from_secs(3600));

fn staged_scope() -> Scope {
    Scope::new(ScopeKind::Tenant, Some("tenant-secret-4711")).unwrap()
}

fn json_amount() -> serde_json::Value {
    serde_json::json!({ "amount": 5 })
}

async fn charge<DB: TestDb>(attempt: Attempt<DB>, interrupt: bool) -> Result<Finished, StepError> {
    let charge: String = attempt
        .step("charge", async |provider_key| {
            Ok(format!("ch_{provider_key}"))
        })
        .await?;
    if interrupt {
        return Err(StepError::retryable("the provider blinked"));
    }
    attempt
        .finish(async |_tx| Ok(Record::json(StatusCode::CREATED, &charge).unwrap()))
        .await
}

/// Staged mode through `Idem::staged`: its span and counters, step events, the stored
/// size, and the stuck-keys gauge going up for an interrupted key and back to 0.
async fn staged_and_stuck_keys<DB: TestDb>(seen: Observed) {
    let h = Harness::<DB>::new().await;
    h.idem.register(&[&STAGED]).await.unwrap();
    let labels = [("operation", STAGED.id)];

    // Nothing stuck: the registered staged operation reads 0.
    let stuck = h.idem.observe_stuck().await.unwrap();
    assert_eq!(stuck.get(STAGED.id), Some(&0));
    assert_eq!(gauge(&seen.metrics(), telemetry::STUCK_KEYS, &labels), 0.0);

    // Interrupted: the key stays processing with its lease released, i.e. stuck.
    let key = IdempotencyKey::new(KEY).unwrap();
    let interrupted = h
        .idem
        .staged(&STAGED, &staged_scope(), &key, &json_amount(), |attempt| {
            charge::<DB>(attempt, true)
        })
        .await;
    assert!(matches!(
        interrupted,
        Err(idem_runtime::Error::Interrupted { .. })
    ));
    let stuck = h.idem.observe_stuck().await.unwrap();
    assert_eq!(stuck.get(STAGED.id), Some(&1));
    assert_eq!(gauge(&seen.metrics(), telemetry::STUCK_KEYS, &labels), 1.0);

    // The retry takes the key over and completes it; the gauge goes back to 0.
    let done = h
        .idem
        .staged(&STAGED, &staged_scope(), &key, &json_amount(), |attempt| {
            charge::<DB>(attempt, false)
        })
        .await
        .unwrap();
    assert_eq!(done.kind, OutcomeKind::Executed);
    h.idem.observe_stuck().await.unwrap();
    let metrics = seen.metrics();
    assert_eq!(gauge(&metrics, telemetry::STUCK_KEYS, &labels), 0.0);

    let outcome = |outcome| {
        counter(
            &metrics,
            telemetry::REQUESTS_TOTAL,
            &[("operation", STAGED.id), ("outcome", outcome)],
        )
    };
    assert_eq!(outcome("failed"), 1, "the interrupted attempt");
    assert_eq!(outcome("executed"), 1);
    #[allow(clippy::cast_precision_loss)]
    let stored_len = done.record.body.len() as f64;
    assert_eq!(
        histogram(&metrics, telemetry::STORED_RESPONSE_BYTES, &labels),
        [stored_len]
    );
    let spans = seen.capture.spans(telemetry::SPAN_NAME);
    let outcomes: Vec<&str> = spans.iter().map(|s| s.fields["outcome"].as_str()).collect();
    assert_eq!(outcomes, ["failed", "executed"]);
    assert_eq!(
        spans[0].fields["key"],
        key_hash("tenant:tenant-secret-4711", KEY).to_string()
    );
    let reserved = seen.capture.events_named("key reserved");
    assert_eq!(reserved.len(), 1);
    let taken_over = seen.capture.events_named("key taken over");
    assert_eq!(taken_over.len(), 1);
    assert_eq!(taken_over[0].field("attempt"), Some("2"));
    let steps = seen.capture.events_named("step recorded");
    assert_eq!(steps.len(), 1, "the retry reads the recorded step back");
    assert_eq!(steps[0].field("step"), Some("charge"));
    assert_eq!(steps[0].field("operation"), Some(STAGED.id));

    // A key no attempt completes: the reconciler resumes it until its last attempt, then
    // leaves it stuck for an operator, and counts it once.
    let doomed = IdempotencyKey::new("k-doomed").unwrap();
    let interrupted = h
        .idem
        .staged(
            &STAGED,
            &staged_scope(),
            &doomed,
            &json_amount(),
            |attempt| charge::<DB>(attempt, true),
        )
        .await;
    assert!(interrupted.is_err());
    let reconciler = Reconciler::new(h.idem.clone())
        .max_attempts(3)
        .resumable(STAGED, |attempt, _: serde_json::Value| {
            charge::<DB>(attempt, true)
        });
    let passes = [
        reconciler.run_once().await.unwrap(),
        reconciler.run_once().await.unwrap(),
        reconciler.run_once().await.unwrap(),
    ];
    let seen_passes: Vec<(usize, usize, usize)> = passes
        .iter()
        .map(|done| (done.stuck, done.not_completed, done.left))
        .collect();
    assert_eq!(
        seen_passes,
        [(1, 1, 0), (1, 1, 1), (0, 0, 0)],
        "attempts 2, 3, none"
    );
    let row = h
        .idem
        .lookup(KeyRef {
            scope: staged_scope().as_str(),
            operation: STAGED.id,
            key: "k-doomed",
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!((row.attempt, row.status), (3, KeyStatus::Stuck));
    let metrics = seen.metrics();
    assert_eq!(
        counter(&metrics, telemetry::RECONCILER_LEFT_TOTAL, &labels),
        1
    );
    let left = seen.capture.events_named(
        "the reconciler leaves this staged key stuck for an operator: its last attempt did not \
         complete it (idem keys list --status stuck)",
    );
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].field("attempt"), Some("3"));

    let text = seen.capture.all_text();
    for secret in [TENANT, KEY] {
        assert!(!text.contains(secret), "`{secret}` written:\n{text}");
    }
}

idem_testkit::on_every_store!(
    #[run = observed]
    outcomes_spans_and_counters,
    error_lines_carry_the_span,
    request_id_extension_wins,
    staged_and_stuck_keys,
);
