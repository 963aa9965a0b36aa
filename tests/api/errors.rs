use serde_json::json;

use crate::helpers::{assert_error, spawn_app};

#[tokio::test]
async fn malformed_json_and_wrong_types_are_422_naming_the_field() {
    let app = spawn_app().await;
    let url = format!("{}/api/v1/domains", app.base);
    let r = app
        .client
        .post(&url)
        .bearer_auth(&app.key)
        .body("{\"name\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 422);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["code"], "invalid_request");
    assert_eq!(body["param"], "body");

    let r = app.post("/api/v1/domains", json!({"name": 12})).await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "name");

    let r = app
        .post(
            "/api/v1/domains",
            json!({"name": "ok.com", "auto_create_mailboxes": "yes"}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "auto_create_mailboxes");

    let r = app.post("/api/v1/domains", json!({})).await;
    assert_error(&r, 422, "invalid_request");

    // Nothing half-written.
    assert_eq!(app.get("/api/v1/domains").await.body["data"], json!([]));
}

#[tokio::test]
async fn every_problem_is_listed_and_the_first_is_param() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let r = app
        .post(
            "/api/v1/mailboxes",
            json!({"address": "a@example.com", "color": "red", "display_name": "x".repeat(500)}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "display_name");
    let e = r.body["error"].as_str().unwrap();
    assert!(e.contains("color") && e.contains("display_name"), "{e}");
}

#[tokio::test]
async fn bodies_over_30_mb_are_413_without_being_read_whole() {
    let app = spawn_app().await;
    let big = vec![b' '; 30 * 1024 * 1024 + 10];
    let r = app
        .client
        .post(format!("{}/api/v1/domains", app.base))
        .bearer_auth(&app.key)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["code"], "payload_too_large");
}

#[tokio::test]
async fn unknown_routes_are_404_in_the_spec_shape() {
    let app = spawn_app().await;
    assert_error(&app.get("/api/v1/nothing-here").await, 404, "not_found");
}

#[tokio::test]
async fn internal_errors_are_opaque_500s() {
    let app = spawn_app().await;
    // Break the database under the running server: the reply must not leak SQL.
    app.db.close().await;
    let r = app.get("/api/v1/me").await;
    assert_error(&r, 500, "server_error");
    assert!(!r.text.to_lowercase().contains("pool"), "{}", r.text);
    assert!(!r.text.to_lowercase().contains("sql"), "{}", r.text);
}

#[tokio::test]
async fn a_missing_required_field_is_named_in_param() {
    let app = spawn_app().await;
    let r = app.post("/api/v1/domains", json!({})).await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "name");
    assert_eq!(r.body["error"], "name: is required");

    let r = app
        .post("/api/v1/domains", json!({"auto_create_mailboxes": true}))
        .await;
    assert_eq!(r.body["param"], "name");
}

#[tokio::test]
async fn every_field_of_the_wrong_type_is_listed_and_the_first_is_param() {
    let app = spawn_app().await;
    let r = app
        .post(
            "/api/v1/domains",
            json!({"name": 12, "auto_create_mailboxes": "yes"}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "name");
    let e = r.body["error"].as_str().unwrap();
    assert!(
        e.starts_with("name: ") && e.contains("; auto_create_mailboxes: "),
        "{e}"
    );

    // A wrong field and a missing one.
    let r = app
        .post("/api/v1/domains", json!({"auto_create_mailboxes": "yes"}))
        .await;
    assert_eq!(r.body["param"], "auto_create_mailboxes");
    let e = r.body["error"].as_str().unwrap();
    assert!(e.contains("name: is required"), "{e}");
}

/// Every documented route (and an unknown one) with a declared
/// `Content-Length` over the limit, with and without a key: a JSON 413
/// before anything is read, whether or not the route reads a body.
#[tokio::test]
async fn a_declared_length_over_the_limit_is_a_json_413_on_every_route() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let app = spawn_app().await;
    let doc = app.get("/api/v1/openapi.json").await.body;
    let mut routes = vec![("POST".to_string(), "/api/v1/nothing-here".to_string())];
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            if ["get", "post", "patch", "put", "delete"].contains(&method.as_str()) {
                let full = if path.starts_with("/api/v1/") || !path.starts_with("/api") {
                    path.clone()
                } else {
                    format!("/api/v1{path}")
                };
                let concrete: String = full
                    .split('/')
                    .map(|s| if s.starts_with('{') { "x" } else { s })
                    .collect::<Vec<_>>()
                    .join("/");
                routes.push((method.to_uppercase(), concrete));
            }
        }
    }
    assert!(routes.len() > 30, "{}", routes.len());
    let addr = app.base.trim_start_matches("http://").to_string();
    for (method, path) in routes {
        for key in [Some(app.key.as_str()), None] {
            let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let auth = key.map_or(String::new(), |k| format!("authorization: Bearer {k}\r\n"));
            let head = format!(
                "{method} {path} HTTP/1.1\r\nhost: t\r\n{auth}content-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{{}}",
                30 * 1024 * 1024 + 1
            );
            s.write_all(head.as_bytes()).await.unwrap();
            let mut reply = Vec::new();
            let _ = s.read_to_end(&mut reply).await;
            let reply = String::from_utf8_lossy(&reply);
            let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
            assert!(head.starts_with("HTTP/1.1 413"), "{method} {path}: {head}");
            assert!(
                head.to_ascii_lowercase()
                    .contains("content-type: application/json"),
                "{method} {path}: {head}"
            );
            let body: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(body["code"], "payload_too_large", "{method} {path}");
        }
    }
}

#[tokio::test]
async fn a_body_documented_as_an_object_is_refused_as_an_array() {
    let app = spawn_app().await;
    // serde reads a struct from an array too; the document says object.
    let r = app
        .post("/api/v1/labels", json!(["Urgent", "#ff0000"]))
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "body");
    assert_eq!(app.get("/api/v1/labels").await.body["data"], json!([]));
    let r = app.post("/api/v1/labels", json!({"name": "Urgent"})).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.body["id"].as_str().unwrap();
    let r = app
        .patch(&format!("/api/v1/labels/{id}"), json!([null, null]))
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "body");
}

#[tokio::test]
async fn typed_query_values_are_checked_and_empty_ones_refused() {
    let app = spawn_app().await;
    for (path, param) in [
        ("/api/v1/threads?until=", "until"),
        ("/api/v1/messages?since=", "since"),
        ("/api/v1/threads?unread=", "unread"),
        ("/api/v1/contacts?limit=", "limit"),
        ("/api/v1/threads?folder=", "folder"),
        ("/api/v1/contacts?order=", "order"),
        ("/api/v1/contacts?mailbox=null", "mailbox"),
        ("/api/v1/messages?mailbox=", "mailbox"),
        ("/api/v1/messages?from=nobody", "from"),
        ("/api/v1/emails?to=null", "to"),
        ("/api/v1/emails?status=", "status"),
        ("/api/v1/threads?participant=null", "participant"),
        ("/api/v1/threads?mailbox_id=mailbox", "mailbox_id"),
        ("/api/v1/contacts?mailbox_id=mbx_", "mailbox_id"),
        ("/api/v1/threads?label_id=Urgent", "label_id"),
        ("/api/v1/messages?thread_id=thr_OOPS", "thread_id"),
        ("/api/v1/emails?api_key_id=me", "api_key_id"),
        ("/api/v1/suppressions?reason=null", "reason"),
        ("/api/v1/suppressions?address=", "address"),
        ("/api/v1/webhook-deliveries?event=", "event"),
    ] {
        let r = app.get(path).await;
        assert_error(&r, 422, "invalid_request");
        assert_eq!(r.body["param"], param, "{path}: {}", r.text);
    }
    // Free text given empty is no filter at all.
    for path in [
        "/api/v1/threads?q=&subject=&label=",
        "/api/v1/contacts?q=&mailbox_id=mbx_00000000000000000000",
        "/api/v1/messages?from=Someone@Example.com&thread_id=thr_0000000000",
    ] {
        let r = app.get(path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
    }
}

#[tokio::test]
async fn nul_characters_in_query_values_are_refused() {
    // PostgreSQL cannot compare text holding NUL: a query value with one is
    // a 422 naming it, on both backends, rather than a 500 on one of them.
    let app = spawn_app().await;
    let r = app.get("/api/v1/emails?subject=a%00b").await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "subject");
    let r = app.get("/api/v1/threads?q=%00").await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "q");
    // Nor can it look up a label by such a name: no label, not a 500.
    let r = app
        .patch(
            "/api/v1/threads/thr_0000000000",
            json!({"remove_labels": ["a\u{0}"]}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    assert_eq!(r.body["param"], "remove_labels[0]");
    // The document says so: free-text query parameters exclude NUL.
    let doc = app.get("/api/v1/openapi.json").await.body;
    let q = doc["paths"]["/api/v1/threads"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "q")
        .unwrap();
    assert_eq!(q["schema"]["pattern"], "^[^\\u0000]*$");
}

#[tokio::test]
async fn nul_characters_in_ids_name_nothing() {
    // PostgreSQL cannot compare text holding NUL: an id in the path or a
    // mailbox named in a body with one is no object (404, 422), not a 500.
    let app = spawn_app().await;
    for path in [
        "/api/v1/mailboxes/a%00b",
        "/api/v1/domains/example%00.com",
        "/api/v1/threads/thr_%00",
        "/api/v1/webhooks/whk_0%00",
    ] {
        let r = app.get(path).await;
        assert_error(&r, 404, "not_found");
    }
    let r = app
        .post(
            "/api/v1/webhooks",
            json!({"url": "https://hooks.example.com/x", "events": ["*"], "mailbox_id": "mbx_\u{0}"}),
        )
        .await;
    assert_error(&r, 422, "invalid_request");
    // Nor a thread named in a send or a draft.
    for (path, body) in [
        (
            "/api/v1/emails",
            json!({"from": "team@example.com", "to": "a@b.com", "text": "t", "thread_id": "thr_\u{0}"}),
        ),
        (
            "/api/v1/drafts",
            json!({"from": "team@example.com", "to": ["a@b.com"], "text": "t", "thread_id": "thr_\u{0}"}),
        ),
        (
            "/api/v1/threads/thr_0000000000/reply",
            json!({"text": "t\u{0}"}),
        ),
    ] {
        let r = app.post(path, body).await;
        assert!(r.status < 500, "{path}: {} {}", r.status, r.text);
    }
    // (The URL's host does not resolve here, so `url` comes first.)
    assert!(
        r.body["error"]
            .as_str()
            .is_some_and(|e| e.contains("mailbox_id: no mailbox")),
        "{}",
        r.text
    );
}
