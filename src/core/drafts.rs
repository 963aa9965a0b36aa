//! Drafts: outbound messages not yet sent. They live in a thread (folder
//! `drafts`), are excluded from `/emails`, stay put when the thread moves,
//! and sending one turns it into a sent message in the same thread.

use crate::auth::{ApiKey, Reach, address_domain};
use crate::clock;
use crate::core::error::CoreError;
use crate::core::mailboxes;
use crate::core::messages::{self, COLUMNS, Message};
use crate::core::search;
use crate::core::sending::{self, SendInput, Sending};
use crate::core::threads::{self, ThreadContribution, format_folders, parse_folders};
use crate::ids;
use crate::mime::compose::Named;
use crate::model::Deleted;
use crate::model::drafts as model;
use crate::sql;
use crate::store::{Db, RowExt, Sql};

/// A draft's editable content, validated.
#[derive(Debug, Clone, Default)]
pub struct DraftContent {
    pub to: Vec<Named>,
    pub cc: Vec<Named>,
    pub bcc: Vec<Named>,
    pub subject: String,
    pub text: String,
    pub html: String,
}

fn addrs(list: &[Named]) -> String {
    serde_json::to_string(&list.iter().map(|(_, a)| a.clone()).collect::<Vec<_>>())
        .unwrap_or_else(|_| "[]".into())
}

pub async fn get(db: &Db, reach: &Reach, id: &str) -> Result<Message, CoreError> {
    let m = messages::get(db, reach, messages::Direction::Outbound, id)
        .await?
        .filter(|m| m.is_draft);
    m.ok_or(CoreError::NotFound("draft"))
}

/// Creates a draft from `from` (a mailbox the key holds), in `thread_id` or a new thread.
pub async fn create(
    db: &Db,
    key: &ApiKey,
    from: &str,
    thread_id: Option<&str>,
    c: DraftContent,
) -> Result<Message, CoreError> {
    let mailbox = mailboxes::get(db, &key.reach, from).await?.ok_or_else(|| {
        CoreError::invalid("from", format!("no mailbox {from} that this key reaches"))
    })?;
    let mut tx = db.begin().await?;
    let existing = match thread_id {
        Some(tid) => {
            let row = sql!("SELECT mailbox_id FROM threads WHERE id = $1", tid)
                .fetch_optional_tx(&mut tx)
                .await?;
            match row {
                Some(r) if r.text("mailbox_id")? == mailbox.id => Some(tid.to_string()),
                _ => {
                    return Err(CoreError::invalid(
                        "thread_id",
                        format!("no thread {tid} in the mailbox of {from}"),
                    ));
                }
            }
        }
        None => None,
    };
    let now = clock::now_micros();
    let thread_id = threads::add_message(
        &mut tx,
        db.backend(),
        existing.as_deref(),
        &ThreadContribution {
            mailbox_id: &mailbox.id,
            mailbox: &mailbox.address,
            domain: &mailbox.domain,
            subject: &c.subject,
            snippet_source: &c.text,
            folder: "drafts",
            participants: vec![(None, mailbox.address.clone())],
            unread: false,
            has_attachments: false,
            at: now,
        },
    )
    .await?;
    let id = ids::new_id("msg");
    let message_id = format!(
        "<{}@{}>",
        ids::time_ordered_token(24),
        address_domain(&mailbox.address)
    );
    sql!(
        "INSERT INTO messages (id, thread_id, mailbox_id, mailbox, domain, direction, is_draft, folder, \
         message_id, from_address, to_addresses, cc_addresses, bcc_addresses, subject, text_body, \
         html_body, search_body, headers, status, open_count, is_read, is_starred, has_attachments, \
         api_key_id, created_at) VALUES ($1, $2, $3, $4, $5, 'outbound', 1, 'drafts', $6, $7, $8, $9, \
         $10, $11, $12, $13, $14, '{}', 'draft', 0, 1, 0, 0, $15, $16)",
        &id,
        &thread_id,
        &mailbox.id,
        &mailbox.address,
        &mailbox.domain,
        &message_id,
        &mailbox.address,
        addrs(&c.to),
        addrs(&c.cc),
        addrs(&c.bcc),
        &c.subject,
        &c.text,
        &c.html,
        &c.text,
        key.id.clone(),
        now
    )
    .execute_tx(&mut tx)
    .await?;
    // The thread's last_message_at moved, and with it its search key.
    search::draft_written(&mut tx, db.backend(), &thread_id).await?;
    tx.commit().await?;
    get(db, &key.reach, &id).await
}

pub async fn update(
    db: &Db,
    reach: &Reach,
    id: &str,
    c: DraftContent,
) -> Result<Message, CoreError> {
    let d = get(db, reach, id).await?;
    sql!(
        "UPDATE messages SET to_addresses = $1, cc_addresses = $2, bcc_addresses = $3, subject = $4, \
         text_body = $5, html_body = $6, search_body = $7 WHERE id = $8 AND is_draft = 1",
        addrs(&c.to),
        addrs(&c.cc),
        addrs(&c.bcc),
        &c.subject,
        &c.text,
        &c.html,
        &c.text,
        &d.id
    )
    .execute(db.writer())
    .await?;
    get(db, reach, id).await
}

/// The draft's current content, for a partial update.
pub fn content_of(d: &Message) -> DraftContent {
    let named = |v: &[String]| v.iter().map(|a| (None, a.clone())).collect();
    DraftContent {
        to: named(&d.to),
        cc: named(&d.cc),
        bcc: named(&d.bcc),
        subject: d.subject.clone(),
        text: d.text.clone(),
        html: d.html.clone(),
    }
}

/// Removes a draft row and its trace in the thread.
async fn remove(db: &Db, d: &Message) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    sql!("DELETE FROM messages WHERE id = $1 AND is_draft = 1", &d.id)
        .execute_tx(&mut tx)
        .await?;
    let remaining = sql!(
        "SELECT COUNT(*) AS n FROM messages WHERE thread_id = $1",
        &d.thread_id
    )
    .fetch_one_tx(&mut tx)
    .await?
    .int("n")?;
    if remaining == 0 {
        sql!("DELETE FROM threads WHERE id = $1", &d.thread_id)
            .execute_tx(&mut tx)
            .await?;
    } else {
        let drafts_left = sql!(
            "SELECT COUNT(*) AS n FROM messages WHERE is_draft = 1 AND thread_id = $1",
            &d.thread_id
        )
        .fetch_one_tx(&mut tx)
        .await?
        .int("n")?;
        let row = sql!("SELECT folders FROM threads WHERE id = $1", &d.thread_id)
            .fetch_one_tx(&mut tx)
            .await?;
        let mut folders = parse_folders(&row.text("folders")?);
        if drafts_left == 0 {
            folders.retain(|f| f != "drafts");
        }
        Sql::new("UPDATE threads SET message_count = ")
            .bind(remaining)
            .push(", folders = ")
            .bind(format_folders(&folders))
            .push(" WHERE id = ")
            .bind(&d.thread_id)
            .execute_tx(&mut tx)
            .await?;
    }
    tx.commit().await
}

pub async fn delete(
    db: &Db,
    reach: &Reach,
    id: &str,
) -> Result<Deleted<model::DraftObject>, CoreError> {
    let d = get(db, reach, id).await?;
    remove(db, &d).await?;
    Ok(Deleted::new(model::DraftObject, d.id))
}

/// Sends the draft through the one sending path, into its thread; the draft
/// is gone once the provider has the message. A failed send keeps the draft.
pub async fn send(
    ctx: impl Into<Sending>,
    key: &ApiKey,
    id: &str,
) -> Result<sending::SendOutcome, CoreError> {
    let ctx: Sending = ctx.into();
    let d = get(&ctx.db, &key.reach, id).await?;
    let named = |v: &[String]| v.iter().map(|a| (None, a.clone())).collect::<Vec<_>>();
    if d.to.is_empty() && d.cc.is_empty() && d.bcc.is_empty() {
        return Err(CoreError::invalid("to", "the draft has no recipient"));
    }
    if d.text.is_empty() && d.html.is_empty() {
        return Err(CoreError::invalid("text", "the draft has no body"));
    }
    let mailbox_name = mailboxes::by_address(&ctx.db, &d.from_address)
        .await?
        .map(|m| m.display_name)
        .filter(|n| !n.is_empty());
    let input = SendInput {
        from: (mailbox_name, d.from_address.clone()),
        to: named(&d.to),
        cc: named(&d.cc),
        bcc: named(&d.bcc),
        reply_to: None,
        subject: d.subject.clone(),
        text: (!d.text.is_empty()).then(|| d.text.clone()),
        html: (!d.html.is_empty()).then(|| d.html.clone()),
        headers: Vec::new(),
        thread_id: Some(d.thread_id.clone()),
        in_reply_to: d.in_reply_to.clone(),
        references: Vec::new(),
        attachments: Vec::new(),
        preassigned: None,
        keyed: None,
    };
    let db = ctx.db.clone();
    match sending::send(ctx, key, input).await {
        Ok(outcome) => {
            remove(&db, &d).await?;
            Ok(outcome)
        }
        // The provider has it, though its record failed: sending the draft
        // again would send it twice.
        Err(e) if e.took_effect() => {
            if let Err(gone) = remove(&db, &d).await {
                tracing::error!(error = %gone, draft = %d.id, "could not remove a draft that was sent");
            }
            Err(e)
        }
        Err(e) => Err(e),
    }
}

/// The draft on the wire: the message shape with bodies.
pub fn to_wire(d: &Message) -> model::Draft {
    model::Draft {
        message: d.summary(),
        text: d.text.clone(),
        html: d.html.clone(),
    }
}

/// Loads drafts for a list (newest first), within the reach; `mailbox` is
/// an address or a mailbox id.
pub async fn list(
    db: &Db,
    reach: &Reach,
    page: &crate::core::paging::Page,
    mailbox: Option<&str>,
) -> Result<Vec<(i64, String, model::Draft)>, sqlx::Error> {
    let mut q = Sql::new(&format!(
        "SELECT {COLUMNS} FROM messages m WHERE m.is_draft = 1"
    ));
    reach.filter_address_columns(&mut q, "m.mailbox", "m.domain");
    if let Some(mb) = mailbox {
        q.push(" AND (m.mailbox = ")
            .bind(mb.to_lowercase())
            .push(" OR m.mailbox_id = ")
            .bind(mb)
            .push(")");
    }
    page.push(&mut q, "m.created_at", "m.id");
    let rows = q.fetch_all(db.reader()).await?;
    rows.iter()
        .map(|r| {
            let m = Message::from_row(r)?;
            Ok((m.created_at, m.id.clone(), to_wire(&m)))
        })
        .collect()
}
