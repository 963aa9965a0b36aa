//! The delivery engine, end to end: fan-out, signing, retry rules,
//! auto-disable, fairness, durability across crashes and restarts, and
//! several processes sharing one PostgreSQL queue.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pigeonhole::app::AppState;
use pigeonhole::config::Config;
use pigeonhole::dns_test_server::TestDnsServer;
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::store::Db;
use serde_json::{Value, json};

use crate::helpers::{TestApp, base_config, spawn_app, spawn_app_with, spawn_state};
use crate::receiver::{
    Receiver, Reply, create_webhook, deliveries_of, emit, pending_tasks, wait_deliveries,
};

const WAIT: Duration = Duration::from_secs(10);

/// Another process on the same database: a fresh `AppState` (with its own
/// delivery engine) and HTTP server.
async fn second_process(
    database_url: &str,
    tweak: impl FnOnce(&mut HashMap<String, String>),
) -> TestApp {
    let dns = TestDnsServer::start().await.unwrap();
    let mut settings = base_config(database_url, &dns);
    tweak(&mut settings);
    let config = Config::from_map(&settings).unwrap();
    let db = Db::connect(database_url).await.unwrap();
    let state = AppState::with_provider(config, db, Arc::new(Simulator::new(None)))
        .await
        .unwrap();
    spawn_state(state, dns, database_url.to_string()).await
}

fn id_of(w: &Value) -> String {
    w["id"].as_str().unwrap().to_string()
}

/// Waits `d` and asserts that the receiver got exactly `n` requests.
async fn settle(rx: &Receiver, n: usize, d: Duration) {
    tokio::time::sleep(d).await;
    assert_eq!(rx.requests().len(), n, "{:?}", rx.requests());
}

#[tokio::test]
async fn events_fan_out_by_type_and_mailbox() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    app.verified_domain("example.com").await;
    let m1 = id_of(&app.mailbox("one@example.com").await);
    let m2 = id_of(&app.mailbox("two@example.com").await);
    create_webhook(&app, &rx.url("/sent"), json!({"events": ["email.sent"]})).await;
    create_webhook(&app, &rx.url("/m1"), json!({"mailbox_id": m1})).await;
    create_webhook(
        &app,
        &rx.url("/domains"),
        json!({"events": ["domain.verified", "domain.failed"]}),
    )
    .await;
    create_webhook(&app, &rx.url("/off"), json!({"enabled": false})).await;

    emit(&app, "email.sent", Some(&m1), json!({"n": 1})).await;
    emit(&app, "email.sent", Some(&m2), json!({"n": 2})).await;
    emit(&app, "email.delivered", Some(&m2), json!({"n": 3})).await;
    emit(&app, "domain.verified", None, json!({"n": 4})).await;
    rx.wait_for(4, WAIT).await;
    settle(&rx, 4, Duration::from_millis(300)).await;

    let ns = |path: &str| {
        let mut v: Vec<i64> = rx
            .requests_to(path)
            .iter()
            .map(|c| c.json["data"]["n"].as_i64().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(ns("/sent"), vec![1, 2]);
    assert_eq!(ns("/m1"), vec![1]);
    assert_eq!(ns("/domains"), vec![4]);
    assert!(ns("/off").is_empty());
    assert_eq!(pending_tasks(&app).await, 0);
    let ids: HashSet<String> = rx.requests().iter().map(|c| c.id().to_string()).collect();
    assert_eq!(ids.len(), 4, "one envelope per event and endpoint");
}

#[tokio::test]
async fn deliveries_are_signed_standard_webhooks() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    let w = create_webhook(&app, &rx.url("/signed"), json!({})).await;
    let secret = w["secret"].as_str().unwrap().to_string();
    let event_id = emit(
        &app,
        "email.delivered",
        Some("mbx_1"),
        json!({"email": {"id": "msg_1", "subject": "Grüße \"quoted\" ✓"}}),
    )
    .await;
    let c = rx.wait_for(1, WAIT).await[0].clone();

    assert_eq!(c.header("content-type"), "application/json");
    assert!(
        c.header("user-agent").starts_with("pigeonhole"),
        "{:?}",
        c.headers
    );
    let id = c.id();
    assert!(id.starts_with("whd_"));
    assert_eq!(c.json["id"], id);
    assert_eq!(c.json["type"], "email.delivered");
    assert!(c.json["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(c.json["data"]["email"]["subject"], "Grüße \"quoted\" ✓");
    let keys: HashSet<&str> = c
        .json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, HashSet::from(["id", "type", "created_at", "data"]));
    assert_ne!(id, event_id);

    // Our verifier.
    let ts: i64 = c.header("webhook-timestamp").parse().unwrap();
    let now = pigeonhole::clock::now_micros() / 1_000_000;
    assert!((now - ts).abs() < 60);
    let parsed = pigeonhole::webhooks::signature::WebhookSecret::parse(&secret).unwrap();
    pigeonhole::webhooks::signature::verify(
        &parsed,
        id,
        ts,
        c.body.as_bytes(),
        c.header("webhook-signature"),
        now,
        300,
    )
    .unwrap();

    // An independent one: the `standardwebhooks` package from PyPI.
    let python = match std::env::var("PIGEONHOLE_TEST_PYTHON") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "PIGEONHOLE_TEST_PYTHON must be set in CI (a python with standardwebhooks)"
            );
            eprintln!(
                "skipping the standardwebhooks cross-check: PIGEONHOLE_TEST_PYTHON is not set"
            );
            return;
        }
    };
    let script = r#"
import json, sys
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
secret, msg_id, ts, sig = sys.argv[1:5]
body = sys.stdin.buffer.read().decode("utf-8")
headers = {"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": sig}
payload = Webhook(secret).verify(body, headers)
print(json.dumps({"id": payload["id"], "type": payload["type"]}))
try:
    Webhook(secret).verify(body + " ", headers)
    print("TAMPERED-ACCEPTED")
except WebhookVerificationError:
    print("tampered-rejected")
"#;
    let run = |secret: &str| {
        use std::io::Write;
        let mut child = std::process::Command::new(&python)
            .arg("-c")
            .arg(script)
            .arg(secret)
            .arg(c.id())
            .arg(c.header("webhook-timestamp"))
            .arg(c.header("webhook-signature"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run PIGEONHOLE_TEST_PYTHON");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(c.body.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = run(&secret);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "standardwebhooks rejected the delivery: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first, json!({"id": id, "type": "email.delivered"}));
    assert_eq!(stdout.lines().nth(1), Some("tampered-rejected"));
    // A different secret fails.
    let other = pigeonhole::webhooks::signature::WebhookSecret::generate().as_string();
    assert!(!run(&other).status.success());
}

#[tokio::test]
async fn a_5xx_is_retried_with_the_same_envelope_and_the_wait_between() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    let w = create_webhook(&app, &rx.url("/r"), json!({})).await;
    let wid = id_of(&w);
    rx.script([Reply::status(500)]);
    emit(&app, "email.sent", Some("mbx_1"), json!({})).await;
    let got = rx.wait_for(2, WAIT).await;
    let ds = wait_deliveries(&app, &wid, 2, WAIT).await;
    settle(&rx, 2, Duration::from_millis(400)).await;

    assert_eq!(got[0].id(), got[1].id());
    assert_eq!(got[0].body, got[1].body);
    // Attempt 2 waits the second delay (0.05 s) after attempt 1 ended.
    assert!(got[1].at - got[0].at >= Duration::from_millis(50));
    assert_eq!(ds[0]["attempt"], 1);
    assert_eq!(
        ds[0]["id"],
        got[0].id(),
        "attempt 1's record id is the envelope id"
    );
    assert_eq!(ds[0]["succeeded"], false);
    assert_eq!(ds[0]["status_code"], 500);
    assert_eq!(ds[0]["response_body"], "status 500");
    assert!(ds[0]["error"].as_str().unwrap().contains("500"));
    assert_eq!(ds[1]["attempt"], 2);
    assert_ne!(ds[1]["id"], ds[0]["id"]);
    assert_eq!(ds[1]["envelope_id"], got[0].id());
    assert_eq!(ds[1]["payload"]["id"], got[0].id());
    assert_eq!(ds[1]["succeeded"], true);
    assert_eq!(ds[1]["status_code"], 200);
    assert_eq!(ds[1]["error"], json!(null));
    assert_eq!(ds[1]["event"], "email.sent");

    let w = app.get(&format!("/api/v1/webhooks/{wid}")).await.body;
    assert_eq!(w["last_status"], 200);
    assert_eq!(w["consecutive_failures"], 0);
    assert!(w["last_delivered_at"].is_string());
    assert!(w["last_error_at"].is_string());
    assert!(w["last_error"].as_str().unwrap().contains("500"));
    assert_eq!(pending_tasks(&app).await, 0);
}

#[tokio::test]
async fn a_plain_4xx_is_given_up_at_once() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    let w = create_webhook(&app, &rx.url("/r"), json!({})).await;
    for status in [400, 401, 403, 404, 410, 422] {
        rx.script([Reply::status(status)]);
        emit(&app, "email.sent", None, json!({"status": status})).await;
        let n = rx.requests().len();
        rx.wait_for(n + 1, WAIT).await;
        settle(&rx, n + 1, Duration::from_millis(350)).await;
    }
    let ds = deliveries_of(&app, &id_of(&w)).await;
    assert_eq!(ds.len(), 6);
    assert!(
        ds.iter()
            .all(|d| d["attempt"] == 1 && d["succeeded"] == false)
    );
    assert_eq!(pending_tasks(&app).await, 0);
    let w = app
        .get(&format!("/api/v1/webhooks/{}", id_of(&w)))
        .await
        .body;
    assert_eq!(w["consecutive_failures"], 6);
    assert_eq!(w["last_status"], 422);
    assert_eq!(w["last_delivered_at"], json!(null));
}

#[tokio::test]
async fn status_408_429_and_timeouts_are_retried() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_WEBHOOK_TIMEOUT".into(), "0.5".into());
    })
    .await;
    let rx = Receiver::start().await;
    let w = create_webhook(&app, &rx.url("/r"), json!({})).await;
    rx.script([
        Reply::status(429),
        Reply::status(408),
        Reply::slow(200, Duration::from_millis(2500)),
    ]);
    emit(&app, "email.sent", None, json!({})).await;
    let got = rx.wait_for(4, WAIT).await;
    let ds = wait_deliveries(&app, &id_of(&w), 4, WAIT).await;
    assert!(got.iter().all(|c| c.id() == got[0].id()));
    let codes: Vec<i64> = ds
        .iter()
        .map(|d| d["status_code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, vec![429, 408, 0, 200]);
    let timeout_error = ds[2]["error"].as_str().unwrap();
    assert!(timeout_error.contains("timeout"), "{timeout_error}");
    assert!(ds[2]["duration_ms"].as_i64().unwrap() >= 500);
    assert!(ds[2]["duration_ms"].as_i64().unwrap() < 2500);
    assert_eq!(ds[3]["succeeded"], true);
    assert_eq!(ds[3]["attempt"], 4);
}

#[tokio::test]
async fn at_most_four_attempts() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    rx.set_default(Reply::status(503));
    let w = create_webhook(&app, &rx.url("/r"), json!({})).await;
    emit(&app, "email.bounced", None, json!({})).await;
    rx.wait_for(4, WAIT).await;
    // Delays 0, 0.05, 0.1, 0.15: a fifth attempt would come well within this.
    settle(&rx, 4, Duration::from_millis(600)).await;
    let ds = deliveries_of(&app, &id_of(&w)).await;
    let attempts: Vec<i64> = ds.iter().map(|d| d["attempt"].as_i64().unwrap()).collect();
    assert_eq!(attempts, vec![1, 2, 3, 4]);
    assert_eq!(pending_tasks(&app).await, 0);
    let w = app
        .get(&format!("/api/v1/webhooks/{}", id_of(&w)))
        .await
        .body;
    assert_eq!(w["consecutive_failures"], 4);
    assert_eq!(w["enabled"], true);
}

#[tokio::test]
async fn twenty_failures_in_a_row_disable_and_enabling_clears_the_count() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_WEBHOOK_RETRY_DELAYS".into(), "0,0,0,0".into());
    })
    .await;
    let rx = Receiver::start().await;
    rx.set_default(Reply::status(500));
    let w = create_webhook(&app, &rx.url("/r"), json!({})).await;
    let wid = id_of(&w);
    // A success in between resets the count.
    rx.script([Reply::status(500), Reply::status(200)]);
    emit(&app, "email.sent", None, json!({"n": 0})).await;
    wait_deliveries(&app, &wid, 2, WAIT).await;
    let body = app.get(&format!("/api/v1/webhooks/{wid}")).await.body;
    assert_eq!(body["consecutive_failures"], 0);

    // Five events of four failed attempts each: the 20th failure disables.
    for n in 1..=5 {
        emit(&app, "email.sent", None, json!({"n": n})).await;
    }
    wait_deliveries(&app, &wid, 22, WAIT).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let body = app.get(&format!("/api/v1/webhooks/{wid}")).await.body;
    assert_eq!(body["enabled"], false, "{body}");
    assert_eq!(body["consecutive_failures"], 20);
    assert_eq!(body["last_status"], 500);

    // Disabled: no further deliveries.
    emit(&app, "email.sent", None, json!({"n": 6})).await;
    settle(&rx, 22, Duration::from_millis(300)).await;

    let r = app
        .patch(&format!("/api/v1/webhooks/{wid}"), json!({"enabled": true}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["enabled"], true);
    assert_eq!(r.body["consecutive_failures"], 0);
    rx.set_default(Reply::status(200));
    emit(&app, "email.sent", None, json!({"n": 7})).await;
    let got = rx.wait_for(23, WAIT).await;
    assert_eq!(got.last().unwrap().json["data"]["n"], 7);
}

#[tokio::test]
async fn a_slow_endpoint_does_not_hold_up_a_healthy_one() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_WEBHOOK_TIMEOUT".into(), "10".into());
    })
    .await;
    let slow = Receiver::start().await;
    slow.set_default(Reply::slow(200, Duration::from_secs(6)));
    let fast = Receiver::start().await;
    create_webhook(&app, &slow.url("/slow"), json!({})).await;
    // The slow endpoint's backlog comes first.
    for n in 0..100 {
        emit(&app, "email.sent", None, json!({"n": n})).await;
    }
    slow.wait_for(1, WAIT).await;
    create_webhook(&app, &fast.url("/fast"), json!({})).await;
    let start = Instant::now();
    for n in 0..50 {
        emit(&app, "email.delivered", None, json!({"n": n})).await;
    }
    fast.wait_for(50, WAIT).await;
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "the healthy endpoint waited {:?}",
        start.elapsed()
    );
    // The slow one holds only a few slots.
    assert!(slow.requests().len() <= 16, "{}", slow.requests().len());
}

#[tokio::test]
async fn real_flows_emit_events_with_the_message() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    let w = create_webhook(&app, &rx.url("/all"), json!({})).await;
    app.verified_domain("example.com").await;
    let r = app
        .post(
            "/api/v1/emails",
            json!({"from": "Ann <ann@example.com>", "to": "success@simulator.amazonses.com", "subject": "Hi", "text": "Hello"}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let msg_id = r.body["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + WAIT;
    let types = loop {
        let types: Vec<String> = rx
            .requests()
            .iter()
            .map(|c| c.json["type"].as_str().unwrap().to_string())
            .collect();
        if types.contains(&"email.delivered".to_string()) || Instant::now() > deadline {
            break types;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(types.contains(&"domain.verified".to_string()), "{types:?}");
    assert!(types.contains(&"email.sent".to_string()), "{types:?}");
    assert!(types.contains(&"email.delivered".to_string()), "{types:?}");
    let sent = rx
        .requests()
        .into_iter()
        .find(|c| c.json["type"] == "email.sent")
        .unwrap();
    assert_eq!(sent.json["data"]["email"]["id"], msg_id.as_str());
    assert_eq!(sent.json["data"]["email"]["subject"], "Hi");
    let domain = rx
        .requests()
        .into_iter()
        .find(|c| c.json["type"] == "domain.verified")
        .unwrap();
    assert_eq!(domain.json["data"]["domain"]["name"], "example.com");
    wait_deliveries(&app, &id_of(&w), types.len(), WAIT).await;
}

#[tokio::test]
async fn shutdown_lets_attempts_in_flight_finish() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    rx.script([Reply::slow(200, Duration::from_millis(500))]);
    let w = create_webhook(&app, &rx.url("/r"), json!({})).await;
    let wid = id_of(&w);
    let db = app.db.clone();
    emit(&app, "email.sent", None, json!({})).await;
    rx.wait_for(1, WAIT).await;
    let state = app.state.clone();
    app.stop().await;
    state.webhooks.shutdown().await;
    use pigeonhole::store::RowExt;
    let row = pigeonhole::sql!(
        "SELECT COUNT(*) AS n, MAX(succeeded) AS ok FROM webhook_deliveries WHERE webhook_id = $1",
        &wid
    )
    .fetch_one(db.reader())
    .await
    .unwrap();
    assert_eq!(row.int("n").unwrap(), 1);
    assert_eq!(row.int("ok").unwrap(), 1);
    let tasks = pigeonhole::sql!("SELECT COUNT(*) AS n FROM webhook_tasks")
        .fetch_one(db.reader())
        .await
        .unwrap()
        .int("n")
        .unwrap();
    assert_eq!(tasks, 0);
}

#[tokio::test]
async fn a_restart_mid_retry_continues_the_attempt_count() {
    let delays = "0,0,1.5,0";
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_WEBHOOK_RETRY_DELAYS".into(), delays.into());
    })
    .await;
    let rx = Receiver::start().await;
    rx.script([Reply::status(500), Reply::status(502)]);
    let w = create_webhook(&app, &rx.url("/r"), json!({})).await;
    let wid = id_of(&w);
    emit(&app, "email.sent", None, json!({})).await;
    wait_deliveries(&app, &wid, 2, WAIT).await;
    let url = app.database_url.clone();
    app.stop().await;
    assert_eq!(rx.requests().len(), 2);

    // A new process on the same database picks the task up where it was.
    let app2 = second_process(&url, |m| {
        m.insert("PIGEONHOLE_WEBHOOK_RETRY_DELAYS".into(), delays.into());
    })
    .await;
    let got = rx.wait_for(3, WAIT).await;
    assert!(got.iter().all(|c| c.id() == got[0].id()));
    let ds = wait_deliveries(&app2, &wid, 3, WAIT).await;
    let attempts: Vec<i64> = ds.iter().map(|d| d["attempt"].as_i64().unwrap()).collect();
    assert_eq!(attempts, vec![1, 2, 3]);
    assert_eq!(ds[2]["succeeded"], true);
    assert_eq!(ds[2]["envelope_id"], got[0].id());
    assert_eq!(pending_tasks(&app2).await, 0);
}

#[tokio::test]
async fn a_crashed_worker_lease_runs_out_and_the_task_is_delivered() {
    // Timeout 0.3 s: leases last 2 × 0.3 + 2 = 2.6 s.
    let tweak = |m: &mut HashMap<String, String>| {
        m.insert("PIGEONHOLE_WEBHOOK_TIMEOUT".into(), "0.3".into());
    };
    let app = spawn_app_with(tweak).await;
    let rx = Receiver::start().await;
    // The first request hangs; the worker "crashes" while waiting for it.
    rx.script([Reply::slow(200, Duration::from_secs(5))]);
    let w = create_webhook(&app, &rx.url("/r"), json!({})).await;
    let wid = id_of(&w);
    emit(&app, "email.sent", None, json!({})).await;
    rx.wait_for(1, WAIT).await;
    app.state.webhooks.kill();
    let killed_at = Instant::now();
    use pigeonhole::store::RowExt;
    let lease = pigeonhole::sql!("SELECT lease_until, attempt FROM webhook_tasks")
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    assert!(lease.opt_int("lease_until").unwrap().is_some());
    assert_eq!(lease.int("attempt").unwrap(), 1);

    let app2 = second_process(&app.database_url, tweak).await;
    let got = rx.wait_for(2, WAIT).await;
    assert!(
        killed_at.elapsed() > Duration::from_millis(1500),
        "taken again only after the lease ran out"
    );
    assert_eq!(got[0].id(), got[1].id());
    let ds = wait_deliveries(&app2, &wid, 1, WAIT).await;
    assert_eq!(ds.len(), 1, "the crashed attempt left no record");
    assert_eq!(ds[0]["attempt"], 1);
    assert_eq!(ds[0]["succeeded"], true);
    assert_eq!(ds[0]["id"], got[0].id());
    assert_eq!(pending_tasks(&app2).await, 0);
}

#[tokio::test]
async fn two_processes_on_postgresql_deliver_each_event_once() {
    let app = spawn_app().await;
    if app.db.backend() != pigeonhole::store::Backend::Postgres {
        eprintln!("skipping: needs PostgreSQL (PIGEONHOLE_TEST_POSTGRES_URL)");
        return;
    }
    let app2 = second_process(&app.database_url, |_| {}).await;
    let rx = Receiver::start().await;
    let w = create_webhook(&app, &rx.url("/r"), json!({})).await;
    let n = 300;
    for chunk in 0..(n / 50) {
        let mut tx = app.db.begin().await.unwrap();
        for i in 0..50 {
            pigeonhole::core::events::emit(
                &mut tx,
                pigeonhole::model::webhooks::EventName::EmailSent,
                None,
                json!({"n": chunk * 50 + i}),
            )
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
    }
    rx.wait_for(n, Duration::from_secs(30)).await;
    settle(&rx, n, Duration::from_millis(500)).await;
    let got = rx.requests();
    let ids: HashSet<&str> = got.iter().map(|c| c.id()).collect();
    assert_eq!(ids.len(), n, "every envelope exactly once");
    let ns: HashSet<i64> = got
        .iter()
        .map(|c| c.json["data"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns.len(), n, "every event exactly once");
    use pigeonhole::store::RowExt;
    let recorded = pigeonhole::sql!(
        "SELECT COUNT(*) AS n, MIN(attempt) AS lo, MAX(attempt) AS hi FROM webhook_deliveries WHERE webhook_id = $1",
        w["id"].as_str().unwrap()
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap();
    assert_eq!(recorded.int("n").unwrap(), n as i64);
    assert_eq!(recorded.int("hi").unwrap(), 1);
    assert_eq!(pending_tasks(&app2).await, 0);
}
