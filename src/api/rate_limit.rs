//! Fixed one-minute windows per key. On PostgreSQL the window holds for the
//! key across every process (issue 15; see `core::rate_windows`); on SQLite,
//! or with `PIGEONHOLE_RATE_LIMIT_SCOPE=process`, it is held in this process
//! (spec §8's "per process").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::core::rate_windows;
use crate::store::Db;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    /// Unix seconds when the window ends.
    pub reset: u64,
}

#[derive(Default)]
pub struct RateLimiter {
    windows: Mutex<HashMap<String, (u64, u32)>>,
}

impl RateLimiter {
    /// Counts one call by `who` at `now_secs` against `limit` per minute.
    pub fn check(&self, who: &str, limit: u32, now_secs: u64) -> Decision {
        let window = now_secs / 60;
        let reset = (window + 1) * 60;
        let mut map = lock(&self.windows);
        if map.len() > 100_000 {
            // Forget finished windows so that many callers cannot grow the map.
            map.retain(|_, (w, _)| *w == window);
        }
        let entry = map.entry(who.to_string()).or_insert((window, 0));
        if entry.0 != window {
            *entry = (window, 0);
        }
        if entry.1 >= limit {
            return Decision {
                allowed: false,
                limit,
                remaining: 0,
                reset,
            };
        }
        entry.1 += 1;
        Decision {
            allowed: true,
            limit,
            remaining: limit - entry.1,
            reset,
        }
    }
}

/// Calls a process leases at a time: 1 % of the limit (at least one), so
/// the processes together leave at most about 1 % each unspent.
fn lease_size(limit: u32) -> u32 {
    (limit / 100).max(1)
}

/// A window's calls leased by this process and not spent yet.
#[derive(Clone, Copy)]
struct Slot {
    window: u64,
    unspent: u32,
    /// Calls leased by every process as of this process's last lease.
    leased: u32,
    /// The database had none left.
    spent: bool,
}

impl Slot {
    fn new(window: u64) -> Slot {
        Slot {
            window,
            unspent: 0,
            leased: 0,
            spent: false,
        }
    }
}

/// The per-key limit for the whole deployment; calls without a key (limited
/// per client address, against key guessing) stay counted per process.
pub struct SharedRateLimiter {
    db: Db,
    slots: Mutex<HashMap<String, Slot>>,
    /// One lease at a time per key: the calls that find a key's block spent
    /// wait for one lease instead of each taking a block, which would leave
    /// up to a block per waiting call unspent here and lost to the others.
    leasing: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// How long a call waits for its turn to lease: past it, it is counted
    /// in this process, so that a slow or absent database (every lease
    /// waiting for a connection) is not waited for once per queued call.
    turn_wait: std::time::Duration,
    /// Used when the database cannot be asked: the request then fails on
    /// its own, or is served under the per-process count.
    local: RateLimiter,
}

impl SharedRateLimiter {
    pub fn new(db: Db) -> SharedRateLimiter {
        SharedRateLimiter {
            db,
            slots: Mutex::new(HashMap::new()),
            leasing: Mutex::new(HashMap::new()),
            turn_wait: std::time::Duration::from_secs(1),
            local: RateLimiter::default(),
        }
    }

    /// Counts one call by `who` at `now_secs` against `limit` per minute.
    pub async fn check(&self, who: &str, limit: u32, now_secs: u64) -> Decision {
        let window = now_secs / 60;
        let reset = (window + 1) * 60;
        if let Some(d) = self.spend(who, limit, window, reset) {
            return d;
        }
        let turn = {
            let mut leasing = lock(&self.leasing);
            if leasing.len() > 100_000 {
                // Only locks no call holds or waits for.
                leasing.retain(|_, l| Arc::strong_count(l) > 1);
            }
            leasing.entry(who.to_string()).or_default().clone()
        };
        let Ok(_turn) = tokio::time::timeout(self.turn_wait, turn.lock()).await else {
            return self.local.check(who, limit, now_secs);
        };
        // The lease just before this call's turn may have left calls to spend.
        if let Some(d) = self.spend(who, limit, window, reset) {
            return d;
        }
        let want = lease_size(limit);
        let lease =
            match rate_windows::lease(&self.db, who, (window * 60) as i64, want, limit).await {
                Ok(lease) => lease,
                Err(e) => {
                    tracing::warn!(error = %e, "rate-limit lease failed; counting in this process");
                    return self.local.check(who, limit, now_secs);
                }
            };
        self.settle(who, limit, window, reset, lease)
    }

    /// Keeps what a lease for `window` gave and spends this call's part of
    /// it. If the key's calls have moved on to a later window meanwhile
    /// (the minute turned while this call waited), the lease is its own
    /// window's: the call is decided by it, and the later window's block
    /// is left alone.
    fn settle(
        &self,
        who: &str,
        limit: u32,
        window: u64,
        reset: u64,
        lease: rate_windows::Lease,
    ) -> Decision {
        {
            let mut slots = lock(&self.slots);
            let slot = slots
                .entry(who.to_string())
                .or_insert_with(|| Slot::new(window));
            if slot.window != window {
                return Decision {
                    allowed: lease.granted > 0,
                    limit,
                    remaining: limit.saturating_sub(lease.leased),
                    reset,
                };
            }
            slot.unspent += lease.granted;
            slot.leased = slot.leased.max(lease.leased);
            slot.spent |= lease.granted == 0;
        }
        self.spend(who, limit, window, reset).unwrap_or(Decision {
            allowed: false,
            limit,
            remaining: 0,
            reset,
        })
    }

    /// The decision from this process's lease, if it can make one.
    fn spend(&self, who: &str, limit: u32, window: u64, reset: u64) -> Option<Decision> {
        let mut slots = lock(&self.slots);
        if slots.len() > 100_000 {
            slots.retain(|_, s| s.window == window);
        }
        let slot = slots.get_mut(who)?;
        if slot.window > window {
            // A call of a window already over (it waited across the
            // minute): the later window's block is not its to spend or
            // reset; it leases in its own.
            return None;
        }
        if slot.window < window {
            *slot = Slot::new(window);
        }
        if slot.unspent > 0 {
            slot.unspent -= 1;
            return Some(Decision {
                allowed: true,
                limit,
                remaining: limit.saturating_sub(slot.leased) + slot.unspent,
                reset,
            });
        }
        slot.spent.then_some(Decision {
            allowed: false,
            limit,
            remaining: 0,
            reset,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// The key limiter this deployment uses.
pub enum KeyRateLimiter {
    Process(RateLimiter),
    Shared(SharedRateLimiter),
}

impl KeyRateLimiter {
    pub async fn check(&self, who: &str, limit: u32, now_secs: u64) -> Decision {
        match self {
            KeyRateLimiter::Process(l) => l.check(who, limit, now_secs),
            KeyRateLimiter::Shared(l) => l.check(who, limit, now_secs).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_window_counts_and_resets() {
        let r = RateLimiter::default();
        let a = r.check("k", 2, 120);
        assert!(a.allowed && a.remaining == 1 && a.reset == 180);
        assert!(r.check("k", 2, 150).allowed);
        let c = r.check("k", 2, 179);
        assert!(!c.allowed && c.remaining == 0);
        assert!(r.check("other", 2, 179).allowed);
        assert!(r.check("k", 2, 180).allowed);
    }

    /// Calls that find the block spent at the same moment share one lease:
    /// each taking its own would hold many blocks here, lost to the other
    /// processes.
    #[tokio::test]
    async fn concurrent_calls_share_one_lease() {
        let temp = crate::store::tests::TempSqlite::new("rate-lease").await;
        let limiter = Arc::new(SharedRateLimiter::new(temp.db.clone()));
        let now = 6_000;
        let calls: Vec<_> = (0..64)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move { limiter.check("key", 10_000, now).await })
            })
            .collect();
        for call in calls {
            assert!(call.await.unwrap().allowed);
        }
        let leased = crate::sql!("SELECT leased FROM rate_windows WHERE who = 'key'")
            .fetch_one(temp.db.reader())
            .await
            .unwrap();
        use crate::store::RowExt;
        assert_eq!(leased.int("leased").unwrap(), 100, "one block of 1 %");
        let last = limiter.check("key", 10_000, now).await;
        assert_eq!(last.remaining, 10_000 - 65);
        temp.remove().await;
    }

    /// A call that waited across the minute is decided by its own window's
    /// lease: the later window its key's calls have moved on to keeps its
    /// block (before, the late call reset it to its own window, found
    /// nothing there and was refused with 429 though its lease granted it:
    /// 1 to 4 sends of 20,000 under load).
    #[tokio::test]
    async fn a_call_across_the_minute_keeps_its_lease() {
        let temp = crate::store::tests::TempSqlite::new("rate-minute").await;
        let limiter = SharedRateLimiter::new(temp.db.clone());
        // The key's calls are in the window of minute 101 already.
        assert!(limiter.check("key", 10_000, 6_060).await.allowed);
        let unspent =
            |l: &SharedRateLimiter| lock(&l.slots).get("key").map(|s| (s.window, s.unspent));
        assert_eq!(unspent(&limiter), Some((101, 99)));
        // A call of minute 100 whose lease comes back now.
        let late = rate_windows::Lease {
            granted: 100,
            leased: 100,
        };
        let d = limiter.settle("key", 10_000, 100, 6_060, late);
        assert!(d.allowed);
        assert_eq!(d.remaining, 10_000 - 100);
        assert_eq!(unspent(&limiter), Some((101, 99)));
        // A late call spends nothing of the later window's block either.
        assert_eq!(limiter.spend("key", 10_000, 100, 6_060), None);
        assert_eq!(unspent(&limiter), Some((101, 99)));
        // One refused by its own window is refused.
        let spent = rate_windows::Lease {
            granted: 0,
            leased: 10_000,
        };
        assert!(!limiter.settle("key", 10_000, 100, 6_060, spent).allowed);
        temp.remove().await;
    }

    /// A call waits for its turn to lease a bounded time, then is counted
    /// in the process: a lease stuck on the database holds up no queue.
    #[tokio::test]
    async fn a_call_waits_for_a_stuck_lease_a_bounded_time() {
        let temp = crate::store::tests::TempSqlite::new("rate-turn").await;
        let mut limiter = SharedRateLimiter::new(temp.db.clone());
        limiter.turn_wait = std::time::Duration::from_millis(50);
        let stuck = lock(&limiter.leasing)
            .entry("key".into())
            .or_default()
            .clone();
        let _held = stuck.lock().await;
        let waited = std::time::Instant::now();
        let decision = limiter.check("key", 10_000, 6_000).await;
        assert!(decision.allowed);
        assert!(waited.elapsed() < std::time::Duration::from_secs(5));
        // Counted in the process: nothing was leased.
        let leased = crate::sql!("SELECT COUNT(*) AS n FROM rate_windows")
            .fetch_one(temp.db.reader())
            .await
            .unwrap();
        use crate::store::RowExt;
        assert_eq!(leased.int("n").unwrap(), 0);
        temp.remove().await;
    }
}
