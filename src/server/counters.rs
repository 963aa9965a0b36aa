//! What the connection limits did, counted for the metrics page.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A count that only grows, or a gauge.
#[derive(Default)]
pub struct Count(AtomicU64);

impl Count {
    pub fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }

    pub fn dec(&self) {
        self.0.fetch_sub(1, Relaxed);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// What the HTTP connection limits did (kept by `crate::server`).
#[derive(Default)]
pub struct ConnectionCounters {
    pub open: Count,
    pub header_timeouts: Count,
    pub idle_timeouts: Count,
    /// Closed to make room for a newcomer at the global cap.
    pub evicted: Count,
    pub refused_per_ip: Count,
    pub refused_full: Count,
}
