//! The envelopes around objects: lists and deletions.

use std::borrow::Cow;

use serde::Serialize;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{Ref, RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use crate::ids::{Id, IdKind};

crate::object_tag!(ListObject, "list");

/// The list envelope. Paged lists take `limit` and `cursor`; unpaged ones
/// always answer `has_more: false`.
#[derive(Debug, Serialize, ToSchema)]
pub struct List<T: ToSchema> {
    pub object: ListObject,
    pub data: Vec<T>,
    /// Whether another page follows.
    pub has_more: bool,
    /// Present when `has_more`: pass it back untouched as `cursor`. Opaque.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

impl<T: ToSchema> List<T> {
    /// A list that is never paged.
    pub fn whole(data: Vec<T>) -> List<T> {
        List {
            object: ListObject,
            data,
            has_more: false,
            next_cursor: None,
        }
    }
}

/// An object tag whose objects a plain [`Deleted`] reports: it names the
/// kind of their ids.
pub trait Deletable: ToSchema {
    type Kind: IdKind;
}

/// What a `DELETE` answers: the object's kind and id, and `deleted: true`.
#[derive(Debug, Serialize)]
pub struct Deleted<O: Deletable> {
    pub object: O,
    pub id: Id<O::Kind>,
    pub deleted: bool,
}

impl<O: Deletable> Deleted<O> {
    /// `id` is one read from the store.
    pub fn new(object: O, id: impl Into<String>) -> Deleted<O> {
        Deleted {
            object,
            id: Id::from_stored(id.into()),
            deleted: true,
        }
    }
}

impl<O: Deletable> ToSchema for Deleted<O> {
    // The path macro appends the type argument's name: `Deleted_LabelObject`.
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Deleted")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((Id::<O::Kind>::name().into_owned(), Id::<O::Kind>::schema()));
    }
}

// Written out rather than derived: the derive cannot name the id type
// through `O`. Same schema and name as derived, the id aside.
// `ComposeSchema` is what a generic type implements for utoipa (its
// `PartialSchema` follows); `body = Deleted<LabelObject>` in a path
// annotation calls it.
impl<O: Deletable> utoipa::__dev::ComposeSchema for Deleted<O> {
    fn compose(_: Vec<RefOr<Schema>>) -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some(
                "What a `DELETE` answers: the object's kind and id, and `deleted: true`.",
            ))
            .property("object", O::schema())
            .property("id", Ref::from_schema_name(Id::<O::Kind>::name()))
            .property("deleted", ObjectBuilder::new().schema_type(Type::Boolean))
            .required("object")
            .required("id")
            .required("deleted")
            .into()
    }
}
