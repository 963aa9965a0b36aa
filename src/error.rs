//! The one error type of the API, mapped once to the spec's `{error, code}` bodies.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// One problem with one field of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    pub param: String,
    pub message: String,
}

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
    #[error("{}", .0.iter().map(|p| format!("{}: {}", p.param, p.message)).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldProblem>),
    #[error("{message}")]
    RateLimited { message: String, retry_after: u64 },
    /// An upstream (the provider) failed; `status` is 502 or 503.
    #[error("{message}")]
    Upstream { status: u16, message: String },
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
            ApiError::Invalid(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Upstream { status, .. } => {
                StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY)
            }
            ApiError::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Unauthorized => "unauthorized",
            ApiError::MissingScope { .. } | ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::Conflict { .. } => "conflict",
            ApiError::PayloadTooLarge => "payload_too_large",
            ApiError::Invalid(_) => "invalid_request",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::Upstream { .. } | ApiError::Busy { .. } => "server_error",
            ApiError::Internal(_) => "server_error",
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
        let mut body = json!({ "error": self.to_string(), "code": self.code() });
        let mut retry_after = None;
        match &self {
            ApiError::MissingScope { required, scopes } => {
                body["required_scope"] = json!(required);
                body["scopes"] = json!(scopes);
            }
            ApiError::Invalid(problems) => {
                if let Some(first) = problems.first() {
                    body["param"] = json!(first.param);
                }
            }
            ApiError::Conflict {
                retry_after: Some(s),
                ..
            } => retry_after = Some(*s),
            ApiError::RateLimited { retry_after: s, .. }
            | ApiError::Busy { retry_after: s, .. } => retry_after = Some(*s),
            ApiError::Internal(e) => {
                // The detail goes to the log, never to the client.
                tracing::error!(error = format!("{e:#}"), "internal error");
                body["error"] = json!("the server failed to handle this request");
            }
            _ => {}
        }
        let mut resp = (status, axum::Json(body)).into_response();
        if let Some(s) = retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

/// Collects every problem of a request; the first names `param`.
#[derive(Debug, Default)]
pub struct Problems(Vec<FieldProblem>);

impl Problems {
    pub fn new() -> Problems {
        Problems(Vec::new())
    }

    pub fn add(&mut self, param: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldProblem {
            param: param.into(),
            message: message.into(),
        });
    }

    /// Records the error of a validated conversion and yields its value if any.
    pub fn check<T>(&mut self, param: &str, r: Result<T, String>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(m) => {
                self.add(param, m);
                None
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn finish(self) -> Result<(), ApiError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ApiError::Invalid(self.0))
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
