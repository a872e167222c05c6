//! The store conformance kit on SQLite: every case in a new file under the system's
//! temporary directory.

use idem_store::sqlx::Sqlite;
use idem_testkit::conformance::{self, CASES};
use idem_testkit::harness::TestBackend;

idem_testkit::conformance_tests!(Sqlite);

/// The runner without the macro: every case, in order, each reported.
#[tokio::test]
async fn the_runner_reports_every_case() {
    let report = conformance::run::<Sqlite>(Sqlite::fresh_url).await;
    let cases: Vec<&str> = report.outcomes.iter().map(|o| o.case).collect();
    assert_eq!(cases, CASES);
    assert!(report.passed(), "{report}");
}

/// A case that fails is reported with its reason, and the runner goes on with the next.
#[tokio::test]
async fn the_runner_reports_failures() {
    let unreachable = || async { "sqlite:///nonexistent-directory/idem/x.db".to_owned() };
    let report = conformance::run::<Sqlite>(unreachable).await;
    assert!(!report.passed());
    assert_eq!(report.failures().count(), CASES.len(), "{report}");
    let first = &report.outcomes[0];
    assert!(
        first
            .failure
            .as_deref()
            .is_some_and(|why| why.contains("Backend::connect")),
        "{first:?}"
    );
    assert!(report.to_string().ends_with(&format!(
        "{} cases, 0 passed, {} failed",
        report.outcomes.len(),
        report.outcomes.len()
    )));
}
