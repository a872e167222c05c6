//! The serializer of map keys: a key is written as its raw name, or refused.

use serde::ser::{self, Impossible, Serialize};

use super::scalars::write_int;
use super::{CanonicalError, R};

/// The compound serializers of [`KeySer`], never used.
type No = Impossible<(), CanonicalError>;

/// Serializes a map key as its raw (unescaped) name into `out`.
pub(super) struct KeySer<'a>(pub(super) &'a mut Vec<u8>);

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
