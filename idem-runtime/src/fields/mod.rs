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
//! first format, a salted SHA-256, are still read), and whether the value is `null`: the value
//! itself is never kept, and equal values at two fields, or in two keys, do not show as
//! equal. Beside them it keeps the length of each array and where the request's maps are
//! (below). At most [`MAX_FIELDS`] fields are kept: a request with more is cut at the deepest
//! level that fits, each object or array at that level kept as one field (its digest covers
//! everything under it), so a change below it is reported as a change of it.
//!
//! [`FieldDigests::compare`] reads a new request against them and reports what a client
//! reads in its own request, at most [`MAX_REPORTED`] names in all:
//!
//! - a field both have with other values is `changed`; one only the new request has is
//!   `added`, one only the first had `removed`;
//! - a member that is `null` counts as absent: a typed body re-serialises a member the client
//!   left out as `null`, so leaving out a member sent before is `removed` (not `changed`),
//!   and sending one left out before `added`; `null` against absent is no difference;
//! - an array whose length changed is `changed` at the array's pointer, and nothing below it
//!   is named (its elements' indices no longer line up);
//! - where one request has a value and the other has objects or arrays below the same
//!   pointer, the pointer is named once: `removed` or `added` when the value is `null`, else
//!   `changed`;
//! - the members of a map (a `HashMap`, a `BTreeMap`, a `serde_json::Value`'s objects, a
//!   struct with `#[serde(flatten)]` fields — what serde writes as a map) are named by the
//!   client, not by the operation, and a name the client chose is a value: a difference in a
//!   map, or below one, is reported as `changed` at the outermost map's own pointer
//!   (`/body/metadata`, never `/body/metadata/4111111111111111`). A map is kept as one field,
//!   its digest over all of it, so no member name is stored either. Where the maps are is
//!   noted after the canonical request the runtime keeps for an `#[idempotent]` handler
//!   (`note_maps`; the input of `Idem::once` or `Idem::staged` is the application's value,
//!   whose maps are not noted); another request is
//!   read with the first one's maps too, so a request body read as JSON
//!   ([`FieldDigests::compare_body`]) is;
//! - in a body read as JSON, a member the first request did not have may be a name the
//!   client made up: it is named by its nearest member the first request had, as `changed`.
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

mod format;
mod report;
#[cfg(test)]
mod tests;
mod walk;

use std::collections::{BTreeMap, BTreeSet};

use self::report::Compared;
use self::walk::{Shape, Walk, read};

/// The most fields kept per request.
pub const MAX_FIELDS: usize = 64;

/// The most field names a [`Mismatch`] reports, over its three lists.
pub const MAX_REPORTED: usize = 16;

/// Bytes of each field's digest.
pub const DIGEST_LEN: usize = 6;

/// The longest field name kept, in bytes: a request whose fields' names are longer is cut
/// at a shallower level.
pub const MAX_NAME_LEN: usize = 256;

/// The version byte [`FieldDigests::to_bytes`] writes: 3, digests by SipHash-1-3 with
/// whether each value is `null`, the arrays' lengths and the maps. Versions 1 (SHA-256) and 2
/// (SipHash-1-3, digests alone) are still read.
const VERSION: u8 = 3;

/// The digests of one request's fields (see the [module](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDigests {
    /// The format: how each digest was made (see [`VERSION`]).
    version: u8,
    /// The level fields were cut at: objects and arrays this deep are one field.
    depth: u8,
    salt: [u8; 8],
    read: Read,
}

/// One field as kept: its digest, whether its value is a member's `null`, and whether it is
/// an empty object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    digest: [u8; DIGEST_LEN],
    null: bool,
    empty: bool,
}

/// What one read of a request found: its fields by name, the arrays above the cut with
/// their lengths, and its outermost maps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Read {
    fields: BTreeMap<String, Field>,
    arrays: BTreeMap<String, u32>,
    maps: BTreeSet<String>,
    /// Whether the `null`s and the arrays were recorded (not in the earlier formats).
    shapes: bool,
}

/// How a request differs from the one a key was first used with: field names (JSON
/// pointers), sorted, never a value (see the [module](self) for what each list names).
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

/// Notes after `canonical`, a canonical request, where its maps are (JSON pointers of the
/// outermost objects serde wrote as maps): a line feed — never in canonical JSON — and
/// their pointers as a JSON array of strings. Nothing when there are none.
pub(crate) fn note_maps(canonical: &mut Vec<u8>, maps: &[String]) {
    if maps.is_empty() {
        return;
    }
    canonical.extend_from_slice(b"\n[");
    for (i, map) in maps.iter().enumerate() {
        if i > 0 {
            canonical.push(b',');
        }
        crate::canonical::write_str(map, canonical);
    }
    canonical.push(b']');
}

impl FieldDigests {
    /// The digests of `canonical`, the canonical bytes of a request (and where its maps are,
    /// when the runtime noted them after it), salted with `salt`: cut at the deepest level
    /// that keeps at most [`MAX_FIELDS`] fields.
    ///
    /// # Errors
    /// When `canonical` is not JSON as the canonical writer writes it.
    pub fn of_canonical(canonical: &[u8], salt: [u8; 8]) -> Result<Self, NotCanonical> {
        Self::of_canonical_as(canonical, salt, VERSION)
    }

    /// [`Self::of_canonical`], in the format `version`.
    fn of_canonical_as(canonical: &[u8], salt: [u8; 8], version: u8) -> Result<Self, NotCanonical> {
        // One pass counts what each level would keep; one more hashes the level chosen.
        let depth = if canonical.len() <= walk::NEVER_CUT {
            walk::MAX_DEPTH
        } else {
            let mut shape = Shape::default();
            let mut walk = Walk::new(canonical, walk::MAX_DEPTH, version, &salt, Some(&mut shape));
            walk.request(&BTreeSet::new())?;
            shape.depth()
        };
        let mut read = read(canonical, depth, version, &salt, &BTreeSet::new())?;
        if version < 3 {
            // The earlier formats keep digests alone.
            read = Read {
                fields: read
                    .fields
                    .into_iter()
                    .map(|(name, field)| {
                        (
                            name,
                            Field {
                                null: false,
                                empty: false,
                                ..field
                            },
                        )
                    })
                    .collect(),
                ..Read::default()
            };
        }
        Ok(Self {
            version,
            depth,
            salt,
            read,
        })
    }

    /// How `canonical`, the canonical bytes of another request (and where its maps are, when
    /// noted), differs from the request these digests are of.
    ///
    /// # Errors
    /// When `canonical` is not JSON as the canonical writer writes it.
    pub fn compare(&self, canonical: &[u8]) -> Result<Mismatch, NotCanonical> {
        let new = read(
            canonical,
            self.depth,
            self.version,
            &self.salt,
            &self.read.maps,
        )?;
        Ok(report::differences(&self.read, &new, Compared::Request))
    }

    /// How `body`, a request body alone, differs from the body of the request these digests
    /// are of. Only the fields under `/body` are compared: a body does not tell the path,
    /// query or headers of its request. The body is read as JSON, not as the handler's type
    /// would read it: a field the type ignores or fills with a default shows as added or
    /// removed; the maps are the first request's. `exclude` is the operation's
    /// `fingerprint_exclude` (`body.timestamp`): the fields it names were never digested and
    /// are not compared.
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
        let mut canonical = Vec::new();
        let exclude = crate::canonical::Exclude::new(exclude);
        // A JSON value always writes canonically, and canonical bytes always read back.
        let new = crate::canonical::write(&Request { body }, &exclude, &mut canonical)
            .ok()
            .and_then(|()| {
                read(
                    &canonical,
                    self.depth,
                    self.version,
                    &self.salt,
                    &self.read.maps,
                )
                .ok()
            })
            .unwrap_or_default();
        report::differences(&self.read, &new, Compared::BodyAsJson)
    }

    /// The fields kept, by name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.read.fields.keys().map(String::as_str)
    }
}
