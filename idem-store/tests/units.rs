//! The crate's public values on their own, no database: cursors, listing limits, a stored
//! response's columns, a key's state at a time, the migration lock's id.
#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use idem_store::__fuzz::strict;
use idem_store::{
    Cursor, KeyFilter, KeyRef, KeyStatus, MIGRATION_LOCK_ID, StoreError, StoredResponse,
    StoredStatus,
};

/// A cursor is hexadecimal text, of either case, that reads back as the key it was made at,
/// whatever the key's text.
#[test]
fn cursors_round_trip_any_text() {
    for (scope, operation, key) in [
        ("", "", ""),
        ("global", "op:v1", "k"),
        ("tenant:ü", "op:v2", "a\u{0}b%_*?["),
    ] {
        let cursor = Cursor::at(KeyRef {
            scope,
            operation,
            key,
        });
        let text = cursor.to_string();
        assert!(text.bytes().all(|b| b.is_ascii_hexdigit()), "{text}");
        assert_eq!(text.parse::<Cursor>().ok(), Some(cursor.clone()));
        assert_eq!(text.to_uppercase().parse::<Cursor>().ok(), Some(cursor));
    }
}

/// Text that is not a cursor is [`StoreError::InvalidCursor`]: empty, odd or not
/// hexadecimal, cut short, with bytes left over, a length beyond the end, a part that is not
/// UTF-8.
#[test]
fn malformed_cursors_are_refused() {
    let good = Cursor::at(KeyRef {
        scope: "global",
        operation: "op:v1",
        key: "k",
    })
    .to_string();
    for bad in [
        "",
        "0",
        "zz",
        &good[..good.len() - 2],
        &format!("{good}00"),
        // A length beyond the end.
        "ffffffff",
        // Invalid UTF-8 in a part.
        "00000001ff0000000000000000",
    ] {
        assert!(
            matches!(bad.parse::<Cursor>(), Err(StoreError::InvalidCursor)),
            "{bad}"
        );
    }
}

/// A listing's limit: 50 unless set, at least 1, at most 1000.
#[test]
fn limits_are_clamped() {
    assert_eq!(KeyFilter::new().effective_limit(), 50);
    assert_eq!(KeyFilter::new().limit(0).effective_limit(), 1);
    assert_eq!(KeyFilter::new().limit(1001).effective_limit(), 1000);
}

/// The headers column is a JSON array of `[name, value]` pairs, and reads back as written.
#[test]
fn headers_keep_the_column_format() {
    let response = StoredResponse {
        status: 201,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            ("location".into(), "/x?a='b'".into()),
        ],
        body: Bytes::new(),
    };
    let json = response.headers_json();
    assert_eq!(
        json,
        r#"[["content-type","application/json"],["location","/x?a='b'"]]"#
    );
    let back = strict(201, Some(&json), None);
    assert_eq!(back, Ok(response));
}

/// A damaged response is refused, naming its column, never replayed in part (without its
/// headers, or as another status).
#[test]
fn a_damaged_response_is_refused() {
    use idem_store::SealError::Unreadable;
    assert_eq!(
        strict(70_000, None, None),
        Err(Unreadable("response_status"))
    );
    assert_eq!(
        strict(200, Some("not json"), Some(b"x".to_vec())),
        Err(Unreadable("response_headers"))
    );
    assert_eq!(
        strict(200, Some("{}"), None),
        Err(Unreadable("response_headers"))
    );
}

/// A key's state at a time, its names, and which states are final.
#[test]
fn status_at_a_time() {
    assert_eq!(
        KeyStatus::at(StoredStatus::Completed, 10, None, 9),
        KeyStatus::Completed
    );
    assert_eq!(
        KeyStatus::at(StoredStatus::Completed, 10, None, 10),
        KeyStatus::Expired
    );
    assert_eq!(
        KeyStatus::at(StoredStatus::Processing, 10, None, 11),
        KeyStatus::Processing
    );
    assert_eq!(
        KeyStatus::at(StoredStatus::Processing, 100, Some(20), 19),
        KeyStatus::Processing
    );
    assert_eq!(
        KeyStatus::at(StoredStatus::Processing, 100, Some(20), 20),
        KeyStatus::Stuck
    );
    // A key that is not final never expires: past `expires_at`, a live lease is
    // processing and a lease run out is stuck.
    assert_eq!(
        KeyStatus::at(StoredStatus::Processing, 10, Some(100), 50),
        KeyStatus::Processing
    );
    assert_eq!(
        KeyStatus::at(StoredStatus::Processing, 10, Some(20), 50),
        KeyStatus::Stuck
    );
    assert_eq!(
        KeyStatus::at(StoredStatus::Processing, 10, Some(10), 10),
        KeyStatus::Stuck
    );
    assert!(KeyStatus::Completed.is_final() && KeyStatus::Expired.is_final());
    assert!(!KeyStatus::Processing.is_final() && !KeyStatus::Stuck.is_final());
    assert!(StoredStatus::Completed.is_final() && !StoredStatus::Processing.is_final());
    for status in KeyStatus::ALL {
        assert_eq!(status.as_str().parse::<KeyStatus>().ok(), Some(status));
    }
    assert_eq!(StoredStatus::Completed, "completed");
}

/// Instances of different versions must take the same lock: changing this value is a
/// breaking change.
#[test]
fn the_migration_lock_id_is_pinned() {
    assert_eq!(MIGRATION_LOCK_ID, 7_594_306_391_241_484_647);
    assert_eq!(MIGRATION_LOCK_ID, 0x6964_656d_2d6d_6967);
    // PostgreSQL shows a bigint advisory lock as two halves in pg_locks.
    assert_eq!(MIGRATION_LOCK_ID >> 32, 1_768_187_245);
    assert_eq!(MIGRATION_LOCK_ID & 0xffff_ffff, 762_145_127);
}
