//! The OpenAPI document describes every route, and only routes that exist.

use std::collections::{BTreeSet, HashMap};

use serde_json::{Value, json};

use pigeonhole::model::webhooks::EventName;

use crate::helpers::{TestApp, eventually, spawn_app};
use crate::receiver::{Receiver, create_webhook};

/// Every (method, path) routed in `src/api/mod.rs`, in OpenAPI template form.
/// Add a row here with every new route: the test then fails until the route
/// is documented in `src/api/openapi.rs`.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/t/o/{token}"),
    ("POST", "/sns/ses"),
    ("GET", "/api/v1/openapi.json"),
    ("GET", "/api/v1/me"),
    ("GET", "/api/v1/provider"),
    ("GET", "/api/v1/emails"),
    ("POST", "/api/v1/emails"),
    ("POST", "/api/v1/emails/batch"),
    ("GET", "/api/v1/emails/{id}"),
    ("GET", "/api/v1/emails/{id}/attachments/{attachment_id}"),
    ("GET", "/api/v1/suppressions"),
    ("POST", "/api/v1/suppressions"),
    ("DELETE", "/api/v1/suppressions/{id}"),
    ("GET", "/api/v1/threads"),
    ("GET", "/api/v1/threads/{id}"),
    ("PATCH", "/api/v1/threads/{id}"),
    ("DELETE", "/api/v1/threads/{id}"),
    ("POST", "/api/v1/threads/{id}/reply"),
    ("GET", "/api/v1/drafts"),
    ("POST", "/api/v1/drafts"),
    ("GET", "/api/v1/drafts/{id}"),
    ("PATCH", "/api/v1/drafts/{id}"),
    ("DELETE", "/api/v1/drafts/{id}"),
    ("POST", "/api/v1/drafts/{id}/send"),
    ("GET", "/api/v1/messages"),
    ("GET", "/api/v1/messages/{id}"),
    ("PATCH", "/api/v1/messages/{id}"),
    ("GET", "/api/v1/messages/{id}/raw"),
    ("GET", "/api/v1/messages/{id}/attachments/{attachment_id}"),
    ("GET", "/api/v1/labels"),
    ("POST", "/api/v1/labels"),
    ("GET", "/api/v1/labels/{id}"),
    ("PATCH", "/api/v1/labels/{id}"),
    ("DELETE", "/api/v1/labels/{id}"),
    ("GET", "/api/v1/domains"),
    ("POST", "/api/v1/domains"),
    ("GET", "/api/v1/domains/{id}"),
    ("PATCH", "/api/v1/domains/{id}"),
    ("DELETE", "/api/v1/domains/{id}"),
    ("POST", "/api/v1/domains/{id}/verify"),
    ("GET", "/api/v1/mailboxes"),
    ("POST", "/api/v1/mailboxes"),
    ("GET", "/api/v1/mailboxes/{id}"),
    ("PATCH", "/api/v1/mailboxes/{id}"),
    ("DELETE", "/api/v1/mailboxes/{id}"),
    ("GET", "/api/v1/webhooks"),
    ("POST", "/api/v1/webhooks"),
    ("GET", "/api/v1/webhooks/{id}"),
    ("PATCH", "/api/v1/webhooks/{id}"),
    ("DELETE", "/api/v1/webhooks/{id}"),
    ("POST", "/api/v1/webhooks/{id}/ping"),
    ("GET", "/api/v1/webhook-deliveries"),
    ("GET", "/api/v1/webhook-deliveries/{id}"),
    ("POST", "/api/v1/webhook-deliveries/{id}/replay"),
];

const METHODS: &[&str] = &["get", "put", "post", "delete", "patch", "head", "options"];

const SCOPES: &[&str] = &[
    "emails:send",
    "emails:read",
    "domains:read",
    "domains:write",
    "mailboxes:read",
    "mailboxes:write",
    "webhooks:read",
    "webhooks:write",
    "mail:read",
    "mail:write",
];

async fn fetch(app: &TestApp) -> Value {
    let r = app.call("GET", "/api/v1/openapi.json", None, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "content type {:?}",
        r.header("content-type")
    );
    r.body
}

/// (METHOD, path template, operation) for every operation of the document.
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut out = Vec::new();
    let paths = doc["paths"].as_object().expect("paths is an object");
    for (path, item) in paths {
        let item = item.as_object().expect("path item is an object");
        for (method, op) in item {
            if METHODS.contains(&method.as_str()) {
                out.push((method.to_uppercase(), path.clone(), op.clone()));
            }
        }
    }
    out
}

fn concrete(path: &str) -> String {
    path.split('/')
        .map(|seg| {
            if seg.starts_with('{') && seg.ends_with('}') {
                "nope"
            } else {
                seg
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Follows a `$ref` to `#/components/...`.
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v["$ref"].as_str().and_then(|r| r.strip_prefix("#/")) {
        Some(pointer) => doc
            .pointer(&format!("/{pointer}"))
            .unwrap_or_else(|| panic!("unresolved $ref {pointer}")),
        None => v,
    }
}

fn is_fallback(r: &crate::helpers::Resp) -> bool {
    r.status == 404 && r.body["error"] == "route not found"
}

#[tokio::test]
async fn every_documented_operation_is_routed_and_answers_as_documented() {
    let app = spawn_app().await;
    let doc = fetch(&app).await;
    assert_eq!(doc["openapi"], "3.1.0");
    assert!(doc["info"]["title"].is_string());
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let ops = operations(&doc);
    assert!(ops.len() >= ROUTES.len(), "{} operations", ops.len());

    // One key per missing scope: every scope but that one.
    let mut lacking: HashMap<&str, String> = HashMap::new();
    for s in SCOPES {
        let others: Vec<&str> = SCOPES.iter().copied().filter(|x| x != s).collect();
        lacking.insert(
            s,
            app.new_key(Some(&others.join(",")), None, None, None)
                .await
                .key,
        );
    }

    for (method, path, op) in &ops {
        let what = format!("{method} {path}");
        let url = concrete(path);
        let body = matches!(method.as_str(), "POST" | "PATCH" | "PUT").then(|| json!({}));
        let scope = op["x-required-scope"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: x-required-scope is missing"));
        assert!(
            scope == "none" || SCOPES.contains(&scope),
            "{what}: unknown scope {scope}"
        );
        assert!(op["operationId"].is_string(), "{what}: operationId");
        let responses = op["responses"]
            .as_object()
            .unwrap_or_else(|| panic!("{what}: responses"));
        let public = op["security"].as_array().is_some_and(|a| a.is_empty());

        // With the admin key the route exists and answers a documented status.
        let r = app.call(method, &url, Some(&app.key), body.clone()).await;
        assert!(
            !is_fallback(&r),
            "{what}: documented but not routed (fallback 404)"
        );
        assert_ne!(
            r.status, 405,
            "{what}: documented but the method is not routed"
        );
        assert!(
            responses.contains_key(&r.status.to_string()),
            "{what} answered {} which is not documented: {}",
            r.status,
            r.text
        );
        if r.status >= 400 && r.body.is_object() && !public {
            assert!(r.body["error"].is_string() && r.body["code"].is_string());
        }
        if !public {
            assert!(
                r.header("x-ratelimit-limit").is_some(),
                "{what}: rate-limit headers"
            );
            for h in [
                "X-RateLimit-Limit",
                "X-RateLimit-Remaining",
                "X-RateLimit-Reset",
            ] {
                for (status, resp) in responses {
                    let resp = resolve(&doc, resp);
                    assert!(
                        resp["headers"][h].is_object(),
                        "{what} {status}: header {h} undocumented"
                    );
                }
            }
        }

        // Security as documented: keyed operations refuse a call without a key.
        let r = app.call(method, &url, None, body.clone()).await;
        if public {
            assert_ne!(r.status, 401, "{what} is documented as public: {}", r.text);
        } else {
            assert_eq!(r.status, 401, "{what} needs a key: {}", r.text);
            assert!(responses.contains_key("401"), "{what}: 401 undocumented");
        }

        // The documented scope is the one the handler asks for. Bodies are
        // read before the scope is checked, so a 422 for `{}` may come first.
        if scope != "none" {
            assert!(responses.contains_key("403"), "{what}: 403 undocumented");
            let r = app.call(method, &url, Some(&lacking[scope]), body).await;
            if !(body_sent(method) && r.status == 422) {
                assert_eq!(r.status, 403, "{what} without {scope}: {}", r.text);
                assert_eq!(r.body["required_scope"], scope, "{what}: {}", r.text);
            }
        }
    }
}

fn body_sent(method: &str) -> bool {
    matches!(method, "POST" | "PATCH" | "PUT")
}

#[tokio::test]
async fn every_routed_path_is_documented() {
    let app = spawn_app().await;
    let doc = fetch(&app).await;
    let documented: BTreeSet<(String, String)> = operations(&doc)
        .into_iter()
        .map(|(m, p, _)| (m, p))
        .collect();
    let missing: Vec<_> = ROUTES
        .iter()
        .filter(|(m, p)| !documented.contains(&(m.to_string(), p.to_string())))
        .collect();
    assert!(missing.is_empty(), "routed but not documented: {missing:?}");

    // A second net: every `.route(...)` of the router source, with the
    // methods chained onto it, must be documented (with or without the
    // /api/v1 prefix of the nested router).
    let source = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/api/mod.rs"))
        .expect("read src/api/mod.rs");
    let mut undocumented = Vec::new();
    for (path, methods) in routes_in_source(&source) {
        for m in methods {
            let plain = (m.clone(), path.clone());
            let nested = (m.clone(), format!("/api/v1{path}"));
            if !documented.contains(&plain) && !documented.contains(&nested) {
                undocumented.push(format!("{m} {path}"));
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "routes in src/api/mod.rs missing from the OpenAPI document: {undocumented:?}"
    );
}

/// `.route("/path", get(..).post(..))` calls of a router source: the path and
/// the methods of each.
fn routes_in_source(source: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(".route(") {
        rest = &rest[at + ".route(".len()..];
        // The call's text, up to its matching parenthesis.
        let mut depth = 1usize;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let call = &rest[..end];
        let Some(open) = call.find('"') else { continue };
        let Some(len) = call[open + 1..].find('"') else {
            continue;
        };
        let path = call[open + 1..open + 1 + len].to_string();
        let handlers = &call[open + 2 + len..];
        let mut methods = Vec::new();
        for m in ["get", "post", "put", "patch", "delete"] {
            let call = format!("{m}(");
            let routed = handlers.match_indices(&call).any(|(i, _)| {
                !handlers[..i]
                    .chars()
                    .next_back()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_')
            });
            if routed {
                methods.push(m.to_uppercase());
            }
        }
        out.push((path, methods));
    }
    out
}

#[test]
fn the_source_scan_finds_chained_methods() {
    let src = r#"
        .route("/a", get(x::list).post(x::create))
        .route(
            "/a/{id}",
            get(x::get)
                .patch(x::update)
                .delete(x::delete),
        )
        .route("/b", post(y::go))
    "#;
    let found = routes_in_source(src);
    assert_eq!(
        found,
        vec![
            (
                "/a".to_string(),
                vec!["GET".to_string(), "POST".to_string()]
            ),
            (
                "/a/{id}".to_string(),
                vec!["GET".to_string(), "PATCH".to_string(), "DELETE".to_string()]
            ),
            ("/b".to_string(), vec!["POST".to_string()]),
        ]
    );
}

/// Structural validation with the `openapi-spec-validator` PyPI package, run
/// with `$PIGEONHOLE_TEST_PYTHON` (CI installs it into `.venv`).
#[tokio::test]
async fn document_passes_openapi_spec_validator() {
    let in_ci = std::env::var("CI").as_deref() == Ok("true");
    let python = match std::env::var("PIGEONHOLE_TEST_PYTHON") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            assert!(
                !in_ci,
                "PIGEONHOLE_TEST_PYTHON must name a python with openapi-spec-validator in CI"
            );
            println!("PIGEONHOLE_TEST_PYTHON is not set: openapi-spec-validator check skipped");
            return;
        }
    };
    let app = spawn_app().await;
    let doc = fetch(&app).await;
    let file = std::env::temp_dir().join(format!(
        "pigeonhole-openapi-{}.json",
        pigeonhole::ids::random_token(12)
    ));
    std::fs::write(&file, serde_json::to_vec_pretty(&doc).unwrap()).expect("write document");
    let path = file.clone();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(&python)
            .args(["-m", "openapi_spec_validator"])
            .arg(&path)
            .output()
    })
    .await
    .expect("join");
    let _ = std::fs::remove_file(&file);
    let output = output.expect("run openapi_spec_validator");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() && !in_ci && text.contains("No module named openapi_spec_validator")
    {
        println!("openapi-spec-validator is not installed: check skipped ({text})");
        return;
    }
    assert!(
        output.status.success(),
        "openapi-spec-validator refused the document: {text}"
    );
}

/// What generated clients choke on stays out of the send bodies
/// (openapi-python-client: "Invalid property in union" on a `default: null`
/// union, invalid Python from a boolean `const`), and the document says
/// what the server refuses: empty addresses, a missing `to`, 0 or 101
/// batch items, an Idempotency-Key out of 1 to 255 characters.
#[tokio::test]
async fn send_bodies_are_plain_and_say_what_the_server_refuses() {
    let app = spawn_app().await;
    let doc = fetch(&app).await;
    let schemas = &doc["components"]["schemas"];
    for name in [
        "SendRequest",
        "ReplyRequest",
        "AttachmentInput",
        "BatchRequest",
    ] {
        let text = schemas[name].to_string();
        assert!(!text.contains("\"const\""), "{name}: {text}");
        assert!(!text.contains("\"default\":null"), "{name}: {text}");
    }
    let send = &schemas["SendRequest"];
    assert_eq!(send["required"], json!(["from", "to"]));
    assert_eq!(send["properties"]["from"]["minLength"], 1);
    assert_eq!(send["properties"]["from"]["format"], "email");
    assert_eq!(
        send["properties"]["to"]["oneOf"][1]["items"]["format"],
        "email"
    );
    assert!(send["properties"]["in_reply_to"]["pattern"].is_string());
    assert_eq!(send["properties"]["to"]["oneOf"][0]["minLength"], 1);
    assert_eq!(send["properties"]["to"]["oneOf"][1]["minItems"], 1);
    assert!(send["properties"]["tags"].get("type").is_none());
    let batch = &schemas["BatchRequest"]["oneOf"];
    assert_eq!(batch[0]["minItems"], 1);
    assert_eq!(batch[0]["maxItems"], 100);
    for (path, id) in [
        ("/api/v1/emails", "sendEmail"),
        ("/api/v1/emails/batch", "sendEmailBatch"),
    ] {
        let op = &doc["paths"][path]["post"];
        assert_eq!(op["operationId"], id);
        let key = &op["parameters"][0];
        assert_eq!(key["name"], "Idempotency-Key");
        assert_eq!(key["in"], "header");
        assert_eq!(key["required"], false);
        assert_eq!(
            key["schema"],
            json!({"type": "string", "minLength": 1, "maxLength": 255})
        );
    }
}

/// Every id pattern the document states is the one `pigeonhole::ids` checks
/// (the annotations spell it out; this keeps them from drifting apart).
#[tokio::test]
async fn id_patterns_match_the_id_alphabet() {
    let app = spawn_app().await;
    let doc = fetch(&app).await;
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(p)) = m.get("pattern") {
                    out.push(p.clone());
                }
                m.values().for_each(|x| walk(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut patterns = Vec::new();
    walk(&doc, &mut patterns);
    let ids: Vec<&String> = patterns.iter().filter(|p| p.contains("_[0-9a-")).collect();
    assert!(!ids.is_empty(), "no id pattern in the document");
    for p in ids {
        let prefix = p.trim_start_matches('^').split('_').next().unwrap();
        assert_eq!(*p, pigeonhole::ids::pattern(prefix), "id pattern {p}");
    }
}

/// Ids in paths are typed: the document's pattern comes from the id's type,
/// a segment that cannot be such an id gets the 404 a lookup of it gives,
/// and paths that also take a name, an address or a provider's message id
/// keep a plain string.
#[tokio::test]
async fn path_ids_are_typed_where_only_an_id_can_name_the_object() {
    let app = spawn_app().await;
    let doc = fetch(&app).await;
    let param = |path: &str, method: &str, name: &str| -> Value {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("{method} {path}: no parameter {name}"))
    };
    for (path, method, name, prefix) in [
        ("/api/v1/threads/{id}", "get", "id", "thr"),
        ("/api/v1/threads/{id}/reply", "post", "id", "thr"),
        ("/api/v1/webhooks/{id}", "patch", "id", "whk"),
        (
            "/api/v1/webhook-deliveries/{id}/replay",
            "post",
            "id",
            "whd",
        ),
        ("/api/v1/drafts/{id}", "delete", "id", "msg"),
        ("/api/v1/messages/{id}", "get", "id", "msg"),
        ("/api/v1/messages/{id}/raw", "get", "id", "msg"),
        (
            "/api/v1/messages/{id}/attachments/{attachment_id}",
            "get",
            "attachment_id",
            "att",
        ),
        (
            "/api/v1/emails/{id}/attachments/{attachment_id}",
            "get",
            "attachment_id",
            "att",
        ),
    ] {
        let p = param(path, method, name);
        assert_eq!(
            p["schema"]["pattern"],
            pigeonhole::ids::pattern(prefix),
            "{method} {path} {name}"
        );
    }
    for (path, method) in [
        ("/api/v1/domains/{id}", "get"),
        ("/api/v1/mailboxes/{id}", "get"),
        ("/api/v1/labels/{id}", "get"),
        ("/api/v1/suppressions/{id}", "delete"),
        ("/api/v1/emails/{id}", "get"),
        ("/api/v1/emails/{id}/attachments/{attachment_id}", "get"),
    ] {
        let p = param(path, method, "id");
        assert!(p["schema"]["pattern"].is_null(), "{method} {path}: {p}");
    }
    for (path, noun) in [
        ("/api/v1/threads/nope", "thread"),
        ("/api/v1/threads/msg_0000000000", "thread"),
        ("/api/v1/drafts/thr_0000000000", "draft"),
        ("/api/v1/webhooks/x", "webhook"),
        (
            "/api/v1/webhook-deliveries/whk_0000000000",
            "webhook delivery",
        ),
        ("/api/v1/messages/nope", "message"),
        ("/api/v1/messages/nope/raw", "message"),
        // The message is looked up first, as before.
        ("/api/v1/messages/nope/attachments/nope", "message"),
        ("/api/v1/emails/nope/attachments/nope", "email"),
    ] {
        let r = app.get(path).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
        assert_eq!(r.body["code"], "not_found", "{path}: {}", r.text);
        assert_eq!(r.body["error"], format!("{noun} not found"), "{path}");
    }
    // A query problem still comes before the id's 404, as it did.
    let r = app.get("/api/v1/threads/nope?include_body=maybe").await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(r.body["param"], "include_body");
}

/// Every event name has its entry under `webhooks`: a POST signed with the
/// three Standard Webhooks headers, its body the event's schema (`type`
/// that very name), every schema it names present in the document.
#[tokio::test]
async fn every_event_name_has_its_webhook() {
    let app = spawn_app().await;
    let doc = fetch(&app).await;
    let hooks = doc["webhooks"].as_object().expect("webhooks is an object");
    assert_eq!(hooks.len(), EventName::ALL.len(), "{:?}", hooks.keys());
    for event in EventName::ALL {
        let name = event.as_str();
        let post = &hooks
            .get(name)
            .unwrap_or_else(|| panic!("no webhook entry for {name}"))["post"];
        assert_eq!(post["security"], json!([]), "{name}");
        let headers: Vec<&str> = post["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .filter(|p| p["in"] == "header" && p["required"] == true)
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(
            headers,
            ["webhook-id", "webhook-timestamp", "webhook-signature"],
            "{name}"
        );
        let body = resolve(
            &doc,
            &post["requestBody"]["content"]["application/json"]["schema"],
        );
        assert_eq!(body["properties"]["type"]["enum"], json!([name]));
        assert_eq!(
            body["required"],
            json!(["id", "type", "created_at", "data"]),
            "{name}"
        );
        assert!(resolve(&doc, &body["properties"]["data"])["properties"].is_object());
        assert!(post["responses"]["2XX"].is_object(), "{name}");
    }
    // Every reference anywhere in the document resolves.
    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    out.push(r);
                }
                m.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    for r in all {
        let pointer = r.strip_prefix('#').expect("a local $ref");
        assert!(doc.pointer(pointer).is_some(), "unresolved {r}");
    }
}

/// Whether `v` is valid against `schema`, as far as the document's schemas
/// go (types, properties, items, enums, `anyOf`/`oneOf`/`allOf`); an object
/// key the schema does not name counts as a problem too, so that the
/// document describes every field a receiver gets.
fn conforms(doc: &Value, schema: &Value, v: &Value, at: &str, problems: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    for (key, alternatives) in [("anyOf", true), ("oneOf", true), ("allOf", false)] {
        if let Some(items) = schema[key].as_array() {
            let results: Vec<Vec<String>> = items
                .iter()
                .map(|s| {
                    let mut p = Vec::new();
                    conforms(doc, s, v, at, &mut p);
                    p
                })
                .collect();
            let ok = if alternatives {
                results.iter().any(Vec::is_empty)
            } else {
                results.iter().all(Vec::is_empty)
            };
            if !ok {
                problems.push(format!("{at}: fails {key}: {results:?}"));
            }
        }
    }
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let allowed = types.is_empty()
        || types.contains(&kind)
        || (kind == "integer" && types.contains(&"number"));
    if !allowed {
        problems.push(format!("{at}: {kind}, documented {types:?}"));
        return;
    }
    if let Some(values) = schema["enum"].as_array()
        && !values.contains(v)
    {
        problems.push(format!("{at}: {v} not in {values:?}"));
    }
    if let Value::Object(m) = v {
        let props = schema["properties"].as_object();
        for r in schema["required"].as_array().into_iter().flatten() {
            if let Some(r) = r.as_str()
                && !m.contains_key(r)
            {
                problems.push(format!("{at}: required {r} missing"));
            }
        }
        if let Some(props) = props {
            for (k, x) in m {
                match props.get(k) {
                    Some(s) => conforms(doc, s, x, &format!("{at}.{k}"), problems),
                    None => problems.push(format!("{at}: {k} is not documented")),
                }
            }
        }
    }
    if let (Value::Array(xs), Some(items)) = (v, schema.get("items")) {
        for (i, x) in xs.iter().enumerate() {
            conforms(doc, items, x, &format!("{at}[{i}]"), problems);
        }
    }
}

/// What receivers get is what the document says they get: the bodies of
/// `domain.verified`, `email.sent`, `email.delivered`, `thread.updated` and
/// `webhook.test`, as delivered, against their `webhooks` entries.
#[tokio::test]
async fn delivered_bodies_match_their_documented_schemas() {
    let app = spawn_app().await;
    let doc = fetch(&app).await;
    let rx = Receiver::start().await;
    let w = create_webhook(&app, &rx.url("/r"), json!({})).await;
    app.verified_domain("example.com").await;
    let sent = app
        .post(
            "/api/v1/emails",
            json!({"from": "Ann <ann@example.com>", "to": "success@simulator.amazonses.com", "subject": "Hi", "text": "Hello"}),
        )
        .await;
    assert_eq!(sent.status, 202, "{}", sent.text);
    let thread = sent.body["thread_id"].as_str().expect("thread_id");
    let r = app
        .patch(
            &format!("/api/v1/threads/{thread}"),
            json!({"is_starred": true}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = app
        .post(
            &format!("/api/v1/webhooks/{}/ping", w["id"].as_str().unwrap()),
            json!({}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let wanted = [
        "domain.verified",
        "email.sent",
        "email.delivered",
        "thread.updated",
        "webhook.test",
    ];
    let got = eventually("every event delivered", || async {
        let got = rx.requests();
        let types: Vec<&str> = got.iter().filter_map(|c| c.json["type"].as_str()).collect();
        wanted
            .iter()
            .all(|t| types.contains(t))
            .then_some(got.clone())
    })
    .await;
    for c in got {
        let name = c.json["type"].as_str().expect("type").to_string();
        let schema =
            &doc["webhooks"][&name]["post"]["requestBody"]["content"]["application/json"]["schema"];
        assert!(schema.is_object(), "{name} is not documented");
        let mut problems = Vec::new();
        conforms(&doc, schema, &c.json, &name, &mut problems);
        assert!(problems.is_empty(), "{name}: {problems:#?}\n{}", c.body);
        assert_eq!(c.header("webhook-id"), c.json["id"], "{name}");
    }
}

/// Ids in replies and bodies are the id types' schemas (`ThreadId`, …),
/// each carrying its kind's pattern, rather than strings annotated field by
/// field.
#[tokio::test]
async fn ids_in_replies_and_bodies_are_the_id_schemas() {
    let app = spawn_app().await;
    let doc = fetch(&app).await;
    let schemas = &doc["components"]["schemas"];
    for (schema, field, id) in [
        ("Message", "id", "MessageId"),
        ("Message", "thread_id", "ThreadId"),
        ("Message", "mailbox_id", "MailboxId"),
        ("Message", "api_key_id", "KeyId"),
        ("Attachment", "id", "AttachmentId"),
        ("Thread", "id", "ThreadId"),
        ("Thread", "mailbox_id", "MailboxId"),
        ("ThreadDeleted", "id", "ThreadId"),
        ("Domain", "id", "DomainId"),
        ("Mailbox", "id", "MailboxId"),
        ("Mailbox", "domain_id", "DomainId"),
        ("Label", "id", "LabelId"),
        ("LabelRef", "id", "LabelId"),
        ("Contact", "id", "ContactId"),
        ("Contact", "mailbox_id", "MailboxId"),
        ("Suppression", "id", "SuppressionId"),
        ("Suppression", "message_id", "MessageId"),
        ("Webhook", "id", "WebhookId"),
        ("Webhook", "mailbox_id", "MailboxId"),
        ("WebhookDelivery", "id", "DeliveryId"),
        ("WebhookDelivery", "envelope_id", "DeliveryId"),
        ("WebhookDelivery", "webhook_id", "WebhookId"),
        ("WebhookPing", "webhook_id", "WebhookId"),
        ("WebhookReplay", "delivery_id", "DeliveryId"),
        ("SendResult", "id", "MessageId"),
        ("SendResult", "thread_id", "ThreadId"),
        ("BatchItem", "id", "MessageId"),
        ("BatchItem", "thread_id", "ThreadId"),
        ("SendRequest", "thread_id", "ThreadId"),
        ("DraftCreate", "thread_id", "ThreadId"),
        ("WebhookTestData", "webhook_id", "WebhookId"),
        ("Deleted_LabelObject", "id", "LabelId"),
        ("Deleted_DraftObject", "id", "MessageId"),
    ] {
        // A flattened type's own fields are in one of its `allOf` parts.
        let parts = std::iter::once(&schemas[schema])
            .chain(schemas[schema]["allOf"].as_array().into_iter().flatten());
        let property = parts
            .map(|s| &s["properties"][field])
            .find(|p| !p.is_null())
            .unwrap_or_else(|| panic!("{schema}.{field} is not documented"));
        let text = property.to_string();
        assert!(
            text.contains(&format!("\"$ref\":\"#/components/schemas/{id}\"")),
            "{schema}.{field} is not a {id}: {text}"
        );
        assert!(
            property.get("pattern").is_none(),
            "{schema}.{field} spells out a pattern: {text}"
        );
        let prefix = schemas[id]["pattern"]
            .as_str()
            .unwrap_or_else(|| panic!("{id} has no pattern"))
            .trim_start_matches('^')
            .split('_')
            .next()
            .unwrap()
            .to_string();
        assert_eq!(schemas[id]["pattern"], pigeonhole::ids::pattern(&prefix));
    }
}
