//! The OpenAPI 3.1 document served at `GET /api/v1/openapi.json`, generated
//! from the code: every operation from its handler's `#[utoipa::path]`
//! annotation (registered with its route through `utoipa_axum::routes!`, so a
//! route cannot exist undocumented), every schema from the `model` type that
//! is serialised, and the service's conventions applied here once rather
//! than repeated on every handler:
//!
//! - the scope is the annotation's `security(("bearer" = ["scope"]))` (more
//!   than one: the rest are `x-additional-scopes`); it becomes
//!   `x-required-scope` (`none` for `("bearer" = [])`) and the description's
//!   last line; `security(())` marks an operation that takes no key;
//! - every keyed operation may answer 401, 429 and 500; one with a scope 403;
//!   one with a path parameter 404; one with a body or query parameters 422;
//!   one with a body 413; statuses of 400 and over listed in the annotation
//!   (409, 502, 503…) are added, all as the shared error replies of
//!   `components/responses` (an error status whose annotation names its own
//!   body keeps it);
//! - every keyed reply carries the `X-RateLimit-*` headers, and the success
//!   replies of an operation taking `Idempotency-Key` carry
//!   `Idempotency-Replayed`;
//! - `webhooks` holds one entry per event name: the signed POST a receiver
//!   gets, its body the event's schema from `model::events` (utoipa 5 has no
//!   webhooks of its own, so they are added here).

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Map, Value, json};
use utoipa::OpenApi;

use crate::model::error::ErrorBody;
use crate::model::events as payloads;
use crate::model::keys::Scope;
use crate::model::ops::OpenApiDocument;
use crate::model::webhooks::EventName;

const PREFIX: &str = "/api/v1";
const METHODS: &[&str] = &["get", "put", "post", "delete", "patch", "head", "options"];
const RATE_HEADERS: [&str; 3] = [
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
];

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Pigeonhole",
        description = "Every `/api/v1` call except this document carries `Authorization: Bearer <API key>`; \
each operation names the scope it needs in `x-required-scope` (`none`: any valid key, or no key where \
`security` is empty). Every `/api/v1` reply carries `X-RateLimit-Limit`, `X-RateLimit-Remaining` and \
`X-RateLimit-Reset`. Errors are `{error, code}` (see the `Error` schema). Paged lists take `limit` \
(at most 100, default 25) and `cursor`.",
        license(name = "MIT", identifier = "MIT"),
    ),
    servers((url = "/")),
    security(("bearer" = [])),
    components(schemas(ErrorBody, Scope)),
)]
struct ApiDoc;

/// The rendered document, built once.
pub fn spec() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| render(&super::public_openapi(), &super::generated_openapi()))
}

/// This OpenAPI document
///
/// The OpenAPI 3.1 description of every route. No key needed.
#[utoipa::path(get, path = "/api/v1/openapi.json", operation_id = "openapi", security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document.", body = OpenApiDocument)))]
pub async fn document() -> impl IntoResponse {
    static BODY: OnceLock<String> = OnceLock::new();
    let body = BODY.get_or_init(|| spec().to_string());
    ([(header::CONTENT_TYPE, "application/json")], body.as_str())
}

fn render(public: &utoipa::openapi::OpenApi, keyed: &utoipa::openapi::OpenApi) -> Value {
    let mut doc = to_value(&ApiDoc::openapi());
    doc["info"]["version"] = json!(env!("CARGO_PKG_VERSION"));
    doc["info"]["summary"] =
        json!("Self-hosted mail service: send through SES, threaded inbox, signed webhooks.");
    doc["paths"] = json!({});
    doc["components"]["securitySchemes"] = json!({
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key, created with `pigeonhole keys create`.",
        },
    });
    doc["components"]["headers"] = components_headers();
    doc["components"]["responses"] = json!({});
    let mut needed: Vec<(u16, bool)> = Vec::new();
    for (generated, prefix) in [(public, ""), (keyed, PREFIX)] {
        let generated = to_value(generated);
        for (path, item) in generated["paths"].as_object().into_iter().flatten() {
            let full = format!("{prefix}{path}");
            for (method, op) in item.as_object().into_iter().flatten() {
                if !METHODS.contains(&method.as_str()) {
                    continue;
                }
                let op = if is_public(op) {
                    public_operation(&full, op.clone())
                } else {
                    conventional(&full, op.clone(), &mut needed)
                };
                let slot = &mut doc["paths"][&full];
                if !slot.is_object() {
                    *slot = json!({});
                }
                slot[method] = op;
            }
        }
        for (name, schema) in generated["components"]["schemas"]
            .as_object()
            .into_iter()
            .flatten()
        {
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
    free_text_without_nul(&mut doc);
    doc["tags"] = tags(&doc);
    doc["webhooks"] = webhooks(&mut doc);
    doc
}

/// The schema name of the body a receiver gets for `event`
/// (`EmailSentEvent`).
pub fn event_schema_name(event: EventName) -> String {
    format!("{event:?}Event")
}

/// One entry per event name, the schemas they use added to
/// `components/schemas`.
fn webhooks(doc: &mut Value) -> Value {
    for (name, schema) in payloads::data_schemas() {
        let slot = &mut doc["components"]["schemas"][&name];
        if slot.is_null() {
            *slot = serde_json::to_value(schema).unwrap_or_default();
        }
    }
    let delivery_id = json!({ "$ref": format!("#/components/schemas/{}", <crate::ids::DeliveryId as utoipa::ToSchema>::name()) });
    let mut out = Map::new();
    for event in EventName::ALL {
        let schema_name = event_schema_name(event);
        doc["components"]["schemas"][&schema_name] =
            serde_json::to_value(payloads::body_schema(event)).unwrap_or_default();
        let name = event.as_str();
        out.insert(
            name.to_string(),
            json!({ "post": {
                "operationId": format!("on{event:?}"),
                "summary": format!("The `{name}` event"),
                "description": format!(
                    "Posted to every enabled endpoint subscribed to `{name}` (or `*`), signed as \
                     Standard Webhooks. Retried after `PIGEONHOLE_WEBHOOK_RETRY_DELAYS` until a \
                     2xx reply; each attempt is in `/api/v1/webhook-deliveries`."
                ),
                "security": [],
                "parameters": [
                    {
                        "name": "webhook-id",
                        "in": "header",
                        "required": true,
                        "description": "The delivery id: the body's `id`, the same across retries and replays.",
                        "schema": delivery_id,
                    },
                    {
                        "name": "webhook-timestamp",
                        "in": "header",
                        "required": true,
                        "description": "When this attempt was signed, in Unix seconds.",
                        "schema": { "type": "string", "pattern": "^[0-9]+$" },
                    },
                    {
                        "name": "webhook-signature",
                        "in": "header",
                        "required": true,
                        "description": "`v1,` + base64 HMAC-SHA256 of `{webhook-id}.{webhook-timestamp}.{body}`, \
                            keyed with the endpoint secret's bytes (the base64 after `whsec_`). \
                            Space-separated when there are several.",
                        "schema": { "type": "string", "pattern": "^v1,[A-Za-z0-9+/]+=*( v1,[A-Za-z0-9+/]+=*)*$" },
                    },
                ],
                "requestBody": {
                    "required": true,
                    "content": { "application/json": {
                        "schema": { "$ref": format!("#/components/schemas/{schema_name}") },
                    } },
                },
                "responses": {
                    "2XX": { "description": "Received. Any other status, or none within \
                        `PIGEONHOLE_WEBHOOK_TIMEOUT`, fails the attempt." },
                },
            } }),
        );
    }
    Value::Object(out)
}

fn to_value(doc: &utoipa::openapi::OpenApi) -> Value {
    serde_json::to_value(doc).unwrap_or_else(|e| {
        tracing::error!(error = %e, "the generated OpenAPI document could not be rendered");
        json!({})
    })
}

/// `security(())` in an annotation: `[{}]`, no key at all.
fn is_public(op: &Value) -> bool {
    op["security"].as_array().is_some_and(|a| {
        a.iter()
            .all(|s| s.as_object().is_some_and(|o| o.is_empty()))
    })
}

/// An operation that takes no key: `security: []`, no rate-limit headers,
/// its listed error statuses answered with the `Error` schema.
fn public_operation(path: &str, mut op: Value) -> Value {
    op["security"] = json!([]);
    op["x-required-scope"] = json!("none");
    op["tags"] = json!([tag_of(path)]);
    if let Some(responses) = op["responses"].as_object_mut() {
        for (status, reply) in responses.iter_mut() {
            if let Ok(s) = status.parse::<u16>()
                && s >= 400
                && reply["content"].is_null()
            {
                *reply = error_response(s, false, false);
            }
        }
    }
    op
}

/// The tags in use, in the order of first use, with their descriptions.
fn tags(doc: &Value) -> Value {
    let mut seen: Vec<String> = Vec::new();
    for item in doc["paths"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, i)| i)
    {
        for op in item.as_object().into_iter().flatten().map(|(_, o)| o) {
            for t in op["tags"].as_array().into_iter().flatten() {
                if let Some(t) = t.as_str()
                    && !seen.iter().any(|s| s == t)
                {
                    seen.push(t.to_string());
                }
            }
        }
    }
    seen.iter()
        .map(|t| match tag_doc(t) {
            "" => json!({ "name": t }),
            doc => json!({ "name": t, "description": doc }),
        })
        .collect()
}

fn tag_of(path: &str) -> &str {
    match path.strip_prefix("/api/v1/") {
        Some("openapi.json") | None => "operations",
        Some(rest) => rest.split('/').next().unwrap_or("operations"),
    }
}

fn tag_doc(tag: &str) -> &'static str {
    match tag {
        "operations" => "Health, metrics, open tracking, SNS and this document.",
        "me" => "The calling API key.",
        "provider" => "The provider that transmits mail.",
        "emails" => "Sending, the sent-mail list and message reads.",
        "suppressions" => "Addresses mail will not be sent to.",
        "threads" => "Conversations: filters, changes, deletion and replies.",
        "drafts" => "Unsent messages.",
        "messages" => "Received mail.",
        "labels" => "Names threads can carry.",
        "contacts" => "People the mailboxes have exchanged mail with.",
        "domains" => "Sending domains (identities at the provider).",
        "mailboxes" => "Addresses that hold mail.",
        "webhooks" => "Webhook endpoints.",
        "webhook-deliveries" => "Every delivery attempt, and replays.",
        _ => "",
    }
}

fn error_code(status: u16) -> &'static str {
    match status {
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        409 => "conflict",
        413 => "payload_too_large",
        422 => "invalid_request",
        429 => "rate_limited",
        _ => "server_error",
    }
}

fn error_doc(status: u16, idempotent: bool) -> &'static str {
    match status {
        401 => "The key is missing, mistyped or revoked.",
        403 => {
            "The key lacks the scope the operation needs (`x-required-scope`; the body then \
             carries `required_scope` and `scopes`), or the call needs a key that reaches more \
             of the account."
        }
        404 => "No such object, or none the key may reach (the two are indistinguishable).",
        409 if idempotent => {
            "The `Idempotency-Key` was already used with a different request, or a request with \
             it is still in progress (then with `Retry-After`)."
        }
        409 => "The object already exists, or the destructive call lacks its confirmation flag.",
        413 => "The request body is over 30 MB.",
        422 => "A field is wrong: `param` names the first, `error` lists all.",
        429 => "Too many calls this minute; retry after `Retry-After` seconds.",
        500 => "The instance failed; retry.",
        502 => "The provider or an upstream service could not be reached.",
        503 => {
            "The database, the provider or an upstream service is unavailable, or the instance \
             has no memory free for a large request body now; retry (after `Retry-After` when \
             given)."
        }
        507 => "The database is out of space; retry after `Retry-After`.",
        _ => "Error.",
    }
}

/// The name under `components/responses` of a keyed operation's error reply.
fn error_name(status: u16, idempotent: bool) -> &'static str {
    match status {
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 if idempotent => "IdempotencyConflict",
        409 => "Conflict",
        413 => "PayloadTooLarge",
        422 => "InvalidRequest",
        429 => "RateLimited",
        500 => "ServerError",
        502 => "BadGateway",
        503 => "ServiceUnavailable",
        507 => "InsufficientStorage",
        _ => "Error",
    }
}

/// An error reply; `keyed` replies carry the rate-limit headers.
fn error_response(status: u16, idempotent: bool, keyed: bool) -> Value {
    let mut headers = Map::new();
    if keyed {
        for name in RATE_HEADERS {
            headers.insert(name.into(), header_ref(name));
        }
    }
    if matches!(status, 429 | 503 | 507) || (status == 409 && idempotent) {
        headers.insert("Retry-After".into(), header_ref("Retry-After"));
    }
    let doc = match status {
        403 if !keyed => {
            "Refused: a bad or missing signature, an untrusted signing-certificate host, or a \
             topic not on the allow-list."
        }
        _ => error_doc(status, idempotent),
    };
    let mut resp = json!({
        "description": doc,
        "content": { "application/json": {
            "schema": { "$ref": "#/components/schemas/Error" },
            "example": { "error": doc, "code": error_code(status) },
        } },
    });
    if !headers.is_empty() {
        resp["headers"] = Value::Object(headers);
    }
    resp
}

fn header_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/headers/{name}") })
}

fn components_headers() -> Value {
    json!({
        "X-RateLimit-Limit": {
            "description": "Calls allowed per minute for this key.",
            "schema": { "type": "integer" },
        },
        "X-RateLimit-Remaining": {
            "description": "Calls left in the current one-minute window.",
            "schema": { "type": "integer" },
        },
        "X-RateLimit-Reset": {
            "description": "When the current window ends, in Unix seconds.",
            "schema": { "type": "integer" },
        },
        "Retry-After": {
            "description": "Seconds to wait before retrying.",
            "schema": { "type": "integer" },
        },
        "Idempotency-Replayed": {
            "description": "`true` when this reply is the stored reply of an earlier call with the same `Idempotency-Key`.",
            "schema": { "type": "string", "enum": ["true"] },
        },
    })
}

/// One keyed operation with the conventions above applied.
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

    // 503 and 507: the database unreachable or out of space (store::fault).
    let mut errors = vec![401, 429, 500, 503, 507];
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
        let success = status.parse::<u16>().is_ok_and(|s| s < 400);
        // Success replies, and error replies with a body of their own.
        if success || reply["content"].is_object() {
            let mut headers = reply["headers"].as_object().cloned().unwrap_or_default();
            for name in RATE_HEADERS {
                headers.insert(name.into(), header_ref(name));
            }
            if idempotent && success {
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
        // An error status the annotation gives a body of its own (a ping's
        // 502 carries the full result) keeps it.
        if responses
            .get(&status.to_string())
            .is_some_and(|r| r["content"].is_object())
        {
            continue;
        }
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
