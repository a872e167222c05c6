//! What a client following the documents does: idem's advice is tied to idem's own problem
//! types, never to a status an application's own responses share.

use std::time::Duration;

use idem_docs::{OperationDoc, contract, markdown, openapi};
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
