//! The OpenAPI 3.1 document.

use idem_spec::{Mode, format_duration};
use serde_json::{Map, Value, json};

use crate::contract::{
    self, KEY_HEADER, KEY_MAX_LEN, KEY_MIN_LEN, PROBLEM_MEDIA_TYPE, REPLAYED_HEADER,
    WEBHOOK_HEADERS, key_pattern,
};
use crate::{KeyPartDoc, OperationDoc, RequestBodyDoc};

/// The operations as an OpenAPI 3.1 document.
///
/// Each operation with a route is under `paths` with the `Idempotency-Key` header parameter,
/// every response [`contract::cases`] lists (grouped per status, problems as
/// `application/problem+json` with the `Problem` schema of `components`), its `requestBody`
/// when known ([`OperationDoc::request_body`]; the schemas it refers to in `components`), and
/// an `x-idempotency` object with its policy (`mismatchDetail: false` when its `422` names no
/// field; the handler's `source`, `file:line`, only when [`OperationDoc::publish_source`] is
/// set). Operations without a route have no place in
/// `paths`: they are listed under the document's top-level `x-idempotency-operations` only.
///
/// An operation whose key is taken from the request has, instead of `Idempotency-Key`, a
/// required parameter for each header the key is taken from; fields of the body add no
/// parameter (the body is the application's to describe), but the operation's description
/// explains the key and `x-idempotency` lists its parts under `keyFrom`
/// (`[{"header": "webhook-id"}, {"body": "/id"}]`, as [`OperationDoc`] serialises them).
///
/// A verified webhook ([`OperationDoc::verified_webhook`]) also has the required
/// `webhook-id`, `webhook-timestamp` and `webhook-signature` header parameters (once each:
/// `webhook-id` is often its key) and the `401` of a delivery that does not verify.
///
/// ```
/// use idem_docs::{OperationDoc, openapi};
/// use idem_spec::OperationSpec;
///
/// let doc = OperationDoc::from_spec(&OperationSpec::new("create_order:v1")).path("POST", "/orders");
/// let api = openapi(&[doc]);
/// assert_eq!(api["openapi"], "3.1.0");
/// let post = &api["paths"]["/orders"]["post"];
/// assert_eq!(post["parameters"][0]["name"], "Idempotency-Key");
/// assert_eq!(post["x-idempotency"]["ttl"], "1d");
/// assert!(post["responses"]["422"].is_object());
/// ```
#[must_use]
pub fn openapi(docs: &[OperationDoc]) -> Value {
    let mut paths = Map::new();
    let mut unrouted = Vec::new();
    for doc in docs {
        let (Some(method), Some(path)) = (&doc.method, &doc.path) else {
            unrouted.push(policy(doc));
            continue;
        };
        let item = paths
            .entry(path.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(item) = item {
            item.insert(method.to_ascii_lowercase(), operation(doc));
        }
    }
    let mut document = json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Idempotent operations",
            "version": "1",
            "description": introduction(docs),
        },
        "paths": paths,
        "components": components(docs),
    });
    if !unrouted.is_empty()
        && let Value::Object(map) = &mut document
    {
        map.insert(
            "x-idempotency-operations".to_owned(),
            Value::Array(unrouted),
        );
    }
    document
}

/// The document's description: how to make the operations safe to retry, and the two
/// headers of the responses.
fn introduction(docs: &[OperationDoc]) -> String {
    let retry = if docs.iter().all(|d| d.key_from.is_empty()) {
        format!("Operations safe to retry with an `{KEY_HEADER}` header.")
    } else {
        format!(
            "Operations safe to retry: {}; `x-idempotency.keyFrom` lists the parts of the \
             request an operation's key is taken from.",
            contract::send_keys(docs)
        )
    };
    format!(
        "{retry} {} {}",
        contract::retry_after_header(),
        contract::replayed_header()
    )
}

/// The parameters the key is read from: `Idempotency-Key`, or each header a key taken from
/// the request is made of (once each; body fields are not parameters).
fn key_parameters(doc: &OperationDoc) -> Vec<Value> {
    if doc.key_from.is_empty() {
        return vec![json!({
            "name": KEY_HEADER,
            "in": "header",
            "required": doc.key == idem_spec::KeyRequirement::Required,
            "description": contract::key_parameter(doc),
            "schema": {"type": "string", "pattern": key_pattern(doc.key_format)},
            "example": format!("\"{}\"", contract::EXAMPLE_KEY),
        })];
    }
    let single = doc.key_from.len() == 1;
    let mut parameters: Vec<Value> = Vec::new();
    for (part, example) in contract::example_values(doc) {
        let KeyPartDoc::Header(name) = part else {
            continue;
        };
        let seen = parameters.iter().any(|p| {
            p["name"]
                .as_str()
                .is_some_and(|n| n.eq_ignore_ascii_case(name))
        });
        if seen {
            continue;
        }
        // The value is the key's length or shorter (encoding only lengthens it); alone, it
        // cannot be empty either.
        let mut schema = json!({"type": "string", "maxLength": KEY_MAX_LEN});
        if single && let Value::Object(schema) = &mut schema {
            schema.insert("minLength".to_owned(), KEY_MIN_LEN.into());
        }
        parameters.push(json!({
            "name": name,
            "in": "header",
            "required": true,
            "description": contract::key_parameter(doc),
            "schema": schema,
            "example": example,
        }));
    }
    parameters
}

/// One routed operation: its parameters, its responses, its description and its policy.
pub(crate) fn operation(doc: &OperationDoc) -> Value {
    let mut operation = json!({
        "operationId": doc.id,
        "summary": format!("Idempotent operation `{}`", doc.id),
        "description": description(doc),
        "parameters": parameters(doc),
        "responses": responses(doc),
        "x-idempotency": policy(doc),
    });
    if let Value::Object(map) = &mut operation {
        if let Some(body) = &doc.request_body {
            map.insert("requestBody".to_owned(), request_body(body));
        }
        if !doc.handler.is_empty() {
            map.insert("x-handler".to_owned(), Value::String(doc.handler.clone()));
        }
    }
    operation
}

/// The operation's `requestBody`: its media type with its schema (`{}` unless its type
/// provides one).
fn request_body(body: &RequestBodyDoc) -> Value {
    json!({
        "required": body.required,
        "content": {
            body.media_type.clone(): {"schema": body.schema},
        },
    })
}

/// Every response [`contract::cases`] lists, grouped per status: the cases' descriptions,
/// their headers, and the problem types of the status's `application/problem+json` body.
fn responses(doc: &OperationDoc) -> Map<String, Value> {
    let mut responses = Map::new();
    let cases = contract::cases(doc);
    let mut problems: Vec<(&str, Vec<&str>)> = Vec::new();
    for case in &cases {
        let entry = responses.entry(case.status.clone()).or_insert_with(|| {
            json!({
                "description": "",
            })
        });
        let Value::Object(response) = entry else {
            continue;
        };
        // A problem's paragraph names its type: what it says (to retry, say) is for that
        // type, not for every response of the status.
        let line = match case.problem_type() {
            Some(problem) => format!("`{problem}`: {} {}", case.when, case.then),
            None => format!("{} {}", case.when, case.then),
        };
        let description = match response.get("description").and_then(Value::as_str) {
            Some("") | None => line,
            Some(before) => format!("{before}\n\n{line}"),
        };
        response.insert("description".to_owned(), Value::String(description));
        let headers = response
            .entry("headers")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(headers) = headers {
            if case.retry_after {
                headers.insert(
                    "Retry-After".to_owned(),
                    json!({"$ref": "#/components/headers/RetryAfter"}),
                );
            }
            if case.replayed {
                headers.insert(
                    REPLAYED_HEADER.to_owned(),
                    json!({"$ref": "#/components/headers/IdempotentReplayed"}),
                );
            }
        }
        if let Some(problem) = case.problem_type() {
            match problems.iter_mut().find(|(s, _)| *s == case.status) {
                Some((_, types)) if types.contains(&problem) => {}
                Some((_, types)) => types.push(problem),
                None => problems.push((&case.status, vec![problem])),
            }
        }
    }
    for (status, types) in problems {
        if let Some(Value::Object(response)) = responses.get_mut(status) {
            response.insert(
                "content".to_owned(),
                json!({
                    PROBLEM_MEDIA_TYPE: {
                        "schema": {"$ref": "#/components/schemas/Problem"},
                        "x-problem-types": types,
                    }
                }),
            );
        }
    }
    for response in responses.values_mut() {
        if let Value::Object(response) = response
            && response
                .get("headers")
                .and_then(Value::as_object)
                .is_some_and(Map::is_empty)
        {
            response.remove("headers");
        }
    }
    responses
}

/// The operation's parameters: the key's, a verified webhook's headers, and the path's
/// template segments.
fn parameters(doc: &OperationDoc) -> Vec<Value> {
    let mut parameters = key_parameters(doc);
    if doc.verified_webhook {
        webhook_parameters(&mut parameters);
    }
    for name in template_names(doc.path.as_deref().unwrap_or_default()) {
        parameters.push(json!({
            "name": name,
            "in": "path",
            "required": true,
            "schema": {"type": "string"},
        }));
    }
    parameters
}

/// The Standard Webhooks headers of a verified delivery ([`contract::WEBHOOK_HEADERS`]),
/// required, after the key's parameters; a header that already is one (`webhook-id`, the
/// key) is not listed twice.
fn webhook_parameters(parameters: &mut Vec<Value>) {
    for (name, description) in WEBHOOK_HEADERS {
        let seen = parameters.iter().any(|p| {
            p["in"] == "header"
                && p["name"]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case(name))
        });
        if !seen {
            parameters.push(json!({
                "name": name,
                "in": "header",
                "required": true,
                "description": description,
                "schema": {"type": "string"},
            }));
        }
    }
}

/// The operation's description: [`contract::summary`]; when the key is taken from the body
/// (which has no parameter to describe it), how it is made; and for a verified webhook, how
/// its deliveries are checked.
fn description(doc: &OperationDoc) -> String {
    let mut description = contract::summary(doc);
    if doc
        .key_from
        .iter()
        .any(|p| matches!(p, KeyPartDoc::Body(_)))
    {
        description = format!("{description}\n\n{}", contract::key_parameter(doc));
    }
    if doc.verified_webhook {
        description = format!("{description}\n\n{}", contract::webhook_verification());
    }
    description
}

/// The names of a path's template segments: `id` of `/orders/{id}`, each once.
fn template_names(path: &str) -> Vec<&str> {
    let mut names = Vec::new();
    for segment in path.split('/') {
        if let Some(name) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}'))
            && !name.is_empty()
            && !names.contains(&name)
        {
            names.push(name);
        }
    }
    names
}

/// The `x-idempotency` object: the policy, in the attribute's spellings, and the handler's
/// source when the document publishes it.
fn policy(doc: &OperationDoc) -> Value {
    let mut policy = json!({
        "id": doc.id,
        "mode": doc.mode.as_str(),
        "key": contract::key_word(doc),
        "scope": doc.scope.as_str(),
        "ttl": format_duration(doc.ttl),
        "ttlSeconds": doc.ttl.as_secs(),
        "onExpired": doc.on_expired.as_str(),
        "storeClientErrors": doc.store_client_errors,
        "fingerprintExclude": doc.fingerprint_exclude,
    });
    if let Value::Object(map) = &mut policy {
        if doc.mode == Mode::Staged {
            map.insert("lease".to_owned(), format_duration(doc.lease).into());
            map.insert("onInFlight".to_owned(), doc.on_in_flight.as_str().into());
        }
        if !doc.key_from.is_empty() {
            map.insert("keyFrom".to_owned(), json!(doc.key_from));
        }
        if !doc.mismatch_detail {
            map.insert("mismatchDetail".to_owned(), false.into());
        }
        if let Some(source) = doc.published_source() {
            map.insert("source".to_owned(), source.into());
        }
    }
    policy
}

/// The JSON Schema of a problem body (RFC 9457), as the documents' `components` have it under
/// `Problem`: what every `application/problem+json` response of idem, and of an application
/// that answers with the runtime's `Problem`, carries.
///
/// ```
/// let schema = idem_docs::problem_schema();
/// assert_eq!(schema["required"], serde_json::json!(["type", "title", "status"]));
/// ```
#[must_use]
pub fn problem_schema() -> Value {
    json!({
        "type": "object",
        "description": "RFC 9457 problem details.",
        "required": ["type", "title", "status"],
        "properties": {
            "type": {"type": "string", "format": "uri-reference", "description": "The problem's type: `urn:idem:problem:…` for idem's own."},
            "title": {"type": "string", "description": "A short, fixed summary of the type."},
            "status": {"type": "integer", "minimum": 100, "maximum": 599},
            "detail": {"type": "string", "description": "What happened to this request."},
            "mismatch": {
                "type": "object",
                "description": "`urn:idem:problem:key-reused` only: the fields of this request that differ from the request the key was first used with, as JSON pointers into the request (`/body/amount`, `/path/id`, `/query/page`), never their values; at most 16 names over the three lists. For a body the operation refused as invalid, only body fields (`/body/…`) are compared. Absent when the server kept no field digests for the key.",
                "required": ["changed", "added", "removed"],
                "properties": {
                    "changed": {"type": "array", "items": {"type": "string"}, "description": "Fields both requests have, with other values."},
                    "added": {"type": "array", "items": {"type": "string"}, "description": "Fields only this request has."},
                    "removed": {"type": "array", "items": {"type": "string"}, "description": "Fields only the first request had."},
                    "omitted": {"type": "integer", "minimum": 1, "description": "How many names were left out past the 16."},
                },
            },
        },
    })
}

/// The document's `components`: the `Problem` schema, the schemas the routed operations'
/// bodies refer to ([`RequestBodyDoc::components`]; the first of a name is kept), and the
/// headers.
pub(crate) fn components(docs: &[OperationDoc]) -> Value {
    let mut schemas = Map::new();
    schemas.insert("Problem".to_owned(), problem_schema());
    let bodies = docs
        .iter()
        .filter(|doc| doc.route().is_some())
        .filter_map(|doc| doc.request_body.as_ref());
    for body in bodies {
        for (name, schema) in &body.components {
            schemas
                .entry(name.clone())
                .or_insert_with(|| schema.clone());
        }
    }
    json!({
        "schemas": schemas,
        "headers": {
            "RetryAfter": {
                "description": contract::retry_after_header(),
                "schema": {"type": "integer", "minimum": 1},
            },
            "IdempotentReplayed": {
                "description": contract::replayed_header(),
                "schema": {"type": "string", "enum": ["true"]},
            },
        },
    })
}
