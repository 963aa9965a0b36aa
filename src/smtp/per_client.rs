//! How many sessions each client holds, so that one address cannot take every
//! connection slot.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex};

/// Open sessions per client, capped.
pub(super) struct PerClient {
    cap: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One session's place in its client's count, given back when dropped.
pub(super) struct ClientSlot {
    table: Arc<PerClient>,
    key: IpAddr,
}

impl PerClient {
    pub(super) fn new(cap: usize) -> Arc<PerClient> {
        Arc::new(PerClient {
            cap: cap.max(1),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for a session from `ip`, or `None` when that client is at the cap.
    pub(super) fn try_enter(self: &Arc<Self>, ip: IpAddr) -> Option<ClientSlot> {
        let key = client_key(ip);
        let mut open = self.lock();
        let n = open.entry(key).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            table: self.clone(),
            key,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        // The map holds plain counts: a panic elsewhere cannot leave it torn.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(test)]
    fn clients(&self) -> usize {
        self.lock().len()
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.table.lock();
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// The unit a cap applies to: an IPv4 address (also when it arrives mapped
/// into IPv6), or the /64 of an IPv6 address.
fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn capped_per_client_and_released_on_drop() {
        let table = PerClient::new(2);
        let a1 = table.try_enter(ip("192.0.2.1")).unwrap();
        let a2 = table.try_enter(ip("192.0.2.1")).unwrap();
        assert!(table.try_enter(ip("192.0.2.1")).is_none());
        // The same address mapped into IPv6 is the same client.
        assert!(table.try_enter(ip("::ffff:192.0.2.1")).is_none());
        let b = table.try_enter(ip("192.0.2.2")).unwrap();
        drop(a1);
        let a3 = table.try_enter(ip("192.0.2.1")).unwrap();
        drop((a2, a3, b));
        assert_eq!(table.clients(), 0);
    }

    #[test]
    fn ipv6_counts_by_slash_64() {
        let table = PerClient::new(1);
        let _a = table.try_enter(ip("2001:db8:1:2::1")).unwrap();
        assert!(table.try_enter(ip("2001:db8:1:2:ffff::9")).is_none());
        assert!(table.try_enter(ip("2001:db8:1:3::1")).is_some());
    }
}
