//! Serving HTTP/1 with bounds on what a client may hold: a header deadline,
//! an idle deadline, per-address and global connection caps, and a reserve of
//! file descriptors for everything else the process opens.

mod accept;
mod activity;
pub mod fd_limit;
mod limits;

pub use accept::{ServeLimits, listen, serve};
