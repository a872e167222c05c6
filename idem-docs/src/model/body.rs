//! [`RequestBodyDoc`]: the request's body, as the OpenAPI document's `requestBody` says it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The body an operation reads: its media type and, when its type provides one, its JSON
/// Schema, with the component schemas that schema refers to. The attribute records it from
/// the handler's body extractor (`application/json` for `JsonBody`, `Checked`, axum's
/// `Json`, …; the schema of a `utoipa::ToSchema` type with the runtime's `utoipa` feature),
/// so that the OpenAPI document has a `requestBody` without the application describing it.
///
/// Serialised as `{"media_type": "application/json", "schema": {…}}`, with `"required":
/// false` for an optional body and `"components"` when the schema refers to some.
///
/// ```
/// use idem_docs::{OperationDoc, RequestBodyDoc, openapi};
/// use idem_spec::OperationSpec;
///
/// let doc = OperationDoc::from_spec(&OperationSpec::new("create_order:v1"))
///     .path("POST", "/orders")
///     .request_body(RequestBodyDoc::new("application/json"));
/// let api = openapi(&[doc]);
/// let body = &api["paths"]["/orders"]["post"]["requestBody"];
/// assert_eq!(body["required"], true);
/// assert_eq!(body["content"]["application/json"]["schema"], serde_json::json!({}));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RequestBodyDoc {
    /// The body's media type (`application/json`).
    pub media_type: String,
    /// A request must have it (the extractor is not optional). Serialised only when off.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub required: bool,
    /// The body's JSON Schema: `{}` (any) unless its type provides one.
    #[serde(default = "any")]
    pub schema: Value,
    /// The schemas [`RequestBodyDoc::schema`] refers to (`#/components/schemas/<name>`), by
    /// name: the OpenAPI document's `components.schemas` gains them. Serialised only when
    /// there are some.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub components: BTreeMap<String, Value>,
}

impl RequestBodyDoc {
    /// A required body of `media_type`, of any content (the schema `{}`).
    #[must_use]
    pub fn new(media_type: &str) -> Self {
        Self {
            media_type: media_type.to_owned(),
            required: true,
            schema: any(),
            components: BTreeMap::new(),
        }
    }

    /// The same, optional: a request may have no body.
    #[must_use]
    pub fn optional(mut self) -> Self {
        self.required = false;
        self
    }

    /// The same, with the body's JSON Schema and the component schemas it refers to, by
    /// name.
    #[must_use]
    pub fn schema(mut self, schema: Value, components: BTreeMap<String, Value>) -> Self {
        self.schema = schema;
        self.components = components;
        self
    }
}

/// The schema of any value: `{}`.
fn any() -> Value {
    Value::Object(Map::new())
}

fn yes() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_true(value: &bool) -> bool {
    *value
}
