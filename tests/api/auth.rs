use serde_json::json;

use crate::helpers::{assert_error, spawn_app};

#[tokio::test]
async fn missing_mistyped_and_revoked_keys_are_401() {
    let app = spawn_app().await;
    let r = app.call("GET", "/api/v1/me", None, None).await;
    assert_error(&r, 401, "unauthorized");
    let r = app.call("GET", "/api/v1/me", Some("ph_nope"), None).await;
    assert_error(&r, 401, "unauthorized");
    // Right id, wrong secret.
    let k = app.new_key(None, None, None, None).await;
    let mut forged = k.key.clone();
    forged.pop();
    forged.push(if k.key.ends_with('a') { 'b' } else { 'a' });
    assert_error(
        &app.call("GET", "/api/v1/me", Some(&forged), None).await,
        401,
        "unauthorized",
    );
    assert_eq!(
        app.call("GET", "/api/v1/me", Some(&k.key), None)
            .await
            .status,
        200
    );
    assert!(pigeonhole::auth::revoke_key(&app.db, &k.id).await.unwrap());
    assert_error(
        &app.call("GET", "/api/v1/me", Some(&k.key), None).await,
        401,
        "unauthorized",
    );
}

#[tokio::test]
async fn me_describes_the_key_without_its_secret() {
    let app = spawn_app().await;
    let k = app
        .new_key(
            Some("domains:read,mail:read"),
            Some("example.com"),
            None,
            Some(42),
        )
        .await;
    let r = app.call("GET", "/api/v1/me", Some(&k.key), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["id"], k.id.as_str());
    assert_eq!(r.body["scopes"], json!(["domains:read", "mail:read"]));
    assert_eq!(
        r.body["reach"],
        json!({"kind": "domains", "values": ["example.com"]})
    );
    assert_eq!(r.body["rate_limit"], 42);
    assert!(!r.text.contains(&k.key));
}

#[tokio::test]
async fn a_missing_scope_is_403_with_required_and_held_scopes() {
    let app = spawn_app().await;
    let k = app.new_key(Some("domains:read"), None, None, None).await;
    let r = app
        .call(
            "POST",
            "/api/v1/domains",
            Some(&k.key),
            Some(json!({"name": "example.com"})),
        )
        .await;
    assert_error(&r, 403, "forbidden");
    assert_eq!(r.body["required_scope"], "domains:write");
    assert_eq!(r.body["scopes"], json!(["domains:read"]));
    // Nothing was created.
    let r = app.call("GET", "/api/v1/domains", Some(&k.key), None).await;
    assert_eq!(r.body["data"], json!([]));
}

#[tokio::test]
async fn rate_limit_headers_on_every_reply_and_429_past_the_limit() {
    let app = spawn_app().await;
    let k = app.new_key(None, None, None, Some(3)).await;
    for expected_remaining in ["2", "1", "0"] {
        let r = app.call("GET", "/api/v1/me", Some(&k.key), None).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
        assert_eq!(r.header("x-ratelimit-remaining"), Some(expected_remaining));
        let reset: u64 = r.header("x-ratelimit-reset").unwrap().parse().unwrap();
        assert_eq!(reset % 60, 0);
    }
    let r = app.call("GET", "/api/v1/me", Some(&k.key), None).await;
    assert_error(&r, 429, "rate_limited");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    // Error replies carry the headers too, and other keys are unaffected.
    let r = app.get("/api/v1/domains/nope").await;
    assert_error(&r, 404, "not_found");
    assert_eq!(r.header("x-ratelimit-limit"), Some("300"));
}

#[tokio::test]
async fn default_rate_limit_comes_from_configuration() {
    let app = crate::helpers::spawn_app_with(|m| {
        m.insert("PIGEONHOLE_RATE_LIMIT".into(), "2".into());
    })
    .await;
    assert_eq!(app.get("/api/v1/me").await.status, 200);
    assert_eq!(app.get("/api/v1/me").await.status, 200);
    assert_error(&app.get("/api/v1/me").await, 429, "rate_limited");
}
