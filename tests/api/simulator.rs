//! The simulator provider through the HTTP API, as interface.md ("The
//! simulator provider") describes it: every accepted message gets a `send`
//! event, then each recipient behaves like the SES mailbox simulator within a
//! second; a message to several recipients records every recipient's events
//! and takes the first status they reach (README, "Provider events").

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{TestApp, eventually, spawn_app};
use pigeonhole::sql;
use pigeonhole::store::RowExt;

const SIM: &str = "simulator.amazonses.com";

/// The outcome of a mailbox-simulator address shows within this long.
const WITHIN: Duration = Duration::from_secs(1);

fn sim(local: &str) -> String {
    format!("{local}@{SIM}")
}

fn mail(to: Value) -> Value {
    json!({"from": "Team <team@example.com>", "to": to, "subject": "Simulated", "text": "Hello"})
}

async fn ready() -> TestApp {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    app
}

/// Sends `body` (202 expected) and returns the new message's id.
async fn send(app: &TestApp, body: Value) -> String {
    let r = app.post("/api/v1/emails", body).await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert!(r.body["provider_message_id"].is_string(), "{}", r.text);
    r.body["id"].as_str().unwrap().to_string()
}

async fn email(app: &TestApp, id: &str) -> Value {
    let r = app.get(&format!("/api/v1/emails/{id}")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body
}

fn events(m: &Value) -> &Vec<Value> {
    m["events"].as_array().expect("events on a single read")
}

/// The types of the events of one recipient, in the order listed.
fn types_for(m: &Value, recipient: &str) -> Vec<String> {
    events(m)
        .iter()
        .filter(|e| e["recipient"] == recipient)
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

/// The one event of `kind` for `recipient`.
fn event_of<'a>(m: &'a Value, kind: &str, recipient: &str) -> &'a Value {
    let found: Vec<&Value> = events(m)
        .iter()
        .filter(|e| e["type"] == kind && e["recipient"] == recipient)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} for {recipient}: {m}");
    found[0]
}

fn micros(iso: &Value) -> i64 {
    pigeonhole::clock::parse_instant(iso.as_str().unwrap()).unwrap()
}

/// Waits until message `id` is at `status` with `n` events in all, noting
/// every status seen on the way; returns the message and those statuses.
async fn settle(app: &TestApp, id: &str, status: &str, n: usize) -> (Value, Vec<String>) {
    let seen = RefCell::new(Vec::<String>::new());
    let seen_ref = &seen;
    let m = eventually(
        &format!("{id} to be {status} with {n} events"),
        || async move {
            let m = email(app, id).await;
            let now = m["status"].as_str().unwrap().to_string();
            let mut seen = seen_ref.borrow_mut();
            if seen.last() != Some(&now) {
                seen.push(now.clone());
            }
            (now == status && events(&m).len() == n).then_some(m)
        },
    )
    .await;
    (m, seen.into_inner())
}

/// Asserts that `seen` only ever moved forward along `path`.
fn moved_along(seen: &[String], path: &[&str]) {
    let mut at = 0;
    for s in seen {
        let Some(i) = path.iter().position(|p| p == s) else {
            panic!("status {s} is not on the way {path:?}: saw {seen:?}");
        };
        assert!(i >= at, "the status moved backwards: saw {seen:?}");
        at = i;
    }
}

/// The outbox events written about message `id`, in order: (type, the
/// message's status in the payload, the payload's recipients).
async fn outbox_for(app: &TestApp, id: &str) -> Vec<(String, String, Value)> {
    sql!("SELECT type, payload FROM events ORDER BY seq")
        .fetch_all(app.db.reader())
        .await
        .unwrap()
        .iter()
        .filter_map(|r| {
            let payload: Value = serde_json::from_str(&r.text("payload").unwrap()).unwrap();
            let data = &payload["data"];
            (data["email"]["id"] == id).then(|| {
                (
                    r.text("type").unwrap(),
                    data["email"]["status"].as_str().unwrap_or("").to_string(),
                    data["recipients"].clone(),
                )
            })
        })
        .collect()
}

/// Every suppression, by address.
async fn suppressions(app: &TestApp) -> BTreeMap<String, Value> {
    app.list_all("/api/v1/suppressions")
        .await
        .iter()
        .map(|s| (s["address"].as_str().unwrap().to_string(), s.clone()))
        .collect()
}

/// The `send` event: one per message, about no single recipient, at the
/// moment the provider accepted it, and before any outcome.
fn assert_one_send_event(m: &Value) {
    let sends: Vec<&Value> = events(m).iter().filter(|e| e["type"] == "send").collect();
    assert_eq!(sends.len(), 1, "one send event: {m}");
    let send = sends[0];
    assert!(send.get("recipient").is_none(), "{m}");
    assert!(m["sent_at"].is_string(), "{m}");
    assert_eq!(send["occurred_at"], m["sent_at"], "{m}");
    assert_eq!(
        events(m)[0]["type"],
        "send",
        "the send event comes first: {m}"
    );
    for e in events(m) {
        assert!(
            micros(&e["occurred_at"]) >= micros(&send["occurred_at"]),
            "{m}"
        );
    }
}

/// What one recipient on its own leads to.
struct Expect {
    to: String,
    status: &'static str,
    /// The recipient's events after `send`, in order.
    events: &'static [&'static str],
    /// The outbox events after `email.sent`.
    outbox: &'static [&'static str],
    suppressed: Option<&'static str>,
}

fn expect(
    to: &str,
    status: &'static str,
    events: &'static [&'static str],
    outbox: &'static [&'static str],
    suppressed: Option<&'static str>,
) -> Expect {
    Expect {
        to: to.to_string(),
        status,
        events,
        outbox,
        suppressed,
    }
}

/// Sends one message to `e.to`, waits (at most a second) for its outcome and
/// checks its status, events and outbox events; returns the message.
async fn check_outcome(app: &TestApp, e: &Expect) -> Value {
    let id = send(app, mail(json!(e.to))).await;
    let sent = Instant::now();
    let (m, seen) = settle(app, &id, e.status, 1 + e.events.len()).await;
    assert!(
        sent.elapsed() < WITHIN,
        "{}: the outcome took {:?}",
        e.to,
        sent.elapsed()
    );
    let mut path = vec!["sent"];
    path.extend(e.outbox.iter().map(|t| t.trim_start_matches("email.")));
    moved_along(&seen, &path);

    assert_eq!(m["to"], json!([e.to]), "{m}");
    assert_one_send_event(&m);
    assert_eq!(types_for(&m, &e.to), e.events, "{}: {m}", e.to);
    // Asynchronously, after the send, and within a second of it.
    let sent_at = micros(&m["sent_at"]);
    for ev in events(&m).iter().filter(|ev| ev["type"] != "send") {
        let after = micros(&ev["occurred_at"]) - sent_at;
        assert!(
            after > 0 && after < WITHIN.as_micros() as i64,
            "{}: {ev} is {after}µs after the send",
            e.to
        );
        assert!(ev["detail"].as_str().is_some_and(|d| !d.is_empty()), "{ev}");
    }

    let outbox = outbox_for(app, &id).await;
    let types: Vec<&str> = outbox.iter().map(|(t, _, _)| t.as_str()).collect();
    let mut want = vec!["email.sent"];
    want.extend(e.outbox);
    assert_eq!(types, want, "{}", e.to);
    for (t, status, recipients) in &outbox[1..] {
        // Each announces the status it moved the message to, and whom.
        assert_eq!(format!("email.{status}"), *t, "{}", e.to);
        assert_eq!(*recipients, json!([e.to]), "{}", e.to);
    }
    m
}

#[tokio::test]
async fn each_mailbox_simulator_address_has_its_outcome() {
    let app = ready().await;
    let other = "ann@example.net";
    let cases = [
        expect(
            &sim("success"),
            "delivered",
            &["delivery"],
            &["email.delivered"],
            None,
        ),
        expect(
            &sim("ooto"),
            "delivered",
            &["delivery"],
            &["email.delivered"],
            None,
        ),
        expect(
            &sim("bounce"),
            "bounced",
            &["bounce"],
            &["email.bounced"],
            Some("bounce"),
        ),
        expect(
            &sim("complaint"),
            "complained",
            &["delivery", "complaint"],
            &["email.delivered", "email.complained"],
            Some("complaint"),
        ),
        expect(
            &sim("suppressionlist"),
            "bounced",
            &["bounce"],
            &["email.bounced"],
            Some("bounce"),
        ),
        expect(
            other,
            "delivered",
            &["delivery"],
            &["email.delivered"],
            None,
        ),
        // Only the simulator's own domain behaves specially.
        expect(
            "bounce@example.net",
            "delivered",
            &["delivery"],
            &["email.delivered"],
            None,
        ),
    ];
    let mut messages = BTreeMap::new();
    for e in &cases {
        let m = check_outcome(&app, e).await;
        messages.insert(e.to.clone(), m);
    }

    // A bounce puts its detail in the message's error; a delivery leaves none.
    for addr in [sim("bounce"), sim("suppressionlist")] {
        let m = &messages[&addr];
        assert_eq!(m["error"], event_of(m, "bounce", &addr)["detail"], "{m}");
    }
    for addr in [sim("success"), sim("ooto"), sim("complaint"), other.into()] {
        assert!(messages[&addr]["error"].is_null(), "{}", messages[&addr]);
    }
    assert!(
        event_of(&messages[&sim("bounce")], "bounce", &sim("bounce"))["detail"]
            .as_str()
            .unwrap()
            .contains("550")
    );
    // suppressionlist@ bounces as suppressed: the bounce says so.
    let detail = event_of(
        &messages[&sim("suppressionlist")],
        "bounce",
        &sim("suppressionlist"),
    )["detail"]
        .as_str()
        .unwrap()
        .to_lowercase();
    assert!(detail.contains("suppress"), "{detail}");
    // complaint@ is delivered, then complained.
    let c = &messages[&sim("complaint")];
    assert!(
        micros(&event_of(c, "delivery", &sim("complaint"))["occurred_at"])
            <= micros(&event_of(c, "complaint", &sim("complaint"))["occurred_at"]),
        "{c}"
    );

    // The hard bounces and the complaint, and only they, are suppressed,
    // each naming its message and the bounce or complaint behind it.
    let list = suppressions(&app).await;
    let want: Vec<&String> = cases
        .iter()
        .filter(|e| e.suppressed.is_some())
        .map(|e| &e.to)
        .collect();
    assert_eq!(list.keys().collect::<Vec<_>>(), {
        let mut w = want.clone();
        w.sort();
        w
    });
    for e in cases.iter().filter(|e| e.suppressed.is_some()) {
        let s = &list[&e.to];
        let m = &messages[&e.to];
        assert_eq!(s["reason"], e.suppressed.unwrap(), "{s}");
        assert_eq!(s["message_id"], m["id"], "{s}");
        assert_eq!(s["domain"], "example.com", "{s}");
        let kind = if e.suppressed == Some("bounce") {
            "bounce"
        } else {
            "complaint"
        };
        assert_eq!(s["detail"], event_of(m, kind, &e.to)["detail"], "{s}");
    }
    // ...so that mail to them is refused from now on, and to the others not.
    for e in &cases {
        let r = app.post("/api/v1/emails", mail(json!(e.to))).await;
        let want = if e.suppressed.is_some() { 422 } else { 202 };
        assert_eq!(r.status, want, "{}: {}", e.to, r.text);
    }
}

#[tokio::test]
async fn labels_and_letter_case_keep_the_simulator_outcome() {
    let app = ready().await;
    for e in [
        expect(
            "Bounce+Signup@Simulator.AmazonSES.com",
            "bounced",
            &["bounce"],
            &["email.bounced"],
            Some("bounce"),
        ),
        expect(
            &sim("complaint+weekly"),
            "complained",
            &["delivery", "complaint"],
            &["email.delivered", "email.complained"],
            Some("complaint"),
        ),
        expect(
            &sim("success+1"),
            "delivered",
            &["delivery"],
            &["email.delivered"],
            None,
        ),
        expect(
            &sim("bouncer"),
            "delivered",
            &["delivery"],
            &["email.delivered"],
            None,
        ),
    ] {
        let to = e.to.to_lowercase();
        let r = app.post("/api/v1/emails", mail(json!(e.to))).await;
        assert_eq!(r.status, 202, "{}", r.text);
        // Addresses are kept lower-case, and so are the events and the list.
        let id = r.body["id"].as_str().unwrap();
        let (m, _) = settle(&app, id, e.status, 1 + e.events.len()).await;
        assert_eq!(m["to"], json!([to]), "{m}");
        assert_eq!(types_for(&m, &to), e.events, "{to}: {m}");
        let list = suppressions(&app).await;
        assert_eq!(
            list.get(&to).map(|s| s["reason"].as_str().unwrap()),
            e.suppressed,
            "{to}: {list:?}"
        );
    }
}

#[tokio::test]
async fn several_recipients_record_every_event_and_take_the_first_status_reached() {
    let app = ready().await;
    let (success, ooto, bounce, complaint) =
        (sim("success"), sim("ooto"), sim("bounce"), sim("complaint"));

    // Delivered first: the bounce cannot undo it, the complaint after the
    // delivery moves it on.
    let first = send(&app, mail(json!([success, bounce, complaint]))).await;
    let (m, seen) = settle(&app, &first, "complained", 5).await;
    moved_along(&seen, &["sent", "delivered", "complained"]);
    assert_one_send_event(&m);
    assert_eq!(types_for(&m, &success), ["delivery"], "{m}");
    assert_eq!(types_for(&m, &bounce), ["bounce"], "{m}");
    assert_eq!(types_for(&m, &complaint), ["delivery", "complaint"], "{m}");
    // Only the bounce moved nothing: no error, no email.bounced.
    assert!(m["error"].is_null(), "{m}");
    assert_eq!(
        outbox_for(&app, &first).await,
        vec![
            ("email.sent".into(), "sent".into(), Value::Null),
            (
                "email.delivered".into(),
                "delivered".into(),
                json!([success])
            ),
            (
                "email.complained".into(),
                "complained".into(),
                json!([complaint])
            ),
        ]
    );

    // Bounced first: nothing moves it after that, though every recipient's
    // events (cc and bcc too) are kept and the complaint still suppresses.
    let (bounce2, complaint2) = (sim("bounce+2"), sim("complaint+2"));
    let second = send(
        &app,
        json!({"from": "team@example.com", "to": bounce2, "cc": success, "bcc": complaint2, "subject": "Second", "text": "Hi"}),
    )
    .await;
    let (m, seen) = settle(&app, &second, "bounced", 5).await;
    moved_along(&seen, &["sent", "bounced"]);
    assert_one_send_event(&m);
    assert_eq!(types_for(&m, &bounce2), ["bounce"], "{m}");
    assert_eq!(types_for(&m, &success), ["delivery"], "{m}");
    assert_eq!(types_for(&m, &complaint2), ["delivery", "complaint"], "{m}");
    assert_eq!(
        m["error"],
        event_of(&m, "bounce", &bounce2)["detail"],
        "{m}"
    );
    assert_eq!(
        outbox_for(&app, &second).await,
        vec![
            ("email.sent".into(), "sent".into(), Value::Null),
            ("email.bounced".into(), "bounced".into(), json!([bounce2])),
        ]
    );

    // Every recipient delivered: one move, announced once.
    let third = send(&app, mail(json!([success, ooto, "ann@example.net"]))).await;
    let (m, seen) = settle(&app, &third, "delivered", 4).await;
    moved_along(&seen, &["sent", "delivered"]);
    for r in [success.as_str(), ooto.as_str(), "ann@example.net"] {
        assert_eq!(types_for(&m, r), ["delivery"], "{r}: {m}");
    }
    let outbox = outbox_for(&app, &third).await;
    let types: Vec<&str> = outbox.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(types, ["email.sent", "email.delivered"]);

    // Suppressed: the bounced and complained recipients, each with the
    // message that caused it; never the delivered ones.
    let list = suppressions(&app).await;
    let mut want = vec![&bounce, &bounce2, &complaint, &complaint2];
    want.sort();
    assert_eq!(list.keys().collect::<Vec<_>>(), want);
    for (addr, reason, id) in [
        (&bounce, "bounce", &first),
        (&complaint, "complaint", &first),
        (&bounce2, "bounce", &second),
        (&complaint2, "complaint", &second),
    ] {
        assert_eq!(list[addr]["reason"], reason, "{addr}");
        assert_eq!(list[addr]["message_id"], id.as_str(), "{addr}");
    }
}

#[tokio::test]
async fn every_accepted_message_records_one_send_event() {
    let app = ready().await;
    let mut accepted = Vec::new();

    // One at a time, to one and to several recipients.
    accepted.push(send(&app, mail(json!(sim("success")))).await);
    accepted.push(send(&app, mail(json!([sim("bounce"), sim("ooto")]))).await);
    // A batch: its accepted items only.
    let r = app
        .post(
            "/api/v1/emails/batch",
            json!([
                mail(json!(sim("complaint"))),
                {"from": "x@nowhere.org", "to": sim("success"), "text": "t"},
                mail(json!("ann@example.net")),
            ]),
        )
        .await;
    assert_eq!(r.status, 207, "{}", r.text);
    assert_eq!(r.body["sent"], 2, "{}", r.text);
    for i in [0, 2] {
        accepted.push(r.body["data"][i]["id"].as_str().unwrap().to_string());
    }
    // A draft sent, and a reply in a thread.
    let r = app
        .post(
            "/api/v1/drafts",
            json!({"from": "team@example.com", "to": sim("ooto"), "subject": "Draft", "text": "d"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let did = r.body["id"].as_str().unwrap();
    let r = app
        .post(&format!("/api/v1/drafts/{did}/send"), json!({}))
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    accepted.push(r.body["id"].as_str().unwrap().to_string());
    let tid = r.body["thread_id"].as_str().unwrap();
    let r = app
        .post(
            &format!("/api/v1/threads/{tid}/reply"),
            json!({"text": "Following up"}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    accepted.push(r.body["id"].as_str().unwrap().to_string());

    // Wait for every outcome, then look at each message.
    for id in &accepted {
        eventually("the outcome", || async {
            (email(&app, id).await["status"] != "sent").then_some(())
        })
        .await;
    }
    // Refused before the provider (a suppressed recipient): nothing at all.
    let r = app.post("/api/v1/emails", mail(json!(sim("bounce")))).await;
    assert_eq!(r.status, 422, "{}", r.text);

    let mut listed: Vec<String> = app
        .list_all("/api/v1/emails")
        .await
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    let mut want = accepted.clone();
    want.sort();
    assert_eq!(listed, want);
    for id in &accepted {
        let m = email(&app, id).await;
        assert_one_send_event(&m);
        let sent: Vec<_> = outbox_for(&app, id)
            .await
            .into_iter()
            .filter(|(t, _, _)| t == "email.sent")
            .collect();
        assert_eq!(sent.len(), 1, "{id}");
    }
}
