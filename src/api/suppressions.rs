//! `/suppressions`: addresses mail will not be sent to.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::extract::{ApiJson, Auth, Params};
use crate::api::pagination::ReadPage;
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::suppressions::{self, COLUMNS};
use crate::core::validate;
use crate::error::{ApiError, ApiResult, Problems};
use crate::store::Sql;

/// Why an address is suppressed.
const REASONS: [&str; 3] = ["manual", "bounce", "complaint"];

#[derive(Deserialize)]
pub struct AddSuppression {
    address: String,
    reason: Option<String>,
}

pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<Value>> {
    key.require(Scope::EmailsRead)?;
    let mut p = Problems::new();
    let page = s.cursors.page(&params, &mut p);
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM suppressions WHERE 1 = 1"));
    suppressions::filter_reach(&key.reach, &mut q);
    if let Some(a) = params.address(&mut p, "address") {
        q.push(" AND address = ").bind(a);
    }
    if let Some(r) = params.typed(&mut p, "reason") {
        if REASONS.contains(&r) {
            q.push(" AND reason = ").bind(r);
        } else {
            p.add(
                "reason",
                format!("unknown reason {r:?}; manual, bounce or complaint"),
            );
        }
    }
    p.finish()?;
    page.push(&mut q, "created_at", "id");
    let rows = q.fetch_all(s.db.reader()).await?;
    let items = rows
        .iter()
        .map(suppressions::row_json)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(page.envelope(&s.cursors, items)))
}

/// Adds an address by hand (account-wide keys only).
pub async fn add(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<AddSuppression>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    key.require(Scope::EmailsSend)?;
    key.require_account_reach("adding a suppression")?;
    let address = validate::address(&body.address).map_err(|e| ApiError::invalid("address", e))?;
    let reason = body.reason.unwrap_or_else(|| "manual".into());
    if !REASONS.contains(&reason.as_str()) {
        return Err(ApiError::invalid(
            "reason",
            "one of manual, bounce, complaint",
        ));
    }
    let mut tx = s.db.begin().await?;
    let added = suppressions::add(&mut tx, &address, &reason, None, None, None, None).await?;
    tx.commit().await?;
    if !added {
        return Err(ApiError::conflict(format!(
            "{address} is already suppressed"
        )));
    }
    let row = Sql::new(&format!(
        "SELECT {COLUMNS} FROM suppressions WHERE address = "
    ))
    .bind(&address)
    .fetch_one(s.db.reader())
    .await?;
    Ok((StatusCode::CREATED, Json(suppressions::row_json(&row)?.2)))
}

/// Removes an address (by address or id) so mail may be sent to it again.
pub async fn remove(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    key.require(Scope::EmailsSend)?;
    let mut q = Sql::new(&format!("SELECT {COLUMNS} FROM suppressions WHERE (id = "));
    q.bind(&id)
        .push(" OR address = ")
        .bind(id.to_lowercase())
        .push(")");
    suppressions::filter_reach(&key.reach, &mut q);
    let row = q
        .fetch_optional(s.db.reader())
        .await?
        .ok_or(ApiError::NotFound("suppression"))?;
    let (_, sid, v) = suppressions::row_json(&row)?;
    Sql::new("DELETE FROM suppressions WHERE id = ")
        .bind(&sid)
        .execute(s.db.writer())
        .await?;
    Ok(Json(
        json!({"object": "suppression", "id": sid, "address": v["address"], "deleted": true}),
    ))
}
