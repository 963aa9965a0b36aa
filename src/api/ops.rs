//! Operations endpoints: liveness, readiness, metrics, and `/me`.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use crate::api::extract::Auth;
use crate::app::AppState;
use crate::clock;
use crate::core::waiting_events;
use crate::error::ApiResult;
use crate::model::keys::ApiKey;
use crate::model::ops::{Health, HealthStatus, Readiness, ReadinessStatus};
use crate::webhooks::queue;

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
/// Request, send, webhook and SMTP figures in the Prometheus text format (0.0.4). No key needed.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", security(()),
    responses((status = 200, description = "Metrics in the Prometheus text exposition format.",
        body = String, content_type = "text/plain")))]
pub async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    // The gauges of database state are read at each scrape, so that every
    // process of a deployment reports the deployment's figures. A failed
    // read shows NaN rather than a stale figure.
    let m = &s.metrics;
    match waiting_events::counts(&s.db).await {
        Ok((waiting, unmatched)) => {
            m.set("pigeonhole_provider_events_waiting", waiting as f64);
            m.set("pigeonhole_provider_events_unmatched", unmatched as f64);
        }
        Err(e) => {
            tracing::warn!(error = %e, "counting waiting provider events failed");
            m.set("pigeonhole_provider_events_waiting", f64::NAN);
            m.set("pigeonhole_provider_events_unmatched", f64::NAN);
        }
    }
    match queue::gauges(&s.db, clock::now_micros()).await {
        Ok(g) => {
            m.set("pigeonhole_webhook_queue_depth", g.depth as f64);
            m.set(
                "pigeonhole_webhook_oldest_due_seconds",
                g.oldest_due_age as f64 / 1e6,
            );
            m.set(
                "pigeonhole_webhook_endpoints_disabled",
                g.disabled_endpoints as f64,
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading the webhook queue for metrics failed");
            for name in [
                "pigeonhole_webhook_queue_depth",
                "pigeonhole_webhook_oldest_due_seconds",
                "pigeonhole_webhook_endpoints_disabled",
            ] {
                m.set(name, f64::NAN);
            }
        }
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        m.render(),
    )
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
