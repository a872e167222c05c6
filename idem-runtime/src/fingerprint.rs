//! The request fingerprint: SHA-256 over the operation id and the canonical input.
//!
//! The *input* of a request is what its extractors read from the client's request and that
//! decides what the request means: the body, the path parameters, the query string, headers
//! that change the outcome. Whether an extractor is input is decided by its type, through
//! the [`Input`] trait — never by how the type is spelled — so wrappers, aliases and custom
//! extractors are fingerprinted like the originals. An argument of an `#[idempotent]`
//! handler whose type is neither an [`Input`] nor marked `#[not_input]` does not compile.
//!
//! # The canonical form
//!
//! The parts are gathered in one JSON object keyed by part — `{"body": …, "path": …,
//! "query": …}` — written in the JSON Canonicalization Scheme (RFC 8785): members sorted,
//! no whitespace, numbers and strings in one spelling. Key order, formatting and the field
//! order of your Rust types therefore do not change the fingerprint, while any change of a
//! value does. The form is idem's own serializer: no feature of `serde_json` (such as
//! `preserve_order`) can change it, and it streams into the hash without building a tree.
//! Integers are written with all their digits (RFC 8785 would round those beyond 2^53).
//!
//! Raw bodies ([`Bytes`], [`String`]) are hashed as they are: a JSON string of the text, or of
//! `{"hex": "…"}` for bytes that are not UTF-8. When two arguments are the same part (two
//! path extractors, say), the second is `path#2`, the third `path#3`: parts never overwrite
//! each other.
//!
//! Fields can be left out with the attribute's `exclude = ["body.note"]`: dotted paths from
//! the root of that object.

use std::fmt;

use bytes::Bytes;
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::canonical::{self, CanonicalError, Exclude, Feed};

/// A SHA-256 fingerprint of one request's operation and input.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

/// Why a request's input could not be fingerprinted (a float that is not a number, a map
/// with keys that are not strings, or a [`Serialize`] implementation that failed).
#[derive(Debug, thiserror::Error)]
#[error("the input cannot be fingerprinted: {0}")]
pub struct FingerprintError(#[from] CanonicalError);

impl Fingerprint {
    /// Fingerprints one value as the whole input of `operation_id`, leaving out the
    /// `exclude` paths (relative to the value). This is what the plain function API
    /// ([`crate::Idem::once`]) uses.
    ///
    /// ```
    /// use idem_runtime::fingerprint::Fingerprint;
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
    /// When `input` cannot be written canonically.
    pub fn of(
        operation_id: &str,
        input: &(impl Serialize + ?Sized),
        exclude: &[&str],
    ) -> Result<Self, FingerprintError> {
        let mut hasher = begin(operation_id);
        canonical::write(input, &Exclude::new(exclude), &mut hasher)?;
        Ok(Self(hasher.finalize().into()))
    }

    /// [`Self::of`], and the canonical input it hashed (for [`crate::fields`]). The input is
    /// the application's value ([`crate::Idem::once`], [`crate::Idem::staged`]), not a
    /// client's request: its maps are not noted, and their members are named like any
    /// field.
    pub(crate) fn of_kept(
        operation_id: &str,
        input: &(impl Serialize + ?Sized),
        exclude: &[&str],
    ) -> Result<(Self, Vec<u8>), FingerprintError> {
        let mut sink = Sink {
            hasher: begin(operation_id),
            kept: Some(Vec::with_capacity(256)),
            maps: Vec::new(),
        };
        canonical::write(input, &Exclude::new(exclude), &mut sink)?;
        Ok(sink.finish())
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
        write!(f, "Fingerprint({}…)", crate::hex::encode(&self.0[..8]))
    }
}

fn begin(operation_id: &str) -> Sha256 {
    let mut hasher = Sha256::new();
    hasher.update(operation_id.as_bytes());
    hasher.update([0]);
    hasher
}

/// Where a part sits in the canonical request, as the type of [`Input::Part`].
pub mod part {
    mod sealed {
        pub trait Sealed {}
    }

    /// A place in the canonical request. Sealed: the places are [`Body`], [`Path`],
    /// [`Query`], [`Headers`] and [`Ignored`].
    pub trait Part: sealed::Sealed {
        /// The member name in the canonical object; `None` for [`Ignored`].
        const NAME: Option<&'static str>;
    }

    /// Implemented by every part except [`Body`]: the parts that may come before the last
    /// argument of a handler.
    #[diagnostic::on_unimplemented(
        message = "this argument reads the request body, so it must be the handler's last argument",
        label = "a body extractor before other extractors",
        note = "axum reads the body once, after every other extractor: move this argument to the end"
    )]
    pub trait NotBody: Part {}

    macro_rules! parts {
        ($($(#[$meta:meta])* $name:ident => $member:expr, $not_body:tt;)*) => {$(
            $(#[$meta])*
            #[derive(Debug, Clone, Copy)]
            pub struct $name;
            impl sealed::Sealed for $name {}
            impl Part for $name {
                const NAME: Option<&'static str> = $member;
            }
            parts!(@not_body $name $not_body);
        )*};
        (@not_body $name:ident yes) => { impl NotBody for $name {} };
        (@not_body $name:ident no) => {};
    }

    parts! {
        /// The request body (`body`). Must be the last argument.
        Body => Some("body"), no;
        /// Path parameters (`path`).
        Path => Some("path"), yes;
        /// The query string (`query`).
        Query => Some("query"), yes;
        /// Request headers that change the outcome (`headers`).
        Headers => Some("headers"), yes;
        /// Not part of the request's meaning: authentication, state, connection details.
        Ignored => None, yes;
    }
}

/// An extractor, as the fingerprint sees it: which [`part`] of the request it is and how
/// its value is written.
///
/// Implemented for axum's `Json`, `Form`, `Query`, `Path`, `RawQuery`, for `Bytes` and
/// `String` bodies, for idem's own body extractors, and for `Option<T>` of any of these.
/// `State`, `Extension` and `ConnectInfo`, and every [`crate::Principal`]
/// (your authentication extractor), are [`part::Ignored`].
///
/// A custom extractor implements it once, and is then fingerprinted wherever it is used:
///
/// ```
/// use idem_runtime::fingerprint::{FingerprintError, InputWriter, part};
/// use idem_runtime::Input;
///
/// /// axum's usual wrapper for custom rejections.
/// struct AppJson<T>(T);
///
/// impl<T: serde::Serialize> Input for AppJson<T> {
///     type Part = part::Body;
///     fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
///         out.value(&self.0)
///     }
/// }
///
/// /// An extractor that does not carry the request's meaning.
/// struct RequestId(String);
///
/// impl Input for RequestId {
///     type Part = part::Ignored;
///     fn write(&self, _: InputWriter<'_>) -> Result<(), FingerprintError> {
///         Ok(())
///     }
/// }
/// ```
///
/// An argument can also be left out of the fingerprint where it is used, by marking it
/// `#[not_input]` in the handler's signature.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an `Input`: idem cannot tell whether it is part of the request's meaning",
    label = "not an `Input`, and not marked `#[not_input]`",
    note = "if it carries what the client asks for (body, path, query, a header that changes the outcome), implement `idem_runtime::Input` for it with the matching `Part`: it is then fingerprinted, and a retry with another value gets 422",
    note = "if it does not (authentication, request ids, connection details), implement `Input` with `type Part = part::Ignored`, or mark this argument `#[not_input]`",
    note = "idem's and axum's extractors (`JsonBody<T>`, `Json<T>`, `Form<T>`, `Query<T>`, `Path<T>`) are inputs when `T` implements `serde::Serialize`; `Checked<T>` also needs `T: Check`, `Validated<T>` `T: validator::Validate`, `Garde<T>` `T: garde::Validate`"
)]
pub trait Input {
    /// Where the value goes: [`part::Body`], [`part::Path`], [`part::Query`],
    /// [`part::Headers`] or [`part::Ignored`].
    type Part: part::Part;

    /// Writes the value, with exactly one call on `out` (nothing for [`part::Ignored`]).
    ///
    /// # Errors
    /// When the value cannot be written canonically.
    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError>;
}

/// Receives the value of one [`Input`]. Each method consumes the writer: one value per part.
#[derive(Debug)]
pub struct InputWriter<'a> {
    sink: &'a mut Sink,
    /// The part's JSON pointer in the canonical request (`/body`).
    part: &'a str,
    exclude: Exclude<'a>,
    written: &'a mut bool,
}

impl InputWriter<'_> {
    /// Writes a serialisable value canonically.
    ///
    /// # Errors
    /// When `value` cannot be written canonically.
    pub fn value<T: Serialize + ?Sized>(self, value: &T) -> Result<(), FingerprintError> {
        *self.written = true;
        if self.sink.kept.is_none() {
            canonical::write(value, &self.exclude, self.sink)?;
            return Ok(());
        }
        let maps = canonical::write_noting_maps(value, &self.exclude, self.sink)?;
        let part = self.part;
        self.sink
            .maps
            .extend(maps.into_iter().map(|map| format!("{part}{map}")));
        Ok(())
    }

    /// Writes text as it is, as one JSON string.
    pub fn text(self, text: &str) -> Result<(), FingerprintError> {
        *self.written = true;
        canonical::write_str(text, self.sink);
        Ok(())
    }

    /// Writes raw bytes as they are: as text when they are UTF-8, else as `{"hex": "…"}`.
    pub fn bytes(self, bytes: &[u8]) -> Result<(), FingerprintError> {
        if let Ok(text) = std::str::from_utf8(bytes) {
            return self.text(text);
        }
        *self.written = true;
        const HEX: &[u8; 16] = b"0123456789abcdef";
        self.sink.write(b"{\"hex\":\"");
        let mut chunk = [0u8; 128];
        for piece in bytes.chunks(chunk.len() / 2) {
            for (i, &b) in piece.iter().enumerate() {
                chunk[2 * i] = HEX[usize::from(b >> 4)];
                chunk[2 * i + 1] = HEX[usize::from(b & 0xf)];
            }
            self.sink.write(&chunk[..2 * piece.len()]);
        }
        self.sink.write(b"\"}");
        Ok(())
    }
}

/// Object-safe view of [`Input`], so the expansion can pass a slice of parts.
#[doc(hidden)]
pub trait DynInput {
    fn name(&self) -> Option<&'static str>;
    fn write_dyn(&self, out: InputWriter<'_>) -> Result<(), FingerprintError>;
}

impl<T: Input> DynInput for T {
    fn name(&self) -> Option<&'static str> {
        <T::Part as part::Part>::NAME
    }
    fn write_dyn(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        self.write(out)
    }
}

/// The most parts one request may have (an axum handler takes at most 16 arguments).
const MAX_PARTS: usize = 16;

/// Fingerprints the input parts of one request — `{"<part>": <value>, …}` with the members
/// sorted, each value streamed into the hash — and keeps the canonical request it hashed, with
/// where its maps are (for [`crate::fields`]).
pub(crate) fn of_parts_kept(
    operation_id: &str,
    parts: &[&dyn DynInput],
    exclude: &[&str],
) -> Result<(Fingerprint, Vec<u8>), FingerprintError> {
    let kept = Vec::with_capacity(256);
    of_parts_into(operation_id, parts, exclude, Some(kept))
        .map(|(fingerprint, kept)| (fingerprint, kept.unwrap_or_default()))
}

fn of_parts_into(
    operation_id: &str,
    parts: &[&dyn DynInput],
    exclude: &[&str],
    kept: Option<Vec<u8>>,
) -> Result<(Fingerprint, Option<Vec<u8>>), FingerprintError> {
    let mut sink = Sink {
        hasher: begin(operation_id),
        kept,
        maps: Vec::new(),
    };
    write_parts(parts, exclude, &mut sink)?;
    if sink.kept.is_none() {
        return Ok((Fingerprint(sink.hasher.finalize().into()), None));
    }
    let (fingerprint, kept) = sink.finish();
    Ok((fingerprint, Some(kept)))
}

/// Where the input parts are written: the hash, and a copy of what it hashed when kept.
#[derive(Debug)]
struct Sink {
    hasher: Sha256,
    kept: Option<Vec<u8>>,
    /// Where the maps of what is kept are ([`canonical::write_noting_maps`]), by pointer
    /// from the root of the canonical request.
    maps: Vec<String>,
}

impl Sink {
    /// The fingerprint, and the canonical request kept with its maps noted after it
    /// ([`crate::fields::note_maps`]).
    fn finish(self) -> (Fingerprint, Vec<u8>) {
        let mut kept = self.kept.unwrap_or_default();
        crate::fields::note_maps(&mut kept, &self.maps);
        (Fingerprint(self.hasher.finalize().into()), kept)
    }
}

impl Feed for Sink {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.hasher.write(bytes);
        if let Some(kept) = &mut self.kept {
            kept.extend_from_slice(bytes);
        }
    }
}

/// Writes the input parts of one request canonically into `hasher`.
fn write_parts(
    parts: &[&dyn DynInput],
    exclude: &[&str],
    hasher: &mut Sink,
) -> Result<(), FingerprintError> {
    // (member name, occurrence, part), sorted by name then occurrence.
    let mut members: [(&str, usize, usize); MAX_PARTS] = [("", 0, 0); MAX_PARTS];
    let mut count = 0;
    for (index, part) in parts.iter().enumerate() {
        let Some(name) = part.name() else { continue };
        if count == MAX_PARTS {
            break;
        }
        let occurrence = members[..count].iter().filter(|m| m.0 == name).count() + 1;
        members[count] = (name, occurrence, index);
        count += 1;
    }
    let members = &mut members[..count];
    // Part names are ASCII: byte order is RFC 8785's UTF-16 order. `body#2` sorts after
    // `body` and before `headers`, as its name does.
    members.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));

    hasher.write(b"{");
    let mut first = true;
    let mut sub_paths: Vec<&str> = Vec::new();
    for &(name, occurrence, index) in members.iter() {
        let member = if occurrence == 1 {
            std::borrow::Cow::Borrowed(name)
        } else {
            std::borrow::Cow::Owned(format!("{name}#{occurrence}"))
        };
        sub_paths.clear();
        let mut whole = false;
        for path in exclude {
            match path.strip_prefix(&*member) {
                Some("") => whole = true,
                Some(rest) => {
                    if let Some(rest) = rest.strip_prefix('.') {
                        sub_paths.push(rest);
                    }
                }
                None => {}
            }
        }
        if whole {
            continue;
        }
        if !first {
            hasher.write(b",");
        }
        first = false;
        canonical::write_str(&member, hasher);
        hasher.write(b":");
        let mut written = false;
        let pointer = match hasher.kept {
            Some(_) => format!("/{member}"),
            None => String::new(),
        };
        let out = InputWriter {
            part: &pointer,
            sink: hasher,
            exclude: Exclude::new(&sub_paths),
            written: &mut written,
        };
        parts[index].write_dyn(out)?;
        if !written {
            hasher.write(b"null");
        }
    }
    hasher.write(b"}");
    Ok(())
}

macro_rules! serde_inputs {
    ($($part:ident => $($ty:ty),+;)*) => {$($(
        impl<T: Serialize> Input for $ty {
            type Part = part::$part;
            fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
                out.value(&self.0)
            }
        }
    )+)*};
}

serde_inputs! {
    Body => axum::Json<T>, axum::Form<T>;
    Query => axum::extract::Query<T>;
    Path => axum::extract::Path<T>;
}

impl Input for axum::extract::RawQuery {
    type Part = part::Query;
    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        match &self.0 {
            Some(query) => out.text(query),
            None => out.value(&()),
        }
    }
}

impl Input for Bytes {
    type Part = part::Body;
    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        out.bytes(self)
    }
}

impl Input for String {
    type Part = part::Body;
    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        out.text(self)
    }
}

impl<T: Input> Input for Option<T> {
    type Part = T::Part;
    fn write(&self, out: InputWriter<'_>) -> Result<(), FingerprintError> {
        match self {
            Some(value) => value.write(out),
            None => out.value(&()),
        }
    }
}

macro_rules! ignored_inputs {
    ($($(#[$meta:meta])* [$($generics:tt)*] $ty:ty;)*) => {$(
        $(#[$meta])*
        impl<$($generics)*> Input for $ty {
            type Part = part::Ignored;
            fn write(&self, _: InputWriter<'_>) -> Result<(), FingerprintError> {
                Ok(())
            }
        }
    )*};
}

ignored_inputs! {
    /// The application's state: nothing of the request.
    [S] axum::extract::State<S>;
    /// What middleware put on the request (an authenticated user, say), not the client's
    /// request itself.
    [T] axum::Extension<T>;
    /// The client's address changes between retries.
    [T] axum::extract::ConnectInfo<T>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of_parts(
        operation_id: &str,
        parts: &[&dyn DynInput],
        exclude: &[&str],
    ) -> Result<Fingerprint, FingerprintError> {
        let (fingerprint, kept) = of_parts_kept(operation_id, parts, exclude)?;
        // What is kept is what was hashed, and where its maps are after a line feed.
        let canonical = kept.split(|&b| b == b'\n').next().unwrap_or_default();
        let mut hasher = begin(operation_id);
        hasher.update(canonical);
        assert_eq!(fingerprint.as_bytes(), &<[u8; 32]>::from(hasher.finalize()));
        Ok(fingerprint)
    }
    use serde_json::json;

    fn fp(value: &serde_json::Value, exclude: &[&str]) -> Fingerprint {
        Fingerprint::of("op:v1", value, exclude).unwrap()
    }

    #[test]
    fn key_order_and_whitespace_do_not_matter() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"b": {"y": 1, "x": [1, 2]}, "a": "s"}"#).unwrap();
        let b: serde_json::Value =
            serde_json::from_str(r#"{"a":"s","b":{"x":[1,2],"y":1}}"#).unwrap();
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
    fn request_form_is_the_one_earlier_versions_wrote() {
        // Fingerprints stored by earlier versions must keep matching after an upgrade:
        // `{"body":…,"path":…,"query":…}`, sorted, compact.
        #[derive(Serialize)]
        struct NewOrder {
            sku: &'static str,
            quantity: i32,
        }
        let body = axum::Json(NewOrder {
            sku: "BOOK-1",
            quantity: 2,
        });
        let path = axum::extract::Path(7_u32);
        let query = axum::extract::Query(json!({"notify": true}));
        let digest = of_parts("create_order:v1", &[&query, &body, &path], &[]).unwrap();
        let mut expected = Sha256::new();
        expected.update(
            b"create_order:v1\0{\"body\":{\"quantity\":2,\"sku\":\"BOOK-1\"},\"path\":7,\
              \"query\":{\"notify\":true}}",
        );
        assert_eq!(digest.as_bytes()[..], expected.finalize()[..]);
    }

    #[test]
    fn excluded_paths_are_left_out() {
        let with_note = json!({"sku": "A", "meta": {"note": "x", "n": 1}});
        let other_note = json!({"sku": "A", "meta": {"note": "y", "n": 1}});
        let of = |v: &serde_json::Value, exclude: &[&str]| {
            of_parts("op:v1", &[&axum::Json(v.clone())], exclude).unwrap()
        };
        assert_ne!(of(&with_note, &[]), of(&other_note, &[]));
        assert_eq!(
            of(&with_note, &["body.meta.note"]),
            of(&other_note, &["body.meta.note"])
        );
        // A path that does not exist changes nothing; a whole part can be left out.
        assert_eq!(of(&with_note, &["body.nope.x"]), of(&with_note, &[]));
        assert_eq!(of(&with_note, &["body"]), of(&other_note, &["body"]));
        assert_eq!(
            of(&with_note, &["body"]),
            of_parts("op:v1", &[], &[]).unwrap()
        );
    }

    #[test]
    fn parts_never_overwrite_each_other() {
        let body = axum::Json(json!({"to": "bob"}));
        let other = axum::Json(json!({"to": "mallory"}));
        let same = axum::Json(json!({"to": "bob"}));
        let a = of_parts("op:v1", &[&body, &same], &[]).unwrap();
        let b = of_parts("op:v1", &[&body, &other], &[]).unwrap();
        assert_ne!(a, b);
        let digest = of_parts("op:v1", &[&body, &other], &[]).unwrap();
        let mut expected = Sha256::new();
        expected.update(b"op:v1\0{\"body\":{\"to\":\"bob\"},\"body#2\":{\"to\":\"mallory\"}}");
        assert_eq!(digest.as_bytes()[..], expected.finalize()[..]);
    }

    #[derive(Serialize)]
    struct Order {
        sku: &'static str,
        lines: Vec<std::collections::BTreeMap<&'static str, u8>>,
        meta:
            std::collections::BTreeMap<&'static str, std::collections::BTreeMap<&'static str, u8>>,
    }

    #[test]
    fn the_kept_request_notes_where_its_maps_are() {
        let order = axum::Json(Order {
            sku: "A",
            lines: vec![[("a/b", 1)].into(), [].into()],
            meta: [("k", [("x", 1)].into())].into(),
        });
        let query = axum::extract::Query(json!({"page": 1}));
        let (_, kept) = of_parts_kept("op:v1", &[&query, &order], &[]).unwrap();
        let kept = String::from_utf8(kept).unwrap();
        assert_eq!(
            kept,
            "{\"body\":{\"lines\":[{\"a/b\":1},{}],\"meta\":{\"k\":{\"x\":1}},\"sku\":\"A\"},\
             \"query\":{\"page\":1}}\n[\"/body/lines/0\",\"/body/lines/1\",\"/body/meta\",\"/query\"]"
        );
        // A typed value alone: none.
        let (_, kept) = Fingerprint::of_kept("op:v1", &[1, 2], &[]).unwrap();
        assert_eq!(kept, b"[1,2]");
    }

    #[test]
    fn raw_bodies_are_hashed_as_sent() {
        let text = String::from("{\"a\": 1}");
        let digest = of_parts("op:v1", &[&text], &[]).unwrap();
        let mut expected = Sha256::new();
        expected.update(b"op:v1\0{\"body\":\"{\\\"a\\\": 1}\"}");
        assert_eq!(digest.as_bytes()[..], expected.finalize()[..]);
        let bytes = Bytes::from_static(&[0xff, 0x00, 0x41]);
        let digest = of_parts("op:v1", &[&bytes], &[]).unwrap();
        let mut expected = Sha256::new();
        expected.update(b"op:v1\0{\"body\":{\"hex\":\"ff0041\"}}");
        assert_eq!(digest.as_bytes()[..], expected.finalize()[..]);
        assert_ne!(
            of_parts("op:v1", &[&Bytes::from_static(b"x")], &[]).unwrap(),
            of_parts("op:v1", &[&Bytes::from_static(b"y")], &[]).unwrap()
        );
    }

    #[test]
    fn ignored_parts_write_nothing() {
        let state = axum::extract::State(42_u8);
        let body = axum::Json(json!(1));
        assert_eq!(
            of_parts("op:v1", &[&state, &body], &[]).unwrap(),
            of_parts("op:v1", &[&body], &[]).unwrap()
        );
    }
}
