//! Which fields of a request differ from the request a key was first used with, without
//! keeping either request: a short digest per field of the canonical request, compared by
//! field name.
//!
//! The canonical request is the fingerprint's ([`crate::fingerprint`]): `{"body": …,
//! "path": …, "query": …}` in RFC 8785 form, fields left out by the attribute's `exclude`
//! already gone. Each field is named by its JSON pointer (RFC 6901) from that root:
//! `/body/amount`, `/body/items/0/sku`, `/path/id`, `/headers/x-merchant`. A field is a
//! value that is not an object or an array (a string, a number, `true`, `false`, `null`), or
//! an empty object or array.
//!
//! [`FieldDigests`] keeps, for each field, [`DIGEST_LEN`] bytes of a SipHash-1-3 keyed with
//! a salt of its own over the field's name and its canonical value (rows written in the
//! first format, a salted SHA-256, are still read): the value itself is never kept, and
//! equal values at two fields, or in two keys, do not show as equal. At most [`MAX_FIELDS`]
//! fields are kept: a request with more is cut at the deepest level that fits, each object or
//! array at that level kept as one field (its digest covers everything under it), so a change
//! below it is reported as a change of it. [`FieldDigests::compare`] reads a new request
//! against them: the fields whose values changed, those it adds, those it no longer has, at
//! most [`MAX_REPORTED`] names in all.
//!
//! ```
//! use idem_runtime::fields::FieldDigests;
//!
//! let first = br#"{"body":{"amount":100,"currency":"EUR","note":"a"}}"#;
//! let retry = br#"{"body":{"amount":101,"currency":"EUR","memo":"a"}}"#;
//! let stored = FieldDigests::of_canonical(first, [7; 8]).unwrap();
//! let mismatch = stored.compare(retry).unwrap();
//! assert_eq!(mismatch.changed, ["/body/amount"]);
//! assert_eq!(mismatch.added, ["/body/memo"]);
//! assert_eq!(mismatch.removed, ["/body/note"]);
//! assert_eq!(mismatch.omitted, 0);
//! ```
//!
//! A digest of [`DIGEST_LEN`] bytes tells two values apart but for one chance in 2^48; it is
//! salted, not keyed by a secret: someone who reads the row and guesses a field's value can
//! check the guess, as with the fingerprint itself.

use std::collections::BTreeMap;
use std::hash::Hasher as _;

use sha2::{Digest, Sha256};
use siphasher::sip::SipHasher13;

/// The most fields kept per request.
pub const MAX_FIELDS: usize = 64;

/// The most field names a [`Mismatch`] reports, over its three lists.
pub const MAX_REPORTED: usize = 16;

/// Bytes of each field's digest.
pub const DIGEST_LEN: usize = 6;

/// The longest field name kept, in bytes: a request whose fields' names are longer is cut
/// at a shallower level.
pub const MAX_NAME_LEN: usize = 256;

/// The version byte [`FieldDigests::to_bytes`] writes: 2, digests by SipHash-1-3. Version 1
/// (SHA-256) is still read.
const VERSION: u8 = 2;

/// SipHash's second key word: the salt is the first.
const SIP_K1: u64 = u64::from_le_bytes(*b"idem-fd2");

/// The longest canonical request read in one pass: too short to hold more than
/// [`MAX_FIELDS`] fields, names longer than [`MAX_NAME_LEN`] or more than [`MAX_DEPTH`]
/// levels, it is never cut, so the pass that chooses the level is skipped.
const NEVER_CUT: usize = 64;

/// The deepest level a request is read to.
const MAX_DEPTH: u8 = 32;

/// The digests of one request's fields (see the [module](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDigests {
    /// The format: how each digest was made (see [`VERSION`]).
    version: u8,
    /// The level fields were cut at: objects and arrays this deep are one field.
    depth: u8,
    salt: [u8; 8],
    /// By name, in order.
    fields: BTreeMap<String, [u8; DIGEST_LEN]>,
}

/// How a request differs from the one a key was first used with: field names (JSON
/// pointers), sorted, never a value.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Mismatch {
    /// Fields both have, with other values.
    pub changed: Vec<String>,
    /// Fields only the new request has.
    pub added: Vec<String>,
    /// Fields only the first request had.
    pub removed: Vec<String>,
    /// How many names were left out past [`MAX_REPORTED`]; not written when none were.
    #[serde(skip_serializing_if = "is_zero")]
    pub omitted: usize,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Mismatch {
    /// Whether no field differs.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
            && self.added.is_empty()
            && self.removed.is_empty()
            && self.omitted == 0
    }
}

/// A canonical request that does not read as canonical JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("not a canonical JSON request at byte {0}")]
pub struct NotCanonical(usize);

impl FieldDigests {
    /// The digests of `canonical`, the canonical bytes of a request, salted with `salt`: cut
    /// at the deepest level that keeps at most [`MAX_FIELDS`] fields.
    ///
    /// # Errors
    /// When `canonical` is not JSON as the canonical writer writes it.
    pub fn of_canonical(canonical: &[u8], salt: [u8; 8]) -> Result<Self, NotCanonical> {
        Self::of_canonical_as(canonical, salt, VERSION)
    }

    /// [`Self::of_canonical`], in the format `version`.
    fn of_canonical_as(canonical: &[u8], salt: [u8; 8], version: u8) -> Result<Self, NotCanonical> {
        // One pass counts what each level would keep; one more hashes the level chosen.
        let depth = if canonical.len() <= NEVER_CUT {
            MAX_DEPTH
        } else {
            let mut shape = Shape::default();
            let mut walk = Walk::new(canonical, MAX_DEPTH, version, &salt, Some(&mut shape));
            walk.value(0)?;
            walk.end()?;
            shape.depth()
        };
        let fields = digests(canonical, depth, version, &salt)?;
        Ok(Self {
            version,
            depth,
            salt,
            fields,
        })
    }

    /// How `canonical`, the canonical bytes of another request, differs from the request
    /// these digests are of.
    ///
    /// # Errors
    /// When `canonical` is not JSON as the canonical writer writes it.
    pub fn compare(&self, canonical: &[u8]) -> Result<Mismatch, NotCanonical> {
        let new = digests(canonical, self.depth, self.version, &self.salt)?;
        Ok(self.differences(&new, |_| true))
    }

    /// How `body`, a request body alone, differs from the body of the request these digests
    /// are of. Only the fields under `/body` are compared: a body does not tell the path,
    /// query or headers of its request. The body is read as JSON, not as the handler's type
    /// would read it: a field the type ignores or fills with a default shows as added or
    /// removed. `exclude` is the operation's `fingerprint_exclude` (`body.timestamp`): the
    /// fields it names were never digested and are not compared.
    ///
    /// ```
    /// use idem_runtime::fields::FieldDigests;
    ///
    /// let first = br#"{"body":{"amount":100,"note":"a"},"path":{"id":"7"}}"#;
    /// let stored = FieldDigests::of_canonical(first, [7; 8]).unwrap();
    /// let mismatch = stored.compare_body(&serde_json::json!({"amount": 101}), &[]);
    /// assert_eq!(mismatch.changed, ["/body/amount"]);
    /// assert_eq!(mismatch.removed, ["/body/note"]);
    /// assert!(mismatch.added.is_empty());
    /// ```
    #[must_use]
    pub fn compare_body(&self, body: &serde_json::Value, exclude: &[&str]) -> Mismatch {
        #[derive(serde::Serialize)]
        struct Request<'a> {
            body: &'a serde_json::Value,
        }
        let in_body = |name: &str| name == "/body" || name.starts_with("/body/");
        let mut canonical = Vec::new();
        let exclude = crate::canonical::Exclude::new(exclude);
        // A JSON value always writes canonically, and canonical bytes always read back.
        let new = crate::canonical::write(&Request { body }, &exclude, &mut canonical)
            .ok()
            .and_then(|()| digests(&canonical, self.depth, self.version, &self.salt).ok())
            .unwrap_or_default();
        self.differences(&new, in_body)
    }

    /// The fields of `new` that differ from these, among the names `compared` keeps, at most
    /// [`MAX_REPORTED`] of them.
    fn differences(
        &self,
        new: &BTreeMap<String, [u8; DIGEST_LEN]>,
        compared: impl Fn(&str) -> bool,
    ) -> Mismatch {
        let mut changed = Vec::new();
        let mut added = Vec::new();
        for (name, digest) in new {
            match self.fields.get(name) {
                Some(old) if old != digest => changed.push(name.clone()),
                Some(_) => {}
                None => added.push(name.clone()),
            }
        }
        let removed: Vec<String> = self
            .fields
            .keys()
            .filter(|name| compared(name) && !new.contains_key(*name))
            .cloned()
            .collect();
        let mut mismatch = Mismatch {
            changed,
            added,
            removed,
            omitted: 0,
        };
        let mut room = MAX_REPORTED;
        for list in [
            &mut mismatch.changed,
            &mut mismatch.added,
            &mut mismatch.removed,
        ] {
            let kept = list.len().min(room);
            mismatch.omitted += list.len() - kept;
            list.truncate(kept);
            room -= kept;
        }
        mismatch
    }

    /// The fields kept, by name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.fields.keys().map(String::as_str)
    }

    /// As stored: a version byte, the level, the salt, the count (`u16`, little-endian),
    /// then each field's name length (`u16`), name and digest.
    #[must_use]
    pub fn to_bytes(&self) -> Vec<u8> {
        let names: usize = self.fields.keys().map(String::len).sum();
        let mut out = Vec::with_capacity(12 + names + self.fields.len() * (2 + DIGEST_LEN));
        out.push(self.version);
        out.push(self.depth);
        out.extend_from_slice(&self.salt);
        out.extend_from_slice(
            &u16::try_from(self.fields.len())
                .unwrap_or(u16::MAX)
                .to_le_bytes(),
        );
        for (name, digest) in &self.fields {
            out.extend_from_slice(&u16::try_from(name.len()).unwrap_or(u16::MAX).to_le_bytes());
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(digest);
        }
        out
    }

    /// Reads [`Self::to_bytes`]; `None` for bytes it did not write.
    #[must_use]
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let (&version, rest) = bytes.split_first()?;
        if version != 1 && version != VERSION {
            return None;
        }
        let (&depth, rest) = rest.split_first()?;
        let (salt, rest) = rest.split_first_chunk::<8>()?;
        let (count, mut rest) = rest.split_first_chunk::<2>()?;
        let mut fields = BTreeMap::new();
        for _ in 0..u16::from_le_bytes(*count) {
            let (len, after) = rest.split_first_chunk::<2>()?;
            let len = usize::from(u16::from_le_bytes(*len));
            let name = std::str::from_utf8(after.get(..len)?).ok()?;
            let (digest, after) = after.get(len..)?.split_first_chunk::<DIGEST_LEN>()?;
            fields.insert(name.to_owned(), *digest);
            rest = after;
        }
        rest.is_empty().then_some(Self {
            version,
            depth,
            salt: *salt,
            fields,
        })
    }
}

/// What each level of a request holds: per level, the fields that end there (values that
/// are not objects or arrays, and empty ones), the objects and arrays with something in them,
/// and the longest name of each.
struct Shape {
    ends: [usize; MAX_DEPTH as usize + 1],
    ends_name: [usize; MAX_DEPTH as usize + 1],
    containers: [usize; MAX_DEPTH as usize + 1],
    containers_name: [usize; MAX_DEPTH as usize + 1],
}

impl Default for Shape {
    fn default() -> Self {
        let zero = [0; MAX_DEPTH as usize + 1];
        Self {
            ends: zero,
            ends_name: zero,
            containers: zero,
            containers_name: zero,
        }
    }
}

impl Shape {
    /// The deepest level whose fields fit [`MAX_FIELDS`] and [`MAX_NAME_LEN`];
    /// [`MAX_DEPTH`] when every field does.
    fn depth(&self) -> u8 {
        let (mut fields, mut longest) = (0, 0);
        let mut chosen = 1;
        for level in 1..=MAX_DEPTH {
            let l = usize::from(level);
            fields += self.ends[l];
            longest = longest.max(self.ends_name[l]);
            let kept = fields + self.containers[l];
            let name = longest.max(self.containers_name[l]);
            if kept > MAX_FIELDS || name > MAX_NAME_LEN {
                break;
            }
            chosen = level;
            if self.containers[l] == 0 {
                // Nothing deeper: every field is kept.
                return MAX_DEPTH;
            }
        }
        chosen
    }
}

/// The fields of `canonical` cut at `depth`, each with its digest.
fn digests(
    canonical: &[u8],
    depth: u8,
    version: u8,
    salt: &[u8; 8],
) -> Result<BTreeMap<String, [u8; DIGEST_LEN]>, NotCanonical> {
    let mut walk = Walk::new(canonical, depth, version, salt, None);
    walk.value(0)?;
    walk.end()?;
    Ok(walk.fields)
}

/// A reader of canonical JSON that records each field's digest, or with a [`Shape`], only
/// counts them.
struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
    cut: u8,
    /// How digests are made (see [`VERSION`]).
    version: u8,
    salt: &'a [u8; 8],
    /// The JSON pointer of the value being read.
    name: String,
    fields: BTreeMap<String, [u8; DIGEST_LEN]>,
    shape: Option<&'a mut Shape>,
}

impl<'a> Walk<'a> {
    fn new(
        bytes: &'a [u8],
        cut: u8,
        version: u8,
        salt: &'a [u8; 8],
        shape: Option<&'a mut Shape>,
    ) -> Self {
        Self {
            version,
            bytes,
            at: 0,
            cut,
            salt,
            name: String::new(),
            fields: BTreeMap::new(),
            shape,
        }
    }

    /// Whether everything was read.
    fn end(&self) -> Result<(), NotCanonical> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(NotCanonical(self.at))
        }
    }

    fn peek(&self) -> Result<u8, NotCanonical> {
        self.bytes
            .get(self.at)
            .copied()
            .ok_or(NotCanonical(self.at))
    }

    fn expect(&mut self, byte: u8) -> Result<(), NotCanonical> {
        if self.peek()? != byte {
            return Err(NotCanonical(self.at));
        }
        self.at += 1;
        Ok(())
    }

    /// Reads the value at `self.at`, `level` deep (the root is 0).
    fn value(&mut self, level: u8) -> Result<(), NotCanonical> {
        let start = self.at;
        let open = self.peek()?;
        let container = open == b'{' || open == b'[';
        if !container || level >= self.cut {
            self.skip()?;
            // The root is never a field of its own: a request is always an object.
            if level > 0 {
                self.record(start, level);
            }
            return Ok(());
        }
        self.at += 1;
        let close = if open == b'{' { b'}' } else { b']' };
        if self.peek()? == close {
            self.at += 1;
            if level > 0 {
                self.record(start, level);
            }
            return Ok(());
        }
        if level > 0
            && let Some(shape) = &mut self.shape
        {
            let l = usize::from(level);
            shape.containers[l] += 1;
            shape.containers_name[l] = shape.containers_name[l].max(self.name.len());
        }
        let mut index = 0usize;
        loop {
            let length = self.name.len();
            self.name.push('/');
            if open == b'{' {
                let key = self.string()?;
                push_pointer_token(&mut self.name, &key);
                self.expect(b':')?;
            } else {
                self.name.push_str(&index.to_string());
                index += 1;
            }
            self.value(level + 1)?;
            self.name.truncate(length);
            match self.peek()? {
                b',' => self.at += 1,
                byte if byte == close => {
                    self.at += 1;
                    return Ok(());
                }
                _ => return Err(NotCanonical(self.at)),
            }
        }
    }

    /// Records the value `start..self.at` under the current name.
    fn record(&mut self, start: usize, level: u8) {
        if let Some(shape) = &mut self.shape {
            // (Counting: every value recorded is a field that ends at its level.)
            let level = usize::from(level.min(MAX_DEPTH));
            shape.ends[level] += 1;
            shape.ends_name[level] = shape.ends_name[level].max(self.name.len());
            return;
        }
        let name_len = (self.name.len() as u64).to_le_bytes();
        let value = &self.bytes[start..self.at];
        let mut short = [0; DIGEST_LEN];
        if self.version == 1 {
            let mut hash = Sha256::new();
            hash.update(self.salt);
            hash.update(name_len);
            hash.update(self.name.as_bytes());
            hash.update(value);
            short.copy_from_slice(&hash.finalize()[..DIGEST_LEN]);
        } else {
            let mut hash = SipHasher13::new_with_keys(u64::from_le_bytes(*self.salt), SIP_K1);
            hash.write(&name_len);
            hash.write(self.name.as_bytes());
            hash.write(value);
            short.copy_from_slice(&hash.finish().to_le_bytes()[..DIGEST_LEN]);
        }
        self.fields.insert(self.name.clone(), short);
    }

    /// Moves past the value at `self.at`.
    fn skip(&mut self) -> Result<(), NotCanonical> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.at += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1).ok_or(NotCanonical(self.at))?;
                    self.at += 1;
                }
                b',' | b':' if depth > 0 => self.at += 1,
                _ => {
                    // A number, `true`, `false` or `null`: up to the next delimiter.
                    let rest = &self.bytes[self.at..];
                    let len = rest
                        .iter()
                        .position(|b| matches!(b, b',' | b':' | b'}' | b']'))
                        .unwrap_or(rest.len());
                    if len == 0 {
                        return Err(NotCanonical(self.at));
                    }
                    self.at += len;
                }
            }
            if depth == 0 {
                return Ok(());
            }
        }
    }

    /// Reads a string literal, unescaped.
    fn string(&mut self) -> Result<String, NotCanonical> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            let byte = self.peek()?;
            self.at += 1;
            match byte {
                b'"' => return String::from_utf8(out).map_err(|_| NotCanonical(self.at)),
                b'\\' => {
                    let escaped = self.peek()?;
                    self.at += 1;
                    match escaped {
                        b'"' | b'\\' | b'/' => out.push(escaped),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let hex = self
                                .bytes
                                .get(self.at..self.at + 4)
                                .and_then(|hex| std::str::from_utf8(hex).ok())
                                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                                .and_then(char::from_u32)
                                .ok_or(NotCanonical(self.at))?;
                            self.at += 4;
                            let mut buffer = [0; 4];
                            out.extend_from_slice(hex.encode_utf8(&mut buffer).as_bytes());
                        }
                        _ => return Err(NotCanonical(self.at)),
                    }
                }
                _ => out.push(byte),
            }
        }
    }
}

/// Appends `key` as a JSON pointer token (RFC 6901: `~` as `~0`, `/` as `~1`).
fn push_pointer_token(name: &mut String, key: &str) {
    for c in key.chars() {
        match c {
            '~' => name.push_str("~0"),
            '/' => name.push_str("~1"),
            c => name.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};

    use super::*;
    use crate::canonical;

    fn canonical(value: &Value) -> Vec<u8> {
        canonical::to_vec(value).unwrap()
    }

    /// Every field of `value` (a request) cut at `depth`, with its canonical value: the
    /// module's rule, written over `serde_json` values.
    fn leaves(
        value: &Value,
        name: &str,
        level: u8,
        depth: u8,
        out: &mut BTreeMap<String, Vec<u8>>,
    ) {
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

        /// The reported fields are exactly those whose canonical values differ.
        #[test]
        fn reports_the_fields_that_differ(a in request(), b in request(), salt in any::<[u8; 8]>()) {
            let stored = FieldDigests::of_canonical(&canonical(&a), salt).unwrap();
            // (Small requests: never cut short, never past the report's bound here.)
            prop_assume!(stored.depth == MAX_DEPTH);
            let mismatch = stored.compare(&canonical(&b)).unwrap();
            let want = expected(&a, &b, stored.depth);
            prop_assume!(want.changed.len() + want.added.len() + want.removed.len() <= MAX_REPORTED);
            prop_assert_eq!(mismatch, want);
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
        let body = json!({"a": 1, "t": 6, "n": {"x": 2}, "b": true});
        let mismatch = stored.compare_body(&body, &["body.t"]);
        assert_eq!(mismatch.changed, ["/body/n/x"]);
        assert_eq!(mismatch.added, ["/body/b"]);
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
        assert!(stored.fields.len() <= MAX_FIELDS, "{}", stored.fields.len());
        assert!(
            stored.fields.contains_key("/body/items/3"),
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
        let a =
            json!({"body": (0..30).map(|i| (format!("f{i:02}"), json!(i))).collect::<Map<_, _>>()});
        let b = json!({"body": (0..30).map(|i| (format!("f{i:02}"), json!(i + 1))).collect::<Map<_, _>>()});
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
}
