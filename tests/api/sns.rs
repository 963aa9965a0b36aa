use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use serde_json::{Value, json};

use crate::helpers::{TestApp, Wrapped, Wrapping, assert_error, eventually, spawn_app_custom};
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::provider::sns::SnsVerifier;
use pigeonhole::provider::sns::testing::TestSigner;
use pigeonhole::provider::{PlannedEvent, Provider};
use pigeonhole::sql;

pub const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:ses-events";

pub fn signer() -> &'static TestSigner {
    static S: OnceLock<TestSigner> = OnceLock::new();
    S.get_or_init(TestSigner::new)
}

/// Accepts sends like SES and, like SES, says nothing until SNS does.
pub struct QuietSes(pub Simulator);

#[async_trait]
impl Wrapping for QuietSes {
    fn inner(&self) -> &dyn Provider {
        &self.0
    }
    fn name(&self) -> &'static str {
        "ses"
    }
    fn region(&self) -> String {
        "us-east-1".into()
    }
    // Like SES: outcomes arrive through SNS only.
    fn planned_events(&self, _: &str, _: &[String], _: i64) -> Vec<PlannedEvent> {
        Vec::new()
    }
}

/// An app whose provider answers like SES and whose SNS endpoint trusts
/// the test signer for `TOPIC`, with `example.com` verified.
pub async fn app() -> TestApp {
    let app = spawn_app_custom(
        |_| {},
        |_| Arc::new(Wrapped(QuietSes(Simulator::new(None)))),
        |state| {
            state.sns = Arc::new(SnsVerifier::new(
                vec![TOPIC.into()],
                Arc::new(signer().fetcher()),
            ));
        },
    )
    .await;
    app.verified_domain("example.com").await;
    app
}

async fn send(app: &TestApp, to: &str) -> (String, String) {
    let r = app
        .post(
            "/api/v1/emails",
            json!({"from": "team@example.com", "to": to, "subject": "s", "text": "t"}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    (
        r.body["id"].as_str().unwrap().into(),
        r.body["provider_message_id"].as_str().unwrap().into(),
    )
}

pub fn ses_event(kind: &str, pid: &str, to: &str) -> Value {
    let ts = "2026-11-22T10:00:00.000Z";
    let mail = json!({"timestamp": ts, "messageId": pid, "source": "team@example.com", "destination": [to]});
    let mut e = json!({"eventType": kind, "mail": mail});
    let (key, body) = match kind {
        "Send" => ("send", json!({})),
        "Delivery" => (
            "delivery",
            json!({"timestamp": ts, "recipients": [to], "smtpResponse": "250 2.6.0 ok"}),
        ),
        "Bounce" => (
            "bounce",
            json!({"bounceType": "Permanent", "bounceSubType": "General", "timestamp": ts,
                      "bouncedRecipients": [{"emailAddress": to, "diagnosticCode": "smtp; 550 5.1.1 no such user"}]}),
        ),
        "Complaint" => (
            "complaint",
            json!({"timestamp": ts, "complaintFeedbackType": "abuse",
                         "complainedRecipients": [{"emailAddress": to}]}),
        ),
        "Reject" => ("reject", json!({"reason": "Bad content"})),
        "DeliveryDelay" => (
            "deliveryDelay",
            json!({"timestamp": ts, "delayType": "TransientCommunicationFailure",
                             "delayedRecipients": [{"emailAddress": to, "status": "4.4.1", "diagnosticCode": "smtp; 421 busy"}]}),
        ),
        "Open" => (
            "open",
            json!({"timestamp": ts, "userAgent": "Mozilla", "ipAddress": "192.0.2.1"}),
        ),
        "Click" => (
            "click",
            json!({"timestamp": ts, "link": "https://example.com/x", "userAgent": "Mozilla", "ipAddress": "192.0.2.1"}),
        ),
        "Rendering Failure" => (
            "failure",
            json!({"errorMessage": "Attribute 'name' is not present", "templateName": "t"}),
        ),
        other => panic!("{other}"),
    };
    e[key] = body;
    e
}

/// Posts `event` to the SNS endpoint as a notification signed for `TOPIC`;
/// the reply's status.
pub async fn notify(app: &TestApp, event: &Value, sns_id: &str) -> u16 {
    let body = signer().sign_notification(TOPIC, &event.to_string(), sns_id, 2);
    app.client
        .post(format!("{}/sns/ses", app.base))
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn message(app: &TestApp, id: &str) -> Value {
    app.get(&format!("/api/v1/emails/{id}")).await.body
}

#[tokio::test]
async fn every_ses_event_type_moves_status_by_the_table() {
    let app = app().await;
    let (a, pa) = send(&app, "a@x.com").await;
    assert_eq!(
        notify(&app, &ses_event("Send", &pa, "a@x.com"), "n1").await,
        200
    );
    assert_eq!(message(&app, &a).await["status"], "sent");
    assert_eq!(
        notify(&app, &ses_event("DeliveryDelay", &pa, "a@x.com"), "n2").await,
        200
    );
    assert_eq!(message(&app, &a).await["status"], "delayed");
    assert_eq!(
        notify(&app, &ses_event("Delivery", &pa, "a@x.com"), "n3").await,
        200
    );
    assert_eq!(message(&app, &a).await["status"], "delivered");
    // A late delay never moves it back.
    assert_eq!(
        notify(&app, &ses_event("DeliveryDelay", &pa, "a@x.com"), "n4").await,
        200
    );
    assert_eq!(message(&app, &a).await["status"], "delivered");
    assert_eq!(
        notify(&app, &ses_event("Open", &pa, "a@x.com"), "n5").await,
        200
    );
    assert_eq!(
        notify(&app, &ses_event("Click", &pa, "a@x.com"), "n6").await,
        200
    );
    assert_eq!(
        notify(&app, &ses_event("Complaint", &pa, "a@x.com"), "n7").await,
        200
    );
    let m = message(&app, &a).await;
    assert_eq!(m["status"], "complained");
    assert_eq!(m["open_count"], 1);
    assert!(m["opened_at"].is_string());
    let types: Vec<String> = m["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap().into())
        .collect();
    assert_eq!(
        types.iter().filter(|t| *t == "send").count(),
        1,
        "{types:?}"
    );
    for t in ["delivery_delay", "delivery", "open", "click", "complaint"] {
        assert!(types.contains(&t.to_string()), "{t} in {types:?}");
    }
    // The same SNS notification delivered twice is applied once.
    assert_eq!(
        notify(&app, &ses_event("Open", &pa, "a@x.com"), "n5").await,
        200
    );
    assert_eq!(message(&app, &a).await["open_count"], 1);

    let (b, pb) = send(&app, "b@x.com").await;
    notify(&app, &ses_event("Bounce", &pb, "b@x.com"), "n8").await;
    let m = message(&app, &b).await;
    assert_eq!(m["status"], "bounced");
    assert!(m["error"].as_str().unwrap().contains("550"));
    let r = app.get("/api/v1/suppressions?address=b@x.com").await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);

    let (c, pc) = send(&app, "c@x.com").await;
    notify(&app, &ses_event("Reject", &pc, "c@x.com"), "n9").await;
    assert_eq!(message(&app, &c).await["status"], "rejected");
    let (d, pd) = send(&app, "d@x.com").await;
    notify(&app, &ses_event("Rendering Failure", &pd, "d@x.com"), "n10").await;
    assert_eq!(message(&app, &d).await["status"], "failed");

    let types = app.outbox_types().await;
    for t in [
        "email.delayed",
        "email.delivered",
        "email.opened",
        "email.clicked",
        "email.complained",
        "email.bounced",
        "email.rejected",
        "email.failed",
    ] {
        assert!(types.contains(&t.to_string()), "{t} in {types:?}");
    }
    assert_eq!(types.iter().filter(|t| *t == "email.sent").count(), 4);
    assert_eq!(types.iter().filter(|t| *t == "email.opened").count(), 1);
}

#[tokio::test]
async fn forged_or_foreign_notifications_are_refused() {
    let app = app().await;
    let (a, pa) = send(&app, "a@x.com").await;
    let event = ses_event("Delivery", &pa, "a@x.com");
    let good = signer().sign_notification(TOPIC, &event.to_string(), "m1", 1);
    let forged = good.replace("250 2.6.0 ok", "250 2.6.0 OK");
    let r = app
        .client
        .post(format!("{}/sns/ses", app.base))
        .body(forged)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let other_topic = signer().sign_notification(
        "arn:aws:sns:us-east-1:999:other",
        &event.to_string(),
        "m2",
        1,
    );
    let r = app
        .client
        .post(format!("{}/sns/ses", app.base))
        .body(other_topic)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = app
        .client
        .post(format!("{}/sns/ses", app.base))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(message(&app, &a).await["status"], "sent");
    // The genuine one (signature version 1) is applied.
    let r = app
        .client
        .post(format!("{}/sns/ses", app.base))
        .body(good)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(message(&app, &a).await["status"], "delivered");
}

#[tokio::test]
async fn subscriptions_are_confirmed() {
    let app = app().await;
    let hits = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = hits.clone();
    let router = axum::Router::new().route(
        "/confirm",
        axum::routing::get(move |uri: axum::http::Uri| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(uri.to_string());
                "<ConfirmSubscriptionResponse/>"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let url = format!("http://{addr}/confirm?Token=abc");
    let body = signer().sign_subscription_confirmation(TOPIC, &url, "sub-1");
    let r = app
        .client
        .post(format!("{}/sns/ses", app.base))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(hits.lock().unwrap().len(), 1);
    // An unsigned-looking confirmation pointing elsewhere is refused.
    let evil = signer().sign_subscription_confirmation(TOPIC, "http://10.0.0.1/confirm", "sub-2");
    let r = app
        .client
        .post(format!("{}/sns/ses", app.base))
        .body(evil)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

#[tokio::test]
async fn an_event_that_beats_its_send_record_is_retried() {
    let app = app().await;
    // Unknown now: accepted, and applied once the message exists.
    let r = notify(&app, &ses_event("Delivery", "not-yet", "a@x.com"), "early").await;
    assert_eq!(r, 200);
    let (a, pa) = send(&app, "a@x.com").await;
    sql!(
        "UPDATE messages SET provider_message_id = 'not-yet' WHERE provider_message_id = $1",
        &pa
    )
    .execute(app.db.writer())
    .await
    .unwrap();
    eventually("late delivery", || async {
        (message(&app, &a).await["status"] == "delivered").then_some(())
    })
    .await;
    assert_error(&app.get("/api/v1/emails/nope").await, 404, "not_found");
}
