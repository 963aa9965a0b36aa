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
