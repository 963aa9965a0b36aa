//! Database failures that are a condition of the service, not a bug: the
//! database is unreachable (PostgreSQL restarting, connections dropped, the
//! pool exhausted) or cannot write (disk full, read-only). Callers answer
//! these with "retry later" instead of an opaque internal error; the
//! transaction that met one rolled back, so nothing is half written.

use std::error::Error as StdError;
use std::io::ErrorKind;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFault {
    /// Unreachable or overloaded; usually gone within seconds.
    Unavailable,
    /// Out of space.
    Full,
    /// Mounted or opened read-only.
    ReadOnly,
}

/// The fault somewhere in `e`'s chain of causes, if it is one.
pub fn classify(e: &anyhow::Error) -> Option<StoreFault> {
    e.chain().find_map(classify_one)
}

fn classify_one(e: &(dyn StdError + 'static)) -> Option<StoreFault> {
    if let Some(e) = e.downcast_ref::<sqlx::Error>() {
        return match e {
            sqlx::Error::Io(io) => Some(io_fault(io.kind())),
            // A closed pool is this process shutting down, not an outage.
            sqlx::Error::PoolTimedOut
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_) => Some(StoreFault::Unavailable),
            sqlx::Error::Database(db) => db.code().and_then(|code| code_fault(&code)),
            _ => None,
        };
    }
    if let Some(e) = e.downcast_ref::<rusqlite::Error>() {
        return e.sqlite_error_code().and_then(|code| match code {
            rusqlite::ErrorCode::DiskFull => Some(StoreFault::Full),
            rusqlite::ErrorCode::ReadOnly => Some(StoreFault::ReadOnly),
            rusqlite::ErrorCode::SystemIoFailure
            | rusqlite::ErrorCode::CannotOpen
            | rusqlite::ErrorCode::DatabaseBusy
            | rusqlite::ErrorCode::DatabaseLocked => Some(StoreFault::Unavailable),
            _ => None,
        });
    }
    if let Some(io) = e.downcast_ref::<std::io::Error>() {
        return match io.kind() {
            ErrorKind::StorageFull | ErrorKind::ReadOnlyFilesystem => Some(io_fault(io.kind())),
            _ => None,
        };
    }
    None
}

fn io_fault(kind: ErrorKind) -> StoreFault {
    match kind {
        ErrorKind::StorageFull => StoreFault::Full,
        ErrorKind::ReadOnlyFilesystem => StoreFault::ReadOnly,
        _ => StoreFault::Unavailable,
    }
}

/// A PostgreSQL SQLSTATE (five characters, often all digits), or SQLite's
/// (extended) result code as text (at most four digits).
fn code_fault(code: &str) -> Option<StoreFault> {
    if code.len() < 5
        && let Ok(sqlite) = code.parse::<u32>()
    {
        // The primary result code is the low byte of the extended one.
        return match sqlite & 0xff {
            13 => Some(StoreFault::Full),                     // SQLITE_FULL
            8 => Some(StoreFault::ReadOnly),                  // SQLITE_READONLY
            5 | 6 | 10 | 14 => Some(StoreFault::Unavailable), // BUSY, LOCKED, IOERR, CANTOPEN
            _ => None,
        };
    }
    match code {
        // connection_exception, admin/crash shutdown, cannot_connect_now,
        // too_many_connections, insufficient_resources (not disk)
        c if c.starts_with("08") => Some(StoreFault::Unavailable),
        "57P01" | "57P02" | "57P03" | "53300" | "53000" | "53200" => Some(StoreFault::Unavailable),
        "53100" => Some(StoreFault::Full),     // disk_full
        "25006" => Some(StoreFault::ReadOnly), // read_only_sql_transaction
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_failures_and_full_disks_are_faults_other_errors_are_not() {
        let refused = anyhow::Error::new(sqlx::Error::Io(std::io::Error::from(
            ErrorKind::ConnectionRefused,
        )))
        .context("database");
        assert_eq!(classify(&refused), Some(StoreFault::Unavailable));
        let timed_out = anyhow::Error::new(sqlx::Error::PoolTimedOut);
        assert_eq!(classify(&timed_out), Some(StoreFault::Unavailable));
        assert_eq!(code_fault("08006"), Some(StoreFault::Unavailable));
        assert_eq!(code_fault("57P01"), Some(StoreFault::Unavailable));
        assert_eq!(code_fault("53100"), Some(StoreFault::Full));
        assert_eq!(code_fault("25006"), Some(StoreFault::ReadOnly));
        assert_eq!(
            code_fault("23505"),
            None,
            "a unique violation is a bug here"
        );
        assert_eq!(code_fault("13"), Some(StoreFault::Full));
        assert_eq!(code_fault("1032"), Some(StoreFault::ReadOnly)); // READONLY_DBMOVED
        assert_eq!(code_fault("2067"), None); // CONSTRAINT_UNIQUE
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(13),
            Some("database or disk is full".into()),
        );
        assert_eq!(
            classify(&anyhow::Error::new(full).context("group commit")),
            Some(StoreFault::Full)
        );
        assert_eq!(
            classify(&anyhow::Error::new(sqlx::Error::RowNotFound)),
            None
        );
        assert_eq!(classify(&anyhow::anyhow!("plain")), None);
    }
}
