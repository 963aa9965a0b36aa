//! Connection flood, on loopback only: holds ~20,000 silent TCP connections
//! from many 127.x source addresses against a Pigeonhole server's HTTP and
//! SMTP listeners, and meanwhile measures how long `/healthz` and a normal SMTP
//! session (greeting, EHLO, QUIT) take. Connections the server closes are
//! opened again. Stops by itself after `--seconds`.
//!
//! ```text
//! cargo build --release --bin pigeonhole --example flood
//! cargo run --release --example flood -- [--connections 19000] [--seconds 30] [--smtp-share 20]
//! ```
//!
//! By default it starts `pigeonhole serve` itself (the binary next to this
//! example's directory, or `--server PATH`) on free loopback ports with a
//! fresh SQLite database, in its own process so that each side has its own
//! file limit, and stops it at the end. `--http ADDR --smtp ADDR` aim at a
//! server already running instead; both must be loopback addresses.
//! `--smtp-share` is the percentage of flood connections sent to SMTP.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpSocket, TcpStream};

/// Each source address holds at most this many flood connections (below the
/// server's default per-address cap of 128).
const PER_SOURCE: usize = 100;
/// A probe that takes longer than this counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn num(name: &str, default: u64) -> u64 {
    arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The source address of flood connection `i`: 127.1.x.y, `PER_SOURCE` each.
fn source(i: usize) -> SocketAddr {
    let n = (i / PER_SOURCE) as u32;
    let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 1, 0, 1)) + n);
    SocketAddr::new(IpAddr::V4(ip), 0)
}

async fn connect_from(from: SocketAddr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(from)?;
    socket.connect(to).await
}

#[derive(Default)]
struct Counts {
    opened: AtomicU64,
    closed_by_server: AtomicU64,
    connect_errors: AtomicU64,
    held: AtomicU64,
}

/// One flood slot: keeps a silent connection open until the deadline,
/// reconnecting whenever the server closes it.
async fn hold(i: usize, to: SocketAddr, until: Instant, counts: Arc<Counts>) {
    let from = source(i);
    while Instant::now() < until {
        let connected = tokio::time::timeout(Duration::from_secs(3), connect_from(from, to)).await;
        let mut stream = match connected {
            Ok(Ok(s)) => s,
            _ => {
                counts.connect_errors.fetch_add(1, Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        counts.opened.fetch_add(1, Relaxed);
        counts.held.fetch_add(1, Relaxed);
        let mut sink = [0u8; 512];
        let left = until.saturating_duration_since(Instant::now());
        let closed = tokio::time::timeout(left, async {
            loop {
                match stream.read(&mut sink).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        counts.held.fetch_sub(1, Relaxed);
        if closed.is_ok() {
            counts.closed_by_server.fetch_add(1, Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn healthz(to: SocketAddr) -> anyhow::Result<()> {
    let mut s = connect_from("127.0.0.1:0".parse()?, to).await?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: flood\r\nconnection: close\r\n\r\n")
        .await?;
    let mut reply = Vec::new();
    s.read_to_end(&mut reply).await?;
    anyhow::ensure!(reply.starts_with(b"HTTP/1.1 200"), "not a 200");
    Ok(())
}

async fn smtp_reply(
    rd: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    want: &str,
) -> anyhow::Result<()> {
    loop {
        let mut line = String::new();
        anyhow::ensure!(rd.read_line(&mut line).await? > 0, "closed");
        if line.as_bytes().get(3) != Some(&b'-') {
            anyhow::ensure!(line.starts_with(want), "expected {want}, got {line:?}");
            return Ok(());
        }
    }
}

async fn smtp_session(to: SocketAddr) -> anyhow::Result<()> {
    let s = connect_from("127.0.0.1:0".parse()?, to).await?;
    let (rd, mut wr) = s.into_split();
    let mut rd = BufReader::new(rd);
    smtp_reply(&mut rd, "220").await?;
    wr.write_all(b"EHLO flood.test\r\n").await?;
    smtp_reply(&mut rd, "250").await?;
    wr.write_all(b"QUIT\r\n").await?;
    smtp_reply(&mut rd, "221").await?;
    Ok(())
}

/// The server's connection metrics.
async fn connection_metrics(to: SocketAddr) -> anyhow::Result<String> {
    let mut s = connect_from("127.0.0.1:0".parse()?, to).await?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: flood\r\nconnection: close\r\n\r\n")
        .await?;
    let mut reply = String::new();
    s.read_to_string(&mut reply).await?;
    Ok(reply
        .lines()
        .filter(|l| l.starts_with("pigeonhole_http_connections"))
        .collect::<Vec<_>>()
        .join("\n"))
}

/// Latencies of successful probes, and the number of failed ones.
#[derive(Default)]
struct Probes {
    ok: Vec<Duration>,
    failed: usize,
}

impl Probes {
    async fn run<F: Future<Output = anyhow::Result<()>>>(&mut self, probe: F) {
        let started = Instant::now();
        match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(Ok(())) => self.ok.push(started.elapsed()),
            _ => self.failed += 1,
        }
    }

    fn summary(&mut self) -> String {
        self.ok.sort();
        let ms = |p: f64| {
            self.ok
                .get(((self.ok.len().saturating_sub(1)) as f64 * p).round() as usize)
                .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
        };
        format!(
            "{} ok, {} failed; p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
            self.ok.len(),
            self.failed,
            ms(0.5),
            ms(0.95),
            ms(1.0)
        )
    }
}

async fn probe_both(http: SocketAddr, smtp: SocketAddr, h: &mut Probes, s: &mut Probes) {
    h.run(healthz(http)).await;
    s.run(smtp_session(smtp)).await;
}

fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// The server this run started; stopped when dropped.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `pigeonhole serve` on free loopback ports.
fn start_server() -> anyhow::Result<(Server, SocketAddr, SocketAddr)> {
    let binary = match arg("--server") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::env::current_exe()?
            .parent()
            .and_then(|examples| examples.parent())
            .map(|dir| dir.join("pigeonhole"))
            .ok_or_else(|| anyhow::anyhow!("cannot locate the pigeonhole binary"))?,
    };
    let (http, smtp) = (free_port()?, free_port()?);
    let dir = std::env::temp_dir().join("pigeonhole-flood");
    std::fs::create_dir_all(&dir)?;
    let db = dir.join(format!("flood-{}.db", std::process::id()));
    let child = std::process::Command::new(&binary)
        .arg("serve")
        .env("PIGEONHOLE_ENV", "development")
        .env("PIGEONHOLE_LISTEN", http.to_string())
        .env("PIGEONHOLE_SMTP_LISTEN", smtp.to_string())
        .env(
            "PIGEONHOLE_DATABASE_URL",
            format!("sqlite://{}", db.display()),
        )
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", binary.display()))?;
    Ok((Server(child), http, smtp))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // This process holds the flood's sockets: it needs the file limit too.
    let fd_limit = pigeonhole::server::fd_limit::raise_to_hard_limit().unwrap_or(1024);
    let wanted = num("--connections", 19_000) as usize;
    let connections = wanted.min(fd_limit.saturating_sub(256) as usize);
    let seconds = num("--seconds", 30).clamp(1, 600);
    let smtp_share = num("--smtp-share", 20).min(100) as usize;

    let (_server, http, smtp) = match (arg("--http"), arg("--smtp")) {
        (Some(h), Some(s)) => (None, h.parse()?, s.parse()?),
        _ => {
            let (child, h, s) = start_server()?;
            (Some(child), h, s)
        }
    };
    let (http, smtp): (SocketAddr, SocketAddr) = (http, smtp);
    anyhow::ensure!(
        http.ip().is_loopback() && smtp.ip().is_loopback(),
        "the flood only targets loopback addresses"
    );

    // Wait for the server, then measure it at rest.
    let ready = Instant::now();
    while healthz(http).await.is_err() {
        anyhow::ensure!(ready.elapsed() < Duration::from_secs(20), "server not up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (mut rest_h, mut rest_s) = (Probes::default(), Probes::default());
    for _ in 0..10 {
        probe_both(http, smtp, &mut rest_h, &mut rest_s).await;
    }

    println!(
        "flood: {connections} connections ({smtp_share}% to SMTP) from {} source addresses for {seconds} s (file limit {fd_limit})",
        connections.div_ceil(PER_SOURCE)
    );
    let until = Instant::now() + Duration::from_secs(seconds);
    let counts = Arc::new(Counts::default());
    let mut tasks = tokio::task::JoinSet::new();
    let smtp_every = 100usize.checked_div(smtp_share).unwrap_or(usize::MAX);
    for i in 0..connections {
        let to = if i % smtp_every == 0 { smtp } else { http };
        tasks.spawn(hold(i, to, until, counts.clone()));
        if i % 500 == 499 {
            // Let the connects of this batch go out before the next.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    let (mut flood_h, mut flood_s) = (Probes::default(), Probes::default());
    let mut peak_held = 0;
    // Probe once the flood has ramped up, until the end.
    tokio::time::sleep(Duration::from_secs(2).min(Duration::from_secs(seconds) / 4)).await;
    while Instant::now() + Duration::from_millis(300) < until {
        peak_held = peak_held.max(counts.held.load(Relaxed));
        probe_both(http, smtp, &mut flood_h, &mut flood_s).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let stop = tokio::time::timeout(Duration::from_secs(10), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if stop.is_err() {
        tasks.abort_all();
    }

    println!("at rest:      /healthz {}", rest_h.summary());
    println!("at rest:      SMTP     {}", rest_s.summary());
    println!("under flood:  /healthz {}", flood_h.summary());
    println!("under flood:  SMTP     {}", flood_s.summary());
    match tokio::time::timeout(PROBE_TIMEOUT, connection_metrics(http)).await {
        Ok(Ok(m)) => println!("server:\n{m}"),
        _ => println!("server: /metrics unavailable"),
    }
    println!(
        "flood connections: {} opened, peak {} held at once, {} closed by the server, {} connect errors",
        counts.opened.load(Relaxed),
        peak_held,
        counts.closed_by_server.load(Relaxed),
        counts.connect_errors.load(Relaxed)
    );
    // `--require-healthz` (as CI runs it): every health check under the
    // flood must have answered.
    if std::env::args().any(|a| a == "--require-healthz") {
        anyhow::ensure!(
            flood_h.failed == 0 && rest_h.failed == 0,
            "/healthz failed under the flood"
        );
    }
    Ok(())
}
