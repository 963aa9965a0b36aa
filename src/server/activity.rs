//! What one connection is doing, for its deadlines and for eviction: waiting
//! for a request head, receiving one, serving a request, or idle between
//! requests. Everything here runs on the connection's own task, so the
//! atomics are only there to make the state shareable with the registry.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;

const NONE: u64 = u64::MAX;

/// Why a connection's deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// A request head did not arrive whole in time (or none began in time).
    Header,
    /// A keep-alive connection sat idle too long.
    Idle,
}

pub struct Activity {
    opened: Instant,
    /// A request is being served: from its head parsed to its response body
    /// handed over to the socket.
    busy: AtomicBool,
    /// Requests started on this connection.
    requests: AtomicU64,
    /// Milliseconds after `opened` when the last request finished.
    idle_since: AtomicU64,
    /// Milliseconds after `opened` when the first byte of the next head came.
    head_started: AtomicU64,
    evicted: AtomicBool,
    /// Wakes the connection's watchdog when a deadline may have moved earlier.
    changed: Notify,
}

impl Activity {
    pub fn new() -> Activity {
        Activity {
            opened: Instant::now(),
            busy: AtomicBool::new(false),
            requests: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            head_started: AtomicU64::new(NONE),
            evicted: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    fn millis(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(NONE - 1)
    }

    fn at(&self, millis: u64) -> Instant {
        self.opened + Duration::from_millis(millis)
    }

    /// Bytes arrived. Between requests they begin the next head, whose
    /// deadline then runs.
    fn on_read(&self) {
        if !self.busy.load(Relaxed) && self.head_started.load(Relaxed) == NONE {
            self.head_started.store(self.millis(), Relaxed);
            self.changed.notify_one();
        }
    }

    /// A request head has been parsed; the connection is busy until the guard
    /// (carried by the response body) is dropped.
    pub fn begin_request(self: &Arc<Self>) -> RequestGuard {
        self.busy.store(true, Relaxed);
        self.head_started.store(NONE, Relaxed);
        self.requests.fetch_add(1, Relaxed);
        RequestGuard(self.clone())
    }

    /// When the connection must be closed, and why; `None` while busy.
    pub fn deadline(&self, header: Duration, idle: Duration) -> Option<(Instant, Expiry)> {
        if self.busy.load(Relaxed) {
            return None;
        }
        if self.requests.load(Relaxed) == 0 {
            // A new connection owes its first head within the header timeout
            // of being accepted.
            return Some((self.opened + header, Expiry::Header));
        }
        let head = self.head_started.load(Relaxed);
        if head != NONE {
            return Some((self.at(head) + header, Expiry::Header));
        }
        Some((self.at(self.idle_since.load(Relaxed)) + idle, Expiry::Idle))
    }

    /// May be closed to make room: not in the middle of serving a request.
    pub fn evictable(&self) -> bool {
        !self.is_busy() && !self.is_evicted()
    }

    pub fn evict(&self) {
        self.evicted.store(true, Relaxed);
        self.changed.notify_one();
    }

    pub fn is_busy(&self) -> bool {
        self.busy.load(Relaxed)
    }

    pub fn is_evicted(&self) -> bool {
        self.evicted.load(Relaxed)
    }

    /// Resolves when the deadline may have changed or the connection was evicted.
    pub async fn changed(&self) {
        self.changed.notified().await
    }
}

/// Marks the end of a request when dropped: the connection turns idle.
pub struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let a = &self.0;
        a.idle_since.store(a.millis(), Relaxed);
        a.busy.store(false, Relaxed);
        a.changed.notify_one();
    }
}

/// A response body that holds its request's guard until hyper is done with it.
pub struct GuardedBody {
    inner: Body,
    _guard: RequestGuard,
}

impl GuardedBody {
    pub fn new(inner: Body, guard: RequestGuard) -> GuardedBody {
        GuardedBody {
            inner,
            _guard: guard,
        }
    }
}

impl http_body::Body for GuardedBody {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The socket, reporting reads to the connection's [`Activity`].
pub struct WatchedIo {
    stream: TcpStream,
    activity: Arc<Activity>,
}

impl WatchedIo {
    pub fn new(stream: TcpStream, activity: Arc<Activity>) -> WatchedIo {
        WatchedIo { stream, activity }
    }
}

impl AsyncRead for WatchedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.on_read();
        }
        polled
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: Duration = Duration::from_secs(1);
    const IDLE: Duration = Duration::from_secs(60);

    #[test]
    fn deadlines_follow_the_phase() {
        let a = Arc::new(Activity::new());
        let (d, why) = a.deadline(HEADER, IDLE).unwrap();
        assert_eq!(why, Expiry::Header, "a new connection owes a head");
        assert!(d <= Instant::now() + HEADER);

        let guard = a.begin_request();
        assert!(a.deadline(HEADER, IDLE).is_none(), "no deadline while busy");
        assert!(!a.evictable());
        a.on_read();
        assert!(
            a.deadline(HEADER, IDLE).is_none(),
            "body bytes do not start a head"
        );
        drop(guard);

        let (d, why) = a.deadline(HEADER, IDLE).unwrap();
        assert_eq!(why, Expiry::Idle);
        assert!(
            d > Instant::now() + HEADER,
            "idle uses its own, longer timeout"
        );
        assert!(a.evictable());

        a.on_read();
        let (d, why) = a.deadline(HEADER, IDLE).unwrap();
        assert_eq!(why, Expiry::Header, "the first byte of the next head");
        assert!(d <= Instant::now() + HEADER);

        a.evict();
        assert!(a.is_evicted() && !a.evictable());
    }
}
