//! Issue 13: subjects that once panicked a send's record, a send whose
//! record fails after the provider accepted it, SES control headers, and the
//! caps on what one request or one reply may hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use pigeonhole::core::inbound;
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::provider::{OutgoingMessage, Provider, ProviderError};
use pigeonhole::sql;
use pigeonhole::store::{Backend, RowExt, Sql};
use serde_json::{Value, json};

use crate::helpers::{
    Resp, TempOutbox, TestApp, Wrapped, Wrapping, assert_error, eventually, spawn_app,
    spawn_app_with, spawn_app_with_provider,
};

/// The simulator, counting the messages handed to it.
struct Counting(Simulator, Arc<AtomicUsize>);

#[async_trait]
impl Wrapping for Counting {
    fn inner(&self) -> &dyn Provider {
        &self.0
    }
    async fn send_raw(&self, message: &OutgoingMessage) -> Result<String, ProviderError> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.0.send_raw(message).await
    }
}

async fn counting_app() -> (TestApp, Arc<AtomicUsize>) {
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    let app = spawn_app_with_provider(
        |_| {},
        move |_| Arc::new(Wrapped(Counting(Simulator::new(None), counter))),
    )
    .await;
    app.verified_domain("example.com").await;
    (app, sent)
}

fn send_body(subject: &str) -> Value {
    json!({"from": "team@example.com", "to": "a@b.com", "subject": subject, "text": "Hi"})
}

async fn post_with_key(app: &TestApp, path: &str, key: &str, body: &Value) -> Resp {
    let resp = app
        .client
        .post(format!("{}{path}", app.base))
        .bearer_auth(&app.key)
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    Resp {
        status,
        headers,
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    }
}

/// Subjects whose lower case has another length than themselves: the
/// Kelvin sign shrinks, `İ` grows.
const UNICODE_SUBJECTS: [(&str, &str); 4] = [
    ("Re:\u{212a}", "\u{212a}"),
    (
        "Re:\u{130}\u{130}\u{130}\u{130}",
        "\u{130}\u{130}\u{130}\u{130}",
    ),
    (
        "RE: Fwd:\u{130}\u{130}\u{130}\u{130}\u{130} x",
        "\u{130}\u{130}\u{130}\u{130}\u{130} x",
    ),
    ("\u{212a}elvin", "\u{212a}elvin"),
];

#[tokio::test]
async fn subjects_whose_lower_case_changes_length_are_sent_listed_and_threaded() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    for (subject, thread_subject) in UNICODE_SUBJECTS {
        let r = app.post("/api/v1/emails", send_body(subject)).await;
        assert_eq!(r.status, 202, "{subject:?}: {}", r.text);
        let id = r.body["id"].as_str().unwrap();
        let m = app.get(&format!("/api/v1/emails/{id}")).await;
        assert_eq!(m.body["subject"], subject);
        // The simulator's delivery event may land before this read.
        assert!(
            ["sent", "delivered"].contains(&m.body["status"].as_str().unwrap_or("")),
            "{}",
            m.text
        );
        let t = app
            .get(&format!(
                "/api/v1/threads/{}",
                r.body["thread_id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(t.status, 200, "{}", t.text);
        assert_eq!(t.body["subject"], thread_subject);
    }
    let listed = app.list_all("/api/v1/emails").await;
    assert_eq!(listed.len(), UNICODE_SUBJECTS.len());

    // A reply that names no message joins the thread by its subject key.
    let first = app.post("/api/v1/emails", send_body("Re:\u{212a}")).await;
    let raw = "From: a@b.com\r\nTo: team@example.com\r\nSubject: Re: re:\u{212a}\r\n\
               Message-ID: <answer@b.com>\r\n\r\nanswer\r\n";
    let stored = inbound::ingest(
        &app.db,
        raw.as_bytes().to_vec().into(),
        &["team@example.com".into()],
        &[],
    )
    .await
    .expect("ingested");
    assert_eq!(stored.len(), 1);
    let thread_of_first = app
        .get(&format!(
            "/api/v1/emails/{}",
            first.body["id"].as_str().unwrap()
        ))
        .await
        .body["thread_id"]
        .clone();
    // The newest thread of that subject key: the one just sent.
    assert_eq!(json!(stored[0].thread_id), thread_of_first);
}

/// Makes the database refuse the full record of a sent message (a row of
/// status `sent`); the short record (`failed`) still goes in.
async fn refuse_full_records(app: &TestApp) {
    let statements: &[&str] = match app.db.backend() {
        Backend::Sqlite => &["CREATE TRIGGER refuse_sent BEFORE INSERT ON messages \
             WHEN NEW.status = 'sent' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"],
        Backend::Postgres => &[
            "CREATE FUNCTION refuse_sent() RETURNS trigger LANGUAGE plpgsql AS \
             $body$ BEGIN RAISE EXCEPTION 'refused by the test'; END $body$",
            "CREATE TRIGGER refuse_sent BEFORE INSERT ON messages FOR EACH ROW \
             WHEN (NEW.status = 'sent') EXECUTE FUNCTION refuse_sent()",
        ],
    };
    for s in statements {
        Sql::new(s).execute(app.db.writer()).await.expect(s);
    }
}

fn assert_sent_not_recorded(r: &Resp) -> (String, String) {
    assert_error(r, 500, "server_error");
    let error = r.body["error"].as_str().unwrap();
    assert!(error.contains("do not send it again"), "{error}");
    let id = r.body["id"].as_str().expect("id").to_string();
    let provider_id = r.body["provider_message_id"].as_str().expect("provider id");
    (id, provider_id.to_string())
}

#[tokio::test]
async fn an_accepted_send_whose_record_fails_is_recorded_failed_and_never_sent_twice() {
    let (app, sent) = counting_app().await;
    refuse_full_records(&app).await;
    let body = send_body("Quarterly numbers");
    let r = post_with_key(&app, "/api/v1/emails", "once", &body).await;
    let (id, provider_id) = assert_sent_not_recorded(&r);
    assert_eq!(sent.load(Ordering::SeqCst), 1);

    let listed = app.list_all("/api/v1/emails").await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let m = &listed[0];
    assert_eq!(m["id"], id);
    assert_eq!(m["status"], "failed");
    assert_eq!(m["provider_message_id"], provider_id);
    assert_eq!(m["subject"], "Quarterly numbers");
    assert!(
        m["error"]
            .as_str()
            .unwrap()
            .contains("could not write its full record"),
        "{m}"
    );
    let full = app.get(&format!("/api/v1/emails/{id}")).await;
    assert_eq!(full.body["text"], "Hi");
    let thread = app
        .get(&format!(
            "/api/v1/threads/{}",
            m["thread_id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(thread.status, 200, "{}", thread.text);
    assert_eq!(app.outbox_types().await.last().unwrap(), "email.failed");

    // The retry replays the answer; the provider does not see it again.
    let again = post_with_key(&app, "/api/v1/emails", "once", &body).await;
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    assert_eq!((again.status, &again.body), (r.status, &r.body));
    assert_eq!(sent.load(Ordering::SeqCst), 1);

    // Per item in a batch; the batch's reply is stored like any other.
    let batch = json!([send_body("one"), {"from": "team@example.com", "to": "bad", "text": "x"}]);
    let b = post_with_key(&app, "/api/v1/emails/batch", "batch", &batch).await;
    assert_eq!(b.status, 207, "{}", b.text);
    assert_eq!(b.body["data"][0]["ok"], false);
    assert_eq!(b.body["data"][0]["status"], 500);
    assert!(
        b.body["data"][0]["error"]
            .as_str()
            .unwrap()
            .contains("do not send it again"),
        "{}",
        b.text
    );
    assert_eq!(sent.load(Ordering::SeqCst), 2);
    let b2 = post_with_key(&app, "/api/v1/emails/batch", "batch", &batch).await;
    assert_eq!(b2.header("idempotency-replayed"), Some("true"));
    assert_eq!(sent.load(Ordering::SeqCst), 2);
    let statuses: Vec<Value> = app
        .list_all("/api/v1/emails")
        .await
        .iter()
        .map(|m| m["status"].clone())
        .collect();
    assert_eq!(statuses, ["failed", "failed"]);
}

#[tokio::test]
async fn a_draft_sent_but_not_recorded_is_gone() {
    let (app, sent) = counting_app().await;
    app.mailbox("team@example.com").await;
    let d = app
        .post(
            "/api/v1/drafts",
            json!({"from": "team@example.com", "to": "a@b.com", "subject": "S", "text": "T"}),
        )
        .await;
    assert_eq!(d.status, 201, "{}", d.text);
    refuse_full_records(&app).await;
    let id = d.body["id"].as_str().unwrap();
    let r = app
        .post(&format!("/api/v1/drafts/{id}/send"), json!({}))
        .await;
    assert_sent_not_recorded(&r);
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    assert_eq!(app.get(&format!("/api/v1/drafts/{id}")).await.status, 404);
    let again = app
        .post(&format!("/api/v1/drafts/{id}/send"), json!({}))
        .await;
    assert_eq!(again.status, 404);
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}

fn with_headers(headers: Value) -> Value {
    json!({"from": "team@example.com", "to": "a@b.com", "subject": "S", "text": "T", "headers": headers})
}

#[tokio::test]
async fn ses_control_headers_are_refused_wherever_headers_are_accepted() {
    let (app, sent) = counting_app().await;
    for name in [
        "X-SES-CONFIGURATION-SET",
        "x-ses-source-arn",
        "X-Ses-From-Arn",
    ] {
        let r = app
            .post("/api/v1/emails", with_headers(json!({ name: "other" })))
            .await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], format!("headers.{name}"), "{}", r.text);
    }
    let b = app
        .post(
            "/api/v1/emails/batch",
            json!([
                with_headers(json!({"X-Fine": "1"})),
                with_headers(json!({"X-SES-CONFIGURATION-SET": "x"}))
            ]),
        )
        .await;
    assert_eq!(b.status, 207, "{}", b.text);
    assert_eq!(b.body["data"][0]["ok"], true);
    assert_eq!(b.body["data"][1]["ok"], false);
    assert_eq!(b.body["data"][1]["status"], 422);
    assert!(
        b.body["data"][1]["error"]
            .as_str()
            .unwrap()
            .contains("headers.X-SES-CONFIGURATION-SET"),
        "{}",
        b.text
    );
    let thread = b.body["data"][0]["thread_id"].as_str().unwrap();
    let reply = app
        .post(
            &format!("/api/v1/threads/{thread}/reply"),
            json!({"text": "r", "headers": {"X-SES-SOURCE-ARN": "arn:aws:ses:x"}}),
        )
        .await;
    assert_error(&reply, 422, "invalid_request");
    assert_eq!(reply.body["param"], "headers.X-SES-SOURCE-ARN");
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "only the fine batch item went out"
    );
}

/// Drafts take no custom headers: whatever a draft body says, the sent
/// MIME carries none.
#[tokio::test]
async fn drafts_carry_no_custom_headers() {
    let outbox = TempOutbox::new();
    let setting = outbox.setting();
    let app = spawn_app_with(move |m| m.extend([setting])).await;
    app.verified_domain("example.com").await;
    app.mailbox("team@example.com").await;
    let d = app
        .post(
            "/api/v1/drafts",
            json!({"from": "team@example.com", "to": "a@b.com", "text": "T",
                   "headers": {"X-SES-CONFIGURATION-SET": "around"}}),
        )
        .await;
    assert_eq!(d.status, 201, "{}", d.text);
    let r = app
        .post(
            &format!("/api/v1/drafts/{}/send", d.body["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let eml = String::from_utf8(outbox.eml(r.body["provider_message_id"].as_str().unwrap()))
        .unwrap()
        .to_ascii_lowercase();
    assert!(!eml.contains("x-ses-"), "{eml}");
}

fn numbered_headers(n: usize) -> Value {
    Value::Object(
        (0..n)
            .map(|i| (format!("X-Custom-{i}"), json!("v")))
            .collect(),
    )
}

#[tokio::test]
async fn custom_headers_and_tags_per_send_are_capped() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let at_limit = app
        .post("/api/v1/emails", with_headers(numbered_headers(50)))
        .await;
    assert_eq!(at_limit.status, 202, "{}", at_limit.text);
    let m = app
        .get(&format!(
            "/api/v1/emails/{}",
            at_limit.body["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(m.body["headers"].as_object().unwrap().len(), 50);
    let over = app
        .post("/api/v1/emails", with_headers(numbered_headers(51)))
        .await;
    assert_error(&over, 422, "invalid_request");
    assert_eq!(over.body["param"], "headers");

    let tags = |n: usize| -> Value {
        (0..n)
            .map(|i| json!({"name": format!("t{i}"), "value": "v"}))
            .collect()
    };
    let mut body = send_body("tagged");
    body["tags"] = tags(50);
    assert_eq!(app.post("/api/v1/emails", body.clone()).await.status, 202);
    body["tags"] = tags(51);
    let over = app.post("/api/v1/emails", body).await;
    assert_error(&over, 422, "invalid_request");
    assert_eq!(over.body["param"], "tags");
    assert_eq!(app.list_all("/api/v1/emails").await.len(), 2);
}

/// A received message with `n` small attachments.
fn with_attachments(n: usize, message_id: &str) -> Vec<u8> {
    let mut raw = format!(
        "From: a@b.com\r\nTo: team@example.com\r\nSubject: files\r\nMessage-ID: <{message_id}>\r\n\
         MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"B\"\r\n\r\n\
         --B\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n"
    );
    for i in 0..n {
        raw.push_str(&format!(
            "--B\r\nContent-Type: application/octet-stream\r\n\
             Content-Disposition: attachment; filename=\"f{i}.bin\"\r\n\
             Content-Transfer-Encoding: base64\r\n\r\nAQID\r\n"
        ));
    }
    raw.push_str("--B--\r\n");
    raw.into_bytes()
}

#[tokio::test]
async fn a_reply_lists_at_most_100_attachments_and_counts_them_all() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    app.mailbox("team@example.com").await;
    for (n, listed) in [(100usize, 100usize), (101, 100), (250, 100)] {
        let message_id = format!("many-{n}@b.com");
        let stored = inbound::ingest(
            &app.db,
            with_attachments(n, &message_id).into(),
            &["team@example.com".into()],
            &[],
        )
        .await
        .expect("ingested");
        let id = &stored[0].id;
        let m = app.get(&format!("/api/v1/messages/{id}")).await;
        assert_eq!(m.status, 200, "{}", m.text);
        let list = m.body["attachments"].as_array().unwrap();
        assert_eq!(list.len(), listed, "{n}");
        assert_eq!(m.body["attachment_count"], n);
        // The first ones by id; one left out is still downloadable by it.
        let ids: Vec<String> = sql!(
            "SELECT id FROM attachments WHERE message_id = $1 ORDER BY id",
            id
        )
        .fetch_all(app.db.reader())
        .await
        .unwrap()
        .iter()
        .map(|r| r.text("id").unwrap())
        .collect();
        assert_eq!(ids.len(), n);
        let shown: Vec<&str> = list.iter().map(|a| a["id"].as_str().unwrap()).collect();
        assert_eq!(shown, ids[..listed]);
        let thread = app
            .get(&format!("/api/v1/threads/{}", stored[0].thread_id))
            .await;
        assert_eq!(
            thread.body["messages"][0]["attachments"]
                .as_array()
                .unwrap()
                .len(),
            listed
        );
        let last = &ids[n - 1];
        let file = app
            .client
            .get(format!(
                "{}/api/v1/messages/{id}/attachments/{last}",
                app.base
            ))
            .bearer_auth(&app.key)
            .send()
            .await
            .unwrap();
        assert_eq!(file.status(), 200);
        assert_eq!(file.bytes().await.unwrap().as_ref(), [1u8, 2, 3]);
    }
    // Sent mail counts its attachments too.
    let mut body = send_body("with a file");
    body["attachments"] = json!([{"filename": "a.txt", "content": "aGk="}]);
    let r = app.post("/api/v1/emails", body).await;
    let m = app
        .get(&format!(
            "/api/v1/emails/{}",
            r.body["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(m.body["attachment_count"], 1);
    assert_eq!(m.body["attachments"].as_array().unwrap().len(), 1);
}

/// The simulator, saying when a message reaches it and answering only
/// after a pause.
struct Slow(Simulator, Arc<AtomicUsize>, Arc<tokio::sync::Notify>);

#[async_trait]
impl Wrapping for Slow {
    fn inner(&self) -> &dyn Provider {
        &self.0
    }
    async fn send_raw(&self, message: &OutgoingMessage) -> Result<String, ProviderError> {
        self.1.fetch_add(1, Ordering::SeqCst);
        self.2.notify_one();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        self.0.send_raw(message).await
    }
}

/// Posts `body` to `path` as a client that goes away as soon as the
/// provider has the message.
async fn give_up(
    app: &TestApp,
    reached: &tokio::sync::Notify,
    path: &str,
    idempotency_key: Option<&str>,
    body: &Value,
) {
    let mut request = app
        .client
        .post(format!("{}{path}", app.base))
        .bearer_auth(&app.key)
        .json(body);
    if let Some(k) = idempotency_key {
        request = request.header("Idempotency-Key", k);
    }
    tokio::select! {
        r = request.send() => panic!("the send answered before the provider did: {r:?}"),
        _ = reached.notified() => {}
    }
}

/// A client that gives up while its send is with the provider cancels
/// nothing: the send is recorded, a retry under its key replays the
/// answer, and the message goes out once.
#[tokio::test]
async fn a_client_that_goes_away_mid_send_cancels_nothing() {
    let sent = Arc::new(AtomicUsize::new(0));
    let reached = Arc::new(tokio::sync::Notify::new());
    let (counter, signal) = (sent.clone(), reached.clone());
    let app = spawn_app_with_provider(
        |_| {},
        move |_| Arc::new(Wrapped(Slow(Simulator::new(None), counter, signal))),
    )
    .await;
    app.verified_domain("example.com").await;
    let recorded = |n: usize| {
        let app = &app;
        async move {
            eventually("the sends to be recorded", || async {
                (app.list_all("/api/v1/emails").await.len() == n).then_some(())
            })
            .await
        }
    };

    let body = send_body("patience");
    give_up(&app, &reached, "/api/v1/emails", Some("impatient"), &body).await;
    recorded(1).await;
    let again = eventually("the key to be settled", || async {
        let r = post_with_key(&app, "/api/v1/emails", "impatient", &body).await;
        (r.status != 409).then_some(r)
    })
    .await;
    assert_eq!(again.status, 202, "{}", again.text);
    assert_eq!(again.header("idempotency-replayed"), Some("true"));
    assert_eq!(sent.load(Ordering::SeqCst), 1);

    // Without a key, and through a thread reply.
    give_up(&app, &reached, "/api/v1/emails", None, &body).await;
    recorded(2).await;
    let thread = again.body["thread_id"].as_str().unwrap();
    give_up(
        &app,
        &reached,
        &format!("/api/v1/threads/{thread}/reply"),
        None,
        &json!({"text": "r"}),
    )
    .await;
    recorded(3).await;
    assert_eq!(sent.load(Ordering::SeqCst), 3);
}
