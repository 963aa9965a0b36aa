//! Full-text search, the one place the two dialects really differ: SQLite
//! FTS5 (a contentless index kept in step by hand) and PostgreSQL tsvector
//! (a generated column with a GIN index).

use crate::store::{Backend, Db, RowExt, Sql, Tx};

/// Words of a user query, stripped of everything FTS syntax could misread.
fn terms(q: &str) -> Vec<String> {
    q.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .take(16)
        .map(|t| t.to_lowercase())
        .collect()
}

/// Appends ` AND <messages alias>.<seq> matches q`. A query with no words
/// matches nothing.
pub fn push_match(sql: &mut Sql, backend: Backend, alias: &str, q: &str) {
    sql.plan_each_run();
    let words = terms(q);
    if words.is_empty() {
        sql.push(" AND 1 = 0");
        return;
    }
    match backend {
        Backend::Sqlite => {
            let expr = quoted(&words);
            sql.push(&format!(
                " AND {alias}.seq IN (SELECT rowid FROM messages_fts WHERE messages_fts MATCH "
            ))
            .bind(expr)
            .push(")");
        }
        Backend::Postgres => {
            sql.push(&format!(
                " AND {alias}.search @@ plainto_tsquery('simple', "
            ))
            .bind(words.join(" "))
            .push(")");
        }
    }
}

/// How a thread list finds the threads whose messages match, on SQLite.
/// Which is cheap depends on how many messages match: see [`ThreadShape::for_matches`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadShape {
    /// Collect the matching threads, then sort them: cheap when few match.
    Collect,
    /// Walk threads newest first, checking each one's messages against the
    /// set of matching rowids, built once.
    Walk,
    /// Walk threads newest first, asking the index about each message: for
    /// words so common that building their whole set would cost more than
    /// the few threads a page needs.
    Probe,
}

/// Up to this many matching messages, collecting and sorting is cheapest.
const FEW_MATCHES: i64 = 1_000;
/// Above this many, building the set of matches costs more than probing.
const MANY_MATCHES: i64 = 150_000;

impl ThreadShape {
    pub fn for_matches(count: i64) -> ThreadShape {
        if count <= FEW_MATCHES {
            ThreadShape::Collect
        } else if count <= MANY_MATCHES {
            ThreadShape::Walk
        } else {
            ThreadShape::Probe
        }
    }
}

/// Appends ` AND <thread alias>.id` is one with a message matching `q`.
///
/// On SQLite the cost of each way of asking grows with a different thing
/// (matches, or threads walked), so it counts the matches first, up to a
/// bound, and picks the shape that stays cheap. PostgreSQL's planner makes
/// that choice itself from the tsvector statistics.
pub async fn push_thread_match(
    sql: &mut Sql,
    db: &Db,
    alias: &str,
    q: &str,
) -> Result<(), sqlx::Error> {
    sql.plan_each_run();
    if db.backend() == Backend::Postgres {
        sql.push(&format!(
            " AND {alias}.id IN (SELECT m.thread_id FROM messages m WHERE 1 = 1"
        ));
        push_match(sql, Backend::Postgres, "m", q);
        sql.push(")");
        return Ok(());
    }
    let Some(expr) = fts_expression(q) else {
        sql.push(" AND 1 = 0");
        return Ok(());
    };
    let count = Sql::new(
        "SELECT COUNT(*) AS n FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ",
    )
    .bind(expr.clone())
    .push(&format!(" LIMIT {})", MANY_MATCHES + 1))
    .fetch_one(db.reader())
    .await?
    .int("n")?;
    push_thread_shape(sql, alias, &expr, ThreadShape::for_matches(count));
    Ok(())
}

/// Appends the SQLite condition of one shape (public for the tests that
/// hold every shape to the same answer).
pub fn push_thread_shape(sql: &mut Sql, alias: &str, expr: &str, shape: ThreadShape) {
    match shape {
        ThreadShape::Collect => sql.push(&format!(
            " AND {alias}.id IN (SELECT m.thread_id FROM messages m WHERE m.seq IN \
             (SELECT rowid FROM messages_fts WHERE messages_fts MATCH "
        )),
        ThreadShape::Walk => sql.push(&format!(
            " AND EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = {alias}.id AND m.seq IN \
             (SELECT rowid FROM messages_fts WHERE messages_fts MATCH "
        )),
        ThreadShape::Probe => sql.push(&format!(
            " AND EXISTS (SELECT 1 FROM messages m WHERE m.thread_id = {alias}.id AND EXISTS \
             (SELECT 1 FROM messages_fts WHERE messages_fts.rowid = m.seq AND messages_fts MATCH "
        )),
    };
    sql.bind(expr.to_string()).push("))");
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

/// Indexes a message just inserted (PostgreSQL's column maintains itself).
pub async fn index_message(
    tx: &mut Tx,
    backend: Backend,
    message_id: &str,
    subject: &str,
    body: &str,
) -> Result<(), sqlx::Error> {
    if let Some(insert) = index_statement(backend, message_id, subject, body) {
        insert.execute_tx(tx).await?;
    }
    Ok(())
}

/// The statement that indexes a message just inserted, if the backend
/// needs one.
pub fn index_statement(
    backend: Backend,
    message_id: &str,
    subject: &str,
    body: &str,
) -> Option<Sql> {
    if backend != Backend::Sqlite {
        return None;
    }
    let mut insert = Sql::new("INSERT INTO messages_fts (rowid, subject, body) SELECT seq, ");
    insert
        .bind(subject)
        .push(", ")
        .bind(body)
        .push(" FROM messages WHERE id = ")
        .bind(message_id);
    Some(insert)
}

/// Removes messages of the given ids from the index before they are deleted.
pub async fn unindex_messages(
    tx: &mut Tx,
    backend: Backend,
    ids: &[String],
) -> Result<(), sqlx::Error> {
    if backend == Backend::Sqlite && !ids.is_empty() {
        let mut q = Sql::new(
            "DELETE FROM messages_fts WHERE rowid IN (SELECT seq FROM messages WHERE id IN ",
        );
        q.bind_list(ids).push(")");
        q.execute_tx(tx).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shape_follows_the_number_of_matches() {
        assert_eq!(ThreadShape::for_matches(0), ThreadShape::Collect);
        assert_eq!(ThreadShape::for_matches(FEW_MATCHES), ThreadShape::Collect);
        assert_eq!(ThreadShape::for_matches(FEW_MATCHES + 1), ThreadShape::Walk);
        assert_eq!(ThreadShape::for_matches(MANY_MATCHES), ThreadShape::Walk);
        assert_eq!(
            ThreadShape::for_matches(MANY_MATCHES + 1),
            ThreadShape::Probe
        );
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
