//! The OpenAPI document's `requestBody`: the body the attribute knows of, its media type and,
//! when its type provides one, its schema, whose component schemas are in the document.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use idem_docs::{OperationDoc, RequestBodyDoc, openapi};
use idem_spec::OperationSpec;
use serde_json::{Value, json};

fn create_order() -> OperationDoc {
    OperationDoc::from_spec(&OperationSpec::new("create_order:v1")).path("POST", "/orders")
}

/// A body whose schema refers to a component, which refers to another.
fn with_schema() -> RequestBodyDoc {
    let components = BTreeMap::from([
        (
            "NewOrder".to_owned(),
            json!({"type": "object", "properties": {"line": {"$ref": "#/components/schemas/Line"}}}),
        ),
        (
            "Line".to_owned(),
            json!({"type": "object", "properties": {"sku": {"type": "string"}}}),
        ),
    ]);
    RequestBodyDoc::new("application/json")
        .schema(json!({"$ref": "#/components/schemas/NewOrder"}), components)
}

/// Every `$ref` of `value`.
fn refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(target)) = map.get("$ref") {
                out.push(target.clone());
            }
            map.values().for_each(|v| refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

/// Every `$ref` of the document points into it.
fn assert_no_dangling_ref(api: &Value) {
    let mut targets = Vec::new();
    refs(api, &mut targets);
    for target in targets {
        let pointer = target.strip_prefix('#').unwrap();
        assert!(api.pointer(pointer).is_some(), "dangling {target}");
    }
}

#[test]
fn without_a_known_body_there_is_no_request_body() {
    let api = openapi(&[create_order()]);
    assert!(api["paths"]["/orders"]["post"].get("requestBody").is_none());
}

#[test]
fn a_json_body_is_documented_with_its_media_type_and_any_schema() {
    let api = openapi(&[create_order().request_body(RequestBodyDoc::new("application/json"))]);
    assert_eq!(
        api["paths"]["/orders"]["post"]["requestBody"],
        json!({"required": true, "content": {"application/json": {"schema": {}}}})
    );
    let optional = openapi(&[create_order()
        .request_body(RequestBodyDoc::new("application/x-www-form-urlencoded").optional())]);
    let body = &optional["paths"]["/orders"]["post"]["requestBody"];
    assert_eq!(body["required"], false);
    assert!(body["content"]["application/x-www-form-urlencoded"].is_object());
}

#[test]
fn a_schema_brings_its_components_into_the_document() {
    let api = openapi(&[create_order().request_body(with_schema())]);
    assert_eq!(
        api["paths"]["/orders"]["post"]["requestBody"]["content"]["application/json"]["schema"],
        json!({"$ref": "#/components/schemas/NewOrder"})
    );
    let schemas = &api["components"]["schemas"];
    assert!(schemas["NewOrder"].is_object() && schemas["Line"].is_object());
    assert!(schemas["Problem"].is_object());
    assert_no_dangling_ref(&api);
    // An operation without a route brings nothing: it has no `requestBody` to refer to them.
    let unrouted =
        OperationDoc::from_spec(&OperationSpec::new("nightly:v1")).request_body(with_schema());
    let api = openapi(&[unrouted]);
    assert!(api["components"]["schemas"].get("NewOrder").is_none());
}

#[test]
fn the_body_serialises_only_when_known() {
    let plain = create_order();
    assert!(
        serde_json::to_value(&plain)
            .unwrap()
            .get("request_body")
            .is_none()
    );
    let doc = create_order().request_body(with_schema());
    let json = serde_json::to_value(&doc).unwrap();
    assert_eq!(json["request_body"]["media_type"], "application/json");
    assert!(json["request_body"].get("required").is_none());
    assert_eq!(serde_json::from_value::<OperationDoc>(json).unwrap(), doc);
}

/// Merged into an application's document: an operation without a body of its own gains
/// idem's, with its components; one with its own keeps it.
#[cfg(feature = "utoipa")]
#[test]
fn merged_the_applications_body_is_kept() {
    use idem_docs::merge_into;
    use utoipa::openapi::OpenApi;

    let mut api: OpenApi = serde_json::from_value(json!({
        "openapi": "3.1.0",
        "info": {"title": "Shop", "version": "1"},
        "paths": {
            "/orders": {"post": {"responses": {"201": {"description": "The order"}}}},
            "/refunds": {"post": {
                "requestBody": {"content": {"application/json": {"schema": {"type": "object"}}}},
                "responses": {"201": {"description": "The refund"}},
            }},
        },
    }))
    .unwrap();
    let refund = OperationDoc::from_spec(&OperationSpec::new("refund:v1"))
        .path("POST", "/refunds")
        .request_body(with_schema());
    merge_into(
        &mut api,
        &[create_order().request_body(with_schema()), refund],
    )
    .unwrap();
    let merged = serde_json::to_value(&api).unwrap();
    assert_eq!(
        merged["paths"]["/orders"]["post"]["requestBody"]["content"]["application/json"]["schema"],
        json!({"$ref": "#/components/schemas/NewOrder"})
    );
    assert_eq!(
        merged["paths"]["/refunds"]["post"]["requestBody"]["content"]["application/json"]["schema"],
        json!({"type": "object"})
    );
    assert!(merged["components"]["schemas"]["Line"].is_object());
    assert_no_dangling_ref(&merged);
}
