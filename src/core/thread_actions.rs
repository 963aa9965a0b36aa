//! Reading and changing threads: the list with its filters, single reads,
//! PATCH (folder, read, star, labels), deletion through trash, and replies.

use crate::auth::{ApiKey, Reach};
use crate::clock;
use crate::core::error::{CoreError, Problems};
use crate::core::events;
use crate::core::labels::{self, Label};
use crate::core::message_lists::MailboxFilter;
use crate::core::messages::{self, COLUMNS as MESSAGE_COLUMNS, Message};
use crate::core::paging::Page;
use crate::core::search;
use crate::core::search_postgres::{self, SearchBounds};
use crate::core::sending::{self, SendInput, Sending};
use crate::core::threads::{format_folders, parse_folders};
use crate::mime::compose::OutgoingAttachment;
use crate::model::Timestamp;
use crate::model::events::ThreadEventData;
use crate::model::messages::Folder;
use crate::model::threads::{self as model, ThreadMessage};
use crate::model::webhooks::EventName;
use crate::store::{Backend, Db, RowExt, Sql, Tx};

pub const FOLDERS: &[&str] = &["inbox", "sent", "drafts", "archive", "spam", "trash"];

#[derive(Debug, Clone)]
pub struct Thread {
    pub id: String,
    pub mailbox_id: String,
    pub mailbox: String,
    pub domain: String,
    pub subject: String,
    pub snippet: String,
    pub folders: Vec<String>,
    pub participants: Vec<model::Participant>,
    pub message_count: i64,
    pub unread_count: i64,
    pub is_starred: bool,
    pub has_attachments: bool,
    pub last_message_at: i64,
    pub created_at: i64,
}

pub const COLUMNS: &str = "t.id, t.mailbox_id, t.mailbox, t.domain, t.subject, t.snippet, t.folders, \
    t.participants, t.message_count, t.unread_count, t.is_starred, t.has_attachments, \
    t.last_message_at, t.created_at";

impl Thread {
    pub fn from_row(r: &impl RowExt) -> Result<Thread, sqlx::Error> {
        Ok(Thread {
            id: r.text("id")?,
            mailbox_id: r.text("mailbox_id")?,
            mailbox: r.text("mailbox")?,
            domain: r.text("domain")?,
            subject: r.text("subject")?,
            snippet: r.text("snippet")?,
            folders: parse_folders(&r.text("folders")?),
            participants: serde_json::from_str(&r.text("participants")?).unwrap_or_default(),
            message_count: r.int("message_count")?,
            unread_count: r.int("unread_count")?,
            is_starred: r.flag("is_starred")?,
            has_attachments: r.flag("has_attachments")?,
            last_message_at: r.int("last_message_at")?,
            created_at: r.int("created_at")?,
        })
    }

    pub fn to_wire(&self, labels: &[Label]) -> model::Thread {
        model::Thread {
            object: model::ThreadObject,
            id: crate::ids::Id::from_stored(self.id.clone()),
            mailbox: self.mailbox.clone(),
            mailbox_id: crate::ids::Id::from_stored(self.mailbox_id.clone()),
            subject: self.subject.clone(),
            snippet: self.snippet.clone(),
            folders: self
                .folders
                .iter()
                .filter_map(|f| Folder::parse(f))
                .collect(),
            participants: self.participants.clone(),
            message_count: self.message_count,
            unread_count: self.unread_count,
            is_starred: self.is_starred,
            has_attachments: self.has_attachments,
            last_message_at: Timestamp(self.last_message_at),
            created_at: Timestamp(self.created_at),
            labels: labels.iter().map(Label::embedded).collect(),
        }
    }
}

pub async fn get(db: &Db, reach: &Reach, id: &str) -> Result<Option<Thread>, sqlx::Error> {
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM threads t WHERE t.id = "));
    q.bind(id);
    reach.filter_address_columns(&mut q, "t.mailbox", "t.domain");
    q.fetch_optional(db.reader())
        .await?
        .map(|r| Thread::from_row(&r))
        .transpose()
}

/// The filters of the thread list. No `folder` means every folder but
/// trash and spam.
#[derive(Debug, Default)]
pub struct ThreadFilter {
    pub folder: Option<Folder>,
    /// A label id or name; an unknown one matches nothing.
    pub label: Option<String>,
    pub text: Option<String>,
    pub unread: Option<bool>,
    pub starred: Option<bool>,
    pub has_attachments: Option<bool>,
    pub participant: Option<String>,
    pub subject: Option<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub mailboxes: MailboxFilter,
    /// How much a search may walk and collect on PostgreSQL.
    pub search_bounds: SearchBounds,
}

/// A page of threads within the reach with their sort keys, newest first
/// by `last_message_at` (by the search index's key for a search on SQLite).
pub async fn list(
    db: &Db,
    reach: &Reach,
    f: &ThreadFilter,
    page: &Page,
) -> Result<Vec<(i64, String, model::Thread)>, sqlx::Error> {
    // An unknown label matches nothing.
    let label = match &f.label {
        Some(l) => Some(labels::find(db, l).await?.map(|found| found.id)),
        None => None,
    };
    let filters = |q: &mut Sql| push_filters(db, reach, f, label.as_ref(), q);
    // A label's threads are read by its own index (see `Db::list_read`).
    let narrowed = matches!(label, Some(Some(_)));
    let (threads, positions): (Vec<Thread>, Vec<i64>) = match (db.backend(), f.text.as_deref()) {
        // SQLite reads the thread index newest first and pages by its key
        // (see `search::thread_search_select`).
        (Backend::Sqlite, Some(text)) => {
            let mut q = search::thread_search_select(COLUMNS);
            filters(&mut q);
            search::push_thread_search(&mut q, text);
            page.push_key(&mut q, "f.rowid");
            let rows = q.fetch_all(db.reader()).await?;
            let threads = rows
                .iter()
                .map(Thread::from_row)
                .collect::<Result<_, _>>()?;
            let keys = rows
                .iter()
                .map(|r| r.int("search_key"))
                .collect::<Result<_, _>>()?;
            (threads, keys)
        }
        // PostgreSQL walks or collects within fixed bounds (`search_postgres`).
        (Backend::Postgres, Some(text)) => {
            let words = search::terms(text);
            if words.is_empty() {
                return Ok(Vec::new());
            }
            let list = search_postgres::SearchedList {
                documents: search_postgres::Documents::Threads,
                columns: COLUMNS,
                filters: &filters,
                narrowed,
            };
            let rows = search_postgres::page_rows(db, &list, &words, page, f.search_bounds).await?;
            let threads: Vec<Thread> = rows
                .iter()
                .map(Thread::from_row)
                .collect::<Result<_, _>>()?;
            let positions = threads.iter().map(|t| t.last_message_at).collect();
            (threads, positions)
        }
        (_, None) => {
            let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM threads t WHERE 1 = 1"));
            filters(&mut q);
            page.push(&mut q, "t.last_message_at", "t.id");
            let threads: Vec<Thread> = db
                .fetch_list(&q, narrowed)
                .await?
                .iter()
                .map(Thread::from_row)
                .collect::<Result<_, _>>()?;
            let positions = threads.iter().map(|t| t.last_message_at).collect();
            (threads, positions)
        }
    };
    let wire = with_labels(db, &threads).await?;
    Ok(threads
        .iter()
        .zip(positions)
        .zip(wire)
        .map(|((t, at), w)| (at, t.id.clone(), w))
        .collect())
}

/// The list's conditions on `t`, each starting with ` AND `. `label` is the
/// label filter's id, None when the label is unknown.
fn push_filters(
    db: &Db,
    reach: &Reach,
    f: &ThreadFilter,
    label: Option<&Option<String>>,
    q: &mut Sql,
) {
    reach.filter_address_columns(q, "t.mailbox", "t.domain");
    match f.folder {
        None => {
            q.push(" AND t.folders NOT LIKE '%,trash,%' AND t.folders NOT LIKE '%,spam,%'");
        }
        Some(folder) => {
            // A literal (from the fixed folder list), not a parameter: the
            // planners match it against the partial indexes of rare folders.
            q.push(&format!(" AND t.folders LIKE '%,{},%'", folder.as_str()));
        }
    }
    match label {
        Some(Some(id)) => {
            q.push(" AND EXISTS (SELECT 1 FROM thread_labels tl WHERE tl.thread_id = t.id AND tl.label_id = ")
                .bind(id.clone())
                .push(")");
        }
        Some(None) => {
            q.push(" AND 1 = 0");
        }
        None => {}
    }
    match f.unread {
        Some(true) => {
            q.push(" AND t.unread_count > 0");
        }
        Some(false) => {
            q.push(" AND t.unread_count = 0");
        }
        None => {}
    }
    if let Some(v) = f.starred {
        q.push(" AND t.is_starred = ").bind(v);
    }
    if let Some(v) = f.has_attachments {
        q.push(" AND t.has_attachments = ").bind(v);
    }
    if let Some(who) = &f.participant {
        let needle = serde_json::to_string(&who.trim().to_lowercase()).unwrap_or_default();
        q.push(" AND t.participants LIKE ")
            .bind(format!("%\"address\":{needle}%"));
    }
    if let Some(subject) = &f.subject {
        q.push(" AND ");
        db.push_contains(q, "t.subject", subject);
    }
    crate::core::message_lists::push_window(q, "t.last_message_at", f.since, f.until);
    f.mailboxes.push(q, "t.mailbox_id", "t.mailbox", "t.domain");
}

/// Threads on the wire with their labels, for many threads at once.
pub async fn with_labels(db: &Db, threads: &[Thread]) -> Result<Vec<model::Thread>, sqlx::Error> {
    let ids: Vec<String> = threads.iter().map(|t| t.id.clone()).collect();
    let all = labels::of_threads(db, &ids).await?;
    Ok(threads
        .iter()
        .map(|t| {
            let mine: Vec<Label> = all
                .iter()
                .filter(|(tid, _)| *tid == t.id)
                .map(|(_, l)| l.clone())
                .collect();
            t.to_wire(&mine)
        })
        .collect())
}

pub async fn thread_messages(db: &Db, thread_id: &str) -> Result<Vec<Message>, sqlx::Error> {
    let rows = Sql::new(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.thread_id = "
    ))
    .bind(thread_id)
    .push(" ORDER BY m.created_at, m.id")
    .fetch_all(db.reader())
    .await?;
    rows.iter().map(Message::from_row).collect()
}

/// The single read: the thread and every message, with bodies unless light.
pub async fn read(
    db: &Db,
    t: &Thread,
    include_body: bool,
) -> Result<model::ThreadDetail, sqlx::Error> {
    let thread = with_labels(db, std::slice::from_ref(t))
        .await?
        .pop()
        .unwrap_or_else(|| t.to_wire(&[]));
    let mut out = Vec::new();
    for m in thread_messages(db, &t.id).await? {
        out.push(if include_body {
            ThreadMessage::Full(messages::detail(db, &m).await?)
        } else {
            ThreadMessage::Summary(m.summary())
        });
    }
    Ok(model::ThreadDetail {
        thread,
        messages: out,
    })
}

/// What PATCH may change; labels already resolved.
pub struct ThreadPatch {
    pub folder: Option<Folder>,
    pub is_read: Option<bool>,
    pub is_starred: Option<bool>,
    pub add: Vec<Label>,
    pub remove: Vec<Label>,
}

/// Resolves label names or ids; every unknown one is a problem on `param`.
pub async fn resolve_labels(
    db: &Db,
    p: &mut Problems,
    param: &str,
    given: &[String],
) -> Result<Vec<Label>, sqlx::Error> {
    let mut out = Vec::new();
    for (i, g) in given.iter().enumerate() {
        match labels::find(db, g).await? {
            Some(l) => out.push(l),
            None => p.add(format!("{param}[{i}]"), format!("no label {g:?}")),
        }
    }
    Ok(out)
}

async fn has_drafts(tx: &mut Tx, thread_id: &str) -> Result<bool, sqlx::Error> {
    Ok(
        Sql::new("SELECT id FROM messages WHERE is_draft = 1 AND thread_id = ")
            .bind(thread_id)
            .push(" LIMIT 1")
            .fetch_optional_tx(tx)
            .await?
            .is_some(),
    )
}

pub async fn patch(
    db: &Db,
    reach: &Reach,
    id: &str,
    patch: ThreadPatch,
) -> Result<model::Thread, CoreError> {
    let t = get(db, reach, id)
        .await?
        .ok_or(CoreError::NotFound("thread"))?;
    let mut tx = db.begin().await?;
    if let Some(folder) = patch.folder {
        let mut folders = vec![folder.as_str().to_string()];
        // Drafts stay where they are.
        if has_drafts(&mut tx, &t.id).await? && folder != Folder::Drafts {
            folders.push("drafts".into());
        }
        Sql::new("UPDATE threads SET folders = ")
            .bind(format_folders(&folders))
            .push(" WHERE id = ")
            .bind(&t.id)
            .execute_tx(&mut tx)
            .await?;
        Sql::new("UPDATE messages SET folder = ")
            .bind(folder.as_str())
            .push(" WHERE is_draft = 0 AND thread_id = ")
            .bind(&t.id)
            .execute_tx(&mut tx)
            .await?;
    }
    if let Some(read) = patch.is_read {
        if read {
            Sql::new("UPDATE messages SET is_read = 1 WHERE thread_id = ")
                .bind(&t.id)
                .execute_tx(&mut tx)
                .await?;
            Sql::new("UPDATE threads SET unread_count = 0 WHERE id = ")
                .bind(&t.id)
                .execute_tx(&mut tx)
                .await?;
        } else {
            let n = Sql::new("UPDATE messages SET is_read = 0 WHERE is_draft = 0 AND direction = 'inbound' AND thread_id = ")
                .bind(&t.id)
                .execute_tx(&mut tx)
                .await?;
            Sql::new("UPDATE threads SET unread_count = ")
                .bind(n.max(1) as i64)
                .push(" WHERE id = ")
                .bind(&t.id)
                .execute_tx(&mut tx)
                .await?;
        }
    }
    if let Some(star) = patch.is_starred {
        Sql::new("UPDATE threads SET is_starred = ")
            .bind(star)
            .push(" WHERE id = ")
            .bind(&t.id)
            .execute_tx(&mut tx)
            .await?;
    }
    for l in &patch.add {
        labels::attach(&mut tx, &t.id, &l.id).await?;
    }
    for l in &patch.remove {
        labels::detach(&mut tx, &t.id, &l.id).await?;
    }
    let row = Sql::new(&format!("SELECT {COLUMNS} FROM threads t WHERE t.id = "))
        .bind(&t.id)
        .fetch_one_tx(&mut tx)
        .await?;
    let updated = Thread::from_row(&row)?;
    let label_rows = Sql::new(
        "SELECT l.id, l.name, l.color, l.created_at FROM thread_labels tl JOIN labels l ON l.id = tl.label_id WHERE tl.thread_id = ",
    )
    .bind(&t.id)
    .push(" ORDER BY l.name_key")
    .fetch_all_tx(&mut tx)
    .await?;
    let mut current = Vec::new();
    for r in &label_rows {
        current.push(Label {
            id: r.text("id")?,
            name: r.text("name")?,
            color: r.text("color")?,
            created_at: r.int("created_at")?,
        });
    }
    let wire = updated.to_wire(&current);
    events::emit(
        &mut tx,
        EventName::ThreadUpdated,
        Some(&t.mailbox_id),
        ThreadEventData {
            thread: wire.clone(),
            occurred_at: Timestamp(clock::now_micros()),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(wire)
}

/// Trash first, then for good; `permanent` skips trash. Returns whether it
/// was removed for good.
pub async fn delete(
    db: &Db,
    reach: &Reach,
    id: &str,
    permanent: bool,
) -> Result<model::ThreadDeleted, CoreError> {
    let t = get(db, reach, id)
        .await?
        .ok_or(CoreError::NotFound("thread"))?;
    let mut tx = db.begin().await?;
    let for_good = permanent || t.folders.iter().any(|f| f == "trash");
    if for_good {
        remove_threads(&mut tx, db.backend(), std::slice::from_ref(&t.id)).await?;
    } else {
        Sql::new("UPDATE threads SET folders = ")
            .bind(format_folders(&["trash".to_string()]))
            .push(" WHERE id = ")
            .bind(&t.id)
            .execute_tx(&mut tx)
            .await?;
        Sql::new("UPDATE messages SET folder = 'trash' WHERE thread_id = ")
            .bind(&t.id)
            .execute_tx(&mut tx)
            .await?;
    }
    tx.commit().await?;
    Ok(model::ThreadDeleted {
        object: model::ThreadObject,
        id: crate::ids::Id::from_stored(t.id),
        deleted: true,
        permanent: for_good,
    })
}

/// Removes threads with every message, attachment, recipient, event, label
/// link and index entry.
pub async fn remove_threads(
    tx: &mut Tx,
    backend: crate::store::Backend,
    thread_ids: &[String],
) -> Result<(), sqlx::Error> {
    if thread_ids.is_empty() {
        return Ok(());
    }
    let mut q = Sql::new("SELECT id FROM messages WHERE thread_id IN ");
    q.bind_list(thread_ids);
    let ids: Vec<String> = q
        .fetch_all_tx(tx)
        .await?
        .iter()
        .map(|r| r.text("id"))
        .collect::<Result<_, _>>()?;
    search::unindex_messages(tx, backend, &ids).await?;
    search::unindex_threads(tx, backend, thread_ids).await?;
    for table in ["attachments", "message_recipients", "message_events"] {
        for chunk in ids.chunks(500) {
            let mut q = Sql::new(&format!("DELETE FROM {table} WHERE message_id IN "));
            q.bind_list(chunk);
            q.execute_tx(tx).await?;
        }
    }
    for (table, col) in [
        ("messages", "thread_id"),
        ("thread_labels", "thread_id"),
        ("threads", "id"),
    ] {
        let mut q = Sql::new(&format!("DELETE FROM {table} WHERE {col} IN "));
        q.bind_list(thread_ids);
        q.execute_tx(tx).await?;
    }
    Ok(())
}

/// Inputs of POST /threads/:id/reply, validated.
pub struct ReplyInput {
    pub text: Option<String>,
    pub html: Option<String>,
    pub reply_all: bool,
    pub to: Option<Vec<(Option<String>, String)>>,
    pub cc: Option<Vec<(Option<String>, String)>>,
    pub bcc: Option<Vec<(Option<String>, String)>>,
    pub subject: Option<String>,
    pub quote: bool,
    pub headers: Vec<(String, String)>,
    pub attachments: Vec<OutgoingAttachment>,
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Works out recipients, subject, threading headers and the quote from the
/// last message of the thread, then sends through the one sending path.
pub async fn reply(
    ctx: impl Into<Sending>,
    key: &ApiKey,
    id: &str,
    r: ReplyInput,
) -> Result<sending::SendOutcome, CoreError> {
    let ctx: Sending = ctx.into();
    let db = &ctx.db;
    let t = get(db, &key.reach, id)
        .await?
        .ok_or(CoreError::NotFound("thread"))?;
    let all = thread_messages(db, &t.id).await?;
    let last = all
        .iter()
        .rev()
        .find(|m| !m.is_draft)
        .ok_or_else(|| CoreError::invalid("thread", "the thread has no message to reply to"))?
        .clone();
    let own = t.mailbox.clone();
    let (mut to, mut cc): (Vec<String>, Vec<String>) = if last.direction == "outbound" {
        // Our own message: answer its original recipients, never ourselves.
        (
            last.to.clone(),
            if r.reply_all {
                last.cc.clone()
            } else {
                Vec::new()
            },
        )
    } else {
        let primary = last
            .reply_to
            .clone()
            .unwrap_or_else(|| last.from_address.clone());
        let mut cc = Vec::new();
        if r.reply_all {
            cc.extend(last.to.iter().cloned());
            cc.extend(last.cc.iter().cloned());
        }
        (vec![primary], cc)
    };
    to.retain(|a| *a != own);
    to.dedup();
    cc.retain(|a| *a != own && !to.contains(a));
    cc.dedup();
    let named = |v: Vec<String>| v.into_iter().map(|a| (None, a)).collect::<Vec<_>>();
    let to = r.to.unwrap_or_else(|| named(to));
    let cc = r.cc.unwrap_or_else(|| named(cc));
    let bcc = r.bcc.unwrap_or_default();
    if to.is_empty() && cc.is_empty() && bcc.is_empty() {
        return Err(CoreError::invalid(
            "to",
            "no recipient could be worked out; give to",
        ));
    }
    let subject = r.subject.unwrap_or_else(|| format!("Re: {}", t.subject));
    let mut references: Vec<String> = last
        .references
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    references.push(last.message_id.clone());
    let when = clock::iso(last.sent_at.or(last.received_at).unwrap_or(last.created_at));
    let sender = match &last.from_name {
        Some(n) => format!("{n} <{}>", last.from_address),
        None => last.from_address.clone(),
    };
    let attribution = format!("On {when}, {sender} wrote:");
    let (mut text, mut html) = (r.text, r.html);
    if r.quote {
        let quoted_text: String = last.text.lines().map(|l| format!("> {l}\n")).collect();
        if let Some(tx) = text.as_mut() {
            tx.push_str(&format!("\n\n{attribution}\n{quoted_text}"));
        }
        if let Some(h) = html.as_mut() {
            let inner = if last.html.is_empty() {
                escape_html(&last.text).replace('\n', "<br>")
            } else {
                last.html.clone()
            };
            h.push_str(&format!(
                "<br><div class=\"pigeonhole-quote\">{}<blockquote style=\"margin:0 0 0 .8ex;border-left:1px solid #ccc;padding-left:1ex\">{inner}</blockquote></div>",
                escape_html(&attribution)
            ));
        }
    }
    let mailbox_name = crate::core::mailboxes::by_address(db, &own)
        .await?
        .map(|m| m.display_name)
        .filter(|n| !n.is_empty());
    let input = SendInput {
        from: (mailbox_name, own),
        to,
        cc,
        bcc,
        reply_to: None,
        subject,
        text,
        html,
        headers: r.headers,
        thread_id: Some(t.id.clone()),
        in_reply_to: Some(last.message_id.clone()),
        references,
        attachments: r.attachments,
        preassigned: None,
        keyed: None,
    };
    sending::send(ctx, key, input).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `thread.updated` payloads carry the thread: its fields, their order
    /// and the participants as stored are part of the payload's bytes.
    #[test]
    fn the_wire_thread_keeps_the_event_payload_shape() {
        let t = Thread {
            id: "thr_1".into(),
            mailbox_id: "mbx_1".into(),
            mailbox: "a@example.com".into(),
            domain: "example.com".into(),
            subject: "Hi".into(),
            snippet: "hello".into(),
            folders: vec!["inbox".into(), "drafts".into()],
            participants: serde_json::from_str(
                r#"[{"name":"","address":"a@example.com"},{"name":"B","address":"b@example.org"}]"#,
            )
            .unwrap(),
            message_count: 2,
            unread_count: 1,
            is_starred: false,
            has_attachments: false,
            last_message_at: 1_795_000_000_000_001,
            created_at: 1_795_000_000_000_000,
        };
        let label = Label {
            id: "lbl_1".into(),
            name: "Work".into(),
            color: "#9ca3af".into(),
            created_at: 1,
        };
        let text = serde_json::to_string(&t.to_wire(&[label])).unwrap();
        assert_eq!(
            text,
            format!(
                concat!(
                    r#"{{"object":"thread","id":"thr_1","mailbox":"a@example.com","mailbox_id":"mbx_1","#,
                    r#""subject":"Hi","snippet":"hello","folders":["inbox","drafts"],"#,
                    r#""participants":[{{"name":"","address":"a@example.com"}},{{"name":"B","address":"b@example.org"}}],"#,
                    r#""message_count":2,"unread_count":1,"is_starred":false,"has_attachments":false,"#,
                    r#""last_message_at":"{}","created_at":"{}","#,
                    r#""labels":[{{"object":"label","id":"lbl_1","name":"Work"}}]}}"#
                ),
                clock::iso(1_795_000_000_000_001),
                clock::iso(1_795_000_000_000_000)
            )
        );
    }
}
