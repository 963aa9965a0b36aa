//! Threads: which conversation a message joins, and the thread's summary
//! fields, kept current in the same transaction as the message.

use crate::clock;
use crate::ids;
use crate::model::threads::Participant;
use crate::sql;
use crate::store::{Backend, RowExt, Sql, Tx};

/// Reply and forward prefixes, matched case-insensitively (all ASCII).
const REPLY_PREFIXES: [&str; 7] = ["re", "fwd", "fw", "aw", "sv", "vs", "antw"];

/// Subject with any chain of reply/forward prefixes removed (Re, Fw, Fwd, AW,
/// SV, VS, Antw; case-insensitive; also `Re[2]:` counters).
///
/// Works on the subject itself: a cut computed on another form of it (say
/// its lower case, which can be longer or shorter: `K` U+212A, `İ`) would
/// land elsewhere, or inside a character.
pub fn normalize_subject(subject: &str) -> String {
    let mut s = subject.trim();
    while let Some(rest) = strip_reply_prefix(s) {
        s = rest.trim_start();
    }
    s.to_string()
}

/// What follows one leading reply or forward prefix of `s` (`Re:`, `FW :`,
/// `Re[2]:`), or `None` when `s` does not start with one.
fn strip_reply_prefix(s: &str) -> Option<&str> {
    REPLY_PREFIXES.iter().find_map(|prefix| {
        let head = s.get(..prefix.len())?;
        if !head.eq_ignore_ascii_case(prefix) {
            return None;
        }
        let rest = s[prefix.len()..].trim_start();
        let rest = match rest.strip_prefix('[') {
            Some(counted) => match counted.split_once(']') {
                Some((n, after)) if n.bytes().all(|b| b.is_ascii_digit()) => after,
                _ => rest,
            },
            None => rest,
        };
        rest.strip_prefix(':')
    })
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

/// Characters of a thread's snippet.
const SNIPPET_CHARS: usize = 140;

/// The start of `text`, whitespace runs collapsed to one space, at most
/// [`SNIPPET_CHARS`] characters; reads no further into `text` than that.
pub fn snippet(text: &str) -> String {
    let mut out = String::new();
    let mut taken = 0;
    for word in text.split_whitespace() {
        if taken > 0 {
            if taken == SNIPPET_CHARS {
                break;
            }
            out.push(' ');
            taken += 1;
        }
        for c in word.chars() {
            if taken == SNIPPET_CHARS {
                return out;
            }
            out.push(c);
            taken += 1;
        }
    }
    out
}

/// References a message is threaded by at most (the newest): each is a
/// lookup of its own, and SQLite takes at most 500 in one statement.
pub const MAX_REFERENCE_LOOKUPS: usize = 100;

pub(crate) fn lock_suffix(backend: Backend) -> &'static str {
    match backend {
        Backend::Postgres => " FOR UPDATE",
        Backend::Sqlite => "",
    }
}

/// The columns of a thread that adding a message to it reads, as
/// [`ThreadState::from_row`] takes them.
pub const THREAD_STATE_COLUMNS: &str = "id, folders, participants, last_message_at";

/// A thread as a message being added to it finds it: read (and on
/// PostgreSQL locked) in the transaction that adds the message.
#[derive(Debug, Clone)]
pub struct ThreadState {
    pub id: String,
    folders: String,
    participants: String,
    last_message_at: i64,
}

impl ThreadState {
    /// From a row of [`THREAD_STATE_COLUMNS`].
    pub fn from_row(row: &impl RowExt) -> Result<ThreadState, sqlx::Error> {
        Ok(ThreadState {
            id: row.text("id")?,
            folders: row.text("folders")?,
            participants: row.text("participants")?,
            last_message_at: row.int("last_message_at")?,
        })
    }

    /// Reads (and on PostgreSQL locks) thread `id` within `tx`.
    pub async fn read(
        tx: &mut Tx,
        backend: Backend,
        id: &str,
    ) -> Result<Option<ThreadState>, sqlx::Error> {
        Sql::new(&format!(
            "SELECT {THREAD_STATE_COLUMNS} FROM threads WHERE id = "
        ))
        .bind(id)
        .push(lock_suffix(backend))
        .fetch_optional_tx(tx)
        .await?
        .map(|row| ThreadState::from_row(&row))
        .transpose()
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
    let existing = match thread_id {
        Some(id) => ThreadState::read(tx, backend, id).await?,
        None => None,
    };
    Ok(message_added(existing.as_ref(), c))
}

/// The thread id and the INSERT (a new thread, when `existing` is `None`)
/// or UPDATE that adds a message to `existing`, a thread read and locked
/// in the transaction that runs it.
pub fn message_added(existing: Option<&ThreadState>, c: &ThreadContribution<'_>) -> (String, Sql) {
    let participants_json = |list: &[(Option<String>, String)]| -> String {
        let people: Vec<Participant> = list
            .iter()
            .map(|(n, a)| Participant {
                name: n.clone().unwrap_or_default(),
                address: a.clone(),
            })
            .collect();
        serde_json::to_string(&people).unwrap_or_else(|_| "[]".into())
    };
    if let Some(row) = existing {
        let id = &row.id;
        let mut folders = parse_folders(&row.folders);
        if !folders.iter().any(|f| f == c.folder) {
            folders.push(c.folder.to_string());
        }
        let mut people: Vec<(Option<String>, String)> =
            serde_json::from_str::<Vec<Participant>>(&row.participants)
                .unwrap_or_default()
                .into_iter()
                .map(|p| ((!p.name.is_empty()).then_some(p.name), p.address))
                .collect();
        for (n, a) in &c.participants {
            if !people.iter().any(|(_, x)| x == a) {
                people.push((n.clone(), a.clone()));
            }
        }
        let newer = c.at >= row.last_message_at;
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
        q.push(" WHERE id = ").bind(id.as_str());
        // The thread is locked by its read and written by this statement
        // alone: it may join the message's inserts.
        return (id.clone(), q.joining_inserts());
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
    (id, insert)
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
    // The newest ones: a message lists its references oldest first.
    let message_ids = &message_ids[message_ids.len().saturating_sub(MAX_REFERENCE_LOOKUPS)..];
    if message_ids.is_empty() {
        return Ok(None);
    }
    let mut q = Sql::new("");
    push_references_read(&mut q, mailbox_id, message_ids);
    q.fetch_optional_tx(tx)
        .await?
        .map(|r| r.text("thread_id"))
        .transpose()
}

/// Appends the read of [`by_references`] (one row, `thread_id`) to `q`,
/// for at least one id: alone, or as a scalar subquery of a larger read.
pub(crate) fn push_references_read(q: &mut Sql, mailbox_id: &str, message_ids: &[String]) {
    let provider_ids: Vec<String> = message_ids
        .iter()
        .filter_map(|m| {
            m.trim_start_matches('<')
                .trim_end_matches('>')
                .strip_suffix("@email.amazonses.com")
                .map(str::to_string)
        })
        .collect();
    // One lookup per id on the whole key of an index, not `message_id IN
    // (…)`: with that, a plan could take the mailbox alone from the index
    // and filter its every message (PostgreSQL's generic plan made while the
    // table was small did, and each arrival then read the whole mailbox).
    q.push("SELECT thread_id FROM (");
    for (i, id) in message_ids.iter().enumerate() {
        if i > 0 {
            q.push(" UNION ALL ");
        }
        q.push("SELECT thread_id, created_at FROM messages WHERE mailbox_id = ")
            .bind(mailbox_id)
            .push(" AND message_id = ")
            .bind(id);
    }
    for id in &provider_ids {
        q.push(
            " UNION ALL SELECT thread_id, created_at FROM messages WHERE provider_message_id = ",
        )
        .bind(id)
        .push(" AND mailbox_id = ")
        .bind(mailbox_id);
    }
    q.push(") r ORDER BY created_at DESC LIMIT 1");
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

    /// Characters whose lower case has another length (issue 13, finding 3):
    /// the prefix is found on the subject itself and nothing panics.
    #[test]
    fn subjects_whose_lower_case_changes_length() {
        assert_eq!(normalize_subject("Re:\u{212a}"), "\u{212a}");
        assert_eq!(normalize_subject("RE: \u{212a}elvin"), "\u{212a}elvin");
        assert_eq!(
            normalize_subject("Re:\u{130}\u{130}\u{130}\u{130}"),
            "\u{130}\u{130}\u{130}\u{130}"
        );
        assert_eq!(
            normalize_subject("Re: Fwd: \u{130}\u{130}\u{130}\u{130}\u{130} x"),
            "\u{130}\u{130}\u{130}\u{130}\u{130} x"
        );
        assert_eq!(subject_key("Re:\u{212a}"), "k");
        assert_eq!(normalize_subject("\u{212a}e: x"), "\u{212a}e: x");
        assert_eq!(normalize_subject("R\u{e9}: x"), "R\u{e9}: x");
    }

    /// The old definition of the snippet, as an oracle.
    fn snippet_by_joining(text: &str) -> String {
        let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
        collapsed.chars().take(SNIPPET_CHARS).collect()
    }

    #[test]
    fn snippets_stop_at_their_length() {
        let long = "word ".repeat(100);
        assert_eq!(snippet(&long), snippet_by_joining(&long));
        assert_eq!(snippet(&long).chars().count(), SNIPPET_CHARS);
        assert_eq!(snippet("  a \n\t b  "), "a b");
        assert_eq!(snippet(""), "");
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;
        use super::snippet_by_joining;

        /// Subjects built from prefixes, separators, counters and the
        /// characters that change length when lower-cased, besides any text.
        fn subject() -> impl Strategy<Value = String> {
            let piece = prop_oneof![
                Just("Re".to_string()),
                Just("FWD".to_string()),
                Just("aW".to_string()),
                Just("Antw".to_string()),
                Just(":".to_string()),
                Just(" ".to_string()),
                Just("[2]".to_string()),
                Just("[".to_string()),
                Just("]".to_string()),
                Just("\u{212a}".to_string()),
                Just("\u{130}".to_string()),
                Just("\u{1e9e}".to_string()),
                Just("\u{3a3}".to_string()),
                any::<char>().prop_map(String::from),
                ".{0,8}",
            ];
            prop::collection::vec(piece, 0..12).prop_map(|p| p.concat())
        }

        proptest! {
            #[test]
            fn normalising_is_idempotent_and_keeps_a_suffix(s in subject()) {
                let once = normalize_subject(&s);
                prop_assert_eq!(normalize_subject(&once), once.clone());
                prop_assert!(s.trim().ends_with(once.as_str()), "{:?} → {:?}", s, once);
                prop_assert_eq!(subject_key(&s), once.to_lowercase());
            }

            #[test]
            fn a_reply_prefix_does_not_change_the_key(s in subject()) {
                prop_assert_eq!(subject_key(&format!("Re: {s}")), subject_key(&s));
                prop_assert_eq!(subject_key(&format!("FW[3]: re:{s}")), subject_key(&s));
            }

            #[test]
            fn any_text_normalises(s in any::<String>()) {
                let once = normalize_subject(&s);
                prop_assert_eq!(normalize_subject(&once), once.clone());
                prop_assert!(s.trim().ends_with(once.as_str()));
            }

            #[test]
            fn snippets_are_the_collapsed_start(s in prop_oneof![any::<String>(), "( |\t|\n|a|\u{e9}|\u{1f426}){0,400}"]) {
                let got = snippet(&s);
                prop_assert_eq!(&got, &snippet_by_joining(&s));
                prop_assert!(got.chars().count() <= SNIPPET_CHARS);
                prop_assert!(!got.contains("  "));
            }
        }
    }
}
