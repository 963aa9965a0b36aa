//! The one error type of the API, mapped once to the spec's `{error, code}` bodies.
//!
//! The service's rules fail with [`CoreError`] (not found, invalid, conflict,
//! forbidden, throttled, upstream, busy…), which the API carries as it is in
//! [`ApiError::Rule`] and answers with its status here; the other variants
//! are what only HTTP can go wrong with (the key, the request's size and
//! shape) and the database's faults.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::core::error::{CoreError, UpstreamKind};
pub use crate::core::error::{FieldProblem, Problems};
use crate::model::error::{ErrorBody, ErrorCode};
use crate::model::keys::Scope;
use crate::store::fault::{self, StoreFault};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing, mistyped or revoked API key")]
    Unauthorized,
    #[error("request body is larger than the 30 MB limit")]
    PayloadTooLarge,
    #[error("this route does not accept that method")]
    MethodNotAllowed,
    #[error("the request URI is longer than the {limit}-byte limit")]
    UriTooLong { limit: usize },
    #[error("the request headers exceed the limit of {limit}")]
    HeadersTooLarge { limit: String },
    /// A reply made below the handlers (a framework rejection) with its reason.
    #[error("{message}")]
    Http { status: StatusCode, message: String },
    /// A rule of the service failed. Never [`CoreError::Internal`]: that
    /// becomes [`ApiError::Store`] or [`ApiError::Internal`] (see `From`).
    #[error("{0}")]
    Rule(CoreError),
    /// The database cannot serve now (see `store::fault`): 503, or 507 when
    /// it is out of space, with `Retry-After`; the detail goes to the log.
    #[error("{}", fault_message(*.fault))]
    Store {
        fault: StoreFault,
        detail: anyhow::Error,
    },
    #[error("internal error")]
    Internal(anyhow::Error),
}

fn fault_message(fault: StoreFault) -> &'static str {
    match fault {
        StoreFault::Unavailable => "the database is unavailable; retry shortly",
        StoreFault::Full => "the database is out of space; retry later",
        StoreFault::ReadOnly => "the database is read-only; retry later",
    }
}

/// Seconds a client is asked to wait before retrying after `fault`.
fn fault_retry_after(fault: StoreFault) -> u64 {
    match fault {
        StoreFault::Unavailable => 1,
        StoreFault::Full | StoreFault::ReadOnly => 30,
    }
}

/// An internal error, unless it is a database fault that retrying cures.
impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        match fault::classify(&e) {
            Some(fault) => ApiError::Store { fault, detail: e },
            None => ApiError::Internal(e),
        }
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::Internal(e) => ApiError::from(e),
            rule => ApiError::Rule(rule),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        ApiError::from(anyhow::Error::new(e).context("database"))
    }
}

impl ApiError {
    pub fn not_found(what: &'static str) -> ApiError {
        ApiError::Rule(CoreError::NotFound(what))
    }

    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::Rule(CoreError::invalid(param, message))
    }

    /// Every problem found, the first one being `param`.
    pub fn invalid_all(problems: Vec<FieldProblem>) -> ApiError {
        ApiError::Rule(CoreError::Invalid(problems))
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::Rule(CoreError::conflict(message))
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::Rule(CoreError::Forbidden(message.into()))
    }

    pub fn upstream(kind: UpstreamKind, message: impl Into<String>) -> ApiError {
        ApiError::Rule(CoreError::Upstream {
            kind,
            message: message.into(),
        })
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            ApiError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::Http { status, .. } => *status,
            ApiError::Rule(rule) => match rule {
                CoreError::NotFound(_) => StatusCode::NOT_FOUND,
                CoreError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
                CoreError::Conflict { .. } | CoreError::KeyTaken(_) => StatusCode::CONFLICT,
                CoreError::Forbidden(_) | CoreError::MissingScope { .. } => StatusCode::FORBIDDEN,
                CoreError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
                CoreError::Upstream { kind, .. } => match kind {
                    UpstreamKind::Unreachable => StatusCode::BAD_GATEWAY,
                    UpstreamKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                },
                CoreError::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
                CoreError::SentNotRecorded { .. } | CoreError::Internal(_) => {
                    StatusCode::INTERNAL_SERVER_ERROR
                }
            },
            ApiError::Store { fault, .. } => match fault {
                StoreFault::Full => StatusCode::INSUFFICIENT_STORAGE,
                StoreFault::Unavailable | StoreFault::ReadOnly => StatusCode::SERVICE_UNAVAILABLE,
            },
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// Whether the request took effect despite the error, so that a retry
    /// under the same `Idempotency-Key` must replay this reply rather than
    /// run again.
    pub fn took_effect(&self) -> bool {
        matches!(self, ApiError::Rule(rule) if rule.took_effect())
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Unauthorized => ErrorCode::Unauthorized,
            ApiError::PayloadTooLarge => ErrorCode::PayloadTooLarge,
            ApiError::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            ApiError::UriTooLong { .. } => ErrorCode::UriTooLong,
            ApiError::HeadersTooLarge { .. } => ErrorCode::HeadersTooLarge,
            ApiError::Http { status, .. } => match status.as_u16() {
                404 => ErrorCode::NotFound,
                408 => ErrorCode::RequestTimeout,
                413 => ErrorCode::PayloadTooLarge,
                422 => ErrorCode::InvalidRequest,
                429 => ErrorCode::RateLimited,
                s if s >= 500 => ErrorCode::ServerError,
                _ => ErrorCode::BadRequest,
            },
            ApiError::Rule(rule) => match rule {
                CoreError::NotFound(_) => ErrorCode::NotFound,
                CoreError::Invalid(_) => ErrorCode::InvalidRequest,
                CoreError::Conflict { .. } | CoreError::KeyTaken(_) => ErrorCode::Conflict,
                CoreError::Forbidden(_) | CoreError::MissingScope { .. } => ErrorCode::Forbidden,
                CoreError::RateLimited { .. } => ErrorCode::RateLimited,
                CoreError::Upstream { .. }
                | CoreError::Busy { .. }
                | CoreError::SentNotRecorded { .. }
                | CoreError::Internal(_) => ErrorCode::ServerError,
            },
            ApiError::Store { .. } | ApiError::Internal(_) => ErrorCode::ServerError,
        }
    }

    /// The body of the reply (spec `{error, code}` and the fields of each
    /// kind). Internal detail is left out: see [`IntoResponse`].
    pub fn body(&self) -> ErrorBody {
        let mut body = ErrorBody::new(self.to_string(), self.code());
        match self {
            ApiError::Rule(CoreError::MissingScope { required, scopes }) => {
                body.required_scope = Scope::parse(required);
                body.scopes = Some(scopes.iter().filter_map(|s| Scope::parse(s)).collect());
            }
            ApiError::Rule(CoreError::Invalid(problems)) => {
                body.param = problems.first().map(|p| p.param.clone());
            }
            ApiError::Rule(CoreError::SentNotRecorded {
                id,
                provider_message_id,
                ..
            }) => {
                body.id = Some(crate::ids::Id::from_stored(id.clone()));
                body.provider_message_id = Some(provider_message_id.clone());
            }
            ApiError::Internal(_) | ApiError::Rule(CoreError::Internal(_)) => {
                body.error = "the server failed to handle this request".into();
            }
            _ => {}
        }
        body
    }

    /// Seconds to wait before retrying, when the reply says.
    fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Rule(CoreError::Conflict { retry_after, .. }) => *retry_after,
            ApiError::Rule(
                CoreError::RateLimited { retry_after, .. } | CoreError::Busy { retry_after, .. },
            ) => Some(*retry_after),
            ApiError::Store { fault, .. } => Some(fault_retry_after(*fault)),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match &self {
            // The detail goes to the log, never to the client.
            ApiError::Internal(e) | ApiError::Rule(CoreError::Internal(e)) => {
                tracing::error!(error = format!("{e:#}"), "internal error");
            }
            ApiError::Store { fault, detail } => {
                tracing::warn!(error = format!("{detail:#}"), ?fault, "database fault");
            }
            _ => {}
        }
        let mut resp = (self.status(), axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after() {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
