//! The OpenAPI operations generated from the handlers' `#[utoipa::path]`
//! annotations and the model's types, with the service's conventions applied
//! in one place rather than repeated on every handler:
//!
//! - the scope is the annotation's `security(("bearer" = ["scope"]))` (more
//!   than one: the rest are `x-additional-scopes`); it becomes
//!   `x-required-scope` (`none` for `("bearer" = [])`) and the description's
//!   last line;
//! - every operation of `/api/v1` may answer 401, 429 and 500; one with a
//!   scope 403; one with a path parameter 404; one with a body or query
//!   parameters 422; one with a body 413; statuses of 400 and over listed in
//!   the annotation (409, 502, 503…) are added, all as the shared error
//!   replies of `components/responses`;
//! - every reply carries the `X-RateLimit-*` headers, and the success replies
//!   of an operation taking `Idempotency-Key` carry `Idempotency-Replayed`.

use serde_json::{Map, Value, json};
use utoipa::openapi::OpenApi;

use super::openapi::{RATE_HEADERS, error_name, error_response, header_ref, tag_of};

const PREFIX: &str = "/api/v1";
const METHODS: &[&str] = &["get", "put", "post", "delete", "patch", "head", "options"];

/// Lays the generated operations (paths relative to `/api/v1`) and their
/// schemas over `doc`, replacing what `doc` had for the same path and method.
pub fn overlay(doc: &mut Value, generated: &OpenApi) {
    let generated = match serde_json::to_value(generated) {
        Ok(v) => v,
        Err(e) => {
            tracing::error!(error = %e, "the generated OpenAPI document could not be rendered");
            return;
        }
    };
    let mut needed: Vec<(u16, bool)> = Vec::new();
    if let Some(paths) = generated["paths"].as_object() {
        for (path, item) in paths {
            let full = format!("{PREFIX}{path}");
            let Some(item) = item.as_object() else {
                continue;
            };
            for (method, op) in item {
                if !METHODS.contains(&method.as_str()) {
                    continue;
                }
                let op = conventional(&full, op.clone(), &mut needed);
                let slot = &mut doc["paths"][&full];
                if !slot.is_object() {
                    *slot = json!({});
                }
                slot[method] = op;
            }
        }
    }
    if let Some(schemas) = generated["components"]["schemas"].as_object() {
        for (name, schema) in schemas {
            doc["components"]["schemas"][name] = schema.clone();
        }
    }
    for (status, idempotent) in needed {
        let name = error_name(status, idempotent);
        let slot = &mut doc["components"]["responses"][name];
        if slot.is_null() {
            *slot = error_response(status, idempotent, true);
        }
    }
}

/// One operation with the conventions above applied.
fn conventional(path: &str, mut op: Value, needed: &mut Vec<(u16, bool)>) -> Value {
    let scopes: Vec<String> = op["security"][0]["bearer"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    if let Some(o) = op.as_object_mut() {
        // The document's global security (a bearer key) applies.
        o.remove("security");
    }
    op["x-required-scope"] = json!(scopes.first().map(String::as_str).unwrap_or("none"));
    if scopes.len() > 1 {
        op["x-additional-scopes"] = json!(scopes[1..]);
    }
    if !scopes.is_empty() {
        let all: Vec<String> = scopes.iter().map(|s| format!("`{s}`")).collect();
        let noun = if all.len() == 1 { "scope" } else { "scopes" };
        let doc = op["description"].as_str().unwrap_or("").to_string();
        op["description"] = json!(
            format!("{doc}\n\nRequires {noun} {}.", all.join(" and "))
                .trim()
                .to_string()
        );
    }
    op["tags"] = json!([tag_of(path)]);

    let params = op["parameters"].as_array().cloned().unwrap_or_default();
    let in_query = params.iter().any(|p| p["in"] == "query");
    let idempotent = params
        .iter()
        .any(|p| p["in"] == "header" && p["name"] == "Idempotency-Key");
    let has_body = op["requestBody"].is_object();

    let mut errors = vec![401, 429, 500];
    if !scopes.is_empty() {
        errors.push(403);
    }
    if path.contains('{') {
        errors.push(404);
    }
    if has_body || in_query {
        errors.push(422);
    }
    if has_body {
        errors.push(413);
    }
    let mut responses = op["responses"].as_object().cloned().unwrap_or_default();
    for status in responses.keys() {
        if let Ok(s) = status.parse::<u16>()
            && s >= 400
            && !errors.contains(&s)
        {
            errors.push(s);
        }
    }
    for (status, reply) in responses.iter_mut() {
        if status.parse::<u16>().is_ok_and(|s| s < 400) {
            let mut headers = reply["headers"].as_object().cloned().unwrap_or_default();
            for name in RATE_HEADERS {
                headers.insert(name.into(), header_ref(name));
            }
            if idempotent {
                headers.insert(
                    "Idempotency-Replayed".into(),
                    header_ref("Idempotency-Replayed"),
                );
            }
            reply["headers"] = Value::Object(headers);
        }
    }
    errors.sort_unstable();
    for status in errors {
        let idem = status == 409 && idempotent;
        needed.push((status, idem));
        responses.insert(
            status.to_string(),
            json!({ "$ref": format!("#/components/responses/{}", error_name(status, idem)) }),
        );
    }
    op["responses"] = Value::Object(sort(responses));
    op
}

fn sort(m: Map<String, Value>) -> Map<String, Value> {
    let mut entries: Vec<(String, Value)> = m.into_iter().collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.into_iter().collect()
}

/// Free-text query parameters (strings without a format, pattern or list of
/// values) cannot hold NUL: the service refuses one (see `extract::Params`),
/// as PostgreSQL cannot compare such text. The document says so, and lists
/// the 422 on every operation with query parameters.
pub fn free_text_without_nul(doc: &mut Value) {
    let invalid = error_name(422, false);
    if doc
        .pointer(&format!("/components/responses/{invalid}"))
        .is_none()
    {
        doc["components"]["responses"][invalid] = error_response(422, false, true);
    }
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for item in paths.values_mut() {
        for method in METHODS {
            // `get_mut`, not indexing: indexing a missing key inserts null.
            let Some(params) = item
                .get_mut(*method)
                .and_then(|op| op.get_mut("parameters"))
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            for p in params.iter_mut().filter(|p| p["in"] == "query") {
                let Some(schema) = p.get_mut("schema") else {
                    continue;
                };
                let free = schema["type"] == "string"
                    && ["pattern", "format", "enum", "const"]
                        .iter()
                        .all(|k| schema.get(k).is_none());
                if free {
                    schema["pattern"] = json!("^[^\\u0000]*$");
                }
            }
            let queried = params.iter().any(|p| p["in"] == "query");
            if let Some(responses) = item
                .get_mut(*method)
                .and_then(|op| op.get_mut("responses"))
                .and_then(Value::as_object_mut)
                && queried
                && !responses.contains_key("422")
            {
                let target = format!("#/components/responses/{invalid}");
                responses.insert("422".into(), json!({ "$ref": target }));
            }
        }
    }
}
