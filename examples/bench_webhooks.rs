//! Webhook delivery benchmark.
//!
//!     cargo run --release --example bench_webhooks -- [--endpoints 10] [--events 5000] [--rate 300] [--seconds 5]
//!     cargo run --release --example bench_webhooks -- --dead-endpoint [--pending 1000000] [--endpoints 10]
//!
//! Starts the service's state (with its delivery engine) on a fresh SQLite
//! database in a temporary directory, and again on a fresh PostgreSQL
//! database when `PIGEONHOLE_BENCH_POSTGRES_URL` names a server. A local
//! receiver on 127.0.0.1 answers 200 to every delivery and notes when each
//! arrived. `--postgres-only` skips the SQLite run.
//!
//! - Burst: `--events` events, each fanned out to `--endpoints` endpoints, are
//!   committed as fast as possible; reports successful deliveries per second
//!   (first commit to last arrival, and to the last attempt recorded).
//! - Latency: `--rate` events per second for `--seconds`, one per transaction;
//!   reports p50/p99 of event commit → first attempt arriving at the receiver.
//! - `--dead-endpoint`: first `--pending` events (1,000,000 by default) are
//!   fanned out to an endpoint that accepts connections and never answers
//!   (attempt timeout 30 s), then the two phases above run beside that
//!   backlog; RSS (from /proc/self/status) is sampled throughout.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::Uri;
use pigeonhole::app::AppState;
use pigeonhole::auth::{ApiKey, Reach, Scope};
use pigeonhole::config::Config;
use pigeonhole::dns_test_server::TestDnsServer;
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::sql;
use pigeonhole::store::{Backend, Db, RowExt};
use pigeonhole::webhooks::endpoints::{self, NewWebhook};
use serde_json::{Value, json};

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

/// Resident and peak memory of this process, from /proc/self/status.
fn rss() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kb| format!("{:.1} MiB", kb as f64 / 1024.0))
            .unwrap_or_else(|| "?".into())
    };
    format!("RSS {} (peak {})", field("VmRSS:"), field("VmHWM:"))
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// Arrivals at the receiver: (event number, when).
#[derive(Default)]
struct Arrivals {
    seen: Mutex<Vec<(u64, Instant)>>,
}

async fn receiver(arrivals: Arc<Arrivals>) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new().fallback(move |_uri: Uri, body: Bytes| {
        let arrivals = arrivals.clone();
        async move {
            let at = Instant::now();
            let n = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v["data"]["n"].as_u64())
                .unwrap_or(u64::MAX);
            if let Ok(mut s) = arrivals.seen.lock() {
                s.push((n, at));
            }
            "ok"
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(addr)
}

async fn database_url(postgres_admin: Option<&str>) -> anyhow::Result<String> {
    let name = format!("ph_bench_{}", pigeonhole::ids::random_token(10));
    if let Some(admin) = postgres_admin {
        return pigeonhole::store::create_postgres_database(admin, &name).await;
    }
    let dir = std::env::temp_dir().join("pigeonhole-bench");
    std::fs::create_dir_all(&dir)?;
    Ok(format!(
        "sqlite://{}",
        dir.join(format!("{name}.db")).display()
    ))
}

async fn drop_database(admin: &str, url: &str) {
    use sqlx::Connection;
    let Some(name) = url.rsplit('/').next().map(str::to_string) else {
        return;
    };
    if let Ok(mut conn) = sqlx::AnyConnection::connect(admin).await {
        let _ = sqlx::Executor::execute(
            &mut conn,
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str(),
        )
        .await;
    }
}

fn admin_key() -> ApiKey {
    ApiKey {
        id: "key_bench".into(),
        name: "bench".into(),
        scopes: Scope::ALL.to_vec(),
        reach: Reach::Account,
        rate_limit: None,
        created_at: 0,
        revoked_at: None,
    }
}

async fn count(db: &Db, query: &str) -> i64 {
    match pigeonhole::store::Sql::new(query)
        .fetch_one(db.reader())
        .await
    {
        Ok(r) => r.int("n").unwrap_or(-1),
        Err(_) => -1,
    }
}

/// Commits events `from..to` for the endpoints, `per_tx` to a transaction;
/// notes when each committed.
async fn emit_range(
    state: &AppState,
    from: u64,
    to: u64,
    per_tx: u64,
    committed: &Mutex<HashMap<u64, Instant>>,
) -> anyhow::Result<()> {
    let mut n = from;
    while n < to {
        let end = (n + per_tx).min(to);
        let mut tx = state.db.begin().await?;
        for i in n..end {
            pigeonhole::core::events::emit(
                &mut tx,
                pigeonhole::model::webhooks::EventName::EmailDelivered,
                None,
                json!({"n": i}),
            )
            .await?;
        }
        tx.commit().await?;
        let at = Instant::now();
        if let Ok(mut c) = committed.lock() {
            for i in n..end {
                c.insert(i, at);
            }
        }
        n = end;
    }
    Ok(())
}

async fn wait_arrivals(arrivals: &Arrivals, n: usize, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let got = arrivals.seen.lock().map(|s| s.len()).unwrap_or(0);
        if got >= n {
            return true;
        }
        if Instant::now() > deadline {
            println!("  timed out: {got} of {n} deliveries arrived");
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Waits until `n` successful deliveries of the healthy endpoints are recorded.
async fn wait_recorded(db: &Db, n: i64, limit: Duration) -> i64 {
    let deadline = Instant::now() + limit;
    loop {
        let got = count(
            db,
            "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE succeeded = 1 AND event = 'email.delivered'",
        )
        .await;
        if got >= n || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A "dead" endpoint: accepts connections and never answers, so every
/// attempt runs into the timeout (the worst case for everyone else).
async fn blackhole() -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    Ok(addr)
}

async fn run(postgres_admin: Option<&str>) -> anyhow::Result<()> {
    let endpoints_n = arg("--endpoints", 10);
    let events = arg("--events", 5_000) as u64;
    let rate = arg("--rate", 300) as u64;
    let seconds = arg("--seconds", 5) as u64;
    let dead = flag("--dead-endpoint");
    let pending = arg("--pending", 1_000_000) as u64;

    let url = database_url(postgres_admin).await?;
    let dns = TestDnsServer::start().await?;
    let mut settings: HashMap<String, String> = HashMap::new();
    settings.insert("PIGEONHOLE_DATABASE_URL".into(), url.clone());
    settings.insert("PIGEONHOLE_DNS_SERVERS".into(), dns.addr().to_string());
    settings.insert("PIGEONHOLE_SMTP_LISTEN".into(), String::new());
    // The receiver is on loopback.
    settings.insert("PIGEONHOLE_ENV".into(), "development".into());
    if dead {
        // Attempts at the dead endpoint hang this long: it stays enabled
        // (20 failures take about 90 s) and holds its slots meanwhile.
        settings.insert("PIGEONHOLE_WEBHOOK_TIMEOUT".into(), "30".into());
    }
    let config = Config::from_map(&settings)?;
    let db = Db::connect(&url).await?;
    let backend = match db.backend() {
        Backend::Sqlite => "SQLite",
        Backend::Postgres => "PostgreSQL",
    };
    println!("== {backend}: {endpoints_n} endpoints ({})", rss());
    let state = AppState::with_provider(config, db.clone(), Arc::new(Simulator::new(None))).await?;
    let arrivals = Arc::new(Arrivals::default());
    let addr = receiver(arrivals.clone()).await?;
    let key = admin_key();

    if dead {
        let dead_url = format!("http://{}/dead", blackhole().await?);
        let input = NewWebhook {
            url: Some(dead_url),
            events: None,
            mailbox_id: None,
            description: Some("dead".into()),
            enabled: Some(true),
        };
        let (w, _) = endpoints::create(&db, state.webhooks.sender(), &key, input)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = pigeonhole::clock::now_micros();
        let start = Instant::now();
        let payload = format!(
            "'{{\"type\":\"email.sent\",\"created_at\":\"{}\",\"data\":{{\"n\":' || x || '}}}}'",
            pigeonhole::clock::iso(now)
        );
        let insert = match db.backend() {
            Backend::Sqlite => format!(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {pending}) \
                 INSERT INTO events (id, type, mailbox_id, payload, created_at) \
                 SELECT 'evt_bench_' || x, 'email.sent', NULL, {payload}, {now} FROM c"
            ),
            Backend::Postgres => format!(
                "INSERT INTO events (id, type, mailbox_id, payload, created_at) \
                 SELECT 'evt_bench_' || x, 'email.sent', NULL, {payload}, {now} FROM generate_series(1, {pending}) AS x"
            ),
        };
        sqlx::raw_sql(&insert).execute(db.writer()).await?;
        println!(
            "  {pending} events written in {:.1} s ({})",
            start.elapsed().as_secs_f64(),
            rss()
        );
        let start = Instant::now();
        let mut next_report = Instant::now() + Duration::from_secs(5);
        loop {
            let left = count(
                &db,
                "SELECT COUNT(*) AS n FROM events WHERE dispatched_at IS NULL",
            )
            .await;
            if left == 0 {
                break;
            }
            if Instant::now() > next_report {
                println!("  fan-out: {left} events left ({})", rss());
                next_report = Instant::now() + Duration::from_secs(5);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let secs = start.elapsed().as_secs_f64();
        let tasks = count(&db, "SELECT COUNT(*) AS n FROM webhook_tasks").await;
        println!(
            "  fan-out of {pending} events: {secs:.1} s ({:.0} events/s); {tasks} attempts pending against the dead endpoint ({})",
            pending as f64 / secs,
            rss()
        );
        let row = sql!(
            "SELECT enabled, consecutive_failures FROM webhooks WHERE id = $1",
            &w.id
        )
        .fetch_one(db.reader())
        .await?;
        println!(
            "  dead endpoint: enabled={} consecutive_failures={}",
            row.int("enabled")?,
            row.int("consecutive_failures")?
        );
    }

    for k in 0..endpoints_n {
        let input = NewWebhook {
            url: Some(format!("http://{addr}/e{k}")),
            events: Some(vec!["email.delivered".into()]),
            mailbox_id: None,
            description: None,
            enabled: Some(true),
        };
        endpoints::create(&db, state.webhooks.sender(), &key, input)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let committed: Mutex<HashMap<u64, Instant>> = Mutex::new(HashMap::new());

    // Burst.
    let expected = (events as usize) * endpoints_n;
    let start = Instant::now();
    emit_range(&state, 0, events, 100, &committed).await?;
    let emitted = start.elapsed();
    let all_arrived = wait_arrivals(&arrivals, expected, Duration::from_secs(300)).await;
    let arrived = start.elapsed();
    let recorded_n = wait_recorded(&db, expected as i64, Duration::from_secs(120)).await;
    let recorded = start.elapsed();
    println!(
        "  burst: {events} events × {endpoints_n} endpoints = {expected} deliveries; events committed in {:.2} s",
        emitted.as_secs_f64()
    );
    println!(
        "  burst: {:.0} deliveries/s to the receiver (all arrived: {all_arrived}), {:.0} deliveries/s recorded ({recorded_n} successful records) ({})",
        expected as f64 / arrived.as_secs_f64(),
        recorded_n as f64 / recorded.as_secs_f64(),
        rss()
    );

    // Latency at a steady rate, one event per transaction.
    if let Ok(mut s) = arrivals.seen.lock() {
        s.clear();
    }
    if let Ok(mut c) = committed.lock() {
        c.clear();
    }
    let base = 1_000_000_000u64;
    let total = rate * seconds;
    let interval = Duration::from_secs_f64(1.0 / rate as f64);
    let start = Instant::now();
    for i in 0..total {
        let due = start + interval * (i as u32);
        let now = Instant::now();
        if due > now {
            tokio::time::sleep(due - now).await;
        }
        emit_range(&state, base + i, base + i + 1, 1, &committed).await?;
    }
    wait_arrivals(
        &arrivals,
        total as usize * endpoints_n,
        Duration::from_secs(60),
    )
    .await;
    let mut lat: Vec<Duration> = Vec::new();
    if let (Ok(seen), Ok(c)) = (arrivals.seen.lock(), committed.lock()) {
        for (n, at) in seen.iter() {
            if let Some(t) = c.get(n) {
                lat.push(at.saturating_duration_since(*t));
            }
        }
    }
    lat.sort();
    println!(
        "  latency at {rate} events/s × {endpoints_n} endpoints for {seconds} s ({} deliveries): commit → first attempt p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({})",
        lat.len(),
        percentile(&lat, 0.50),
        percentile(&lat, 0.99),
        percentile(&lat, 1.0),
        rss()
    );
    // Where the time went: event written → fanned out → first attempt started.
    let stages = pigeonhole::store::Sql::new(
        "SELECT CAST(AVG(e.dispatched_at - e.created_at) AS DOUBLE PRECISION) AS fan, MAX(e.dispatched_at - e.created_at) AS fan_max, \
         CAST(AVG(d.created_at - e.dispatched_at) AS DOUBLE PRECISION) AS claim, MAX(d.created_at - e.dispatched_at) AS claim_max \
         FROM events e JOIN webhook_deliveries d ON d.event_id = e.id \
         WHERE e.type = 'email.delivered' AND d.attempt = 1",
    )
    .fetch_one(db.reader())
    .await;
    if let Ok(r) = stages {
        let ms = |c: &str| {
            use sqlx::Row;
            r.try_get::<f64, _>(c)
                .or_else(|_| r.try_get::<i64, _>(c).map(|v| v as f64))
                .map(|v| format!("{:.1}", v / 1000.0))
                .unwrap_or_else(|_| "?".into())
        };
        println!(
            "  stages (all phases): written → fanned out avg {} ms (max {}), fanned out → attempt avg {} ms (max {})",
            ms("fan"),
            ms("fan_max"),
            ms("claim"),
            ms("claim_max")
        );
    }
    if dead {
        let tasks = count(&db, "SELECT COUNT(*) AS n FROM webhook_tasks").await;
        println!(
            "  still pending against the dead endpoint: {tasks} ({})",
            rss()
        );
    }

    if dead {
        // Attempts at the dead endpoint would hold a graceful stop for the
        // whole timeout.
        state.webhooks.kill();
    } else {
        state.webhooks.shutdown().await;
    }
    db.close().await;
    if let Some(admin) = postgres_admin {
        drop_database(admin, &url).await;
    } else if let Some(path) = url.strip_prefix("sqlite://") {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{path}{suffix}"));
        }
    }
    Ok(())
}

// The service binary's allocator (see src/main.rs): measure what it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    pigeonhole::init_tls();
    if !flag("--postgres-only") {
        run(None).await?;
    }
    if let Ok(admin) = std::env::var("PIGEONHOLE_BENCH_POSTGRES_URL")
        && !admin.is_empty()
    {
        run(Some(&admin)).await?;
    }
    Ok(())
}
