//! The envelopes around objects: lists and deletions.

use serde::Serialize;
use utoipa::ToSchema;

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

/// What a `DELETE` answers: the object's kind and id, and `deleted: true`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted<O: ToSchema> {
    pub object: O,
    pub id: String,
    pub deleted: bool,
}

impl<O: ToSchema> Deleted<O> {
    pub fn new(object: O, id: impl Into<String>) -> Deleted<O> {
        Deleted {
            object,
            id: id.into(),
            deleted: true,
        }
    }
}
