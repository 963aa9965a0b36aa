//! Search on PostgreSQL in steps of fixed size, each with one plan, never
//! the planner's guess of how common the words are. Its cost does not
//! depend on the statistics; it is not flat in the store's size for every
//! word: a word in just over `collect_max` documents walks about
//! page × store ÷ `collect_max` rows.
//!
//! A list search runs up to three kinds of statements, each with one plan
//! whatever the words:
//!
//! 1. **Walk**: the list itself, newest first, a chunk of rows at a time
//!    (the plain list's own statement with a larger limit), each row's
//!    words checked by its key (`thread_search` for threads, the message's
//!    own `search` for mail). A common word fills the page in the first
//!    chunk.
//! 2. **Count**: if the first chunk did not fill the page, how many
//!    documents hold the words, counted through the GIN index up to
//!    [`SearchBounds::collect_max`] and no further.
//! 3. **Collect**: if that many or fewer, those documents are sorted and
//!    joined to the list by key, filtered and cut to the page (threads are
//!    sorted by the time their document keeps and joined only until the
//!    page is full): a rare word costs its few matches. Otherwise the walk goes on from where it stopped: a
//!    word in more documents than that is common enough that the walk
//!    meets a match every `store / collect_max` rows on average.
//!
//! The GIN index is read through SQL functions that turn sequential and
//! plain index scans off (`ph_thread_matches`, `ph_message_matches`,
//! migration 15), so the count and the collection are bitmap scans of the
//! index however the statistics read. The walk looks each row's document
//! up in a `LATERAL` aggregate and the collection joins each match to its
//! row in a `LATERAL … OFFSET 0`: neither can be pulled up into a join, so
//! each is a probe by key per row, never a scan of every document (a
//! correlated `EXISTS` can be: PostgreSQL planned it as a hashed scan of
//! every thread document, chosen at run time).

use crate::core::paging::Page;
use crate::sql;
use crate::store::{Db, RowExt, Sql};

/// Where a list's words are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Documents {
    /// One document per thread (`thread_search`), its messages but drafts.
    Threads,
    /// Each message's own `search` column.
    Messages,
}

impl Documents {
    /// Table, key column and tsvector column of the documents, and the
    /// function that reads them through the GIN index.
    fn parts(self) -> (&'static str, &'static str, &'static str, &'static str) {
        match self {
            Documents::Threads => ("thread_search", "thread_id", "doc", "ph_thread_matches"),
            Documents::Messages => ("messages", "id", "search", "ph_message_matches"),
        }
    }
}

/// The bounds of one search's work. Tests set small ones to reach every
/// step with a small store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchBounds {
    /// Rows of the list walked before counting the matches.
    pub first_walk: i64,
    /// Rows walked per statement after that.
    pub walk_chunk: i64,
    /// Most matching documents collected and sorted instead of walking.
    pub collect_max: i64,
}

impl Default for SearchBounds {
    fn default() -> SearchBounds {
        SearchBounds {
            first_walk: 200,
            walk_chunk: 1000,
            collect_max: 2000,
        }
    }
}

/// A list to search: `FROM {table} {alias} WHERE 1 = 1` followed by what
/// `filters` appends (each condition starting with ` AND `), newest first by
/// `time_col` then `{alias}.id`.
pub struct SearchedList<'a> {
    pub table: &'static str,
    pub alias: &'static str,
    pub time_col: &'static str,
    pub documents: Documents,
    pub filters: &'a (dyn Fn(&mut Sql) + Sync),
}

/// The tsquery of a search's words (already split and lowercased).
fn push_query(sql: &mut Sql, words: &[String]) {
    sql.push("plainto_tsquery('simple', ")
        .bind(words.join(" "))
        .push(")");
}

/// The ids of up to `page.limit + 1` rows of `list` whose documents hold
/// every word, in list order, from the page's cursor on.
pub async fn page_ids(
    db: &Db,
    list: &SearchedList<'_>,
    words: &[String],
    page: &Page,
    bounds: SearchBounds,
) -> Result<Vec<(i64, String)>, sqlx::Error> {
    let wanted = (page.limit + 1) as usize;
    let mut hits = Vec::new();
    let mut after = page.after.clone();
    let mut chunk = bounds.first_walk.max(1);
    let mut counted = false;
    loop {
        let rows = walk(list, words, after.clone(), chunk)
            .fetch_all(db.reader())
            .await?;
        let walked = rows.len() as i64;
        for r in &rows {
            let key = (r.int("k")?, r.text("id")?);
            after = Some(key.clone());
            if r.int("hit")? == 1 {
                hits.push(key);
                if hits.len() == wanted {
                    return Ok(hits);
                }
            }
        }
        if walked < chunk {
            return Ok(hits);
        }
        if !counted {
            counted = true;
            if let Some(found) = try_collect(db, list, words, page, bounds.collect_max).await? {
                return Ok(found);
            }
        }
        chunk = bounds.walk_chunk.max(1);
    }
}

/// Step 1: `chunk` rows of the list after `after`, each with whether its
/// document holds the words.
fn walk(
    list: &SearchedList<'_>,
    words: &[String],
    after: Option<(i64, String)>,
    chunk: i64,
) -> Sql {
    let (docs, key, column, _) = list.documents.parts();
    let (table, alias, time_col) = (list.table, list.alias, list.time_col);
    let mut sql = Sql::new(&format!(
        "SELECT w.k, w.id, h.hit FROM (SELECT {time_col} AS k, {alias}.id AS id \
         FROM {table} {alias} WHERE 1 = 1"
    ));
    (list.filters)(&mut sql);
    Page {
        limit: chunk - 1,
        after,
    }
    .push(&mut sql, time_col, &format!("{alias}.id"));
    sql.push(&format!(
        ") w CROSS JOIN LATERAL (SELECT COUNT(*) AS hit FROM (SELECT 1 FROM {docs} d \
         WHERE d.{key} = w.id AND d.{column} @@ "
    ));
    push_query(&mut sql, words);
    sql.push(" LIMIT 1) x) h ORDER BY w.k DESC, w.id DESC");
    sql
}

/// Step 2: how many documents hold the words, up to `max + 1`.
fn count(documents: Documents, words: &[String], max: i64) -> Sql {
    let (_, _, _, matches) = documents.parts();
    let mut sql = Sql::new(&format!("SELECT COUNT(*) AS n FROM {matches}("));
    push_query(&mut sql, words);
    sql.push(", ").bind(max + 1).push(") c");
    sql
}

/// Steps 2 and 3: the page among the documents holding the words, or None
/// if more than `max` hold them.
async fn try_collect(
    db: &Db,
    list: &SearchedList<'_>,
    words: &[String],
    page: &Page,
    max: i64,
) -> Result<Option<Vec<(i64, String)>>, sqlx::Error> {
    if list.documents == Documents::Threads {
        // The count comes with the page; an empty page does not say it.
        let rows = collect_threads(list, words, page, max)
            .fetch_all(db.reader())
            .await?;
        if let Some(first) = rows.first() {
            if first.int("n")? > max {
                return Ok(None);
            }
            return rows
                .iter()
                .map(|r| Ok((r.int("k")?, r.text("id")?)))
                .collect::<Result<_, sqlx::Error>>()
                .map(Some);
        }
    }
    let n = count(list.documents, words, max)
        .fetch_one(db.reader())
        .await?
        .int("n")?;
    if n > max {
        return Ok(None);
    }
    if list.documents == Documents::Threads {
        return Ok(Some(Vec::new()));
    }
    collect(list, words, page, max)
        .fetch_all(db.reader())
        .await?
        .iter()
        .map(|r| Ok((r.int("k")?, r.text("id")?)))
        .collect::<Result<_, sqlx::Error>>()
        .map(Some)
}

/// Step 3 for threads: the (at most `max + 1`) documents holding the words,
/// with their count, sorted by the thread's `last_message_at` as the
/// document keeps it; each joined to its thread only until the page is
/// full.
fn collect_threads(list: &SearchedList<'_>, words: &[String], page: &Page, max: i64) -> Sql {
    let alias = list.alias;
    let mut sql = Sql::new(
        "SELECT c.last_at AS k, c.id AS id, c.n FROM (SELECT m.id, m.last_at, COUNT(*) OVER () AS n \
         FROM ph_thread_matches(",
    );
    push_query(&mut sql, words);
    sql.push(", ").bind(max + 1).push(&format!(
        ") m ORDER BY m.last_at DESC, m.id DESC) c CROSS JOIN LATERAL \
         (SELECT * FROM threads x WHERE x.id = c.id OFFSET 0) {alias} WHERE 1 = 1"
    ));
    (list.filters)(&mut sql);
    page.push(&mut sql, "c.last_at", "c.id");
    sql
}

/// Step 3 for mail: the page among the (at most `max`) messages holding the
/// words.
fn collect(list: &SearchedList<'_>, words: &[String], page: &Page, max: i64) -> Sql {
    let (_, _, _, matches) = list.documents.parts();
    let (table, alias, time_col) = (list.table, list.alias, list.time_col);
    let mut sql = Sql::new(&format!(
        "SELECT {time_col} AS k, {alias}.id AS id FROM {matches}("
    ));
    push_query(&mut sql, words);
    sql.push(", ").bind(max + 1).push(&format!(
        ") c CROSS JOIN LATERAL (SELECT * FROM {table} x WHERE x.id = c.id OFFSET 0) {alias} WHERE 1 = 1"
    ));
    (list.filters)(&mut sql);
    page.push(&mut sql, time_col, &format!("{alias}.id"));
    sql
}

/// `rows` (each with its id in `id_of`) in the order of `ids`; ids without
/// a row (gone since) are skipped.
pub fn in_order<T>(
    ids: &[(i64, String)],
    rows: Vec<T>,
    id_of: impl Fn(&T) -> &str,
) -> Vec<(i64, T)> {
    let mut by_id: std::collections::HashMap<String, T> = rows
        .into_iter()
        .map(|r| (id_of(&r).to_string(), r))
        .collect();
    ids.iter()
        .filter_map(|(k, id)| by_id.remove(id).map(|r| (*k, r)))
        .collect()
}

/// The documents of threads (PostgreSQL): kept in the transaction of each
/// message, see [`index_message_statement`].
pub const THREAD_DOCUMENTS: &str = r#"
CREATE TABLE thread_search (
    thread_id TEXT PRIMARY KEY,
    doc tsvector NOT NULL,
    -- The thread's last_message_at, kept with it (a message or a draft
    -- moves it): the matches of a rare word are sorted without their
    -- threads.
    last_at BIGINT NOT NULL
);
CREATE INDEX thread_search_doc ON thread_search USING GIN (doc);
ALTER TABLE thread_search ALTER COLUMN doc SET STATISTICS 1000;
-- A thread's document with a message's words added: each word once, no
-- positions, at most 768 KiB (PostgreSQL refuses a tsvector over 1 MiB):
-- once full, a thread's later words are not added.
CREATE FUNCTION ph_thread_doc(doc tsvector, add tsvector) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE
    WHEN doc IS NULL THEN strip(add)
    WHEN pg_column_size(strip(doc)) + pg_column_size(strip(add)) > 786432 THEN doc
    ELSE strip(doc) || strip(add)
END
$$;
CREATE AGGREGATE ph_thread_doc_agg(tsvector) (SFUNC = ph_thread_doc, STYPE = tsvector);
-- The GIN index read as a bitmap, whatever the statistics say: a scan of
-- every row stopped by the LIMIT is what a rare word must never get.
CREATE FUNCTION ph_thread_matches(q tsquery, n BIGINT) RETURNS TABLE (id TEXT, last_at BIGINT)
LANGUAGE sql STABLE SET enable_seqscan = off SET enable_indexscan = off
AS $$ SELECT thread_id, last_at FROM thread_search WHERE doc @@ q LIMIT n $$;
CREATE FUNCTION ph_message_matches(q tsquery, n BIGINT) RETURNS TABLE (id TEXT)
LANGUAGE sql STABLE SET enable_seqscan = off SET enable_indexscan = off
AS $$ SELECT id FROM messages WHERE search @@ q LIMIT n $$;
"#;

/// Builds the thread documents of a store that has none (the migration
/// that creates them, and bulk loaders).
pub const THREAD_DOCUMENTS_BACKFILL: &str = r#"
INSERT INTO thread_search (thread_id, doc, last_at)
    SELECT m.thread_id, ph_thread_doc_agg(m.search ORDER BY m.created_at, m.seq), MAX(t.last_message_at)
    FROM messages m JOIN threads t ON t.id = m.thread_id
    WHERE m.is_draft = 0 GROUP BY m.thread_id;
"#;

/// Adds a message (not a draft) to its thread's document, in the
/// message's transaction: its words are its `search` column's, computed
/// from the same values, and `last_at` is what the thread's
/// `last_message_at` becomes with it (the later of the two; a thread just
/// created is not there yet). It reads nothing but the thread, as of
/// before the message, so it may join the message's inserts in one
/// statement.
pub fn index_message_statement(thread_id: &str, subject: &str, search_body: &str, at: i64) -> Sql {
    sql!(
        "INSERT INTO thread_search (thread_id, doc, last_at) VALUES ($1, \
         strip(to_tsvector('simple', CAST($2 AS TEXT) || ' ' || CAST($3 AS TEXT))), \
         GREATEST((SELECT last_message_at FROM threads WHERE id = $1), $4)) \
         ON CONFLICT (thread_id) DO UPDATE SET doc = ph_thread_doc(thread_search.doc, EXCLUDED.doc), \
         last_at = EXCLUDED.last_at",
        thread_id,
        subject,
        search_body,
        at
    )
    .joining_inserts()
}

/// Brings a thread's document's `last_at` up to date with the thread (a
/// draft moved it).
pub async fn follow_thread(tx: &mut crate::store::Tx, thread_id: &str) -> Result<(), sqlx::Error> {
    Sql::new("UPDATE thread_search SET last_at = (SELECT last_message_at FROM threads WHERE id = ")
        .bind(thread_id)
        .push(") WHERE thread_id = ")
        .bind(thread_id)
        .execute_tx(tx)
        .await?;
    Ok(())
}

/// Removes threads' documents (before the threads are deleted).
pub async fn unindex_threads(
    tx: &mut crate::store::Tx,
    thread_ids: &[String],
) -> Result<(), sqlx::Error> {
    for chunk in thread_ids.chunks(500) {
        let mut q = Sql::new("DELETE FROM thread_search WHERE thread_id IN ");
        q.bind_list(chunk);
        q.execute_tx(tx).await?;
    }
    Ok(())
}
