//! Keyed sends interrupted by a crash (`core::interrupted`): a retry with
//! the key never reaches the provider again, and the recorded message tells
//! the truth, from the provider's tagged events or, failing them, as
//! `failed`.
//!
//! The crash is staged: the key is claimed with its intent, as a send does
//! before it calls the provider, and nothing more happens. The real binary
//! killed mid-send is in `faults`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{TestApp, eventually, spawn_app_with};
use crate::idempotency::{post, ready, simple};
use crate::metrics::{must, scrape};
use pigeonhole::clock;
use pigeonhole::core::idempotency::{self, Begin};
use pigeonhole::core::interrupted::{self, INTERRUPTED_ERROR, Intent, RecordKey, Timings};
use pigeonhole::core::sending;
use pigeonhole::core::waiting_events;
use pigeonhole::provider::{ProviderEvent, ProviderEventKind};
use pigeonhole::sql;
use pigeonhole::store::RowExt;

const STALE: Duration = Duration::from_secs(300);
const RECOVERED: &str = "pigeonhole_sends_interrupted_recovered_total";

async fn key_id(app: &TestApp) -> String {
    app.get("/api/v1/me").await.body["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Claims `idem_key` for `bodies` with their intent, as a send does just
/// before it calls the provider, and "crashes": nothing else is written.
/// The claim is then aged past the stale time. The ids the intent chose.
async fn interrupted_send(
    app: &TestApp,
    endpoint: &str,
    idem_key: &str,
    request: &Value,
    bodies: &[Value],
) -> Vec<String> {
    let mut intent = if endpoint == "POST /emails" {
        Intent::single()
    } else {
        Intent::batch()
    };
    let mut ids = Vec::new();
    for body in bodies {
        match sending::validate(serde_json::from_value(body.clone()).unwrap()) {
            Ok(mut input) => {
                intent.send(&mut input);
                ids.push(input.preassigned.unwrap().id);
            }
            Err(e) => intent.refused(422, e.to_string()),
        }
    }
    let record = RecordKey {
        api_key_id: key_id(app).await,
        endpoint: endpoint.into(),
        key: idem_key.into(),
    };
    let claim = idempotency::Claim::new(
        record,
        idempotency::fingerprint(request),
        Some(intent.to_text().unwrap()),
        STALE,
    );
    let began = idempotency::begin(&app.db, &claim).await.unwrap();
    assert!(matches!(began, Begin::Proceed));
    app.db
        .write_statement(sql!(
            "UPDATE idempotency_keys SET created_at = created_at - $1 WHERE key = $2",
            STALE.as_micros() as i64 + 1_000_000,
            idem_key
        ))
        .await
        .unwrap();
    ids
}

/// Messages the simulator was handed.
async fn provider_sends(app: &TestApp) -> i64 {
    sql!("SELECT COUNT(*) AS n FROM messages WHERE provider_message_id IS NOT NULL")
        .fetch_one(app.db.reader())
        .await
        .unwrap()
        .int("n")
        .unwrap()
}

/// The outbox's `email.*` events, in order.
async fn email_events(app: &TestApp) -> Vec<String> {
    let mut types = app.outbox_types().await;
    types.retain(|t| t.starts_with("email."));
    types
}

fn ses_event(pid: &str, tag: &str, kind: ProviderEventKind) -> ProviderEvent {
    ProviderEvent {
        provider_message_id: pid.into(),
        kind,
        recipients: vec!["a@b.com".into()],
        detail: None,
        occurred_at: clock::now_micros(),
        delivery_id: None,
        message_tag: Some(tag.into()),
    }
}

#[tokio::test]
async fn a_retry_after_a_crash_replays_the_recorded_message_without_sending() {
    let app = ready().await;
    let body = simple("a@b.com");
    let ids = interrupted_send(
        &app,
        "POST /emails",
        "crashed",
        &body,
        std::slice::from_ref(&body),
    )
    .await;
    let r = post(&app, "/api/v1/emails", "crashed", &body).await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.header("idempotency-replayed"), Some("true"));
    assert_eq!(r.body["id"], ids[0].as_str());
    assert_eq!(r.body["provider_message_id"], Value::Null);
    assert!(
        r.body["message_id"]
            .as_str()
            .unwrap()
            .ends_with("@example.com>")
    );
    // Recorded, listed, and nothing handed to the provider again.
    let m = app.get(&format!("/api/v1/emails/{}", ids[0])).await;
    assert_eq!(m.body["status"], "queued", "{}", m.text);
    assert_eq!(m.body["message_id"], r.body["message_id"]);
    assert_eq!(provider_sends(&app).await, 0);
    // Every later retry replays the same reply.
    let again = post(&app, "/api/v1/emails", "crashed", &body).await;
    assert_eq!(again.text, r.text);
    assert_eq!(provider_sends(&app).await, 0);
    // Counted once, by the retry that recovered it.
    assert_eq!(must(&scrape(&app).await, RECOVERED), 1.0);
}

#[tokio::test]
async fn with_no_provider_event_it_ends_failed_and_says_email_failed() {
    let app = ready().await;
    let body = simple("a@b.com");
    let ids = interrupted_send(
        &app,
        "POST /emails",
        "lost",
        &body,
        std::slice::from_ref(&body),
    )
    .await;
    let now = clock::now_micros();
    // The sweep recovers it without a retry...
    assert_eq!(
        interrupted::recover_stale(&app.db, now, STALE)
            .await
            .unwrap(),
        1
    );
    assert_eq!(app.email_status(&ids[0]).await, "queued");
    let timings = Timings::default();
    // ...and, short of the give-up time, leaves it to the provider's events.
    assert_eq!(
        interrupted::fail_overdue(&app.db, now, timings.give_up_after)
            .await
            .unwrap(),
        0
    );
    let later = now + timings.give_up_after.as_micros() as i64 + 1_000_000;
    assert_eq!(
        interrupted::fail_overdue(&app.db, later, timings.give_up_after)
            .await
            .unwrap(),
        1
    );
    let m = app.get(&format!("/api/v1/emails/{}", ids[0])).await;
    assert_eq!(m.body["status"], "failed");
    assert_eq!(m.body["error"], INTERRUPTED_ERROR);
    assert_eq!(email_events(&app).await, vec!["email.failed"]);
    // A retry still replays the message, now failed, and sends nothing.
    let r = post(&app, "/api/v1/emails", "lost", &body).await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.body["id"], ids[0].as_str());
    assert_eq!(provider_sends(&app).await, 0);
}

#[tokio::test]
async fn tagged_events_after_recovery_move_the_message_and_say_email_sent() {
    let app = ready().await;
    let body = simple("a@b.com");
    let ids = interrupted_send(
        &app,
        "POST /emails",
        "tagged",
        &body,
        std::slice::from_ref(&body),
    )
    .await;
    let r = post(&app, "/api/v1/emails", "tagged", &body).await;
    assert_eq!(r.status, 202, "{}", r.text);
    let id = &ids[0];
    // SES did send it: its events carry the message's id as a tag.
    for kind in [ProviderEventKind::Send, ProviderEventKind::Delivery] {
        waiting_events::ingest_durably(&app.db, ses_event("ses-1", id, kind))
            .await
            .unwrap();
    }
    let m = app.get(&format!("/api/v1/emails/{id}")).await;
    assert_eq!(m.body["status"], "delivered", "{}", m.text);
    assert_eq!(m.body["provider_message_id"], "ses-1");
    assert!(m.body["sent_at"].is_string(), "{}", m.text);
    assert_eq!(
        email_events(&app).await,
        vec!["email.sent", "email.delivered"]
    );
    // Past the give-up time it stays delivered.
    let later = clock::now_micros() + 3_600_000_000;
    assert_eq!(
        interrupted::fail_overdue(&app.db, later, Timings::default().give_up_after)
            .await
            .unwrap(),
        0
    );
    // An event tagged with the id of a message that was sent normally (it
    // has its own provider id) does not take it over.
    let other = app.post("/api/v1/emails", simple("c@d.com")).await;
    let other_id = other.body["id"].as_str().unwrap();
    waiting_events::ingest_durably(
        &app.db,
        ses_event(
            "ses-forged",
            other_id,
            ProviderEventKind::Bounce { permanent: true },
        ),
    )
    .await
    .unwrap();
    let o = app.get(&format!("/api/v1/emails/{other_id}")).await;
    assert_eq!(
        o.body["provider_message_id"],
        other.body["provider_message_id"]
    );
    assert_ne!(o.body["status"], "bounced");
}

#[tokio::test]
async fn tagged_events_that_came_before_recovery_are_applied_after_it() {
    let app = ready().await;
    let body = simple("a@b.com");
    let ids = interrupted_send(
        &app,
        "POST /emails",
        "early",
        &body,
        std::slice::from_ref(&body),
    )
    .await;
    let id = &ids[0];
    // The events arrive while nothing is recorded: they wait, with the tag.
    waiting_events::ingest_durably(&app.db, ses_event("ses-2", id, ProviderEventKind::Send))
        .await
        .unwrap();
    assert_eq!(waiting_events::counts(&app.db).await.unwrap().0, 1);
    let r = post(&app, "/api/v1/emails", "early", &body).await;
    assert_eq!(r.status, 202, "{}", r.text);
    // Recovery gave the message the provider's id, so the sweep finds it.
    assert_eq!(r.body["provider_message_id"], "ses-2");
    eventually("the waiting Send event applied", || async {
        (app.email_status(id).await == "sent").then_some(())
    })
    .await;
    assert_eq!(email_events(&app).await, vec!["email.sent"]);
}

#[tokio::test]
async fn an_interrupted_batch_replays_each_item_truthfully() {
    let app = ready().await;
    let items = vec![
        simple("a@b.com"),
        json!({"from": "team@example.com", "to": "not an address", "text": "x"}),
        simple("c@d.com"),
    ];
    let request = Value::Array(items.clone());
    let ids = interrupted_send(&app, "POST /emails/batch", "batch", &request, &items).await;
    assert_eq!(ids.len(), 2);
    let r = post(&app, "/api/v1/emails/batch", "batch", &request).await;
    assert_eq!(r.status, 207, "{}", r.text);
    assert_eq!(r.header("idempotency-replayed"), Some("true"));
    assert_eq!(r.body["sent"], 2);
    assert_eq!(r.body["failed"], 1);
    assert_eq!(r.body["data"][0]["id"], ids[0].as_str());
    assert_eq!(r.body["data"][1]["ok"], false);
    assert_eq!(r.body["data"][1]["status"], 422);
    assert_eq!(r.body["data"][2]["id"], ids[1].as_str());
    for id in &ids {
        assert_eq!(app.email_status(id).await, "queued");
    }
    assert_eq!(provider_sends(&app).await, 0);
}

#[tokio::test]
async fn an_intent_that_could_not_have_been_sent_is_released_and_runs_anew() {
    let app = ready().await;
    // Mail to a suppressed address is refused before the provider is called.
    let body = simple("gone@b.com");
    let r = app
        .post("/api/v1/suppressions", json!({"address": "gone@b.com"}))
        .await;
    assert!(r.status < 300, "{}", r.text);
    interrupted_send(
        &app,
        "POST /emails",
        "never",
        &body,
        std::slice::from_ref(&body),
    )
    .await;
    let r = post(&app, "/api/v1/emails", "never", &body).await;
    // Not a replay: the request ran again, and was refused again.
    assert_eq!(r.status, 422, "{}", r.text);
    assert!(r.header("idempotency-replayed").is_none());
    assert_eq!(app.list_all("/api/v1/emails").await.len(), 0);
}

#[tokio::test]
async fn a_keyed_send_that_completes_leaves_nothing_to_recover() {
    let app = ready().await;
    let body = simple("a@b.com");
    let first = post(&app, "/api/v1/emails", "done", &body).await;
    assert_eq!(first.status, 202, "{}", first.text);
    // The intent is dropped with the stored reply: a finished record keeps
    // no addresses beyond the reply's.
    let intent = sql!("SELECT intent FROM idempotency_keys WHERE key = $1", "done")
        .fetch_one(app.db.reader())
        .await
        .unwrap()
        .opt_text("intent")
        .unwrap();
    assert_eq!(intent, None);
    // Its record was finished: neither the sweep nor a much later retry
    // (within the 24 hours) recovers anything.
    let later = clock::now_micros() + STALE.as_micros() as i64 * 10;
    assert_eq!(
        interrupted::recover_stale(&app.db, later, STALE)
            .await
            .unwrap(),
        0
    );
    let again = post(&app, "/api/v1/emails", "done", &body).await;
    assert_eq!(again.text, first.text);
    assert_eq!(provider_sends(&app).await, 1);
}

#[tokio::test]
async fn every_process_recovers_and_fails_interrupted_sends_without_a_retry() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_INTERRUPTED_SEND_AFTER".into(), "0.2".into());
        m.insert("PIGEONHOLE_INTERRUPTED_SEND_GIVE_UP".into(), "0.4".into());
    })
    .await;
    app.verified_domain("example.com").await;
    assert_eq!(must(&scrape(&app).await, RECOVERED), 0.0);
    let body = simple("a@b.com");
    let ids = interrupted_send(
        &app,
        "POST /emails",
        "swept",
        &body,
        std::slice::from_ref(&body),
    )
    .await;
    // The process's own sweep records it, counts it, and, with no provider
    // event, ends it failed.
    eventually("the sweep to fail the recovered send", || async {
        let m = app.get(&format!("/api/v1/emails/{}", ids[0])).await;
        (m.body["status"] == "failed").then_some(())
    })
    .await;
    assert_eq!(must(&scrape(&app).await, RECOVERED), 1.0);
    assert_eq!(email_events(&app).await, vec!["email.failed"]);
    let r = post(&app, "/api/v1/emails", "swept", &body).await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.body["id"], ids[0].as_str());
    assert_eq!(provider_sends(&app).await, 0);
}
