//! `/suppressions`: addresses mail will not be sent to.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::api::extract::{ApiJson, Auth, Params};
use crate::api::pagination::{PageQuery, ReadPage};
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::suppressions::{self, Filter};
use crate::core::validate;
use crate::error::{ApiError, ApiResult, Problems};
use crate::model::List;
use crate::model::suppressions::{
    Suppression, SuppressionCreate, SuppressionDeleted, SuppressionFilter, SuppressionObject,
    SuppressionReason,
};

/// List suppressed addresses
///
/// Paged, newest first by `created_at`: addresses mail will not be sent to (hard bounces,
/// complaints and manual entries) that the key reaches.
#[utoipa::path(get, path = "/suppressions", operation_id = "listSuppressions",
    params(PageQuery, SuppressionFilter),
    security(("bearer" = ["emails:read"])),
    responses((status = 200, description = "A page of suppressions.", body = List<Suppression>)))]
pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<List<Suppression>>> {
    key.require(Scope::EmailsRead)?;
    let mut p = Problems::new();
    let page = s.cursors.page(&params, &mut p);
    let q: SuppressionFilter = params.query(&mut p);
    p.finish()?;
    let filter = Filter {
        address: q.address.map(|a| a.0),
        reason: q.reason,
    };
    Ok(Json(
        suppressions::list(&s.db, &s.cursors, &key.reach, &filter, &page).await?,
    ))
}

/// Suppress an address
///
/// Adds an address by hand. Only a key that reaches the whole account may do this; an address
/// already suppressed is 409.
#[utoipa::path(post, path = "/suppressions", operation_id = "addSuppression",
    request_body = SuppressionCreate,
    security(("bearer" = ["emails:send"])),
    responses(
        (status = 201, description = "Suppressed.", body = Suppression),
        (status = 409, description = "The address is already suppressed."),
    ))]
pub async fn add(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<SuppressionCreate>,
) -> ApiResult<(StatusCode, Json<Suppression>)> {
    key.require(Scope::EmailsSend)?;
    key.require_account_reach("adding a suppression")?;
    let address = validate::address(&body.address).map_err(|e| ApiError::invalid("address", e))?;
    let reason = body.reason.unwrap_or(SuppressionReason::Manual);
    let added = suppressions::add_manual(&s.db, &address, reason).await?;
    Ok((StatusCode::CREATED, Json(added.to_wire())))
}

/// Remove a suppression
///
/// Mail may be sent to the address again.
#[utoipa::path(delete, path = "/suppressions/{id}", operation_id = "removeSuppression",
    params(("id" = String, Path, description = "The suppression id or the suppressed address.")),
    security(("bearer" = ["emails:send"])),
    responses((status = 200, description = "Removed.", body = SuppressionDeleted)))]
pub async fn remove(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<SuppressionDeleted>> {
    key.require(Scope::EmailsSend)?;
    let removed = suppressions::remove(&s.db, &key.reach, &id).await?;
    Ok(Json(SuppressionDeleted {
        object: SuppressionObject,
        id: crate::ids::Id::from_stored(removed.id),
        address: removed.address,
        deleted: true,
    }))
}
