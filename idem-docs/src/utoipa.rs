//! idem's contract merged into an application's `utoipa` document.

use std::fmt;

use serde_json::{Map, Value};

use crate::OperationDoc;
use crate::openapi::{components, operation};

/// The application's document could not be converted to JSON and back.
#[derive(Debug)]
pub struct MergeError(serde_json::Error);

impl fmt::Display for MergeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the OpenAPI document does not round-trip through JSON: {}",
            self.0
        )
    }
}

impl std::error::Error for MergeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Merges idem's contract into an application's [`utoipa::openapi::OpenApi`].
///
/// For each operation with a method and a path, the application's operation at that path and
/// method (created when the document lacks it) gains what [`openapi`](crate::openapi) says of
/// it: the key's header parameter (`Idempotency-Key`, or the headers a key taken from the
/// request is made of) and the path's template parameters it does not list, the responses
/// idem can answer, the `requestBody` idem knows of ([`OperationDoc::request_body`]) when the
/// application's operation has none, and the `x-idempotency` extension. `components` gains
/// the `Problem` schema, the schemas those bodies refer to, and the `RetryAfter` and
/// `IdempotentReplayed` headers, unless it has components of those names. Operations without
/// a route are not merged.
///
/// The application's document describes its own responses; idem adds to them:
/// - a status the application does not document is added as idem documents it;
/// - a status both document keeps the application's description and schemas, followed by
///   idem's description; idem's headers (`Retry-After`) and media types it lacks are added,
///   and for a media type both give, idem's `x-problem-types` join the application's;
/// - idem's replay of a success is folded into each 2xx the application documents (its
///   description, and the `Idempotent-Replayed` header), and added as `2XX` only when the
///   application documents none;
/// - the operation's own responses ([`OperationDoc::responses`]) are left out for the
///   statuses the application documents: its document already says them
///   ([`responses_from`] fills them from it, for the Markdown document).
///
/// Merging again changes nothing.
///
/// The merge goes through `serde_json`: the document is serialised to a JSON value, merged,
/// and deserialised back into utoipa's types (which checks it still has their structure).
///
/// ```
/// use idem_docs::{OperationDoc, merge_into};
/// use idem_spec::OperationSpec;
/// use utoipa::openapi::{InfoBuilder, OpenApiBuilder, PathsBuilder};
///
/// let mut api = OpenApiBuilder::new()
///     .info(InfoBuilder::new().title("Shop").version("1").build())
///     .paths(PathsBuilder::new().build())
///     .build();
/// let doc = OperationDoc::from_spec(&OperationSpec::new("create_order:v1"))
///     .path("POST", "/orders");
/// merge_into(&mut api, &[doc])?;
/// let json = serde_json::to_value(&api)?;
/// assert_eq!(json["paths"]["/orders"]["post"]["parameters"][0]["name"], "Idempotency-Key");
/// assert!(json["components"]["schemas"]["Problem"].is_object());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`MergeError`] when the document does not serialise to JSON, or the merged JSON does not
/// deserialise back into an `OpenApi`.
pub fn merge_into(
    api: &mut utoipa::openapi::OpenApi,
    operations: &[OperationDoc],
) -> Result<(), MergeError> {
    let mut document = serde_json::to_value(&*api).map_err(MergeError)?;
    merge_value(&mut document, operations);
    *api = serde_json::from_value(document).map_err(MergeError)?;
    Ok(())
}

fn object<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let entry = map
        .entry(key.to_owned())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(inner) => inner,
        _ => unreachable!("replaced by an object above"),
    }
}

/// The operation at `path` and `method` (lower case) of a document as JSON.
fn operation_at<'a>(root: &'a Map<String, Value>, path: &str, method: &str) -> Option<&'a Value> {
    root.get("paths")?.get(path)?.get(method)
}

/// The merge, on the document as JSON.
fn merge_value(document: &mut Value, operations: &[OperationDoc]) {
    let Value::Object(root) = document else {
        return;
    };
    let mut merged_any = false;
    for doc in operations {
        let (Some(method), Some(path)) = (&doc.method, &doc.path) else {
            continue;
        };
        merged_any = true;
        let method = method.to_ascii_lowercase();
        // The application's statuses are the application's to describe.
        let documented: Vec<u16> = operation_at(root, path, &method)
            .and_then(|op| op.get("responses"))
            .and_then(Value::as_object)
            .map(|r| r.keys().filter_map(|s| s.parse().ok()).collect())
            .unwrap_or_default();
        let mut own = doc.clone();
        own.responses
            .retain(|(status, _)| !documented.contains(status));
        let Value::Object(generated) = operation(&own) else {
            continue;
        };
        let item = object(object(root, "paths"), path);
        let Some(Value::Object(existing)) = item.get_mut(&method) else {
            item.insert(method, Value::Object(generated));
            continue;
        };
        merge_operation(existing, generated);
    }
    if merged_any && let Value::Object(generated) = components(operations) {
        let target = object(root, "components");
        for (kind, entries) in generated {
            let Value::Object(entries) = entries else {
                continue;
            };
            let target = object(target, &kind);
            for (name, entry) in entries {
                target.entry(name).or_insert(entry);
            }
        }
    }
}

fn merge_operation(existing: &mut Map<String, Value>, mut generated: Map<String, Value>) {
    if let Some(Value::Array(parameters)) = generated.remove("parameters") {
        let target = existing
            .entry("parameters")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !target.is_array() {
            *target = Value::Array(Vec::new());
        }
        if let Value::Array(target) = target {
            for parameter in parameters {
                let same = |p: &Value| {
                    p["in"] == parameter["in"]
                        && p["name"]
                            .as_str()
                            .zip(parameter["name"].as_str())
                            .is_some_and(|(a, b)| a.eq_ignore_ascii_case(b))
                };
                if !target.iter().any(same) {
                    target.push(parameter);
                }
            }
        }
    }
    if let Some(Value::Object(responses)) = generated.remove("responses") {
        let target = object(existing, "responses");
        let successes: Vec<String> = target
            .keys()
            .filter(|status| status.starts_with('2'))
            .cloned()
            .collect();
        for (status, response) in responses {
            if status == "2XX" && !successes.is_empty() {
                for success in &successes {
                    if let Some(Value::Object(own)) = target.get_mut(success) {
                        fold_response(own, &response);
                    }
                }
                continue;
            }
            match target.get_mut(&status) {
                Some(Value::Object(own)) => fold_response(own, &response),
                _ => {
                    target.insert(status, response);
                }
            }
        }
    }
    for key in [
        "requestBody",
        "x-idempotency",
        "x-handler",
        "operationId",
        "summary",
        "description",
    ] {
        if let Some(value) = generated.remove(key) {
            existing.entry(key.to_owned()).or_insert(value);
        }
    }
}

/// Adds idem's response of a status to the application's response of the same status: its
/// description after the application's, the headers and media types the application's
/// lacks, and its problem types beside the application's.
fn fold_response(own: &mut Map<String, Value>, idem: &Value) {
    if let Some(text) = idem["description"].as_str().filter(|t| !t.is_empty()) {
        let description = match own.get("description").and_then(Value::as_str) {
            None | Some("") => text.to_owned(),
            Some(before) if before.contains(text) => before.to_owned(),
            Some(before) => format!("{before}\n\n{text}"),
        };
        own.insert("description".to_owned(), Value::String(description));
    }
    if let Some(Value::Object(headers)) = idem.get("headers") {
        let target = object(own, "headers");
        for (name, header) in headers {
            if !target.keys().any(|n| n.eq_ignore_ascii_case(name)) {
                target.insert(name.clone(), header.clone());
            }
        }
    }
    if let Some(Value::Object(content)) = idem.get("content") {
        let target = object(own, "content");
        for (media_type, entry) in content {
            let Some(Value::Object(mine)) = target.get_mut(media_type) else {
                target.insert(media_type.clone(), entry.clone());
                continue;
            };
            let Some(Value::Array(types)) = entry.get("x-problem-types") else {
                continue;
            };
            let known = mine
                .entry("x-problem-types")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(known) = known {
                for problem in types {
                    if !known.contains(problem) {
                        known.push(problem.clone());
                    }
                }
            }
        }
    }
}

/// The operations' own responses, read from the application's document: for each operation
/// with a route, every status its operation in `api` documents (`201`, `422`; not ranges like
/// `2XX`) with its description, as [`OperationDoc::responds`] adds them; but not the `401` of
/// an operation whose keys are per tenant or user, or that verifies webhooks, which the
/// contract already describes (the application's authentication refusing the request before
/// any key is looked at, a delivery whose signature does not verify). The Markdown
/// document then lists them beside idem's, from the one place the application wrote them;
/// [`merge_into`] leaves them to the application's document.
///
/// ```
/// use idem_docs::{OperationDoc, responses_from};
/// use idem_spec::OperationSpec;
///
/// let api: utoipa::openapi::OpenApi = serde_json::from_value(serde_json::json!({
///     "openapi": "3.1.0",
///     "info": {"title": "Shop", "version": "1"},
///     "paths": {"/orders": {"post": {"responses": {"201": {"description": "The order."}}}}},
/// }))?;
/// let mut docs = [OperationDoc::from_spec(&OperationSpec::new("create_order:v1")).path("POST", "/orders")];
/// responses_from(&api, &mut docs)?;
/// assert_eq!(docs[0].responses, [(201, "The order".to_owned())]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`MergeError`] when the document does not serialise to JSON.
pub fn responses_from(
    api: &utoipa::openapi::OpenApi,
    docs: &mut [OperationDoc],
) -> Result<(), MergeError> {
    let document = serde_json::to_value(api).map_err(MergeError)?;
    let Value::Object(root) = &document else {
        return Ok(());
    };
    for doc in docs {
        let (Some(method), Some(path)) = (&doc.method, &doc.path) else {
            continue;
        };
        let Some(Value::Object(responses)) = operation_at(root, path, &method.to_ascii_lowercase())
            .and_then(|op| op.get("responses"))
        else {
            continue;
        };
        // The contract has a row for the application's authentication refusing a request
        // of an operation whose keys need a principal, and one for a webhook's signature
        // that does not verify: the application's 401 is one of those rows, not another.
        let authenticates = crate::contract::cases(doc)
            .iter()
            .any(|case| case.status == "401");
        for (status, response) in responses {
            let Ok(status) = status.parse::<u16>() else {
                continue;
            };
            if status == 401 && authenticates {
                continue;
            }
            // The documents add their own full stop.
            let description = response["description"].as_str().unwrap_or_default();
            *doc = doc
                .clone()
                .responds(status, description.trim_end_matches('.'));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use idem_spec::OperationSpec;
    use serde_json::json;
    use utoipa::openapi::OpenApi;

    use super::{merge_into, responses_from};
    use crate::{OperationDoc, openapi};

    fn application() -> OpenApi {
        serde_json::from_value(json!({
            "openapi": "3.1.0",
            "info": {"title": "Shop", "version": "1"},
            "paths": {
                "/orders": {
                    "post": {
                        "operationId": "create_order",
                        "responses": {"201": {"description": "The order"}},
                    },
                },
            },
        }))
        .unwrap()
    }

    #[test]
    fn keeps_the_applications_responses_and_adds_the_contract() {
        let mut api = application();
        let doc =
            OperationDoc::from_spec(&OperationSpec::new("create_order:v1")).path("POST", "/orders");
        let payments =
            OperationDoc::from_spec(&OperationSpec::new("pay:v1")).path("POST", "/payments/{id}");
        merge_into(&mut api, &[doc.clone(), payments.clone()]).unwrap();
        let merged = serde_json::to_value(&api).unwrap();
        let standalone = openapi(&[doc, payments]);

        let post = &merged["paths"]["/orders"]["post"];
        assert_eq!(post["operationId"], "create_order");
        // The application's success, with idem's replay of it.
        let created = &post["responses"]["201"];
        let description = created["description"].as_str().unwrap();
        assert!(description.starts_with("The order\n\n"), "{description}");
        assert!(
            description.contains("Idempotent-Replayed: true"),
            "{description}"
        );
        assert_eq!(
            created["headers"]["Idempotent-Replayed"],
            json!({"$ref": "#/components/headers/IdempotentReplayed"})
        );
        assert!(post["responses"].get("2XX").is_none());
        assert_eq!(post["parameters"][0]["name"], "Idempotency-Key");
        assert_eq!(post["parameters"][0]["in"], "header");
        let expected = &standalone["paths"]["/orders"]["post"];
        assert_eq!(post["x-idempotency"], expected["x-idempotency"]);
        for (status, response) in expected["responses"].as_object().unwrap() {
            if status.starts_with('2') {
                continue;
            }
            assert_eq!(&post["responses"][status], response, "{status}");
        }
        assert!(post["responses"]["409"]["content"]["application/problem+json"].is_object());

        // A path the application lacks is added as the standalone document has it.
        assert_eq!(
            merged["paths"]["/payments/{id}"]["post"],
            standalone["paths"]["/payments/{id}"]["post"]
        );
        assert_eq!(
            merged["components"]["schemas"]["Problem"],
            standalone["components"]["schemas"]["Problem"]
        );
        assert_eq!(
            merged["components"]["headers"],
            standalone["components"]["headers"]
        );

        // Still an `OpenApi`: it round-trips through utoipa's types unchanged.
        let again: OpenApi = serde_json::from_value(merged.clone()).unwrap();
        assert_eq!(serde_json::to_value(&again).unwrap(), merged);

        // Merging twice changes nothing.
        merge_into(
            &mut api,
            &[
                OperationDoc::from_spec(&OperationSpec::new("create_order:v1"))
                    .path("POST", "/orders"),
            ],
        )
        .unwrap();
        assert_eq!(
            serde_json::to_value(&api).unwrap()["paths"]["/orders"],
            merged["paths"]["/orders"]
        );
    }

    #[test]
    fn a_status_both_document_keeps_the_applications_schema_and_gains_idems_cases() {
        let mut api: OpenApi = serde_json::from_value(json!({
            "openapi": "3.1.0",
            "info": {"title": "Shop", "version": "1"},
            "paths": {"/orders": {"post": {"responses": {
                "201": {"description": "The order.", "content": {"application/json": {"schema": {"type": "object"}}}},
                "422": {"description": "Out of range.", "content": {"application/problem+json": {
                    "schema": {"$ref": "#/components/schemas/Problem"},
                    "x-problem-types": ["urn:example:invalid-order"],
                }}},
            }}}},
        }))
        .unwrap();
        let mut docs = [
            OperationDoc::from_spec(&OperationSpec::new("create_order:v1")).path("POST", "/orders"),
        ];
        responses_from(&api, &mut docs).unwrap();
        assert_eq!(
            docs[0].responses,
            [
                (201, "The order".to_owned()),
                (422, "Out of range".to_owned())
            ]
        );
        merge_into(&mut api, &docs).unwrap();
        let merged = serde_json::to_value(&api).unwrap();
        let unprocessable = &merged["paths"]["/orders"]["post"]["responses"]["422"];
        let description = unprocessable["description"].as_str().unwrap();
        // The application's words once, then idem's key-reused case, not the application's
        // own response a second time.
        assert!(
            description.starts_with("Out of range.\n\n"),
            "{description}"
        );
        assert_eq!(
            description.matches("Out of range").count(),
            1,
            "{description}"
        );
        assert!(description.contains("different request"), "{description}");
        assert_eq!(
            unprocessable["content"]["application/problem+json"]["x-problem-types"],
            json!([
                "urn:example:invalid-order",
                "urn:idem:problem:key-reused",
                "urn:idem:problem:invalid-body"
            ])
        );
        let created = &merged["paths"]["/orders"]["post"]["responses"]["201"];
        assert_eq!(
            created["content"]["application/json"]["schema"],
            json!({"type": "object"})
        );
        assert!(created["headers"]["Idempotent-Replayed"].is_object());
        // Merging again changes nothing.
        merge_into(&mut api, &docs).unwrap();
        assert_eq!(serde_json::to_value(&api).unwrap(), merged);
    }

    #[test]
    fn a_key_from_a_header_is_merged_as_that_header() {
        use idem_spec::{KeyPart, KeySource};

        let mut api = application();
        let spec = OperationSpec::new("create_order:v1")
            .key_from(KeySource::Parts(&[KeyPart::Header("webhook-id")]));
        let doc = OperationDoc::from_spec(&spec).path("POST", "/orders");
        merge_into(&mut api, std::slice::from_ref(&doc)).unwrap();
        let merged = serde_json::to_value(&api).unwrap();
        let post = &merged["paths"]["/orders"]["post"];
        let standalone = openapi(&[doc]);
        assert_eq!(
            post["parameters"],
            standalone["paths"]["/orders"]["post"]["parameters"]
        );
        assert_eq!(post["parameters"][0]["name"], "webhook-id");
        assert_eq!(post["parameters"][0]["schema"]["maxLength"], 8192);
        assert_eq!(
            post["x-idempotency"]["keyFrom"],
            json!([{"header": "webhook-id"}])
        );
        // Still an `OpenApi`.
        let again: OpenApi = serde_json::from_value(merged.clone()).unwrap();
        assert_eq!(serde_json::to_value(&again).unwrap(), merged);
    }

    /// An application that documents a verified webhook's headers and 401 itself keeps its
    /// words; idem adds what it lacks, once.
    #[test]
    fn a_verified_webhook_documented_by_the_application_is_not_listed_twice() {
        use idem_spec::{KeyPart, KeySource};

        let mut api: OpenApi = serde_json::from_value(json!({
            "openapi": "3.1.0",
            "info": {"title": "Shop", "version": "1"},
            "paths": {"/events": {"post": {
                "parameters": [{
                    "name": "Webhook-Timestamp", "in": "header", "required": true,
                    "description": "When it was signed", "schema": {"type": "string"},
                }],
                "responses": {
                    "200": {"description": "Applied"},
                    "401": {"description": "Not signed by the provider", "content": {
                        "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}},
                    }},
                },
            }}},
        }))
        .unwrap();
        let spec = OperationSpec::new("event:v1")
            .key_from(KeySource::Parts(&[KeyPart::Header("webhook-id")]));
        let mut docs = [OperationDoc::from_spec(&spec)
            .path("POST", "/events")
            .verified_webhook()];
        responses_from(&api, &mut docs).unwrap();
        // The contract's 401 row is the application's 401.
        assert_eq!(docs[0].responses, [(200, "Applied".to_owned())]);
        merge_into(&mut api, &docs).unwrap();
        let merged = serde_json::to_value(&api).unwrap();
        let post = &merged["paths"]["/events"]["post"];
        let names: Vec<&str> = post["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            ["Webhook-Timestamp", "webhook-id", "webhook-signature"]
        );
        assert_eq!(post["parameters"][0]["description"], "When it was signed");
        let unverified = &post["responses"]["401"];
        let description = unverified["description"].as_str().unwrap();
        assert!(
            description.starts_with("Not signed by the provider\n\n"),
            "{description}"
        );
        assert_eq!(
            unverified["content"]["application/problem+json"]["x-problem-types"],
            json!([crate::contract::WEBHOOK_UNVERIFIED])
        );
        // Merging again changes nothing.
        merge_into(&mut api, &docs).unwrap();
        assert_eq!(serde_json::to_value(&api).unwrap(), merged);
    }

    #[test]
    fn the_merged_document_names_a_source_only_when_asked() {
        let doc = OperationDoc::from_spec(&OperationSpec::new("create_order:v1"))
            .path("POST", "/orders")
            .source("src/orders.rs:212");
        let mut api = application();
        merge_into(&mut api, std::slice::from_ref(&doc)).unwrap();
        let merged = serde_json::to_value(&api).unwrap();
        assert!(
            merged["paths"]["/orders"]["post"]["x-idempotency"]
                .get("source")
                .is_none()
        );
        assert!(!merged.to_string().contains("src/orders.rs"), "{merged}");

        let mut api = application();
        merge_into(&mut api, &[doc.publish_source(true)]).unwrap();
        let merged = serde_json::to_value(&api).unwrap();
        assert_eq!(
            merged["paths"]["/orders"]["post"]["x-idempotency"]["source"],
            "src/orders.rs:212"
        );
    }

    #[test]
    fn operations_without_a_route_change_nothing() {
        let mut api = application();
        let before = serde_json::to_value(&api).unwrap();
        merge_into(
            &mut api,
            &[OperationDoc::from_spec(&OperationSpec::new("pay:v1"))],
        )
        .unwrap();
        assert_eq!(serde_json::to_value(&api).unwrap(), before);
    }
}
