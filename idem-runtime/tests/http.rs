//! The attribute's behaviour over HTTP, in process (`tower::ServiceExt::oneshot`), on SQLite
//! and PostgreSQL: the cases the `orders` example does not reach.
#![allow(clippy::unwrap_used)]

mod common;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query};
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use common::app::{Amount, Setup, effect, send};
use common::{Harness, TestDb};
use idem_runtime::fingerprint::Fingerprint;
use idem_runtime::key::KeyFormat;
use idem_runtime::sqlx::Transaction;
use idem_runtime::{Config, JsonBody, Problem, idempotent};
use serde::{Deserialize, Serialize};
use tower::ServiceExt as _;

#[derive(Debug, Deserialize, Serialize)]
struct Item {
    name: String,
    #[serde(default)]
    note: String,
}

#[derive(Debug, Deserialize, Serialize)]
struct Page {
    dry_run: bool,
}

fn created(body: String) -> Response {
    (StatusCode::CREATED, [("x-secret", "not stored")], body).into_response()
}

#[idempotent(scope = "user", ttl = "1h", exclude = ["body.note"])]
async fn by_user<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    Path(id): Path<u32>,
    Query(page): Query<Page>,
    JsonBody(item): JsonBody<Item>,
) -> Response {
    effect(tx, "by_user").await;
    created(format!(
        "{id}:{}:{}:{}",
        page.dry_run,
        item.name,
        uuid::Uuid::new_v4()
    ))
}

/// An operation whose field names are themselves sensitive: its `422` names none.
#[idempotent(scope = "global", mismatch_detail = false)]
async fn discreet<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(item): JsonBody<Item>,
) -> Response {
    effect(tx, "discreet").await;
    created(format!("{}:{}", item.name, uuid::Uuid::new_v4()))
}

#[idempotent(scope = "tenant", key = "optional")]
async fn optional_key<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(item): JsonBody<Item>,
) -> Response {
    effect(tx, "optional").await;
    created(format!("{}:{}", item.name, uuid::Uuid::new_v4()))
}

#[idempotent(scope = "global", store_client_errors = true)]
async fn declines<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(item): JsonBody<Item>,
) -> Result<Response, Problem> {
    effect(tx, "declined").await;
    Err(Problem::new(
        StatusCode::PAYMENT_REQUIRED,
        "urn:test:declined",
        "declined",
    )
    .with_detail(format!("{} {}", item.name, uuid::Uuid::new_v4())))
}

#[idempotent(scope = "global")]
async fn panics<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(item): JsonBody<Item>,
) -> Response {
    effect(tx, "panics").await;
    assert!(item.name != "boom", "handler bug");
    created(item.name)
}

#[idempotent(scope = "global")]
async fn huge<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(item): JsonBody<Item>,
) -> Response {
    effect(tx, "huge").await;
    created("x".repeat(item.name.len() * 1024))
}

#[idempotent(scope = "global", operation = "POST /amounts")]
async fn amounts<DB: TestDb>(Amount(n): Amount, tx: &mut Transaction<'_, DB>) -> Response {
    effect(tx, "amount").await;
    created(format!("{n}:{}", uuid::Uuid::new_v4()))
}

/// A webhook receiver: the key is the event's `webhook-id` header.
#[idempotent(scope = "global", key = header("webhook-id"))]
async fn hook_by_header<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(event): JsonBody<serde_json::Value>,
) -> Response {
    effect(tx, "hook").await;
    created(format!("{}:{}", event["type"], uuid::Uuid::new_v4()))
}

#[derive(Debug, Deserialize, Serialize)]
struct Cart {
    items: Vec<Line>,
    note: Option<String>,
    #[serde(default)]
    tags: std::collections::BTreeMap<String, u32>,
}

#[derive(Debug, Deserialize, Serialize)]
struct Line {
    sku: String,
    qty: u32,
}

#[idempotent(scope = "global")]
async fn carts<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(cart): JsonBody<Cart>,
) -> Response {
    effect(tx, "cart").await;
    created(format!("{}:{}", cart.items.len(), uuid::Uuid::new_v4()))
}

/// The key is the body's `id`.
#[idempotent(scope = "global", key = body("/id"))]
async fn hook_by_body<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(event): JsonBody<serde_json::Value>,
) -> Response {
    effect(tx, "hook").await;
    created(format!("{}:{}", event["type"], uuid::Uuid::new_v4()))
}

/// Adyen-style: several parts, joined.
#[idempotent(scope = "tenant", key = [body("/psp"), body("/code"), header("x-merchant")])]
async fn hook_by_parts<DB: TestDb>(
    tx: &mut Transaction<'_, DB>,
    JsonBody(event): JsonBody<serde_json::Value>,
) -> Response {
    effect(tx, "hook").await;
    created(format!("{}:{}", event["code"], uuid::Uuid::new_v4()))
}

async fn app<DB: TestDb>(config: Config) -> (Harness<DB>, Router) {
    let s = Setup::<DB>::new(config).await;
    let router = s.router(
        Router::new()
            .route("/users/{id}", post(by_user::<DB>))
            .route("/optional", post(optional_key::<DB>))
            .route("/discreet", post(discreet::<DB>))
            .route("/carts", post(carts::<DB>))
            .route("/declines", post(declines::<DB>))
            .route("/panics", post(panics::<DB>))
            .route("/huge", post(huge::<DB>))
            .route("/amounts", post(amounts::<DB>))
            .route("/hooks/header", post(hook_by_header::<DB>))
            .route("/hooks/body", post(hook_by_body::<DB>))
            .route("/hooks/parts", post(hook_by_parts::<DB>)),
    );
    (s.h, router)
}

async fn inputs_are_path_query_and_body<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default()).await;
    let user = [("x-user", "ann"), ("idempotency-key", "k1")];
    let first = send(
        &app,
        "/users/7?dry_run=false",
        &user,
        r#"{"name": "a", "note": "x"}"#,
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert!(first.body.starts_with("7:false:a:"));
    // Excluded field: another note is the same request.
    let replay = send(
        &app,
        "/users/7?dry_run=false",
        &user,
        r#"{"note": "y", "name": "a"}"#,
    )
    .await;
    assert!(replay.replayed());
    assert_eq!(replay.body, first.body);
    // Headers outside the allow-list are returned the first time only.
    assert_eq!(first.headers["x-secret"], "not stored");
    assert!(replay.headers.get("x-secret").is_none());
    // Path, query and body each belong to the fingerprint.
    for (uri, body) in [
        ("/users/8?dry_run=false", r#"{"name": "a"}"#),
        ("/users/7?dry_run=true", r#"{"name": "a"}"#),
        ("/users/7?dry_run=false", r#"{"name": "b"}"#),
    ] {
        send(&app, uri, &user, body)
            .await
            .problem_json(StatusCode::UNPROCESSABLE_ENTITY);
    }
    // The scope is the user: another user's identical key is independent.
    let bob = [("x-user", "bob"), ("idempotency-key", "k1")];
    let other = send(&app, "/users/7?dry_run=false", &bob, r#"{"name": "a"}"#).await;
    assert_eq!(other.status, StatusCode::CREATED);
    assert!(!other.replayed());
    assert_eq!(h.effects().await, 2);
}

/// A `422` names the fields that differ — never a value, never an excluded field — for a
/// body the extractor refuses too, when its key is in use: the key's answer comes first.
/// `mismatch_detail = false` keeps no digests and names nothing.
async fn mismatch_detail_and_refused_bodies<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default()).await;
    let user = [("x-user", "ann"), ("idempotency-key", "k-m")];
    let first = send(
        &app,
        "/users/7?dry_run=false",
        &user,
        r#"{"name": "a", "note": "x"}"#,
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    let cases = [
        // Valid, another name and another (excluded) note.
        (
            r#"{"name": "b", "note": "y"}"#,
            r#"{"changed": ["/body/name"], "added": [], "removed": []}"#,
        ),
        // Refused by the extractor (a number where a string goes), under the key in use.
        (
            r#"{"name": 5, "note": "y"}"#,
            r#"{"changed": ["/body/name"], "added": [], "removed": []}"#,
        ),
        // A member the item does not declare is a name the client chose: never named, the
        // body is.
        (
            r#"{"title": "a"}"#,
            r#"{"changed": ["/body"], "added": [], "removed": ["/body/name"]}"#,
        ),
    ];
    for (body, expected) in cases {
        let reply = send(&app, "/users/7?dry_run=false", &user, body).await;
        let problem = reply.problem_json(StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(problem["type"], "urn:idem:problem:key-reused", "{problem}");
        let expected: serde_json::Value = serde_json::from_str(expected).unwrap();
        assert_eq!(problem["mismatch"], expected, "{body}: {problem}");
        for value in ["\"b\"", "\"y\"", "5"] {
            assert!(!reply.body.contains(value), "{}", reply.body);
        }
    }
    // Refused under a new key, or as malformed JSON (nothing to compare): the refusal stands.
    let fresh = [("x-user", "ann"), ("idempotency-key", "k-fresh")];
    let refused = send(&app, "/users/7?dry_run=false", &fresh, r#"{"title": "a"}"#).await;
    assert_eq!(
        refused.problem_json(StatusCode::UNPROCESSABLE_ENTITY)["type"],
        "urn:idem:problem:invalid-body"
    );
    send(&app, "/users/7?dry_run=false", &user, r#"{"name": "#)
        .await
        .problem_json(StatusCode::BAD_REQUEST);
    assert_eq!(h.effects().await, 1);

    // Off for one operation: no digests kept, a bare `422`, refusals as they were.
    let key = [("idempotency-key", "k-d")];
    let first = send(&app, "/discreet", &key, r#"{"name": "a"}"#).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    let problem = send(&app, "/discreet", &key, r#"{"name": "b"}"#)
        .await
        .problem_json(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem["type"], "urn:idem:problem:key-reused");
    assert!(problem.get("mismatch").is_none(), "{problem}");
    let problem = send(&app, "/discreet", &key, r#"{"title": "a"}"#)
        .await
        .problem_json(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(problem["type"], "urn:idem:problem:invalid-body");
    let digests = h
        .idem
        .keys()
        .field_digests(idem_runtime::store::KeyRef {
            scope: "global",
            operation: "discreet:v1",
            key: "k-d",
        })
        .await
        .unwrap();
    assert_eq!(digests, None);
    assert_eq!(h.effects().await, 2);
}

async fn principal_rules<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default()).await;
    // The principal's rejection comes first, even before a malformed key.
    let reply = send(
        &app,
        "/users/1?dry_run=false",
        &[("idempotency-key", "a b")],
        r#"{"name":"a"}"#,
    )
    .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    // A principal without a user cannot use a user-scoped operation.
    let tenant_only = [("x-tenant", "t"), ("idempotency-key", "k")];
    send(
        &app,
        "/users/1?dry_run=false",
        &tenant_only,
        r#"{"name":"a"}"#,
    )
    .await
    .problem_json(StatusCode::FORBIDDEN);
    assert_eq!(h.keys().await, 0);
}

async fn key_rules<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default().key_format(KeyFormat::Strict)).await;
    let t = ("x-tenant", "t");
    // Strict mode: bare keys are refused, quoted keys accepted.
    let bare = send(
        &app,
        "/optional",
        &[t, ("idempotency-key", "k")],
        r#"{"name":"a"}"#,
    )
    .await;
    let problem = bare.problem_json(StatusCode::BAD_REQUEST);
    assert_eq!(problem["type"], "urn:idem:problem:invalid-key");
    let quoted = send(
        &app,
        "/optional",
        &[t, ("idempotency-key", "\"k\"")],
        r#"{"name":"a"}"#,
    )
    .await;
    assert_eq!(quoted.status, StatusCode::CREATED);
    // Two key headers: refused.
    let twice = send(
        &app,
        "/optional",
        &[
            t,
            ("idempotency-key", "\"k\""),
            ("idempotency-key", "\"j\""),
        ],
        r#"{"name":"a"}"#,
    )
    .await;
    twice.problem_json(StatusCode::BAD_REQUEST);
    // `key = "optional"`: without a key the handler runs every time.
    for _ in 0..2 {
        let unkeyed = send(&app, "/optional", &[t], r#"{"name":"a"}"#).await;
        assert_eq!(unkeyed.status, StatusCode::CREATED);
        assert!(!unkeyed.replayed());
    }
    assert_eq!(h.effects().await, 3);
    assert_eq!(h.keys().await, 1);
}

async fn keys_from_the_request<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default()).await;
    let event = r#"{"id":"evt_1","type":"charge.succeeded"}"#;

    // A header: the event's id. `Idempotency-Key` plays no part.
    let first = send(
        &app,
        "/hooks/header",
        &[("webhook-id", "msg_1"), ("idempotency-key", "\"other\"")],
        event,
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    let again = send(&app, "/hooks/header", &[("webhook-id", "msg_1")], event).await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    let reused = send(
        &app,
        "/hooks/header",
        &[("webhook-id", "msg_1")],
        r#"{"id":"evt_1","type":"charge.refunded"}"#,
    )
    .await;
    reused.problem_json(StatusCode::UNPROCESSABLE_ENTITY);
    let missing = send(
        &app,
        "/hooks/header",
        &[("idempotency-key", "\"k\"")],
        event,
    )
    .await;
    let problem = missing.problem_json(StatusCode::BAD_REQUEST);
    assert_eq!(problem["type"], "urn:idem:problem:missing-key");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("`webhook-id` header"),
        "{problem}"
    );

    // A body field.
    let by_body = send(&app, "/hooks/body", &[], event).await;
    assert_eq!(by_body.status, StatusCode::CREATED, "{}", by_body.body);
    let replay = send(&app, "/hooks/body", &[], event).await;
    assert!(replay.replayed());
    let other = send(&app, "/hooks/body", &[], r#"{"id":"evt_2","type":"x"}"#).await;
    assert_eq!(other.status, StatusCode::CREATED);
    assert!(!other.replayed());
    for (body, kind) in [
        (r#"{"type":"x"}"#, "urn:idem:problem:missing-key"),
        (r#"{"id":{"a":1}}"#, "urn:idem:problem:invalid-key"),
    ] {
        let refused = send(&app, "/hooks/body", &[], body).await;
        assert_eq!(refused.problem_json(StatusCode::BAD_REQUEST)["type"], kind);
    }
    let malformed = send(&app, "/hooks/body", &[], "{not json").await;
    assert_eq!(malformed.status, StatusCode::BAD_REQUEST);

    // Several parts, in the tenant's scope.
    let parts = |merchant: &'static str, body: &'static str| {
        let app = app.clone();
        async move {
            send(
                &app,
                "/hooks/parts",
                &[("x-tenant", "t"), ("x-merchant", merchant)],
                body,
            )
            .await
        }
    };
    let a = parts("acme", r#"{"psp":"p:1","code":"AUTH"}"#).await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    assert!(
        parts("acme", r#"{"psp":"p:1","code":"AUTH"}"#)
            .await
            .replayed()
    );
    assert!(
        !parts("acme", r#"{"psp":"p:1","code":"CAPTURE"}"#)
            .await
            .replayed()
    );
    assert!(
        !parts("other", r#"{"psp":"p:1","code":"AUTH"}"#)
            .await
            .replayed()
    );

    // One per new key: a header's, two bodies', three parts'.
    assert_eq!(h.effects().await, 6);
    let key = idem_runtime::store::KeyRef {
        scope: "tenant:t",
        operation: "hook_by_parts:v1",
        key: "p%3A1:AUTH:acme",
    };
    let keys = h.idem.keys();
    let stored = keys.get(key, h.idem.now_millis()).await.unwrap();
    assert!(stored.is_some(), "the joined key is stored");
}

/// A key longer than 255 characters is stored as its digest: a Standard Webhooks
/// `webhook-id` of 300 characters is applied once and replayed to its retries, an
/// `Idempotency-Key` alike; one longer than 8 KiB is refused.
async fn long_keys_are_stored_as_their_digest<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default()).await;
    let event = r#"{"id":"evt_1","type":"charge.succeeded"}"#;
    let id = format!("msg_{}", "2KWPBgLlAfxdpx2AI54pPJ85f4W".repeat(11));
    assert_eq!(id.len(), 301);

    let first = send(&app, "/hooks/header", &[("webhook-id", &id)], event).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert!(!first.replayed());
    let retry = send(&app, "/hooks/header", &[("webhook-id", &id)], event).await;
    assert_eq!(retry.status, StatusCode::CREATED, "{}", retry.body);
    assert!(retry.replayed());
    assert_eq!(retry.body, first.body);
    assert_eq!(h.effects().await, 1);
    // Stored under its digest, as the key module documents it.
    let digest = idem_runtime::IdempotencyKey::new(id.as_str()).unwrap();
    assert!(digest.as_str().starts_with("sha256:"), "{digest:?}");
    let key = idem_runtime::store::KeyRef {
        scope: "global",
        operation: "hook_by_header:v1",
        key: digest.as_str(),
    };
    let keys = h.idem.keys();
    let stored = keys.get(key, h.idem.now_millis()).await.unwrap();
    assert!(stored.is_some(), "the digest is the stored key");

    // Another long id, even one differing only in its last character, is another event.
    let mut other = id.clone();
    other.pop();
    other.push('X');
    let second = send(&app, "/hooks/header", &[("webhook-id", &other)], event).await;
    assert_eq!(second.status, StatusCode::CREATED, "{}", second.body);
    assert!(!second.replayed());
    assert_eq!(h.effects().await, 2);

    // The `Idempotency-Key` header follows the same rule, quoted or bare.
    let long = "k".repeat(300);
    let t = ("x-tenant", "t");
    let quoted = format!("\"{long}\"");
    let keyed = send(
        &app,
        "/optional",
        &[t, ("idempotency-key", &quoted)],
        r#"{"name":"a"}"#,
    )
    .await;
    assert_eq!(keyed.status, StatusCode::CREATED, "{}", keyed.body);
    let again = send(
        &app,
        "/optional",
        &[t, ("idempotency-key", &long)],
        r#"{"name":"a"}"#,
    )
    .await;
    assert!(again.replayed());
    assert_eq!(again.body, keyed.body);
    assert_eq!(h.effects().await, 3);

    // Above 8 KiB: refused, nothing runs.
    let huge = "k".repeat(idem_runtime::key::MAX_RECEIVED_LEN + 1);
    let refused = send(&app, "/hooks/header", &[("webhook-id", &huge)], event).await;
    let problem = refused.problem_json(StatusCode::BAD_REQUEST);
    assert_eq!(problem["type"], "urn:idem:problem:invalid-key");
    let refused = send(
        &app,
        "/optional",
        &[t, ("idempotency-key", &huge)],
        r#"{"name":"a"}"#,
    )
    .await;
    let problem = refused.problem_json(StatusCode::BAD_REQUEST);
    assert_eq!(problem["type"], "urn:idem:problem:invalid-key");
    assert_eq!(h.effects().await, 3);
}

async fn stored_client_error_is_replayed<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default()).await;
    let key = [("idempotency-key", "k")];
    let first = send(&app, "/declines", &key, r#"{"name":"a"}"#).await;
    first.problem_json(StatusCode::PAYMENT_REQUIRED);
    let again = send(&app, "/declines", &key, r#"{"name":"a"}"#).await;
    assert!(again.replayed());
    assert_eq!(again.body, first.body);
    assert_eq!(
        h.effects().await,
        0,
        "the handler's writes were rolled back"
    );
    assert_eq!(h.keys().await, 1);
}

async fn panic_is_500_and_leaves_nothing<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default()).await;
    let key = [("idempotency-key", "k")];
    send(&app, "/panics", &key, r#"{"name":"boom"}"#)
        .await
        .problem_json(StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!((h.effects().await, h.keys().await), (0, 0));
    // The key is free: a corrected request with it runs.
    let key2 = [("idempotency-key", "k2")];
    assert_eq!(
        send(&app, "/panics", &key2, r#"{"name":"fine"}"#)
            .await
            .status,
        StatusCode::CREATED
    );
}

async fn oversized_response_rolls_back<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default().max_response_body(4 * 1024)).await;
    let key = [("idempotency-key", "k")];
    let problem = send(&app, "/huge", &key, r#"{"name":"abcdefgh"}"#)
        .await
        .problem_json(StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(problem["type"], "urn:idem:problem:response-too-large");
    assert_eq!((h.effects().await, h.keys().await), (0, 0));
    let small = send(&app, "/huge", &key, r#"{"name":"ab"}"#).await;
    assert_eq!(small.status, StatusCode::CREATED);
}

async fn body_limits_and_media_type<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default().max_request_body(64)).await;
    let key = [("idempotency-key", "k")];
    let big = format!(r#"{{"name":"{}"}}"#, "a".repeat(100));
    send(&app, "/huge", &key, &big)
        .await
        .problem_json(StatusCode::PAYLOAD_TOO_LARGE);
    let response = app
        .clone()
        .oneshot(
            Request::post("/huge")
                .header("idempotency-key", "k")
                .header("content-type", "text/plain")
                .body(Body::from(r#"{"name":"a"}"#))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    assert_eq!((h.effects().await, h.keys().await), (0, 0));
}

async fn custom_input_extractor<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default()).await;
    let first = send(
        &app,
        "/amounts",
        &[("idempotency-key", "k"), ("x-amount", "5")],
        "",
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED);
    let replay = send(
        &app,
        "/amounts",
        &[("idempotency-key", "k"), ("x-amount", "5")],
        "",
    )
    .await;
    assert!(replay.replayed());
    send(
        &app,
        "/amounts",
        &[("idempotency-key", "k"), ("x-amount", "6")],
        "",
    )
    .await
    .problem_json(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(h.effects().await, 1);
    let stored = h
        .idem
        .lookup(idem_runtime::store::KeyRef {
            scope: "global",
            operation: "POST /amounts:v1",
            key: "k",
        })
        .await
        .unwrap();
    assert!(stored.is_some(), "the operation id comes from `operation`");
    // The amount is the `query` member of the canonical input, as its `Input::Part` says.
    let expected = Fingerprint::of("POST /amounts:v1", &serde_json::json!({"query": 5}), &[]);
    assert_eq!(stored.unwrap().fingerprint, expected.unwrap().as_bytes());
}

/// A `422` names what differs as the client reads its own request: an emptied or longer
/// array at the array, a member left out as removed (not as a `null` that changed), and a
/// map — whose member names the client chose, values like any other — at the map.
async fn mismatch_reads_as_the_client_wrote_it<DB: TestDb>() {
    let (h, app) = app::<DB>(Config::default()).await;
    let key = [("idempotency-key", "k-cart")];
    let lines = r#"[{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]"#;
    let first = format!(r#"{{"items": {lines}, "note": "n", "tags": {{"4111111111111111": 1}}}}"#);
    send(&app, "/carts", &key, &first).await.created();
    let cases = [
        (
            r#"{"items": [], "note": "n", "tags": {"4111111111111111": 1}}"#.to_owned(),
            r#"{"changed": ["/body/items"], "added": [], "removed": []}"#,
        ),
        (
            format!(r#"{{"items": {lines}, "tags": {{"4111111111111111": 1}}}}"#),
            r#"{"changed": [], "added": [], "removed": ["/body/note"]}"#,
        ),
        (
            format!(r#"{{"items": {lines}, "note": "n", "tags": {{"4111111111111111": 2}}}}"#),
            r#"{"changed": ["/body/tags"], "added": [], "removed": []}"#,
        ),
        (
            format!(r#"{{"items": {lines}, "note": "n", "tags": {{"5500000000000004": 1}}}}"#),
            r#"{"changed": ["/body/tags"], "added": [], "removed": []}"#,
        ),
        // Refused by the extractor: the first request's map still names the map.
        (
            r#"{"items": [{"sku": "a", "qty": "x"}, {"sku": "b", "qty": 2}], "note": "n", "tags": {"5500000000000004": 1}}"#.to_owned(),
            r#"{"changed": ["/body/items/0/qty", "/body/tags"], "added": [], "removed": []}"#,
        ),
    ];
    for (body, expected) in cases {
        let reply = send(&app, "/carts", &key, &body).await;
        let problem = reply.problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "urn:idem:problem:key-reused",
        );
        let expected: serde_json::Value = serde_json::from_str(expected).unwrap();
        assert_eq!(problem["mismatch"], expected, "{body}: {problem}");
        for value in ["4111", "5500"] {
            assert!(!reply.body.contains(value), "{}", reply.body);
        }
    }
    assert_eq!(h.effects().await, 1);
}

idem_testkit::on_every_store!(
    inputs_are_path_query_and_body,
    mismatch_detail_and_refused_bodies,
    mismatch_reads_as_the_client_wrote_it,
    principal_rules,
    key_rules,
    keys_from_the_request,
    long_keys_are_stored_as_their_digest,
    stored_client_error_is_replayed,
    panic_is_500_and_leaves_nothing,
    oversized_response_rolls_back,
    body_limits_and_media_type,
    custom_input_extractor,
);
