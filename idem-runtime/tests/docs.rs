//! The registry: every `#[idempotent]` handler linked into a program is listed, with its
//! spec, route, handler name and source, and changing an attribute argument changes what is
//! listed and generated.

use idem_runtime::docs::{self, OperationDoc, Operations};
use std::time::Duration;

use idem_runtime::docs::contract;
use idem_runtime::key::{
    DIGEST_PREFIX, IdempotencyKey, KeyError, KeyFormat, MAX_LEN, MAX_RECEIVED_LEN,
};
use idem_runtime::spec::{ExpiryPolicy, Mode, OperationSpec, ScopeKind};
use idem_runtime::sqlx::{Sqlite, Transaction};
use idem_runtime::{Error, sqlx};
use idem_runtime::{JsonBody, idempotent};

#[idempotent(scope = "tenant", ttl = "1h", path = "POST /short")]
pub async fn short_window(
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> String {
    let _ = tx;
    body.to_string()
}

#[idempotent(
    scope = "tenant",
    ttl = "7d",
    path = "POST /long",
    on_expired = "reexecute"
)]
pub async fn long_window(
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(body): JsonBody<serde_json::Value>,
) -> String {
    let _ = tx;
    body.to_string()
}

#[idempotent(scope = "global", operation = "nightly", version = 2)]
pub async fn without_route(tx: &mut Transaction<'_, Sqlite>) -> &'static str {
    let _ = tx;
    "done"
}

/// A Standard Webhooks receiver: its documents list the signature's headers and its `401`
/// without the application writing them.
#[cfg(feature = "standard-webhooks")]
#[idempotent(scope = "global", key = header("webhook-id"), path = "POST /events")]
pub async fn provider_event(
    tx: &mut Transaction<'_, Sqlite>,
    idem_runtime::webhooks::Verified(JsonBody(event)): idem_runtime::webhooks::Verified<
        JsonBody<serde_json::Value>,
    >,
) -> String {
    let _ = tx;
    event.to_string()
}

/// An operation that declares its own problems: a version conflict, and a dependency down
/// that carries `Retry-After`.
#[idempotent(
    scope = "tenant",
    path = "PUT /orders/{id}",
    problems = [
        problem(409, "urn:example:version-conflict", "version conflict"),
        problem(503, "urn:example:stock-down", "stock service down", retry_after),
    ]
)]
pub async fn update_order(
    tx: &mut Transaction<'_, Sqlite>,
    JsonBody(body): JsonBody<OrderUpdate>,
) -> String {
    let _ = tx;
    format!("{} x {}", body.line.quantity, body.line.sku)
}

/// `PUT /orders/{id}`'s body: with `utoipa`, its schema is in the documents.
#[derive(Debug, serde::Deserialize, serde::Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct OrderUpdate {
    /// The order's new line.
    pub line: OrderLine,
}

/// A line of an order.
#[derive(Debug, serde::Deserialize, serde::Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct OrderLine {
    /// What.
    pub sku: String,
    /// How many.
    pub quantity: u32,
}

/// The ids of the operations registered in this file, sorted.
const REGISTERED: &[&str] = &[
    "long_window:v1",
    "nightly:v2",
    #[cfg(feature = "standard-webhooks")]
    "provider_event:v1",
    "short_window:v1",
    "update_order:v1",
];

fn find<'a>(operations: &'a [OperationDoc], id: &str) -> &'a OperationDoc {
    let found = operations.iter().find(|d| d.id == id);
    found.unwrap_or_else(|| panic!("`{id}` is not registered: {operations:#?}"))
}

#[test]
fn attributed_handlers_are_registered_sorted_by_id() {
    let operations = docs::operations().unwrap();
    let ids: Vec<&str> = operations.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, REGISTERED);

    let short = find(&operations, "short_window:v1");
    assert_eq!(short.ttl.as_secs(), 3600);
    assert_eq!(short.route().as_deref(), Some("POST /short"));
    assert_eq!(short.handler, "short_window");
    let source = short.source.as_deref().unwrap_or_default();
    assert!(
        source.starts_with("idem-runtime/tests/docs.rs:"),
        "{source}"
    );

    let long = find(&operations, "long_window:v1");
    assert_eq!(long.ttl.as_secs(), 7 * 86_400);
    assert_eq!(long.on_expired, ExpiryPolicy::Reexecute);

    let nightly = find(&operations, "nightly:v2");
    assert_eq!(nightly.route(), None);
    assert_eq!(nightly.handler, "without_route");
}

#[test]
fn the_attributes_arguments_reach_the_documents() {
    let operations = docs::operations().unwrap();
    let markdown = docs::markdown(&operations);
    assert!(
        markdown.contains(
            "| POST /short | `short_window:v1` | atomic | required | tenant | 1 hour | 410 Gone |"
        ),
        "{markdown}"
    );
    assert!(
        markdown.contains(
            "| POST /long | `long_window:v1` | atomic | required | tenant | 7 days | runs anew |"
        ),
        "{markdown}"
    );
    let openapi = docs::openapi(&operations);
    assert_eq!(
        openapi["paths"]["/short"]["post"]["x-idempotency"]["ttl"],
        "1h"
    );
    assert_eq!(
        openapi["paths"]["/long"]["post"]["x-idempotency"]["ttl"],
        "7d"
    );
    assert!(openapi["paths"]["/short"]["post"]["responses"]["410"].is_object());
    assert!(openapi["paths"]["/long"]["post"]["responses"]["410"].is_null());
}

/// The attribute's `problems` reach the registry, and the documents list each under its
/// status with its type: a client tells the operation's `409` from idem's.
#[test]
fn declared_problems_reach_the_documents() {
    let operations = docs::operations().unwrap();
    let update = find(&operations, "update_order:v1");
    assert_eq!(
        update.problems,
        [
            docs::ProblemDoc::new(409, "urn:example:version-conflict", "version conflict"),
            docs::ProblemDoc::new(503, "urn:example:stock-down", "stock service down")
                .retry_after(),
        ]
    );
    assert!(find(&operations, "short_window:v1").problems.is_empty());

    let markdown = docs::markdown(&operations);
    assert!(
        markdown.contains("| 409 `urn:example:version-conflict` |"),
        "{markdown}"
    );
    assert!(
        markdown.contains("| 503 `urn:example:stock-down` + `Retry-After` |"),
        "{markdown}"
    );
    let openapi = docs::openapi(&operations);
    let responses = &openapi["paths"]["/orders/{id}"]["put"]["responses"];
    let types = &responses["409"]["content"]["application/problem+json"]["x-problem-types"];
    assert_eq!(
        types,
        &serde_json::json!([contract::IN_FLIGHT, "urn:example:version-conflict"])
    );
    assert!(responses["503"]["headers"]["Retry-After"].is_object());
}

/// Each registered operation's `requestBody` is the body its last extractor reads: its
/// media type, and with `utoipa` its type's schema, whose components are in the document.
#[test]
fn the_body_extractor_reaches_the_documents() {
    let operations = docs::operations().unwrap();
    let short = find(&operations, "short_window:v1");
    let body = short.request_body.as_ref().unwrap();
    assert_eq!(
        (body.media_type.as_str(), body.required),
        ("application/json", true)
    );
    assert!(find(&operations, "nightly:v2").request_body.is_none());

    let openapi = docs::openapi(&operations);
    let put = &openapi["paths"]["/orders/{id}"]["put"]["requestBody"];
    assert_eq!(put["required"], true);
    let schema = &put["content"]["application/json"]["schema"];
    #[cfg(feature = "utoipa")]
    {
        assert_eq!(
            schema["properties"]["line"]["$ref"],
            "#/components/schemas/OrderLine"
        );
        let line = &openapi["components"]["schemas"]["OrderLine"];
        assert_eq!(
            line["properties"]["quantity"]["type"], "integer",
            "{openapi}"
        );
    }
    #[cfg(not(feature = "utoipa"))]
    assert_eq!(schema, &serde_json::json!({}));
    // Every `$ref` points into the document.
    let text = openapi.to_string();
    for target in text.split("\"$ref\":\"#").skip(1) {
        let pointer = target.split('"').next().unwrap();
        assert!(openapi.pointer(pointer).is_some(), "dangling #{pointer}");
    }
}

/// A handler that takes `webhooks::Verified` is documented with the Standard Webhooks
/// headers and the `401` of a delivery that does not verify; the others are not.
#[cfg(feature = "standard-webhooks")]
#[test]
fn a_verified_webhook_documents_its_headers_and_its_401() {
    use idem_runtime::webhooks::{
        HEADER_WEBHOOK_ID, HEADER_WEBHOOK_SIGNATURE, HEADER_WEBHOOK_TIMESTAMP, UNVERIFIED,
    };

    let operations = docs::operations().unwrap();
    let event = find(&operations, "provider_event:v1");
    assert!(event.verified_webhook);
    assert!(!find(&operations, "short_window:v1").verified_webhook);
    // The documents' names are the verifier's.
    let names: Vec<&str> = contract::WEBHOOK_HEADERS.iter().map(|(n, _)| *n).collect();
    assert_eq!(
        names,
        [
            HEADER_WEBHOOK_ID,
            HEADER_WEBHOOK_TIMESTAMP,
            HEADER_WEBHOOK_SIGNATURE
        ]
    );

    let openapi = docs::openapi(&operations);
    let post = &openapi["paths"]["/events"]["post"];
    for &name in &names {
        let listed = post["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["name"] == name && p["in"] == "header" && p["required"] == true);
        assert_eq!(listed.count(), 1, "{name}: {post}");
    }
    assert_eq!(
        post["responses"]["401"]["content"]["application/problem+json"]["x-problem-types"],
        serde_json::json!([UNVERIFIED])
    );
    assert!(
        openapi["paths"]["/short"]["post"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| !p["name"].as_str().unwrap().starts_with("webhook-"))
    );

    let markdown = docs::markdown(&operations);
    assert!(
        markdown.contains(&format!("| 401 `{UNVERIFIED}` |")),
        "{markdown}"
    );
    for &name in &names {
        assert!(markdown.contains(&format!("- `{name}`: ")), "{markdown}");
    }
}

#[test]
fn duplicate_ids_are_refused() {
    let again = OperationDoc::from_spec(&OperationSpec::new("short_window:v1"));
    let error = Operations::from_registry()
        .unwrap()
        .with(again)
        .unwrap_err();
    assert_eq!(error.id, "short_window:v1");
    assert!(
        error.declared[0].starts_with("idem-runtime/tests/docs.rs:"),
        "{error}"
    );
    assert!(
        error.to_string().contains("another `operation` name"),
        "{error}"
    );
}

#[test]
fn operations_without_an_attribute_are_added_by_hand() {
    let pay = OperationDoc::from_spec(&OperationSpec::new("pay:v1")).path("POST", "/payments");
    let operations = Operations::from_registry().unwrap().with(pay).unwrap();
    let ids: Vec<&str> = operations.docs().iter().map(|d| d.id.as_str()).collect();
    let mut expected = REGISTERED.to_vec();
    expected.push("pay:v1");
    expected.sort_unstable();
    assert_eq!(ids, expected);
    assert!(operations.openapi()["paths"]["/payments"]["post"].is_object());
}

#[test]
fn the_documented_key_limits_are_the_parsers() {
    assert_eq!(contract::KEY_MAX_LEN, MAX_RECEIVED_LEN);
    assert_eq!(contract::KEY_STORED_MAX_LEN, MAX_LEN);
    assert_eq!(contract::KEY_DIGEST_PREFIX, DIGEST_PREFIX);
    let quoted = |n: usize| format!("\"{}\"", "k".repeat(n));
    let parse = |raw: String| IdempotencyKey::parse(raw.as_bytes(), KeyFormat::Strict);
    assert!(parse(quoted(contract::KEY_MIN_LEN)).is_ok());
    assert!(parse(quoted(contract::KEY_MAX_LEN)).is_ok());
    assert!(parse(quoted(contract::KEY_MAX_LEN + 1)).is_err());
    let stored = |n: usize| parse(quoted(n)).unwrap().as_str().to_owned();
    assert_eq!(
        stored(contract::KEY_STORED_MAX_LEN).len(),
        contract::KEY_STORED_MAX_LEN
    );
    assert!(stored(contract::KEY_STORED_MAX_LEN + 1).starts_with(contract::KEY_DIGEST_PREFIX));
    assert!(parse(quoted(contract::KEY_MIN_LEN - 1)).is_err());
    assert!(parse(format!("\"{}\"", contract::EXAMPLE_KEY)).is_ok());
}

/// Every problem the protocol answers is in the documents, under its status, for an
/// operation it can happen to.
#[test]
fn the_documents_list_every_problem_of_the_protocol() {
    let atomic = OperationDoc::from_spec(&OperationSpec::new("a:v1").scope(ScopeKind::Tenant));
    let staged = OperationDoc::from_spec(
        &OperationSpec::new("s:v1")
            .scope(ScopeKind::Tenant)
            .mode(Mode::Staged),
    );
    let soon = Duration::from_secs(1);
    let errors = [
        Error::MissingKey,
        Error::InvalidKey(KeyError::TooLong),
        Error::NoScope("tenant"),
        Error::Mismatch(None),
        Error::InFlight { retry_after: soon },
        Error::Expired,
        Error::ResponseTooLarge { limit: 1 },
        Error::Panicked,
        Error::CommitUnknown(sqlx::Error::PoolClosed),
        Error::Store(sqlx::Error::PoolTimedOut),
        Error::Interrupted {
            reason: "provider timed out".to_owned(),
            retry_after: soon,
        },
    ];
    for error in errors {
        let problem = error.problem();
        let status = problem.status().as_u16().to_string();
        let listed = [&atomic, &staged].into_iter().any(|doc| {
            contract::cases(doc).iter().any(|case| {
                case.status == status
                    && (case.problem == Some(problem.type_uri())
                        || case.when.contains(problem.type_uri()))
            })
        });
        assert!(listed, "{status} {} is not documented", problem.type_uri());
    }
}

/// The registry records where each handler is written, for the duplicate-id error and for
/// documents the application asks to name it; the documents handed to clients leave it out.
#[test]
fn the_documents_name_the_handlers_source_only_when_asked() {
    let operations = Operations::from_registry().unwrap();
    let location = "idem-runtime/tests/docs.rs:";
    assert!(
        operations
            .docs()
            .iter()
            .all(|d| d.source.as_deref().is_some_and(|s| s.starts_with(location)))
    );
    let markdown = operations.markdown();
    assert!(!markdown.contains(".rs:"), "{markdown}");
    let openapi = operations.openapi();
    assert!(!openapi.to_string().contains(".rs:"), "{openapi}");

    let published = operations.publish_sources(true);
    let markdown = published.markdown();
    let short = find(published.docs(), "short_window:v1");
    let source = short.source.clone().unwrap();
    assert!(
        markdown.contains(&format!("handler `short_window`, `{source}`.")),
        "{markdown}"
    );
    let openapi = published.openapi();
    assert_eq!(
        openapi["paths"]["/short"]["post"]["x-idempotency"]["source"],
        source.as_str()
    );
    assert!(
        openapi["x-idempotency-operations"][0]["source"]
            .as_str()
            .is_some_and(|s| s.starts_with(location)),
        "{openapi}"
    );
}

/// One call serves both documents: `GET /openapi.json` (JSON) and `GET /docs/idempotency.md`
/// (Markdown), each naming the registered operations, and nothing else.
#[tokio::test]
async fn the_documents_are_served_by_one_call() {
    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use tower::ServiceExt as _;

    let app: axum::Router = Operations::from_registry().unwrap().routes();
    let get = |path: &'static str| {
        let app = app.clone();
        async move {
            let request = Request::get(path).body(Body::empty()).unwrap();
            let response = app.oneshot(request).await.unwrap();
            let status = response.status();
            let kind = response.headers()[header::CONTENT_TYPE]
                .to_str()
                .unwrap()
                .to_owned();
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (status, kind, String::from_utf8(body.to_vec()).unwrap())
        }
    };
    let (status, kind, openapi) = get(docs::OPENAPI_PATH).await;
    assert_eq!(
        (status, kind.as_str()),
        (StatusCode::OK, "application/json")
    );
    let openapi: serde_json::Value = serde_json::from_str(&openapi).unwrap();
    assert!(openapi["paths"]["/short"]["post"].is_object(), "{openapi}");
    let (status, kind, markdown) = get(docs::MARKDOWN_PATH).await;
    assert_eq!(
        (status, kind.as_str()),
        (StatusCode::OK, docs::MARKDOWN_TYPE)
    );
    assert!(markdown.contains("short_window"), "{markdown}");
    let unknown = Request::get("/docs").body(Body::empty()).unwrap();
    assert_eq!(
        app.oneshot(unknown).await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
}
