//! `/labels`: names with a colour that threads can carry.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::extract::{ApiJson, Auth};
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::labels::{self, DEFAULT_COLOR};
use crate::core::validate;
use crate::error::{ApiError, ApiResult, Problems};

#[derive(Deserialize)]
pub struct LabelBody {
    name: Option<String>,
    color: Option<String>,
}

pub async fn list(State(s): State<AppState>, Auth(key): Auth) -> ApiResult<Json<Value>> {
    key.require(Scope::MailRead)?;
    let data: Vec<Value> = labels::list(&s.db)
        .await?
        .iter()
        .map(|l| l.to_json())
        .collect();
    Ok(Json(
        json!({"object": "list", "data": data, "has_more": false}),
    ))
}

pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailRead)?;
    let l = labels::find(&s.db, &id)
        .await?
        .ok_or(ApiError::NotFound("label"))?;
    Ok(Json(l.to_json()))
}

fn check(
    body: &LabelBody,
    name_required: bool,
) -> Result<(Option<String>, Option<String>), ApiError> {
    let mut p = Problems::new();
    let name = match &body.name {
        Some(n) => p.check("name", labels::validate_name(n)),
        None if name_required => {
            p.add("name", "is required");
            None
        }
        None => None,
    };
    let color = body
        .color
        .as_deref()
        .and_then(|c| p.check("color", validate::color(c)));
    p.finish()?;
    Ok((name, color))
}

pub async fn create(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<LabelBody>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    key.require(Scope::MailWrite)?;
    let (name, color) = check(&body, true)?;
    let name = name.ok_or_else(|| ApiError::invalid("name", "is required"))?;
    let l = labels::create(&s.db, &name, color.as_deref().unwrap_or(DEFAULT_COLOR)).await?;
    Ok((StatusCode::CREATED, Json(l.to_json())))
}

/// Renames or recolours; labels are account-wide, so only whole-account keys.
pub async fn update(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<LabelBody>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailWrite)?;
    let (name, color) = check(&body, false)?;
    let l = labels::find(&s.db, &id)
        .await?
        .ok_or(ApiError::NotFound("label"))?;
    key.require_account_reach("changing a label")?;
    Ok(Json(
        labels::update(&s.db, &l, name, color).await?.to_json(),
    ))
}

pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailWrite)?;
    let l = labels::find(&s.db, &id)
        .await?
        .ok_or(ApiError::NotFound("label"))?;
    key.require_account_reach("deleting a label")?;
    labels::delete(&s.db, &l).await?;
    Ok(Json(
        json!({"object": "label", "id": l.id, "deleted": true}),
    ))
}
