use serde_json::json;

use crate::helpers::{assert_error, spawn_app};

#[tokio::test]
async fn drafts_are_created_edited_sent_and_deleted_in_their_thread() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    app.mailbox("team@example.com").await;
    let sent = app
        .post(
            "/api/v1/emails",
            json!({"from": "team@example.com", "to": "ann@x.com", "subject": "Plan", "text": "v1"}),
        )
        .await
        .body;
    let tid = sent["thread_id"].as_str().unwrap();

    let r = app
        .post("/api/v1/drafts", json!({"from": "team@example.com", "thread_id": tid, "to": "ann@x.com", "subject": "Re: Plan", "text": "draft"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let draft = r.body;
    assert_eq!(draft["is_draft"], true);
    assert_eq!(draft["thread_id"], tid);
    let did = draft["id"].as_str().unwrap();

    // Drafts are not sent mail.
    assert_eq!(
        app.get("/api/v1/emails").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let t = app.get(&format!("/api/v1/threads/{tid}")).await.body;
    assert_eq!(t["folders"], json!(["sent", "drafts"]));

    // Moving the thread leaves the draft in drafts.
    let r = app
        .patch(
            &format!("/api/v1/threads/{tid}"),
            json!({"folder": "archive"}),
        )
        .await;
    assert_eq!(r.body["folders"], json!(["archive", "drafts"]));
    assert_eq!(
        app.get(&format!("/api/v1/drafts/{did}")).await.body["is_draft"],
        true
    );

    let r = app
        .patch(
            &format!("/api/v1/drafts/{did}"),
            json!({"text": "final words", "cc": ["bob@x.com"]}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["text"], "final words");
    assert_eq!(r.body["cc"], json!(["bob@x.com"]));
    assert_eq!(r.body["to"], json!(["ann@x.com"]));
    assert_eq!(
        app.get("/api/v1/drafts").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let r = app
        .post(&format!("/api/v1/drafts/{did}/send"), json!({}))
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.body["thread_id"], tid);
    assert_error(
        &app.get(&format!("/api/v1/drafts/{did}")).await,
        404,
        "not_found",
    );
    let emails = app.get("/api/v1/emails").await.body;
    assert_eq!(emails["data"].as_array().unwrap().len(), 2);
    let t = app.get(&format!("/api/v1/threads/{tid}")).await.body;
    assert_eq!(t["message_count"], 2);
    assert!(!t["folders"].as_array().unwrap().contains(&json!("drafts")));

    // A draft on its own makes its own thread, and deleting it removes it.
    let r = app
        .post(
            "/api/v1/drafts",
            json!({"from": "team@example.com", "subject": "Idea", "text": "later"}),
        )
        .await;
    let lone = r.body["id"].as_str().unwrap().to_string();
    let lone_thread = r.body["thread_id"].as_str().unwrap().to_string();
    assert_eq!(
        app.get("/api/v1/threads?folder=drafts").await.body["data"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let r = app
        .post(&format!("/api/v1/drafts/{lone}/send"), json!({}))
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "to");
    assert_eq!(
        app.delete(&format!("/api/v1/drafts/{lone}")).await.status,
        200
    );
    assert_error(
        &app.get(&format!("/api/v1/threads/{lone_thread}")).await,
        404,
        "not_found",
    );

    assert_error(
        &app.post(
            "/api/v1/drafts",
            json!({"from": "nobody@example.com", "text": "x"}),
        )
        .await,
        422,
        "invalid_request",
    );
    assert_error(
        &app.post(
            "/api/v1/drafts",
            json!({"from": "team@example.com", "to": "bad", "text": "x"}),
        )
        .await,
        422,
        "invalid_request",
    );
}

/// A draft's `thread_id` must be a thread id: otherwise a 422 naming it.
#[tokio::test]
async fn a_malformed_draft_thread_id_is_a_422_naming_it() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    app.mailbox("team@example.com").await;
    for bad in [json!("mbx_0123abc"), json!("thr_!"), json!(true)] {
        let r = app
            .post(
                "/api/v1/drafts",
                json!({"from": "team@example.com", "thread_id": bad, "text": "x"}),
            )
            .await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], "thread_id", "{bad}: {}", r.text);
    }
}
