//! The suppression list: how entries arrive (hard bounces and complaints, not
//! soft bounces), how `GET /suppressions` pages and follows a key's reach,
//! how `DELETE` lets mail through again, how a suppressed `cc`/`bcc` refuses
//! a send, and the provider quota's fast 429.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;

use serde_json::{Value, json};

use crate::helpers::{
    TestApp, Wrapped, Wrapping, assert_error, eventually, spawn_app, spawn_app_with_provider,
};
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::provider::{Provider, ProviderError, Quota};

fn mail(from: &str, to: &str) -> Value {
    json!({"from": from, "to": to, "subject": "Hello", "text": "Hi there"})
}

/// Sends with `key` and returns the new message's id.
async fn send_as(app: &TestApp, key: &str, body: Value) -> String {
    let r = app
        .call("POST", "/api/v1/emails", Some(key), Some(body))
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    r.body["id"].as_str().unwrap().to_string()
}

/// Every suppression `key` sees, walking the pages `limit` at a time and
/// checking the envelope of each.
async fn walk(app: &TestApp, key: &str, limit: usize) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let path = match &cursor {
            Some(c) => format!("/api/v1/suppressions?limit={limit}&cursor={c}"),
            None => format!("/api/v1/suppressions?limit={limit}"),
        };
        let r = app.call("GET", &path, Some(key), None).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["object"], "list");
        let data = r.body["data"].as_array().unwrap();
        assert!(data.len() <= limit, "{}", r.text);
        all.extend(data.iter().cloned());
        if r.body["has_more"] == true {
            assert_eq!(data.len(), limit, "{}", r.text);
            cursor = Some(r.body["next_cursor"].as_str().unwrap().to_string());
        } else {
            assert!(r.body.get("next_cursor").is_none(), "{}", r.text);
            return all;
        }
    }
    panic!("more than 50 pages of suppressions");
}

fn addresses(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|s| s["address"].as_str().unwrap().to_string())
        .collect()
}

/// Sends from `from` to a simulator address that hard-bounces and waits for
/// it to join the list; returns the message id.
async fn bounce_from(app: &TestApp, from: &str, to: &str) -> String {
    let before = walk(app, &app.key, 100).await.len();
    let id = send_as(app, &app.key, mail(from, to)).await;
    eventually("the bounce to be suppressed", || async {
        (walk(app, &app.key, 100).await.len() == before + 1).then_some(())
    })
    .await;
    id
}

async fn email_count(app: &TestApp) -> usize {
    app.list_all("/api/v1/emails").await.len()
}

#[tokio::test]
async fn the_list_pages_newest_first_and_shows_a_narrower_key_only_its_own_mail() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    app.verified_domain("other.org").await;
    let t1 = bounce_from(
        &app,
        "team@example.com",
        "bounce+t1@simulator.amazonses.com",
    )
    .await;
    bounce_from(
        &app,
        "team@example.com",
        "bounce+t2@simulator.amazonses.com",
    )
    .await;
    bounce_from(&app, "ops@example.com", "bounce+o1@simulator.amazonses.com").await;
    bounce_from(
        &app,
        "alerts@other.org",
        "bounce+x1@simulator.amazonses.com",
    )
    .await;
    let r = app
        .post("/api/v1/suppressions", json!({"address": "Manual@Y.com"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["address"], "manual@y.com");
    assert_eq!(r.body["reason"], "manual");

    // Two at a time, newest first, nothing missed or repeated.
    let all = walk(&app, &app.key, 2).await;
    assert_eq!(
        addresses(&all),
        [
            "manual@y.com",
            "bounce+x1@simulator.amazonses.com",
            "bounce+o1@simulator.amazonses.com",
            "bounce+t2@simulator.amazonses.com",
            "bounce+t1@simulator.amazonses.com",
        ]
    );
    let created: Vec<&str> = all
        .iter()
        .map(|s| s["created_at"].as_str().unwrap())
        .collect();
    let mut newest_first = created.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(created, newest_first);
    assert_eq!(walk(&app, &app.key, 1).await, all);
    assert_eq!(walk(&app, &app.key, 100).await, all);

    let first = &all[4];
    assert_eq!(first["object"], "suppression");
    assert!(first["id"].as_str().unwrap().starts_with("sup"), "{first}");
    assert_eq!(first["reason"], "bounce");
    assert_eq!(first["domain"], "example.com");
    assert_eq!(first["message_id"], t1.as_str());
    assert!(first["detail"].as_str().unwrap().contains("550"), "{first}");
    assert!(all[0]["domain"].is_null() && all[0]["message_id"].is_null());

    // A domain key sees the entries its domain's mail caused; not another
    // domain's, not ones added by hand.
    let example = app.new_key(None, Some("example.com"), None, None).await;
    assert_eq!(
        addresses(&walk(&app, &example.key, 2).await),
        [
            "bounce+o1@simulator.amazonses.com",
            "bounce+t2@simulator.amazonses.com",
            "bounce+t1@simulator.amazonses.com",
        ]
    );
    let other = app.new_key(None, Some("other.org"), None, None).await;
    assert_eq!(
        addresses(&walk(&app, &other.key, 2).await),
        ["bounce+x1@simulator.amazonses.com"]
    );
    // An address key sees only what its own mailbox caused.
    let team = app
        .new_key(None, None, Some("team@example.com"), None)
        .await;
    assert_eq!(
        addresses(&walk(&app, &team.key, 1).await),
        [
            "bounce+t2@simulator.amazonses.com",
            "bounce+t1@simulator.amazonses.com",
        ]
    );
    // Filters narrow within the reach, never past it.
    let r = app
        .call(
            "GET",
            "/api/v1/suppressions?address=manual@y.com",
            Some(&example.key),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["data"], json!([]));
    let r = app
        .call(
            "GET",
            "/api/v1/suppressions?reason=bounce",
            Some(&other.key),
            None,
        )
        .await;
    assert_eq!(
        addresses(r.body["data"].as_array().unwrap()),
        ["bounce+x1@simulator.amazonses.com"]
    );
    let r = app.get("/api/v1/suppressions?reason=manual").await;
    assert_eq!(
        addresses(r.body["data"].as_array().unwrap()),
        ["manual@y.com"]
    );
}

#[tokio::test]
async fn deleting_lets_mail_through_again_and_outside_the_reach_is_404() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    app.verified_domain("other.org").await;
    let a = "bounce+a@simulator.amazonses.com";
    let b = "bounce+b@simulator.amazonses.com";
    bounce_from(&app, "team@example.com", a).await;
    bounce_from(&app, "ops@example.com", b).await;
    let r = app
        .post("/api/v1/suppressions", json!({"address": "manual@y.com"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let manual_id = r.body["id"].as_str().unwrap().to_string();
    let all = walk(&app, &app.key, 100).await;
    let id_of = |address: &str| {
        all.iter().find(|s| s["address"] == address).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (a_id, b_id) = (id_of(a), id_of(b));

    let other = app.new_key(None, Some("other.org"), None, None).await;
    let example = app.new_key(None, Some("example.com"), None, None).await;
    let team = app
        .new_key(None, None, Some("team@example.com"), None)
        .await;
    let read_only = app.new_key(Some("emails:read"), None, None, None).await;
    let delete = |key: String, what: String| {
        let app = &app;
        async move {
            app.call(
                "DELETE",
                &format!("/api/v1/suppressions/{what}"),
                Some(&key),
                None,
            )
            .await
        }
    };

    // Outside the reach: 404 exactly like a missing one, by address or id.
    for (key, what) in [
        (&other.key, a),
        (&other.key, a_id.as_str()),
        (&team.key, b),
        (&team.key, b_id.as_str()),
        (&team.key, "manual@y.com"),
        (&example.key, "manual@y.com"),
        (&example.key, manual_id.as_str()),
        (&app.key, "nobody@y.com"),
        (&app.key, "sup_nope"),
    ] {
        let r = delete(key.clone(), what.to_string()).await;
        assert_error(&r, 404, "not_found");
    }
    assert_error(
        &delete(read_only.key.clone(), "manual@y.com".into()).await,
        403,
        "forbidden",
    );
    assert_eq!(walk(&app, &app.key, 100).await, all);
    let r = app
        .call(
            "POST",
            "/api/v1/emails",
            Some(&other.key),
            Some(mail("alerts@other.org", a)),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "to");

    // By id, with the account key: the manual entry goes and mail flows.
    let r = app
        .post("/api/v1/emails", mail("team@example.com", "manual@y.com"))
        .await;
    assert_error(&r, 422, "invalid_request");
    let r = delete(app.key.clone(), manual_id.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body,
        json!({"object": "suppression", "id": manual_id, "address": "manual@y.com", "deleted": true})
    );
    let id = send_as(&app, &app.key, mail("team@example.com", "manual@y.com")).await;
    eventually("delivery to the unsuppressed address", || async {
        (app.email_status(&id).await == "delivered").then_some(())
    })
    .await;
    assert_error(
        &delete(app.key.clone(), manual_id.clone()).await,
        404,
        "not_found",
    );

    // By address, with the key whose mailbox caused it; by id with the
    // domain key.
    let r = delete(team.key.clone(), a.to_string()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["id"], a_id.as_str());
    assert_eq!(r.body["deleted"], true);
    let r = delete(example.key.clone(), b_id.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["address"], b);
    assert_eq!(walk(&app, &app.key, 100).await, Vec::<Value>::new());
    send_as(&app, &team.key, mail("team@example.com", a)).await;
    send_as(&app, &app.key, mail("ops@example.com", b)).await;
}

#[tokio::test]
async fn a_suppressed_cc_or_bcc_refuses_the_send_naming_it() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    for address in ["blocked-cc@x.com", "blocked-bcc@x.com"] {
        let r = app
            .post("/api/v1/suppressions", json!({"address": address}))
            .await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let base =
        || json!({"from": "team@example.com", "to": "ok@x.com", "subject": "s", "text": "t"});

    let mut body = base();
    body["cc"] = json!(["fine@x.com", "Blocked-CC@X.com"]);
    let r = app.post("/api/v1/emails", body).await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "cc");
    let error = r.body["error"].as_str().unwrap();
    assert!(error.contains("blocked-cc@x.com"), "{error}");
    assert!(!error.contains("fine@x.com"), "{error}");

    let mut body = base();
    body["cc"] = json!("fine@x.com");
    body["bcc"] = json!("blocked-bcc@x.com");
    let r = app.post("/api/v1/emails", body).await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "bcc");
    assert!(
        r.body["error"]
            .as_str()
            .unwrap()
            .contains("blocked-bcc@x.com"),
        "{}",
        r.text
    );

    // Both: the first is `param`, every one is named.
    let mut body = base();
    body["cc"] = json!("blocked-cc@x.com");
    body["bcc"] = json!("blocked-bcc@x.com");
    let r = app.post("/api/v1/emails", body).await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "cc");
    let error = r.body["error"].as_str().unwrap();
    assert!(
        error.contains("blocked-cc@x.com") && error.contains("blocked-bcc@x.com"),
        "{error}"
    );

    // Nothing reached the provider; the same send without them goes.
    let mut body = base();
    body["cc"] = json!("fine@x.com");
    send_as(&app, &app.key, body).await;
}

#[tokio::test]
async fn a_complaint_suppresses_the_address_as_a_hard_bounce_does() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let complaint = "complaint@simulator.amazonses.com";
    let bounce = "bounce@simulator.amazonses.com";
    let c = send_as(&app, &app.key, mail("team@example.com", complaint)).await;
    let b = send_as(&app, &app.key, mail("team@example.com", bounce)).await;
    eventually("complaint and bounce", || async {
        (app.email_status(&c).await == "complained" && app.email_status(&b).await == "bounced")
            .then_some(())
    })
    .await;

    let r = app.get("/api/v1/suppressions?reason=complaint").await;
    let entries = r.body["data"].as_array().unwrap();
    assert_eq!(addresses(entries), [complaint]);
    assert_eq!(entries[0]["message_id"], c.as_str());
    assert_eq!(entries[0]["domain"], "example.com");
    let r = app.get("/api/v1/suppressions?reason=bounce").await;
    let entries = r.body["data"].as_array().unwrap();
    assert_eq!(addresses(entries), [bounce]);
    assert_eq!(entries[0]["message_id"], b.as_str());

    for address in [complaint, bounce] {
        let r = app
            .post("/api/v1/emails", mail("team@example.com", address))
            .await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], "to");
        assert!(
            r.body["error"].as_str().unwrap().contains(address),
            "{}",
            r.text
        );
        let mut body = mail("team@example.com", "ok@x.com");
        body["bcc"] = json!(address);
        let r = app.post("/api/v1/emails", body).await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], "bcc");
    }
}

/// A signed SNS notification of an SES Bounce event.
async fn notify_bounce(app: &TestApp, pid: &str, to: &str, bounce_type: &str, sns_id: &str) {
    let ts = "2026-11-22T10:00:00.000Z";
    let (sub_type, code) = match bounce_type {
        "Transient" => ("MailboxFull", "smtp; 452 4.2.2 mailbox full"),
        _ => ("General", "smtp; 550 5.1.1 no such user"),
    };
    let event = json!({
        "eventType": "Bounce",
        "mail": {"timestamp": ts, "messageId": pid, "source": "team@example.com", "destination": [to]},
        "bounce": {"bounceType": bounce_type, "bounceSubType": sub_type, "timestamp": ts,
                   "bouncedRecipients": [{"emailAddress": to, "diagnosticCode": code}]},
    });
    assert_eq!(crate::sns::notify(app, &event, sns_id).await, 200);
}

#[tokio::test]
async fn a_soft_bounce_marks_the_message_bounced_without_suppressing() {
    let app = crate::sns::app().await;
    let send = |to: &'static str| {
        let app = &app;
        async move {
            let r = app
                .post("/api/v1/emails", mail("team@example.com", to))
                .await;
            assert_eq!(r.status, 202, "{}", r.text);
            (
                r.body["id"].as_str().unwrap().to_string(),
                r.body["provider_message_id"].as_str().unwrap().to_string(),
            )
        }
    };

    let (soft, soft_pid) = send("full@x.com").await;
    notify_bounce(&app, &soft_pid, "full@x.com", "Transient", "soft-1").await;
    // The table has one row for Bounce: a soft one moves the status too.
    let m = app.get(&format!("/api/v1/emails/{soft}")).await.body;
    assert_eq!(m["status"], "bounced", "{m}");
    assert!(m["error"].as_str().unwrap().contains("452"), "{m}");
    let bounces: Vec<&Value> = m["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "bounce")
        .collect();
    assert_eq!(bounces.len(), 1, "{m}");
    assert_eq!(bounces[0]["recipient"], "full@x.com");
    let outbox = app.outbox_types().await;
    assert_eq!(
        outbox.iter().filter(|t| *t == "email.bounced").count(),
        1,
        "{outbox:?}"
    );
    // ...but the address is not suppressed, and mail to it still goes.
    assert_eq!(walk(&app, &app.key, 100).await, Vec::<Value>::new());
    send("full@x.com").await;

    // A hard bounce through the same path does suppress.
    let (_, hard_pid) = send("gone@x.com").await;
    notify_bounce(&app, &hard_pid, "gone@x.com", "Permanent", "hard-1").await;
    assert_eq!(addresses(&walk(&app, &app.key, 100).await), ["gone@x.com"]);
}

#[tokio::test]
async fn a_send_the_remaining_quota_cannot_admit_is_429_and_not_recorded() {
    let app = spawn_app_with_provider(
        |_| {},
        |_| Arc::new(Simulator::new(None).with_daily_quota(3)),
    )
    .await;
    app.verified_domain("example.com").await;
    let two = json!({"from": "team@example.com", "to": ["a@x.com", "b@x.com"], "subject": "s", "text": "t"});
    send_as(&app, &app.key, two.clone()).await;
    let r = app.get("/api/v1/provider").await;
    assert_eq!(r.body["quota"]["sent_last_24_hours"], 2.0, "{}", r.text);

    // One left: two recipients (here one in `to`, one in `cc`) do not fit.
    let mut over = two.clone();
    over["to"] = json!("c@x.com");
    over["cc"] = json!("d@x.com");
    for body in [two, over] {
        let r = app.post("/api/v1/emails", body).await;
        assert_error(&r, 429, "rate_limited");
        let error = r.body["error"].as_str().unwrap();
        assert!(error.contains("quota"), "{error}");
        assert!(
            r.header("retry-after")
                .is_some_and(|s| s.parse::<u64>().is_ok_and(|n| n > 0)),
            "{:?}",
            r.headers
        );
    }
    // Refused before the provider: nothing sent, nothing recorded.
    assert_eq!(
        app.get("/api/v1/provider").await.body["quota"]["sent_last_24_hours"],
        2.0
    );
    assert_eq!(email_count(&app).await, 1);

    // The one that is left can be used.
    send_as(&app, &app.key, mail("team@example.com", "e@x.com")).await;
    assert_eq!(email_count(&app).await, 2);
    assert_eq!(
        app.get("/api/v1/provider").await.body["quota"]["sent_last_24_hours"],
        3.0
    );
    let r = app
        .post("/api/v1/emails", mail("team@example.com", "f@x.com"))
        .await;
    assert_error(&r, 429, "rate_limited");
}

/// The simulator, with the quota reading the test sets, counting reads.
struct ScriptedQuota {
    inner: Simulator,
    quota: Option<Quota>,
    reads: Arc<AtomicUsize>,
}

#[async_trait]
impl Wrapping for ScriptedQuota {
    fn inner(&self) -> &dyn Provider {
        &self.inner
    }
    async fn quota(&self) -> Result<Quota, ProviderError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.quota
            .clone()
            .ok_or_else(|| ProviderError::Unavailable("AccessDenied: ses:GetAccount".into()))
    }
}

async fn app_with_quota(quota: Option<Quota>) -> (TestApp, Arc<AtomicUsize>) {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = reads.clone();
    let app = spawn_app_with_provider(
        |_| {},
        move |_| {
            Arc::new(Wrapped(ScriptedQuota {
                inner: Simulator::new(None),
                quota,
                reads: counter,
            }))
        },
    )
    .await;
    app.verified_domain("example.com").await;
    (app, reads)
}

#[tokio::test]
async fn a_quota_that_cannot_be_read_holds_no_send_back_and_is_asked_once_a_period() {
    let (app, reads) = app_with_quota(None).await;
    for to in ["a@x.com", "b@x.com", "c@x.com"] {
        send_as(&app, &app.key, mail("team@example.com", to)).await;
    }
    assert_eq!(email_count(&app).await, 3);
    // One failed reading serves the sends after it (it is kept 30 seconds).
    assert_eq!(reads.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_provider_account_with_sending_paused_is_429_before_the_provider() {
    let paused = Quota {
        max_24_hour_send: 50_000.0,
        max_send_rate: 14.0,
        sent_last_24_hours: 0.0,
        sandbox: false,
        sending_enabled: false,
    };
    let (app, _) = app_with_quota(Some(paused)).await;
    let r = app
        .post("/api/v1/emails", mail("team@example.com", "a@x.com"))
        .await;
    assert_error(&r, 429, "rate_limited");
    let error = r.body["error"].as_str().unwrap();
    assert!(error.contains("paused"), "{error}");
    assert!(r.header("retry-after").is_some());
    assert_eq!(email_count(&app).await, 0);
}

#[tokio::test]
async fn an_unknown_reason_is_refused_when_listing_and_adding() {
    let app = spawn_app().await;
    let r = app.get("/api/v1/suppressions?reason=spam").await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "reason", "{}", r.text);
    let r = app
        .post(
            "/api/v1/suppressions",
            json!({"address": "x@y.com", "reason": "spam"}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "reason", "{}", r.text);
    let r = app
        .post(
            "/api/v1/suppressions",
            json!({"address": "x@y.com", "reason": "complaint"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["reason"], "complaint");
}
