//! `/domains`: sending identities.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::api::extract::{ApiJson, Auth, Params};
use crate::app::AppState;
use crate::auth::Scope;
use crate::core::domains;
use crate::error::{ApiError, ApiResult, Problems};
use crate::model::List;
use crate::model::domains::{Domain, DomainCreate, DomainDeleteQuery, DomainDeleted, DomainUpdate};

/// List sending domains
///
/// Unpaged: every domain the key reaches (`has_more` is always false).
#[utoipa::path(get, path = "/domains", operation_id = "listDomains",
    security(("bearer" = ["domains:read"])),
    responses((status = 200, description = "Every domain.", body = List<Domain>)))]
pub async fn list(State(s): State<AppState>, Auth(key): Auth) -> ApiResult<Json<List<Domain>>> {
    key.require(Scope::DomainsRead)?;
    let data = domains::list(&s.db, &key.reach)
        .await?
        .iter()
        .map(|d| d.to_wire())
        .collect();
    Ok(Json(List::whole(data)))
}

/// Read a domain
#[utoipa::path(get, path = "/domains/{id}", operation_id = "getDomain",
    params(("id" = String, Path, description = "The domain id (`dom_…`) or the domain name.")),
    security(("bearer" = ["domains:read"])),
    responses((status = 200, description = "The domain.", body = Domain)))]
pub async fn get(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Domain>> {
    key.require(Scope::DomainsRead)?;
    let d = domains::get(&s.db, &key.reach, &id)
        .await?
        .ok_or(ApiError::not_found("domain"))?;
    Ok(Json(d.to_wire()))
}

/// Add a sending domain
///
/// Creates the identity at the provider and answers the domain with the DNS records to publish.
/// Only a key that reaches the whole account may do this.
#[utoipa::path(post, path = "/domains", operation_id = "createDomain",
    request_body = DomainCreate,
    security(("bearer" = ["domains:write"])),
    responses(
        (status = 201, description = "Created.", body = Domain),
        (status = 409, description = "The domain exists."),
        (status = 502, description = "The provider could not be reached."),
    ))]
pub async fn create(
    State(s): State<AppState>,
    Auth(key): Auth,
    ApiJson(body): ApiJson<DomainCreate>,
) -> ApiResult<(StatusCode, Json<Domain>)> {
    key.require(Scope::DomainsWrite)?;
    let d = domains::create(
        &s.db,
        s.provider.as_ref(),
        &key,
        &body.name,
        body.auto_create_mailboxes,
    )
    .await?;
    Ok((StatusCode::CREATED, Json(d.to_wire())))
}

/// Change a domain's settings
///
/// Only fields sent change. Needs a key that reaches the whole domain (the account, or a domain
/// reach covering it); a key naming addresses gets 403.
#[utoipa::path(patch, path = "/domains/{id}", operation_id = "updateDomain",
    params(("id" = String, Path, description = "The domain id (`dom_…`) or the domain name.")),
    request_body = DomainUpdate,
    security(("bearer" = ["domains:write"])),
    responses((status = 200, description = "The domain as it now is.", body = Domain)))]
pub async fn update(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<DomainUpdate>,
) -> ApiResult<Json<Domain>> {
    key.require(Scope::DomainsWrite)?;
    let d = match body.auto_create_mailboxes {
        Some(v) => domains::set_auto_create(&s.db, &key, &id, v).await?,
        None => domains::get(&s.db, &key.reach, &id)
            .await?
            .ok_or(ApiError::not_found("domain"))?,
    };
    Ok(Json(d.to_wire()))
}

/// Re-check a domain
///
/// Asks the provider for the identity's status, probes SPF and DMARC in DNS, and answers the
/// domain as it now is. No body. Needs a key that reaches the whole domain (the account, or a
/// domain reach covering it); a key naming addresses gets 403.
#[utoipa::path(post, path = "/domains/{id}/verify", operation_id = "verifyDomain",
    params(("id" = String, Path, description = "The domain id (`dom_…`) or the domain name.")),
    security(("bearer" = ["domains:write"])),
    responses(
        (status = 200, description = "The domain as it now is.", body = Domain),
        (status = 502, description = "The provider could not be reached."),
    ))]
pub async fn verify(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
) -> ApiResult<Json<Domain>> {
    key.require(Scope::DomainsWrite)?;
    let d = domains::verify(&s.db, s.provider.as_ref(), &s.dns, &key, &id).await?;
    Ok(Json(d.to_wire()))
}

/// Remove a domain
///
/// Removes the domain from the service. With `delete_in_provider=true` the identity is also
/// deleted at the provider (irreversible; other users of the same provider account may rely on
/// it). Needs a key that reaches the whole domain (the account, or a domain reach covering it);
/// a key naming addresses gets 403.
#[utoipa::path(delete, path = "/domains/{id}", operation_id = "deleteDomain",
    params(
        ("id" = String, Path, description = "The domain id (`dom_…`) or the domain name."),
        DomainDeleteQuery,
    ),
    security(("bearer" = ["domains:write"])),
    responses(
        (status = 200, description = "Removed.", body = DomainDeleted),
        (status = 502, description = "The provider could not be reached."),
    ))]
pub async fn delete(
    State(s): State<AppState>,
    Auth(key): Auth,
    Path(id): Path<String>,
    params: Params,
) -> ApiResult<Json<DomainDeleted>> {
    key.require(Scope::DomainsWrite)?;
    let mut problems = Problems::new();
    let q: DomainDeleteQuery = params.query(&mut problems);
    problems.finish()?;
    let in_provider = q.delete_in_provider.unwrap_or(false);
    let (d, deleted_in_provider) =
        domains::delete(&s.db, s.provider.as_ref(), &key, &id, in_provider).await?;
    Ok(Json(d.deleted(deleted_in_provider)))
}
