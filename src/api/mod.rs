//! The HTTP skin: routing, extraction and JSON shaping. Rules live in `core`.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{delete, get, post};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::app::AppState;

pub mod admission;
pub mod attachments;
pub mod auth_layer;
pub mod body_problems;
pub mod contacts;
pub mod doc;
pub mod domains;
pub mod drafts;
pub mod edge;
pub mod emails;
pub mod extract;
pub mod labels;
pub mod mailboxes;
pub mod messages;
pub mod metrics;
pub mod openapi;
pub mod ops;
pub mod pagination;
pub mod rate_limit;
pub mod sns;
pub mod suppressions;
pub mod threads;
pub mod tracking;
pub mod webhooks;

/// Spec §8: request bodies up to 30 MB.
pub const BODY_LIMIT: usize = 30 * 1024 * 1024;

/// The `/api/v1` routes whose handlers carry their OpenAPI description
/// (`#[utoipa::path]`): registering a handler here documents it.
fn documented_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(labels::list, labels::create))
        .routes(routes!(labels::get, labels::update, labels::delete))
        .routes(routes!(emails::list, emails::send))
        .routes(routes!(emails::batch))
        .routes(routes!(emails::get))
        .routes(routes!(emails::attachment))
        .routes(routes!(messages::list))
        .routes(routes!(contacts::list))
        .routes(routes!(threads::list))
        .routes(routes!(threads::get, threads::patch, threads::delete))
        .routes(routes!(threads::reply))
        .routes(routes!(drafts::send))
        .routes(routes!(drafts::list, drafts::create))
        .routes(routes!(drafts::get, drafts::update, drafts::delete))
        .routes(routes!(messages::get, messages::patch))
        .routes(routes!(messages::raw))
        .routes(routes!(messages::attachment))
}

/// The generated part of the OpenAPI document (paths relative to `/api/v1`).
pub fn generated_openapi() -> utoipa::openapi::OpenApi {
    documented_routes().split_for_parts().1
}

pub fn router(state: AppState) -> Router {
    let (documented, _) = documented_routes().split_for_parts();
    let api = documented
        .route("/me", get(ops::me))
        .route("/provider", get(tracking::provider))
        // Sending is not typed yet: its method joins the documented list's path.
        .route(
            "/suppressions",
            get(suppressions::list).post(suppressions::add),
        )
        .route("/suppressions/{id}", delete(suppressions::remove))
        .route("/domains", get(domains::list).post(domains::create))
        .route(
            "/domains/{id}",
            get(domains::get)
                .patch(domains::update)
                .delete(domains::delete),
        )
        .route("/domains/{id}/verify", post(domains::verify))
        .route("/mailboxes", get(mailboxes::list).post(mailboxes::create))
        .route(
            "/mailboxes/{id}",
            get(mailboxes::get)
                .patch(mailboxes::update)
                .delete(mailboxes::delete),
        )
        .route("/webhooks", get(webhooks::list).post(webhooks::create))
        .route(
            "/webhooks/{id}",
            get(webhooks::get)
                .patch(webhooks::update)
                .delete(webhooks::delete),
        )
        .route("/webhooks/{id}/ping", post(webhooks::ping))
        .route("/webhook-deliveries", get(webhooks::list_deliveries))
        .route("/webhook-deliveries/{id}", get(webhooks::get_delivery))
        .route("/webhook-deliveries/{id}/replay", post(webhooks::replay))
        .fallback(not_found)
        // Inside authentication: a caller without a valid key takes nothing.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            admission::admit,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth_layer::authenticate,
        ));

    Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .route("/t/o/{token}", get(tracking::open))
        .route(
            "/sns/ses",
            post(sns::receive).layer(middleware::from_fn_with_state(
                state.clone(),
                admission::admit,
            )),
        )
        .route("/api/v1/openapi.json", get(openapi::document))
        .nest("/api/v1", api)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            edge::HeadLimits::from(&state.config.http),
            edge::edge,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

async fn not_found() -> crate::error::ApiError {
    crate::error::ApiError::NotFound("route")
}
