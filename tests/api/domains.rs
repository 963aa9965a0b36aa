use serde_json::json;

use crate::helpers::{assert_error, spawn_app};

#[tokio::test]
async fn create_returns_201_with_the_records_to_publish() {
    let app = spawn_app().await;
    let r = app
        .post("/api/v1/domains", json!({"name": "Example.com"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let d = &r.body;
    assert_eq!(d["object"], "domain");
    assert!(d["id"].as_str().unwrap().starts_with("dom_"));
    assert_eq!(d["name"], "example.com");
    assert_eq!(d["status"], "pending");
    assert_eq!(d["sending_enabled"], false);
    assert_eq!(d["inherited_from"], serde_json::Value::Null);
    assert_eq!(d["auto_create_mailboxes"], false);
    let records = d["records"].as_array().unwrap();
    let cnames: Vec<_> = records.iter().filter(|r| r["kind"] == "CNAME").collect();
    assert_eq!(cnames.len(), 3);
    for c in &cnames {
        assert!(
            c["name"]
                .as_str()
                .unwrap()
                .ends_with("._domainkey.example.com")
        );
        assert!(
            c["value"]
                .as_str()
                .unwrap()
                .ends_with(".dkim.amazonses.com")
        );
        assert_eq!(c["purpose"], "dkim");
        assert_eq!(c["required"], true);
    }
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "MX" && r["name"] == "mail.example.com")
    );
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "TXT" && r["value"].as_str().unwrap().starts_with("v=spf1"))
    );
    assert!(
        records
            .iter()
            .any(|r| r["kind"] == "TXT" && r["name"] == "_dmarc.example.com")
    );
    for field in [
        "region",
        "dkim_status",
        "dkim_origin",
        "mail_from_domain",
        "mail_from_status",
        "last_checked_at",
    ] {
        assert!(d[field].is_string(), "{field}");
    }
    assert_error(
        &app.post("/api/v1/domains", json!({"name": "example.com"}))
            .await,
        409,
        "conflict",
    );
    assert_error(
        &app.post("/api/v1/domains", json!({"name": "not a domain"}))
            .await,
        422,
        "invalid_request",
    );
}

#[tokio::test]
async fn only_whole_account_keys_may_add_domains() {
    let app = spawn_app().await;
    let k = app.new_key(None, Some("example.com"), None, None).await;
    let r = app
        .call(
            "POST",
            "/api/v1/domains",
            Some(&k.key),
            Some(json!({"name": "example.com"})),
        )
        .await;
    assert_error(&r, 403, "forbidden");
}

#[tokio::test]
async fn verify_follows_the_provider_and_emits_events() {
    let app = spawn_app().await;
    let d = app.verified_domain("example.com").await;
    assert_eq!(d["sending_enabled"], true);
    assert_eq!(d["dkim_status"], "success");
    assert_eq!(app.outbox_types().await, vec!["domain.verified"]);

    // Verifying again without a change writes no new event.
    app.post("/api/v1/domains/example.com/verify", json!({}))
        .await;
    assert_eq!(app.outbox_types().await, vec!["domain.verified"]);

    app.post("/api/v1/domains", json!({"name": "broken.invalid"}))
        .await;
    let r = app
        .post("/api/v1/domains/broken.invalid/verify", json!({}))
        .await;
    assert_eq!(r.body["status"], "failed");
    assert_eq!(r.body["sending_enabled"], false);
    assert_eq!(
        app.outbox_types().await,
        vec!["domain.verified", "domain.failed"]
    );
}

#[tokio::test]
async fn verify_probes_spf_and_dmarc_in_dns() {
    let app = spawn_app().await;
    app.post("/api/v1/domains", json!({"name": "example.com"}))
        .await;
    let r = app
        .post("/api/v1/domains/example.com/verify", json!({}))
        .await;
    assert_eq!(r.body["spf_verified"], false);
    assert_eq!(r.body["dmarc_verified"], false);

    app.dns
        .set_txt("mail.example.com", &["v=spf1 include:amazonses.com ~all"]);
    app.dns
        .set_txt("_dmarc.example.com", &["v=DMARC1; p=reject"]);
    let r = app
        .post("/api/v1/domains/example.com/verify", json!({}))
        .await;
    assert_eq!(r.body["spf_verified"], true, "{}", r.text);
    assert_eq!(r.body["dmarc_verified"], true, "{}", r.text);

    app.dns
        .set_txt("mail.example.com", &["v=spf1 include:_spf.google.com ~all"]);
    let r = app
        .post("/api/v1/domains/example.com/verify", json!({}))
        .await;
    assert_eq!(r.body["spf_verified"], false);
}

#[tokio::test]
async fn subdomains_of_a_verified_domain_inherit_it() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let r = app
        .post("/api/v1/domains", json!({"name": "eu.example.com"}))
        .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.body["inherited_from"], "example.com");
    assert_eq!(r.body["records"], json!([]));
    assert_eq!(r.body["status"], "verified");
    assert_eq!(r.body["sending_enabled"], true);
    // An unrelated look-alike does not inherit.
    let r = app
        .post("/api/v1/domains", json!({"name": "badexample.com"}))
        .await;
    assert_eq!(r.body["inherited_from"], serde_json::Value::Null);
}

#[tokio::test]
async fn list_and_get_respect_the_reach() {
    let app = spawn_app().await;
    app.verified_domain("example.com").await;
    let other = app.verified_domain("other.org").await;
    let k = app.new_key(None, Some("example.com"), None, None).await;
    let r = app.call("GET", "/api/v1/domains", Some(&k.key), None).await;
    let names: Vec<_> = r.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("example.com")]);
    let r = app
        .call("GET", "/api/v1/domains/example.com", Some(&k.key), None)
        .await;
    assert_eq!(r.status, 200);
    let by_id = format!("/api/v1/domains/{}", other["id"].as_str().unwrap());
    assert_error(
        &app.call("GET", &by_id, Some(&k.key), None).await,
        404,
        "not_found",
    );
    assert_error(
        &app.call(
            "POST",
            "/api/v1/domains/other.org/verify",
            Some(&k.key),
            Some(json!({})),
        )
        .await,
        404,
        "not_found",
    );
    assert_error(
        &app.call("DELETE", &by_id, Some(&k.key), None).await,
        404,
        "not_found",
    );
    assert_eq!(app.get(&by_id).await.status, 200);

    let a = app.new_key(None, None, Some("me@other.org"), None).await;
    let r = app.call("GET", "/api/v1/domains", Some(&a.key), None).await;
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["data"][0]["name"], "other.org");
}

#[tokio::test]
async fn patch_changes_auto_create_mailboxes() {
    let app = spawn_app().await;
    let r = app
        .post(
            "/api/v1/domains",
            json!({"name": "example.com", "auto_create_mailboxes": true}),
        )
        .await;
    assert_eq!(r.body["auto_create_mailboxes"], true);
    let r = app
        .patch(
            "/api/v1/domains/example.com",
            json!({"auto_create_mailboxes": false}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["auto_create_mailboxes"], false);
    assert_eq!(
        app.get("/api/v1/domains/example.com").await.body["auto_create_mailboxes"],
        false
    );
}

#[tokio::test]
async fn delete_removes_the_domain_and_optionally_the_identity() {
    let app = spawn_app().await;
    let d = app.verified_domain("example.com").await;
    let r = app
        .delete(&format!("/api/v1/domains/{}", d["id"].as_str().unwrap()))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body,
        json!({"object": "domain", "id": d["id"], "name": "example.com", "deleted": true, "deleted_in_provider": false})
    );
    assert_error(
        &app.get("/api/v1/domains/example.com").await,
        404,
        "not_found",
    );

    app.verified_domain("example.net").await;
    let r = app
        .delete("/api/v1/domains/example.net?delete_in_provider=true")
        .await;
    assert_eq!(r.body["deleted_in_provider"], true);
    assert_error(
        &app.delete("/api/v1/domains/x.com?delete_in_provider=maybe")
            .await,
        422,
        "invalid_request",
    );
}
