//! Drafts on the wire.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::messages::Message;
use crate::ids::ThreadId;

crate::object_tag!(DraftObject, "draft");

/// A draft is a message: its id is a message id.
impl super::envelope::Deletable for DraftObject {
    type Kind = crate::ids::MessageKind;
}

/// An unsent message (`is_draft` true, `status` draft) with its bodies.
#[derive(Debug, Serialize, ToSchema)]
pub struct Draft {
    #[serde(flatten)]
    pub message: Message,
    /// Plain-text body.
    pub text: String,
    /// HTML body.
    pub html: String,
}

/// One address or several.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// The body of `POST /drafts`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DraftCreate {
    /// The address of a mailbox the key reaches.
    // Absent is refused with a 422 naming `from`.
    #[schema(value_type = String, required = true, format = Email)]
    pub from: Option<String>,
    /// Put the draft in this thread of that mailbox (`thr_` id).
    pub thread_id: Option<ThreadId>,
    /// OneOrMany.
    pub to: Option<OneOrMany>,
    /// Copy recipients.
    pub cc: Option<OneOrMany>,
    /// Blind-copy recipients.
    pub bcc: Option<OneOrMany>,
    /// Subject.
    pub subject: Option<String>,
    /// Plain-text body.
    pub text: Option<String>,
    /// HTML body.
    pub html: Option<String>,
}

/// The body of `PATCH /drafts/{id}`; only fields sent change.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DraftUpdate {
    /// OneOrMany.
    pub to: Option<OneOrMany>,
    /// Copy recipients.
    pub cc: Option<OneOrMany>,
    /// Blind-copy recipients.
    pub bcc: Option<OneOrMany>,
    /// Subject.
    pub subject: Option<String>,
    /// Plain-text body.
    pub text: Option<String>,
    /// HTML body.
    pub html: Option<String>,
}

super::query::query_params! {
/// The filters of `GET /drafts`.
pub struct DraftListQuery {
    /// Only drafts of this mailbox (address or `mbx_` id).
    pub mailbox: Option<String>,
}
}
