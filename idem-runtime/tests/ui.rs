//! UI tests of `#[idempotent]`: what compiles, and the errors for what does not.
//!
//! Regenerate the expected errors with
//! `TRYBUILD=overwrite cargo test -p idem-runtime --all-features --test ui`, then read them.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
