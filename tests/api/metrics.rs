//! `/metrics`: each business figure, checked by a test that fails without
//! it; and one request followed through the log by its id.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::provider::{OutgoingMessage, Provider, ProviderError};
use pigeonhole::smtp::SmtpConfig;
use pigeonhole::store::Backend;
use serde_json::{Value, json};

use crate::helpers::{
    TestApp, Wrapped, Wrapping, spawn_app, spawn_app_with, spawn_app_with_provider,
};
use crate::inbound::{Raw, setup_with, test_config};
use crate::receiver::{Receiver, Reply, create_webhook, wait_deliveries};

const WAIT: Duration = Duration::from_secs(10);

pub(crate) async fn scrape(app: &TestApp) -> String {
    let r = app.call("GET", "/metrics", None, None).await;
    assert_eq!(r.status, 200);
    r.text
}

/// The value of one series (`name{labels}` exactly as rendered).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

pub(crate) fn must(text: &str, series: &str) -> f64 {
    value(text, series).unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

fn send_body(to: &str) -> Value {
    json!({"from": "team@example.com", "to": to, "subject": "Hi", "text": "Hello"})
}

/// The simulator, except for recipients whose local part names a failure.
struct ByRecipient(Simulator);

#[async_trait]
impl Wrapping for ByRecipient {
    fn inner(&self) -> &dyn Provider {
        &self.0
    }
    async fn send_raw(&self, m: &OutgoingMessage) -> Result<String, ProviderError> {
        let to = m.recipients.first().map(String::as_str).unwrap_or("");
        match to.split('@').next().unwrap_or("") {
            "reject" => Err(ProviderError::Rejected("not verified".into())),
            "throttle" => Err(ProviderError::Throttled {
                message: "slow down".into(),
                retry_after_secs: Some(1),
            }),
            "down" => Err(ProviderError::Unavailable("connection refused".into())),
            _ => self.0.send_raw(m).await,
        }
    }
}

#[tokio::test]
async fn sends_are_counted_by_status_and_provider_error_kind_and_timed() {
    let app = spawn_app_with_provider(
        |_| {},
        |_| Arc::new(Wrapped(ByRecipient(Simulator::new(None)))),
    )
    .await;
    app.verified_domain("example.com").await;
    let before = scrape(&app).await;
    // Every series of a fixed label set is there before the first send.
    assert_eq!(
        must(&before, "pigeonhole_sends_total{status=\"sent\"}"),
        0.0
    );
    assert_eq!(
        must(
            &before,
            "pigeonhole_send_provider_errors_total{kind=\"throttled\"}"
        ),
        0.0
    );
    for (to, status) in [
        ("a@b.com", 202),
        ("c@b.com", 202),
        ("reject@b.com", 422),
        ("throttle@b.com", 429),
        ("down@b.com", 503),
    ] {
        assert_eq!(
            app.post("/api/v1/emails", send_body(to)).await.status,
            status,
            "{to}"
        );
    }
    let text = scrape(&app).await;
    assert_eq!(must(&text, "pigeonhole_sends_total{status=\"sent\"}"), 2.0);
    assert_eq!(
        must(&text, "pigeonhole_sends_total{status=\"rejected\"}"),
        1.0
    );
    assert_eq!(
        must(&text, "pigeonhole_sends_total{status=\"failed\"}"),
        2.0
    );
    for (kind, n) in [
        ("rejected", 1.0),
        ("throttled", 1.0),
        ("unavailable", 1.0),
        ("not_found", 0.0),
    ] {
        let series = format!("pigeonhole_send_provider_errors_total{{kind=\"{kind}\"}}");
        assert_eq!(must(&text, &series), n, "{series}");
    }
    assert_eq!(
        must(
            &text,
            "pigeonhole_provider_send_duration_seconds_count{outcome=\"ok\"}"
        ),
        2.0
    );
    assert_eq!(
        must(
            &text,
            "pigeonhole_provider_send_duration_seconds_count{outcome=\"error\"}"
        ),
        3.0
    );
    assert!(
        text.contains(
            "pigeonhole_provider_send_duration_seconds_bucket{outcome=\"ok\",le=\"0.005\"}"
        )
    );
}

#[tokio::test]
async fn rate_limit_refusals_are_counted_by_limiter() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_RATE_LIMIT".into(), "1".into());
    })
    .await;
    assert_eq!(app.get("/api/v1/me").await.status, 200);
    assert_eq!(app.get("/api/v1/me").await.status, 429);
    assert_eq!(app.get("/api/v1/me").await.status, 429);
    // Without a key: limited per client address.
    assert_eq!(app.call("GET", "/api/v1/me", None, None).await.status, 401);
    assert_eq!(app.call("GET", "/api/v1/me", None, None).await.status, 429);
    let text = scrape(&app).await;
    assert_eq!(
        must(
            &text,
            "pigeonhole_rate_limit_refusals_total{limiter=\"key\"}"
        ),
        2.0
    );
    assert_eq!(
        must(
            &text,
            "pigeonhole_rate_limit_refusals_total{limiter=\"address\"}"
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            "pigeonhole_rate_limit_refusals_total{limiter=\"memory\"}"
        ),
        0.0
    );
}

#[tokio::test]
async fn webhook_attempts_are_counted_by_outcome() {
    let app = spawn_app().await;
    let ok = Receiver::start().await;
    let failing = Receiver::start().await;
    failing.set_default(Reply::status(503));
    let gone = Receiver::start().await;
    gone.set_default(Reply::status(410));
    let w_ok = create_webhook(&app, &ok.url("/ok"), json!({"events": ["domain.verified"]})).await;
    let w_fail = create_webhook(
        &app,
        &failing.url("/f"),
        json!({"events": ["domain.verified"]}),
    )
    .await;
    let w_gone = create_webhook(
        &app,
        &gone.url("/g"),
        json!({"events": ["domain.verified"]}),
    )
    .await;
    // A URL the guard refuses at the attempt (as if its DNS had changed).
    let w_refused =
        create_webhook(&app, &ok.url("/r"), json!({"events": ["domain.verified"]})).await;
    pigeonhole::sql!(
        "UPDATE webhooks SET url = 'http://10.0.0.1/x' WHERE id = $1",
        w_refused["id"].as_str().unwrap()
    )
    .execute(app.db.writer())
    .await
    .unwrap();
    app.verified_domain("example.com").await;
    let id = |w: &Value| w["id"].as_str().unwrap().to_string();
    wait_deliveries(&app, &id(&w_ok), 1, WAIT).await;
    wait_deliveries(&app, &id(&w_fail), 1, WAIT).await;
    wait_deliveries(&app, &id(&w_gone), 1, WAIT).await;
    wait_deliveries(&app, &id(&w_refused), 1, WAIT).await;
    let text = scrape(&app).await;
    assert_eq!(
        must(
            &text,
            "pigeonhole_webhook_attempts_total{outcome=\"success\"}"
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            "pigeonhole_webhook_attempts_total{outcome=\"status_4xx\"}"
        ),
        1.0
    );
    assert!(
        must(
            &text,
            "pigeonhole_webhook_attempts_total{outcome=\"status_5xx\"}"
        ) >= 1.0
    );
    assert!(
        must(
            &text,
            "pigeonhole_webhook_attempts_total{outcome=\"refused\"}"
        ) >= 1.0
    );
    assert_eq!(
        must(
            &text,
            "pigeonhole_webhook_attempts_total{outcome=\"timeout\"}"
        ),
        0.0
    );
}

#[tokio::test]
async fn webhook_queue_gauges_are_read_from_the_database() {
    let app = spawn_app().await;
    // No delivery: the queue stays as written here.
    app.state.webhooks.kill();
    let rx = Receiver::start().await;
    let text = scrape(&app).await;
    assert_eq!(must(&text, "pigeonhole_webhook_queue_depth"), 0.0);
    assert_eq!(must(&text, "pigeonhole_webhook_oldest_due_seconds"), 0.0);
    assert_eq!(must(&text, "pigeonhole_webhook_endpoints_disabled"), 0.0);

    let w = create_webhook(&app, &rx.url("/q"), json!({})).await;
    create_webhook(&app, &rx.url("/off"), json!({"enabled": false})).await;
    let now = pigeonhole::clock::now_micros();
    for (n, due) in [
        (1, now - 30_000_000),
        (2, now - 5_000_000),
        (3, now + 60_000_000),
    ] {
        pigeonhole::sql!(
            "INSERT INTO webhook_tasks (id, webhook_id, event_id, event_type, payload, attempt, next_attempt_at, created_at) \
             VALUES ($1, $2, $3, 'domain.verified', '{}', 1, $4, $5)",
            format!("whd_metrics{n}"),
            w["id"].as_str().unwrap(),
            format!("evt_metrics{n}"),
            due,
            now
        )
        .execute(app.db.writer())
        .await
        .unwrap();
    }
    let text = scrape(&app).await;
    assert_eq!(must(&text, "pigeonhole_webhook_queue_depth"), 3.0);
    let oldest = must(&text, "pigeonhole_webhook_oldest_due_seconds");
    assert!((30.0..120.0).contains(&oldest), "{oldest}");
    assert_eq!(must(&text, "pigeonhole_webhook_endpoints_disabled"), 1.0);
}

#[tokio::test]
async fn smtp_sessions_and_messages_are_counted_by_reply_class() {
    let t = setup_with(SmtpConfig {
        max_message_size: 4000,
        max_connections_per_ip: 1,
        ..test_config()
    })
    .await;
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    // A second connection from the same address is turned away: 421.
    let mut turned = Raw::connect(t.smtp.addr).await;
    turned.expect(421).await;
    c.send("EHLO m.test\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<inbox@ours.test>\r\nDATA\r\n")
        .await;
    c.expect(250).await;
    c.expect(250).await;
    c.expect(250).await;
    c.expect(354).await;
    c.send("Subject: small\r\nMessage-ID: <m1@x.test>\r\n\r\nfine\r\n.\r\n")
        .await;
    c.expect(250).await;
    // Too big, found at the end of DATA: 552.
    c.send("MAIL FROM:<a@x.test>\r\nRCPT TO:<inbox@ours.test>\r\nDATA\r\n")
        .await;
    c.expect(250).await;
    c.expect(250).await;
    c.expect(354).await;
    let line = format!("{}\r\n", "x".repeat(900));
    c.send(&format!("Subject: big\r\n\r\n{}.\r\n", line.repeat(6)))
        .await;
    c.expect(552).await;
    c.send("QUIT\r\n").await;
    c.expect(221).await;
    let text = scrape(&t.app).await;
    assert_eq!(
        must(&text, "pigeonhole_smtp_sessions_total{class=\"2xx\"}"),
        1.0
    );
    assert_eq!(
        must(&text, "pigeonhole_smtp_sessions_total{class=\"4xx\"}"),
        1.0
    );
    assert_eq!(
        must(&text, "pigeonhole_smtp_messages_total{class=\"2xx\"}"),
        1.0
    );
    assert_eq!(
        must(&text, "pigeonhole_smtp_messages_total{class=\"5xx\"}"),
        1.0
    );
    assert_eq!(
        must(&text, "pigeonhole_smtp_messages_total{class=\"4xx\"}"),
        0.0
    );
}

/// Log lines of the whole test process that name a request of this test.
static LINES: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();
const TRACED: &str = "req_traced_";
/// The address the SMTP session of the tracing test comes from.
const TRACED_PEER: &str = "127.0.0.77";

#[derive(Clone)]
struct Capture(Arc<Mutex<Vec<String>>>);

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The formatter writes each line whole: keep only this test's.
        let line = String::from_utf8_lossy(buf);
        if (line.contains(TRACED) || line.contains(TRACED_PEER))
            && let Ok(mut lines) = self.0.lock()
        {
            lines.push(line.into_owned());
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A process-wide subscriber: the group writer logs from a thread of its
/// own, where a subscriber set for the test's thread would not be seen.
fn captured_lines() -> Arc<Mutex<Vec<String>>> {
    LINES
        .get_or_init(|| {
            let lines = Arc::new(Mutex::new(Vec::new()));
            let writer = Capture(lines.clone());
            let subscriber = tracing_subscriber::fmt()
                .with_env_filter("pigeonhole=debug")
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish();
            let _ = tracing::subscriber::set_global_default(subscriber);
            lines
        })
        .clone()
}

#[tokio::test]
async fn one_request_id_is_on_the_send_the_group_writer_and_the_webhook_attempt() {
    let lines = captured_lines();
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    app.verified_domain("example.com").await;
    let hook = create_webhook(&app, &rx.url("/sent"), json!({"events": ["email.sent"]})).await;
    let request_id = format!("{TRACED}{}", pigeonhole::ids::random_token(10));
    let r = app
        .client
        .post(format!("{}/api/v1/emails", app.base))
        .bearer_auth(&app.key)
        .header("x-request-id", &request_id)
        .json(&send_body("a@b.com"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert_eq!(r.headers()["x-request-id"], request_id.as_str());
    wait_deliveries(&app, hook["id"].as_str().unwrap(), 1, WAIT).await;
    // The attempt's line is written once it has an answer.
    let ours = |what: &str| {
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(&request_id) && l.contains(what))
    };
    crate::helpers::eventually("the attempt's log line", || async {
        ours("webhook attempt").then_some(())
    })
    .await;
    let all = lines.lock().unwrap().join("");
    assert!(ours("provider answered the send"), "{all}");
    // The span names the route and key too.
    assert!(ours("route=\"/api/v1/emails\""), "{all}");
    assert!(ours("key_id=\"key_"), "{all}");
    if app.db.backend() == Backend::Sqlite {
        assert!(ours("group commit: job ran"), "{all}");
    }
    // A client's request id that is not short and plain is replaced.
    for unusable in ["not plain!".to_string(), "a".repeat(65)] {
        let r = app
            .client
            .get(format!("{}/healthz", app.base))
            .header("x-request-id", &unusable)
            .send()
            .await
            .unwrap();
        let given = r.headers()["x-request-id"].to_str().unwrap();
        assert!(given.starts_with("req_"), "{given}");
    }
}

#[tokio::test]
async fn an_smtp_session_logs_in_a_span_with_its_id_and_peer() {
    let lines = captured_lines();
    let t = setup_with(test_config()).await;
    let mut c = Raw::connect_from(t.smtp.addr, TRACED_PEER).await;
    c.expect(220).await;
    c.send("QUIT\r\n").await;
    c.expect(221).await;
    let peer = format!("peer={TRACED_PEER}:");
    crate::helpers::eventually("the session's log line", || async {
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("smtp{session_id=") && l.contains(&peer))
            .then_some(())
    })
    .await;
}
