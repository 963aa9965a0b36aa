//! `/webhooks` and `/webhook-deliveries`: endpoints, the delivery log, ping
//! and replay.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::extract::{ApiJson, Auth, Params, nullable};
use crate::api::pagination::ReadPage;
use crate::app::AppState;
use crate::auth::Scope;
use crate::error::{ApiError, ApiResult, Problems};
use crate::webhooks::deliveries::{self, SyncResult};
use crate::webhooks::endpoints::{self, NewWebhook, WebhookChanges};

#[derive(Deserialize)]
pub struct CreateWebhook {
    url: Option<String>,
    events: Option<Vec<String>>,
    #[serde(default, deserialize_with = "nullable")]
    mailbox_id: Option<Option<String>>,
    description: Option<String>,
    enabled: Option<bool>,
}

#[derive(Deserialize)]
pub struct UpdateWebhook {
    url: Option<String>,
    events: Option<Vec<String>>,
    #[serde(default, deserialize_with = "nullable")]
    mailbox_id: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    description: Option<Option<String>>,
    enabled: Option<bool>,
    rotate_secret: Option<bool>,
}

pub async fn list(State(s): State<AppState>, Auth(key): Auth) -> ApiResult<Json<Value>> {
    key.require(Scope::WebhooksRead)?;
    let data: Vec<Value> = endpoints::list(&s.db, &key.reach)
        .await?
        .iter()
        .map(|w| w.to_json())
        .collect();
    Ok(Json(
        json!({ "object": "list", "data": data, "has_more": false }),
    ))
}

pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::WebhooksRead)?;
    let w = endpoints::get(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::NotFound("webhook"))?;
    Ok(Json(w.to_json()))
}

pub async fn create(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<CreateWebhook>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    key.require(Scope::WebhooksWrite)?;
    let input = NewWebhook {
        url: body.url,
        events: body.events,
        mailbox_id: body.mailbox_id.flatten(),
        description: body.description,
        enabled: body.enabled,
    };
    let (w, secret) = endpoints::create(&s.db, s.webhooks.sender(), &key, input).await?;
    let mut out = w.to_json();
    out["secret"] = json!(secret);
    Ok((StatusCode::CREATED, Json(out)))
}

pub async fn update(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateWebhook>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::WebhooksWrite)?;
    let changes = WebhookChanges {
        url: body.url,
        events: body.events,
        mailbox_id: body.mailbox_id,
        description: body.description.map(Option::unwrap_or_default),
        enabled: body.enabled,
        rotate_secret: body.rotate_secret.unwrap_or(false),
    };
    let (w, secret) = endpoints::update(&s.db, s.webhooks.sender(), &key, &id, changes).await?;
    let mut out = w.to_json();
    if let Some(secret) = secret {
        out["secret"] = json!(secret);
    }
    Ok(Json(out))
}

pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::WebhooksWrite)?;
    let mut problems = Problems::new();
    let disable_only = params.flag(&mut problems, "disable_only").unwrap_or(false);
    problems.finish()?;
    if disable_only {
        let w = endpoints::disable(&s.db, &key, &id).await?;
        let mut out = w.to_json();
        out["deleted"] = json!(false);
        return Ok(Json(out));
    }
    let w = endpoints::delete(&s.db, &key, &id).await?;
    Ok(Json(
        json!({ "object": "webhook", "id": w.id, "deleted": true }),
    ))
}

/// 200 with the result when the endpoint succeeded, 502 with the same body
/// when it did not.
fn sync_reply(r: SyncResult, with_delivery_id: bool) -> (StatusCode, Json<Value>) {
    let status = if r.result.succeeded {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    };
    (status, Json(r.to_json(with_delivery_id)))
}

pub async fn ping(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    key.require(Scope::WebhooksWrite)?;
    let r = deliveries::ping(&s.db, &s.webhooks, &key.reach, &id).await?;
    Ok(sync_reply(r, false))
}

pub async fn replay(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    key.require(Scope::WebhooksWrite)?;
    let r = deliveries::replay(&s.db, &s.webhooks, &key.reach, &id).await?;
    Ok(sync_reply(r, true))
}

pub async fn list_deliveries(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::WebhooksRead)?;
    let mut problems = Problems::new();
    let page = s.cursors.page(&params, &mut problems);
    let filter = deliveries::Filter {
        webhook_id: params.text("webhook_id").map(str::to_string),
        event: params.text("event").map(str::to_string),
        succeeded: params.flag(&mut problems, "succeeded"),
    };
    problems.finish()?;
    let items = deliveries::list(&s.db, &key.reach, &filter, &page).await?;
    Ok(Json(page.envelope(&s.cursors, items)))
}

pub async fn get_delivery(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::WebhooksRead)?;
    let d = deliveries::get(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::NotFound("webhook delivery"))?;
    Ok(Json(d.to_json()))
}
