//! The accept loop: admits each connection against the caps, serves it with
//! hyper's HTTP/1 connection, and closes it when its header or idle deadline
//! passes or a newcomer needs its place (request bodies have their own
//! deadline, see `body_deadline`). Graceful shutdown stops accepting and
//! lets requests in flight finish.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tower::ServiceExt;

use super::activity::{Activity, Expiry, GuardedBody, WatchedIo};
use super::body_deadline::DeadlineBody;
use super::counters::ConnectionCounters;
use super::limits::{Refusal, Registry, Slot};
use crate::model::error::{ErrorBody, ErrorCode};

/// hyper's own header-count limit, a backstop above the 100 headers the API
/// answers with a JSON 431 (see `api::edge`).
const HYPER_MAX_HEADERS: usize = 256;

/// Pending connections the kernel queues for the accept loop (it caps this at
/// net.core.somaxconn). tokio's default of 1024 overflowed under a reconnect
/// flood, and a dropped SYN costs a client a one-second retransmit.
const LISTEN_BACKLOG: u32 = 4096;

/// How long the accept loop pauses after an error such as EMFILE, so it does
/// not spin while descriptors are short.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

#[derive(Debug, Clone)]
pub struct ServeLimits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// 0: no per-address cap.
    pub max_connections_per_ip: usize,
    /// The API's own header and URI limits (answered with JSON by `api::edge`);
    /// hyper's read buffer is sized from them.
    pub max_header_bytes: usize,
    pub max_uri_bytes: usize,
}

impl ServeLimits {
    /// hyper's read buffer, and so its own (empty-bodied) 431: well above the
    /// API's limits, so those answer first, yet far below hyper's 400 KB
    /// default, which let each connection buffer that much of a head.
    fn read_buffer(&self) -> usize {
        2 * (self.max_header_bytes + self.max_uri_bytes) + 8192
    }
}

/// Binds the HTTP listener with a deep accept queue.
pub fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `router` on `listener` until `shutdown` resolves; then stops
/// accepting, closes idle connections and waits for requests in flight.
pub async fn serve(
    router: Router,
    listener: TcpListener,
    limits: ServeLimits,
    counters: Arc<ConnectionCounters>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let registry = Registry::new(limits.max_connections, limits.max_connections_per_ip);
    let mut builder = http1::Builder::new();
    // Our watchdog owns the header and idle deadlines; hyper's one timer would
    // measure both from the end of the previous response.
    builder
        .header_read_timeout(None)
        .max_headers(HYPER_MAX_HEADERS)
        .max_buf_size(limits.read_buffer());
    let builder = Arc::new(builder);
    let limits = Arc::new(limits);

    // Dropping `signal_rx` tells every connection to finish; each holds a
    // `close_rx` until it is gone.
    let (signal_tx, signal_rx) = watch::channel(());
    tokio::spawn(async move {
        shutdown.await;
        drop(signal_rx);
    });
    let (close_tx, close_rx) = watch::channel(());

    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    accept_error(e).await;
                    continue;
                }
            },
            () = signal_tx.closed() => break,
        };
        match registry.admit(peer.ip()) {
            Ok(admitted) => {
                if admitted.evicted {
                    counters.evicted.increment(1);
                }
                counters.open.increment(1.0);
                tokio::spawn(connection(
                    stream,
                    peer,
                    admitted.slot,
                    Connection {
                        router: router.clone(),
                        builder: builder.clone(),
                        limits: limits.clone(),
                        counters: counters.clone(),
                        signal_tx: signal_tx.clone(),
                        close_rx: close_rx.clone(),
                    },
                ));
            }
            Err(refusal) => {
                match refusal {
                    Refusal::PerIp => counters.refused_per_ip.increment(1),
                    Refusal::Full => counters.refused_full.increment(1),
                }
                refuse(stream, refusal);
            }
        }
    }
    drop(listener);
    drop(close_rx);
    close_tx.closed().await;
}

async fn accept_error(e: io::Error) {
    if matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "accept error");
    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
}

/// Tells a refused client why, if its socket takes the bytes at once, and
/// closes the connection.
fn refuse(stream: TcpStream, refusal: Refusal) {
    let (status, body) = refusal_reply(refusal);
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.try_write(reply.as_bytes());
}

/// The status line and the error body of a refused connection.
fn refusal_reply(refusal: Refusal) -> (&'static str, String) {
    let (status, error, code) = match refusal {
        Refusal::PerIp => (
            "429 Too Many Requests",
            "too many connections from this address",
            ErrorCode::RateLimited,
        ),
        Refusal::Full => (
            "503 Service Unavailable",
            "the server is at its connection limit",
            ErrorCode::ServerError,
        ),
    };
    let body = serde_json::to_string(&ErrorBody::new(error, code))
        .unwrap_or_else(|_| format!("{{\"error\":\"{error}\"}}"));
    (status, body)
}

/// What every connection task shares.
struct Connection {
    router: Router,
    builder: Arc<http1::Builder>,
    limits: Arc<ServeLimits>,
    counters: Arc<ConnectionCounters>,
    signal_tx: watch::Sender<()>,
    close_rx: watch::Receiver<()>,
}

async fn connection(stream: TcpStream, peer: SocketAddr, slot: Slot, shared: Connection) {
    let activity = slot.activity.clone();
    let service = ConnService {
        router: shared.router,
        peer,
        activity: activity.clone(),
        body_timeout: shared.limits.body_timeout,
    };
    let io = TokioIo::new(WatchedIo::new(stream, activity.clone()));
    let mut conn = pin!(shared.builder.serve_connection(io, service));
    let mut shutdown = pin!(shared.signal_tx.closed());
    let mut draining = false;
    let far = Duration::from_secs(86_400);
    let mut sleep = pin!(tokio::time::sleep(far));
    let (header, idle) = (shared.limits.header_timeout, shared.limits.idle_timeout);
    loop {
        if activity.is_evicted() {
            // Chosen while idle; should a request have begun meanwhile, it
            // finishes first.
            if !activity.is_busy() {
                break;
            }
            if !draining {
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
        }
        let wake = match activity.deadline(header, idle) {
            Some((at, why)) if at <= std::time::Instant::now() => {
                match why {
                    Expiry::Header => shared.counters.header_timeouts.increment(1),
                    Expiry::Idle => shared.counters.idle_timeouts.increment(1),
                }
                break;
            }
            Some((at, _)) => at.into(),
            None => tokio::time::Instant::now() + far,
        };
        sleep.as_mut().reset(wake);
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!(error = %e, %peer, "http connection ended");
                }
                break;
            }
            () = &mut sleep => {}
            () = activity.changed() => {}
            () = &mut shutdown, if !draining => {
                conn.as_mut().graceful_shutdown();
                draining = true;
            }
        }
    }
    shared.counters.open.decrement(1.0);
    drop(slot);
    drop(shared.close_rx);
}

/// The router for one connection: marks the connection busy for each request,
/// puts its body under the body deadline and gives handlers the peer address
/// as `ConnectInfo<SocketAddr>`.
struct ConnService {
    router: Router,
    peer: SocketAddr,
    activity: Arc<Activity>,
    body_timeout: Duration,
}

type ServeFuture = Pin<Box<dyn Future<Output = Result<Response<GuardedBody>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<GuardedBody>;
    type Error = Infallible;
    type Future = ServeFuture;

    fn call(&self, req: Request<Incoming>) -> ServeFuture {
        let guard = self.activity.begin_request();
        let mut req = req.map(|body| DeadlineBody::new(body, self.body_timeout));
        req.extensions_mut().insert(ConnectInfo(self.peer));
        let response = self.router.clone().oneshot(req);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| GuardedBody::new(body, guard)))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes the `json!` that built them wrote: `error`, then `code`.
    #[test]
    fn refusals_answer_the_error_body() {
        assert_eq!(
            refusal_reply(Refusal::PerIp),
            (
                "429 Too Many Requests",
                r#"{"error":"too many connections from this address","code":"rate_limited"}"#
                    .into()
            )
        );
        assert_eq!(
            refusal_reply(Refusal::Full),
            (
                "503 Service Unavailable",
                r#"{"error":"the server is at its connection limit","code":"server_error"}"#.into()
            )
        );
    }
}
