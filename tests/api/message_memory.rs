//! The memory budget of large messages (`PIGEONHOLE_MESSAGE_MEMORY_BUDGET`),
//! shared by SMTP and HTTP: a message is admitted by what processing it
//! costs (a few times its size past the first 64 KiB, by backend), small
//! ones always.

use std::time::{Duration, Instant};

use base64::Engine as _;
use pigeonhole::core::memory::{self, FREE_BYTES};
use pigeonhole::smtp::SmtpConfig;
use serde_json::{Value, json};

use crate::helpers::{TestApp, TestSmtp, assert_error, spawn_app_with, start_smtp};
use crate::inbound::Raw;

const BUDGET: usize = 1024 * 1024;

/// A size whose processing costs about 70% of the budget.
fn fits(app: &TestApp) -> usize {
    FREE_BYTES + BUDGET * 7 / 10 / memory::cost_factor(app.db.backend())
}

/// A size whose processing costs about 1.5 times the budget.
fn too_big(app: &TestApp) -> usize {
    FREE_BYTES + BUDGET * 3 / 2 / memory::cost_factor(app.db.backend())
}

async fn setup() -> (TestApp, TestSmtp) {
    let app = spawn_app_with(|c| {
        c.insert("PIGEONHOLE_MESSAGE_MEMORY_BUDGET".into(), "1M".into());
        c.insert("PIGEONHOLE_MESSAGE_MEMORY_WAIT".into(), "0.3".into());
    })
    .await;
    app.verified_domain("ours.test").await;
    app.mailbox("inbox@ours.test").await;
    // The listener shares the app's budget, as `serve` sets it up.
    let smtp = start_smtp(
        &app,
        SmtpConfig {
            hostname: "mx.ours.test".into(),
            memory: app.state.memory.clone(),
            ..SmtpConfig::default()
        },
    )
    .await;
    (app, smtp)
}

/// Deterministic bytes that are not text.
fn file(len: usize) -> Vec<u8> {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

/// A message of about `size` bytes on the wire: a line of text and a
/// base64 attachment. Returns it (CRLF lines, none starting with a dot) and
/// the attachment's bytes.
fn message(subject: &str, size: usize) -> (String, Vec<u8>) {
    let data = file(size / 78 * 57);
    let mut encoded = String::new();
    for chunk in data.chunks(57) {
        encoded.push_str(&base64::engine::general_purpose::STANDARD.encode(chunk));
        encoded.push_str("\r\n");
    }
    let wire = format!(
        "From: Ann <ann@external.test>\r\nTo: inbox@ours.test\r\nSubject: {subject}\r\n\
         Message-ID: <{subject}@external.test>\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/mixed; boundary=\"B\"\r\n\r\n\
         --B\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nThe file, as promised.\r\n\
         --B\r\nContent-Type: application/octet-stream\r\n\
         Content-Disposition: attachment; filename=\"data.bin\"\r\n\
         Content-Transfer-Encoding: base64\r\n\r\n{encoded}--B--\r\n"
    );
    (wire, data)
}

/// One SMTP transaction for `wire`, declaring its SIZE or not: the reply
/// to MAIL, then (if it was 250) the final reply.
async fn smtp_send(smtp: &TestSmtp, wire: &str, declare: bool) -> Vec<(u16, String)> {
    let mut c = Raw::connect(smtp.addr).await;
    c.expect(220).await;
    c.send("EHLO client.test\r\n").await;
    c.expect(250).await;
    let size = if declare {
        format!(" SIZE={}", wire.len())
    } else {
        String::new()
    };
    c.send(&format!("MAIL FROM:<ann@external.test>{size}\r\n"))
        .await;
    let mail = c.reply().await;
    if mail.0 != 250 {
        return vec![mail];
    }
    c.send("RCPT TO:<inbox@ours.test>\r\nDATA\r\n").await;
    c.expect(250).await;
    c.expect(354).await;
    c.send(wire).await;
    c.send(".\r\n").await;
    let end = c.reply().await;
    c.send("QUIT\r\n").await;
    vec![mail, end]
}

async fn received(app: &TestApp, subject: &str) -> Vec<Value> {
    app.list_all("/api/v1/messages")
        .await
        .into_iter()
        .filter(|m| m["subject"] == subject)
        .collect()
}

async fn download(app: &TestApp, path: &str) -> Vec<u8> {
    let r = app
        .client
        .get(format!("{}{path}", app.base))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path}");
    r.bytes().await.unwrap().to_vec()
}

/// Waits until every reservation is given back (a session drops its own
/// just after it answers).
async fn budget_whole_again(app: &TestApp) {
    crate::helpers::eventually("the budget to be given back", || async {
        (app.state.memory.available_bytes() == app.state.memory.total_bytes()).then_some(())
    })
    .await;
}

#[tokio::test]
async fn smtp_admits_a_message_by_what_processing_it_costs() {
    let (app, smtp) = setup().await;
    assert_eq!(app.state.memory.total_bytes(), BUDGET);

    // Too big for the budget: refused at MAIL when the size is declared, so
    // nothing is sent for nothing; after the data when it is not.
    let (big, _) = message("big", too_big(&app));
    let declared = smtp_send(&smtp, &big, true).await;
    assert_eq!(declared.len(), 1, "{declared:?}");
    assert_eq!(declared[0].0, 452, "{declared:?}");
    assert!(declared[0].1.contains("4.3.1"), "{declared:?}");
    let undeclared = smtp_send(&smtp, &big, false).await;
    assert_eq!(undeclared[0].0, 250, "{undeclared:?}");
    assert_eq!(undeclared[1].0, 452, "{undeclared:?}");
    assert!(undeclared[1].1.contains("4.3.1"), "{undeclared:?}");
    assert!(received(&app, "big").await.is_empty(), "nothing stored");

    // One that fits is stored intact: the raw bytes are what was sent,
    // after this hop's trace headers, and the attachment decodes to the file.
    let (fits, data) = message("fits", fits(&app));
    for declare in [true, false] {
        let replies = smtp_send(&smtp, &fits, declare).await;
        assert_eq!(replies.last().unwrap().0, 250, "{replies:?}");
    }
    let stored = received(&app, "fits").await;
    assert_eq!(stored.len(), 1, "the second delivery is a duplicate");
    let id = stored[0]["id"].as_str().unwrap();
    let raw = download(&app, &format!("/api/v1/messages/{id}/raw")).await;
    assert!(raw.ends_with(fits.as_bytes()), "the message as sent");
    let trace = String::from_utf8(raw[..raw.len() - fits.len()].to_vec()).unwrap();
    assert!(
        trace.starts_with("Return-Path: <ann@external.test>\r\nReceived: from client.test"),
        "{trace}"
    );
    let fields: Vec<&str> = trace
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.starts_with([' ', '\t']))
        .collect();
    assert_eq!(
        fields.len(),
        3,
        "the two trace headers and our results: {trace}"
    );
    assert!(
        fields[2].starts_with("Authentication-Results: mx.ours.test;"),
        "{trace}"
    );
    assert!(
        trace.ends_with("\r\n") && !trace.contains("\r\n\r\n"),
        "{trace}"
    );
    let full = app.get(&format!("/api/v1/messages/{id}")).await.body;
    assert_eq!(
        full["text"].as_str().unwrap().trim(),
        "The file, as promised."
    );
    let att = &full["attachments"][0];
    assert_eq!(att["size"], data.len());
    let path = format!(
        "/api/v1/messages/{id}/attachments/{}",
        att["id"].as_str().unwrap()
    );
    assert!(download(&app, &path).await == data, "the file as sent");
    budget_whole_again(&app).await;
}

#[tokio::test]
async fn while_large_messages_hold_the_budget_small_ones_still_pass() {
    let (app, smtp) = setup().await;
    // Large messages (of either kind) hold all of it.
    let held = app
        .state
        .memory
        .try_reserve(BUDGET)
        .expect("the whole budget");
    assert_eq!(app.state.memory.available_bytes(), 0);

    let (fits, _) = message("waits", fits(&app));
    assert_eq!(smtp_send(&smtp, &fits, true).await[0].0, 452);
    let small = "Subject: small\r\nMessage-ID: <small@external.test>\r\n\r\nhello\r\n";
    assert_eq!(smtp_send(&smtp, small, true).await[1].0, 250);
    let started = Instant::now();
    let r = app
        .post(
            "/api/v1/emails",
            json!({"from": "inbox@ours.test", "to": "a@example.com", "subject": "small", "text": "hi"}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert!(started.elapsed() < Duration::from_millis(300), "no wait");

    // Given back: the large one goes through.
    drop(held);
    assert_eq!(smtp_send(&smtp, &fits, true).await[1].0, 250);
    assert_eq!(received(&app, "waits").await.len(), 1);
    budget_whole_again(&app).await;
}

fn send_with_file(subject: &str, data: &[u8]) -> Value {
    json!({
        "from": "inbox@ours.test",
        "to": "a@example.com",
        "subject": subject,
        "text": "The file, as promised.",
        "attachments": [{
            "filename": "data.bin",
            "content": base64::engine::general_purpose::STANDARD.encode(data),
        }],
    })
}

#[tokio::test]
async fn large_sends_wait_for_memory_then_get_503() {
    let (app, _smtp) = setup().await;

    // More than the whole budget: 503 at once, nothing sent or recorded.
    let started = Instant::now();
    let r = app
        .post(
            "/api/v1/emails",
            send_with_file("big", &file(too_big(&app) * 3 / 4)),
        )
        .await;
    assert_error(&r, 503, "server_error");
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
    assert!(started.elapsed() < Duration::from_millis(300), "no wait");
    assert!(app.list_all("/api/v1/emails").await.is_empty());

    // Fits, but the budget is held: it waits (0.3 s here), then 503.
    let data = file(fits(&app) * 3 / 4);
    let held = app
        .state
        .memory
        .try_reserve(BUDGET)
        .expect("the whole budget");
    let started = Instant::now();
    let r = app
        .post("/api/v1/emails", send_with_file("late", &data))
        .await;
    assert_error(&r, 503, "server_error");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(app.list_all("/api/v1/emails").await.is_empty());
    let metrics = app.call("GET", "/metrics", None, None).await.text;
    assert!(
        metrics.contains("pigeonhole_rate_limit_refusals_total{limiter=\"memory\"} 2"),
        "{metrics}"
    );

    // Given back while it waits: it goes through, the file intact.
    let sending = {
        let (client, base, key) = (app.client.clone(), app.base.clone(), app.key.clone());
        let body = send_with_file("in time", &data);
        tokio::spawn(async move {
            let r = client
                .post(format!("{base}/api/v1/emails"))
                .bearer_auth(key)
                .json(&body)
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(held);
    let (status, body) = sending.await.unwrap();
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().unwrap();
    let sent = app.get(&format!("/api/v1/emails/{id}")).await.body;
    let att = &sent["attachments"][0];
    let path = format!(
        "/api/v1/emails/{id}/attachments/{}",
        att["id"].as_str().unwrap()
    );
    assert!(download(&app, &path).await == data, "the file as sent");
    budget_whole_again(&app).await;
}

/// A thread's search document is built a page of messages at a time: in a
/// thread longer than a page, words of its first message are still found.
#[tokio::test]
async fn a_long_thread_is_searched_through_every_message() {
    let (app, _smtp) = setup().await;
    for i in 0..40 {
        let words = if i == 0 { "zanzibar" } else { "again" };
        let threading = if i == 0 {
            String::new()
        } else {
            "In-Reply-To: <long-0@external.test>\r\n".to_string()
        };
        let raw = format!(
            "From: ann@external.test\r\nTo: inbox@ours.test\r\nSubject: Long\r\n\
             Message-ID: <long-{i}@external.test>\r\n{threading}\r\n{words} {i}\r\n"
        );
        let stored = pigeonhole::core::inbound::ingest(
            &app.db,
            raw.into(),
            &["inbox@ours.test".to_string()],
            &[],
        )
        .await
        .unwrap();
        assert_eq!(stored.len(), 1);
    }
    let threads = app.list_all("/api/v1/threads?q=zanzibar").await;
    assert_eq!(threads.len(), 1, "{threads:?}");
    assert_eq!(threads[0]["message_count"], 40);
}
