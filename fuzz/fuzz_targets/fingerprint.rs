//! The canonical form (RFC 8785, integers digit for digit) and the fingerprint of arbitrary
//! bytes read as JSON, as a string and as floats.
//!
//! Invariants:
//! - writing never panics; every `serde_json::Value` has a canonical form, every finite
//!   `f64` too, and NaN and the infinities are errors;
//! - the canonical form is JSON that parses back to an equal value (numbers compared as
//!   numbers: `1.0` is written `1`), and is a fixed point: written again, it is unchanged;
//! - it is canonical: object members sorted by their names as UTF-16 code units, no
//!   whitespace, strings escaped as RFC 8785 says (for a value without floats it is exactly
//!   `serde_json`'s compact writing of the sorted value);
//! - the fingerprint is SHA-256 of the operation id, a zero byte and the canonical form;
//! - order and format independence: the value written by `serde_json` (compact, pretty) and
//!   by a writer that reverses member order, adds whitespace and spells strings and floats
//!   differently, parses to a value with the same fingerprint.

#![no_main]

use std::cmp::Ordering;
use std::fmt::Write as _;

use idem_runtime::__fuzz::canonical_json;
use idem_runtime::fingerprint::Fingerprint;
use libfuzzer_sys::fuzz_target;
use serde_json::{Number, Value};
use sha2::{Digest, Sha256};

const OP: &str = "POST /orders:v1";

/// Whether two numbers are equal as numbers: integers exactly, anything else as `f64`.
fn same_number(a: &Number, b: &Number) -> bool {
    match (a.as_i64(), b.as_i64(), a.as_u64(), b.as_u64()) {
        (Some(x), Some(y), _, _) => x == y,
        (_, _, Some(x), Some(y)) => x == y,
        _ if (a.is_f64() || b.is_f64()) => a.as_f64() == b.as_f64(),
        _ => false, // one i64 below zero, one u64 above i64::MAX
    }
}

/// Equality of values with numbers compared as numbers.
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

fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

/// Asserts that every object's members are in canonical order (parsed with
/// `preserve_order`, so in the order of the text).
fn assert_sorted(value: &Value) {
    match value {
        Value::Array(items) => items.iter().for_each(assert_sorted),
        Value::Object(map) => {
            let names: Vec<&String> = map.keys().collect();
            for pair in names.windows(2) {
                let order = pair[0].encode_utf16().cmp(pair[1].encode_utf16());
                assert_eq!(order, Ordering::Less, "members out of order: {pair:?}");
            }
            map.values().for_each(assert_sorted);
        }
        _ => {}
    }
}

/// `value` written another way: members in reverse order, whitespace everywhere, strings
/// with every non-ASCII character and `/` escaped, floats in Rust's exponent form.
fn scrambled(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            out.push_str("{\n");
            for (i, (name, v)) in map.iter().rev().enumerate() {
                if i > 0 {
                    out.push_str(" ,\r\n");
                }
                string(name, out);
                out.push_str(" :\t");
                scrambled(v, out);
            }
            out.push_str(" }");
        }
        Value::Array(items) => {
            out.push_str("[ ");
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str("\t, ");
                }
                scrambled(v, out);
            }
            out.push_str(" ]");
        }
        Value::String(s) => string(s, out),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => {
                let _ = write!(out, "{f:e}");
            }
            _ => {
                let _ = write!(out, "{n}");
            }
        },
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' => out.push_str("\\/"),
            ' '..='~' => out.push(c),
            _ => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    let _ = write!(out, "\\u{unit:04X}");
                }
            }
        }
    }
    out.push('"');
}

fn fingerprint(value: &Value) -> Fingerprint {
    Fingerprint::of(OP, value, &[]).expect("every serde_json::Value has a fingerprint")
}

fuzz_target!(|data: &[u8]| {
    // Every 8 bytes as a float.
    for chunk in data.chunks_exact(8) {
        let mut bits = [0; 8];
        bits.copy_from_slice(chunk);
        let v = f64::from_le_bytes(bits);
        match canonical_json(&v) {
            Ok(text) => {
                assert!(v.is_finite(), "{v} written as {text:?}");
                let back: f64 = serde_json::from_slice(&text).expect("a float's form is JSON");
                assert_eq!(back, v, "{text:?}");
            }
            Err(_) => assert!(!v.is_finite(), "{v} refused"),
        }
    }

    // The bytes as one string.
    if let Ok(text) = std::str::from_utf8(data) {
        let canon = canonical_json(text).expect("every string has a canonical form");
        let back: String = serde_json::from_slice(&canon).expect("a string's form is JSON");
        assert_eq!(back, text);
        assert_eq!(
            canon,
            serde_json::to_vec(text).expect("a string serialises")
        );
    }

    // The bytes as JSON.
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let canon = canonical_json(&value).expect("every serde_json::Value has a canonical form");
    let back: Value = serde_json::from_slice(&canon).expect("the canonical form is JSON");
    assert!(same(&back, &value), "{value} read back as {back}");
    assert_sorted(&back);
    assert_eq!(
        canonical_json(&back).ok().as_ref(),
        Some(&canon),
        "not a fixed point"
    );
    if !has_float(&value) {
        let compact = serde_json::to_vec(&back).expect("a value serialises");
        assert_eq!(canon, compact);
    }

    let fp = fingerprint(&value);
    let mut hasher = Sha256::new();
    hasher.update(OP.as_bytes());
    hasher.update([0]);
    hasher.update(&canon);
    assert_eq!(fp.as_bytes()[..], hasher.finalize()[..]);

    let mut other = String::new();
    scrambled(&value, &mut other);
    let texts = [
        serde_json::to_string(&value).expect("a value serialises"),
        serde_json::to_string_pretty(&value).expect("a value serialises"),
        other,
    ];
    for text in texts {
        let reparsed: Value = serde_json::from_str(&text).expect("rewritten JSON is JSON");
        assert_eq!(fingerprint(&reparsed), fp, "{text}");
    }
});
