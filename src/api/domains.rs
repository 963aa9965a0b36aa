//! `/domains`: sending identities.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::extract::{ApiJson, Auth, Params};
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::domains;
use crate::error::{ApiError, ApiResult, Problems};

#[derive(Deserialize)]
pub struct CreateDomain {
    name: String,
    #[serde(default)]
    auto_create_mailboxes: bool,
}

#[derive(Deserialize)]
pub struct UpdateDomain {
    auto_create_mailboxes: Option<bool>,
}

pub async fn list(State(s): State<AppState>, Auth(key): Auth) -> ApiResult<Json<Value>> {
    key.require(Scope::DomainsRead)?;
    let data: Vec<Value> = domains::list(&s.db, &key.reach)
        .await?
        .iter()
        .map(|d| d.to_json())
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
    key.require(Scope::DomainsRead)?;
    let d = domains::get(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::NotFound("domain"))?;
    Ok(Json(d.to_json()))
}

pub async fn create(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<CreateDomain>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    key.require(Scope::DomainsWrite)?;
    let d = domains::create(
        &s.db,
        s.provider.as_ref(),
        &key,
        &body.name,
        body.auto_create_mailboxes,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(d.to_json())))
}

pub async fn update(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateDomain>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::DomainsWrite)?;
    let d = match body.auto_create_mailboxes {
        Some(v) => domains::set_auto_create(&s.db, &key, &id, v).await?,
        None => domains::get(&s.db, &key.reach, &id)
            .await?
            .ok_or(ApiError::NotFound("domain"))?,
    };
    Ok(Json(d.to_json()))
}

pub async fn verify(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::DomainsWrite)?;
    let d = domains::verify(&s.db, s.provider.as_ref(), &s.dns, &key, &id).await?;
    Ok(Json(d.to_json()))
}

pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::DomainsWrite)?;
    let mut problems = Problems::new();
    let in_provider = params
        .flag(&mut problems, "delete_in_provider")
        .unwrap_or(false);
    problems.finish()?;
    let (d, deleted_in_provider) =
        domains::delete(&s.db, s.provider.as_ref(), &key, &id, in_provider).await?;
    Ok(Json(json!({
        "object": "domain",
        "id": d.id,
        "name": d.name,
        "deleted": true,
        "deleted_in_provider": deleted_in_provider,
    })))
}
