//! The body of every non-2xx reply (spec §7).

use serde::Serialize;
use utoipa::ToSchema;

use super::keys::Scope;
use crate::ids::MessageId;

/// For programs. The last five come from the HTTP edge on any route: 405
/// `method_not_allowed`, 408 `request_timeout` (the body did not arrive in
/// time), 414 `uri_too_long`, 431 `headers_too_large`, and `bad_request`
/// for a request the framework could not read (such as a malformed path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    Unauthorized,
    Forbidden,
    NotFound,
    Conflict,
    PayloadTooLarge,
    InvalidRequest,
    RateLimited,
    ServerError,
    MethodNotAllowed,
    RequestTimeout,
    UriTooLong,
    HeadersTooLarge,
    BadRequest,
}

/// Every non-2xx reply (spec §7).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// Human-readable; for 422 it lists every problem.
    pub error: String,
    pub code: ErrorCode,
    /// 422 only: the first offending field (a JSON path such as `to[1]`, or `body`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// 403 for a missing scope: the scope the call needs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required_scope: Option<Scope>,
    /// 403 for a missing scope: the key's scopes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<Scope>>,
    /// 500 from a send only: the provider accepted the message but its full
    /// record failed. The message's id; it is listed with status `failed`. It
    /// was sent: do not send it again (an `Idempotency-Key` retry replays this
    /// reply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<MessageId>,
    /// With `id`: the provider's id of the message it accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider_message_id: Option<String>,
}

impl ErrorBody {
    pub fn new(error: impl Into<String>, code: ErrorCode) -> ErrorBody {
        ErrorBody {
            error: error.into(),
            code,
            param: None,
            required_scope: None,
            scopes: None,
            id: None,
            provider_message_id: None,
        }
    }
}
