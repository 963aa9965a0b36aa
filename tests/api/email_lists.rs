//! Sending in batches and reading sent mail back: a batch's order, size
//! limit and per-item results; threading through `references` alone; the
//! `mailbox_id`, `since`/`until` and `opened` filters of `GET /emails`; open
//! counts through the tracking image; attachment downloads (unknown ids,
//! reach, inline disposition).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::helpers::{
    TempOutbox, TestApp, Wrapped, Wrapping, assert_error, spawn_app, spawn_app_with,
    spawn_app_with_provider,
};
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::provider::{OutgoingMessage, Provider, ProviderError};
use pigeonhole::sql;

/// The simulator, watched: it notes each message's first recipient in the
/// order the messages were handed over, how many hand-overs overlapped at
/// most, and refuses any message to `reject@…` as the provider would.
struct Recorder {
    inner: Simulator,
    handed_over: Arc<Mutex<Vec<String>>>,
    in_flight: AtomicUsize,
    most_in_flight: Arc<AtomicUsize>,
}

#[async_trait]
impl Wrapping for Recorder {
    fn inner(&self) -> &dyn Provider {
        &self.inner
    }
    async fn send_raw(&self, m: &OutgoingMessage) -> Result<String, ProviderError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        self.handed_over
            .lock()
            .unwrap()
            .push(m.recipients[0].clone());
        // Give an overlapping hand-over the chance to show itself.
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        let result = if m.recipients.iter().any(|r| r.starts_with("reject@")) {
            Err(ProviderError::Rejected(
                "MessageRejected: address blacklisted".into(),
            ))
        } else {
            self.inner.send_raw(m).await
        };
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

struct Recorded {
    app: TestApp,
    handed_over: Arc<Mutex<Vec<String>>>,
    most_in_flight: Arc<AtomicUsize>,
}

async fn spawn_recorded() -> Recorded {
    let handed_over = Arc::new(Mutex::new(Vec::new()));
    let most_in_flight = Arc::new(AtomicUsize::new(0));
    let (log, most) = (handed_over.clone(), most_in_flight.clone());
    let app = spawn_app_with_provider(
        |_| {},
        move |config| {
            Arc::new(Wrapped(Recorder {
                inner: Simulator::new(config.simulator_outbox.clone()),
                handed_over: log,
                in_flight: AtomicUsize::new(0),
                most_in_flight: most,
            }))
        },
    )
    .await;
    app.verified_domain("example.com").await;
    Recorded {
        app,
        handed_over,
        most_in_flight,
    }
}

/// The sent-mail list at `path` (at most one page of 100), as ids in order.
async fn list_ids(app: &TestApp, path: &str) -> Vec<String> {
    app.list_all(path)
        .await
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect()
}

fn keys_of(v: &Value) -> HashSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

fn set(keys: &[&str]) -> HashSet<String> {
    keys.iter().map(|k| k.to_string()).collect()
}

async fn send(app: &TestApp, body: Value) -> Value {
    let r = app.post("/api/v1/emails", body).await;
    assert_eq!(r.status, 202, "{}", r.text);
    r.body
}

#[tokio::test]
async fn a_batch_of_100_is_attempted_and_answered_in_input_order_and_101_is_refused() {
    let Recorded {
        app,
        handed_over,
        most_in_flight,
    } = spawn_recorded().await;
    let items: Vec<Value> = (0..100)
        .map(|i| {
            json!({"from": "team@example.com", "to": format!("r{i:03}@x.com"),
                   "subject": format!("Item {i:03}"), "text": format!("body {i}")})
        })
        .collect();
    let r = app.post("/api/v1/emails/batch", json!(items)).await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.body["object"], "batch");
    assert_eq!(r.body["sent"], 100);
    assert_eq!(r.body["failed"], 0);
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 100);

    // The provider got them in input order, one at a time.
    let expected: Vec<String> = (0..100).map(|i| format!("r{i:03}@x.com")).collect();
    assert_eq!(*handed_over.lock().unwrap(), expected);
    assert_eq!(most_in_flight.load(Ordering::SeqCst), 1);

    // Each result is its own item's, in input order.
    let listed = app.get("/api/v1/emails?limit=100").await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    let by_id: HashMap<String, Value> = listed.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap().to_string(), m.clone()))
        .collect();
    assert_eq!(by_id.len(), 100);
    let mut ids = Vec::new();
    let mut created = Vec::new();
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"], i, "{d}");
        assert_eq!(d["ok"], true, "{d}");
        assert_eq!(keys_of(d), set(&["index", "ok", "id", "thread_id"]), "{d}");
        let id = d["id"].as_str().unwrap();
        let m = &by_id[id];
        assert_eq!(m["subject"], format!("Item {i:03}"), "{m}");
        assert_eq!(m["to"], json!([format!("r{i:03}@x.com")]), "{m}");
        assert_eq!(m["thread_id"], d["thread_id"], "{m}");
        let at = pigeonhole::clock::parse_instant(m["created_at"].as_str().unwrap()).unwrap();
        ids.push(id.to_string());
        created.push(at);
    }
    assert!(
        created.windows(2).all(|w| w[0] < w[1]),
        "created_at does not increase with the index: {created:?}"
    );
    // Ids begin with their creation time in milliseconds.
    assert!(
        ids.windows(2).all(|w| w[0][..14] <= w[1][..14]),
        "ids' time does not increase with the index: {ids:?}"
    );
    // Newest first: the list is the batch backwards.
    let mut backwards = ids.clone();
    backwards.reverse();
    assert_eq!(list_ids(&app, "/api/v1/emails").await, backwards);

    // One more than the limit is refused whole: nothing is sent.
    let mut too_many = items.clone();
    too_many.push(json!({"from": "team@example.com", "to": "r100@x.com", "text": "t"}));
    let r = app
        .post("/api/v1/emails/batch", json!({"emails": too_many}))
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "emails", "{}", r.text);
    assert_eq!(handed_over.lock().unwrap().len(), 100);
    assert_eq!(list_ids(&app, "/api/v1/emails").await.len(), 100);
}

#[tokio::test]
async fn a_batch_with_failing_items_answers_207_with_each_items_error() {
    let Recorded {
        app, handed_over, ..
    } = spawn_recorded().await;
    let r = app
        .post("/api/v1/suppressions", json!({"address": "blocked@x.com"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = app
        .post("/api/v1/domains", json!({"name": "pending.org"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);

    let item = |from: &str, to: &str, subject: &str| json!({"from": from, "to": to, "subject": subject, "text": "t"});
    let r = app
        .post(
            "/api/v1/emails/batch",
            json!([
                item("team@example.com", "one@x.com", "zero"),
                item("team@example.com", "blocked@x.com", "one"),
                item("team@example.com", "two@x.com", "two"),
                item("team@pending.org", "three@x.com", "three"),
                item("team@example.com", "reject@x.com", "four"),
                item("team@example.com", "five@x.com", "five"),
            ]),
        )
        .await;
    assert_eq!(r.status, 207, "{}", r.text);
    assert_eq!(r.body["object"], "batch");
    assert_eq!(r.body["sent"], 3, "{}", r.text);
    assert_eq!(r.body["failed"], 3, "{}", r.text);
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 6);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(d["index"], i, "{d}");
    }
    let mut sent = Vec::new();
    for i in [0, 2, 5] {
        let d = &data[i];
        assert_eq!(d["ok"], true, "{d}");
        assert_eq!(keys_of(d), set(&["index", "ok", "id", "thread_id"]), "{d}");
        sent.push(d["id"].as_str().unwrap().to_string());
    }
    for (i, names) in [(1, "blocked@x.com"), (3, "pending.org"), (4, "rejected")] {
        let d = &data[i];
        assert_eq!(d["ok"], false, "{d}");
        assert_eq!(keys_of(d), set(&["index", "ok", "error", "status"]), "{d}");
        assert_eq!(d["status"], 422, "{d}");
        let error = d["error"].as_str().unwrap();
        assert!(error.contains(names), "item {i}: {error}");
    }

    // The others went out, each as its own message; only the suppressed
    // and unverified items never reached the provider.
    for (id, (to, subject)) in sent.iter().zip([
        ("one@x.com", "zero"),
        ("two@x.com", "two"),
        ("five@x.com", "five"),
    ]) {
        let m = app.get(&format!("/api/v1/emails/{id}")).await;
        assert_eq!(m.status, 200, "{}", m.text);
        assert_eq!(m.body["to"], json!([to]));
        assert_eq!(m.body["subject"], subject);
        assert!(
            ["sent", "delivered"].contains(&m.body["status"].as_str().unwrap()),
            "{}",
            m.text
        );
    }
    assert_eq!(
        *handed_over.lock().unwrap(),
        vec!["one@x.com", "two@x.com", "reject@x.com", "five@x.com"]
    );
    // The provider's refusal is recorded like any attempt.
    let rejected = app.get("/api/v1/emails?status=rejected").await.body;
    let rejected = rejected["data"].as_array().unwrap();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0]["to"], json!(["reject@x.com"]));
    let mut listed = list_ids(&app, "/api/v1/emails?status=sent,delivered").await;
    listed.sort();
    sent.sort();
    assert_eq!(listed, sent);
}

#[tokio::test]
async fn references_alone_put_a_sent_message_in_the_named_messages_thread() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let first = send(
        &app,
        json!({"from": "team@example.com", "to": "a@b.com", "subject": "Quarterly report", "text": "numbers"}),
    )
    .await;
    let first_mid = first["message_id"].as_str().unwrap();
    let thread = first["thread_id"].as_str().unwrap();

    // An array naming the first message.
    let second = send(
        &app,
        json!({"from": "team@example.com", "to": "c@d.com", "subject": "Something else", "text": "more",
               "references": [first_mid]}),
    )
    .await;
    assert_eq!(second["thread_id"], thread, "{second}");
    // A header-style string whose first id is unknown to us.
    let third = send(
        &app,
        json!({"from": "team@example.com", "to": "c@d.com", "subject": "Third", "text": "still more",
               "references": format!("<unknown@elsewhere.test> {first_mid}")}),
    )
    .await;
    assert_eq!(third["thread_id"], thread, "{third}");
    // References to nothing we know start a new thread.
    let fourth = send(
        &app,
        json!({"from": "team@example.com", "to": "c@d.com", "subject": "Quarterly report", "text": "x",
               "references": ["<unknown@elsewhere.test>"]}),
    )
    .await;
    assert_ne!(fourth["thread_id"], thread, "{fourth}");
    // Another mailbox's message is not ours to join.
    let other = send(
        &app,
        json!({"from": "other@example.com", "to": "c@d.com", "subject": "Re: Quarterly report", "text": "x",
               "references": [first_mid]}),
    )
    .await;
    assert_ne!(other["thread_id"], thread, "{other}");

    let m = app
        .get(&format!(
            "/api/v1/emails/{}",
            second["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(m.body["in_reply_to"], Value::Null, "{}", m.text);
    assert_eq!(m.body["references"], first_mid, "{}", m.text);
    let t = app.get(&format!("/api/v1/threads/{thread}")).await;
    assert_eq!(t.status, 200, "{}", t.text);
    assert_eq!(t.body["message_count"], 3, "{}", t.text);
    let in_thread: HashSet<&str> = t.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    let expected: HashSet<&str> = [&first, &second, &third]
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(in_thread, expected);
}

#[tokio::test]
async fn the_list_narrows_to_one_mailbox_by_mailbox_id() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let alpha = app.mailbox("alpha@example.com").await;
    let beta = app.mailbox("beta@example.com").await;
    let mut from_alpha = Vec::new();
    let mut from_beta = Vec::new();
    for i in 0..2 {
        let a = send(&app, json!({"from": "alpha@example.com", "to": "x@y.com", "subject": format!("a{i}"), "text": "t"})).await;
        from_alpha.push(a["id"].as_str().unwrap().to_string());
    }
    let b = send(
        &app,
        json!({"from": "beta@example.com", "to": "x@y.com", "subject": "b", "text": "t"}),
    )
    .await;
    from_beta.push(b["id"].as_str().unwrap().to_string());
    from_alpha.reverse();

    assert_eq!(list_ids(&app, "/api/v1/emails").await.len(), 3);
    let alpha_id = alpha["id"].as_str().unwrap();
    let beta_id = beta["id"].as_str().unwrap();
    assert_eq!(
        list_ids(&app, &format!("/api/v1/emails?mailbox_id={alpha_id}")).await,
        from_alpha
    );
    assert_eq!(
        list_ids(&app, &format!("/api/v1/emails?mailbox_id={beta_id}")).await,
        from_beta
    );
    assert_eq!(
        list_ids(&app, "/api/v1/emails?mailbox_id=mbx_00000000000000000000").await,
        Vec::<String>::new()
    );
    // Every message of the list names its mailbox.
    let r = app
        .get(&format!("/api/v1/emails?mailbox_id={alpha_id}"))
        .await;
    for m in r.body["data"].as_array().unwrap() {
        assert_eq!(m["mailbox_id"], alpha_id, "{m}");
    }
}

#[tokio::test]
async fn since_and_until_leave_out_mail_outside_the_window() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let mut ids = Vec::new();
    for s in ["A", "B", "C"] {
        let r = send(
            &app,
            json!({"from": "team@example.com", "to": "x@y.com", "subject": s, "text": "t"}),
        )
        .await;
        ids.push(r["id"].as_str().unwrap().to_string());
    }
    let mut at = Vec::new();
    for id in &ids {
        let m = app.get(&format!("/api/v1/emails/{id}")).await.body;
        at.push(pigeonhole::clock::parse_instant(m["created_at"].as_str().unwrap()).unwrap());
    }
    assert!(at[0] + 2 <= at[1] && at[1] + 2 <= at[2], "{at:?}");
    let between = |a: i64, b: i64| pigeonhole::clock::iso(a + (b - a) / 2);
    let (ab, bc) = (between(at[0], at[1]), between(at[1], at[2]));
    let (a, b, c) = (ids[0].clone(), ids[1].clone(), ids[2].clone());

    assert_eq!(
        list_ids(&app, &format!("/api/v1/emails?since={ab}")).await,
        vec![c.clone(), b.clone()]
    );
    assert_eq!(
        list_ids(&app, &format!("/api/v1/emails?until={bc}")).await,
        vec![b.clone(), a.clone()]
    );
    assert_eq!(
        list_ids(&app, &format!("/api/v1/emails?since={ab}&until={bc}")).await,
        vec![b.clone()]
    );
    assert_eq!(
        list_ids(&app, &format!("/api/v1/emails?since={bc}&until={ab}")).await,
        Vec::<String>::new()
    );

    // Dates: A and B moved to two past days, C stays today.
    let noon = |date: &str| pigeonhole::clock::parse_instant(date).unwrap() + 12 * 3_600_000_000;
    for (id, date) in [(&a, "2026-01-10"), (&b, "2026-01-11")] {
        sql!(
            "UPDATE messages SET created_at = $1 WHERE id = $2",
            noon(date),
            id.as_str()
        )
        .execute(app.db.writer())
        .await
        .unwrap();
    }
    assert_eq!(
        list_ids(&app, "/api/v1/emails?since=2026-01-11").await,
        vec![c.clone(), b.clone()]
    );
    assert_eq!(
        list_ids(&app, "/api/v1/emails?until=2026-01-12").await,
        vec![b.clone(), a.clone()]
    );
    assert_eq!(
        list_ids(&app, "/api/v1/emails?since=2026-01-11&until=2026-01-12").await,
        vec![b.clone()]
    );
    // A date as `until` takes in the whole of that day.
    assert_eq!(
        list_ids(&app, "/api/v1/emails?until=2026-01-10").await,
        vec![a.clone()]
    );
    assert_eq!(
        list_ids(&app, "/api/v1/emails?since=2026-01-11&until=2026-01-11").await,
        vec![b.clone()]
    );
    assert_eq!(
        list_ids(&app, "/api/v1/emails?until=2026-01-09").await,
        Vec::<String>::new()
    );
}

/// The open-tracking image's token in the mail the simulator wrote for
/// `provider_message_id` in `outbox`.
fn tracking_token(outbox: &TempOutbox, provider_message_id: &str) -> String {
    let raw = outbox.eml(provider_message_id);
    let parsed = mail_parser::MessageParser::default().parse(&raw).unwrap();
    let html = parsed.body_html(0).unwrap().to_string();
    let start = html.find("/t/o/").expect("a tracking image") + "/t/o/".len();
    html[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect()
}

#[tokio::test]
async fn opened_false_leaves_out_opened_mail_and_a_second_open_only_counts() {
    let outbox = TempOutbox::new();
    let setting = outbox.setting();
    let app = spawn_app_with(move |m| m.extend([setting])).await;
    app.verified_domain("example.com").await;
    let html = |s: &str| json!({"from": "team@example.com", "to": "x@y.com", "subject": s, "html": format!("<p>{s}</p>")});
    let a = send(&app, html("A")).await;
    let b = send(&app, html("B")).await;
    let (a_id, b_id) = (
        a["id"].as_str().unwrap().to_string(),
        b["id"].as_str().unwrap().to_string(),
    );
    assert_eq!(
        list_ids(&app, "/api/v1/emails?opened=false").await,
        vec![b_id.clone(), a_id.clone()]
    );
    assert!(
        list_ids(&app, "/api/v1/emails?opened=true")
            .await
            .is_empty()
    );

    let token = tracking_token(&outbox, a["provider_message_id"].as_str().unwrap());
    let open = || async {
        let r = app
            .client
            .get(format!("{}/t/o/{token}", app.base))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "image/gif");
    };
    open().await;
    let m = app.get(&format!("/api/v1/emails/{a_id}")).await.body;
    assert_eq!(m["open_count"], 1, "{m}");
    let opened_at = m["opened_at"].as_str().expect("opened_at set").to_string();
    assert_eq!(
        list_ids(&app, "/api/v1/emails?opened=true").await,
        vec![a_id.clone()]
    );
    assert_eq!(
        list_ids(&app, "/api/v1/emails?opened=false").await,
        vec![b_id.clone()]
    );

    open().await;
    let m = app.get(&format!("/api/v1/emails/{a_id}")).await.body;
    assert_eq!(m["open_count"], 2, "{m}");
    assert_eq!(m["opened_at"], opened_at.as_str(), "{m}");
    let m = app.get(&format!("/api/v1/emails/{b_id}")).await.body;
    assert_eq!(m["open_count"], 0, "{m}");
    assert_eq!(m["opened_at"], Value::Null, "{m}");
    assert_eq!(
        list_ids(&app, "/api/v1/emails?opened=false").await,
        vec![b_id.clone()]
    );
}

#[tokio::test]
async fn attachment_downloads_answer_404_for_unknown_ids_and_outside_reach_and_mark_inline_files() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let with_files = |from: &str| {
        json!({"from": from, "to": "x@y.com", "html": "<img src=\"cid:logo\"> hello",
        "attachments": [
            {"filename": "logo.png", "content": "data:image/png;base64,AQID", "content_id": "logo"},
            {"filename": "notes.txt", "content": "aGVsbG8="}
        ]})
    };
    let sent = send(&app, with_files("alpha@example.com")).await;
    let id = sent["id"].as_str().unwrap().to_string();
    let m = app.get(&format!("/api/v1/emails/{id}")).await.body;
    let atts = m["attachments"].as_array().unwrap();
    let find = |name: &str| {
        atts.iter().find(|a| a["filename"] == name).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (logo, notes) = (find("logo.png"), find("notes.txt"));

    let download = |key: String, path: String| {
        let app = &app;
        async move {
            app.client
                .get(format!("{}{path}", app.base))
                .bearer_auth(key)
                .send()
                .await
                .unwrap()
        }
    };
    let r = download(
        app.key.clone(),
        format!("/api/v1/emails/{id}/attachments/{logo}"),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/png");
    let disposition = r.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(disposition.starts_with("inline"), "{disposition}");
    assert!(disposition.contains("logo.png"), "{disposition}");
    assert_eq!(r.bytes().await.unwrap().as_ref(), &[1u8, 2, 3]);
    let r = download(
        app.key.clone(),
        format!("/api/v1/emails/{id}/attachments/{notes}"),
    )
    .await;
    assert_eq!(r.status(), 200);
    let disposition = r.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(disposition.starts_with("attachment"), "{disposition}");

    // Unknown attachment ids, and another message's attachment.
    assert_error(
        &app.get(&format!(
            "/api/v1/emails/{id}/attachments/att_00000000000000000000"
        ))
        .await,
        404,
        "not_found",
    );
    let plain = send(
        &app,
        json!({"from": "alpha@example.com", "to": "x@y.com", "text": "no files"}),
    )
    .await;
    assert_error(
        &app.get(&format!(
            "/api/v1/emails/{}/attachments/{notes}",
            plain["id"].as_str().unwrap()
        ))
        .await,
        404,
        "not_found",
    );

    // A key reaching only beta@example.com sees neither alpha's message
    // nor its files, but does see its own.
    let beta = app
        .new_key(None, None, Some("beta@example.com"), None)
        .await;
    let r = app
        .call(
            "GET",
            &format!("/api/v1/emails/{id}"),
            Some(&beta.key),
            None,
        )
        .await;
    assert_error(&r, 404, "not_found");
    for att in [&logo, &notes] {
        let r = app
            .call(
                "GET",
                &format!("/api/v1/emails/{id}/attachments/{att}"),
                Some(&beta.key),
                None,
            )
            .await;
        assert_error(&r, 404, "not_found");
    }
    let r = app
        .call(
            "POST",
            "/api/v1/emails",
            Some(&beta.key),
            Some(with_files("beta@example.com")),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let own = r.body["id"].as_str().unwrap().to_string();
    let m = app
        .call(
            "GET",
            &format!("/api/v1/emails/{own}"),
            Some(&beta.key),
            None,
        )
        .await;
    assert_eq!(m.status, 200, "{}", m.text);
    let own_notes = m.body["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["filename"] == "notes.txt")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = download(
        beta.key.clone(),
        format!("/api/v1/emails/{own}/attachments/{own_notes}"),
    )
    .await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"hello");
}
