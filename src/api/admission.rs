//! Admission of large request bodies by the memory budget of messages
//! (`core::memory`), which the SMTP listener shares: a request whose body
//! would cost more than is free waits, first come first served, up to
//! `PIGEONHOLE_MESSAGE_MEMORY_WAIT`, then gets 503 with `Retry-After`. Waiting
//! a little suits an API client better than SMTP's "try later": a large send
//! usually finds memory within a second, and the client's request just
//! takes longer. The reservation is held until the reply is ready, the send
//! recorded. Small bodies pass at once.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::BODY_LIMIT;
use crate::app::AppState;
use crate::core::error::CoreError;
use crate::core::memory;
use crate::error::ApiError;

/// Seconds a refused client is asked to wait before trying again.
const RETRY_AFTER_SECS: u64 = 5;

/// Bytes the body may have: its `Content-Length`, else the limit when it
/// comes in chunks, else none. Over the limit, nothing: it is refused (413)
/// before it is read.
fn body_size(headers: &HeaderMap) -> usize {
    match headers.get(header::CONTENT_LENGTH) {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|n| *n <= BODY_LIMIT)
            .unwrap_or(0),
        None if headers.contains_key(header::TRANSFER_ENCODING) => BODY_LIMIT,
        None => 0,
    }
}

pub async fn admit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let cost = memory::cost(body_size(req.headers()), state.db.backend());
    if cost == 0 {
        return next.run(req).await;
    }
    let Some(reservation) = state
        .memory
        .reserve(cost, state.config.message_memory_wait)
        .await
    else {
        tracing::warn!(
            cost,
            available = state.memory.available_bytes(),
            "a large request found no memory for it"
        );
        state.metrics.refused(crate::telemetry::Limiter::Memory);
        return ApiError::Rule(CoreError::Busy {
            message: "the server is busy with other large messages; retry later".into(),
            retry_after: RETRY_AFTER_SECS,
        })
        .into_response();
    };
    let response = next.run(req).await;
    drop(reservation);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_size_comes_from_the_length_or_is_the_limit_for_chunks() {
        assert_eq!(body_size(&headers(&[])), 0);
        assert_eq!(body_size(&headers(&[("content-length", "1234")])), 1234);
        assert_eq!(
            body_size(&headers(&[("transfer-encoding", "chunked")])),
            BODY_LIMIT
        );
        // Refused unread (413), so nothing to reserve; nonsense likewise.
        let over = (BODY_LIMIT + 1).to_string();
        assert_eq!(body_size(&headers(&[("content-length", &over)])), 0);
        assert_eq!(body_size(&headers(&[("content-length", "x")])), 0);
    }
}
