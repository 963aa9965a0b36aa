//! Threads: which conversation a message joins, and the thread's summary
//! fields, kept current in the same transaction as the message.

use serde_json::{Value, json};

use crate::clock;
use crate::ids;
use crate::sql;
use crate::store::{Backend, RowExt, Sql, Tx};

/// Subject with any chain of reply/forward prefixes removed (Re, Fw, Fwd, AW,
/// SV, VS, Antw; case-insensitive; also `Re[2]:` counters).
pub fn normalize_subject(subject: &str) -> String {
    let mut s = subject.trim();
    loop {
        let lower = s.to_lowercase();
        let mut stripped = None;
        for p in ["re", "fwd", "fw", "aw", "sv", "vs", "antw"] {
            if let Some(rest) = lower.strip_prefix(p) {
                let rest_trim = rest.trim_start();
                let rest_trim = if let Some(r) = rest_trim.strip_prefix('[') {
                    match r.find(']') {
                        Some(end) if r[..end].bytes().all(|b| b.is_ascii_digit()) => &r[end + 1..],
                        _ => rest_trim,
                    }
                } else {
                    rest_trim
                };
                if let Some(after) = rest_trim.strip_prefix(':') {
                    stripped = Some(s.len() - after.len());
                    break;
                }
            }
        }
        match stripped {
            Some(cut) => s = s[cut..].trim_start(),
            None => break,
        }
    }
    s.trim().to_string()
}

/// The key threads are matched on: the normalised subject, lower-case.
pub fn subject_key(subject: &str) -> String {
    normalize_subject(subject).to_lowercase()
}

/// What a new message contributes to its thread.
pub struct ThreadContribution<'a> {
    pub mailbox_id: &'a str,
    pub mailbox: &'a str,
    pub domain: &'a str,
    pub subject: &'a str,
    pub snippet_source: &'a str,
    pub folder: &'a str,
    pub participants: Vec<(Option<String>, String)>,
    pub unread: bool,
    pub has_attachments: bool,
    pub at: i64,
}

/// The first 140 characters of `text`, its whitespace collapsed. Read word
/// by word up to there: a long body is not copied to make it.
pub fn snippet(text: &str) -> String {
    const LEN: usize = 140;
    let mut out = String::new();
    let mut chars = 0;
    for word in text.split_whitespace() {
        if chars >= LEN {
            break;
        }
        if chars > 0 {
            out.push(' ');
            chars += 1;
        }
        for c in word.chars().take(LEN - chars) {
            out.push(c);
            chars += 1;
        }
    }
    out
}

fn lock_suffix(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => " FOR UPDATE",
        Backend::Sqlite => "",
    }
}

/// Adds a message to `thread_id` (or a new thread when `None`) and returns the
/// thread id. The thread subject stays that of its first message.
pub async fn add_message(
    tx: &mut Tx,
    backend: Backend,
    thread_id: Option<&str>,
    c: &ThreadContribution<'_>,
) -> Result<String, sqlx::Error> {
    let (id, change) = add_message_statement(tx, backend, thread_id, c).await?;
    change.execute_tx(tx).await?;
    Ok(id)
}

/// As [`add_message`], but returns the thread id and the INSERT or UPDATE
/// still to run, for callers that batch their statements. Reads (and on
/// PostgreSQL locks) an existing thread within `tx`.
pub async fn add_message_statement(
    tx: &mut Tx,
    backend: Backend,
    thread_id: Option<&str>,
    c: &ThreadContribution<'_>,
) -> Result<(String, Sql), sqlx::Error> {
    let participants_json = |list: &[(Option<String>, String)]| -> String {
        Value::Array(
            list.iter()
                .map(|(n, a)| json!({"name": n.clone().unwrap_or_default(), "address": a}))
                .collect(),
        )
        .to_string()
    };
    if let Some(id) = thread_id {
        let row =
            Sql::new("SELECT folders, participants, last_message_at FROM threads WHERE id = ")
                .bind(id)
                .push(lock_suffix(backend))
                .fetch_optional_tx(tx)
                .await?;
        if let Some(row) = row {
            let mut folders = parse_folders(&row.text("folders")?);
            if !folders.iter().any(|f| f == c.folder) {
                folders.push(c.folder.to_string());
            }
            let mut people: Vec<(Option<String>, String)> =
                serde_json::from_str::<Vec<Value>>(&row.text("participants")?)
                    .unwrap_or_default()
                    .iter()
                    .map(|p| {
                        let name = p["name"]
                            .as_str()
                            .filter(|s| !s.is_empty())
                            .map(str::to_string);
                        (name, p["address"].as_str().unwrap_or_default().to_string())
                    })
                    .collect();
            for (n, a) in &c.participants {
                if !people.iter().any(|(_, x)| x == a) {
                    people.push((n.clone(), a.clone()));
                }
            }
            let newer = c.at >= row.int("last_message_at")?;
            let mut q = Sql::new("UPDATE threads SET folders = ");
            q.bind(format_folders(&folders))
                .push(", participants = ")
                .bind(participants_json(&people))
                .push(", message_count = message_count + 1, unread_count = unread_count + ")
                .bind(i64::from(c.unread))
                .push(", has_attachments = CASE WHEN has_attachments = 1 OR ")
                .bind(i64::from(c.has_attachments))
                .push(" = 1 THEN 1 ELSE 0 END");
            if newer {
                q.push(", last_message_at = ")
                    .bind(c.at)
                    .push(", snippet = ")
                    .bind(snippet(c.snippet_source));
            }
            q.push(" WHERE id = ").bind(id);
            return Ok((id.to_string(), q));
        }
    }
    let id = ids::new_id("thr");
    let subject = normalize_subject(c.subject);
    let insert = sql!(
        "INSERT INTO threads (id, mailbox_id, mailbox, domain, subject, normalized_subject, snippet, \
         folders, participants, message_count, unread_count, is_starred, has_attachments, \
         last_message_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 1, $10, 0, $11, $12, $13)",
        &id,
        c.mailbox_id,
        c.mailbox,
        c.domain,
        &subject,
        subject_key(c.subject),
        snippet(c.snippet_source),
        format_folders(&[c.folder.to_string()]),
        participants_json(&c.participants),
        i64::from(c.unread),
        c.has_attachments,
        c.at,
        clock::now_micros()
    );
    Ok((id, insert))
}

/// Folders are stored as `,inbox,sent,` so that one folder is a LIKE away.
pub fn format_folders(folders: &[String]) -> String {
    format!(",{},", folders.join(","))
}

pub fn parse_folders(stored: &str) -> Vec<String> {
    stored
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// Finds the thread in `mailbox_id` holding any of `message_ids` (our own
/// Message-IDs or the provider's rewritten `<id@email.amazonses.com>`).
pub async fn by_references(
    tx: &mut Tx,
    mailbox_id: &str,
    message_ids: &[String],
) -> Result<Option<String>, sqlx::Error> {
    if message_ids.is_empty() {
        return Ok(None);
    }
    let provider_ids: Vec<String> = message_ids
        .iter()
        .filter_map(|m| {
            m.trim_start_matches('<')
                .trim_end_matches('>')
                .strip_suffix("@email.amazonses.com")
                .map(str::to_string)
        })
        .collect();
    let mut q = Sql::new("SELECT thread_id FROM messages WHERE mailbox_id = ");
    q.bind(mailbox_id).push(" AND (message_id IN ");
    q.bind_list(message_ids);
    if !provider_ids.is_empty() {
        q.push(" OR provider_message_id IN ");
        q.bind_list(&provider_ids);
    }
    q.push(") ORDER BY created_at DESC LIMIT 1");
    q.fetch_optional_tx(tx)
        .await?
        .map(|r| r.text("thread_id"))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subject_prefix_chains_are_stripped() {
        assert_eq!(normalize_subject("Re: RE: Fwd: Hello"), "Hello");
        assert_eq!(normalize_subject("AW: SV: VS: Antw: Hej"), "Hej");
        assert_eq!(normalize_subject("re[2]: fw : Budget"), "Budget");
        assert_eq!(normalize_subject("Regarding: x"), "Regarding: x");
        assert_eq!(normalize_subject("Re:"), "");
        assert_eq!(subject_key("Re: HELLO"), "hello");
    }

    #[test]
    fn snippets_collapse_whitespace_and_stop_at_140_characters() {
        // What it always was: the collapsed text, cut.
        let reference = |t: &str| -> String {
            let collapsed = t.split_whitespace().collect::<Vec<_>>().join(" ");
            collapsed.chars().take(140).collect()
        };
        let long_word = "é".repeat(150);
        let at_the_edge = format!("{} tail", "x".repeat(139));
        for text in [
            "",
            "  \n ",
            " Hello,\n\n  world \t again ",
            long_word.as_str(),
            at_the_edge.as_str(),
            &"word ".repeat(100_000),
        ] {
            assert_eq!(
                snippet(text),
                reference(text),
                "{:?}",
                &text[..text.len().min(40)]
            );
        }
    }
}
