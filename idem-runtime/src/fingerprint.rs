//! The request fingerprint: SHA-256 over the operation id and the canonical input.
//!
//! The *input* of an operation is what its extractors validated: the JSON or form body
//! (`body`), the path parameters (`path`) and the query string (`query`). Each part is
//! serialised with `serde` into a JSON value and the parts are gathered in one object,
//! `{"body": …, "path": …, "query": …}`. That object is written canonically: object keys
//! sorted, no whitespace. Key order and formatting of what the client sent therefore do not
//! change the fingerprint, while any change of a value does.
//!
//! Fields can be left out with the attribute's `exclude = ["body.note"]`: dotted paths from
//! the root of that object.

use std::fmt;

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// A SHA-256 fingerprint of one request's operation and input.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Fingerprints `input` for `operation_id`, leaving out the `exclude` paths.
    ///
    /// ```
    /// use idem_runtime::Fingerprint;
    /// use serde_json::json;
    ///
    /// let a = Fingerprint::of("POST /orders:v1", &json!({"sku": "A", "quantity": 2}), &[]).unwrap();
    /// let b = Fingerprint::of("POST /orders:v1", &json!({"quantity": 2, "sku": "A"}), &[]).unwrap();
    /// let c = Fingerprint::of("POST /orders:v1", &json!({"quantity": 3, "sku": "A"}), &[]).unwrap();
    /// assert_eq!(a, b);
    /// assert_ne!(a, c);
    /// ```
    ///
    /// # Errors
    /// When `input` cannot be serialised to JSON (a map with non-string keys, say).
    pub fn of(
        operation_id: &str,
        input: &impl Serialize,
        exclude: &[&str],
    ) -> Result<Self, serde_json::Error> {
        let mut value = serde_json::to_value(input)?;
        for path in exclude {
            remove_path(&mut value, path);
        }
        Ok(Self::of_value(operation_id, &value))
    }

    /// Fingerprints an already built JSON value, written canonically.
    #[must_use]
    pub fn of_value(operation_id: &str, value: &Value) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(operation_id.as_bytes());
        hasher.update([0]);
        // `serde_json::Map` is a `BTreeMap` (the `preserve_order` feature is not enabled), so
        // objects are written with sorted keys, and `to_writer` writes no whitespace.
        serde_json::to_writer(HashWriter(&mut hasher), value)
            .expect("writing a JSON value into a hasher cannot fail");
        Self(hasher.finalize().into())
    }

    /// Rebuilds a fingerprint read from the store.
    #[must_use]
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// The 32 bytes of the digest.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn remove_path(value: &mut Value, path: &str) {
    let mut segments = path.split('.').peekable();
    let mut current = value;
    while let Some(segment) = segments.next() {
        let Value::Object(map) = current else { return };
        if segments.peek().is_none() {
            map.remove(segment);
            return;
        }
        match map.get_mut(segment) {
            Some(next) => current = next,
            None => return,
        }
    }
}

/// One part of an operation's input: an extractor whose value is fingerprinted.
///
/// Implemented for axum's `Json`, `Form`, `Query` and `Path` and for [`crate::Json`]. A
/// custom extractor implements it and is marked `#[input]` in the handler's signature.
pub trait Input {
    /// Where the part sits in the canonical object: `"body"`, `"path"` or `"query"`.
    const PART: &'static str;
    /// The part as a JSON value.
    ///
    /// # Errors
    /// When the value cannot be serialised to JSON.
    fn to_value(&self) -> Result<Value, serde_json::Error>;
}

macro_rules! impl_input {
    ($part:literal => $($ty:ty),+) => {$(
        impl<T: Serialize> Input for $ty {
            const PART: &'static str = $part;
            fn to_value(&self) -> Result<Value, serde_json::Error> {
                serde_json::to_value(&self.0)
            }
        }
    )+};
}

impl_input!("body" => axum::Json<T>, axum::Form<T>, crate::http::Json<T>);
impl_input!("query" => axum::extract::Query<T>);
impl_input!("path" => axum::extract::Path<T>);

/// Object-safe view of [`Input`], so the expansion can pass a slice of parts.
#[doc(hidden)]
pub trait DynInput {
    fn part(&self) -> &'static str;
    fn value(&self) -> Result<Value, serde_json::Error>;
}

impl<T: Input> DynInput for T {
    fn part(&self) -> &'static str {
        T::PART
    }
    fn value(&self) -> Result<Value, serde_json::Error> {
        self.to_value()
    }
}

/// Fingerprints the input parts of one request.
pub(crate) fn of_parts(
    operation_id: &str,
    parts: &[&dyn DynInput],
    exclude: &[&str],
) -> Result<Fingerprint, serde_json::Error> {
    let mut object = Map::new();
    for part in parts {
        object.insert(part.part().to_owned(), part.value()?);
    }
    let mut value = Value::Object(object);
    for path in exclude {
        remove_path(&mut value, path);
    }
    Ok(Fingerprint::of_value(operation_id, &value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fp(value: &Value, exclude: &[&str]) -> Fingerprint {
        Fingerprint::of("op:v1", value, exclude).unwrap()
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: Value = serde_json::from_str(r#"{"b": {"y": 1, "x": [1, 2]}, "a": "s"}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":"s","b":{"x":[1,2],"y":1}}"#).unwrap();
        assert_eq!(fp(&a, &[]), fp(&b, &[]));
    }

    #[test]
    fn values_array_order_and_operation_matter() {
        let base = fp(&json!({"a": [1, 2]}), &[]);
        assert_ne!(base, fp(&json!({"a": [2, 1]}), &[]));
        assert_ne!(base, fp(&json!({"a": [1, 2], "b": null}), &[]));
        assert_ne!(
            base,
            Fingerprint::of("op:v2", &json!({"a": [1, 2]}), &[]).unwrap()
        );
    }

    #[test]
    fn canonical_form_is_stable() {
        // Pinned: a change of the canonical form silently turns every retry into a 422.
        let digest = fp(&json!({"quantity": 2, "sku": "A-1"}), &[]);
        let mut expected = Sha256::new();
        expected.update(b"op:v1\0{\"quantity\":2,\"sku\":\"A-1\"}");
        assert_eq!(digest.as_bytes()[..], expected.finalize()[..]);
    }

    #[test]
    fn excluded_paths_are_left_out() {
        let with_note = json!({"body": {"sku": "A", "meta": {"note": "x", "n": 1}}});
        let other_note = json!({"body": {"sku": "A", "meta": {"note": "y", "n": 1}}});
        assert_ne!(fp(&with_note, &[]), fp(&other_note, &[]));
        assert_eq!(
            fp(&with_note, &["body.meta.note"]),
            fp(&other_note, &["body.meta.note"])
        );
        // A path that does not exist changes nothing.
        assert_eq!(fp(&with_note, &["body.nope.x"]), fp(&with_note, &[]));
    }

    #[test]
    fn parts_are_keyed_by_kind() {
        let body = axum::Json(json!({"sku": "A"}));
        let path = axum::extract::Path(7_u32);
        let both = of_parts("op:v1", &[&body, &path], &[]).unwrap();
        assert_eq!(both, fp(&json!({"body": {"sku": "A"}, "path": 7}), &[]));
    }
}
