//! `/labels`: names with a colour that threads can carry.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::api::extract::{ApiJson, Auth};
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::labels::{self, DEFAULT_COLOR};
use crate::core::validate;
use crate::error::{ApiError, ApiResult, Problems};
use crate::model::labels::{Label, LabelCreate, LabelObject, LabelUpdate};
use crate::model::{Deleted, List};

/// List labels
#[utoipa::path(get, path = "/labels", operation_id = "listLabels",
    security(("bearer" = ["mail:read"])),
    responses((status = 200, description = "Every label.", body = List<Label>)))]
pub async fn list(State(s): State<AppState>, Auth(key): Auth) -> ApiResult<Json<List<Label>>> {
    key.require(Scope::MailRead)?;
    let data = labels::list(&s.db)
        .await?
        .iter()
        .map(|l| l.to_wire())
        .collect();
    Ok(Json(List::whole(data)))
}

/// Read a label
#[utoipa::path(get, path = "/labels/{id}", operation_id = "getLabel",
    params(("id" = String, Path, description = "The label id (`lbl_…`) or its name.")),
    security(("bearer" = ["mail:read"])),
    responses((status = 200, description = "The label.", body = Label)))]
pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Label>> {
    key.require(Scope::MailRead)?;
    let l = labels::find(&s.db, &id)
        .await?
        .ok_or(ApiError::not_found("label"))?;
    Ok(Json(l.to_wire()))
}

fn check(
    name: Option<&str>,
    color: Option<&str>,
    name_required: bool,
) -> Result<(Option<String>, Option<String>), ApiError> {
    let mut p = Problems::new();
    let name = match name {
        Some(n) => p.check("name", labels::validate_name(n)),
        None if name_required => {
            p.add("name", "is required");
            None
        }
        None => None,
    };
    let color = color.and_then(|c| p.check("color", validate::color(c)));
    p.finish()?;
    Ok((name, color))
}

/// Create a label
///
/// Names are unique (409 otherwise).
#[utoipa::path(post, path = "/labels", operation_id = "createLabel",
    request_body = LabelCreate,
    security(("bearer" = ["mail:write"])),
    responses(
        (status = 201, description = "Created.", body = Label),
        (status = 409, description = "A label of that name exists."),
    ))]
pub async fn create(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<LabelCreate>,
) -> ApiResult<(StatusCode, Json<Label>)> {
    key.require(Scope::MailWrite)?;
    let (name, color) = check(body.name.as_deref(), body.color.as_deref(), true)?;
    let name = name.ok_or_else(|| ApiError::invalid("name", "is required"))?;
    let l = labels::create(&s.db, &name, color.as_deref().unwrap_or(DEFAULT_COLOR)).await?;
    Ok((StatusCode::CREATED, Json(l.to_wire())))
}

/// Rename or recolour a label
///
/// Labels are account-wide: only a key that reaches the whole account may change one.
#[utoipa::path(patch, path = "/labels/{id}", operation_id = "updateLabel",
    params(("id" = String, Path, description = "The label id (`lbl_…`) or its name.")),
    request_body = LabelUpdate,
    security(("bearer" = ["mail:write"])),
    responses(
        (status = 200, description = "The label as it now is.", body = Label),
        (status = 409, description = "A label of that name exists."),
    ))]
pub async fn update(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<LabelUpdate>,
) -> ApiResult<Json<Label>> {
    key.require(Scope::MailWrite)?;
    let (name, color) = check(body.name.as_deref(), body.color.as_deref(), false)?;
    let l = labels::find(&s.db, &id)
        .await?
        .ok_or(ApiError::not_found("label"))?;
    key.require_account_reach("changing a label")?;
    Ok(Json(
        labels::update(&s.db, &l, name, color).await?.to_wire(),
    ))
}

/// Delete a label
///
/// Removes it from every thread. Only a key that reaches the whole account may do this.
#[utoipa::path(delete, path = "/labels/{id}", operation_id = "deleteLabel",
    params(("id" = String, Path, description = "The label id (`lbl_…`) or its name.")),
    security(("bearer" = ["mail:write"])),
    responses((status = 200, description = "Deleted.", body = Deleted<LabelObject>)))]
pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Deleted<LabelObject>>> {
    key.require(Scope::MailWrite)?;
    let l = labels::find(&s.db, &id)
        .await?
        .ok_or(ApiError::not_found("label"))?;
    key.require_account_reach("deleting a label")?;
    labels::delete(&s.db, &l).await?;
    Ok(Json(Deleted::new(LabelObject, l.id)))
}
