//! Inbound mail: a real SMTP client (Python's smtplib) against the listener,
//! raw-socket clients that misbehave, and the ingestion function itself.
//! Stored mail is read back through the database.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use pigeonhole::core::inbound;
use pigeonhole::core::memory::MemoryBudget;
use pigeonhole::core::messages::{self, Message};
use pigeonhole::smtp::SmtpConfig;
use pigeonhole::sql;
use pigeonhole::store::{Db, RowExt, Sql};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::helpers::{TestApp, TestSmtp, spawn_app, start_smtp};

/// The smtplib client: one session, any number of messages, every reply
/// reported as `[code, text]`.
const CLIENT: &str = r#"
import json, smtplib, ssl, sys
spec = json.load(sys.stdin)
def text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
def pair(r):
    return [r[0], text(r[1])]
out = {}
s = smtplib.SMTP(spec["host"], spec["port"], timeout=30)
out["ehlo"] = pair(s.ehlo("client.test"))
out["features"] = sorted(s.esmtp_features.keys())
if spec.get("starttls"):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    out["starttls"] = pair(s.starttls(context=ctx))
    out["ehlo2"] = pair(s.ehlo("client.test"))
    out["features2"] = sorted(s.esmtp_features.keys())
out["results"] = []
for m in spec["messages"]:
    r = {"mail": pair(s.mail(m["from"], m.get("options", [])))}
    r["rcpt"] = [pair(s.rcpt(x)) for x in m["rcpts"]]
    if r["mail"][0] == 250 and any(c == 250 for c, _ in r["rcpt"]):
        try:
            r["data"] = pair(s.data(m["data"].encode("utf-8")))
        except smtplib.SMTPDataError as e:
            r["data"] = [e.smtp_code, text(e.smtp_error)]
    else:
        s.rset()
    out["results"].append(r)
out["quit"] = pair(s.quit())
print(json.dumps(out))
"#;

fn python() -> String {
    std::env::var("PIGEONHOLE_TEST_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// Runs the smtplib client with `spec` (`messages`, optional `starttls`).
async fn smtplib(addr: SocketAddr, mut spec: Value) -> Value {
    spec["host"] = json!(addr.ip().to_string());
    spec["port"] = json!(addr.port());
    tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(python())
            .arg("-c")
            .arg(CLIENT)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run python3 (or set PIGEONHOLE_TEST_PYTHON)");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(spec.to_string().as_bytes())
            .expect("write spec");
        let out = child.wait_with_output().expect("python3 output");
        assert!(
            out.status.success(),
            "smtplib client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("client JSON")
    })
    .await
    .expect("client task")
}

/// One message in one session; returns that message's replies.
pub(crate) async fn send(addr: SocketAddr, from: &str, rcpts: &[&str], data: &str) -> Value {
    let out = smtplib(
        addr,
        json!({"messages": [{"from": from, "rcpts": rcpts, "data": crlf(data)}]}),
    )
    .await;
    out["results"][0].clone()
}

fn crlf(s: &str) -> String {
    s.replace("\r\n", "\n").replace('\n', "\r\n")
}

fn code(v: &Value) -> i64 {
    v[0].as_i64().unwrap_or(0)
}

pub(crate) fn assert_stored(r: &Value) {
    assert_eq!(code(&r["mail"]), 250, "{r}");
    assert_eq!(code(&r["data"]), 250, "{r}");
}

pub(crate) struct Inbound {
    pub(crate) app: TestApp,
    pub(crate) smtp: TestSmtp,
}

pub(crate) fn test_config() -> SmtpConfig {
    SmtpConfig {
        hostname: "mx.ours.test".into(),
        ..SmtpConfig::default()
    }
}

/// ours.test verified with the mailbox inbox@ours.test, and a listener.
pub(crate) async fn setup_with(config: SmtpConfig) -> Inbound {
    let app = spawn_app().await;
    app.verified_domain("ours.test").await;
    app.mailbox("inbox@ours.test").await;
    let smtp = start_smtp(&app, config).await;
    Inbound { app, smtp }
}

async fn setup() -> Inbound {
    setup_with(test_config()).await
}

/// Makes `address` the catch-all mailbox.
async fn catch_all(app: &TestApp, address: &str) {
    let r = app
        .post(
            "/api/v1/mailboxes",
            json!({"address": address, "is_catch_all": true}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
}

pub(crate) async fn inbound_in(db: &Db, mailbox: &str) -> Vec<Message> {
    let rows = Sql::new(&format!(
        "SELECT {} FROM messages m WHERE m.direction = 'inbound' AND m.mailbox = ",
        messages::COLUMNS
    ))
    .bind(mailbox)
    .push(" ORDER BY m.seq")
    .fetch_all(db.reader())
    .await
    .expect("read messages");
    rows.iter()
        .map(|r| Message::from_row(r).expect("message row"))
        .collect()
}

async fn count(db: &Db, sql: Sql) -> i64 {
    sql.fetch_one(db.reader())
        .await
        .expect("count")
        .int("n")
        .expect("n")
}

pub(crate) async fn raw_of(db: &Db, id: &str) -> Vec<u8> {
    sql!("SELECT raw FROM messages WHERE id = $1", id)
        .fetch_one(db.reader())
        .await
        .expect("raw")
        .bytes("raw")
        .expect("raw bytes")
}

struct ThreadRow {
    subject: String,
    message_count: i64,
    unread_count: i64,
    folders: String,
    has_attachments: bool,
}

async fn thread(db: &Db, id: &str) -> ThreadRow {
    let r = sql!(
        "SELECT subject, message_count, unread_count, folders, has_attachments FROM threads WHERE id = $1",
        id
    )
    .fetch_one(db.reader())
    .await
    .expect("thread");
    ThreadRow {
        subject: r.text("subject").unwrap(),
        message_count: r.int("message_count").unwrap(),
        unread_count: r.int("unread_count").unwrap(),
        folders: r.text("folders").unwrap(),
        has_attachments: r.flag("has_attachments").unwrap(),
    }
}

async fn received_events(db: &Db) -> Vec<Value> {
    sql!("SELECT payload FROM events WHERE type = 'mail.received' ORDER BY seq")
        .fetch_all(db.reader())
        .await
        .expect("events")
        .iter()
        .map(|r| serde_json::from_str(&r.text("payload").unwrap()).unwrap())
        .collect()
}

async fn contacts(db: &Db, mailbox_id: &str) -> Vec<(String, Option<String>, i64)> {
    sql!(
        "SELECT address, name, message_count FROM contacts WHERE mailbox_id = $1 ORDER BY address",
        mailbox_id
    )
    .fetch_all(db.reader())
    .await
    .expect("contacts")
    .iter()
    .map(|r| {
        (
            r.text("address").unwrap(),
            r.opt_text("name").unwrap(),
            r.int("message_count").unwrap(),
        )
    })
    .collect()
}

const HELLO: &str = "From: Ann Example <ann@external.test>
To: inbox@ours.test
Cc: Carol <carol@external.test>
Subject: Hello
Message-ID: <hello-1@external.test>
Date: Sun, 22 Nov 2026 10:00:00 +0000

Hi there, this is the first message.
.a line that starts with a dot
";

#[tokio::test]
async fn a_plain_message_is_stored_threaded_and_announced() {
    let t = setup().await;
    let out = smtplib(
        t.smtp.addr,
        json!({"messages": [{"from": "ann@external.test", "rcpts": ["inbox@ours.test"], "data": crlf(HELLO)}]}),
    )
    .await;
    assert_eq!(code(&out["ehlo"]), 250, "{out}");
    assert!(out["ehlo"][1].as_str().unwrap().starts_with("mx.ours.test"));
    for f in ["size", "8bitmime", "pipelining", "smtputf8"] {
        assert!(
            out["features"].as_array().unwrap().contains(&json!(f)),
            "{out}"
        );
    }
    assert!(
        !out["features"]
            .as_array()
            .unwrap()
            .contains(&json!("starttls"))
    );
    let r = &out["results"][0];
    assert_stored(r);
    assert_eq!(code(&r["rcpt"][0]), 250);
    assert_eq!(code(&out["quit"]), 221);

    let stored = inbound_in(&t.app.db, "inbox@ours.test").await;
    assert_eq!(stored.len(), 1);
    let m = &stored[0];
    assert!(r["data"][1].as_str().unwrap().contains(&m.id), "{r}");
    assert_eq!(m.direction, "inbound");
    assert_eq!(m.folder, "inbox");
    assert_eq!(m.status, "received");
    assert!(!m.is_read && !m.is_draft);
    assert!(m.received_at.is_some());
    assert_eq!(m.message_id, "<hello-1@external.test>");
    assert_eq!(m.from_address, "ann@external.test");
    assert_eq!(m.from_name.as_deref(), Some("Ann Example"));
    assert_eq!(m.to, vec!["inbox@ours.test"]);
    assert_eq!(m.cc, vec!["carol@external.test"]);
    assert_eq!(m.subject, "Hello");
    assert!(m.text.contains("first message"));
    assert!(
        m.text.contains("\n.a line that starts with a dot"),
        "{:?}",
        m.text
    );
    assert_eq!(m.headers["Subject"], "Hello");
    assert!(
        m.headers["Received"]
            .as_str()
            .unwrap()
            .contains("by mx.ours.test (Pigeonhole) with ESMTP")
    );
    assert_eq!(m.headers["Return-Path"], "<ann@external.test>");
    let raw = String::from_utf8(raw_of(&t.app.db, &m.id).await).unwrap();
    assert!(
        raw.starts_with(
            "Return-Path: <ann@external.test>\r\nReceived: from client.test (127.0.0.1)"
        )
    );
    assert!(raw.ends_with(&crlf(HELLO)), "{raw}");

    // The single read sees it too.
    let read = messages::get(
        &t.app.db,
        &pigeonhole::auth::Reach::Account,
        messages::Direction::Inbound,
        &m.id,
    )
    .await
    .unwrap()
    .expect("readable");
    assert_eq!(read.thread_id, m.thread_id);

    let th = thread(&t.app.db, &m.thread_id).await;
    assert_eq!(th.subject, "Hello");
    assert_eq!((th.message_count, th.unread_count), (1, 1));
    assert_eq!(th.folders, ",inbox,");
    assert!(!th.has_attachments);

    // The event was written with the message.
    let events = received_events(&t.app.db).await;
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(e["type"], "mail.received");
    assert_eq!(e["data"]["email"]["id"], json!(m.id));
    assert_eq!(e["data"]["email"]["thread_id"], json!(m.thread_id));
    assert_eq!(e["data"]["email"]["direction"], "inbound");
    assert_eq!(e["data"]["email"]["status"], "received");
    assert!(e["data"]["email"].get("text").is_none());
    assert!(e["data"]["received_at"].is_string());
    let mailbox_of_event = sql!("SELECT mailbox_id FROM events WHERE type = 'mail.received'")
        .fetch_one(t.app.db.reader())
        .await
        .unwrap()
        .opt_text("mailbox_id")
        .unwrap();
    assert_eq!(mailbox_of_event.as_deref(), Some(m.mailbox_id.as_str()));

    // Contacts: the sender and the other recipient, never the mailbox itself.
    assert_eq!(
        contacts(&t.app.db, &m.mailbox_id).await,
        vec![
            ("ann@external.test".into(), Some("Ann Example".into()), 1),
            ("carol@external.test".into(), Some("Carol".into()), 1),
        ]
    );
    let second = HELLO
        .replace("hello-1@", "hello-2@")
        .replace("Cc: Carol <carol@external.test>\n", "");
    assert_stored(
        &send(
            t.smtp.addr,
            "ann@external.test",
            &["inbox@ours.test"],
            &second,
        )
        .await,
    );
    assert_eq!(
        contacts(&t.app.db, &m.mailbox_id).await,
        vec![
            ("ann@external.test".into(), Some("Ann Example".into()), 2),
            ("carol@external.test".into(), Some("Carol".into()), 1),
        ]
    );
}

#[tokio::test]
async fn recipients_are_checked_at_rcpt_and_each_mailbox_gets_one_copy() {
    let t = setup().await;
    t.app.mailbox("sales@ours.test").await;
    let r = send(
        t.smtp.addr,
        "ann@external.test",
        &[
            "inbox@ours.test",
            "Sales@Ours.test",
            "nobody@ours.test",
            "someone@elsewhere.test",
            "inbox@ours.test",
        ],
        "From: ann@external.test\nTo: inbox@ours.test, sales@ours.test\nSubject: Both\nMessage-ID: <both@external.test>\n\nFor both of you.\n",
    )
    .await;
    assert_stored(&r);
    let codes: Vec<i64> = r["rcpt"].as_array().unwrap().iter().map(code).collect();
    assert_eq!(codes, vec![250, 250, 550, 550, 250], "{r}");
    assert!(
        r["rcpt"][2][1].as_str().unwrap().starts_with("5.1.1"),
        "{r}"
    );

    let a = inbound_in(&t.app.db, "inbox@ours.test").await;
    let b = inbound_in(&t.app.db, "sales@ours.test").await;
    assert_eq!((a.len(), b.len()), (1, 1));
    assert_eq!(a[0].message_id, b[0].message_id);
    assert_ne!(a[0].thread_id, b[0].thread_id);
    assert_eq!(received_events(&t.app.db).await.len(), 2);
    let n = count(&t.app.db, sql!("SELECT COUNT(*) AS n FROM messages")).await;
    assert_eq!(n, 2);

    // Nobody here at all: the transaction has no recipients.
    let r = send(
        t.smtp.addr,
        "ann@external.test",
        &["x@elsewhere.test"],
        "Subject: x\n\nx\n",
    )
    .await;
    assert_eq!(code(&r["rcpt"][0]), 550);
    assert!(r.get("data").is_none());
}

#[tokio::test]
async fn catch_all_and_auto_created_mailboxes() {
    let t = setup().await;
    catch_all(&t.app, "everything@ours.test").await;
    let r = send(
        t.smtp.addr,
        "ann@external.test",
        &["random.person@ours.test", "inbox@ours.test"],
        "Subject: Catch me\nMessage-ID: <catch@external.test>\n\nhello\n",
    )
    .await;
    assert_stored(&r);
    assert_eq!(inbound_in(&t.app.db, "everything@ours.test").await.len(), 1);
    assert_eq!(inbound_in(&t.app.db, "inbox@ours.test").await.len(), 1);

    // A domain that creates mailboxes on first mail, and a subdomain under it.
    let r = t
        .app
        .post(
            "/api/v1/domains",
            json!({"name": "auto.test", "auto_create_mailboxes": true}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = t
        .app
        .post("/api/v1/domains/auto.test/verify", json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        t.app
            .get("/api/v1/mailboxes/new.person@auto.test")
            .await
            .status,
        404
    );
    let r = send(
        t.smtp.addr,
        "ann@external.test",
        &["New.Person@auto.test", "ops@team.auto.test"],
        "Subject: Welcome\nMessage-ID: <welcome@external.test>\n\nhi\n",
    )
    .await;
    assert_stored(&r);
    let mb = t.app.get("/api/v1/mailboxes/new.person@auto.test").await;
    assert_eq!(mb.status, 200, "{}", mb.text);
    assert_eq!(mb.body["domain"], "auto.test");
    let sub = t.app.get("/api/v1/mailboxes/ops@team.auto.test").await;
    assert_eq!(sub.status, 200, "{}", sub.text);
    assert_eq!(sub.body["domain_id"], mb.body["domain_id"]);
    assert_eq!(inbound_in(&t.app.db, "new.person@auto.test").await.len(), 1);
    assert_eq!(inbound_in(&t.app.db, "ops@team.auto.test").await.len(), 1);

    // Only addresses the API would accept become mailboxes.
    for odd in [
        "\"quoted\"@auto.test",
        "a..b@auto.test",
        "x@bad_domain.auto.test",
    ] {
        let d = inbound::accepts_recipient(&t.app.db, odd).await.unwrap();
        assert!(!d.accepted(), "{odd}: {d:?}");
    }
    assert!(
        inbound::accepts_recipient(&t.app.db, "Fine.Name+tag@auto.test")
            .await
            .unwrap()
            .accepted()
    );

    // Auto-creation is off: unknown addresses there are refused.
    let r = t
        .app
        .patch(
            "/api/v1/domains/auto.test",
            json!({"auto_create_mailboxes": false}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = send(
        t.smtp.addr,
        "ann@external.test",
        &["other@auto.test", "new.person@auto.test"],
        "Subject: x\n\nx\n",
    )
    .await;
    assert_eq!(code(&r["rcpt"][0]), 550, "{r}");
    assert_eq!(code(&r["rcpt"][1]), 250, "{r}");

    for (addr, want) in [
        ("anyone@ours.test", true),
        ("x@auto.test", false),
        ("x@unknown.test", false),
        ("not an address", false),
    ] {
        let d = inbound::accepts_recipient(&t.app.db, addr).await.unwrap();
        assert_eq!(d.accepted(), want, "{addr}: {d:?}");
    }
}

#[tokio::test]
async fn a_repeated_message_id_is_stored_once() {
    let t = setup().await;
    let msg =
        crlf("From: ann@external.test\nSubject: Once\nMessage-ID: <once@external.test>\n\nbody\n");
    let out = smtplib(
        t.smtp.addr,
        json!({"messages": [
            {"from": "ann@external.test", "rcpts": ["inbox@ours.test"], "data": msg},
            {"from": "ann@external.test", "rcpts": ["inbox@ours.test"], "data": msg},
        ]}),
    )
    .await;
    assert_stored(&out["results"][0]);
    assert_stored(&out["results"][1]);
    let stored = inbound_in(&t.app.db, "inbox@ours.test").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(received_events(&t.app.db).await.len(), 1);
    assert_eq!(
        thread(&t.app.db, &stored[0].thread_id).await.message_count,
        1
    );

    // Without a Message-ID one is made from the content: identical bytes
    // (through the ingestion path) dedupe too, different ones do not.
    let raw = b"From: ann@external.test\r\nSubject: No id\r\n\r\nbody\r\n";
    let recipients = vec!["inbox@ours.test".to_string()];
    let raw = bytes::Bytes::from_static(raw);
    let first = inbound::ingest(&t.app.db, raw.clone(), &recipients, &[])
        .await
        .unwrap();
    let again = inbound::ingest(&t.app.db, raw, &recipients, &[])
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert!(!first[0].duplicate && again[0].duplicate);
    assert_eq!(first[0].id, again[0].id);
    assert!(first[0].message_id.starts_with('<') && first[0].message_id.contains('@'));

    // Concurrent deliveries of one message race for the unique index; one wins.
    let raw = b"From: ann@external.test\r\nSubject: Race\r\nMessage-ID: <race@external.test>\r\n\r\nbody\r\n".to_vec();
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let db = t.app.db.clone();
        let raw = raw.clone();
        let recipients = recipients.clone();
        tasks.push(tokio::spawn(async move {
            inbound::ingest(&db, raw.into(), &recipients, &[]).await
        }));
    }
    let mut stored_now = 0;
    for task in tasks {
        let result = task.await.unwrap().expect("ingest");
        stored_now += result.iter().filter(|s| !s.duplicate).count();
    }
    assert_eq!(stored_now, 1);
    let n = count(
        &t.app.db,
        sql!(
            "SELECT COUNT(*) AS n FROM messages WHERE message_id = $1",
            "<race@external.test>"
        ),
    )
    .await;
    assert_eq!(n, 1);

    // Nothing local: nothing stored, no error.
    let none = inbound::ingest(
        &t.app.db,
        raw.into(),
        &["x@elsewhere.test".to_string()],
        &[],
    )
    .await
    .unwrap();
    assert!(none.is_empty());
}

#[tokio::test]
async fn replies_join_the_thread_of_mail_we_sent() {
    let t = setup().await;
    let r = t
        .app
        .post(
            "/api/v1/emails",
            json!({"from": "Inbox <inbox@ours.test>", "to": "partner@external.test",
                   "subject": "Quarterly plan", "text": "Here is the plan."}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let sent_thread = r.body["thread_id"].as_str().unwrap().to_string();
    let our_id = r.body["message_id"].as_str().unwrap().to_string();
    let provider_id = r.body["provider_message_id"].as_str().unwrap().to_string();

    // By our own Message-ID.
    let reply = format!(
        "From: partner@external.test\nTo: inbox@ours.test\nSubject: Re: Quarterly plan\nMessage-ID: <r1@external.test>\nIn-Reply-To: {our_id}\n\nLooks good.\n"
    );
    assert_stored(
        &send(
            t.smtp.addr,
            "partner@external.test",
            &["inbox@ours.test"],
            &reply,
        )
        .await,
    );
    // By the id SES gives the message (and a subject that would not match).
    let reply = format!(
        "From: partner@external.test\nTo: inbox@ours.test\nSubject: different words\nMessage-ID: <r2@external.test>\nReferences: <unknown@x.test> <{provider_id}@email.amazonses.com>\n\nOne more thing.\n"
    );
    assert_stored(
        &send(
            t.smtp.addr,
            "partner@external.test",
            &["inbox@ours.test"],
            &reply,
        )
        .await,
    );

    let stored = inbound_in(&t.app.db, "inbox@ours.test").await;
    assert_eq!(stored.len(), 2);
    for m in &stored {
        assert_eq!(m.thread_id, sent_thread, "{}", m.subject);
    }
    assert_eq!(stored[0].in_reply_to.as_deref(), Some(our_id.as_str()));
    let th = thread(&t.app.db, &sent_thread).await;
    assert_eq!(th.message_count, 3);
    assert_eq!(th.unread_count, 2);
    assert!(
        th.folders.contains(",sent,") && th.folders.contains(",inbox,"),
        "{}",
        th.folders
    );
    assert_eq!(th.subject, "Quarterly plan");
    // The replies' words find the thread, and it comes first by its latest
    // reply.
    let r = t.app.get("/api/v1/threads?q=one+more+thing+looks").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["data"][0]["id"], sent_thread.as_str(), "{}", r.text);
    assert_eq!(r.body["data"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn a_reply_without_references_joins_a_recent_thread_by_subject() {
    let t = setup().await;
    assert_stored(
        &send(
            t.smtp.addr,
            "ann@external.test",
            &["inbox@ours.test"],
            HELLO,
        )
        .await,
    );
    let reply = "From: bob@external.test\nSubject: Re: RE: hello\nMessage-ID: <bob-1@external.test>\n\nme too\n";
    assert_stored(
        &send(
            t.smtp.addr,
            "bob@external.test",
            &["inbox@ours.test"],
            reply,
        )
        .await,
    );
    let other = "From: bob@external.test\nSubject: Hello again\nMessage-ID: <bob-2@external.test>\n\nnew topic\n";
    assert_stored(
        &send(
            t.smtp.addr,
            "bob@external.test",
            &["inbox@ours.test"],
            other,
        )
        .await,
    );
    let stored = inbound_in(&t.app.db, "inbox@ours.test").await;
    assert_eq!(stored.len(), 3);
    assert_eq!(stored[0].thread_id, stored[1].thread_id);
    assert_ne!(stored[0].thread_id, stored[2].thread_id);
    assert_eq!(
        thread(&t.app.db, &stored[0].thread_id).await.message_count,
        2
    );

    // A thread quiet for more than 30 days is not joined by subject.
    let long_ago = pigeonhole::clock::now_micros() - 31 * 24 * 3600 * 1_000_000;
    sql!("UPDATE threads SET last_message_at = $1", long_ago)
        .execute(t.app.db.writer())
        .await
        .unwrap();
    let late =
        "From: bob@external.test\nSubject: Re: Hello\nMessage-ID: <bob-3@external.test>\n\nlate\n";
    assert_stored(&send(t.smtp.addr, "bob@external.test", &["inbox@ours.test"], late).await);
    let stored = inbound_in(&t.app.db, "inbox@ours.test").await;
    assert_ne!(stored[3].thread_id, stored[0].thread_id);
    assert_ne!(stored[3].thread_id, stored[2].thread_id);
}

/// Subjects whose lower case has another length once panicked the storing
/// transaction: every delivery got 451, for ever (issue 13).
#[tokio::test]
async fn subjects_whose_lower_case_changes_length_are_stored_and_threaded() {
    let t = setup().await;
    for (n, subject) in [
        "Re:\u{212a}",
        "Re:\u{130}\u{130}\u{130}\u{130}",
        "re: \u{212a}",
    ]
    .into_iter()
    .enumerate()
    {
        let data = format!(
            "From: ann@external.test\nSubject: {subject}\nMessage-ID: <k-{n}@external.test>\n\nbody\n"
        );
        assert_stored(
            &send(
                t.smtp.addr,
                "ann@external.test",
                &["inbox@ours.test"],
                &data,
            )
            .await,
        );
    }
    let stored = inbound_in(&t.app.db, "inbox@ours.test").await;
    assert_eq!(stored.len(), 3);
    assert_eq!(stored[0].subject, "Re:\u{212a}");
    // The first and third share the subject key "k".
    assert_eq!(stored[0].thread_id, stored[2].thread_id);
    assert_ne!(stored[0].thread_id, stored[1].thread_id);
    let first = thread(&t.app.db, &stored[0].thread_id).await;
    assert_eq!(
        (first.subject.as_str(), first.message_count),
        ("\u{212a}", 2)
    );
}

#[tokio::test]
async fn attachments_and_inline_images_are_kept() {
    let t = setup().await;
    let msg = "From: ann@external.test
To: inbox@ours.test
Subject: Files
Message-ID: <files@external.test>
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary=\"OUTER\"

--OUTER
Content-Type: multipart/related; boundary=\"REL\"

--REL
Content-Type: multipart/alternative; boundary=\"ALT\"

--ALT
Content-Type: text/plain; charset=utf-8

See the logo. Gr\u{fc}\u{df}e
--ALT
Content-Type: text/html; charset=utf-8

<p>See the <img src=\"cid:logo@external.test\"> logo.</p>
--ALT--
--REL
Content-Type: image/png
Content-ID: <logo@external.test>
Content-Disposition: inline; filename=\"logo.png\"
Content-Transfer-Encoding: base64

iVBORw0KGgo=
--REL--
--OUTER
Content-Type: application/pdf; name=\"report.pdf\"
Content-Disposition: attachment; filename=\"report.pdf\"
Content-Transfer-Encoding: base64

JVBERi0xLjQK
--OUTER--
";
    let out = smtplib(
        t.smtp.addr,
        json!({"messages": [{"from": "ann@external.test", "rcpts": ["inbox@ours.test"], "data": crlf(msg), "options": ["BODY=8BITMIME", "SIZE=2000"]}]}),
    )
    .await;
    assert_stored(&out["results"][0]);
    let m = &inbound_in(&t.app.db, "inbox@ours.test").await[0];
    assert!(m.has_attachments);
    assert!(
        m.text.contains("See the logo. Gr\u{fc}\u{df}e"),
        "{:?}",
        m.text
    );
    assert!(m.html.contains("cid:logo@external.test"), "{:?}", m.html);
    let (atts, _) = messages::attachments(&t.app.db, &m.id, messages::MAX_LISTED_ATTACHMENTS)
        .await
        .unwrap();
    assert_eq!(atts.len(), 2, "{atts:?}");
    let logo = atts
        .iter()
        .find(|a| a.filename == "logo.png")
        .expect("logo");
    assert_eq!(logo.content_type, "image/png");
    assert_eq!(logo.content_id.as_deref(), Some("logo@external.test"));
    assert!(logo.inline);
    assert_eq!(logo.size, 8);
    let pdf = atts
        .iter()
        .find(|a| a.filename == "report.pdf")
        .expect("pdf");
    assert_eq!(pdf.content_type, "application/pdf");
    assert!(!pdf.inline && pdf.content_id.is_none());
    let (_, bytes) = messages::attachment_content(&t.app.db, &m.id, &pdf.id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(bytes, b"%PDF-1.4\n");
    assert!(thread(&t.app.db, &m.thread_id).await.has_attachments);
}

#[tokio::test]
async fn malformed_mime_is_stored_as_far_as_it_parses() {
    let t = setup().await;
    let broken = "Subject: =?utf-8?B?!!!notbase64?=
From: <<<nobody>>>
Content-Type: multipart/mixed; boundary=\"never-closed\"

--never-closed
Content-Type: text/plain
Content-Transfer-Encoding: base64

%%% this is not base64 %%%
--never-closed
Content-Type: application/octet-stream
Content-Transfer-Encoding: quoted-printable

=ZZ=
";
    let r = send(
        t.smtp.addr,
        "sender@external.test",
        &["inbox@ours.test"],
        broken,
    )
    .await;
    assert_stored(&r);
    let headerless = "just some text\nwithout any headers\n";
    let r = send(
        t.smtp.addr,
        "sender@external.test",
        &["inbox@ours.test"],
        headerless,
    )
    .await;
    assert_stored(&r);
    let stored = inbound_in(&t.app.db, "inbox@ours.test").await;
    assert_eq!(stored.len(), 2);
    for m in &stored {
        assert!(m.message_id.starts_with('<') && m.message_id.ends_with('>'));
        let raw = raw_of(&t.app.db, &m.id).await;
        assert!(raw.starts_with(b"Return-Path: <sender@external.test>\r\n"));
    }
    let raw = raw_of(&t.app.db, &stored[0].id).await;
    assert!(raw.ends_with(crlf(broken).as_bytes()));
    // Without a From header the envelope sender (Return-Path) stands in.
    assert_eq!(stored[1].from_address, "sender@external.test");
    assert_eq!(received_events(&t.app.db).await.len(), 2);
}

#[tokio::test]
async fn starttls_when_a_certificate_is_configured() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let tls = pigeonhole::smtp::load_tls(
        &dir.join("smtp-tls-cert.pem"),
        &dir.join("smtp-tls-key.pem"),
    )
    .expect("test certificate");
    let t = setup_with(SmtpConfig {
        tls: Some(tls),
        ..test_config()
    })
    .await;
    let out = smtplib(
        t.smtp.addr,
        json!({"starttls": true, "messages": [{"from": "ann@external.test", "rcpts": ["inbox@ours.test"], "data": crlf(HELLO)}]}),
    )
    .await;
    assert!(
        out["features"]
            .as_array()
            .unwrap()
            .contains(&json!("starttls")),
        "{out}"
    );
    assert_eq!(code(&out["starttls"]), 220, "{out}");
    assert!(
        !out["features2"]
            .as_array()
            .unwrap()
            .contains(&json!("starttls")),
        "{out}"
    );
    assert_stored(&out["results"][0]);
    let m = &inbound_in(&t.app.db, "inbox@ours.test").await[0];
    assert!(
        m.headers["Received"]
            .as_str()
            .unwrap()
            .contains("with ESMTPS")
    );

    // Bad configuration names the variable.
    let err = pigeonhole::smtp::load_tls(&dir.join("missing.pem"), &dir.join("smtp-tls-key.pem"))
        .unwrap_err();
    assert!(err.starts_with("PIGEONHOLE_SMTP_TLS_CERT"), "{err}");
}

// ---------------------------------------------------------------------------
// Raw sockets: pipelining and clients that misbehave
// ---------------------------------------------------------------------------

pub(crate) struct Raw {
    rd: BufReader<OwnedReadHalf>,
    wr: OwnedWriteHalf,
}

impl Raw {
    pub(crate) async fn connect(addr: SocketAddr) -> Raw {
        let (r, w) = TcpStream::connect(addr)
            .await
            .expect("connect")
            .into_split();
        Raw {
            rd: BufReader::new(r),
            wr: w,
        }
    }

    /// Connects from `source` (any of 127.0.0.0/8 is this host on Linux).
    pub(crate) async fn connect_from(addr: SocketAddr, source: &str) -> Raw {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(SocketAddr::new(source.parse().expect("source ip"), 0))
            .expect("bind source");
        let (r, w) = socket.connect(addr).await.expect("connect").into_split();
        Raw {
            rd: BufReader::new(r),
            wr: w,
        }
    }

    pub(crate) async fn send_bytes(&mut self, b: &[u8]) {
        self.wr.write_all(b).await.expect("write");
    }

    pub(crate) async fn send(&mut self, s: &str) {
        self.wr.write_all(s.as_bytes()).await.expect("write");
    }

    /// The next reply: its code (0 at end of stream) and its last line.
    pub(crate) async fn reply(&mut self) -> (u16, String) {
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(Duration::from_secs(10), self.rd.read_line(&mut line))
                .await
                .expect("reply within 10 s")
                .unwrap_or(0);
            if n == 0 {
                return (0, String::new());
            }
            if line.len() >= 4 && line.as_bytes()[3] == b'-' {
                continue;
            }
            let code = line.get(..3).and_then(|c| c.parse().ok()).unwrap_or(1);
            return (code, line.trim_end().to_string());
        }
    }

    pub(crate) async fn expect(&mut self, want: u16) -> String {
        let (code, text) = self.reply().await;
        assert_eq!(code, want, "{text}");
        text
    }

    /// True when the server closed the connection.
    /// Connects, greets and starts a message to `rcpt` (an accepted one),
    /// up to the 354 that asks for its data.
    pub(crate) async fn at_data(addr: SocketAddr, rcpt: &str) -> Raw {
        let mut c = Raw::connect(addr).await;
        c.expect(220).await;
        c.send("EHLO x.test\r\n").await;
        c.expect(250).await;
        c.start_message(rcpt).await;
        c
    }

    /// MAIL, RCPT to `rcpt` (an accepted one) and DATA, up to the 354.
    pub(crate) async fn start_message(&mut self, rcpt: &str) {
        self.send(&format!(
            "MAIL FROM:<a@x.test>\r\nRCPT TO:<{rcpt}>\r\nDATA\r\n"
        ))
        .await;
        self.expect(250).await;
        self.expect(250).await;
        self.expect(354).await;
    }

    /// The rest of a message after its 354 (`message` without the final
    /// dot), then QUIT: the message accepted (250) and the session closed
    /// (221).
    pub(crate) async fn finish_and_quit(&mut self, message: &str) {
        self.send(&format!("{message}.\r\nQUIT\r\n")).await;
        self.expect(250).await;
        self.expect(221).await;
    }

    pub(crate) async fn closed(&mut self) -> bool {
        let mut rest = String::new();
        matches!(
            tokio::time::timeout(Duration::from_secs(10), self.rd.read_line(&mut rest)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

/// A normal client still gets its mail through.
pub(crate) async fn still_serving(t: &Inbound, n: usize) {
    let msg = format!("Subject: still here {n}\nMessage-ID: <alive-{n}@external.test>\n\nok\n");
    assert_stored(&send(t.smtp.addr, "ann@external.test", &["inbox@ours.test"], &msg).await);
}

#[tokio::test]
async fn pipelined_commands_and_the_recipient_limit() {
    let t = setup().await;
    catch_all(&t.app, "all@ours.test").await;
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    let mut batch = String::from("EHLO pipe.test\r\nMAIL FROM:<ann@external.test>\r\n");
    for i in 0..101 {
        batch.push_str(&format!("RCPT TO:<user{i}@ours.test>\r\n"));
    }
    batch.push_str("RCPT TO:<x@elsewhere.test>\r\nDATA\r\n");
    // One write: many commands per packet.
    c.send(&batch).await;
    c.expect(250).await;
    c.expect(250).await;
    for _ in 0..100 {
        c.expect(250).await;
    }
    assert!(c.expect(452).await.contains("4.5.3"));
    c.expect(452).await;
    c.expect(354).await;
    c.send(
        "Subject: many\r\nMessage-ID: <many@external.test>\r\n\r\n..dot\r\n.\r\nNOOP\r\nQUIT\r\n",
    )
    .await;
    c.expect(250).await;
    c.expect(250).await;
    c.expect(221).await;
    assert!(c.closed().await);
    let stored = inbound_in(&t.app.db, "all@ours.test").await;
    assert_eq!(stored.len(), 1);
    assert!(stored[0].text.starts_with(".dot"), "{:?}", stored[0].text);
}

#[tokio::test]
async fn hostile_clients_are_cut_off_and_others_keep_being_served() {
    let t = setup_with(SmtpConfig {
        idle_timeout: Duration::from_millis(400),
        max_errors: 5,
        max_message_size: 4000,
        ..test_config()
    })
    .await;

    // Garbage: hard errors until the limit, then 421 and close.
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    c.send("\x00\x01\x02\r\nGET / HTTP/1.1\r\nEXPN staff\r\nMAIL FROM:<a@b.test>\r\n")
        .await;
    c.expect(500).await;
    c.expect(500).await;
    c.expect(502).await;
    c.expect(503).await;
    c.send("HELO\r\n").await;
    c.expect(501).await;
    assert!(c.expect(421).await.contains("too many errors"));
    assert!(c.closed().await);

    // A line longer than 64 KiB: refused and closed.
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    c.send("EHLO x\r\n").await;
    c.expect(250).await;
    c.send(&format!("NOOP {}\r\n", "A".repeat(70_000))).await;
    assert!(c.expect(500).await.contains("line too long"));
    assert!(c.closed().await);

    // Idle: 421 after the timeout, mid-command or mid-DATA alike.
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    c.send("EHLO slow.test\r\nNO").await;
    c.expect(250).await;
    assert!(c.expect(421).await.contains("4.4.2"));
    assert!(c.closed().await);
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    c.send("EHLO slow.test\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<inbox@ours.test>\r\nDATA\r\n")
        .await;
    c.expect(250).await;
    c.expect(250).await;
    c.expect(250).await;
    c.expect(354).await;
    c.send("Subject: never finished\r\n").await;
    c.expect(421).await;
    assert!(c.closed().await);

    // Too big: announced (552 at MAIL) or discovered at the end of DATA; the
    // session goes on either way.
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    c.send("EHLO big.test\r\nMAIL FROM:<a@x.test> SIZE=5000\r\n")
        .await;
    c.expect(250).await;
    c.expect(552).await;
    c.start_message("inbox@ours.test").await;
    let line = format!("{}\r\n", "x".repeat(900));
    c.send(&format!("Subject: big\r\n\r\n{}.\r\n", line.repeat(6)))
        .await;
    assert!(c.expect(552).await.contains("5.3.4"));
    c.start_message("inbox@ours.test").await;
    c.finish_and_quit("Subject: small\r\nMessage-ID: <small@x.test>\r\n\r\nfine\r\n")
        .await;

    still_serving(&t, 1).await;
    let subjects: Vec<String> = inbound_in(&t.app.db, "inbox@ours.test")
        .await
        .into_iter()
        .map(|m| m.subject)
        .collect();
    assert_eq!(subjects, vec!["small", "still here 1"]);
}

/// What an evicted session is told.
const EVICTED: &str = "421 4.3.2 mx.ours.test Service busy, closing transmission channel";

#[tokio::test]
async fn at_the_cap_a_newcomer_evicts_the_longest_silent_session() {
    // Before eviction, a newcomer at the cap was turned away with 421.
    let t = setup_with(SmtpConfig {
        max_connections: 2,
        idle_timeout: Duration::from_secs(30),
        ..test_config()
    })
    .await;
    let mut a = Raw::connect(t.smtp.addr).await;
    a.expect(220).await;
    let mut b = Raw::connect(t.smtp.addr).await;
    b.expect(220).await;
    // Both silent: the one waiting longer makes room.
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    assert_eq!(a.reply().await.1, EVICTED);
    assert!(a.closed().await);
    // Progress counts before waiting time: the newer, silent session goes.
    b.send("EHLO b.test\r\n").await;
    b.expect(250).await;
    let mut d = Raw::connect(t.smtp.addr).await;
    d.expect(220).await;
    assert_eq!(c.reply().await.1, EVICTED);
    assert!(c.closed().await);
    // The newcomer delivers a message; the older session is still served.
    d.send("EHLO d.test\r\nMAIL FROM:<ann@external.test>\r\nRCPT TO:<inbox@ours.test>\r\nDATA\r\n")
        .await;
    for code in [250, 250, 250, 354] {
        d.expect(code).await;
    }
    d.finish_and_quit("Subject: made room\r\nMessage-ID: <room@external.test>\r\n\r\nhi\r\n")
        .await;
    b.send("NOOP\r\n").await;
    b.expect(250).await;
    let subjects: Vec<String> = inbound_in(&t.app.db, "inbox@ours.test")
        .await
        .into_iter()
        .map(|m| m.subject)
        .collect();
    assert_eq!(subjects, vec!["made room"]);
}

#[tokio::test]
async fn an_evicted_session_stuck_in_a_tls_handshake_is_closed() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let tls = pigeonhole::smtp::load_tls(
        &dir.join("smtp-tls-cert.pem"),
        &dir.join("smtp-tls-key.pem"),
    )
    .expect("test certificate");
    // The handshake alone would wait for the idle timeout.
    let t = setup_with(SmtpConfig {
        max_connections: 1,
        idle_timeout: Duration::from_secs(60),
        tls: Some(tls),
        ..test_config()
    })
    .await;
    let mut a = Raw::connect(t.smtp.addr).await;
    a.expect(220).await;
    a.send("EHLO a.test\r\nSTARTTLS\r\n").await;
    a.expect(250).await;
    a.expect(220).await;
    let mut b = Raw::connect(t.smtp.addr).await;
    b.expect(220).await;
    // No 421 in the middle of a handshake: the connection is just closed.
    assert!(a.closed().await, "closed well before the idle timeout");
    b.send("QUIT\r\n").await;
    b.expect(221).await;
}

#[tokio::test]
async fn a_storage_failure_answers_451_and_writes_nothing() {
    let t = setup().await;
    let mut c = Raw::at_data(t.smtp.addr, "inbox@ours.test").await;
    sql!("ALTER TABLE messages RENAME TO messages_parked")
        .execute(t.app.db.writer())
        .await
        .unwrap();
    c.send("Subject: lost?\r\nMessage-ID: <lost@x.test>\r\n\r\nbody\r\n.\r\n")
        .await;
    assert!(c.expect(451).await.contains("4.3.0"));
    sql!("ALTER TABLE messages_parked RENAME TO messages")
        .execute(t.app.db.writer())
        .await
        .unwrap();
    assert_eq!(received_events(&t.app.db).await.len(), 0);
    assert_eq!(
        count(&t.app.db, sql!("SELECT COUNT(*) AS n FROM threads")).await,
        0
    );
    // The client retries, as SMTP clients do after a 4xx.
    c.start_message("inbox@ours.test").await;
    c.finish_and_quit("Subject: lost?\r\nMessage-ID: <lost@x.test>\r\n\r\nbody\r\n")
        .await;
    assert_eq!(inbound_in(&t.app.db, "inbox@ours.test").await.len(), 1);
    assert_eq!(received_events(&t.app.db).await.len(), 1);
}

/// A message goes where its recipients were decided at RCPT (each is not
/// decided again): an address the catch-all took then stays the catch-all's
/// for that message, even if a mailbox of that address is made meanwhile.
#[tokio::test]
async fn a_message_goes_where_its_recipients_were_decided_at_rcpt() {
    let t = setup().await;
    catch_all(&t.app, "everything@ours.test").await;
    let mut c = Raw::at_data(t.smtp.addr, "late@ours.test").await;
    t.app.mailbox("late@ours.test").await;
    c.send("Subject: early\r\nMessage-ID: <early@x.test>\r\n\r\nbody\r\n.\r\n")
        .await;
    c.expect(250).await;
    assert_eq!(inbound_in(&t.app.db, "everything@ours.test").await.len(), 1);
    assert_eq!(inbound_in(&t.app.db, "late@ours.test").await.len(), 0);

    // The next message is decided anew: the address has its mailbox now.
    c.start_message("late@ours.test").await;
    c.finish_and_quit("Subject: later\r\nMessage-ID: <later@x.test>\r\n\r\nbody\r\n")
        .await;
    assert_eq!(inbound_in(&t.app.db, "late@ours.test").await.len(), 1);
}

/// Decisions go with their transaction: an address decided in a
/// transaction reset before DATA is decided again at its next RCPT, and the
/// message goes by that one.
#[tokio::test]
async fn a_transaction_reset_before_data_leaves_no_decision_behind() {
    let t = setup().await;
    catch_all(&t.app, "everything@ours.test").await;
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    c.send("EHLO x.test\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<late@ours.test>\r\nRSET\r\n")
        .await;
    for _ in 0..4 {
        c.expect(250).await;
    }
    t.app.mailbox("late@ours.test").await;
    c.start_message("late@ours.test").await;
    c.finish_and_quit("Subject: later\r\nMessage-ID: <later@x.test>\r\n\r\nbody\r\n")
        .await;
    assert_eq!(inbound_in(&t.app.db, "late@ours.test").await.len(), 1);
    assert_eq!(inbound_in(&t.app.db, "everything@ours.test").await.len(), 0);
}

/// A recipient is decided at RCPT and that decision is what the message is
/// stored by; a mailbox deleted in between is found gone when the message
/// is stored: nothing is stored for it, and the client hears so.
#[tokio::test]
async fn a_mailbox_deleted_after_rcpt_gets_nothing_and_the_client_a_550() {
    let t = setup().await;
    let sales = t.app.mailbox("sales@ours.test").await;
    let mut c = Raw::at_data(t.smtp.addr, "Sales@ours.test").await;
    let path = format!(
        "/api/v1/mailboxes/{}?confirm=true",
        sales["id"].as_str().unwrap()
    );
    assert_eq!(t.app.delete(&path).await.status, 200);
    c.send("Subject: gone\r\nMessage-ID: <gone@x.test>\r\n\r\nbody\r\n.\r\n")
        .await;
    assert!(c.expect(550).await.contains("5.1.1"));
    assert_eq!(
        count(&t.app.db, sql!("SELECT COUNT(*) AS n FROM messages")).await,
        0
    );
    assert_eq!(
        count(&t.app.db, sql!("SELECT COUNT(*) AS n FROM threads")).await,
        0
    );
    assert_eq!(received_events(&t.app.db).await.len(), 0);

    // With a mailbox of the envelope still there, its copy is stored.
    c.start_message("inbox@ours.test").await;
    c.finish_and_quit("Subject: here\r\nMessage-ID: <here@x.test>\r\n\r\nbody\r\n")
        .await;
    assert_eq!(inbound_in(&t.app.db, "inbox@ours.test").await.len(), 1);
}

#[tokio::test]
async fn shutdown_tells_open_sessions_421() {
    let t = setup().await;
    let mut c = Raw::connect(t.smtp.addr).await;
    c.expect(220).await;
    c.send("EHLO x.test\r\n").await;
    c.expect(250).await;
    let Inbound { app, smtp } = t;
    drop(smtp);
    assert!(c.expect(421).await.contains("shutting down"));
    assert!(c.closed().await);
    drop(app);
}

// ---------------------------------------------------------------------------
// The binary: `pigeonhole serve` runs the listener
// ---------------------------------------------------------------------------

fn bin() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_pigeonhole"));
    for (k, _) in std::env::vars() {
        if k.starts_with("PIGEONHOLE_") {
            c.env_remove(k);
        }
    }
    c
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test]
async fn serve_starts_the_smtp_listener() {
    let app = spawn_app().await;
    app.verified_domain("ours.test").await;
    app.mailbox("inbox@ours.test").await;
    let (http, smtp) = (free_port(), free_port());
    let child = bin()
        .env("PIGEONHOLE_DATABASE_URL", &app.database_url)
        .env("PIGEONHOLE_LISTEN", format!("127.0.0.1:{http}"))
        .env("PIGEONHOLE_SMTP_LISTEN", format!("127.0.0.1:{smtp}"))
        .env("RUST_LOG", "info")
        .arg("serve")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{smtp}").parse().unwrap();
    let mut up = false;
    for _ in 0..300 {
        if TcpStream::connect(addr).await.is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(up, "SMTP listener did not start");
    assert_stored(&send(addr, "ann@external.test", &["inbox@ours.test"], HELLO).await);
    assert_eq!(inbound_in(&app.db, "inbox@ours.test").await.len(), 1);
    let pid = child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains(&format!("127.0.0.1:{smtp}")), "{log}");
}

#[test]
fn bad_smtp_tls_settings_stop_serve_with_one_line() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (envs, var) in [
        (
            vec![("PIGEONHOLE_SMTP_TLS_CERT", dir.join("smtp-tls-cert.pem"))],
            "PIGEONHOLE_SMTP_TLS_KEY",
        ),
        (
            vec![
                ("PIGEONHOLE_SMTP_TLS_CERT", dir.join("missing.pem")),
                ("PIGEONHOLE_SMTP_TLS_KEY", dir.join("smtp-tls-key.pem")),
            ],
            "PIGEONHOLE_SMTP_TLS_CERT",
        ),
        (
            vec![
                ("PIGEONHOLE_SMTP_TLS_CERT", dir.join("smtp-tls-cert.pem")),
                ("PIGEONHOLE_SMTP_TLS_KEY", dir.join("smtp-tls-cert.pem")),
            ],
            "PIGEONHOLE_SMTP_TLS_KEY",
        ),
    ] {
        let mut cmd = bin();
        cmd.env("PIGEONHOLE_DATABASE_URL", "sqlite::memory:")
            .env("PIGEONHOLE_LISTEN", "127.0.0.1:0")
            .env("PIGEONHOLE_SMTP_LISTEN", "127.0.0.1:0");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let out = cmd.arg("serve").output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<_> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains(var), "{err}");
    }
}

#[tokio::test]
async fn message_memory_is_bounded_across_sessions() {
    let t = setup_with(SmtpConfig {
        memory: MemoryBudget::new(128 * 1024),
        ..test_config()
    })
    .await;
    let mut c = Raw::at_data(t.smtp.addr, "inbox@ours.test").await;
    let line = format!("{}\r\n", "y".repeat(998));
    c.send(&format!("Subject: huge\r\n\r\n{}.\r\n", line.repeat(300)))
        .await;
    // Temporary: the client may try again later.
    assert!(c.expect(452).await.contains("4.3.1"));
    c.start_message("inbox@ours.test").await;
    c.finish_and_quit("Subject: small\r\n\r\nfits\r\n").await;
    let stored = inbound_in(&t.app.db, "inbox@ours.test").await;
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].subject, "small");
}
