//! Suppressions on the wire: addresses mail will not be sent to.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Timestamp;
use crate::ids::{MessageId, SuppressionId};

crate::object_tag!(SuppressionObject, "suppression");

/// Why an address is suppressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SuppressionReason {
    /// Added by hand.
    Manual,
    /// A permanent bounce.
    Bounce,
    /// The recipient complained.
    Complaint,
}

impl SuppressionReason {
    pub const ALL: [SuppressionReason; 3] = [
        SuppressionReason::Manual,
        SuppressionReason::Bounce,
        SuppressionReason::Complaint,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SuppressionReason::Manual => "manual",
            SuppressionReason::Bounce => "bounce",
            SuppressionReason::Complaint => "complaint",
        }
    }

    pub fn parse(s: &str) -> Option<SuppressionReason> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// An address mail will not be sent to.
#[derive(Debug, Serialize, ToSchema)]
pub struct Suppression {
    pub object: SuppressionObject,
    /// Suppression id (`sup_…`).
    pub id: SuppressionId,
    /// The suppressed address.
    pub address: String,
    pub reason: SuppressionReason,
    /// Diagnostic detail of the bounce or complaint.
    #[schema(required = true)]
    pub detail: Option<String>,
    /// The sending domain that caused it.
    #[schema(required = true)]
    pub domain: Option<String>,
    /// The message that caused it.
    #[schema(required = true)]
    pub message_id: Option<MessageId>,
    /// When it was added.
    pub created_at: Timestamp,
}

/// The body of `POST /suppressions`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SuppressionCreate {
    /// The address to suppress.
    #[schema(format = Email)]
    pub address: String,
    /// Default `manual`.
    #[schema(default = "manual")]
    pub reason: Option<SuppressionReason>,
}

/// A removed suppression.
#[derive(Debug, Serialize, ToSchema)]
pub struct SuppressionDeleted {
    pub object: SuppressionObject,
    /// Suppression id.
    pub id: SuppressionId,
    /// The address.
    pub address: String,
    pub deleted: bool,
}

super::query::query_params! {
/// The filters of `GET /suppressions`.
pub struct SuppressionFilter {
    /// Exact address.
    #[param(inline)]
    pub address: Option<super::query::NonEmptyText>,
    /// Why the address is suppressed.
    pub reason: Option<SuppressionReason>,
}
}
