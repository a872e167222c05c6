//! The field digests' tests: what is reported against a model of the rule, stored bytes
//! that never panic, the bounds.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::walk::MAX_DEPTH;
use super::*;
use crate::canonical;

fn canonical(value: &Value) -> Vec<u8> {
    canonical::to_vec(value).unwrap()
}

/// Every field of `value` (a request) cut at `depth`, with its canonical value: the
/// module's rule, written over `serde_json` values.
fn leaves(value: &Value, name: &str, level: u8, depth: u8, out: &mut BTreeMap<String, Vec<u8>>) {
    let children: Vec<(String, &Value)> = match value {
        Value::Object(map) if !map.is_empty() && level < depth => map
            .iter()
            .map(|(k, v)| (k.replace('~', "~0").replace('/', "~1"), v))
            .collect(),
        Value::Array(items) if !items.is_empty() && level < depth => items
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        _ => {
            out.insert(name.to_owned(), canonical(value));
            return;
        }
    };
    for (key, child) in children {
        leaves(child, &format!("{name}/{key}"), level + 1, depth, out);
    }
}

fn expected(a: &Value, b: &Value, depth: u8) -> Mismatch {
    let (mut left, mut right) = (BTreeMap::new(), BTreeMap::new());
    for (part, value) in a.as_object().unwrap() {
        leaves(value, &format!("/{part}"), 1, depth, &mut left);
    }
    for (part, value) in b.as_object().unwrap() {
        leaves(value, &format!("/{part}"), 1, depth, &mut right);
    }
    Mismatch {
        changed: right
            .iter()
            .filter(|(k, v)| left.get(*k).is_some_and(|l| l != *v))
            .map(|(k, _)| k.clone())
            .collect(),
        added: right
            .keys()
            .filter(|k| !left.contains_key(*k))
            .cloned()
            .collect(),
        removed: left
            .keys()
            .filter(|k| !right.contains_key(*k))
            .cloned()
            .collect(),
        omitted: 0,
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-5i64..5).prop_map(|n| json!(n)),
        "[a-c/~\"é]{0,2}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-c/~]{1,2}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

fn request() -> impl Strategy<Value = Value> {
    (json_value(), json_value()).prop_map(|(body, query)| json!({"body": body, "query": query}))
}

proptest! {
    /// Stored bytes are read without a panic, whatever they are: random, or a valid
    /// encoding with one byte changed or cut short; what reads back compares.
    #[test]
    fn stored_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..96),
        a in request(),
        at in any::<usize>(),
        byte in any::<u8>(),
    ) {
        for bytes in [bytes, {
            let mut valid = FieldDigests::of_canonical(&canonical(&a), [1; 8]).unwrap().to_bytes();
            let at = at % valid.len();
            valid[at] = byte;
            valid
        }] {
            for len in [bytes.len(), bytes.len() / 2] {
                if let Some(stored) = FieldDigests::from_bytes(&bytes[..len]) {
                    let _ = stored.compare(&canonical(&a));
                    let _ = stored.compare_body(&a, &[]);
                }
            }
        }
    }

    /// Every name reported differs between the two requests, and every field whose value
    /// differs (an absent member reading as `null`) is reported, at its pointer, at one above
    /// it, or (an object emptied) at its members.
    #[test]
    fn reports_the_fields_that_differ(a in request(), b in request(), salt in any::<[u8; 8]>()) {
        let stored = FieldDigests::of_canonical(&canonical(&a), salt).unwrap();
        // (Small requests: never cut short, never past the report's bound here.)
        prop_assume!(stored.depth == MAX_DEPTH);
        let mismatch = stored.compare(&canonical(&b)).unwrap();
        prop_assume!(mismatch.omitted == 0);
        // An absent member and a member's `null` read alike.
        fn without_nulls(value: Value) -> Value {
            match value {
                Value::Object(map) => Value::Object(
                    map.into_iter()
                        .filter(|(_, v)| !v.is_null())
                        .map(|(k, v)| (k, without_nulls(v)))
                        .collect(),
                ),
                Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
                other => other,
            }
        }
        let at = |v: &Value, name: &str| without_nulls(v.pointer(name).cloned().unwrap_or(Value::Null));
        let reported: Vec<&String> =
            mismatch.changed.iter().chain(&mismatch.added).chain(&mismatch.removed).collect();
        for name in &reported {
            prop_assert_ne!(a.pointer(name), b.pointer(name), "{}", name);
        }
        let want = expected(&a, &b, stored.depth);
        for name in want.changed.iter().chain(&want.added).chain(&want.removed) {
            if at(&a, name) == at(&b, name) {
                continue;
            }
            let covered = reported.iter().any(|r| {
                name == *r || name.starts_with(&format!("{r}/")) || r.starts_with(&format!("{name}/"))
            });
            prop_assert!(covered, "{} in {:?}", name, mismatch);
        }
    }

    /// Reordering an object's members, or reading it back from its bytes, reports nothing.
    #[test]
    fn reordering_reports_nothing(a in request(), salt in any::<[u8; 8]>()) {
        let stored = FieldDigests::of_canonical(&canonical(&a), salt).unwrap();
        let read = FieldDigests::from_bytes(&stored.to_bytes()).unwrap();
        prop_assert_eq!(&read, &stored);
        let text = serde_json::to_string(&a).unwrap();
        let reversed: Value = serde_json::from_str(&reverse_members(&text)).unwrap();
        prop_assert!(read.compare(&canonical(&reversed)).unwrap().is_empty());
    }
}

/// `text` with the members of its objects in reverse order.
fn reverse_members(text: &str) -> String {
    fn reverse(value: Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut members: Vec<_> = map.into_iter().collect();
                members.reverse();
                Value::Object(members.into_iter().map(|(k, v)| (k, reverse(v))).collect())
            }
            Value::Array(items) => Value::Array(items.into_iter().map(reverse).collect()),
            other => other,
        }
    }
    reverse(serde_json::from_str(text).unwrap()).to_string()
}

#[test]
fn digests_of_the_first_format_are_still_read() {
    let first = canonical(&json!({"body": {"amount": 100, "note": "a"}}));
    let retry = canonical(&json!({"body": {"amount": 101, "memo": "a"}}));
    let v1 = FieldDigests::of_canonical_as(&first, [9; 8], 1).unwrap();
    let stored = FieldDigests::from_bytes(&v1.to_bytes()).unwrap();
    assert_eq!(stored, v1);
    let mismatch = stored.compare(&retry).unwrap();
    assert_eq!(mismatch.changed, ["/body/amount"]);
    assert_eq!(mismatch.added, ["/body/memo"]);
    assert_eq!(mismatch.removed, ["/body/note"]);
    assert!(stored.compare(&first).unwrap().is_empty());
    // The two formats make other digests of the same request.
    let v2 = FieldDigests::of_canonical(&first, [9; 8]).unwrap();
    assert_ne!(v1.to_bytes()[1..], v2.to_bytes()[1..]);
    assert!(FieldDigests::from_bytes(&[3, 0]).is_none());
}

#[test]
fn a_body_alone_is_compared_under_body_without_excluded_fields() {
    // Stored as the fingerprint keeps it: `body.t` left out already.
    let first = json!({"body": {"a": 1, "n": {"x": 1}}, "path": {"id": "7"}});
    let stored = FieldDigests::of_canonical(&canonical(&first), [3; 8]).unwrap();
    let body = json!({"a": 1, "t": 6, "n": {"x": 2}});
    let mismatch = stored.compare_body(&body, &["body.t"]);
    assert_eq!(mismatch.changed, ["/body/n/x"]);
    assert!(mismatch.added.is_empty(), "{mismatch:?}");
    // A member the first request did not have is a name the client chose: named by the
    // nearest member the first request had.
    let body = json!({"a": 1, "n": {"x": 1, "4111111111111111": 2}, "b": {"c": true}});
    let mismatch = stored.compare_body(&body, &["body.t"]);
    assert_eq!(names(&mismatch), [vec!["/body", "/body/n"], vec![], vec![]]);
    // `/path/id` is not reported removed: a body does not tell it.
    assert!(mismatch.removed.is_empty(), "{mismatch:?}");
    assert!(
        stored
            .compare_body(&json!({"a": 1, "t": 7, "n": {"x": 1}}), &["body.t"])
            .is_empty()
    );
}

#[test]
fn past_the_bound_a_level_is_one_field() {
    let items: Vec<Value> = (0..40)
        .map(|i| json!({"sku": format!("s{i}"), "qty": 1}))
        .collect();
    let a = json!({"body": {"amount": 5, "items": items}});
    let stored = FieldDigests::of_canonical(&canonical(&a), [1; 8]).unwrap();
    assert!(
        stored.read.fields.len() <= MAX_FIELDS,
        "{}",
        stored.read.fields.len()
    );
    assert!(
        stored.read.fields.contains_key("/body/items/3"),
        "{:?}",
        stored.names().collect::<Vec<_>>()
    );
    let mut b = a.clone();
    b["body"]["items"][3]["qty"] = json!(2);
    let mismatch = stored.compare(&canonical(&b)).unwrap();
    assert_eq!(mismatch.changed, ["/body/items/3"]);
    assert!(mismatch.added.is_empty() && mismatch.removed.is_empty());
}

#[test]
fn at_most_the_bound_of_names() {
    let a = json!({"body": (0..30).map(|i| (format!("f{i:02}"), json!(i))).collect::<Map<_, _>>()});
    let b =
        json!({"body": (0..30).map(|i| (format!("f{i:02}"), json!(i + 1))).collect::<Map<_, _>>()});
    let stored = FieldDigests::of_canonical(&canonical(&a), [2; 8]).unwrap();
    let mismatch = stored.compare(&canonical(&b)).unwrap();
    assert_eq!(mismatch.changed.len(), MAX_REPORTED);
    assert_eq!(mismatch.omitted, 30 - MAX_REPORTED);
}

#[test]
fn names_are_json_pointers_and_values_never_kept() {
    let a = json!({"body": {"a/b": {"c~d": "secret-value-1234"}}, "path": {"id": 7}});
    let stored = FieldDigests::of_canonical(&canonical(&a), [3; 8]).unwrap();
    assert_eq!(
        stored.names().collect::<Vec<_>>(),
        ["/body/a~1b/c~0d", "/path/id"]
    );
    let bytes = stored.to_bytes();
    assert!(!bytes.windows(6).any(|w| w == b"secret"));
    assert_eq!(FieldDigests::from_bytes(&bytes[..bytes.len() - 1]), None);
    assert!(FieldDigests::of_canonical(b"{\"body\":", [0; 8]).is_err());
}

/// The canonical request of a handler with a typed body `value`, as the runtime keeps it:
/// with its maps noted.
fn kept<T: serde::Serialize>(value: &T) -> Vec<u8> {
    let body = axum::Json(value);
    crate::fingerprint::of_parts_kept("op:v1", &[&body], &[])
        .unwrap()
        .1
}

fn names(mismatch: &Mismatch) -> [Vec<&str>; 3] {
    fn list(l: &[String]) -> Vec<&str> {
        l.iter().map(String::as_str).collect()
    }
    [
        list(&mismatch.changed),
        list(&mismatch.added),
        list(&mismatch.removed),
    ]
}

#[test]
fn an_array_whose_length_changed_is_changed_at_its_pointer() {
    let a = json!({"body": {"items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}]}});
    let stored = FieldDigests::of_canonical(&canonical(&a), [4; 8]).unwrap();
    let none: Vec<&str> = Vec::new();
    for items in [json!([]), json!([{"sku": "a", "qty": 1}]), json!([1, 2, 3])] {
        let b = json!({"body": {"items": items}});
        let mismatch = stored.compare(&canonical(&b)).unwrap();
        assert_eq!(
            names(&mismatch),
            [vec!["/body/items"], none.clone(), none.clone()]
        );
    }
    // The same length: the element's field.
    let b = json!({"body": {"items": [{"sku": "a", "qty": 1}, {"sku": "c", "qty": 2}]}});
    let mismatch = stored.compare(&canonical(&b)).unwrap();
    assert_eq!(mismatch.changed, ["/body/items/1/sku"]);
    // Emptied first, filled after.
    let empty = FieldDigests::of_canonical(&canonical(&json!({"body": {"items": []}})), [4; 8]);
    let mismatch = empty.unwrap().compare(&canonical(&a)).unwrap();
    assert_eq!(names(&mismatch), [vec!["/body/items"], none.clone(), none]);
}

#[derive(serde::Serialize)]
struct Payment {
    amount: u32,
    note: Option<String>,
    lines: Option<Vec<u8>>,
    metadata: std::collections::BTreeMap<String, u32>,
}

fn payment(note: Option<&str>, lines: Option<Vec<u8>>, metadata: &[(&str, u32)]) -> Payment {
    Payment {
        amount: 5,
        note: note.map(str::to_owned),
        lines,
        metadata: metadata.iter().map(|&(k, v)| (k.to_owned(), v)).collect(),
    }
}

#[test]
fn a_member_left_out_is_removed_and_one_sent_again_added() {
    let first = payment(Some("n"), Some(vec![1]), &[]);
    let stored = FieldDigests::of_canonical(&kept(&first), [5; 8]).unwrap();
    let bare = payment(None, None, &[]);
    let mismatch = stored.compare(&kept(&bare)).unwrap();
    assert_eq!(
        mismatch.removed,
        ["/body/lines", "/body/note"],
        "{mismatch:?}"
    );
    assert!(mismatch.changed.is_empty() && mismatch.added.is_empty());
    let stored = FieldDigests::of_canonical(&kept(&bare), [5; 8]).unwrap();
    let mismatch = stored.compare(&kept(&first)).unwrap();
    assert_eq!(
        mismatch.added,
        ["/body/lines", "/body/note"],
        "{mismatch:?}"
    );
    assert!(mismatch.changed.is_empty() && mismatch.removed.is_empty());
    // A body read as JSON, without the members at all: they are not named.
    let mismatch = stored.compare_body(&json!({"amount": 6, "metadata": {}}), &[]);
    assert_eq!(names(&mismatch), [vec!["/body/amount"], vec![], vec![]]);
}

#[test]
fn a_map_is_named_never_its_members() {
    let secret = "4111111111111111";
    let first = payment(None, None, &[(secret, 1), ("b", 2)]);
    let stored = FieldDigests::of_canonical(&kept(&first), [6; 8]).unwrap();
    for metadata in [
        vec![(secret, 2), ("b", 2)],
        vec![(secret, 1)],
        vec![],
        vec![(secret, 1), ("b", 2), ("c/~", 3)],
    ] {
        let mismatch = stored
            .compare(&kept(&payment(None, None, &metadata)))
            .unwrap();
        assert_eq!(
            mismatch.changed,
            ["/body/metadata"],
            "{metadata:?}: {mismatch:?}"
        );
        assert!(mismatch.added.is_empty() && mismatch.removed.is_empty());
    }
    // A refused body, read as JSON: the first request's maps.
    let body = json!({"amount": 5, "metadata": {secret: 7}});
    let mismatch = stored.compare_body(&body, &[]);
    assert_eq!(names(&mismatch), [vec!["/body/metadata"], vec![], vec![]]);
    // A map is one field: stored bytes keep where the maps are, never a member's name.
    assert_eq!(
        stored.names().collect::<Vec<_>>(),
        [
            "/body/amount",
            "/body/lines",
            "/body/metadata",
            "/body/note"
        ]
    );
    let bytes = stored.to_bytes();
    assert!(!bytes.windows(4).any(|w| w == b"4111"));
    assert_eq!(FieldDigests::from_bytes(&bytes), Some(stored));
}

#[test]
fn digests_of_the_second_format_are_still_read() {
    let first = canonical(&json!({"body": {"amount": 100, "items": [1, 2]}}));
    let v2 = FieldDigests::of_canonical_as(&first, [9; 8], 2).unwrap();
    let bytes = v2.to_bytes();
    assert_eq!(bytes[0], 2);
    let stored = FieldDigests::from_bytes(&bytes).unwrap();
    assert_eq!(stored, v2);
    let retry = canonical(&json!({"body": {"amount": 101, "items": [1, 2]}}));
    assert_eq!(stored.compare(&retry).unwrap().changed, ["/body/amount"]);
    assert!(stored.compare(&first).unwrap().is_empty());
}

#[test]
fn a_member_left_out_whole_is_one_name_and_an_emptied_object_names_its_members() {
    let a = json!({"body": {"a": 1, "meta": {"x": 1, "y": [1]}}});
    let stored = FieldDigests::of_canonical(&canonical(&a), [7; 8]).unwrap();
    let mismatch = stored
        .compare(&canonical(&json!({"body": {"a": 1}})))
        .unwrap();
    assert_eq!(names(&mismatch), [vec![], vec![], vec!["/body/meta"]]);
    let mismatch = stored.compare(&canonical(&json!({"body": {}}))).unwrap();
    assert_eq!(
        names(&mismatch),
        [vec![], vec![], vec!["/body/a", "/body/meta"]]
    );
    let mismatch = stored
        .compare(&canonical(&json!({"body": {"a": 1, "meta": "x"}})))
        .unwrap();
    assert_eq!(names(&mismatch), [vec!["/body/meta"], vec![], vec![]]);
}
