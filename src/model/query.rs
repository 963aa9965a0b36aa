//! Types that describe query parameters in the document.

use utoipa::openapi::schema::{AnyOfBuilder, KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

/// A query bound: a date (`2026-11-22`) or a full ISO 8601 timestamp.
pub struct Instant;

impl PartialSchema for Instant {
    fn schema() -> RefOr<Schema> {
        let of = |f| {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(f)))
        };
        AnyOfBuilder::new()
            .item(of(KnownFormat::Date))
            .item(of(KnownFormat::DateTime))
            .into()
    }
}

impl ToSchema for Instant {}
