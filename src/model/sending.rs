//! Sending on the wire: the bodies of `POST /emails`, `POST /emails/batch`
//! and `POST /threads/{id}/reply`, and what a send answers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::Ref;
use utoipa::openapi::schema::{
    ArrayBuilder, KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
};
use utoipa::openapi::{RefOr, schema::SchemaType};
use utoipa::{PartialSchema, ToSchema};

use super::drafts::OneOrMany;
use crate::ids::{MessageId, ThreadId};

crate::object_tag!(BatchObject, "batch");

/// Messages one batch may hold.
pub const MAX_BATCH: usize = 100;

/// An address, which the server checks: `format: email` (an addr-spec),
/// though `Name <address>` is accepted as well.
fn address(doc: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Email)))
        .min_length(Some(1))
        .description(Some(doc))
}

/// One Message-ID, angle brackets optional: visible ASCII with an `@`.
const MESSAGE_ID: &str = "^<?[!-;=?-~]*@[!-;=?-~]*>?$";
/// Message-IDs separated by white space.
const MESSAGE_IDS: &str = "^\\s*(<?[!-;=?-~]*@[!-;=?-~]*>?\\s+)*(<?[!-;=?-~]*@[!-;=?-~]*>?)?\\s*$";

fn message_ids() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(MESSAGE_IDS))
}

fn sender() -> RefOr<Schema> {
    address("An address on a verified domain; `Name <address>` accepted.").into()
}

fn reply_to() -> RefOr<Schema> {
    address("One address; `Name <address>` accepted.").into()
}

fn in_reply_to() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(MESSAGE_ID))
        .max_length(Some(902))
        .description(Some(
            "In-Reply-To, for callers building threads themselves: one Message-ID, angle \
             brackets optional.",
        ))
        .into()
}

/// One address, or a list of them (`min_items` for a list that may not be
/// empty); `Name <address>` is accepted, so no `format: email`.
fn addresses(doc: &str, min_items: Option<usize>) -> RefOr<Schema> {
    OneOfBuilder::new()
        .description(Some(doc))
        .item(address("One address; `Name <address>` accepted."))
        .item(
            ArrayBuilder::new()
                .items(address("An address; `Name <address>` accepted."))
                .min_items(min_items),
        )
        .into()
}

fn recipients() -> RefOr<Schema> {
    addresses("Recipients: one address or a list of 1 to 50.", Some(1))
}

fn copies() -> RefOr<Schema> {
    addresses("Copy recipients: one address or a list.", None)
}

fn blind_copies() -> RefOr<Schema> {
    addresses("Blind-copy recipients: one address or a list.", None)
}

fn references() -> RefOr<Schema> {
    OneOfBuilder::new()
        .description(Some(
            "References, for callers building threads themselves: Message-IDs, \
             one per entry or several separated by white space.",
        ))
        .item(message_ids())
        .item(ArrayBuilder::new().items(message_ids()))
        .into()
}

/// Header name to value, at most 50.
fn header_map() -> RefOr<Schema> {
    ObjectBuilder::new()
        .additional_properties(Some(ObjectBuilder::new().schema_type(Type::String)))
        .max_properties(Some(50))
        .description(Some(
            "Extra headers, name to value; at most 50. Headers the service writes (From, \
             Subject, Message-ID…) and every `X-SES-*` header (instructions to SES, such as \
             `X-SES-CONFIGURATION-SET`) are refused with 422 naming `headers.<name>`.",
        ))
        .into()
}

/// Any JSON: only its number of entries is checked.
fn tags() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(SchemaType::AnyValue)
        .description(Some(
            "Not used by this service (neither stored nor passed to the provider); accepted for \
             compatibility, any JSON, at most 50 entries (array items or object members) as SES \
             allows.",
        ))
        .into()
}

/// One line: no control character but tab.
const ONE_LINE: &str = "[^\\x00-\\x08\\x0a-\\x1f\\x7f-\\x9f]";

fn pattern(doc: &str, pattern: String, max_length: usize) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(pattern))
        .max_length(Some(max_length))
        .description(Some(doc))
        .into()
}

fn filename() -> RefOr<Schema> {
    pattern(
        "File name: one line of at most 255 characters, not blank. The server lets it out \
         when `content_id` is set (an inline image).",
        format!("^{ONE_LINE}*[^\\s\\x00-\\x1f\\x7f-\\x9f]{ONE_LINE}*$"),
        255,
    )
}

/// Strict base64 (padded, no stray bits), after an optional `data:` prefix.
fn base64_content() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some(
            "^(data:[^,]*,)?([A-Za-z0-9+/]{4})*([A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$",
        ))
        .description(Some(
            "Base64; a leading `data:…;base64,` prefix is stripped (the server also skips white \
             space).",
        ))
        .into()
}

fn content_type() -> RefOr<Schema> {
    pattern(
        "Media type (`type/subtype`); guessed from the file name when absent.",
        format!("^{ONE_LINE}*/{ONE_LINE}*$"),
        255,
    )
}

fn content_id() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .pattern(Some("^<?[!-;=?-~]+>?$"))
        .description(Some(
            "When set, the file is embedded inline and referenced from HTML as \
             `cid:<content_id>`.",
        ))
        .into()
}

/// A file to send.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AttachmentInput {
    // Documented as required: the server asks for it unless `content_id`
    // is set, which a schema of one object cannot say.
    #[schema(schema_with = filename, required = true)]
    pub filename: Option<String>,
    #[schema(schema_with = base64_content)]
    pub content: String,
    #[schema(schema_with = content_type)]
    pub content_type: Option<String>,
    #[schema(schema_with = content_id)]
    pub content_id: Option<String>,
}

/// The body of `POST /emails` (and each item of a batch).
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct SendRequest {
    #[schema(schema_with = sender)]
    pub from: String,
    #[schema(schema_with = recipients)]
    pub to: OneOrMany,
    #[schema(schema_with = copies)]
    pub cc: Option<OneOrMany>,
    #[schema(schema_with = blind_copies)]
    pub bcc: Option<OneOrMany>,
    #[schema(schema_with = reply_to)]
    pub reply_to: Option<String>,
    /// Defaults to empty; one line of at most 998 characters.
    pub subject: Option<String>,
    /// HTML body; `text`, `html` or both are required.
    pub html: Option<String>,
    /// Plain-text body; `text`, `html` or both are required.
    pub text: Option<String>,
    #[schema(schema_with = header_map)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Adds the message to an existing thread.
    pub thread_id: Option<ThreadId>,
    #[schema(schema_with = in_reply_to)]
    pub in_reply_to: Option<String>,
    #[schema(schema_with = references)]
    pub references: Option<OneOrMany>,
    /// At most 20 files.
    #[schema(max_items = 20)]
    pub attachments: Option<Vec<AttachmentInput>>,
    /// Only counted; any JSON is accepted.
    #[schema(schema_with = tags)]
    pub tags: Option<Value>,
}

/// The body of `POST /emails/batch`, for the document only: each item is
/// read and checked on its own (an unreadable one fails alone, in the
/// reply's `data`), so the body is never read as a whole into a type.
pub struct BatchRequest;

impl PartialSchema for BatchRequest {
    fn schema() -> RefOr<Schema> {
        let list = || {
            ArrayBuilder::new()
                .items(RefOr::Ref(Ref::from_schema_name(SendRequest::name())))
                .min_items(Some(1))
                .max_items(Some(MAX_BATCH))
        };
        OneOfBuilder::new()
            .description(Some(
                "An array of send bodies, or an object with an `emails` array; 1 to 100 messages.",
            ))
            .item(list())
            .item(
                ObjectBuilder::new()
                    .property("emails", list())
                    .required("emails"),
            )
            .into()
    }
}

impl ToSchema for BatchRequest {
    fn schemas(out: &mut Vec<(String, RefOr<Schema>)>) {
        out.push((SendRequest::name().into(), SendRequest::schema()));
        SendRequest::schemas(out);
    }
}

/// What a successful send answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct SendResult {
    /// `msg_` prefix.
    pub id: MessageId,
    /// RFC 5322 Message-ID, in angle brackets.
    pub message_id: String,
    /// The provider's own id.
    pub provider_message_id: Option<String>,
    /// `thr_` prefix.
    pub thread_id: ThreadId,
    /// Bare sender address.
    pub from: String,
    /// Recipients.
    pub to: Vec<String>,
    /// Subject.
    pub subject: String,
}

/// Per-message outcomes of a batch, in input order.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchResult {
    pub object: BatchObject,
    /// Messages accepted.
    pub sent: u32,
    /// Messages not accepted.
    pub failed: u32,
    pub data: Vec<BatchItem>,
}

/// The outcome of one message of a batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchItem {
    /// Position in the input.
    pub index: u32,
    /// Whether this message was accepted.
    pub ok: bool,
    /// When ok: `msg_` id.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub id: Option<MessageId>,
    /// When ok: `thr_` id.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub thread_id: Option<ThreadId>,
    /// When not ok: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub error: Option<String>,
    /// When not ok: the HTTP status this message alone would have had.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub status: Option<u16>,
}

impl BatchItem {
    /// A message sent and recorded as `id` in `thread_id`.
    pub fn accepted(index: u32, id: MessageId, thread_id: ThreadId) -> BatchItem {
        BatchItem {
            index,
            ok: true,
            id: Some(id),
            thread_id: Some(thread_id),
            error: None,
            status: None,
        }
    }

    /// A message not sent, with why and the status it alone would have had.
    pub fn refused(index: u32, error: String, status: u16) -> BatchItem {
        BatchItem {
            index,
            ok: false,
            id: None,
            thread_id: None,
            error: Some(error),
            status: Some(status),
        }
    }
}

/// The body of `POST /threads/{id}/reply`: `text`, `html` or both.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ReplyRequest {
    /// Plain-text body; `text`, `html` or both are required.
    pub text: Option<String>,
    /// HTML body; `text`, `html` or both are required.
    pub html: Option<String>,
    /// Also answer everyone else on the last message; default false.
    #[serde(default)]
    pub reply_all: bool,
    #[schema(schema_with = recipients)]
    pub to: Option<OneOrMany>,
    #[schema(schema_with = copies)]
    pub cc: Option<OneOrMany>,
    #[schema(schema_with = blind_copies)]
    pub bcc: Option<OneOrMany>,
    /// Defaults to `Re: ` plus the thread subject.
    pub subject: Option<String>,
    /// Append the message being answered; default true.
    pub quote: Option<bool>,
    #[schema(schema_with = header_map)]
    pub headers: Option<BTreeMap<String, String>>,
    /// At most 20 files.
    #[schema(max_items = 20)]
    pub attachments: Option<Vec<AttachmentInput>>,
}
