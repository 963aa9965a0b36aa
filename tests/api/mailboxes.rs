use serde_json::json;

use crate::helpers::{assert_error, spawn_app};

#[tokio::test]
async fn create_needs_a_verified_domain_or_one_under_it() {
    let app = spawn_app().await;
    app.post("/api/v1/domains", json!({"name": "pending.com"}))
        .await;
    let r = app
        .post("/api/v1/mailboxes", json!({"address": "a@pending.com"}))
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "address");

    let d = app.verified_domain("example.com").await;
    let r = app
        .post(
            "/api/v1/mailboxes",
            json!({"address": "Support@Example.com", "display_name": "Support", "signature": "-- us",
                   "is_catch_all": false, "is_default": true, "color": "#AABBCC"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let m = &r.body;
    assert_eq!(m["object"], "mailbox");
    assert!(m["id"].as_str().unwrap().starts_with("mbx_"));
    assert_eq!(m["address"], "support@example.com");
    assert_eq!(m["domain"], "example.com");
    assert_eq!(m["domain_id"], d["id"]);
    assert_eq!(m["color"], "#aabbcc");
    assert_eq!(m["is_default"], true);
    assert!(m["created_at"].is_string());

    // A subdomain needs no identity of its own.
    let r = app
        .post(
            "/api/v1/mailboxes",
            json!({"address": "ops@eu.example.com"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.body["domain"], "eu.example.com");
    assert_eq!(r.body["domain_id"], d["id"]);

    assert_error(
        &app.post(
            "/api/v1/mailboxes",
            json!({"address": "support@example.com"}),
        )
        .await,
        409,
        "conflict",
    );
    let r = app
        .post(
            "/api/v1/mailboxes",
            json!({"address": "x@example.com", "color": "blue"}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "color");
}

#[tokio::test]
async fn key_reach_decides_who_may_create_and_see() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    app.verified_domain("other.org").await;
    let dk = app.new_key(None, Some("example.com"), None, None).await;
    let r = app
        .call(
            "POST",
            "/api/v1/mailboxes",
            Some(&dk.key),
            Some(json!({"address": "a@example.com"})),
        )
        .await;
    assert_eq!(r.status, 201);
    let r = app
        .call(
            "POST",
            "/api/v1/mailboxes",
            Some(&dk.key),
            Some(json!({"address": "a@other.org"})),
        )
        .await;
    assert_error(&r, 403, "forbidden");

    let ak = app.new_key(None, None, Some("b@example.com"), None).await;
    let r = app
        .call(
            "POST",
            "/api/v1/mailboxes",
            Some(&ak.key),
            Some(json!({"address": "b@example.com"})),
        )
        .await;
    assert_eq!(r.status, 201);
    let r = app
        .call(
            "POST",
            "/api/v1/mailboxes",
            Some(&ak.key),
            Some(json!({"address": "c@example.com"})),
        )
        .await;
    assert_error(&r, 403, "forbidden");

    let other = app.mailbox("z@other.org").await;
    let r = app
        .call("GET", "/api/v1/mailboxes", Some(&ak.key), None)
        .await;
    let addrs: Vec<_> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["address"].clone())
        .collect();
    assert_eq!(addrs, vec![json!("b@example.com")]);
    let r = app
        .call("GET", "/api/v1/mailboxes", Some(&dk.key), None)
        .await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 2);
    let path = format!("/api/v1/mailboxes/{}", other["id"].as_str().unwrap());
    assert_error(
        &app.call("GET", &path, Some(&dk.key), None).await,
        404,
        "not_found",
    );
    assert_error(
        &app.call(
            "PATCH",
            &path,
            Some(&dk.key),
            Some(json!({"display_name": "x"})),
        )
        .await,
        404,
        "not_found",
    );
    assert_error(
        &app.call(
            "DELETE",
            &format!("{path}?confirm=true"),
            Some(&dk.key),
            None,
        )
        .await,
        404,
        "not_found",
    );

    let r = app.get("/api/v1/mailboxes?domain=other.org").await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn patch_rules_address_default_signature() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let a = app.mailbox("a@example.com").await;
    let b = app.mailbox("b@example.com").await;
    let pa = format!("/api/v1/mailboxes/{}", a["id"].as_str().unwrap());
    let pb = format!("/api/v1/mailboxes/{}", b["id"].as_str().unwrap());

    let r = app.patch(&pa, json!({"address": "new@example.com"})).await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "address");

    assert_eq!(
        app.patch(&pa, json!({"is_default": true, "signature": "sig"}))
            .await
            .body["is_default"],
        true
    );
    let r = app.patch(&pb, json!({"is_default": true})).await;
    assert_eq!(r.body["is_default"], true);
    assert_eq!(app.get(&pa).await.body["is_default"], false);
    assert_eq!(app.get(&pa).await.body["signature"], "sig");

    // Absent leaves it, null clears it.
    assert_eq!(
        app.patch(&pa, json!({"display_name": "A"})).await.body["signature"],
        "sig"
    );
    let r = app.patch(&pa, json!({"signature": null})).await;
    assert_eq!(r.body["signature"], serde_json::Value::Null);
    assert_eq!(r.body["display_name"], "A");
    assert_error(
        &app.patch(&pa, json!({"color": "#12345"})).await,
        422,
        "invalid_request",
    );
}

#[tokio::test]
async fn delete_needs_confirmation() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let a = app.mailbox("a@example.com").await;
    let path = format!("/api/v1/mailboxes/{}", a["id"].as_str().unwrap());
    assert_error(&app.delete(&path).await, 409, "conflict");
    assert_eq!(app.get(&path).await.status, 200);
    let r = app.delete(&format!("{path}?confirm=true")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body,
        json!({"object": "mailbox", "id": a["id"], "deleted": true})
    );
    assert_error(&app.get(&path).await, 404, "not_found");
}

#[tokio::test]
async fn deleting_a_mailbox_deletes_its_mail() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let a = app.mailbox("a@example.com").await;
    app.mailbox("b@example.com").await;
    let sent = app
        .post("/api/v1/emails", json!({"from": "a@example.com", "to": "x@y.com", "text": "keep?", "attachments": [{"filename": "f.txt", "content": "aGk="}]}))
        .await
        .body;
    let other = app
        .post(
            "/api/v1/emails",
            json!({"from": "b@example.com", "to": "x@y.com", "text": "stays"}),
        )
        .await
        .body;
    let raw = b"From: z@y.com\r\nTo: a@example.com\r\nSubject: in\r\nMessage-ID: <in1@y.com>\r\n\r\nhello\r\n";
    pigeonhole::core::inbound::ingest(
        &app.db,
        bytes::Bytes::from_static(raw),
        &["a@example.com".to_string()],
        &[],
    )
    .await
    .unwrap();
    let r = app
        .delete(&format!(
            "/api/v1/mailboxes/{}?confirm=true",
            a["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(r.status, 200);
    assert_error(
        &app.get(&format!("/api/v1/emails/{}", sent["id"].as_str().unwrap()))
            .await,
        404,
        "not_found",
    );
    assert_error(
        &app.get(&format!(
            "/api/v1/threads/{}",
            sent["thread_id"].as_str().unwrap()
        ))
        .await,
        404,
        "not_found",
    );
    assert_eq!(app.get("/api/v1/messages").await.body["data"], json!([]));
    assert_eq!(
        app.get("/api/v1/emails?q=keep").await.body["data"],
        json!([])
    );
    assert_eq!(
        app.get(&format!("/api/v1/emails/{}", other["id"].as_str().unwrap()))
            .await
            .status,
        200
    );
    for table in ["attachments", "contacts"] {
        let n = pigeonhole::sql!(&format!("SELECT COUNT(*) AS n FROM {table} WHERE 1 = 1"))
            .fetch_one(app.db.reader())
            .await
            .unwrap();
        assert_eq!(
            pigeonhole::store::RowExt::int(&n, "n").unwrap(),
            0,
            "{table}"
        );
    }
}

/// On PostgreSQL a mailbox's deletion locks the mailbox before it reads its
/// mail. Mail being stored in it meanwhile, whose transaction holds the
/// mailbox as `inbound::ingest` does, is committed first and then deleted
/// with the rest, never left behind in a mailbox that is gone.
#[tokio::test]
async fn a_deletion_waits_for_mail_being_stored_and_deletes_it_too() {
    use pigeonhole::store::{Backend, RowExt, Sql};
    let app = spawn_app().await;
    if app.db.backend() != Backend::Postgres {
        return;
    }
    app.verified_domain("example.com").await;
    let a = app.mailbox("a@example.com").await;
    let id = a["id"].as_str().unwrap().to_string();
    let mut storing = app.db.begin().await.unwrap();
    Sql::new("SELECT id FROM mailboxes WHERE id = ")
        .bind(id.as_str())
        .push(" FOR KEY SHARE")
        .fetch_optional_tx(&mut storing)
        .await
        .unwrap()
        .expect("the mailbox is there");
    Sql::new(
        "INSERT INTO threads (id, mailbox_id, mailbox, domain, subject, normalized_subject, \
         snippet, folders, participants, message_count, unread_count, is_starred, \
         has_attachments, last_message_at, created_at) VALUES ('thr_arriving', ",
    )
    .bind(id.as_str())
    .push(", 'a@example.com', 'example.com', 's', 's', '', ',inbox,', '', 1, 1, 0, 0, 1, 1)")
    .execute_tx(&mut storing)
    .await
    .unwrap();

    let path = format!("/api/v1/mailboxes/{id}?confirm=true");
    let deleting = app.delete(&path);
    let committing = async {
        // Until the deletion waits for the mailbox, then the store commits.
        loop {
            let waiting = Sql::new(
                "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND datname = current_database()",
            )
            .fetch_one(app.db.reader())
            .await
            .unwrap()
            .int("n")
            .unwrap();
            if waiting > 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        storing.commit().await.unwrap();
    };
    let (deleted, ()) = tokio::join!(deleting, committing);
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    let left = Sql::new("SELECT COUNT(*) AS n FROM threads")
        .fetch_one(app.db.reader())
        .await
        .unwrap()
        .int("n")
        .unwrap();
    assert_eq!(left, 0, "the thread stored meanwhile was left behind");
}
