//! The HTTP skin: routing, extraction and JSON shaping. Rules live in `core`.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
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
        .routes(routes!(suppressions::list, suppressions::add))
        .routes(routes!(suppressions::remove))
        .routes(routes!(domains::list, domains::create))
        .routes(routes!(domains::get, domains::update, domains::delete))
        .routes(routes!(domains::verify))
        .routes(routes!(mailboxes::list, mailboxes::create))
        .routes(routes!(
            mailboxes::get,
            mailboxes::update,
            mailboxes::delete
        ))
        .routes(routes!(webhooks::list, webhooks::create))
        .routes(routes!(webhooks::get, webhooks::update, webhooks::delete))
        .routes(routes!(webhooks::ping))
        .routes(routes!(webhooks::list_deliveries))
        .routes(routes!(webhooks::get_delivery))
        .routes(routes!(webhooks::replay))
        .routes(routes!(ops::me))
        .routes(routes!(tracking::provider))
}

/// The routes that take no key, documented the same way (absolute paths).
/// `POST /sns/ses` is apart: it gets the admission layer of its own.
fn public_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
        .routes(routes!(tracking::open))
        .routes(routes!(doc::document))
}

fn sns_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(sns::receive))
}

/// The generated description of the routes that take no key.
pub fn public_openapi() -> utoipa::openapi::OpenApi {
    let mut doc = public_routes().split_for_parts().1;
    doc.merge(sns_routes().split_for_parts().1);
    doc
}

/// The generated part of the OpenAPI document (paths relative to `/api/v1`).
pub fn generated_openapi() -> utoipa::openapi::OpenApi {
    documented_routes().split_for_parts().1
}

pub fn router(state: AppState) -> Router {
    let (documented, _) = documented_routes().split_for_parts();
    let api = documented
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

    let (public, _) = public_routes().split_for_parts();
    let (sns, _) = sns_routes().split_for_parts();
    let sns = sns.route_layer(middleware::from_fn_with_state(
        state.clone(),
        admission::admit,
    ));
    Router::new()
        .merge(public)
        .merge(sns)
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
    crate::error::ApiError::not_found("route")
}
