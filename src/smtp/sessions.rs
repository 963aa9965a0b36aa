//! The open sessions, capped. At the cap a newcomer takes the place of the
//! session that has done least and waited longest, so that silent or stalled
//! connections cannot keep real mail out; a session receiving DATA is never
//! displaced, and only when every session is in DATA is the newcomer refused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// How far a session has come, in the order in which sessions are evicted
/// (least first). `Data` is never evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(super) enum Progress {
    /// Connected, no HELO/EHLO yet.
    Connected = 0,
    /// After HELO/EHLO.
    Greeted = 1,
    /// After MAIL.
    Mail = 2,
    /// After an accepted RCPT.
    Rcpt = 3,
    /// Receiving a message, or storing it.
    Data = 4,
}

/// The state word's value once a session has been evicted: no progress can
/// be reported after it, so eviction and entering DATA cannot both win.
const EVICTED: u8 = u8::MAX;

impl Progress {
    fn from_u8(v: u8) -> Option<Progress> {
        Some(match v {
            0 => Progress::Connected,
            1 => Progress::Greeted,
            2 => Progress::Mail,
            3 => Progress::Rcpt,
            4 => Progress::Data,
            _ => return None,
        })
    }
}

/// What the registry and the session's task share about one session.
struct Entry {
    /// A [`Progress`], or [`EVICTED`].
    state: AtomicU8,
    /// When the session last did something, as a tick of the registry's
    /// counter: the lowest has waited longest (no clock needed).
    active: AtomicU64,
    evicted: Notify,
}

/// The open sessions, at most `cap` of them.
pub(super) struct Sessions {
    cap: usize,
    next_id: AtomicU64,
    /// Orders activity across sessions; see [`Entry::active`].
    ticks: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Entry>>>,
}

/// One session's place, given back when dropped.
pub(super) struct SessionSlot {
    registry: Arc<Sessions>,
    id: u64,
    entry: Arc<Entry>,
}

impl Sessions {
    pub(super) fn new(cap: usize) -> Arc<Sessions> {
        Arc::new(Sessions {
            cap: cap.max(1),
            next_id: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A place for a new session. At the cap, the session with the least
    /// progress that has waited longest is evicted for it (told through
    /// [`SessionSlot::evicted`]); `None` when every session is in DATA.
    pub(super) fn admit(self: &Arc<Self>) -> Option<SessionSlot> {
        let mut open = self.lock();
        if open.len() >= self.cap {
            self.evict_one(&mut open)?;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(Entry {
            state: AtomicU8::new(Progress::Connected as u8),
            active: AtomicU64::new(self.tick()),
            evicted: Notify::new(),
        });
        open.insert(id, entry.clone());
        Some(SessionSlot {
            registry: self.clone(),
            id,
            entry,
        })
    }

    /// Evicts the best candidate, or returns `None` when there is none. A
    /// linear scan: this runs only at the cap, over `cap` atomics.
    fn evict_one(&self, open: &mut HashMap<u64, Arc<Entry>>) -> Option<()> {
        loop {
            let (id, seen) = open
                .iter()
                .filter_map(|(id, e)| {
                    let state = e.state.load(Ordering::Acquire);
                    let progress = Progress::from_u8(state)?;
                    (progress != Progress::Data)
                        .then(|| ((progress, e.active.load(Ordering::Relaxed)), *id, state))
                })
                .min()
                .map(|(_, id, state)| (id, state))?;
            let entry = open.get(&id)?.clone();
            // The session may have moved on (into DATA, say) since it was
            // looked at: then choose again.
            if entry
                .state
                .compare_exchange(seen, EVICTED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                open.remove(&id);
                entry.evicted.notify_waiters();
                return Some(());
            }
        }
    }

    fn tick(&self) -> u64 {
        self.ticks.fetch_add(1, Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Entry>>> {
        // The map only holds handles: a panic elsewhere cannot leave it torn.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

impl SessionSlot {
    /// Records the session's progress and that it was active just now.
    /// Entering [`Progress::Data`] goes through [`SessionSlot::enter_data`].
    pub(super) fn report(&self, progress: Progress) {
        debug_assert!(progress != Progress::Data);
        self.entry
            .active
            .store(self.registry.tick(), Ordering::Relaxed);
        let _ = self
            .entry
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s != EVICTED).then_some(progress as u8)
            });
    }

    /// Marks the session as receiving DATA, from when it cannot be evicted;
    /// false when it has been evicted already (it must not start the DATA).
    pub(super) fn enter_data(&self) -> bool {
        self.entry
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s != EVICTED).then_some(Progress::Data as u8)
            })
            .is_ok()
    }

    pub(super) fn is_evicted(&self) -> bool {
        self.entry.state.load(Ordering::Acquire) == EVICTED
    }

    /// Resolves once the session has been evicted.
    pub(super) async fn evicted(&self) {
        loop {
            // Created before the check: `notify_waiters` reaches it from here on.
            let notified = self.entry.evicted.notified();
            if self.is_evicted() {
                return;
            }
            notified.await;
        }
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        // An evicted session's place has been taken already.
        if !self.is_evicted() {
            self.registry.lock().remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Waker};

    fn resolved(f: impl Future<Output = ()>) -> bool {
        let mut f = pin!(f);
        f.as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
    }

    #[test]
    fn under_the_cap_everyone_is_admitted_and_places_are_given_back() {
        let reg = Sessions::new(2);
        let a = reg.admit().unwrap();
        let b = reg.admit().unwrap();
        assert_eq!(reg.len(), 2);
        drop(a);
        assert_eq!(reg.len(), 1);
        let c = reg.admit().unwrap();
        assert!(!b.is_evicted() && !c.is_evicted());
        drop((b, c));
        assert_eq!(reg.len(), 0);
    }

    #[test]
    fn the_least_progressed_longest_waiting_session_is_evicted_first() {
        let reg = Sessions::new(4);
        let rcpt = reg.admit().unwrap();
        let greeted_old = reg.admit().unwrap();
        let silent = reg.admit().unwrap();
        let greeted_new = reg.admit().unwrap();
        rcpt.report(Progress::Rcpt);
        greeted_old.report(Progress::Greeted);
        greeted_new.report(Progress::Greeted);
        // Silent is the only one without a command.
        let n1 = reg.admit().unwrap();
        assert!(silent.is_evicted());
        assert!(!greeted_old.is_evicted() && !greeted_new.is_evicted());
        // Between the greeted sessions, the one idle longest goes.
        n1.report(Progress::Greeted);
        greeted_old.report(Progress::Greeted);
        let n2 = reg.admit().unwrap();
        assert!(greeted_new.is_evicted() && !greeted_old.is_evicted());
        // Then the silent newcomer n2, when others have done more.
        greeted_old.report(Progress::Mail);
        n1.report(Progress::Mail);
        let _n3 = reg.admit().unwrap();
        assert!(n2.is_evicted());
        assert!(!rcpt.is_evicted() && !n1.is_evicted() && !greeted_old.is_evicted());
        assert_eq!(reg.len(), 4);
        // An evicted session's drop does not free anyone else's place.
        drop((silent, greeted_new, n2));
        assert_eq!(reg.len(), 4);
    }

    #[test]
    fn a_session_in_data_is_never_evicted() {
        let reg = Sessions::new(2);
        let a = reg.admit().unwrap();
        let b = reg.admit().unwrap();
        assert!(a.enter_data());
        // The older session is in DATA: the newer one goes.
        let c = reg.admit().unwrap();
        assert!(b.is_evicted() && !a.is_evicted());
        // An evicted session cannot start DATA any more.
        assert!(!b.enter_data());
        assert!(c.enter_data());
        // Every place in DATA: the newcomer is refused.
        assert!(reg.admit().is_none());
        assert!(!a.is_evicted() && !c.is_evicted());
        // After DATA the session can be evicted again.
        a.report(Progress::Greeted);
        let _d = reg.admit().unwrap();
        assert!(a.is_evicted());
        // Progress reported after eviction does not undo it.
        a.report(Progress::Rcpt);
        assert!(a.is_evicted());
    }

    #[test]
    fn the_evicted_session_is_told() {
        let reg = Sessions::new(1);
        let a = reg.admit().unwrap();
        let mut waiting = Box::pin(a.evicted());
        assert!(!resolved(waiting.as_mut()));
        let _b = reg.admit().unwrap();
        assert!(resolved(waiting.as_mut()));
        // Also when it starts waiting afterwards.
        assert!(resolved(a.evicted()));
    }
}
