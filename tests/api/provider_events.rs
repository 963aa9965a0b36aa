//! Provider events are durable from the moment they are answered (README,
//! "Provider events"): an SNS event for a message not recorded yet is stored
//! before SNS hears 200 and applied, in arrival order, once the message
//! appears; a database failure answers 5xx so that SNS retries; the count of
//! waiting events is in `/metrics`; the simulator's outcomes are stored with
//! the send and still arrive after the process that sent died.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::helpers::{TestApp, base_config, eventually, spawn_app_with_provider, spawn_state};
use crate::sns::{self, notify, ses_event};
use pigeonhole::app::AppState;
use pigeonhole::config::Config;
use pigeonhole::dns_test_server::TestDnsServer;
use pigeonhole::provider::simulator::Simulator;
use pigeonhole::sql;
use pigeonhole::store::{Db, RowExt};

async fn metric(app: &TestApp, name: &str) -> Option<i64> {
    let text = app.call("GET", "/metrics", None, None).await.text;
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

async fn waiting_rows(db: &Db) -> i64 {
    sql!("SELECT COUNT(*) AS n FROM waiting_provider_events")
        .fetch_one(db.reader())
        .await
        .unwrap()
        .int("n")
        .unwrap()
}

async fn status(app: &TestApp, id: &str) -> String {
    app.get(&format!("/api/v1/emails/{id}")).await.body["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn an_sns_event_for_an_unknown_message_is_stored_counted_and_applied_in_order() {
    let app = sns::app().await;
    let pid = "0100-recorded-later";
    // Both answered 200 only once stored.
    assert_eq!(
        notify(&app, &ses_event("Delivery", pid, "a@x.com"), "sns-early-1").await,
        200
    );
    assert_eq!(
        notify(&app, &ses_event("Complaint", pid, "a@x.com"), "sns-early-2").await,
        200
    );
    assert_eq!(waiting_rows(&app.db).await, 2);
    assert_eq!(
        metric(&app, "pigeonhole_provider_events_unmatched").await,
        Some(2)
    );
    assert_eq!(
        metric(&app, "pigeonhole_provider_events_waiting").await,
        Some(2)
    );

    // The send is recorded (under the provider id the events name).
    let r = app
        .post(
            "/api/v1/emails",
            json!({"from": "team@example.com", "to": "a@x.com", "subject": "s", "text": "t"}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.body["id"].as_str().unwrap().to_string();
    sql!(
        "UPDATE messages SET provider_message_id = $1 WHERE id = $2",
        pid,
        &id
    )
    .execute(app.db.writer())
    .await
    .unwrap();
    eventually("the waiting events applied", || async {
        (status(&app, &id).await == "complained").then_some(())
    })
    .await;
    // In arrival order: the delivery moved the message before the
    // complaint did (the other way round the delivery would move nothing).
    let types = app.outbox_types().await;
    let delivered = types.iter().position(|t| t == "email.delivered");
    let complained = types.iter().position(|t| t == "email.complained");
    assert!(delivered.is_some() && delivered < complained, "{types:?}");
    assert_eq!(waiting_rows(&app.db).await, 0);
    assert_eq!(
        metric(&app, "pigeonhole_provider_events_unmatched").await,
        Some(0)
    );
    // SNS redelivers one of them: applied once already, nothing changes.
    assert_eq!(
        notify(&app, &ses_event("Delivery", pid, "a@x.com"), "sns-early-1").await,
        200
    );
    assert_eq!(app.outbox_types().await, types);
}

/// Never 200 with the event lost: when what the notification carries
/// cannot be written, SNS is told to retry.
#[tokio::test]
async fn an_sns_event_that_cannot_be_stored_is_answered_5xx() {
    let app = sns::app().await;
    sql!("DROP TABLE waiting_provider_events")
        .execute(app.db.writer())
        .await
        .unwrap();
    let status = notify(
        &app,
        &ses_event("Delivery", "0100-unknown", "a@x.com"),
        "sns-lost",
    )
    .await;
    assert!((500..600).contains(&status), "answered {status}");
}

/// An app on an existing database (a restarted process), with the default
/// simulator.
async fn app_on(database_url: &str) -> TestApp {
    let dns = TestDnsServer::start().await.expect("start test DNS server");
    let config = Config::from_map(&base_config(database_url, &dns)).expect("config");
    let db = Db::connect(&config.database_url).await.expect("connect");
    let state = AppState::with_provider(config, db, Arc::new(Simulator::new(None)))
        .await
        .expect("state");
    spawn_state(state, dns, database_url.to_string()).await
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The process that sent dies before the simulator's outcome is due (its
/// runtime is shut down: every task stops where it is, as under kill -9,
/// though the database stays as committed); a new process on the same
/// database still delivers the outcome.
#[test]
fn a_simulator_outcome_survives_a_restart() {
    let first = runtime();
    let (database_url, id) = first.block_on(async {
        let app = spawn_app_with_provider(
            |_| {},
            |_| Arc::new(Simulator::new(None).with_outcome_delay(Duration::from_millis(700))),
        )
        .await;
        app.verified_domain("example.com").await;
        let r = app
            .post(
                "/api/v1/emails",
                json!({"from": "team@example.com", "to": "bounce@simulator.amazonses.com",
                       "subject": "s", "text": "t"}),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.text);
        (
            app.database_url.clone(),
            r.body["id"].as_str().unwrap().to_string(),
        )
    });
    first.shutdown_background();

    let second = runtime();
    second.block_on(async {
        let app = app_on(&database_url).await;
        assert_eq!(status(&app, &id).await, "sent");
        eventually("the bounce after the restart", || async {
            (status(&app, &id).await == "bounced").then_some(())
        })
        .await;
        assert!(
            app.outbox_types()
                .await
                .contains(&"email.bounced".to_string()),
            "{:?}",
            app.outbox_types().await
        );
        let suppressed = app.list_all("/api/v1/suppressions").await;
        assert!(
            suppressed
                .iter()
                .any(|s| s["address"] == "bounce@simulator.amazonses.com"),
            "{suppressed:?}"
        );
    });
}
