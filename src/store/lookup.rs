//! Point reads on SQLite, run in place on the calling thread.
//!
//! sqlx runs each SQLite connection on a thread of its own: reading one row
//! by its index costs hand-offs to that thread and back and, when the
//! connection goes back to its pool, a ping (another round trip). That was
//! several times SQLite's own work for the reads every send makes before it
//! calls the provider (its key, domain, mailbox and suppressions), and a
//! quarter of the send path's CPU. Those reads come here instead: a plain
//! connection taken from a small stack, used on the caller's thread and put
//! back. Only for reads that take microseconds: a long one here would hold
//! up the runtime thread it runs on (searches and lists go through sqlx).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::Connection;

use super::Sql;
use super::lite::{self, LiteRow};

/// Connections kept between reads; more are opened while the runtime's
/// threads read at once, and closed when this many are already idle.
const MAX_IDLE: usize = 8;

pub struct LookupPool {
    file: PathBuf,
    idle: Mutex<Vec<Connection>>,
    closed: AtomicBool,
}

impl LookupPool {
    pub fn new(file: &Path) -> LookupPool {
        LookupPool {
            file: file.to_path_buf(),
            idle: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// Closes the idle connections; later reads fail as on a closed pool.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.idle().clear();
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        // A panic while the stack was locked leaves it whole: use it.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// At most `limit` rows of `sql`, read in place.
    pub fn fetch(&self, sql: &Sql, limit: usize) -> Result<Vec<LiteRow>, sqlx::Error> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(sqlx::Error::PoolClosed);
        }
        let taken = self.idle().pop();
        let conn = match taken {
            Some(conn) => conn,
            None => lite::open_read_only(&self.file)?,
        };
        let rows = lite::fetch_limited(&conn, sql, limit);
        let mut idle = self.idle();
        if idle.len() < MAX_IDLE && !self.closed.load(Ordering::SeqCst) {
            idle.push(conn);
        }
        rows
    }
}
