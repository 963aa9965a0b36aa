//! The one error type of the API, mapped once to the spec's `{error, code}` bodies.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::core::error::{CoreError, UpstreamKind};
pub use crate::core::error::{FieldProblem, Problems};
use crate::model::error::{ErrorBody, ErrorCode};
use crate::model::keys::Scope;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("missing, mistyped or revoked API key")]
    Unauthorized,
    #[error("this API key lacks the scope {required}")]
    MissingScope {
        required: &'static str,
        scopes: Vec<String>,
    },
    #[error("{0}")]
    Forbidden(String),
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{message}")]
    Conflict {
        message: String,
        retry_after: Option<u64>,
    },
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
    #[error("{}", .0.iter().map(|p| format!("{}: {}", p.param, p.message)).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldProblem>),
    #[error("{message}")]
    RateLimited { message: String, retry_after: u64 },
    /// An upstream (the provider) failed; `status` is 502 or 503.
    #[error("{message}")]
    Upstream { status: u16, message: String },
    /// The provider accepted a message whose record could not be written in
    /// full: it went out, and is recorded (if at all) in a short form with
    /// status `failed`. The request had its effect: an idempotent retry
    /// replays this reply instead of sending again.
    #[error("{message}")]
    SentNotRecorded {
        message: String,
        id: String,
        provider_message_id: String,
    },
    /// This instance cannot take the request now (503 with `Retry-After`).
    #[error("{message}")]
    Busy { message: String, retry_after: u64 },
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

impl ApiError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::Invalid(vec![FieldProblem {
            param: param.into(),
            message: message.into(),
        }])
    }

    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::Conflict {
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::MissingScope { .. } | ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            ApiError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::Http { status, .. } => *status,
            ApiError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Upstream { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            ApiError::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::SentNotRecorded { .. } | ApiError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }

    /// Whether the request took effect despite the error, so that a retry
    /// under the same `Idempotency-Key` must replay this reply rather than
    /// run again.
    pub fn took_effect(&self) -> bool {
        matches!(self, ApiError::SentNotRecorded { .. })
    }

    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Unauthorized => ErrorCode::Unauthorized,
            ApiError::MissingScope { .. } | ApiError::Forbidden(_) => ErrorCode::Forbidden,
            ApiError::NotFound(_) => ErrorCode::NotFound,
            ApiError::Conflict { .. } => ErrorCode::Conflict,
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
            ApiError::Invalid(_) => ErrorCode::InvalidRequest,
            ApiError::RateLimited { .. } => ErrorCode::RateLimited,
            ApiError::Upstream { .. } | ApiError::Busy { .. } => ErrorCode::ServerError,
            ApiError::SentNotRecorded { .. } | ApiError::Internal(_) => ErrorCode::ServerError,
        }
    }

    /// The body of the reply (spec `{error, code}` and the fields of each
    /// kind). Internal detail is left out: see [`IntoResponse`].
    pub fn body(&self) -> ErrorBody {
        let mut body = ErrorBody::new(self.to_string(), self.code());
        match self {
            ApiError::MissingScope { required, scopes } => {
                body.required_scope = Scope::parse(required);
                body.scopes = Some(scopes.iter().filter_map(|s| Scope::parse(s)).collect());
            }
            ApiError::Invalid(problems) => {
                body.param = problems.first().map(|p| p.param.clone());
            }
            ApiError::SentNotRecorded {
                id,
                provider_message_id,
                ..
            } => {
                body.id = Some(crate::ids::Id::from_stored(id.clone()));
                body.provider_message_id = Some(provider_message_id.clone());
            }
            ApiError::Internal(_) => {
                body.error = "the server failed to handle this request".into();
            }
            _ => {}
        }
        body
    }
}

/// Each rule's failure answered with its status, once.
impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        match e {
            CoreError::NotFound(what) => ApiError::NotFound(what),
            CoreError::Invalid(problems) => ApiError::Invalid(problems),
            CoreError::Conflict {
                message,
                retry_after,
            } => ApiError::Conflict {
                message,
                retry_after,
            },
            CoreError::Forbidden(m) => ApiError::Forbidden(m),
            CoreError::MissingScope { required, scopes } => {
                ApiError::MissingScope { required, scopes }
            }
            CoreError::RateLimited {
                message,
                retry_after,
            } => ApiError::RateLimited {
                message,
                retry_after,
            },
            CoreError::Upstream { kind, message } => ApiError::Upstream {
                status: match kind {
                    UpstreamKind::Unreachable => 502,
                    UpstreamKind::Unavailable => 503,
                },
                message,
            },
            CoreError::SentNotRecorded {
                message,
                id,
                provider_message_id,
            } => ApiError::SentNotRecorded {
                message,
                id,
                provider_message_id,
            },
            CoreError::Busy {
                message,
                retry_after,
            } => ApiError::Busy {
                message,
                retry_after,
            },
            CoreError::Internal(e) => ApiError::Internal(e),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        ApiError::Internal(anyhow::Error::new(e).context("database"))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = self.body();
        let retry_after = match &self {
            ApiError::Conflict {
                retry_after: Some(s),
                ..
            } => Some(*s),
            ApiError::RateLimited { retry_after: s, .. }
            | ApiError::Busy { retry_after: s, .. } => Some(*s),
            ApiError::Internal(e) => {
                // The detail goes to the log, never to the client.
                tracing::error!(error = format!("{e:#}"), "internal error");
                None
            }
            _ => None,
        };
        let mut resp = (status, axum::Json(body)).into_response();
        if let Some(s) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
