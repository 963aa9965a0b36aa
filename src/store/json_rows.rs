//! Several reads in one PostgreSQL statement, their rows as JSON.
//!
//! PostgreSQL's protocol takes one statement per round trip, and for a
//! point read the round trip (and the statement's own start-up on the
//! server) costs more than the read. `SELECT (SELECT json_agg(q) FROM (<read
//! 1>) q), (SELECT json_agg(q) FROM (<read 2>) q), …` answers every read at
//! once, each as a column holding its rows; [`JsonRow`] reads such a row as
//! any other through [`RowExt`].

use serde_json::{Map, Value};

use super::{RowExt, Sql};

/// One statement answering every read of `reads`, read `i` as column `r{i}`
/// (JSON text of an array of row objects, `[]` for none).
pub fn statement(reads: &[&Sql]) -> Sql {
    let mut all = Sql::new("SELECT ");
    for (i, read) in reads.iter().enumerate() {
        if i > 0 {
            all.push(", ");
        }
        all.push("(SELECT COALESCE(json_agg(q), '[]')::text FROM (");
        all.push_renumbered(read);
        all.push(&format!(") q) AS r{i}"));
    }
    all
}

/// The rows of column `r{i}` of [`statement`]'s answer.
pub fn rows(text: &str) -> Result<Vec<JsonRow>, sqlx::Error> {
    let rows: Vec<Map<String, Value>> = serde_json::from_str(text)
        .map_err(|e| sqlx::Error::Protocol(format!("rows aggregated as JSON: {e}")))?;
    Ok(rows.into_iter().map(JsonRow).collect())
}

/// A row as PostgreSQL's `row_to_json` writes it: integers as numbers,
/// text as strings, `bytea` as `\x` and hex, NULL as null.
#[derive(Debug)]
pub struct JsonRow(Map<String, Value>);

impl JsonRow {
    fn cell(&self, col: &str) -> Result<&Value, sqlx::Error> {
        self.0
            .get(col)
            .ok_or_else(|| sqlx::Error::ColumnNotFound(col.to_string()))
    }

    fn mismatch(col: &str, want: &str, got: &Value) -> sqlx::Error {
        sqlx::Error::ColumnDecode {
            index: col.to_string(),
            source: format!("expected {want}, found {got}").into(),
        }
    }

    fn opt(&self, col: &str) -> Result<Option<&Value>, sqlx::Error> {
        Ok(Some(self.cell(col)?).filter(|v| !v.is_null()))
    }
}

impl RowExt for JsonRow {
    fn text(&self, col: &str) -> Result<String, sqlx::Error> {
        self.opt_text(col)?
            .ok_or_else(|| Self::mismatch(col, "text", &Value::Null))
    }
    fn opt_text(&self, col: &str) -> Result<Option<String>, sqlx::Error> {
        match self.opt(col)? {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(Self::mismatch(col, "text", other)),
        }
    }
    fn int(&self, col: &str) -> Result<i64, sqlx::Error> {
        self.opt_int(col)?
            .ok_or_else(|| Self::mismatch(col, "an integer", &Value::Null))
    }
    fn opt_int(&self, col: &str) -> Result<Option<i64>, sqlx::Error> {
        match self.opt(col)? {
            None => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| Self::mismatch(col, "an integer", v)),
        }
    }
    fn flag(&self, col: &str) -> Result<bool, sqlx::Error> {
        match self.cell(col)? {
            Value::Bool(b) => Ok(*b),
            other => Ok(self
                .int(col)
                .map_err(|_| Self::mismatch(col, "a flag", other))?
                != 0),
        }
    }
    fn bytes(&self, col: &str) -> Result<Vec<u8>, sqlx::Error> {
        match self.opt(col)? {
            None => Ok(Vec::new()),
            Some(v @ Value::String(s)) => s
                .strip_prefix("\\x")
                .and_then(|h| hex::decode(h).ok())
                .ok_or_else(|| Self::mismatch(col, "bytea as \\x and hex", v)),
            Some(other) => Err(Self::mismatch(col, "bytes", other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql;

    #[test]
    fn reads_become_columns_their_placeholders_renumbered() {
        let a = sql!("SELECT id FROM domains WHERE name IN ($1, $2)", "a", "b");
        let b = sql!("SELECT address FROM suppressions WHERE address = $1", "x");
        let all = statement(&[&a, &b]);
        assert_eq!(
            all.text(),
            "SELECT (SELECT COALESCE(json_agg(q), '[]')::text FROM (SELECT id FROM domains \
             WHERE name IN ($1, $2)) q) AS r0, (SELECT COALESCE(json_agg(q), '[]')::text FROM \
             (SELECT address FROM suppressions WHERE address = $3) q) AS r1"
        );
        assert_eq!(all.args.len(), 3);
    }

    #[test]
    fn json_rows_read_like_database_rows() {
        let parsed =
            rows(r#"[{"id": "a", "n": 7, "none": null, "yes": 1, "no": false, "b": "\\x0102"}]"#)
                .unwrap();
        let row = &parsed[0];
        assert_eq!(row.text("id").unwrap(), "a");
        assert_eq!(row.int("n").unwrap(), 7);
        assert_eq!(row.opt_int("none").unwrap(), None);
        assert_eq!(row.opt_text("none").unwrap(), None);
        assert!(row.flag("yes").unwrap());
        assert!(!row.flag("no").unwrap());
        assert_eq!(row.bytes("b").unwrap(), vec![1, 2]);
        assert!(row.text("n").is_err());
        assert!(row.int("id").is_err());
        assert!(row.text("none").is_err());
        assert!(row.opt_text("missing").is_err());
        assert!(rows("not json").is_err());
        assert!(rows("[]").unwrap().is_empty());
    }
}
