//! Instants on the wire.

use serde::{Serialize, Serializer};
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

/// Microseconds since the Unix epoch, written as ISO 8601 UTC with six
/// decimals (`2026-11-22T04:07:28.123456Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub i64);

impl Timestamp {
    pub fn opt(micros: Option<i64>) -> Option<Timestamp> {
        micros.map(Timestamp)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::clock::iso(self.0))
    }
}

impl PartialSchema for Timestamp {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .into()
    }
}

impl ToSchema for Timestamp {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_iso_with_microseconds() {
        let t = Timestamp(1_795_000_000_123_456);
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            format!("\"{}\"", crate::clock::iso(t.0))
        );
        assert_eq!(
            serde_json::to_string(&Timestamp::opt(None)).unwrap(),
            "null"
        );
    }
}
