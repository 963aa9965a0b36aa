//! A deserializer wrapper that reads a struct only from a JSON object.
//!
//! serde_json reads a struct from an array too (`[true, false]` as
//! `{is_read, is_starred}`), so a body the document describes as an object
//! would be accepted as an array. Asking for a map instead of a struct
//! refuses everything but an object at the top level.

use serde::de::{Deserializer, Visitor};

pub struct StructAsMap<D>(pub D);

macro_rules! forward {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Self::Error> {
            self.0.$method(visitor)
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for StructAsMap<D> {
    type Error = D::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_map(visitor)
    }

    forward! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_unit_struct(name, visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_newtype_struct(name, visitor)
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_tuple(len, visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_tuple_struct(name, len, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_enum(name, variants, visitor)
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::StructAsMap;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Flags {
        a: Option<bool>,
        b: Option<bool>,
    }

    fn read<T: for<'de> Deserialize<'de>>(json: &str) -> Result<T, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(json);
        T::deserialize(StructAsMap(&mut de))
    }

    #[test]
    fn a_struct_comes_only_from_an_object() {
        assert!(serde_json::from_str::<Flags>("[true, false]").is_ok());
        let e = read::<Flags>("[true, false]").unwrap_err();
        assert!(e.to_string().contains("invalid type: sequence"), "{e}");
        assert_eq!(
            read::<Flags>(r#"{"a": true}"#).unwrap(),
            Flags {
                a: Some(true),
                b: None
            }
        );
        assert_eq!(read::<Vec<u8>>("[1, 2]").unwrap(), vec![1, 2]);
    }
}
