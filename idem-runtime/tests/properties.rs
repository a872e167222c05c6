//! Properties of the pure parts: no input makes them panic, an accepted key reads back from
//! its canonical form, the fingerprint depends on values, never on the order or formatting of
//! what the client sent, and a stored response replays as it was stored. The fuzz targets in
//! `fuzz/` check the same invariants on arbitrary bytes.

use std::cmp::Ordering;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use bytes::Bytes;
use idem_runtime::__fuzz::canonical_json;
use idem_runtime::IdempotencyKey;
use idem_runtime::fingerprint::Fingerprint;
use idem_runtime::key::KeyFormat;
use idem_runtime::protocol::Record;
use idem_runtime::store::__fuzz::strict;
use idem_runtime::store::StoredResponse;
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        "[a-zA-Z0-9 é\"\\\\]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// JSON values with floats (any finite `f64`, and the edges of their written form) and
/// integers beyond 2^53 and beyond 64 bits (which `serde_json` reads as floats).
fn json_value_with_floats() -> impl Strategy<Value = Value> {
    let edges = [
        "0.1",
        "1.0",
        "-0.0",
        "1e21",
        "1e-7",
        "5e-324",
        "1.7976931348623157e308",
        "333333333.33333329",
        "9007199254740993",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775809",
        "123456789012345678901234567890",
    ]
    .map(|text| serde_json::from_str::<Value>(text).expect("each edge is JSON"));
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        (-1e6..1e6_f64).prop_map(Value::from),
        prop::sample::select(edges.to_vec()),
        "[a-zA-Z0-9 é\"\\\\\u{0}-\u{1f}\u{e000}\u{ffff}😀/]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(("[a-zé😀\u{e000}]{1,4}", inner), 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Whether two numbers are equal as numbers: integers exactly, anything else as `f64`.
fn same_number(a: &Number, b: &Number) -> bool {
    match (a.as_i64(), b.as_i64(), a.as_u64(), b.as_u64()) {
        (Some(x), Some(y), _, _) => x == y,
        (_, _, Some(x), Some(y)) => x == y,
        _ if a.is_f64() || b.is_f64() => a.as_f64() == b.as_f64(),
        _ => false,
    }
}

/// Equality of values with numbers compared as numbers (the canonical form writes `1.0`
/// as `1`, which reads back as an integer).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => same_number(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Whether every object's members are in canonical order, UTF-16 code units (the value is
/// read with `preserve_order`, so in the order of the text).
fn sorted(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().all(sorted),
        Value::Object(map) => {
            let names: Vec<&String> = map.keys().collect();
            names
                .windows(2)
                .all(|w| w[0].encode_utf16().cmp(w[1].encode_utf16()) == Ordering::Less)
                && map.values().all(sorted)
        }
        _ => true,
    }
}

/// The key as a structured-field string, its canonical form: `"…"`, `\` and `"` escaped.
fn quoted(key: &str) -> String {
    format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Writes `value` as JSON with object members in reverse order, extra whitespace, and floats
/// in exponent form (`1.5e0`).
fn scrambled(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let members: Vec<String> = map
                .iter()
                .rev()
                .map(|(k, v)| format!(" {} :\n {} ", Value::from(k.as_str()), scrambled(v)))
                .collect();
            format!("{{ {} }}", members.join(" , "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(scrambled).collect();
            format!("[ {} ]", items.join(" ,\t"))
        }
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:e}"),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// Whether `text` is a structured-field string (`"…"`, with `\"` and `\\` escapes and no
/// other `"` or `\`) quoting a non-empty key.
fn quotes_a_key(text: &str) -> bool {
    let Some(inner) = text
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
    else {
        return false;
    };
    let mut chars = inner.chars();
    let mut len = 0;
    while let Some(c) = chars.next() {
        match c {
            '\\' if matches!(chars.next(), Some('"' | '\\')) => {}
            '\\' | '"' => return false,
            _ => {}
        }
        len += 1;
    }
    len > 0
}

#[test]
fn a_quoted_key_is_also_a_lenient_bare_key() {
    assert!(quotes_a_key("\"A\""));
    assert!(!quotes_a_key("\"\""));
    assert!(!quotes_a_key("\"a\"b\""));
    assert!(quotes_a_key("\"a\\\"b\""));
    let key = IdempotencyKey::parse(b"\"A\"", KeyFormat::Lenient).unwrap();
    assert_eq!(key.as_str(), "A");
    for text in ["\"a\\\"b\"", "\"a\\\\b\"", "\"a\"b\"", "\"\""] {
        assert_eq!(
            IdempotencyKey::parse(text.as_bytes(), KeyFormat::Lenient).is_ok(),
            quotes_a_key(text),
            "{text}"
        );
    }
}

proptest! {
    #[test]
    fn key_parsing_never_panics_and_accepts_only_valid_keys(raw in prop::collection::vec(any::<u8>(), 0..300)) {
        for format in [KeyFormat::Lenient, KeyFormat::Strict] {
            if let Ok(key) = IdempotencyKey::parse(&raw, format) {
                let k = key.as_str();
                prop_assert!(!k.is_empty() && k.len() <= 255);
                prop_assert!(k.bytes().all(|b| b.is_ascii_graphic()));
            }
        }
    }

    #[test]
    fn every_visible_ascii_key_round_trips(key in "[!-~]{1,255}") {
        // Lenient parsing takes a key without `"` or `\` as it is, and a well-formed quoted
        // one as the string it quotes.
        let bare_ok = !key.contains(['"', '\\']) || quotes_a_key(&key);
        let parsed = IdempotencyKey::parse(key.as_bytes(), KeyFormat::Lenient);
        prop_assert_eq!(parsed.is_ok(), bare_ok);
        let parsed = IdempotencyKey::parse(quoted(&key).as_bytes(), KeyFormat::Strict).unwrap();
        prop_assert_eq!(parsed.as_str(), key.as_str());
    }

    #[test]
    fn the_documents_pattern_is_exactly_what_the_parser_accepts(raw in key_header_value()) {
        for format in [KeyFormat::Lenient, KeyFormat::Strict] {
            let pattern = key_pattern(format);
            let accepted = IdempotencyKey::parse(raw.as_bytes(), format).is_ok();
            prop_assert_eq!(
                pattern.is_match(&raw),
                accepted,
                "{:?} in {:?}: the pattern and the parser disagree",
                raw,
                format
            );
        }
    }

    #[test]
    fn fingerprint_ignores_member_order_and_whitespace(value in json_value()) {
        let reparsed: Value = serde_json::from_str(&scrambled(&value)).unwrap();
        prop_assert_eq!(
            Fingerprint::of("op:v1", &value, &[]).unwrap(),
            Fingerprint::of("op:v1", &reparsed, &[]).unwrap()
        );
    }

    #[test]
    fn fingerprint_changes_with_any_value(value in json_value(), other in json_value()) {
        prop_assume!(value != other);
        prop_assert_ne!(
            Fingerprint::of("op:v1", &value, &[]).unwrap(),
            Fingerprint::of("op:v1", &other, &[]).unwrap()
        );
    }

    #[test]
    fn strict_is_lenient_less_bare_keys_and_whitespace_changes_nothing(raw in key_bytes()) {
        let lenient = IdempotencyKey::parse(&raw, KeyFormat::Lenient);
        let strict = IdempotencyKey::parse(&raw, KeyFormat::Strict);
        match &strict {
            Ok(key) => prop_assert_eq!(lenient.as_ref(), Ok(key)),
            Err(_) => prop_assert!(
                lenient.is_err() || raw.trim_ascii().first() != Some(&b'"'),
                "Strict refused a quoted key Lenient accepts"
            ),
        }
        let padded = [b" \t".as_slice(), &raw, b"\t "].concat();
        prop_assert_eq!(&IdempotencyKey::parse(&padded, KeyFormat::Lenient), &lenient);
        prop_assert_eq!(&IdempotencyKey::parse(&padded, KeyFormat::Strict), &strict);
    }

    #[test]
    fn an_accepted_key_reads_back_from_its_canonical_form(raw in key_bytes()) {
        for format in [KeyFormat::Lenient, KeyFormat::Strict] {
            let Ok(key) = IdempotencyKey::parse(&raw, format) else { continue };
            prop_assert_eq!(IdempotencyKey::new(key.as_str()), Ok(key.clone()));
            for other in [KeyFormat::Lenient, KeyFormat::Strict] {
                let back = IdempotencyKey::parse(quoted(key.as_str()).as_bytes(), other);
                prop_assert_eq!(back.as_ref(), Ok(&key));
            }
            let bare = IdempotencyKey::parse(key.as_str().as_bytes(), KeyFormat::Lenient);
            if key.as_str().contains(['"', '\\']) {
                // Bare keys have no quotes and no backslashes: a quote in front reads as a
                // quoted key (malformed, empty or another key), one inside is refused, and so
                // is a backslash. Never this key.
                prop_assert_ne!(bare.as_ref(), Ok(&key));
            } else {
                prop_assert_eq!(bare.as_ref(), Ok(&key));
            }
        }
    }

    #[test]
    fn canonical_form_reads_back_equal_and_is_a_fixed_point(value in json_value_with_floats()) {
        let canon = canonical_json(&value).unwrap();
        let back: Value = serde_json::from_slice(&canon).unwrap();
        prop_assert!(same(&back, &value), "{} read back as {}", value, back);
        prop_assert!(sorted(&back), "not sorted: {}", back);
        prop_assert!(!canon.iter().any(|b| b"\n\r\t".contains(b)), "whitespace in {:?}", canon);
        prop_assert_eq!(canonical_json(&back).unwrap(), canon);
    }

    #[test]
    fn fingerprint_ignores_order_whitespace_and_float_spelling(value in json_value_with_floats()) {
        let expected = Fingerprint::of("op:v1", &value, &[]).unwrap();
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        for text in [scrambled(&value), pretty] {
            let reparsed: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(Fingerprint::of("op:v1", &reparsed, &[]).unwrap(), expected, "{}", text);
        }
    }

    #[test]
    fn any_stored_response_replays_without_failing(
        status in any::<u16>(),
        headers in prop::collection::vec((header_text(), header_text()), 0..5),
        body in prop::collection::vec(any::<u8>(), 0..16),
    ) {
        let valid = headers
            .iter()
            .filter(|(n, v)| HeaderName::from_bytes(n.as_bytes()).is_ok() && HeaderValue::from_str(v).is_ok())
            .count();
        let record = Record::from_stored(StoredResponse { status, headers, body: Bytes::from(body.clone()) });
        let expected = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        prop_assert_eq!(record.status, expected);
        prop_assert_eq!(record.body.as_ref(), body.as_slice());
        prop_assert_eq!(record.headers.len(), valid);
    }

    #[test]
    fn a_record_replays_as_it_was_stored(
        status in 100..1000_u16,
        headers in prop::collection::vec(("[a-z][a-z0-9-]{0,6}", header_value()), 0..6),
        body in prop::collection::vec(any::<u8>(), 0..16),
    ) {
        let mut record = Record {
            status: StatusCode::from_u16(status).unwrap(),
            headers: HeaderMap::new(),
            body: Bytes::from(body),
        };
        let mut allow: Vec<HeaderName> = Vec::new();
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            if !allow.contains(&name) {
                allow.push(name.clone());
            }
            record.headers.append(name, HeaderValue::from_bytes(&value).unwrap());
        }
        // Through the columns: status, headers JSON, body.
        let stored = record.to_stored(&allow);
        let read = strict(i32::from(stored.status), Some(&stored.headers_json()), Some(stored.body.to_vec())).unwrap();
        prop_assert_eq!(&read, &stored);
        let back = Record::from_stored(read);
        prop_assert_eq!(back.status, record.status);
        prop_assert_eq!(&back.body, &record.body);
        // Values that are not visible ASCII are never stored.
        let mut visible = HeaderMap::new();
        for (name, value) in &record.headers {
            if value.to_str().is_ok() {
                visible.append(name.clone(), value.clone());
            }
        }
        prop_assert_eq!(back.headers, visible);
    }
}

/// Header values as bytes: visible ASCII, spaces, tabs and, now and then, a byte above 0x7f.
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop_oneof![8 => 0x20..0x7f_u8, 1 => Just(b'\t'), 1 => 0x80..=0xff_u8],
        0..8,
    )
}

/// Header names and values as a row may hold them: valid ones, and some that are not.
fn header_text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 :\t\n\"é-]{0,8}"
}

/// The documents' pattern of the header's value in `format`, compiled.
fn key_pattern(format: KeyFormat) -> &'static regex::Regex {
    static PATTERNS: std::sync::OnceLock<[regex::Regex; 2]> = std::sync::OnceLock::new();
    let [lenient, strict] = PATTERNS.get_or_init(|| {
        [KeyFormat::Lenient, KeyFormat::Strict].map(|f| {
            regex::Regex::new(idem_runtime::docs::contract::key_pattern(f)).expect("a pattern")
        })
    });
    match format {
        KeyFormat::Strict => strict,
        _ => lenient,
    }
}

/// Header values as a client could send them (without the surrounding whitespace, which is
/// not part of a field's value): drawn from the documents' own patterns, from near misses of
/// them, and from any visible ASCII.
fn key_header_value() -> impl Strategy<Value = String> {
    let from = |pattern: &str| {
        let unanchored = pattern.trim_start_matches('^').trim_end_matches('$');
        proptest::string::string_regex(unanchored).expect("a pattern proptest can draw from")
    };
    prop_oneof![
        3 => from(idem_runtime::docs::contract::KEY_PATTERN),
        2 => from(idem_runtime::docs::contract::LENIENT_KEY_PATTERN),
        3 => "\"([ -~]|\\\\[\"\\\\a]){0,12}\"(;[ ]?[a-zA-Z*0-9]{0,3}(=[ -~]{0,6})?){0,2}",
        2 => "[!-~]{0,20}",
        1 => "[!-~]{250,260}",
        1 => "[!-~]{8185,8200}",
    ]
    .prop_filter("a field value has no surrounding whitespace", |v| {
        v.trim_matches([' ', '\t']) == v
    })
}

/// Header values as a client sends them: quoted or bare keys, with escapes, parameters,
/// whitespace, and any bytes now and then.
fn key_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => "[ \t]{0,2}\"([ -!#-\\[\\]-~]|\\\\[\"\\\\a]){0,20}\"(;[a-z]=[0-9])?[ \t]{0,2}"
            .prop_map(String::into_bytes),
        2 => "[ \t]{0,2}[!-~]{0,20}[ \t]{0,2}".prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..300),
    ]
}
