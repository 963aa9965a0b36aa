//! Labels on the wire.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Timestamp;
use crate::ids::LabelId;

crate::object_tag!(LabelObject, "label");

impl super::envelope::Deletable for LabelObject {
    type Kind = crate::ids::LabelKind;
}

/// A name with a colour that threads can carry.
#[derive(Debug, Serialize, ToSchema)]
pub struct Label {
    pub object: LabelObject,
    /// `lbl_` prefix.
    pub id: LabelId,
    /// Unique, case-insensitively.
    pub name: String,
    /// `#rrggbb`.
    pub color: String,
    pub created_at: Timestamp,
}

/// A label as embedded in a thread.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LabelRef {
    pub object: LabelObject,
    /// `lbl_` prefix.
    pub id: LabelId,
    pub name: String,
}

/// The body of `POST /labels`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct LabelCreate {
    /// 1 to 60 characters, not only spaces, no control characters;
    /// unique.
    // Absent is refused with a 422 naming `name`.
    #[schema(value_type = String, required = true, max_length = 60, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    pub name: Option<String>,
    /// `#rrggbb`; default `#9ca3af`.
    #[schema(pattern = "^#[0-9a-fA-F]{6}$")]
    pub color: Option<String>,
}

/// The body of `PATCH /labels/{id}`: the fields to change.
#[derive(Debug, Deserialize, ToSchema)]
pub struct LabelUpdate {
    /// 1 to 60 characters, not only spaces, no control characters;
    /// unique.
    #[schema(
        max_length = 60,
        pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$"
    )]
    pub name: Option<String>,
    /// `#rrggbb`.
    #[schema(pattern = "^#[0-9a-fA-F]{6}$")]
    pub color: Option<String>,
}
