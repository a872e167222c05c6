//! The decoding of a stored response as it is read from a key row (`response_status`,
//! `response_headers`, `response_body`), and its replay as a `Record`.
//!
//! Invariants, on arbitrary columns:
//! - no decoding panics: the reading of a response's columns (as the protocol replays them
//!   and tools read them), a whole row as tools read it, `Record::from_stored`;
//! - the reading refuses exactly a status outside `u16` and headers that are not JSON pairs;
//! - a row reads as `Corrupt` exactly when its status is unknown or it is completed with an
//!   unreadable response, and otherwise carries the strict reading;
//! - `Record::from_stored` keeps the body, keeps the status if it is an HTTP status (`500`
//!   otherwise) and keeps exactly the headers that are valid HTTP headers.
//!
//! Round trips, on arbitrary responses:
//! - a `StoredResponse` encoded into its columns (`headers_json`) decodes to itself, read
//!   alone and as a row;
//! - a `Record` stored with an allow-list of all its header names and replayed has the same
//!   status, body and headers, less the values that are not visible ASCII (never stored).

#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use idem_runtime::protocol::Record;
use idem_store::__fuzz::{row, strict};
use idem_store::{KeyStatus, StoreError, StoredResponse, StoredStatus};
use libfuzzer_sys::fuzz_target;

/// The response columns of a row, and the times it is read at.
#[derive(Arbitrary, Debug)]
struct Columns<'a> {
    /// 0: `completed`, 1: `processing`, else `other_status`.
    status_choice: u8,
    other_status: &'a str,
    response_status: Option<i32>,
    /// Mostly small statuses: the range where HTTP statuses live.
    small_status: Option<u16>,
    headers: HeadersColumn<'a>,
    body: Option<&'a [u8]>,
    expires_at_ms: i64,
    locked_until_ms: Option<i64>,
    now_ms: i64,
}

/// A `response_headers` column.
#[derive(Arbitrary, Debug)]
enum HeadersColumn<'a> {
    Null,
    /// Any text.
    Text(&'a str),
    /// The column of these pairs, with `junk` inserted at `at` (where that is a character
    /// boundary): mostly nearly valid JSON.
    Damaged {
        pairs: Vec<(String, String)>,
        at: u16,
        junk: &'a str,
    },
}

impl HeadersColumn<'_> {
    fn text(&self) -> Option<String> {
        match self {
            Self::Null => None,
            Self::Text(text) => Some((*text).to_owned()),
            Self::Damaged { pairs, at, junk } => {
                let mut json = StoredResponse::encode_headers(
                    pairs.iter().map(|(n, v)| (n.as_str(), v.as_str())),
                );
                let at = usize::from(*at) % (json.len() + 1);
                if json.is_char_boundary(at) {
                    json.insert_str(at, junk);
                }
                Some(json)
            }
        }
    }
}

/// A response to encode and decode.
#[derive(Arbitrary, Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    columns: Columns<'a>,
    response: Response,
}

fn decode(c: &Columns<'_>) {
    let status = match c.small_status {
        Some(s) => i32::from(s % 1000),
        None => c.response_status.unwrap_or(200),
    };
    let body = c.body.map(<[u8]>::to_vec);
    let headers = c.headers.text();
    let headers = headers.as_deref();
    let pairs = headers.map(serde_json::from_str::<Vec<(String, String)>>);
    let decoded = strict(status, headers, body.clone());
    match &decoded {
        Ok(read) => {
            assert_eq!(read.body.as_ref(), c.body.unwrap_or_default());
            assert_eq!(Ok(read.status), u16::try_from(status));
        }
        Err(_) => assert!(
            u16::try_from(status).is_err() || pairs.is_some_and(|p| p.is_err()),
            "a readable response refused"
        ),
    }

    let row_status = match c.status_choice {
        0 => "completed",
        1 => "processing",
        _ => c.other_status,
    };
    let response_status = c.response_status.or(c.small_status.map(|_| status));
    let read = row(
        row_status,
        response_status,
        headers.map(str::to_owned),
        body.clone(),
        c.expires_at_ms,
        c.locked_until_ms,
        c.now_ms,
    );
    let stored = match row_status {
        "completed" => Some(StoredStatus::Completed),
        "processing" => Some(StoredStatus::Processing),
        _ => None,
    };
    let expected = match (stored, response_status) {
        (Some(StoredStatus::Completed), Some(code)) => {
            Some(strict(code, headers, body.clone()).ok().map(Some))
        }
        (Some(_), _) => Some(Some(None)),
        (None, _) => None,
    };
    match (read, expected.flatten()) {
        (Ok(key_row), Some(response)) => {
            assert_eq!(key_row.response, response);
            let stored = stored.expect("a row that reads has a known status");
            let at = KeyStatus::at(stored, c.expires_at_ms, c.locked_until_ms, c.now_ms);
            assert_eq!(key_row.status, at);
        }
        (Err(StoreError::Corrupt(_)), None) => {}
        (read, expected) => panic!("row read as {read:?}, expected {expected:?}"),
    }

    let Ok(decoded) = decoded else { return };
    let record = Record::from_stored(decoded.clone());
    assert_eq!(record.body, decoded.body);
    let status = StatusCode::from_u16(decoded.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(record.status, status);
    let valid = decoded
        .headers
        .iter()
        .filter(|(n, v)| {
            HeaderName::from_bytes(n.as_bytes()).is_ok() && HeaderValue::from_str(v).is_ok()
        })
        .count();
    assert_eq!(record.headers.len(), valid);
}

fn round_trip(r: &Response) {
    let response = StoredResponse {
        status: r.status,
        headers: r.headers.clone(),
        body: Bytes::copy_from_slice(&r.body),
    };
    let json = response.headers_json();
    let status = i32::from(r.status);
    let body = Some(r.body.clone());
    assert_eq!(
        strict(status, Some(&json), body.clone()).as_ref(),
        Ok(&response)
    );
    let read = row(
        "completed",
        Some(status),
        Some(json),
        body,
        i64::MAX,
        None,
        0,
    )
    .expect("an encoded row reads");
    assert_eq!(read.response.as_ref(), Some(&response));

    // As a record: valid names and values only (values as bytes: not all are visible ASCII).
    let Ok(status) = StatusCode::from_u16(r.status) else {
        return;
    };
    let mut headers = HeaderMap::new();
    let mut allow: Vec<HeaderName> = Vec::new();
    for (name, value) in &r.headers {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value.as_bytes()),
        ) else {
            continue;
        };
        if !allow.contains(&name) {
            allow.push(name.clone());
        }
        headers.append(name, value);
    }
    let record = Record {
        status,
        headers,
        body: Bytes::copy_from_slice(&r.body),
    };
    let stored = record.to_stored(&allow);
    let back = Record::from_stored(
        strict(
            i32::from(stored.status),
            Some(&stored.headers_json()),
            Some(stored.body.to_vec()),
        )
        .expect("a stored record reads back"),
    );
    assert_eq!(back.status, record.status);
    assert_eq!(back.body, record.body);
    let mut visible = HeaderMap::new();
    for (name, value) in &record.headers {
        if value.to_str().is_ok() {
            visible.append(name.clone(), value.clone());
        }
    }
    assert_eq!(back.headers, visible);
}

fuzz_target!(|input: Input<'_>| {
    decode(&input.columns);
    round_trip(&input.response);
});
