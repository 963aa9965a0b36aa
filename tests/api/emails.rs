use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::helpers::{
    TempOutbox, TestApp, Wrapped, Wrapping, assert_error, eventually, spawn_app, spawn_app_with,
    spawn_app_with_provider,
};
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::provider::{OutgoingMessage, Provider, ProviderError, Quota};
use pigeonhole::sql;
use pigeonhole::store::RowExt;

async fn ready(app: &TestApp) {
    app.verified_domain("example.com").await;
}

fn simple(to: &str) -> Value {
    json!({"from": "Team <team@example.com>", "to": to, "subject": "Hello", "text": "Hi there", "html": "<p>Hi there</p>"})
}

#[tokio::test]
async fn send_returns_202_and_records_the_message_thread_and_event() {
    let outbox = TempOutbox::new();
    let setting = outbox.setting();
    let app = spawn_app_with(move |m| {
        m.extend([setting]);
        m.insert(
            "PIGEONHOLE_PUBLIC_URL".into(),
            "https://mail.example.com".into(),
        );
    })
    .await;
    ready(&app).await;
    let r = app
        .post("/api/v1/emails", simple("success@simulator.amazonses.com"))
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let b = &r.body;
    assert!(b["id"].as_str().unwrap().starts_with("msg_"));
    assert!(b["thread_id"].as_str().unwrap().starts_with("thr_"));
    let mid = b["message_id"].as_str().unwrap();
    assert!(
        mid.starts_with('<') && mid.ends_with("@example.com>"),
        "{mid}"
    );
    assert_eq!(b["from"], "team@example.com");
    assert_eq!(b["to"], json!(["success@simulator.amazonses.com"]));
    assert_eq!(b["subject"], "Hello");
    let pid = b["provider_message_id"].as_str().unwrap();

    // The simulator wrote the exact MIME, tracking image included.
    let eml = String::from_utf8(outbox.eml(pid)).unwrap();
    assert!(eml.contains(&format!("Message-ID: {mid}")), "{eml}");
    assert!(eml.contains("https://mail.example.com/t/o/"));

    let id = b["id"].as_str().unwrap().to_string();
    eventually("delivery", || async {
        (app.email_status(&id).await == "delivered").then_some(())
    })
    .await;
    let m = app.get(&format!("/api/v1/emails/{id}")).await.body;
    assert_eq!(m["object"], "message");
    assert_eq!(m["text"], "Hi there");
    assert_eq!(m["html"], "<p>Hi there</p>");
    let types: Vec<_> = m["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].clone())
        .collect();
    assert_eq!(types, vec![json!("send"), json!("delivery")]);
    // By provider id too.
    assert_eq!(
        app.get(&format!("/api/v1/emails/{pid}")).await.body["id"],
        id.as_str()
    );
    assert_eq!(
        app.outbox_types().await,
        vec!["domain.verified", "email.sent", "email.delivered"]
    );
    let folders = sql!("SELECT folders FROM threads")
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    assert_eq!(folders.text("folders").unwrap(), ",sent,");
}

#[tokio::test]
async fn sender_rules_reach_and_verification() {
    let app = spawn_app().await;
    ready(&app).await;
    app.post("/api/v1/domains", json!({"name": "pending.org"}))
        .await;
    let r = app
        .post(
            "/api/v1/emails",
            json!({"from": "a@pending.org", "to": "x@y.com", "text": "t"}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "from");
    let k = app
        .new_key(None, None, Some("team@example.com"), None)
        .await;
    let r = app
        .call(
            "POST",
            "/api/v1/emails",
            Some(&k.key),
            Some(json!({"from": "other@example.com", "to": "x@y.com", "text": "t"})),
        )
        .await;
    assert_error(&r, 403, "forbidden");
    let r = app
        .call(
            "POST",
            "/api/v1/emails",
            Some(&k.key),
            Some(simple("x@y.com")),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    // Nothing recorded for refused requests.
    let list = app.get("/api/v1/emails").await;
    assert_eq!(list.body["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn bad_fields_are_422_naming_them() {
    let app = spawn_app().await;
    ready(&app).await;
    for (body, param) in [
        (
            json!({"from": "team@example.com", "to": "not-an-address", "text": "t"}),
            "to[0]",
        ),
        (
            json!({"from": "team@example.com", "to": ["a@b.com"], "text": "t", "headers": {"From": "x@y.com"}}),
            "headers.From",
        ),
        (
            json!({"from": "team@example.com", "to": "a@b.com", "text": "t", "headers": {"X-A": "1\r\nBcc: evil@x.com"}}),
            "headers.X-A",
        ),
        (
            json!({"from": "team@example.com", "to": "a@b.com", "text": "t", "attachments": [{"filename": "a.pdf", "content": "***"}]}),
            "attachments[0].content",
        ),
        (json!({"from": "team@example.com", "to": "a@b.com"}), "text"),
        (
            json!({"from": "team@example.com", "to": 5, "text": "t"}),
            "to",
        ),
        (
            json!({"from": "team@example.com", "to": "a@b.com", "text": "t", "subject": "a\nb"}),
            "subject",
        ),
    ] {
        let r = app.post("/api/v1/emails", body).await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], param, "{}", r.text);
    }
    let many: Vec<Value> = (0..21)
        .map(|i| json!({"filename": format!("{i}.txt"), "content": "aGk="}))
        .collect();
    let r = app
        .post(
            "/api/v1/emails",
            json!({"from": "team@example.com", "to": "a@b.com", "text": "t", "attachments": many}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "attachments");
    assert_eq!(app.get("/api/v1/emails").await.body["data"], json!([]));
}

#[tokio::test]
async fn attachments_are_stored_listed_and_downloadable() {
    let app = spawn_app().await;
    ready(&app).await;
    let r = app
        .post(
            "/api/v1/emails",
            json!({"from": "team@example.com", "to": "a@b.com", "html": "<img src=\"cid:logo\">",
                   "attachments": [
                       {"filename": "logo.png", "content": "data:image/png;base64,AQID", "content_id": "logo"},
                       {"filename": "notes.txt", "content": "aGVsbG8="}
                   ]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.body["id"].as_str().unwrap();
    let m = app.get(&format!("/api/v1/emails/{id}")).await.body;
    let atts = m["attachments"].as_array().unwrap();
    assert_eq!(atts.len(), 2);
    let logo = atts.iter().find(|a| a["filename"] == "logo.png").unwrap();
    assert_eq!(logo["inline"], true);
    assert_eq!(logo["content_id"], "logo");
    assert_eq!(logo["content_type"], "image/png");
    assert_eq!(logo["size"], 3);
    let notes = atts.iter().find(|a| a["filename"] == "notes.txt").unwrap();
    assert_eq!(notes["inline"], false);
    assert_eq!(notes["content_type"], "text/plain");
    let url = format!(
        "{}/api/v1/emails/{id}/attachments/{}",
        app.base,
        notes["id"].as_str().unwrap()
    );
    let resp = app
        .client
        .get(url)
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-disposition"]
            .to_str()
            .unwrap()
            .contains("notes.txt")
    );
    assert_eq!(resp.bytes().await.unwrap().as_ref(), b"hello");
}

#[tokio::test]
async fn bounces_and_complaints_suppress_the_address() {
    let app = spawn_app().await;
    ready(&app).await;
    let b = app
        .post("/api/v1/emails", simple("bounce@simulator.amazonses.com"))
        .await;
    let c = app
        .post(
            "/api/v1/emails",
            simple("complaint@simulator.amazonses.com"),
        )
        .await;
    let bid = b.body["id"].as_str().unwrap().to_string();
    let cid = c.body["id"].as_str().unwrap().to_string();
    eventually("bounce", || async {
        (app.email_status(&bid).await == "bounced").then_some(())
    })
    .await;
    eventually("complaint", || async {
        (app.email_status(&cid).await == "complained").then_some(())
    })
    .await;
    let m = app.get(&format!("/api/v1/emails/{bid}")).await.body;
    assert!(m["error"].as_str().unwrap().contains("550"));
    let bounce = m["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == "bounce")
        .unwrap()
        .clone();
    assert_eq!(bounce["recipient"], "bounce@simulator.amazonses.com");
    assert!(bounce["detail"].is_string());

    let r = app.get("/api/v1/suppressions").await;
    let addrs: Vec<_> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["address"].clone())
        .collect();
    assert_eq!(addrs.len(), 2);
    assert!(addrs.contains(&json!("bounce@simulator.amazonses.com")));

    let r = app
        .post("/api/v1/emails", simple("bounce@simulator.amazonses.com"))
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "to");
    assert!(r.body["error"].as_str().unwrap().contains("suppression"));

    let r = app
        .delete("/api/v1/suppressions/bounce@simulator.amazonses.com")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        app.post("/api/v1/emails", simple("bounce@simulator.amazonses.com"))
            .await
            .status,
        202
    );

    let types = app.outbox_types().await;
    assert!(types.contains(&"email.bounced".to_string()));
    assert!(types.contains(&"email.complained".to_string()));

    // Manual additions, and only for whole-account keys.
    assert_eq!(
        app.post("/api/v1/suppressions", json!({"address": "x@y.com"}))
            .await
            .status,
        201
    );
    assert_error(
        &app.post("/api/v1/suppressions", json!({"address": "x@y.com"}))
            .await,
        409,
        "conflict",
    );
    let k = app.new_key(None, Some("example.com"), None, None).await;
    let r = app
        .call(
            "POST",
            "/api/v1/suppressions",
            Some(&k.key),
            Some(json!({"address": "z@y.com"})),
        )
        .await;
    assert_error(&r, 403, "forbidden");
}

#[tokio::test]
async fn idempotency_replays_conflicts_and_forgets_failures() {
    let app = spawn_app().await;
    ready(&app).await;
    let send = |body: Value, key: &'static str| {
        let client = app.client.clone();
        let url = format!("{}/api/v1/emails", app.base);
        let token = app.key.clone();
        async move {
            client
                .post(url)
                .bearer_auth(token)
                .header("Idempotency-Key", key)
                .json(&body)
                .send()
                .await
                .unwrap()
        }
    };
    let first = send(simple("a@b.com"), "k1").await;
    assert_eq!(first.status(), 202);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let first_text = first.text().await.unwrap();
    let again = send(simple("a@b.com"), "k1").await;
    assert_eq!(again.status(), 202);
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    assert_eq!(again.text().await.unwrap(), first_text);
    assert_eq!(
        app.get("/api/v1/emails").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let other = send(simple("other@b.com"), "k1").await;
    assert_eq!(other.status(), 409);

    // A reply that failed validation is not stored: the key can be used again.
    let bad = send(json!({"from": "team@example.com", "to": "a@b.com"}), "k2").await;
    assert_eq!(bad.status(), 422);
    assert_eq!(send(simple("c@b.com"), "k2").await.status(), 202);

    // Keys are scoped to the API key.
    let k = app.new_key(None, None, None, None).await;
    let r = app
        .client
        .post(format!("{}/api/v1/emails", app.base))
        .bearer_auth(&k.key)
        .header("Idempotency-Key", "k1")
        .json(&simple("zzz@b.com"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    assert!(r.headers().get("idempotency-replayed").is_none());

    let long = "x".repeat(256);
    let r = app
        .client
        .post(format!("{}/api/v1/emails", app.base))
        .bearer_auth(&app.key)
        .header("Idempotency-Key", long)
        .json(&simple("a@b.com"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
}

#[tokio::test]
async fn a_duplicate_in_flight_is_409_with_retry_after() {
    let app = spawn_app().await;
    ready(&app).await;
    let me = app.get("/api/v1/me").await.body;
    let key_id = me["id"].as_str().unwrap();
    let fp = pigeonhole::core::idempotency::fingerprint(&simple("a@b.com"));
    // The first request is "running" (as if another process were sending it).
    assert!(matches!(
        pigeonhole::core::idempotency::begin(
            &app.db,
            &pigeonhole::core::idempotency::Claim::new(
                pigeonhole::core::interrupted::RecordKey {
                    api_key_id: key_id.into(),
                    endpoint: "POST /emails".into(),
                    key: "busy".into(),
                },
                fp,
                None,
                std::time::Duration::from_secs(300),
            ),
        )
        .await
        .unwrap(),
        pigeonhole::core::idempotency::Begin::Proceed
    ));
    let r = app
        .client
        .post(format!("{}/api/v1/emails", app.base))
        .bearer_auth(&app.key)
        .header("Idempotency-Key", "busy")
        .json(&simple("a@b.com"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(app.get("/api/v1/emails").await.body["data"], json!([]));
}

#[tokio::test]
async fn batch_sends_in_order_and_reports_each() {
    let app = spawn_app().await;
    ready(&app).await;
    let r = app
        .post(
            "/api/v1/emails/batch",
            json!([simple("a@b.com"), simple("c@d.com")]),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.body["object"], "batch");
    assert_eq!(r.body["sent"], 2);
    assert_eq!(r.body["failed"], 0);
    assert_eq!(r.body["data"][1]["index"], 1);
    assert_eq!(r.body["data"][1]["ok"], true);
    assert!(r.body["data"][1]["id"].is_string() && r.body["data"][1]["thread_id"].is_string());
    // Both sends created the sender's mailbox on first use, the second
    // before the first was committed: they share the one mailbox.
    let owners =
        sql!("SELECT DISTINCT mailbox_id FROM messages WHERE from_address = 'team@example.com'")
            .fetch_all(app.db.reader())
            .await
            .unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(
        sql!("SELECT id FROM mailboxes WHERE address = 'team@example.com'")
            .fetch_one(app.db.reader())
            .await
            .unwrap()
            .text("id")
            .unwrap(),
        owners[0].text("mailbox_id").unwrap()
    );

    let r = app
        .post(
            "/api/v1/emails/batch",
            json!({"emails": [simple("a@b.com"), {"from": "x@nowhere.org", "to": "a@b.com", "text": "t"}, {"to": 1}]}),
        )
        .await;
    assert_eq!(r.status, 207, "{}", r.text);
    assert_eq!(r.body["sent"], 1);
    assert_eq!(r.body["failed"], 2);
    assert_eq!(r.body["data"][1]["ok"], false);
    assert_eq!(r.body["data"][1]["status"], 422);
    assert!(
        r.body["data"][1]["error"]
            .as_str()
            .unwrap()
            .contains("nowhere.org")
    );
    assert_eq!(r.body["data"][2]["status"], 422);

    let too_many: Vec<Value> = (0..101).map(|_| simple("a@b.com")).collect();
    assert_error(
        &app.post("/api/v1/emails/batch", json!(too_many)).await,
        422,
        "invalid_request",
    );
    assert_error(
        &app.post("/api/v1/emails/batch", json!([])).await,
        422,
        "invalid_request",
    );

    // The idempotency key covers the whole array.
    let send = || {
        app.client
            .post(format!("{}/api/v1/emails/batch", app.base))
            .bearer_auth(&app.key)
            .header("Idempotency-Key", "batch-1")
            .json(&json!([simple("q@b.com"), simple("r@b.com")]))
            .send()
    };
    let first = send().await.unwrap().text().await.unwrap();
    let again = send().await.unwrap();
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    assert_eq!(again.text().await.unwrap(), first);
    assert_eq!(
        app.get("/api/v1/emails?limit=100").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
}

#[tokio::test]
async fn list_filters_paginates_and_respects_reach() {
    let app = spawn_app().await;
    ready(&app).await;
    app.verified_domain("other.org").await;
    let other_key = app.new_key(None, Some("other.org"), None, None).await;
    for i in 0..5 {
        let r = app
            .post("/api/v1/emails", json!({"from": "team@example.com", "to": format!("r{i}@x.com"), "subject": format!("Invoice {i}"), "text": format!("body word{i}")}))
            .await;
        assert_eq!(r.status, 202);
    }
    let r = app
        .call("POST", "/api/v1/emails", Some(&other_key.key), Some(json!({"from": "ops@other.org", "to": "bounce@simulator.amazonses.com", "subject": "Alert", "text": "disk full"})))
        .await;
    assert_eq!(r.status, 202);
    let alert = r.body["id"].as_str().unwrap().to_string();
    eventually("bounce", || async {
        (app.email_status(&alert).await == "bounced").then_some(())
    })
    .await;

    let count = |path: String| {
        let app = &app;
        async move {
            let r = app.get(&path).await;
            assert_eq!(r.status, 200, "{}", r.text);
            r.body["data"].as_array().unwrap().len()
        }
    };
    assert_eq!(count("/api/v1/emails".into()).await, 6);
    assert_eq!(count("/api/v1/emails?status=bounced".into()).await, 1);
    assert_eq!(
        count("/api/v1/emails?status=bounced,sent,delivered".into()).await,
        6
    );
    assert_eq!(count("/api/v1/emails?from=ops@other.org".into()).await, 1);
    assert_eq!(count("/api/v1/emails?to=r3@x.com".into()).await, 1);
    assert_eq!(count("/api/v1/emails?subject=invoice".into()).await, 5);
    assert_eq!(count("/api/v1/emails?q=word2".into()).await, 1);
    assert_eq!(count("/api/v1/emails?q=disk%20full".into()).await, 1);
    assert_eq!(count("/api/v1/emails?opened=true".into()).await, 0);
    assert_eq!(count("/api/v1/emails?opened=false".into()).await, 6);
    assert_eq!(
        count(format!("/api/v1/emails?api_key_id={}", other_key.id)).await,
        1
    );
    assert_eq!(count("/api/v1/emails?domain=other.org".into()).await, 1);
    assert_eq!(
        count("/api/v1/emails?mailbox=team@example.com".into()).await,
        5
    );
    assert_eq!(count("/api/v1/emails?since=2000-01-01".into()).await, 6);
    assert_eq!(count("/api/v1/emails?until=2000-01-01".into()).await, 0);
    let r = app
        .call("GET", "/api/v1/emails", Some(&other_key.key), None)
        .await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    let r = app
        .call(
            "GET",
            &format!("/api/v1/emails/{alert}"),
            Some(&other_key.key),
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    let first_team =
        app.get("/api/v1/emails?from=team@example.com").await.body["data"][0]["id"].clone();
    let r = app
        .call(
            "GET",
            &format!("/api/v1/emails/{}", first_team.as_str().unwrap()),
            Some(&other_key.key),
            None,
        )
        .await;
    assert_error(&r, 404, "not_found");

    for bad in [
        "status=lost",
        "opened=maybe",
        "since=yesterday",
        "limit=101",
        "limit=0",
        "cursor=forged",
    ] {
        let r = app.get(&format!("/api/v1/emails?{bad}")).await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], bad.split('=').next().unwrap());
    }

    // Walk the pages: newest first, no overlap, nothing missed.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/v1/emails?limit=2&cursor={c}"),
            None => "/api/v1/emails?limit=2".into(),
        };
        let r = app.get(&path).await;
        assert_eq!(r.body["object"], "list");
        for m in r.body["data"].as_array().unwrap() {
            seen.push((
                m["created_at"].as_str().unwrap().to_string(),
                m["id"].as_str().unwrap().to_string(),
            ));
        }
        if r.body["has_more"] == true {
            cursor = Some(r.body["next_cursor"].as_str().unwrap().to_string());
        } else {
            assert!(r.body.get("next_cursor").is_none());
            break;
        }
    }
    assert_eq!(seen.len(), 6);
    let mut sorted = seen.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(seen, sorted);
    // A cursor edited by hand is refused.
    let c = app.get("/api/v1/emails?limit=1").await.body["next_cursor"]
        .as_str()
        .unwrap()
        .to_string();
    let mut tampered = c.clone();
    tampered.insert(0, 'A');
    assert_error(
        &app.get(&format!("/api/v1/emails?cursor={tampered}")).await,
        422,
        "invalid_request",
    );
}

#[tokio::test]
async fn threads_follow_thread_id_and_in_reply_to() {
    let app = spawn_app().await;
    ready(&app).await;
    let first = app.post("/api/v1/emails", simple("a@b.com")).await.body;
    let r = app
        .post("/api/v1/emails", json!({"from": "team@example.com", "to": "a@b.com", "text": "more", "in_reply_to": first["message_id"]}))
        .await;
    assert_eq!(r.body["thread_id"], first["thread_id"]);
    let r = app
        .post("/api/v1/emails", json!({"from": "team@example.com", "to": "a@b.com", "text": "more", "thread_id": first["thread_id"]}))
        .await;
    assert_eq!(r.body["thread_id"], first["thread_id"]);
    let r = app.post("/api/v1/emails", simple("a@b.com")).await;
    assert_ne!(r.body["thread_id"], first["thread_id"]);
    // Another mailbox may not add to this thread.
    let r = app
        .post("/api/v1/emails", json!({"from": "other@example.com", "to": "a@b.com", "text": "x", "thread_id": first["thread_id"]}))
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "thread_id");
    let count = sql!(
        "SELECT message_count FROM threads WHERE id = $1",
        first["thread_id"].as_str().unwrap()
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap();
    assert_eq!(count.int("message_count").unwrap(), 3);
}

#[tokio::test]
async fn first_send_creates_the_mailbox_for_domain_keys() {
    let app = spawn_app().await;
    ready(&app).await;
    let k = app.new_key(None, Some("example.com"), None, None).await;
    let r = app
        .call(
            "POST",
            "/api/v1/emails",
            Some(&k.key),
            Some(simple("a@b.com")),
        )
        .await;
    assert_eq!(r.status, 202);
    let r = app.get("/api/v1/mailboxes").await;
    let addrs: Vec<_> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["address"].clone())
        .collect();
    assert_eq!(addrs, vec![json!("team@example.com")]);
    // A second send reuses it.
    app.call(
        "POST",
        "/api/v1/emails",
        Some(&k.key),
        Some(simple("a@b.com")),
    )
    .await;
    assert_eq!(
        app.get("/api/v1/mailboxes").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn opens_are_tracked_through_the_image() {
    let app = spawn_app().await;
    ready(&app).await;
    let r = app.post("/api/v1/emails", simple("a@b.com")).await;
    let id = r.body["id"].as_str().unwrap().to_string();
    let row = sql!("SELECT open_token FROM messages WHERE id = $1", &id)
        .fetch_one(app.db.reader())
        .await
        .unwrap();
    let token = row.opt_text("open_token").unwrap().unwrap();
    // Tokens begin with the time, so their index grows at its end; 32
    // random characters follow.
    assert_eq!(token.len(), 42, "{token}");
    let later = app.post("/api/v1/emails", simple("a@b.com")).await.body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let later_token = sql!("SELECT open_token FROM messages WHERE id = $1", &later)
        .fetch_one(app.db.reader())
        .await
        .unwrap()
        .opt_text("open_token")
        .unwrap()
        .unwrap();
    assert!(token[..10] <= later_token[..10], "{token} {later_token}");
    assert_ne!(token[10..], later_token[10..]);
    for _ in 0..2 {
        let r = app
            .client
            .get(format!("{}/t/o/{token}", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "image/gif");
    }
    let m = app.get(&format!("/api/v1/emails/{id}")).await.body;
    assert_eq!(m["open_count"], 2);
    let opened_at = m["opened_at"].as_str().unwrap().to_string();
    app.client
        .get(format!("{}/t/o/{token}", app.base))
        .send()
        .await
        .unwrap();
    let m = app.get(&format!("/api/v1/emails/{id}")).await.body;
    assert_eq!(m["open_count"], 3);
    assert_eq!(m["opened_at"], opened_at.as_str());
    assert_eq!(
        m["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "open")
            .count(),
        3
    );
    assert_eq!(
        app.outbox_types()
            .await
            .iter()
            .filter(|t| *t == "email.opened")
            .count(),
        3
    );
    assert_eq!(
        app.get("/api/v1/emails?opened=true").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // A token of the old form (32 random characters) is still honoured.
    sql!(
        "UPDATE messages SET open_token = $1 WHERE id = $2",
        "y".repeat(32),
        &later
    )
    .execute(app.db.writer())
    .await
    .unwrap();
    app.client
        .get(format!("{}/t/o/{}", app.base, "y".repeat(32)))
        .send()
        .await
        .unwrap();
    let m = app.get(&format!("/api/v1/emails/{later}")).await.body;
    assert_eq!(m["open_count"], 1);
    // Unknown tokens get the image and change nothing.
    let r = app
        .client
        .get(format!("{}/t/o/{}", app.base, "x".repeat(32)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Text-only mail has no image.
    let r = app
        .post(
            "/api/v1/emails",
            json!({"from": "team@example.com", "to": "a@b.com", "text": "plain"}),
        )
        .await;
    let row = sql!(
        "SELECT open_token FROM messages WHERE id = $1",
        r.body["id"].as_str().unwrap()
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap();
    assert!(row.opt_text("open_token").unwrap().is_none());
}

#[tokio::test]
async fn quota_is_readable_and_an_exhausted_quota_fails_fast() {
    let app = spawn_app_with_provider(
        |_| {},
        |_| Arc::new(Simulator::new(None).with_daily_quota(2)),
    )
    .await;
    ready(&app).await;
    let r = app.get("/api/v1/provider").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["name"], "simulator");
    assert_eq!(r.body["quota"]["max_24_hour_send"], 2.0);
    assert_eq!(r.body["quota"]["sandbox"], false);
    assert_eq!(
        app.post("/api/v1/emails", simple("a@b.com")).await.status,
        202
    );
    assert_eq!(
        app.post("/api/v1/emails", simple("a@b.com")).await.status,
        202
    );
    let r = app.post("/api/v1/emails", simple("a@b.com")).await;
    assert_error(&r, 429, "rate_limited");
    assert!(r.body["error"].as_str().unwrap().contains("quota"));
    assert!(r.header("retry-after").is_some());
    assert_eq!(
        app.get("/api/v1/provider").await.body["quota"]["sent_last_24_hours"],
        2.0
    );
    let metrics = app.call("GET", "/metrics", None, None).await.text;
    assert!(
        metrics.contains("pigeonhole_rate_limit_refusals_total{limiter=\"send_quota\"} 1"),
        "{metrics}"
    );
}

/// The simulator, but every send fails in one way.
struct FailingProvider(Simulator, fn() -> ProviderError);

#[async_trait]
impl Wrapping for FailingProvider {
    fn inner(&self) -> &dyn Provider {
        &self.0
    }
    fn name(&self) -> &'static str {
        "failing"
    }
    async fn send_raw(&self, _: &OutgoingMessage) -> Result<String, ProviderError> {
        Err((self.1)())
    }
    async fn quota(&self) -> Result<Quota, ProviderError> {
        Err(ProviderError::Unavailable("no quota here".into()))
    }
}

#[tokio::test]
async fn provider_failures_are_recorded_and_answered() {
    for (make, status, code, recorded) in [
        (
            (|| ProviderError::Rejected("Email address is not verified.".into()))
                as fn() -> ProviderError,
            422,
            "invalid_request",
            "rejected",
        ),
        (
            || ProviderError::Unavailable("connection refused".into()),
            503,
            "server_error",
            "failed",
        ),
        (
            || ProviderError::Throttled {
                message: "Maximum sending rate exceeded.".into(),
                retry_after_secs: Some(2),
            },
            429,
            "rate_limited",
            "failed",
        ),
    ] {
        let app = spawn_app_with_provider(
            |_| {},
            move |_| Arc::new(Wrapped(FailingProvider(Simulator::new(None), make))),
        )
        .await;
        ready(&app).await;
        let r = app.post("/api/v1/emails", simple("a@b.com")).await;
        assert_error(&r, status, code);
        if status == 429 {
            // Throttling is retryable: the reply says after how many seconds.
            let after = r.header("retry-after").expect("Retry-After on a 429");
            let secs: u64 = after
                .parse()
                .unwrap_or_else(|_| panic!("Retry-After {after:?} is not whole seconds"));
            assert!(secs > 0, "Retry-After {after:?}");
        }
        let list = app.get("/api/v1/emails").await.body;
        let m = &list["data"][0];
        assert_eq!(m["status"], recorded, "{list}");
        assert!(m["error"].as_str().unwrap().len() > 5);
        let types = app.outbox_types().await;
        assert_eq!(types.last().unwrap(), &format!("email.{recorded}"));
    }
}

#[tokio::test]
async fn one_idempotency_key_sends_once_across_two_processes() {
    // Two app instances ("processes") on one database.
    let first = spawn_app().await;
    first.verified_domain("example.com").await;
    let config = pigeonhole::config::Config::from_map(&crate::helpers::base_config(
        &first.database_url,
        &first.dns,
    ))
    .unwrap();
    let db = pigeonhole::store::Db::connect(&first.database_url)
        .await
        .unwrap();
    let state =
        pigeonhole::app::AppState::with_provider(config, db, Arc::new(Simulator::new(None)))
            .await
            .unwrap();
    let dns = pigeonhole::dns_test_server::TestDnsServer::start()
        .await
        .unwrap();
    let second = crate::helpers::spawn_state(state, dns, first.database_url.clone()).await;

    let mut calls = Vec::new();
    for i in 0..8 {
        let base = if i % 2 == 0 {
            first.base.clone()
        } else {
            second.base.clone()
        };
        let client = first.client.clone();
        let key = first.key.clone();
        calls.push(tokio::spawn(async move {
            let r = client
                .post(format!("{base}/api/v1/emails"))
                .bearer_auth(key)
                .header("Idempotency-Key", "shared")
                .json(&simple("a@b.com"))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }));
    }
    let mut ok_bodies = Vec::new();
    for c in calls {
        let (status, body) = c.await.unwrap();
        assert!(status == 202 || status == 409, "{status} {body}");
        if status == 202 {
            ok_bodies.push(body);
        }
    }
    assert!(!ok_bodies.is_empty());
    assert!(ok_bodies.iter().all(|b| *b == ok_bodies[0]));
    let n = sql!("SELECT COUNT(*) AS n FROM messages WHERE 1 = 1")
        .fetch_one(first.db.reader())
        .await
        .unwrap();
    assert_eq!(n.int("n").unwrap(), 1, "exactly one message was sent");
}

/// Events of one batch see each other: a repeat within the batch is
/// dropped, and a later event moves the status the earlier one set.
#[tokio::test]
async fn a_batch_of_provider_events_applies_them_in_order_once_each() {
    use pigeonhole::core::provider_events::{Ingested, ingest_all};
    use pigeonhole::provider::{ProviderEvent, ProviderEventKind};

    let app = spawn_app().await;
    ready(&app).await;
    let r = app.post("/api/v1/emails", simple("ann@x.com")).await;
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.body["id"].as_str().unwrap().to_string();
    eventually("the simulator's delivery", || async {
        (app.email_status(&id).await == "delivered").then_some(())
    })
    .await;
    let pid = r.body["provider_message_id"].as_str().unwrap().to_string();
    let event = |kind| ProviderEvent {
        provider_message_id: pid.clone(),
        kind,
        recipients: vec!["ann@x.com".into()],
        detail: None,
        occurred_at: 1,
        delivery_id: None,
        message_tag: None,
    };
    let unknown = ProviderEvent {
        provider_message_id: "nobody-sent-this".into(),
        ..event(ProviderEventKind::Delivery)
    };
    let outcomes = ingest_all(
        &app.db,
        vec![
            event(ProviderEventKind::Delivery),
            event(ProviderEventKind::Complaint),
            unknown,
            event(ProviderEventKind::Complaint),
        ],
    )
    .await
    .unwrap();
    assert_eq!(
        outcomes,
        vec![
            Ingested::Applied,
            Ingested::Applied,
            Ingested::UnknownMessage,
            Ingested::Applied
        ]
    );
    assert_eq!(app.email_status(&id).await, "complained");
    let count = |t: &'static str| {
        let (app, id) = (&app, id.clone());
        async move {
            sql!(
                "SELECT COUNT(*) AS n FROM message_events WHERE message_id = $1 AND type = $2",
                id,
                t
            )
            .fetch_one(app.db.reader())
            .await
            .unwrap()
            .int("n")
            .unwrap()
        }
    };
    assert_eq!(count("delivery").await, 1);
    assert_eq!(count("complaint").await, 1);
    let types = app.outbox_types().await;
    assert_eq!(types.iter().filter(|t| *t == "email.complained").count(), 1);
    assert_eq!(types.iter().filter(|t| *t == "email.delivered").count(), 1);
}

/// A send's record is written even when the request that made it goes away
/// (a client that disconnects after the provider accepted): the write
/// carries on after its caller is dropped mid-way, on either backend.
#[tokio::test]
async fn a_write_finishes_when_its_caller_goes_away() {
    let url = crate::helpers::fresh_database_url().await;
    let db = pigeonhole::store::Db::connect(&url).await.unwrap();
    let (started, started_rx) = tokio::sync::oneshot::channel::<()>();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let write = db.write(move |tx: &mut pigeonhole::store::Tx| {
        Box::pin(async move {
            let _ = started.send(());
            let _ = released.await;
            sql!(
                "INSERT INTO labels (id, name, name_key, color, created_at) VALUES ($1, $2, $3, $4, $5)",
                "lbl_orphan",
                "Orphan",
                "orphan",
                "#aabbcc",
                1i64
            )
            .execute_tx(tx)
            .await?;
            Ok::<(), sqlx::Error>(())
        })
    });
    // The caller waits until the write is under way, then goes away.
    tokio::select! {
        _ = write => panic!("the write cannot finish before it is released"),
        _ = started_rx => {}
    }
    let _ = release.send(());
    eventually("the orphaned write to commit", || async {
        let row = sql!("SELECT id FROM labels WHERE id = $1", "lbl_orphan")
            .fetch_optional(db.reader())
            .await
            .unwrap();
        row.map(|_| ())
    })
    .await;
}

/// A `thread_id` that is no thread id is refused as a 422 naming it, before
/// anything is sent or recorded; in a batch, as that item's own 422.
#[tokio::test]
async fn a_malformed_thread_id_is_a_422_naming_it() {
    let app = spawn_app().await;
    ready(&app).await;
    for bad in [
        json!("msg_0123abc"),
        json!("thr_UPPER"),
        json!("thr_"),
        json!(5),
    ] {
        let mut body = simple("a@b.com");
        body["thread_id"] = bad.clone();
        let r = app.post("/api/v1/emails", body.clone()).await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], "thread_id", "{bad}: {}", r.text);
        let r = app
            .post("/api/v1/emails/batch", json!([simple("a@b.com"), body]))
            .await;
        assert_eq!(r.status, 207, "{bad}: {}", r.text);
        assert_eq!(r.body["data"][0]["ok"], true, "{}", r.text);
        assert_eq!(r.body["data"][1]["status"], 422, "{}", r.text);
    }
    let r = app.get("/api/v1/emails").await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 4, "{}", r.text);
}
