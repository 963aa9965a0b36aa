//! What operators see: the metrics of `/metrics` ([`Telemetry`]) and the
//! request id that ties log lines of one request together ([`context`]).

pub mod context;
mod recorder;

pub use recorder::{
    AttemptOutcome, Limiter, ProviderErrorKind, ReplyClass, SendStatus, Telemetry, UPKEEP,
};
