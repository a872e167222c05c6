//! Properties of the decoding of a stored response from a key row's columns (the fuzz target
//! `stored_response` checks the same on arbitrary bytes): it never panics, it refuses exactly
//! what idem does not write, and what is encoded decodes to itself.

use bytes::Bytes;
use idem_store::__fuzz::{row, strict};
use idem_store::{KeyStatus, StoreError, StoredResponse, StoredStatus};
use proptest::prelude::*;

/// Text with quotes, backslashes, controls and characters outside the BMP.
fn text() -> impl Strategy<Value = String> {
    "[a-z\"\\\\\u{0}-\u{1f}\u{7f}é€😀 -]{0,12}"
}

fn response() -> impl Strategy<Value = StoredResponse> {
    (
        any::<u16>(),
        prop::collection::vec((text(), text()), 0..5),
        prop::collection::vec(any::<u8>(), 0..32),
    )
        .prop_map(|(status, headers, body)| StoredResponse {
            status,
            headers,
            body: Bytes::from(body),
        })
}

/// A `response_headers` column: encoded pairs, possibly damaged, or any text.
fn headers_column() -> impl Strategy<Value = Option<String>> {
    let encoded = (response(), any::<prop::sample::Index>(), text()).prop_map(|(r, at, junk)| {
        let mut json = r.headers_json();
        let at = at.index(json.len() + 1);
        if json.is_char_boundary(at) {
            json.insert_str(at, &junk);
        }
        json
    });
    prop::option::of(prop_oneof![
        encoded,
        text(),
        Just("{}".to_owned()),
        Just(r#"[["a"]]"#.to_owned()),
        Just(r#"[["a","b","c"]]"#.to_owned()),
        Just(r#"[[1,"b"]]"#.to_owned()),
    ])
}

fn status_column() -> impl Strategy<Value = i32> {
    prop_oneof![
        100..600_i32,
        any::<i32>(),
        Just(-1),
        Just(65_535),
        Just(65_536)
    ]
}

proptest! {
    #[test]
    fn a_response_is_refused_exactly_when_a_column_does_not_read(
        status in status_column(),
        headers in headers_column(),
        body in prop::option::of(prop::collection::vec(any::<u8>(), 0..16)),
    ) {
        let pairs = headers.as_deref().map(serde_json::from_str::<Vec<(String, String)>>);
        match strict(status, headers.as_deref(), body.clone()) {
            Ok(read) => {
                prop_assert_eq!(read.status, u16::try_from(status).unwrap());
                prop_assert_eq!(read.body.as_ref(), body.as_deref().unwrap_or_default());
                prop_assert_eq!(read.headers, pairs.unwrap_or(Ok(Vec::new())).unwrap());
            }
            Err(_) => prop_assert!(
                u16::try_from(status).is_err() || pairs.is_some_and(|p| p.is_err())
            ),
        }
    }

    #[test]
    fn an_encoded_response_decodes_to_itself(response in response()) {
        let json = response.headers_json();
        let status = i32::from(response.status);
        let body = Some(response.body.to_vec());
        prop_assert_eq!(strict(status, Some(&json), body.clone()), Ok(response.clone()));
        let read = row("completed", Some(status), Some(json), body, 10, None, 0).unwrap();
        prop_assert_eq!(read.response, Some(response));
        prop_assert_eq!(read.status, KeyStatus::Completed);
    }

    #[test]
    fn a_row_is_corrupt_exactly_when_it_cannot_be_read(
        status in prop_oneof![Just("completed"), Just("processing"), Just("done"), Just("")],
        response_status in prop::option::of(status_column()),
        headers in headers_column(),
        times in (any::<i64>(), prop::option::of(any::<i64>()), any::<i64>()),
    ) {
        let (expires_at_ms, locked_until_ms, now_ms) = times;
        let read = row(status, response_status, headers.clone(), None, expires_at_ms, locked_until_ms, now_ms);
        let stored = match status {
            "completed" => StoredStatus::Completed,
            "processing" => StoredStatus::Processing,
            _ => {
                prop_assert!(matches!(read, Err(StoreError::Corrupt(_))));
                return Ok(());
            }
        };
        let expected = match response_status {
            Some(code) if stored == StoredStatus::Completed => strict(code, headers.as_deref(), None).map(Some),
            _ => Ok(None),
        };
        match (read, expected) {
            (Ok(key_row), Ok(response)) => {
                prop_assert_eq!(key_row.response, response);
                prop_assert_eq!(key_row.status, KeyStatus::at(stored, expires_at_ms, locked_until_ms, now_ms));
            }
            (Err(StoreError::Corrupt(_)), Err(_)) => {}
            (read, expected) => prop_assert!(false, "read {:?}, expected {:?}", read, expected),
        }
    }
}
