//! Stored messages on the wire: the summary (list items and webhook event
//! payloads), the single read with bodies, attachments and provider events,
//! and the flags a reader may change.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa::openapi::schema::{
    AdditionalProperties, ArrayBuilder, ObjectBuilder, OneOfBuilder, SchemaType, Type,
};
use utoipa::openapi::{RefOr, Schema};

use super::Timestamp;
use crate::ids::{AttachmentId, KeyId, MailboxId, MessageId, ThreadId};

crate::object_tag!(MessageObject, "message");
crate::object_tag!(AttachmentObject, "attachment");
crate::object_tag!(EventObject, "event");

/// Which way a message went: `/emails` serves sent mail (scope
/// `emails:read`), `/messages` received mail (scope `mail:read`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Outbound,
    Inbound,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Outbound => "outbound",
            Direction::Inbound => "inbound",
        }
    }
}

/// A stored message without bodies (list items and event payloads).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Message {
    pub object: MessageObject,
    /// `msg_` prefix.
    pub id: MessageId,
    /// RFC 5322 Message-ID, in angle brackets.
    pub message_id: String,
    /// The provider's own id.
    #[schema(required = true)]
    pub provider_message_id: Option<String>,
    /// `thr_` prefix.
    pub thread_id: ThreadId,
    /// `mbx_` prefix.
    pub mailbox_id: MailboxId,
    pub direction: Direction,
    /// Sender address.
    pub from: String,
    /// Sender display name.
    #[schema(required = true)]
    pub from_name: Option<String>,
    /// Recipients.
    pub to: Vec<String>,
    /// Copy recipients.
    pub cc: Vec<String>,
    /// Blind-copy recipients.
    pub bcc: Vec<String>,
    /// Reply-To address.
    #[schema(required = true)]
    pub reply_to: Option<String>,
    /// Subject.
    pub subject: String,
    /// Outbound: one of queued, sent, delivered, bounced, complained, rejected, delayed, failed (a draft: draft). Received mail: received.
    pub status: MessageStatus,
    /// Diagnostic text, for example an SMTP failure line.
    #[schema(required = true)]
    pub error: Option<String>,
    /// Set when the tracking image was first loaded.
    #[schema(required = true)]
    pub opened_at: Option<Timestamp>,
    /// Tracking-image loads.
    pub open_count: i64,
    /// Read flag.
    pub is_read: bool,
    /// Star flag.
    pub is_starred: bool,
    /// Drafts are not sent and not in the sent-mail list.
    pub is_draft: bool,
    /// Whether files are attached.
    pub has_attachments: bool,
    /// In-Reply-To header.
    #[schema(required = true)]
    pub in_reply_to: Option<String>,
    /// References header.
    #[schema(required = true)]
    pub references: Option<String>,
    /// The key that sent it.
    #[schema(required = true)]
    pub api_key_id: Option<KeyId>,
    /// When it was recorded.
    pub created_at: Timestamp,
    /// When the provider accepted it.
    #[schema(required = true)]
    pub sent_at: Option<Timestamp>,
    /// When it arrived (received mail).
    #[schema(required = true)]
    pub received_at: Option<Timestamp>,
}

/// The single read of a message: bodies, headers, attachments and every event.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct MessageDetail {
    #[serde(flatten)]
    pub message: Message,
    /// Plain-text body.
    pub text: String,
    /// HTML body.
    pub html: String,
    /// Headers: those given on send, or every header of received mail (a repeated header as an array).
    #[schema(schema_with = headers_schema, required = true)]
    pub headers: serde_json::Value,
    #[schema(max_items = 100)]
    pub attachments: Vec<Attachment>,
    /// How many attachments the message has; only the first 100 (in the order stored) are listed in `attachments`. The others stay downloadable by id and are in the raw MIME (`GET /api/v1/messages/{id}/raw`).
    pub attachment_count: i64,
    pub events: Vec<Event>,
}

/// Stored headers: a name to one value, or to every value of a repeated header.
fn headers_schema() -> impl Into<RefOr<Schema>> {
    let string = || ObjectBuilder::new().schema_type(Type::String);
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([
            Type::Object,
            Type::Null,
        ]))
        .description(Some(
            "Headers: those given on send, or every header of received mail (a repeated header as an array).",
        ))
        .additional_properties(Some(AdditionalProperties::RefOr(RefOr::T(
            Schema::OneOf(
                OneOfBuilder::new()
                    .description(Some("Header value(s)."))
                    .item(string())
                    .item(ArrayBuilder::new().items(string()))
                    .build(),
            ),
        ))))
}

/// A provider event on a message.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Event {
    pub object: EventObject,
    #[serde(rename = "type")]
    #[schema(examples("send", "delivery", "bounce", "complaint", "reject", "delay", "open"))]
    pub kind: String,
    /// When it happened.
    pub occurred_at: Timestamp,
    /// The recipient concerned (bounces, complaints, deliveries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipient: Option<String>,
    /// Diagnostic detail (bounces).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A file of a stored message.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Attachment {
    pub object: AttachmentObject,
    /// Download at `/api/v1/emails/{id}/attachments/{attachment_id}`.
    pub id: AttachmentId,
    /// File name.
    pub filename: String,
    /// Media type.
    pub content_type: String,
    /// Bytes.
    pub size: i64,
    /// Set for inline parts referenced as `cid:` from HTML.
    #[schema(required = true)]
    pub content_id: Option<String>,
    /// Embedded inline instead of attached.
    pub inline: bool,
}

/// The body of `PATCH /messages/{id}`; only fields sent change.
#[derive(Debug, Deserialize, ToSchema)]
pub struct MessageUpdate {
    /// Read flag.
    pub is_read: Option<bool>,
    /// Star flag.
    pub is_starred: Option<bool>,
}

/// A message's status: sent mail moves through the first eight (see the
/// transition table in `core::provider_events`); a draft is `draft`,
/// received mail always `received`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageStatus {
    Queued,
    Sent,
    Delivered,
    Bounced,
    Complained,
    Rejected,
    Delayed,
    Failed,
    Draft,
    Received,
}

impl MessageStatus {
    pub const ALL: [MessageStatus; 10] = [
        MessageStatus::Queued,
        MessageStatus::Sent,
        MessageStatus::Delivered,
        MessageStatus::Bounced,
        MessageStatus::Complained,
        MessageStatus::Rejected,
        MessageStatus::Delayed,
        MessageStatus::Failed,
        MessageStatus::Draft,
        MessageStatus::Received,
    ];

    /// The statuses of sent mail: what `GET /emails?status=` filters on.
    pub const SENT: [MessageStatus; 8] = [
        MessageStatus::Queued,
        MessageStatus::Sent,
        MessageStatus::Delivered,
        MessageStatus::Bounced,
        MessageStatus::Complained,
        MessageStatus::Rejected,
        MessageStatus::Delayed,
        MessageStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MessageStatus::Queued => "queued",
            MessageStatus::Sent => "sent",
            MessageStatus::Delivered => "delivered",
            MessageStatus::Bounced => "bounced",
            MessageStatus::Complained => "complained",
            MessageStatus::Rejected => "rejected",
            MessageStatus::Delayed => "delayed",
            MessageStatus::Failed => "failed",
            MessageStatus::Draft => "draft",
            MessageStatus::Received => "received",
        }
    }

    pub fn parse(s: &str) -> Option<MessageStatus> {
        MessageStatus::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// One of [`MessageStatus::SENT`].
    pub fn parse_sent(s: &str) -> Option<MessageStatus> {
        MessageStatus::SENT.into_iter().find(|x| x.as_str() == s)
    }
}

/// Compares with the stored and wire text (`status == "sent"`).
impl PartialEq<&str> for MessageStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Where a message or thread is filed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Folder {
    Inbox,
    Sent,
    Drafts,
    Archive,
    Spam,
    Trash,
}

impl Folder {
    pub const ALL: [Folder; 6] = [
        Folder::Inbox,
        Folder::Sent,
        Folder::Drafts,
        Folder::Archive,
        Folder::Spam,
        Folder::Trash,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Folder::Inbox => "inbox",
            Folder::Sent => "sent",
            Folder::Drafts => "drafts",
            Folder::Archive => "archive",
            Folder::Spam => "spam",
            Folder::Trash => "trash",
        }
    }

    pub fn parse(s: &str) -> Option<Folder> {
        Folder::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

super::query::query_params! {
/// The filters of `GET /emails`.
pub struct EmailListQuery {
    /// One or several message statuses, comma-separated.
    #[param(
        value_type = Option<String>,
        pattern = "^(queued|sent|delivered|bounced|complained|rejected|delayed|failed)(,(queued|sent|delivered|bounced|complained|rejected|delayed|failed))*$"
    )]
    pub status: Option<super::query::SentStatuses>,
    /// Exact sender address.
    #[param(inline)]
    pub from: Option<super::query::Address>,
    /// Exact recipient address.
    #[param(inline)]
    pub to: Option<super::query::Address>,
    /// Substring of the subject.
    pub subject: Option<String>,
    /// Full text over subject and body.
    pub q: Option<String>,
    /// Only opened (true) or unopened (false) mail.
    pub opened: Option<bool>,
    /// Only mail sent by this API key (`key_` id).
    #[param(inline)]
    pub api_key_id: Option<crate::ids::KeyId>,
    /// Created at or after.
    #[param(inline)]
    pub since: Option<super::query::Since>,
    /// Created at or before; a date means the end of that day (UTC).
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

/// A folder, or `all`.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FolderFilter {
    Inbox,
    Sent,
    Drafts,
    Archive,
    Spam,
    Trash,
    All,
}

super::query::query_params! {
/// The filters of `GET /messages`.
pub struct MessageListQuery {
    /// Only messages in this folder.
    #[param(inline)]
    pub folder: Option<FolderFilter>,
    /// Only messages of this thread.
    #[param(inline)]
    pub thread_id: Option<crate::ids::ThreadId>,
    /// Exact sender address.
    #[param(inline)]
    pub from: Option<super::query::Address>,
    /// Exact recipient address.
    #[param(inline)]
    pub to: Option<super::query::Address>,
    /// Substring of the subject.
    pub subject: Option<String>,
    /// Full text over subject and body.
    pub q: Option<String>,
    /// Unread (true) or read (false) only.
    pub unread: Option<bool>,
    /// Received at or after.
    #[param(inline)]
    pub since: Option<super::query::Since>,
    /// Received at or before; a date means the end of that day (UTC).
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

/// Declares a doc-only type for a reply of raw bytes of one media type.
macro_rules! raw_bytes {
    ($name:ident, $media:literal) => {
        pub struct $name;

        impl utoipa::PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .content_media_type($media)
                    .into()
            }
        }

        impl ToSchema for $name {}
    };
}

raw_bytes!(FileBytes, "application/octet-stream");
raw_bytes!(RawMime, "message/rfc822");
