//! Snapshots of both documents for a few specs, and the properties they must keep.

use std::time::Duration;

use idem_docs::{OperationDoc, contract, markdown, openapi};
use idem_spec::{ExpiryPolicy, InFlightPolicy, KeyRequirement, Mode, OperationSpec, ScopeKind};

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
    for doc in all() {
        let json = serde_json::to_string(&doc).unwrap();
        let back: OperationDoc = serde_json::from_str(&json).unwrap();
        assert_eq!(back, doc);
    }
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
    assert!(contract::KEY_PATTERN.contains("{1,255}"));
    assert_eq!(contract::KEY_MAX_LEN, 255);
}

#[test]
fn empty_lists_give_valid_documents() {
    assert!(markdown(&[]).contains("No operation is documented."));
    assert_eq!(openapi(&[])["openapi"], "3.1.0");
}
