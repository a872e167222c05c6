//! Canonical JSON: RFC 8785 (JSON Canonicalization Scheme), written by a `serde::Serializer`
//! of our own straight into a [`Feed`] (a hasher or a buffer).
//!
//! The form:
//! - no whitespace anywhere;
//! - object members sorted by their names compared as UTF-16 code units (RFC 8785 §3.2.3),
//!   for serde maps and structs alike (the declaration order of a struct's fields never
//!   matters) and for `#[serde(flatten)]`. Members with the same name (possible with
//!   `flatten`) are all kept, in a stable sort. Fields that serde skips are left out;
//! - strings escaped as RFC 8785 §3.2.2.2 says: `\"`, `\\`, `\b`, `\t`, `\n`, `\f`, `\r`,
//!   other controls as `\u00xx` (lowercase hex), everything else written as UTF-8;
//! - floats in the ECMAScript `Number::toString` form (`1.0` → `1`, `1e21` → `1e+21`),
//!   `-0.0` as `0`; NaN and the infinities are an error. `f32` values are widened to `f64`
//!   first, so `0.1_f32` is written `0.10000000149011612`;
//! - serde's data model mapped as `serde_json` maps it: `None`, `()` and unit structs are
//!   `null`, `Some(x)` and newtype structs are their content, a unit variant is its name as a
//!   string, a newtype variant `{"Name":value}`, a tuple variant `{"Name":[…]}`, a struct
//!   variant `{"Name":{…}}`, bytes an array of numbers, a char a one-character string. Map
//!   keys that are strings or chars are kept; integers and bools become their decimal or
//!   `true`/`false` strings, unit variants their names, newtype structs their content; any
//!   other key is an error.
//!
//! **Deviation from RFC 8785:** integers of every width (`i8` … `i128`, `u8` … `u128`) are
//! written as their exact decimal digits. JCS would round those above 2^53 through an IEEE
//! double, and two different large amounts must never share a fingerprint. The numbers of a
//! `serde_json::Value` under its `arbitrary_precision` feature are written the same way:
//! integers digit for digit, other numbers through `f64`.
//!
//! The output never depends on `serde_json`, whose `preserve_order` feature any crate of a
//! build can switch on: nothing goes through a `serde_json::Value` (the runtime's tests all
//! run with that feature on). It streams; only the members of one object are buffered, to be
//! sorted, in buffers kept in a pool and reused.
//!
//! For integer and string inputs the form is byte for byte what idem 0.1.0 hashed, so
//! fingerprints stored before an upgrade keep matching after it: a change of the form would
//! silently turn every retry of a stored key into a `422` (pinned by the fingerprint's
//! tests).
//!
//! [`Exclude`] leaves members out by their dotted path from the root: object member names
//! joined by `.`. The wrapper object of an enum variant counts as an object (a field of a
//! struct variant is `payment.Card.number`); arrays are not entered by paths.

/// The integer methods of a serializer whose sink is `self.$out` (`write_int` in scope).
macro_rules! ints {
    ($out:tt) => {
        ints!($out; signed: serialize_i8 i8, serialize_i16 i16, serialize_i32 i32,
            serialize_i64 i64, serialize_i128 i128; unsigned: serialize_u8 u8,
            serialize_u16 u16, serialize_u32 u32, serialize_u64 u64, serialize_u128 u128);
    };
    ($out:tt; signed: $($s:ident $st:ty),+; unsigned: $($u:ident $ut:ty),+) => {
        $(fn $s(self, v: $st) -> R {
            write_int(v.unsigned_abs().into(), v < 0, self.$out);
            Ok(())
        })+
        $(fn $u(self, v: $ut) -> R {
            write_int(v.into(), false, self.$out);
            Ok(())
        })+
    };
}

mod key;
mod maps;
mod scalars;
mod serializer;
#[cfg(test)]
mod tests;

use std::fmt::Display;

use serde::ser::{self, Serialize};

use self::scalars::write_escaped;
use self::serializer::Serialisation;

/// The result of the serializers.
type R<T = ()> = Result<T, CanonicalError>;

/// Where canonical bytes go (a hasher, a buffer).
pub(crate) trait Feed {
    /// Appends `bytes`.
    fn write(&mut self, bytes: &[u8]);
}

impl Feed for sha2::Sha256 {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        sha2::Digest::update(self, bytes);
    }
}

impl Feed for Vec<u8> {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Dotted paths left out of a value, relative to its root: `["note", "meta.trace"]`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Exclude<'a> {
    paths: &'a [&'a str],
}

impl<'a> Exclude<'a> {
    /// Leaves nothing out.
    pub(crate) const NONE: Exclude<'static> = Exclude { paths: &[] };

    /// Leaves out the members at `paths`; paths that do not exist change nothing.
    pub(crate) const fn new(paths: &'a [&'a str]) -> Self {
        Self { paths }
    }

    /// Whether the member at `path` (written `.a.b`) is left out.
    fn matches(&self, path: &[u8]) -> bool {
        let path = path.get(1..).unwrap_or_default();
        self.paths.iter().any(|p| p.as_bytes() == path)
    }

    /// Whether an excluded path lies below `path` (written `.a.b`, or empty for the root).
    fn below(&self, path: &[u8]) -> bool {
        let path = path.get(1..).unwrap_or_default();
        self.paths
            .iter()
            .any(|p| match p.as_bytes().strip_prefix(path) {
                Some(rest) if path.is_empty() => !rest.is_empty(),
                Some(rest) => rest.len() > 1 && rest[0] == b'.',
                None => false,
            })
    }
}

/// Why a value could not be written canonically.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum CanonicalError {
    /// NaN or an infinity, which JSON cannot represent.
    #[error("a number is not finite ({0}) and has no JSON form")]
    NonFinite(f64),
    /// A map key that is not a string, an integer, a bool, a char or a unit variant.
    #[error("a map key must be a string, an integer, a bool or a char, not {0}")]
    Key(&'static str),
    /// An error raised by a `Serialize` implementation.
    #[error("{0}")]
    Custom(String),
}

impl ser::Error for CanonicalError {
    fn custom<T: Display>(msg: T) -> Self {
        Self::Custom(msg.to_string())
    }
}

/// Writes `value` canonically into `sink`, leaving out the members at `exclude`.
///
/// # Errors
/// For a non-finite float, a map key of a kind the module docs do not list, or an error of
/// `value`'s `Serialize` implementation. Part of the output may have been written by then.
pub(crate) fn write<T: Serialize + ?Sized, S: Feed>(
    value: &T,
    exclude: &Exclude<'_>,
    sink: &mut S,
) -> Result<(), CanonicalError> {
    let ctx = &mut Serialisation::default();
    ctx.exclude = *exclude;
    value.serialize(ctx.ser(sink, exclude.below(&[])))
}

/// [`write()`], and the JSON pointers (from the root of `value`) of the outermost objects
/// serde wrote as maps: their member names are data, not names a type declares
/// ([`crate::fields`] names the map, never its members).
///
/// # Errors
/// As [`write()`].
pub(crate) fn write_noting_maps<T: Serialize + ?Sized, S: Feed>(
    value: &T,
    exclude: &Exclude<'_>,
    sink: &mut S,
) -> Result<Vec<String>, CanonicalError> {
    let ctx = &mut Serialisation::default();
    ctx.exclude = *exclude;
    ctx.maps = Some(maps::Maps::default());
    value.serialize(ctx.ser(sink, exclude.below(&[])))?;
    Ok(ctx.maps.take().map(|maps| maps.found).unwrap_or_default())
}

/// Writes `s` as a JSON string literal, escaped canonically.
pub(crate) fn write_str<S: Feed>(s: &str, sink: &mut S) {
    write_escaped(s.as_bytes(), sink);
}

/// The canonical bytes of `value`, for tests, tools and the fuzz targets.
///
/// # Errors
/// As [`write()`].
pub(crate) fn to_vec<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CanonicalError> {
    let mut out = Vec::new();
    write(value, &Exclude::NONE, &mut out)?;
    Ok(out)
}
