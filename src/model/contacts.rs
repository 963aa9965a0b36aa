//! Contacts on the wire.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Timestamp;
use crate::ids::{ContactId, MailboxId};

crate::object_tag!(ContactObject, "contact");

/// An address seen in mail of a mailbox.
#[derive(Debug, Serialize, ToSchema)]
pub struct Contact {
    pub object: ContactObject,
    /// Contact id.
    pub id: ContactId,
    /// The address.
    pub address: String,
    /// Display name last seen.
    #[schema(required = true)]
    pub name: Option<String>,
    /// The mailbox address.
    pub mailbox: String,
    /// `mbx_` prefix.
    pub mailbox_id: MailboxId,
    /// Messages exchanged.
    pub message_count: i64,
    /// First message.
    pub first_seen_at: Timestamp,
    /// Latest message.
    pub last_seen_at: Timestamp,
}

/// How contacts are ordered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContactOrder {
    /// By `last_seen_at`.
    #[default]
    Recent,
    /// By `message_count`.
    Frequent,
}

impl ContactOrder {
    pub fn parse(s: &str) -> Option<ContactOrder> {
        match s {
            "recent" => Some(ContactOrder::Recent),
            "frequent" => Some(ContactOrder::Frequent),
            _ => None,
        }
    }
}

super::query::query_params! {
/// The filters of `GET /contacts`.
pub struct ContactListQuery {
    /// recent (default): by `last_seen_at`; frequent: by `message_count`.
    #[param(inline)]
    pub order: Option<ContactOrder>,
    /// Substring of the address or name.
    pub q: Option<String>,
    /// Only contacts of this mailbox address.
    #[param(inline)]
    pub mailbox: Option<super::query::Address>,
    /// Only contacts of this mailbox (`mbx_` id).
    #[param(inline)]
    pub mailbox_id: Option<crate::ids::MailboxId>,
}
}
