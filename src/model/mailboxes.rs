//! Mailboxes on the wire.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Timestamp;
use crate::ids::{DomainId, MailboxId};

crate::object_tag!(MailboxObject, "mailbox");

/// An address that holds mail.
#[derive(Debug, Serialize, ToSchema)]
pub struct Mailbox {
    pub object: MailboxObject,
    /// `mbx_` prefix.
    pub id: MailboxId,
    /// Immutable after creation.
    pub address: String,
    /// Domain name.
    pub domain: String,
    /// `dom_` prefix.
    pub domain_id: DomainId,
    /// Display name.
    pub display_name: String,
    /// Signature.
    #[schema(required = true)]
    pub signature: Option<String>,
    /// Receives mail to unknown addresses of its domain.
    pub is_catch_all: bool,
    /// Only one mailbox is default at a time.
    pub is_default: bool,
    #[schema(pattern = "^#[0-9a-fA-F]{6}$")]
    pub color: String,
    /// When it was created.
    pub created_at: Timestamp,
}

/// The body of `POST /mailboxes`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct MailboxCreate {
    /// On a verified domain of the account, or under one.
    #[schema(format = Email)]
    pub address: String,
    /// Display name.
    pub display_name: Option<String>,
    /// Signature.
    pub signature: Option<String>,
    /// Receives mail to unknown addresses of its domain.
    pub is_catch_all: Option<bool>,
    /// Setting it clears it on every other mailbox.
    pub is_default: Option<bool>,
    #[schema(pattern = "^#[0-9a-fA-F]{6}$")]
    pub color: Option<String>,
}

/// The body of `PATCH /mailboxes/{id}`; `address` cannot be changed.
#[derive(Debug, Deserialize, ToSchema)]
pub struct MailboxUpdate {
    /// Read only to refuse it (422): an address is immutable.
    #[serde(default)]
    #[schema(ignore)]
    pub address: Option<serde_json::Value>,
    /// Display name.
    pub display_name: Option<String>,
    /// Null clears it.
    #[serde(default, deserialize_with = "super::nullable")]
    #[schema(value_type = Option<String>)]
    pub signature: Option<Option<String>>,
    /// Receives mail to unknown addresses of its domain.
    pub is_catch_all: Option<bool>,
    /// Setting it clears it on every other mailbox.
    pub is_default: Option<bool>,
    #[schema(pattern = "^#[0-9a-fA-F]{6}$")]
    pub color: Option<String>,
}

/// A deleted mailbox.
#[derive(Debug, Serialize, ToSchema)]
pub struct MailboxDeleted {
    pub object: MailboxObject,
    /// `mbx_` prefix.
    pub id: MailboxId,
    pub deleted: bool,
}

super::query::query_params! {
/// The filters of `GET /mailboxes`.
pub struct MailboxFilter {
    /// Only mailboxes on this domain name.
    pub domain: Option<String>,
}
}

super::query::query_params! {
/// The options of `DELETE /mailboxes/{id}`.
pub struct MailboxDeleteQuery {
    /// Must be true: the mailbox and all its mail are deleted.
    pub confirm: Option<bool>,
}
}
