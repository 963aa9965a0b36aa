//! API keys on the wire (`GET /me`).

use std::fmt;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Timestamp;
use crate::ids::KeyId;

crate::object_tag!(ApiKeyObject, "api_key");

/// A permission an API key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum Scope {
    #[serde(rename = "emails:send")]
    EmailsSend,
    #[serde(rename = "emails:read")]
    EmailsRead,
    #[serde(rename = "domains:read")]
    DomainsRead,
    #[serde(rename = "domains:write")]
    DomainsWrite,
    #[serde(rename = "mailboxes:read")]
    MailboxesRead,
    #[serde(rename = "mailboxes:write")]
    MailboxesWrite,
    #[serde(rename = "webhooks:read")]
    WebhooksRead,
    #[serde(rename = "webhooks:write")]
    WebhooksWrite,
    #[serde(rename = "mail:read")]
    MailRead,
    #[serde(rename = "mail:write")]
    MailWrite,
}

impl Scope {
    pub const ALL: [Scope; 10] = [
        Scope::EmailsSend,
        Scope::EmailsRead,
        Scope::DomainsRead,
        Scope::DomainsWrite,
        Scope::MailboxesRead,
        Scope::MailboxesWrite,
        Scope::WebhooksRead,
        Scope::WebhooksWrite,
        Scope::MailRead,
        Scope::MailWrite,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::EmailsSend => "emails:send",
            Scope::EmailsRead => "emails:read",
            Scope::DomainsRead => "domains:read",
            Scope::DomainsWrite => "domains:write",
            Scope::MailboxesRead => "mailboxes:read",
            Scope::MailboxesWrite => "mailboxes:write",
            Scope::WebhooksRead => "webhooks:read",
            Scope::WebhooksWrite => "webhooks:write",
            Scope::MailRead => "mail:read",
            Scope::MailWrite => "mail:write",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|sc| sc.as_str() == s)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `keys revoke` prints.
#[derive(Debug, Serialize)]
pub struct KeyRevoked {
    pub id: String,
    /// Always true.
    pub revoked: bool,
}

/// How a key's reach is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReachKind {
    Account,
    Domains,
    Addresses,
}

/// What the key may see and send as.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyReach {
    pub kind: ReachKind,
    /// Domain names or addresses; empty for `account`.
    pub values: Vec<String>,
}

/// An API key (never its secret).
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKey {
    pub object: ApiKeyObject,
    /// `key_` prefix.
    pub id: KeyId,
    /// Given at creation.
    pub name: String,
    pub scopes: Vec<Scope>,
    pub reach: KeyReach,
    /// Calls per minute; null means the service default.
    #[schema(required = true)]
    pub rate_limit: Option<u32>,
    /// When the key was created.
    pub created_at: Timestamp,
    /// When the key was revoked.
    #[schema(required = true)]
    pub revoked_at: Option<Timestamp>,
}
