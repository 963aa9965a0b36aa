//! Full-text search, the one place the two dialects really differ: SQLite
//! FTS5 (a contentless index kept in step by hand) and PostgreSQL tsvector
//! (a generated column with a GIN index).

use crate::store::{Backend, Sql, Tx};

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
    let words = terms(q);
    if words.is_empty() {
        sql.push(" AND 1 = 0");
        return;
    }
    match backend {
        Backend::Sqlite => {
            let expr = words
                .iter()
                .map(|w| format!("\"{w}\""))
                .collect::<Vec<_>>()
                .join(" ");
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

/// Indexes a message just inserted (PostgreSQL's column maintains itself).
pub async fn index_message(
    tx: &mut Tx,
    backend: Backend,
    message_id: &str,
    subject: &str,
    body: &str,
) -> Result<(), sqlx::Error> {
    if backend == Backend::Sqlite {
        Sql::new("INSERT INTO messages_fts (rowid, subject, body) SELECT seq, ")
            .bind(subject)
            .push(", ")
            .bind(body)
            .push(" FROM messages WHERE id = ")
            .bind(message_id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
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
        q.execute(&mut **tx).await?;
    }
    Ok(())
}
