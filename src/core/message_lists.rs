//! The mail lists: sent mail (`/emails`) and received mail (`/messages`),
//! their filters and their keyset pages.

use crate::auth::Reach;
use crate::core::messages::{Message, SUMMARY_COLUMNS};
use crate::core::paging::Page;
use crate::core::search;
use crate::core::search_postgres::{self, Documents, SearchBounds};
use crate::model::messages::{self as model, Folder, MessageStatus};
use crate::store::{Backend, Db, Sql};

/// A page of list items with their sort keys, for `Page::list`.
pub type Items = Vec<(i64, String, model::Message)>;

/// Which mailboxes' mail: by id, by (validated) address, by domain name.
#[derive(Debug, Default)]
pub struct MailboxFilter {
    pub mailbox_id: Option<String>,
    pub mailbox: Option<String>,
    pub domain: Option<String>,
}

impl MailboxFilter {
    pub fn push(&self, q: &mut Sql, id_col: &str, address_col: &str, domain_col: &str) {
        if let Some(id) = &self.mailbox_id {
            q.push(&format!(" AND {id_col} = ")).bind(id.clone());
        }
        if let Some(a) = &self.mailbox {
            q.push(&format!(" AND {address_col} = ")).bind(a.clone());
        }
        if let Some(d) = &self.domain {
            q.push(&format!(" AND {domain_col} = "))
                .bind(d.trim().to_ascii_lowercase());
        }
    }
}

/// The filters of the sent-mail list; empty `statuses` means any.
#[derive(Debug, Default)]
pub struct SentFilter {
    pub statuses: Vec<MessageStatus>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub subject: Option<String>,
    pub text: Option<String>,
    pub opened: Option<bool>,
    pub api_key_id: Option<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub mailboxes: MailboxFilter,
    /// How much a search may walk and collect on PostgreSQL.
    pub search_bounds: SearchBounds,
}

/// The filters of the received-mail list; no `folder` means every folder.
#[derive(Debug, Default)]
pub struct ReceivedFilter {
    pub folder: Option<Folder>,
    pub thread_id: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub subject: Option<String>,
    pub text: Option<String>,
    pub unread: Option<bool>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub mailboxes: MailboxFilter,
    /// How much a search may walk and collect on PostgreSQL.
    pub search_bounds: SearchBounds,
}

/// `since`/`until` bounds (both inclusive) on a list's time column.
pub(crate) fn push_window(q: &mut Sql, column: &str, since: Option<i64>, until: Option<i64>) {
    if let Some(t) = since {
        q.push(&format!(" AND {column} >= ")).bind(t);
    }
    if let Some(t) = until {
        q.push(&format!(" AND {column} <= ")).bind(t);
    }
}

/// Sender, recipient and subject conditions both lists share.
fn push_common(db: &Db, q: &mut Sql, from: Option<&str>, to: Option<&str>, subject: Option<&str>) {
    if let Some(from) = from {
        q.push(" AND m.from_address = ")
            .bind(from.trim().to_lowercase());
    }
    if let Some(to) = to {
        q.push(" AND EXISTS (SELECT 1 FROM message_recipients r WHERE r.message_id = m.id AND r.address = ")
            .bind(to.trim().to_lowercase())
            .push(")");
    }
    if let Some(subject) = subject {
        q.push(" AND ");
        db.push_contains(q, "m.subject", subject);
    }
}

/// A page of a mail list: `filters` are its conditions on `m` (each
/// starting with ` AND `), `documents` its side of the mail (which gives
/// its order), `narrowed` whether a
/// filter has an index of its own (see `Db::list_read`). On SQLite a search is one
/// more condition; on PostgreSQL it walks or collects within fixed bounds
/// (`search_postgres`).
async fn page_of(
    db: &Db,
    filters: &(dyn Fn(&mut Sql) + Sync),
    documents: Documents,
    narrowed: bool,
    text: Option<&str>,
    page: &Page,
    bounds: SearchBounds,
) -> Result<Vec<model::Message>, sqlx::Error> {
    let time_col = documents.time_col();
    let rows = match (db.backend(), text) {
        (Backend::Postgres, Some(text)) => {
            let words = search::terms(text);
            if words.is_empty() {
                return Ok(Vec::new());
            }
            let list = search_postgres::SearchedList {
                documents,
                columns: SUMMARY_COLUMNS,
                filters,
                narrowed,
            };
            search_postgres::page_rows(db, &list, &words, page, bounds).await?
        }
        (_, text) => {
            let mut q = Sql::new(&format!(
                "SELECT {SUMMARY_COLUMNS} FROM messages m WHERE 1 = 1"
            ));
            filters(&mut q);
            if let Some(text) = text {
                search::push_match(&mut q, "m", text);
            }
            page.push(&mut q, time_col, "m.id");
            db.fetch_list(&q, narrowed).await?
        }
    };
    rows.iter().map(Message::summary_from_row).collect()
}

/// Sent mail within the reach, newest first by `created_at`; drafts excluded.
pub async fn sent(
    db: &Db,
    reach: &Reach,
    f: &SentFilter,
    page: &Page,
) -> Result<Items, sqlx::Error> {
    let filters = |q: &mut Sql| {
        q.push(" AND m.direction = 'outbound' AND m.is_draft = 0");
        reach.filter_address_columns(q, "m.mailbox", "m.domain");
        if !f.statuses.is_empty() {
            let list: Vec<String> = f.statuses.iter().map(|s| s.as_str().to_string()).collect();
            q.push(" AND m.status IN ");
            q.bind_list(&list);
        }
        push_common(
            db,
            q,
            f.from.as_deref(),
            f.to.as_deref(),
            f.subject.as_deref(),
        );
        match f.opened {
            Some(true) => {
                q.push(" AND m.opened_at IS NOT NULL");
            }
            Some(false) => {
                q.push(" AND m.opened_at IS NULL");
            }
            None => {}
        }
        if let Some(k) = &f.api_key_id {
            q.push(" AND m.api_key_id = ").bind(k.clone());
        }
        push_window(q, "m.created_at", f.since, f.until);
        f.mailboxes.push(q, "m.mailbox_id", "m.mailbox", "m.domain");
    };
    let messages = page_of(
        db,
        &filters,
        Documents::Sent,
        false,
        f.text.as_deref(),
        page,
        f.search_bounds,
    )
    .await?;
    Ok(messages
        .into_iter()
        .map(|m| (m.created_at.0, m.id.to_string(), m))
        .collect())
}

/// Received mail within the reach, newest first by `received_at`.
pub async fn received(
    db: &Db,
    reach: &Reach,
    f: &ReceivedFilter,
    page: &Page,
) -> Result<Items, sqlx::Error> {
    let filters = |q: &mut Sql| {
        // Not `= 'inbound'`: see migration 17 (`RECEIVED_IN_ORDER`).
        q.push(" AND m.direction <> 'outbound'");
        reach.filter_address_columns(q, "m.mailbox", "m.domain");
        if let Some(folder) = f.folder {
            q.push(" AND m.folder = ").bind(folder.as_str());
        }
        if let Some(t) = &f.thread_id {
            q.push(" AND m.thread_id = ").bind(t.clone());
        }
        push_common(
            db,
            q,
            f.from.as_deref(),
            f.to.as_deref(),
            f.subject.as_deref(),
        );
        if let Some(unread) = f.unread {
            q.push(" AND m.is_read = ").bind(!unread);
        }
        push_window(q, "m.received_at", f.since, f.until);
        f.mailboxes.push(q, "m.mailbox_id", "m.mailbox", "m.domain");
    };
    let messages = page_of(
        db,
        &filters,
        Documents::Received,
        // A thread's mail is read by its own index (see `Db::list_read`).
        f.thread_id.is_some(),
        f.text.as_deref(),
        page,
        f.search_bounds,
    )
    .await?;
    Ok(messages
        .into_iter()
        .map(|m| (m.received_at.unwrap_or(m.created_at).0, m.id.to_string(), m))
        .collect())
}
