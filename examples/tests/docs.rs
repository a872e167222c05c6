//! The examples serve the client's contract of their idempotent operations, and the contract
//! is true: every situation the tests drive `POST /orders` into answers a status (and problem
//! type) the documents list. Run against the `orders` and `payments` processes on SQLite.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Client, Db, Kind, Reply, Server};
use idem_runtime::docs::{self, OperationDoc};
use idem_runtime::spec::{
    ExpiryPolicy, InFlightPolicy, KeyRequirement, Mode, OperationSpec, ScopeKind,
};
use idem_runtime::sqlx::{self, SqlitePool};
use serde_json::Value;

const ORDER: &str = r#"{"sku": "BOOK-1", "quantity": 2}"#;
const OTHER_ORDER: &str = r#"{"sku": "BOOK-1", "quantity": 3}"#;

async fn fetch(base: &str, path: &str) -> (String, String) {
    let response = reqwest::get(format!("{base}{path}")).await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (content_type, response.text().await.unwrap())
}

/// Both documents of a running server.
async fn documents(base: &str) -> (String, Value) {
    let (markdown_type, markdown) = fetch(base, "/docs/idempotency.md").await;
    assert_eq!(markdown_type, "text/markdown; charset=utf-8");
    let (openapi_type, openapi) = fetch(base, "/openapi.json").await;
    assert_eq!(openapi_type, "application/json");
    (markdown, serde_json::from_str(&openapi).unwrap())
}

#[tokio::test]
async fn orders_serves_its_documents() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = Server::start(&db);
    let (markdown, openapi) = documents(&server.base).await;
    assert!(markdown.contains("## POST /orders"), "{markdown}");
    assert!(markdown.contains("handler `create_order`"), "{markdown}");
    let post = &openapi["paths"]["/orders"]["post"];
    assert_eq!(post["x-idempotency"]["id"], "create_order:v1");
    assert_eq!(post["x-idempotency"]["scope"], "tenant");
    assert_eq!(post["parameters"][0]["name"], "Idempotency-Key");
    assert_eq!(post["parameters"][0]["required"], true);
    // The example's own document, from its types and routes: the body, the order, the path
    // parameter, the bearer scheme.
    assert_complete(&openapi);
    assert_eq!(
        post["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/NewOrder"
    );
    let new_order = &openapi["components"]["schemas"]["NewOrder"];
    assert_eq!(new_order["additionalProperties"], false);
    assert_eq!(new_order["properties"]["quantity"]["maximum"], 20);
    assert_eq!(
        post["responses"]["201"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Order"
    );
    assert!(post["responses"]["201"]["headers"]["Location"].is_object());
    assert!(post["responses"]["201"]["headers"]["Idempotent-Replayed"].is_object());
    let get = &openapi["paths"]["/orders/{id}"]["get"];
    assert_eq!(get["parameters"][0]["in"], "path");
    assert_eq!(get["parameters"][0]["schema"]["format"], "uuid");
    assert_eq!(get["security"], serde_json::json!([{"bearer": []}]));
    assert_eq!(
        openapi["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // The key's schema is the server's (default, lenient) format: bare keys too.
    let pattern = post["parameters"][0]["schema"]["pattern"].as_str().unwrap();
    assert!(pattern.ends_with("|[!#-\\[\\]-~]{1,8192})$"), "{pattern}");
    // The application's own responses reach the Markdown document from its OpenAPI one.
    assert!(
        markdown.contains("`sku` or `quantity` is out of range"),
        "{markdown}"
    );
    insta::assert_snapshot!("orders_markdown", markdown);
    insta::with_settings!({ sort_maps => true }, {
        insta::assert_json_snapshot!("orders_openapi", openapi);
    });
}

#[tokio::test]
async fn payments_serves_its_documents() {
    let db = Db::fresh(Kind::Sqlite).await;
    // The provider is never called: only the documents are read.
    let server = Server::spawn(
        env!("CARGO_BIN_EXE_payments"),
        "payments",
        &db.dir,
        &[
            ("DATABASE_URL", &db.url),
            ("PROVIDER_URL", "http://127.0.0.1:9"),
        ],
    );
    let (markdown, openapi) = documents(&server.base).await;
    assert!(markdown.contains("## POST /payments"), "{markdown}");
    let post = &openapi["paths"]["/payments"]["post"];
    assert_eq!(post["x-idempotency"]["mode"], "staged");
    assert!(
        post["responses"]["503"]["content"]["application/problem+json"]["x-problem-types"]
            .as_array()
            .unwrap()
            .contains(&"urn:idem:problem:interrupted".into())
    );
    assert!(post["responses"]["402"].is_object());
    // The provider's events: the key is the `webhook-id` header; the signature's headers and
    // a delivery that does not verify are documented from the handler's `Verified`, once each.
    let hook = &openapi["paths"]["/webhooks/provider"]["post"];
    let parameters = hook["parameters"].as_array().unwrap();
    for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
        let listed = parameters
            .iter()
            .filter(|p| p["name"] == name && p["in"] == "header" && p["required"] == true);
        assert_eq!(listed.count(), 1, "{name}: {parameters:?}");
    }
    assert!(
        !parameters.iter().any(|p| p["name"] == "Idempotency-Key"),
        "{parameters:?}"
    );
    assert_eq!(
        hook["responses"]["401"]["content"]["application/problem+json"]["x-problem-types"],
        serde_json::json!([idem_runtime::webhooks::UNVERIFIED])
    );
    assert!(
        markdown.contains("| 401 `urn:idem:problem:webhook-unverified` |"),
        "{markdown}"
    );
    assert!(
        markdown.contains("## POST /webhooks/provider"),
        "{markdown}"
    );
    // `POST /payments`, `GET /payments/{id}` and the provider's events only: the orders
    // handlers linked into the same library are not its.
    assert_eq!(openapi["paths"].as_object().unwrap().len(), 3);
    assert_complete(&openapi);
    assert_eq!(
        post["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/NewPayment"
    );
    assert_eq!(
        post["responses"]["201"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/Payment"
    );
    assert_eq!(
        hook["requestBody"]["content"]["application/json"]["schema"]["$ref"],
        "#/components/schemas/ProviderEvent"
    );
    assert_eq!(
        hook["security"],
        serde_json::json!([{"standardWebhooks": []}])
    );
    assert_eq!(
        openapi["components"]["securitySchemes"]["standardWebhooks"]["name"],
        "webhook-signature"
    );
    assert!(openapi["paths"]["/payments/{id}"]["get"]["responses"]["200"].is_object());
    insta::assert_snapshot!("payments_markdown", markdown);
    insta::with_settings!({ sort_maps => true }, {
        insta::assert_json_snapshot!("payments_openapi", openapi);
    });
}

/// What a document handed to clients must not say: where the server's code is (`file.rs:line`)
/// or that staged mode never repeats a call to another system (a step interrupted before its
/// result was recorded runs again, with the same provider key).
const NOT_FOR_CLIENTS: [&str; 4] = [
    ".rs:",
    "never repeated",
    "never made again",
    "calls made are not made again",
];

/// The documents both examples serve name no source location and promise no more than
/// staged mode does; the staged operation says what it does do.
#[tokio::test]
async fn served_documents_are_for_clients() {
    let db = Db::fresh(Kind::Sqlite).await;
    let orders = Server::start(&db);
    let payments = Server::spawn(
        env!("CARGO_BIN_EXE_payments"),
        "payments",
        &db.dir,
        &[
            ("DATABASE_URL", &db.url),
            ("PROVIDER_URL", "http://127.0.0.1:9"),
        ],
    );
    for (name, server) in [("orders", &orders), ("payments", &payments)] {
        let (_, markdown) = fetch(&server.base, "/docs/idempotency.md").await;
        let (_, openapi) = fetch(&server.base, "/openapi.json").await;
        for text in NOT_FOR_CLIENTS {
            assert!(!markdown.contains(text), "{name}: `{text}` in\n{markdown}");
            assert!(!openapi.contains(text), "{name}: `{text}` in\n{openapi}");
        }
        let openapi: Value = serde_json::from_str(&openapi).unwrap();
        for item in openapi["paths"].as_object().unwrap().values() {
            for operation in item.as_object().unwrap().values() {
                let policy = &operation["x-idempotency"];
                assert!(
                    policy.is_null() || policy.get("source").is_none(),
                    "{name}: {policy}"
                );
            }
        }
    }
    // The staged payment says what staged mode does with calls to the provider: in the
    // Markdown's summary, and in both documents' `503 interrupted` (the OpenAPI operation's
    // description is the example's own).
    let (markdown, openapi) = documents(&payments.base).await;
    assert!(
        markdown.contains(docs::contract::staged_calls()),
        "{markdown}"
    );
    assert!(
        markdown.contains("| 503 `urn:idem:problem:interrupted` + `Retry-After` |"),
        "{markdown}"
    );
    let post = &openapi["paths"]["/payments"]["post"];
    let interrupted = post["responses"]["503"]["description"].as_str().unwrap();
    assert!(
        interrupted.contains("runs again, with the same provider key"),
        "{interrupted}"
    );
}

/// An application that wants its handlers' locations in its documents asks for them
/// (`Operations::publish_sources`): the examples' documents then name them.
#[test]
fn documents_name_sources_when_asked() {
    use idem_examples::{orders, payments};
    use utoipa::OpenApi as _;

    let served = |operations, api| {
        let documents = idem_examples::docs::documents(operations, api).unwrap();
        (documents.markdown, documents.openapi)
    };
    let cases = [
        (
            "examples/src/orders.rs:",
            served(orders::operations(), orders::OrdersApi::openapi()),
            served(
                orders::operations().map(|o| o.publish_sources(true)),
                orders::OrdersApi::openapi(),
            ),
        ),
        (
            "examples/src/payments.rs:",
            served(payments::operations(), payments::PaymentsApi::openapi()),
            served(
                payments::operations().map(|o| o.publish_sources(true)),
                payments::PaymentsApi::openapi(),
            ),
        ),
    ];
    for (location, (markdown, openapi), (published_markdown, published_openapi)) in cases {
        assert!(!markdown.contains(".rs:"), "{markdown}");
        assert!(!openapi.contains(".rs:"), "{openapi}");
        assert!(
            published_markdown.contains(&format!("`{location}")),
            "{published_markdown}"
        );
        let published: Value = serde_json::from_str(&published_openapi).unwrap();
        let sources: Vec<&str> = published["paths"]
            .as_object()
            .unwrap()
            .values()
            .flat_map(|item| item.as_object().unwrap().values())
            .filter_map(|operation| operation["x-idempotency"]["source"].as_str())
            .collect();
        assert!(!sources.is_empty(), "{published_openapi}");
        assert!(
            sources.iter().all(|s| s.starts_with(location)),
            "{sources:?}"
        );
    }
}

/// Every operation of a served document describes its request body (when it has one) and
/// every one of its responses with a body schema.
fn assert_complete(openapi: &Value) {
    for (path, item) in openapi["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            if method == "post" {
                assert!(
                    operation["requestBody"]["content"]["application/json"]["schema"].is_object(),
                    "{method} {path} has no request body schema"
                );
            }
            for (status, response) in operation["responses"].as_object().unwrap() {
                let content = response["content"].as_object();
                assert!(
                    content.is_some_and(|c| c.values().all(|m| m["schema"].is_object())),
                    "{method} {path} {status} has no body schema: {response}"
                );
            }
        }
    }
}

/// What a situation really answered, checked against both documents: the status is a
/// response of `POST /orders` in the OpenAPI document (exactly or in its `2XX` range), an
/// idem problem's type is listed for it, replays document `Idempotent-Replayed` and 409/503
/// `Retry-After`; and the Markdown has a row for the status.
fn assert_documented(situation: &str, reply: &Reply, markdown: &str, openapi: &Value) {
    let responses = &openapi["paths"]["/orders"]["post"]["responses"];
    let status = reply.status.to_string();
    let range = format!("{}XX", status.chars().next().unwrap_or('0'));
    let documented = if responses[&status].is_object() {
        &responses[&status]
    } else {
        &responses[&range]
    };
    assert!(
        documented.is_object(),
        "{situation}: {status} is not documented: {responses:#}"
    );
    let row = markdown.lines().any(|line| {
        line.starts_with(&format!("| {status}")) || line.starts_with(&format!("| {range}"))
    });
    assert!(row, "{situation}: no row for {status} in the Markdown");
    if reply.header("content-type") == Some("application/problem+json") {
        let kind = reply.json()["type"].as_str().unwrap().to_owned();
        if kind.starts_with("urn:idem:problem:") {
            let types = &documented["content"]["application/problem+json"]["x-problem-types"];
            let listed = types
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == &kind));
            let named = documented["description"]
                .as_str()
                .is_some_and(|d| d.contains(&kind));
            assert!(
                listed || named,
                "{situation}: {kind} is not listed for {status}: {types}"
            );
        }
    }
    if reply.replayed() {
        assert!(
            documented["headers"]["Idempotent-Replayed"].is_object(),
            "{situation}: replays are not documented for {status}"
        );
    }
    if reply.header("retry-after").is_some() {
        assert!(
            documented["headers"]["Retry-After"].is_object(),
            "{situation}: Retry-After is not documented for {status}"
        );
    }
}

/// Every situation the document lists for `POST /orders` that a client can bring about
/// (403, 500 and the other 503s need a principal without a tenant, a fault or a failing
/// database, and are covered by the runtime's and the fault tests), driven against the
/// running example.
#[tokio::test]
async fn every_status_orders_answers_is_documented() {
    let db = Db::fresh(Kind::Sqlite).await;
    let server = Server::start(&db);
    let c = Client::new(&server);
    let (markdown, openapi) = documents(&server.base).await;
    let check = |situation: &str, reply: &Reply, expected: u16| {
        assert_eq!(reply.status, expected, "{situation}: {}", reply.body);
        assert_documented(situation, reply, &markdown, &openapi);
    };

    check(
        "no authentication",
        &c.post(None, Some("k1"), ORDER).await,
        401,
    );
    check("missing key", &c.post(Some("acme"), None, ORDER).await, 400);
    check(
        "malformed key",
        &c.post(Some("acme"), Some("\"a b\""), ORDER).await,
        400,
    );
    check(
        "key too long",
        &c.post(
            Some("acme"),
            Some(&"k".repeat(idem_runtime::key::MAX_RECEIVED_LEN + 1)),
            ORDER,
        )
        .await,
        400,
    );
    check(
        "malformed JSON",
        &c.post(Some("acme"), Some("k1"), "not json").await,
        400,
    );
    check(
        "invalid body",
        &c.post(
            Some("acme"),
            Some("k1"),
            r#"{"sku": "BOOK-1", "quantity": 0}"#,
        )
        .await,
        422,
    );
    let huge = format!(
        r#"{{"sku": "BOOK-1", "quantity": 2, "pad": "{}"}}"#,
        "x".repeat(17 * 1024)
    );
    check(
        "body too large",
        &c.post(Some("acme"), Some("k1"), &huge).await,
        413,
    );
    let wrong_type = reqwest::Client::new()
        .post(format!("{}/orders", server.base))
        .header("authorization", "Bearer acme")
        .header("idempotency-key", "\"k1\"")
        .header("content-type", "text/plain")
        .body(ORDER)
        .send()
        .await
        .unwrap();
    let wrong_type = Reply {
        status: wrong_type.status().as_u16(),
        headers: wrong_type.headers().clone(),
        body: wrong_type.text().await.unwrap(),
    };
    check("wrong content type", &wrong_type, 415);

    let first = c.post(Some("acme"), Some("\"k1\""), ORDER).await;
    check("first execution", &first, 201);
    let replay = c.post(Some("acme"), Some("\"k1\""), ORDER).await;
    assert!(replay.replayed());
    check("replay", &replay, 201);
    check(
        "same key, other request",
        &c.post(Some("acme"), Some("\"k1\""), OTHER_ORDER).await,
        422,
    );

    // Store busy: another connection holds SQLite's write lock (as a running execution, or
    // any other writer, does); the request waits for it up to the in-flight wait, then
    // answers 503: SQLite cannot tell a duplicate from another writer.
    let holder = SqlitePool::connect(&db.url).await.unwrap();
    let mut held = holder.acquire().await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *held)
        .await
        .unwrap();
    let in_flight = c.post(Some("acme"), Some("\"k2\""), ORDER).await;
    assert!(
        in_flight.header("retry-after").is_some(),
        "{}",
        in_flight.body
    );
    check("store busy", &in_flight, 503);
    sqlx::query("ROLLBACK").execute(&mut *held).await.unwrap();
    drop(held);
    holder.close().await;

    db.expire_all_keys().await;
    check(
        "expired key",
        &c.post(Some("acme"), Some("\"k1\""), ORDER).await,
        410,
    );
}

/// The served OpenAPI documents pass `openapi-spec-validator` (the Python package of that
/// name; `.ci/run` installs it). A validator that is missing or cannot run fails the test:
/// nothing is skipped.
#[tokio::test]
async fn openapi_documents_pass_the_validator() {
    let db = Db::fresh(Kind::Sqlite).await;
    let orders = Server::start(&db);
    let payments = Server::spawn(
        env!("CARGO_BIN_EXE_payments"),
        "payments",
        &db.dir,
        &[
            ("DATABASE_URL", &db.url),
            ("PROVIDER_URL", "http://127.0.0.1:9"),
        ],
    );
    ensure_validator();
    for (name, server) in [("orders", &orders), ("payments", &payments)] {
        let (_, text) = fetch(&server.base, "/openapi.json").await;
        let file = db.dir.join(format!("{name}-openapi.json"));
        std::fs::write(&file, text).unwrap();
        let output = validator()
            .arg(&file)
            .output()
            .unwrap_or_else(|e| panic!("openapi-spec-validator cannot run: {e}"));
        assert!(
            output.status.success(),
            "{name}: the OpenAPI document is invalid:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    // Every shape the generator has: optional keys, path templates, store_client_errors,
    // excluded paths, staged waits, an operation without a route, request bodies; and the
    // examples' operations as idem alone documents them, their bodies' schemas from their
    // types.
    let standalone = [
        ("variants", docs::openapi(&variants())),
        (
            "orders-standalone",
            idem_examples::orders::operations().unwrap().openapi(),
        ),
        (
            "payments-standalone",
            idem_examples::payments::operations().unwrap().openapi(),
        ),
    ];
    for (name, document) in standalone {
        let file = db.dir.join(format!("{name}-openapi.json"));
        std::fs::write(&file, serde_json::to_string(&document).unwrap()).unwrap();
        let output = validator().arg(&file).output().unwrap();
        assert!(
            output.status.success(),
            "{name}: the OpenAPI document is invalid:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Without the application's own document, idem's documents the operations' request bodies
/// from their handlers' extractors: the media type and, the types being `utoipa::ToSchema`,
/// their schemas, with the components they refer to.
#[test]
fn idem_alone_documents_the_request_bodies() {
    let orders = idem_examples::orders::operations().unwrap().openapi();
    let body = &orders["paths"]["/orders"]["post"]["requestBody"];
    assert_eq!(body["required"], true);
    let schema = &body["content"]["application/json"]["schema"];
    assert_eq!(schema["properties"]["quantity"]["maximum"], 20, "{schema}");
    let payments = idem_examples::payments::operations().unwrap().openapi();
    let event = &payments["paths"]["/webhooks/provider"]["post"]["requestBody"];
    let schema = &event["content"]["application/json"]["schema"];
    assert_eq!(
        schema["properties"]["data"]["$ref"], "#/components/schemas/ChargeEvent",
        "{schema}"
    );
    assert!(payments["components"]["schemas"]["ChargeEvent"].is_object());
}

fn variants() -> Vec<OperationDoc> {
    let atomic = OperationSpec::new("send_receipt:v2")
        .ttl(Duration::from_secs(3600))
        .key(KeyRequirement::Optional)
        .on_expired(ExpiryPolicy::Reexecute)
        .store_client_errors(true)
        .fingerprint_exclude(&["body.note"]);
    let staged = OperationSpec::new("pay:v1")
        .scope(ScopeKind::User)
        .mode(Mode::Staged)
        .on_in_flight(InFlightPolicy::Wait);
    vec![
        OperationDoc::from_spec(&atomic)
            .path("PUT", "/receipts/{id}/lines/{line}")
            .request_body(
                docs::RequestBodyDoc::new("application/json").schema(
                    serde_json::json!({"$ref": "#/components/schemas/Receipt"}),
                    [(
                        "Receipt".to_owned(),
                        serde_json::json!({"type": "object", "properties": {"note": {"type": "string"}}}),
                    )]
                    .into(),
                ),
            ),
        OperationDoc::from_spec(&staged)
            .path("POST", "/receipts/{id}/lines/{line}")
            .responds(201, "Paid")
            .responds(402, "Declined")
            .problem(docs::ProblemDoc::new(
                402,
                "urn:example:declined",
                "declined",
            ))
            .problem(docs::ProblemDoc::new(503, "urn:example:busy", "busy").retry_after())
            .request_body(docs::RequestBodyDoc::new("application/x-www-form-urlencoded").optional()),
        OperationDoc::from_spec(&OperationSpec::new("nightly:v1")),
    ]
}

fn validator() -> Command {
    let mut command = Command::new("python3");
    command.args(["-m", "openapi_spec_validator"]);
    command
}

/// Fails the test, saying how to install it, when the validator does not run.
fn ensure_validator() {
    let output = validator().arg("--help").output();
    let why = match &output {
        Ok(output) if output.status.success() => return,
        Ok(output) => String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        Err(e) => format!("python3 cannot run: {e}"),
    };
    panic!(
        "openapi-spec-validator does not run ({why}); install the Python package \
         openapi-spec-validator (.ci/run does)"
    );
}

/// The orders' documents, as the server writes them, without a server.
fn orders_documents() -> (String, Value) {
    use utoipa::OpenApi as _;
    let documents = idem_examples::docs::documents(
        idem_examples::orders::operations(),
        idem_examples::orders::OrdersApi::openapi(),
    )
    .unwrap();
    (
        documents.markdown,
        serde_json::from_str(&documents.openapi).unwrap(),
    )
}

/// A client following the served documents retries a `409` or a `503` only for idem's own
/// problem types: each paragraph that says to wait `Retry-After` names its type, and the
/// `Retry-After` header names the types it comes with, never a status alone.
#[test]
fn retry_advice_names_idem_problem_types() {
    let (markdown, openapi) = orders_documents();
    let retry_after = openapi["components"]["headers"]["RetryAfter"]["description"]
        .as_str()
        .unwrap();
    assert!(
        retry_after.contains(&format!("`{}` (409)", docs::contract::IN_FLIGHT)),
        "{retry_after}"
    );
    assert!(!retry_after.contains("409 and 503"), "{retry_after}");
    let responses = &openapi["paths"]["/orders"]["post"]["responses"];
    for status in ["409", "503"] {
        let description = responses[status]["description"].as_str().unwrap();
        for paragraph in description.split("\n\n") {
            if paragraph.contains("`Retry-After`") {
                assert!(
                    paragraph.starts_with("`urn:idem:problem:"),
                    "{status}: {paragraph}"
                );
            }
        }
    }
    for line in markdown.lines().filter(|l| l.starts_with("| 409")) {
        assert!(line.contains(docs::contract::IN_FLIGHT), "{line}");
    }
    assert!(
        !markdown.contains("still running, `409` with"),
        "{markdown}"
    );
}

/// The served `410` row and "When the window lapses" count the window alike, as the runtime
/// does: an atomic key expires its ttl after the arrival of the request that ran the
/// operation.
#[test]
fn the_window_is_worded_once() {
    let (markdown, _) = orders_documents();
    let kept = "kept for 24 hours from the arrival of the request that ran the operation";
    let gone = markdown.lines().find(|l| l.starts_with("| 410")).unwrap();
    assert!(gone.contains(kept), "{gone}");
    assert!(
        markdown.contains(&format!("A key is {kept}.")),
        "{markdown}"
    );
    assert!(!markdown.contains("stored more than"), "{markdown}");
    assert!(!markdown.contains("after its first request"), "{markdown}");
}

/// The payments' documents, as the server writes them, without a server.
fn payments_documents() -> (String, Value) {
    use utoipa::OpenApi as _;
    let documents = idem_examples::docs::documents(
        idem_examples::payments::operations(),
        idem_examples::payments::PaymentsApi::openapi(),
    )
    .unwrap();
    (
        documents.markdown,
        serde_json::from_str(&documents.openapi).unwrap(),
    )
}

/// The examples declare their own problems on the attribute (`problems = […]`): each is
/// listed under its status with its type, so that a client tells it from idem's problems of
/// that status, and only the one that carries `Retry-After` is retried on its advice.
#[test]
fn the_examples_own_problems_are_listed_with_their_types() {
    let (markdown, openapi) = orders_documents();
    let row = markdown
        .lines()
        .find(|l| l.contains("`urn:idem:example:invalid-order`"))
        .unwrap_or_else(|| panic!("{markdown}"));
    assert!(
        row.starts_with("| 422 `urn:idem:example:invalid-order` | `sku` or `quantity`"),
        "{row}"
    );
    let types = |api: &Value, path: &str, status: &str| {
        api["paths"][path]["post"]["responses"][status]["content"]["application/problem+json"]
            ["x-problem-types"]
            .clone()
    };
    assert!(
        types(&openapi, "/orders", "422")
            .as_array()
            .unwrap()
            .contains(&"urn:idem:example:invalid-order".into())
    );

    let (markdown, openapi) = payments_documents();
    for (status, problem) in [
        ("402", "urn:idem:example:payment-declined"),
        ("422", "urn:idem:example:invalid-payment"),
    ] {
        assert!(
            types(&openapi, "/payments", status)
                .as_array()
                .unwrap()
                .contains(&problem.into()),
            "{status} {problem}"
        );
        let row = markdown
            .lines()
            .find(|l| l.starts_with(&format!("| {status} `{problem}` |")))
            .unwrap_or_else(|| panic!("{problem}: {markdown}"));
        assert!(!row.contains("Retry-After"), "{row}");
    }
    let not_yet = "urn:idem:example:charge-not-recorded-yet";
    assert!(
        types(&openapi, "/webhooks/provider", "503")
            .as_array()
            .unwrap()
            .contains(&not_yet.into())
    );
    let row = markdown
        .lines()
        .find(|l| l.starts_with(&format!("| 503 `{not_yet}` + `Retry-After` |")))
        .unwrap_or_else(|| panic!("{markdown}"));
    assert!(
        row.contains(&format!("For this `type` only (`{not_yet}`)")),
        "{row}"
    );
}
