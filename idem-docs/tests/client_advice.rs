//! What a client following the documents does: idem's advice is tied to idem's own problem
//! types, never to a status an application's own responses share.

use std::time::Duration;

use idem_docs::{OperationDoc, ProblemDoc, contract, markdown, openapi};
use idem_spec::{Mode, OperationSpec, ScopeKind};

/// An operation with a `409` and a `503` of its own (a version conflict, a dependency down).
fn with_own_conflict(mode: Mode) -> OperationDoc {
    let spec = OperationSpec::new("update_order:v1")
        .scope(ScopeKind::Tenant)
        .mode(mode)
        .ttl(Duration::from_secs(24 * 3600));
    OperationDoc::from_spec(&spec)
        .path("PUT", "/orders/{id}")
        .responds(200, "The order, updated")
        .responds(
            409,
            "The order changed since it was read (a version conflict)",
        )
        .responds(503, "The stock service is down")
}

/// Whether `text` advises waiting `Retry-After` and retrying.
fn advises_retry(text: &str) -> bool {
    text.contains("Retry-After") && (text.contains("retry") || text.contains("Retry"))
}

#[test]
fn retry_after_names_idem_problem_types_not_statuses() {
    let text = contract::retry_after_header();
    assert!(!text.contains("409 and 503"), "{text}");
    for mode in [Mode::Atomic, Mode::Staged] {
        for case in contract::cases(&with_own_conflict(mode).sealed_at_rest(true)) {
            if let (true, Some(problem)) = (case.retry_after, case.problem) {
                assert!(text.contains(&format!("`{problem}`")), "{problem}: {text}");
            }
        }
    }
    assert!(text.contains(contract::IN_FLIGHT), "{text}");
}

#[test]
fn openapi_ties_each_retry_advice_to_its_problem_type() {
    for mode in [Mode::Atomic, Mode::Staged] {
        let api = openapi(&[with_own_conflict(mode)]);
        let responses = &api["paths"]["/orders/{id}"]["put"]["responses"];
        for status in ["409", "503"] {
            let description = responses[status]["description"].as_str().unwrap();
            for paragraph in description.split("\n\n") {
                if advises_retry(paragraph) {
                    assert!(
                        paragraph.starts_with("`urn:idem:problem:"),
                        "{status}: retry advice not tied to a problem type: {paragraph}"
                    );
                }
            }
            // The operation's own paragraph gives no retry advice.
            let own = description
                .split("\n\n")
                .find(|p| p.contains("version conflict") || p.contains("stock service"))
                .unwrap();
            assert!(!advises_retry(own), "{status}: {own}");
        }
        let in_flight = responses["409"]["description"].as_str().unwrap();
        assert!(
            in_flight.starts_with(&format!("`{}`: ", contract::IN_FLIGHT)),
            "{in_flight}"
        );
    }
}

#[test]
fn markdown_ties_each_retry_advice_to_its_problem_type() {
    for mode in [Mode::Atomic, Mode::Staged] {
        let text = markdown(&[with_own_conflict(mode)]);
        for line in text.lines() {
            if line.starts_with("| 409") || line.starts_with("| 503") {
                let status = line.split(" | ").next().unwrap();
                let advice = line.rsplit(" | ").next().unwrap();
                if advises_retry(advice) {
                    assert!(status.contains("`urn:idem:problem:"), "{line}");
                }
            }
        }
        // The summary and the example name the problem type with the status.
        let named = format!("409 `{}`", contract::IN_FLIGHT);
        assert!(
            contract::summary(&with_own_conflict(mode)).contains(&named),
            "{mode}"
        );
        assert!(
            text.contains(&format!(
                "`409` `{}` with `Retry-After`",
                contract::IN_FLIGHT
            )),
            "{text}"
        );
        assert!(!text.contains("still running, `409` with"), "{text}");
    }
}

#[test]
fn in_flight_advice_names_its_type() {
    for mode in [Mode::Atomic, Mode::Staged] {
        let doc = with_own_conflict(mode);
        for case in contract::cases(&doc) {
            if case.problem == Some(contract::IN_FLIGHT) {
                assert!(case.then.contains(contract::IN_FLIGHT), "{}", case.then);
            }
        }
    }
}

/// The `410` row and "When the window lapses" say when a key's window starts in one wording,
/// the runtime's: from the arrival of the request that ran the operation (atomic), from the
/// operation's completion (staged).
#[test]
fn the_window_is_worded_once_as_the_runtime_counts_it() {
    for (mode, start) in [
        (
            Mode::Atomic,
            "from the arrival of the request that ran the operation",
        ),
        (Mode::Staged, "after the operation completes"),
    ] {
        let doc = with_own_conflict(mode);
        let kept = format!("kept for 24 hours {start}");
        let window = contract::window(&doc);
        assert!(window.contains(&kept), "{window}");
        let gone = contract::cases(&doc)
            .into_iter()
            .find(|c| c.status == "410")
            .unwrap();
        assert!(gone.when.contains(&kept), "{}", gone.when);
        for text in [&window, &gone.when] {
            assert!(!text.contains("stored more than"), "{text}");
            assert!(!text.contains("after its first request"), "{text}");
        }
    }
}

/// The spec's own description (rustdoc, the operator tool) names the problem type of its
/// `409` as the documents do, in every mode and in-flight policy.
#[test]
fn the_specs_description_names_the_in_flight_type() {
    use idem_spec::InFlightPolicy;

    let specs = [
        OperationSpec::new("x:v1"),
        OperationSpec::new("x:v1").mode(Mode::Staged),
        OperationSpec::new("x:v1")
            .mode(Mode::Staged)
            .on_in_flight(InFlightPolicy::Wait),
    ];
    for spec in specs {
        let text = spec.describe();
        assert!(
            text.contains(&format!("409 `{}` with `Retry-After`", contract::IN_FLIGHT)),
            "{text}"
        );
        assert!(!text.contains("409 with"), "{text}");
    }
    let staged = OperationSpec::new("x:v1").mode(Mode::Staged).describe();
    assert!(
        staged.contains("503 `urn:idem:problem:interrupted` with `Retry-After`"),
        "{staged}"
    );
}

/// [`with_own_conflict`] with its `409` and `503` declared as the application's own
/// problems, the second carrying `Retry-After`.
fn with_own_problems(mode: Mode) -> OperationDoc {
    with_own_conflict(mode)
        .problem(ProblemDoc::new(
            409,
            "urn:example:version-conflict",
            "version conflict",
        ))
        .problem(ProblemDoc::new(503, "urn:example:stock-down", "stock service down").retry_after())
}

#[test]
fn declared_problems_are_listed_under_their_status_with_their_type() {
    for mode in [Mode::Atomic, Mode::Staged] {
        let doc = with_own_problems(mode);
        let text = markdown(std::slice::from_ref(&doc));
        let conflict = text
            .lines()
            .find(|l| l.starts_with("| 409 `urn:example:version-conflict` |"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(conflict.contains("version conflict"), "{conflict}");
        assert!(!advises_retry(conflict), "{conflict}");
        let down = text
            .lines()
            .find(|l| l.starts_with("| 503 `urn:example:stock-down` + `Retry-After` |"))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(
            down.contains("For this `type` only (`urn:example:stock-down`)"),
            "{down}"
        );

        let api = openapi(&[doc]);
        let responses = &api["paths"]["/orders/{id}"]["put"]["responses"];
        let types = |status: &str| {
            responses[status]["content"]["application/problem+json"]["x-problem-types"].clone()
        };
        assert!(
            types("409")
                .as_array()
                .unwrap()
                .contains(&"urn:example:version-conflict".into()),
            "{}",
            types("409")
        );
        assert!(
            types("503")
                .as_array()
                .unwrap()
                .contains(&"urn:example:stock-down".into())
        );
        for status in ["409", "503"] {
            let description = responses[status]["description"].as_str().unwrap();
            for paragraph in description.split("\n\n") {
                // Retry advice is always tied to the problem type the paragraph starts with.
                if advises_retry(paragraph) {
                    let problem_type = paragraph
                        .strip_prefix('`')
                        .and_then(|p| p.split_once("`: "))
                        .map(|(t, _)| t)
                        .unwrap_or_else(|| panic!("{status}: {paragraph}"));
                    if !problem_type.starts_with(contract::IDEM_PROBLEM_PREFIX) {
                        assert!(
                            paragraph.contains(&format!("For this `type` only (`{problem_type}`)")),
                            "{status}: {paragraph}"
                        );
                    }
                }
            }
        }
        let conflict = responses["409"]["description"]
            .as_str()
            .unwrap()
            .split("\n\n")
            .find(|p| p.starts_with("`urn:example:version-conflict`: "))
            .unwrap();
        assert!(!advises_retry(conflict), "{conflict}");
        assert!(responses["503"]["headers"]["Retry-After"].is_object());
    }
}

/// A declared problem with `Retry-After` whose answer is stored with the key (staged mode,
/// or a stored 4xx) is retried with a new key: the same key would replay it.
#[test]
fn a_stored_problem_is_retried_with_a_new_key() {
    let busy = ProblemDoc::new(429, "urn:example:busy", "busy").retry_after();
    let advice = |doc: OperationDoc| {
        contract::cases(&doc.problem(busy.clone()))
            .into_iter()
            .find(|c| c.problem_type() == Some("urn:example:busy"))
            .unwrap()
            .then
    };
    let spec = OperationSpec::new("x:v1");
    let atomic = advice(OperationDoc::from_spec(&spec));
    assert!(atomic.contains("retry with the same key"), "{atomic}");
    let stored = advice(OperationDoc::from_spec(&spec.store_client_errors(true)));
    assert!(stored.contains("with a new key"), "{stored}");
    let staged = advice(OperationDoc::from_spec(&spec.mode(Mode::Staged)));
    assert!(staged.contains("with a new key"), "{staged}");
}

/// A response the application describes that names a declared problem's type is that
/// problem's row, once, with its type.
#[test]
fn a_response_naming_a_declared_type_is_its_row() {
    let doc = OperationDoc::from_spec(&OperationSpec::new("x:v1"))
        .path("POST", "/x")
        .responds(422, "`sku` is out of range (`urn:example:invalid-order`)")
        .problem(ProblemDoc::new(
            422,
            "urn:example:invalid-order",
            "invalid order",
        ));
    let text = markdown(std::slice::from_ref(&doc));
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("urn:example:invalid-order"))
        .collect();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert!(
        rows[0].starts_with("| 422 `urn:example:invalid-order` | `sku` is out of range"),
        "{}",
        rows[0]
    );
}

#[test]
fn declared_problems_serialise_only_when_present() {
    let plain = OperationDoc::from_spec(&OperationSpec::new("x:v1"));
    assert!(
        serde_json::to_value(&plain)
            .unwrap()
            .get("problems")
            .is_none()
    );
    let doc = with_own_problems(Mode::Atomic);
    let json = serde_json::to_value(&doc).unwrap();
    assert_eq!(
        json["problems"],
        serde_json::json!([
            {"status": 409, "type": "urn:example:version-conflict", "title": "version conflict"},
            {"status": 503, "type": "urn:example:stock-down", "title": "stock service down", "retry_after": true},
        ])
    );
    assert_eq!(serde_json::from_value::<OperationDoc>(json).unwrap(), doc);
}
