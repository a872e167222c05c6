//! The serializer of values: scalars written straight through, arrays element by element,
//! objects collected and written with their members sorted.

use serde::ser::{self, Serialize};

use super::key::KeySer;
use super::maps::Maps;
use super::scalars::{
    NUMBER_TOKEN, cmp_utf16, write_escaped, write_f64, write_int, write_number_text,
};
use super::{CanonicalError, Exclude, Feed, R, write_str};

/// State shared by the whole serialisation of one value.
#[derive(Default)]
pub(super) struct Serialisation<'e> {
    pub(super) exclude: Exclude<'e>,
    /// The path of the current member, `.a.b`, as far as it is addressable by `exclude`.
    path: Vec<u8>,
    /// Member buffers of finished objects, for reuse.
    pool: Vec<Members>,
    /// Where the maps are, when asked ([`super::write_noting_maps`]).
    pub(super) maps: Option<Maps>,
}

impl<'e> Serialisation<'e> {
    /// A serializer of a value into `out`, addressable by `exclude` when `live`.
    pub(super) fn ser<'a, S: Feed>(&'a mut self, out: &'a mut S, live: bool) -> Ser<'a, 'e, S> {
        Ser {
            out,
            ctx: self,
            live,
        }
    }

    /// Where the current value is, for [`Maps`]: a mark to come back to.
    fn mark(&self) -> usize {
        self.maps.as_ref().map_or(0, Maps::mark)
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
pub(super) struct Ser<'a, 'e, S> {
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
        let mark = self.ctx.mark();
        if let Some(maps) = &mut self.ctx.maps {
            maps.enter(mark, variant.as_bytes());
        }
        self.out.write(b"{");
        write_str(variant, self.out);
        self.out.write(b":");
        Some(live)
    }

    /// Opens an array, or a tuple variant's `{"variant":[`.
    fn array(mut self, variant: Option<&str>) -> Array<'a, 'e, S> {
        let restore = self.ctx.path.len();
        let back = self.ctx.mark();
        let skip = variant.is_some_and(|v| self.variant(v).is_none());
        self.ctx.path.truncate(restore); // elements are not addressable
        self.out.write(if skip { b"" } else { b"[" });
        let close: &[u8] = match (skip, variant) {
            (true, _) => b"{}",
            (false, Some(_)) => b"]}",
            (false, None) => b"]",
        };
        Array {
            base: self.ctx.mark(),
            back,
            out: self.out,
            ctx: self.ctx,
            index: 0,
            skip,
            close,
        }
    }

    /// Opens an object, or a struct variant's `{"variant":{`; `number` for the struct that
    /// stands for a `serde_json::Number` under `arbitrary_precision`, `map` for a map.
    fn object(mut self, variant: Option<&str>, number: bool, map: bool) -> Object<'a, 'e, S> {
        let restore = self.ctx.path.len();
        let back = self.ctx.mark();
        let (kind, live) = match variant.map(|v| self.variant(v)) {
            None if number => (Kind::Number, false),
            None => (Kind::Plain, self.live),
            Some(None) => (Kind::Skip, false),
            Some(Some(live)) => (Kind::Variant, live),
        };
        if let Some(maps) = self.ctx.maps.as_mut().filter(|_| map) {
            maps.open_map();
        }
        Object {
            members: self.ctx.pool.pop().unwrap_or_default(),
            base: self.ctx.path.len(),
            pointer: (self.ctx.mark(), back),
            map,
            out: self.out,
            ctx: self.ctx,
            kind,
            live,
            restore,
            key: None,
        }
    }
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
        let (base, back) = (self.ctx.path.len(), self.ctx.mark());
        let Some(live) = self.variant(variant) else {
            self.out.write(b"{}");
            return Ok(());
        };
        value.serialize(self.ctx.ser(&mut *self.out, live))?;
        self.ctx.path.truncate(base);
        if let Some(maps) = &mut self.ctx.maps {
            maps.leave(back);
        }
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
        Ok(self.object(None, false, true))
    }
    fn serialize_struct(self, name: &str, _: usize) -> R<Self::SerializeStruct> {
        Ok(self.object(None, name == NUMBER_TOKEN, false))
    }
    fn serialize_struct_variant(
        self,
        _: &str,
        _: u32,
        variant: &str,
        _: usize,
    ) -> R<Self::SerializeStructVariant> {
        Ok(self.object(Some(variant), false, false))
    }
}

/// An array, written straight through; `skip` when it is an excluded variant's content.
pub(super) struct Array<'a, 'e, S> {
    out: &'a mut S,
    ctx: &'a mut Serialisation<'e>,
    /// The next element's index.
    index: usize,
    /// The array's mark, and the mark to come back to at the end ([`Maps`]).
    base: usize,
    back: usize,
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
                self.out.write(if self.index == 0 { b"" } else { b"," });
                if let Some(maps) = &mut self.ctx.maps {
                    maps.enter_index(self.base, self.index);
                }
                self.index += 1;
                value.serialize(self.ctx.ser(&mut *self.out, false))
            }
            fn end(self) -> R {
                self.out.write(self.close);
                if let Some(maps) = &mut self.ctx.maps {
                    maps.leave(self.back);
                }
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
pub(super) struct Object<'a, 'e, S> {
    out: &'a mut S,
    ctx: &'a mut Serialisation<'e>,
    members: Members,
    kind: Kind,
    /// Members are addressable by `exclude`, below `ctx.path[..base]`.
    live: bool,
    base: usize,
    /// Path length to restore at the end (before a variant's name).
    restore: usize,
    /// The object's mark, and the mark to come back to at the end ([`Maps`]).
    pointer: (usize, usize),
    /// A map (`serialize_map`), whose member names are data.
    map: bool,
    /// The pending member: start of its name, and whether its value is addressable (`None`:
    /// excluded).
    key: Option<(usize, Option<bool>)>,
}

impl<S: Feed> Object<'_, '_, S> {
    /// Starts the next member, whose raw name `name` appends to the buffer.
    fn key(&mut self, name: impl FnOnce(KeySer<'_>) -> R) -> R {
        let (start, buf) = (self.members.buf.len(), &mut self.members.buf);
        name(KeySer(buf))?;
        if let Some(maps) = &mut self.ctx.maps {
            maps.enter(self.pointer.0, &buf[start..]);
        }
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
        if let Some(maps) = &mut self.ctx.maps {
            if self.map {
                maps.close_map();
            }
            maps.leave(self.pointer.1);
        }
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
