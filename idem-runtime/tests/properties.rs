//! Properties of the pure parts: no input makes them panic, and the fingerprint depends on
//! values, never on the order or formatting of what the client sent.

use idem_runtime::IdempotencyKey;
use idem_runtime::fingerprint::Fingerprint;
use idem_runtime::key::KeyFormat;
use proptest::prelude::*;
use serde_json::{Map, Value};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
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

/// Writes `value` as JSON with object members in reverse order and extra whitespace.
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
        other => other.to_string(),
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
        let bare_ok = !key.contains('"');
        let parsed = IdempotencyKey::parse(key.as_bytes(), KeyFormat::Lenient);
        prop_assert_eq!(parsed.is_ok(), bare_ok);
        let quoted = format!("\"{}\"", key.replace('\\', "\\\\").replace('"', "\\\""));
        let parsed = IdempotencyKey::parse(quoted.as_bytes(), KeyFormat::Strict).unwrap();
        prop_assert_eq!(parsed.as_str(), key.as_str());
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
}
