//! A key's calls in one fixed window, counted for the whole deployment: each
//! process leases blocks of calls from the database (`rate_windows`) and
//! spends them locally, so the database sees one statement per block, not
//! one per call. The leases of a window never add up to more than the limit;
//! what a process leased and did not spend is lost to the others (the
//! tolerance: at most one block per process under the limit).

use crate::core::error::CoreResult;
use crate::sql;
use crate::store::{Db, RowExt};

/// What a lease gave: `granted` calls (0: the window is spent) and the
/// calls leased by every process in the window so far, this one included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub granted: u32,
    pub leased: u32,
}

/// Leases up to `want` calls of `who`'s window starting at `window_start`
/// (Unix seconds) under `limit`. One statement: the row's lock makes
/// concurrent leases from several processes add up, never past the limit.
pub async fn lease(
    db: &Db,
    who: &str,
    window_start: i64,
    want: u32,
    limit: u32,
) -> CoreResult<Lease> {
    let want = i64::from(want.min(limit));
    let limit = i64::from(limit);
    // SET expressions all read the row as it was, so `granted` is computed
    // from the old `leased`.
    let row = sql!(
        "INSERT INTO rate_windows AS w (who, window_start, leased, granted) VALUES ($1, $2, $3, $3) \
         ON CONFLICT (who, window_start) DO UPDATE SET \
         granted = CASE WHEN w.leased >= $4 THEN 0 WHEN w.leased + $3 <= $4 THEN $3 ELSE $4 - w.leased END, \
         leased = CASE WHEN w.leased >= $4 THEN w.leased WHEN w.leased + $3 <= $4 THEN w.leased + $3 ELSE $4 END \
         RETURNING granted, leased",
        who,
        window_start,
        want,
        limit
    )
    .fetch_one(db.writer())
    .await?;
    let count =
        |col| -> CoreResult<u32> { Ok(u32::try_from(row.int(col)?.max(0)).unwrap_or(u32::MAX)) };
    Ok(Lease {
        granted: count("granted")?,
        leased: count("leased")?,
    })
}

/// Forgets windows that ended before `before` (Unix seconds).
pub async fn purge(db: &Db, before: i64) -> CoreResult<()> {
    sql!("DELETE FROM rate_windows WHERE window_start < $1", before)
        .execute(db.writer())
        .await?;
    Ok(())
}
