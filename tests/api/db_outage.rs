//! PostgreSQL going away (issue 15): the app reaches the database through a
//! TCP proxy the test cuts and restores. During the outage requests are 503
//! `server_error` with `Retry-After` and SMTP answers 451 4.3.0; nothing is
//! half written; the service recovers by itself once the database is back.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::helpers::{TestApp, spawn_app_with, start_smtp};
use crate::inbound::{send, test_config};

/// Forwards connections to the database while up; cut, it drops every open
/// connection and closes new ones at once (as a restarting server does).
struct Proxy {
    up: Arc<AtomicBool>,
    generation: watch::Sender<u64>,
}

impl Proxy {
    /// Listens on a free port; returns the proxy and that port.
    fn start(upstream: SocketAddr) -> (Proxy, u16) {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let port = std_listener.local_addr().expect("proxy addr").port();
        let listener = TcpListener::from_std(std_listener).expect("tokio listener");
        let up = Arc::new(AtomicBool::new(true));
        let (generation, _) = watch::channel(0u64);
        let proxy = Proxy {
            up: up.clone(),
            generation: generation.clone(),
        };
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !up.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let mut cut = generation.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        (proxy, port)
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

/// An app whose database connections go through a [`Proxy`]; `None` on
/// SQLite, which has no server to lose.
async fn app_behind_proxy() -> Option<(TestApp, Proxy)> {
    if std::env::var("PIGEONHOLE_TEST_POSTGRES_URL").is_err() {
        eprintln!("skipping: needs PostgreSQL (PIGEONHOLE_TEST_POSTGRES_URL)");
        return None;
    }
    let mut proxy = None;
    let app = spawn_app_with(|settings| {
        let url = settings["PIGEONHOLE_DATABASE_URL"].clone();
        let mut parsed = url::Url::parse(&url).expect("database URL");
        let upstream: SocketAddr = format!(
            "{}:{}",
            parsed.host_str().expect("host"),
            parsed.port().unwrap_or(5432)
        )
        .parse()
        .expect("a numeric database host");
        let (p, port) = Proxy::start(upstream);
        parsed.set_host(Some("127.0.0.1")).expect("host");
        parsed.set_port(Some(port)).expect("port");
        settings.insert("PIGEONHOLE_DATABASE_URL".into(), parsed.to_string());
        proxy = Some(p);
    })
    .await;
    Some((app, proxy.expect("proxy started")))
}

fn email(subject: &str) -> serde_json::Value {
    json!({"from": "team@ours.test", "to": "someone@else.test", "subject": subject, "text": "hello"})
}

#[tokio::test]
async fn a_database_outage_is_503_with_retry_after_and_the_service_recovers_by_itself() {
    let Some((app, proxy)) = app_behind_proxy().await else {
        return;
    };
    app.verified_domain("ours.test").await;
    app.mailbox("inbox@ours.test").await;
    let smtp = start_smtp(&app, test_config()).await;
    let before = app.post("/api/v1/emails", email("before")).await;
    assert_eq!(before.status, 202, "{}", before.text);

    proxy.cut();
    let started = Instant::now();
    for (what, r) in [
        ("send", app.post("/api/v1/emails", email("during")).await),
        ("list", app.get("/api/v1/emails").await),
        ("read", app.get("/api/v1/threads").await),
    ] {
        assert_eq!(r.status, 503, "{what}: {}", r.text);
        assert_eq!(r.body["code"], "server_error", "{what}: {}", r.text);
        assert_eq!(
            r.body["error"], "the database is unavailable; retry shortly",
            "{what}: no driver detail reaches the client"
        );
        assert_eq!(r.header("retry-after"), Some("1"), "{what}");
    }
    let ready = app.get("/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.text);
    // The pool gives up on an unreachable server after its acquire timeout.
    assert!(
        started.elapsed() < Duration::from_secs(40),
        "{:?}",
        started.elapsed()
    );
    // Inbound mail is deferred, not accepted and lost.
    let deferred = send(
        smtp.addr,
        "a@x.test",
        &["inbox@ours.test"],
        "Subject: during\n\nhello\n",
    )
    .await;
    let refused = deferred["rcpt"][0].clone();
    assert_eq!(refused[0], 451, "{deferred}");
    assert!(
        refused[1].as_str().is_some_and(|t| t.starts_with("4.3.0")),
        "{deferred}"
    );

    proxy.restore();
    let deadline = Instant::now() + Duration::from_secs(15);
    let after = loop {
        let r = app.post("/api/v1/emails", email("after")).await;
        if r.status == 202 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        after.status, 202,
        "recovered without a restart: {}",
        after.text
    );
    let stored = send(
        smtp.addr,
        "a@x.test",
        &["inbox@ours.test"],
        "Subject: after\n\nhello\n",
    )
    .await;
    assert_eq!(stored["data"][0], 250, "{stored}");

    // Nothing of the refused send was written, half or whole.
    let subjects: Vec<String> = app
        .list_all("/api/v1/emails")
        .await
        .iter()
        .map(|e| e["subject"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(subjects.len(), 2, "{subjects:?}");
    assert!(subjects.contains(&"before".to_string()), "{subjects:?}");
    assert!(subjects.contains(&"after".to_string()), "{subjects:?}");
    let received = app.get("/api/v1/messages").await;
    assert_eq!(received.status, 200, "{}", received.text);
    assert_eq!(
        received.body["data"].as_array().map(Vec::len),
        Some(1),
        "{}",
        received.text
    );
}

/// Runs `pragma` on the write pool's connection (everything but sends and
/// inbound mail) and, if `group_writer_too`, the group writer's.
async fn set_on_writers(app: &TestApp, pragma: &str, group_writer_too: bool) {
    use pigeonhole::store::Sql;
    if group_writer_too {
        app.db.write_statement(Sql::new(pragma)).await.unwrap();
    }
    Sql::new(pragma).execute(app.db.writer()).await.unwrap();
}

/// How many drafts and received messages are listed (reads must go on).
async fn drafts_and_received(app: &TestApp) -> (usize, usize) {
    let (d, r) = (
        app.get("/api/v1/drafts").await,
        app.get("/api/v1/messages").await,
    );
    assert_eq!(d.status, 200, "reads go on: {}", d.text);
    assert_eq!(r.status, 200, "reads go on: {}", r.text);
    (
        d.body["data"].as_array().map_or(0, Vec::len),
        r.body["data"].as_array().map_or(0, Vec::len),
    )
}

/// SQLite out of space and read-only (issue 15): the writer's connection is
/// capped at the pages the file has (`max_page_count`, which SQLite answers
/// with `SQLITE_FULL` as it does a full disk) or made read-only
/// (`query_only`). Writes are refused with 507 or 503 and `Retry-After`,
/// inbound mail is deferred, reads go on, nothing is half written, and the
/// same requests succeed once space returns, without a restart.
#[tokio::test]
async fn sqlite_out_of_space_is_507_read_only_is_503_and_both_recover() {
    use pigeonhole::sql;
    use pigeonhole::store::RowExt;
    if std::env::var("PIGEONHOLE_TEST_POSTGRES_URL").is_ok() {
        return; // SQLite's own faults
    }
    let app = spawn_app_with(|_| {}).await;
    app.verified_domain("ours.test").await;
    app.mailbox("inbox@ours.test").await;
    let smtp = start_smtp(&app, test_config()).await;
    // Large enough to need new pages whatever the free list holds.
    let big = "words ".repeat(100_000);
    let draft =
        json!({"from": "inbox@ours.test", "to": "ann@x.test", "subject": "big", "text": big});
    let mail = format!(
        "Subject: big\n\n{}",
        "words words words words\n".repeat(25_000)
    );
    // Read-only is set on the write pool's connection alone: the group
    // writer could then not even begin the statement that lifts it.
    for (round, (fault, on, off, status, group_writer_too)) in [
        (
            "out of space",
            "PRAGMA max_page_count = {pages}",
            "PRAGMA max_page_count = 1073741823",
            507,
            true,
        ),
        (
            "read-only",
            "PRAGMA query_only = ON",
            "PRAGMA query_only = OFF",
            503,
            false,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let pages = app
            .db
            .write_fetch_optional(sql!("PRAGMA page_count"))
            .await
            .unwrap()
            .unwrap()
            .int("page_count")
            .unwrap();
        let on = on.replace("{pages}", &pages.to_string());
        set_on_writers(&app, &on, group_writer_too).await;
        let r = app.post("/api/v1/drafts", draft.clone()).await;
        let short = |r: &crate::helpers::Resp| r.text.chars().take(300).collect::<String>();
        assert_eq!(r.status, status, "{fault}: {}", short(&r));
        assert_eq!(r.body["code"], "server_error", "{fault}: {}", short(&r));
        assert_eq!(r.header("retry-after"), Some("30"), "{fault}");
        if group_writer_too {
            let deferred = send(smtp.addr, "a@x.test", &["inbox@ours.test"], &mail).await;
            let code = deferred["data"][0].as_u64().unwrap_or(0);
            assert!((400..500).contains(&code), "{fault}: {deferred}");
        }
        assert_eq!(
            drafts_and_received(&app).await,
            (round, round),
            "{fault}: nothing half written"
        );

        set_on_writers(&app, off, group_writer_too).await;
        let r = app.post("/api/v1/drafts", draft.clone()).await;
        assert_eq!(r.status, 201, "{fault}, recovered: {}", short(&r));
        let stored = send(smtp.addr, "a@x.test", &["inbox@ours.test"], &mail).await;
        assert_eq!(stored["data"][0], 250, "{fault}, recovered: {stored}");
        assert_eq!(
            drafts_and_received(&app).await,
            (round + 1, round + 1),
            "{fault}"
        );
    }
}
