//! The attribute's inputs over HTTP in process (`tower::ServiceExt::oneshot`), on PostgreSQL
//! and SQLite: which extractors count in the fingerprint, the canonical form of bodies, body
//! limits, validation, and the principal. Each test is named after what it proves.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;

use axum::Json as AxJson;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use bytes::Bytes;
use common::TestDb;
use common::app::{Amount, App, Caller, Reply, Setup, call, effect, send};
use idem_runtime::fingerprint::{Fingerprint, FingerprintError, InputWriter, part};
use idem_runtime::sqlx::Transaction;
use idem_runtime::store::KeyRef;
use idem_runtime::{Check, Checked, Config, Input, JsonBody, Problem, idempotent};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest as _, Sha256};

// ---------------------------------------------------------------------------------------
// The application (its state, principal and `Amount` input are `common::app`'s): extractors,
// handlers.

#[derive(Debug, Deserialize, Serialize)]
struct Transfer {
    to: String,
    cents: i64,
}

/// axum's usual wrapper for custom rejections: delegates to `axum::Json`, answers its
/// rejection as a problem.
struct AppJson<T>(T);

impl<S, T> FromRequest<S> for AppJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = Problem;
    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        match AxJson::<T>::from_request(req, state).await {
            Ok(AxJson(value)) => Ok(Self(value)),
            Err(rejection) => {
                Err(
                    Problem::new(rejection.status(), "urn:test:bad-json", "bad json")
                        .with_detail(rejection.body_text()),
                )
            }
        }
    }
}

impl<T: Serialize> Input for AppJson<T> {
    type Part = part::Body;
    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        out.value(&self.0)
    }
}

/// A custom headers input whose value is a map keyed by pairs: it has no canonical JSON.
/// `x-cells: 1,2=3;4,5=6`.
struct Cells(HashMap<(u8, u8), u8>);

impl<S: Send + Sync> FromRequestParts<S> for Cells {
    type Rejection = StatusCode;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, StatusCode> {
        let raw = parts
            .headers
            .get("x-cells")
            .and_then(|v| v.to_str().ok())
            .ok_or(StatusCode::BAD_REQUEST)?;
        let mut cells = HashMap::new();
        for cell in raw.split(';') {
            let parse = || -> Option<((u8, u8), u8)> {
                let (at, value) = cell.split_once('=')?;
                let (x, y) = at.split_once(',')?;
                Some(((x.parse().ok()?, y.parse().ok()?), value.parse().ok()?))
            };
            let (at, value) = parse().ok_or(StatusCode::BAD_REQUEST)?;
            cells.insert(at, value);
        }
        Ok(Self(cells))
    }
}

impl Input for Cells {
    type Part = part::Headers;
    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        out.value(&self.0)
    }
}

#[derive(Debug, Deserialize, Serialize)]
struct First {
    a: String,
}

#[derive(Debug, Deserialize, Serialize)]
struct Second {
    b: String,
}

#[derive(Debug, Deserialize, Serialize)]
struct Page {
    c: String,
}

#[derive(Debug, Deserialize, Serialize)]
struct Price {
    x: f64,
}

/// A body with a `HashMap`, whose iteration order differs between two instances.
#[derive(Debug, Deserialize, Serialize)]
struct Tally {
    label: String,
    counts: HashMap<String, u32>,
}

/// A quantity between 1 and 20, checked by each of the validation flavours by hand.
#[derive(Debug, Deserialize, Serialize)]
struct Order {
    quantity: u32,
}

impl Order {
    fn valid(&self) -> bool {
        (1..=20).contains(&self.quantity)
    }
}

impl Check for Order {
    fn check(&self) -> Result<(), Problem> {
        if self.valid() {
            return Ok(());
        }
        Err(Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "urn:test:quantity",
            "invalid quantity",
        ))
    }
}

#[cfg(feature = "validator")]
impl validator::Validate for Order {
    fn validate(&self) -> Result<(), validator::ValidationErrors> {
        if self.valid() {
            return Ok(());
        }
        // As `#[validate(range(…))]` makes it: the value among the params.
        let mut range = validator::ValidationError::new("range");
        range.add_param("value".into(), &self.quantity);
        let mut errors = validator::ValidationErrors::new();
        errors.add("quantity", range);
        Err(errors)
    }
}

#[cfg(feature = "garde")]
impl garde::Validate for Order {
    type Context = ();
    fn validate_into(
        &self,
        _: &(),
        parent: &mut dyn FnMut() -> garde::Path,
        report: &mut garde::Report,
    ) {
        if !self.valid() {
            report.append(
                parent().join(String::from("quantity")),
                garde::Error::new("out of range"),
            );
        }
    }
}

#[derive(Debug, Deserialize, Serialize, PartialEq)]
struct Receipt {
    id: String,
    quantity: u32,
}

/// `201` with a body unique to this execution: a replay is recognised by its body.
fn created(what: impl std::fmt::Display) -> Response {
    (
        StatusCode::CREATED,
        format!("{what}:{}", uuid::Uuid::new_v4()),
    )
        .into_response()
}

#[idempotent(scope = "global", operation = "POST /app-json")]
async fn app_json<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    AppJson(t): AppJson<Transfer>,
) -> Response {
    effect(tx, "app-json").await;
    created(format!("{}:{}", t.to, t.cents))
}

#[idempotent(scope = "global", operation = "POST /ax-json")]
async fn ax_json<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    AxJson(t): AxJson<Transfer>,
) -> Response {
    effect(tx, "ax-json").await;
    created(format!("{}:{}", t.to, t.cents))
}

#[idempotent(scope = "global", operation = "POST /bytes")]
async fn bytes_body<DB: TestDb>(tx: &mut Transaction<'_, DB>, body: Bytes) -> Response {
    effect(tx, "bytes").await;
    created(body.len())
}

#[idempotent(scope = "global", operation = "POST /string")]
async fn string_body<DB: TestDb>(tx: &mut Transaction<'_, DB>, body: String) -> Response {
    effect(tx, "string").await;
    created(body.len())
}

#[idempotent(scope = "global", operation = "POST /pair")]
async fn pair<DB: TestDb>(
    Path(first): Path<First>,
    Path(second): Path<Second>,
    Query(page): Query<Page>,
    Amount(amount): Amount,
    tx: &mut Transaction<'_, DB>,
) -> Response {
    effect(tx, "pair").await;
    created(format!("{}:{}:{}:{amount}", first.a, second.b, page.c))
}

#[idempotent(scope = "global", operation = "POST /tally")]
async fn tally<DB: TestDb>(tx: &mut Transaction<'_, DB>, JsonBody(t): JsonBody<Tally>) -> Response {
    effect(tx, "tally").await;
    created(format!("{}:{}", t.label, t.counts.len()))
}

#[idempotent(scope = "global", operation = "POST /value")]
async fn value<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(v): JsonBody<serde_json::Value>,
) -> Response {
    effect(tx, "value").await;
    created(v["to"].as_str().unwrap_or("?"))
}

#[idempotent(scope = "global", operation = "POST /transfers")]
async fn transfer<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(t): JsonBody<Transfer>,
) -> Response {
    effect(tx, "transfer").await;
    created(format!("{}:{}", t.to, t.cents))
}

#[idempotent(scope = "global", operation = "POST /checked")]
async fn checked<DB: TestDb>(tx: &mut Transaction<'_, DB>, Checked(o): Checked<Order>) -> Response {
    effect(tx, "checked").await;
    created(o.quantity)
}

#[cfg(feature = "validator")]
#[idempotent(scope = "global", operation = "POST /validated")]
async fn validated<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    idem_runtime::extract::Validated(o): idem_runtime::extract::Validated<Order>,
) -> Response {
    effect(tx, "validated").await;
    created(o.quantity)
}

#[cfg(feature = "garde")]
#[idempotent(scope = "global", operation = "POST /garde")]
async fn garde_checked<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    idem_runtime::extract::Garde(o): idem_runtime::extract::Garde<Order>,
) -> Response {
    effect(tx, "garde").await;
    created(o.quantity)
}

#[idempotent(scope = "global", operation = "POST /receipts")]
async fn receipt<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(o): JsonBody<Order>,
) -> (StatusCode, JsonBody<Receipt>) {
    effect(tx, "receipt").await;
    (
        StatusCode::CREATED,
        JsonBody(Receipt {
            id: uuid::Uuid::new_v4().to_string(),
            quantity: o.quantity,
        }),
    )
}

/// Tenant scope, and the handler takes the principal itself.
#[idempotent(scope = "tenant", operation = "POST /whoami")]
async fn whoami<DB: TestDb>(
    caller: Caller,
    tx: &mut Transaction<'_, DB>,
    JsonBody(o): JsonBody<Order>,
) -> Response {
    effect(tx, "whoami").await;
    created(format!(
        "{}:{}:{}",
        caller.tenant.as_deref().unwrap_or("-"),
        caller.user.as_deref().unwrap_or("-"),
        o.quantity
    ))
}

/// User scope, the principal as the last argument.
#[idempotent(scope = "user", operation = "POST /whoami-user")]
async fn whoami_user<DB: TestDb>(tx: &mut Transaction<'_, DB>, caller: Caller) -> Response {
    effect(tx, "whoami-user").await;
    created(caller.user.as_deref().unwrap_or("-"))
}

#[idempotent(scope = "global", operation = "POST /nan")]
async fn nan<DB: TestDb>(tx: &mut Transaction<'_, DB>, Query(p): Query<Price>) -> Response {
    effect(tx, "nan").await;
    created(p.x)
}

#[idempotent(scope = "global", operation = "POST /cells")]
async fn cells<DB: TestDb>(tx: &mut Transaction<'_, DB>, Cells(c): Cells) -> Response {
    effect(tx, "cells").await;
    created(c.len())
}

fn routes<DB: TestDb>() -> Router<App<DB>> {
    let router = Router::new()
        .route("/app-json", post(app_json::<DB>))
        .route("/ax-json", post(ax_json::<DB>))
        .route("/bytes", post(bytes_body::<DB>))
        .route("/string", post(string_body::<DB>))
        .route("/pair/{a}/{b}", post(pair::<DB>))
        .route("/tally", post(tally::<DB>))
        .route("/value", post(value::<DB>))
        .route("/transfers", post(transfer::<DB>))
        .route("/checked", post(checked::<DB>))
        .route("/receipts", post(receipt::<DB>))
        .route("/whoami", post(whoami::<DB>))
        .route("/whoami-user", post(whoami_user::<DB>))
        .route("/nan", post(nan::<DB>))
        .route("/cells", post(cells::<DB>));
    #[cfg(feature = "validator")]
    let router = router.route("/validated", post(validated::<DB>));
    #[cfg(feature = "garde")]
    let router = router.route("/garde", post(garde_checked::<DB>));
    router
}

/// The same, with an explicit `Content-Length`, as real clients send it.
async fn send_sized(router: &Router, uri: &str, key: &str, body: &str) -> Reply {
    let request = axum::http::Request::post(uri)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .header("content-length", body.len())
        .body(Body::from(body.to_owned()))
        .unwrap();
    call(router, request).await
}

/// The same, chunked: the body is a stream of 10-byte pieces, with no `Content-Length`.
async fn send_chunked(router: &Router, uri: &str, key: &str, body: &str) -> Reply {
    let chunks: Vec<Result<Bytes, std::io::Error>> = body
        .as_bytes()
        .chunks(10)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    let request = axum::http::Request::post(uri)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .unwrap();
    assert!(request.headers().get("content-length").is_none());
    call(router, request).await
}

fn key(k: &str) -> [(&str, &str); 1] {
    [("idempotency-key", k)]
}

const BOB: &str = r#"{"to":"bob","cents":100}"#;
const MALLORY: &str = r#"{"to":"mallory","cents":999999}"#;

// ---------------------------------------------------------------------------------------
// The fingerprint is decided by the extractor's type, not its spelling.

/// Same key with another body → 422 and one effect; the identical retry replays.
async fn assert_body_is_fingerprinted<DB: TestDb>(s: &Setup<DB>, app: &Router, uri: &str) {
    let before = s.h.effects().await;
    let k = key(uri.trim_start_matches('/'));
    let first = send(app, uri, &k, BOB).await;
    first.created();
    let reused = send(app, uri, &k, MALLORY).await;
    reused.problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        "urn:idem:problem:key-reused",
    );
    send(app, uri, &k, BOB).await.replay_of(&first);
    assert_eq!(
        s.h.effects().await - before,
        1,
        "{uri}: the handler ran once"
    );
}

async fn custom_rejection_wrapper_is_fingerprinted<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    let app = s.router(routes::<DB>());
    assert_body_is_fingerprinted(&s, &app, "/app-json").await;
    // Its own rejection still answers (the wrapper is really used).
    send(&app, "/app-json", &key("bad"), "{")
        .await
        .problem(StatusCode::BAD_REQUEST, "urn:test:bad-json");
}

async fn renamed_axum_json_is_fingerprinted<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    assert_body_is_fingerprinted(&s, &s.router(routes::<DB>()), "/ax-json").await;
}

async fn bytes_body_is_fingerprinted<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    let app = s.router(routes::<DB>());
    assert_body_is_fingerprinted(&s, &app, "/bytes").await;
    // Raw bodies are compared as sent: a body that is not UTF-8 too.
    let binary = |bytes: &'static [u8]| {
        axum::http::Request::post("/bytes")
            .header("idempotency-key", "binary")
            .body(Body::from(bytes))
            .unwrap()
    };
    let first = call(&app, binary(&[0xff, 0x00, 0x41])).await;
    first.created();
    call(&app, binary(&[0xff, 0x00, 0x41]))
        .await
        .replay_of(&first);
    call(&app, binary(&[0xff, 0x00, 0x42])).await.problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        "urn:idem:problem:key-reused",
    );
}

async fn string_body_is_fingerprinted<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    assert_body_is_fingerprinted(&s, &s.router(routes::<DB>()), "/string").await;
}

async fn parts_of_the_same_kind_do_not_overwrite_each_other<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    let app = s.router(routes::<DB>());
    let k = |amount: &'static str| [("idempotency-key", "pair"), ("x-amount", amount)];
    let first = send(&app, "/pair/one/two?c=three", &k("5"), "").await;
    first.created();
    assert!(first.body.starts_with("one:two:three:5:"), "{}", first.body);
    send(&app, "/pair/one/two?c=three", &k("5"), "")
        .await
        .replay_of(&first);
    // Each part alone, the first and the second of each kind, changes the request.
    for (uri, amount) in [
        ("/pair/one/TWO?c=three", "5"), // second `Path` only
        ("/pair/ONE/two?c=three", "5"), // first `Path` only
        ("/pair/one/two?c=three", "6"), // the custom query input only
        ("/pair/one/two?c=THREE", "5"), // axum's `Query` only
    ] {
        send(&app, uri, &k(amount), "").await.problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "urn:idem:problem:key-reused",
        );
    }
    assert_eq!(s.effects_and_keys().await, (1, 1));
}

// ---------------------------------------------------------------------------------------
// The canonical form does not depend on serde_json's features or map order.

fn assert_preserve_order_is_on() {
    let mut map = serde_json::Map::new();
    map.insert("zeta".to_owned(), json!(1));
    map.insert("alpha".to_owned(), json!(2));
    assert_eq!(
        map.keys().collect::<Vec<_>>(),
        ["zeta", "alpha"],
        "these tests must run with serde_json's `preserve_order` on"
    );
}

/// A `Tally` body of 20 counts, in ascending or descending key order, with `label` first or
/// last.
fn tally_json(reversed: bool, label_last: bool) -> String {
    let mut entries: Vec<String> = (0..20).map(|i| format!(r#""item-{i:02}":{i}"#)).collect();
    if reversed {
        entries.reverse();
    }
    let counts = entries.join(",");
    if label_last {
        format!(r#"{{"counts":{{{counts}}},"label":"stock"}}"#)
    } else {
        format!(r#"{{"label":"stock","counts":{{{counts}}}}}"#)
    }
}

async fn hash_map_bodies_replay_whatever_their_order<DB: TestDb>() {
    assert_preserve_order_is_on();
    let s = Setup::<DB>::new(Config::default()).await;
    let app = s.router(routes::<DB>());
    let k = key("tally");
    let first = send(&app, "/tally", &k, &tally_json(false, false)).await;
    first.created();
    // Each retry deserialises a new `HashMap`, with its own iteration order.
    for _ in 0..8 {
        send(&app, "/tally", &k, &tally_json(false, false))
            .await
            .replay_of(&first);
    }
    // The JSON keys in another order: the same request.
    for (reversed, label_last) in [(true, false), (false, true), (true, true)] {
        send(&app, "/tally", &k, &tally_json(reversed, label_last))
            .await
            .replay_of(&first);
    }
    // A changed count is another request.
    let changed = tally_json(false, false).replace(r#""item-19":19"#, r#""item-19":20"#);
    send(&app, "/tally", &k, &changed).await.problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        "urn:idem:problem:key-reused",
    );
    assert_eq!(s.effects_and_keys().await, (1, 1));
}

async fn json_values_replay_with_reordered_keys<DB: TestDb>() {
    assert_preserve_order_is_on();
    let s = Setup::<DB>::new(Config::default()).await;
    let app = s.router(routes::<DB>());
    let k = key("value");
    let first = send(
        &app,
        "/value",
        &k,
        r#"{"to":"bob","cents":100,"meta":{"b":[1,2],"a":null}}"#,
    )
    .await;
    first.created();
    send(
        &app,
        "/value",
        &k,
        r#"{ "meta": {"a": null, "b": [1, 2]}, "cents": 100, "to": "bob" }"#,
    )
    .await
    .replay_of(&first);
    send(
        &app,
        "/value",
        &k,
        r#"{"to":"bob","cents":100,"meta":{"b":[2,1],"a":null}}"#,
    )
    .await
    .problem(
        StatusCode::UNPROCESSABLE_ENTITY,
        "urn:idem:problem:key-reused",
    );
    assert_eq!(s.effects_and_keys().await, (1, 1));
}

/// The canonical bytes of [`pinned_value`], written out by hand (RFC 8785: members sorted by
/// UTF-16 code units, `1.0` → `1`, `1e21` → `1e+21`, controls as `\u00xx`; integers exact).
const PINNED_CANONICAL: &str = concat!(
    r#"{"a":{"e":false,"é":true,"😀":1,"ﬁ":2},"#,
    r#""big":18446744073709551615,"f":1e+21,"n":1,"neg":-7,"#,
    r#""s":"line\nquote\"tab\tctl\u0001","#,
    r#""z":[3,{"a":null,"b":1.5},"x"]}"#,
);

/// SHA-256 of `op:v1\0` + [`PINNED_CANONICAL`], computed outside Rust.
const PINNED_DIGEST: &str = "5e98be8c3d54ee1288032ccaed0297186aceb03fb0aaad237dba7afda4f52bef";

fn pinned_value() -> serde_json::Value {
    json!({
        "z": [3, {"b": 1.5, "a": null}, "x"],
        "a": {"é": true, "e": false, "\u{1F600}": 1, "\u{FB01}": 2},
        "n": 1.0,
        "big": u64::MAX,
        "neg": -7,
        "s": "line\nquote\"tab\tctl\u{1}",
        "f": 1e21,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn pinned_fingerprint_of_a_nested_value() {
    assert_preserve_order_is_on();
    // The literal digest is the hash of the literal canonical bytes.
    let mut hasher = Sha256::new();
    hasher.update(b"op:v1\0");
    hasher.update(PINNED_CANONICAL.as_bytes());
    assert_eq!(hex(&hasher.finalize()), PINNED_DIGEST);

    let fingerprint = Fingerprint::of("op:v1", &pinned_value(), &[]).unwrap();
    assert_eq!(hex(fingerprint.as_bytes()), PINNED_DIGEST);
    // Independent of the value's insertion order (kept by `preserve_order`) …
    let reordered: serde_json::Value = serde_json::from_str(PINNED_CANONICAL).unwrap();
    assert_eq!(
        hex(Fingerprint::of("op:v1", &reordered, &[])
            .unwrap()
            .as_bytes()),
        PINNED_DIGEST
    );
    // … and the same for a typed value with a `HashMap`.
    #[derive(Serialize)]
    struct Typed {
        z: (u8, HashMap<&'static str, Option<f64>>, char),
        a: HashMap<&'static str, serde_json::Value>,
        n: f32,
        big: u64,
        neg: i8,
        s: &'static str,
        f: f64,
    }
    let typed = Typed {
        z: (3, HashMap::from([("b", Some(1.5)), ("a", None)]), 'x'),
        a: HashMap::from([
            ("é", json!(true)),
            ("e", json!(false)),
            ("\u{1F600}", json!(1)),
            ("\u{FB01}", json!(2)),
        ]),
        n: 1.0,
        big: u64::MAX,
        neg: -7,
        s: "line\nquote\"tab\tctl\u{1}",
        f: 1e21,
    };
    assert_eq!(
        hex(Fingerprint::of("op:v1", &typed, &[]).unwrap().as_bytes()),
        PINNED_DIGEST
    );
}

// ---------------------------------------------------------------------------------------
// Every body limit answers 413 problem+json, and burns no key.

fn big_transfer() -> String {
    let body = format!(r#"{{"to":"{}","cents":1}}"#, "b".repeat(181));
    assert_eq!(body.len(), 200);
    body
}

#[derive(Debug, Clone, Copy)]
enum Sent {
    /// With `Content-Length`.
    Sized,
    /// A stream, without `Content-Length`.
    Chunked,
}

/// A 200-byte body sent `how` answers 413 `body-too-large` with nothing stored; then the same
/// key with a small body runs (the key was not burnt).
async fn too_large_burns_nothing<DB: TestDb>(s: &Setup<DB>, app: &Router, how: Sent) {
    let k = format!("{how:?}");
    let before = s.effects_and_keys().await;
    let reply = match how {
        Sent::Sized => send_sized(app, "/transfers", &k, &big_transfer()).await,
        Sent::Chunked => send_chunked(app, "/transfers", &k, &big_transfer()).await,
    };
    reply.problem(
        StatusCode::PAYLOAD_TOO_LARGE,
        "urn:idem:problem:body-too-large",
    );
    assert_eq!(
        s.effects_and_keys().await,
        before,
        "{how:?}: nothing stored"
    );
    let small = send(app, "/transfers", &key(&k), BOB).await;
    small.created();
    assert_eq!(s.effects_and_keys().await, (before.0 + 1, before.1 + 1));
}

async fn axum_default_body_limit_is_413<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    let app = routes::<DB>()
        .layer(DefaultBodyLimit::max(100))
        .with_state(s.state.clone());
    too_large_burns_nothing(&s, &app, Sent::Sized).await;
    too_large_burns_nothing(&s, &app, Sent::Chunked).await;
}

async fn tower_http_limit_on_a_chunked_body_is_413<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    let app = routes::<DB>()
        .layer(tower_http::limit::RequestBodyLimitLayer::new(100))
        .with_state(s.state.clone());
    too_large_burns_nothing(&s, &app, Sent::Chunked).await;
    // A declared length over the limit is refused by the layer itself, before idem.
    let reply = send_sized(&app, "/transfers", "declared", &big_transfer()).await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(s.effects_and_keys().await, (1, 1));
}

async fn idem_max_request_body_is_413<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default().max_request_body(100)).await;
    let app = s.router(routes::<DB>());
    too_large_burns_nothing(&s, &app, Sent::Sized).await;
    too_large_burns_nothing(&s, &app, Sent::Chunked).await;
    // Within the limit, a chunked body is read whole.
    let reply = send_chunked(&app, "/transfers", "small-chunked", BOB).await;
    reply.created();
    assert!(reply.body.starts_with("bob:100:"), "{}", reply.body);
}

async fn broken_body_is_400_body_unreadable<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    let app = s.router(routes::<DB>());
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(Bytes::from_static(br#"{"to":"#)),
        Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset",
        )),
    ];
    let request = axum::http::Request::post("/transfers")
        .header("content-type", "application/json")
        .header("idempotency-key", "broken")
        .body(Body::from_stream(futures_util::stream::iter(chunks)))
        .unwrap();
    call(&app, request)
        .await
        .problem(StatusCode::BAD_REQUEST, "urn:idem:problem:body-unreadable");
    assert_eq!(s.effects_and_keys().await, (0, 0));
    send(&app, "/transfers", &key("broken"), BOB)
        .await
        .created();
}

// ---------------------------------------------------------------------------------------
// Validation is optional, and each flavour refuses before anything is stored.

async fn json_value_body_needs_no_trait<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    let app = s.router(routes::<DB>());
    let first = send(&app, "/value", &key("v"), BOB).await;
    first.created();
    assert!(first.body.starts_with("bob:"), "{}", first.body);
    send(&app, "/value", &key("v"), BOB).await.replay_of(&first);
    assert_eq!(s.effects_and_keys().await, (1, 1));
}

/// An invalid body answers `status`/`type_uri` and stores nothing; the key then runs a valid
/// body.
async fn assert_refused_before_the_store<DB: TestDb>(s: &Setup<DB>, uri: &str, type_uri: &str) {
    let app = s.router(routes::<DB>());
    let k = key(uri.trim_start_matches('/'));
    send(&app, uri, &k, r#"{"quantity":0}"#)
        .await
        .problem(StatusCode::UNPROCESSABLE_ENTITY, type_uri);
    let refused = send(&app, uri, &k, r#"{"quantity":4111111}"#)
        .await
        .problem(StatusCode::UNPROCESSABLE_ENTITY, type_uri);
    assert_eq!(s.effects_and_keys().await, (0, 0), "{uri}: nothing stored");
    // A body of the wrong shape is idem's `invalid-body`. No answer holds a value sent:
    // where, and what was expected.
    let wrong = send(&app, uri, &k, r#"{"quantity":"4111111111111111"}"#)
        .await
        .problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "urn:idem:problem:invalid-body",
        );
    assert_eq!(
        wrong["detail"],
        "invalid type, expected u32 at line 1 column 30"
    );
    for problem in [&refused, &wrong] {
        assert!(!problem.to_string().contains("4111"), "{uri}: {problem}");
    }
    let ok = send(&app, uri, &k, r#"{"quantity":3}"#).await;
    ok.created();
    send(&app, uri, &k, r#"{"quantity":3}"#)
        .await
        .replay_of(&ok);
    assert_eq!(s.effects_and_keys().await, (1, 1));
}

async fn checked_body_answers_the_checks_problem<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    assert_refused_before_the_store(&s, "/checked", "urn:test:quantity").await;
}

#[cfg(feature = "validator")]
async fn validator_body_answers_invalid_body<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    assert_refused_before_the_store(&s, "/validated", "urn:idem:problem:invalid-body").await;
}

#[cfg(feature = "garde")]
async fn garde_body_answers_invalid_body<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    assert_refused_before_the_store(&s, "/garde", "urn:idem:problem:invalid-body").await;
}

async fn json_body_is_a_json_response<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    let app = s.router(routes::<DB>());
    let first = send(&app, "/receipts", &key("r"), r#"{"quantity":4}"#).await;
    first.created();
    assert_eq!(first.headers[header::CONTENT_TYPE], "application/json");
    let receipt: Receipt = serde_json::from_str(&first.body).unwrap();
    assert_eq!(receipt.quantity, 4);
    let replay = send(&app, "/receipts", &key("r"), r#"{"quantity":4}"#).await;
    replay.replay_of(&first);
    assert_eq!(replay.headers[header::CONTENT_TYPE], "application/json");
}

// ---------------------------------------------------------------------------------------
// The principal is extracted once per request, and the handler gets its value.

async fn principal_runs_once_per_request<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    let app = s.router(routes::<DB>());
    let headers = [
        ("idempotency-key", "who"),
        ("x-tenant", "t1"),
        ("x-user", "ann"),
    ];
    let first = send(&app, "/whoami", &headers, r#"{"quantity":2}"#).await;
    first.created();
    assert!(first.body.starts_with("t1:ann:2:"), "{}", first.body);
    assert_eq!(s.auth_runs(), 1, "one run for the first execution");
    send(&app, "/whoami", &headers, r#"{"quantity":2}"#)
        .await
        .replay_of(&first);
    assert_eq!(s.auth_runs(), 2, "one run for the replay");
    // The key is the tenant's: the principal's value made the scope.
    let row =
        s.h.idem
            .lookup(KeyRef {
                scope: "tenant:t1",
                operation: "POST /whoami:v1",
                key: "who",
            })
            .await
            .unwrap();
    assert!(row.is_some());
    // Another tenant with the same key runs on its own, and sees its own principal.
    let other = [
        ("idempotency-key", "who"),
        ("x-tenant", "t2"),
        ("x-user", "bea"),
    ];
    let second = send(&app, "/whoami", &other, r#"{"quantity":2}"#).await;
    second.created();
    assert!(second.body.starts_with("t2:bea:2:"), "{}", second.body);
    assert_eq!(s.auth_runs(), 3);
    // User scope, with the principal as the last argument.
    let user = [("idempotency-key", "who"), ("x-user", "cy")];
    let mine = send(&app, "/whoami-user", &user, "").await;
    mine.created();
    assert!(mine.body.starts_with("cy:"), "{}", mine.body);
    assert_eq!(s.auth_runs(), 4);
    send(&app, "/whoami-user", &user, "").await.replay_of(&mine);
    assert_eq!(s.auth_runs(), 5);
    // Refused authentication: one run, and its rejection.
    let refused = send(&app, "/whoami", &key("who"), r#"{"quantity":2}"#).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert_eq!(s.auth_runs(), 6);
    assert_eq!(s.effects_and_keys().await, (3, 3));
}

// ---------------------------------------------------------------------------------------
// `invalid-input`: an input without a canonical form is refused before the store.

async fn input_without_canonical_form_is_400_invalid_input<DB: TestDb>() {
    let s = Setup::<DB>::new(Config::default()).await;
    let app = s.router(routes::<DB>());
    let cells = [("idempotency-key", "cells"), ("x-cells", "1,2=3;4,5=6")];
    let problem = send(&app, "/cells", &cells, "")
        .await
        .problem(StatusCode::BAD_REQUEST, "urn:idem:problem:invalid-input");
    assert!(problem["detail"].is_string());
    send(&app, "/nan?x=NaN", &key("nan"), "")
        .await
        .problem(StatusCode::BAD_REQUEST, "urn:idem:problem:invalid-input");
    send(&app, "/nan?x=inf", &key("nan"), "")
        .await
        .problem(StatusCode::BAD_REQUEST, "urn:idem:problem:invalid-input");
    assert_eq!(s.effects_and_keys().await, (0, 0));
    // A finite number is fine.
    send(&app, "/nan?x=1.5", &key("nan"), "").await.created();
}

idem_testkit::on_every_store!(
    custom_rejection_wrapper_is_fingerprinted,
    renamed_axum_json_is_fingerprinted,
    bytes_body_is_fingerprinted,
    string_body_is_fingerprinted,
    parts_of_the_same_kind_do_not_overwrite_each_other,
    hash_map_bodies_replay_whatever_their_order,
    json_values_replay_with_reordered_keys,
    axum_default_body_limit_is_413,
    tower_http_limit_on_a_chunked_body_is_413,
    idem_max_request_body_is_413,
    broken_body_is_400_body_unreadable,
    json_value_body_needs_no_trait,
    checked_body_answers_the_checks_problem,
    json_body_is_a_json_response,
    principal_runs_once_per_request,
    input_without_canonical_form_is_400_invalid_input,
);

#[cfg(feature = "validator")]
mod validator_crate {
    use super::*;
    idem_testkit::on_every_store!(validator_body_answers_invalid_body);
}

#[cfg(feature = "garde")]
mod garde_crate {
    use super::*;
    idem_testkit::on_every_store!(garde_body_answers_invalid_body);
}
