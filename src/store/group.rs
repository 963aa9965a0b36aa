//! Group commit for SQLite's single writer connection.
//!
//! SQLite allows one writer; giving every request its own transaction makes
//! each one pay a BEGIN, a COMMIT, a WAL write of every page it touched and a
//! new full-text segment, one after another. Instead, requests hand their
//! write to one task that runs whatever is queued inside a single
//! transaction, each job under its own savepoint so that a job that fails
//! leaves no trace and does not disturb the others. A job's caller hears of
//! success only after the shared COMMIT.
//!
//! A job keeps running when its caller goes away (say, an HTTP client that
//! disconnects): a send the provider accepted is still recorded.
//!
//! The thread owns its connection and runs statements in place (see
//! `lite`): no hand-off to another thread per statement.
//!
//! A large write (a received message of megabytes, a send with large
//! attachments) takes the writer a good part of a second. So that a small
//! write never waits behind several, large writes enter the queue one at a
//! time (the next once the previous one has committed), and each commits in
//! a batch of its own: a small write waits for one large write at most.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::path::Path;

use rusqlite::Connection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use super::{Sql, Tx, TxInner, index_writes, lite};
use crate::telemetry::context::Carried;

/// At most this many jobs share one transaction, so that one commit never
/// waits on an unbounded amount of work.
const MAX_BATCH: usize = 128;

pub type JobFuture<'t, T> = Pin<Box<dyn Future<Output = T> + Send + 't>>;

/// Delivers a job's result once the batch's fate is known: `None` when the
/// commit succeeded, or the reason it did not.
type Deliver = Box<dyn FnOnce(Option<String>) + Send>;

/// A queued job: runs against the batch's transaction and tells whether it
/// succeeded (its savepoint is kept) or failed (rolled back).
type Run = Box<dyn for<'t> FnOnce(&'t mut Tx) -> JobFuture<'t, (bool, Deliver)> + Send>;

struct Job {
    run: Run,
    /// A large write: alone in its batch (see the module's notes).
    large: bool,
}

/// Bytes a write binds from which it counts as large.
pub const LARGE_WRITE: usize = 1024 * 1024;

#[derive(Clone)]
pub struct GroupWriter {
    jobs: mpsc::UnboundedSender<Job>,
    /// One permit: the large write queued or running, until it commits.
    large_writes: std::sync::Arc<Semaphore>,
    /// The checkpointer runs while any handle holds this.
    _alive: std::sync::Arc<()>,
}

/// How often the checkpointer copies committed pages from the WAL into the
/// database file.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl GroupWriter {
    /// Starts the thread that owns the writer side, and the checkpointer's
    /// beside it. Both end when every handle is dropped.
    ///
    /// The writer runs on its own thread and runtime: every trip to the
    /// connection wakes it, and on the shared runtime each wake-up would
    /// wait behind every request being served.
    pub fn start(file: &Path) -> anyhow::Result<GroupWriter> {
        let conn = lite::open(file)?;
        let (jobs, rx) = mpsc::unbounded_channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        std::thread::Builder::new()
            .name("group-commit".into())
            .spawn(move || runtime.block_on(run(conn, rx)))?;
        let alive = std::sync::Arc::new(());
        let checkpointer = lite::open(file)?;
        let watch = std::sync::Arc::downgrade(&alive);
        std::thread::Builder::new()
            .name("checkpoint".into())
            .spawn(move || checkpoint_while(checkpointer, watch))?;
        Ok(GroupWriter {
            jobs,
            large_writes: std::sync::Arc::new(Semaphore::new(1)),
            _alive: alive,
        })
    }

    /// Waits until a write binding `bytes` may be queued: at once for a
    /// small one; for a large one, once no other large write is queued or
    /// uncommitted. The permit goes with [`GroupWriter::enqueue`].
    pub async fn admit(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        if bytes < LARGE_WRITE {
            return None;
        }
        // Never closed; should it be, the write goes without the permit.
        self.large_writes.clone().acquire_owned().await.ok()
    }

    /// Queues `work` at once, in order with earlier calls, to run in a
    /// transaction shared with other queued writes; returns the wait for its
    /// result, which comes once that transaction has committed. An `Err`
    /// from `work` rolls back exactly what `work` wrote. With the permit of
    /// a large write (see [`GroupWriter::admit`]) it runs in a batch of its
    /// own and frees the permit once committed.
    pub fn enqueue<T, E, F>(
        &self,
        large: Option<OwnedSemaphorePermit>,
        work: F,
    ) -> JobFuture<'static, Result<T, E>>
    where
        T: Send + 'static,
        E: From<sqlx::Error> + Send + 'static,
        F: for<'t> FnOnce(&'t mut Tx) -> JobFuture<'t, Result<T, E>> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel::<Result<T, E>>();
        let is_large = large.is_some();
        // The job runs on the writer's thread in the span, and with the
        // request id, of the code that queued it (see `telemetry::context`).
        let carried = Carried::here();
        let run: Run = Box::new(move |tx: &mut Tx| {
            Box::pin(carried.run(async move {
                let result = work(tx).await;
                let ok = result.is_ok();
                tracing::debug!(ok, "group commit: job ran");
                let deliver: Deliver = Box::new(move |commit_error: Option<String>| {
                    // Committed (or failed): the next large write may queue.
                    drop(large);
                    let outcome = match (result, commit_error) {
                        (Ok(value), None) => Ok(value),
                        (Ok(_), Some(why)) => Err(E::from(batch_error(why))),
                        (Err(e), _) => Err(e),
                    };
                    // The caller may have gone; the write stands regardless.
                    let _ = reply.send(outcome);
                });
                (ok, deliver)
            }))
        });
        let queued = self
            .jobs
            .send(Job {
                run,
                large: is_large,
            })
            .is_ok();
        Box::pin(async move {
            if !queued {
                return Err(E::from(batch_error(
                    "the database writer has stopped".into(),
                )));
            }
            match answer.await {
                Ok(outcome) => outcome,
                Err(_) => Err(E::from(batch_error(
                    "the write could not be run (see the log)".into(),
                ))),
            }
        })
    }
}

fn batch_error(why: String) -> sqlx::Error {
    sqlx::Error::Protocol(format!("group commit failed: {why}"))
}

async fn run(conn: Connection, mut rx: mpsc::UnboundedReceiver<Job>) {
    // Jobs borrow the connection as a `Tx`; the transactions around them
    // are this loop's.
    let mut tx = Tx::lite(conn);
    // A large job met while filling a batch: it starts the next one.
    let mut held: Option<Job> = None;
    loop {
        let first = match held.take() {
            Some(job) => job,
            None => match rx.recv().await {
                Some(job) => job,
                None => break,
            },
        };
        let mut batch = vec![first.run];
        // A large job commits alone; small ones are joined until a large one.
        while !first.large && batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) if job.large => {
                    held = Some(job);
                    break;
                }
                Ok(job) => batch.push(job.run),
                Err(_) => break,
            }
        }
        run_batch(&mut tx, batch).await;
    }
}

/// Copies committed pages into the database file from a connection of its
/// own, so that the writer's own checkpoints (every 1,000 pages, at a
/// commit) find little left to copy: while the writer copies, every write
/// waits, and those pauses were the slowest sends.
fn checkpoint_while(conn: Connection, alive: std::sync::Weak<()>) {
    while alive.strong_count() > 0 {
        std::thread::sleep(CHECKPOINT_EVERY);
        if let Err(e) = lite::batch(&conn, "PRAGMA wal_checkpoint(PASSIVE)") {
            tracing::warn!(error = %e, "background checkpoint failed");
        }
    }
}

/// Runs a batch in one transaction, leaving none open whatever happened.
async fn run_batch(tx: &mut Tx, batch: Vec<Run>) {
    // IMMEDIATE: take the write lock now, waiting (busy timeout) for a
    // writer on another connection, rather than fail on the first write.
    if let Err(e) = control(tx, "BEGIN IMMEDIATE").await {
        tracing::error!(error = %e, "group commit: could not begin a transaction");
        // Jobs that never ran are dropped; their callers hear of it.
        return;
    }
    let mut delivers = Vec::with_capacity(batch.len());
    let mut failure = None;
    for job in batch {
        if let Err(e) = control(tx, "SAVEPOINT job").await {
            failure = Some(e);
            break;
        }
        let index_writes_before = tx.index_writes.len();
        // A job that panics is rolled back like one that failed; its caller
        // hears of it when its reply channel drops. (Spawning a task per
        // batch would isolate panics too, but costs a fifth of the send
        // rate in extra wake-ups.)
        let (ok, deliver) = match CatchPanic(job(tx)).await {
            Some((ok, deliver)) => (ok, Some(deliver)),
            None => {
                tracing::error!("group commit: a job panicked; its writes are rolled back");
                (false, None)
            }
        };
        delivers.extend(deliver);
        let mut closed = Ok(());
        if !ok {
            tx.index_writes.truncate(index_writes_before);
            closed = control(tx, "ROLLBACK TO job").await;
        }
        if closed.is_ok() {
            closed = control(tx, "RELEASE job").await;
        }
        if let Err(e) = closed {
            failure = Some(e);
            break;
        }
    }
    let failure = match failure {
        Some(e) => Some(e),
        None => match apply_index_writes(tx).await {
            Ok(()) => control(tx, "COMMIT").await.err(),
            Err(e) => Some(e),
        },
    };
    tx.index_writes.clear();
    match failure {
        None => delivers.into_iter().for_each(|d| d(None)),
        Some(e) => {
            tracing::error!(error = %e, "group commit: the batch failed and is rolled back");
            if let TxInner::Lite(conn) = &tx.inner
                && !conn.is_autocommit()
                && let Err(e) = control(tx, "ROLLBACK").await
            {
                tracing::error!(error = %e, "group commit: rollback failed");
            }
            fail_all(delivers, e.to_string());
        }
    }
}

/// The index writes of the batch's jobs (see [`Tx::write_index`]).
async fn apply_index_writes(tx: &mut Tx) -> Result<(), sqlx::Error> {
    let writes = std::mem::take(&mut tx.index_writes);
    index_writes::apply(tx, &writes).await
}

async fn control(tx: &mut Tx, statement: &'static str) -> Result<(), sqlx::Error> {
    Sql::new(statement).execute_tx(tx).await.map(|_| ())
}

/// Polls a future, turning a panic inside it into `None`.
struct CatchPanic<F>(F);

impl<F: Future + Unpin> Future for CatchPanic<F> {
    type Output = Option<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(inner).poll(cx))) {
            Ok(Poll::Ready(value)) => Poll::Ready(Some(value)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(None),
        }
    }
}

fn fail_all(delivers: Vec<Deliver>, why: String) {
    for d in delivers {
        d(Some(why.clone()));
    }
}

#[cfg(test)]
mod tests {
    use super::LARGE_WRITE;
    use crate::sql;
    use crate::store::tests::TempSqlite;
    use crate::store::{FtsIndex, IndexWrite, RowExt};

    #[tokio::test]
    async fn a_failed_job_leaves_no_trace_and_spares_its_batch() {
        let temp = TempSqlite::new("group").await;
        let db = temp.db.clone();
        let mut waits = Vec::new();
        for i in 0..50i64 {
            let db = db.clone();
            waits.push(tokio::spawn(async move {
                db.write(move |tx| {
                    Box::pin(async move {
                        sql!(
                            "INSERT INTO settings (key, value) VALUES ($1, 'x')",
                            format!("k{i}")
                        )
                        .execute_tx(tx)
                        .await?;
                        if i % 7 == 3 {
                            return Err(sqlx::Error::Protocol("refused".into()));
                        }
                        Ok(i)
                    })
                })
                .await
            }));
        }
        for (i, w) in waits.into_iter().enumerate() {
            let result = w.await.unwrap();
            assert_eq!(result.is_ok(), i % 7 != 3, "job {i}");
        }
        let rows = sql!("SELECT key FROM settings WHERE key LIKE 'k%'")
            .fetch_all(db.reader())
            .await
            .unwrap();
        let mut keys: Vec<String> = rows.iter().map(|r| r.text("key").unwrap()).collect();
        keys.sort();
        let mut expected: Vec<String> = (0..50)
            .filter(|i| i % 7 != 3)
            .map(|i| format!("k{i}"))
            .collect();
        expected.sort();
        assert_eq!(keys, expected);
        temp.remove().await;
    }

    /// Index writes wait for the end of the batch; a job that fails takes
    /// its own with it and no one else's.
    #[tokio::test]
    async fn index_writes_of_a_failed_job_are_dropped_with_it() {
        let temp = TempSqlite::new("group-index").await;
        let db = temp.db.clone();
        let mut waits = Vec::new();
        for i in 1..=40i64 {
            let db = db.clone();
            waits.push(tokio::spawn(async move {
                db.write(move |tx| {
                    Box::pin(async move {
                        tx.write_index([IndexWrite::Add {
                            index: FtsIndex::Threads,
                            rowid: i,
                            values: vec![format!("common w{i}")],
                        }])
                        .await?;
                        if i % 5 == 0 {
                            return Err(sqlx::Error::Protocol("refused".into()));
                        }
                        Ok(())
                    })
                })
                .await
            }));
        }
        for w in waits {
            let _ = w.await.unwrap();
        }
        let rows = sql!(
            "SELECT rowid AS n FROM threads_fts WHERE threads_fts MATCH 'common' ORDER BY rowid"
        )
        .fetch_all(db.reader())
        .await
        .unwrap();
        let found: Vec<i64> = rows.iter().map(|r| r.int("n").unwrap()).collect();
        let expected: Vec<i64> = (1..=40).filter(|i| i % 5 != 0).collect();
        assert_eq!(found, expected);
        temp.remove().await;
    }

    /// A lookup reads in place on its own connection: it sees what the group
    /// writer committed at once, and cannot write.
    #[tokio::test]
    async fn lookups_see_group_commits_and_cannot_write() {
        let temp = TempSqlite::new("group-lookup").await;
        let db = temp.db.clone();
        db.write_statement(sql!(
            "INSERT INTO settings (key, value) VALUES ('seen', 'x')"
        ))
        .await
        .unwrap();
        let row = db
            .lookup_optional(&sql!("SELECT value FROM settings WHERE key = 'seen'"))
            .await
            .unwrap()
            .expect("the committed row");
        assert_eq!(row.text("value").unwrap(), "x");
        let refused = db
            .lookup_optional(&sql!(
                "DELETE FROM settings WHERE key = 'seen' RETURNING key"
            ))
            .await;
        assert!(refused.is_err(), "a lookup wrote");
        temp.remove().await;
    }

    /// A write that takes `ms` in the writer; when it finished, from `start`.
    fn slow_write(
        db: &crate::store::Db,
        bytes: usize,
        ms: u64,
        start: std::time::Instant,
    ) -> tokio::task::JoinHandle<std::time::Duration> {
        let db = db.clone();
        tokio::spawn(async move {
            db.write_sized(bytes, move |_tx| {
                Box::pin(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    Ok::<(), sqlx::Error>(())
                })
            })
            .await
            .unwrap();
            start.elapsed()
        })
    }

    /// Large writes enter the queue one at a time: a small write queued while
    /// one runs is not kept waiting by the next.
    #[tokio::test]
    async fn a_small_write_waits_for_one_large_write_at_most() {
        let temp = TempSqlite::new("group-large").await;
        let db = temp.db.clone();
        let start = std::time::Instant::now();
        let pause = || tokio::time::sleep(std::time::Duration::from_millis(30));
        let first = slow_write(&db, LARGE_WRITE, 300, start);
        pause().await;
        let second = slow_write(&db, LARGE_WRITE, 300, start);
        pause().await;
        let small = slow_write(&db, 10, 0, start);
        let (first, second, small) = (
            first.await.unwrap(),
            second.await.unwrap(),
            small.await.unwrap(),
        );
        assert!(
            first < small && small < second,
            "{first:?} {small:?} {second:?}"
        );
        temp.remove().await;
    }

    /// A large write commits alone: a small write queued before it, in the
    /// same batch, does not wait for it.
    #[tokio::test]
    async fn a_large_write_is_a_batch_of_its_own() {
        let temp = TempSqlite::new("group-alone").await;
        let db = temp.db.clone();
        let start = std::time::Instant::now();
        let pause = || tokio::time::sleep(std::time::Duration::from_millis(30));
        // Keeps the writer busy while the next two queue up together.
        let busy = slow_write(&db, 10, 200, start);
        pause().await;
        let small = slow_write(&db, 10, 0, start);
        pause().await;
        let large = slow_write(&db, LARGE_WRITE, 300, start);
        let (busy, small, large) = (
            busy.await.unwrap(),
            small.await.unwrap(),
            large.await.unwrap(),
        );
        assert!(
            small < busy + std::time::Duration::from_millis(150),
            "{busy:?} {small:?}"
        );
        assert!(
            large > small + std::time::Duration::from_millis(250),
            "{small:?} {large:?}"
        );
        temp.remove().await;
    }

    #[tokio::test]
    async fn a_job_that_panics_fails_its_caller_and_later_writes_still_run() {
        let temp = TempSqlite::new("group-panic").await;
        let db = temp.db.clone();
        let panicked: Result<(), sqlx::Error> = db
            .write(|_tx| Box::pin(async { panic!("a bug in a job") }))
            .await;
        assert!(panicked.is_err());
        let later: Result<i64, sqlx::Error> = db
            .write(|tx| {
                Box::pin(async move {
                    sql!("INSERT INTO settings (key, value) VALUES ('after', 'x')")
                        .execute_tx(tx)
                        .await?;
                    Ok(1)
                })
            })
            .await;
        assert_eq!(later.unwrap(), 1);
        temp.remove().await;
    }

    /// The group writer and `Db::begin` write from two connections: a
    /// transaction from `Db::begin` must hold the write lock from its start
    /// (else a read then a write in it fails when a group commit lands in
    /// between), and a group write queued meanwhile waits for it.
    #[tokio::test]
    async fn a_pool_transaction_locks_at_once_and_the_group_writer_waits_for_it() {
        let temp = TempSqlite::new("group-lock").await;
        let db = temp.db.clone();
        let mut tx = db.begin().await.unwrap();
        let file = sql!("SELECT file FROM pragma_database_list WHERE name = 'main'")
            .fetch_one_tx(&mut tx)
            .await
            .unwrap()
            .text("file")
            .unwrap();
        let probe = rusqlite::Connection::open(&file).unwrap();
        probe.busy_timeout(std::time::Duration::ZERO).unwrap();
        let locked = probe.execute_batch("BEGIN IMMEDIATE").unwrap_err();
        assert!(locked.to_string().contains("locked"), "{locked}");

        let writer = db.clone();
        let queued = tokio::spawn(async move {
            writer
                .write_statement(sql!(
                    "INSERT INTO settings (key, value) VALUES ('group', 'x')"
                ))
                .await
        });
        sql!("INSERT INTO settings (key, value) VALUES ('pool', 'x')")
            .execute_tx(&mut tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(queued.await.unwrap().unwrap(), 1);
        let keys = sql!("SELECT key FROM settings WHERE value = 'x' ORDER BY key")
            .fetch_all(db.reader())
            .await
            .unwrap();
        let keys: Vec<String> = keys.iter().map(|r| r.text("key").unwrap()).collect();
        assert_eq!(keys, ["group", "pool"]);
        temp.remove().await;
    }

    /// The writer checkpoints by itself only every 1,000 pages; a write far
    /// smaller than that reaches the database file through the
    /// checkpointer.
    #[tokio::test]
    async fn the_checkpointer_copies_commits_into_the_database_file() {
        let temp = TempSqlite::new("group-checkpoint").await;
        let db = temp.db.clone();
        let file = temp.path.clone();
        let before = std::fs::metadata(&file).unwrap().len();
        db.write_statement(sql!(
            "INSERT INTO settings (key, value) VALUES ('big', $1)",
            "x".repeat(400_000)
        ))
        .await
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::metadata(&file).unwrap().len() < before + 400_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "the write never reached the database file"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        temp.remove().await;
    }
}
