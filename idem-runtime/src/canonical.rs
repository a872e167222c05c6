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

use std::cmp::Ordering;
use std::fmt::Display;

use serde::ser::{self, Impossible, Serialize};

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

/// Writes the string literal of `s`, which is UTF-8 (escaping only concerns ASCII bytes).
fn write_escaped<S: Feed>(s: &[u8], sink: &mut S) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    sink.write(b"\"");
    let mut rest = s;
    while let Some(i) = rest
        .iter()
        .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
    {
        let b = rest[i];
        sink.write(&rest[..i]);
        let hex = [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]];
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            _ => b"\\u00",
        };
        sink.write(escape);
        if escape.len() == 4 {
            sink.write(&hex);
        }
        rest = &rest[i + 1..];
    }
    sink.write(rest);
    sink.write(b"\"");
}

/// Appends the decimal digits of `n`, after a minus sign when `negative`.
fn write_int<S: Feed>(mut n: u128, negative: bool, sink: &mut S) {
    let mut buf = [b'-'; 40];
    let mut i = buf.len();
    loop {
        i -= 1;
        // u64 division is much cheaper than u128's.
        let (rest, digit) = match u64::try_from(n) {
            Ok(small) => (u128::from(small / 10), small % 10),
            Err(_) => (n / 10, (n % 10) as u64),
        };
        buf[i] = b'0' + digit as u8;
        n = rest;
        if n == 0 {
            break;
        }
    }
    sink.write(&buf[i - usize::from(negative)..]);
}

/// Appends `v` in the ECMAScript `Number::toString` form.
fn write_f64<S: Feed>(v: f64, sink: &mut S) -> R {
    if !v.is_finite() {
        return Err(CanonicalError::NonFinite(v));
    }
    if v == 0.0 {
        sink.write(b"0"); // -0 too
    } else {
        sink.write(ryu_js::Buffer::new().format_finite(v).as_bytes());
    }
    Ok(())
}

/// The name under which `serde_json::Number` serialises its text when `serde_json`'s
/// `arbitrary_precision` feature is on.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Appends the JSON number `text` (from `arbitrary_precision`) canonically: an integer digit
/// for digit, anything else through `f64`.
fn write_number_text<S: Feed>(text: &[u8], sink: &mut S) -> R {
    let digits = text.strip_prefix(b"-").unwrap_or(text);
    if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        sink.write(if digits == b"0" { digits } else { text });
        return Ok(());
    }
    match std::str::from_utf8(text).ok().and_then(|t| t.parse().ok()) {
        Some(v) => write_f64(v, sink),
        None => Err(ser::Error::custom(
            "a serde_json number that is not a number",
        )),
    }
}

/// Compares two UTF-8 strings as sequences of UTF-16 code units (RFC 8785 §3.2.3).
///
/// UTF-8 byte order is code point order, which differs from UTF-16 order only where a
/// supplementary character (lead byte `F0`–`F4`; a surrogate pair `D800`–`DFFF`) meets one
/// of U+E000–U+FFFF (lead `EE`/`EF`). The first differing bytes of two strings with the same
/// prefix are either both continuation bytes (after the same lead byte) or both lead bytes,
/// and only lead bytes need reweighting.
fn cmp_utf16(a: &[u8], b: &[u8]) -> Ordering {
    /// Orders lead bytes by the first UTF-16 code unit of their characters.
    fn weight(byte: u8) -> u16 {
        match byte {
            0xf0..=0xf4 => 0xed * 8 + 1 + u16::from(byte - 0xf0),
            _ => u16::from(byte) * 8,
        }
    }
    match a.iter().zip(b).position(|(x, y)| x != y) {
        None => a.len().cmp(&b.len()),
        Some(i) => weight(a[i]).cmp(&weight(b[i])),
    }
}

/// State shared by the whole serialisation of one value.
#[derive(Default)]
struct Serialisation<'e> {
    exclude: Exclude<'e>,
    /// The path of the current member, `.a.b`, as far as it is addressable by `exclude`.
    path: Vec<u8>,
    /// Member buffers of finished objects, for reuse.
    pool: Vec<Members>,
}

impl<'e> Serialisation<'e> {
    /// A serializer of a value into `out`, addressable by `exclude` when `live`.
    fn ser<'a, S: Feed>(&'a mut self, out: &'a mut S, live: bool) -> Ser<'a, 'e, S> {
        Ser {
            out,
            ctx: self,
            live,
        }
    }

    /// Enters member `name` of an object at `path[..base]`, which is addressable when
    /// `live`. `None` when the member is excluded; else whether its value is addressable (if
    /// so, with `name` pushed on the path).
    fn enter(&mut self, live: bool, base: usize, name: &[u8]) -> Option<bool> {
        if !live {
            return Some(false);
        }
        self.path.truncate(base);
        self.path.push(b'.');
        self.path.extend_from_slice(name);
        if self.exclude.matches(&self.path) {
            self.path.truncate(base);
            return None;
        }
        Some(self.exclude.below(&self.path))
    }
}

/// The members of one object being collected: raw names and canonical values in `buf`.
#[derive(Default)]
struct Members {
    buf: Vec<u8>,
    /// Per member: start of the name, end of the name (start of the value), end of the value.
    entries: Vec<(usize, usize, usize)>,
}

/// The value serializer; `live` when the value is addressable by `exclude`, at `ctx.path`.
struct Ser<'a, 'e, S> {
    out: &'a mut S,
    ctx: &'a mut Serialisation<'e>,
    live: bool,
}

impl<'a, 'e, S: Feed> Ser<'a, 'e, S> {
    /// Opens `{"variant":`, the wrapper object of an enum variant: `None` when the variant's
    /// member is excluded (nothing written), else whether its content is addressable.
    fn variant(&mut self, variant: &str) -> Option<bool> {
        let base = self.ctx.path.len();
        let live = self.ctx.enter(self.live, base, variant.as_bytes())?;
        self.out.write(b"{");
        write_str(variant, self.out);
        self.out.write(b":");
        Some(live)
    }

    /// Opens an array, or a tuple variant's `{"variant":[`.
    fn array(mut self, variant: Option<&str>) -> Array<'a, 'e, S> {
        let restore = self.ctx.path.len();
        let skip = variant.is_some_and(|v| self.variant(v).is_none());
        self.ctx.path.truncate(restore); // elements are not addressable
        self.out.write(if skip { b"" } else { b"[" });
        let close: &[u8] = match (skip, variant) {
            (true, _) => b"{}",
            (false, Some(_)) => b"]}",
            (false, None) => b"]",
        };
        Array {
            out: self.out,
            ctx: self.ctx,
            first: true,
            skip,
            close,
        }
    }

    /// Opens an object, or a struct variant's `{"variant":{`; `number` for the struct that
    /// stands for a `serde_json::Number` under `arbitrary_precision`.
    fn object(mut self, variant: Option<&str>, number: bool) -> Object<'a, 'e, S> {
        let restore = self.ctx.path.len();
        let (kind, live) = match variant.map(|v| self.variant(v)) {
            None if number => (Kind::Number, false),
            None => (Kind::Plain, self.live),
            Some(None) => (Kind::Skip, false),
            Some(Some(live)) => (Kind::Variant, live),
        };
        Object {
            members: self.ctx.pool.pop().unwrap_or_default(),
            base: self.ctx.path.len(),
            out: self.out,
            ctx: self.ctx,
            kind,
            live,
            restore,
            key: None,
        }
    }
}

/// The integer methods of a serializer whose sink is `self.$out`.
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

impl<'a, 'e, S: Feed> ser::Serializer for Ser<'a, 'e, S> {
    type Ok = ();
    type Error = CanonicalError;
    type SerializeSeq = Array<'a, 'e, S>;
    type SerializeTuple = Array<'a, 'e, S>;
    type SerializeTupleStruct = Array<'a, 'e, S>;
    type SerializeTupleVariant = Array<'a, 'e, S>;
    type SerializeMap = Object<'a, 'e, S>;
    type SerializeStruct = Object<'a, 'e, S>;
    type SerializeStructVariant = Object<'a, 'e, S>;

    ints!(out);

    fn serialize_bool(self, v: bool) -> R {
        self.out.write(if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> R {
        write_f64(v.into(), self.out)
    }
    fn serialize_f64(self, v: f64) -> R {
        write_f64(v, self.out)
    }
    fn serialize_char(self, v: char) -> R {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> R {
        write_str(v, self.out);
        Ok(())
    }
    fn serialize_bytes(self, v: &[u8]) -> R {
        self.out.write(b"[");
        for (i, &b) in v.iter().enumerate() {
            self.out.write(if i > 0 { b"," } else { b"" });
            write_int(b.into(), false, self.out);
        }
        self.out.write(b"]");
        Ok(())
    }
    fn serialize_none(self) -> R {
        self.serialize_unit()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> R {
        value.serialize(self)
    }
    fn serialize_unit(self) -> R {
        self.out.write(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _: &str) -> R {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _: &str, _: u32, variant: &str) -> R {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &str, value: &T) -> R {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _: &str,
        _: u32,
        variant: &str,
        value: &T,
    ) -> R {
        let base = self.ctx.path.len();
        let Some(live) = self.variant(variant) else {
            self.out.write(b"{}");
            return Ok(());
        };
        value.serialize(self.ctx.ser(&mut *self.out, live))?;
        self.ctx.path.truncate(base);
        self.out.write(b"}");
        Ok(())
    }
    fn serialize_seq(self, _: Option<usize>) -> R<Self::SerializeSeq> {
        Ok(self.array(None))
    }
    fn serialize_tuple(self, _: usize) -> R<Self::SerializeTuple> {
        Ok(self.array(None))
    }
    fn serialize_tuple_struct(self, _: &str, _: usize) -> R<Self::SerializeTupleStruct> {
        Ok(self.array(None))
    }
    fn serialize_tuple_variant(
        self,
        _: &str,
        _: u32,
        variant: &str,
        _: usize,
    ) -> R<Self::SerializeTupleVariant> {
        Ok(self.array(Some(variant)))
    }
    fn serialize_map(self, _: Option<usize>) -> R<Self::SerializeMap> {
        Ok(self.object(None, false))
    }
    fn serialize_struct(self, name: &str, _: usize) -> R<Self::SerializeStruct> {
        Ok(self.object(None, name == NUMBER_TOKEN))
    }
    fn serialize_struct_variant(
        self,
        _: &str,
        _: u32,
        variant: &str,
        _: usize,
    ) -> R<Self::SerializeStructVariant> {
        Ok(self.object(Some(variant), false))
    }
}

/// An array, written straight through; `skip` when it is an excluded variant's content.
struct Array<'a, 'e, S> {
    out: &'a mut S,
    ctx: &'a mut Serialisation<'e>,
    first: bool,
    skip: bool,
    close: &'static [u8],
}

/// The element methods of [`Array`]: elements are written straight through, never addressable.
macro_rules! array_impls {
    ($($trait:ident::$method:ident),+) => {$(
        impl<S: Feed> ser::$trait for Array<'_, '_, S> {
            type Ok = ();
            type Error = CanonicalError;
            fn $method<T: Serialize + ?Sized>(&mut self, value: &T) -> R {
                if self.skip {
                    return Ok(());
                }
                self.out.write(if self.first { b"" } else { b"," });
                self.first = false;
                value.serialize(self.ctx.ser(&mut *self.out, false))
            }
            fn end(self) -> R {
                self.out.write(self.close);
                Ok(())
            }
        }
    )+};
}
array_impls!(
    SerializeSeq::serialize_element,
    SerializeTuple::serialize_element,
    SerializeTupleStruct::serialize_field,
    SerializeTupleVariant::serialize_field
);

/// What an [`Object`] stands for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A map or a struct.
    Plain,
    /// The content of a struct variant, closed with `}}`.
    Variant,
    /// The content of an excluded struct variant: nothing collected, written `{}`.
    Skip,
    /// A `serde_json::Number` under `arbitrary_precision`: its one field is the number's text.
    Number,
}

/// A map or struct: members collected in `members`, written sorted at the end.
struct Object<'a, 'e, S> {
    out: &'a mut S,
    ctx: &'a mut Serialisation<'e>,
    members: Members,
    kind: Kind,
    /// Members are addressable by `exclude`, below `ctx.path[..base]`.
    live: bool,
    base: usize,
    /// Path length to restore at the end (before a variant's name).
    restore: usize,
    /// The pending member: start of its name, and whether its value is addressable (`None`:
    /// excluded).
    key: Option<(usize, Option<bool>)>,
}

impl<S: Feed> Object<'_, '_, S> {
    /// Starts the next member, whose raw name `name` appends to the buffer.
    fn key(&mut self, name: impl FnOnce(KeySer<'_>) -> R) -> R {
        let (start, buf) = (self.members.buf.len(), &mut self.members.buf);
        name(KeySer(buf))?;
        let live = self.ctx.enter(self.live, self.base, &buf[start..]);
        if live.is_none() {
            buf.truncate(start);
        }
        self.key = Some((start, live));
        Ok(())
    }

    /// Collects the value of the pending member, unless it is excluded.
    fn value<T: Serialize + ?Sized>(&mut self, value: &T) -> R {
        let Some((start, Some(live))) = self.key.take() else {
            return Ok(()); // excluded (or skipped)
        };
        let (name_end, buf) = (self.members.buf.len(), &mut self.members.buf);
        value.serialize(self.ctx.ser(buf, live))?;
        self.members.entries.push((start, name_end, buf.len()));
        Ok(())
    }

    /// Collects a struct field.
    fn field<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> R {
        match self.kind {
            Kind::Number => value.serialize(KeySer(&mut self.members.buf)),
            Kind::Skip => Ok(()),
            Kind::Plain | Kind::Variant => {
                self.key(|key| ser::Serializer::serialize_str(key, name))?;
                self.value(value)
            }
        }
    }

    /// Writes the collected members, sorted, and returns the buffers to the pool.
    fn finish(mut self) -> R {
        let (Members { buf, entries }, out) = (&mut self.members, &mut *self.out);
        match self.kind {
            Kind::Number => write_number_text(buf, out)?,
            Kind::Skip => out.write(b"{}"),
            Kind::Plain | Kind::Variant => {
                entries.sort_by(|a, b| cmp_utf16(&buf[a.0..a.1], &buf[b.0..b.1]));
                out.write(b"{");
                for (i, &(start, name_end, end)) in entries.iter().enumerate() {
                    out.write(if i > 0 { b"," } else { b"" });
                    write_escaped(&buf[start..name_end], out);
                    out.write(b":");
                    out.write(&buf[name_end..end]);
                }
                out.write(if self.kind == Kind::Variant {
                    b"}}"
                } else {
                    b"}"
                });
            }
        }
        buf.clear();
        entries.clear();
        self.ctx.pool.push(self.members);
        self.ctx.path.truncate(self.restore);
        Ok(())
    }
}

impl<S: Feed> ser::SerializeMap for Object<'_, '_, S> {
    type Ok = ();
    type Error = CanonicalError;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> R {
        match self.kind {
            Kind::Skip => Ok(()),
            _ => self.key(|out| key.serialize(out)),
        }
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> R {
        self.value(value)
    }
    fn end(self) -> R {
        self.finish()
    }
}

/// The field methods of [`Object`] for structs and struct variants.
macro_rules! struct_impls {
    ($($trait:ident),+) => {$(
        impl<S: Feed> ser::$trait for Object<'_, '_, S> {
            type Ok = ();
            type Error = CanonicalError;
            fn serialize_field<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) -> R {
                self.field(name, value)
            }
            fn end(self) -> R {
                self.finish()
            }
        }
    )+};
}
struct_impls!(SerializeStruct, SerializeStructVariant);

/// The compound serializers of [`KeySer`], never used.
type No = Impossible<(), CanonicalError>;

/// Serializes a map key as its raw (unescaped) name into `out`.
struct KeySer<'a>(&'a mut Vec<u8>);

/// Refuses a kind of map key.
macro_rules! refuse {
    ($($method:ident($($arg:ty),*) -> $ret:ty: $what:literal),+ $(,)?) => {$(
        fn $method(self, $(_: $arg),*) -> R<$ret> {
            Err(CanonicalError::Key($what))
        }
    )+};
}

impl ser::Serializer for KeySer<'_> {
    type Ok = ();
    type Error = CanonicalError;
    type SerializeSeq = No;
    type SerializeTuple = No;
    type SerializeTupleStruct = No;
    type SerializeTupleVariant = No;
    type SerializeMap = No;
    type SerializeStruct = No;
    type SerializeStructVariant = No;

    ints!(0);

    fn serialize_bool(self, v: bool) -> R {
        self.serialize_str(if v { "true" } else { "false" })
    }
    fn serialize_char(self, v: char) -> R {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> R {
        self.0.extend_from_slice(v.as_bytes());
        Ok(())
    }
    fn serialize_unit_variant(self, _: &str, _: u32, v: &str) -> R {
        self.serialize_str(v)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &str, value: &T) -> R {
        value.serialize(self)
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> R {
        Err(CanonicalError::Key("an option"))
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &str,
        _: u32,
        _: &str,
        _: &T,
    ) -> R {
        Err(CanonicalError::Key("a newtype variant"))
    }
    refuse!(
        serialize_f32(f32) -> (): "a float",
        serialize_f64(f64) -> (): "a float",
        serialize_bytes(&[u8]) -> (): "bytes",
        serialize_none() -> (): "an option",
        serialize_unit() -> (): "unit",
        serialize_unit_struct(&str) -> (): "a unit struct",
        serialize_seq(Option<usize>) -> Self::SerializeSeq: "a sequence",
        serialize_tuple(usize) -> Self::SerializeTuple: "a tuple",
        serialize_tuple_struct(&str, usize) -> Self::SerializeTupleStruct: "a tuple",
        serialize_tuple_variant(&str, u32, &str, usize)
            -> Self::SerializeTupleVariant: "a tuple variant",
        serialize_map(Option<usize>) -> Self::SerializeMap: "a map",
        serialize_struct(&str, usize) -> Self::SerializeStruct: "a struct",
        serialize_struct_variant(&str, u32, &str, usize)
            -> Self::SerializeStructVariant: "a struct variant",
    );
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use proptest::prelude::*;
    use serde::Serialize;
    use serde::ser::{SerializeStruct, Serializer};
    use serde_json::{Value, json};
    use sha2::{Digest, Sha256};

    use super::*;

    fn canon<T: Serialize + ?Sized>(value: &T) -> String {
        String::from_utf8(to_vec(value).unwrap()).unwrap()
    }

    fn without<T: Serialize + ?Sized>(value: &T, paths: &[&str]) -> String {
        let mut out = Vec::new();
        write(value, &Exclude::new(paths), &mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    fn error<T: Serialize + ?Sized>(value: &T) -> String {
        to_vec(value).unwrap_err().to_string()
    }

    /// `got => expected` pairs.
    macro_rules! check {
        ($($got:expr => $expected:expr),+ $(,)?) => {$(
            assert_eq!($got, $expected, "{}", stringify!($got));
        )+};
    }

    #[test]
    #[allow(clippy::excessive_precision, reason = "the literal of RFC 8785")]
    fn rfc8785_examples() {
        // §3.2.2, with Rust literals: serde_json's parser may misround 333333333.33333329.
        let value = json!({
            "numbers": [333_333_333.333_333_29, 1E30, 4.50, 2e-3, 0.000_000_000_000_000_000_000_000_001],
            "string": "\u{20ac}$\u{f}\nA'B\"\\\\\"/",
            "literals": [null, true, false]
        });
        // §3.2.3: names compared as UTF-16 code units, so U+1F600 (D83D DE00) precedes U+FB33.
        let sorting = json!({"\u{20ac}": "Euro Sign", "\r": "Carriage Return", "\u{fb33}": "Dalet",
            "1": "One", "\u{1f600}": "Grinning Face", "\u{80}": "Control", "\u{f6}": "O Diaeresis"});
        check! {
            canon(&value) => r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#,
            canon(&sorting) => "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"O Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Grinning Face\",\"\u{fb33}\":\"Dalet\"}",
        }
    }

    #[test]
    fn rfc8785_numbers() {
        // Appendix B: IEEE 754 bits and their text.
        let f = f64::from_bits;
        check! {
            canon(&f(0x0000_0000_0000_0000)) => "0",
            canon(&f(0x8000_0000_0000_0000)) => "0",
            canon(&f(0x0000_0000_0000_0001)) => "5e-324",
            canon(&f(0x8000_0000_0000_0001)) => "-5e-324",
            canon(&f(0x7fef_ffff_ffff_ffff)) => "1.7976931348623157e+308",
            canon(&f(0xffef_ffff_ffff_ffff)) => "-1.7976931348623157e+308",
            canon(&f(0x4340_0000_0000_0000)) => "9007199254740992",
            canon(&f(0xc340_0000_0000_0000)) => "-9007199254740992",
            canon(&f(0x4430_0000_0000_0000)) => "295147905179352830000",
            canon(&f(0x44b5_2d02_c7e1_4af5)) => "9.999999999999997e+22",
            canon(&f(0x44b5_2d02_c7e1_4af6)) => "1e+23",
            canon(&f(0x44b5_2d02_c7e1_4af7)) => "1.0000000000000001e+23",
            canon(&f(0x444b_1ae4_d6e2_ef4e)) => "999999999999999700000",
            canon(&f(0x444b_1ae4_d6e2_ef50)) => "1e+21",
            canon(&f(0x3eb0_c6f7_a0b5_ed8c)) => "9.999999999999997e-7",
            canon(&f(0x3eb0_c6f7_a0b5_ed8d)) => "0.000001",
            canon(&f(0x41b3_de43_5555_5553)) => "333333333.3333332",
            canon(&f(0x41b3_de43_5555_5554)) => "333333333.33333325",
            canon(&f(0x41b3_de43_5555_5555)) => "333333333.3333333",
            canon(&f(0x41b3_de43_5555_5557)) => "333333333.33333343",
            canon(&f(0xbecb_f647_612f_3696)) => "-0.0000033333333333333333",
            canon(&f(0x4314_3ff3_c1cb_0959)) => "1424953923781206.2",
            canon(&(1.0, -1.5, 0.1, 4.5, 0.002, 1e20, 1e-7, 1e-27)) => "[1,-1.5,0.1,4.5,0.002,100000000000000000000,1e-7,1e-27]",
            // f32 is widened to f64 first.
            canon(&(0.1_f32, 1.5_f32, -0.0_f32)) => "[0.10000000149011612,1.5,0]",
            // Integers are exact at any width.
            canon(&(9_007_199_254_740_993_u64, u64::MAX, i64::MIN)) => "[9007199254740993,18446744073709551615,-9223372036854775808]",
            canon(&(0_u8, -7_i8, -300_i16, 70_000_u32, u128::MAX, i128::MIN)) => "[0,-7,-300,70000,340282366920938463463374607431768211455,-170141183460469231731687303715884105728]",
        }
    }

    #[test]
    fn strings_are_escaped_canonically() {
        let controls: String = (0_u8..0x20).map(char::from).collect();
        let mut out = Vec::new();
        write_str("x\ny", &mut out);
        check! {
            canon(&controls) => r#""\u0000\u0001\u0002\u0003\u0004\u0005\u0006\u0007\b\t\n\u000b\f\r\u000e\u000f\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d\u001e\u001f""#,
            canon("a\"b\\c/d\u{7f}é€😀") => "\"a\\\"b\\\\c/d\u{7f}é€😀\"",
            canon(&['"', 'é']) => r#"["\"","é"]"#,
            out => b"\"x\\ny\"",
        }
    }

    #[derive(Serialize)]
    struct Order<'a> {
        sku: &'a str,
        qty: u32,
        note: Option<&'a str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tags: Vec<&'a str>,
        to: Address,
    }

    #[derive(Serialize)]
    struct Reordered<'a> {
        to: Address,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tags: Vec<&'a str>,
        note: Option<&'a str>,
        qty: u32,
        sku: &'a str,
    }

    #[derive(Serialize)]
    struct Address {
        zip: u32,
        city: &'static str,
    }

    #[derive(Serialize)]
    struct Flat {
        z: u8,
        #[serde(flatten)]
        inner: Address,
        #[serde(flatten)]
        extra: BTreeMap<&'static str, u8>,
        a: u8,
    }

    #[test]
    fn objects_are_sorted() {
        let value: Value =
            serde_json::from_str(r#"{"b":{"y":1,"x":[{"d":1,"c":2}]},"a":"s"}"#).unwrap();
        let (sku, to, t) = (
            "A-1",
            || Address {
                zip: 75001,
                city: "P",
            },
            || vec!["t"],
        );
        let (extra, inner) = ([("m", 3), ("a", 9)].into(), Address { zip: 1, city: "c" });
        let hash: HashMap<String, u32> = (0..500).map(|i| (format!("k{i}"), i)).collect();
        let btree: BTreeMap<_, _> = hash.clone().into_iter().collect();
        let expected = r#"{"note":null,"qty":2,"sku":"A-1","to":{"city":"P","zip":75001}}"#;
        check! {
            canon(&value) => r#"{"a":"s","b":{"x":[{"c":2,"d":1}],"y":1}}"#,
            canon(&Order { sku, qty: 2, note: None, tags: vec![], to: to() }) => expected,
            canon(&Reordered { to: to(), tags: vec![], note: None, qty: 2, sku }) => expected,
            canon(&Order { sku, qty: 2, note: Some("n"), tags: t(), to: to() }) => r#"{"note":"n","qty":2,"sku":"A-1","tags":["t"],"to":{"city":"P","zip":75001}}"#,
            canon(&Reordered { to: to(), tags: t(), note: Some("n"), qty: 2, sku }) => r#"{"note":"n","qty":2,"sku":"A-1","tags":["t"],"to":{"city":"P","zip":75001}}"#,
            // Two members "a" (flatten): both kept, in the order serde emitted them.
            canon(&Flat { z: 1, inner, extra, a: 2 }) => r#"{"a":9,"a":2,"city":"c","m":3,"z":1,"zip":1}"#,
            to_vec(&hash).unwrap() => to_vec(&btree).unwrap(),
            // ASCII names: UTF-16 order is byte order, which serde_json's writer keeps here.
            to_vec(&hash).unwrap() => serde_json::to_vec(&btree).unwrap(),
        }
    }

    #[derive(Serialize)]
    enum Shape {
        Unit,
        Newtype(u8),
        Tuple(u8, &'static str),
        Struct { y: u8, x: Option<u8> },
    }

    #[derive(Serialize)]
    #[serde(tag = "type")]
    enum Tagged {
        Card { number: u16, cvc: u16 },
    }

    #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
    struct Id(i64);

    #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
    enum Currency {
        Eur,
    }

    /// Serialises `serialize_bytes`, an error, or what `serde_json::Number` does under its
    /// `arbitrary_precision` feature.
    enum Odd {
        Bytes,
        Fails,
        Number(&'static str),
    }

    impl Serialize for Odd {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            match self {
                Self::Bytes => s.serialize_bytes(&[0, 7, 255]),
                Self::Fails => Err(serde::ser::Error::custom("no")),
                Self::Number(text) => {
                    let mut s = s.serialize_struct(NUMBER_TOKEN, 1)?;
                    s.serialize_field(NUMBER_TOKEN, text)?;
                    s.end()
                }
            }
        }
    }

    #[test]
    fn data_model() {
        let named = BTreeMap::from([(Currency::Eur, BTreeMap::from([(Id(-3), ())]))]);
        check! {
            canon(&[Shape::Unit, Shape::Newtype(3), Shape::Tuple(1, "a"), Shape::Struct { y: 1, x: None }])
                => r#"["Unit",{"Newtype":3},{"Tuple":[1,"a"]},{"Struct":{"x":null,"y":1}}]"#,
            canon(&Tagged::Card { number: 4111, cvc: 123 }) => r#"{"cvc":123,"number":4111,"type":"Card"}"#,
            canon(&((), Id(4), Some(Id(5)), None::<u8>, Odd::Bytes, [(); 0])) => "[null,4,5,null,[0,7,255],[]]",
            canon(&(BTreeMap::from([(2, true), (-1, false), (10, true)]), HashMap::from([(true, 'a'), (false, 'b')])))
                => r#"[{"-1":false,"10":true,"2":true},{"false":"b","true":"a"}]"#,
            canon(&named) => r#"{"Eur":{"-3":null}}"#,
            canon(&BTreeMap::from([('\n', u128::MAX)])) => r#"{"\n":340282366920938463463374607431768211455}"#,
            canon(&["123456789012345678901234567890", "-0", "-12", "2.50", "1E30", "1e-7"].map(Odd::Number)) => "[123456789012345678901234567890,0,-12,2.5,1e+30,1e-7]",
            error(&Odd::Number("1e999")) => "a number is not finite (inf) and has no JSON form",
            error(&Odd::Number("x")) => "a serde_json number that is not a number",
            error(&[f64::NAN]) => "a number is not finite (NaN) and has no JSON form",
            error(&f32::NEG_INFINITY) => "a number is not finite (-inf) and has no JSON form",
            error(&(json!({"a": 1}), [Odd::Fails])) => "no",
            error(&BTreeMap::from([((1, 2), 3)])) => "a map key must be a string, an integer, a bool or a char, not a tuple",
            error(&[BTreeMap::from([(None::<u8>, 1)])]) => "a map key must be a string, an integer, a bool or a char, not an option",
        }
    }

    #[derive(Serialize)]
    struct Payment {
        amount: u64,
        method: Method,
        trace: f64,
    }

    #[derive(Serialize)]
    enum Method {
        Card { number: u16, holder: &'static str },
    }

    #[test]
    fn exclusion() {
        let v = json!({"b": {"s": "A", "m": {"n": "x", "k": 1}, "z": [{"n": 1}]}, "a": 0});
        let all = canon(&v);
        let p = Payment {
            amount: 5,
            method: Method::Card {
                number: 4111,
                holder: "Ann",
            },
            trace: f64::NAN,
        };
        check! {
            without(&v, &["b.m.n"]) => r#"{"a":0,"b":{"m":{"k":1},"s":"A","z":[{"n":1}]}}"#,
            without(&v, &["b.s", "a"]) => r#"{"b":{"m":{"k":1,"n":"x"},"z":[{"n":1}]}}"#,
            without(&v, &["b.m"]) => r#"{"a":0,"b":{"s":"A","z":[{"n":1}]}}"#,
            // Missing paths, paths into arrays, prefixes of names: nothing is left out.
            without(&v, &["b.nope.x", "b.z.n", "b.z.0.n", "b.m.n.x", "b.", "b..s", "", "."]) => all,
            // An excluded value is never serialised (a NaN would be an error).
            without(&p, &["trace", "method.Card.number"]) => r#"{"amount":5,"method":{"Card":{"holder":"Ann"}}}"#,
            without(&p, &["trace", "method.Card"]) => r#"{"amount":5,"method":{}}"#,
            without(&Shape::Newtype(1), &["Newtype"]) => "{}",
            without(&Shape::Tuple(1, "a"), &["Tuple"]) => "{}",
            without(&[Shape::Tuple(1, "a")], &["Tuple"]) => r#"[{"Tuple":[1,"a"]}]"#,
        }
    }

    #[test]
    fn pinned_vector() {
        // Pinned: a change of the canonical form silently turns every retry into a 422.
        let value = json!({
            "lines": [{"sku": "A-1", "qty": 2}, {"sku": "\u{e9}\t\u{1f600}", "qty": 1}],
            "customer": {"vip": null, "name": "Zoë", "id": 18_446_744_073_709_551_615_u64},
            "total": 12_345,
            "discount": 0.25
        });
        let mut hasher = Sha256::new();
        write(&value, &Exclude::NONE, &mut hasher).unwrap();
        let digest = hasher.finalize();
        let digest = crate::hex::encode(&digest);
        check! {
            canon(&value) => "{\"customer\":{\"id\":18446744073709551615,\"name\":\"Zoë\",\"vip\":null},\"discount\":0.25,\"lines\":[{\"qty\":2,\"sku\":\"A-1\"},{\"qty\":1,\"sku\":\"é\\t😀\"}],\"total\":12345}",
            digest => "9413767d0ec48ba3d31a7f368ca4b14724f11316026ed706d046cf4ed8e1c401",
        }
    }

    fn text() -> impl Strategy<Value = String> {
        let special: Vec<char> = "\"\\/aé\u{7f}\u{e000}\u{ffff}\u{10000}😀".chars().collect();
        let controls = (0_u8..0x20).prop_map(char::from);
        let c = prop_oneof![any::<char>(), controls, prop::sample::select(special)];
        prop::collection::vec(c, 0..6).prop_map(String::from_iter)
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            text().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 6, |inner| {
            let members = prop::collection::vec((text(), inner.clone()), 0..6);
            prop_oneof![
                prop::collection::vec(inner, 0..6).prop_map(Value::Array),
                members.prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// An independent writer of the canonical form, for integer-only values.
    fn reference(value: &Value) -> String {
        let join = |items: Vec<String>| items.join(",");
        match value {
            Value::Array(items) => format!("[{}]", join(items.iter().map(reference).collect())),
            Value::Object(map) => {
                let mut members: Vec<_> = map.iter().collect();
                members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
                let text =
                    |(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), reference(v));
                format!("{{{}}}", join(members.into_iter().map(text).collect()))
            }
            _ => serde_json::to_string(value).unwrap(),
        }
    }

    proptest! {
        #[test]
        fn canonical_form_is_a_fixed_point(value in json_value()) {
            let once = to_vec(&value).unwrap();
            prop_assert_eq!(String::from_utf8(once.clone()).unwrap(), reference(&value));
            let parsed: Value = serde_json::from_slice(&once).unwrap();
            prop_assert_eq!(&parsed, &value);
            prop_assert_eq!(to_vec(&parsed).unwrap(), once);
        }

        #[test]
        fn names_sort_as_utf16(a in text(), b in text()) {
            let utf16 = a.encode_utf16().cmp(b.encode_utf16());
            prop_assert_eq!(cmp_utf16(a.as_bytes(), b.as_bytes()), utf16);
        }
    }
}
