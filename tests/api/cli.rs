use std::process::Command;

use serde_json::Value;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pigeonhole"));
    for (k, _) in std::env::vars() {
        if k.starts_with("PIGEONHOLE_") {
            c.env_remove(k);
        }
    }
    c
}

#[tokio::test]
async fn keys_create_list_revoke_through_the_binary() {
    let url = crate::helpers::fresh_database_url().await;
    let out = bin()
        .env("PIGEONHOLE_DATABASE_URL", &url)
        .args([
            "keys",
            "create",
            "--name",
            "ci",
            "--scopes",
            "emails:send,emails:read",
            "--domains",
            "example.com",
            "--rate-limit",
            "10",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let k: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(k["id"].as_str().unwrap().starts_with("key_"));
    assert_eq!(k["name"], "ci");
    assert_eq!(
        k["scopes"],
        serde_json::json!(["emails:send", "emails:read"])
    );
    assert_eq!(
        k["reach"],
        serde_json::json!({"kind": "domains", "values": ["example.com"]})
    );
    assert_eq!(k["rate_limit"], 10);
    let secret = k["key"].as_str().unwrap().to_string();

    let out = bin()
        .env("PIGEONHOLE_DATABASE_URL", &url)
        .args(["keys", "list"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains(&secret), "list must never print a secret");
    let list: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1);

    // The stored form is a hash, not the secret.
    let db = pigeonhole::store::Db::connect(&url).await.unwrap();
    let row = pigeonhole::sql!("SELECT secret_hash FROM api_keys")
        .fetch_one(db.reader())
        .await
        .unwrap();
    let stored: String = pigeonhole::store::RowExt::text(&row, "secret_hash").unwrap();
    assert_ne!(stored, secret);
    assert!(
        pigeonhole::auth::authenticate(&db, &secret)
            .await
            .unwrap()
            .is_some()
    );

    let out = bin()
        .env("PIGEONHOLE_DATABASE_URL", &url)
        .args(["keys", "revoke", k["id"].as_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        pigeonhole::auth::authenticate(&db, &secret)
            .await
            .unwrap()
            .is_none()
    );

    let out = bin()
        .env("PIGEONHOLE_DATABASE_URL", &url)
        .args(["keys", "create", "--name", "x", "--scopes", "bogus"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn bad_configuration_stops_with_a_one_line_reason_naming_the_variable() {
    for (var, value) in [
        ("PIGEONHOLE_LISTEN", "not-an-address"),
        ("PIGEONHOLE_PROVIDER", "mailgun"),
        ("PIGEONHOLE_WEBHOOK_TIMEOUT", "soon"),
    ] {
        let out = bin().env(var, value).arg("serve").output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<_> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(lines[0].contains(var), "{err}");
    }
}

#[tokio::test]
async fn serve_logs_its_addresses_and_stops_on_sigterm() {
    let url = crate::helpers::fresh_database_url().await;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let child = bin()
        .env("PIGEONHOLE_DATABASE_URL", &url)
        .env("PIGEONHOLE_LISTEN", format!("127.0.0.1:{port}"))
        .env("PIGEONHOLE_SMTP_LISTEN", "")
        .env("RUST_LOG", "info")
        .arg("serve")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut up = false;
    for _ in 0..300 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            up = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(up, "server did not start");
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains(&format!("127.0.0.1:{port}")), "{log}");
}
