//! Memory under large messages: starts the release binary (`pigeonhole
//! serve`) on loopback with a fresh database, then
//!
//! 1. fires `--smtp` (50) messages of `--smtp-mib` (25) MiB at its SMTP
//!    listener at once, each on its own connection, retrying a `452` after
//!    `--retry-ms` (250) until it is stored, while a probe runs a normal
//!    small SMTP session (greeting → EHLO → MAIL → RCPT → DATA → 250) every
//!    quarter second;
//! 2. restarts it on another fresh database and fires `--http` (20)
//!    `POST /api/v1/emails` of `--http-mib` (29) MiB (one base64 attachment)
//!    at once, retrying a `503` after its `Retry-After`, while a probe sends a
//!    small message every quarter second;
//!
//! and prints, for each, the server's peak resident memory (the kernel's
//! VmHWM of the child process, and the highest VmRSS sampled every 10 ms),
//! how many messages were accepted at once and how many times the server said
//! "try later", the probe's latencies, and what was stored.
//!
//! ```text
//! cargo build --release
//! cargo run --release --example bench_memory -- [--smtp 50] [--smtp-mib 25] [--http 20] [--http-mib 29]
//!     [--text] [--idempotency] [--only smtp|http]
//! ```
//!
//! `--text` makes the SMTP messages one large text/plain body instead of an
//! attachment. `PIGEONHOLE_BENCH_BIN` names the server binary (default:
//! `pigeonhole` beside the example's directory, i.e. `target/release/`).
//! SQLite in a temporary directory, or PostgreSQL when
//! `PIGEONHOLE_BENCH_POSTGRES_URL` names a server (a fresh database per
//! phase). Other `PIGEONHOLE_*` variables (say
//! `PIGEONHOLE_MESSAGE_MEMORY_BUDGET`) reach the server unchanged.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine as _;
use pigeonhole::core::mailboxes::{self, Mailbox};
use pigeonhole::sql;
use pigeonhole::store::{Db, RowExt};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

const MIB: usize = 1024 * 1024;
/// Give up on a message (and report it) after this long.
const DEADLINE: Duration = Duration::from_secs(300);
const PROBE_EVERY: Duration = Duration::from_millis(250);

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

fn text_arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

async fn database_url(phase: &str) -> anyhow::Result<String> {
    let name = format!("ph_bench_mem_{phase}_{}", pigeonhole::ids::random_token(8));
    if let Ok(admin) = std::env::var("PIGEONHOLE_BENCH_POSTGRES_URL") {
        return pigeonhole::store::create_postgres_database(&admin, &name).await;
    }
    let dir = std::env::temp_dir().join("pigeonhole-bench");
    std::fs::create_dir_all(&dir)?;
    Ok(format!(
        "sqlite://{}",
        dir.join(format!("{name}.db")).display()
    ))
}

/// Removes a phase's SQLite files (gigabytes of messages); a PostgreSQL
/// database stays, as the other benchmarks leave theirs.
fn remove_database(url: &str) {
    if let Some(path) = url.strip_prefix("sqlite://") {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }
}

fn server_binary() -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("PIGEONHOLE_BENCH_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(|examples| examples.parent())
        .context("no directory above the example")?;
    let bin = dir.join("pigeonhole");
    anyhow::ensure!(
        bin.exists(),
        "{} is missing: run `cargo build --release` first, or set PIGEONHOLE_BENCH_BIN",
        bin.display()
    );
    Ok(bin)
}

fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// A verified domain `bench.test` with the mailbox `inbox@bench.test`, and
/// an API key; returns the key.
async fn prepare(url: &str) -> anyhow::Result<String> {
    let db = Db::connect(url).await?;
    let now = pigeonhole::clock::now_micros();
    sql!(
        "INSERT INTO domains (id, name, region, status, sending_enabled, dkim_status, dkim_origin, \
         dkim_tokens, mail_from_domain, mail_from_status, spf_verified, dmarc_verified, \
         inherited_from, auto_create_mailboxes, imported, last_checked_at, created_at) \
         VALUES ($1, 'bench.test', 'us-east-1', 'verified', 1, 'SUCCESS', 'AWS_SES', '[]', \
         'mail.bench.test', 'SUCCESS', 1, 1, NULL, 0, 0, $2, $2)",
        "dom_bench",
        now
    )
    .execute(db.writer())
    .await?;
    let mut tx = db.begin().await?;
    mailboxes::insert(
        &mut tx,
        &Mailbox {
            id: "mbx_bench".into(),
            address: "inbox@bench.test".into(),
            domain: "bench.test".into(),
            domain_id: "dom_bench".into(),
            display_name: "Bench".into(),
            signature: None,
            is_catch_all: false,
            is_default: true,
            color: mailboxes::DEFAULT_COLOR.into(),
            created_at: now,
        },
    )
    .await?;
    tx.commit().await?;
    let key = pigeonhole::auth::create_key(
        &db,
        pigeonhole::auth::parse_new_key("bench", None, None, None, Some(u32::MAX))
            .map_err(|e| anyhow::anyhow!(e))?,
    )
    .await?
    .key;
    db.close().await;
    Ok(key)
}

/// The server under test, killed when dropped.
struct Server {
    child: std::process::Child,
    pid: u32,
    http: SocketAddr,
    smtp: SocketAddr,
}

impl Server {
    async fn start(url: &str) -> anyhow::Result<Server> {
        let (http, smtp) = (free_port()?, free_port()?);
        let child = std::process::Command::new(server_binary()?)
            .arg("serve")
            .env("PIGEONHOLE_DATABASE_URL", url)
            .env("PIGEONHOLE_LISTEN", http.to_string())
            .env("PIGEONHOLE_SMTP_LISTEN", smtp.to_string())
            .env("PIGEONHOLE_ENV", "development")
            .env("PIGEONHOLE_RATE_LIMIT", "1000000")
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::null())
            .spawn()?;
        let pid = child.id();
        let server = Server {
            child,
            pid,
            http,
            smtp,
        };
        let started = Instant::now();
        while TcpStream::connect(smtp).await.is_err() || TcpStream::connect(http).await.is_err() {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(30),
                "the server did not start listening"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(server)
    }

    /// (VmRSS, VmHWM) in bytes.
    fn memory(&self) -> (u64, u64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid)).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    async fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// Samples the server's VmRSS every 10 ms until told to stop; the highest.
fn sample_rss(server: &Server, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let pid = server.pid;
    tokio::spawn(async move {
        let mut peak = 0u64;
        let path = format!("/proc/{pid}/status");
        while !stop.load(Ordering::Relaxed) {
            if let Ok(status) = std::fs::read_to_string(&path)
                && let Some(kb) = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmRSS:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            {
                peak = peak.max(kb * 1024);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        peak
    })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

// ---------------------------------------------------------------------------
// SMTP
// ---------------------------------------------------------------------------

struct SmtpConn {
    rd: BufReader<OwnedReadHalf>,
    w: OwnedWriteHalf,
}

impl SmtpConn {
    /// Each connection comes from a loopback address of its own (127.3.x.y),
    /// as many senders' would: the server caps sessions per client address.
    async fn open(addr: SocketAddr) -> anyhow::Result<SmtpConn> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed) % 60_000;
        let source = std::net::Ipv4Addr::new(127, 3, (n / 250) as u8, (n % 250 + 1) as u8);
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(source.into(), 0))?;
        let stream = socket.connect(addr).await?;
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        let mut c = SmtpConn {
            rd: BufReader::new(r),
            w,
        };
        c.expect(220).await?;
        c.w.write_all(b"EHLO bench.client\r\n").await?;
        c.expect(250).await?;
        Ok(c)
    }

    async fn reply(&mut self) -> anyhow::Result<u16> {
        loop {
            let mut line = String::new();
            if self.rd.read_line(&mut line).await? == 0 {
                anyhow::bail!("the server closed the connection");
            }
            if line.as_bytes().get(3) == Some(&b'-') {
                continue;
            }
            return Ok(line.get(..3).and_then(|c| c.parse().ok()).unwrap_or(0));
        }
    }

    async fn expect(&mut self, want: u16) -> anyhow::Result<()> {
        let got = self.reply().await?;
        anyhow::ensure!(got == want, "expected {want}, got {got}");
        Ok(())
    }

    /// One transaction; the final reply code (452 at MAIL included).
    async fn send(&mut self, header: &[u8], body: &[u8]) -> anyhow::Result<u16> {
        let size = header.len() + body.len();
        self.w
            .write_all(format!("MAIL FROM:<sender@sender.test> SIZE={size}\r\n").as_bytes())
            .await?;
        let mail = self.reply().await?;
        if mail != 250 {
            return Ok(mail);
        }
        self.w
            .write_all(b"RCPT TO:<inbox@bench.test>\r\nDATA\r\n")
            .await?;
        self.expect(250).await?;
        self.expect(354).await?;
        self.w.write_all(header).await?;
        self.w.write_all(body).await?;
        self.w.write_all(b".\r\n").await?;
        self.reply().await
    }
}

/// The shared part of every large message: a small text part and an
/// attachment (or, with `text`, one text/plain body) up to `size` bytes.
fn large_body(size: usize, text: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + 1024);
    if text {
        out.extend_from_slice(b"Content-Type: text/plain; charset=utf-8\r\n\r\n");
        let mut n = 0u64;
        while out.len() + 80 < size {
            n += 1;
            out.extend_from_slice(
                format!(
                    "line {n} of a long letter, words words words {}\r\n",
                    n * 7919
                )
                .as_bytes(),
            );
        }
        return out;
    }
    out.extend_from_slice(
        b"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"BENCH\"\r\n\r\n\
          --BENCH\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nThe attached file, as promised.\r\n\
          --BENCH\r\nContent-Type: application/octet-stream; name=\"data.bin\"\r\n\
          Content-Disposition: attachment; filename=\"data.bin\"\r\n\
          Content-Transfer-Encoding: base64\r\n\r\n",
    );
    let tail = b"\r\n--BENCH--\r\n";
    // 57 bytes → one 76-character line and CRLF.
    let lines = (size - out.len() - tail.len()) / 78;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut chunk = [0u8; 57];
    for i in 0..lines {
        for b in chunk.iter_mut() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *b = seed as u8;
        }
        out.extend_from_slice(
            base64::engine::general_purpose::STANDARD
                .encode(chunk)
                .as_bytes(),
        );
        if i + 1 < lines {
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(tail);
    out
}

#[derive(Default)]
struct Tally {
    first_try: AtomicU64,
    accepted: AtomicU64,
    try_later: AtomicU64,
    failed: AtomicU64,
}

async fn smtp_client(
    addr: SocketAddr,
    n: usize,
    body: Arc<Vec<u8>>,
    retry: Duration,
    tally: Arc<Tally>,
) -> anyhow::Result<()> {
    let header = format!(
        "From: Sender {n} <sender{n}@sender.test>\r\nTo: inbox@bench.test\r\n\
         Subject: Large message {n}\r\nMessage-ID: <large-{n}@sender.test>\r\n\
         Date: Sun, 22 Nov 2026 10:00:00 +0000\r\n"
    );
    let started = Instant::now();
    let mut conn: Option<SmtpConn> = None;
    let mut attempt = 0;
    while started.elapsed() < DEADLINE {
        attempt += 1;
        let c = match conn.as_mut() {
            Some(c) => c,
            None => conn.insert(SmtpConn::open(addr).await?),
        };
        match c.send(header.as_bytes(), &body).await {
            Ok(250) => {
                tally.accepted.fetch_add(1, Ordering::Relaxed);
                if attempt == 1 {
                    tally.first_try.fetch_add(1, Ordering::Relaxed);
                }
                let _ = c.w.write_all(b"QUIT\r\n").await;
                return Ok(());
            }
            Ok(code) if code / 100 == 4 => {
                tally.try_later.fetch_add(1, Ordering::Relaxed);
                if code == 421 {
                    conn = None;
                }
            }
            Ok(code) => anyhow::bail!("message {n}: the server answered {code}"),
            // The server may close a connection it refused (421 at connect).
            Err(_) => conn = None,
        }
        tokio::time::sleep(retry).await;
    }
    tally.failed.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A normal small session, start to finish; how long it took.
async fn smtp_probe(addr: SocketAddr, i: usize) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let mut c = SmtpConn::open(addr).await?;
    let header = format!(
        "From: probe@sender.test\r\nTo: inbox@bench.test\r\nSubject: probe {i}\r\n\
         Message-ID: <probe-{i}@sender.test>\r\n\r\n"
    );
    let code = c
        .send(header.as_bytes(), b"A normal, small message.\r\n")
        .await?;
    anyhow::ensure!(code == 250, "the probe's message was answered {code}");
    let elapsed = t.elapsed();
    let _ = c.w.write_all(b"QUIT\r\n").await;
    Ok(elapsed)
}

/// Runs `probe` every quarter second until `stop`; latencies and failures.
fn probe_loop<F, Fut>(
    stop: Arc<AtomicBool>,
    probe: F,
) -> tokio::task::JoinHandle<(Vec<Duration>, Vec<String>)>
where
    F: Fn(usize) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<Duration>> + Send,
{
    tokio::spawn(async move {
        let (mut times, mut failures) = (Vec::new(), Vec::new());
        let mut i = 0;
        while !stop.load(Ordering::Relaxed) {
            i += 1;
            match tokio::time::timeout(Duration::from_secs(30), probe(i)).await {
                Ok(Ok(t)) => times.push(t),
                Ok(Err(e)) => failures.push(e.to_string()),
                Err(_) => failures.push("no answer within 30 s".into()),
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
        (times, failures)
    })
}

/// With `--max-rss-mib N` and `--max-probe-ms M` (as CI runs it), an error
/// when the peak RSS or the slowest small probe went past them, or a probe
/// failed.
fn check_bounds(
    what: &str,
    hwm: u64,
    times: &[Duration],
    failures: &[String],
) -> anyhow::Result<()> {
    let max_rss = arg("--max-rss-mib", 0) as u64;
    if max_rss > 0 {
        anyhow::ensure!(
            hwm <= max_rss * MIB as u64,
            "{what}: peak RSS {:.0} MiB is over {max_rss} MiB",
            mib(hwm)
        );
    }
    let max_probe = arg("--max-probe-ms", 0) as u128;
    if max_probe > 0 {
        anyhow::ensure!(failures.is_empty(), "{what}: probes failed: {failures:?}");
        let slowest = times.iter().max().map_or(0, Duration::as_millis);
        anyhow::ensure!(
            slowest <= max_probe,
            "{what}: the slowest small probe took {slowest} ms, over {max_probe} ms"
        );
    }
    Ok(())
}

fn latency_line(times: &mut [Duration], failures: &[String]) -> String {
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    if times.is_empty() {
        return format!("no probe finished; failures: {failures:?}");
    }
    let p50 = times[times.len() / 2];
    let over_1s = times.iter().filter(|t| t.as_secs_f64() >= 1.0).count();
    let mut line = format!(
        "{} probes, p50 {:.1} ms, max {:.1} ms, {over_1s} took 1 s or more",
        times.len(),
        ms(p50),
        ms(times[times.len() - 1])
    );
    if !failures.is_empty() {
        line.push_str(&format!(
            ", {} failed (first: {})",
            failures.len(),
            failures[0]
        ));
    }
    line
}

async fn smtp_phase(count: usize, size: usize, text: bool, retry: Duration) -> anyhow::Result<()> {
    let url = database_url("smtp").await?;
    prepare(&url).await?;
    let server = Server::start(&url).await?;
    let body = Arc::new(large_body(size, text));
    let (rss_idle, _) = server.memory();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_rss(&server, stop.clone());
    let smtp = server.smtp;
    let probes = probe_loop(stop.clone(), move |i| smtp_probe(smtp, i));
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let mut clients = Vec::new();
    for n in 0..count {
        clients.push(tokio::spawn(smtp_client(
            server.smtp,
            n,
            body.clone(),
            retry,
            tally.clone(),
        )));
    }
    let mut errors = Vec::new();
    for c in clients {
        if let Err(e) = c.await? {
            errors.push(e.to_string());
        }
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let sampled = sampler.await?;
    let (mut times, failures) = probes.await?;
    let (rss_after, hwm) = server.memory();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_settled, _) = server.memory();
    server.stop().await;

    let db = Db::connect(&url).await?;
    let row = sql!(
        "SELECT COUNT(*) AS n, CAST(COALESCE(SUM(LENGTH(raw)), 0) AS BIGINT) AS bytes FROM messages \
         WHERE direction = 'inbound' AND subject LIKE 'Large message %'"
    )
    .fetch_one(db.reader())
    .await?;
    let (stored, stored_bytes) = (row.int("n")?, row.int("bytes")?);
    db.close().await;
    remove_database(&url);

    println!(
        "SMTP: {count} × {:.1} MiB ({}) at once, backend {}",
        mib(body.len() as u64),
        if text {
            "one text/plain body"
        } else {
            "an attachment"
        },
        backend_name(&url)
    );
    println!(
        "  accepted at once: {}, told to try later (4xx): {} times, stored in the end: {} of {count} in {:.1} s{}",
        tally.first_try.load(Ordering::Relaxed),
        tally.try_later.load(Ordering::Relaxed),
        tally.accepted.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
        if errors.is_empty() {
            String::new()
        } else {
            format!(", client errors: {errors:?}")
        }
    );
    println!(
        "  server memory: idle {:.0} MiB, peak {:.0} MiB (VmHWM; sampled VmRSS peak {:.0} MiB), \
         {:.0} MiB right after, {:.0} MiB 2 s later",
        mib(rss_idle),
        mib(hwm),
        mib(sampled),
        mib(rss_after),
        mib(rss_settled)
    );
    println!(
        "  small session meanwhile: {}",
        latency_line(&mut times, &failures)
    );
    println!(
        "  stored rows: {stored}, raw bytes {:.1} MiB",
        mib(stored_bytes as u64)
    );
    check_bounds("SMTP", hwm, &times, &failures)?;
    anyhow::ensure!(
        stored as u64 == tally.accepted.load(Ordering::Relaxed),
        "{stored} stored but {} accepted",
        tally.accepted.load(Ordering::Relaxed)
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

/// A `POST /emails` body of about `size` bytes: one base64 attachment.
fn send_body(size: usize) -> Vec<u8> {
    let head = br#"{"from": "Bench <bench@bench.test>", "to": "success@simulator.amazonses.com", "subject": "Large send", "text": "The attached file, as promised.", "attachments": [{"filename": "data.bin", "content": ""#;
    let tail = br#""}]}"#;
    let raw_len = (size - head.len() - tail.len()) / 4 * 3;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let data: Vec<u8> = (0..raw_len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect();
    let mut out = head.to_vec();
    out.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(&data)
            .as_bytes(),
    );
    out.extend_from_slice(tail);
    out
}

async fn http_send(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    body: reqwest::Body,
    idempotency: bool,
) -> anyhow::Result<(u16, Option<u64>)> {
    let mut req = client
        .post(format!("{base}/api/v1/emails"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(body);
    if idempotency {
        req = req.header("Idempotency-Key", pigeonhole::ids::random_token(24));
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let _ = resp.bytes().await;
    Ok((status, retry_after))
}

async fn http_phase(count: usize, size: usize, idempotency: bool) -> anyhow::Result<()> {
    let url = database_url("http").await?;
    let key = prepare(&url).await?;
    let server = Server::start(&url).await?;
    let base = format!("http://{}", server.http);
    let body = axum::body::Bytes::from(send_body(size));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()?;
    let (rss_idle, _) = server.memory();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = sample_rss(&server, stop.clone());
    let probes = {
        let (client, base, key) = (client.clone(), base.clone(), key.clone());
        probe_loop(stop.clone(), move |i| {
            let (client, base, key) = (client.clone(), base.clone(), key.clone());
            async move {
                let t = Instant::now();
                let small = format!(
                    r#"{{"from": "bench@bench.test", "to": "success@simulator.amazonses.com", "subject": "probe {i}", "text": "small"}}"#
                );
                let (status, _) = http_send(&client, &base, &key, small.into(), false).await?;
                anyhow::ensure!(status == 202, "the probe's send was answered {status}");
                Ok(t.elapsed())
            }
        })
    };
    let tally = Arc::new(Tally::default());
    let started = Instant::now();
    let mut senders = Vec::new();
    for _ in 0..count {
        let (client, base, key, body, tally) = (
            client.clone(),
            base.clone(),
            key.clone(),
            body.clone(),
            tally.clone(),
        );
        senders.push(tokio::spawn(async move {
            let mut attempt = 0;
            while started.elapsed() < DEADLINE {
                attempt += 1;
                match http_send(&client, &base, &key, body.clone().into(), idempotency).await {
                    Ok((202, _)) => {
                        tally.accepted.fetch_add(1, Ordering::Relaxed);
                        if attempt == 1 {
                            tally.first_try.fetch_add(1, Ordering::Relaxed);
                        }
                        return Ok(());
                    }
                    Ok((503 | 429, retry_after)) => {
                        tally.try_later.fetch_add(1, Ordering::Relaxed);
                        let wait = Duration::from_secs(retry_after.unwrap_or(1).min(5));
                        tokio::time::sleep(wait).await;
                    }
                    Ok((status, _)) => anyhow::bail!("a large send was answered {status}"),
                    Err(e) => anyhow::bail!("a large send failed: {e}"),
                }
            }
            tally.failed.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }));
    }
    let mut errors = Vec::new();
    for s in senders {
        if let Err(e) = s.await? {
            errors.push(e.to_string());
        }
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let sampled = sampler.await?;
    let (mut times, failures) = probes.await?;
    let (rss_after, hwm) = server.memory();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (rss_settled, _) = server.memory();
    server.stop().await;

    let db = Db::connect(&url).await?;
    let row = sql!(
        "SELECT COUNT(*) AS n, CAST(COALESCE(SUM(a.size), 0) AS BIGINT) AS bytes FROM messages m \
         JOIN attachments a ON a.message_id = m.id WHERE m.subject = 'Large send' \
         AND m.status IN ('sent', 'delivered')"
    )
    .fetch_one(db.reader())
    .await?;
    let (stored, stored_bytes) = (row.int("n")?, row.int("bytes")?);
    db.close().await;
    remove_database(&url);

    println!(
        "HTTP: {count} × {:.1} MiB POST /emails at once{}, backend {}",
        mib(body.len() as u64),
        if idempotency {
            " (each with an Idempotency-Key)"
        } else {
            ""
        },
        backend_name(&url)
    );
    println!(
        "  accepted at once: {}, told to try later (503/429): {} times, sent in the end: {} of {count} in {:.1} s{}",
        tally.first_try.load(Ordering::Relaxed),
        tally.try_later.load(Ordering::Relaxed),
        tally.accepted.load(Ordering::Relaxed),
        elapsed.as_secs_f64(),
        if errors.is_empty() {
            String::new()
        } else {
            format!(", errors: {errors:?}")
        }
    );
    println!(
        "  server memory: idle {:.0} MiB, peak {:.0} MiB (VmHWM; sampled VmRSS peak {:.0} MiB), \
         {:.0} MiB right after, {:.0} MiB 2 s later",
        mib(rss_idle),
        mib(hwm),
        mib(sampled),
        mib(rss_after),
        mib(rss_settled)
    );
    println!(
        "  small send meanwhile: {}",
        latency_line(&mut times, &failures)
    );
    println!(
        "  recorded sends with their attachment: {stored}, attachment bytes {:.1} MiB",
        mib(stored_bytes as u64)
    );
    check_bounds("HTTP", hwm, &times, &failures)?;
    Ok(())
}

fn backend_name(url: &str) -> &'static str {
    if url.starts_with("sqlite") {
        "SQLite"
    } else {
        "PostgreSQL"
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    pigeonhole::init_tls();
    let only = text_arg("--only");
    let retry = Duration::from_millis(arg("--retry-ms", 250) as u64);
    if only.as_deref() != Some("http") {
        smtp_phase(
            arg("--smtp", 50),
            arg("--smtp-mib", 25) * MIB,
            flag("--text"),
            retry,
        )
        .await?;
    }
    if only.as_deref() != Some("smtp") {
        http_phase(
            arg("--http", 20),
            arg("--http-mib", 29) * MIB,
            flag("--idempotency"),
        )
        .await?;
    }
    Ok(())
}
