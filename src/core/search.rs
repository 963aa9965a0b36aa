//! Full-text search, the one place the two dialects really differ: SQLite
//! FTS5 (contentless indexes kept in step by hand: one of messages, one of
//! threads keyed by recency) and PostgreSQL tsvector (a generated column of
//! each message and a document per thread, each with a GIN index, searched
//! within fixed bounds by `search_postgres`).

use crate::store::{Backend, FtsIndex, IndexWrite, RowExt, SharedText, Sql, Tx};

/// Bytes of a message's text that are indexed (and kept in `search_body`):
/// the index's cost, the thread documents rebuilt on each arrival and
/// PostgreSQL's tsvector (at most 1 MiB of words) stay bounded whatever
/// the size of a body. Words past it are not found by search.
pub const MAX_INDEXED_TEXT: usize = 512 * 1024;

/// The start of `text` that is indexed: at most [`MAX_INDEXED_TEXT`] bytes,
/// cut at a character boundary and shared with `text`.
pub fn indexed_prefix(text: &SharedText) -> SharedText {
    text.prefix(MAX_INDEXED_TEXT)
}

/// Words of a user query, stripped of everything FTS syntax could misread.
pub fn terms(q: &str) -> Vec<String> {
    q.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .take(16)
        .map(|t| t.to_lowercase())
        .collect()
}

/// Appends ` AND <messages alias>.seq` is one of a message matching q, on
/// SQLite (PostgreSQL searches through `search_postgres`). A query with no
/// words matches nothing.
pub fn push_match(sql: &mut Sql, alias: &str, q: &str) {
    match fts_expression(q) {
        Some(expr) => {
            sql.push(&format!(
                " AND {alias}.seq IN (SELECT rowid FROM messages_fts WHERE messages_fts MATCH "
            ))
            .bind(expr)
            .push(")");
        }
        None => {
            sql.push(" AND 1 = 0");
        }
    }
}

/// The start of a thread search on SQLite, to which a list adds its `t.`
/// conditions and then [`push_thread_search`]. The thread index is read
/// from its newest end and joined to each thread in turn, so a page costs
/// the matches it skips to fill it, whatever the size of the store.
pub fn thread_search_select(columns: &str) -> Sql {
    Sql::new(&format!(
        "SELECT {columns}, f.rowid AS search_key FROM threads_fts f \
         CROSS JOIN threads t ON t.search_key = f.rowid WHERE 1 = 1"
    ))
}

/// Appends the match on `q` to a [`thread_search_select`]. A query with no
/// words matches nothing.
pub fn push_thread_search(sql: &mut Sql, q: &str) {
    match fts_expression(q) {
        Some(expr) => sql.push(" AND f.threads_fts MATCH ").bind(expr),
        None => sql.push(" AND 1 = 0"),
    };
}

/// A thread's search key on SQLite is `last_message_at * THREAD_KEY_SPAN +
/// n`, with n (below the span) unique among threads of the same
/// microsecond: ordering by key is ordering by `last_message_at`, and the
/// key can be the rowid of the thread's document in `threads_fts`.
pub const THREAD_KEY_SPAN: i64 = 2048;

/// Indexes every thread of a store whose thread index is empty: keys in
/// list order (ties by id, the higher id the higher key) and documents.
/// Run by the migration that creates the index, and by bulk loaders.
pub fn thread_index_backfill() -> String {
    let span = THREAD_KEY_SPAN;
    format!(
        "UPDATE threads SET search_key = k.key FROM (
    SELECT id, (last_message_at + 1) * {span}
        - ROW_NUMBER() OVER (PARTITION BY last_message_at ORDER BY id DESC) AS key
    FROM threads
    WHERE EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = threads.id AND m.is_draft = 0)
) AS k WHERE threads.id = k.id;
INSERT INTO threads_fts (rowid, body)
    SELECT t.search_key, group_concat(m.subject || ' ' || m.search_body, ' ')
    FROM threads t JOIN messages m ON m.thread_id = t.id AND m.is_draft = 0
    WHERE t.search_key IS NOT NULL
    GROUP BY t.id;
"
    )
}

/// Brings a thread's search document up to date with its messages (all
/// but drafts, as in the message index) and its key with its
/// `last_message_at`; call once the thread's row and its new message are
/// written. The document holds each word once: a thread's replies quote one
/// another, and re-indexing every repetition on each arrival would make a
/// long thread cost the square of its length. A thread whose key still
/// falls in its `last_message_at` keeps it; otherwise it takes the key below
/// the lowest one taken in that microsecond. The index itself is written
/// through [`Tx::write_index`]. PostgreSQL's thread documents take each
/// message's words in [`write_and_index`] and need no key.
pub async fn reindex_thread(
    tx: &mut Tx,
    backend: Backend,
    thread_id: &str,
) -> Result<(), sqlx::Error> {
    if backend != Backend::Sqlite {
        return Ok(());
    }
    // Newest first, a page of messages at a time, until the document is
    // full: a thread of many large messages costs neither its whole text
    // in memory nor an unbounded document.
    let mut words = DistinctWords::new(MAX_THREAD_DOCUMENT);
    let mut offset = 0i64;
    while !words.is_full() {
        let rows = Sql::new(
            "SELECT subject, search_body FROM messages WHERE is_draft = 0 AND thread_id = ",
        )
        .bind(thread_id)
        .push(" ORDER BY created_at DESC, seq DESC LIMIT ")
        .bind(THREAD_PAGE)
        .push(" OFFSET ")
        .bind(offset)
        .fetch_all_tx(tx)
        .await?;
        for row in &rows {
            words.add(&row.text("subject")?);
            words.add(&row.text("search_body")?);
        }
        if (rows.len() as i64) < THREAD_PAGE {
            break;
        }
        offset += THREAD_PAGE;
    }
    let document = words.into_document();
    let old_key = Sql::new("SELECT search_key FROM threads WHERE id = ")
        .bind(thread_id)
        .fetch_optional_tx(tx)
        .await?
        .map(|r| r.opt_int("search_key"))
        .transpose()?
        .flatten();
    let span = THREAD_KEY_SPAN;
    let new_key = Sql::new(&format!(
        "UPDATE threads SET search_key = CASE \
         WHEN search_key >= last_message_at * {span} AND search_key < (last_message_at + 1) * {span} \
         THEN search_key \
         ELSE COALESCE((SELECT MIN(o.search_key) - 1 FROM threads o \
         WHERE o.search_key >= threads.last_message_at * {span} \
         AND o.search_key < (threads.last_message_at + 1) * {span}), \
         (last_message_at + 1) * {span} - 1) END WHERE id = "
    ))
    .bind(thread_id)
    .push(" RETURNING search_key")
    .fetch_optional_tx(tx)
    .await?
    .map(|r| r.int("search_key"))
    .transpose()?;
    let remove = old_key.map(|rowid| IndexWrite::Remove {
        index: FtsIndex::Threads,
        rowid,
    });
    let add = new_key.map(|rowid| IndexWrite::Add {
        index: FtsIndex::Threads,
        rowid,
        values: vec![document],
    });
    tx.write_index(remove.into_iter().chain(add)).await
}

/// A draft was written into a thread and moved its `last_message_at`:
/// the thread's key follows it (its words do not change: drafts are not
/// searched).
pub async fn draft_written(
    tx: &mut Tx,
    backend: Backend,
    thread_id: &str,
) -> Result<(), sqlx::Error> {
    match backend {
        Backend::Sqlite => reindex_thread(tx, backend, thread_id).await,
        Backend::Postgres => crate::core::search_postgres::follow_thread(tx, thread_id).await,
    }
}

/// Most bytes of a thread's search document: the words of its newest
/// messages, up to four messages' worth of indexed text.
pub const MAX_THREAD_DOCUMENT: usize = 4 * MAX_INDEXED_TEXT;

/// Messages read at a time to build a thread's document.
const THREAD_PAGE: i64 = 32;

/// Each whitespace-separated chunk of the texts added, once, lowercased (the
/// index folds case anyway), up to a size. Chunks are split no finer than
/// the index's tokenizer splits them, so no word is lost (until full).
struct DistinctWords {
    seen: std::collections::HashSet<String>,
    out: String,
    max: usize,
}

impl DistinctWords {
    fn new(max: usize) -> DistinctWords {
        DistinctWords {
            seen: std::collections::HashSet::new(),
            out: String::new(),
            max,
        }
    }

    fn is_full(&self) -> bool {
        self.out.len() >= self.max
    }

    fn add(&mut self, text: &str) {
        for chunk in text.split_whitespace() {
            let chunk = chunk.to_lowercase();
            if self.out.len() + chunk.len() + 1 > self.max {
                // Full: no more words, not even shorter ones.
                self.max = self.out.len();
                return;
            }
            if self.seen.insert(chunk.clone()) {
                if !self.out.is_empty() {
                    self.out.push(' ');
                }
                self.out.push_str(&chunk);
            }
        }
    }

    fn into_document(self) -> String {
        self.out
    }
}

#[cfg(test)]
fn distinct_words<'a>(texts: impl Iterator<Item = &'a str>) -> String {
    let mut words = DistinctWords::new(usize::MAX);
    texts.for_each(|t| words.add(t));
    words.into_document()
}

/// Removes threads' documents before the threads are deleted.
pub async fn unindex_threads(
    tx: &mut Tx,
    backend: Backend,
    thread_ids: &[String],
) -> Result<(), sqlx::Error> {
    if backend == Backend::Postgres {
        return crate::core::search_postgres::unindex_threads(tx, thread_ids).await;
    }
    unindex(
        tx,
        backend,
        FtsIndex::Threads,
        "SELECT search_key AS rowid FROM threads WHERE search_key IS NOT NULL AND id IN ",
        thread_ids,
    )
    .await
}

/// The FTS5 expression for a user query: every word, each quoted, all
/// required. None when the query has no words.
pub fn fts_expression(q: &str) -> Option<String> {
    let words = terms(q);
    (!words.is_empty()).then(|| quoted(&words))
}

fn quoted(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("\"{w}\""))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A message just inserted (not a draft), as the search index takes it
/// (see [`write_and_index`]).
#[derive(Clone, Copy)]
pub struct IndexedMessage<'a> {
    pub id: &'a str,
    pub thread_id: &'a str,
    pub subject: &'a str,
    /// Its `search_body`.
    pub body: &'a str,
    /// Its `created_at`, which its thread's `last_message_at` takes if later.
    pub at: i64,
}

/// Runs a message's writes (see `store::execute_all`), one of which
/// inserts it, and indexes it, not a draft, then its thread. On
/// PostgreSQL the message's column maintains itself and its thread's
/// document takes the words of that column, returned by the insert, in one
/// statement that joins the writes (a message in a new thread is one
/// statement); on SQLite the message goes into the full-text index after
/// them.
pub async fn write_and_index(
    tx: &mut Tx,
    backend: Backend,
    mut writes: Vec<Sql>,
    message: &IndexedMessage<'_>,
) -> Result<(), sqlx::Error> {
    if backend == Backend::Postgres {
        let Some(at) = writes.iter().position(|s| s.inserts_into("messages")) else {
            return Err(sqlx::Error::Protocol(
                "a message's writes hold no insert of it".into(),
            ));
        };
        let insert = writes.remove(at);
        let (insert, index) = crate::core::search_postgres::index_message_statements(
            insert,
            message.thread_id,
            message.at,
        );
        writes.splice(at..at, [insert, index]);
        return crate::store::execute_all(tx, backend, &writes).await;
    }
    crate::store::execute_all(tx, backend, &writes).await?;
    index_in_sqlite(tx, message).await?;
    reindex_thread(tx, backend, message.thread_id).await
}

/// Adds a message just inserted to SQLite's full-text index of messages.
async fn index_in_sqlite(tx: &mut Tx, message: &IndexedMessage<'_>) -> Result<(), sqlx::Error> {
    let IndexedMessage {
        id: message_id,
        subject,
        body,
        ..
    } = *message;
    let seq = Sql::new("SELECT seq FROM messages WHERE id = ")
        .bind(message_id)
        .fetch_one_tx(tx)
        .await?
        .int("seq")?;
    tx.write_index([IndexWrite::Add {
        index: FtsIndex::Messages,
        rowid: seq,
        values: vec![subject.to_string(), body.to_string()],
    }])
    .await
}

/// Removes from `index` the documents of the rows `ids`, whose rowids
/// `select` (ending in `IN `) reads as `rowid`.
async fn unindex(
    tx: &mut Tx,
    backend: Backend,
    index: FtsIndex,
    select: &str,
    ids: &[String],
) -> Result<(), sqlx::Error> {
    if backend != Backend::Sqlite || ids.is_empty() {
        return Ok(());
    }
    let mut q = Sql::new(select);
    q.bind_list(ids);
    let removals = q
        .fetch_all_tx(tx)
        .await?
        .iter()
        .map(|r| {
            Ok(IndexWrite::Remove {
                index,
                rowid: r.int("rowid")?,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    tx.write_index(removals).await
}

/// Removes messages of the given ids from the index before they are deleted.
pub async fn unindex_messages(
    tx: &mut Tx,
    backend: Backend,
    ids: &[String],
) -> Result<(), sqlx::Error> {
    unindex(
        tx,
        backend,
        FtsIndex::Messages,
        "SELECT seq AS rowid FROM messages WHERE id IN ",
        ids,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_document_holds_each_word_once() {
        let texts = [
            "Re: Plans",
            "See you at 9.\n> See you at NINE",
            "plans  changed",
        ];
        assert_eq!(
            distinct_words(texts.into_iter()),
            "re: plans see you at 9. > nine changed"
        );
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;

        proptest! {
            /// Whatever the query, the FTS5 expression is a list of quoted
            /// words with nothing inside the quotes that FTS5 could read
            /// as syntax.
            #[test]
            fn queries_become_at_most_sixteen_quoted_words(q in prop_oneof![any::<String>(), "(\"|\\*|-|:|\\(|\\)| |a|OR|NEAR|\u{130}|\u{212a}){0,40}"]) {
                let words = terms(&q);
                prop_assert!(words.len() <= 16);
                for w in &words {
                    prop_assert!(!w.is_empty());
                    prop_assert!(!w.contains(|c: char| c == '"' || c == '*' || c.is_whitespace()), "{:?}", w);
                }
                match fts_expression(&q) {
                    Some(expr) => {
                        prop_assert_eq!(expr.matches('"').count(), 2 * words.len());
                        prop_assert_eq!(expr, quoted(&words));
                    }
                    None => prop_assert!(words.is_empty()),
                }
            }

            #[test]
            fn documents_hold_each_chunk_once(texts in prop::collection::vec(any::<String>(), 0..5)) {
                let doc = distinct_words(texts.iter().map(String::as_str));
                let chunks: Vec<&str> = doc.split(' ').filter(|c| !c.is_empty()).collect();
                let unique: std::collections::HashSet<&&str> = chunks.iter().collect();
                prop_assert_eq!(unique.len(), chunks.len());
            }
        }
    }

    #[test]
    fn a_thread_document_stops_at_its_size() {
        let mut words = DistinctWords::new(20);
        words.add("alpha beta alpha gamma");
        assert!(!words.is_full());
        words.add("delta epsilon zeta");
        assert!(words.is_full());
        words.add("eta");
        let document = words.into_document();
        assert_eq!(document, "alpha beta gamma");
        assert!(document.len() <= 20);
    }

    #[test]
    fn queries_become_quoted_words() {
        assert_eq!(
            fts_expression("Hello, \"world\" OR x*").as_deref(),
            Some("\"hello\" \"world\" \"or\" \"x\"")
        );
        assert_eq!(fts_expression(" -*- "), None);
    }
}
