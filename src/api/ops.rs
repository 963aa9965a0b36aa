//! Operations endpoints: liveness, readiness, metrics, and `/me`.

use std::fmt::Write;

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use crate::api::extract::Auth;
use crate::app::AppState;
use crate::core::waiting_events;
use crate::error::ApiResult;
use crate::model::keys::ApiKey;
use crate::model::ops::{Health, HealthStatus, Readiness, ReadinessStatus};

/// Liveness
///
/// Answers as long as the process serves HTTP. No key needed.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", security(()),
    responses((status = 200, description = "The process is alive.", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: HealthStatus,
    })
}

/// Readiness
///
/// Checks that the database answers. No key needed.
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", security(()),
    responses(
        (status = 200, description = "Ready to serve.", body = Readiness),
        (status = 503, description = "The database is unreachable.", body = Readiness),
    ))]
pub async fn readyz(State(s): State<AppState>) -> (StatusCode, Json<Readiness>) {
    match s.db.ping().await {
        Ok(()) => (
            StatusCode::OK,
            Json(Readiness {
                status: ReadinessStatus::Ready,
                error: None,
                code: None,
            }),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(Readiness {
                    status: ReadinessStatus::Unavailable,
                    error: Some("database unreachable".into()),
                    code: Some("server_error".into()),
                }),
            )
        }
    }
}

/// Prometheus metrics
///
/// Request counters and latencies in the Prometheus text format (0.0.4). No key needed.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", security(()),
    responses((status = 200, description = "Metrics in the Prometheus text exposition format.",
        body = String, content_type = "text/plain")))]
pub async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    let mut text = s.metrics.render();
    // Read from the database, so that every process reports the same count.
    match waiting_events::counts(&s.db).await {
        Ok((waiting, unmatched)) => {
            text.push_str(
                "# HELP pigeonhole_provider_events_waiting Provider events stored and not applied yet (planned outcomes not due, or no message yet).\n\
                 # TYPE pigeonhole_provider_events_waiting gauge\n",
            );
            let _ = writeln!(text, "pigeonhole_provider_events_waiting {waiting}");
            text.push_str(
                "# HELP pigeonhole_provider_events_unmatched Provider events waiting for a message that is not recorded (dropped after 7 days).\n\
                 # TYPE pigeonhole_provider_events_unmatched gauge\n",
            );
            let _ = writeln!(text, "pigeonhole_provider_events_unmatched {unmatched}");
        }
        Err(e) => tracing::warn!(error = %e, "counting waiting provider events failed"),
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// The calling API key
///
/// The key that made the call: its scopes, reach and rate limit. Needs no scope.
#[utoipa::path(get, path = "/me", operation_id = "getMe",
    security(("bearer" = [])),
    responses((status = 200, description = "The calling key.", body = ApiKey)))]
pub async fn me(Auth(key): Auth) -> ApiResult<Json<ApiKey>> {
    Ok(Json(key.to_wire()))
}
