//! The OpenAPI 3.1 document served at `GET /api/v1/openapi.json`.
//!
//! Built in code from two parts: [`OPS`], one row per route of the router
//! (method, path, scope, parameters, request and reply shapes, the error
//! statuses that apply), and [`schemas`], the reusable component schemas that
//! mirror the `to_json`/`summary_json`/`full_json` shapes of `core` and the
//! request structs of the handlers. [`spec`] renders them once and caches the
//! result. A route added to `api::router` without a row here fails
//! `tests/api/openapi.rs`.
//!
//! Being replaced: operations whose handlers carry `#[utoipa::path]` are
//! generated (`api::doc`) and laid over this document; their rows here are
//! gone.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use serde_json::{Map, Value, json};

use crate::api::pagination::{DEFAULT_LIMIT, MAX_LIMIT};

/// Who may call an operation (only public operations are left here).
#[allow(dead_code)]
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// No API key (health, metrics, the tracking image, SNS, this document).
    Public,
    /// A key holding this scope.
    Scope(&'static str),
}

/// A request or reply body.
#[derive(Clone, Copy)]
enum Content {
    None,
    /// `application/json` with a component schema.
    Json(&'static str),
    /// A JSON component schema accepted under several media types.
    JsonAs(&'static [&'static str], &'static str),
    /// Raw bytes of a media type: (media type, schema).
    Raw(&'static str, RawKind),
}

#[derive(Clone, Copy)]
enum RawKind {
    Binary,
    Text,
}

#[derive(Clone, Copy)]
struct Reply {
    status: u16,
    doc: &'static str,
    content: Content,
}

const fn ok(status: u16, doc: &'static str, content: Content) -> Reply {
    Reply {
        status,
        doc,
        content,
    }
}

/// One operation of the router.
struct Op {
    method: &'static str,
    /// OpenAPI path template; `{name}` matches axum's `{name}`.
    path: &'static str,
    id: &'static str,
    access: Access,
    summary: &'static str,
    doc: &'static str,
    /// Descriptions of the path parameters, by name.
    path_params: &'static [(&'static str, &'static str)],
    /// Takes `limit` and `cursor` and answers the List envelope with `next_cursor`.
    paged: bool,
    /// Honours the `Idempotency-Key` header.
    idempotent: bool,
    body: Content,
    replies: &'static [Reply],
    /// Error statuses that apply, each answered with the `Error` schema.
    errors: &'static [u16],
    /// Scopes needed besides `access`'s, checked after it.
    also: &'static [&'static str],
}

const BASE: Op = Op {
    method: "get",
    path: "",
    id: "",
    access: Access::Public,
    summary: "",
    doc: "",
    path_params: &[],
    paged: false,
    idempotent: false,
    body: Content::None,
    replies: &[],
    errors: &[],
    also: &[],
};

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

// Error sets (spec §7). 401 and 429 apply to every keyed call, 500 to all.

/// Every route of `api::router`, in router order.
static OPS: &[Op] = &[
    Op {
        path: "/healthz",
        id: "healthz",
        summary: "Liveness",
        doc: "Answers as long as the process serves HTTP. No key needed.",
        replies: &[ok(200, "The process is alive.", Content::Json("Health"))],
        ..BASE
    },
    Op {
        path: "/readyz",
        id: "readyz",
        summary: "Readiness",
        doc: "Checks that the database answers. No key needed.",
        replies: &[
            ok(200, "Ready to serve.", Content::Json("Readiness")),
            ok(
                503,
                "The database is unreachable.",
                Content::Json("Readiness"),
            ),
        ],
        ..BASE
    },
    Op {
        path: "/metrics",
        id: "metrics",
        summary: "Prometheus metrics",
        doc: "Request counters and latencies in the Prometheus text format (0.0.4). No key needed.",
        replies: &[ok(
            200,
            "Metrics in the Prometheus text exposition format.",
            Content::Raw("text/plain", RawKind::Text),
        )],
        ..BASE
    },
    Op {
        path: "/t/o/{token}",
        id: "trackOpen",
        summary: "Open-tracking image",
        doc: "The 1×1 image placed in HTML mail. Loading it sets the message's `opened_at` (the \
              first time), increments `open_count`, records an `open` event and emits \
              `email.opened`. Unknown tokens get the same image, so the endpoint reveals nothing. \
              No key needed.",
        path_params: &[(
            "token",
            "The message's 32-character open token, optionally followed by `.gif`.",
        )],
        replies: &[ok(
            200,
            "A transparent 1×1 GIF, never cached.",
            Content::Raw("image/gif", RawKind::Binary),
        )],
        errors: &[500],
        ..BASE
    },
    Op {
        method: "post",
        path: "/sns/ses",
        id: "receiveSns",
        summary: "Amazon SNS deliveries from SES",
        doc: "Receives SES sending events and SES inbound mail through Amazon SNS. No API key: \
              the SNS signature, the signing certificate's host and the topic allow-list \
              (`PIGEONHOLE_SNS_TOPICS`) decide what is accepted. Subscription confirmations are \
              confirmed by calling the `SubscribeURL`.",
        body: Content::JsonAs(&["text/plain", "application/json"], "SnsMessage"),
        replies: &[ok(
            200,
            "Accepted: a notification was applied, or a subscription confirmed.",
            Content::Json("SnsResult"),
        )],
        errors: &[403, 413, 422, 500, 502, 503],
        ..BASE
    },
    Op {
        path: "/api/v1/openapi.json",
        id: "openapi",
        summary: "This OpenAPI document",
        doc: "The OpenAPI 3.1 description of every route. No key needed.",
        replies: &[ok(
            200,
            "The OpenAPI 3.1 document.",
            Content::Json("OpenApiDocument"),
        )],
        ..BASE
    },
];

// ---------------------------------------------------------------- schemas

fn r(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn string(doc: &str) -> Value {
    json!({ "type": "string", "description": doc })
}

fn boolean(doc: &str) -> Value {
    json!({ "type": "boolean", "description": doc })
}

fn time(doc: &str) -> Value {
    json!({ "type": "string", "format": "date-time", "description": doc })
}

fn constant(value: &str) -> Value {
    json!({ "type": "string", "const": value })
}

/// An object schema whose every listed property is required.
fn object(doc: &str, props: Value) -> Value {
    let required: Vec<String> = props
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let mut v = json!({ "type": "object", "required": required, "properties": props });
    if !doc.is_empty() {
        v["description"] = json!(doc);
    }
    v
}

/// An object schema whose properties are all optional.
fn input(doc: &str, required: &[&str], props: Value) -> Value {
    let mut v = json!({ "type": "object", "description": doc, "properties": props });
    if !required.is_empty() {
        v["required"] = json!(required);
    }
    v
}

/// The component schemas.
fn schemas() -> Value {
    let list: Vec<(&str, Value)> = vec![
        (
            "Error",
            json!({
                "type": "object",
                "description": "Every non-2xx reply (spec §7).",
                "required": ["error", "code"],
                "properties": {
                    "error": string("Human-readable; for 422 it lists every problem."),
                    "code": {
                        "type": "string",
                        "description": "For programs. The last five come from the HTTP edge on any route: \
                                        405 `method_not_allowed`, 408 `request_timeout` (the body did not arrive \
                                        in time), 414 `uri_too_long`, 431 `headers_too_large`, \
                                        and `bad_request` for a request the framework could not read (such as a \
                                        malformed path).",
                        "enum": ["unauthorized", "forbidden", "not_found", "conflict",
                                 "payload_too_large", "invalid_request", "rate_limited", "server_error",
                                 "method_not_allowed", "request_timeout", "uri_too_long", "headers_too_large",
                                 "bad_request"],
                    },
                    "param": string("422 only: the first offending field (a JSON path such as `to[1]`, or `body`)."),
                    "required_scope": { "$ref": "#/components/schemas/Scope", "description": "403 for a missing scope: the scope the call needs." },
                    "scopes": { "type": "array", "items": r("Scope"), "description": "403 for a missing scope: the key's scopes." },
                    "id": string("500 from a send only: the provider accepted the message but its full record failed. The message's id; it is listed with status `failed`. It was sent: do not send it again (an `Idempotency-Key` retry replays this reply)."),
                    "provider_message_id": string("With `id`: the provider's id of the message it accepted."),
                },
            }),
        ),
        ("Scope", json!({ "type": "string", "enum": SCOPES })),
        (
            "List",
            json!({
                "type": "object",
                "description": "The list envelope. Paged lists take `limit` and `cursor`; unpaged ones always answer `has_more: false`.",
                "required": ["object", "data", "has_more"],
                "properties": {
                    "object": constant("list"),
                    "data": { "type": "array", "items": {} },
                    "has_more": boolean("Whether another page follows."),
                    "next_cursor": string("Present when `has_more`: pass it back untouched as `cursor`. Opaque."),
                },
            }),
        ),
        (
            "Health",
            object("Liveness.", json!({ "status": constant("ok") })),
        ),
        (
            "Readiness",
            json!({
                "type": "object",
                "required": ["status"],
                "properties": {
                    "status": { "type": "string", "enum": ["ready", "unavailable"] },
                    "error": string("Present when unavailable."),
                },
            }),
        ),
        (
            "OpenApiDocument",
            json!({ "type": "object", "description": "An OpenAPI 3.1 document.", "required": ["openapi", "info", "paths"] }),
        ),
        (
            "LabelRef",
            object(
                "A label as embedded in a thread.",
                json!({
                    "object": constant("label"),
                    "id": string("`lbl_` prefix."),
                    "name": string("Label name."),
                }),
            ),
        ),
        (
            "Label",
            object(
                "A label threads can carry.",
                json!({
                    "object": constant("label"),
                    "id": string("`lbl_` prefix."),
                    "name": string("Unique label name."),
                    "color": { "type": "string", "pattern": "^#[0-9a-fA-F]{6}$" },
                    "created_at": time("When it was created."),
                }),
            ),
        ),
        (
            "LabelCreate",
            input(
                "The body of `POST /labels`.",
                &["name"],
                json!({
                    "name": string("Unique label name."),
                    "color": { "type": "string", "pattern": "^#[0-9a-fA-F]{6}$", "description": "Hex colour; a default is used when absent." },
                }),
            ),
        ),
        (
            "LabelUpdate",
            input(
                "The body of `PATCH /labels/{id}`.",
                &[],
                json!({
                    "name": string("New unique name."),
                    "color": { "type": "string", "pattern": "^#[0-9a-fA-F]{6}$" },
                }),
            ),
        ),
        (
            "LabelDeleted",
            object(
                "A deleted label.",
                json!({
                    "object": constant("label"),
                    "id": string("`lbl_` prefix."),
                    "deleted": { "const": true },
                }),
            ),
        ),
        (
            "SnsMessage",
            input(
                "An Amazon SNS message (sent with `Content-Type: text/plain`).",
                &[
                    "Type",
                    "MessageId",
                    "TopicArn",
                    "Message",
                    "Timestamp",
                    "SignatureVersion",
                    "Signature",
                    "SigningCertURL",
                ],
                json!({
                    "Type": { "type": "string", "enum": ["Notification", "SubscriptionConfirmation", "UnsubscribeConfirmation"] },
                    "MessageId": string("SNS message id; repeats are ignored."),
                    "Token": string("Subscription token."),
                    "TopicArn": string("Must be on the allow-list."),
                    "Subject": string("Subject."),
                    "Message": string("For notifications, the SES event or receipt notification as JSON text."),
                    "Timestamp": time("When SNS sent it."),
                    "SignatureVersion": { "type": "string", "enum": ["1", "2"] },
                    "Signature": string("Base64 signature."),
                    "SigningCertURL": { "type": "string", "format": "uri" },
                    "SubscribeURL": { "type": "string", "format": "uri" },
                    "UnsubscribeURL": { "type": "string", "format": "uri" },
                }),
            ),
        ),
        (
            "SnsResult",
            json!({
                "type": "object",
                "description": "`{ok: true}` for notifications; `{confirmed: true, topic_arn}` for a confirmed subscription.",
                "properties": {
                    "ok": { "const": true },
                    "confirmed": { "const": true },
                    "topic_arn": string("The confirmed topic."),
                },
            }),
        ),
    ];
    Value::Object(list.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

// ---------------------------------------------------------------- rendering

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
            "The provider or an upstream service is unavailable, or (with `Retry-After`) the \
             instance has no memory free for a large request body now; retry."
        }
        _ => "Error.",
    }
}

/// The name under `components/responses` of a keyed operation's error reply.
pub(super) fn error_name(status: u16, idempotent: bool) -> &'static str {
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
        _ => "Error",
    }
}

/// An error reply; `keyed` replies carry the rate-limit headers.
pub(super) fn error_response(status: u16, idempotent: bool, keyed: bool) -> Value {
    let mut headers = Map::new();
    if keyed {
        for name in RATE_HEADERS {
            headers.insert(name.into(), header_ref(name));
        }
    }
    if status == 429 || (status == 409 && idempotent) {
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
            "schema": r("Error"),
            "example": { "error": doc, "code": error_code(status) },
        } },
    });
    if !headers.is_empty() {
        resp["headers"] = Value::Object(headers);
    }
    resp
}

/// `components/responses`: the error replies of keyed operations.
fn components_responses() -> Value {
    let mut out = Map::new();
    for op in OPS.iter().filter(|op| op.access != Access::Public) {
        for &status in op.errors {
            let idem = status == 409 && op.idempotent;
            out.entry(error_name(status, idem))
                .or_insert_with(|| error_response(status, idem, true));
        }
    }
    Value::Object(out)
}

pub(super) const RATE_HEADERS: [&str; 3] = [
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
];

pub(super) fn header_ref(name: &str) -> Value {
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

fn content(c: Content) -> Option<Value> {
    match c {
        Content::None => None,
        Content::Json(name) => Some(json!({ "application/json": { "schema": r(name) } })),
        Content::JsonAs(media, name) => {
            let mut m = Map::new();
            for t in media {
                m.insert((*t).to_string(), json!({ "schema": r(name) }));
            }
            Some(Value::Object(m))
        }
        Content::Raw(media, kind) => {
            let schema = match kind {
                RawKind::Binary => json!({ "type": "string", "contentMediaType": media }),
                RawKind::Text => json!({ "type": "string" }),
            };
            Some(json!({ media: { "schema": schema } }))
        }
    }
}

/// `{name}` segments of a path template, in order.
fn path_vars(path: &str) -> Vec<&str> {
    path.split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .collect()
}

pub(super) fn tag_of(path: &str) -> &str {
    match path.strip_prefix("/api/v1/") {
        Some("openapi.json") | None => "operations",
        Some(rest) => rest.split('/').next().unwrap_or("operations"),
    }
}

fn operation(op: &Op) -> Value {
    let keyed = op.access != Access::Public;
    let mut params = Vec::new();
    for var in path_vars(op.path) {
        let doc = op
            .path_params
            .iter()
            .find(|(n, _)| *n == var)
            .map(|(_, d)| *d)
            .unwrap_or("Identifier.");
        params.push(json!({
            "name": var, "in": "path", "required": true, "description": doc,
            "schema": { "type": "string" },
        }));
    }
    if op.paged {
        params.push(json!({
            "name": "limit", "in": "query", "required": false,
            "description": format!("Page size, 1 to {MAX_LIMIT}; default {DEFAULT_LIMIT}."),
            "schema": { "type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT },
        }));
        params.push(json!({
            "name": "cursor", "in": "query", "required": false,
            "description": "The `next_cursor` of the previous page, passed back untouched.",
            "schema": { "type": "string" },
        }));
    }
    if op.idempotent {
        params.push(json!({
            "name": "Idempotency-Key", "in": "header", "required": false,
            "description": "1 to 255 characters. Repeating the call with the same key and request \
                            replays the first reply (with `Idempotency-Replayed: true`) instead of \
                            sending again; a different request with the same key is 409. Kept 24 \
                            hours, per API key and endpoint.",
            "schema": { "type": "string", "minLength": 1, "maxLength": 255 },
        }));
    }

    let rate_headers = || {
        let mut h = Map::new();
        if keyed {
            for name in RATE_HEADERS {
                h.insert(name.into(), header_ref(name));
            }
        }
        h
    };

    let mut responses = Map::new();
    for reply in op.replies {
        let mut resp = json!({ "description": reply.doc });
        if let Some(c) = content(reply.content) {
            resp["content"] = c;
        }
        let mut headers = rate_headers();
        if op.idempotent {
            headers.insert(
                "Idempotency-Replayed".into(),
                header_ref("Idempotency-Replayed"),
            );
        }
        if !headers.is_empty() {
            resp["headers"] = Value::Object(headers);
        }
        responses.insert(reply.status.to_string(), resp);
    }
    for &status in op.errors {
        let idem = status == 409 && op.idempotent;
        let resp = if keyed {
            json!({ "$ref": format!("#/components/responses/{}", error_name(status, idem)) })
        } else {
            error_response(status, idem, false)
        };
        responses.insert(status.to_string(), resp);
    }

    let scope = match op.access {
        Access::Scope(s) => s,
        Access::Public => "none",
    };
    let mut out = json!({
        "operationId": op.id,
        "summary": op.summary,
        "tags": [tag_of(op.path)],
        "x-required-scope": scope,
        "responses": responses,
    });
    let mut doc = op.doc.to_string();
    if let Access::Scope(s) = op.access {
        let mut all = vec![format!("`{s}`")];
        all.extend(op.also.iter().map(|x| format!("`{x}`")));
        let noun = if all.len() == 1 { "scope" } else { "scopes" };
        doc = format!("{doc}\n\nRequires {noun} {}.", all.join(" and "))
            .trim()
            .to_string();
    }
    if !op.also.is_empty() {
        out["x-additional-scopes"] = json!(op.also);
    }
    if !doc.is_empty() {
        out["description"] = json!(doc);
    }
    if !params.is_empty() {
        out["parameters"] = Value::Array(params);
    }
    if let Some(c) = content(op.body) {
        out["requestBody"] = json!({ "required": true, "content": c });
    }
    if !keyed {
        out["security"] = json!([]);
    }
    out
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

fn tags() -> Value {
    let mut seen: Vec<&str> = Vec::new();
    for op in OPS {
        let t = tag_of(op.path);
        if !seen.contains(&t) {
            seen.push(t);
        }
    }
    seen.iter()
        .map(|t| {
            let doc = tag_doc(t);
            if doc.is_empty() {
                json!({ "name": t })
            } else {
                json!({ "name": t, "description": doc })
            }
        })
        .collect()
}

fn render() -> Value {
    let mut paths = Map::new();
    for op in OPS {
        let item = paths
            .entry(op.path.to_string())
            .or_insert_with(|| json!({}));
        item[op.method] = operation(op);
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Pigeonhole",
            "version": env!("CARGO_PKG_VERSION"),
            "summary": "Self-hosted mail service: send through SES, threaded inbox, signed webhooks.",
            "description": "Every `/api/v1` call except this document carries `Authorization: Bearer <API key>`; \
                            each operation names the scope it needs in `x-required-scope` (`none`: any valid key, \
                            or no key where `security` is empty). Every `/api/v1` reply carries `X-RateLimit-Limit`, \
                            `X-RateLimit-Remaining` and `X-RateLimit-Reset`. Errors are `{error, code}` (see the \
                            `Error` schema). Paged lists take `limit` (at most 100, default 25) and `cursor`.",
            "license": { "name": "MIT", "identifier": "MIT" },
        },
        "servers": [{ "url": "/" }],
        "security": [{ "bearer": [] }],
        "tags": tags(),
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key, created with `pigeonhole keys create`.",
                },
            },
            "headers": components_headers(),
            "responses": components_responses(),
            "schemas": schemas(),
        },
    })
}

/// The rendered document, built once.
pub fn spec() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = render();
        super::doc::overlay(&mut doc, &super::generated_openapi());
        doc
    })
}

/// `GET /api/v1/openapi.json`: the cached document, serialised once.
pub async fn document() -> impl IntoResponse {
    static BODY: OnceLock<String> = OnceLock::new();
    let body = BODY.get_or_init(|| spec().to_string());
    ([(header::CONTENT_TYPE, "application/json")], body.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_parameter_is_described_and_ids_are_unique() {
        let mut ids = std::collections::HashSet::new();
        for op in OPS {
            assert!(ids.insert(op.id), "duplicate operationId {}", op.id);
            for var in path_vars(op.path) {
                assert!(
                    op.path_params.iter().any(|(n, _)| *n == var),
                    "{} {}: describe path parameter {var}",
                    op.method,
                    op.path
                );
            }
            for (n, _) in op.path_params {
                assert!(
                    path_vars(op.path).contains(n),
                    "{} {}: {n} is not in the path",
                    op.method,
                    op.path
                );
            }
            assert!(!op.replies.is_empty(), "{} has no success reply", op.id);
        }
    }

    #[test]
    fn every_schema_reference_resolves() {
        let doc = spec();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let headers = doc["components"]["headers"].as_object().unwrap();
        let responses = doc["components"]["responses"].as_object().unwrap();
        fn walk(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(m) => {
                    if let Some(Value::String(s)) = m.get("$ref") {
                        out.push(s.clone());
                    }
                    m.values().for_each(|x| walk(x, out));
                }
                Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
                _ => {}
            }
        }
        let mut refs = Vec::new();
        walk(doc, &mut refs);
        for r in refs {
            if let Some(name) = r.strip_prefix("#/components/schemas/") {
                assert!(schemas.contains_key(name), "unresolved {r}");
            } else if let Some(name) = r.strip_prefix("#/components/headers/") {
                assert!(headers.contains_key(name), "unresolved {r}");
            } else if let Some(name) = r.strip_prefix("#/components/responses/") {
                assert!(responses.contains_key(name), "unresolved {r}");
            } else {
                panic!("unexpected reference {r}");
            }
        }
    }
}
