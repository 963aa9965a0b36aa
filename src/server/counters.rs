//! What the connection limits did, counted into the application's metrics.

use metrics::{Counter, Gauge};

use crate::telemetry::Telemetry;

/// What the HTTP connection limits did (kept by `crate::server`).
pub struct ConnectionCounters {
    pub open: Gauge,
    pub header_timeouts: Counter,
    pub idle_timeouts: Counter,
    /// Closed to make room for a newcomer at the global cap.
    pub evicted: Counter,
    pub refused_per_ip: Counter,
    pub refused_full: Counter,
}

impl ConnectionCounters {
    pub fn new(telemetry: &Telemetry) -> ConnectionCounters {
        let (
            open,
            [
                header_timeouts,
                idle_timeouts,
                evicted,
                refused_per_ip,
                refused_full,
            ],
        ) = telemetry.connection_handles();
        ConnectionCounters {
            open,
            header_timeouts,
            idle_timeouts,
            evicted,
            refused_per_ip,
            refused_full,
        }
    }
}
