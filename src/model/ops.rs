//! Operations outside the keyed API: health, readiness, SNS deliveries and the
//! OpenAPI document itself.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Liveness.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: HealthStatus,
}

crate::object_tag!(HealthStatus, "ok");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReadinessStatus {
    Ready,
    Unavailable,
}

/// Whether the instance can serve (its database answers).
#[derive(Debug, Serialize, ToSchema)]
pub struct Readiness {
    pub status: ReadinessStatus,
    /// Present when unavailable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Present when unavailable: `server_error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
pub enum SnsType {
    Notification,
    SubscriptionConfirmation,
    UnsubscribeConfirmation,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
pub enum SnsSignatureVersion {
    #[serde(rename = "1")]
    V1,
    #[serde(rename = "2")]
    V2,
}

/// An Amazon SNS message (sent with `Content-Type: text/plain`). Described
/// here for the document; `provider::sns` reads and verifies it.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "PascalCase")]
pub struct SnsMessage {
    #[serde(rename = "Type")]
    pub kind: SnsType,
    /// SNS message id; repeats are ignored.
    pub message_id: String,
    /// Subscription token.
    pub token: Option<String>,
    /// Must be on the allow-list.
    pub topic_arn: String,
    pub subject: Option<String>,
    /// For notifications, the SES event or receipt notification as JSON text.
    pub message: String,
    /// When SNS sent it.
    #[schema(format = DateTime)]
    pub timestamp: String,
    pub signature_version: SnsSignatureVersion,
    /// Base64 signature.
    pub signature: String,
    #[serde(rename = "SigningCertURL")]
    #[schema(format = "uri")]
    pub signing_cert_url: String,
    #[serde(rename = "SubscribeURL")]
    #[schema(format = "uri")]
    pub subscribe_url: Option<String>,
    #[serde(rename = "UnsubscribeURL")]
    #[schema(format = "uri")]
    pub unsubscribe_url: Option<String>,
}

/// `{ok: true}` for notifications; `{confirmed: true, topic_arn}` for a
/// confirmed subscription.
#[derive(Debug, Default, Serialize, ToSchema)]
pub struct SnsResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confirmed: Option<bool>,
    /// The confirmed topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_arn: Option<String>,
}

/// An OpenAPI 3.1 document.
#[derive(Debug, ToSchema)]
#[schema(as = OpenApiDocument)]
#[allow(dead_code)]
pub struct OpenApiDocument {
    pub openapi: String,
    #[schema(value_type = Object)]
    pub info: (),
    #[schema(value_type = Object)]
    pub paths: (),
}
