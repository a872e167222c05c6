//! UI tests of `#[idempotent]`: what compiles, and the errors for what does not.
//!
//! Regenerate the expected errors with
//! `TRYBUILD=overwrite cargo test -p idem-runtime --all-features --test ui`, then read every
//! `.stderr`: each failing case must give one error, at the token at fault, saying what to do.
//! The expected errors are written with every feature on (one case needs PostgreSQL, and the
//! lists of implementations rustc prints depend on the features), which is why this test
//! requires them all (`Cargo.toml`).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
