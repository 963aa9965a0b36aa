//! `/mailboxes`: addresses that hold mail.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::extract::{ApiJson, Auth, Params, nullable};
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::mailboxes;
use crate::error::{ApiError, ApiResult, Problems};

#[derive(Deserialize)]
pub struct CreateMailbox {
    address: String,
    display_name: Option<String>,
    signature: Option<String>,
    is_catch_all: Option<bool>,
    is_default: Option<bool>,
    color: Option<String>,
}

#[derive(Deserialize)]
pub struct UpdateMailbox {
    address: Option<Value>,
    display_name: Option<String>,
    #[serde(default, deserialize_with = "nullable")]
    signature: Option<Option<String>>,
    is_catch_all: Option<bool>,
    is_default: Option<bool>,
    color: Option<String>,
}

pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailboxesRead)?;
    let data: Vec<Value> = mailboxes::list(&s.db, &key.reach, params.text("domain"))
        .await?
        .iter()
        .map(|m| m.to_json())
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
    key.require(Scope::MailboxesRead)?;
    let m = mailboxes::get(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::NotFound("mailbox"))?;
    Ok(Json(m.to_json()))
}

pub async fn create(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<CreateMailbox>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    key.require(Scope::MailboxesWrite)?;
    let mut problems = Problems::new();
    let mut input = mailboxes::validate_input(
        &mut problems,
        body.display_name.as_deref(),
        body.signature.as_deref().map(Some),
        body.color.as_deref(),
    );
    problems.finish()?;
    input.is_catch_all = body.is_catch_all;
    input.is_default = body.is_default;
    let m = mailboxes::create(&s.db, &key, &body.address, input).await?;
    Ok((StatusCode::CREATED, Json(m.to_json())))
}

pub async fn update(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateMailbox>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailboxesWrite)?;
    let mut problems = Problems::new();
    if body.address.is_some() {
        problems.add("address", "a mailbox's address cannot be changed");
    }
    let mut input = mailboxes::validate_input(
        &mut problems,
        body.display_name.as_deref(),
        body.signature.as_ref().map(|s| s.as_deref()),
        body.color.as_deref(),
    );
    problems.finish()?;
    input.is_catch_all = body.is_catch_all;
    input.is_default = body.is_default;
    let m = mailboxes::update(&s.db, &key, &id, input).await?;
    Ok(Json(m.to_json()))
}

pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::MailboxesWrite)?;
    let mut problems = Problems::new();
    let confirm = params.flag(&mut problems, "confirm").unwrap_or(false);
    problems.finish()?;
    let m = mailboxes::delete(&s.db, &key, &id, confirm).await?;
    Ok(Json(
        json!({ "object": "mailbox", "id": m.id, "deleted": true }),
    ))
}
