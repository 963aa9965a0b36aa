//! The SQLite group writer's own connection, driven in place.
//!
//! sqlx runs each SQLite connection on a thread of its own and every
//! statement is a round trip to it: a message there, a wake-up, a message
//! back per result. For the group writer, which runs nearly every write of
//! the service one after another, those hand-offs cost more than SQLite's
//! work (two thirds of its time went to waking threads). So the group
//! writer's thread owns a plain connection (the same SQLite library sqlx
//! links) and runs statements directly. Statements, placeholders and
//! errors keep the shapes the rest of the store uses: `$n` placeholders,
//! `sqlx::Error`, rows read through [`RowExt`].

use std::borrow::Cow;
use std::path::Path;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use sqlx::error::{DatabaseError, ErrorKind};

use super::{RowExt, SQLITE_PRAGMAS, Sql, Value};

/// Prepared statements kept per connection; the write path uses a few dozen
/// distinct texts.
const STATEMENT_CACHE: usize = 256;

/// Opens the writer connection with the pragmas every connection gets.
pub fn open(path: &Path) -> Result<Connection, sqlx::Error> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(convert)?;
    for pragma in SQLITE_PRAGMAS {
        batch(&conn, pragma)?;
    }
    // Every job runs under a savepoint, which copies each page it first
    // touches to a sub-journal: in a temporary file that was most of what
    // the writer wrote (2.7 GB for 20,000 sends); in memory it is a copy.
    batch(&conn, "PRAGMA temp_store = MEMORY")?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// Opens a connection that can only read (see `lookup`).
pub fn open_read_only(path: &Path) -> Result<Connection, sqlx::Error> {
    let conn = open(path)?;
    batch(&conn, "PRAGMA query_only = ON")?;
    Ok(conn)
}

/// Runs statements without parameters (transaction control).
pub fn batch(conn: &Connection, text: &str) -> Result<(), sqlx::Error> {
    conn.execute_batch(text).map_err(convert)
}

/// Runs one statement to completion; rows changed.
pub fn execute(conn: &Connection, sql: &Sql) -> Result<u64, sqlx::Error> {
    let mut stmt = conn.prepare_cached(sql.text()).map_err(convert)?;
    bind(&mut stmt, &sql.args)?;
    let mut rows = stmt.raw_query();
    while rows.next().map_err(convert)?.is_some() {}
    Ok(conn.changes())
}

/// Runs one statement and collects its rows.
pub fn fetch_all(conn: &Connection, sql: &Sql) -> Result<Vec<LiteRow>, sqlx::Error> {
    fetch_limited(conn, sql, usize::MAX)
}

pub fn fetch_optional(conn: &Connection, sql: &Sql) -> Result<Option<LiteRow>, sqlx::Error> {
    Ok(fetch_limited(conn, sql, 1)?.pop())
}

/// At most `limit` rows of one statement.
pub fn fetch_limited(
    conn: &Connection,
    sql: &Sql,
    limit: usize,
) -> Result<Vec<LiteRow>, sqlx::Error> {
    let mut stmt = conn.prepare_cached(sql.text()).map_err(convert)?;
    bind(&mut stmt, &sql.args)?;
    let columns: std::sync::Arc<[String]> = stmt
        .column_names()
        .into_iter()
        .map(str::to_string)
        .collect();
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    while out.len() < limit {
        let Some(row) = rows.next().map_err(convert)? else {
            break;
        };
        let mut values = Vec::with_capacity(columns.len());
        for i in 0..columns.len() {
            values.push(match row.get_ref(i).map_err(convert)? {
                ValueRef::Null => Cell::Null,
                ValueRef::Integer(n) => Cell::Int(n),
                // No column of ours holds a float; reading one is a mismatch.
                ValueRef::Real(_) => Cell::Real,
                ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => Cell::Bytes(b.to_vec()),
            });
        }
        out.push(LiteRow {
            columns: columns.clone(),
            values,
        });
    }
    Ok(out)
}

/// Binds by placeholder number, as sqlx does: `$3` takes the third value
/// wherever and however often it appears.
fn bind(stmt: &mut rusqlite::CachedStatement<'_>, args: &[Value]) -> Result<(), sqlx::Error> {
    for index in 1..=stmt.parameter_count() {
        let number = stmt
            .parameter_name(index)
            .and_then(|name| name.strip_prefix(['$', '?']))
            .and_then(|digits| digits.parse::<usize>().ok())
            .unwrap_or(index);
        let value = args.get(number.wrapping_sub(1)).ok_or_else(|| {
            sqlx::Error::Protocol(format!(
                "placeholder ${number} has no value ({} given)",
                args.len()
            ))
        })?;
        let bound = match value {
            Value::Int(v) => stmt.raw_bind_parameter(index, v),
            Value::Text(v) => stmt.raw_bind_parameter(index, v),
            Value::Bytes(v) => stmt.raw_bind_parameter(index, v.as_deref()),
            Value::SharedText(v) => stmt.raw_bind_parameter(index, v.as_str()),
        };
        bound.map_err(convert)?;
    }
    Ok(())
}

#[derive(Debug, Clone)]
enum Cell {
    Null,
    Int(i64),
    Real,
    Text(String),
    Bytes(Vec<u8>),
}

/// A row read on the writer connection.
#[derive(Debug, Clone)]
pub struct LiteRow {
    columns: std::sync::Arc<[String]>,
    values: Vec<Cell>,
}

impl LiteRow {
    fn cell(&self, col: &str) -> Result<&Cell, sqlx::Error> {
        self.columns
            .iter()
            .position(|c| c == col)
            .and_then(|i| self.values.get(i))
            .ok_or_else(|| sqlx::Error::ColumnNotFound(col.to_string()))
    }

    fn mismatch(col: &str, want: &str, got: &Cell) -> sqlx::Error {
        sqlx::Error::ColumnDecode {
            index: col.to_string(),
            source: format!("expected {want}, found {got:?}").into(),
        }
    }
}

impl RowExt for LiteRow {
    fn text(&self, col: &str) -> Result<String, sqlx::Error> {
        self.opt_text(col)?
            .ok_or_else(|| Self::mismatch(col, "text", &Cell::Null))
    }
    fn opt_text(&self, col: &str) -> Result<Option<String>, sqlx::Error> {
        match self.cell(col)? {
            Cell::Null => Ok(None),
            Cell::Text(t) => Ok(Some(t.clone())),
            other => Err(Self::mismatch(col, "text", other)),
        }
    }
    fn int(&self, col: &str) -> Result<i64, sqlx::Error> {
        self.opt_int(col)?
            .ok_or_else(|| Self::mismatch(col, "integer", &Cell::Null))
    }
    fn opt_int(&self, col: &str) -> Result<Option<i64>, sqlx::Error> {
        match self.cell(col)? {
            Cell::Null => Ok(None),
            Cell::Int(n) => Ok(Some(*n)),
            other => Err(Self::mismatch(col, "integer", other)),
        }
    }
    fn flag(&self, col: &str) -> Result<bool, sqlx::Error> {
        Ok(self.int(col)? != 0)
    }
    fn bytes(&self, col: &str) -> Result<Vec<u8>, sqlx::Error> {
        match self.cell(col)? {
            Cell::Null => Ok(Vec::new()),
            Cell::Bytes(b) => Ok(b.clone()),
            Cell::Text(t) => Ok(t.clone().into_bytes()),
            other => Err(Self::mismatch(col, "bytes", other)),
        }
    }
}

/// A SQLite error in sqlx's shape, so that callers (unique violations,
/// say) treat it like one from the pool.
#[derive(Debug)]
struct LiteError {
    message: String,
    code: Option<i32>,
}

impl std::fmt::Display for LiteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for LiteError {}

impl DatabaseError for LiteError {
    fn message(&self) -> &str {
        &self.message
    }
    fn code(&self) -> Option<Cow<'_, str>> {
        self.code.map(|c| Cow::Owned(c.to_string()))
    }
    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }
    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }
    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }
    fn kind(&self) -> ErrorKind {
        // SQLite's extended result codes for constraint failures.
        match self.code {
            Some(2067 | 1555) => ErrorKind::UniqueViolation,
            Some(787) => ErrorKind::ForeignKeyViolation,
            Some(1299) => ErrorKind::NotNullViolation,
            Some(275) => ErrorKind::CheckViolation,
            _ => ErrorKind::Other,
        }
    }
}

fn convert(e: rusqlite::Error) -> sqlx::Error {
    let (message, code) = match &e {
        rusqlite::Error::SqliteFailure(failure, message) => (
            message.clone().unwrap_or_else(|| failure.to_string()),
            Some(failure.extended_code),
        ),
        other => (other.to_string(), None),
    };
    sqlx::Error::Database(Box::new(LiteError { message, code }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql;

    fn memory() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        batch(
            &conn,
            "CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER, b BLOB, note TEXT)",
        )
        .unwrap();
        conn
    }

    #[test]
    fn placeholders_bind_by_number_wherever_they_appear() {
        let conn = memory();
        let changed = execute(
            &conn,
            &sql!(
                "INSERT INTO t (id, n, b, note) VALUES ($2, $1, $3, $2 || '!')",
                7i64,
                "a",
                vec![1u8, 2]
            ),
        )
        .unwrap();
        assert_eq!(changed, 1);
        let row = fetch_optional(
            &conn,
            &sql!("SELECT id, n, b, note FROM t WHERE id = $1", "a"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(row.text("id").unwrap(), "a");
        assert_eq!(row.int("n").unwrap(), 7);
        assert_eq!(row.bytes("b").unwrap(), vec![1, 2]);
        assert_eq!(row.text("note").unwrap(), "a!");
        assert!(row.opt_text("missing").is_err());
    }

    #[test]
    fn constraint_failures_read_as_sqlx_unique_violations() {
        let conn = memory();
        let insert = sql!("INSERT INTO t (id) VALUES ($1)", "x");
        execute(&conn, &insert).unwrap();
        let err = execute(&conn, &insert).unwrap_err();
        assert!(crate::store::is_unique_violation(&err), "{err}");
    }

    #[test]
    fn a_missing_value_is_an_error_not_a_null() {
        let conn = memory();
        let err = execute(&conn, &sql!("INSERT INTO t (id, n) VALUES ($1, $2)", "x")).unwrap_err();
        assert!(err.to_string().contains("$2"), "{err}");
    }

    /// `.cargo/config.toml` builds SQLite without a page cache shared by
    /// every connection behind one mutex and without memory statistics
    /// (another global mutex per allocation): a quarter of the send rate.
    #[test]
    fn sqlite_is_built_without_shared_cache_or_memory_statistics() {
        let conn = memory();
        let mut stmt = conn.prepare("PRAGMA compile_options").unwrap();
        let options: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "{options:?}"
        );
        assert!(
            !options.iter().any(|o| o == "ENABLE_MEMORY_MANAGEMENT"),
            "{options:?}"
        );
    }
}
