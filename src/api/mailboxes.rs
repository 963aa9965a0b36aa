//! `/mailboxes`: addresses that hold mail.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::api::extract::{ApiJson, Auth, Params};
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::mailboxes;
use crate::error::{ApiError, ApiResult, Problems};
use crate::model::List;
use crate::model::mailboxes::{
    Mailbox, MailboxCreate, MailboxDeleteQuery, MailboxDeleted, MailboxFilter, MailboxUpdate,
};

/// List mailboxes
///
/// Unpaged: every mailbox the key reaches (`has_more` is always false).
#[utoipa::path(get, path = "/mailboxes", operation_id = "listMailboxes",
    params(MailboxFilter),
    security(("bearer" = ["mailboxes:read"])),
    responses((status = 200, description = "Every mailbox.", body = List<Mailbox>)))]
pub async fn list(
    State(s): State<AppState>,
    Auth(key): Auth,
    params: Params,
) -> ApiResult<Json<List<Mailbox>>> {
    key.require(Scope::MailboxesRead)?;
    let mut problems = Problems::new();
    let q: MailboxFilter = params.query(&mut problems);
    problems.finish()?;
    let data = mailboxes::list(&s.db, &key.reach, q.domain.as_deref())
        .await?
        .iter()
        .map(|m| m.to_wire())
        .collect();
    Ok(Json(List::whole(data)))
}

/// Read a mailbox
#[utoipa::path(get, path = "/mailboxes/{id}", operation_id = "getMailbox",
    params(("id" = String, Path, description = "The mailbox id (`mbx_…`) or its address.")),
    security(("bearer" = ["mailboxes:read"])),
    responses((status = 200, description = "The mailbox.", body = Mailbox)))]
pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Mailbox>> {
    key.require(Scope::MailboxesRead)?;
    let m = mailboxes::get(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::not_found("mailbox"))?;
    Ok(Json(m.to_wire()))
}

/// Create a mailbox
///
/// The address must be on a verified domain of the account or under one. A key naming specific
/// addresses may create only those (403 otherwise). Setting `is_default` clears it on every
/// other mailbox, and `is_catch_all` on the other mailboxes of the domain: 403 unless the key
/// reaches each mailbox it would clear. `is_catch_all: true` needs a key that reaches the whole
/// domain.
#[utoipa::path(post, path = "/mailboxes", operation_id = "createMailbox",
    request_body = MailboxCreate,
    security(("bearer" = ["mailboxes:write"])),
    responses(
        (status = 201, description = "Created.", body = Mailbox),
        (status = 409, description = "A mailbox with that address exists."),
    ))]
pub async fn create(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<MailboxCreate>,
) -> ApiResult<(StatusCode, Json<Mailbox>)> {
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
    Ok((StatusCode::CREATED, Json(m.to_wire())))
}

/// Change a mailbox
///
/// Only fields sent change; `signature: null` clears it. `address` cannot be changed (422).
/// Setting `is_default` or `is_catch_all` is 403 unless the key reaches every mailbox whose flag
/// it would clear; `is_catch_all: true` needs a key that reaches the whole domain.
#[utoipa::path(patch, path = "/mailboxes/{id}", operation_id = "updateMailbox",
    params(("id" = String, Path, description = "The mailbox id (`mbx_…`) or its address.")),
    request_body = MailboxUpdate,
    security(("bearer" = ["mailboxes:write"])),
    responses((status = 200, description = "The mailbox as it now is.", body = Mailbox)))]
pub async fn update(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<MailboxUpdate>,
) -> ApiResult<Json<Mailbox>> {
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
    Ok(Json(m.to_wire()))
}

/// Delete a mailbox and its mail
///
/// Without `confirm=true` the call answers 409 and changes nothing.
#[utoipa::path(delete, path = "/mailboxes/{id}", operation_id = "deleteMailbox",
    params(
        ("id" = String, Path, description = "The mailbox id (`mbx_…`) or its address."),
        MailboxDeleteQuery,
    ),
    security(("bearer" = ["mailboxes:write"])),
    responses(
        (status = 200, description = "Deleted.", body = MailboxDeleted),
        (status = 409, description = "`confirm=true` is missing."),
    ))]
pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    params: Params,
) -> ApiResult<Json<MailboxDeleted>> {
    key.require(Scope::MailboxesWrite)?;
    let mut problems = Problems::new();
    let q: MailboxDeleteQuery = params.query(&mut problems);
    problems.finish()?;
    let confirm = q.confirm.unwrap_or(false);
    let m = mailboxes::delete(&s.db, &key, &id, confirm).await?;
    Ok(Json(m.deleted()))
}
