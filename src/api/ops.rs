//! Operations endpoints: liveness, readiness, metrics, and `/me`.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::api::extract::Auth;
use crate::app::AppState;
use crate::error::ApiResult;
use crate::model::keys::ApiKey;

pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

pub async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    match s.db.ping().await {
        Ok(()) => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(
                    json!({ "status": "unavailable", "error": "database unreachable", "code": "server_error" }),
                ),
            )
        }
    }
}

pub async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        s.metrics.render(),
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
