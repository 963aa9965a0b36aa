//! Sending domains on the wire.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Timestamp;
use crate::ids::DomainId;

crate::object_tag!(DomainObject, "domain");

/// The verification status of a domain's identity at the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DomainStatus {
    Pending,
    Verified,
    Failed,
    TemporaryFailure,
    NotStarted,
}

impl DomainStatus {
    pub const ALL: [DomainStatus; 5] = [
        DomainStatus::Pending,
        DomainStatus::Verified,
        DomainStatus::Failed,
        DomainStatus::TemporaryFailure,
        DomainStatus::NotStarted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DomainStatus::Pending => "pending",
            DomainStatus::Verified => "verified",
            DomainStatus::Failed => "failed",
            DomainStatus::TemporaryFailure => "temporary_failure",
            DomainStatus::NotStarted => "not_started",
        }
    }

    pub fn parse(s: &str) -> Option<DomainStatus> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

/// The type of a DNS record to publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum DnsRecordType {
    Cname,
    Mx,
    Txt,
}

/// What a DNS record is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DnsRecordPurpose {
    Dkim,
    MailFrom,
    Spf,
    Dmarc,
}

/// A DNS record to publish.
#[derive(Debug, Serialize, ToSchema)]
pub struct DnsRecord {
    pub kind: DnsRecordType,
    /// Record name.
    pub name: String,
    /// Record value.
    pub value: String,
    pub purpose: DnsRecordPurpose,
    /// Whether sending needs it.
    pub required: bool,
}

/// A sending domain (an identity at the provider).
#[derive(Debug, Serialize, ToSchema)]
pub struct Domain {
    pub object: DomainObject,
    /// `dom_` prefix.
    pub id: DomainId,
    /// Domain name.
    pub name: String,
    /// Provider region.
    pub region: String,
    pub status: DomainStatus,
    /// Ready to send when true.
    pub sending_enabled: bool,
    /// DKIM verification status.
    pub dkim_status: String,
    /// Where the DKIM keys originate.
    pub dkim_origin: String,
    /// Custom MAIL FROM domain.
    pub mail_from_domain: String,
    /// MAIL FROM status.
    pub mail_from_status: String,
    /// SPF found in DNS at the last check.
    pub spf_verified: bool,
    /// DMARC found in DNS at the last check.
    pub dmarc_verified: bool,
    /// The parent domain covering this subdomain; such a domain has no records.
    #[schema(required = true)]
    pub inherited_from: Option<String>,
    /// Inbound mail to unknown addresses creates mailboxes.
    pub auto_create_mailboxes: bool,
    /// Found at the provider rather than created here.
    pub imported: bool,
    /// Last status check.
    pub last_checked_at: Timestamp,
    /// When it was added.
    pub created_at: Timestamp,
    pub records: Vec<DnsRecord>,
}

/// The body of `POST /domains`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DomainCreate {
    /// Domain name: dot-separated labels of letters, digits and hyphens.
    #[schema(
        max_length = 253,
        pattern = r"^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"
    )]
    pub name: String,
    /// Inbound mail to unknown addresses creates mailboxes.
    #[serde(default)]
    #[schema(default = false)]
    pub auto_create_mailboxes: bool,
}

/// The body of `PATCH /domains/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DomainUpdate {
    /// Inbound mail to unknown addresses creates mailboxes.
    pub auto_create_mailboxes: Option<bool>,
}

/// A removed domain.
#[derive(Debug, Serialize, ToSchema)]
pub struct DomainDeleted {
    pub object: DomainObject,
    /// `dom_` prefix.
    pub id: DomainId,
    /// Domain name.
    pub name: String,
    pub deleted: bool,
    /// Whether the identity was deleted at the provider too.
    pub deleted_in_provider: bool,
}

super::query::query_params! {
/// The options of `DELETE /domains/{id}`.
pub struct DomainDeleteQuery {
    /// Also delete the identity at the provider. Default false.
    pub delete_in_provider: Option<bool>,
}
}

/// The `data` of `domain.verified` and `domain.failed` webhook events.
#[derive(Debug, Serialize, ToSchema)]
pub struct DomainEventData {
    pub domain: Domain,
}
