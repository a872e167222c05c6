//! Snapshots of both documents for a few specs, and the properties they must keep.

use std::time::Duration;

use idem_docs::{KeyPartDoc, OperationDoc, contract, markdown, openapi};
use idem_spec::{
    ExpiryPolicy, InFlightPolicy, KeyPart, KeyRequirement, KeySource, Mode, OperationSpec,
    ScopeKind,
};
use serde_json::json;

fn atomic_required_gone() -> OperationDoc {
    let spec = OperationSpec::new("create_order:v1")
        .scope(ScopeKind::Tenant)
        .ttl(Duration::from_secs(24 * 3600));
    OperationDoc::from_spec(&spec)
        .path("POST", "/orders")
        .handler("create_order")
        .source("src/orders.rs:212")
        .responds(201, "The order, created")
}

fn atomic_optional_reexecute() -> OperationDoc {
    let spec = OperationSpec::new("send_receipt:v2")
        .ttl(Duration::from_secs(3600))
        .key(KeyRequirement::Optional)
        .on_expired(ExpiryPolicy::Reexecute)
        .store_client_errors(true)
        .fingerprint_exclude(&["body.note"]);
    OperationDoc::from_spec(&spec).path("PUT", "/receipts/{id}")
}

fn staged_wait() -> OperationDoc {
    let spec = OperationSpec::new("pay:v1")
        .scope(ScopeKind::User)
        .mode(Mode::Staged)
        .lease(Duration::from_secs(10))
        .on_in_flight(InFlightPolicy::Wait);
    OperationDoc::from_spec(&spec).path("POST", "/payments")
}

/// A Standard Webhooks receiver: the key is the `webhook-id` header.
fn header_sourced() -> OperationDoc {
    let spec = OperationSpec::new("standard_webhook:v1")
        .ttl(Duration::from_secs(7 * 24 * 3600))
        .key_from(KeySource::Parts(&[KeyPart::Header("webhook-id")]));
    OperationDoc::from_spec(&spec)
        .path("POST", "/webhooks/standard")
        .responds(204, "The event, handled")
}

/// A Stripe receiver: the key is the event's `id` in the body.
fn body_sourced() -> OperationDoc {
    let spec = OperationSpec::new("stripe_event:v1")
        .scope(ScopeKind::Tenant)
        .on_expired(ExpiryPolicy::Reexecute)
        .key_from(KeySource::Parts(&[KeyPart::Body("/id")]));
    OperationDoc::from_spec(&spec).path("POST", "/webhooks/stripe")
}

/// An Adyen receiver: the key is two fields of the body, joined with `:`.
fn multi_part() -> OperationDoc {
    let spec = OperationSpec::new("adyen_notification:v1")
        .mode(Mode::Staged)
        .key_from(KeySource::Parts(&[
            KeyPart::Body("/pspReference"),
            KeyPart::Body("/eventCode"),
        ]));
    OperationDoc::from_spec(&spec).path("POST", "/webhooks/adyen")
}

/// A header and a nested field of the body, under a path template.
fn mixed_parts() -> OperationDoc {
    let spec = OperationSpec::new("partner_event:v1").key_from(KeySource::Parts(&[
        KeyPart::Header("x-partner"),
        KeyPart::Body("/data/items/0/id"),
    ]));
    OperationDoc::from_spec(&spec).path("POST", "/partners/{partner}/events")
}

fn sourced() -> Vec<OperationDoc> {
    vec![
        header_sourced(),
        body_sourced(),
        multi_part(),
        mixed_parts(),
    ]
}

fn all() -> Vec<OperationDoc> {
    vec![
        atomic_required_gone(),
        atomic_optional_reexecute(),
        staged_wait(),
    ]
}

#[test]
fn markdown_snapshot() {
    insta::assert_snapshot!(markdown(&all()));
}

#[test]
fn openapi_snapshot() {
    insta::with_settings!({ sort_maps => true }, {
        insta::assert_json_snapshot!(openapi(&all()));
    });
}

#[test]
fn markdown_sourced_snapshot() {
    insta::assert_snapshot!(markdown(&sourced()));
}

#[test]
fn openapi_sourced_snapshot() {
    insta::with_settings!({ sort_maps => true }, {
        insta::assert_json_snapshot!(openapi(&sourced()));
    });
}

#[test]
fn statuses_follow_the_spec() {
    let statuses = |doc: &OperationDoc| contract::statuses(doc);
    let gone = statuses(&atomic_required_gone());
    assert_eq!(
        gone,
        [
            "201", "400", "401", "403", "409", "410", "413", "415", "422", "500", "503"
        ]
    );
    let reexecute = statuses(&atomic_optional_reexecute());
    assert!(!reexecute.contains(&"410".to_owned()), "{reexecute:?}");
    assert!(
        !reexecute.contains(&"401".to_owned()),
        "global scope: {reexecute:?}"
    );
    assert!(reexecute.contains(&"2XX".to_owned()), "{reexecute:?}");
    let missing = |doc: &OperationDoc| {
        contract::cases(doc)
            .iter()
            .any(|c| c.problem == Some("urn:idem:problem:missing-key"))
    };
    assert!(missing(&atomic_required_gone()));
    assert!(!missing(&atomic_optional_reexecute()));
    let interrupted = |doc: &OperationDoc| {
        contract::cases(doc)
            .iter()
            .any(|c| c.problem == Some("urn:idem:problem:interrupted") && c.retry_after)
    };
    assert!(interrupted(&staged_wait()));
    assert!(!interrupted(&atomic_required_gone()));
}

#[test]
fn in_flight_wording_follows_on_in_flight() {
    let wording = |policy| {
        let spec = OperationSpec::new("pay:v1")
            .mode(Mode::Staged)
            .on_in_flight(policy);
        contract::cases(&OperationDoc::from_spec(&spec))
            .into_iter()
            .find(|c| c.status == "409")
            .map(|c| c.when)
    };
    assert_ne!(
        wording(InFlightPolicy::Wait),
        wording(InFlightPolicy::Reject)
    );
}

#[test]
fn changing_an_argument_changes_the_documents() {
    let base = OperationSpec::new("x:v1");
    let variants = [
        base.ttl(Duration::from_secs(3600)),
        base.on_expired(ExpiryPolicy::Reexecute),
        base.key(KeyRequirement::Optional),
        base.scope(ScopeKind::Tenant),
        base.mode(Mode::Staged),
        base.store_client_errors(true),
        base.mismatch_detail(false),
        base.key_from(KeySource::Parts(&[KeyPart::Header("webhook-id")])),
        base.key_from(KeySource::Parts(&[KeyPart::Body("/id")])),
        base.key_from(KeySource::Parts(&[
            KeyPart::Body("/id"),
            KeyPart::Body("/type"),
        ])),
    ];
    let doc = |spec: &OperationSpec| [OperationDoc::from_spec(spec).path("POST", "/x")];
    for variant in &variants {
        assert_ne!(
            markdown(&doc(&base)),
            markdown(&doc(variant)),
            "{variant:?}"
        );
        assert_ne!(openapi(&doc(&base)), openapi(&doc(variant)), "{variant:?}");
    }
}

#[test]
fn every_problem_response_uses_the_problem_schema() {
    let api = openapi(&all());
    let Some(paths) = api["paths"].as_object() else {
        panic!("no paths");
    };
    for item in paths.values() {
        for (_, operation) in item.as_object().into_iter().flatten() {
            for (status, response) in operation["responses"].as_object().into_iter().flatten() {
                if let Some(content) = response.get("content") {
                    assert_eq!(
                        content[contract::PROBLEM_MEDIA_TYPE]["schema"]["$ref"],
                        "#/components/schemas/Problem",
                        "{status}"
                    );
                }
                assert!(
                    response["description"]
                        .as_str()
                        .is_some_and(|d| !d.is_empty())
                );
            }
        }
    }
}

#[test]
fn documents_round_trip_as_json() {
    for doc in all().into_iter().chain(sourced()) {
        let json = serde_json::to_string(&doc).unwrap();
        let back: OperationDoc = serde_json::from_str(&json).unwrap();
        assert_eq!(back, doc);
    }
}

#[test]
fn key_from_is_serialised_only_when_the_key_is_taken_from_the_request() {
    let default = serde_json::to_value(atomic_required_gone()).unwrap();
    assert!(default.get("key_from").is_none(), "{default}");

    let mixed = serde_json::to_value(mixed_parts()).unwrap();
    assert_eq!(
        mixed["key_from"],
        json!([{"header": "x-partner"}, {"body": "/data/items/0/id"}])
    );
    assert_eq!(mixed["key"], "required");
}

/// `mismatch_detail = false`: the `422` says it names no field, the policy says so, and the
/// document stores it only when off (documents written before it read back on).
#[test]
fn mismatch_detail_off_is_documented() {
    let spec = OperationSpec::new("x:v1").mismatch_detail(false);
    let doc = OperationDoc::from_spec(&spec).path("POST", "/x");
    let text = markdown(std::slice::from_ref(&doc));
    assert!(text.contains("does not say which fields differ"), "{text}");
    assert!(!text.contains("`mismatch` member"), "{text}");
    let api = openapi(std::slice::from_ref(&doc));
    assert_eq!(
        api["paths"]["/x"]["post"]["x-idempotency"]["mismatchDetail"],
        false
    );
    let stored = serde_json::to_value(&doc).unwrap();
    assert_eq!(stored["mismatch_detail"], false);
    let on = serde_json::to_value(atomic_required_gone()).unwrap();
    assert!(on.get("mismatch_detail").is_none(), "{on}");
}

/// A server that seals what it stores: both documents list the `500` of a value that fails
/// its check, beside the other `500`s; every server's list the `500` of a stored answer
/// edited outside idem, and the `503` of a storage key it
/// lacks, with `Retry-After` (one without keys answers it for a key another instance
/// sealed). The document stores the setting only when set.
#[test]
fn sealed_at_rest_lists_the_storage_answers() {
    let clear = atomic_required_gone();
    let sealed = atomic_required_gone().sealed_at_rest(true);
    let types = |doc: &OperationDoc, status: &str| {
        let api = openapi(std::slice::from_ref(doc));
        let response = api["paths"]["/orders"]["post"]["responses"][status].clone();
        (
            response["content"]["application/problem+json"]["x-problem-types"].clone(),
            response["headers"].get("Retry-After").is_some(),
        )
    };
    let unavailable = (
        json!([
            "urn:idem:problem:store-unavailable",
            "urn:idem:problem:store-busy",
            "urn:idem:problem:outcome-unknown",
            "urn:idem:problem:storage-key-unknown",
        ]),
        true,
    );
    assert_eq!(types(&sealed, "503"), unavailable);
    assert_eq!(types(&clear, "503"), unavailable);
    assert_eq!(
        types(&sealed, "500").0,
        json!([
            "urn:idem:problem:handler-failed",
            "urn:idem:problem:sealed-unreadable",
            "urn:idem:problem:stored-unreadable",
        ])
    );
    assert_eq!(
        types(&clear, "500").0,
        json!([
            "urn:idem:problem:handler-failed",
            "urn:idem:problem:stored-unreadable",
        ])
    );
    let text = markdown(std::slice::from_ref(&sealed));
    assert!(
        text.contains("| 500 `urn:idem:problem:sealed-unreadable` |"),
        "{text}"
    );
    assert!(!markdown(std::slice::from_ref(&clear)).contains("sealed-unreadable"));
    assert_eq!(
        serde_json::to_value(&sealed).unwrap()["sealed_at_rest"],
        true
    );
    assert!(
        serde_json::to_value(&clear)
            .unwrap()
            .get("sealed_at_rest")
            .is_none()
    );
}

/// A document stored before `key_from` existed reads back as the `Idempotency-Key` header's.
#[test]
fn documents_stored_without_key_from_read_back() {
    let stored = r#"{"id":"create_order:v1","name":"create_order","version":1,"ttl":"1d",
        "scope":"tenant","on_expired":"gone","key":"required","mode":"atomic","lease":"30s",
        "on_in_flight":"reject","store_client_errors":false,"fingerprint_exclude":[],
        "method":"POST","path":"/orders","handler":"","source":null,"responses":[]}"#;
    let doc: OperationDoc = serde_json::from_str(stored).unwrap();
    assert!(doc.key_from.is_empty());
    let spec = OperationSpec::new("create_order:v1").scope(ScopeKind::Tenant);
    assert_eq!(doc, OperationDoc::from_spec(&spec).path("POST", "/orders"));
    assert_eq!(
        markdown(std::slice::from_ref(&doc)),
        markdown(&[OperationDoc::from_spec(&spec).path("POST", "/orders")])
    );
}

#[test]
fn stored_key_parts_are_checked_when_read() {
    let mut json = serde_json::to_value(header_sourced()).unwrap();
    for (bad, why) in [
        (json!([{"header": "Webhook-Id"}]), "upper case"),
        (json!([{"header": "a b"}]), "not a token"),
        (json!([{"body": "id"}]), "not a pointer"),
        (json!([{"body": "/a~2"}]), "bad escape"),
        (json!([{"query": "id"}]), "unknown part"),
        (json!([{"header": "a", "body": "/b"}]), "two in one"),
        (json!(["webhook-id"]), "not an object"),
    ] {
        json["key_from"] = bad;
        assert!(
            serde_json::from_value::<OperationDoc>(json.clone()).is_err(),
            "{why}"
        );
    }
    json["key_from"] = json!([]);
    let doc: OperationDoc = serde_json::from_value(json).unwrap();
    assert!(doc.key_from.is_empty());
}

#[test]
fn from_spec_keeps_the_parts_and_requires_the_key() {
    // `key(Optional)` after `key_from` does not make a key taken from the request optional.
    let spec = OperationSpec::new("hook:v1")
        .key_from(KeySource::Parts(&[
            KeyPart::Header("webhook-id"),
            KeyPart::Body("/id"),
        ]))
        .key(KeyRequirement::Optional);
    let doc = OperationDoc::from_spec(&spec);
    assert_eq!(
        doc.key_from,
        [
            KeyPartDoc::Header("webhook-id".to_owned()),
            KeyPartDoc::Body("/id".to_owned())
        ]
    );
    assert_eq!(doc.key, KeyRequirement::Required);
    assert_eq!(
        doc.key_from
            .iter()
            .map(KeyPartDoc::spelling)
            .collect::<Vec<_>>(),
        [r#"header("webhook-id")"#, r#"body("/id")"#]
    );
}

/// The documents name a key's source as the spec does (`KeySource`'s `Display`).
#[test]
fn sources_are_worded_as_the_spec_words_them() {
    let sources = [
        KeySource::IdempotencyKey,
        KeySource::Parts(&[KeyPart::Header("webhook-id")]),
        KeySource::Parts(&[KeyPart::Body("/id")]),
        KeySource::Parts(&[
            KeyPart::Body("/a"),
            KeyPart::Header("x-b"),
            KeyPart::Body("/c"),
        ]),
    ];
    for source in sources {
        let doc = OperationDoc::from_spec(&OperationSpec::new("x:v1").key_from(source));
        assert_eq!(contract::key_source(&doc), source.to_string());
    }
}

#[test]
fn key_errors_name_the_source() {
    let problem = |doc: &OperationDoc, problem: &str| {
        contract::cases(doc)
            .into_iter()
            .find(|c| c.problem == Some(problem))
            .map(|c| format!("{} {}", c.when, c.then))
            .unwrap_or_default()
    };
    let missing = "urn:idem:problem:missing-key";
    let invalid = "urn:idem:problem:invalid-key";
    for doc in sourced() {
        for kind in [missing, invalid] {
            let text = problem(&doc, kind);
            assert!(!text.is_empty(), "{kind} of {}", doc.id);
            assert!(!text.contains("Idempotency-Key"), "{text}");
        }
    }
    assert_eq!(
        problem(&header_sourced(), missing),
        "The `webhook-id` header is missing. Add it and send the request again; nothing ran."
    );
    assert_eq!(
        problem(&body_sourced(), invalid),
        "The body's `/id` cannot be a key: the body is not JSON, the field is an object, an \
         array or `null`, or it is empty or longer than 8192 characters once percent-encoded. \
         Fix the request; nothing ran."
    );
    assert_eq!(
        problem(&multi_part(), missing),
        "A part of the key is missing: the body's `/pspReference` or the body's `/eventCode`. \
         Add it and send the request again; nothing ran."
    );
    assert!(
        contract::summary(&header_sourced())
            .starts_with("Safe to retry with the same key, taken from the `webhook-id` header")
    );
}

#[test]
fn key_format_follows_the_parts() {
    let header = contract::key_format(&header_sourced());
    assert!(header.contains("taken verbatim"), "{header}");
    assert!(!header.contains("body"), "{header}");
    assert!(!header.contains("joined"), "{header}");
    let body = contract::key_format(&body_sourced());
    assert!(
        body.contains("a number or a boolean as its JSON text"),
        "{body}"
    );
    assert!(!body.contains("header's value"), "{body}");
    let several = contract::key_format(&mixed_parts());
    assert!(several.contains("`:` is `%3A`"), "{several}");
    assert!(
        several.contains("once encoded and joined, is 1 to 8192"),
        "{several}"
    );
    assert!(
        several.contains("A header's value is taken verbatim"),
        "{several}"
    );
    assert_eq!(
        contract::key_format(&atomic_required_gone()),
        contract::key_syntax(idem_spec::KeyFormat::Lenient)
    );
}

#[test]
fn markdown_examples_carry_the_key_where_it_is_taken_from() {
    let text = markdown(&[header_sourced()]);
    assert!(text.contains("### The key\n"), "{text}");
    assert!(
        text.contains(&format!("\nwebhook-id: {}\n", contract::EXAMPLE_KEY)),
        "{text}"
    );
    assert!(!text.contains("Idempotency-Key: "), "{text}");
    assert!(
        text.contains("| required, from the `webhook-id` header |"),
        "{text}"
    );

    let text = markdown(&[body_sourced()]);
    assert!(
        text.contains(&format!(
            "\n{{ \"id\": \"{}\", … }}\n",
            contract::EXAMPLE_KEY
        )),
        "{text}"
    );
    assert!(!text.contains("Idempotency-Key: "), "{text}");

    let text = markdown(&[multi_part()]);
    assert!(
        text.contains(&format!(
            "{{ \"pspReference\": \"{}\", \"eventCode\": \"example-2\", … }}",
            contract::EXAMPLE_KEY
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("Its key is `{}:example-2`", contract::EXAMPLE_KEY)),
        "{text}"
    );

    let text = markdown(&[mixed_parts()]);
    assert!(
        text.contains(r#"{ "data": { "items": [ { "id": "example-2" } ] }, … }"#),
        "{text}"
    );
    assert!(
        text.contains(&format!("\nx-partner: {}\n", contract::EXAMPLE_KEY)),
        "{text}"
    );
}

#[test]
fn openapi_parameters_are_the_headers_the_key_is_taken_from() {
    let api = openapi(&sourced());
    let parameters = |path: &str| api["paths"][path]["post"]["parameters"].clone();

    let standard = parameters("/webhooks/standard");
    assert_eq!(standard.as_array().map(Vec::len), Some(1));
    assert_eq!(standard[0]["name"], "webhook-id");
    assert_eq!(standard[0]["in"], "header");
    assert_eq!(standard[0]["required"], true);
    assert_eq!(
        standard[0]["schema"],
        json!({"type": "string", "minLength": 1, "maxLength": 8192})
    );
    assert_eq!(
        standard[0]["description"],
        contract::key_parameter(&header_sourced())
    );

    // Body fields add no parameter: the description and `x-idempotency` say where the key is.
    assert_eq!(parameters("/webhooks/stripe"), json!([]));
    let stripe = &api["paths"]["/webhooks/stripe"]["post"];
    assert_eq!(stripe["x-idempotency"]["keyFrom"], json!([{"body": "/id"}]));
    assert_eq!(stripe["x-idempotency"]["key"], "required");
    assert!(
        stripe["description"]
            .as_str()
            .is_some_and(|d| d.contains(&contract::key_format(&body_sourced()))),
        "{stripe}"
    );

    // A header among several parts: required, no minimum length (the other parts fill the key).
    let mixed = parameters("/partners/{partner}/events");
    assert_eq!(mixed[0]["name"], "x-partner");
    assert_eq!(
        mixed[0]["schema"],
        json!({"type": "string", "maxLength": 8192})
    );
    assert_eq!(mixed[1]["name"], "partner");
    assert_eq!(mixed[1]["in"], "path");

    // No operation whose key comes from the request documents `Idempotency-Key`.
    let text = api["paths"].to_string();
    assert!(!text.contains("\"name\":\"Idempotency-Key\""), "{text}");
    assert!(
        api["info"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("keyFrom")),
        "{}",
        api["info"]
    );
}

#[test]
fn a_header_named_twice_is_one_parameter() {
    let spec = OperationSpec::new("x:v1").key_from(KeySource::Parts(&[
        KeyPart::Header("x-a"),
        KeyPart::Body("/b"),
        KeyPart::Header("x-a"),
    ]));
    let api = openapi(&[OperationDoc::from_spec(&spec).path("POST", "/x")]);
    assert_eq!(
        api["paths"]["/x"]["post"]["parameters"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[test]
fn operations_without_a_route_keep_their_key_source() {
    let doc = OperationDoc::from_spec(
        &OperationSpec::new("nightly:v1").key_from(KeySource::Parts(&[KeyPart::Body("/run")])),
    );
    let api = openapi(&[doc]);
    assert_eq!(
        api["x-idempotency-operations"][0]["keyFrom"],
        json!([{"body": "/run"}])
    );
}

/// Default operations and operations with a key from the request in one document.
#[test]
fn mixed_documents_say_both() {
    let mut docs = all();
    docs.push(header_sourced());
    let text = markdown(&docs);
    assert!(
        text.contains(
            "These operations are safe to retry: send an `Idempotency-Key` header, or the key \
             where the operation takes it from (a header or a field of the body)"
        ),
        "{text}"
    );
    assert!(text.contains("### The `Idempotency-Key` header"), "{text}");
    assert!(text.contains("### The key\n"), "{text}");
    let api = openapi(&docs);
    assert_eq!(
        api["paths"]["/orders"]["post"]["parameters"][0]["name"],
        "Idempotency-Key"
    );
    assert_eq!(
        api["paths"]["/webhooks/standard"]["post"]["parameters"][0]["name"],
        "webhook-id"
    );
}

#[test]
fn operations_without_a_route_are_still_documented() {
    let doc = OperationDoc::from_spec(&OperationSpec::new("nightly:v1"));
    let text = markdown(std::slice::from_ref(&doc));
    assert!(text.contains("## nightly"), "{text}");
    let api = openapi(&[doc]);
    assert_eq!(api["paths"], serde_json::json!({}));
    assert_eq!(api["x-idempotency-operations"][0]["id"], "nightly:v1");
}

#[test]
fn the_key_pattern_matches_the_runtime_limits() {
    // A small check of the pattern's shape; the runtime's parser is tested in idem-runtime.
    assert!(contract::KEY_PATTERN.contains("{1,8192}"));
    assert!(contract::LENIENT_KEY_PATTERN.contains("|[!#-\\[\\]-~]{1,8192})$"));
    assert_eq!(contract::KEY_MAX_LEN, 8192);
    assert_eq!(contract::KEY_STORED_MAX_LEN, 255);
}

#[test]
fn empty_lists_give_valid_documents() {
    assert!(markdown(&[]).contains("No operation is documented."));
    assert_eq!(openapi(&[])["openapi"], "3.1.0");
}

/// A source location in a document: `file.rs:line`.
fn has_location(text: &str) -> bool {
    text.match_indices(".rs:")
        .any(|(at, _)| text[at + 4..].starts_with(|c: char| c.is_ascii_digit()))
}

/// The handler's `file:line` is the server's: the documents name it only when asked.
#[test]
fn documents_name_no_source_unless_asked() {
    let unrouted =
        OperationDoc::from_spec(&OperationSpec::new("nightly:v1")).source("src/jobs.rs:9");
    let mut docs = all();
    docs.push(unrouted);
    assert!(docs.iter().filter(|d| d.source.is_some()).count() == 2);
    let text = markdown(&docs);
    assert!(!has_location(&text), "{text}");
    let api = openapi(&docs);
    assert!(!has_location(&api.to_string()), "{api}");
    assert!(
        api["paths"]["/orders"]["post"]["x-idempotency"]
            .get("source")
            .is_none()
    );
    assert!(api["x-idempotency-operations"][0].get("source").is_none());

    let published: Vec<OperationDoc> = docs.into_iter().map(|d| d.publish_source(true)).collect();
    let text = markdown(&published);
    assert!(
        text.contains("Operation `create_order:v1`, handler `create_order`, `src/orders.rs:212`."),
        "{text}"
    );
    assert!(text.contains("`src/jobs.rs:9`"), "{text}");
    let api = openapi(&published);
    assert_eq!(
        api["paths"]["/orders"]["post"]["x-idempotency"]["source"],
        "src/orders.rs:212"
    );
    assert_eq!(
        api["x-idempotency-operations"][0]["source"],
        "src/jobs.rs:9"
    );
    // An operation without a source has none to publish.
    assert!(
        api["paths"]["/payments"]["post"]["x-idempotency"]
            .get("source")
            .is_none()
    );
}

/// The choice travels with a stored document (`Idem::register_docs`, `idem docs`), and is
/// left out when off, so that documents stored before it read back unchanged.
#[test]
fn publish_source_is_stored_only_when_set() {
    let doc = atomic_required_gone();
    let json = serde_json::to_value(&doc).unwrap();
    assert!(json.get("publish_source").is_none(), "{json}");
    assert_eq!(json["source"], "src/orders.rs:212");
    let published = doc.publish_source(true);
    let json = serde_json::to_value(&published).unwrap();
    assert_eq!(json["publish_source"], true);
    let back: OperationDoc = serde_json::from_value(json).unwrap();
    assert_eq!(back, published);
    assert!(markdown(&[back]).contains("`src/orders.rs:212`"));
}

/// Staged mode records each call to another system as a step: a recorded step is not run
/// again, an interrupted one is, with the same provider key. The documents say that, and
/// promise nothing more.
#[test]
fn staged_documents_promise_no_more_than_staged_mode_does() {
    let staged = [staged_wait(), multi_part()];
    let text = markdown(&staged);
    let api = openapi(&staged).to_string();
    for promise in [
        "never repeated",
        "never made again",
        "calls made are not made again",
        "never run twice",
    ] {
        assert!(!text.contains(promise), "{promise}: {text}");
        assert!(!api.contains(promise), "{promise}: {api}");
    }
    for doc in &staged {
        let summary = contract::summary(doc);
        assert!(summary.contains(contract::staged_calls()), "{summary}");
        let interrupted = contract::cases(doc)
            .into_iter()
            .find(|c| c.problem == Some("urn:idem:problem:interrupted"))
            .unwrap();
        assert!(
            interrupted
                .then
                .contains("runs again, with the same provider key"),
            "{}",
            interrupted.then
        );
    }
    assert!(contract::staged_calls().contains("deduplicates on that key"));
    // Both documents say it: the summary is the OpenAPI operation's description.
    assert!(text.contains(contract::staged_calls()), "{text}");
    let api = openapi(&staged);
    let description = api["paths"]["/payments"]["post"]["description"]
        .as_str()
        .unwrap();
    assert!(
        description.contains(contract::staged_calls()),
        "{description}"
    );
    // Atomic operations make no such calls, and say nothing of them.
    assert!(!contract::summary(&atomic_required_gone()).contains("provider key"));
}

/// `invalid-body` is a body of the wrong shape or that breaks its type's declared rules; a
/// check of the application's own answers the application's problem, not this one.
#[test]
fn invalid_body_says_what_a_check_answers() {
    let case = contract::cases(&atomic_required_gone())
        .into_iter()
        .find(|c| c.problem == Some("urn:idem:problem:invalid-body"))
        .unwrap();
    assert_eq!(case.status, "422");
    assert_eq!(case.when, contract::INVALID_BODY);
    assert!(
        case.when.contains("not of the shape the operation reads"),
        "{}",
        case.when
    );
    assert!(
        case.when
            .contains("answer the application's own problem, with the status and `type`"),
        "{}",
        case.when
    );
    assert!(!markdown(&all()).contains("does not pass the operation's validation"));
}

/// A Standard Webhooks receiver that verifies its deliveries (the runtime's `Verified`).
fn verified() -> OperationDoc {
    header_sourced().verified_webhook()
}

#[test]
fn a_verified_webhook_lists_its_headers_and_its_401_in_openapi() {
    let api = openapi(&[verified()]);
    let post = &api["paths"]["/webhooks/standard"]["post"];
    let parameters = post["parameters"].as_array().unwrap();
    let names: Vec<&str> = parameters
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    // `webhook-id` once: it is the key.
    assert_eq!(
        names,
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
    );
    for parameter in parameters {
        assert_eq!(parameter["in"], "header", "{parameter}");
        assert_eq!(parameter["required"], true, "{parameter}");
        assert!(
            parameter["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{parameter}"
        );
    }
    assert_eq!(parameters[1]["description"], contract::WEBHOOK_HEADERS[1].1);
    let unverified = &post["responses"]["401"];
    assert_eq!(
        unverified["content"][contract::PROBLEM_MEDIA_TYPE]["x-problem-types"],
        json!([contract::WEBHOOK_UNVERIFIED])
    );
    assert!(
        unverified["description"]
            .as_str()
            .unwrap()
            .contains("signature is missing or wrong"),
        "{unverified}"
    );
    assert!(
        post["description"]
            .as_str()
            .unwrap()
            .ends_with(&contract::webhook_verification()),
        "{post}"
    );

    // Without `Verified`, none of it.
    let plain = openapi(&[header_sourced()]);
    let post = &plain["paths"]["/webhooks/standard"]["post"];
    assert_eq!(post["parameters"].as_array().unwrap().len(), 1);
    assert!(post["responses"]["401"].is_null());
}

#[test]
fn a_verified_webhook_lists_its_headers_and_its_401_in_markdown() {
    let text = markdown(&[verified()]);
    assert!(text.contains("### Signed deliveries\n"), "{text}");
    assert!(text.contains(&contract::webhook_verification()), "{text}");
    for (name, description) in contract::WEBHOOK_HEADERS {
        assert!(
            text.contains(&format!("- `{name}`: {description}\n")),
            "{text}"
        );
    }
    assert!(
        text.contains("| 401 `urn:idem:problem:webhook-unverified` | The delivery's Standard Webhooks signature is missing or wrong"),
        "{text}"
    );
    // The example deliveries carry the signature's headers, the key's once.
    assert_eq!(text.matches("webhook-id: 8e03978e").count(), 2, "{text}");
    assert_eq!(
        text.matches("\nwebhook-timestamp: …\n").count(),
        2,
        "{text}"
    );
    assert_eq!(
        text.matches("\nwebhook-signature: …\n").count(),
        2,
        "{text}"
    );

    let plain = markdown(&[header_sourced()]);
    assert!(!plain.contains("Signed deliveries"), "{plain}");
    assert!(!plain.contains("webhook-signature"), "{plain}");
    assert!(!plain.contains("| 401"), "{plain}");
}

#[test]
fn a_verified_webhook_keyed_otherwise_still_lists_webhook_id() {
    let spec = OperationSpec::new("hook:v1").scope(ScopeKind::Tenant);
    let doc = OperationDoc::from_spec(&spec)
        .path("POST", "/hooks")
        .verified_webhook();
    let api = openapi(std::slice::from_ref(&doc));
    let post = &api["paths"]["/hooks"]["post"];
    let names: Vec<&str> = post["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "Idempotency-Key",
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature"
        ]
    );
    // The application's authentication and the signature: one 401, both cases.
    let unauthorized = &post["responses"]["401"];
    let description = unauthorized["description"].as_str().unwrap();
    assert!(
        description.contains("authentication refused"),
        "{description}"
    );
    assert!(
        description.contains("Standard Webhooks signature"),
        "{description}"
    );
    assert_eq!(
        unauthorized["content"][contract::PROBLEM_MEDIA_TYPE]["x-problem-types"],
        json!([contract::WEBHOOK_UNVERIFIED])
    );
    let rows = markdown(&[doc])
        .lines()
        .filter(|line| line.starts_with("| 401"))
        .count();
    assert_eq!(rows, 2);
}

#[test]
fn verified_webhook_is_serialised_only_when_set() {
    let plain = serde_json::to_value(header_sourced()).unwrap();
    assert!(plain.get("verified_webhook").is_none(), "{plain}");
    let json = serde_json::to_value(verified()).unwrap();
    assert_eq!(json["verified_webhook"], true);
    let back: OperationDoc = serde_json::from_value(json).unwrap();
    assert_eq!(back, verified());
}
