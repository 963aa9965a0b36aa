//! Serving HTTP/1 with bounds on what a client may hold: header, body and
//! idle deadlines, per-address and global connection caps, and a reserve of
//! file descriptors for everything else the process opens.

mod accept;
mod activity;
mod body_deadline;
mod counters;
pub mod fd_limit;
mod limits;

pub use accept::{ServeLimits, listen, serve};
pub use counters::ConnectionCounters;
