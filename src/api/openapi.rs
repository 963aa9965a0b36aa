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
use crate::core::validate::DOMAIN_NAME_PATTERN as DOMAIN_PATTERN;

/// Who may call an operation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// No API key (health, metrics, the tracking image, SNS, this document).
    Public,
    /// Any valid API key; no scope.
    AnyKey,
    /// A key holding this scope.
    Scope(&'static str),
}

/// Type of a query parameter.
#[derive(Clone, Copy)]
enum Ty {
    Str,
    Bool,
    Address,
    Enum(&'static [&'static str]),
}

#[derive(Clone, Copy)]
struct Query {
    name: &'static str,
    ty: Ty,
    doc: &'static str,
}

const fn q(name: &'static str, ty: Ty, doc: &'static str) -> Query {
    Query { name, ty, doc }
}

/// A request or reply body.
#[derive(Clone, Copy)]
enum Content {
    None,
    /// `application/json` with a component schema.
    Json(&'static str),
    /// `application/json`: the List envelope with items of a component schema.
    List(&'static str),
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
    query: &'static [Query],
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
    query: &[],
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
const READ: &[u16] = &[401, 403, 429, 500];
const READ_ONE: &[u16] = &[401, 403, 404, 429, 500];
const READ_LIST: &[u16] = &[401, 403, 422, 429, 500];

/// Every route of `api::router`, in router order.
static OPS: &[Op] = &[
    // ---- outside /api/v1: operations, tracking, SNS
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
    // ---- /api/v1
    Op {
        path: "/api/v1/me",
        id: "getMe",
        access: Access::AnyKey,
        summary: "The calling API key",
        doc: "The key that made the call: its scopes, reach and rate limit. Needs no scope.",
        replies: &[ok(200, "The calling key.", Content::Json("ApiKey"))],
        errors: &[401, 429, 500],
        ..BASE
    },
    Op {
        path: "/api/v1/provider",
        id: "getProvider",
        access: Access::AnyKey,
        summary: "The provider and its sending quota",
        doc: "Which provider transmits mail, its region and its current sending quota (`quota` \
              is null when the provider could not be asked). Needs no scope.",
        replies: &[ok(200, "The provider.", Content::Json("Provider"))],
        errors: &[401, 429, 500],
        ..BASE
    },
    Op {
        method: "post",
        path: "/api/v1/emails",
        id: "sendEmail",
        access: Access::Scope("emails:send"),
        summary: "Send an email",
        doc: "Sends one message from an address on a verified domain. Answers 202 once the \
              provider has accepted it; delivery is reported later as the message's `status` and \
              as webhook events. A key that may not send as `from` gets 403; a suppressed \
              recipient, a bad field or a provider rejection gets 422 (a rejection is recorded \
              with status `rejected`). 429 with `Retry-After` also means the provider's 24-hour \
              quota cannot admit the recipients, or its account's sending is paused (nothing \
              recorded), or the provider throttled the send (recorded `failed`); 503, the \
              provider could not be reached (recorded `failed`), or, with `Retry-After`, the \
              instance had no memory free for a large body within \
              `PIGEONHOLE_MESSAGE_MEMORY_WAIT` (nothing recorded). A 500 whose body carries `id` \
              and `provider_message_id` means the provider accepted the message but its full \
              record failed: it was sent, it is listed with status `failed` and that `error`, \
              and a retry under the same `Idempotency-Key` replays this reply instead of \
              sending again.",
        idempotent: true,
        body: Content::Json("SendRequest"),
        replies: &[ok(
            202,
            "Accepted by the provider.",
            Content::Json("SendResult"),
        )],
        errors: &[401, 403, 409, 413, 422, 429, 500, 503],
        ..BASE
    },
    Op {
        method: "post",
        path: "/api/v1/emails/batch",
        id: "sendEmailBatch",
        access: Access::Scope("emails:send"),
        summary: "Send up to 100 emails",
        doc: "Every message is attempted, in order, one at a time, and recorded whatever \
              its outcome; the reply comes once every attempt is recorded. 202 when all were \
              accepted, 207 when some were not; the per-message outcome is in `data`. The \
              `Idempotency-Key` covers the whole array.",
        idempotent: true,
        body: Content::Json("BatchRequest"),
        replies: &[
            ok(
                202,
                "Every message was accepted.",
                Content::Json("BatchResult"),
            ),
            ok(
                207,
                "Some messages were not accepted; see each result.",
                Content::Json("BatchResult"),
            ),
        ],
        errors: &[401, 403, 409, 413, 422, 429, 500],
        ..BASE
    },
    Op {
        path: "/api/v1/suppressions",
        id: "listSuppressions",
        access: Access::Scope("emails:read"),
        summary: "List suppressed addresses",
        doc: "Paged, newest first by `created_at`: addresses mail will not be sent to (hard \
              bounces, complaints and manual entries) that the key reaches.",
        query: &[
            q("address", Ty::Address, "Exact address."),
            q(
                "reason",
                Ty::Enum(&["manual", "bounce", "complaint"]),
                "Why the address is suppressed.",
            ),
        ],
        paged: true,
        replies: &[ok(
            200,
            "A page of suppressions.",
            Content::List("Suppression"),
        )],
        errors: READ_LIST,
        ..BASE
    },
    Op {
        method: "post",
        path: "/api/v1/suppressions",
        id: "addSuppression",
        access: Access::Scope("emails:send"),
        summary: "Suppress an address",
        doc: "Adds an address by hand. Only a key that reaches the whole account may do this; \
              an address already suppressed is 409.",
        body: Content::Json("SuppressionCreate"),
        replies: &[ok(201, "Suppressed.", Content::Json("Suppression"))],
        errors: &[401, 403, 409, 413, 422, 429, 500],
        ..BASE
    },
    Op {
        method: "delete",
        path: "/api/v1/suppressions/{id}",
        id: "removeSuppression",
        access: Access::Scope("emails:send"),
        summary: "Remove a suppression",
        doc: "Mail may be sent to the address again.",
        path_params: &[("id", "The suppression id or the suppressed address.")],
        replies: &[ok(200, "Removed.", Content::Json("SuppressionDeleted"))],
        errors: READ_ONE,
        ..BASE
    },
    Op {
        method: "post",
        path: "/api/v1/threads/{id}/reply",
        id: "replyToThread",
        access: Access::Scope("mail:write"),
        summary: "Reply in a thread",
        doc: "Recipients, subject and threading headers are derived from the last message of \
              the thread unless given. Answers 202 once the provider accepted the reply.",
        path_params: &[("id", "The thread id (`thr_…`).")],
        body: Content::Json("ReplyRequest"),
        replies: &[ok(
            202,
            "Accepted by the provider.",
            Content::Json("SendResult"),
        )],
        errors: &[401, 403, 404, 413, 422, 429, 500, 503],
        ..BASE
    },
    Op {
        method: "post",
        path: "/api/v1/drafts/{id}/send",
        id: "sendDraft",
        access: Access::Scope("mail:write"),
        also: &["emails:send"],
        summary: "Send a draft",
        doc: "Sends the draft as it is (it needs a recipient and a body). No request body. \
              Needs `emails:send` as well as `mail:write`.",
        path_params: &[("id", "The draft's message id (`msg_…`).")],
        replies: &[ok(
            202,
            "Accepted by the provider.",
            Content::Json("SendResult"),
        )],
        errors: &[401, 403, 404, 422, 429, 500, 503],
        ..BASE
    },
    Op {
        path: "/api/v1/domains",
        id: "listDomains",
        access: Access::Scope("domains:read"),
        summary: "List sending domains",
        doc: "Unpaged: every domain the key reaches (`has_more` is always false).",
        replies: &[ok(200, "Every domain.", Content::List("Domain"))],
        errors: READ,
        ..BASE
    },
    Op {
        method: "post",
        path: "/api/v1/domains",
        id: "createDomain",
        access: Access::Scope("domains:write"),
        summary: "Add a sending domain",
        doc: "Creates the identity at the provider and answers the domain with the DNS records \
              to publish. Only a key that reaches the whole account may do this.",
        body: Content::Json("DomainCreate"),
        replies: &[ok(201, "Created.", Content::Json("Domain"))],
        errors: &[401, 403, 409, 413, 422, 429, 500, 502],
        ..BASE
    },
    Op {
        path: "/api/v1/domains/{id}",
        id: "getDomain",
        access: Access::Scope("domains:read"),
        summary: "Read a domain",
        path_params: &[("id", "The domain id (`dom_…`) or the domain name.")],
        replies: &[ok(200, "The domain.", Content::Json("Domain"))],
        errors: READ_ONE,
        ..BASE
    },
    Op {
        method: "patch",
        path: "/api/v1/domains/{id}",
        id: "updateDomain",
        access: Access::Scope("domains:write"),
        summary: "Change a domain's settings",
        doc: "Only fields sent change. Needs a key that reaches the whole domain (the account, or a domain reach covering it); \
              a key naming addresses gets 403.",
        path_params: &[("id", "The domain id (`dom_…`) or the domain name.")],
        body: Content::Json("DomainUpdate"),
        replies: &[ok(200, "The domain as it now is.", Content::Json("Domain"))],
        errors: &[401, 403, 404, 413, 422, 429, 500],
        ..BASE
    },
    Op {
        method: "delete",
        path: "/api/v1/domains/{id}",
        id: "deleteDomain",
        access: Access::Scope("domains:write"),
        summary: "Remove a domain",
        doc: "Removes the domain from the service. With `delete_in_provider=true` the identity \
              is also deleted at the provider (irreversible; other users of the same provider \
              account may rely on it). Needs a key that reaches the whole domain (the account, or a domain reach covering it); \
              a key naming addresses gets 403.",
        path_params: &[("id", "The domain id (`dom_…`) or the domain name.")],
        query: &[q(
            "delete_in_provider",
            Ty::Bool,
            "Also delete the identity at the provider. Default false.",
        )],
        replies: &[ok(200, "Removed.", Content::Json("DomainDeleted"))],
        errors: &[401, 403, 404, 422, 429, 500, 502],
        ..BASE
    },
    Op {
        method: "post",
        path: "/api/v1/domains/{id}/verify",
        id: "verifyDomain",
        access: Access::Scope("domains:write"),
        summary: "Re-check a domain",
        doc: "Asks the provider for the identity's status, probes SPF and DMARC in DNS, and \
              answers the domain as it now is. No body. Needs a key that reaches the whole domain (the account, or a domain reach covering it); \
              a key naming addresses gets 403.",
        path_params: &[("id", "The domain id (`dom_…`) or the domain name.")],
        replies: &[ok(200, "The domain as it now is.", Content::Json("Domain"))],
        errors: &[401, 403, 404, 429, 500, 502],
        ..BASE
    },
    Op {
        path: "/api/v1/mailboxes",
        id: "listMailboxes",
        access: Access::Scope("mailboxes:read"),
        summary: "List mailboxes",
        doc: "Unpaged: every mailbox the key reaches (`has_more` is always false).",
        query: &[q("domain", Ty::Str, "Only mailboxes on this domain name.")],
        replies: &[ok(200, "Every mailbox.", Content::List("Mailbox"))],
        errors: READ,
        ..BASE
    },
    Op {
        method: "post",
        path: "/api/v1/mailboxes",
        id: "createMailbox",
        access: Access::Scope("mailboxes:write"),
        summary: "Create a mailbox",
        doc: "The address must be on a verified domain of the account or under one. A key \
              naming specific addresses may create only those (403 otherwise). Setting \
              `is_default` clears it on every other mailbox, and `is_catch_all` on the other \
              mailboxes of the domain: 403 unless the key reaches each mailbox it would clear. \
              `is_catch_all: true` needs a key that reaches the whole domain.",
        body: Content::Json("MailboxCreate"),
        replies: &[ok(201, "Created.", Content::Json("Mailbox"))],
        errors: &[401, 403, 409, 413, 422, 429, 500],
        ..BASE
    },
    Op {
        path: "/api/v1/mailboxes/{id}",
        id: "getMailbox",
        access: Access::Scope("mailboxes:read"),
        summary: "Read a mailbox",
        path_params: &[("id", "The mailbox id (`mbx_…`) or its address.")],
        replies: &[ok(200, "The mailbox.", Content::Json("Mailbox"))],
        errors: READ_ONE,
        ..BASE
    },
    Op {
        method: "patch",
        path: "/api/v1/mailboxes/{id}",
        id: "updateMailbox",
        access: Access::Scope("mailboxes:write"),
        summary: "Change a mailbox",
        doc: "Only fields sent change; `signature: null` clears it. `address` cannot be changed \
              (422). Setting `is_default` or `is_catch_all` is 403 unless the key reaches every \
              mailbox whose flag it would clear; `is_catch_all: true` needs a key that reaches \
              the whole domain.",
        path_params: &[("id", "The mailbox id (`mbx_…`) or its address.")],
        body: Content::Json("MailboxUpdate"),
        replies: &[ok(
            200,
            "The mailbox as it now is.",
            Content::Json("Mailbox"),
        )],
        errors: &[401, 403, 404, 413, 422, 429, 500],
        ..BASE
    },
    Op {
        method: "delete",
        path: "/api/v1/mailboxes/{id}",
        id: "deleteMailbox",
        access: Access::Scope("mailboxes:write"),
        summary: "Delete a mailbox and its mail",
        doc: "Without `confirm=true` the call answers 409 and changes nothing.",
        path_params: &[("id", "The mailbox id (`mbx_…`) or its address.")],
        query: &[q(
            "confirm",
            Ty::Bool,
            "Must be true: the mailbox and all its mail are deleted.",
        )],
        replies: &[ok(200, "Deleted.", Content::Json("MailboxDeleted"))],
        errors: &[401, 403, 404, 409, 422, 429, 500],
        ..BASE
    },
    Op {
        path: "/api/v1/webhooks",
        id: "listWebhooks",
        access: Access::Scope("webhooks:read"),
        summary: "List webhook endpoints",
        doc: "Unpaged: every endpoint the key may see, without secrets (`has_more` is always \
              false).",
        replies: &[ok(200, "Every endpoint.", Content::List("Webhook"))],
        errors: READ,
        ..BASE
    },
    Op {
        method: "post",
        path: "/api/v1/webhooks",
        id: "createWebhook",
        access: Access::Scope("webhooks:write"),
        summary: "Create a webhook endpoint",
        doc: "Answers the endpoint with its signing `secret`, shown only here and on rotation. \
              The URL must be https and must not resolve to a private, loopback, link-local or \
              metadata address (loopback http is allowed outside production). A key reaching \
              only part of the account must give a `mailbox_id`.",
        body: Content::Json("WebhookCreate"),
        replies: &[ok(
            201,
            "Created; includes `secret`.",
            Content::Json("Webhook"),
        )],
        errors: &[401, 403, 413, 422, 429, 500],
        ..BASE
    },
    Op {
        path: "/api/v1/webhooks/{id}",
        id: "getWebhook",
        access: Access::Scope("webhooks:read"),
        summary: "Read a webhook endpoint",
        doc: "Never shows the secret.",
        path_params: &[("id", "The webhook id (`whk_…`).")],
        replies: &[ok(200, "The endpoint.", Content::Json("Webhook"))],
        errors: READ_ONE,
        ..BASE
    },
    Op {
        method: "patch",
        path: "/api/v1/webhooks/{id}",
        id: "updateWebhook",
        access: Access::Scope("webhooks:write"),
        summary: "Change a webhook endpoint",
        doc: "Only fields sent change. `enabled: true` clears the failure count; \
              `rotate_secret: true` replaces the secret and answers the new one once.",
        path_params: &[("id", "The webhook id (`whk_…`).")],
        body: Content::Json("WebhookUpdate"),
        replies: &[ok(
            200,
            "The endpoint as it now is (with `secret` after a rotation).",
            Content::Json("Webhook"),
        )],
        errors: &[401, 403, 404, 413, 422, 429, 500],
        ..BASE
    },
    Op {
        method: "delete",
        path: "/api/v1/webhooks/{id}",
        id: "deleteWebhook",
        access: Access::Scope("webhooks:write"),
        summary: "Delete or disable a webhook endpoint",
        doc: "Deletes the endpoint and all its deliveries; with `disable_only=true` only \
              disables it, keeping endpoint and history (the reply is then the endpoint with \
              `deleted: false`).",
        path_params: &[("id", "The webhook id (`whk_…`).")],
        query: &[q(
            "disable_only",
            Ty::Bool,
            "Only disable; keep the endpoint and its deliveries. Default false.",
        )],
        replies: &[ok(
            200,
            "Deleted, or disabled.",
            Content::Json("WebhookDeleted"),
        )],
        errors: &[401, 403, 404, 422, 429, 500],
        ..BASE
    },
    Op {
        method: "post",
        path: "/api/v1/webhooks/{id}/ping",
        id: "pingWebhook",
        access: Access::Scope("webhooks:write"),
        summary: "Send a test event",
        doc: "Sends a `webhook.test` event synchronously, without retries, and records the \
              attempt. No request body.",
        path_params: &[("id", "The webhook id (`whk_…`).")],
        replies: &[
            ok(
                200,
                "The endpoint answered 2xx.",
                Content::Json("WebhookPing"),
            ),
            ok(
                502,
                "The endpoint failed; the body is still the full result.",
                Content::Json("WebhookPing"),
            ),
        ],
        errors: READ_ONE,
        ..BASE
    },
    Op {
        path: "/api/v1/webhook-deliveries",
        id: "listWebhookDeliveries",
        access: Access::Scope("webhooks:read"),
        summary: "List delivery attempts",
        doc: "Paged, newest first by `created_at`: every attempt at every endpoint the key may \
              see.",
        query: &[
            q("webhook_id", Ty::Str, "Only attempts at this endpoint."),
            q("event", Ty::Str, "Only this event name."),
            q(
                "succeeded",
                Ty::Bool,
                "Only successful (true) or failed (false) attempts.",
            ),
        ],
        paged: true,
        replies: &[ok(
            200,
            "A page of attempts.",
            Content::List("WebhookDelivery"),
        )],
        errors: READ_LIST,
        ..BASE
    },
    Op {
        path: "/api/v1/webhook-deliveries/{id}",
        id: "getWebhookDelivery",
        access: Access::Scope("webhooks:read"),
        summary: "Read a delivery attempt",
        path_params: &[("id", "The delivery id (`whd_…`).")],
        replies: &[ok(200, "The attempt.", Content::Json("WebhookDelivery"))],
        errors: READ_ONE,
        ..BASE
    },
    Op {
        method: "post",
        path: "/api/v1/webhook-deliveries/{id}/replay",
        id: "replayWebhookDelivery",
        access: Access::Scope("webhooks:write"),
        summary: "Replay a delivery",
        doc: "Sends the stored payload again, synchronously and without retries, under the \
              original envelope id; recorded as the next attempt. No request body.",
        path_params: &[("id", "The delivery id (`whd_…`).")],
        replies: &[
            ok(
                200,
                "The endpoint answered 2xx.",
                Content::Json("WebhookReplay"),
            ),
            ok(
                502,
                "The endpoint failed; the body is still the full result.",
                Content::Json("WebhookReplay"),
            ),
        ],
        errors: READ_ONE,
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

fn string_or_null(doc: &str) -> Value {
    json!({ "type": ["string", "null"], "description": doc })
}

fn boolean(doc: &str) -> Value {
    json!({ "type": "boolean", "description": doc })
}

fn integer(doc: &str) -> Value {
    json!({ "type": "integer", "description": doc })
}

fn time(doc: &str) -> Value {
    json!({ "type": "string", "format": "date-time", "description": doc })
}

fn time_or_null(doc: &str) -> Value {
    json!({ "type": ["string", "null"], "format": "date-time", "description": doc })
}

fn strings(doc: &str) -> Value {
    json!({ "type": "array", "items": { "type": "string" }, "description": doc })
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

fn one_or_many(doc: &str) -> Value {
    json!({
        "description": doc,
        "oneOf": [
            { "type": "string" },
            { "type": "array", "items": { "type": "string" } },
        ],
    })
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
            "ApiKey",
            object(
                "An API key (never its secret).",
                json!({
                    "object": constant("api_key"),
                    "id": string("`key_` prefix."),
                    "name": string("Given at creation."),
                    "scopes": { "type": "array", "items": r("Scope") },
                    "reach": object("What the key may see and send as.", json!({
                        "kind": { "type": "string", "enum": ["account", "domains", "addresses"] },
                        "values": strings("Domain names or addresses; empty for `account`."),
                    })),
                    "rate_limit": { "type": ["integer", "null"], "description": "Calls per minute; null means the service default." },
                    "created_at": time("When the key was created."),
                    "revoked_at": time_or_null("When the key was revoked."),
                }),
            ),
        ),
        (
            "Provider",
            object(
                "The provider that transmits mail.",
                json!({
                    "object": constant("provider"),
                    "name": { "type": "string", "enum": ["simulator", "ses"] },
                    "region": string("The provider region."),
                    "quota": {
                        "description": "The sending quota; null when the provider could not be asked.",
                        "oneOf": [
                            { "type": "null" },
                            object("Rolling 24-hour quota.", json!({
                                "max_24_hour_send": { "type": "number" },
                                "max_send_rate": { "type": "number", "description": "Messages per second." },
                                "sent_last_24_hours": { "type": "number" },
                                "sandbox": boolean("A sandboxed account sends only to verified recipients."),
                                "sending_enabled": boolean("Whether the provider account may send."),
                            })),
                        ],
                    },
                }),
            ),
        ),
        (
            "AttachmentInput",
            input(
                "A file to send.",
                &["content"],
                json!({
                    "filename": string("File name."),
                    "content": string("Base64; a leading `data:…;base64,` prefix is stripped."),
                    "content_type": string("Media type; guessed from the file name when absent."),
                    "content_id": string("When set, the file is embedded inline and referenced from HTML as `cid:<content_id>`."),
                }),
            ),
        ),
        (
            "SendRequest",
            input(
                "The body of `POST /emails`.",
                &["from", "to"],
                json!({
                    "from": string("An address on a verified domain; `Name <addr>` accepted."),
                    "to": one_or_many("Recipients."),
                    "cc": one_or_many("Copy recipients."),
                    "bcc": one_or_many("Blind-copy recipients."),
                    "reply_to": string("One address."),
                    "subject": string("Defaults to empty."),
                    "html": string("HTML body."),
                    "text": string("Plain-text body."),
                    "headers": { "type": "object", "maxProperties": 50, "additionalProperties": { "type": "string" }, "description": "Extra headers, name to value; at most 50. Headers the service writes (From, Subject, Message-ID…) and every `X-SES-*` header (instructions to SES, such as `X-SES-CONFIGURATION-SET`) are refused with 422 naming `headers.<name>`." },
                    "thread_id": string("Adds the message to an existing thread."),
                    "in_reply_to": string("In-Reply-To, for callers building threads themselves."),
                    "references": one_or_many("References, for callers building threads themselves."),
                    "attachments": { "type": "array", "maxItems": 20, "items": r("AttachmentInput") },
                    "tags": { "type": ["array", "object"], "maxItems": 50, "maxProperties": 50, "description": "Not used by this service (neither stored nor passed to the provider); accepted for compatibility, at most 50 entries as SES allows." },
                }),
            ),
        ),
        (
            "SendResult",
            object(
                "What a successful send answers.",
                json!({
                    "id": string("`msg_` prefix."),
                    "message_id": string("RFC 5322 Message-ID, in angle brackets."),
                    "provider_message_id": string_or_null("The provider's own id."),
                    "thread_id": string("`thr_` prefix."),
                    "from": string("Bare sender address."),
                    "to": strings("Recipients."),
                    "subject": string("Subject."),
                }),
            ),
        ),
        (
            "BatchRequest",
            json!({
                "description": "An array of send bodies, or an object with an `emails` array; 1 to 100 messages.",
                "oneOf": [
                    { "type": "array", "minItems": 1, "maxItems": 100, "items": r("SendRequest") },
                    {
                        "type": "object",
                        "required": ["emails"],
                        "properties": { "emails": { "type": "array", "minItems": 1, "maxItems": 100, "items": r("SendRequest") } },
                    },
                ],
            }),
        ),
        (
            "BatchResult",
            object(
                "Per-message outcomes of a batch, in input order.",
                json!({
                    "object": constant("batch"),
                    "sent": integer("Messages accepted."),
                    "failed": integer("Messages not accepted."),
                    "data": { "type": "array", "items": r("BatchItem") },
                }),
            ),
        ),
        (
            "BatchItem",
            json!({
                "type": "object",
                "required": ["index", "ok"],
                "properties": {
                    "index": integer("Position in the input."),
                    "ok": boolean("Whether this message was accepted."),
                    "id": string("When ok: `msg_` id."),
                    "thread_id": string("When ok: `thr_` id."),
                    "error": string("When not ok: why."),
                    "status": integer("When not ok: the HTTP status this message alone would have had."),
                },
            }),
        ),
        (
            "Suppression",
            object(
                "An address mail will not be sent to.",
                json!({
                    "object": constant("suppression"),
                    "id": string("Suppression id."),
                    "address": string("The suppressed address."),
                    "reason": { "type": "string", "enum": ["manual", "bounce", "complaint"] },
                    "detail": string_or_null("Diagnostic detail of the bounce or complaint."),
                    "domain": string_or_null("The sending domain that caused it."),
                    "message_id": string_or_null("The message that caused it."),
                    "created_at": time("When it was added."),
                }),
            ),
        ),
        (
            "SuppressionCreate",
            input(
                "The body of `POST /suppressions`.",
                &["address"],
                json!({
                    "address": { "type": "string", "format": "email", "description": "The address to suppress." },
                    "reason": { "type": ["string", "null"], "enum": ["manual", "bounce", "complaint", null], "default": "manual" },
                }),
            ),
        ),
        (
            "SuppressionDeleted",
            object(
                "A removed suppression.",
                json!({
                    "object": constant("suppression"),
                    "id": string("Suppression id."),
                    "address": string("The address."),
                    "deleted": { "const": true },
                }),
            ),
        ),
        (
            "DnsRecord",
            object(
                "A DNS record to publish.",
                json!({
                    "kind": { "type": "string", "examples": ["CNAME", "MX", "TXT"] },
                    "name": string("Record name."),
                    "value": string("Record value."),
                    "purpose": { "type": "string", "examples": ["dkim", "mail_from", "spf", "dmarc"] },
                    "required": boolean("Whether sending needs it."),
                }),
            ),
        ),
        (
            "Domain",
            object(
                "A sending domain (an identity at the provider).",
                json!({
                    "object": constant("domain"),
                    "id": string("`dom_` prefix."),
                    "name": string("Domain name."),
                    "region": string("Provider region."),
                    "status": { "type": "string", "enum": ["pending", "verified", "failed", "temporary_failure", "not_started"] },
                    "sending_enabled": boolean("Ready to send when true."),
                    "dkim_status": string("DKIM verification status."),
                    "dkim_origin": string("Where the DKIM keys originate."),
                    "mail_from_domain": string("Custom MAIL FROM domain."),
                    "mail_from_status": string("MAIL FROM status."),
                    "spf_verified": boolean("SPF found in DNS at the last check."),
                    "dmarc_verified": boolean("DMARC found in DNS at the last check."),
                    "inherited_from": string_or_null("The parent domain covering this subdomain; such a domain has no records."),
                    "auto_create_mailboxes": boolean("Inbound mail to unknown addresses creates mailboxes."),
                    "imported": boolean("Found at the provider rather than created here."),
                    "last_checked_at": time("Last status check."),
                    "created_at": time("When it was added."),
                    "records": { "type": "array", "items": r("DnsRecord") },
                }),
            ),
        ),
        (
            "DomainCreate",
            input(
                "The body of `POST /domains`.",
                &["name"],
                json!({
                    "name": {
                        "type": "string",
                        "description": "Domain name: at least two labels of letters, digits and inner hyphens; the last not all digits.",
                        "maxLength": 253,
                        "pattern": DOMAIN_PATTERN,
                    },
                    "auto_create_mailboxes": { "type": "boolean", "default": false },
                }),
            ),
        ),
        (
            "DomainUpdate",
            input(
                "The body of `PATCH /domains/{id}`.",
                &[],
                json!({
                    "auto_create_mailboxes": {
                        "type": ["boolean", "null"],
                        "description": "Inbound mail to unknown addresses creates mailboxes; null leaves it as it is.",
                    },
                }),
            ),
        ),
        (
            "DomainDeleted",
            object(
                "A removed domain.",
                json!({
                    "object": constant("domain"),
                    "id": string("`dom_` prefix."),
                    "name": string("Domain name."),
                    "deleted": { "const": true },
                    "deleted_in_provider": boolean("Whether the identity was deleted at the provider too."),
                }),
            ),
        ),
        (
            "Mailbox",
            object(
                "An address that holds mail.",
                json!({
                    "object": constant("mailbox"),
                    "id": string("`mbx_` prefix."),
                    "address": string("Immutable after creation."),
                    "domain": string("Domain name."),
                    "domain_id": string("`dom_` prefix."),
                    "display_name": string("Display name."),
                    "signature": string_or_null("Signature."),
                    "is_catch_all": boolean("Receives mail to unknown addresses of its domain."),
                    "is_default": boolean("Only one mailbox is default at a time."),
                    "color": { "type": "string", "pattern": "^#[0-9a-fA-F]{6}$" },
                    "created_at": time("When it was created."),
                }),
            ),
        ),
        (
            "MailboxCreate",
            input(
                "The body of `POST /mailboxes`.",
                &["address"],
                json!({
                    "address": { "type": "string", "format": "email", "description": "On a verified domain of the account, or under one." },
                    "display_name": string_or_null("Display name."),
                    "signature": string_or_null("Signature."),
                    "is_catch_all": { "type": ["boolean", "null"], "description": "Receives mail to unknown addresses of its domain." },
                    "is_default": { "type": ["boolean", "null"], "description": "Setting it clears it on every other mailbox." },
                    "color": { "type": ["string", "null"], "pattern": "^#[0-9a-fA-F]{6}$" },
                }),
            ),
        ),
        (
            "MailboxUpdate",
            input(
                "The body of `PATCH /mailboxes/{id}`; `address` cannot be changed.",
                &[],
                json!({
                    "display_name": string_or_null("Display name; null leaves it as it is."),
                    "signature": string_or_null("Null clears it."),
                    "is_catch_all": { "type": ["boolean", "null"], "description": "Receives mail to unknown addresses of its domain; null leaves it as it is." },
                    "is_default": { "type": ["boolean", "null"], "description": "Setting it clears it on every other mailbox; null leaves it as it is." },
                    "color": { "type": ["string", "null"], "pattern": "^#[0-9a-fA-F]{6}$" },
                }),
            ),
        ),
        (
            "MailboxDeleted",
            object(
                "A deleted mailbox.",
                json!({
                    "object": constant("mailbox"),
                    "id": string("`mbx_` prefix."),
                    "deleted": { "const": true },
                }),
            ),
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
            "ReplyRequest",
            json!({
                "type": "object",
                "description": "The body of `POST /threads/{id}/reply`: `text`, `html` or both.",
                "anyOf": [{ "required": ["text"] }, { "required": ["html"] }],
                "properties": {
                    "text": string("Plain-text body."),
                    "html": string("HTML body."),
                    "reply_all": { "type": "boolean", "default": false, "description": "Also answer everyone else on the last message." },
                    "to": one_or_many("Replaces the worked-out recipients."),
                    "cc": one_or_many("Replaces the worked-out copy recipients."),
                    "bcc": one_or_many("Blind-copy recipients."),
                    "subject": string("Defaults to `Re: ` plus the thread subject."),
                    "quote": { "type": "boolean", "default": true, "description": "Append the message being answered." },
                    "headers": { "type": "object", "maxProperties": 50, "additionalProperties": { "type": "string" }, "description": "Extra headers, name to value; at most 50. Headers the service writes (From, Subject, Message-ID…) and every `X-SES-*` header (instructions to SES, such as `X-SES-CONFIGURATION-SET`) are refused with 422 naming `headers.<name>`." },
                    "attachments": { "type": "array", "maxItems": 20, "items": r("AttachmentInput") },
                },
            }),
        ),
        (
            "Webhook",
            json!({
                "type": "object",
                "description": "A webhook endpoint. `secret` is present only on creation and on rotation.",
                "required": ["object", "id", "url", "description", "events", "enabled", "mailbox_id",
                             "last_status", "last_delivered_at", "last_error_at", "last_error",
                             "consecutive_failures", "created_at"],
                "properties": {
                    "object": constant("webhook"),
                    "id": string("`whk_` prefix."),
                    "url": { "type": "string", "format": "uri" },
                    "description": string("Free text."),
                    "events": strings("Event names, or `[\"*\"]` for all (including events added later)."),
                    "enabled": boolean("Disabled after 20 consecutive failures."),
                    "mailbox_id": string_or_null("Only mail of this mailbox; null means all."),
                    "last_status": { "type": ["integer", "null"], "description": "HTTP status of the last attempt." },
                    "last_delivered_at": time_or_null("Last successful delivery."),
                    "last_error_at": time_or_null("Last failed attempt."),
                    "last_error": string_or_null("Why the last attempt failed."),
                    "consecutive_failures": integer("Failed attempts in a row; the 20th disables the endpoint."),
                    "created_at": time("When it was created."),
                    "secret": string("`whsec_` + base64 key; only on creation and on rotation."),
                },
            }),
        ),
        (
            "WebhookCreate",
            input(
                "The body of `POST /webhooks`.",
                &["url"],
                json!({
                    "url": { "type": "string", "format": "uri", "description": "https (loopback http allowed outside production)." },
                    "events": { "type": "array", "items": { "type": "string" }, "default": ["*"], "description": "Event names, or `[\"*\"]`." },
                    "mailbox_id": string_or_null("Only fire for mail of this mailbox; null or absent means all."),
                    "description": string("Free text."),
                    "enabled": { "type": "boolean", "default": true },
                }),
            ),
        ),
        (
            "WebhookUpdate",
            input(
                "The body of `PATCH /webhooks/{id}`; only fields sent change.",
                &[],
                json!({
                    "url": { "type": "string", "format": "uri" },
                    "events": { "type": "array", "items": { "type": "string" } },
                    "mailbox_id": string_or_null("Null clears it (whole-account keys only)."),
                    "description": string_or_null("Null clears it."),
                    "enabled": boolean("true also clears the failure count."),
                    "rotate_secret": boolean("Replace the secret and answer the new one once."),
                }),
            ),
        ),
        (
            "WebhookDeleted",
            json!({
                "description": "`{object, id, deleted: true}` after a delete; the endpoint with `deleted: false` after `disable_only=true`.",
                "oneOf": [
                    object("A deleted endpoint.", json!({
                        "object": constant("webhook"),
                        "id": string("`whk_` prefix."),
                        "deleted": { "const": true },
                    })),
                    {
                        "allOf": [
                            r("Webhook"),
                            object("", json!({ "deleted": { "const": false } })),
                        ],
                    },
                ],
            }),
        ),
        (
            "WebhookDelivery",
            object(
                "One delivery attempt.",
                json!({
                    "object": constant("webhook_delivery"),
                    "id": string("`whd_` prefix."),
                    "envelope_id": string("The envelope `id` and `webhook-id` header the receiver saw; the same across retries and replays."),
                    "webhook_id": string("`whk_` prefix."),
                    "event": string("Event name."),
                    "payload": { "description": "The body that was posted.", "type": ["object", "string"] },
                    "attempt": integer("Attempt number of this envelope."),
                    "status_code": integer("The endpoint's HTTP status; 0 when no reply came."),
                    "response_body": string("The start of the endpoint's reply."),
                    "error": string_or_null("Why the attempt failed."),
                    "duration_ms": integer("Milliseconds."),
                    "succeeded": boolean("2xx reply."),
                    "created_at": time("When the attempt was made."),
                }),
            ),
        ),
        (
            "WebhookPing",
            object(
                "The result of a ping.",
                json!({
                    "object": constant("webhook_ping"),
                    "webhook_id": string("`whk_` prefix."),
                    "succeeded": boolean("2xx reply."),
                    "status_code": integer("The endpoint's HTTP status; 0 when no reply came."),
                    "duration_ms": integer("Milliseconds."),
                    "response_body": string("The start of the endpoint's reply."),
                    "error": string_or_null("Why it failed."),
                }),
            ),
        ),
        (
            "WebhookReplay",
            json!({
                "description": "The result of a replay: the ping shape plus `delivery_id`.",
                "allOf": [
                    r("WebhookPing"),
                    object("", json!({ "delivery_id": string("The id of the new attempt's record.") })),
                ],
            }),
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
                "description": "`{ok: true}` for notifications; `{confirmed: true, topic_arn}` for a confirmed subscription.",
                // Two shapes with their fields required: an optional
                // `const: true` comes out of openapi-python-client as Python
                // that does not parse.
                "oneOf": [
                    {
                        "type": "object",
                        "required": ["ok"],
                        "properties": { "ok": { "const": true } },
                    },
                    {
                        "type": "object",
                        "required": ["confirmed", "topic_arn"],
                        "properties": {
                            "confirmed": { "const": true },
                            "topic_arn": string("The confirmed topic."),
                        },
                    },
                ],
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
        Content::List(name) => Some(json!({ "application/json": { "schema": {
            "allOf": [
                r("List"),
                { "type": "object", "properties": { "data": { "type": "array", "items": r(name) } } },
            ],
        } } })),
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

fn query_schema(ty: Ty) -> Value {
    match ty {
        Ty::Str => json!({ "type": "string" }),
        Ty::Bool => json!({ "type": "boolean" }),
        Ty::Address => json!({ "type": "string", "format": "email" }),
        Ty::Enum(values) => json!({ "type": "string", "enum": values }),
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
    for qp in op.query {
        params.push(json!({
            "name": qp.name, "in": "query", "required": false, "description": qp.doc,
            "schema": query_schema(qp.ty),
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
        Access::Public | Access::AnyKey => "none",
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
        super::doc::free_text_without_nul(&mut doc);
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
