//! The upstream provider that transmits mail and owns sending identities.
//! Two honest implementations: the in-process simulator (default) and SES v2.

use async_trait::async_trait;

/// A local moto (SES stand-in) for tests.
#[cfg(any(test, feature = "test-support"))]
pub mod moto_server;
pub mod ses;
pub mod simulator;

pub mod sns;

/// An identity's verification status: the same enum the API answers with.
pub use crate::model::domains::DomainStatus as IdentityStatus;

/// What the provider knows about a domain identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityInfo {
    pub status: IdentityStatus,
    pub sending_enabled: bool,
    /// Lower-case spec strings: pending, success, failed, temporary_failure, not_started.
    pub dkim_status: String,
    /// `aws_ses` (Easy DKIM) or `external` (BYODKIM).
    pub dkim_origin: String,
    /// Easy-DKIM tokens; each becomes a CNAME `{token}._domainkey.{domain}`.
    pub dkim_tokens: Vec<String>,
    /// Custom MAIL FROM domain, if the provider has one configured.
    pub mail_from_domain: Option<String>,
    /// Lower-case: pending, success, failed, temporary_failure, not_started.
    pub mail_from_status: String,
}

/// A message ready to hand over: the complete MIME and its envelope.
#[derive(Debug, Clone)]
pub struct OutgoingMessage {
    /// Bare sender address (envelope and From).
    pub from: String,
    /// Every envelope recipient: to, cc and bcc.
    pub recipients: Vec<String>,
    /// RFC 5322 bytes exactly as they should be transmitted.
    pub raw: Vec<u8>,
    /// The service's own id of the message (`msg_…`), passed to SES as the
    /// message tag [`MESSAGE_TAG`] so that the events of a send whose
    /// record a crash interrupted can still be matched to it.
    pub message_id: String,
}

/// The SES message tag that carries the service's message id.
pub const MESSAGE_TAG: &str = "pigeonhole_message_id";

/// Sending quota, as SES `GetAccount` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct Quota {
    pub max_24_hour_send: f64,
    pub max_send_rate: f64,
    pub sent_last_24_hours: f64,
    pub sandbox: bool,
    pub sending_enabled: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The provider refused this message or request (bad address, unverified identity...).
    #[error("rejected by provider: {0}")]
    Rejected(String),
    /// The provider asks us to slow down (rate or quota).
    #[error("provider throttled: {message}")]
    Throttled {
        message: String,
        retry_after_secs: Option<u64>,
    },
    /// The identity or object does not exist at the provider.
    #[error("not found at provider: {0}")]
    NotFound(String),
    /// Network failure, timeout, or a 5xx from the provider.
    #[error("provider unavailable: {0}")]
    Unavailable(String),
}

#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// `simulator` or `ses` (`model::provider::ProviderName`).
    fn name(&self) -> &'static str;
    /// Region reported on domains.
    fn region(&self) -> String;

    /// Creates the domain identity (Easy DKIM) and returns its state and tokens.
    async fn create_identity(&self, domain: &str) -> Result<IdentityInfo, ProviderError>;
    /// Reads the identity's current state.
    async fn get_identity(&self, domain: &str) -> Result<IdentityInfo, ProviderError>;
    /// Deletes the identity. Deleting one that does not exist is `NotFound`.
    async fn delete_identity(&self, domain: &str) -> Result<(), ProviderError>;

    /// Transmits a raw MIME message; returns the provider's message id.
    async fn send_raw(&self, message: &OutgoingMessage) -> Result<String, ProviderError>;

    /// Current sending quota.
    async fn quota(&self) -> Result<Quota, ProviderError>;

    /// The events a provider that decides them itself (the simulator) will
    /// report about a message it has just accepted, each with the time it is
    /// due. The send's record stores them in its own transaction, so they
    /// arrive even if the process dies before they are due (see
    /// `core::waiting_events`). SES decides nothing ahead: its events arrive
    /// over SNS.
    fn planned_events(
        &self,
        _provider_message_id: &str,
        _recipients: &[String],
        _accepted_at: i64,
    ) -> Vec<PlannedEvent> {
        Vec::new()
    }
}

/// A provider event known ahead, and when it is due (microseconds since the
/// epoch).
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedEvent {
    pub event: ProviderEvent,
    pub due_at: i64,
}

/// What the provider reports about a message after accepting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderEventKind {
    Send,
    Delivery,
    /// `permanent` is a hard bounce (the address joins the suppression list).
    Bounce {
        permanent: bool,
    },
    Complaint,
    Reject,
    DeliveryDelay,
    Open,
    Click,
    RenderingFailure,
}

/// One provider event, in the shape the single ingestion path consumes.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderEvent {
    pub provider_message_id: String,
    pub kind: ProviderEventKind,
    /// The recipients the event concerns (empty when it is about the message).
    pub recipients: Vec<String>,
    /// Diagnostic text, e.g. the SMTP reply of a bounce.
    pub detail: Option<String>,
    /// Microseconds since the epoch.
    pub occurred_at: i64,
    /// The transport's id for this notification (SNS MessageId), so that a
    /// redelivered notification is applied only once.
    pub delivery_id: Option<String>,
    /// The message id the send tagged it with ([`MESSAGE_TAG`]), if any.
    pub message_tag: Option<String>,
}
