//! Which connections may stay open: at most `max_per_ip` from one address and
//! `max_total` in all. At the global cap a new connection takes the place of
//! the oldest one not serving a request (silent, slow to send its head, or
//! idle between requests), so a flood of idle connections cannot keep a
//! health check or a real client out; only when every connection is busy is
//! the newcomer refused.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use super::activity::Activity;

/// The unit of the per-address cap: an IPv4 address, or an IPv6 /64 (one
/// host usually holds a whole /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Source(IpAddr);

impl Source {
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source(IpAddr::V4(v4)),
                None => Source(IpAddr::V6(Ipv6Addr::from(
                    u128::from(v6) & !((1u128 << 64) - 1),
                ))),
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This address already holds `max_per_ip` connections.
    PerIp,
    /// `max_total` connections are open and all are serving requests.
    Full,
}

pub struct Admitted {
    pub slot: Slot,
    /// An older connection was closed to make room.
    pub evicted: bool,
}

pub struct Registry {
    max_total: usize,
    /// 0: no per-address cap.
    max_per_ip: usize,
    next_id: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    per_source: HashMap<Source, usize>,
    /// Open connections not yet evicted, oldest first.
    open: BTreeMap<u64, Arc<Activity>>,
}

impl Registry {
    pub fn new(max_total: usize, max_per_ip: usize) -> Arc<Registry> {
        Arc::new(Registry {
            max_total: max_total.max(1),
            max_per_ip,
            next_id: AtomicU64::new(0),
            inner: Mutex::new(Inner::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open connections (evicted ones still closing not counted).
    #[cfg(test)]
    pub fn open(&self) -> usize {
        self.lock().open.len()
    }

    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admitted, Refusal> {
        let source = Source::of(ip);
        let mut inner = self.lock();
        let from_source = inner.per_source.get(&source).copied().unwrap_or(0);
        if self.max_per_ip > 0 && from_source >= self.max_per_ip {
            return Err(Refusal::PerIp);
        }
        let mut evicted = false;
        if inner.open.len() >= self.max_total {
            // Busy connections are skipped; there are at most `max_total`.
            let oldest_idle = inner
                .open
                .iter()
                .find(|(_, a)| a.evictable())
                .map(|(id, _)| *id);
            let Some(id) = oldest_idle else {
                return Err(Refusal::Full);
            };
            if let Some(a) = inner.open.remove(&id) {
                a.evict();
                evicted = true;
            }
        }
        let id = self.next_id.fetch_add(1, Relaxed);
        let activity = Arc::new(Activity::new());
        inner.open.insert(id, activity.clone());
        *inner.per_source.entry(source).or_insert(0) += 1;
        Ok(Admitted {
            slot: Slot {
                registry: self.clone(),
                id,
                source,
                activity,
            },
            evicted,
        })
    }
}

/// One admitted connection; dropping it (when the connection task ends)
/// gives its place back.
pub struct Slot {
    registry: Arc<Registry>,
    id: u64,
    source: Source,
    pub activity: Arc<Activity>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.registry.lock();
        inner.open.remove(&self.id);
        if let Some(n) = inner.per_source.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                inner.per_source.remove(&self.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_per_address_cap_counts_v4_addresses_and_v6_slash_64s() {
        let r = Registry::new(100, 2);
        let a = r.admit(ip("10.0.0.1")).unwrap();
        let _b = r.admit(ip("::ffff:10.0.0.1")).unwrap();
        assert_eq!(r.admit(ip("10.0.0.1")).err(), Some(Refusal::PerIp));
        assert!(r.admit(ip("10.0.0.2")).is_ok());
        drop(a);
        assert!(
            r.admit(ip("10.0.0.1")).is_ok(),
            "a closed connection frees its place"
        );

        let _c = r.admit(ip("2001:db8::1")).unwrap();
        let _d = r.admit(ip("2001:db8::ffff:2")).unwrap();
        assert_eq!(r.admit(ip("2001:db8::3")).err(), Some(Refusal::PerIp));
        assert!(r.admit(ip("2001:db8:0:1::1")).is_ok());
        assert!(Registry::new(100, 0).admit(ip("10.0.0.1")).is_ok());
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room() {
        let r = Registry::new(3, 0);
        let first = r.admit(ip("10.0.0.1")).unwrap().slot;
        let busy = first.activity.begin_request();
        let second = r.admit(ip("10.0.0.2")).unwrap().slot;
        let _third = r.admit(ip("10.0.0.3")).unwrap();

        let fourth = r.admit(ip("10.0.0.4")).unwrap();
        assert!(fourth.evicted);
        assert!(!first.activity.is_evicted(), "busy connections are kept");
        assert!(second.activity.is_evicted(), "the oldest idle one goes");
        assert_eq!(r.open(), 3);

        let _fifth = r.admit(ip("10.0.0.5")).unwrap();
        let _g4 = fourth.slot.activity.begin_request();
        let _g5 = _fifth.slot.activity.begin_request();
        assert_eq!(r.admit(ip("10.0.0.6")).err(), Some(Refusal::Full));
        drop(busy);
        drop(first);
        assert!(r.admit(ip("10.0.0.6")).is_ok());
    }
}
