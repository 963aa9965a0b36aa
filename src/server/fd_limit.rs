//! The process's open-file limit, raised once to what it may be.

/// File descriptors kept for everything that is not an HTTP connection: the
/// SMTP listener and its sessions, the database pool, webhook and provider
/// calls, log and data files.
pub const RESERVED_FDS: u64 = 1024;

/// The default HTTP connection cap never exceeds this, however high the file
/// limit: each connection costs memory too.
const DEFAULT_CAP_CEILING: u64 = 10_000;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the limit now
/// in force (`None` where it cannot be read).
#[cfg(unix)]
pub fn raise_to_hard_limit() -> Option<u64> {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut current) } != 0 {
        return None;
    }
    // An "infinite" hard limit is not a usable soft limit (Linux caps it at
    // fs.nr_open); a million is plenty.
    let target = current.rlim_max.min(1 << 20);
    if current.rlim_cur < target {
        let raised = libc::rlimit {
            rlim_cur: target,
            rlim_max: current.rlim_max,
        };
        // SAFETY: setrlimit only reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return Some(target);
        }
    }
    Some(current.rlim_cur)
}

#[cfg(not(unix))]
pub fn raise_to_hard_limit() -> Option<u64> {
    None
}

/// The HTTP connection cap: the configured one, else half the file limit (at
/// most 10,000); either way at most the limit less [`RESERVED_FDS`] (or half
/// of a limit under twice that), so a
/// flood of HTTP connections cannot starve SMTP, the database or `/healthz`.
pub fn connection_cap(configured: Option<usize>, fd_limit: Option<u64>) -> usize {
    // On a tiny limit the reserve is half of it.
    let usable = fd_limit.map(|l| (l - RESERVED_FDS.min(l / 2)).max(1));
    let cap = match configured {
        Some(n) => n as u64,
        None => fd_limit
            .map(|l| (l / 2).min(DEFAULT_CAP_CEILING))
            .unwrap_or(DEFAULT_CAP_CEILING),
    };
    let cap = match usable {
        Some(u) if cap > u => {
            tracing::warn!(
                configured = cap,
                fd_limit = fd_limit.unwrap_or(0),
                used = u,
                "PIGEONHOLE_HTTP_MAX_CONNECTIONS leaves too few file descriptors; lowered"
            );
            u
        }
        _ => cap,
    };
    usize::try_from(cap.max(1)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_leaves_a_reserve_of_descriptors() {
        assert_eq!(connection_cap(None, Some(20_000)), 10_000);
        assert_eq!(connection_cap(None, Some(4096)), 2048);
        assert_eq!(connection_cap(None, Some(1 << 20)), 10_000);
        assert_eq!(connection_cap(Some(50), Some(20_000)), 50);
        assert_eq!(connection_cap(Some(19_999), Some(20_000)), 20_000 - 1024);
        assert_eq!(connection_cap(Some(7), None), 7);
        assert_eq!(connection_cap(None, Some(100)), 50);
    }

    #[cfg(unix)]
    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let limit = raise_to_hard_limit().unwrap();
        let mut now = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut now) }, 0);
        assert_eq!(now.rlim_cur, limit);
        assert_eq!(now.rlim_cur, now.rlim_max.min(1 << 20));
    }
}
