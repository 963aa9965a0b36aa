//! `/webhooks` and `/webhook-deliveries`: CRUD, validation, URL safety,
//! reach, ping, replay and the delivery log.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use serde_json::json;

use crate::helpers::{assert_error, spawn_app, spawn_app_with};
use crate::receiver::{
    Receiver, Reply, create_webhook, dead_url, deliveries_of, emit, wait_deliveries,
};

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test]
async fn crud_shows_the_secret_once_and_rotates_it() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    let r = app
        .post(
            "/api/v1/webhooks",
            json!({"url": rx.url("/hook"), "description": "orders"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let w = r.body.clone();
    let id = w["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("whk_"));
    assert_eq!(w["object"], "webhook");
    assert_eq!(w["url"], rx.url("/hook"));
    assert_eq!(w["description"], "orders");
    assert_eq!(w["events"], json!(["*"]));
    assert_eq!(w["enabled"], true);
    assert_eq!(w["mailbox_id"], json!(null));
    assert_eq!(w["last_status"], json!(null));
    assert_eq!(w["last_delivered_at"], json!(null));
    assert_eq!(w["last_error_at"], json!(null));
    assert_eq!(w["last_error"], json!(null));
    assert_eq!(w["consecutive_failures"], 0);
    assert!(w["created_at"].is_string());
    let secret = w["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("whsec_"), "{secret}");
    pigeonhole::webhooks::signature::WebhookSecret::parse(&secret).unwrap();

    // Never on reads.
    let r = app.get(&format!("/api/v1/webhooks/{id}")).await;
    assert_eq!(r.status, 200);
    assert!(r.body.get("secret").is_none(), "{}", r.text);
    assert_eq!(r.body["id"], id.as_str());
    let r = app.get("/api/v1/webhooks").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["object"], "list");
    assert_eq!(r.body["has_more"], false);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    assert!(r.body["data"][0].get("secret").is_none());
    assert!(!r.text.contains(&secret));

    // Editable fields; no secret unless rotated.
    let r = app
        .patch(
            &format!("/api/v1/webhooks/{id}"),
            json!({"url": rx.url("/other"), "events": ["email.sent", "email.bounced"], "description": "x"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["url"], rx.url("/other"));
    assert_eq!(r.body["events"], json!(["email.sent", "email.bounced"]));
    assert_eq!(r.body["description"], "x");
    assert!(r.body.get("secret").is_none());

    let r = app
        .patch(
            &format!("/api/v1/webhooks/{id}"),
            json!({"rotate_secret": true}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let rotated = r.body["secret"].as_str().unwrap().to_string();
    assert!(rotated.starts_with("whsec_"));
    assert_ne!(rotated, secret);
    let r = app.get(&format!("/api/v1/webhooks/{id}")).await;
    assert!(r.body.get("secret").is_none());

    // The new secret signs from now on.
    let r = app
        .post(&format!("/api/v1/webhooks/{id}/ping"), json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let got = rx.wait_for(1, WAIT).await;
    let s = pigeonhole::webhooks::signature::WebhookSecret::parse(&rotated).unwrap();
    let ts: i64 = got[0].header("webhook-timestamp").parse().unwrap();
    pigeonhole::webhooks::signature::verify(
        &s,
        got[0].id(),
        ts,
        got[0].body.as_bytes(),
        got[0].header("webhook-signature"),
        ts,
        5,
    )
    .unwrap();

    // Disable only, then delete.
    let r = app
        .delete(&format!("/api/v1/webhooks/{id}?disable_only=true"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["enabled"], false);
    assert_eq!(r.body["deleted"], false);
    let r = app.get(&format!("/api/v1/webhooks/{id}")).await;
    assert_eq!(r.body["enabled"], false);
    assert_eq!(deliveries_of(&app, &id).await.len(), 1);

    let r = app.delete(&format!("/api/v1/webhooks/{id}")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["deleted"], true);
    assert_error(
        &app.get(&format!("/api/v1/webhooks/{id}")).await,
        404,
        "not_found",
    );
    assert_error(
        &app.delete(&format!("/api/v1/webhooks/{id}")).await,
        404,
        "not_found",
    );
    assert_error(
        &app.patch(&format!("/api/v1/webhooks/{id}"), json!({"enabled": true}))
            .await,
        404,
        "not_found",
    );
}

#[tokio::test]
async fn input_is_validated() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    let r = app
        .post(
            "/api/v1/webhooks",
            json!({"url": rx.url("/"), "events": ["email.sent", "email.exploded"]}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "events");
    assert!(r.body["error"].as_str().unwrap().contains("email.exploded"));

    let r = app
        .post(
            "/api/v1/webhooks",
            json!({"url": rx.url("/"), "events": []}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "events");

    let r = app
        .post(
            "/api/v1/webhooks",
            json!({"url": rx.url("/"), "events": "email.sent"}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "events");

    let r = app.post("/api/v1/webhooks", json!({"events": ["*"]})).await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "url");

    let r = app
        .post("/api/v1/webhooks", json!({"url": "ftp://127.0.0.1/x"}))
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "url");

    let r = app
        .post("/api/v1/webhooks", json!({"url": "not a url"}))
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "url");

    let r = app
        .post(
            "/api/v1/webhooks",
            json!({"url": rx.url("/"), "description": "d".repeat(1001)}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "description");

    let r = app
        .post(
            "/api/v1/webhooks",
            json!({"url": rx.url("/"), "mailbox_id": "mbx_nope"}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "mailbox_id");

    // Every event name the service knows is accepted; `*` wins.
    let all: Vec<&str> = pigeonhole::core::events::EVENT_TYPES.to_vec();
    let w = create_webhook(&app, &rx.url("/"), json!({"events": all, "enabled": false})).await;
    assert_eq!(w["events"].as_array().unwrap().len(), all.len());
    assert_eq!(w["enabled"], false);
    let w = create_webhook(&app, &rx.url("/"), json!({"events": ["email.sent", "*"]})).await;
    assert_eq!(w["events"], json!(["*"]));

    let id = w["id"].as_str().unwrap();
    let r = app
        .patch(
            &format!("/api/v1/webhooks/{id}"),
            json!({"events": ["nope"]}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "events");
    let r = app
        .delete(&format!("/api/v1/webhooks/{id}?disable_only=maybe"))
        .await;
    assert_error(&r, 422, "invalid_request");
}

#[tokio::test]
async fn unsafe_urls_are_refused() {
    let app = spawn_app().await;
    app.dns.set_a(
        "internal.example.com",
        &[IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))],
    );
    app.dns.set_a(
        "mixed.example.com",
        &[
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
        ],
    );
    for (url, needle) in [
        (
            "https://169.254.169.254/latest/meta-data",
            "169.254.169.254",
        ),
        ("https://10.0.0.1/hook", "10.0.0.1"),
        ("https://[fd00::1]/hook", "fd00::1"),
        ("https://100.64.0.1/hook", "100.64.0.1"),
        ("http://10.0.0.1/hook", "https"),
        ("https://internal.example.com/hook", "10.1.2.3"),
        ("https://mixed.example.com/hook", "address"),
        ("https://nowhere.example.com/hook", "nowhere.example.com"),
        ("https://user:pw@127.0.0.1/hook", "password"),
    ] {
        let r = app.post("/api/v1/webhooks", json!({"url": url})).await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], "url", "{url}");
        assert!(
            r.body["error"].as_str().unwrap().contains(needle),
            "{url}: {}",
            r.text
        );
    }
    // Loopback is fine outside production, by IP or by name.
    let rx = Receiver::start().await;
    let w = create_webhook(&app, &rx.url("/ok"), json!({})).await;
    let local = create_webhook(
        &app,
        &format!("http://localhost:{}/local", rx.addr.port()),
        json!({"events": ["email.sent"]}),
    )
    .await;
    let id = w["id"].as_str().unwrap();
    let r = app
        .patch(
            &format!("/api/v1/webhooks/{id}"),
            json!({"url": "https://internal.example.com/x"}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "url");

    // Checked again at delivery time: an endpoint whose URL now points to a
    // private address (written behind the API's back here) is not contacted.
    pigeonhole::sql!(
        "UPDATE webhooks SET url = 'https://internal.example.com/x' WHERE id = $1",
        id
    )
    .execute(app.db.writer())
    .await
    .unwrap();
    let r = app
        .post(&format!("/api/v1/webhooks/{id}/ping"), json!({}))
        .await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(r.body["status_code"], 0);
    assert!(
        r.body["error"].as_str().unwrap().contains("10.1.2.3"),
        "{}",
        r.text
    );
    emit(&app, "domain.verified", None, json!({})).await;
    let ds = wait_deliveries(&app, id, 2, WAIT).await;
    assert_eq!(ds[1]["succeeded"], false);
    assert!(ds[1]["error"].as_str().unwrap().contains("10.1.2.3"));
    assert!(rx.requests().is_empty());
    // `localhost` is loopback without asking DNS.
    let r = app
        .post(
            &format!("/api/v1/webhooks/{}/ping", local["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(rx.requests_to("/local").len(), 1);
}

#[tokio::test]
async fn production_refuses_loopback_and_plain_http() {
    let app = spawn_app_with(|m| {
        m.insert("PIGEONHOLE_ENV".into(), "production".into());
    })
    .await;
    let rx = Receiver::start().await;
    for url in [
        rx.url("/hook"),
        format!("http://localhost:{}/hook", rx.addr.port()),
        "https://localhost/hook".to_string(),
        "https://127.0.0.1/hook".to_string(),
        "https://[::1]/hook".to_string(),
    ] {
        let r = app.post("/api/v1/webhooks", json!({"url": url})).await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], "url", "{url}");
    }
}

#[tokio::test]
async fn scopes_and_reach() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    app.verified_domain("example.com").await;
    app.verified_domain("other.org").await;
    let mine = app.mailbox("a@example.com").await;
    let theirs = app.mailbox("z@other.org").await;
    let mine_id = mine["id"].as_str().unwrap();
    let theirs_id = theirs["id"].as_str().unwrap();

    let read_only = app.new_key(Some("webhooks:read"), None, None, None).await;
    let r = app
        .call(
            "POST",
            "/api/v1/webhooks",
            Some(&read_only.key),
            Some(json!({"url": rx.url("/")})),
        )
        .await;
    assert_error(&r, 403, "forbidden");
    assert_eq!(r.body["required_scope"], "webhooks:write");
    let no_scope = app.new_key(Some("emails:send"), None, None, None).await;
    let r = app
        .call("GET", "/api/v1/webhooks", Some(&no_scope.key), None)
        .await;
    assert_error(&r, 403, "forbidden");
    assert_eq!(r.body["required_scope"], "webhooks:read");
    let r = app
        .call(
            "GET",
            "/api/v1/webhook-deliveries",
            Some(&no_scope.key),
            None,
        )
        .await;
    assert_error(&r, 403, "forbidden");

    let account_wide = create_webhook(&app, &rx.url("/all"), json!({})).await;
    let other_box =
        create_webhook(&app, &rx.url("/theirs"), json!({"mailbox_id": theirs_id})).await;

    let narrow = app.new_key(None, Some("example.com"), None, None).await;
    let call = |method: &'static str, path: String, body: Option<serde_json::Value>| {
        let key = narrow.key.clone();
        let app = &app;
        async move { app.call(method, &path, Some(&key), body).await }
    };
    // No mailbox: account-wide, 403.
    let r = call(
        "POST",
        "/api/v1/webhooks".into(),
        Some(json!({"url": rx.url("/")})),
    )
    .await;
    assert_error(&r, 403, "forbidden");
    let r = call(
        "POST",
        "/api/v1/webhooks".into(),
        Some(json!({"url": rx.url("/"), "mailbox_id": null})),
    )
    .await;
    assert_error(&r, 403, "forbidden");
    // A mailbox outside the reach does not exist for this key.
    let r = call(
        "POST",
        "/api/v1/webhooks".into(),
        Some(json!({"url": rx.url("/"), "mailbox_id": theirs_id})),
    )
    .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "mailbox_id");
    // Its own mailbox, by id or by address.
    let r = call(
        "POST",
        "/api/v1/webhooks".into(),
        Some(json!({"url": rx.url("/mine"), "mailbox_id": mine_id})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["mailbox_id"], mine_id);
    let own = r.body["id"].as_str().unwrap().to_string();
    let r = call(
        "POST",
        "/api/v1/webhooks".into(),
        Some(json!({"url": rx.url("/mine2"), "mailbox_id": "a@example.com"})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["mailbox_id"], mine_id);

    // Lists and reads show only what the key reaches.
    let r = call("GET", "/api/v1/webhooks".into(), None).await;
    let ids: Vec<&str> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["mailbox_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![mine_id, mine_id]);
    for other in [&account_wide["id"], &other_box["id"]] {
        let other = other.as_str().unwrap();
        for (m, p) in [
            ("GET", format!("/api/v1/webhooks/{other}")),
            ("DELETE", format!("/api/v1/webhooks/{other}")),
            ("POST", format!("/api/v1/webhooks/{other}/ping")),
        ] {
            assert_error(&call(m, p, None).await, 404, "not_found");
        }
        let r = call(
            "PATCH",
            format!("/api/v1/webhooks/{other}"),
            Some(json!({"enabled": false})),
        )
        .await;
        assert_error(&r, 404, "not_found");
    }
    // Cannot widen its own webhook to the whole account.
    let r = call(
        "PATCH",
        format!("/api/v1/webhooks/{own}"),
        Some(json!({"mailbox_id": null})),
    )
    .await;
    assert_error(&r, 403, "forbidden");
    let r = call(
        "PATCH",
        format!("/api/v1/webhooks/{own}"),
        Some(json!({"mailbox_id": theirs_id})),
    )
    .await;
    assert_error(&r, 422, "invalid_request");
    // The account key may.
    let r = app
        .patch(
            &format!("/api/v1/webhooks/{own}"),
            json!({"mailbox_id": null}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["mailbox_id"], json!(null));
    assert_error(
        &call("GET", format!("/api/v1/webhooks/{own}"), None).await,
        404,
        "not_found",
    );

    // Deliveries follow the webhooks' visibility.
    let ping = |id: String| {
        let app = &app;
        async move {
            let r = app
                .post(&format!("/api/v1/webhooks/{id}/ping"), json!({}))
                .await;
            assert_eq!(r.status, 200, "{}", r.text);
        }
    };
    ping(account_wide["id"].as_str().unwrap().to_string()).await;
    ping(other_box["id"].as_str().unwrap().to_string()).await;
    let r = call("GET", "/api/v1/webhooks".into(), None).await;
    let visible_hook = r.body["data"][0]["id"].as_str().unwrap().to_string();
    ping(visible_hook.clone()).await;
    let r = app.get("/api/v1/webhook-deliveries").await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 3);
    let r = call("GET", "/api/v1/webhook-deliveries".into(), None).await;
    let data = r.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{}", r.text);
    assert_eq!(data[0]["webhook_id"], visible_hook.as_str());
    let hidden = deliveries_of(&app, account_wide["id"].as_str().unwrap()).await;
    let hidden_id = hidden[0]["id"].as_str().unwrap();
    assert_error(
        &call(
            "GET",
            format!("/api/v1/webhook-deliveries/{hidden_id}"),
            None,
        )
        .await,
        404,
        "not_found",
    );
    assert_error(
        &call(
            "POST",
            format!("/api/v1/webhook-deliveries/{hidden_id}/replay"),
            None,
        )
        .await,
        404,
        "not_found",
    );
    let r = call(
        "GET",
        format!(
            "/api/v1/webhook-deliveries?webhook_id={}",
            account_wide["id"].as_str().unwrap()
        ),
        None,
    )
    .await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn ping_succeeds_or_answers_502_with_the_result() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    let w = create_webhook(
        &app,
        &rx.url("/ping"),
        json!({"events": ["email.sent"], "enabled": false}),
    )
    .await;
    let id = w["id"].as_str().unwrap();

    rx.script([Reply {
        status: 200,
        delay: Duration::ZERO,
        body: "pong".into(),
    }]);
    let r = app
        .post(&format!("/api/v1/webhooks/{id}/ping"), json!({}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["object"], "webhook_ping");
    assert_eq!(r.body["webhook_id"], id);
    assert_eq!(r.body["succeeded"], true);
    assert_eq!(r.body["status_code"], 200);
    assert_eq!(r.body["response_body"], "pong");
    assert_eq!(r.body["error"], json!(null));
    assert!(r.body["duration_ms"].as_i64().unwrap() >= 0);
    let got = rx.requests();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].json["type"], "webhook.test");
    assert_eq!(got[0].json["id"], got[0].id());
    assert_eq!(got[0].json["data"]["webhook_id"], id);

    // A failing endpoint: 502 with the full result, recorded, not retried.
    rx.script([Reply {
        status: 500,
        delay: Duration::ZERO,
        body: "x".repeat(10_000),
    }]);
    let r = app
        .post(&format!("/api/v1/webhooks/{id}/ping"), json!({}))
        .await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(r.body["object"], "webhook_ping");
    assert_eq!(r.body["succeeded"], false);
    assert_eq!(r.body["status_code"], 500);
    assert_eq!(r.body["response_body"].as_str().unwrap().len(), 4096);
    assert!(r.body["error"].as_str().unwrap().contains("500"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(rx.requests().len(), 2);

    let ds = deliveries_of(&app, id).await;
    assert_eq!(ds.len(), 2);
    assert_eq!(ds[0]["event"], "webhook.test");
    assert_eq!(ds[0]["succeeded"], true);
    assert_eq!(ds[0]["attempt"], 1);
    assert_eq!(ds[0]["id"], ds[0]["payload"]["id"]);
    assert_eq!(ds[1]["succeeded"], false);
    assert_eq!(ds[1]["status_code"], 500);
    let w = app.get(&format!("/api/v1/webhooks/{id}")).await.body;
    assert_eq!(w["last_status"], 500);
    assert_eq!(w["consecutive_failures"], 1);
    assert!(w["last_error"].as_str().unwrap().contains("500"));
    assert!(w["last_error_at"].is_string());
    assert!(w["last_delivered_at"].is_string());

    // Nobody listening.
    let r = app
        .patch(
            &format!("/api/v1/webhooks/{id}"),
            json!({"url": dead_url().await}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = app
        .post(&format!("/api/v1/webhooks/{id}/ping"), json!({}))
        .await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(r.body["succeeded"], false);
    assert_eq!(r.body["status_code"], 0);
    assert!(
        r.body["error"].as_str().unwrap().contains("connect"),
        "{}",
        r.text
    );

    assert_error(
        &app.post("/api/v1/webhooks/whk_nope/ping", json!({})).await,
        404,
        "not_found",
    );
}

#[tokio::test]
async fn replay_reuses_the_envelope_id() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    let w = create_webhook(&app, &rx.url("/r"), json!({})).await;
    let id = w["id"].as_str().unwrap();
    emit(
        &app,
        "domain.verified",
        None,
        json!({"domain": {"name": "x.com"}}),
    )
    .await;
    let first = rx.wait_for(1, WAIT).await[0].clone();
    let ds = wait_deliveries(&app, id, 1, WAIT).await;
    let original = ds[0].clone();
    assert_eq!(original["id"], first.id());
    assert_eq!(original["attempt"], 1);

    rx.script([Reply::status(503)]);
    let r = app
        .post(
            &format!(
                "/api/v1/webhook-deliveries/{}/replay",
                original["id"].as_str().unwrap()
            ),
            json!({}),
        )
        .await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(r.body["succeeded"], false);
    assert_eq!(r.body["status_code"], 503);
    let failed_id = r.body["delivery_id"].as_str().unwrap().to_string();

    let r = app
        .post(
            &format!("/api/v1/webhook-deliveries/{failed_id}/replay"),
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["object"], "webhook_ping");
    assert_eq!(r.body["succeeded"], true);
    assert_eq!(r.body["webhook_id"], id);
    let new_id = r.body["delivery_id"].as_str().unwrap().to_string();
    assert!(new_id.starts_with("whd_"));
    assert_ne!(new_id, original["id"].as_str().unwrap());

    let got = rx.requests();
    assert_eq!(got.len(), 3);
    for c in &got {
        assert_eq!(c.id(), first.id());
        assert_eq!(c.body, first.body, "the same payload every time");
    }
    let r = app
        .get(&format!("/api/v1/webhook-deliveries/{new_id}"))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["attempt"], 3);
    assert_eq!(r.body["envelope_id"], first.id());
    assert_eq!(r.body["payload"]["id"], first.id());
    assert_eq!(r.body["event"], "domain.verified");
    assert_error(
        &app.post("/api/v1/webhook-deliveries/whd_nope/replay", json!({}))
            .await,
        404,
        "not_found",
    );
}

#[tokio::test]
async fn delivery_log_pages_and_filters() {
    let app = spawn_app().await;
    let rx = Receiver::start().await;
    let rx_b = Receiver::start().await;
    let a = create_webhook(&app, &rx.url("/a"), json!({"events": ["email.sent"]})).await;
    let b = create_webhook(
        &app,
        &rx_b.url("/b"),
        json!({"events": ["domain.verified"]}),
    )
    .await;
    let a_id = a["id"].as_str().unwrap();
    let b_id = b["id"].as_str().unwrap();
    rx.script([Reply::status(400)]);
    for i in 0..3 {
        emit(&app, "email.sent", Some("mbx_x"), json!({"n": i})).await;
    }
    emit(&app, "domain.verified", None, json!({})).await;
    wait_deliveries(&app, a_id, 3, WAIT).await;
    wait_deliveries(&app, b_id, 1, WAIT).await;

    let r = app.get("/api/v1/webhook-deliveries").await;
    assert_eq!(r.status, 200);
    let all = r.body["data"].as_array().unwrap().clone();
    assert_eq!(all.len(), 4);
    let times: Vec<&str> = all
        .iter()
        .map(|d| d["created_at"].as_str().unwrap())
        .collect();
    let mut sorted = times.clone();
    sorted.sort_by(|x, y| y.cmp(x));
    assert_eq!(times, sorted, "newest first");
    let d = &all[0];
    for field in [
        "id",
        "webhook_id",
        "event",
        "payload",
        "attempt",
        "status_code",
        "response_body",
        "error",
        "duration_ms",
        "succeeded",
        "created_at",
    ] {
        assert!(d.get(field).is_some(), "{field} missing: {d}");
    }
    assert_eq!(d["object"], "webhook_delivery");

    let r = app
        .get(&format!("/api/v1/webhook-deliveries?webhook_id={b_id}"))
        .await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["data"][0]["event"], "domain.verified");
    let r = app.get("/api/v1/webhook-deliveries?event=email.sent").await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 3);
    let r = app.get("/api/v1/webhook-deliveries?succeeded=false").await;
    let failed = r.body["data"].as_array().unwrap();
    assert_eq!(failed.len(), 1, "{}", r.text);
    assert_eq!(failed[0]["status_code"], 400);
    let r = app
        .get(&format!(
            "/api/v1/webhook-deliveries?succeeded=true&webhook_id={a_id}"
        ))
        .await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2);
    assert_error(
        &app.get("/api/v1/webhook-deliveries?succeeded=perhaps")
            .await,
        422,
        "invalid_request",
    );
    assert_error(
        &app.get("/api/v1/webhook-deliveries?limit=0").await,
        422,
        "invalid_request",
    );
    assert_error(
        &app.get("/api/v1/webhook-deliveries?cursor=forged").await,
        422,
        "invalid_request",
    );

    // Paging one at a time walks the same four, newest first.
    let mut seen = Vec::new();
    let mut path = "/api/v1/webhook-deliveries?limit=1".to_string();
    loop {
        let r = app.get(&path).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let data = r.body["data"].as_array().unwrap();
        assert_eq!(data.len(), 1);
        seen.push(data[0]["id"].as_str().unwrap().to_string());
        if r.body["has_more"] == false {
            assert!(r.body.get("next_cursor").is_none());
            break;
        }
        let c = r.body["next_cursor"].as_str().unwrap();
        path = format!("/api/v1/webhook-deliveries?limit=1&cursor={c}");
    }
    let expected: Vec<String> = all
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(seen, expected);

    let one = &all[0]["id"].as_str().unwrap();
    let r = app.get(&format!("/api/v1/webhook-deliveries/{one}")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, all[0]);
    assert_error(
        &app.get("/api/v1/webhook-deliveries/whd_nope").await,
        404,
        "not_found",
    );

    // Deleting an endpoint deletes its deliveries.
    let of_a = all.iter().find(|d| d["webhook_id"] == a_id).unwrap();
    let one = of_a["id"].as_str().unwrap();
    let r = app.delete(&format!("/api/v1/webhooks/{a_id}")).await;
    assert_eq!(r.status, 200);
    let r = app.get("/api/v1/webhook-deliveries").await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    assert_error(
        &app.get(&format!("/api/v1/webhook-deliveries/{one}")).await,
        404,
        "not_found",
    );
    use pigeonhole::store::RowExt;
    let n = pigeonhole::sql!(
        "SELECT COUNT(*) AS n FROM webhook_deliveries WHERE webhook_id = $1",
        a_id
    )
    .fetch_one(app.db.reader())
    .await
    .unwrap()
    .int("n")
    .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn an_unknown_event_filter_is_refused() {
    let app = spawn_app().await;
    let r = app
        .get("/api/v1/webhook-deliveries?event=email.exploded")
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "event", "{}", r.text);
    let r = app
        .get("/api/v1/webhook-deliveries?event=webhook.test")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
}
