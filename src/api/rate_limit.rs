//! Fixed one-minute windows per key, held in this process (spec §8).

use std::collections::HashMap;
use std::sync::Mutex;

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
        let mut map = match self.windows.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
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
}
