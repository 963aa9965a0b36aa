//! What a narrow key may change (issue 13): domain writes need the whole
//! domain; catch-all and default flags need every mailbox they change;
//! `/emails` is sent mail and `/messages` received mail; attachment
//! downloads never let a browser run what a stranger sent.

use serde_json::json;

use crate::helpers::{TestApp, assert_error, spawn_app};
use pigeonhole::core::inbound;

async fn key(
    app: &TestApp,
    scopes: Option<&str>,
    domains: Option<&str>,
    addresses: Option<&str>,
) -> String {
    app.new_key(scopes, domains, addresses, None).await.key
}

#[tokio::test]
async fn an_address_key_reads_its_domain_but_never_changes_it() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    app.mailbox("alice@example.com").await;
    let alice = key(&app, None, None, Some("alice@example.com")).await;

    let r = app
        .call("GET", "/api/v1/domains/example.com", Some(&alice), None)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    for (method, path, body) in [
        (
            "PATCH",
            "/api/v1/domains/example.com",
            Some(json!({"auto_create_mailboxes": true})),
        ),
        ("POST", "/api/v1/domains/example.com/verify", None),
        (
            "DELETE",
            "/api/v1/domains/example.com?delete_in_provider=true",
            None,
        ),
        ("DELETE", "/api/v1/domains/example.com", None),
    ] {
        let r = app.call(method, path, Some(&alice), body).await;
        assert_error(&r, 403, "forbidden");
        assert!(
            r.body["error"].as_str().unwrap().contains("whole domain"),
            "{}",
            r.text
        );
    }
    // Nothing changed: the domain is there, unchanged, and still sends for others.
    let d = app.get("/api/v1/domains/example.com").await;
    assert_eq!(d.status, 200);
    assert_eq!(d.body["auto_create_mailboxes"], false);
    assert_eq!(d.body["status"], "verified");
    let r = app
        .post(
            "/api/v1/emails",
            json!({"from": "bob@example.com", "to": "x@y.com", "subject": "s", "text": "t"}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);

    // A key that reaches the domain (or a parent of it) may change it.
    let whole = key(&app, None, Some("example.com"), None).await;
    let r = app
        .call(
            "PATCH",
            "/api/v1/domains/example.com",
            Some(&whole),
            Some(json!({"auto_create_mailboxes": true})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["auto_create_mailboxes"], true);
    let r = app
        .call(
            "POST",
            "/api/v1/domains/example.com/verify",
            Some(&whole),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

async fn flags(app: &TestApp, address: &str) -> (bool, bool) {
    let m = app.get(&format!("/api/v1/mailboxes/{address}")).await.body;
    (
        m["is_catch_all"].as_bool().unwrap(),
        m["is_default"].as_bool().unwrap(),
    )
}

#[tokio::test]
async fn catch_all_and_default_change_only_through_a_key_that_reaches_what_they_clear() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let r = app
        .post(
            "/api/v1/mailboxes",
            json!({"address": "bob@example.com", "is_catch_all": true, "is_default": true}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    app.mailbox("alice@example.com").await;
    let alice = key(&app, None, None, Some("alice@example.com")).await;

    for body in [json!({"is_catch_all": true}), json!({"is_default": true})] {
        let r = app
            .call(
                "PATCH",
                "/api/v1/mailboxes/alice@example.com",
                Some(&alice),
                Some(body),
            )
            .await;
        assert_error(&r, 403, "forbidden");
    }
    assert_eq!(flags(&app, "bob@example.com").await, (true, true));
    assert_eq!(flags(&app, "alice@example.com").await, (false, false));
    // Nor when creating a mailbox of her own with the flag.
    let carol = key(&app, None, None, Some("carol@example.com")).await;
    let r = app
        .call(
            "POST",
            "/api/v1/mailboxes",
            Some(&carol),
            Some(json!({"address": "carol@example.com", "is_default": true})),
        )
        .await;
    assert_error(&r, 403, "forbidden");
    assert_eq!(
        app.get("/api/v1/mailboxes/carol@example.com").await.status,
        404,
        "a refused creation leaves nothing behind"
    );

    // A catch-all takes mail for every address of the domain: even with no
    // catch-all to clear, an address key may not make one.
    let r = app
        .patch(
            "/api/v1/mailboxes/bob@example.com",
            json!({"is_catch_all": false}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = app
        .call(
            "PATCH",
            "/api/v1/mailboxes/alice@example.com",
            Some(&alice),
            Some(json!({"is_catch_all": true})),
        )
        .await;
    assert_error(&r, 403, "forbidden");

    // Other edits of her own mailbox still work.
    let r = app
        .call(
            "PATCH",
            "/api/v1/mailboxes/alice@example.com",
            Some(&alice),
            Some(json!({"display_name": "Alice"})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);

    // A key reaching both mailboxes may move the default; a domain key the catch-all.
    let both = key(&app, None, None, Some("alice@example.com,bob@example.com")).await;
    let r = app
        .call(
            "PATCH",
            "/api/v1/mailboxes/alice@example.com",
            Some(&both),
            Some(json!({"is_default": true})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let domain_key = key(&app, None, Some("example.com"), None).await;
    let r = app
        .call(
            "PATCH",
            "/api/v1/mailboxes/alice@example.com",
            Some(&domain_key),
            Some(json!({"is_catch_all": true})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(flags(&app, "alice@example.com").await, (true, true));
    assert_eq!(flags(&app, "bob@example.com").await, (false, false));
}

fn received_with_attachment() -> Vec<u8> {
    b"From: Ann <ann@x.com>\r\nTo: support@example.com\r\nSubject: Invoice\r\n\
Message-ID: <inv-1@x.com>\r\nMIME-Version: 1.0\r\n\
Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
--b\r\nContent-Type: text/plain\r\n\r\nSee attached.\r\n\
--b\r\nContent-Type: text/html; name=\"invoice.html\"\r\n\
Content-Disposition: inline; filename=\"invoice.html\"\r\n\r\n\
<script>alert(1)</script>\r\n--b--\r\n"
        .to_vec()
}

#[tokio::test]
async fn sent_and_received_mail_are_read_through_their_own_endpoints_and_scopes() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    app.mailbox("support@example.com").await;
    let stored = inbound::ingest(
        &app.db,
        received_with_attachment().into(),
        &["support@example.com".to_string()],
        &[],
    )
    .await
    .unwrap();
    let received = stored[0].id.clone();
    let sent = app
        .post(
            "/api/v1/emails",
            json!({"from": "support@example.com", "to": "x@y.com", "subject": "s", "text": "t"}),
        )
        .await;
    assert_eq!(sent.status, 202, "{}", sent.text);
    let sent = sent.body["id"].as_str().unwrap().to_string();

    let emails_reader = key(&app, Some("emails:read"), None, None).await;
    let mail_reader = key(&app, Some("mail:read"), None, None).await;
    let get = |k: &str, path: String| {
        let k = k.to_string();
        let app = &app;
        async move { app.call("GET", &path, Some(&k), None).await }
    };
    assert_eq!(
        get(&emails_reader, format!("/api/v1/emails/{sent}"))
            .await
            .status,
        200
    );
    assert_error(
        &get(&emails_reader, format!("/api/v1/emails/{received}")).await,
        404,
        "not_found",
    );
    assert_eq!(
        get(&mail_reader, format!("/api/v1/messages/{received}"))
            .await
            .status,
        200
    );
    assert_error(
        &get(&mail_reader, format!("/api/v1/messages/{sent}")).await,
        404,
        "not_found",
    );
    assert_error(
        &get(&mail_reader, format!("/api/v1/messages/{sent}/raw")).await,
        404,
        "not_found",
    );
    assert_error(
        &get(&mail_reader, format!("/api/v1/emails/{sent}")).await,
        403,
        "forbidden",
    );

    // Received attachments download under /messages, with mail:read only.
    let m = get(&mail_reader, format!("/api/v1/messages/{received}"))
        .await
        .body;
    let att = m["attachments"][0]["id"].as_str().unwrap().to_string();
    assert_error(
        &get(
            &emails_reader,
            format!("/api/v1/emails/{received}/attachments/{att}"),
        )
        .await,
        404,
        "not_found",
    );
    assert_error(
        &get(
            &emails_reader,
            format!("/api/v1/messages/{received}/attachments/{att}"),
        )
        .await,
        403,
        "forbidden",
    );
    let r = get(
        &mail_reader,
        format!("/api/v1/messages/{received}/attachments/{att}"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // An HTML file a stranger sent is never rendered by the browser.
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    let disposition = r.header("content-disposition").unwrap();
    assert!(disposition.starts_with("attachment;"), "{disposition}");
    assert!(
        r.header("content-security-policy")
            .unwrap()
            .contains("sandbox")
    );
}

#[tokio::test]
async fn attachments_a_browser_would_run_are_downloaded_never_shown() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let r = app
        .post(
            "/api/v1/emails",
            json!({"from": "a@example.com", "to": "x@y.com", "subject": "s",
                   "html": "<img src=\"cid:pic\"><img src=\"cid:logo\">",
                   "attachments": [
                       {"filename": "pic.svg", "content": "PHN2Zy8+", "content_type": "image/svg+xml", "content_id": "pic"},
                       {"filename": "logo.png", "content": "AQID", "content_type": "image/png", "content_id": "logo"},
                       {"filename": "page.xhtml", "content": "PGh0bWwvPg==", "content_type": "application/xhtml+xml"},
                       {"filename": "run.js", "content": "YWxlcnQoMSk=", "content_type": "text/javascript"}
                   ]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.body["id"].as_str().unwrap().to_string();
    let m = app.get(&format!("/api/v1/emails/{id}")).await.body;
    for a in m["attachments"].as_array().unwrap() {
        let r = app
            .get(&format!(
                "/api/v1/emails/{id}/attachments/{}",
                a["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        let disposition = r.header("content-disposition").unwrap();
        let expected = if a["filename"] == "logo.png" {
            "inline;"
        } else {
            "attachment;"
        };
        assert!(
            disposition.starts_with(expected),
            "{}: {disposition}",
            a["filename"]
        );
    }
}
