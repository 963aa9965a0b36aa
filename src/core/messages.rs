//! Stored messages (sent and received): their records, wire shapes and reads.

use serde_json::Value;

use crate::auth::Reach;
use crate::model::Timestamp;
use crate::model::messages::{self as model, MessageStatus};
use crate::store::{Db, RowExt, Sql};

pub use crate::model::messages::Direction;

#[derive(Debug, Clone)]
pub struct Message {
    pub id: String,
    pub thread_id: String,
    pub mailbox_id: String,
    pub mailbox: String,
    pub domain: String,
    pub direction: String,
    pub is_draft: bool,
    pub folder: String,
    pub message_id: String,
    pub provider_message_id: Option<String>,
    pub from_address: String,
    pub from_name: Option<String>,
    pub to: Vec<String>,
    pub cc: Vec<String>,
    pub bcc: Vec<String>,
    pub reply_to: Option<String>,
    pub subject: String,
    pub text: String,
    pub html: String,
    pub headers: Value,
    pub in_reply_to: Option<String>,
    pub references: Option<String>,
    pub status: MessageStatus,
    pub error: Option<String>,
    pub opened_at: Option<i64>,
    pub open_count: i64,
    pub is_read: bool,
    pub is_starred: bool,
    pub has_attachments: bool,
    pub api_key_id: Option<String>,
    pub created_at: i64,
    pub sent_at: Option<i64>,
    pub received_at: Option<i64>,
}

/// The columns of a message but its bodies and headers.
macro_rules! summary_columns {
    () => {
        "m.id, m.thread_id, m.mailbox_id, m.mailbox, m.domain, m.direction, \
         m.is_draft, m.folder, m.message_id, m.provider_message_id, m.from_address, m.from_name, \
         m.to_addresses, m.cc_addresses, m.bcc_addresses, m.reply_to, m.subject, m.in_reply_to, \
         m.references_header, m.status, m.error, m.opened_at, m.open_count, m.is_read, \
         m.is_starred, m.has_attachments, m.api_key_id, m.created_at, m.sent_at, m.received_at"
    };
}

/// What a list item shows ([`Message::summary_from_row`]): a list page
/// reads no bodies, which are most of a message's bytes and are stored out
/// of line (at 1,000,000 messages, reading a page's bodies cost 0.5–0.9 ms
/// of a search's 3–4).
pub const SUMMARY_COLUMNS: &str = summary_columns!();

/// A whole message ([`Message::from_row`]).
pub const COLUMNS: &str = concat!(summary_columns!(), ", m.text_body, m.html_body, m.headers");

/// A stored status; anything else is a column this code did not write.
fn status_of(text: &str) -> Result<MessageStatus, sqlx::Error> {
    MessageStatus::parse(text)
        .ok_or_else(|| sqlx::Error::Decode(format!("unknown message status {text:?}").into()))
}

fn list_of(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

impl Message {
    /// A row of [`COLUMNS`].
    pub fn from_row(r: &impl RowExt) -> Result<Message, sqlx::Error> {
        Ok(Message {
            text: r.text("text_body")?,
            html: r.text("html_body")?,
            headers: serde_json::from_str(&r.text("headers")?).unwrap_or(Value::Null),
            ..Message::without_bodies(r)?
        })
    }

    /// The summary of a row of [`SUMMARY_COLUMNS`] (a list item).
    pub fn summary_from_row(r: &impl RowExt) -> Result<model::Message, sqlx::Error> {
        Ok(Message::without_bodies(r)?.summary())
    }

    fn without_bodies(r: &impl RowExt) -> Result<Message, sqlx::Error> {
        Ok(Message {
            id: r.text("id")?,
            thread_id: r.text("thread_id")?,
            mailbox_id: r.text("mailbox_id")?,
            mailbox: r.text("mailbox")?,
            domain: r.text("domain")?,
            direction: r.text("direction")?,
            is_draft: r.flag("is_draft")?,
            folder: r.text("folder")?,
            message_id: r.text("message_id")?,
            provider_message_id: r.opt_text("provider_message_id")?,
            from_address: r.text("from_address")?,
            from_name: r.opt_text("from_name")?,
            to: list_of(&r.text("to_addresses")?),
            cc: list_of(&r.text("cc_addresses")?),
            bcc: list_of(&r.text("bcc_addresses")?),
            reply_to: r.opt_text("reply_to")?,
            subject: r.text("subject")?,
            text: String::new(),
            html: String::new(),
            headers: Value::Null,
            in_reply_to: r.opt_text("in_reply_to")?,
            references: r.opt_text("references_header")?,
            status: status_of(&r.text("status")?)?,
            error: r.opt_text("error")?,
            opened_at: r.opt_int("opened_at")?,
            open_count: r.int("open_count")?,
            is_read: r.flag("is_read")?,
            is_starred: r.flag("is_starred")?,
            has_attachments: r.flag("has_attachments")?,
            api_key_id: r.opt_text("api_key_id")?,
            created_at: r.int("created_at")?,
            sent_at: r.opt_int("sent_at")?,
            received_at: r.opt_int("received_at")?,
        })
    }

    /// The message without bodies (list items and event payloads).
    pub fn summary(&self) -> model::Message {
        model::Message {
            object: model::MessageObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            message_id: self.message_id.clone(),
            provider_message_id: self.provider_message_id.clone(),
            thread_id: crate::ids::Id::from_stored(self.thread_id.clone()),
            mailbox_id: crate::ids::Id::from_stored(self.mailbox_id.clone()),
            direction: if self.direction == Direction::Inbound.as_str() {
                Direction::Inbound
            } else {
                Direction::Outbound
            },
            from: self.from_address.clone(),
            from_name: self.from_name.clone(),
            to: self.to.clone(),
            cc: self.cc.clone(),
            bcc: self.bcc.clone(),
            reply_to: self.reply_to.clone(),
            subject: self.subject.clone(),
            status: self.status,
            error: self.error.clone(),
            opened_at: Timestamp::opt(self.opened_at),
            open_count: self.open_count,
            is_read: self.is_read,
            is_starred: self.is_starred,
            is_draft: self.is_draft,
            has_attachments: self.has_attachments,
            in_reply_to: self.in_reply_to.clone(),
            references: self.references.clone(),
            api_key_id: self.api_key_id.clone().map(crate::ids::Id::from_stored),
            created_at: Timestamp(self.created_at),
            sent_at: Timestamp::opt(self.sent_at),
            received_at: Timestamp::opt(self.received_at),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Attachment {
    pub id: String,
    pub message_id: String,
    pub filename: String,
    pub content_type: String,
    pub size: i64,
    pub content_id: Option<String>,
    pub inline: bool,
}

impl Attachment {
    pub fn to_wire(&self) -> model::Attachment {
        model::Attachment {
            object: model::AttachmentObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            filename: self.filename.clone(),
            content_type: self.content_type.clone(),
            size: self.size,
            content_id: self.content_id.clone(),
            inline: self.inline,
        }
    }
}

/// A message of `direction` read within the reach, by id or provider message id.
pub async fn get(
    db: &Db,
    reach: &Reach,
    direction: Direction,
    id: &str,
) -> Result<Option<Message>, sqlx::Error> {
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM messages m WHERE (m.id = "));
    q.bind(id)
        .push(" OR m.provider_message_id = ")
        .bind(id)
        .push(") AND m.direction = ")
        .bind(direction.as_str());
    reach.filter_address_columns(&mut q, "m.mailbox", "m.domain");
    q.push(" LIMIT 1");
    q.fetch_optional(db.reader())
        .await?
        .map(|r| Message::from_row(&r))
        .transpose()
}

/// Sets a message's read and star flags (those given); the thread's unread
/// count follows its messages in the same transaction.
pub async fn set_flags(
    db: &Db,
    m: &Message,
    is_read: Option<bool>,
    is_starred: Option<bool>,
) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    if let Some(read) = is_read {
        Sql::new("UPDATE messages SET is_read = ")
            .bind(read)
            .push(" WHERE id = ")
            .bind(&m.id)
            .execute_tx(&mut tx)
            .await?;
        Sql::new(
            "UPDATE threads SET unread_count = (SELECT COUNT(*) FROM messages WHERE is_read = 0 AND is_draft = 0 AND thread_id = ",
        )
        .bind(&m.thread_id)
        .push(") WHERE id = ")
        .bind(&m.thread_id)
        .execute_tx(&mut tx)
        .await?;
    }
    if let Some(star) = is_starred {
        Sql::new("UPDATE messages SET is_starred = ")
            .bind(star)
            .push(" WHERE id = ")
            .bind(&m.id)
            .execute_tx(&mut tx)
            .await?;
    }
    tx.commit().await
}

/// The original MIME of a received message within the reach.
pub async fn raw(db: &Db, reach: &Reach, id: &str) -> Result<Option<Vec<u8>>, sqlx::Error> {
    let mut q = Sql::new(
        "SELECT m.raw FROM messages m WHERE m.raw IS NOT NULL AND m.direction = 'inbound' AND m.id = ",
    );
    q.bind(id);
    reach.filter_address_columns(&mut q, "m.mailbox", "m.domain");
    q.fetch_optional(db.reader())
        .await?
        .map(|r| r.bytes("raw"))
        .transpose()
}

/// Attachments a message's single read lists. An inbound message can carry
/// any number (one with 50,000 made an 8 MB reply); the rest stay
/// downloadable by id and are in the raw MIME, and `attachment_count` says
/// how many there are.
pub const MAX_LISTED_ATTACHMENTS: usize = 100;

/// The first `limit` attachments of a message (in id order, which is the
/// order they were stored in) and how many it has in all.
pub async fn attachments(
    db: &Db,
    message_id: &str,
    limit: usize,
) -> Result<(Vec<Attachment>, i64), sqlx::Error> {
    let rows = Sql::new(
        "SELECT id, message_id, filename, content_type, size, content_id, inline FROM attachments WHERE message_id = ",
    )
    .bind(message_id)
    .push(" ORDER BY id LIMIT ")
    .bind(limit as i64)
    .fetch_all(db.reader())
    .await?;
    let listed = rows
        .iter()
        .map(|r| {
            Ok(Attachment {
                id: r.text("id")?,
                message_id: r.text("message_id")?,
                filename: r.text("filename")?,
                content_type: r.text("content_type")?,
                size: r.int("size")?,
                content_id: r.opt_text("content_id")?,
                inline: r.flag("inline")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    let total = if listed.len() < limit {
        listed.len() as i64
    } else {
        Sql::new("SELECT COUNT(*) AS n FROM attachments WHERE message_id = ")
            .bind(message_id)
            .fetch_one(db.reader())
            .await?
            .int("n")?
    };
    Ok((listed, total))
}

/// The bytes of one attachment of a message.
pub async fn attachment_content(
    db: &Db,
    message_id: &str,
    attachment_id: &str,
) -> Result<Option<(Attachment, Vec<u8>)>, sqlx::Error> {
    let row = Sql::new(
        "SELECT id, message_id, filename, content_type, size, content_id, inline, content FROM attachments WHERE message_id = ",
    )
    .bind(message_id)
    .push(" AND id = ")
    .bind(attachment_id)
    .fetch_optional(db.reader())
    .await?;
    let Some(r) = row else { return Ok(None) };
    Ok(Some((
        Attachment {
            id: r.text("id")?,
            message_id: r.text("message_id")?,
            filename: r.text("filename")?,
            content_type: r.text("content_type")?,
            size: r.int("size")?,
            content_id: r.opt_text("content_id")?,
            inline: r.flag("inline")?,
        },
        r.bytes("content")?,
    )))
}

pub async fn events(db: &Db, message_id: &str) -> Result<Vec<model::Event>, sqlx::Error> {
    let rows = Sql::new(
        "SELECT type, recipient, detail, occurred_at FROM message_events WHERE message_id = ",
    )
    .bind(message_id)
    .push(" ORDER BY occurred_at, id")
    .fetch_all(db.reader())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(model::Event {
                object: model::EventObject,
                kind: r.text("type")?,
                occurred_at: Timestamp(r.int("occurred_at")?),
                recipient: r.opt_text("recipient")?,
                detail: r.opt_text("detail")?,
            })
        })
        .collect()
}

/// The full single-read shape: bodies, attachments (the first
/// [`MAX_LISTED_ATTACHMENTS`], and `attachment_count`) and every event.
pub async fn detail(db: &Db, m: &Message) -> Result<model::MessageDetail, sqlx::Error> {
    let (listed, count) = attachments(db, &m.id, MAX_LISTED_ATTACHMENTS).await?;
    Ok(model::MessageDetail {
        message: m.summary(),
        text: m.text.clone(),
        html: m.html.clone(),
        headers: m.headers.clone(),
        attachments: listed.iter().map(Attachment::to_wire).collect(),
        attachment_count: count,
        events: events(db, &m.id).await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> Message {
        Message {
            id: "msg_1".into(),
            thread_id: "thr_1".into(),
            mailbox_id: "mbx_1".into(),
            mailbox: "a@example.com".into(),
            domain: "example.com".into(),
            direction: "inbound".into(),
            is_draft: false,
            folder: "inbox".into(),
            message_id: "<m@example.com>".into(),
            provider_message_id: None,
            from_address: "b@example.org".into(),
            from_name: Some("B".into()),
            to: vec!["a@example.com".into()],
            cc: vec![],
            bcc: vec![],
            reply_to: None,
            subject: "Hi".into(),
            text: "t".into(),
            html: "".into(),
            headers: Value::Null,
            in_reply_to: None,
            references: None,
            status: MessageStatus::Received,
            error: None,
            opened_at: None,
            open_count: 0,
            is_read: false,
            is_starred: true,
            has_attachments: false,
            api_key_id: None,
            created_at: 1_795_000_000_000_000,
            sent_at: None,
            received_at: Some(1_795_000_000_000_001),
        }
    }

    /// Webhook payloads carry the summary: its fields, their order and
    /// their nulls are part of the payload's bytes.
    #[test]
    fn the_summary_keeps_the_event_payload_shape() {
        let v = serde_json::to_value(message().summary()).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "object",
                "id",
                "message_id",
                "provider_message_id",
                "thread_id",
                "mailbox_id",
                "direction",
                "from",
                "from_name",
                "to",
                "cc",
                "bcc",
                "reply_to",
                "subject",
                "status",
                "error",
                "opened_at",
                "open_count",
                "is_read",
                "is_starred",
                "is_draft",
                "has_attachments",
                "in_reply_to",
                "references",
                "api_key_id",
                "created_at",
                "sent_at",
                "received_at",
            ]
        );
        assert_eq!(v["object"], "message");
        assert_eq!(v["direction"], "inbound");
        assert_eq!(v["opened_at"], Value::Null);
        assert_eq!(v["created_at"], crate::clock::iso(1_795_000_000_000_000));
    }

    /// The single read is the summary followed by the bodies, headers,
    /// attachments and events, with absent event fields left out.
    #[test]
    fn the_detail_extends_the_summary() {
        let m = message();
        let d = model::MessageDetail {
            message: m.summary(),
            text: m.text.clone(),
            html: m.html.clone(),
            headers: Value::Null,
            attachments: vec![],
            attachment_count: 0,
            events: vec![model::Event {
                object: model::EventObject,
                kind: "delivery".into(),
                occurred_at: Timestamp(5),
                recipient: None,
                detail: None,
            }],
        };
        let v = serde_json::to_value(&d).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys[..28],
            *serde_json::to_value(m.summary())
                .unwrap()
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
        );
        assert_eq!(
            keys[28..],
            [
                "text",
                "html",
                "headers",
                "attachments",
                "attachment_count",
                "events"
            ]
        );
        assert_eq!(
            v["events"][0],
            serde_json::json!({"object": "event", "type": "delivery", "occurred_at": crate::clock::iso(5)})
        );
    }
}
