//! Received mail through the API: /messages, /contacts, threads of inbound
//! mail, and SES receipt notifications over SNS.

use std::sync::{Arc, OnceLock};

use base64::Engine;
use serde_json::json;

use crate::helpers::{TestApp, assert_error, spawn_app_custom};
use pigeonhole::core::inbound;
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::provider::sns::SnsVerifier;
use pigeonhole::provider::sns::testing::TestSigner;

const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:ses-inbound";

fn signer() -> &'static TestSigner {
    static S: OnceLock<TestSigner> = OnceLock::new();
    S.get_or_init(TestSigner::new)
}

async fn app() -> TestApp {
    let app = spawn_app_custom(
        |_| {},
        |c| Arc::new(Simulator::new(c.simulator_outbox.clone())),
        |state| {
            state.sns = Arc::new(SnsVerifier::new(
                vec![TOPIC.into()],
                Arc::new(signer().fetcher()),
            ));
        },
    )
    .await;
    app.verified_domain("example.com").await;
    app.mailbox("support@example.com").await;
    app
}

fn mail(from: &str, subject: &str, body: &str, id: &str, extra: &str) -> Vec<u8> {
    format!(
        "From: {from}\r\nTo: support@example.com\r\nSubject: {subject}\r\nMessage-ID: <{id}>\r\nDate: Sun, 22 Nov 2026 10:00:00 +0000\r\n{extra}Content-Type: text/plain\r\n\r\n{body}\r\n"
    )
    .into_bytes()
}

async fn receive(app: &TestApp, raw: &[u8]) -> String {
    let stored = inbound::ingest(
        &app.db,
        bytes::Bytes::copy_from_slice(raw),
        &["support@example.com".to_string()],
        &[],
    )
    .await
    .unwrap();
    assert_eq!(stored.len(), 1);
    stored[0].id.clone()
}

#[tokio::test]
async fn received_messages_are_listed_read_marked_and_raw() {
    let app = app().await;
    let first = receive(
        &app,
        &mail(
            "Ann <ann@x.com>",
            "Broken login",
            "I cannot log in",
            "a1@x.com",
            "",
        ),
    )
    .await;
    let second = receive(
        &app,
        &mail(
            "bob@x.com",
            "Invoice",
            "Where is my invoice",
            "b1@x.com",
            "",
        ),
    )
    .await;
    let r = app.get("/api/v1/messages").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ids: Vec<_> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, vec![second.clone(), first.clone()]);
    assert_eq!(r.body["data"][1]["from"], "ann@x.com");
    assert_eq!(r.body["data"][1]["is_read"], false);
    for (q, n) in [
        ("from=bob@x.com", 1),
        ("q=login", 1),
        ("subject=invoice", 1),
        ("unread=true", 2),
        ("folder=inbox", 2),
        ("to=support@example.com", 2),
        ("since=2000-01-01", 2),
    ] {
        let r = app.get(&format!("/api/v1/messages?{q}")).await;
        assert_eq!(
            r.body["data"].as_array().unwrap().len(),
            n,
            "{q}: {}",
            r.text
        );
    }
    assert_error(
        &app.get("/api/v1/messages?unread=x").await,
        422,
        "invalid_request",
    );

    let r = app
        .patch(
            &format!("/api/v1/messages/{first}"),
            json!({"is_read": true, "is_starred": true}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["is_read"], true);
    assert_eq!(r.body["is_starred"], true);
    assert_eq!(
        app.get("/api/v1/messages?unread=true").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let t = app
        .get(&format!(
            "/api/v1/threads/{}",
            r.body["thread_id"].as_str().unwrap()
        ))
        .await
        .body;
    assert_eq!(t["unread_count"], 0);
    assert_eq!(t["folders"], json!(["inbox"]));

    let resp = app
        .client
        .get(format!("{}/api/v1/messages/{first}/raw", app.base))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "message/rfc822");
    assert!(String::from_utf8_lossy(&resp.bytes().await.unwrap()).contains("I cannot log in"));

    // Outside the reach: 404.
    app.verified_domain("other.org").await;
    let k = app.new_key(None, Some("other.org"), None, None).await;
    assert_error(
        &app.call(
            "GET",
            &format!("/api/v1/messages/{first}"),
            Some(&k.key),
            None,
        )
        .await,
        404,
        "not_found",
    );
    assert_eq!(
        app.call("GET", "/api/v1/messages", Some(&k.key), None)
            .await
            .body["data"],
        json!([])
    );
}

#[tokio::test]
async fn replies_join_threads_and_contacts_are_counted() {
    let app = app().await;
    let first = receive(
        &app,
        &mail("Ann <ann@x.com>", "Help", "first", "h1@x.com", ""),
    )
    .await;
    let m = app.get(&format!("/api/v1/messages/{first}")).await.body;
    let tid = m["thread_id"].as_str().unwrap().to_string();
    // We answer through the API; Ann answers us.
    let r = app
        .post(
            &format!("/api/v1/threads/{tid}/reply"),
            json!({"text": "On it"}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.body["to"], json!(["ann@x.com"]));
    let ours = r.body["message_id"].as_str().unwrap().to_string();
    receive(
        &app,
        &mail(
            "Ann <ann@x.com>",
            "Re: Help",
            "thanks",
            "h2@x.com",
            &format!("In-Reply-To: {ours}\r\n"),
        ),
    )
    .await;
    let t = app.get(&format!("/api/v1/threads/{tid}")).await.body;
    assert_eq!(t["message_count"], 3);
    assert_eq!(t["folders"], json!(["inbox", "sent"]));
    assert_eq!(t["unread_count"], 2);
    assert_eq!(t["subject"], "Help");
    assert_eq!(
        app.get("/api/v1/threads?folder=inbox&unread=true")
            .await
            .body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    receive(
        &app,
        &mail("Carl <carl@x.com>", "Other", "x", "o1@x.com", ""),
    )
    .await;
    let r = app.get("/api/v1/contacts").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data[0]["address"], "carl@x.com");
    let ann = data.iter().find(|c| c["address"] == "ann@x.com").unwrap();
    assert_eq!(ann["name"], "Ann");
    assert_eq!(ann["message_count"], 2);
    let r = app.get("/api/v1/contacts?order=frequent").await;
    assert_eq!(r.body["data"][0]["address"], "ann@x.com");
    assert_eq!(
        app.get("/api/v1/contacts?q=carl").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_error(
        &app.get("/api/v1/contacts?order=alpha").await,
        422,
        "invalid_request",
    );
}

#[tokio::test]
async fn ses_receipt_notifications_store_mail() {
    let app = app().await;
    let raw = mail(
        "Dora <dora@x.com>",
        "Via SES",
        "hello through SES",
        "ses1@x.com",
        "",
    );
    let notification = json!({
        "notificationType": "Received",
        "mail": {"timestamp": "2026-11-22T10:00:00.000Z", "messageId": "ses-in-1", "source": "dora@x.com", "destination": ["support@example.com"]},
        "receipt": {"timestamp": "2026-11-22T10:00:00.000Z", "recipients": ["support@example.com"],
                    "action": {"type": "SNS", "topicArn": TOPIC, "encoding": "BASE64"}},
        "content": base64::engine::general_purpose::STANDARD.encode(&raw),
    });
    let body = signer().sign_notification(TOPIC, &notification.to_string(), "sns-in-1", 2);
    let r = app
        .client
        .post(format!("{}/sns/ses", app.base))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Redelivery stores nothing twice.
    let r = app
        .client
        .post(format!("{}/sns/ses", app.base))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = app.get("/api/v1/messages?q=SES").await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1, "{}", r.text);
    assert_eq!(r.body["data"][0]["from"], "dora@x.com");
}
