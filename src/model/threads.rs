//! Threads on the wire.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{AnyOfBuilder, ArrayBuilder, ObjectBuilder, SchemaType, Type};
use utoipa::openapi::{Ref, RefOr, Schema};

use super::Timestamp;
use super::labels::LabelRef;
use super::messages::{Folder, FolderFilter, Message, MessageDetail};
use crate::ids::{MailboxId, ThreadId};

crate::object_tag!(ThreadObject, "thread");

/// A person on a conversation.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Participant {
    /// Display name; empty when unknown.
    #[serde(default)]
    pub name: String,
    /// Address.
    #[serde(default)]
    pub address: String,
}

/// A conversation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Thread {
    pub object: ThreadObject,
    /// `thr_` prefix.
    pub id: ThreadId,
    /// Mailbox address.
    pub mailbox: String,
    /// `mbx_` prefix.
    pub mailbox_id: MailboxId,
    /// Subject of the first message.
    pub subject: String,
    /// Short preview of the latest message.
    pub snippet: String,
    /// A thread may be in several folders.
    pub folders: Vec<Folder>,
    pub participants: Vec<Participant>,
    /// Messages in the thread.
    pub message_count: i64,
    /// Unread messages.
    pub unread_count: i64,
    /// Star flag.
    pub is_starred: bool,
    /// Whether any message has files.
    pub has_attachments: bool,
    /// Time of the latest message.
    pub last_message_at: Timestamp,
    /// When the thread began.
    pub created_at: Timestamp,
    pub labels: Vec<LabelRef>,
}

/// A message of a thread's single read: in full, or its summary with
/// `include_body=false`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ThreadMessage {
    Full(MessageDetail),
    Summary(Message),
}

/// The single read of a thread: every message, oldest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ThreadDetail {
    #[serde(flatten)]
    pub thread: Thread,
    /// Full messages; summaries with `include_body=false`.
    #[schema(schema_with = thread_messages_schema)]
    pub messages: Vec<ThreadMessage>,
}

/// `anyOf`, not `oneOf`: a full message is also a valid summary.
fn thread_messages_schema() -> impl Into<RefOr<Schema>> {
    ArrayBuilder::new()
        .description(Some("Full messages; summaries with `include_body=false`."))
        .items(
            AnyOfBuilder::new()
                .item(Ref::from_schema_name("MessageDetail"))
                .item(Ref::from_schema_name("Message")),
        )
}

/// Label names or ids, or null: an item has to be able to name a label.
fn label_keys() -> impl Into<RefOr<Schema>> {
    let key = ObjectBuilder::new()
        .schema_type(Type::String)
        .max_length(Some(60))
        .pattern(Some("^[^\\u0000-\\u001f\\u007f-\\u009f]*[^\\s\\u0000-\\u001f\\u007f-\\u009f][^\\u0000-\\u001f\\u007f-\\u009f]*$"));
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .description(Some("Label names or ids."))
        .items(key)
}

/// A folder a thread can be moved to (drafts stay where they are).
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FolderTarget {
    Inbox,
    Sent,
    Archive,
    Spam,
    Trash,
}

/// The body of `PATCH /threads/{id}`; only fields sent change.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ThreadUpdate {
    #[schema(value_type = Option<FolderTarget>, inline)]
    pub folder: Option<String>,
    /// Mark every message read or unread.
    pub is_read: Option<bool>,
    /// Star flag.
    pub is_starred: Option<bool>,
    /// Label names or ids.
    #[schema(schema_with = label_keys)]
    pub add_labels: Option<Vec<String>>,
    /// Label names or ids.
    #[schema(schema_with = label_keys)]
    pub remove_labels: Option<Vec<String>>,
}

/// A trashed or removed thread.
#[derive(Debug, Serialize, ToSchema)]
pub struct ThreadDeleted {
    pub object: ThreadObject,
    /// `thr_` prefix.
    pub id: ThreadId,
    pub deleted: bool,
    /// false: moved to trash; true: removed for good.
    pub permanent: bool,
}

super::query::query_params! {
/// The filters of `GET /threads`.
pub struct ThreadListQuery {
    /// Only threads in this folder.
    #[param(inline)]
    pub folder: Option<FolderFilter>,
    /// Only threads carrying this label (`lbl_` id).
    #[param(inline)]
    pub label_id: Option<crate::ids::LabelId>,
    /// Only threads carrying the label of this name.
    pub label: Option<String>,
    /// Full text: every word somewhere in the thread's messages (drafts aside).
    pub q: Option<String>,
    /// true: threads with anything unread; false: none unread.
    pub unread: Option<bool>,
    /// Starred or not.
    pub starred: Option<bool>,
    /// With files or not.
    pub has_attachments: Option<bool>,
    /// Any address on the conversation.
    #[param(inline)]
    pub participant: Option<super::query::Address>,
    /// Substring of the subject.
    pub subject: Option<String>,
    /// `last_message_at` at or after.
    #[param(inline)]
    pub since: Option<super::query::Since>,
    /// `last_message_at` at or before; a date means the end of that day (UTC).
    #[param(inline)]
    pub until: Option<super::query::Until>,
    /// Only mail of this mailbox (`mbx_` id).
    #[param(inline)]
    pub mailbox_id: Option<crate::ids::MailboxId>,
    /// Only mail of this mailbox address.
    #[param(inline)]
    pub mailbox: Option<super::query::Address>,
    /// Only mail on this domain name.
    pub domain: Option<String>,
}
}

super::query::query_params! {
/// The options of `GET /threads/{id}`.
pub struct ThreadReadQuery {
    /// Default true; false leaves out bodies, headers, attachments and events.
    pub include_body: Option<bool>,
}
}

super::query::query_params! {
/// The options of `DELETE /threads/{id}`.
pub struct ThreadDeleteQuery {
    /// Skip trash and remove for good. Default false.
    pub permanent: Option<bool>,
}
}
