//! The telemetry's unit tests.

use std::time::Duration;

use sha2::{Digest as _, Sha256};

use super::ending::{Ending, REASONS};
use super::meters::labels;
use super::request::{cut_request_id, scope_kind};
use super::*;
use crate::record::OutcomeKind;

#[test]
fn key_hash_is_the_documented_digest() {
    // printf 'tenant:acme\norder-1' | sha256sum | cut -c1-12
    let full = Sha256::digest(b"tenant:acme\norder-1");
    let hex = crate::hex::encode(&full);
    let hash = key_hash("tenant:acme", "order-1");
    assert_eq!(hash.as_str(), &hex[..12]);
    assert_eq!(hash.to_string(), hash.as_str());
    assert_ne!(hash, key_hash("tenant:acme", "order-2"));
    assert_ne!(hash, key_hash("global", "order-1"));
}

/// What `tracing_subscriber::fmt` writes for the span: the program's words and the
/// hash unquoted, the client's request id quoted and escaped, the key itself nowhere.
#[test]
fn a_formatting_subscriber_quotes_only_the_request_id() {
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let execution = Execution::start(
            "create_order:v1",
            "tenant:acme",
            Some("order-1"),
            Some("a \"b\""),
        );
        execution.span().in_scope(|| tracing::info!("inside"));
    });
    let written = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
    let hash = key_hash("tenant:acme", "order-1");
    for field in [
        "operation=create_order:v1".to_owned(),
        "scope=tenant".to_owned(),
        format!("key={hash}"),
        r#"request_id="a \"b\"""#.to_owned(),
    ] {
        assert!(written.contains(&field), "{field} in {written}");
    }
    assert!(!written.contains("order-1"), "{written}");
    assert!(!written.contains("acme"), "{written}");
}

#[test]
fn request_ids_are_cut_at_128_characters_not_bytes() {
    let ascii = "r".repeat(200);
    assert_eq!(cut_request_id(&ascii), &ascii[..128]);
    assert_eq!(cut_request_id(&ascii[..128]), &ascii[..128]);
    let wide = "é".repeat(100); // 200 bytes, 100 characters
    assert_eq!(cut_request_id(&wide), wide);
    let wider = "é".repeat(200);
    assert_eq!(cut_request_id(&wider).chars().count(), 128);
    assert_eq!(cut_request_id(""), "");
}

#[test]
fn scopes_are_written_as_their_kind() {
    assert_eq!(scope_kind("global"), "global");
    assert_eq!(scope_kind("tenant:acme"), "tenant");
    assert_eq!(scope_kind("user:42:x"), "user");
    assert_eq!(scope_kind("tenantacme"), "other");
}

#[test]
fn outcomes_have_their_labels() {
    let ok = |kind| {
        Ending::of(&Ok(Outcome {
            kind,
            record: crate::record::Record::failure(),
        }))
        .as_str()
    };
    assert_eq!(ok(OutcomeKind::Executed), "executed");
    assert_eq!(ok(OutcomeKind::Replayed), "replayed");
    assert_eq!(ok(OutcomeKind::Failed), "failed");
    let err = |error| Ending::of(&Err(error)).as_str();
    assert_eq!(err(Error::Mismatch(None)), "mismatch");
    assert_eq!(err(Error::Expired), "expired");
    assert_eq!(
        err(Error::InFlight {
            retry_after: Duration::from_secs(1)
        }),
        "in_flight"
    );
    assert_eq!(err(Error::Panicked), "error");
    assert_eq!(err(Error::MissingKey), "rejected");
    let missing = Ending::of(&Err(Error::MissingKey));
    assert_eq!(REASONS[missing.index()], "missing_key");
    // A key taken from the request: the same reasons.
    let part = |missing| {
        Ending::of(&Err(Error::KeyFromRequest {
            from: crate::spec::KeySource::Parts(&[crate::spec::KeyPart::Header("webhook-id")]),
            missing,
            reason: "the request has no such header",
        }))
    };
    assert_eq!(REASONS[part(true).index()], "missing_key");
    assert_eq!(REASONS[part(false).index()], "invalid_key");
}

#[test]
fn labels_are_built_once_per_operation() {
    let a = labels("telemetry-test:v1");
    let b = labels("telemetry-test:v1");
    assert!(std::ptr::eq(a, b));
    assert_eq!(a.operation[0].value(), "telemetry-test:v1");
    assert_eq!(a.outcomes[1][1].value(), "replayed");
}
