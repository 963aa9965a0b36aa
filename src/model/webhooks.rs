//! Webhook endpoints and their delivery log on the wire.

use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, OneOfBuilder, Type};
use utoipa::openapi::{Ref, RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

use super::Timestamp;
use crate::ids::{DeliveryId, MailboxId, WebhookId};

crate::object_tag!(WebhookObject, "webhook");
crate::object_tag!(WebhookDeliveryObject, "webhook_delivery");
crate::object_tag!(WebhookPingObject, "webhook_ping");
crate::object_tag!(AllEvents, "*");

/// The name of an event a webhook endpoint may receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum EventName {
    #[serde(rename = "email.sent")]
    EmailSent,
    #[serde(rename = "email.delivered")]
    EmailDelivered,
    #[serde(rename = "email.bounced")]
    EmailBounced,
    #[serde(rename = "email.complained")]
    EmailComplained,
    #[serde(rename = "email.rejected")]
    EmailRejected,
    #[serde(rename = "email.delayed")]
    EmailDelayed,
    #[serde(rename = "email.failed")]
    EmailFailed,
    #[serde(rename = "email.opened")]
    EmailOpened,
    #[serde(rename = "email.clicked")]
    EmailClicked,
    #[serde(rename = "mail.received")]
    MailReceived,
    #[serde(rename = "thread.updated")]
    ThreadUpdated,
    #[serde(rename = "domain.verified")]
    DomainVerified,
    #[serde(rename = "domain.failed")]
    DomainFailed,
    #[serde(rename = "webhook.test")]
    WebhookTest,
}

impl EventName {
    pub const ALL: [EventName; 14] = [
        EventName::EmailSent,
        EventName::EmailDelivered,
        EventName::EmailBounced,
        EventName::EmailComplained,
        EventName::EmailRejected,
        EventName::EmailDelayed,
        EventName::EmailFailed,
        EventName::EmailOpened,
        EventName::EmailClicked,
        EventName::MailReceived,
        EventName::ThreadUpdated,
        EventName::DomainVerified,
        EventName::DomainFailed,
        EventName::WebhookTest,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            EventName::EmailSent => "email.sent",
            EventName::EmailDelivered => "email.delivered",
            EventName::EmailBounced => "email.bounced",
            EventName::EmailComplained => "email.complained",
            EventName::EmailRejected => "email.rejected",
            EventName::EmailDelayed => "email.delayed",
            EventName::EmailFailed => "email.failed",
            EventName::EmailOpened => "email.opened",
            EventName::EmailClicked => "email.clicked",
            EventName::MailReceived => "mail.received",
            EventName::ThreadUpdated => "thread.updated",
            EventName::DomainVerified => "domain.verified",
            EventName::DomainFailed => "domain.failed",
            EventName::WebhookTest => "webhook.test",
        }
    }

    pub fn parse(s: &str) -> Option<EventName> {
        Self::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

/// One entry of an endpoint's `events`: an event name, or `*` for every
/// event (including events added later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum EventSubscription {
    All(AllEvents),
    Event(EventName),
}

/// A webhook endpoint. `secret` is present only on creation and on rotation.
#[derive(Debug, Serialize, ToSchema)]
pub struct Webhook {
    pub object: WebhookObject,
    /// `whk_` prefix.
    pub id: WebhookId,
    #[schema(format = "uri")]
    pub url: String,
    /// Free text.
    pub description: String,
    /// Event names, or `["*"]` for all (including events added later).
    pub events: Vec<EventSubscription>,
    /// Disabled after 20 consecutive failures.
    pub enabled: bool,
    /// Only mail of this mailbox; null means all.
    #[schema(required = true)]
    pub mailbox_id: Option<MailboxId>,
    /// HTTP status of the last attempt.
    #[schema(required = true)]
    pub last_status: Option<i64>,
    /// Last successful delivery.
    #[schema(required = true)]
    pub last_delivered_at: Option<Timestamp>,
    /// Last failed attempt.
    #[schema(required = true)]
    pub last_error_at: Option<Timestamp>,
    /// Why the last attempt failed.
    #[schema(required = true)]
    pub last_error: Option<String>,
    /// Failed attempts in a row; the 20th disables the endpoint.
    pub consecutive_failures: i64,
    /// When it was created.
    pub created_at: Timestamp,
    /// `whsec_` + base64 key; only on creation and on rotation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// The body of `POST /webhooks`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct WebhookCreate {
    /// https (loopback http allowed outside production). Required (422
    /// naming `url` without it).
    #[schema(format = "uri", required = true, value_type = String)]
    pub url: Option<String>,
    /// Event names, or `["*"]`. Default `["*"]`.
    #[schema(value_type = Option<Vec<EventSubscriptionInput>>, min_items = 1)]
    pub events: Option<Vec<String>>,
    /// Only fire for mail of this mailbox; null or absent means all.
    #[serde(default, deserialize_with = "super::nullable")]
    #[schema(value_type = Option<String>)]
    pub mailbox_id: Option<Option<String>>,
    /// Free text.
    pub description: Option<String>,
    /// Default true.
    pub enabled: Option<bool>,
}

/// The body of `PATCH /webhooks/{id}`; only fields sent change.
#[derive(Debug, Deserialize, ToSchema)]
pub struct WebhookUpdate {
    #[schema(format = "uri")]
    pub url: Option<String>,
    /// Event names, or `["*"]`.
    #[schema(value_type = Option<Vec<EventSubscriptionInput>>, min_items = 1)]
    pub events: Option<Vec<String>>,
    /// Null clears it (whole-account keys only).
    #[serde(default, deserialize_with = "super::nullable")]
    #[schema(value_type = Option<String>)]
    pub mailbox_id: Option<Option<String>>,
    /// Null clears it.
    #[serde(default, deserialize_with = "super::nullable")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<String>>,
    /// true also clears the failure count.
    pub enabled: Option<bool>,
    /// Replace the secret and answer the new one once.
    pub rotate_secret: Option<bool>,
}

/// An entry of `events` in a request: an event name or `*` (read as text so
/// that every unknown name is reported at once).
pub struct EventSubscriptionInput;

impl utoipa::PartialSchema for EventSubscriptionInput {
    fn schema() -> RefOr<Schema> {
        EventSubscription::schema()
    }
}

impl ToSchema for EventSubscriptionInput {
    fn name() -> std::borrow::Cow<'static, str> {
        EventSubscription::name()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((EventName::name().into(), EventName::schema()));
        schemas.push((AllEvents::name().into(), AllEvents::schema()));
    }
}

/// An endpoint disabled by `DELETE ?disable_only=true`: the endpoint with
/// `deleted: false`.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookDisabled {
    #[serde(flatten)]
    pub webhook: Webhook,
    pub deleted: bool,
}

/// A deleted endpoint.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookRemoved {
    pub object: WebhookObject,
    /// `whk_` prefix.
    pub id: WebhookId,
    /// Always true.
    pub deleted: bool,
}

/// `{object, id, deleted: true}` after a delete; the endpoint with
/// `deleted: false` after `disable_only=true`.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum WebhookDeleted {
    Deleted(WebhookRemoved),
    Disabled(Box<WebhookDisabled>),
}

// `anyOf`, not `oneOf`: a disabled endpoint also has the three fields of a
// deleted one, so both branches match it.
impl PartialSchema for WebhookDeleted {
    fn schema() -> RefOr<Schema> {
        AnyOfBuilder::new()
            .item(Ref::from_schema_name(WebhookRemoved::name()))
            .item(Ref::from_schema_name(WebhookDisabled::name()))
            .description(Some(
                "`{object, id, deleted: true}` after a delete; the endpoint with \
                 `deleted: false` after `disable_only=true`.",
            ))
            .into()
    }
}

impl ToSchema for WebhookDeleted {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((WebhookRemoved::name().into(), WebhookRemoved::schema()));
        <WebhookRemoved as ToSchema>::schemas(schemas);
        schemas.push((WebhookDisabled::name().into(), WebhookDisabled::schema()));
        <WebhookDisabled as ToSchema>::schemas(schemas);
    }
}

super::query::query_params! {
/// The options of `DELETE /webhooks/{id}`.
pub struct WebhookDeleteQuery {
    /// Only disable; keep the endpoint and its deliveries. Default false.
    pub disable_only: Option<bool>,
}
}

/// One delivery attempt.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookDelivery {
    pub object: WebhookDeliveryObject,
    /// `whd_` prefix.
    pub id: DeliveryId,
    /// The envelope `id` and `webhook-id` header the receiver saw; the same
    /// across retries and replays.
    pub envelope_id: DeliveryId,
    /// `whk_` prefix.
    pub webhook_id: WebhookId,
    pub event: EventName,
    /// The body that was posted.
    #[schema(schema_with = object_or_string)]
    pub payload: serde_json::Value,
    /// Attempt number of this envelope.
    pub attempt: i64,
    /// The endpoint's HTTP status; 0 when no reply came.
    pub status_code: i64,
    /// The start of the endpoint's reply.
    pub response_body: String,
    /// Why the attempt failed.
    #[schema(required = true)]
    pub error: Option<String>,
    /// Milliseconds.
    pub duration_ms: i64,
    /// 2xx reply.
    pub succeeded: bool,
    /// When the attempt was made.
    pub created_at: Timestamp,
}

fn object_or_string() -> Schema {
    OneOfBuilder::new()
        .item(ObjectBuilder::new().schema_type(Type::Object))
        .item(ObjectBuilder::new().schema_type(Type::String))
        .description(Some("The body that was posted."))
        .into()
}

super::query::query_params! {
/// The filters of `GET /webhook-deliveries`.
pub struct DeliveryFilter {
    /// Only attempts at this endpoint.
    pub webhook_id: Option<String>,
    /// Only this event name.
    pub event: Option<EventName>,
    /// Only successful (true) or failed (false) attempts.
    pub succeeded: Option<bool>,
}
}

/// The result of a ping.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookPing {
    pub object: WebhookPingObject,
    /// `whk_` prefix.
    pub webhook_id: WebhookId,
    /// 2xx reply.
    pub succeeded: bool,
    /// The endpoint's HTTP status; 0 when no reply came.
    pub status_code: i64,
    /// Milliseconds.
    pub duration_ms: i64,
    /// The start of the endpoint's reply.
    pub response_body: String,
    /// Why it failed.
    #[schema(required = true)]
    pub error: Option<String>,
}

/// The result of a replay: the ping shape plus `delivery_id`.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookReplay {
    #[serde(flatten)]
    pub ping: WebhookPing,
    /// The id of the new attempt's record (null if it could not be recorded).
    #[schema(required = true)]
    pub delivery_id: Option<DeliveryId>,
}
