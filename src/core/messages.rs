//! Stored messages (sent and received): their records, JSON shapes and reads.

use serde_json::{Value, json};

use crate::auth::Reach;
use crate::clock;
use crate::store::{Db, RowExt, Sql};

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
    pub status: String,
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

pub const COLUMNS: &str = "m.id, m.thread_id, m.mailbox_id, m.mailbox, m.domain, m.direction, \
    m.is_draft, m.folder, m.message_id, m.provider_message_id, m.from_address, m.from_name, \
    m.to_addresses, m.cc_addresses, m.bcc_addresses, m.reply_to, m.subject, m.text_body, \
    m.html_body, m.headers, m.in_reply_to, m.references_header, m.status, m.error, m.opened_at, \
    m.open_count, m.is_read, m.is_starred, m.has_attachments, m.api_key_id, m.created_at, \
    m.sent_at, m.received_at";

fn list_of(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_default()
}

impl Message {
    pub fn from_row(r: &impl RowExt) -> Result<Message, sqlx::Error> {
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
            text: r.text("text_body")?,
            html: r.text("html_body")?,
            headers: serde_json::from_str(&r.text("headers")?).unwrap_or(Value::Null),
            in_reply_to: r.opt_text("in_reply_to")?,
            references: r.opt_text("references_header")?,
            status: r.text("status")?,
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
    pub fn summary_json(&self) -> Value {
        json!({
            "object": "message",
            "id": self.id,
            "message_id": self.message_id,
            "provider_message_id": self.provider_message_id,
            "thread_id": self.thread_id,
            "mailbox_id": self.mailbox_id,
            "direction": self.direction,
            "from": self.from_address,
            "from_name": self.from_name,
            "to": self.to,
            "cc": self.cc,
            "bcc": self.bcc,
            "reply_to": self.reply_to,
            "subject": self.subject,
            "status": self.status,
            "error": self.error,
            "opened_at": clock::iso_opt(self.opened_at),
            "open_count": self.open_count,
            "is_read": self.is_read,
            "is_starred": self.is_starred,
            "is_draft": self.is_draft,
            "has_attachments": self.has_attachments,
            "in_reply_to": self.in_reply_to,
            "references": self.references,
            "api_key_id": self.api_key_id,
            "created_at": clock::iso(self.created_at),
            "sent_at": clock::iso_opt(self.sent_at),
            "received_at": clock::iso_opt(self.received_at),
        })
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
    pub fn to_json(&self) -> Value {
        json!({
            "object": "attachment",
            "id": self.id,
            "filename": self.filename,
            "content_type": self.content_type,
            "size": self.size,
            "content_id": self.content_id,
            "inline": self.inline,
        })
    }
}

/// Which way a message went: `/emails` serves sent mail (scope
/// `emails:read`), `/messages` received mail (scope `mail:read`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

pub async fn events(db: &Db, message_id: &str) -> Result<Vec<Value>, sqlx::Error> {
    let rows = Sql::new(
        "SELECT type, recipient, detail, occurred_at FROM message_events WHERE message_id = ",
    )
    .bind(message_id)
    .push(" ORDER BY occurred_at, id")
    .fetch_all(db.reader())
    .await?;
    rows.iter()
        .map(|r| {
            let mut e = json!({
                "object": "event",
                "type": r.text("type")?,
                "occurred_at": clock::iso(r.int("occurred_at")?),
            });
            if let Some(rcpt) = r.opt_text("recipient")? {
                e["recipient"] = json!(rcpt);
            }
            if let Some(d) = r.opt_text("detail")? {
                e["detail"] = json!(d);
            }
            Ok(e)
        })
        .collect()
}

/// The full single-read shape: bodies, attachments (the first
/// [`MAX_LISTED_ATTACHMENTS`], and `attachment_count`) and every event.
pub async fn full_json(db: &Db, m: &Message) -> Result<Value, sqlx::Error> {
    let mut v = m.summary_json();
    v["text"] = json!(m.text);
    v["html"] = json!(m.html);
    v["headers"] = m.headers.clone();
    let (listed, count) = attachments(db, &m.id, MAX_LISTED_ATTACHMENTS).await?;
    v["attachments"] = Value::Array(listed.iter().map(|a| a.to_json()).collect());
    v["attachment_count"] = json!(count);
    v["events"] = Value::Array(events(db, &m.id).await?);
    Ok(v)
}
