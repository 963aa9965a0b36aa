//! The wire contract: the types every request and reply is made of.
//!
//! A leaf module: `api` answers with these types and `core` builds them (a
//! webhook payload is the same message summary the API returns), so they sit
//! below both. Each derives `utoipa::ToSchema`, so the OpenAPI document is
//! generated from the very types that are serialised.

pub mod contacts;
pub mod domains;
pub mod drafts;
mod envelope;
pub mod error;
pub mod events;
pub mod keys;
pub mod labels;
pub mod mailboxes;
pub mod messages;
pub mod ops;
pub mod provider;
pub mod query;
pub mod sending;
pub mod suppressions;
pub mod threads;
mod time;
pub mod webhooks;

pub use envelope::{Deleted, List, ListObject};
pub use time::Timestamp;

/// For a PATCH field where `null` means "clear": absent is `None`, `null` is
/// `Some(None)` (use with `#[serde(default, deserialize_with = ...)]`).
pub fn nullable<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    serde::Deserialize::deserialize(d).map(Some)
}

/// A one-value string for an object's `object` field (`"label"`), so the
/// schema says exactly which value it holds.
#[macro_export]
macro_rules! object_tag {
    ($name:ident, $value:literal) => {
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct $name;

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str($value)
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::schema::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$value]))
                    .into()
            }
        }

        impl utoipa::ToSchema for $name {
            fn name() -> std::borrow::Cow<'static, str> {
                std::borrow::Cow::Borrowed(stringify!($name))
            }
        }
    };
}
