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
/// request is made of) and the path's template parameters it does not list, the responses idem can answer for statuses the application did not document
/// (a response the application documented is kept as it is; the generic `2XX` is not added
/// when it documents a 2xx), and the `x-idempotency` extension. `components` gains the
/// `Problem` schema and the `RetryAfter` and `IdempotentReplayed` headers, unless it has
/// components of those names. Operations without a route are not merged.
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
        let Value::Object(generated) = operation(doc) else {
            continue;
        };
        let item = object(object(root, "paths"), path);
        let method = method.to_ascii_lowercase();
        let Some(Value::Object(existing)) = item.get_mut(&method) else {
            item.insert(method, Value::Object(generated));
            continue;
        };
        merge_operation(existing, generated);
    }
    if merged_any && let Value::Object(generated) = components() {
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
        let has_success = target.keys().any(|status| status.starts_with('2'));
        for (status, response) in responses {
            if status == "2XX" && has_success {
                continue;
            }
            target.entry(status).or_insert(response);
        }
    }
    for key in [
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

#[cfg(test)]
mod tests {
    use idem_spec::OperationSpec;
    use serde_json::json;
    use utoipa::openapi::OpenApi;

    use super::merge_into;
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
        assert_eq!(
            post["responses"]["201"],
            json!({"description": "The order"})
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
        assert_eq!(post["parameters"][0]["schema"]["maxLength"], 255);
        assert_eq!(
            post["x-idempotency"]["keyFrom"],
            json!([{"header": "webhook-id"}])
        );
        // Still an `OpenApi`.
        let again: OpenApi = serde_json::from_value(merged.clone()).unwrap();
        assert_eq!(serde_json::to_value(&again).unwrap(), merged);
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
