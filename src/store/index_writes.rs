//! Writes to SQLite's full-text indexes, held back to the end of a group
//! commit.
//!
//! FTS5 flushes what it holds to a new segment of its index at every
//! savepoint, and SQLite opens one around every statement that writes a
//! virtual table inside a transaction (besides the group writer's around
//! every job). Written in place, each send's few words made two segments of
//! their own, and merging them later cost more: a sixth of the writer's
//! time. The group writer instead collects a batch's index writes and, after
//! its last job, writes each index with one DELETE and one INSERT.

use std::collections::HashMap;

use super::{Sql, Tx, Value};

/// SQLite's full-text indexes (contentless FTS5 tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FtsIndex {
    /// One document per message (drafts aside), rowid `messages.seq`:
    /// subject, body.
    Messages,
    /// One document per thread, rowid `threads.search_key`: body.
    Threads,
}

impl FtsIndex {
    fn table(self) -> &'static str {
        match self {
            FtsIndex::Messages => "messages_fts",
            FtsIndex::Threads => "threads_fts",
        }
    }

    fn columns(self) -> &'static str {
        match self {
            FtsIndex::Messages => "subject, body",
            FtsIndex::Threads => "body",
        }
    }
}

/// A change to a full-text index, by the document's rowid.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexWrite {
    /// Removes the document at `rowid`, if there is one.
    Remove { index: FtsIndex, rowid: i64 },
    /// Adds a document at `rowid` (none may be there): `values` for the
    /// index's columns, in their order.
    Add {
        index: FtsIndex,
        rowid: i64,
        values: Vec<String>,
    },
}

impl IndexWrite {
    fn index(&self) -> FtsIndex {
        match self {
            IndexWrite::Remove { index, .. } | IndexWrite::Add { index, .. } => *index,
        }
    }
}

/// Rows per statement: SQLite takes at most 32,766 values in one.
const ROWS_PER_STATEMENT: usize = 500;

/// Runs [`statements`] of `writes` in `tx`.
pub async fn apply(tx: &mut Tx, writes: &[IndexWrite]) -> Result<(), sqlx::Error> {
    for statement in statements(writes) {
        statement.execute_tx(tx).await?;
    }
    Ok(())
}

/// Statements with the effect of `writes` applied in order: per index, one
/// DELETE of every rowid removed at some point, then one INSERT of every
/// document still added at the end (a document added and later removed is
/// never written).
pub fn statements(writes: &[IndexWrite]) -> Vec<Sql> {
    let mut indexes: Vec<FtsIndex> = Vec::new();
    for w in writes {
        if !indexes.contains(&w.index()) {
            indexes.push(w.index());
        }
    }
    let mut out = Vec::new();
    for index in indexes {
        let mut removed: Vec<i64> = Vec::new();
        let mut added: Vec<Option<(i64, &[String])>> = Vec::new();
        let mut added_at: HashMap<i64, usize> = HashMap::new();
        for w in writes.iter().filter(|w| w.index() == index) {
            match w {
                IndexWrite::Remove { rowid, .. } => {
                    if let Some(i) = added_at.remove(rowid) {
                        added[i] = None;
                    }
                    if !removed.contains(rowid) {
                        removed.push(*rowid);
                    }
                }
                IndexWrite::Add { rowid, values, .. } => {
                    if let Some(i) = added_at.insert(*rowid, added.len()) {
                        added[i] = None;
                    }
                    added.push(Some((*rowid, values)));
                }
            }
        }
        let table = index.table();
        for chunk in removed.chunks(ROWS_PER_STATEMENT) {
            let mut q = Sql::new(&format!("DELETE FROM {table} WHERE rowid IN "));
            q.bind_list(chunk);
            out.push(q);
        }
        let added: Vec<_> = added.into_iter().flatten().collect();
        for chunk in added.chunks(ROWS_PER_STATEMENT) {
            let mut q = Sql::new(&format!(
                "INSERT INTO {table} (rowid, {}) VALUES ",
                index.columns()
            ));
            for (i, (rowid, values)) in chunk.iter().enumerate() {
                if i > 0 {
                    q.push(", ");
                }
                let mut row: Vec<Value> = vec![Value::from(*rowid)];
                row.extend(values.iter().map(Value::from));
                q.bind_list(&row);
            }
            out.push(q);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(rowid: i64, body: &str) -> IndexWrite {
        IndexWrite::Add {
            index: FtsIndex::Threads,
            rowid,
            values: vec![body.into()],
        }
    }

    fn remove(rowid: i64) -> IndexWrite {
        IndexWrite::Remove {
            index: FtsIndex::Threads,
            rowid,
        }
    }

    #[test]
    fn a_batch_becomes_one_delete_and_one_insert_with_the_last_word_on_each_rowid() {
        let writes = [
            remove(1),
            add(2, "first"),
            add(3, "kept"),
            remove(2),
            add(4, "moved"),
            IndexWrite::Add {
                index: FtsIndex::Messages,
                rowid: 9,
                values: vec!["s".into(), "b".into()],
            },
        ];
        let got: Vec<(String, Vec<Value>)> = statements(&writes)
            .into_iter()
            .map(|s| (s.text().to_string(), s.args))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "DELETE FROM threads_fts WHERE rowid IN ($1, $2)".to_string(),
                    vec![Value::from(1), Value::from(2)]
                ),
                (
                    "INSERT INTO threads_fts (rowid, body) VALUES ($1, $2), ($3, $4)".to_string(),
                    vec![
                        Value::from(3),
                        Value::from("kept"),
                        Value::from(4),
                        Value::from("moved")
                    ]
                ),
                (
                    "INSERT INTO messages_fts (rowid, subject, body) VALUES ($1, $2, $3)"
                        .to_string(),
                    vec![Value::from(9), Value::from("s"), Value::from("b")]
                ),
            ]
        );
    }

    /// Each change applied in order and the batch's statements leave an
    /// FTS5 index the same.
    #[test]
    fn the_batch_statements_leave_the_index_as_the_changes_one_by_one_would() {
        let writes = [
            add(1, "alpha"),
            add(2, "beta"),
            remove(1),
            add(1, "gamma"),
            remove(2),
            remove(7),
            add(3, "delta"),
            remove(3),
            add(3, "epsilon"),
        ];
        let read = |conn: &rusqlite::Connection| -> Vec<(i64, String)> {
            let mut found = Vec::new();
            for word in ["alpha", "beta", "gamma", "delta", "epsilon"] {
                let mut stmt = conn
                    .prepare(
                        "SELECT rowid FROM threads_fts WHERE threads_fts MATCH ?1 ORDER BY rowid",
                    )
                    .unwrap();
                let rows = stmt
                    .query_map([word], |r| r.get::<_, i64>(0))
                    .unwrap()
                    .map(|r| (r.unwrap(), word.to_string()));
                found.extend(rows);
            }
            found.sort();
            found
        };
        let fresh = || {
            let conn = rusqlite::Connection::open_in_memory().unwrap();
            conn.execute_batch(
                "CREATE VIRTUAL TABLE threads_fts USING fts5(body, content='', contentless_delete=1);
                 INSERT INTO threads_fts (rowid, body) VALUES (7, 'delta');",
            )
            .unwrap();
            conn
        };
        let one_by_one = fresh();
        for w in &writes {
            for s in statements(std::slice::from_ref(w)) {
                super::super::lite::execute(&one_by_one, &s).unwrap();
            }
        }
        let batched = fresh();
        batched.execute_batch("BEGIN").unwrap();
        for s in statements(&writes) {
            super::super::lite::execute(&batched, &s).unwrap();
        }
        batched.execute_batch("COMMIT").unwrap();
        assert_eq!(read(&batched), read(&one_by_one));
        assert_eq!(
            read(&batched),
            vec![(1, "gamma".to_string()), (3, "epsilon".to_string())]
        );
    }
}
