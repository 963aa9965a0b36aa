//! The finer rules of POST /api/v1/emails (spec §2 "Attachment", §4 "Emails",
//! README "API notes and choices"): cc/bcc validation, Bcc kept out of the
//! MIME but in the envelope, Reply-To, owned and custom headers, the
//! attachment limit, base64 errors and inline (`content_id`) parts.
//!
//! The raw MIME is read from the simulator's outbox
//! (`PIGEONHOLE_SIMULATOR_OUTBOX`, one `<provider_message_id>.eml` per
//! message); the envelope is read from a provider that records what the
//! service handed over before passing it to the simulator.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use mail_parser::{MessageParser, MimeHeaders};
use serde_json::{Value, json};

use crate::helpers::{
    TempOutbox, TestApp, Wrapped, Wrapping, assert_error, spawn_app, spawn_app_with_provider,
};
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::provider::{OutgoingMessage, Provider, ProviderError};

/// Envelopes handed to the provider: (provider message id, recipients).
type Envelopes = Arc<Mutex<Vec<(String, Vec<String>)>>>;

/// The simulator (outbox included), remembering each envelope it was given.
struct Recording {
    inner: Simulator,
    envelopes: Envelopes,
}

#[async_trait]
impl Wrapping for Recording {
    fn inner(&self) -> &dyn Provider {
        &self.inner
    }
    async fn send_raw(&self, message: &OutgoingMessage) -> Result<String, ProviderError> {
        let id = self.inner.send_raw(message).await?;
        self.envelopes
            .lock()
            .unwrap()
            .push((id.clone(), message.recipients.clone()));
        Ok(id)
    }
}

struct Sender {
    app: TestApp,
    outbox: TempOutbox,
    envelopes: Envelopes,
}

impl Sender {
    /// The exact MIME the simulator was handed for this provider message id.
    fn raw(&self, provider_message_id: &str) -> String {
        String::from_utf8(self.outbox.eml(provider_message_id)).unwrap()
    }

    fn envelope(&self, provider_message_id: &str) -> Vec<String> {
        self.envelopes
            .lock()
            .unwrap()
            .iter()
            .find(|(id, _)| id == provider_message_id)
            .map(|(_, r)| r.clone())
            .expect("the provider saw this message")
    }

    /// Sends and returns (message id, provider message id), asserting 202.
    async fn send(&self, body: Value) -> (String, String) {
        let r = self.app.post("/api/v1/emails", body).await;
        assert_eq!(r.status, 202, "{}", r.text);
        (
            r.body["id"].as_str().unwrap().to_string(),
            r.body["provider_message_id"].as_str().unwrap().to_string(),
        )
    }
}

/// An app on a verified example.com whose simulator writes an outbox.
async fn sender() -> Sender {
    let outbox = TempOutbox::new();
    let setting = outbox.setting();
    let envelopes: Envelopes = Arc::default();
    let recorded = envelopes.clone();
    let app = spawn_app_with_provider(
        move |m| m.extend([setting]),
        move |config| {
            Arc::new(Wrapped(Recording {
                inner: Simulator::new(config.simulator_outbox.clone()),
                envelopes: recorded,
            }))
        },
    )
    .await;
    app.verified_domain("example.com").await;
    Sender {
        app,
        outbox,
        envelopes,
    }
}

/// The header block of a raw message (everything before the first blank line).
fn header_block(raw: &str) -> &str {
    raw.split("\r\n\r\n").next().unwrap()
}

/// Names of the top-level headers, lower-cased.
fn header_names(raw: &str) -> Vec<String> {
    header_block(raw)
        .split("\r\n")
        .filter(|l| !l.starts_with([' ', '\t']))
        .filter_map(|l| l.split_once(':'))
        .map(|(n, _)| n.trim().to_ascii_lowercase())
        .collect()
}

fn base(extra: Value) -> Value {
    let mut b =
        json!({"from": "team@example.com", "to": "a@b.com", "subject": "Rules", "text": "t"});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

async fn assert_nothing_recorded(app: &TestApp) {
    assert_eq!(app.get("/api/v1/emails").await.body["data"], json!([]));
}

#[tokio::test]
async fn cc_and_bcc_addresses_are_validated_by_position() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    for (extra, param, bad) in [
        (json!({"cc": "not-an-address"}), "cc[0]", "not-an-address"),
        (
            json!({"cc": ["ok@b.com", "still wrong@"]}),
            "cc[1]",
            "still wrong@",
        ),
        (json!({"bcc": "@nobody"}), "bcc[0]", "@nobody"),
        (
            json!({"bcc": ["ok@b.com", "nope", "fine@b.com"]}),
            "bcc[1]",
            "nope",
        ),
        (
            json!({"cc": ["ok@b.com"], "bcc": ["x@y.com", "z@y.com", "Name <broken>"]}),
            "bcc[2]",
            "broken",
        ),
    ] {
        let r = app.post("/api/v1/emails", base(extra)).await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], param, "{}", r.text);
        assert!(
            r.body["error"].as_str().unwrap().contains(bad),
            "the error should quote {bad:?}: {}",
            r.text
        );
    }
    // A cc/bcc that is neither a string nor an array of strings.
    let r = app.post("/api/v1/emails", base(json!({"cc": 7}))).await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "cc", "{}", r.text);
    assert_nothing_recorded(&app).await;
    // Valid ones, string or array, are accepted.
    let r = app
        .post(
            "/api/v1/emails",
            base(json!({"cc": "Carol <carol@b.com>", "bcc": ["dan@b.com", "erin@b.com"]})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
}

#[tokio::test]
async fn bcc_recipients_get_the_mail_but_no_bcc_header() {
    let s = sender().await;
    let (id, pid) = s
        .send(base(json!({
            "to": ["Ann <ann@b.com>"],
            "cc": "carol@c.com",
            "bcc": ["hidden.one@d.com", "Hidden Two <hidden.two@e.com>"],
        })))
        .await;

    // The envelope names every recipient, bcc included.
    let mut envelope = s.envelope(&pid);
    envelope.sort();
    assert_eq!(
        envelope,
        vec![
            "ann@b.com",
            "carol@c.com",
            "hidden.one@d.com",
            "hidden.two@e.com"
        ]
    );

    // The MIME has To and Cc, and no trace of the bcc recipients.
    let raw = s.raw(&pid);
    let names = header_names(&raw);
    assert!(names.contains(&"to".to_string()), "{raw}");
    assert!(names.contains(&"cc".to_string()), "{raw}");
    assert!(!names.contains(&"bcc".to_string()), "{raw}");
    let lower = raw.to_ascii_lowercase();
    assert!(!lower.contains("bcc:"), "{raw}");
    assert!(!lower.contains("hidden"), "{raw}");
    let parsed = MessageParser::default().parse(raw.as_bytes()).unwrap();
    assert!(parsed.bcc().is_none());
    assert_eq!(
        parsed.cc().unwrap().first().unwrap().address(),
        Some("carol@c.com")
    );

    // The sender's own record keeps the bcc list.
    let m = s.app.get(&format!("/api/v1/emails/{id}")).await.body;
    assert_eq!(
        m["bcc"],
        json!(["hidden.one@d.com", "hidden.two@e.com"]),
        "{m}"
    );
}

#[tokio::test]
async fn reply_to_is_one_valid_address_written_as_reply_to() {
    let s = sender().await;
    for bad in [
        "not an address",
        "help@",
        "a@b.com, c@d.com",
        "Help <help@example.com",
    ] {
        let r = s
            .app
            .post("/api/v1/emails", base(json!({"reply_to": bad})))
            .await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], "reply_to", "{bad:?}: {}", r.text);
    }
    assert_nothing_recorded(&s.app).await;

    let (_, pid) = s
        .send(base(json!({"reply_to": "Help Desk <help@example.com>"})))
        .await;
    let raw = s.raw(&pid);
    let parsed = MessageParser::default().parse(raw.as_bytes()).unwrap();
    let reply_to = parsed.reply_to().expect("a Reply-To header");
    assert_eq!(
        reply_to.first().unwrap().address(),
        Some("help@example.com")
    );
    assert_eq!(
        header_names(&raw)
            .iter()
            .filter(|n| *n == "reply-to")
            .count(),
        1,
        "{raw}"
    );

    // Without reply_to there is no Reply-To header.
    let (_, pid) = s.send(base(json!({}))).await;
    assert!(!header_names(&s.raw(&pid)).contains(&"reply-to".to_string()));
}

#[tokio::test]
async fn owned_headers_are_refused_whatever_their_case() {
    let s = sender().await;
    for name in [
        "To",
        "message-id",
        "FROM",
        "bCc",
        "Reply-To",
        "content-type",
        "Return-Path",
    ] {
        let r = s
            .app
            .post(
                "/api/v1/emails",
                base(json!({"headers": {"X-Fine": "1", name: "someone@example.com"}})),
            )
            .await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], format!("headers.{name}"), "{}", r.text);
    }
    assert_nothing_recorded(&s.app).await;

    // A custom header goes out as given.
    let (_, pid) = s
        .send(base(
            json!({"headers": {"X-Campaign": "spring-sale-2026", "X-Priority-Hint": "low"}}),
        ))
        .await;
    let raw = s.raw(&pid);
    let parsed = MessageParser::default().parse(raw.as_bytes()).unwrap();
    assert_eq!(
        parsed.header_raw("X-Campaign").map(str::trim),
        Some("spring-sale-2026"),
        "{raw}"
    );
    assert_eq!(
        parsed.header_raw("X-Priority-Hint").map(str::trim),
        Some("low"),
        "{raw}"
    );
    assert!(
        header_block(&raw).contains("X-Campaign: spring-sale-2026"),
        "{raw}"
    );
}

#[tokio::test]
async fn a_header_value_that_is_not_a_string_is_422_naming_it() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    for value in [json!(5), json!({"nested": "x"}), json!(["a"]), json!(true)] {
        let r = app
            .post(
                "/api/v1/emails",
                base(json!({"headers": {"X-Count": value}})),
            )
            .await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], "headers.X-Count", "{value}: {}", r.text);
    }
    // `headers` itself must be an object.
    let r = app
        .post("/api/v1/emails", base(json!({"headers": "X-A: 1"})))
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "headers", "{}", r.text);
    assert_nothing_recorded(&app).await;
}

#[tokio::test]
async fn twenty_attachments_are_accepted_and_twenty_one_refused() {
    let s = sender().await;
    let files = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"filename": format!("file-{i:02}.txt"), "content": "aGVsbG8="}))
            .collect()
    };

    let r = s
        .app
        .post("/api/v1/emails", base(json!({"attachments": files(21)})))
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "attachments", "{}", r.text);
    assert!(
        r.body["error"].as_str().unwrap().contains("20"),
        "{}",
        r.text
    );
    assert_nothing_recorded(&s.app).await;

    let (id, pid) = s.send(base(json!({"attachments": files(20)}))).await;
    let m = s.app.get(&format!("/api/v1/emails/{id}")).await.body;
    let mut names: Vec<&str> = m["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["filename"].as_str().unwrap())
        .collect();
    names.sort();
    let expected: Vec<String> = (0..20).map(|i| format!("file-{i:02}.txt")).collect();
    assert_eq!(names, expected);
    let raw = s.raw(&pid);
    let parsed = MessageParser::default().parse(raw.as_bytes()).unwrap();
    assert_eq!(parsed.attachment_count(), 20);
}

#[tokio::test]
async fn bad_base64_is_422_naming_the_attachment() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let r = app
        .post(
            "/api/v1/emails",
            base(json!({"attachments": [
                {"filename": "ok.txt", "content": "aGVsbG8="},
                {"filename": "also-ok.png", "content": "data:image/png;base64,AQID"},
                {"filename": "quarterly-report.pdf", "content": "not base64 at all!"},
            ]})),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "attachments[2].content", "{}", r.text);
    assert!(
        r.body["error"]
            .as_str()
            .unwrap()
            .contains("quarterly-report.pdf"),
        "{}",
        r.text
    );

    // The first bad one names `param`; the error lists them all.
    let r = app
        .post(
            "/api/v1/emails",
            base(json!({"attachments": [
                {"filename": "first.bin", "content": "%%%"},
                {"filename": "fine.txt", "content": "aGk="},
                {"filename": "second.bin", "content": "a"},
            ]})),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "attachments[0].content", "{}", r.text);
    let error = r.body["error"].as_str().unwrap();
    assert!(error.contains("first.bin"), "{}", r.text);
    assert!(error.contains("second.bin"), "{}", r.text);
    assert_nothing_recorded(&app).await;
}

#[tokio::test]
async fn an_attachment_with_content_id_is_an_inline_part() {
    let s = sender().await;
    let html = "<p>Our logo:</p><img src=\"cid:logo-1\" alt=\"logo\">";
    let (id, pid) = s
        .send(base(json!({
            "html": html,
            "attachments": [
                {"filename": "logo.png", "content": "data:image/png;base64,iVBORw0KGgo=", "content_id": "logo-1"},
                {"filename": "terms.txt", "content": "dGVybXM="},
            ],
        })))
        .await;

    let raw = s.raw(&pid);
    assert!(raw.contains("Content-ID: <logo-1>"), "{raw}");
    let parsed = MessageParser::default().parse(raw.as_bytes()).unwrap();
    let html_out = parsed.body_html(0).expect("an HTML body");
    assert!(html_out.contains("src=\"cid:logo-1\""), "{html_out}");

    let parts: Vec<_> = parsed.attachments().collect();
    assert_eq!(parts.len(), 2, "{raw}");
    let logo = parts
        .iter()
        .find(|p| p.content_id().is_some())
        .expect("a part with a Content-ID");
    assert_eq!(logo.content_id(), Some("logo-1"));
    let disposition = logo.content_disposition().expect("a Content-Disposition");
    assert!(disposition.is_inline(), "{raw}");
    assert!(logo.is_content_type("image", "png"), "{raw}");
    assert_eq!(logo.contents(), b"\x89PNG\r\n\x1a\n");
    let terms = parts
        .iter()
        .find(|p| p.content_id().is_none())
        .expect("the plain attachment");
    assert!(
        terms.content_disposition().unwrap().is_attachment(),
        "{raw}"
    );
    assert_eq!(terms.attachment_name(), Some("terms.txt"));

    let m = s.app.get(&format!("/api/v1/emails/{id}")).await.body;
    let atts = m["attachments"].as_array().unwrap();
    let logo = atts.iter().find(|a| a["filename"] == "logo.png").unwrap();
    assert_eq!(logo["inline"], true, "{m}");
    assert_eq!(logo["content_id"], "logo-1", "{m}");
    let terms = atts.iter().find(|a| a["filename"] == "terms.txt").unwrap();
    assert_eq!(terms["inline"], false, "{m}");
    assert_eq!(terms["content_id"], Value::Null, "{m}");
}
