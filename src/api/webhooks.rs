//! `/webhooks` and `/webhook-deliveries`: endpoints, the delivery log, ping
//! and replay.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use crate::api::extract::{ApiJson, Auth, Params, PathId};
use crate::api::pagination::{PageQuery, ReadPage};
use crate::app::AppState;
use crate::auth::Scope;
use crate::error::{ApiError, ApiResult, Problems};
use crate::ids::{DeliveryId, DeliveryKind, WebhookId, WebhookKind};
use crate::model::List;
use crate::model::webhooks::{
    DeliveryFilter, Webhook, WebhookCreate, WebhookDeleteQuery, WebhookDeleted, WebhookDelivery,
    WebhookDisabled, WebhookObject, WebhookPing, WebhookRemoved, WebhookReplay, WebhookUpdate,
};
use crate::webhooks::deliveries::{self, SyncResult};
use crate::webhooks::endpoints::{self, NewWebhook, WebhookChanges};

/// List webhook endpoints
///
/// Unpaged: every endpoint the key may see, without secrets (`has_more` is always false).
#[utoipa::path(get, path = "/webhooks", operation_id = "listWebhooks",
    security(("bearer" = ["webhooks:read"])),
    responses((status = 200, description = "Every endpoint.", body = List<Webhook>)))]
pub async fn list(State(s): State<AppState>, Auth(key): Auth) -> ApiResult<Json<List<Webhook>>> {
    key.require(Scope::WebhooksRead)?;
    let data = endpoints::list(&s.db, &key.reach)
        .await?
        .iter()
        .map(|w| w.to_wire())
        .collect();
    Ok(Json(List::whole(data)))
}

/// Read a webhook endpoint
///
/// Never shows the secret.
#[utoipa::path(get, path = "/webhooks/{id}", operation_id = "getWebhook",
    params(("id" = inline(WebhookId), Path, description = "The webhook id.")),
    security(("bearer" = ["webhooks:read"])),
    responses((status = 200, description = "The endpoint.", body = Webhook)))]
pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<WebhookKind>,
) -> ApiResult<Json<Webhook>> {
    key.require(Scope::WebhooksRead)?;
    let id = id.get()?;
    let w = endpoints::get(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::not_found("webhook"))?;
    Ok(Json(w.to_wire()))
}

/// Create a webhook endpoint
///
/// Answers the endpoint with its signing `secret`, shown only here and on rotation. The URL must
/// be https and must not resolve to a private, loopback, link-local or metadata address
/// (loopback http is allowed outside production). A key reaching only part of the account must
/// give a `mailbox_id`.
#[utoipa::path(post, path = "/webhooks", operation_id = "createWebhook",
    request_body = WebhookCreate,
    security(("bearer" = ["webhooks:write"])),
    responses((status = 201, description = "Created; includes `secret`.", body = Webhook)))]
pub async fn create(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<WebhookCreate>,
) -> ApiResult<(StatusCode, Json<Webhook>)> {
    key.require(Scope::WebhooksWrite)?;
    let input = NewWebhook {
        url: body.url,
        events: body.events,
        mailbox_id: body.mailbox_id.flatten(),
        description: body.description,
        enabled: body.enabled,
    };
    let (w, secret) = endpoints::create(&s.db, s.webhooks.sender(), &key, input).await?;
    Ok((StatusCode::CREATED, Json(w.to_wire_with_secret(secret))))
}

/// Change a webhook endpoint
///
/// Only fields sent change. `enabled: true` clears the failure count; `rotate_secret: true`
/// replaces the secret and answers the new one once.
#[utoipa::path(patch, path = "/webhooks/{id}", operation_id = "updateWebhook",
    params(("id" = inline(WebhookId), Path, description = "The webhook id.")),
    request_body = WebhookUpdate,
    security(("bearer" = ["webhooks:write"])),
    responses((status = 200,
        description = "The endpoint as it now is (with `secret` after a rotation).",
        body = Webhook)))]
pub async fn update(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<WebhookKind>,
    ApiJson(body): ApiJson<WebhookUpdate>,
) -> ApiResult<Json<Webhook>> {
    key.require(Scope::WebhooksWrite)?;
    let id = id.get()?;
    let changes = WebhookChanges {
        url: body.url,
        events: body.events,
        mailbox_id: body.mailbox_id,
        description: body.description.map(Option::unwrap_or_default),
        enabled: body.enabled,
        rotate_secret: body.rotate_secret.unwrap_or(false),
    };
    let (w, secret) = endpoints::update(&s.db, s.webhooks.sender(), &key, &id, changes).await?;
    Ok(Json(match secret {
        Some(secret) => w.to_wire_with_secret(secret),
        None => w.to_wire(),
    }))
}

/// Delete or disable a webhook endpoint
///
/// Deletes the endpoint and all its deliveries; with `disable_only=true` only disables it,
/// keeping endpoint and history (the reply is then the endpoint with `deleted: false`).
#[utoipa::path(delete, path = "/webhooks/{id}", operation_id = "deleteWebhook",
    params(
        ("id" = inline(WebhookId), Path, description = "The webhook id."),
        WebhookDeleteQuery,
    ),
    security(("bearer" = ["webhooks:write"])),
    responses((status = 200, description = "Deleted, or disabled.", body = WebhookDeleted)))]
pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<WebhookKind>,
    params: Params,
) -> ApiResult<Json<WebhookDeleted>> {
    key.require(Scope::WebhooksWrite)?;
    let mut problems = Problems::new();
    let q: WebhookDeleteQuery = params.query(&mut problems);
    problems.finish()?;
    let disable_only = q.disable_only.unwrap_or(false);
    let id = id.get()?;
    if disable_only {
        let w = endpoints::disable(&s.db, &key, &id).await?;
        return Ok(Json(WebhookDeleted::Disabled(Box::new(WebhookDisabled {
            webhook: w.to_wire(),
            deleted: false,
        }))));
    }
    let w = endpoints::delete(&s.db, &key, &id).await?;
    Ok(Json(WebhookDeleted::Deleted(WebhookRemoved {
        object: WebhookObject,
        id: crate::ids::Id::from_stored(w.id),
        deleted: true,
    })))
}

/// 200 when the endpoint succeeded, 502 with the same body when it did not.
fn sync_status(r: &SyncResult) -> StatusCode {
    if r.result.succeeded {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    }
}

/// Send a test event
///
/// Sends a `webhook.test` event synchronously, without retries, and records the attempt. No
/// request body.
#[utoipa::path(post, path = "/webhooks/{id}/ping", operation_id = "pingWebhook",
    params(("id" = inline(WebhookId), Path, description = "The webhook id.")),
    security(("bearer" = ["webhooks:write"])),
    responses(
        (status = 200, description = "The endpoint answered 2xx.", body = WebhookPing),
        (status = 502, description = "The endpoint failed; the body is still the full result.",
            body = WebhookPing),
    ))]
pub async fn ping(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<WebhookKind>,
) -> ApiResult<(StatusCode, Json<WebhookPing>)> {
    key.require(Scope::WebhooksWrite)?;
    let id = id.get()?;
    let r = deliveries::ping(&s.db, &s.webhooks, &key.reach, &id).await?;
    Ok((sync_status(&r), Json(r.to_wire())))
}

/// Replay a delivery
///
/// Sends the stored payload again, synchronously and without retries, under the original
/// envelope id; recorded as the next attempt. No request body.
#[utoipa::path(post, path = "/webhook-deliveries/{id}/replay", operation_id = "replayWebhookDelivery",
    params(("id" = inline(DeliveryId), Path, description = "The delivery id.")),
    security(("bearer" = ["webhooks:write"])),
    responses(
        (status = 200, description = "The endpoint answered 2xx.", body = WebhookReplay),
        (status = 502, description = "The endpoint failed; the body is still the full result.",
            body = WebhookReplay),
    ))]
pub async fn replay(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<DeliveryKind>,
) -> ApiResult<(StatusCode, Json<WebhookReplay>)> {
    key.require(Scope::WebhooksWrite)?;
    let id = id.get()?;
    let r = deliveries::replay(&s.db, &s.webhooks, &key.reach, &id).await?;
    let reply = WebhookReplay {
        ping: r.to_wire(),
        delivery_id: r.delivery_id.clone().map(crate::ids::Id::from_stored),
    };
    Ok((sync_status(&r), Json(reply)))
}

/// List delivery attempts
///
/// Paged, newest first by `created_at`: every attempt at every endpoint the key may see.
#[utoipa::path(get, path = "/webhook-deliveries", operation_id = "listWebhookDeliveries",
    params(PageQuery, DeliveryFilter),
    security(("bearer" = ["webhooks:read"])),
    responses((status = 200, description = "A page of attempts.", body = List<WebhookDelivery>)))]
pub async fn list_deliveries(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<List<WebhookDelivery>>> {
    key.require(Scope::WebhooksRead)?;
    let mut problems = Problems::new();
    let page = s.cursors.page(&params, &mut problems);
    let q: DeliveryFilter = params.query(&mut problems);
    problems.finish()?;
    let filter = deliveries::Filter {
        webhook_id: q.webhook_id,
        event: q.event,
        succeeded: q.succeeded,
    };
    Ok(Json(
        deliveries::list(&s.db, &s.cursors, &key.reach, &filter, &page).await?,
    ))
}

/// Read a delivery attempt
#[utoipa::path(get, path = "/webhook-deliveries/{id}", operation_id = "getWebhookDelivery",
    params(("id" = inline(DeliveryId), Path, description = "The delivery id.")),
    security(("bearer" = ["webhooks:read"])),
    responses((status = 200, description = "The attempt.", body = WebhookDelivery)))]
pub async fn get_delivery(
    State(s): State<AppState>,
    Auth(key): Auth,
    id: PathId<DeliveryKind>,
) -> ApiResult<Json<WebhookDelivery>> {
    key.require(Scope::WebhooksRead)?;
    let id = id.get()?;
    let d = deliveries::get(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::not_found("webhook delivery"))?;
    Ok(Json(d.to_wire()?))
}
