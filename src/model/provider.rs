//! The provider resource on the wire (`GET /provider`).

use serde::Serialize;
use utoipa::ToSchema;

crate::object_tag!(ProviderObject, "provider");

/// Which provider transmits mail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderName {
    Simulator,
    Ses,
}

impl ProviderName {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderName::Simulator => "simulator",
            ProviderName::Ses => "ses",
        }
    }

    pub fn parse(s: &str) -> Option<ProviderName> {
        [ProviderName::Simulator, ProviderName::Ses]
            .into_iter()
            .find(|n| n.as_str() == s)
    }
}

/// The provider that transmits mail.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Provider)]
pub struct ProviderInfo {
    pub object: ProviderObject,
    pub name: ProviderName,
    /// The provider region.
    pub region: String,
    /// The sending quota; null when the provider could not be asked.
    #[schema(required = true)]
    pub quota: Option<ProviderQuota>,
}

/// Rolling 24-hour quota.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProviderQuota {
    pub max_24_hour_send: f64,
    /// Messages per second.
    pub max_send_rate: f64,
    pub sent_last_24_hours: f64,
    /// A sandboxed account sends only to verified recipients.
    pub sandbox: bool,
    /// Whether the provider account may send.
    pub sending_enabled: bool,
}
