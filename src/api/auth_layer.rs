//! Authenticates every `/api/v1` call and applies the per-key rate limit,
//! stamping the rate-limit headers on every reply, errors included.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::api::rate_limit::Decision;
use crate::app::AppState;
use crate::auth;
use crate::core::error::CoreError;
use crate::error::ApiError;
use crate::telemetry::Limiter;

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn stamp(resp: &mut Response, d: &Decision) {
    let h = resp.headers_mut();
    h.insert("x-ratelimit-limit", HeaderValue::from(d.limit));
    h.insert("x-ratelimit-remaining", HeaderValue::from(d.remaining));
    h.insert("x-ratelimit-reset", HeaderValue::from(d.reset));
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let now = now_secs();
    let key = match bearer(req.headers()) {
        Some(token) => match auth::authenticate(&state.db, token).await {
            Ok(k) => k,
            Err(e) => return ApiError::from(e).into_response(),
        },
        None => None,
    };
    let Some(key) = key else {
        // Unauthenticated calls are limited per client address, which also
        // slows down anyone guessing keys.
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip().to_string())
            .unwrap_or_else(|| "unknown".into());
        let d = state
            .address_limiter
            .check(&format!("ip:{peer}"), state.config.rate_limit, now);
        let mut resp = if d.allowed {
            ApiError::Unauthorized.into_response()
        } else {
            state.metrics.refused(Limiter::Address);
            limited(&d, now).into_response()
        };
        stamp(&mut resp, &d);
        return resp;
    };
    tracing::Span::current().record("key_id", key.id.as_str());
    let limit = key.rate_limit.unwrap_or(state.config.rate_limit);
    let d = state.rate_limiter.check(&key.id, limit, now).await;
    let mut resp = if d.allowed {
        req.extensions_mut().insert(key);
        next.run(req).await
    } else {
        state.metrics.refused(Limiter::Key);
        limited(&d, now).into_response()
    };
    stamp(&mut resp, &d);
    resp
}

fn limited(d: &Decision, now: u64) -> ApiError {
    ApiError::Rule(CoreError::RateLimited {
        message: format!("rate limit of {} calls per minute exceeded", d.limit),
        retry_after: d.reset.saturating_sub(now).max(1),
    })
}
