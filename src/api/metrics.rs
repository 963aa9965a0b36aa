//! The HTTP side of the metrics and of request tracing: every request is
//! counted and timed by route and status (into `crate::telemetry`), its
//! route is written on its span, and it runs with its request id (see
//! `telemetry::context`). Every label comes from a fixed set, so nothing a
//! client sends can add series.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use crate::app::AppState;
use crate::telemetry::context;

/// The method label: the standard methods, anything else `other`.
pub fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

pub async fn track(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(req.method());
    // The matched route template keeps label cardinality bounded.
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    tracing::Span::current().record("route", route.as_str());
    // Set by the request-id layer outside (the client's, or a new one).
    let id: Option<Arc<str>> = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(Arc::from);
    let resp = match id {
        Some(id) => context::scope(id, next.run(req)).await,
        None => next.run(req).await,
    };
    state.metrics.http_request(
        method,
        &route,
        resp.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    resp
}
