//! Send benchmark: starts Pigeonhole on a fresh database with the simulator
//! provider and drives `POST /api/v1/emails` from 64 concurrent connections.
//!
//!     cargo run --release --example bench_send -- [--requests 20000] [--concurrency 64] [--idempotency]
//!
//! `--idempotency` gives every send its own `Idempotency-Key`. `--rate-limit
//! N` gives the key a limit of N calls a minute (default: none to speak of)
//! and `--rate-scope process` counts it in the process instead of for the
//! deployment (PostgreSQL's default; see the README's rate limits). `--log`
//! installs the service's `info` log subscriber (writing nowhere), so that
//! spans cost what they cost in production.
//!
//! Uses SQLite in a temporary directory, or PostgreSQL when
//! `PIGEONHOLE_BENCH_POSTGRES_URL` names a server (a fresh database is created).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pigeonhole::app::{self, AppState};
use pigeonhole::auth;
use pigeonhole::config::Config;
use pigeonhole::machine_cpu::MachineCpu;
use pigeonhole::store::Db;
use serde_json::json;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn database_url() -> anyhow::Result<String> {
    let name = format!("ph_bench_{}", pigeonhole::ids::random_token(10));
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

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

// The service binary's allocator (see src/main.rs): measure what it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let requests = arg("--requests", 20_000);
    let concurrency = arg("--concurrency", 64);
    let idempotency = std::env::args().any(|a| a == "--idempotency");
    if std::env::args().any(|a| a == "--log") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(std::io::sink)
            .init();
    }
    let url = database_url().await?;
    let backend = if url.starts_with("sqlite") {
        "SQLite"
    } else {
        "PostgreSQL"
    };
    let mut settings = HashMap::new();
    settings.insert("PIGEONHOLE_DATABASE_URL".to_string(), url.clone());
    settings.insert("PIGEONHOLE_SMTP_LISTEN".to_string(), String::new());
    let rate_limit = arg("--rate-limit", u32::MAX as usize);
    let rate_limit = u32::try_from(rate_limit).unwrap_or(u32::MAX);
    let args: Vec<String> = std::env::args().collect();
    if let Some(scope) = args
        .iter()
        .position(|a| a == "--rate-scope")
        .and_then(|i| args.get(i + 1))
    {
        settings.insert("PIGEONHOLE_RATE_LIMIT_SCOPE".to_string(), scope.clone());
    }
    let config = Config::from_map(&settings)?;
    let state = AppState::build(config).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let db: Db = state.db.clone();
    tokio::spawn(app::serve(state, listener, std::future::pending()));

    let key = auth::create_key(
        &db,
        auth::parse_new_key("bench", None, None, None, Some(rate_limit))
            .map_err(|e| anyhow::anyhow!(e))?,
    )
    .await?
    .key;
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency)
        .build()?;
    for path in [
        "/api/v1/domains",
        "/api/v1/domains/bench.example.com/verify",
    ] {
        let body = if path.ends_with("domains") {
            json!({"name": "bench.example.com"})
        } else {
            json!({})
        };
        client
            .post(format!("{base}{path}"))
            .bearer_auth(&key)
            .json(&body)
            .send()
            .await?;
    }
    let body = Arc::new(json!({
        "from": "Bench <bench@bench.example.com>",
        "to": ["success@simulator.amazonses.com"],
        "subject": "Benchmark message",
        "text": "Hello from the send benchmark.",
        "html": "<p>Hello from the <b>send benchmark</b>.</p>",
    }));

    // Warm up connections and caches.
    for _ in 0..concurrency {
        client
            .post(format!("{base}/api/v1/emails"))
            .bearer_auth(&key)
            .json(&*body)
            .send()
            .await?;
    }

    let cpu_before = MachineCpu::now();
    let started = Instant::now();
    let per_worker = requests / concurrency;
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (client, key, base, body) = (client.clone(), key.clone(), base.clone(), body.clone());
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per_worker);
            let mut errors = 0usize;
            for _ in 0..per_worker {
                let t = Instant::now();
                let mut request = client
                    .post(format!("{base}/api/v1/emails"))
                    .bearer_auth(&key)
                    .json(&*body);
                if idempotency {
                    request = request.header("Idempotency-Key", pigeonhole::ids::random_token(24));
                }
                match request.send().await {
                    Ok(r) if r.status().as_u16() == 202 => {
                        let _ = r.bytes().await;
                        lat.push(t.elapsed());
                    }
                    Ok(r) => {
                        errors += 1;
                        let status = r.status();
                        let body = r.text().await.unwrap_or_default();
                        eprintln!("failed: {status} {body}");
                    }
                    Err(e) => {
                        errors += 1;
                        eprintln!("failed: {e}");
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for w in workers {
        let (lat, e) = w.await?;
        all.extend(lat);
        errors += e;
    }
    let elapsed = started.elapsed();
    let cpu = MachineCpu::now()
        .zip(cpu_before)
        .map(|(now, before)| now.since(before));
    all.sort();
    println!(
        "backend: {backend}{}",
        if idempotency {
            ", an Idempotency-Key per send"
        } else {
            ""
        }
    );
    println!(
        "sends: {} ok, {errors} failed, {:.0} sends/s over {:.2}s with {concurrency} connections",
        all.len(),
        all.len() as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    println!(
        "latency: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&all, 0.50),
        percentile(&all, 0.99),
        percentile(&all, 1.0)
    );
    if let Some(cpu) = cpu {
        println!(
            "cpu: {:.0} ms of the whole machine per 1,000 sends (the database's included); \
             steal {:.1} % of the machine's time",
            cpu.busy_ms_per_1000(all.len()),
            cpu.steal_percent()
        );
    }

    // One batch of 100, timed end to end (five runs, best and worst shown).
    let batch: Vec<_> = (0..100).map(|_| (*body).clone()).collect();
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let r = client
            .post(format!("{base}/api/v1/emails/batch"))
            .bearer_auth(&key)
            .json(&batch)
            .send()
            .await?;
        let status = r.status();
        let _ = r.bytes().await;
        anyhow::ensure!(status.as_u16() == 202, "batch answered {status}");
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "batch of 100: best {:.1} ms, worst {:.1} ms",
        times[0].as_secs_f64() * 1000.0,
        times[times.len() - 1].as_secs_f64() * 1000.0
    );
    Ok(())
}
