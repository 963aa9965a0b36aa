//! The memory budget of large messages: what messages being received over
//! SMTP and large HTTP requests (sends with attachments) may take together
//! while they are read, parsed, composed and stored.
//!
//! A message is admitted by what processing it costs at its peak, not by its
//! size: the raw bytes, the decoded attachments and bodies that share or copy
//! them, and the copy a database driver makes to send them. [`cost`] is that
//! estimate; a message that cannot reserve it now is told to try later (SMTP
//! `452 4.3.1`, HTTP `503`). Small messages ([`FREE_BYTES`] and under) never
//! wait: their number is bounded by the connection limits, and a storm of
//! large messages must not turn away a normal one.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::store::Backend;

/// Peak memory of processing a message, per byte of it, on `backend`.
/// Measured with `examples/bench_memory.rs` (25 MiB messages with an
/// attachment, six at once): an inbound message holds its raw bytes and its
/// decoded parts (three quarters of the raw size for base64), and the
/// driver copies what a statement binds: SQLite's single writer one row at
/// a time (about 2.3 in all), PostgreSQL's connections side by side, each
/// statement's values into its arguments and again into its write buffer,
/// both grown by doubling (about 4.3). An HTTP send holds its body while it
/// is parsed, then the decoded attachments and the composed MIME (about 2).
pub fn cost_factor(backend: Backend) -> usize {
    match backend {
        Backend::Sqlite => 3,
        Backend::Postgres => 5,
    }
}

/// The first bytes of every message cost nothing from the budget.
pub const FREE_BYTES: usize = 64 * 1024;

/// Budget unit: reservations are rounded up to it.
const UNIT: usize = 64 * 1024;

/// What processing a message (or request body) of `size` bytes may take
/// beyond the free allowance, stored on `backend`.
pub fn cost(size: usize, backend: Backend) -> usize {
    size.saturating_sub(FREE_BYTES)
        .saturating_mul(cost_factor(backend))
}

/// Messages from this size are parsed, decoded and encoded on a blocking
/// thread (see [`aside`]).
pub const ASIDE_FROM: usize = 256 * 1024;

/// Runs `work` on a message of `size` bytes: at once for a small one, on a
/// blocking thread for a large one, whose megabytes of base64 would keep a
/// worker of the runtime from every other session and request for tens of
/// milliseconds. None if that thread could not finish it (`work` panicked,
/// or the runtime is shutting down).
pub async fn aside<T: Send + 'static>(
    size: usize,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    if size < ASIDE_FROM {
        return Some(work());
    }
    tokio::task::spawn_blocking(work).await.ok()
}

fn units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT)
}

/// The shared budget; clones share it.
#[derive(Clone)]
pub struct MemoryBudget {
    units: Arc<Semaphore>,
    total_units: usize,
}

impl std::fmt::Debug for MemoryBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBudget")
            .field("bytes", &self.total_bytes())
            .field("available", &self.available_bytes())
            .finish()
    }
}

impl MemoryBudget {
    pub fn new(bytes: usize) -> MemoryBudget {
        let total_units = units(bytes).clamp(1, u32::MAX as usize);
        MemoryBudget {
            units: Arc::new(Semaphore::new(total_units)),
            total_units,
        }
    }

    pub fn total_bytes(&self) -> usize {
        self.total_units.saturating_mul(UNIT)
    }

    pub fn available_bytes(&self) -> usize {
        self.units.available_permits().saturating_mul(UNIT)
    }

    /// A reservation of nothing, to grow with [`Reservation::try_grow_to`].
    pub fn empty(&self) -> Reservation {
        Reservation {
            budget: self.clone(),
            permit: None,
            units: 0,
        }
    }

    /// Reserves `bytes` now, or not at all.
    pub fn try_reserve(&self, bytes: usize) -> Option<Reservation> {
        let mut r = self.empty();
        r.try_grow_to(bytes).then_some(r)
    }

    /// Reserves `bytes`, waiting up to `wait` for others to give memory
    /// back (first come, first served). None when the time runs out, or at
    /// once when `bytes` is more than the whole budget.
    pub async fn reserve(&self, bytes: usize, wait: Duration) -> Option<Reservation> {
        let n = units(bytes);
        if n == 0 {
            return Some(self.empty());
        }
        if n > self.total_units {
            return None;
        }
        let n32 = u32::try_from(n).ok()?;
        let permit = tokio::time::timeout(wait, self.units.clone().acquire_many_owned(n32))
            .await
            .ok()?
            .ok()?;
        Some(Reservation {
            budget: self.clone(),
            permit: Some(permit),
            units: n,
        })
    }
}

/// Memory taken from the budget; given back when dropped.
pub struct Reservation {
    budget: MemoryBudget,
    permit: Option<OwnedSemaphorePermit>,
    units: usize,
}

impl std::fmt::Debug for Reservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reservation")
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl Reservation {
    pub fn bytes(&self) -> usize {
        self.units.saturating_mul(UNIT)
    }

    /// Gives everything back (it may grow again).
    pub fn release(&mut self) {
        self.permit = None;
        self.units = 0;
    }

    /// Grows the reservation to cover `bytes` in all, without waiting (a
    /// session that waited while holding memory could deadlock with
    /// another). False, and unchanged, when the budget has not that much.
    pub fn try_grow_to(&mut self, bytes: usize) -> bool {
        let want = units(bytes);
        if want <= self.units {
            return true;
        }
        let Ok(more) = u32::try_from(want - self.units) else {
            return false;
        };
        match self.budget.units.clone().try_acquire_many_owned(more) {
            Ok(p) => {
                match self.permit.as_mut() {
                    Some(held) => held.merge(p),
                    None => self.permit = Some(p),
                }
                self.units = want;
                true
            }
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_messages_cost_nothing_and_large_ones_a_multiple() {
        for backend in [Backend::Sqlite, Backend::Postgres] {
            assert_eq!(cost(0, backend), 0);
            assert_eq!(cost(FREE_BYTES, backend), 0);
            assert_eq!(cost(FREE_BYTES + 10, backend), 10 * cost_factor(backend));
        }
        assert!(cost_factor(Backend::Postgres) > cost_factor(Backend::Sqlite));
    }

    #[tokio::test]
    async fn reservations_share_the_budget_and_give_it_back() {
        let budget = MemoryBudget::new(4 * UNIT);
        let mut a = budget.try_reserve(UNIT + 1).expect("two units");
        assert_eq!(a.bytes(), 2 * UNIT);
        assert!(budget.try_reserve(3 * UNIT).is_none());
        assert!(a.try_grow_to(3 * UNIT));
        assert!(!a.try_grow_to(5 * UNIT), "more than the budget");
        assert_eq!(a.bytes(), 3 * UNIT);
        assert_eq!(budget.available_bytes(), UNIT);
        // A waiter gets what is given back, within its wait.
        let waiter = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.reserve(2 * UNIT, Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(a);
        let got = waiter.await.unwrap().expect("reserved once a was dropped");
        assert_eq!(got.bytes(), 2 * UNIT);
        // Nobody gives back: the wait ends empty-handed.
        assert!(
            budget
                .reserve(3 * UNIT, Duration::from_millis(20))
                .await
                .is_none()
        );
        // More than the whole budget never waits.
        assert!(
            budget
                .reserve(5 * UNIT, Duration::from_secs(60))
                .await
                .is_none()
        );
        drop(got);
        assert_eq!(budget.available_bytes(), 4 * UNIT);
    }
}
