//! The core's own error: what went wrong in terms of the service's rules, not
//! of HTTP. The API maps each kind to a status once (`crate::error`).

/// One problem with one field of a request (`param` is a path such as `to[1]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldProblem {
    pub param: String,
    pub message: String,
}

/// How an upstream (the provider) failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamKind {
    /// It could not be reached or answered badly.
    Unreachable,
    /// It said it is unavailable now; retry.
    Unavailable,
}

#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{}", .0.iter().map(|p| format!("{}: {}", p.param, p.message)).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<FieldProblem>),
    #[error("{message}")]
    Conflict {
        message: String,
        retry_after: Option<u64>,
    },
    #[error("{0}")]
    Forbidden(String),
    #[error("this API key lacks the scope {required}")]
    MissingScope {
        required: &'static str,
        scopes: Vec<String>,
    },
    /// A quota or the provider's throttling: retry after this many seconds.
    #[error("{message}")]
    RateLimited { message: String, retry_after: u64 },
    #[error("{message}")]
    Upstream { kind: UpstreamKind, message: String },
    /// The provider accepted a message whose record could not be written in
    /// full: it went out, and is recorded (if at all) in a short form with
    /// status `failed`. The request had its effect.
    #[error("{message}")]
    SentNotRecorded {
        message: String,
        id: String,
        provider_message_id: String,
    },
    /// No capacity now (memory for large bodies); retry after this many seconds.
    #[error("{message}")]
    Busy { message: String, retry_after: u64 },
    /// A request's Idempotency-Key is another request's, and nothing was
    /// done: what to answer instead (a replay, or a conflict).
    #[error("this Idempotency-Key is already in use")]
    KeyTaken(crate::core::idempotency::Taken),
    #[error("internal error")]
    Internal(#[from] anyhow::Error),
}

impl CoreError {
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> CoreError {
        CoreError::Invalid(vec![FieldProblem {
            param: param.into(),
            message: message.into(),
        }])
    }

    /// Whether the request took effect despite the error, so that a retry
    /// under the same `Idempotency-Key` must replay this reply rather than
    /// run again.
    pub fn took_effect(&self) -> bool {
        matches!(self, CoreError::SentNotRecorded { .. })
    }

    pub fn conflict(message: impl Into<String>) -> CoreError {
        CoreError::Conflict {
            message: message.into(),
            retry_after: None,
        }
    }
}

impl From<sqlx::Error> for CoreError {
    fn from(e: sqlx::Error) -> Self {
        CoreError::Internal(anyhow::Error::new(e).context("database"))
    }
}

pub type CoreResult<T> = Result<T, CoreError>;

/// Collects every problem of a request, in the order found.
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

    pub fn finish(self) -> Result<(), CoreError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(CoreError::Invalid(self.0))
        }
    }
}
