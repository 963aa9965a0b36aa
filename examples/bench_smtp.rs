//! Inbound SMTP throughput: 8 concurrent clients over raw TCP deliver N
//! messages to the real listener, which parses, threads, indexes and stores
//! each one (with its `mail.received` event and contacts) before answering 250.
//! Each message's sender is checked (SPF, DKIM, DMARC) against a local DNS
//! server.
//!
//! ```text
//! cargo run --release --example bench_smtp -- [N] [DATABASE_URL] [--every M]
//! ```
//!
//! `--every M` prints the rate of each slice of M messages as the store
//! grows, and the last slice's rate against the first's (issue 16: ingest
//! that does not slow as the store grows).
//!
//! N defaults to 4000; the database defaults to a fresh SQLite file in the
//! temporary directory (pass a `postgres://…/db` URL of an empty database to
//! measure PostgreSQL). Every fourth message starts a conversation; the others
//! reply to it, half through In-Reply-To and half through the subject alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use pigeonhole::core::mailboxes::{self, Mailbox};
use pigeonhole::dns::Dns;
use pigeonhole::dns_test_server::TestDnsServer;
use pigeonhole::machine_cpu::MachineCpu;
use pigeonhole::smtp::{self, SmtpConfig};
use pigeonhole::sql;
use pigeonhole::store::{Db, RowExt};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

const CLIENTS: usize = 8;
const PER_THREAD: usize = 4;

async fn reply(rd: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> anyhow::Result<u16> {
    loop {
        let mut line = String::new();
        if rd.read_line(&mut line).await? == 0 {
            anyhow::bail!("server closed the connection");
        }
        if line.as_bytes().get(3) == Some(&b'-') {
            continue;
        }
        return Ok(line.get(..3).and_then(|c| c.parse().ok()).unwrap_or(0));
    }
}

async fn expect(
    rd: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    want: u16,
) -> anyhow::Result<()> {
    let got = reply(rd).await?;
    anyhow::ensure!(got == want, "expected {want}, got {got}");
    Ok(())
}

fn message(client: usize, i: usize) -> (String, String) {
    let conversation = i / PER_THREAD;
    let position = i % PER_THREAD;
    let id = format!("<bench-{client}-{i}@sender.test>");
    let topic = format!("Topic {client}-{conversation}");
    let (subject, threading) = match position {
        0 => (topic, String::new()),
        p if p % 2 == 1 => (
            format!("Re: {topic}"),
            format!(
                "In-Reply-To: <bench-{client}-{}@sender.test>\r\nReferences: <bench-{client}-{}@sender.test>\r\n",
                i - 1,
                conversation * PER_THREAD
            ),
        ),
        _ => (format!("RE: {topic}"), String::new()),
    };
    let body = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    let raw = format!(
        "From: Sender {client} <sender{client}@sender.test>\r\nTo: inbox@bench.test\r\nCc: other{client}@sender.test\r\n\
         Subject: {subject}\r\nMessage-ID: {id}\r\n{threading}Date: Sun, 22 Nov 2026 10:00:00 +0000\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n"
    );
    (id, raw)
}

/// Prints the rate of each slice of `every` messages answered, as the count
/// crosses it; returns the rates.
async fn report_slices(done: Arc<AtomicUsize>, every: usize, total: usize) -> Vec<f64> {
    let mut rates = Vec::new();
    let mut slice_start = Instant::now();
    let mut next = every.min(total);
    let mut last = 0;
    while last < total {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let now_done = done.load(Ordering::Relaxed);
        if now_done < next {
            continue;
        }
        // The crossing is seen up to 20 ms late: the slice is counted as
        // what was answered since the last one.
        let rate = (now_done - last) as f64 / slice_start.elapsed().as_secs_f64();
        println!("messages {last:>9} to {now_done:>9}: {rate:.0} msg/s");
        rates.push(rate);
        slice_start = Instant::now();
        last = now_done;
        next = (now_done + every).min(total);
    }
    rates
}

async fn client(
    addr: std::net::SocketAddr,
    client: usize,
    count: usize,
    done: Arc<AtomicUsize>,
) -> anyhow::Result<usize> {
    let mut accepted = 0;
    let mut i = 0;
    while i < count {
        // A session lasts at most the server's session time limit: told
        // 421, a client connects again and sends the message anew, as an
        // MTA does.
        let (mut rd, mut w) = connect(addr).await?;
        while i < count {
            match send_one(&mut rd, &mut w, client, i).await? {
                None => break,
                Some(code) => {
                    if code == 250 {
                        accepted += 1;
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            }
        }
        if i == count {
            w.write_all(b"QUIT\r\n").await?;
            let _ = reply(&mut rd).await;
        }
    }
    Ok(accepted)
}

type Session = (
    BufReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
);

async fn connect(addr: std::net::SocketAddr) -> anyhow::Result<Session> {
    let stream = TcpStream::connect(addr).await?;
    // As a mail client does: without it, the small write that ends DATA
    // waits on a delayed ACK and the benchmark measures Nagle, not us.
    stream.set_nodelay(true)?;
    let (r, mut w) = stream.into_split();
    let mut rd = BufReader::new(r);
    expect(&mut rd, 220).await?;
    w.write_all(b"EHLO bench.client\r\n").await?;
    expect(&mut rd, 250).await?;
    Ok((rd, w))
}

/// Sends message `i`: the final reply's code, or None when the server
/// closed the session (421) before it.
async fn send_one(
    rd: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: &mut tokio::net::tcp::OwnedWriteHalf,
    client: usize,
    i: usize,
) -> anyhow::Result<Option<u16>> {
    let (_, raw) = message(client, i);
    // PIPELINING: the envelope in one write.
    w.write_all(
        format!(
            "MAIL FROM:<sender{client}@sender.test> SIZE={}\r\nRCPT TO:<inbox@bench.test>\r\nDATA\r\n",
            raw.len()
        )
        .as_bytes(),
    )
    .await?;
    for want in [250, 250, 354] {
        match reply(rd).await? {
            421 => return Ok(None),
            got => anyhow::ensure!(got == want, "expected {want}, got {got}"),
        }
    }
    w.write_all(format!("{raw}.\r\n").as_bytes()).await?;
    match reply(rd).await? {
        421 => Ok(None),
        code => Ok(Some(code)),
    }
}

// The service binary's allocator (see src/main.rs): measure what it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let all: Vec<String> = std::env::args().collect();
    let every: Option<usize> = all
        .iter()
        .position(|a| a == "--every")
        .and_then(|i| all.get(i + 1))
        .and_then(|n| n.parse().ok())
        .filter(|n| *n > 0);
    let args: Vec<&String> = all
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && (*i == 0 || all[i - 1] != "--every"))
        .map(|(_, a)| a)
        .collect();
    let total: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(4000);
    let url = match args.get(2).map(|u| u.to_string()) {
        Some(u) => u,
        None => {
            let path = std::env::temp_dir().join(format!(
                "pigeonhole-bench-{}.db",
                pigeonhole::ids::random_token(8)
            ));
            format!("sqlite://{}", path.display())
        }
    };
    let db = Db::connect(&url).await?;
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

    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    // SPF, DKIM and DMARC are checked for every message, against a local
    // DNS server that publishes the senders' policies (never the internet).
    // A session reuses the SPF result and DMARC policy of its sender.
    let dns_server = TestDnsServer::start().await?;
    dns_server.set_txt("sender.test", &["v=spf1 ip4:127.0.0.1 -all"]);
    dns_server.set_txt("_dmarc.sender.test", &["v=DMARC1; p=reject"]);
    let dns = Arc::new(Dns::new(Some(&[dns_server.addr()]))?);
    let server = tokio::spawn(smtp::run(
        listener,
        db.clone(),
        dns,
        SmtpConfig {
            hostname: "bench.mx".into(),
            ..SmtpConfig::default()
        },
        async move {
            let _ = stop_rx.await;
        },
    ));

    let per_client = total.div_ceil(CLIENTS);
    let cpu_before = MachineCpu::now();
    let started = Instant::now();
    let done = Arc::new(AtomicUsize::new(0));
    let slices = every.map(|every| tokio::spawn(report_slices(done.clone(), every, total)));
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let count = per_client.min(total.saturating_sub(c * per_client));
        tasks.push(tokio::spawn(client(addr, c, count, done.clone())));
    }
    let mut accepted = 0;
    for t in tasks {
        accepted += t.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = MachineCpu::now()
        .zip(cpu_before)
        .map(|(now, before)| now.since(before));
    if let Some(slices) = slices {
        let rates = slices.await?;
        if let (Some(first), Some(last)) = (rates.first(), rates.last()) {
            println!(
                "last slice against the first: {last:.0} / {first:.0} msg/s = {:.0} %",
                last / first * 100.0
            );
        }
    }
    let _ = stop_tx.send(());
    let _ = server.await;

    let stored = sql!("SELECT COUNT(*) AS n FROM messages WHERE direction = 'inbound'")
        .fetch_one(db.reader())
        .await?
        .int("n")?;
    let threads = sql!("SELECT COUNT(*) AS n FROM threads")
        .fetch_one(db.reader())
        .await?
        .int("n")?;
    let events = sql!("SELECT COUNT(*) AS n FROM events WHERE type = 'mail.received'")
        .fetch_one(db.reader())
        .await?
        .int("n")?;
    let expected_threads: usize = (0..CLIENTS)
        .map(|c| {
            per_client
                .min(total.saturating_sub(c * per_client))
                .div_ceil(PER_THREAD)
        })
        .sum();
    println!(
        "backend: {:?}\nclients: {CLIENTS}\nmessages accepted: {accepted}/{total} in {elapsed:.2} s = {:.0} msg/s\n\
         stored: {stored}, mail.received events: {events}, threads: {threads} (expected {expected_threads})",
        db.backend(),
        accepted as f64 / elapsed,
    );
    if let Some(cpu) = cpu {
        println!(
            "cpu: {:.0} ms of the whole machine per 1,000 messages (the database's included); \
             steal {:.1} % of the machine's time",
            cpu.busy_ms_per_1000(accepted),
            cpu.steal_percent()
        );
    }
    anyhow::ensure!(
        stored as usize == accepted && threads as usize == expected_threads,
        "stored or threaded wrongly"
    );
    let raw = sql!("SELECT raw FROM messages WHERE direction = 'inbound' LIMIT 1")
        .fetch_one(db.reader())
        .await?
        .bytes("raw")?;
    let raw = String::from_utf8_lossy(&raw);
    anyhow::ensure!(
        raw.contains("\tspf=pass smtp.mailfrom=") && raw.contains("\tdmarc=pass (p=reject)"),
        "no spf=pass and dmarc=pass in the stored message"
    );
    Ok(())
}
