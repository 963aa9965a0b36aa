//! The delivery engine: a dispatcher that fans the event outbox out into
//! tasks, a claimer that starts due attempts within concurrency limits, and a
//! recorder that writes their results in batches.
//!
//! Concurrency: at most [`GLOBAL_IN_FLIGHT`] attempts at once per process,
//! and per endpoint at most [`ENDPOINT_IN_FLIGHT`] (or
//! [`FAILING_ENDPOINT_IN_FLIGHT`] while its last attempt failed). Each round
//! the claimer takes the endpoints with due tasks in random order and gives
//! each a share of the free capacity, so a slow or dead endpoint holds only a
//! few slots and never delays the others.
//!
//! Latency: the dispatcher polls the outbox every [`POLL`] when idle (a cheap
//! indexed read), and wakes the claimer as soon as it has written tasks; the
//! recorder wakes the claimer whenever capacity frees up; otherwise the
//! claimer polls every [`POLL`], or [`IDLE_POLL`] after a quiet second.
//! [`Webhooks::wake`] lets code that just committed events skip the
//! dispatcher's poll wait.
//!
//! Shutdown: [`Webhooks::shutdown`] stops claiming, lets attempts in flight
//! finish and be recorded (for at most the attempt timeout plus a grace), and
//! gives back the leases of any it had to abandon. [`Webhooks::kill`] stops
//! everything at once, like a crash: leases then run out and the tasks are
//! attempted again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use rand::seq::SliceRandom;
use tokio::sync::{Notify, Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use crate::clock;
use crate::config::Config;
use crate::dns::Dns;
use crate::store::Db;
use crate::telemetry::Telemetry;
use crate::webhooks::queue::{self, DueEndpoint, Finished, Task};
use crate::webhooks::sender::{self, Sender};

/// Attempts in flight at once in one process.
pub const GLOBAL_IN_FLIGHT: usize = 512;
/// Attempts in flight at once to one healthy endpoint.
pub const ENDPOINT_IN_FLIGHT: usize = 16;
/// Attempts in flight at once to an endpoint whose last attempt failed.
pub const FAILING_ENDPOINT_IN_FLIGHT: usize = 2;
/// Poll interval of the dispatcher (an indexed read of the outbox), and of
/// the claimer while there was work in the last second.
pub const POLL: Duration = Duration::from_millis(10);
/// Poll interval of the claimer after a second without work. New tasks of
/// this process wake it at once; the poll only finds retries coming due and
/// tasks that other processes fanned out.
pub const IDLE_POLL: Duration = Duration::from_millis(100);
/// How often the dispatcher looks again at recent events below the last one
/// it fanned out (see [`ScanStart`]).
const RESCAN: Duration = Duration::from_secs(1);
/// How far back those looks reach: events whose transaction took longer
/// than this between writing the event and committing wait for a full scan.
const STRAGGLER_WINDOW: Duration = Duration::from_secs(10);
/// How often the dispatcher scans the whole outbox.
const FULL_SCAN: Duration = Duration::from_secs(300);

/// Where the dispatcher's scans of the outbox start.
///
/// Normally after the highest event seq fanned out, so a poll never walks
/// the outbox's past: on PostgreSQL the index of undispatched events keeps
/// entries of dispatched rows until vacuum, and after a large burst a scan
/// from the start would walk all of them every time. Sequence numbers are
/// taken before commit, so an event can commit after a later one was fanned
/// out; every [`RESCAN`] one scan starts where the high mark stood
/// [`STRAGGLER_WINDOW`] ago, and every [`FULL_SCAN`] (and first) from zero.
struct ScanStart {
    high: i64,
    start: i64,
    history: std::collections::VecDeque<(std::time::Instant, i64)>,
    last_rescan: std::time::Instant,
    last_full: std::time::Instant,
}

impl ScanStart {
    fn new(now: std::time::Instant) -> ScanStart {
        ScanStart {
            high: 0,
            start: 0,
            history: std::collections::VecDeque::new(),
            last_rescan: now,
            last_full: now,
        }
    }

    /// The seq after which the next scan starts.
    fn floor(&mut self, now: std::time::Instant) -> i64 {
        if now.duration_since(self.last_full) >= FULL_SCAN {
            self.last_full = now;
            self.last_rescan = now;
            self.start = 0;
        } else if now.duration_since(self.last_rescan) >= RESCAN {
            self.last_rescan = now;
            self.history.push_back((now, self.high));
            // Keep one sample older than the window, and the newer ones.
            while self
                .history
                .get(1)
                .is_some_and(|(t, _)| now.duration_since(*t) >= STRAGGLER_WINDOW)
            {
                self.history.pop_front();
            }
            self.start = match self.history.front() {
                Some((t, h)) if now.duration_since(*t) >= STRAGGLER_WINDOW => *h,
                _ => 0,
            };
        }
        self.start
    }

    /// After a scan: `max_seq` fanned out, and whether more may follow.
    fn dispatched(&mut self, max_seq: Option<i64>, more: bool) {
        if let Some(m) = max_seq {
            self.high = self.high.max(m);
            self.start = self.start.max(m);
        }
        if !more {
            self.start = self.high;
        }
    }
}
/// Events fanned out per dispatcher transaction.
const DISPATCH_BATCH: i64 = 500;
/// Attempts recorded per recorder transaction at most.
const RECORD_BATCH: usize = 512;

/// How long a claim holds a task: the attempt's timeout twice over plus two
/// seconds, which covers the attempt and recording it.
pub fn lease_for(timeout: Duration) -> Duration {
    timeout * 2 + Duration::from_secs(2)
}

struct Inner {
    db: Db,
    sender: Sender,
    delays: Vec<Duration>,
    lease: Duration,
    wake_dispatcher: Notify,
    wake_claimer: Notify,
    stop: watch::Sender<bool>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

/// Handle to the delivery engine of this process. Cheap to clone.
#[derive(Clone)]
pub struct Webhooks {
    inner: Arc<Inner>,
}

impl Webhooks {
    /// Builds the engine and starts its background tasks (needs a Tokio runtime).
    pub fn start(db: Db, config: &Config, dns: Arc<Dns>, metrics: Telemetry) -> Webhooks {
        let w = Webhooks::idle(db, config, dns, metrics);
        w.run();
        w
    }

    /// Builds the engine without starting delivery (pings and replays still
    /// work); [`Webhooks::run`] starts it.
    pub fn idle(db: Db, config: &Config, dns: Arc<Dns>, metrics: Telemetry) -> Webhooks {
        let sender = Sender::new(
            dns,
            sender::policy_for(config.env),
            config.webhook_timeout,
            metrics,
        );
        let (stop, _) = watch::channel(false);
        Webhooks {
            inner: Arc::new(Inner {
                db,
                sender,
                delays: config.webhook_retry_delays.clone(),
                lease: lease_for(config.webhook_timeout),
                wake_dispatcher: Notify::new(),
                wake_claimer: Notify::new(),
                stop,
                handles: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Starts the dispatcher, the claimer and the recorder.
    pub fn run(&self) {
        let (results, inbox) = mpsc::unbounded_channel();
        let dispatcher = tokio::spawn(dispatcher(self.inner.clone()));
        let claimer = tokio::spawn(claimer(self.inner.clone(), results));
        let recorder = tokio::spawn(recorder(self.inner.clone(), inbox));
        if let Ok(mut h) = self.inner.handles.lock() {
            h.extend([dispatcher, claimer, recorder]);
        }
    }

    pub fn sender(&self) -> &Sender {
        &self.inner.sender
    }

    pub fn retry_delays(&self) -> &[Duration] {
        &self.inner.delays
    }

    /// Tells the dispatcher that events were just committed.
    pub fn wake(&self) {
        self.inner.wake_dispatcher.notify_one();
    }

    /// Stops claiming, waits for attempts in flight to finish and be recorded,
    /// then stops. Safe to call more than once.
    pub async fn shutdown(&self) {
        let _ = self.inner.stop.send(true);
        self.inner.wake_dispatcher.notify_one();
        self.inner.wake_claimer.notify_one();
        let handles: Vec<JoinHandle<()>> = match self.inner.handles.lock() {
            Ok(mut h) => h.drain(..).collect(),
            Err(_) => Vec::new(),
        };
        for h in handles {
            let _ = h.await;
        }
    }

    /// Stops at once, as a crash would: attempts in flight are abandoned and
    /// their tasks keep their leases until those run out. For tests and
    /// benchmarks.
    pub fn kill(&self) {
        let _ = self.inner.stop.send(true);
        if let Ok(mut h) = self.inner.handles.lock() {
            for handle in h.drain(..) {
                handle.abort();
            }
        }
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn dispatcher(inner: Arc<Inner>) {
    let mut stop = inner.stop.subscribe();
    let first_delay = inner.delays.first().copied().unwrap_or_default();
    let mut scan = ScanStart::new(std::time::Instant::now());
    loop {
        if *stop.borrow() {
            return;
        }
        let floor = scan.floor(std::time::Instant::now());
        let mut busy = false;
        match queue::has_undispatched(&inner.db, floor).await {
            Ok(true) => {
                match queue::dispatch(&inner.db, first_delay, DISPATCH_BATCH, floor).await {
                    Ok(d) => {
                        if d.tasks > 0 {
                            inner.wake_claimer.notify_one();
                        }
                        busy = d.events as i64 >= DISPATCH_BATCH;
                        scan.dispatched(d.max_seq, busy);
                    }
                    Err(e) => tracing::warn!(error = %e, "webhook fan-out failed; retrying"),
                }
            }
            Ok(false) => scan.dispatched(None, false),
            Err(e) => tracing::warn!(error = %e, "reading the event outbox failed"),
        }
        if busy {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            _ = stopped(&mut stop) => return,
            _ = inner.wake_dispatcher.notified() => {}
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

/// What an attempt hands to the recorder.
struct Done {
    finished: Finished,
    /// Released after recording, so capacity is only given back once the
    /// result is in the database.
    _permit: tokio::sync::OwnedSemaphorePermit,
}

/// Per-endpoint count of attempts started and not yet recorded.
type Load = Arc<Mutex<HashMap<String, usize>>>;

fn cap_for(ep: &DueEndpoint) -> usize {
    if ep.consecutive_failures > 0 {
        FAILING_ENDPOINT_IN_FLIGHT
    } else {
        ENDPOINT_IN_FLIGHT
    }
}

async fn claimer(inner: Arc<Inner>, results: mpsc::UnboundedSender<(Done, Load)>) {
    let mut stop = inner.stop.subscribe();
    let permits = Arc::new(Semaphore::new(GLOBAL_IN_FLIGHT));
    let load: Load = Arc::new(Mutex::new(HashMap::new()));
    // Envelope id → lease of every attempt started and not yet finished.
    let in_flight: Arc<Mutex<HashMap<String, i64>>> = Arc::new(Mutex::new(HashMap::new()));
    let mut attempts: JoinSet<()> = JoinSet::new();
    let mut last_work = std::time::Instant::now();
    loop {
        if *stop.borrow() {
            break;
        }
        let claimed =
            match claim_round(&inner, &permits, &load, &in_flight, &mut attempts, &results).await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, "claiming webhook tasks failed; retrying");
                    0
                }
            };
        while attempts.try_join_next().is_some() {}
        if claimed > 0 {
            last_work = std::time::Instant::now();
            tokio::task::yield_now().await;
            continue;
        }
        let poll = if last_work.elapsed() < Duration::from_secs(1) || !attempts.is_empty() {
            POLL
        } else {
            IDLE_POLL
        };
        tokio::select! {
            _ = stopped(&mut stop) => break,
            _ = inner.wake_claimer.notified() => {}
            _ = tokio::time::sleep(poll) => {}
        }
    }
    // Shutdown: let attempts in flight finish (each ends within its timeout).
    let grace = inner.sender.timeout() + Duration::from_secs(2);
    let drained = tokio::time::timeout(grace, async {
        while attempts.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        attempts.abort_all();
        let leftover: Vec<(String, i64)> = match in_flight.lock() {
            Ok(m) => m.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            Err(_) => Vec::new(),
        };
        if let Err(e) = queue::release(&inner.db, &leftover).await {
            tracing::warn!(error = %e, "could not release webhook leases at shutdown");
        }
    }
}

/// One round: due endpoints in random order, each given a share of the free
/// capacity. Returns how many attempts it started.
async fn claim_round(
    inner: &Arc<Inner>,
    permits: &Arc<Semaphore>,
    load: &Load,
    in_flight: &Arc<Mutex<HashMap<String, i64>>>,
    attempts: &mut JoinSet<()>,
    results: &mpsc::UnboundedSender<(Done, Load)>,
) -> Result<usize, sqlx::Error> {
    if permits.available_permits() == 0 {
        return Ok(0);
    }
    let now = clock::now_micros();
    let mut due = queue::due_endpoints(&inner.db, now).await?;
    if due.is_empty() {
        return Ok(0);
    }
    due.shuffle(&mut rand::thread_rng());
    let current = |id: &str| -> usize {
        load.lock()
            .ok()
            .and_then(|m| m.get(id).copied())
            .unwrap_or(0)
    };
    due.retain(|ep| current(&ep.id) < cap_for(ep));
    let count = due.len().max(1);
    let mut free = permits.available_permits();
    let mut wants: Vec<(String, i64)> = Vec::new();
    let mut by_id: HashMap<String, DueEndpoint> = HashMap::new();
    for ep in due {
        if free == 0 {
            break;
        }
        let share = (free / count).max(1);
        let cap = cap_for(&ep);
        let busy = current(&ep.id).min(cap);
        // While attempts are in flight, wait until half the room is free so
        // that claims come in batches rather than one by one.
        if busy > 0 && cap - busy < cap / 2 {
            continue;
        }
        let want = (cap - busy).min(share).min(free);
        if want == 0 {
            continue;
        }
        free -= want;
        wants.push((ep.id.clone(), want as i64));
        by_id.insert(ep.id.clone(), ep);
    }
    if wants.is_empty() {
        return Ok(0);
    }
    let tasks = queue::claim(&inner.db, &wants, now, inner.lease).await?;
    let mut started = 0;
    for task in tasks {
        let Some(ep) = by_id.get(&task.webhook_id) else {
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // Cannot happen (only this loop takes permits, and it claimed no
            // more than were free); the lease runs out and the task is
            // attempted later.
            break;
        };
        if let Ok(mut m) = load.lock() {
            *m.entry(ep.id.clone()).or_insert(0) += 1;
        }
        if let Ok(mut m) = in_flight.lock() {
            m.insert(task.id.clone(), task.lease_until);
        }
        let sender = inner.sender.clone();
        let results = results.clone();
        let load = load.clone();
        let in_flight = in_flight.clone();
        let url = ep.url.clone();
        let secret = ep.secret.clone();
        // The attempt logs under the id of the request that caused its event.
        let span = tracing::info_span!(
            "webhook_attempt",
            request_id = task.request_id.as_deref().unwrap_or(""),
            delivery = %task.id,
            webhook_id = %task.webhook_id,
            attempt = task.attempt,
        );
        attempts.spawn(async move {
            let finished = attempt(&sender, &url, &secret, task).instrument(span).await;
            if let Ok(mut m) = in_flight.lock() {
                m.remove(&finished.envelope_id);
            }
            let _ = results.send((
                Done {
                    finished,
                    _permit: permit,
                },
                load,
            ));
        });
        started += 1;
    }
    Ok(started)
}

async fn attempt(sender: &Sender, url: &str, secret: &str, task: Task) -> Finished {
    let started_at = clock::now_micros();
    let body = Bytes::from(task.payload.clone());
    let r = sender.send(url, secret, &task.id, body).await;
    tracing::debug!(status = r.status, outcome = ?r.outcome, "webhook attempt");
    Finished {
        webhook_id: task.webhook_id,
        envelope_id: task.id,
        event_id: Some(task.event_id),
        event_type: task.event_type,
        payload: task.payload,
        attempt: task.attempt,
        status: r.status,
        response_body: r.response_body,
        error: r.error,
        duration_ms: r.duration_ms,
        succeeded: r.succeeded,
        retryable: r.retryable,
        started_at,
        ended_at: clock::now_micros(),
        task_lease: Some(task.lease_until),
        record_id: None,
    }
}

async fn recorder(inner: Arc<Inner>, mut inbox: mpsc::UnboundedReceiver<(Done, Load)>) {
    let mut batch: Vec<(Done, Load)> = Vec::with_capacity(RECORD_BATCH);
    loop {
        if inbox.recv_many(&mut batch, RECORD_BATCH).await == 0 {
            return;
        }
        if batch.len() < RECORD_BATCH / 8 {
            // Under load, a moment's wait gathers a bigger batch: fewer,
            // larger transactions. (Arrival latency does not depend on it.)
            tokio::time::sleep(Duration::from_millis(2)).await;
            while batch.len() < RECORD_BATCH {
                match inbox.try_recv() {
                    Ok(item) => batch.push(item),
                    Err(_) => break,
                }
            }
        }
        let finished: Vec<Finished> = batch.iter().map(|(d, _)| d.finished.clone()).collect();
        let mut tries = 0;
        loop {
            match queue::record(&inner.db, &finished, &inner.delays).await {
                Ok(_) => break,
                Err(e) => {
                    tries += 1;
                    if tries >= 5 {
                        // The leases run out and the tasks are attempted again.
                        tracing::error!(error = %e, attempts = finished.len(), "could not record webhook attempts");
                        break;
                    }
                    tracing::warn!(error = %e, "recording webhook attempts failed; retrying");
                    tokio::time::sleep(Duration::from_millis(50 * tries)).await;
                }
            }
        }
        for (done, load) in batch.drain(..) {
            if let Ok(mut m) = load.lock()
                && let Some(n) = m.get_mut(&done.finished.webhook_id)
            {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    m.remove(&done.finished.webhook_id);
                }
            }
        }
        inner.wake_claimer.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn scans_start_past_the_high_mark_and_look_back_now_and_then() {
        let t0 = Instant::now();
        let mut s = ScanStart::new(t0);
        assert_eq!(s.floor(t0), 0);
        s.dispatched(Some(500), true);
        assert_eq!(s.floor(t0), 500);
        s.dispatched(Some(700), false);
        assert_eq!(s.floor(t0), 700);
        s.dispatched(None, false);
        assert_eq!(s.floor(t0), 700);
        // Within the first window, look-backs start from zero.
        let t1 = t0 + RESCAN;
        assert_eq!(s.floor(t1), 0);
        s.dispatched(Some(650), false); // a straggler
        assert_eq!(s.floor(t1), 700);
        // Later, from where the mark stood a window ago.
        let mut t = t1;
        for i in 0..12 {
            t += RESCAN;
            let f = s.floor(t);
            s.dispatched(Some(1000 + i), false);
            assert!(f <= 1000 + i);
        }
        let f = s.floor(t + RESCAN);
        assert!((700..1011).contains(&f), "{f}");
        s.dispatched(None, false);
        assert_eq!(s.floor(t + RESCAN), 1011);
        // And from zero every FULL_SCAN.
        assert_eq!(s.floor(t0 + FULL_SCAN), 0);
    }
}
